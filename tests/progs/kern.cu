/* libkern.so: a real CUDA kernel compiled by nvcc, launched with the triple-chevron syntax so the
 * launcher can exercise CUDA 13's __cudaLaunchKernel path (variant rt13). */
#include <cstdint>

#include <cuda_runtime.h>

#include "kern.h"

__global__ void scale_kernel(float *data, int factor) {
    if (data != nullptr)
        data[blockIdx.x * blockDim.x + threadIdx.x] *= static_cast<float>(factor);
}

extern "C" __attribute__((noinline)) int kern_launch_scale(void) {
    cudaStream_t stream = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(0x5007));
    scale_kernel<<<dim3(3, 1, 1), dim3(64, 1, 1), 0, stream>>>(nullptr, 4);
    __asm__ volatile("" ::: "memory"); /* keep the launch a real call, not a tail call */
    cudaError_t status = cudaGetLastError();
    __asm__ volatile("" ::: "memory");
    return static_cast<int>(status);
}
