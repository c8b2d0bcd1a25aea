/* late_loader: a process that does NOT link libcudart. It starts, announces itself, waits for
 * SIGUSR1, and only then dlopen()s libcudart.so.13 and launches through it — for testing that
 * ncclprobe notices a CUDA runtime mapped after it attached:
 *
 *   main -> late_launch -> cudaLaunchKernel (resolved with dlsym), func = late_kernel */
#include <dlfcn.h>
#include <getopt.h>
#include <stdbool.h>

#include "progs_common.h"

#ifndef DEFAULT_CUDART_PATH
#define DEFAULT_CUDART_PATH "/usr/local/cuda/lib64/libcudart.so.13"
#endif

/* ABI-compatible with CUDA's dim3 / cudaLaunchKernel; declared here so this program needs no
 * CUDA headers at all. */
struct dim3_abi {
    unsigned x, y, z;
};
typedef int (*launch_kernel_fn)(const void *func, struct dim3_abi grid, struct dim3_abi block,
                                void **args, size_t shared_mem, void *stream);

/* Stand-in "kernel": never executed; its address is the func argument of every launch. */
NOINLINE void late_kernel(float *data, int n) {
    for (int i = 0; i < n; i++)
        data[i] *= 0.5f;
}

/* Launches late_kernel `iters` times: grid {4,1,1}, block {256,1,1}, 0 bytes shared memory, the
 * default (NULL) stream — a valid handle even for a real driver, which this program may load.
 * Returns the number of launches made. */
NOINLINE long late_launch(launch_kernel_fn launch, long iters) {
    float value = 1.0f;
    float *data = &value;
    int n = 1;
    void *args[] = {&data, &n};
    struct dim3_abi grid = {4, 1, 1}, block = {256, 1, 1};
    long launches = 0;
    for (long i = 0; i < iters; i++) {
        launch((const void *)late_kernel, grid, block, args, 0, NULL);
        KEEP_FRAME();
        launches++;
    }
    return launches;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: late_loader [--iters N] [--settle-ms N] [--no-wait] [CUDART_PATH]\n"
            "       (library path: argument, else $CUDART_PATH, else " DEFAULT_CUDART_PATH ")\n");
}

int main(int argc, char **argv) {
    static const struct option long_opts[] = {
        {"iters", required_argument, NULL, 'i'},
        {"settle-ms", required_argument, NULL, 's'},
        {"no-wait", no_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long iters = 5, settle_ms = 300;
    bool wait_signal = true;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        switch (opt) {
        case 'i':
            iters = progs_parse_long("--iters", optarg, 0);
            break;
        case 's':
            settle_ms = progs_parse_long("--settle-ms", optarg, 0);
            break;
        case 'n':
            wait_signal = false;
            break;
        case 'h':
            usage(stdout);
            return PROGS_EXIT_OK;
        default:
            usage(stderr);
            return PROGS_EXIT_USAGE;
        }
    }
    if (argc - optind > 1) {
        usage(stderr);
        return PROGS_EXIT_USAGE;
    }
    const char *path = optind < argc ? argv[optind] : getenv("CUDART_PATH");
    if (!path || !*path)
        path = DEFAULT_CUDART_PATH;

    if (wait_signal) {
        progs_block_start_signal();
        progs_announce_ready();
        progs_wait_start_signal();
    }

    void *cudart = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!cudart) {
        fprintf(stderr, "late_loader: dlopen %s: %s\n", path, dlerror());
        return PROGS_EXIT_RUNTIME;
    }
    launch_kernel_fn launch = (launch_kernel_fn)dlsym(cudart, "cudaLaunchKernel");
    if (!launch) {
        fprintf(stderr, "late_loader: dlsym cudaLaunchKernel: %s\n", dlerror());
        return PROGS_EXIT_RUNTIME;
    }
    printf("loaded\n");
    fflush(stdout);
    progs_sleep_us(settle_ms * 1000);

    long launches = late_launch(launch, iters);
    KEEP_FRAME();
    printf("thread tid=%ld variant=rt launches=%ld\n", progs_gettid(), launches);
    fflush(stdout);
    return PROGS_EXIT_OK;
}
