/* workers.h - the reader's worker threads: a fixed set of threads, each
 * running the jobs given to it in the order given. Jobs of one key (ingest
 * gives each process its worker) run on one thread, one after another;
 * jobs of different workers run at once.
 *
 * One thread submits and waits (the session's); a job is the submitter's
 * memory, embedded in whatever it describes, and is never freed by the
 * pool. What a job may touch while it runs is the submitter's rule (see
 * ingest.c, "Worker threads"). */
#ifndef NP_INGEST_WORKERS_H
#define NP_INGEST_WORKERS_H

#include <stdbool.h>
#include <stdint.h>

struct np_job {
    void (*run)(struct np_job *job);
    struct np_job *next; /* in its worker's queue */
    bool done;           /* set by the worker once run returned (atomic, release) */
};

struct np_workers;

/* Starts n threads (1..NP_WORKERS_MAX); -errno when one cannot be started
 * (those started are stopped). */
#define NP_WORKERS_MAX 64
int np_workers_start(unsigned n, struct np_workers **out);
/* Waits for every job given, then stops the threads and frees the pool. */
void np_workers_stop(struct np_workers *w);
unsigned np_workers_count(const struct np_workers *w);

/* Queues job on the worker that runs key's jobs (key % count). */
void np_workers_submit(struct np_workers *w, uint64_t key, struct np_job *job);
/* Returns once job (submitted with key) has run. */
void np_workers_wait(struct np_workers *w, uint64_t key, struct np_job *job);
/* Returns once every job submitted so far has run. */
void np_workers_wait_all(struct np_workers *w);
/* Jobs worker i has run. */
uint64_t np_workers_jobs_run(struct np_workers *w, unsigned i);

#endif
