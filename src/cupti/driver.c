/* driver.c - is a CUDA driver usable here (see driver.h)? cuDriverGetVersion
 * needs no cuInit and no device: a real libcuda answers it on a machine
 * without a GPU; the toolkit's stub libcuda.so (lib64/stubs, which some
 * containers put on the loader's path) says CUDA_ERROR_STUB_LIBRARY. */
#define _GNU_SOURCE
#include "cupti/driver.h"

#include <dlfcn.h>
#include <stdio.h>

typedef int (*driver_version_fn)(int *version);

/* The process's cuDriverGetVersion; NULL with why filled in. A libcuda.so.1
 * loaded here stays loaded (CUPTI would load it anyway). */
static driver_version_fn find(char *why, size_t size) {
    driver_version_fn fn;
    *(void **)&fn = dlsym(RTLD_DEFAULT, "cuDriverGetVersion");
    if (fn)
        return fn;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!cuda)
        cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) {
        const char *err = dlerror();
        snprintf(why, size, "%s", err ? err : "libcuda.so.1 cannot be loaded");
        return NULL;
    }
    *(void **)&fn = dlsym(cuda, "cuDriverGetVersion");
    if (!fn)
        snprintf(why, size, "libcuda.so.1 has no cuDriverGetVersion");
    return fn;
}

int np_cuda_driver_version(char *why, size_t size) {
    driver_version_fn fn = find(why, size);
    if (!fn)
        return 0;
    int version = 0;
    int res = fn(&version);
    if (res == 0 && version > 0)
        return version;
    if (res == 34) /* CUDA_ERROR_STUB_LIBRARY */
        snprintf(why, size, "libcuda.so.1 is the toolkit's stub library");
    else
        snprintf(why, size, "cuDriverGetVersion failed (CUresult %d)", res);
    return 0;
}
