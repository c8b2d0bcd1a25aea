/* ctl_unit.c - unit tests of the daemon's control socket (daemon/ctl.c) and
 * of `ncclprobe ctl` (cli/ctl.c): a real server on a socket in a temporary
 * directory with a handler that records each request, driven by this
 * process (or a thread of it), and real clients: raw sockets, forked
 * children under another uid, np_ctl_request_send from many threads, and
 * the command itself. Covers every command and its reply, request parsing
 * and rejection, the size limit, idle and never-reading clients, the client
 * limit, stale and live sockets, the socket's mode, peer credentials,
 * unlinking on close and the tolerant printing of replies. Also the Unix
 * listener both of ncclprobe's servers stand on (lib/unix_listener.c):
 * what it replaces at the path and what it leaves alone (regular files,
 * directories, symbolic links, FIFOs, others' sockets), modes whatever the
 * umask, cleanup when a step after bind fails (lstat is wrapped below to
 * make the look at the bound socket fail), accepting, the idle clock; and
 * the CUPTI socket's server refusing a regular file; the table of the status
 * reply's fields (daemon/status_schema.h) and `ctl --schema`. Prints
 * "ctl_unit: N passed, M failed" and exits non-zero on any failure. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cli/ctl.h"
#include "daemon/ctl.h"
#include "daemon/status_schema.h"
#include "ingest/gpu_socket.h"
#include "lib/unix_listener.h"
#include "lib/util.h"

#define MS 1000000ULL
#define NOBODY 65534

static char tmp_dir[64];
static char sock_path[128];

/* lstat, as this program's code sees it: with fail_lstat_on_socket > 0,
 * that many calls on a path that names a socket fail with EIO - the
 * servers' look at the socket they have just bound (the one before bind
 * finds nothing, or a stale socket only in tests that leave this at 0). */
static int fail_lstat_on_socket;

int lstat(const char *restrict path, struct stat *restrict st) {
    int rc = fstatat(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW);
    if (rc == 0 && S_ISSOCK(st->st_mode) && fail_lstat_on_socket > 0) {
        fail_lstat_on_socket--;
        errno = EIO;
        return -1;
    }
    return rc;
}

/* ---- the daemon side: a handler that records ----------------------------------------- */

struct recorder {
    pthread_mutex_t lock;
    int calls;
    struct np_ctl_request last;
    size_t pad_bytes;   /* status replies carry this much padding */
    int snapshot_rc;    /* snapshot returns this */
    bool snapshot_says; /* ...after np_ctl_reply_error */
};

static struct recorder rec = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int calls(void) {
    pthread_mutex_lock(&rec.lock);
    int n = rec.calls;
    pthread_mutex_unlock(&rec.lock);
    return n;
}

static struct np_ctl_request last_request(void) {
    pthread_mutex_lock(&rec.lock);
    struct np_ctl_request r = rec.last;
    pthread_mutex_unlock(&rec.lock);
    return r;
}

static cJSON *window_json(bool open) {
    cJSON *w = cJSON_CreateObject();
    cJSON_AddBoolToObject(w, "open", open);
    if (open) {
        cJSON_AddNumberToObject(w, "id", 7);
        cJSON_AddStringToObject(w, "reason", "ctl");
        cJSON_AddStringToObject(w, "started", "2024-05-01T12:00:00Z");
        cJSON_AddNumberToObject(w, "elapsed_s", 12.5);
        cJSON_AddNumberToObject(w, "ends_in_s", 3725);
    }
    return w;
}

static void add_status(cJSON *r, size_t pad) {
    cJSON_AddStringToObject(r, "version", "0.1.0");
    cJSON_AddNumberToObject(r, "pid", 4242);
    cJSON_AddNumberToObject(r, "uptime_s", 3723);
    cJSON_AddStringToObject(r, "config", "/etc/ncclprobe/ncclprobe.conf");
    cJSON_AddStringToObject(r, "output_dir", "/var/lib/ncclprobe");
    cJSON_AddItemToObject(r, "window", window_json(true));
    cJSON *agg = cJSON_AddObjectToObject(r, "aggregate");
    cJSON_AddBoolToObject(agg, "on", 1);
    cJSON_AddNumberToObject(agg, "interval_s", 600);
    cJSON_AddStringToObject(agg, "period_started", "2024-05-01T11:50:00Z");
    cJSON *targets = cJSON_AddArrayToObject(r, "targets");
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "pid", 1234);
    cJSON_AddNumberToObject(t, "ns_pid", 1);
    cJSON_AddStringToObject(t, "comm", "python3");
    cJSON_AddStringToObject(t, "container",
                            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    cJSON_AddNumberToObject(t, "probes", 12);
    cJSON_AddNumberToObject(t, "launches", 98765);
    cJSON_AddNumberToObject(t, "launches_per_s", 321.5);
    cJSON_AddNumberToObject(t, "drops", 3);
    cJSON_AddStringToObject(t, "gpu", "cupti");
    cJSON_AddStringToObject(t, "output", "/var/lib/ncclprobe/h-1234-python3-20240501T120000Z");
    cJSON_AddItemToArray(targets, t);
    cJSON *probes = cJSON_AddObjectToObject(r, "probes");
    cJSON_AddNumberToObject(probes, "attached", 24);
    cJSON_AddNumberToObject(probes, "failed", 1);
    cJSON *rl = cJSON_AddObjectToObject(r, "rate_limit");
    cJSON_AddBoolToObject(rl, "active", 0);
    cJSON_AddNumberToObject(rl, "per_probe_per_s", 2000);
    cJSON_AddNumberToObject(rl, "cpu_percent", 1.5);
    cJSON_AddNumberToObject(rl, "budget_percent", 10);
    cJSON_AddNumberToObject(rl, "activations", 0);
    cJSON *disk = cJSON_AddObjectToObject(r, "disk");
    cJSON_AddNumberToObject(disk, "bytes", 3 * 1048576.0);
    cJSON_AddNumberToObject(disk, "sets", 4);
    cJSON_AddNumberToObject(disk, "max_bytes", 10240 * 1048576.0);
    cJSON_AddNumberToObject(disk, "deleted_sets", 2);
    cJSON *cupti = cJSON_AddObjectToObject(r, "cupti");
    cJSON_AddStringToObject(cupti, "socket", "/run/ncclprobe/cupti.sock");
    cJSON_AddNumberToObject(cupti, "peers", 1);
    cJSON *disc = cJSON_AddObjectToObject(r, "discovery");
    cJSON_AddNumberToObject(disc, "delay_ms_p50", 1.25);
    cJSON_AddNumberToObject(disc, "delay_ms_max", 9);
    if (pad) {
        char *text = malloc(pad + 1);
        memset(text, 'x', pad);
        text[pad] = '\0';
        cJSON_AddStringToObject(r, "pad", text);
        free(text);
    }
}

static int handle(void *ctx, const struct np_ctl_request *req, cJSON *reply) {
    struct recorder *r = ctx;

    pthread_mutex_lock(&r->lock);
    r->calls++;
    r->last = *req;
    size_t pad = r->pad_bytes;
    int snapshot_rc = r->snapshot_rc;
    bool says = r->snapshot_says;
    pthread_mutex_unlock(&r->lock);

    switch (req->cmd) {
    case NP_CTL_START:
        cJSON_AddStringToObject(reply, "message", "capture window 7 open");
        cJSON_AddItemToObject(reply, "window", window_json(true));
        return 0;
    case NP_CTL_STOP: {
        cJSON_AddStringToObject(reply, "message", "capture window 7 closed");
        cJSON_AddItemToObject(reply, "window", window_json(false));
        cJSON *sets = cJSON_AddArrayToObject(reply, "sets");
        cJSON_AddItemToArray(sets, cJSON_CreateString("/var/lib/ncclprobe/set-a"));
        cJSON_AddItemToArray(sets, cJSON_CreateString("/var/lib/ncclprobe/set-b"));
        return 0;
    }
    case NP_CTL_STATUS:
        add_status(reply, pad);
        return 0;
    case NP_CTL_SNAPSHOT:
        if (snapshot_rc < 0) {
            if (says)
                np_ctl_reply_error(reply, "aggregation is off (aggregate = %s)", "no");
            return snapshot_rc;
        }
        cJSON_AddStringToObject(reply, "message", "snapshot written");
        cJSON *sets = cJSON_AddArrayToObject(reply, "sets");
        cJSON_AddItemToArray(sets, cJSON_CreateString("/var/lib/ncclprobe/set-c"));
        return 0;
    }
    return -EINVAL;
}

static const struct np_ctl_ops ops = {.ctx = &rec, .handle = handle};

/* ---- driving the server from this thread ------------------------------------------------ */

static void drive_once(struct np_ctl_server *s, int wait_ms) {
    struct pollfd p = {.fd = np_ctl_server_fd(s), .events = POLLIN};
    poll(&p, 1, wait_ms);
    np_ctl_server_poll(s);
    np_ctl_server_tick(s, np_monotonic_ns());
}

static void drive(struct np_ctl_server *s, int ms) {
    uint64_t end = np_monotonic_ns() + (uint64_t)ms * MS;
    while (np_monotonic_ns() < end)
        drive_once(s, 5);
}

static int raw_connect(const char *path) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -errno;
    if (strlen(path) >= sizeof(addr.sun_path)) {
        close(fd);
        return -ENAMETOOLONG;
    }
    memcpy(addr.sun_path, path, strlen(path) + 1);
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

static bool send_text(int fd, const char *text, size_t len) {
    while (len) {
        ssize_t n = send(fd, text, len, MSG_NOSIGNAL);
        if (n <= 0)
            return false;
        text += n;
        len -= (size_t)n;
    }
    return true;
}

/* Reads one reply line (newline stripped) while driving the server (when s
 * is given) for at most ms. Returns its length, -1 when none came (EOF
 * first sets *eof). */
static ssize_t raw_reply(struct np_ctl_server *s, int fd, char *buf, size_t size, int ms,
                         bool *eof) {
    uint64_t end = np_monotonic_ns() + (uint64_t)ms * MS;
    size_t len = 0;

    if (eof)
        *eof = false;
    while (np_monotonic_ns() < end) {
        if (s)
            drive_once(s, 2);
        else
            poll(&(struct pollfd){.fd = fd, .events = POLLIN}, 1, 5);
        ssize_t n = recv(fd, buf + len, size - 1 - len, MSG_DONTWAIT);
        if (n > 0) {
            len += (size_t)n;
            buf[len] = '\0';
            char *nl = memchr(buf, '\n', len);
            if (nl) {
                *nl = '\0';
                return nl - buf;
            }
            if (len == size - 1)
                return -1;
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            if (eof)
                *eof = true;
            return -1;
        }
    }
    return -1;
}

/* Whether the peer closed (EOF or reset) within ms, reading away any data. */
static bool sees_close(struct np_ctl_server *s, int fd, int ms) {
    uint64_t end = np_monotonic_ns() + (uint64_t)ms * MS;
    char buf[65536];

    while (np_monotonic_ns() < end) {
        if (s)
            drive_once(s, 2);
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return true;
    }
    return false;
}

/* One exchange on a raw socket: the reply line in buf, its length or -1. */
static ssize_t exchange(struct np_ctl_server *s, const char *request, char *buf, size_t size) {
    int fd = raw_connect(sock_path);
    ssize_t n = -1;

    if (fd < 0)
        return -1;
    if (send_text(fd, request, strlen(request)))
        n = raw_reply(s, fd, buf, size, 2000, NULL);
    close(fd);
    return n;
}

/* 1 for {"ok":true}, 0 for {"ok":false}, -1 for anything else. */
static int reply_ok(const char *line) {
    cJSON *r = cJSON_Parse(line);
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(r, "ok");
    int v = cJSON_IsBool(ok) ? cJSON_IsTrue(ok) : -1;
    cJSON_Delete(r);
    return v;
}

/* Whether the reply is {"ok":false} with an "error" containing `part`. */
static bool reply_error_has(const char *line, const char *part) {
    cJSON *r = cJSON_Parse(line);
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(r, "ok");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(r, "error");
    bool has = cJSON_IsFalse(ok) && cJSON_IsString(e) && strstr(e->valuestring, part);
    if (!has)
        fprintf(stderr, "  reply %.300s has no error \"%s\"\n", line, part);
    cJSON_Delete(r);
    return has;
}

static struct np_ctl_server *open_server(void) {
    struct np_ctl_server *s = NULL;
    int rc = np_ctl_server_open(sock_path, &ops, &s);
    if (rc < 0)
        fprintf(stderr, "  np_ctl_server_open(%s): %s\n", sock_path, strerror(-rc));
    return s;
}

/* ---- a server on a thread of its own ------------------------------------------------ */

struct server_thread {
    struct np_ctl_server *s;
    pthread_t thread;
    atomic_bool stop;
};

static void *serve(void *arg) {
    struct server_thread *t = arg;
    while (!atomic_load(&t->stop))
        drive_once(t->s, 10);
    return NULL;
}

static bool start_thread(struct server_thread *t) {
    atomic_store(&t->stop, false);
    t->s = open_server();
    if (!t->s)
        return false;
    if (pthread_create(&t->thread, NULL, serve, t) != 0) {
        np_ctl_server_close(t->s);
        return false;
    }
    return true;
}

static void stop_thread(struct server_thread *t) {
    atomic_store(&t->stop, true);
    pthread_join(t->thread, NULL);
    np_ctl_server_close(t->s);
}

/* ---- tests: parsing ---------------------------------------------------------------- */

static bool parses(const char *line, enum np_ctl_cmd cmd, double duration) {
    struct np_ctl_request req;
    char err[256] = "";
    int rc = np_ctl_parse_request(line, strlen(line), &req, err, sizeof(err));
    if (rc != 0 || req.cmd != cmd || req.duration_s != duration) {
        fprintf(stderr, "  %s: rc %d cmd %d duration %g (%s)\n", line, rc, (int)req.cmd,
                req.duration_s, err);
        return false;
    }
    return true;
}

static bool rejects(const char *line, size_t len, const char *part) {
    struct np_ctl_request req;
    char err[256] = "";
    int rc = np_ctl_parse_request(line, len, &req, err, sizeof(err));
    if (rc != -EINVAL || !strstr(err, part)) {
        fprintf(stderr, "  %.*s: rc %d, error \"%s\" (want \"%s\")\n", (int)len, line, rc, err,
                part);
        return false;
    }
    return true;
}

#define REJECTS(line, part) rejects(line, strlen(line), part)

static void test_parse_request(void) {
    CHECK(parses("{\"cmd\":\"status\"}", NP_CTL_STATUS, 0));
    CHECK(parses("{\"cmd\":\"stop\"}\n", NP_CTL_STOP, 0));
    CHECK(parses("  {\"cmd\":\"snapshot\", \"extra\": [1,2]} \r\n", NP_CTL_SNAPSHOT, 0));
    CHECK(parses("{\"cmd\":\"start\"}", NP_CTL_START, 0));
    CHECK(parses("{\"cmd\":\"start\",\"duration_s\":30}", NP_CTL_START, 30));
    CHECK(parses("{\"cmd\":\"start\",\"duration_s\":0.5}", NP_CTL_START, 0.5));
    CHECK(parses("{\"cmd\":\"start\",\"duration_s\":1e9}", NP_CTL_START, 1e9));
    CHECK(parses("{\"cmd\":\"start\",\"duration_s\":null}", NP_CTL_START, 0));

    CHECK(REJECTS("{\"cmd\":\"start\",\"duration_s\":-1}", "duration_s"));
    CHECK(REJECTS("{\"cmd\":\"start\",\"duration_s\":0}", "duration_s"));
    CHECK(REJECTS("{\"cmd\":\"start\",\"duration_s\":\"30\"}", "duration_s must be a number"));
    CHECK(REJECTS("{\"cmd\":\"start\",\"duration_s\":1e10}", "duration_s"));
    CHECK(REJECTS("{\"cmd\":\"start\",\"duration_s\":1e999}", "duration_s"));
    CHECK(REJECTS("{\"cmd\":\"start\",\"duration_s\":[30]}", "duration_s"));
    CHECK(REJECTS("{\"cmd\":\"stop\",\"duration_s\":5}", "start only"));

    CHECK(REJECTS("", "empty request"));
    CHECK(REJECTS(" \r\n", "malformed"));
    CHECK(REJECTS("{", "malformed JSON"));
    CHECK(REJECTS("{\"cmd\":\"stop\"", "malformed JSON"));
    CHECK(REJECTS("{\"cmd\":\"stop\"} trailing", "malformed JSON"));
    CHECK(REJECTS("cmd=stop", "malformed JSON"));
    CHECK(rejects("{\"cmd\":\"st\0op\"}", 15, "NUL byte"));
    CHECK(REJECTS("[\"status\"]", "must be a JSON object"));
    CHECK(REJECTS("\"status\"", "must be a JSON object"));
    CHECK(REJECTS("{}", "no \"cmd\""));
    CHECK(REJECTS("{\"cmd\":5}", "no \"cmd\""));
    CHECK(REJECTS("{\"command\":\"status\"}", "no \"cmd\""));
    CHECK(REJECTS("{\"cmd\":\"reboot\"}", "unknown cmd \"reboot\""));
    CHECK(REJECTS("{\"cmd\":\"STATUS\"}", "unknown cmd"));
    /* Deeper nesting than cJSON takes is malformed, not a crash. */
    char deep[3001];
    memset(deep, '[', 3000);
    deep[3000] = '\0';
    CHECK(REJECTS(deep, "malformed JSON"));
}

static void test_reply_error(void) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddBoolToObject(r, "ok", 1);
    cJSON_AddStringToObject(r, "error", "old");
    np_ctl_reply_error(r, "bad %s %d", "thing", 3);
    CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r, "ok")));
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(r, "error");
    CHECK(cJSON_IsString(e) && strcmp(e->valuestring, "bad thing 3") == 0);
    CHECK(cJSON_GetArraySize(r) == 2);
    /* The old error as the argument of the new one. */
    np_ctl_reply_error(r, "again: %s", e->valuestring);
    e = cJSON_GetObjectItemCaseSensitive(r, "error");
    CHECK(cJSON_IsString(e) && strcmp(e->valuestring, "again: bad thing 3") == 0);
    cJSON_Delete(r);
    np_ctl_reply_error(NULL, "nothing");
    CHECK(strcmp(np_ctl_cmd_name(NP_CTL_SNAPSHOT), "snapshot") == 0);
    CHECK(strcmp(np_ctl_cmd_name((enum np_ctl_cmd)99), "?") == 0);
}

/* ---- tests: the server over raw sockets -------------------------------------------- */

static void test_commands(void) {
    struct np_ctl_server *s = open_server();
    char buf[8192];
    int before;

    CHECK(s != NULL);
    if (!s)
        return;
    CHECK(np_ctl_server_fd(s) >= 0);

    before = calls();
    CHECK(exchange(s, "{\"cmd\":\"start\",\"duration_s\":30}\n", buf, sizeof(buf)) > 0);
    CHECK(reply_ok(buf) == 1);
    CHECK(strstr(buf, "\"message\":\"capture window 7 open\"") != NULL);
    CHECK(calls() == before + 1);
    struct np_ctl_request req = last_request();
    CHECK(req.cmd == NP_CTL_START && req.duration_s == 30);
    CHECK(req.peer_pid == getpid());
    CHECK(req.peer_uid == geteuid());

    CHECK(exchange(s, "{\"cmd\":\"stop\"}\n", buf, sizeof(buf)) > 0);
    CHECK(reply_ok(buf) == 1);
    CHECK(strstr(buf, "set-b") != NULL);
    CHECK(last_request().cmd == NP_CTL_STOP);

    CHECK(exchange(s, "{\"cmd\":\"status\"}\n", buf, sizeof(buf)) > 0);
    CHECK(reply_ok(buf) == 1);
    CHECK(strstr(buf, "\"targets\":[") != NULL);
    CHECK(last_request().cmd == NP_CTL_STATUS);

    CHECK(exchange(s, "{\"cmd\":\"snapshot\"}\n", buf, sizeof(buf)) > 0);
    CHECK(reply_ok(buf) == 1);
    CHECK(last_request().cmd == NP_CTL_SNAPSHOT);

    /* The handler fails: its own error text, or strerror when it gave none. */
    rec.snapshot_rc = -EOPNOTSUPP;
    rec.snapshot_says = true;
    CHECK(exchange(s, "{\"cmd\":\"snapshot\"}\n", buf, sizeof(buf)) > 0);
    CHECK(reply_error_has(buf, "aggregation is off (aggregate = no)"));
    rec.snapshot_says = false;
    CHECK(exchange(s, "{\"cmd\":\"snapshot\"}\n", buf, sizeof(buf)) > 0);
    CHECK(reply_error_has(buf, strerror(EOPNOTSUPP)));
    CHECK(strstr(buf, "\"message\"") == NULL);
    rec.snapshot_rc = 0;

    /* Without a newline, ended by the client's shutdown(SHUT_WR). */
    int fd = raw_connect(sock_path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(send_text(fd, "{\"cmd\":\"status\"}", 16));
        shutdown(fd, SHUT_WR);
        CHECK(raw_reply(s, fd, buf, sizeof(buf), 2000, NULL) > 0);
        CHECK(reply_ok(buf) == 1);
        close(fd);
    }

    /* A byte at a time. */
    fd = raw_connect(sock_path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        const char *req_text = "{\"cmd\":\"start\",\"duration_s\":2.5}\n";
        for (size_t i = 0; req_text[i]; i++) {
            send_text(fd, req_text + i, 1);
            drive_once(s, 1);
        }
        CHECK(raw_reply(s, fd, buf, sizeof(buf), 2000, NULL) > 0);
        CHECK(reply_ok(buf) == 1);
        CHECK(last_request().duration_s == 2.5);
        close(fd);
    }

    /* A client that connects and closes, one that sends and leaves before
     * the reply (the server's send gets EPIPE, not SIGPIPE). */
    fd = raw_connect(sock_path);
    if (fd >= 0)
        close(fd);
    fd = raw_connect(sock_path);
    if (fd >= 0) {
        send_text(fd, "{\"cmd\":\"status\"}\n", 17);
        close(fd);
    }
    drive(s, 50);
    CHECK(np_ctl_server_clients(s) == 0);

    /* Bad requests over the socket: a clear error, the handler not called. */
    before = calls();
    CHECK(exchange(s, "{\"cmd\":\"start\",\"duration_s\":-3}\n", buf, sizeof(buf)) > 0);
    CHECK(reply_error_has(buf, "duration_s"));
    CHECK(exchange(s, "{\"cmd\":\"start\",\"duration_s\":\"soon\"}\n", buf, sizeof(buf)) > 0);
    CHECK(reply_error_has(buf, "duration_s must be a number"));
    CHECK(exchange(s, "{\"cmd\":\"start\",\"duration_s\":1e300}\n", buf, sizeof(buf)) > 0);
    CHECK(reply_error_has(buf, "duration_s"));
    CHECK(exchange(s, "{\"cmd\":\n", buf, sizeof(buf)) > 0);
    CHECK(reply_error_has(buf, "malformed JSON"));
    CHECK(exchange(s, "hello\n", buf, sizeof(buf)) > 0);
    CHECK(reply_error_has(buf, "malformed JSON"));
    CHECK(exchange(s, "\n", buf, sizeof(buf)) > 0);
    CHECK(reply_error_has(buf, "empty request"));
    CHECK(exchange(s, "{\"cmd\":\"format-disk\"}\n", buf, sizeof(buf)) > 0);
    CHECK(reply_error_has(buf, "unknown cmd \"format-disk\""));
    CHECK(exchange(s, "{\"cmd\":\"a\\\"b\\nc\"}\n", buf, sizeof(buf)) > 0);
    CHECK(reply_error_has(buf, "unknown cmd"));
    CHECK(strchr(buf, '\n') == NULL); /* the reply is one line */
    CHECK(calls() == before);
    CHECK(np_ctl_server_clients(s) == 0);

    np_ctl_server_close(s);
}

static void test_fd_readable(void) {
    struct np_ctl_server *s = open_server();
    CHECK(s != NULL);
    if (!s)
        return;
    struct pollfd p = {.fd = np_ctl_server_fd(s), .events = POLLIN};
    CHECK(poll(&p, 1, 0) == 0);
    int fd = raw_connect(sock_path);
    CHECK(fd >= 0);
    p.revents = 0;
    CHECK(poll(&p, 1, 1000) == 1 && (p.revents & POLLIN));
    np_ctl_server_poll(s);
    CHECK(np_ctl_server_clients(s) == 1);
    p.revents = 0;
    CHECK(poll(&p, 1, 0) == 0); /* accepted, nothing more to do */
    send_text(fd, "{\"cmd\":\"status\"}\n", 17);
    CHECK(poll(&p, 1, 1000) == 1);
    close(fd);
    drive(s, 20);
    CHECK(np_ctl_server_clients(s) == 0);
    np_ctl_server_close(s);
}

static void test_request_size(void) {
    struct np_ctl_server *s = open_server();
    char buf[8192], req[NP_CTL_MAX_REQUEST + 3];
    const char *head = "{\"cmd\":\"status\",\"pad\":\"";

    CHECK(s != NULL);
    if (!s)
        return;
    /* Exactly 4096 bytes and its newline: accepted. */
    size_t h = strlen(head);
    memcpy(req, head, h);
    memset(req + h, 'p', NP_CTL_MAX_REQUEST - h - 2);
    memcpy(req + NP_CTL_MAX_REQUEST - 2, "\"}\n", 4);
    CHECK(strlen(req) == NP_CTL_MAX_REQUEST + 1);
    CHECK(exchange(s, req, buf, sizeof(buf)) > 0);
    CHECK(reply_ok(buf) == 1);

    /* 4097 bytes: too long. */
    memcpy(req, head, h);
    memset(req + h, 'p', NP_CTL_MAX_REQUEST - h - 1);
    memcpy(req + NP_CTL_MAX_REQUEST - 1, "\"}\n", 4);
    CHECK(strlen(req) == NP_CTL_MAX_REQUEST + 2);
    int before = calls();
    CHECK(exchange(s, req, buf, sizeof(buf)) > 0);
    CHECK(reply_error_has(buf, "request too long"));

    /* 64 KiB without a newline: the error comes before all of it is sent. */
    int fd = raw_connect(sock_path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        char *big = malloc(65536);
        memset(big, ' ', 65536);
        fcntl(fd, F_SETFL, O_NONBLOCK);
        size_t sent = 0;
        uint64_t end = np_monotonic_ns() + 2000 * MS;
        while (sent < 65536 && np_monotonic_ns() < end) {
            ssize_t n = send(fd, big + sent, 65536 - sent, MSG_NOSIGNAL);
            if (n > 0)
                sent += (size_t)n;
            else if (errno != EAGAIN)
                break;
            drive_once(s, 1);
        }
        free(big);
        CHECK(raw_reply(s, fd, buf, sizeof(buf), 2000, NULL) > 0);
        CHECK(reply_error_has(buf, "request too long (at most 4096 bytes)"));
        close(fd);
    }
    CHECK(calls() == before);
    drive(s, 20);
    CHECK(np_ctl_server_clients(s) == 0);
    np_ctl_server_close(s);
}

/* A client that sends nothing is dropped after the timeout; another is
 * served meanwhile without waiting for it. */
static void test_idle_client(void) {
    struct np_ctl_server *s = open_server();
    char buf[8192];
    bool eof;

    CHECK(s != NULL);
    if (!s)
        return;
    np_ctl_server_set_timeout_ms(s, 1000);
    uint64_t t0 = np_monotonic_ns();
    int idle = raw_connect(sock_path);
    CHECK(idle >= 0);
    drive(s, 20);
    CHECK(np_ctl_server_clients(s) == 1);

    uint64_t t1 = np_monotonic_ns();
    CHECK(exchange(s, "{\"cmd\":\"status\"}\n", buf, sizeof(buf)) > 0);
    CHECK(reply_ok(buf) == 1);
    CHECK(np_monotonic_ns() - t1 < 500 * MS);
    CHECK(np_ctl_server_clients(s) == 1); /* the idle one is still there */

    /* It gets a timeout error, then EOF, at the timeout (a few ticks later). */
    CHECK(raw_reply(s, idle, buf, sizeof(buf), 3000, &eof) > 0);
    uint64_t dropped = np_monotonic_ns() - t0;
    CHECK(reply_error_has(buf, "timed out"));
    CHECK(dropped >= 1000 * MS && dropped < 2500 * MS);
    CHECK(sees_close(s, idle, 1000));
    CHECK(np_ctl_server_clients(s) == 0);
    close(idle);

    /* One that trickles a byte every 50 ms makes progress, but is dropped
     * after NP_CTL_LIFETIME_TIMEOUTS timeouts all the same. */
    np_ctl_server_set_timeout_ms(s, 200);
    int slow = raw_connect(sock_path);
    CHECK(slow >= 0);
    t0 = np_monotonic_ns();
    bool closed = false;
    while (!closed && np_monotonic_ns() - t0 < 4000 * MS) {
        if (send(slow, " ", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
            closed = true;
        drive(s, 50);
        if (np_ctl_server_clients(s) == 0)
            closed = true;
    }
    uint64_t lived = np_monotonic_ns() - t0;
    CHECK(closed);
    CHECK(lived >= 1000 * MS && lived < 2500 * MS);
    close(slow);
    np_ctl_server_close(s);
}

/* A client that sends a request and never reads its (large) reply does not
 * block the server; it is dropped at the timeout. */
static void test_never_reads(void) {
    struct np_ctl_server *s = open_server();
    const size_t pad = 4u << 20;
    char buf[8192];

    CHECK(s != NULL);
    if (!s)
        return;
    np_ctl_server_set_timeout_ms(s, 1000);
    rec.pad_bytes = pad;
    int lazy = raw_connect(sock_path);
    CHECK(lazy >= 0);
    send_text(lazy, "{\"cmd\":\"status\"}\n", 17);

    uint64_t worst = 0, t0 = np_monotonic_ns();
    int before = calls();
    while (calls() == before && np_monotonic_ns() - t0 < 2000 * MS) {
        uint64_t t = np_monotonic_ns();
        drive_once(s, 5);
        if (np_monotonic_ns() - t > worst)
            worst = np_monotonic_ns() - t;
    }
    CHECK(calls() == before + 1);
    rec.pad_bytes = 0;
    CHECK(worst < 1000 * MS); /* building the 4 MiB reply included: it never waits */
    CHECK(np_ctl_server_clients(s) == 1);

    /* Others are served while it sits there. */
    for (int i = 0; i < 3; i++) {
        uint64_t t = np_monotonic_ns();
        CHECK(exchange(s, "{\"cmd\":\"stop\"}\n", buf, sizeof(buf)) > 0);
        CHECK(reply_ok(buf) == 1);
        CHECK(np_monotonic_ns() - t < 250 * MS);
    }
    CHECK(np_ctl_server_clients(s) == 1); /* still there, still not reading */
    /* Each poll returns at once. */
    worst = 0;
    for (int i = 0; i < 20; i++) {
        uint64_t t = np_monotonic_ns();
        np_ctl_server_poll(s);
        if (np_monotonic_ns() - t > worst)
            worst = np_monotonic_ns() - t;
    }
    CHECK(worst < 100 * MS);

    /* Dropped at the timeout: it then reads part of the reply and the end. */
    t0 = np_monotonic_ns();
    while (np_ctl_server_clients(s) > 0 && np_monotonic_ns() - t0 < 3000 * MS)
        drive_once(s, 5);
    CHECK(np_ctl_server_clients(s) == 0);
    CHECK(np_monotonic_ns() - t0 > 300 * MS);
    size_t got = 0;
    bool ended = false;
    char *chunk = malloc(1 << 16);
    for (;;) {
        ssize_t n = recv(lazy, chunk, 1 << 16, MSG_DONTWAIT);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        ended = n == 0 || errno == ECONNRESET;
        break;
    }
    free(chunk);
    CHECK(ended);
    CHECK(got > 0 && got < pad);
    close(lazy);

    /* One that reads a little of it and leaves: EPIPE, not SIGPIPE. */
    rec.pad_bytes = pad;
    int quitter = raw_connect(sock_path);
    send_text(quitter, "{\"cmd\":\"status\"}\n", 17);
    drive(s, 50);
    recv(quitter, buf, sizeof(buf), MSG_DONTWAIT);
    close(quitter);
    drive(s, 50);
    rec.pad_bytes = 0;
    CHECK(np_ctl_server_clients(s) == 0);
    np_ctl_server_close(s);
}

/* 16 clients at once are served; more get an error reply and are closed. */
static void test_many_clients(void) {
    struct np_ctl_server *s = open_server();
    int fds[NP_CTL_MAX_CLIENTS];
    char buf[8192];
    bool eof;

    CHECK(s != NULL);
    if (!s)
        return;
    for (int i = 0; i < NP_CTL_MAX_CLIENTS; i++)
        fds[i] = raw_connect(sock_path);
    drive(s, 50);
    CHECK(np_ctl_server_clients(s) == NP_CTL_MAX_CLIENTS);

    for (int extra = 0; extra < 3; extra++) {
        int fd = raw_connect(sock_path);
        CHECK(fd >= 0);
        send_text(fd, "{\"cmd\":\"status\"}\n", 17);
        CHECK(raw_reply(s, fd, buf, sizeof(buf), 2000, &eof) > 0);
        CHECK(reply_error_has(buf, "too many clients"));
        CHECK(sees_close(s, fd, 1000));
        close(fd);
    }
    CHECK(np_ctl_server_clients(s) == NP_CTL_MAX_CLIENTS);

    int before = calls();
    for (int i = 0; i < NP_CTL_MAX_CLIENTS; i++)
        send_text(fds[i], "{\"cmd\":\"status\"}\n", 17);
    for (int i = 0; i < NP_CTL_MAX_CLIENTS; i++) {
        CHECK(raw_reply(s, fds[i], buf, sizeof(buf), 2000, NULL) > 0);
        CHECK(reply_ok(buf) == 1);
        close(fds[i]);
    }
    CHECK(calls() == before + NP_CTL_MAX_CLIENTS);
    drive(s, 20);
    CHECK(np_ctl_server_clients(s) == 0);
    np_ctl_server_close(s);
}

/* ---- tests: np_ctl_request_send against a server thread -------------------------------- */

#define THREADS 40
#define ROUNDS 5

static atomic_int concurrent_ok, concurrent_busy, concurrent_other;

static void *concurrent_client(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        char *reply = NULL;
        int rc = np_ctl_request_send(sock_path, "{\"cmd\":\"status\"}", 5000, &reply);
        if (rc == 0 && reply_ok(reply) == 1)
            atomic_fetch_add(&concurrent_ok, 1);
        else if (rc == 0 && strstr(reply, "too many clients"))
            atomic_fetch_add(&concurrent_busy, 1);
        else
            atomic_fetch_add(&concurrent_other, 1);
        free(reply);
    }
    return NULL;
}

static void test_concurrent(void) {
    struct server_thread st;
    pthread_t threads[THREADS];
    int started = 0;

    CHECK(start_thread(&st));
    if (!st.s)
        return;
    for (int i = 0; i < THREADS; i++) {
        if (pthread_create(&threads[i], NULL, concurrent_client, NULL) == 0)
            started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    CHECK(started == THREADS);
    CHECK(atomic_load(&concurrent_other) == 0);
    CHECK(atomic_load(&concurrent_ok) + atomic_load(&concurrent_busy) == THREADS * ROUNDS);
    CHECK(atomic_load(&concurrent_ok) >= THREADS);
    stop_thread(&st);
}

/* A listener that accepts one client, reads its request and closes. */
static void *accept_and_close(void *arg) {
    int lfd = *(int *)arg, fd = accept(lfd, NULL, NULL);
    char buf[256];
    if (fd >= 0) {
        (void)!recv(fd, buf, sizeof(buf), 0);
        close(fd);
    }
    return NULL;
}

static int bare_listener(const char *path, bool listening) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || strlen(path) >= sizeof(addr.sun_path)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    memcpy(addr.sun_path, path, strlen(path) + 1);
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || (listening && listen(fd, 4) < 0)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void test_client_errors(void) {
    char path[160], *reply = (char *)1;
    pthread_t t;

    snprintf(path, sizeof(path), "%s/missing.sock", tmp_dir);
    CHECK(np_ctl_request_send(path, "{\"cmd\":\"status\"}", 1000, &reply) == -ENOENT);
    CHECK(reply == NULL);

    /* Bound but not listening: refused. */
    snprintf(path, sizeof(path), "%s/refusing.sock", tmp_dir);
    int fd = bare_listener(path, false);
    CHECK(fd >= 0);
    CHECK(np_ctl_request_send(path, "{\"cmd\":\"status\"}", 1000, &reply) == -ECONNREFUSED);
    close(fd);
    unlink(path);

    /* Listening, never answering: the timeout. */
    snprintf(path, sizeof(path), "%s/silent.sock", tmp_dir);
    fd = bare_listener(path, true);
    uint64_t t0 = np_monotonic_ns();
    CHECK(np_ctl_request_send(path, "{\"cmd\":\"status\"}", 200, &reply) == -ETIMEDOUT);
    uint64_t took = np_monotonic_ns() - t0;
    CHECK(took >= 190 * MS && took < 1000 * MS);
    close(fd);
    unlink(path);

    /* Closing without a reply. */
    snprintf(path, sizeof(path), "%s/closing.sock", tmp_dir);
    fd = bare_listener(path, true);
    CHECK(pthread_create(&t, NULL, accept_and_close, &fd) == 0);
    CHECK(np_ctl_request_send(path, "{\"cmd\":\"status\"}", 2000, &reply) == -EPROTO);
    pthread_join(t, NULL);
    close(fd);
    unlink(path);

    char longpath[200];
    memset(longpath, 'a', sizeof(longpath) - 1);
    longpath[sizeof(longpath) - 1] = '\0';
    CHECK(np_ctl_request_send(longpath, "{}", 1000, &reply) == -ENAMETOOLONG);
    CHECK(np_ctl_request_send(path, "{}", 0, &reply) == -EINVAL);
}

/* ---- tests: the command ---------------------------------------------------------------- */

static void read_back(FILE *f, char *buf, size_t size) {
    size_t n;
    fflush(f);
    rewind(f);
    n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* Runs `ncclprobe ctl ARGS...` (NULL-terminated) with stdout and stderr captured. */
static int cli(char *out, size_t out_size, char *err, size_t err_size, ...) {
    char *argv[32];
    int argc = 0;
    va_list ap;

    argv[argc++] = "ctl";
    va_start(ap, err_size);
    for (char *a; argc < 31 && (a = va_arg(ap, char *));)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;

    FILE *fo = tmpfile(), *fe = tmpfile();
    fflush(stdout);
    fflush(stderr);
    int saved_out = dup(1), saved_err = dup(2);
    dup2(fileno(fo), 1);
    dup2(fileno(fe), 2);
    int rc = np_cmd_ctl(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
    read_back(fo, out, out_size);
    read_back(fe, err, err_size);
    return rc;
}

#define CLI(...) cli(out, sizeof(out), err, sizeof(err), __VA_ARGS__, (char *)NULL)

static void test_cli(void) {
    struct server_thread st;
    char out[16384], err[4096];
    char *sp = sock_path;
    int before;

    CHECK(start_thread(&st));
    if (!st.s)
        return;

    CHECK(CLI("--socket", sp, "status") == 0);
    CHECK(strstr(out, "pid 4242, version 0.1.0, up 1h 02m 03s") != NULL);
    CHECK(strstr(out, "window:      open #7, reason ctl, started 2024-05-01T12:00:00Z, elapsed "
                      "12.5s, ends in 1h 02m 05s") != NULL);
    CHECK(strstr(out, "aggregate:   on, every 10m 00s, period started") != NULL);
    CHECK(strstr(out, "targets:     1") != NULL);
    CHECK(strstr(out, "python3") && strstr(out, "0123456789ab ") && !strstr(out, "0123456789abc"));
    CHECK(strstr(out, "98765") && strstr(out, "321.5") && strstr(out, "cupti"));
    CHECK(strstr(out, "h-1234-python3-20240501T120000Z") != NULL);
    CHECK(strstr(out, "probes:      24 attached, 1 failed") != NULL);
    CHECK(strstr(out, "rate limit:  inactive, 2000 launches/s per probe when over budget, "
                      "CPU 1.5% of 10.0% budget, 0 activations") != NULL);
    CHECK(strstr(out, "cupti:       /run/ncclprobe/cupti.sock, 1 peer\n") != NULL);
    CHECK(strstr(out, "disk:        3.0 MiB, 4 sets, max 10240.0 MiB, 2 deleted") != NULL);
    CHECK(strstr(out, "discovery:   delay p50 1.2 ms, max 9.0 ms") ||
          strstr(out, "discovery:   delay p50 1.3 ms, max 9.0 ms"));
    CHECK(strstr(out, "memory:") == NULL); /* not in the reply: skipped */
    CHECK(err[0] == '\0');

    CHECK(CLI("--socket", sp, "--json", "status") == 0);
    CHECK(strncmp(out, "{\"ok\":true,", 11) == 0 && strchr(out, '\n') == out + strlen(out) - 1);
    CHECK(CLI("status", "--json", "--socket", sp) == 0);
    CHECK(strncmp(out, "{\"ok\":true,", 11) == 0);

    CHECK(CLI("--socket", sp, "start", "--duration", "30") == 0);
    CHECK(strcmp(out, "capture window 7 open\n") == 0);
    CHECK(last_request().cmd == NP_CTL_START && last_request().duration_s == 30);
    CHECK(CLI("--socket", sp, "start", "-d", "0.25") == 0);
    CHECK(last_request().duration_s == 0.25);
    CHECK(CLI("--socket", sp, "start") == 0);
    CHECK(last_request().cmd == NP_CTL_START && last_request().duration_s == 0);

    CHECK(CLI("--socket", sp, "stop") == 0);
    CHECK(strcmp(out, "capture window 7 closed\n/var/lib/ncclprobe/set-a\n"
                      "/var/lib/ncclprobe/set-b\n") == 0);
    CHECK(CLI("--socket", sp, "snapshot") == 0);
    CHECK(strcmp(out, "snapshot written\n/var/lib/ncclprobe/set-c\n") == 0);

    /* The daemon says no: exit 1, its error on stderr. */
    rec.snapshot_rc = -EBUSY;
    rec.snapshot_says = true;
    CHECK(CLI("--socket", sp, "snapshot") == 1);
    CHECK(out[0] == '\0');
    CHECK(strstr(err, "ncclprobe: error: aggregation is off (aggregate = no)") != NULL);
    CHECK(CLI("--socket", sp, "--json", "snapshot") == 1);
    CHECK(strstr(out, "\"ok\":false") != NULL);
    rec.snapshot_rc = 0;

    /* Usage errors: exit 2, nothing sent. */
    before = calls();
    CHECK(CLI("--socket", sp, "start", "--duration", "-5") == 2);
    CHECK(strstr(err, "invalid --duration '-5'") != NULL);
    CHECK(CLI("--socket", sp, "start", "--duration", "abc") == 2);
    CHECK(CLI("--socket", sp, "start", "--duration", "1e10") == 2);
    CHECK(CLI("--socket", sp, "start", "--duration", "0") == 2);
    CHECK(CLI("--socket", sp, "start", "--duration", "") == 2);
    CHECK(CLI("--socket", sp, "start", "--duration", "nan") == 2);
    CHECK(CLI("--socket", sp, "status", "--duration", "5") == 2);
    CHECK(strstr(err, "start only") != NULL);
    CHECK(CLI("--socket", sp, "reboot") == 2);
    CHECK(strstr(err, "unknown ctl command 'reboot'") != NULL);
    CHECK(CLI("--socket", sp) == 2);
    CHECK(CLI("--socket", sp, "status", "now") == 2);
    CHECK(strstr(err, "unexpected argument 'now'") != NULL);
    CHECK(CLI("--bogus", "status") == 2);
    CHECK(CLI("--socket") == 2);
    CHECK(CLI("--socket", "", "status") == 2);
    CHECK(calls() == before);
    CHECK(CLI("--help") == 0);
    CHECK(strstr(out, "usage: ncclprobe ctl") != NULL);
    CHECK(CLI("status", "--help") == 0);
    CHECK(CLI("--schema") == 0 && out[0] == '{' && strstr(out, "\"targets[].pid\""));
    CHECK(calls() == before);

    stop_thread(&st);

    /* No daemon. */
    char missing[160];
    snprintf(missing, sizeof(missing), "%s/nothing/ctl.sock", tmp_dir);
    CHECK(CLI("--socket", missing, "status") == 1);
    char want[256];
    snprintf(want, sizeof(want),
             "ncclprobe: error: cannot connect to %s: No such file or directory (is ncclprobe "
             "daemon running?)\n",
             missing);
    CHECK(strcmp(err, want) == 0);
    CHECK(out[0] == '\0');
}

/* The reply printer takes whatever comes. */
static int print(const char *cmd, const char *line, bool json, char **out, char **err) {
    size_t ol, el;
    FILE *fo = open_memstream(out, &ol), *fe = open_memstream(err, &el);
    int rc = np_ctl_print_reply(cmd, line, json, fo, fe);
    fclose(fo);
    fclose(fe);
    return rc;
}

static void test_print_reply(void) {
    static const char *const bad[] = {
        "", "null", "[]", "42", "{", "{\"ok\":\"yes\"}", "{\"ok\":1}", "not json at all",
    };
    char *out = NULL, *err = NULL;

    for (size_t i = 0; i < NP_ARRAY_SIZE(bad); i++) {
        CHECK(print("status", bad[i], false, &out, &err) == 1);
        CHECK(strstr(err, "bad reply from the daemon") != NULL);
        CHECK(out[0] == '\0');
        free(out);
        free(err);
    }
    CHECK(print("status", NULL, false, &out, &err) == 1);
    free(out);
    free(err);

    /* Wrong types everywhere: skipped, no crash. */
    const char *odd =
        "{\"ok\":true,\"pid\":\"x\",\"version\":7,\"uptime_s\":-5,\"window\":5,\"aggregate\":[],"
        "\"targets\":[1,\"a\",null,{\"pid\":\"z\",\"comm\":7,\"container\":\"abc\","
        "\"launches_per_s\":\"fast\"},[]],\"probes\":[],\"rates\":{\"launches_per_s\":null},"
        "\"rate_limit\":{\"active\":\"no\",\"cpu_percent\":5},\"cupti\":{\"socket\":null},"
        "\"disk\":{\"bytes\":null,\"sets\":1},\"memory\":{\"rss_bytes\":1e300,\"cache_bytes\":"
        "1048576},\"discovery\":\"soon\"}";
    CHECK(print("status", odd, false, &out, &err) == 0);
    CHECK(err[0] == '\0');
    CHECK(strstr(out, "daemon:      up 0.0s") != NULL);
    CHECK(strstr(out, "targets:     5") != NULL);
    CHECK(strstr(out, "abc") != NULL);
    CHECK(strstr(out, "cupti:       off") != NULL);
    CHECK(strstr(out, "disk:        1 set\n") != NULL);
    CHECK(strstr(out, "rate limit:  CPU 5.0%") != NULL);
    CHECK(strstr(out, "caches 1.0 MiB") != NULL);
    free(out);
    free(err);

    /* The bare minimum; control characters from a target's comm are not printed. */
    CHECK(print("status", "{\"ok\":true}", false, &out, &err) == 0);
    CHECK(out[0] == '\0' && err[0] == '\0');
    free(out);
    free(err);
    CHECK(print("status",
                "{\"ok\":true,\"window\":{\"open\":true,\"ends_in_s\":null},\"targets\":[{"
                "\"comm\":\"evil\\u001b[2J\",\"output\":null}]}",
                false, &out, &err) == 0);
    CHECK(strstr(out, "window:      open, until stopped") != NULL);
    CHECK(strchr(out, 0x1b) == NULL && strstr(out, "evil?[2J") != NULL);
    free(out);
    free(err);
    CHECK(print("status", "{\"ok\":true,\"window\":{\"open\":false},\"targets\":[]}", false, &out,
                &err) == 0);
    CHECK(strstr(out, "window:      closed\ntargets:     none\n") != NULL);
    free(out);
    free(err);

    /* start/stop/snapshot: the message and the sets, strings only. */
    CHECK(print("stop", "{\"ok\":true,\"message\":\"done\",\"sets\":[\"/a\",5,null,\"/b\"]}", false,
                &out, &err) == 0);
    CHECK(strcmp(out, "done\n/a\n/b\n") == 0);
    free(out);
    free(err);
    CHECK(print("start", "{\"ok\":true,\"sets\":\"/a\"}", false, &out, &err) == 0);
    CHECK(strcmp(out, "ok\n") == 0);
    free(out);
    free(err);

    /* Errors. */
    CHECK(print("start", "{\"ok\":false,\"error\":\"a window is open already\"}", false, &out,
                &err) == 1);
    CHECK(strcmp(err, "ncclprobe: error: a window is open already\n") == 0 && out[0] == '\0');
    free(out);
    free(err);
    CHECK(print("start", "{\"ok\":false,\"error\":3}", false, &out, &err) == 1);
    CHECK(strstr(err, "the daemon reported an error") != NULL);
    free(out);
    free(err);

    /* --json: the line as it came, even a bad one. */
    CHECK(print("status", "{\"ok\":true,\"x\":1}", true, &out, &err) == 0);
    CHECK(strcmp(out, "{\"ok\":true,\"x\":1}\n") == 0 && err[0] == '\0');
    free(out);
    free(err);
    CHECK(print("status", "garbage", true, &out, &err) == 1);
    CHECK(strcmp(out, "garbage\n") == 0 && strstr(err, "bad reply"));
    free(out);
    free(err);
}

/* ---- tests: the socket file ---------------------------------------------------------- */

static void test_socket_file(void) {
    struct stat st;
    char dir[128], buf[8192];

    /* Mode 0600, parent created 0755 (this test runs first on a fresh path). */
    struct np_ctl_server *s = open_server();
    CHECK(s != NULL);
    if (!s)
        return;
    CHECK(lstat(sock_path, &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 07777) == 0600);
    snprintf(dir, sizeof(dir), "%s/run", tmp_dir);
    CHECK(lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0755);

    /* A second server on a live socket: -EADDRINUSE, the first one unharmed. */
    struct np_ctl_server *second = (struct np_ctl_server *)1;
    CHECK(np_ctl_server_open(sock_path, &ops, &second) == -EADDRINUSE);
    CHECK(second == NULL);
    CHECK(lstat(sock_path, &st) == 0 && S_ISSOCK(st.st_mode));
    CHECK(exchange(s, "{\"cmd\":\"status\"}\n", buf, sizeof(buf)) > 0);
    CHECK(reply_ok(buf) == 1);

    /* Close unlinks. */
    np_ctl_server_close(s);
    CHECK(lstat(sock_path, &st) < 0 && errno == ENOENT);
    np_ctl_server_close(NULL);

    /* A stale socket (its server gone without unlinking) is replaced. */
    int fd = bare_listener(sock_path, true);
    CHECK(fd >= 0);
    close(fd);
    CHECK(lstat(sock_path, &st) == 0 && S_ISSOCK(st.st_mode));
    s = open_server();
    CHECK(s != NULL);
    if (s) {
        CHECK(exchange(s, "{\"cmd\":\"status\"}\n", buf, sizeof(buf)) > 0);
        CHECK(reply_ok(buf) == 1);
        /* Someone replaced our socket file: close leaves theirs alone. */
        unlink(sock_path);
        fd = bare_listener(sock_path, false);
        CHECK(fd >= 0);
        np_ctl_server_close(s);
        CHECK(lstat(sock_path, &st) == 0);
        close(fd);
        unlink(sock_path);
    }

    /* Not a socket: left alone. */
    FILE *f = fopen(sock_path, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    s = (struct np_ctl_server *)1;
    CHECK(np_ctl_server_open(sock_path, &ops, &s) == -EEXIST);
    CHECK(s == NULL);
    CHECK(lstat(sock_path, &st) == 0 && S_ISREG(st.st_mode));
    unlink(sock_path);

    /* Paths that cannot be. */
    char longpath[200];
    memset(longpath, 'a', sizeof(longpath) - 1);
    longpath[sizeof(longpath) - 1] = '\0';
    CHECK(np_ctl_server_open(longpath, &ops, &s) == -ENAMETOOLONG);
    CHECK(np_ctl_server_open("", &ops, &s) == -EINVAL);
    char under_file[160];
    snprintf(under_file, sizeof(under_file), "%s/file", tmp_dir);
    f = fopen(under_file, "w");
    if (f)
        fclose(f);
    snprintf(under_file, sizeof(under_file), "%s/file/ctl.sock", tmp_dir);
    CHECK(np_ctl_server_open(under_file, &ops, &s) < 0 && s == NULL);
    snprintf(under_file, sizeof(under_file), "%s/file", tmp_dir);
    unlink(under_file);
}

/* ---- tests: the Unix listener both servers use ----------------------------------------- */

/* The lowest free fd: the same before and after a call that must not leak one. */
static int lowest_free_fd(void) {
    int fd = dup(0);
    if (fd >= 0)
        close(fd);
    return fd;
}

static bool same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_mode == b->st_mode &&
           a->st_size == b->st_size;
}

static bool file_holds(const char *path, const char *want) {
    char *text = NULL;
    size_t len = 0;
    bool same =
        np_read_file(path, &text, &len) == 0 && len == strlen(want) && memcmp(text, want, len) == 0;
    free(text);
    return same;
}

static const struct np_unix_listen_opts opts_0600 = {
    .dir_mode = 0755, .sock_mode = 0600, .backlog = 8};
static const struct np_unix_listen_opts opts_0666 = {
    .dir_mode = 0755, .sock_mode = 0666, .backlog = 8};

/* np_unix_listen on path must refuse with -EEXIST, say what is there, and
 * leave it exactly as it was. */
static void refuses_untouched(const char *path, const char *kind) {
    struct stat before, after;
    struct np_unix_listener l;
    char why[512] = "";
    int fds = lowest_free_fd();

    CHECK(lstat(path, &before) == 0);
    int rc = np_unix_listen(path, &opts_0666, &l, why, sizeof(why));
    CHECK(rc == -EEXIST);
    CHECK(l.fd == -1 && !l.bound);
    if (!strstr(why, path) || !strstr(why, kind) || !strstr(why, "not a socket")) {
        fprintf(stderr, "  %s: rc %d, why \"%s\" (want %s)\n", path, rc, why, kind);
        failed++;
    }
    CHECK(lstat(path, &after) == 0 && same_file(&before, &after));
    CHECK(lowest_free_fd() == fds);
    np_unix_listener_close(&l); /* holds nothing: does nothing */
    CHECK(lstat(path, &after) == 0 && same_file(&before, &after));
}

static void test_listener_paths(void) {
    char dir[80], path[100], other[160], why[512];
    struct np_unix_listener l, second;
    struct stat st;

    snprintf(dir, sizeof(dir), "%s/listener", tmp_dir);

    /* Fresh, two directories deep, under the daemon's umask 077: the
     * directories get 0755 and the socket exactly 0666. */
    mode_t old_mask = umask(077);
    snprintf(path, sizeof(path), "%s/a/b/x.sock", dir);
    CHECK(np_unix_listen(path, &opts_0666, &l, why, sizeof(why)) == 0);
    umask(old_mask);
    CHECK(l.fd >= 0 && l.bound && !l.replaced_stale && strcmp(l.path, path) == 0);
    CHECK(lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 07777) == 0666);
    CHECK(st.st_dev == l.dev && st.st_ino == l.ino);
    snprintf(other, sizeof(other), "%s/a", dir);
    CHECK(lstat(other, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0755);
    snprintf(other, sizeof(other), "%s/a/b", dir);
    CHECK(lstat(other, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0755);
    int fl = fcntl(l.fd, F_GETFL), fdfl = fcntl(l.fd, F_GETFD);
    CHECK(fl >= 0 && (fl & O_NONBLOCK) && fdfl >= 0 && (fdfl & FD_CLOEXEC));

    /* Live: -EADDRINUSE, the first one unharmed. */
    CHECK(np_unix_listen(path, &opts_0666, &second, why, sizeof(why)) == -EADDRINUSE);
    CHECK(second.fd == -1 && strstr(why, path) && strstr(why, "listening"));
    CHECK(lstat(path, &st) == 0 && st.st_ino == l.ino);
    int c = raw_connect(path);
    CHECK(c >= 0);

    /* Accepting: nonblocking, close-on-exec, the peer's credentials. Two
     * are waiting: the second server's look (closed at once), and c. */
    for (int i = 0; i < 2; i++) {
        struct np_unix_peer peer = {0};
        int a = np_unix_accept(&l, &peer);
        CHECK(a >= 0);
        CHECK(peer.pid == getpid() && peer.uid == geteuid() && peer.gid == getegid());
        fl = fcntl(a, F_GETFL);
        fdfl = fcntl(a, F_GETFD);
        CHECK(fl >= 0 && (fl & O_NONBLOCK) && fdfl >= 0 && (fdfl & FD_CLOEXEC));
        if (a >= 0)
            close(a);
    }
    struct np_unix_peer none;
    CHECK(np_unix_accept(&l, &none) == -EAGAIN);
    close(c);

    /* Close unlinks its own file... */
    np_unix_listener_close(&l);
    CHECK(l.fd == -1 && !l.bound);
    CHECK(lstat(path, &st) < 0 && errno == ENOENT);
    np_unix_listener_close(&l); /* twice: nothing */

    /* ...but not one that replaced it: a socket, or a regular file. */
    for (int i = 0; i < 2; i++) {
        CHECK(np_unix_listen(path, &opts_0600, &l, why, sizeof(why)) == 0);
        unlink(path);
        int theirs = -1;
        if (i == 0) {
            theirs = bare_listener(path, true);
            CHECK(theirs >= 0);
        } else {
            FILE *f = fopen(path, "w");
            CHECK(f && fputs("theirs\n", f) >= 0 && fclose(f) == 0);
        }
        CHECK(lstat(path, &st) == 0);
        ino_t ino = st.st_ino;
        np_unix_listener_close(&l);
        CHECK(lstat(path, &st) == 0 && st.st_ino == ino);
        if (i == 1)
            CHECK(file_holds(path, "theirs\n"));
        if (theirs >= 0)
            close(theirs);
        unlink(path);
    }

    /* A stale socket (bound, nobody listening) is replaced, and said so. */
    int fd = bare_listener(path, true);
    CHECK(fd >= 0);
    close(fd);
    CHECK(lstat(path, &st) == 0 && S_ISSOCK(st.st_mode));
    CHECK(np_unix_listen(path, &opts_0600, &l, why, sizeof(why)) == 0);
    CHECK(l.replaced_stale);
    CHECK(lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 07777) == 0600);
    np_unix_listener_close(&l);

    /* A live one with its backlog full (connect says EAGAIN): in use. */
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr;
    socklen_t addr_len;
    CHECK(np_unix_addr(path, &addr, &addr_len) == 0);
    CHECK(bind(fd, (struct sockaddr *)&addr, addr_len) == 0 && listen(fd, 0) == 0);
    int waiting[4], nwaiting = 0;
    bool full = false;
    while (!full && nwaiting < 4) {
        int w = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (connect(w, (struct sockaddr *)&addr, addr_len) < 0 && errno == EAGAIN) {
            full = true;
            close(w);
        } else {
            waiting[nwaiting++] = w;
        }
    }
    CHECK(full);
    CHECK(np_unix_listen(path, &opts_0600, &l, why, sizeof(why)) == -EADDRINUSE);
    CHECK(lstat(path, &st) == 0 && S_ISSOCK(st.st_mode));
    for (int i = 0; i < nwaiting; i++)
        close(waiting[i]);
    close(fd);
    unlink(path);

    /* A socket of another type (datagram) is someone's: left alone. */
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(bind(fd, (struct sockaddr *)&addr, addr_len) == 0);
    CHECK(lstat(path, &st) == 0);
    ino_t dgram = st.st_ino;
    CHECK(np_unix_listen(path, &opts_0600, &l, why, sizeof(why)) < 0);
    CHECK(l.fd == -1 && strstr(why, path));
    CHECK(lstat(path, &st) == 0 && st.st_ino == dgram);
    close(fd);
    unlink(path);

    /* Not a socket: refused, said, untouched. */
    FILE *f = fopen(path, "w");
    CHECK(f && fputs("precious bytes\n", f) >= 0 && fclose(f) == 0);
    refuses_untouched(path, "a regular file");
    CHECK(file_holds(path, "precious bytes\n"));
    unlink(path);

    CHECK(mkdir(path, 0700) == 0);
    snprintf(other, sizeof(other), "%s/inside", path);
    f = fopen(other, "w");
    CHECK(f && fclose(f) == 0);
    refuses_untouched(path, "a directory");
    CHECK(lstat(other, &st) == 0);
    unlink(other);
    rmdir(path);

    CHECK(mkfifo(path, 0600) == 0);
    refuses_untouched(path, "a FIFO");
    unlink(path);

    /* Symbolic links: to a file, dangling, to a live socket. */
    snprintf(other, sizeof(other), "%s/target", dir);
    f = fopen(other, "w");
    CHECK(f && fputs("target\n", f) >= 0 && fclose(f) == 0);
    CHECK(symlink(other, path) == 0);
    refuses_untouched(path, "a symbolic link");
    CHECK(file_holds(other, "target\n"));
    unlink(path);
    unlink(other);
    CHECK(symlink(other, path) == 0);
    refuses_untouched(path, "a symbolic link");
    unlink(path);
    CHECK(np_unix_listen(other, &opts_0600, &second, why, sizeof(why)) == 0);
    CHECK(symlink(other, path) == 0);
    refuses_untouched(path, "a symbolic link");
    CHECK(lstat(other, &st) == 0 && st.st_ino == second.ino);
    unlink(path);
    np_unix_listener_close(&second);
    CHECK(lstat(other, &st) < 0 && errno == ENOENT);

    /* Paths that cannot be. */
    char longpath[200];
    memset(longpath, 'a', sizeof(longpath) - 1);
    longpath[sizeof(longpath) - 1] = '\0';
    CHECK(np_unix_listen(longpath, &opts_0600, &l, why, sizeof(why)) == -ENAMETOOLONG);
    CHECK(strstr(why, "too long") != NULL);
    CHECK(np_unix_listen("", &opts_0600, &l, why, sizeof(why)) == -EINVAL);
    CHECK(np_unix_listen(NULL, &opts_0600, &l, NULL, 0) == -EINVAL);
    snprintf(other, sizeof(other), "%s/plain", dir);
    f = fopen(other, "w");
    CHECK(f && fclose(f) == 0);
    snprintf(path, sizeof(path), "%s/plain/x.sock", dir);
    CHECK(np_unix_listen(path, &opts_0600, &l, why, sizeof(why)) < 0 && l.fd == -1);
    CHECK(strstr(why, path) != NULL);
    CHECK(lstat(other, &st) == 0 && S_ISREG(st.st_mode));
    unlink(other);
}

/* A failure after bind - here the look at the socket just bound - leaves
 * neither the socket file nor an fd behind, in the helper and in both
 * servers. */
static void test_listener_cleanup(void) {
    char path[160], why[512];
    struct np_unix_listener l;
    struct stat st;
    int fds = lowest_free_fd();

    snprintf(path, sizeof(path), "%s/listener/cleanup.sock", tmp_dir);
    fail_lstat_on_socket = 1;
    CHECK(np_unix_listen(path, &opts_0600, &l, why, sizeof(why)) == -EIO);
    CHECK(fail_lstat_on_socket == 0); /* the lstat after bind was reached */
    fail_lstat_on_socket = 0;
    CHECK(l.fd == -1 && !l.bound);
    CHECK(strstr(why, path) != NULL);
    CHECK(lstat(path, &st) < 0 && errno == ENOENT);
    CHECK(lowest_free_fd() == fds);

    /* The control socket: it used to leave the file there. */
    struct np_ctl_server *s = (struct np_ctl_server *)1;
    fail_lstat_on_socket = 1;
    CHECK(np_ctl_server_open(path, &ops, &s) == -EIO);
    fail_lstat_on_socket = 0;
    CHECK(s == NULL);
    CHECK(lstat(path, &st) < 0 && errno == ENOENT);
    CHECK(lowest_free_fd() == fds);
    /* ...and then it starts there as usual. */
    CHECK(np_ctl_server_open(path, &ops, &s) == 0 && s != NULL);
    np_ctl_server_close(s);
    CHECK(lstat(path, &st) < 0 && errno == ENOENT);
}

static bool never_traced(void *ctx, pid_t pid) {
    (void)ctx;
    (void)pid;
    return false;
}

static void ignore_record(void *ctx, pid_t pid, const struct np_gpu_record *rec) {
    (void)ctx;
    (void)pid;
    (void)rec;
}

/* The CUPTI socket's server: a regular file at its path is refused and
 * kept (it used to be unlinked); a stale socket is replaced; its socket is
 * 0666 under umask 077; close unlinks it. */
static void test_gpu_server_path(void) {
    const struct np_gpu_server_ops gops = {.is_traced = never_traced, .on_record = ignore_record};
    struct np_gpu_server *g = NULL;
    char path[160];
    struct stat st;
    int fds = lowest_free_fd();

    snprintf(path, sizeof(path), "%s/listener/cupti.sock", tmp_dir);
    FILE *f = fopen(path, "w");
    CHECK(f && fputs("not a socket\n", f) >= 0 && fclose(f) == 0);
    CHECK(np_gpu_server_open(path, &gops, &g) == -EEXIST);
    CHECK(file_holds(path, "not a socket\n"));
    CHECK(lowest_free_fd() == fds);
    unlink(path);

    int fd = bare_listener(path, false);
    CHECK(fd >= 0);
    close(fd);
    mode_t old_mask = umask(077);
    CHECK(np_gpu_server_open(path, &gops, &g) == 0);
    umask(old_mask);
    CHECK(lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 07777) == 0666);
    /* A silent client is closed after 5 s: not before. */
    int c = raw_connect(path);
    CHECK(c >= 0);
    np_gpu_server_poll(g);
    np_gpu_server_tick(g, np_monotonic_ns() + 4900 * MS);
    CHECK(np_gpu_server_stats(g)->rejected[NP_REJECT_NO_HELLO] == 0);
    np_gpu_server_tick(g, np_monotonic_ns() + 5000 * MS);
    CHECK(np_gpu_server_stats(g)->rejected[NP_REJECT_NO_HELLO] == 1);
    close(c);
    np_gpu_server_close(g);
    CHECK(lstat(path, &st) < 0 && errno == ENOENT);
    CHECK(lowest_free_fd() == fds);
}

static void test_idle_clock(void) {
    struct np_unix_clock c;
    np_unix_clock_start(&c, 1000);
    CHECK(!np_unix_clock_expired(&c, 1000, 100, 500));
    CHECK(!np_unix_clock_expired(&c, 1099, 100, 500));
    CHECK(np_unix_clock_expired(&c, 1100, 100, 500)); /* idle for idle_ns */
    np_unix_clock_progress(&c, 1090);
    CHECK(!np_unix_clock_expired(&c, 1150, 100, 500));
    np_unix_clock_progress(&c, 1450);
    CHECK(!np_unix_clock_expired(&c, 1499, 100, 500));
    CHECK(np_unix_clock_expired(&c, 1500, 100, 500)); /* progressing, but too old */
    CHECK(!np_unix_clock_expired(&c, 1500, 100, 0));  /* no lifetime limit */
    CHECK(!np_unix_clock_expired(&c, 99999, 0, 0));   /* no limit at all */
    CHECK(np_unix_clock_expired(&c, 99999, 0, 500));
    CHECK(!np_unix_clock_expired(&c, 10, 100, 500)); /* a now before the start */
}

/* ---- tests: peer credentials -------------------------------------------------------- */

/* In a child as uid 65534: 0 when the outcome is the expected one. */
static int child_as_nobody(bool expect_reply) {
    char *reply = NULL;
    if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
        return 10;
    int rc = np_ctl_request_send(sock_path, "{\"cmd\":\"stop\"}", 5000, &reply);
    if (expect_reply) {
        if (rc != 0)
            return 11;
        int ok = reply && strstr(reply, "\"ok\":false") && strstr(reply, "\"permission denied\"");
        free(reply);
        return ok ? 0 : 12;
    }
    free(reply);
    return rc == -EACCES ? 0 : 13;
}

/* Forks the child and drives the server until it exits; its exit code. */
static int run_as_nobody(struct np_ctl_server *s, bool expect_reply) {
    pid_t pid = fork();
    if (pid == 0)
        _exit(child_as_nobody(expect_reply));
    if (pid < 0)
        return -1;
    uint64_t end = np_monotonic_ns() + 10000 * MS;
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (np_monotonic_ns() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -2;
        }
        drive_once(s, 5);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -3;
}

static void test_peer_uid(void) {
    if (geteuid() != 0) {
        fprintf(stderr, "ctl_unit: not root, skipping the other-uid test\n");
        return;
    }
    struct np_ctl_server *s = open_server();
    CHECK(s != NULL);
    if (!s)
        return;
    char dir[128];
    snprintf(dir, sizeof(dir), "%s/run", tmp_dir);
    chmod(tmp_dir, 0755);

    /* The socket's mode keeps other users out at connect. */
    CHECK(run_as_nobody(s, false) == 0);

    /* Past the mode (opened up here), SO_PEERCRED keeps them out. */
    int before = calls();
    CHECK(chmod(sock_path, 0666) == 0);
    CHECK(run_as_nobody(s, true) == 0);
    CHECK(calls() == before);
    chmod(sock_path, 0600);
    chmod(tmp_dir, 0700);
    drive(s, 20);
    CHECK(np_ctl_server_clients(s) == 0);
    np_ctl_server_close(s);
}

/* ---- main ----------------------------------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)type;
    (void)ftw;
    remove(path);
    return 0;
}

/* ---- tests: the status schema ------------------------------------------------------------ */

/* A field of status_schema.h's table is well placed: after its parent (an
 * object or array), next to its siblings, its key unique there; what is
 * shown has a line, a column is an array element's, a partner a sibling. */
static bool schema_field_ok(int id) {
    const struct np_status_field *f = &np_status_fields[id];
    bool ok = f->key && *f->key && f->help && *f->help;
    if (f->parent != NP_ST_TOP) {
        enum np_status_type pt = np_status_fields[f->parent].type;
        ok &= (int)f->parent < id && (pt == NP_STATUS_OBJECT || pt == NP_STATUS_ARRAY);
        ok &= np_status_fields[id - 1].parent == f->parent || id - 1 == (int)f->parent;
    }
    for (int j = 0; j < id; j++)
        ok &= np_status_fields[j].parent != f->parent || strcmp(np_status_fields[j].key, f->key);
    ok &= f->show == NP_SHOW_NONE || f->line != NULL;
    ok &= !f->column || np_status_fields[f->parent].type == NP_STATUS_ARRAY;
    ok &= !f->with || (np_status_fields[f->with].parent == f->parent && f->text_with);
    return ok;
}

static void test_status_schema(void) {
    bool fields_ok = true, paths_unique = true;
    for (int id = 0; id < NP_ST_COUNT; id++)
        fields_ok &= schema_field_ok(id);
    CHECK(fields_ok);

    cJSON *schema = np_status_schema_json();
    const cJSON *fields = cJSON_GetObjectItemCaseSensitive(schema, "fields"), *a, *b;
    CHECK(cJSON_GetArraySize(fields) == NP_ST_COUNT);
    cJSON_ArrayForEach(a, fields) {
        const char *pa = cJSON_GetObjectItemCaseSensitive(a, "path")->valuestring;
        cJSON_ArrayForEach(b, fields) {
            paths_unique &=
                a == b || strcmp(pa, cJSON_GetObjectItemCaseSensitive(b, "path")->valuestring);
        }
    }
    CHECK(paths_unique);
    char path[160];
    np_status_path(NP_ST_TARGET_PID, path, sizeof(path));
    CHECK(strcmp(path, "targets[].pid") == 0);
    np_status_path(NP_ST_WINDOW_ENDS_IN_S, path, sizeof(path));
    CHECK(strcmp(path, "window.ends_in_s") == 0);
    const cJSON *ends = cJSON_GetArrayItem(fields, NP_ST_WINDOW_ENDS_IN_S);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ends, "nullable")) &&
          cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ends, "window_open_only")) &&
          strcmp(cJSON_GetObjectItemCaseSensitive(ends, "type")->valuestring, "number") == 0);
    cJSON_Delete(schema);

    /* what the daemon adds by id, ctl shows */
    cJSON *r = cJSON_CreateObject();
    np_status_add_bool(r, NP_ST_OK, true);
    cJSON *w = np_status_add_object(r, NP_ST_WINDOW);
    np_status_add_bool(w, NP_ST_WINDOW_OPEN, true);
    np_status_add_number(w, NP_ST_WINDOW_ID, 3);
    cJSON *t = cJSON_CreateObject();
    cJSON_AddItemToArray(np_status_add_object(r, NP_ST_TARGETS), t);
    np_status_add_string(t, NP_ST_TARGET_COMM, "bad\xff");
    np_status_add_string(t, NP_ST_TARGET_OUTPUT, NULL);
    char *line = cJSON_PrintUnformatted(r), *out = NULL, *err = NULL;
    size_t ol, el;
    FILE *fo = open_memstream(&out, &ol), *fe = open_memstream(&err, &el);
    CHECK(np_ctl_print_reply("status", line, false, fo, fe) == 0);
    fclose(fo);
    fclose(fe);
    CHECK(strstr(out, "window:      open #3\n") != NULL);
    CHECK(strstr(out, "targets:     1\n") != NULL && strstr(out, "  -       -") != NULL);
    CHECK(strstr(line, "\"output\":null") != NULL && strstr(line, "\"comm\":\"bad") != NULL);
    free(out);
    free(err);
    cJSON_free(line);
    cJSON_Delete(r);
}

int main(void) {
    signal(SIGPIPE, SIG_DFL); /* the server must not need SIGPIPE ignored */
    np_log_set_level(NP_LOG_ERROR);
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/ctl_unit.XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(sock_path, sizeof(sock_path), "%s/run/ctl.sock", tmp_dir);

    test_parse_request();
    test_reply_error();
    test_socket_file();
    test_listener_paths();
    test_listener_cleanup();
    test_gpu_server_path();
    test_idle_clock();
    test_commands();
    test_fd_readable();
    test_request_size();
    test_idle_client();
    test_never_reads();
    test_many_clients();
    test_client_errors();
    test_concurrent();
    test_print_reply();
    test_status_schema();
    test_cli();
    test_peer_uid();

    nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    printf("ctl_unit: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
