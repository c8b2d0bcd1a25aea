/* ctl.h - the daemon's control socket (`ncclprobe ctl`): a Unix stream
 * socket where a client sends one line of JSON ({"cmd":"start",
 * "duration_s":30}, stop, status, snapshot) and gets one line of JSON back
 * ({"ok":true,...} or {"ok":false,"error":"..."}), then the server closes.
 * The server never blocks the daemon: nonblocking accept and I/O, requests
 * of at most NP_CTL_MAX_REQUEST bytes, at most NP_CTL_MAX_CLIENTS at once,
 * replies buffered and written as the socket allows, a client that makes no
 * progress for the timeout dropped. Peers must be root or the daemon's own
 * user (SO_PEERCRED). Also the client side of the exchange. */
#ifndef NP_DAEMON_CTL_H
#define NP_DAEMON_CTL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define NP_CTL_DEFAULT_SOCKET "/run/ncclprobe/ctl.sock"
/* The most bytes of a request line, its newline not counted. */
#define NP_CTL_MAX_REQUEST 4096
#define NP_CTL_MAX_CLIENTS 16
/* A client that makes no progress (reading its request or taking its
 * reply) for this long is dropped; so is one still there after
 * NP_CTL_LIFETIME_TIMEOUTS of them. */
#define NP_CTL_DEFAULT_TIMEOUT_MS 2000
#define NP_CTL_LIFETIME_TIMEOUTS 5
/* The longest "duration_s" a start request may ask for (as np_parse_seconds). */
#define NP_CTL_MAX_DURATION_S 1e9
/* The largest reply np_ctl_request_send accepts. */
#define NP_CTL_MAX_REPLY (16u << 20)

enum np_ctl_cmd { NP_CTL_START, NP_CTL_STOP, NP_CTL_STATUS, NP_CTL_SNAPSHOT };

struct np_ctl_request {
    enum np_ctl_cmd cmd;
    double duration_s; /* start only; 0: none given */
    bool cupti;        /* start only: bring the CUPTI library into the traced processes */
    pid_t peer_pid;    /* from SO_PEERCRED */
    uid_t peer_uid;
};

struct np_ctl_ops {
    void *ctx;
    /* Called from np_ctl_server_poll for each valid request. Fills `reply`
     * (a cJSON object, "ok" already true). Returns 0, or -errno after
     * np_ctl_reply_error(reply, ...) (a negative return without an error
     * set replies with strerror). Must not call back into the server. */
    int (*handle)(void *ctx, const struct np_ctl_request *req, cJSON *reply);
};

struct np_ctl_server;

/* Listens on `path` (lib/unix_listener.h; mode 0600; missing directories
 * are created 0755). A stale socket file (nobody listening) is replaced.
 * Returns 0, -EADDRINUSE when a server is listening there already, -EEXIST
 * when the path is something other than a socket (left untouched, and said
 * as an error), -EINVAL / -ENAMETOOLONG, or -errno. */
int np_ctl_server_open(const char *path, const struct np_ctl_ops *ops, struct np_ctl_server **out);
/* One fd (an epoll fd of the server's own) for the daemon's epoll:
 * readable means np_ctl_server_poll has work. */
int np_ctl_server_fd(const struct np_ctl_server *s);
/* Accepts, reads, answers and writes whatever is ready; never blocks. */
void np_ctl_server_poll(struct np_ctl_server *s);
/* Drops clients past their timeout; now_ns is CLOCK_MONOTONIC
 * (np_monotonic_ns). Call it a few times a second. */
void np_ctl_server_tick(struct np_ctl_server *s, uint64_t now_ns);
/* The no-progress timeout (default NP_CTL_DEFAULT_TIMEOUT_MS), for tests. */
void np_ctl_server_set_timeout_ms(struct np_ctl_server *s, unsigned timeout_ms);
/* Clients connected now (accepted and not yet closed). */
size_t np_ctl_server_clients(const struct np_ctl_server *s);
/* Closes every client and the socket, and unlinks the socket file when it is
 * still the one this server created. NULL is a no-op. */
void np_ctl_server_close(struct np_ctl_server *s);

/* Sets "ok" to false and "error" to the formatted text. */
void np_ctl_reply_error(cJSON *reply, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "start", "stop", "status", "snapshot" ("?" for anything else). */
const char *np_ctl_cmd_name(enum np_ctl_cmd cmd);

/* Parses one request line (len bytes, no newline needed). 0, or -EINVAL
 * with a message for the client in err: malformed JSON, not an object, a
 * missing or unknown "cmd", a "duration_s" that is not a number in
 * (0, NP_CTL_MAX_DURATION_S] or is given to a command other than start. */
int np_ctl_parse_request(const char *line, size_t len, struct np_ctl_request *req, char *err,
                         size_t errlen);

/* The client: connects to `path`, sends `line` (a newline added when it has
 * none) and reads the one-line reply into *reply (malloc'ed, newline
 * stripped), all within timeout_ms. 0, or -errno: connect's (-ENOENT,
 * -ECONNREFUSED, -EACCES...), -ETIMEDOUT, -EMSGSIZE for a reply over
 * NP_CTL_MAX_REPLY, -EPROTO when the server closed without replying. */
int np_ctl_request_send(const char *path, const char *line, int timeout_ms, char **reply);

#endif
