/* launch_api.h - the one table of the CUDA launch APIs libncclprobe_cupti
 * follows: their CUPTI callback ids, runtime (cudaLaunchKernel, ...,
 * cudaGraphLaunch, CUDA 13's __cudaLaunchKernel) and driver (cuLaunchKernel,
 * ..., cuGraphLaunch), and the names that go on the wire for each. */
#ifndef NP_CUPTI_LAUNCH_API_H
#define NP_CUPTI_LAUNCH_API_H

#include <stdbool.h>
#include <stddef.h>

#include <cupti.h>

/* The runtime's (runtime true) or the driver's launch callback ids. */
const CUpti_CallbackId *np_launch_cbids(bool runtime, size_t *count);
/* The API's name for a callback id ("cudaRuntimeApi"/"cuDriverApi" when it
 * is not a launch). */
const char *np_launch_api_name(bool runtime, CUpti_CallbackId cbid);

#endif
