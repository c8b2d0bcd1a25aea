/* fake_cuda_driver.c - TEST DOUBLE of the CUDA driver API (libfakecuda.so).
 *
 * The toolkit's stub libcuda never hands out a CUfunction (there is no GPU
 * driver here), so the path that names driver launches from the calls that
 * produced their handles cannot run against it. This double implements just
 * those calls (and cuInit) with the real names and signatures (cuda.h) and
 * returns distinct handles; launches return CUDA_SUCCESS and do nothing.
 * It also answers the driver's own name queries (cuFuncGetName for a
 * CUfunction, cuKernelGetName for a CUkernel; CUDA 12.3+) with the name
 * each handle was made with, as the CUPTI library asks them for handles
 * made before it was loaded: a handle of the other kind, or one this
 * double never made, is CUDA_ERROR_INVALID_HANDLE. It says it is a CUDA
 * 13.0 driver (cuDriverGetVersion), as the CUPTI library asks before it
 * calls CUPTI: a process that links it has a usable driver. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef struct CUfunc_st *CUfunction;
typedef struct CUkern_st *CUkernel;
typedef struct CUmod_st *CUmodule;
typedef struct CUlib_st *CUlibrary;
typedef struct CUstream_st *CUstream;
typedef struct CUlaunchConfig_st CUlaunchConfig;

#define EXPORT __attribute__((visibility("default"), noinline))

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
};

enum handle_kind { KIND_FUNCTION, KIND_KERNEL };

/* Every handle is a distinct heap block, as a driver's would be, that
 * remembers what it is and the name it was made with. */
struct handle {
    struct handle *next; /* every handle made, for the name queries */
    enum handle_kind kind;
    char name[];
};

static struct handle *handles;
static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;

static struct handle *new_handle(enum handle_kind kind, const char *name) {
    size_t len = strlen(name);
    struct handle *h = malloc(sizeof(*h) + len + 1);
    if (!h)
        return NULL;
    h->kind = kind;
    memcpy(h->name, name, len + 1);
    pthread_mutex_lock(&handles_lock);
    h->next = handles;
    handles = h;
    pthread_mutex_unlock(&handles_lock);
    return h;
}

/* A handle for the kernel called `name`. The real driver looks the name up
 * in the module (CUDA_ERROR_INVALID_VALUE for NULL, CUDA_ERROR_NOT_FOUND
 * when absent), so it reads the string - and faults its page in - before it
 * returns: so does this double. */
static CUresult named_handle(void **out, enum handle_kind kind, const char *name) {
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!name[0])
        return CUDA_ERROR_NOT_FOUND;
    struct handle *h = new_handle(kind, name);
    if (!h)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = h;
    return CUDA_SUCCESS;
}

/* The name of a handle this double made as `kind`, looked up (never read
 * through a pointer it did not make). */
static CUresult name_of(const char **name, const void *handle, enum handle_kind kind) {
    if (!name || !handle)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&handles_lock);
    for (struct handle *h = handles; h; h = h->next) {
        if (h == handle && h->kind == kind) {
            *name = h->name;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&handles_lock);
    return rc;
}

EXPORT CUresult cuInit(unsigned flags) {
    return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuDriverGetVersion(int *version) {
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = 13000;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    (void)hmod;
    return named_handle((void **)hfunc, KIND_FUNCTION, name);
}

EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
    (void)library;
    return named_handle((void **)pKernel, KIND_KERNEL, name);
}

/* The kernel's CUfunction: a new handle with the kernel's name. */
EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
    const char *name = NULL;
    CUresult rc = name_of(&name, kernel, KIND_KERNEL);
    if (rc == CUDA_ERROR_INVALID_HANDLE) /* not one of ours: unnamed, as before */
        name = "?";
    else if (rc != CUDA_SUCCESS)
        return rc;
    return named_handle((void **)pFunc, KIND_FUNCTION, name);
}

EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc) {
    return name_of(name, hfunc, KIND_FUNCTION);
}

EXPORT CUresult cuKernelGetName(const char **name, CUkernel hfunc) {
    return name_of(name, hfunc, KIND_KERNEL);
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shmem, CUstream stream,
                               void **params, void **extra) {
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem;
    (void)stream, (void)params, (void)extra;
    __asm__ volatile("");
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                                 void **extra) {
    (void)config, (void)f, (void)params, (void)extra;
    __asm__ volatile("");
    return CUDA_SUCCESS;
}
