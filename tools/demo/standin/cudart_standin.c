/* Stand-in for libcudart.so.13, used only when no CUDA toolkit is installed: exports the CUDA
 * runtime's launch entry points under their real names and signatures (symbol version
 * libcudart.so.13, like the real library) so the demo and the test programs build, run and can
 * be traced anywhere. Every launch fails fast with cudaErrorInsufficientDriver (what the real
 * runtime returns on a machine without a driver). Each function has its own body (and the
 * Makefiles pass -fno-ipa-icf) so no two symbols share an address: a shared address would make
 * one uprobe fire for two APIs. */
#include <stddef.h>

#include "cuda_standin.h"

/* Identifies the entry point that failed last; also keeps every function body distinct. */
enum standin_api {
    API_LAUNCH_KERNEL = 1,
    API_LAUNCH_KERNEL_PTSZ,
    API_LAUNCH_KERNEL_EXC,
    API_LAUNCH_KERNEL_EXC_PTSZ,
    API_LAUNCH_COOPERATIVE,
    API_LAUNCH_COOPERATIVE_PTSZ,
    API_GRAPH_LAUNCH,
    API_GRAPH_LAUNCH_PTSZ,
    API_GET_DEVICE_COUNT,
};

static _Thread_local cudaError_t last_error = cudaSuccess;
static _Thread_local volatile int last_failed_api;

static cudaError_t fail(int api) {
    last_failed_api = api;
    last_error = cudaErrorInsufficientDriver;
    return last_error;
}

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                             size_t sharedMem, cudaStream_t stream) {
    return fail(API_LAUNCH_KERNEL);
}

cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                  size_t sharedMem, cudaStream_t stream) {
    return fail(API_LAUNCH_KERNEL_PTSZ);
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args) {
    return fail(API_LAUNCH_KERNEL_EXC);
}

cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func,
                                     void **args) {
    return fail(API_LAUNCH_KERNEL_EXC_PTSZ);
}

cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                        size_t sharedMem, cudaStream_t stream) {
    return fail(API_LAUNCH_COOPERATIVE);
}

cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
                                             void **args, size_t sharedMem, cudaStream_t stream) {
    return fail(API_LAUNCH_COOPERATIVE_PTSZ);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
    return fail(API_GRAPH_LAUNCH);
}

cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
    return fail(API_GRAPH_LAUNCH_PTSZ);
}

/* As in the real libcudart.so.13, the entry points of nvcc's <<<>>> launches are thin wrappers
 * that tail-jump to cudaLaunchKernel(_ptsz): one such launch passes through both entry points. */
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                               size_t sharedMem, cudaStream_t stream) {
    return cudaLaunchKernel((const void *)kernel, gridDim, blockDim, args, sharedMem, stream);
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                    size_t sharedMem, cudaStream_t stream) {
    return cudaLaunchKernel_ptsz((const void *)kernel, gridDim, blockDim, args, sharedMem, stream);
}

cudaError_t cudaGetLastError(void) {
    cudaError_t error = last_error;
    last_error = cudaSuccess;
    return error;
}

cudaError_t cudaPeekAtLastError(void) {
    return last_error;
}

const char *cudaGetErrorString(cudaError_t error) {
    switch (error) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version (stand-in)";
    default:
        return "unknown error (stand-in libcudart)";
    }
}

cudaError_t cudaGetDeviceCount(int *count) {
    if (count)
        *count = 0;
    return fail(API_GET_DEVICE_COUNT);
}

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion) {
    if (!runtimeVersion)
        return cudaErrorInvalidValue;
    *runtimeVersion = 13000;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *driverVersion) {
    if (!driverVersion)
        return cudaErrorInvalidValue;
    *driverVersion = 0; /* no driver */
    return cudaSuccess;
}
