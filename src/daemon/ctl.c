/* ctl.c - the daemon's control socket (see ctl.h): the listening socket and
 * its clients, each a small state machine (reading its request line, then
 * writing its reply) driven by a private epoll set; the request parser; and
 * the client side used by `ncclprobe ctl`. The path itself (what may be
 * replaced there, bind, mode 0600, unlinking), accepting with the peer's
 * credentials and the idle clock are lib/unix_listener.c's, shared with the
 * CUPTI socket. */
#define _GNU_SOURCE
#include "daemon/ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "lib/unix_listener.h"
#include "lib/util.h"

#define ACCEPTS_PER_POLL 64
#define EVENTS_PER_POLL 32
#define LISTEN_BACKLOG 64

enum client_state { CLIENT_FREE = 0, CLIENT_READING, CLIENT_WRITING };

struct np_ctl_client {
    int fd;
    enum client_state state;
    pid_t pid;
    uid_t uid;
    struct np_unix_clock clock; /* progress: the last byte in or out */
    size_t in_len;
    char in[NP_CTL_MAX_REQUEST + 1]; /* the line and its newline */
    char *out;
    size_t out_len, out_off;
};

struct np_ctl_server {
    struct np_unix_listener listener; /* unlinks the socket file on close only if still ours */
    int epoll_fd;
    uid_t uid;
    struct np_ctl_ops ops;
    uint64_t timeout_ns;
    bool accept_paused; /* out of fds: the listening socket is not polled until the next tick */
    size_t nclients;
    struct np_ctl_client clients[NP_CTL_MAX_CLIENTS];
};

/* ---- replies ------------------------------------------------------------------ */

static void set_item(cJSON *obj, const char *key, cJSON *item) {
    if (!item)
        return;
    if (cJSON_GetObjectItemCaseSensitive(obj, key)) {
        if (!cJSON_ReplaceItemInObjectCaseSensitive(obj, key, item))
            cJSON_Delete(item);
    } else if (!cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
    }
}

void np_ctl_reply_error(cJSON *reply, const char *fmt, ...) {
    char text[1024];
    va_list ap;

    /* Formatted before anything is replaced: an argument may be the old "error". */
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (!reply)
        return;
    set_item(reply, "ok", cJSON_CreateFalse());
    set_item(reply, "error", cJSON_CreateString(text));
}

const char *np_ctl_cmd_name(enum np_ctl_cmd cmd) {
    switch (cmd) {
    case NP_CTL_START:
        return "start";
    case NP_CTL_STOP:
        return "stop";
    case NP_CTL_STATUS:
        return "status";
    case NP_CTL_SNAPSHOT:
        return "snapshot";
    }
    return "?";
}

/* The reply as one line, newline included (malloc'ed); NULL when out of memory. */
static char *reply_line(const cJSON *reply, size_t *len) {
    char *json = cJSON_PrintUnformatted(reply);
    char *line;

    if (!json)
        return NULL;
    *len = strlen(json) + 1;
    line = malloc(*len + 1);
    if (line) {
        memcpy(line, json, *len - 1);
        line[*len - 1] = '\n';
        line[*len] = '\0';
    }
    cJSON_free(json);
    return line;
}

static char *error_line(const char *message, size_t *len) {
    cJSON *reply = cJSON_CreateObject();
    char *line = NULL;

    if (reply) {
        np_ctl_reply_error(reply, "%s", message);
        line = reply_line(reply, len);
        cJSON_Delete(reply);
    }
    return line;
}

/* ---- requests ----------------------------------------------------------------- */

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;

    if (!err || !errlen)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

#define CMD_LIST "start, stop, status or snapshot"

int np_ctl_parse_request(const char *line, size_t len, struct np_ctl_request *req, char *err,
                         size_t errlen) {
    static const enum np_ctl_cmd cmds[] = {NP_CTL_START, NP_CTL_STOP, NP_CTL_STATUS,
                                           NP_CTL_SNAPSHOT};
    const char *end = NULL;
    cJSON *root = NULL;
    char *text;
    int rc = -EINVAL;

    memset(req, 0, sizeof(*req));
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        len--;
    if (len == 0) {
        set_err(err, errlen,
                "empty request (expected one line of JSON, e.g. {\"cmd\":\"status\"})");
        return -EINVAL;
    }
    if (memchr(line, '\0', len)) {
        set_err(err, errlen, "malformed JSON request: NUL byte at offset %zu",
                (size_t)((const char *)memchr(line, '\0', len) - line));
        return -EINVAL;
    }
    text = strndup(line, len);
    if (!text) {
        set_err(err, errlen, "out of memory");
        return -ENOMEM;
    }
    root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        set_err(err, errlen, "malformed JSON request (at byte %zu)", at);
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        set_err(err, errlen, "the request must be a JSON object, e.g. {\"cmd\":\"status\"}");
        goto out;
    }
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(root, "cmd");
    if (!cJSON_IsString(cmd) || !cmd->valuestring) {
        set_err(err, errlen, "the request has no \"cmd\" string (" CMD_LIST ")");
        goto out;
    }
    size_t i;
    for (i = 0; i < NP_ARRAY_SIZE(cmds); i++) {
        if (strcmp(cmd->valuestring, np_ctl_cmd_name(cmds[i])) == 0)
            break;
    }
    if (i == NP_ARRAY_SIZE(cmds)) {
        set_err(err, errlen, "unknown cmd \"%.64s\" (expected " CMD_LIST ")", cmd->valuestring);
        goto out;
    }
    req->cmd = cmds[i];

    const cJSON *duration = cJSON_GetObjectItemCaseSensitive(root, "duration_s");
    if (duration && !cJSON_IsNull(duration)) {
        if (req->cmd != NP_CTL_START) {
            set_err(err, errlen, "duration_s applies to start only, not %s",
                    np_ctl_cmd_name(req->cmd));
            goto out;
        }
        if (!cJSON_IsNumber(duration)) {
            set_err(err, errlen, "duration_s must be a number of seconds");
            goto out;
        }
        double v = duration->valuedouble;
        if (!isfinite(v) || v <= 0 || v > NP_CTL_MAX_DURATION_S) {
            set_err(err, errlen,
                    "invalid duration_s %g: expected a number of seconds > 0 and <= %.0f", v,
                    NP_CTL_MAX_DURATION_S);
            goto out;
        }
        req->duration_s = v;
    }
    const cJSON *cupti = cJSON_GetObjectItemCaseSensitive(root, "cupti");
    if (cupti && !cJSON_IsNull(cupti)) {
        if (req->cmd != NP_CTL_START || !cJSON_IsBool(cupti)) {
            set_err(err, errlen, "cupti is true or false, and applies to start only");
            goto out;
        }
        req->cupti = cJSON_IsTrue(cupti);
    }
    rc = 0;
out:
    cJSON_Delete(root);
    free(text);
    return rc;
}

/* ---- clients ------------------------------------------------------------------ */

static void drop_client(struct np_ctl_server *s, struct np_ctl_client *c) {
    if (c->state == CLIENT_FREE)
        return;
    epoll_ctl(s->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->out);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->state = CLIENT_FREE;
    s->nclients--;
}

/* Writes what the socket takes; the client is closed once all is written or on an error. */
static void flush_client(struct np_ctl_server *s, struct np_ctl_client *c) {
    while (c->out_off < c->out_len) {
        ssize_t n =
            send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->out_off += (size_t)n;
            np_unix_clock_progress(&c->clock, np_monotonic_ns());
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return; /* EPOLLOUT brings us back */
        np_debug("ctl: pid %d went away before taking its reply", (int)c->pid);
        break;
    }
    drop_client(s, c);
}

/* Takes over `line` (malloc'ed, or NULL when out of memory: the client is dropped). */
static void queue_reply(struct np_ctl_server *s, struct np_ctl_client *c, char *line, size_t len) {
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};

    if (!line || epoll_ctl(s->epoll_fd, EPOLL_CTL_MOD, c->fd, &ev) < 0) {
        free(line);
        drop_client(s, c);
        return;
    }
    c->state = CLIENT_WRITING;
    c->out = line;
    c->out_len = len;
    c->out_off = 0;
    flush_client(s, c);
}

static void queue_error(struct np_ctl_server *s, struct np_ctl_client *c, const char *message) {
    size_t len = 0;
    char *line = error_line(message, &len);
    queue_reply(s, c, line, len);
}

/* The request is c->in[0..len): parse it, let the daemon answer, queue the reply. */
static void answer(struct np_ctl_server *s, struct np_ctl_client *c, size_t len) {
    struct np_ctl_request req;
    char err[256];
    cJSON *reply = cJSON_CreateObject();
    size_t out_len = 0;
    char *line;
    int rc;

    if (!reply) {
        drop_client(s, c);
        return;
    }
    rc = np_ctl_parse_request(c->in, len, &req, err, sizeof(err));
    if (rc < 0) {
        np_debug("ctl: bad request from pid %d: %s", (int)c->pid, err);
        np_ctl_reply_error(reply, "%s", err);
    } else {
        req.peer_pid = c->pid;
        req.peer_uid = c->uid;
        np_debug("ctl: %s from pid %d", np_ctl_cmd_name(req.cmd), (int)c->pid);
        cJSON_AddBoolToObject(reply, "ok", 1);
        rc = s->ops.handle ? s->ops.handle(s->ops.ctx, &req, reply) : -ENOSYS;
        const cJSON *ok = cJSON_GetObjectItemCaseSensitive(reply, "ok");
        if (rc < 0 || !cJSON_IsTrue(ok)) {
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(reply, "error");
            const char *text = cJSON_IsString(e) && e->valuestring && *e->valuestring
                                   ? e->valuestring
                               : rc < 0 ? strerror(-rc)
                                        : "request failed";
            np_ctl_reply_error(reply, "%s", text);
        }
    }
    line = reply_line(reply, &out_len);
    cJSON_Delete(reply);
    queue_reply(s, c, line, out_len);
}

/* Reads what has arrived; answers once the line is complete (or the client
 * closed its side after sending it without a newline). */
static void read_client(struct np_ctl_server *s, struct np_ctl_client *c) {
    for (;;) {
        size_t room = sizeof(c->in) - c->in_len;
        if (room == 0) {
            np_debug("ctl: request from pid %d over %d bytes", (int)c->pid, NP_CTL_MAX_REQUEST);
            queue_error(s, c, "request too long (at most 4096 bytes)");
            return;
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, room, MSG_DONTWAIT);
        if (n > 0) {
            const char *nl = memchr(c->in + c->in_len, '\n', (size_t)n);
            c->in_len += (size_t)n;
            np_unix_clock_progress(&c->clock, np_monotonic_ns());
            if (nl) {
                answer(s, c, (size_t)(nl - c->in));
                return;
            }
            continue;
        }
        if (n == 0) {
            if (c->in_len)
                answer(s, c, c->in_len);
            else
                drop_client(s, c);
            return;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            drop_client(s, c);
        return;
    }
}

/* One best-effort write of an error line to a socket we are about to close. */
static void send_error_now(int fd, const char *message) {
    size_t len = 0;
    char *line = error_line(message, &len);

    if (line && send(fd, line, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        np_debug("ctl: could not tell a client \"%s\": %s", message, strerror(errno));
    free(line);
}

static void new_client(struct np_ctl_server *s, int fd, const struct np_unix_peer *cred) {
    struct np_ctl_client *c = NULL;

    for (size_t i = 0; i < NP_CTL_MAX_CLIENTS; i++) {
        if (s->clients[i].state == CLIENT_FREE) {
            c = &s->clients[i];
            break;
        }
    }
    if (!c) {
        np_debug("ctl: too many clients, refusing pid %d", (int)cred->pid);
        send_error_now(fd, "too many clients (at most 16 at once), try again");
        close(fd);
        return;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        np_warn("ctl: epoll_ctl: %s", strerror(errno));
        close(fd);
        return;
    }
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->state = CLIENT_READING;
    c->pid = cred->pid;
    c->uid = cred->uid;
    np_unix_clock_start(&c->clock, np_monotonic_ns());
    s->nclients++;
    if (cred->uid != 0 && cred->uid != s->uid) {
        np_warn("ctl: refused pid %d: uid %u is neither root nor the daemon's", (int)cred->pid,
                (unsigned)cred->uid);
        queue_error(s, c, "permission denied");
    }
}

static void set_accepting(struct np_ctl_server *s, bool on) {
    struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.ptr = NULL};

    if (epoll_ctl(s->epoll_fd, EPOLL_CTL_MOD, s->listener.fd, &ev) == 0)
        s->accept_paused = !on;
}

static void accept_clients(struct np_ctl_server *s) {
    for (int i = 0; i < ACCEPTS_PER_POLL; i++) {
        struct np_unix_peer peer;
        int fd = np_unix_accept(&s->listener, &peer);
        if (fd >= 0) {
            new_client(s, fd, &peer);
            continue;
        }
        if (fd == -EINTR || fd == -ECONNABORTED)
            continue;
        if (fd == -EMFILE || fd == -ENFILE || fd == -ENOBUFS || fd == -ENOMEM) {
            /* Level-triggered: a pending connection we cannot take would wake
             * the daemon in a loop. Listen again at the next tick. */
            np_warn("ctl: accept: %s", strerror(-fd));
            set_accepting(s, false);
        }
        return;
    }
}

/* ---- server ------------------------------------------------------------------- */

/* Root's (or the daemon user's) alone: 0600, in a directory anyone may
 * traverse (a daemon under umask 077 still makes it 0755). */
static const struct np_unix_listen_opts listen_opts = {
    .dir_mode = 0755, .sock_mode = 0600, .backlog = LISTEN_BACKLOG};

int np_ctl_server_open(const char *path, const struct np_ctl_ops *ops, struct np_ctl_server **out) {
    struct np_ctl_server *s;
    char why[512];
    int rc;

    *out = NULL;
    s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->listener = (struct np_unix_listener)NP_UNIX_LISTENER_INIT;
    s->epoll_fd = -1;
    for (size_t i = 0; i < NP_CTL_MAX_CLIENTS; i++)
        s->clients[i].fd = -1;
    s->uid = geteuid();
    s->timeout_ns = (uint64_t)NP_CTL_DEFAULT_TIMEOUT_MS * 1000000;
    if (ops)
        s->ops = *ops;
    rc = np_unix_listen(path, &listen_opts, &s->listener, why, sizeof(why));
    if (rc == -EEXIST) { /* the configured path names something else: said plainly */
        np_err("control socket: %s", why);
        goto fail;
    }
    if (rc < 0) {
        np_debug("control socket: %s", why);
        goto fail;
    }
    if (s->listener.replaced_stale)
        np_info("ctl: removed the stale socket %s", path);
    s->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (s->epoll_fd < 0) {
        rc = -errno;
        goto fail;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->listener.fd, &ev) < 0) {
        rc = -errno;
        goto fail;
    }
    *out = s;
    return 0;

fail:
    if (s->epoll_fd >= 0)
        close(s->epoll_fd);
    np_unix_listener_close(&s->listener); /* nothing, or the file it bound */
    free(s);
    return rc;
}

int np_ctl_server_fd(const struct np_ctl_server *s) {
    return s ? s->epoll_fd : -EINVAL;
}

void np_ctl_server_set_timeout_ms(struct np_ctl_server *s, unsigned timeout_ms) {
    if (s)
        s->timeout_ns = (uint64_t)(timeout_ms ? timeout_ms : 1) * 1000000;
}

size_t np_ctl_server_clients(const struct np_ctl_server *s) {
    return s ? s->nclients : 0;
}

void np_ctl_server_poll(struct np_ctl_server *s) {
    struct epoll_event events[EVENTS_PER_POLL];
    int n;

    if (!s)
        return;
    do
        n = epoll_wait(s->epoll_fd, events, EVENTS_PER_POLL, 0);
    while (n < 0 && errno == EINTR);
    for (int i = 0; i < n; i++) {
        struct np_ctl_client *c = events[i].data.ptr;
        uint32_t e = events[i].events;

        if (!c) {
            accept_clients(s);
        } else if (c->state == CLIENT_READING && (e & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
            read_client(s, c);
        } else if (c->state == CLIENT_WRITING && (e & (EPOLLOUT | EPOLLHUP | EPOLLERR))) {
            flush_client(s, c);
        }
        /* An event of a client closed (or its slot reused) earlier in this
         * batch finds nothing to do: its I/O is nonblocking. */
    }
}

void np_ctl_server_tick(struct np_ctl_server *s, uint64_t now_ns) {
    if (!s)
        return;
    if (s->accept_paused)
        set_accepting(s, true);
    for (size_t i = 0; i < NP_CTL_MAX_CLIENTS; i++) {
        struct np_ctl_client *c = &s->clients[i];
        if (c->state == CLIENT_FREE)
            continue;
        if (!np_unix_clock_expired(&c->clock, now_ns, s->timeout_ns,
                                   s->timeout_ns * NP_CTL_LIFETIME_TIMEOUTS))
            continue;
        np_debug("ctl: dropping pid %d: %s", (int)c->pid,
                 c->state == CLIENT_READING ? "no request in time" : "reply not taken in time");
        if (c->state == CLIENT_READING)
            send_error_now(c->fd, "timed out waiting for the request");
        drop_client(s, c);
    }
}

void np_ctl_server_close(struct np_ctl_server *s) {
    if (!s)
        return;
    for (size_t i = 0; i < NP_CTL_MAX_CLIENTS; i++)
        drop_client(s, &s->clients[i]);
    close(s->epoll_fd);
    /* Not a socket someone else (a newer daemon) has put there since. */
    np_unix_listener_close(&s->listener);
    free(s);
}

/* ---- client ------------------------------------------------------------------- */

/* Milliseconds left before deadline (at least 1 while any is), or 0. */
static int ms_left(uint64_t deadline_ns) {
    uint64_t now = np_monotonic_ns();
    if (now >= deadline_ns)
        return 0;
    uint64_t ms = (deadline_ns - now + 999999) / 1000000;
    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

static int wait_fd(int fd, short events, uint64_t deadline_ns) {
    for (;;) {
        int ms = ms_left(deadline_ns);
        if (ms == 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, ms);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

/* Sends all of buf. -EPIPE / -ECONNRESET when the server closed first (it may
 * have replied all the same). */
static int send_all(int fd, const char *buf, size_t len, uint64_t deadline_ns) {
    size_t off = 0;

    while (off < len) {
        ssize_t n = send(fd, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = wait_fd(fd, POLLOUT, deadline_ns);
            if (rc < 0)
                return rc;
            continue;
        }
        return n < 0 ? -errno : -EIO;
    }
    return 0;
}

/* Reads up to the first newline (or EOF) into text. */
static int read_line(int fd, struct np_str *text, uint64_t deadline_ns) {
    char chunk[4096];

    for (;;) {
        ssize_t n = recv(fd, chunk, sizeof(chunk), MSG_DONTWAIT);
        if (n > 0) {
            const char *nl = memchr(chunk, '\n', (size_t)n);
            np_str_append_n(text, chunk, nl ? (size_t)(nl - chunk) : (size_t)n);
            if (text->failed)
                return -ENOMEM;
            if (text->len > NP_CTL_MAX_REPLY)
                return -EMSGSIZE;
            if (nl)
                return 0;
            continue;
        }
        if (n == 0)
            return text->len ? 0 : -EPROTO;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = wait_fd(fd, POLLIN, deadline_ns);
            if (rc < 0)
                return rc;
            continue;
        }
        if (errno == ECONNRESET && text->len)
            return 0;
        return errno == ECONNRESET ? -EPROTO : -errno;
    }
}

int np_ctl_request_send(const char *path, const char *line, int timeout_ms, char **reply) {
    struct sockaddr_un addr;
    socklen_t addr_len;
    struct np_str request, text;
    int fd = -1, rc;

    *reply = NULL;
    if (!line || timeout_ms <= 0)
        return -EINVAL;
    rc = np_unix_addr(path, &addr, &addr_len);
    if (rc < 0)
        return rc;
    uint64_t deadline = np_monotonic_ns() + (uint64_t)timeout_ms * 1000000;
    np_str_init(&request);
    np_str_init(&text);

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    /* A Unix connect waits for room in a full backlog for up to SO_SNDTIMEO. */
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (const struct sockaddr *)&addr, addr_len) < 0) {
        rc = errno == EAGAIN ? -ETIMEDOUT : -errno;
        goto out;
    }
    np_str_append(&request, line);
    if (!request.len || request.buf[request.len - 1] != '\n')
        np_str_append(&request, "\n");
    if (request.failed) {
        rc = -ENOMEM;
        goto out;
    }
    rc = send_all(fd, request.buf, request.len, deadline);
    if (rc < 0 && rc != -EPIPE && rc != -ECONNRESET)
        goto out;
    rc = read_line(fd, &text, deadline);
    if (rc < 0)
        goto out;
    if (!text.buf) {
        rc = -EPROTO;
        goto out;
    }
    *reply = text.buf;
    np_str_init(&text);
out:
    if (fd >= 0)
        close(fd);
    np_str_free(&request);
    np_str_free(&text);
    return rc;
}
