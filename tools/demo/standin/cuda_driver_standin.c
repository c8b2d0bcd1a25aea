/* Stand-in for the CUDA driver library libcuda.so.1, used only when no CUDA toolkit (and so no
 * toolkit stub libcuda.so) is installed: exports the driver's launch entry points under their
 * real names and signatures; each fails fast with CUDA_ERROR_STUB_LIBRARY, like the toolkit's
 * stub. Bodies are distinct (and the Makefiles pass -fno-ipa-icf) so every symbol has its own
 * address and its own uprobe. */
#include <stddef.h>

#include "cuda_standin.h"

enum standin_driver_api {
    DRV_INIT = 1,
    DRV_LAUNCH_KERNEL,
    DRV_LAUNCH_KERNEL_PTSZ,
    DRV_LAUNCH_KERNEL_EX,
    DRV_LAUNCH_KERNEL_EX_PTSZ,
    DRV_LAUNCH_COOPERATIVE,
    DRV_LAUNCH_COOPERATIVE_PTSZ,
    DRV_GRAPH_LAUNCH,
    DRV_GRAPH_LAUNCH_PTSZ,
};

static _Thread_local volatile int last_failed_api;

static CUresult fail(int api) {
    last_failed_api = api;
    return CUDA_ERROR_STUB_LIBRARY;
}

CUresult cuInit(unsigned int flags) {
    return fail(DRV_INIT);
}

CUresult cuDriverGetVersion(int *driverVersion) {
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = 13000;
    return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **pStr) {
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = error == CUDA_SUCCESS ? "no error" : "stand-in libcuda.so.1: no CUDA driver";
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra) {
    return fail(DRV_LAUNCH_KERNEL);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                             void **kernelParams, void **extra) {
    return fail(DRV_LAUNCH_KERNEL_PTSZ);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                          void **extra) {
    return fail(DRV_LAUNCH_KERNEL_EX);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                               void **extra) {
    return fail(DRV_LAUNCH_KERNEL_EX_PTSZ);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                   unsigned int gridDimZ, unsigned int blockDimX,
                                   unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream,
                                   void **kernelParams) {
    return fail(DRV_LAUNCH_COOPERATIVE);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX,
                                        unsigned int blockDimY, unsigned int blockDimZ,
                                        unsigned int sharedMemBytes, CUstream hStream,
                                        void **kernelParams) {
    return fail(DRV_LAUNCH_COOPERATIVE_PTSZ);
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    return fail(DRV_GRAPH_LAUNCH);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    return fail(DRV_GRAPH_LAUNCH_PTSZ);
}
