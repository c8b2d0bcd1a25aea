/* launch_api.c - the CUDA launch APIs whose callbacks mark a launch: their
 * CUPTI callback ids and names, runtime and driver, and the offset of the
 * launched function's handle in each one's parameter struct (the
 * toolkit's generated_*_meta.h, which cupti.h includes; see launch_api.h). */
#include "cupti/launch_api.h"

#include <string.h> /* the parameter structs come with cupti.h */

/* __cudaLaunchKernel{,_ptsz} (CUDA 13, crt/device_functions.h) have no
 * struct in the meta headers: their parameters in the same order. */
struct np_cudaLaunchKernel_v13000_params {
    cudaKernel_t kernel;
    dim3 gridDim;
    dim3 blockDim;
    void **args;
    size_t sharedMem;
    cudaStream_t stream;
};

#define NO_HANDLE ((size_t)-1)

struct launch_api {
    CUpti_CallbackId cbid;
    const char *name;
    enum np_launch_fn_kind kind;
    size_t handle_at; /* offset of the handle in the parameters; NO_HANDLE: graphs */
};

static const struct launch_api runtime_apis[] = {
    {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, "cudaLaunchKernel", NP_FN_RUNTIME,
     offsetof(cudaLaunchKernel_v7000_params, func)},
    {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000, "cudaLaunchKernel_ptsz", NP_FN_RUNTIME,
     offsetof(cudaLaunchKernel_ptsz_v7000_params, func)},
    {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060, "cudaLaunchKernelExC", NP_FN_RUNTIME,
     offsetof(cudaLaunchKernelExC_v11060_params, func)},
    {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060, "cudaLaunchKernelExC_ptsz",
     NP_FN_RUNTIME, offsetof(cudaLaunchKernelExC_ptsz_v11060_params, func)},
    {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000, "cudaLaunchCooperativeKernel",
     NP_FN_RUNTIME, offsetof(cudaLaunchCooperativeKernel_v9000_params, func)},
    {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
     "cudaLaunchCooperativeKernel_ptsz", NP_FN_RUNTIME,
     offsetof(cudaLaunchCooperativeKernel_ptsz_v9000_params, func)},
    {CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, "cudaGraphLaunch", NP_FN_RUNTIME, NO_HANDLE},
    {CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000, "cudaGraphLaunch_ptsz", NP_FN_RUNTIME,
     NO_HANDLE},
    {CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000, "__cudaLaunchKernel", NP_FN_KERNEL,
     offsetof(struct np_cudaLaunchKernel_v13000_params, kernel)},
    {CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000, "__cudaLaunchKernel_ptsz",
     NP_FN_KERNEL, offsetof(struct np_cudaLaunchKernel_v13000_params, kernel)},
};
static const struct launch_api driver_apis[] = {
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, "cuLaunchKernel", NP_FN_FUNCTION,
     offsetof(cuLaunchKernel_params, f)},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, "cuLaunchKernel_ptsz", NP_FN_FUNCTION,
     offsetof(cuLaunchKernel_ptsz_params, f)},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, "cuLaunchKernelEx", NP_FN_FUNCTION,
     offsetof(cuLaunchKernelEx_params, f)},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, "cuLaunchKernelEx_ptsz", NP_FN_FUNCTION,
     offsetof(cuLaunchKernelEx_ptsz_params, f)},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", NP_FN_FUNCTION,
     offsetof(cuLaunchCooperativeKernel_params, f)},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel_ptsz",
     NP_FN_FUNCTION, offsetof(cuLaunchCooperativeKernel_ptsz_params, f)},
    {CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, "cuGraphLaunch", NP_FN_FUNCTION, NO_HANDLE},
    {CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz, "cuGraphLaunch_ptsz", NP_FN_FUNCTION, NO_HANDLE},
};

#define RUNTIME_APIS (sizeof(runtime_apis) / sizeof(runtime_apis[0]))
#define DRIVER_APIS (sizeof(driver_apis) / sizeof(driver_apis[0]))

static const struct launch_api *table(bool runtime, size_t *count) {
    *count = runtime ? RUNTIME_APIS : DRIVER_APIS;
    return runtime ? runtime_apis : driver_apis;
}

size_t np_launch_api_count(bool runtime) {
    size_t n;
    table(runtime, &n);
    return n;
}

CUpti_CallbackId np_launch_api_cbid(bool runtime, size_t i) {
    size_t n;
    const struct launch_api *apis = table(runtime, &n);
    return i < n ? apis[i].cbid : 0;
}

static const struct launch_api *find(bool runtime, CUpti_CallbackId cbid) {
    size_t n;
    const struct launch_api *apis = table(runtime, &n);
    for (size_t i = 0; i < n; i++)
        if (apis[i].cbid == cbid)
            return &apis[i];
    return NULL;
}

const char *np_launch_api_name(bool runtime, CUpti_CallbackId cbid) {
    const struct launch_api *api = find(runtime, cbid);
    if (api)
        return api->name;
    return runtime ? "cudaRuntimeApi" : "cuDriverApi";
}

bool np_launch_function(bool runtime, CUpti_CallbackId cbid, const void *params,
                        struct np_launch_fn *out) {
    const struct launch_api *api = find(runtime, cbid);
    if (!api || api->handle_at == NO_HANDLE || !params)
        return false;
    const void *handle;
    memcpy(&handle, (const char *)params + api->handle_at, sizeof(handle));
    if (!handle)
        return false;
    out->handle = (uint64_t)(uintptr_t)handle;
    out->kind = api->kind;
    return true;
}
