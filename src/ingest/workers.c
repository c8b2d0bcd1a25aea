/* workers.c - the reader's worker threads (see workers.h): per worker a
 * FIFO of jobs, a lock, and two condition variables - one the worker sleeps
 * on while its queue is empty, one the submitter sleeps on while the job it
 * waits for runs. Each is signalled only when someone sleeps on it, and the
 * submitter first spins a little on the job's done flag: a stack takes a
 * microsecond or two, less than a sleep and a wake-up cost on a VM. */
#define _GNU_SOURCE
#include "ingest/workers.h"

#include <errno.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

struct worker {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work, done; /* jobs queued; a job done */
    struct np_job *head, *tail;
    uint64_t queued, ran; /* jobs ever queued, ever run */
    bool idle;            /* sleeping on work */
    bool waited;          /* the submitter sleeps on done */
    bool stop;
};

struct np_workers {
    unsigned n;
    struct worker w[];
};

static void *worker_main(void *arg) {
    struct worker *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->head && !w->stop) {
            w->idle = true;
            pthread_cond_wait(&w->work, &w->lock);
            w->idle = false;
        }
        if (!w->head)
            break; /* stopped, and nothing left to run */
        struct np_job *job = w->head;
        w->head = job->next;
        if (!w->head)
            w->tail = NULL;
        pthread_mutex_unlock(&w->lock);
        job->run(job);
        pthread_mutex_lock(&w->lock);
        __atomic_store_n(&job->done, true, __ATOMIC_RELEASE); /* the job's results before it */
        w->ran++;
        if (w->waited)
            pthread_cond_signal(&w->done);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static void stop_workers(struct np_workers *ws, unsigned started) {
    for (unsigned i = 0; i < started; i++) {
        struct worker *w = &ws->w[i];
        pthread_mutex_lock(&w->lock);
        w->stop = true;
        pthread_cond_signal(&w->work);
        pthread_mutex_unlock(&w->lock);
        pthread_join(w->thread, NULL);
    }
    for (unsigned i = 0; i < ws->n; i++) {
        pthread_mutex_destroy(&ws->w[i].lock);
        pthread_cond_destroy(&ws->w[i].work);
        pthread_cond_destroy(&ws->w[i].done);
    }
    free(ws);
}

int np_workers_start(unsigned n, struct np_workers **out) {
    if (n == 0 || n > NP_WORKERS_MAX)
        return -EINVAL;
    struct np_workers *ws = calloc(1, sizeof(*ws) + n * sizeof(ws->w[0]));
    if (!ws)
        return -ENOMEM;
    ws->n = n;
    for (unsigned i = 0; i < n; i++) {
        pthread_mutex_init(&ws->w[i].lock, NULL);
        pthread_cond_init(&ws->w[i].work, NULL);
        pthread_cond_init(&ws->w[i].done, NULL);
    }
    for (unsigned i = 0; i < n; i++) {
        int err = pthread_create(&ws->w[i].thread, NULL, worker_main, &ws->w[i]);
        if (err) {
            stop_workers(ws, i);
            return -err;
        }
        char name[16];
        snprintf(name, sizeof(name), "np-unwind-%u", i);
        pthread_setname_np(ws->w[i].thread, name);
    }
    *out = ws;
    return 0;
}

void np_workers_stop(struct np_workers *ws) {
    if (ws)
        stop_workers(ws, ws->n);
}

unsigned np_workers_count(const struct np_workers *ws) {
    return ws->n;
}

static struct worker *worker_of(struct np_workers *ws, uint64_t key) {
    return &ws->w[key % ws->n];
}

void np_workers_submit(struct np_workers *ws, uint64_t key, struct np_job *job) {
    struct worker *w = worker_of(ws, key);
    job->next = NULL;
    job->done = false;
    pthread_mutex_lock(&w->lock);
    if (w->tail)
        w->tail->next = job;
    else
        w->head = job;
    w->tail = job;
    w->queued++;
    if (w->idle)
        pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->lock);
}

/* How long np_workers_wait spins on a job before it sleeps. */
#define SPIN_NS 5000

static bool spun_done(const struct np_job *job) {
    uint64_t until = np_monotonic_ns() + SPIN_NS;
    for (unsigned i = 1;; i++) {
        if (__atomic_load_n(&job->done, __ATOMIC_ACQUIRE))
            return true;
        _mm_pause();
        if (i % 64 == 0 && np_monotonic_ns() >= until)
            return false;
    }
}

static void wait_locked(struct worker *w, const struct np_job *job) {
    while (job ? !__atomic_load_n(&job->done, __ATOMIC_ACQUIRE) : w->ran < w->queued) {
        w->waited = true;
        pthread_cond_wait(&w->done, &w->lock);
        w->waited = false;
    }
}

void np_workers_wait(struct np_workers *ws, uint64_t key, struct np_job *job) {
    if (spun_done(job))
        return;
    struct worker *w = worker_of(ws, key);
    pthread_mutex_lock(&w->lock);
    wait_locked(w, job);
    pthread_mutex_unlock(&w->lock);
}

void np_workers_wait_all(struct np_workers *ws) {
    for (unsigned i = 0; i < ws->n; i++) {
        pthread_mutex_lock(&ws->w[i].lock);
        wait_locked(&ws->w[i], NULL);
        pthread_mutex_unlock(&ws->w[i].lock);
    }
}

uint64_t np_workers_jobs_run(struct np_workers *ws, unsigned i) {
    pthread_mutex_lock(&ws->w[i].lock);
    uint64_t n = ws->w[i].ran;
    pthread_mutex_unlock(&ws->w[i].lock);
    return n;
}
