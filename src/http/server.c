/* server.c - the HTTP endpoints (server.h) on libmicrohttpd: the address
 * and token checks made before listening, the limits on connections,
 * request memory (headers included) and idle time, and the routes. Nothing
 * here changes the daemon's state: windows and injection stay on the
 * root-only control socket. */
#define _GNU_SOURCE
#include "http/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http/expo.h"
#include "lib/util.h"
#include "writers/pprof.h"

#define STACK_SIZE (512u << 10)
#define WAIT_GRACE_NS 3000000000ull /* past a window's end, the loop is late: 503 */

struct np_http_server {
    struct MHD_Daemon *mhd;
    struct np_http_feed *feed;
    char *token; /* NULL: none */
};

/* ---- the address and the token ------------------------------------------------ */

static int parse_port(const char *text, uint16_t *port) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(text, &end, 10);
    if (!*text || *end || errno || v < 1 || v > 65535 || *text < '0' || *text > '9')
        return -EINVAL;
    *port = (uint16_t)v;
    return 0;
}

int np_http_parse_listen(const char *text, struct sockaddr_storage *ss, bool *loopback, char *err,
                         size_t errlen) {
    const char *colon = strrchr(text, ':');
    char host[64];
    uint16_t port;
    memset(ss, 0, sizeof(*ss));
    size_t hlen = colon ? (size_t)(colon - text) : 0;
    if (!colon || hlen == 0 || hlen >= sizeof(host) || parse_port(colon + 1, &port)) {
        snprintf(err, errlen,
                 "'%s': not ADDR:PORT (expected a numeric address and a port from 1 to 65535, "
                 "e.g. 127.0.0.1:9464 or [::1]:9464)",
                 text);
        return -EINVAL;
    }
    memcpy(host, text, hlen);
    host[hlen] = '\0';
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (host[0] == '[' && host[hlen - 1] == ']') {
        host[hlen - 1] = '\0';
        if (inet_pton(AF_INET6, host + 1, &v6->sin6_addr) == 1) {
            v6->sin6_family = AF_INET6;
            v6->sin6_port = htons(port);
            *loopback = IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
            return 0;
        }
    } else if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        *loopback = (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
        return 0;
    }
    snprintf(err, errlen,
             "'%s': '%s' is not a numeric IPv4 address or a bracketed IPv6 one (e.g. "
             "127.0.0.1:9464 or [::1]:9464)",
             text, host);
    return -EINVAL;
}

/* The token: a file only its owner (root, or the daemon's user) can read. */
static int read_token(const char *path, char **out, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        snprintf(err, errlen, "http_token_file %s: %s", path, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    int rc = 0;
    if (!S_ISREG(st.st_mode))
        rc = -EINVAL, snprintf(err, errlen, "http_token_file %s: not a regular file", path);
    else if (st.st_uid != 0 && st.st_uid != geteuid())
        rc = -EPERM, snprintf(err, errlen, "http_token_file %s: owned by uid %u (expected root)",
                              path, (unsigned)st.st_uid);
    else if (st.st_mode & 077)
        rc = -EPERM, snprintf(err, errlen,
                              "http_token_file %s: mode %04o lets others read it (expected 0600 or "
                              "0400: chmod 600 %s)",
                              path, (unsigned)(st.st_mode & 07777), path);
    char *buf = rc ? NULL : calloc(1, NP_HTTP_TOKEN_MAX + 2);
    ssize_t n = buf ? read(fd, buf, NP_HTTP_TOKEN_MAX + 1) : 0;
    close(fd);
    if (rc)
        return rc;
    if (!buf)
        return -ENOMEM;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    if (n <= 0 || n > NP_HTTP_TOKEN_MAX || strpbrk(buf, " \t\r\n")) {
        free(buf);
        snprintf(err, errlen, "http_token_file %s: %s", path,
                 n <= 0 ? "empty" : "not one token of at most 4096 bytes without blanks");
        return -EINVAL;
    }
    *out = buf;
    return 0;
}

/* ---- responses ---------------------------------------------------------------- */

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *type,
                               void *body, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, body, body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result respond_text(struct MHD_Connection *c, unsigned status, const char *text) {
    char *body = strdup(text);
    return body ? respond(c, status, "text/plain; charset=utf-8", body, strlen(body)) : MHD_NO;
}

static enum MHD_Result serve_metrics(struct np_http_server *s, struct MHD_Connection *c) {
    size_t len = 0;
    char *text = np_http_feed_metrics(s->feed, &len);
    if (!text)
        return respond_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "no metrics yet\n");
    return respond(c, MHD_HTTP_OK, NP_EXPO_CONTENT_TYPE, text, len);
}

/* The buckets' samples as one profile. */
static int encode_buckets(struct np_http_bucket **b, size_t nb, bool gpu, int64_t time_ns,
                          int64_t duration_ns, uint8_t **out, size_t *len) {
    size_t n = 0;
    for (size_t i = 0; i < nb; i++)
        n += b[i]->n;
    struct np_pprof_sample *v = calloc(n ? n : 1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    n = 0;
    for (size_t i = 0; i < nb; i++)
        for (size_t j = 0; j < b[i]->n; j++) {
            const struct np_http_sample *x = &b[i]->v[j];
            v[n++] = (struct np_pprof_sample){.stack = x->stack,
                                              .pid = x->pid,
                                              .comm = x->comm,
                                              .container = x->container,
                                              .count = (int64_t)x->count,
                                              .gpu_ns = gpu ? (int64_t)x->gpu_ns : 0};
        }
    int err = np_pprof_encode_samples(v, n, time_ns, duration_ns, gpu, out, len);
    free(v);
    return err;
}

/* /pprof/...?seconds=N: the N whole seconds (of launch time) from the next
 * second boundary on, answered once the last one is read. */
static enum MHD_Result serve_pprof(struct np_http_server *s, struct MHD_Connection *c, bool gpu) {
    char msg[200];
    unsigned seconds;
    const char *arg = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "seconds");
    if (np_http_parse_seconds(arg, NP_HTTP_DEFAULT_SECONDS, NP_HTTP_RETENTION_S, &seconds, msg,
                              sizeof(msg)))
        return respond_text(c, MHD_HTTP_BAD_REQUEST, msg);
    uint64_t now = np_monotonic_ns(), real = np_realtime_ns();
    uint64_t first = now / 1000000000ull + 1, last = first + seconds - 1;
    struct np_http_bucket **b = NULL;
    size_t nb = 0;
    int err = np_http_feed_collect(s->feed, first, last, (last + 1) * 1000000000ull + WAIT_GRACE_NS,
                                   &b, &nb);
    if (err)
        return respond_text(
            c, err == -ENOMEM ? MHD_HTTP_INTERNAL_SERVER_ERROR : MHD_HTTP_SERVICE_UNAVAILABLE,
            err == -ECANCELED   ? "the daemon is stopping\n"
            : err == -ETIMEDOUT ? "the tracing loop is behind; try again\n"
                                : "out of memory\n");
    uint8_t *body = NULL;
    size_t len = 0;
    int64_t start_ns = (int64_t)(real - (now - first * 1000000000ull));
    err = encode_buckets(b, nb, gpu, start_ns, (int64_t)seconds * 1000000000, &body, &len);
    np_http_feed_release(s->feed, b, nb);
    if (err)
        return respond_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot encode the profile\n");
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    char window[64];
    snprintf(window, sizeof(window), "%llu %llu", (unsigned long long)first * 1000000000ull,
             (unsigned long long)(last + 1) * 1000000000ull);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
    MHD_add_response_header(r, "X-Ncclprobe-Window-Monotonic-Ns", window);
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
}

/* Constant time: how much of the token matched says nothing. */
static bool authorized(const struct np_http_server *s, struct MHD_Connection *c) {
    if (!s->token)
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncmp(h, "Bearer ", 7))
        return false;
    h += 7;
    size_t a = strlen(h), b = strlen(s->token);
    unsigned char diff = a != b;
    for (size_t i = 0; i < b; i++)
        diff |= (unsigned char)(s->token[i] ^ (i < a ? h[i] : 0));
    return diff == 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    (void)version, (void)upload_data, (void)con_cls;
    struct np_http_server *s = cls;
    if (*upload_data_size) { /* a body: never read, never kept */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
        return respond_text(c, MHD_HTTP_METHOD_NOT_ALLOWED,
                            "read-only: GET /metrics, /pprof/launches, /pprof/gpu_time, "
                            "/healthz\n");
    if (!authorized(s, c))
        return respond_text(c, MHD_HTTP_UNAUTHORIZED, "a bearer token is needed\n");
    if (!strcmp(url, "/healthz"))
        return respond_text(c, MHD_HTTP_OK, "ok\n");
    if (!strcmp(url, "/metrics"))
        return serve_metrics(s, c);
    if (!strcmp(url, "/pprof/launches"))
        return serve_pprof(s, c, false);
    if (!strcmp(url, "/pprof/gpu_time"))
        return serve_pprof(s, c, true);
    return respond_text(c, MHD_HTTP_NOT_FOUND,
                        "not found: GET /metrics, /pprof/launches?seconds=N, "
                        "/pprof/gpu_time?seconds=N, /healthz\n");
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    np_debug("http: %s", line);
}

/* The address, and whether it may be listened on. */
static int check_address(const struct np_http_options *o, struct sockaddr_storage *ss, char *err,
                         size_t errlen) {
    bool loopback = false;
    int rc = np_http_parse_listen(o->listen, ss, &loopback, err, errlen);
    if (rc)
        return rc;
    if (!loopback && !o->allow_remote) {
        snprintf(err, errlen,
                 "http_listen %s: not a loopback address; stacks reveal code paths, so "
                 "listening beyond this machine needs http_allow_remote = yes",
                 o->listen);
        return -EPERM;
    }
    return 0;
}

static bool has_token(const struct np_http_options *o) {
    return o->token_file && *o->token_file;
}

int np_http_check(const struct np_http_options *o, char *err, size_t errlen) {
    struct sockaddr_storage ss;
    char *token = NULL;
    int rc = check_address(o, &ss, err, errlen);
    if (!rc && has_token(o))
        rc = read_token(o->token_file, &token, err, errlen);
    free(token);
    return rc;
}

int np_http_start(const struct np_http_options *o, struct np_http_feed *feed,
                  struct np_http_server **out, char *err, size_t errlen) {
    struct sockaddr_storage ss;
    int rc = check_address(o, &ss, err, errlen);
    if (rc)
        return rc;
    struct np_http_server *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->feed = feed;
    if (has_token(o) && (rc = read_token(o->token_file, &s->token, err, errlen))) {
        free(s);
        return rc;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ERROR_LOG | (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                              (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT,
                              (unsigned)NP_HTTP_MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
                              (unsigned)NP_HTTP_IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                              (size_t)NP_HTTP_MEMORY_LIMIT, MHD_OPTION_THREAD_STACK_SIZE,
                              (size_t)STACK_SIZE, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                              MHD_OPTION_END);
    if (!s->mhd) {
        rc = errno ? -errno : -EADDRINUSE;
        snprintf(err, errlen, "http_listen %s: cannot listen: %s", o->listen, strerror(-rc));
        free(s->token);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void np_http_stop(struct np_http_server *s) {
    if (!s)
        return;
    np_http_feed_stop(s->feed);
    MHD_stop_daemon(s->mhd);
    free(s->token);
    free(s);
}
