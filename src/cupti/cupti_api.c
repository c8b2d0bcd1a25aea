/* cupti_api.c - finding and loading CUPTI inside the target process (see
 * cupti_api.h). A libcupti the process already loaded (PyTorch links one)
 * wins: two copies of CUPTI in one process would fight over the driver. */
#define _GNU_SOURCE
#include "cupti/cupti_api.h"

#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUPTI_SONAME "libcupti.so.13"

static void *open_beside_cudart(char *path, size_t size) {
    void *sym = dlsym(RTLD_DEFAULT, "cudaGetDriverEntryPointByVersion");
    if (!sym)
        sym = dlsym(RTLD_DEFAULT, "cudaRuntimeGetVersion");
    Dl_info info;
    if (!sym || !dladdr(sym, &info) || !info.dli_fname)
        return NULL;
    char dir[512];
    snprintf(dir, sizeof(dir), "%s", info.dli_fname);
    const char *base = dirname(dir);
    static const char *const rel[] = {"", "/../extras/CUPTI/lib64"};
    for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
        snprintf(path, size, "%s%s/" CUPTI_SONAME, base, rel[i]);
        void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        if (h)
            return h;
    }
    return NULL;
}

static void *open_cupti(char *path, size_t size) {
    void *h = dlopen(CUPTI_SONAME, RTLD_NOW | RTLD_NOLOAD);
    if (h) {
        snprintf(path, size, "%s (already loaded)", CUPTI_SONAME);
        return h;
    }
    const char *env = getenv("NCCLPROBE_CUPTI_LIBRARY");
    if (env && env[0]) { /* asked for one: no other */
        snprintf(path, size, "%s", env);
        return dlopen(env, RTLD_NOW | RTLD_GLOBAL);
    }
    snprintf(path, size, "%s", CUPTI_SONAME);
    h = dlopen(CUPTI_SONAME, RTLD_NOW | RTLD_GLOBAL);
    if (h)
        return h;
    h = open_beside_cudart(path, size);
    if (h)
        return h;
    static const char *const toolkit[] = {"/usr/local/cuda/extras/CUPTI/lib64/" CUPTI_SONAME,
                                          "/usr/local/cuda/lib64/" CUPTI_SONAME};
    for (size_t i = 0; i < sizeof(toolkit) / sizeof(toolkit[0]); i++) {
        snprintf(path, size, "%s", toolkit[i]);
        h = dlopen(toolkit[i], RTLD_NOW | RTLD_GLOBAL);
        if (h)
            return h;
    }
    snprintf(path, size, "%s", CUPTI_SONAME);
    return NULL;
}

static int resolve(void *handle, const char *name, void **out, char *why, size_t why_size) {
    *out = dlsym(handle, name);
    if (*out)
        return 0;
    snprintf(why, why_size, "CUPTI has no %s (CUDA 13 CUPTI needed)", name);
    return -ENOSYS;
}

int np_cupti_api_load(struct np_cupti_api *api, char *why, size_t why_size) {
    memset(api, 0, sizeof(*api));
    api->handle = open_cupti(api->path, sizeof(api->path));
    if (!api->handle) {
        const char *err = dlerror();
        snprintf(why, why_size, "cannot load CUPTI (%s): %s", api->path, err ? err : "not found");
        return -ENOENT;
    }
    struct {
        const char *name;
        void **slot;
    } fns[] = {
        {"cuptiGetResultString", (void **)&api->GetResultString},
        {"cuptiSubscribe", (void **)&api->Subscribe},
        {"cuptiEnableCallback", (void **)&api->EnableCallback},
        {"cuptiActivityRegisterTimestampCallback",
         (void **)&api->ActivityRegisterTimestampCallback},
        {"cuptiSetThreadIdType", (void **)&api->SetThreadIdType},
        {"cuptiActivityRegisterCallbacks", (void **)&api->ActivityRegisterCallbacks},
        {"cuptiActivityEnable", (void **)&api->ActivityEnable},
        {"cuptiActivityEnableRuntimeApi", (void **)&api->ActivityEnableRuntimeApi},
        {"cuptiActivityEnableDriverApi", (void **)&api->ActivityEnableDriverApi},
        {"cuptiActivityFlushAll", (void **)&api->ActivityFlushAll},
        {"cuptiActivityGetNextRecord", (void **)&api->ActivityGetNextRecord},
        {"cuptiActivityGetNumDroppedRecords", (void **)&api->ActivityGetNumDroppedRecords},
    };
    for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
        int err = resolve(api->handle, fns[i].name, fns[i].slot, why, why_size);
        if (err)
            return err;
    }
    /* Optional: _v2 names the subscriber that holds CUPTI when we cannot. */
    *(void **)&api->Subscribe_v2 = dlsym(api->handle, "cuptiSubscribe_v2");
    *(void **)&api->GetVersion = dlsym(api->handle, "cuptiGetVersion");
    return 0;
}

const char *np_cupti_result(const struct np_cupti_api *api, CUptiResult res, char *buf,
                            size_t size) {
    const char *s = NULL;
    if (api->GetResultString && api->GetResultString(res, &s) == CUPTI_SUCCESS && s)
        return s;
    snprintf(buf, size, "error %d", (int)res);
    return buf;
}
