/* feed.c - the tracing loop's hand-over to the HTTP threads (feed.h): one
 * mutex, held for a pointer swap or a copy, and a condition variable that
 * /pprof requests wait on for their window's last second. */
#define _GNU_SOURCE
#include "http/feed.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLOTS (NP_HTTP_RETENTION_S + 2)

struct np_http_feed {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    char *metrics;
    size_t metrics_len;
    struct np_http_bucket *slot[SLOTS]; /* by second % SLOTS */
    uint64_t complete;                  /* seconds up to this one are complete */
    bool stopped;
};

void np_http_bucket_free(struct np_http_bucket *b) {
    if (!b)
        return;
    for (size_t i = 0; i < b->n; i++)
        free(b->v[i].stack);
    free(b->v);
    free(b);
}

int np_http_feed_new(struct np_http_feed **out) {
    struct np_http_feed *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, &attr);
    pthread_condattr_destroy(&attr);
    *out = f;
    return 0;
}

void np_http_feed_free(struct np_http_feed *f) {
    if (!f)
        return;
    for (size_t i = 0; i < SLOTS; i++)
        np_http_bucket_free(f->slot[i]);
    free(f->metrics);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

void np_http_feed_set_metrics(struct np_http_feed *f, char *text, size_t len) {
    pthread_mutex_lock(&f->mu);
    char *old = f->metrics;
    f->metrics = text;
    f->metrics_len = len;
    pthread_mutex_unlock(&f->mu);
    free(old);
}

/* Drops one reference (under the lock): the bucket to free, or NULL. */
static struct np_http_bucket *unref(struct np_http_bucket *b) {
    return b && --b->refs == 0 ? b : NULL;
}

void np_http_feed_add_bucket(struct np_http_feed *f, struct np_http_bucket *b) {
    b->refs = 1;
    pthread_mutex_lock(&f->mu);
    struct np_http_bucket **slot = &f->slot[b->second % SLOTS];
    struct np_http_bucket *old = unref(*slot);
    *slot = b;
    pthread_mutex_unlock(&f->mu);
    np_http_bucket_free(old);
}

void np_http_feed_complete(struct np_http_feed *f, uint64_t second) {
    pthread_mutex_lock(&f->mu);
    if (second > f->complete) {
        f->complete = second;
        pthread_cond_broadcast(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
}

void np_http_feed_stop(struct np_http_feed *f) {
    pthread_mutex_lock(&f->mu);
    f->stopped = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

char *np_http_feed_metrics(struct np_http_feed *f, size_t *len) {
    pthread_mutex_lock(&f->mu);
    char *copy = f->metrics ? malloc(f->metrics_len + 1) : NULL;
    if (copy) {
        memcpy(copy, f->metrics, f->metrics_len + 1);
        *len = f->metrics_len;
    }
    pthread_mutex_unlock(&f->mu);
    return copy;
}

/* Waits for second `last` to be complete; 0, or -errno (the lock held either way). */
static int wait_complete(struct np_http_feed *f, uint64_t last, uint64_t deadline_ns) {
    struct timespec until = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
                             .tv_nsec = (long)(deadline_ns % 1000000000ull)};
    while (!f->stopped && f->complete < last)
        if (pthread_cond_timedwait(&f->cv, &f->mu, &until) == ETIMEDOUT)
            return f->complete < last ? -ETIMEDOUT : 0;
    return f->stopped ? -ECANCELED : 0;
}

int np_http_feed_collect(struct np_http_feed *f, uint64_t first, uint64_t last,
                         uint64_t deadline_ns, struct np_http_bucket ***out, size_t *n) {
    struct np_http_bucket **held = calloc(SLOTS, sizeof(*held));
    if (!held)
        return -ENOMEM;
    *n = 0;
    pthread_mutex_lock(&f->mu);
    int err = wait_complete(f, last, deadline_ns);
    for (uint64_t s = first; !err && s <= last; s++) {
        struct np_http_bucket *b = f->slot[s % SLOTS];
        if (b && b->second == s) {
            b->refs++;
            held[(*n)++] = b;
        }
    }
    pthread_mutex_unlock(&f->mu);
    if (err) {
        free(held);
        return err;
    }
    *out = held;
    return 0;
}

void np_http_feed_release(struct np_http_feed *f, struct np_http_bucket **b, size_t n) {
    struct np_http_bucket *gone[SLOTS];
    size_t ngone = 0;
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < n && ngone < SLOTS; i++)
        if ((gone[ngone] = unref(b[i])))
            ngone++;
    pthread_mutex_unlock(&f->mu);
    for (size_t i = 0; i < ngone; i++)
        np_http_bucket_free(gone[i]);
    free(b);
}
