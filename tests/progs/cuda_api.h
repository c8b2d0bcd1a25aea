/* Picks the CUDA declarations for the test programs: the real toolkit headers, or, when the
 * Makefile found no toolkit (PROGS_USE_STANDIN), the bundled stand-in from tools/demo/standin.
 * Also declares the per-thread-default-stream entry points that the headers only reach through
 * macros. */
#ifndef NCCLPROBE_PROGS_CUDA_API_H
#define NCCLPROBE_PROGS_CUDA_API_H

#ifdef PROGS_USE_STANDIN
#include "cuda_standin.h"
#else
#include <cuda.h>
#include <cuda_runtime_api.h>

/* Exported by libcudart.so.13; the toolkit headers only name it via
 * __CUDART_API_PER_THREAD_DEFAULT_STREAM renaming, so declare it explicitly. */
extern cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                         size_t sharedMem, cudaStream_t stream);
#endif

#endif
