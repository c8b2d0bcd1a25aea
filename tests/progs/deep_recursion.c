/* deep_recursion: builds a very deep user stack before a single CUDA launch, for testing how
 * ncclprobe truncates stacks deeper than its limit:
 *
 *   main -> recurse(N) -> recurse(N-1) -> ... -> recurse(1) -> cudaLaunchKernel
 *
 * i.e. exactly N `recurse` frames (default 300), each a real frame (no tail calls). */
#include <getopt.h>
#include <stdbool.h>

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
    fprintf(out, "usage: deep_recursion [--depth N] [--wait-signal]\n");
}

int main(int argc, char **argv) {
    static const struct option long_opts[] = {
        {"depth", required_argument, NULL, 'd'},
        {"wait-signal", no_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long depth = 300;
    bool wait_signal = false;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        switch (opt) {
        case 'd':
            depth = progs_parse_long("--depth", optarg, 1);
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
    if (optind != argc || depth > 100000) {
        usage(stderr);
        return PROGS_EXIT_USAGE;
    }
    if (wait_signal) {
        progs_block_start_signal();
        progs_announce_ready();
        progs_wait_start_signal();
    }

    recurse((int)depth);
    KEEP_FRAME();
    printf("thread tid=%ld variant=rt launches=1\n", progs_gettid());
    fflush(stdout);
    return PROGS_EXIT_OK;
}
