/* launch_api.c - the CUDA launch APIs whose callbacks mark a launch: their
 * names, runtime and driver, their callback ids in the CUPTI in use (from
 * its version's table, layouts.h: __cudaLaunchKernel has none before 13.0),
 * and the offset of the launched function's handle in each one's parameter
 * struct (the toolkit's generated_*_meta.h, which cupti.h includes: those
 * are the APIs' own parameters, the same in every version; see
 * launch_api.h). */
#include "cupti/launch_api.h"

#include <stdio.h>
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
    const char *cupti_name; /* its callback id's name in CUPTI (record_layouts.h) */
    const char *name;
    enum np_launch_fn_kind kind;
    size_t handle_at; /* offset of the handle in the parameters; NO_HANDLE: graphs */
};

static const struct launch_api runtime_apis[] = {
    {"cudaLaunchKernel_v7000", "cudaLaunchKernel", NP_FN_RUNTIME,
     offsetof(cudaLaunchKernel_v7000_params, func)},
    {"cudaLaunchKernel_ptsz_v7000", "cudaLaunchKernel_ptsz", NP_FN_RUNTIME,
     offsetof(cudaLaunchKernel_ptsz_v7000_params, func)},
    {"cudaLaunchKernelExC_v11060", "cudaLaunchKernelExC", NP_FN_RUNTIME,
     offsetof(cudaLaunchKernelExC_v11060_params, func)},
    {"cudaLaunchKernelExC_ptsz_v11060", "cudaLaunchKernelExC_ptsz", NP_FN_RUNTIME,
     offsetof(cudaLaunchKernelExC_ptsz_v11060_params, func)},
    {"cudaLaunchCooperativeKernel_v9000", "cudaLaunchCooperativeKernel", NP_FN_RUNTIME,
     offsetof(cudaLaunchCooperativeKernel_v9000_params, func)},
    {"cudaLaunchCooperativeKernel_ptsz_v9000", "cudaLaunchCooperativeKernel_ptsz", NP_FN_RUNTIME,
     offsetof(cudaLaunchCooperativeKernel_ptsz_v9000_params, func)},
    {"cudaGraphLaunch_v10000", "cudaGraphLaunch", NP_FN_RUNTIME, NO_HANDLE},
    {"cudaGraphLaunch_ptsz_v10000", "cudaGraphLaunch_ptsz", NP_FN_RUNTIME, NO_HANDLE},
    {"__cudaLaunchKernel_v13000", "__cudaLaunchKernel", NP_FN_KERNEL,
     offsetof(struct np_cudaLaunchKernel_v13000_params, kernel)},
    {"__cudaLaunchKernel_ptsz_v13000", "__cudaLaunchKernel_ptsz", NP_FN_KERNEL,
     offsetof(struct np_cudaLaunchKernel_v13000_params, kernel)},
};
static const struct launch_api driver_apis[] = {
    {"cuLaunchKernel", "cuLaunchKernel", NP_FN_FUNCTION, offsetof(cuLaunchKernel_params, f)},
    {"cuLaunchKernel_ptsz", "cuLaunchKernel_ptsz", NP_FN_FUNCTION,
     offsetof(cuLaunchKernel_ptsz_params, f)},
    {"cuLaunchKernelEx", "cuLaunchKernelEx", NP_FN_FUNCTION, offsetof(cuLaunchKernelEx_params, f)},
    {"cuLaunchKernelEx_ptsz", "cuLaunchKernelEx_ptsz", NP_FN_FUNCTION,
     offsetof(cuLaunchKernelEx_ptsz_params, f)},
    {"cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel", NP_FN_FUNCTION,
     offsetof(cuLaunchCooperativeKernel_params, f)},
    {"cuLaunchCooperativeKernel_ptsz", "cuLaunchCooperativeKernel_ptsz", NP_FN_FUNCTION,
     offsetof(cuLaunchCooperativeKernel_ptsz_params, f)},
    {"cuGraphLaunch", "cuGraphLaunch", NP_FN_FUNCTION, NO_HANDLE},
    {"cuGraphLaunch_ptsz", "cuGraphLaunch_ptsz", NP_FN_FUNCTION, NO_HANDLE},
};

#define RUNTIME_APIS (sizeof(runtime_apis) / sizeof(runtime_apis[0]))
#define DRIVER_APIS (sizeof(driver_apis) / sizeof(driver_apis[0]))

/* The callback id of each row in the CUPTI in use (0: none), set once by
 * np_launch_api_use before any callback can come. */
static CUpti_CallbackId runtime_cbids[RUNTIME_APIS], driver_cbids[DRIVER_APIS];

static CUpti_CallbackId *cbids_of(bool runtime) {
    return runtime ? runtime_cbids : driver_cbids;
}

static const struct launch_api *table(bool runtime, size_t *count) {
    *count = runtime ? RUNTIME_APIS : DRIVER_APIS;
    return runtime ? runtime_apis : driver_apis;
}

size_t np_launch_api_count(bool runtime) {
    size_t n;
    table(runtime, &n);
    return n;
}

size_t np_launch_api_use(const struct np_cupti_version_layouts *v, char *missing, size_t size) {
    size_t absent = 0, used = 0;
    if (size)
        missing[0] = '\0';
    for (int runtime = 0; runtime <= 1; runtime++) {
        size_t n;
        const struct launch_api *apis = table(runtime, &n);
        uint32_t limit = runtime ? v->runtime_cbid_size : v->driver_cbid_size;
        for (size_t i = 0; i < n; i++) {
            uint32_t cbid = np_cupti_launch_cbid(v, runtime, apis[i].cupti_name);
            cbids_of(runtime)[i] = cbid < limit ? cbid : 0;
            if (cbids_of(runtime)[i])
                continue;
            absent++;
            int k = snprintf(missing + used, size - used, "%s%s", used ? ", " : "", apis[i].name);
            if (k > 0 && (size_t)k < size - used)
                used += (size_t)k;
        }
    }
    return absent;
}

CUpti_CallbackId np_launch_api_cbid(bool runtime, size_t i) {
    size_t n;
    table(runtime, &n);
    return i < n ? cbids_of(runtime)[i] : 0;
}

static const struct launch_api *find(bool runtime, CUpti_CallbackId cbid) {
    size_t n;
    const struct launch_api *apis = table(runtime, &n);
    for (size_t i = 0; cbid && i < n; i++)
        if (cbids_of(runtime)[i] == cbid)
            return &apis[i];
    return NULL;
}

const char *np_launch_api_name(bool runtime, CUpti_CallbackId cbid) {
    const struct launch_api *api = find(runtime, cbid);
    return api ? api->name : NULL;
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
