/* liblaunch_b.so: the library that actually calls the CUDA launch APIs, one per launcher
 * variant, with fixed, recognizable arguments (grid/block/shared memory/stream values) that the
 * ncclprobe tests assert. Without a GPU every call returns an error, which is ignored. */
#include <stdint.h>

#include "cuda_api.h"
#include "launch_api.h"
#include "progs_common.h"

#ifdef HAVE_LIBKERN
#include "kern.h"
#endif

/* Stand-in "kernel": never executed; only its address is passed to the runtime launches. */
NOINLINE void vector_add_kernel(const float *a, const float *b, float *c, int n) {
    for (int i = 0; i < n; i++)
        c[i] = a[i] + b[i];
}

int libb_variant_available(int variant) {
#ifndef HAVE_LIBKERN
    if (variant == VARIANT_RT13)
        return 0;
#endif
    return variant >= 0 && variant < VARIANT_COUNT;
}

static dim3 make_dim3(unsigned x, unsigned y, unsigned z) {
    dim3 d = {x, y, z};
    return d;
}

#define STREAM(value) ((cudaStream_t)(uintptr_t)(value))
#define CU_STREAM(value) ((CUstream)(uintptr_t)(value))

/* Performs one launch of `variant`; every API call is made directly from this frame. */
NOINLINE int libb_launch(int variant) {
    float a = 1.0f, b = 2.0f, c = 0.0f;
    float *pa = &a, *pb = &b, *pc = &c;
    int n = 1;
    void *args[] = {&pa, &pb, &pc, &n};
    const void *kernel = (const void *)vector_add_kernel;
    int status;

    switch (variant) {
    case VARIANT_RT:
        status = cudaLaunchKernel(kernel, make_dim3(2, 3, 4), make_dim3(32, 1, 1), args, 128,
                                  STREAM(0x5000));
        break;
    case VARIANT_RT_PTSZ:
        status = cudaLaunchKernel_ptsz(kernel, make_dim3(2, 3, 4), make_dim3(32, 1, 1), args, 128,
                                       STREAM(0x5000));
        break;
    case VARIANT_RT_EXC: {
        cudaLaunchConfig_t cfg = {
            .gridDim = make_dim3(5, 6, 7),
            .blockDim = make_dim3(64, 1, 1),
            .dynamicSmemBytes = 256,
            .stream = STREAM(0x5001),
            .attrs = NULL,
            .numAttrs = 0,
        };
        status = cudaLaunchKernelExC(&cfg, kernel, args);
        break;
    }
    case VARIANT_RT_COOP:
        status = cudaLaunchCooperativeKernel(kernel, make_dim3(8, 1, 1), make_dim3(128, 1, 1), args,
                                             0, STREAM(0x5002));
        break;
    case VARIANT_GRAPH:
        status = cudaGraphLaunch((cudaGraphExec_t)(uintptr_t)0x6000, STREAM(0x5003));
        break;
    case VARIANT_DRV:
        status = cuLaunchKernel((CUfunction)(uintptr_t)0x7000, 9, 1, 1, 256, 1, 1, 512,
                                CU_STREAM(0x5004), NULL, NULL);
        break;
    case VARIANT_DRV_EX: {
        CUlaunchConfig cfg = {
            .gridDimX = 10,
            .gridDimY = 1,
            .gridDimZ = 1,
            .blockDimX = 32,
            .blockDimY = 2,
            .blockDimZ = 1,
            .sharedMemBytes = 64,
            .hStream = CU_STREAM(0x5005),
            .attrs = NULL,
            .numAttrs = 0,
        };
        status = cuLaunchKernelEx(&cfg, (CUfunction)(uintptr_t)0x7001, NULL, NULL);
        break;
    }
    case VARIANT_DRV_GRAPH:
        status = cuGraphLaunch((CUgraphExec)(uintptr_t)0x6001, CU_STREAM(0x5006));
        break;
#ifdef HAVE_LIBKERN
    case VARIANT_RT13:
        status = kern_launch_scale();
        break;
#endif
    default:
        return -1;
    }
    KEEP_FRAME();
    return status;
}
