/* unwind_chain: the oracle workload for ncclprobe's stack unwinding. One CUDA launch per
 * iteration along a call chain through three objects, of which only the middle one keeps frame
 * pointers:
 *
 *   main -> app_run -> app_step                       (this executable, -fomit-frame-pointer)
 *   worker_thread -> app_run -> app_step              (same, with --threads N)
 *     -> mid_dispatch -> mid_forward                  (libunwind_a.so, -fno-omit-frame-pointer)
 *     -> launcher_entry -> ns::Launcher<float>::go
 *        -> ns::launch_impl<float>                    (libunwind_b.so, C++, -fomit-frame-pointer)
 *     -> cudaLaunchKernel(unwind_kernel, {2,1,1}, {64,1,1}, args, 0, 0x5020)
 *
 * Every link is a real call (no inlining, cloning or tail calls); the frames reserve hundreds of
 * bytes of stack. Prints, per launching thread: thread tid=<tid> variant=rt launches=<n> */
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>

#include "progs_common.h"
#include "unwind_api.h"

struct worker {
    pthread_t thread;
    long tid;
    long launches;
};

static long opt_iters = 3;
static bool opt_wait_signal;
static pthread_barrier_t start_gate;

UNWIND_NOINLINE int app_step(int iter) {
    volatile char scratch[384];
    scratch[0] = (char)iter;
    int status = mid_dispatch(iter);
    KEEP_FRAME();
    return status + scratch[0] - (char)iter;
}

/* Launches opt_iters times; returns the number of launches made. */
UNWIND_NOINLINE long app_run(long iters) {
    volatile char scratch[256];
    long launches = 0;
    for (long i = 0; i < iters; i++) {
        scratch[i % (long)sizeof(scratch)] = (char)i;
        (void)app_step((int)i);
        KEEP_FRAME();
        launches++;
    }
    return launches;
}

static void *worker_thread(void *arg) {
    struct worker *w = arg;
    w->tid = progs_gettid();
    pthread_barrier_wait(&start_gate);
    w->launches = app_run(opt_iters);
    KEEP_FRAME();
    return NULL;
}

static void usage(FILE *out) {
    fprintf(out, "usage: unwind_chain [--iters N] [--threads N] [--wait-signal]\n");
}

int main(int argc, char **argv) {
    static const struct option long_opts[] = {
        {"iters", required_argument, NULL, 'i'},
        {"threads", required_argument, NULL, 't'},
        {"wait-signal", no_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long threads = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        switch (opt) {
        case 'i':
            opt_iters = progs_parse_long("--iters", optarg, 0);
            break;
        case 't':
            threads = progs_parse_long("--threads", optarg, 0);
            break;
        case 'w':
            opt_wait_signal = true;
            break;
        case 'h':
            usage(stdout);
            return PROGS_EXIT_OK;
        default:
            usage(stderr);
            return PROGS_EXIT_USAGE;
        }
    }
    if (optind != argc || threads > 1024) {
        usage(stderr);
        return PROGS_EXIT_USAGE;
    }

    if (opt_wait_signal)
        progs_block_start_signal();
    struct worker *workers = NULL;
    if (threads > 0) {
        workers = calloc((size_t)threads, sizeof(*workers));
        if (!workers || pthread_barrier_init(&start_gate, NULL, (unsigned)threads + 1) != 0)
            return PROGS_EXIT_RUNTIME;
        for (long t = 0; t < threads; t++)
            if (pthread_create(&workers[t].thread, NULL, worker_thread, &workers[t]) != 0) {
                fprintf(stderr, "unwind_chain: pthread_create failed\n");
                return PROGS_EXIT_RUNTIME;
            }
    }
    if (opt_wait_signal) {
        progs_announce_ready();
        progs_wait_start_signal();
    }

    if (threads == 0) {
        long launches = app_run(opt_iters);
        KEEP_FRAME();
        printf("thread tid=%ld variant=rt launches=%ld\n", progs_gettid(), launches);
    } else {
        pthread_barrier_wait(&start_gate);
        for (long t = 0; t < threads; t++)
            pthread_join(workers[t].thread, NULL);
        for (long t = 0; t < threads; t++)
            printf("thread tid=%ld variant=rt launches=%ld\n", workers[t].tid, workers[t].launches);
        free(workers);
    }
    fflush(stdout);
    return PROGS_EXIT_OK;
}
