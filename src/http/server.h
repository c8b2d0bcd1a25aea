/* server.h - the daemon's read-only HTTP endpoints (docs/daemon.md, "HTTP"):
 * /metrics (Prometheus text 0.0.4), /pprof/launches and /pprof/gpu_time
 * (delta profiles of the next N seconds), /healthz. Served by libmicrohttpd
 * in its own threads (one per connection, a bounded number of them), from
 * what the tracing loop publishes in a struct np_http_feed: a client, slow
 * or hostile, can hold a connection slot, never the tracing loop. */
#ifndef NP_HTTP_SERVER_H
#define NP_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "http/feed.h"

#define NP_HTTP_DEFAULT_SECONDS 10
#define NP_HTTP_MAX_CONNECTIONS 32
#define NP_HTTP_IDLE_TIMEOUT_S 10
#define NP_HTTP_MEMORY_LIMIT (32u << 10) /* per connection: the request's header included */
#define NP_HTTP_TOKEN_MAX 4096

struct np_http_options {
    const char *listen;     /* "ADDR:PORT", a numeric IPv4 or [IPv6] address */
    bool allow_remote;      /* a non-loopback address is refused without it */
    const char *token_file; /* NULL or "": no token */
};

struct np_http_server;

/* Checks the address and the token file, without listening (the daemon does
 * before it loads anything): 0, or -errno with err, as np_http_start. */
int np_http_check(const struct np_http_options *o, char *err, size_t errlen);
/* Checks the address and the token file, then listens. 0, or -errno with
 * err saying what is wrong (the address, the token file's mode, ...). */
int np_http_start(const struct np_http_options *o, struct np_http_feed *feed,
                  struct np_http_server **out, char *err, size_t errlen);
/* Waiting requests answer 503, every connection closes; NULL is fine. */
void np_http_stop(struct np_http_server *s);

/* The address part of "ADDR:PORT" parsed into *ss (exposed for tests):
 * 0, or -EINVAL with err. loopback: 127.0.0.0/8 or ::1. */
struct sockaddr_storage;
int np_http_parse_listen(const char *text, struct sockaddr_storage *ss, bool *loopback, char *err,
                         size_t errlen);

#endif
