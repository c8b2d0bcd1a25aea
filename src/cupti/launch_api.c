/* launch_api.c - the CUDA launch APIs whose callbacks mark a launch: their
 * CUPTI callback ids and names, runtime and driver (see launch_api.h). */
#include "cupti/launch_api.h"

static const CUpti_CallbackId runtime_launches[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000,
};
static const char *const runtime_names[] = {
    "cudaLaunchKernel",         "cudaLaunchKernel_ptsz",       "cudaLaunchKernelExC",
    "cudaLaunchKernelExC_ptsz", "cudaLaunchCooperativeKernel", "cudaLaunchCooperativeKernel_ptsz",
    "cudaGraphLaunch",          "cudaGraphLaunch_ptsz",        "__cudaLaunchKernel",
    "__cudaLaunchKernel_ptsz",
};
static const CUpti_CallbackId driver_launches[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
};
static const char *const driver_names[] = {
    "cuLaunchKernel",        "cuLaunchKernel_ptsz",       "cuLaunchKernelEx",
    "cuLaunchKernelEx_ptsz", "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz",
    "cuGraphLaunch",         "cuGraphLaunch_ptsz",
};

const CUpti_CallbackId *np_launch_cbids(bool runtime, size_t *count) {
    *count = runtime ? sizeof(runtime_launches) / sizeof(runtime_launches[0])
                     : sizeof(driver_launches) / sizeof(driver_launches[0]);
    return runtime ? runtime_launches : driver_launches;
}

const char *np_launch_api_name(bool runtime, CUpti_CallbackId cbid) {
    size_t n;
    const CUpti_CallbackId *ids = np_launch_cbids(runtime, &n);
    for (size_t i = 0; i < n; i++)
        if (ids[i] == cbid)
            return runtime ? runtime_names[i] : driver_names[i];
    return runtime ? "cudaRuntimeApi" : "cuDriverApi";
}
