/* Picks the CUDA declarations for the demo: the real toolkit headers, or the bundled stand-in
 * (standin/cuda_standin.h) when the Makefile found no toolkit (DEMO_USE_STANDIN). */
#ifndef NCCLPROBE_DEMO_CUDA_H
#define NCCLPROBE_DEMO_CUDA_H

#ifdef DEMO_USE_STANDIN
#include "cuda_standin.h"
#else
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

#endif
