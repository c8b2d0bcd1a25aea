/* kernels.h - names the kernel a launch runs.
 *
 * Runtime launches pass the kernel's host stub: its symbol is the kernel's
 * name. CUDA 13's __cudaLaunchKernel and driver launches pass opaque handles
 * (cudaKernel_t, CUfunction, CUkernel); those are named from the calls that
 * produced them (__cudaGetKernel, cudaGetFuncBySymbol, cuModuleGetFunction,
 * cuLibraryGetKernel, cuKernelGetFunction), seen as handle events. A handle
 * produced before ncclprobe attached stays unnamed unless the stack shows
 * the nvcc-generated __device_stub__ frame. */
#ifndef NP_KERNELS_H
#define NP_KERNELS_H

#include <stdint.h>

#include "ncclprobe/events.h"

struct np_kernel_names;
struct np_symbolizer;
struct np_probe_def;

struct np_kernel_names *np_kernel_names_new(void);
void np_kernel_names_free(struct np_kernel_names *k);

/* Records what a handle-producing call returned. */
int np_kernel_names_on_handle(struct np_kernel_names *k, struct np_symbolizer *sym,
                              const struct np_probe_def *def, const struct np_handle_event *h);

/* A handle's name as the process's CUPTI library found it (a NAMES frame:
 * the handle was made before ncclprobe attached). */
int np_kernel_names_add(struct np_kernel_names *k, uint64_t handle, const char *name);

/* The handle's name, or NULL. */
const char *np_kernel_names_lookup(const struct np_kernel_names *k, uint64_t handle);

/* Names the kernel from a host stub address; NULL if it is no symbol. */
const char *np_kernel_name_from_stub(struct np_symbolizer *sym, uint64_t stub);

#endif
