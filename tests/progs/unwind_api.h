/* Interface of the unwind_chain workload (ncclprobe's stack-unwinding oracle), spread over three
 * objects built with different frame-pointer settings:
 *
 *   main -> app_run -> app_step                       (unwind_chain, -fomit-frame-pointer)
 *   worker_thread -> app_run -> app_step              (same, with --threads N)
 *     -> mid_dispatch -> mid_forward                  (libunwind_a.so, -fno-omit-frame-pointer)
 *     -> launcher_entry -> ns::Launcher<float>::go
 *        -> ns::launch_impl<float>                    (libunwind_b.so, C++, -fomit-frame-pointer)
 *     -> cudaLaunchKernel(unwind_kernel, {2,1,1}, {64,1,1}, args, 0, 0x5020)   (libcudart.so.13)
 */
#ifndef NCCLPROBE_PROGS_UNWIND_API_H
#define NCCLPROBE_PROGS_UNWIND_API_H

/* Stronger than NOINLINE for the chain: GCC must not clone a function either (a clone is named
 * "f.constprop.0" / "f.isra.0"), nor specialise its callers on what it does. */
#if defined(__GNUC__) && !defined(__clang__)
#define UNWIND_NOINLINE __attribute__((noinline, noipa))
#else
#define UNWIND_NOINLINE __attribute__((noinline))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* libunwind_a.so: mid_dispatch -> mid_forward -> launcher_entry. Returns the CUDA status. */
int mid_dispatch(int iter);

/* libunwind_b.so: the C entry to the C++ part; launches once. Returns the CUDA status (an error
 * without a GPU, which is expected). */
int launcher_entry(int iter);

/* libunwind_b.so: host function whose address is the launch's "kernel", so the launch's leaf
 * frame is [GPU_Kernel]unwind_kernel. */
void unwind_kernel(float *data, int n);

#ifdef __cplusplus
}
#endif

#endif
