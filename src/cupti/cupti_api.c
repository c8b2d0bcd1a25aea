/* cupti_api.c - finding and loading CUPTI inside the target process (see
 * cupti_api.h). A libcupti the process already loaded (PyTorch's kineto
 * links one) wins: two copies of CUPTI in one process would fight over the
 * driver. Otherwise the CUPTI of the process's CUDA major: a CUPTI works
 * with the runtime it ships with. */
#define _GNU_SOURCE
#include "cupti/cupti_api.h"

#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int majors[] = {13, 12}; /* without a libcudart: the newest first */

static void soname(int major, char *out, size_t size) {
    snprintf(out, size, "libcupti.so.%d", major);
}

/* The loaded object's own path (a name dlopen'ed is found on the loader's
 * path: say where). */
static void real_path(void *handle, char *path, size_t size) {
    struct link_map *map = NULL;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0])
        snprintf(path, size, "%s", map->l_name);
}

static void *try_open(struct np_cupti_api *api, const char *path, int flags, const char *why) {
    snprintf(api->path, sizeof(api->path), "%s", path);
    void *h = dlopen(path, flags);
    if (h) {
        snprintf(api->chosen_by, sizeof(api->chosen_by), "%s", why);
        real_path(h, api->path, sizeof(api->path));
    }
    return h;
}

/* The process's libcudart: its major (by SONAME) and its directory. */
static int find_cudart(char *dir, size_t size) {
    for (size_t i = 0; i < sizeof(majors) / sizeof(majors[0]); i++) {
        char name[32];
        snprintf(name, sizeof(name), "libcudart.so.%d", majors[i]);
        void *h = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
        void *sym = h ? dlsym(h, "cudaRuntimeGetVersion") : NULL;
        Dl_info info;
        if (sym && dladdr(sym, &info) && info.dli_fname) {
            snprintf(dir, size, "%s", info.dli_fname);
            dirname(dir);
        }
        if (h) {
            dlclose(h); /* a reference of ours: the process keeps its own */
            return majors[i];
        }
    }
    return 0;
}

/* A libcupti the process loaded already, its cudart's major first. */
static void *open_loaded(struct np_cupti_api *api) {
    int order[3] = {api->cudart_major, majors[0], majors[1]};
    for (size_t i = 0; i < 3; i++) {
        char name[32];
        if (!order[i])
            continue;
        soname(order[i], name, sizeof(name));
        void *h = try_open(api, name, RTLD_NOW | RTLD_NOLOAD, "already loaded");
        if (h)
            return h;
    }
    return NULL;
}

/* libcupti.so.N beside the process's libcudart.so.N (dir): the same
 * directory (a toolkit's lib64, pip's nvidia/cu13/lib), pip's cu12 layout
 * (nvidia/cuda_runtime/lib -> nvidia/cuda_cupti/lib), a toolkit's extras. */
static void *open_beside_cudart(struct np_cupti_api *api, const char *dir, int major) {
    static const char *const rel[] = {"", "/../../cuda_cupti/lib", "/../extras/CUPTI/lib64"};
    char why[64];
    snprintf(why, sizeof(why), "beside libcudart.so.%d", major);
    for (size_t i = 0; dir[0] && i < sizeof(rel) / sizeof(rel[0]); i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s%s/libcupti.so.%d", dir, rel[i], major);
        void *h = try_open(api, path, RTLD_NOW | RTLD_GLOBAL, why);
        if (h)
            return h;
    }
    return NULL;
}

/* libcupti.so.N on the loader's path, then in the toolkit. */
static void *open_by_name(struct np_cupti_api *api, int major) {
    char name[32], why[64];
    soname(major, name, sizeof(name));
    if (api->cudart_major)
        snprintf(why, sizeof(why), "loader path, for libcudart.so.%d", major);
    else
        snprintf(why, sizeof(why), "loader path (no libcudart loaded)");
    void *h = try_open(api, name, RTLD_NOW | RTLD_GLOBAL, why);
    static const char *const toolkit[] = {"/usr/local/cuda/extras/CUPTI/lib64",
                                          "/usr/local/cuda/lib64"};
    for (size_t i = 0; !h && i < sizeof(toolkit) / sizeof(toolkit[0]); i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", toolkit[i], name);
        h = try_open(api, path, RTLD_NOW | RTLD_GLOBAL, "CUDA toolkit");
    }
    return h;
}

static void *open_cupti(struct np_cupti_api *api) {
    char dir[512] = "";
    api->cudart_major = find_cudart(dir, sizeof(dir));
    void *h = open_loaded(api);
    if (h)
        return h;
    const char *env = getenv("NCCLPROBE_CUPTI_LIBRARY");
    if (env && env[0]) /* asked for one: no other */
        return try_open(api, env, RTLD_NOW | RTLD_GLOBAL, "NCCLPROBE_CUPTI_LIBRARY");
    if (api->cudart_major) {
        h = open_beside_cudart(api, dir, api->cudart_major);
        return h ? h : open_by_name(api, api->cudart_major);
    }
    for (size_t i = 0; !h && i < sizeof(majors) / sizeof(majors[0]); i++)
        h = open_by_name(api, majors[i]);
    return h;
}

struct export {
    const char *name;
    void **slot;
};

static int resolve_required(struct np_cupti_api *api, char *why, size_t why_size) {
    const struct export fns[] = {
        {"cuptiGetResultString", (void **)&api->GetResultString},
        {"cuptiGetVersion", (void **)&api->GetVersion},
        {"cuptiSubscribe", (void **)&api->Subscribe},
        {"cuptiEnableCallback", (void **)&api->EnableCallback},
        {"cuptiActivityRegisterTimestampCallback",
         (void **)&api->ActivityRegisterTimestampCallback},
        {"cuptiSetThreadIdType", (void **)&api->SetThreadIdType},
        {"cuptiActivityRegisterCallbacks", (void **)&api->ActivityRegisterCallbacks},
        {"cuptiActivityEnable", (void **)&api->ActivityEnable},
        {"cuptiActivityFlushAll", (void **)&api->ActivityFlushAll},
        {"cuptiActivityGetNextRecord", (void **)&api->ActivityGetNextRecord},
        {"cuptiActivityGetNumDroppedRecords", (void **)&api->ActivityGetNumDroppedRecords},
    };
    for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
        *fns[i].slot = dlsym(api->handle, fns[i].name);
        if (!*fns[i].slot) {
            snprintf(why, why_size, "CUPTI %s has no %s (CUPTI 12.4 or newer needed)", api->path,
                     fns[i].name);
            return -ENOSYS;
        }
    }
    return 0;
}

static void resolve_optional(struct np_cupti_api *api) {
    const struct export fns[] = {
        {"cuptiSubscribe_v2", (void **)&api->Subscribe_v2},
        {"cuptiActivityEnableRuntimeApi", (void **)&api->ActivityEnableRuntimeApi},
        {"cuptiActivityEnableDriverApi", (void **)&api->ActivityEnableDriverApi},
        {"cuptiActivityGetStructSize", (void **)&api->ActivityGetStructSize},
        {"cuptiGetGraphNodeId", (void **)&api->GetGraphNodeId},
        {"cuptiGetGraphId", (void **)&api->GetGraphId},
    };
    for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
        *fns[i].slot = dlsym(api->handle, fns[i].name);
}

int np_cupti_api_load(struct np_cupti_api *api, char *why, size_t why_size) {
    memset(api, 0, sizeof(*api));
    api->handle = open_cupti(api);
    if (!api->handle) {
        const char *err = dlerror();
        snprintf(why, why_size, "cannot load CUPTI (%s): %s", api->path, err ? err : "not found");
        return -ENOENT;
    }
    int err = resolve_required(api, why, why_size);
    if (err)
        return err;
    resolve_optional(api);
    return 0;
}

void np_cupti_api_missing(const struct np_cupti_api *api, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    struct {
        const void *fn;
        const char *what;
    } costs[] = {
        {(const void *)api->Subscribe_v2,
         "no cuptiSubscribe_v2: a profiler that holds CUPTI is not named"},
        {(const void *)api->ActivityEnableRuntimeApi,
         "no cuptiActivityEnableRuntimeApi: no CUDA_Runtime API events in a trace file "
         "(NCCLPROBE_CUPTI_OUTPUT)"},
        {(const void *)api->ActivityEnableDriverApi,
         "no cuptiActivityEnableDriverApi: no CUDA_Driver API events in a trace file "
         "(NCCLPROBE_CUPTI_OUTPUT)"},
        {(const void *)api->GetGraphNodeId,
         "no cuptiGetGraphNodeId: CUDA graph replays are tied to their capture by kernel "
         "order, not by node"},
    };
    for (size_t i = 0; i < sizeof(costs) / sizeof(costs[0]); i++) {
        if (costs[i].fn)
            continue;
        int n = snprintf(out + used, size - used, "%s%s", used ? "\n" : "", costs[i].what);
        if (n > 0 && (size_t)n < size - used)
            used += (size_t)n;
    }
}

const char *np_cupti_result(const struct np_cupti_api *api, CUptiResult res, char *buf,
                            size_t size) {
    const char *s = NULL;
    if (api->GetResultString && api->GetResultString(res, &s) == CUPTI_SUCCESS && s)
        return s;
    snprintf(buf, size, "error %d", (int)res);
    return buf;
}
