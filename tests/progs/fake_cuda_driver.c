/* fake_cuda_driver.c - TEST DOUBLE of the CUDA driver API (libfakecuda.so).
 *
 * The toolkit's stub libcuda never hands out a CUfunction (there is no GPU
 * driver here), so the path that names driver launches from the calls that
 * produced their handles cannot run against it. This double implements just
 * those calls (and cuInit) with the real names and signatures (cuda.h) and
 * returns distinct handles; launches return CUDA_SUCCESS and do nothing. */
#include <stdint.h>
#include <stdlib.h>

typedef int CUresult;
typedef struct CUfunc_st *CUfunction;
typedef struct CUkern_st *CUkernel;
typedef struct CUmod_st *CUmodule;
typedef struct CUlib_st *CUlibrary;
typedef struct CUstream_st *CUstream;
typedef struct CUlaunchConfig_st CUlaunchConfig;

#define EXPORT __attribute__((visibility("default"), noinline))

/* Every handle is a distinct heap address, as a driver's would be. */
static void *new_handle(void) {
    return malloc(16);
}

/* A handle for the kernel called `name`. The real driver looks the name up
 * in the module (CUDA_ERROR_INVALID_VALUE for NULL, CUDA_ERROR_NOT_FOUND
 * when absent), so it reads the string - and faults its page in - before it
 * returns: so does this double. */
static CUresult named_handle(void **out, const char *name) {
    if (!name)
        return 1;
    if (!name[0])
        return 500;
    size_t *h = new_handle();
    if (!h)
        return 2;
    size_t len = 0;
    while (name[len])
        len++;
    *h = len;
    *out = h;
    return 0;
}

EXPORT CUresult cuInit(unsigned flags) {
    return flags == 0 ? 0 : 1;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    (void)hmod;
    return named_handle((void **)hfunc, name);
}

EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
    (void)library;
    return named_handle((void **)pKernel, name);
}

EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
    (void)kernel;
    *pFunc = new_handle();
    return *pFunc ? 0 : 2;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shmem, CUstream stream,
                               void **params, void **extra) {
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem;
    (void)stream, (void)params, (void)extra;
    __asm__ volatile("");
    return 0;
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                                 void **extra) {
    (void)config, (void)f, (void)params, (void)extra;
    __asm__ volatile("");
    return 0;
}
