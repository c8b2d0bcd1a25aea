/* deep_recursion: builds a very deep user stack before a single CUDA launch, for testing how
 * ncclprobe truncates stacks deeper than its limit:
 *
 *   main -> recurse(N) -> recurse(N-1) -> ... -> recurse(1) -> cudaLaunchKernel
 *
 * i.e. exactly N `recurse` frames (default 300), each a real frame (no tail calls). */
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "cuda_api.h"
#include "progs_common.h"

/* Stand-in "kernel": never executed; its address is the launch's func argument. */
NOINLINE void deep_kernel(float *data, int n) {
    for (int i = 0; i < n; i++)
        data[i] += 1.0f;
}

/* Launches deep_kernel once at the deepest level: grid {1,1,1}, block {32,1,1}, no shared memory,
 * the default (NULL) stream. */
NOINLINE int recurse(int depth) {
    int status;
    if (depth > 1) {
        status = recurse(depth - 1);
    } else {
        dim3 grid = {1, 1, 1}, block = {32, 1, 1};
        status = cudaLaunchKernel((const void *)deep_kernel, grid, block, NULL, 0, NULL);
    }
    KEEP_FRAME();
    return status;
}

static void usage(FILE *out) {
    fprintf(out, "usage: deep_recursion [--depth N | --depths N,N,...] [--repeat N] "
                 "[--sleep-us N] [--thread] [--wait-signal]\n");
}

/* What to launch: at each depth of the list in turn, `repeat` times, with a
 * pause between launches (so a tracer's reader keeps up). */
struct plan {
    long depths[64];
    int ndepths;
    long repeat, sleep_us;
    long launches;
};

static int parse_depths(struct plan *p, char *list) {
    p->ndepths = 0;
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (p->ndepths == 64)
            return -1;
        p->depths[p->ndepths] = progs_parse_long("--depths", tok, 1);
        if (p->depths[p->ndepths++] > 100000)
            return -1;
    }
    return p->ndepths ? 0 : -1;
}

NOINLINE static void *run_plan(void *arg) {
    struct plan *p = arg;
    for (int d = 0; d < p->ndepths; d++)
        for (long i = 0; i < p->repeat; i++) {
            recurse((int)p->depths[d]);
            p->launches++;
            if (p->sleep_us)
                usleep((useconds_t)p->sleep_us);
        }
    printf("thread tid=%ld variant=rt launches=%ld\n", progs_gettid(), p->launches);
    fflush(stdout);
    return NULL;
}

int main(int argc, char **argv) {
    static const struct option long_opts[] = {
        {"depth", required_argument, NULL, 'd'},  {"depths", required_argument, NULL, 'D'},
        {"repeat", required_argument, NULL, 'r'}, {"sleep-us", required_argument, NULL, 's'},
        {"thread", no_argument, NULL, 't'},       {"wait-signal", no_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    static struct plan plan = {.depths = {300}, .ndepths = 1, .repeat = 1};
    bool wait_signal = false, on_thread = false;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        switch (opt) {
        case 'd':
            plan.depths[0] = progs_parse_long("--depth", optarg, 1);
            plan.ndepths = 1;
            break;
        case 'D':
            if (parse_depths(&plan, optarg) < 0) {
                usage(stderr);
                return PROGS_EXIT_USAGE;
            }
            break;
        case 'r':
            plan.repeat = progs_parse_long("--repeat", optarg, 1);
            break;
        case 's':
            plan.sleep_us = progs_parse_long("--sleep-us", optarg, 0);
            break;
        case 't':
            on_thread = true;
            break;
        case 'w':
            wait_signal = true;
            break;
        case 'h':
            usage(stdout);
            return PROGS_EXIT_OK;
        default:
            usage(stderr);
            return PROGS_EXIT_USAGE;
        }
    }
    if (optind != argc || plan.depths[0] > 100000) {
        usage(stderr);
        return PROGS_EXIT_USAGE;
    }
    if (wait_signal) {
        progs_block_start_signal();
        progs_announce_ready();
        progs_wait_start_signal();
    }
    if (!on_thread) {
        run_plan(&plan);
        KEEP_FRAME();
        return PROGS_EXIT_OK;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, run_plan, &plan) != 0 || pthread_join(t, NULL) != 0)
        return PROGS_EXIT_RUNTIME;
    return PROGS_EXIT_OK;
}
