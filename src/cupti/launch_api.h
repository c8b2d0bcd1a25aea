/* launch_api.h - the one table of the CUDA launch APIs libncclprobe_cupti
 * follows: runtime (cudaLaunchKernel, ..., cudaGraphLaunch, CUDA 13's
 * __cudaLaunchKernel) and driver (cuLaunchKernel, ..., cuGraphLaunch), their
 * callback ids in the CUPTI in use, the names that go on the wire for each,
 * and where each call's parameters (CUpti_CallbackData.functionParams) hold
 * the function handle it launches. */
#ifndef NP_CUPTI_LAUNCH_API_H
#define NP_CUPTI_LAUNCH_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cupti.h>

#include "cupti/layouts.h"

/* What kind of handle a launch names its function by. */
enum np_launch_fn_kind {
    NP_FN_RUNTIME,  /* a runtime launch's func: a host stub or a cudaKernel_t, not told apart */
    NP_FN_KERNEL,   /* a CUkernel (CUDA 13's __cudaLaunchKernel takes a cudaKernel_t) */
    NP_FN_FUNCTION, /* a driver launch's CUfunction, or a CUkernel cast to one */
};

struct np_launch_fn {
    uint64_t handle; /* never 0 */
    enum np_launch_fn_kind kind;
};

/* Takes the callback ids of CUPTI version v (layouts.h), once, before
 * CUPTI can call back: an API that version has no id for (or one past its
 * CUPTI_*_TRACE_CBID_SIZE) is not followed. Returns how many are not, their
 * names in `missing` (", "-separated). */
size_t np_launch_api_use(const struct np_cupti_version_layouts *v, char *missing, size_t size);
/* How many launch APIs the runtime (runtime true) or the driver has, and
 * the callback id of the i-th in the CUPTI in use (0: none, or past the end). */
size_t np_launch_api_count(bool runtime);
CUpti_CallbackId np_launch_api_cbid(bool runtime, size_t i);
/* The API's name for a callback id of the CUPTI in use; NULL when it is not
 * one of the launch APIs (never another API's name). */
const char *np_launch_api_name(bool runtime, CUpti_CallbackId cbid);
/* The function handle the launch API call `cbid` with these parameters
 * launches: false for graph launches, APIs that are not launches, and
 * missing parameters or a NULL handle. */
bool np_launch_function(bool runtime, CUpti_CallbackId cbid, const void *params,
                        struct np_launch_fn *out);

#endif
