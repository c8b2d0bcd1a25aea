/* merge.c - the offline merge from start to end (merge.h): both inputs read
 * at the same time (the trace on a thread of its own, the CPU file on the
 * caller's), their unusable parts reported, the join, the output files, then
 * the summary and the closing counts. */
#include "merge/merge.h"

#include <pthread.h>
#include <string.h>

#include "lib/util.h"
#include "merge/cpu_input.h"
#include "merge/gpu_input.h"
#include "merge/join.h"
#include "merge/output.h"
#include "merge/summary.h"

/* Everything one merge holds between reading and writing. */
struct merge_state {
    struct np_merge_cpu cpu;
    struct np_merge_gpu gpu;
    struct np_merge_result result;
};

/* The trace is read on its own thread while the caller reads the CPU file. */
struct gpu_job {
    const char *path;
    struct np_merge_gpu *gpu;
    int err;
};

static void *gpu_job_run(void *arg) {
    struct gpu_job *job = arg;
    job->err = np_merge_gpu_read(job->path, job->gpu);
    return NULL;
}

/* Both inputs, each reader saying its own errors: 0 or -errno. */
static int read_inputs(const struct np_merge_opts *opts, struct merge_state *m) {
    struct gpu_job job = {.path = opts->gpu_path, .gpu = &m->gpu};
    pthread_t thread;
    bool threaded = pthread_create(&thread, NULL, gpu_job_run, &job) == 0;

    if (!threaded)
        gpu_job_run(&job);
    int cpu_err = np_merge_cpu_read(opts->cpu_path, &m->cpu);
    if (threaded)
        pthread_join(thread, NULL);
    return cpu_err ? cpu_err : job.err;
}

static int run(const struct np_merge_opts *opts, struct merge_state *m) {
    int err = read_inputs(opts, m);
    if (err)
        return err;
    np_malformed_report(&m->cpu.malformed);
    np_malformed_report(&m->gpu.malformed);
    err = np_merge_join(&m->cpu, &m->gpu, opts->tolerance_ns, &m->result);
    if (err) {
        np_err("merge: %s", strerror(-err));
        return err;
    }
    err = np_merge_write_outputs(opts, &m->cpu, &m->gpu, &m->result);
    if (!err && opts->summary)
        err = np_merge_print_summary(&m->cpu, &m->gpu, &m->result);
    if (!err)
        np_merge_say_counts(&m->cpu, &m->gpu, &m->result);
    return err;
}

int np_merge_run(const struct np_merge_opts *opts) {
    struct merge_state m;

    np_merge_cpu_init(&m.cpu, opts->cpu_path);
    np_merge_gpu_init(&m.gpu, opts->gpu_path);
    np_merge_result_init(&m.result);
    int err = run(opts, &m);
    np_merge_result_free(&m.result);
    np_merge_gpu_free(&m.gpu);
    np_merge_cpu_free(&m.cpu);
    return err;
}
