/* driver.h - whether a CUDA driver is usable in the process, asked before
 * CUPTI is called at all (driver.c): without one, CUPTI 13.2 crashes in its
 * first call (cuptiGetVersion, cuptiSubscribe: an endless recursion through
 * cuptiGetResultString), 13.5 answers every call with an error, and there
 * is nothing to trace anyway. */
#ifndef NP_CUPTI_DRIVER_H
#define NP_CUPTI_DRIVER_H

#include <stddef.h>

/* cuDriverGetVersion of the process's driver: the one its global scope
 * resolves (a driver library linked in), else the libcuda.so.1 it loaded,
 * else libcuda.so.1 loaded now. The driver's version (> 0), or 0 with `why`
 * filled in (no libcuda.so.1, a stub library, the call failed). */
int np_cuda_driver_version(char *why, size_t size);

#endif
