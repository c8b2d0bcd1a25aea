/* driver_user.c - launches through the driver API with handles from
 * cuModuleGetFunction and cuLibraryGetKernel + cuKernelGetFunction, using
 * the test double libfakecuda.so (see fake_cuda_driver.c).
 *
 *   driver_user [--iters N] [--wait-signal]
 *
 * With --wait-signal, the handle `early` is created before "ready" is
 * printed (a tracer attached later never sees where it came from); the
 * other handles are created after SIGUSR1. Each iteration launches
 * matmul_tile (cuLaunchKernel), softmax_kernel (cuLaunchKernelEx) and
 * early (cuLaunchKernel). Prints `thread tid=T kernel=K launches=N`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "progs_common.h"

typedef int CUresult;
typedef void *CUfunction, *CUkernel;
typedef struct {
    unsigned grid[3], block[3], shmem;
    void *stream, *attrs;
    unsigned nattrs;
} launch_config;

CUresult cuModuleGetFunction(CUfunction *hfunc, void *hmod, const char *name);
CUresult cuLibraryGetKernel(CUkernel *pKernel, void *library, const char *name);
CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shmem, void *stream, void **params,
                        void **extra);
CUresult cuLaunchKernelEx(const launch_config *config, CUfunction f, void **params, void **extra);

static CUfunction matmul, softmax, early;

NOINLINE static void load_early(void) {
    cuModuleGetFunction(&early, (void *)0x10, "early_kernel");
    KEEP_FRAME();
}

NOINLINE static void load_kernels(void) {
    CUkernel k = NULL;
    cuModuleGetFunction(&matmul, (void *)0x10, "_Z11matmul_tilePfS_S_i");
    cuLibraryGetKernel(&k, (void *)0x20, "softmax_kernel");
    cuKernelGetFunction(&softmax, k);
    KEEP_FRAME();
}

NOINLINE static void run_step(void) {
    launch_config cfg = {{4, 1, 1}, {128, 1, 1}, 0, NULL, NULL, 0};
    cuLaunchKernel(matmul, 8, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
    cuLaunchKernelEx(&cfg, softmax, NULL, NULL);
    cuLaunchKernel(early, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
    KEEP_FRAME();
}

int main(int argc, char **argv) {
    long iters = 5;
    int wait_signal = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
            iters = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--wait-signal") == 0)
            wait_signal = 1;
        else {
            fprintf(stderr, "usage: driver_user [--iters N] [--wait-signal]\n");
            return PROGS_EXIT_USAGE;
        }
    }
    load_early();
    if (wait_signal) {
        progs_block_start_signal();
        progs_announce_ready();
        progs_wait_start_signal();
    }
    load_kernels();
    for (long i = 0; i < iters; i++) {
        run_step();
        KEEP_FRAME();
    }
    long tid = progs_gettid();
    printf("thread tid=%ld kernel=matmul_tile launches=%ld\n", tid, iters);
    printf("thread tid=%ld kernel=softmax_kernel launches=%ld\n", tid, iters);
    printf("thread tid=%ld kernel=early_kernel launches=%ld\n", tid, iters);
    fflush(stdout);
    return PROGS_EXIT_OK;
}
