/* feed.h - what the daemon's tracing loop hands its HTTP threads, without
 * ever waiting on them: the /metrics text (replaced whole once a second; a
 * reader copies it under a mutex held only for that copy) and the live
 * profile, one bucket per second of launch time (CLOCK_MONOTONIC), the last
 * NP_HTTP_RETENTION_S of them kept. A bucket is immutable once published
 * and reference counted, so a /pprof request sums the buckets of its window
 * after the lock is released, and concurrent requests share them. */
#ifndef NP_HTTP_FEED_H
#define NP_HTTP_FEED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NP_HTTP_RETENTION_S 60 /* the longest /pprof window: seconds of buckets kept */

/* Launches (and their GPU time) of one stack, kernel and process in one second. */
struct np_http_sample {
    char *stack; /* folded: frame;...;[GPU_Kernel]NAME, owned */
    int32_t pid;
    char comm[17];
    char container[65];
    uint64_t count, gpu_ns;
};

struct np_http_bucket {
    uint64_t second; /* CLOCK_MONOTONIC second of its launches */
    struct np_http_sample *v;
    size_t n, cap;
    int refs; /* the feed's and readers' (under the feed's lock) */
};

struct np_http_feed;

int np_http_feed_new(struct np_http_feed **out);
/* After every reader is gone (the server stopped). */
void np_http_feed_free(struct np_http_feed *f);

/* ---- the tracing loop ---- */
/* The /metrics text, taken over (text malloc'ed, len bytes). */
void np_http_feed_set_metrics(struct np_http_feed *f, char *text, size_t len);
/* A finished bucket, taken over (malloc'ed, refs 0); it replaces the one of
 * NP_HTTP_RETENTION_S seconds before. */
void np_http_feed_add_bucket(struct np_http_feed *f, struct np_http_bucket *b);
/* Every launch of seconds up to `second` has been read: a /pprof request
 * waiting for it answers. */
void np_http_feed_complete(struct np_http_feed *f, uint64_t second);
/* Wakes every waiting request (they answer 503) and refuses new waits. */
void np_http_feed_stop(struct np_http_feed *f);
void np_http_bucket_free(struct np_http_bucket *b);

/* ---- the HTTP threads ---- */
/* A copy of the /metrics text (malloc'ed; NULL: none yet or no memory). */
char *np_http_feed_metrics(struct np_http_feed *f, size_t *len);
/* Waits until the seconds first..last are complete (or the feed stops, or
 * deadline_ns of CLOCK_MONOTONIC passes), then holds a reference to each of
 * their buckets that is kept: *out (malloc'ed array, *n of them; release
 * with np_http_feed_release). 0; -ECANCELED (stopped), -ETIMEDOUT, -ENOMEM. */
int np_http_feed_collect(struct np_http_feed *f, uint64_t first, uint64_t last,
                         uint64_t deadline_ns, struct np_http_bucket ***out, size_t *n);
void np_http_feed_release(struct np_http_feed *f, struct np_http_bucket **b, size_t n);

#endif
