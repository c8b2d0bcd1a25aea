/* ctl.c - the daemon's control socket (see ctl.h): the listening socket and
 * its clients, each a small state machine (reading its request line, then
 * writing its reply) driven by a private epoll set; the request parser; and
 * the client side used by `ncclprobe ctl`. */
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
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

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
    uint64_t connected_ns;
    uint64_t progress_ns; /* last accepted byte in or out */
    size_t in_len;
    char in[NP_CTL_MAX_REQUEST + 1]; /* the line and its newline */
    char *out;
    size_t out_len, out_off;
};

struct np_ctl_server {
    int listen_fd;
    int epoll_fd;
    char *path;
    dev_t dev; /* the socket file we bound, unlinked on close only if still there */
    ino_t ino;
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
            c->progress_ns = np_monotonic_ns();
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
            c->progress_ns = np_monotonic_ns();
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

static void new_client(struct np_ctl_server *s, int fd) {
    struct ucred cred;
    socklen_t cred_len = sizeof(cred);
    struct np_ctl_client *c = NULL;

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) < 0) {
        np_warn("ctl: SO_PEERCRED: %s", strerror(errno));
        close(fd);
        return;
    }
    for (size_t i = 0; i < NP_CTL_MAX_CLIENTS; i++) {
        if (s->clients[i].state == CLIENT_FREE) {
            c = &s->clients[i];
            break;
        }
    }
    if (!c) {
        np_debug("ctl: too many clients, refusing pid %d", (int)cred.pid);
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
    c->pid = cred.pid;
    c->uid = cred.uid;
    c->connected_ns = c->progress_ns = np_monotonic_ns();
    s->nclients++;
    if (cred.uid != 0 && cred.uid != s->uid) {
        np_warn("ctl: refused pid %d: uid %u is neither root nor the daemon's", (int)cred.pid,
                (unsigned)cred.uid);
        queue_error(s, c, "permission denied");
    }
}

static void set_accepting(struct np_ctl_server *s, bool on) {
    struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.ptr = NULL};

    if (epoll_ctl(s->epoll_fd, EPOLL_CTL_MOD, s->listen_fd, &ev) == 0)
        s->accept_paused = !on;
}

static void accept_clients(struct np_ctl_server *s) {
    for (int i = 0; i < ACCEPTS_PER_POLL; i++) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            new_client(s, fd);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            /* Level-triggered: a pending connection we cannot take would wake
             * the daemon in a loop. Listen again at the next tick. */
            np_warn("ctl: accept: %s", strerror(errno));
            set_accepting(s, false);
        }
        return;
    }
}

/* ---- server ------------------------------------------------------------------- */

static int fill_addr(const char *path, struct sockaddr_un *addr, socklen_t *len) {
    size_t n = path ? strlen(path) : 0;

    if (n == 0)
        return -EINVAL;
    if (n >= sizeof(addr->sun_path))
        return -ENAMETOOLONG;
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    memcpy(addr->sun_path, path, n + 1);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    return 0;
}

/* mkdir -p of the socket's directory; directories made here get 0755 whatever the umask. */
static int make_parent(const char *path) {
    char *dir = strdup(path);
    int rc = 0;

    if (!dir)
        return -ENOMEM;
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        for (char *p = dir + 1;; p++) {
            if (*p != '/' && *p != '\0')
                continue;
            char saved = *p;
            *p = '\0';
            if (mkdir(dir, 0755) == 0) {
                if (chmod(dir, 0755) < 0) {
                    rc = -errno;
                    break;
                }
            } else if (errno != EEXIST) {
                rc = -errno;
                break;
            }
            *p = saved;
            if (!saved)
                break;
        }
    }
    free(dir);
    return rc;
}

/* 0 when path is free (a stale socket there is removed), -EADDRINUSE when
 * a server answers there, -EEXIST when it is not a socket. */
static int clear_stale(const char *path, const struct sockaddr_un *addr, socklen_t len) {
    struct stat st;
    int fd, rc;

    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode))
        return -EEXIST;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    rc = connect(fd, (const struct sockaddr *)addr, len) == 0 ? 0 : -errno;
    close(fd);
    if (rc == 0 || rc == -EAGAIN || rc == -EINPROGRESS)
        return -EADDRINUSE; /* EAGAIN: listening, its backlog full */
    if (rc == -ENOENT)
        return 0;
    if (rc != -ECONNREFUSED)
        return rc;
    np_info("ctl: removing stale socket %s", path);
    if (unlink(path) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

int np_ctl_server_open(const char *path, const struct np_ctl_ops *ops, struct np_ctl_server **out) {
    struct np_ctl_server *s;
    struct sockaddr_un addr;
    socklen_t addr_len;
    struct stat st;
    int rc;

    *out = NULL;
    rc = fill_addr(path, &addr, &addr_len);
    if (rc < 0)
        return rc;
    s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->listen_fd = s->epoll_fd = -1;
    for (size_t i = 0; i < NP_CTL_MAX_CLIENTS; i++)
        s->clients[i].fd = -1;
    s->uid = geteuid();
    s->timeout_ns = (uint64_t)NP_CTL_DEFAULT_TIMEOUT_MS * 1000000;
    if (ops)
        s->ops = *ops;
    s->path = strdup(path);
    if (!s->path) {
        rc = -ENOMEM;
        goto fail;
    }
    rc = make_parent(path);
    if (rc < 0)
        goto fail;
    rc = clear_stale(path, &addr, addr_len);
    if (rc < 0)
        goto fail;

    s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->listen_fd < 0) {
        rc = -errno;
        goto fail;
    }
    mode_t old_mask = umask(0177);
    rc = bind(s->listen_fd, (const struct sockaddr *)&addr, addr_len) < 0 ? -errno : 0;
    umask(old_mask);
    if (rc < 0)
        goto fail; /* -EADDRINUSE too: someone bound it since we looked */
    if (lstat(path, &st) < 0) {
        rc = -errno;
        goto fail;
    }
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    if (chmod(path, 0600) < 0 || listen(s->listen_fd, LISTEN_BACKLOG) < 0) {
        rc = -errno;
        goto fail_unlink;
    }
    s->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (s->epoll_fd < 0) {
        rc = -errno;
        goto fail_unlink;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->listen_fd, &ev) < 0) {
        rc = -errno;
        goto fail_unlink;
    }
    *out = s;
    return 0;

fail_unlink:
    unlink(path);
fail:
    if (s->epoll_fd >= 0)
        close(s->epoll_fd);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    free(s->path);
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
        bool idle = now_ns > c->progress_ns && now_ns - c->progress_ns > s->timeout_ns;
        bool old = now_ns > c->connected_ns &&
                   now_ns - c->connected_ns > s->timeout_ns * NP_CTL_LIFETIME_TIMEOUTS;
        if (!idle && !old)
            continue;
        np_debug("ctl: dropping pid %d: %s", (int)c->pid,
                 c->state == CLIENT_READING ? "no request in time" : "reply not taken in time");
        if (c->state == CLIENT_READING)
            send_error_now(c->fd, "timed out waiting for the request");
        drop_client(s, c);
    }
}

void np_ctl_server_close(struct np_ctl_server *s) {
    struct stat st;

    if (!s)
        return;
    for (size_t i = 0; i < NP_CTL_MAX_CLIENTS; i++)
        drop_client(s, &s->clients[i]);
    close(s->epoll_fd);
    close(s->listen_fd);
    /* Not a socket someone else (a newer daemon) has put there since. */
    if (lstat(s->path, &st) == 0 && st.st_dev == s->dev && st.st_ino == s->ino)
        unlink(s->path);
    free(s->path);
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
    rc = fill_addr(path, &addr, &addr_len);
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
