/* driver_names.c - names driver kernels right after cuInit, as a program
 * that loads its kernels at start-up does, using the test double
 * libfakecuda.so (see fake_cuda_driver.c).
 *
 *   driver_names [--iters N] [--wait-signal]
 *
 * The four kernel names share one page of .rodata that this process has not
 * touched yet when the first one is passed to cuModuleGetFunction (the page
 * is dropped from its page tables with MADV_DONTNEED right before, so
 * nothing that ran earlier - nor the kernel's fault-around - mapped it): the
 * driver's look-up of that first name is what maps it. Then main ->
 * load_kernels -> cuModuleGetFunction x 4 (names in this order:
 * alpha_kernel, _Z11beta_kernelPfi, gamma_kernel, delta_kernel), and
 * --iters times (default 3) main -> launch_all -> cuLaunchKernel of each,
 * in that order. With --wait-signal, cuInit runs, then "ready" is printed
 * and SIGUSR1 awaited. Prints `kernel=K launches=N` per kernel
 * (beta_kernel for the mangled name). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "progs_common.h"

typedef int CUresult;
typedef void *CUfunction;

CUresult cuInit(unsigned flags);
CUresult cuModuleGetFunction(CUfunction *hfunc, void *hmod, const char *name);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shmem, void *stream, void **params,
                        void **extra);

#define NKERNELS 4
#define PAGE 4096

/* One page of its own: nothing else in it is read before the first name. */
static const char names[NKERNELS][64] __attribute__((aligned(PAGE))) = {
    "alpha_kernel", "_Z11beta_kernelPfi", "gamma_kernel", "delta_kernel"};
static const char *const shown[NKERNELS] = {"alpha_kernel", "beta_kernel", "gamma_kernel",
                                            "delta_kernel"};

static CUfunction funcs[NKERNELS];

NOINLINE static int load_kernels(void) {
    for (int i = 0; i < NKERNELS; i++)
        if (cuModuleGetFunction(&funcs[i], (void *)0x10, names[i]) != 0)
            return -1;
    KEEP_FRAME();
    return 0;
}

NOINLINE static void launch_all(void) {
    for (int i = 0; i < NKERNELS; i++)
        cuLaunchKernel(funcs[i], (unsigned)i + 1, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL);
    KEEP_FRAME();
}

int main(int argc, char **argv) {
    long iters = 3;
    int wait_signal = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
            iters = progs_parse_long("--iters", argv[++i], 1);
        else if (strcmp(argv[i], "--wait-signal") == 0)
            wait_signal = 1;
        else {
            fprintf(stderr, "usage: driver_names [--iters N] [--wait-signal]\n");
            return PROGS_EXIT_USAGE;
        }
    }
    if (cuInit(0) != 0) {
        fprintf(stderr, "driver_names: cuInit failed\n");
        return PROGS_EXIT_RUNTIME;
    }
    if (wait_signal) {
        progs_block_start_signal();
        progs_announce_ready();
        progs_wait_start_signal();
    }
    /* the names' page is not in this process's page tables now */
    if (madvise((void *)(uintptr_t)names, PAGE, MADV_DONTNEED) != 0) {
        perror("driver_names: madvise");
        return PROGS_EXIT_RUNTIME;
    }
    if (load_kernels() != 0) {
        fprintf(stderr, "driver_names: cuModuleGetFunction failed\n");
        return PROGS_EXIT_RUNTIME;
    }
    for (long i = 0; i < iters; i++) {
        launch_all();
        KEEP_FRAME();
    }
    for (int i = 0; i < NKERNELS; i++)
        printf("kernel=%s launches=%ld\n", shown[i], iters);
    fflush(stdout);
    return PROGS_EXIT_OK;
}
