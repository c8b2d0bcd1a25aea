/* Interface between the launcher executable, liblaunch_a.so and liblaunch_b.so: the launch
 * variants and the two library entry points of the asserted call chain. */
#ifndef NCCLPROBE_PROGS_LAUNCH_API_H
#define NCCLPROBE_PROGS_LAUNCH_API_H

/* One enumerator per CUDA launch entry point the launcher can exercise. */
enum launch_variant {
    VARIANT_RT,        /* cudaLaunchKernel */
    VARIANT_RT_PTSZ,   /* cudaLaunchKernel_ptsz */
    VARIANT_RT_EXC,    /* cudaLaunchKernelExC */
    VARIANT_RT_COOP,   /* cudaLaunchCooperativeKernel */
    VARIANT_GRAPH,     /* cudaGraphLaunch */
    VARIANT_DRV,       /* cuLaunchKernel */
    VARIANT_DRV_EX,    /* cuLaunchKernelEx */
    VARIANT_DRV_GRAPH, /* cuGraphLaunch */
    VARIANT_RT13,      /* nvcc <<<>>> launch in libkern.so -> __cudaLaunchKernel */
    VARIANT_COUNT,
};

/* liblaunch_a.so: first library frame; forwards to libb_launch(). Returns the CUDA status. */
int liba_submit(int variant);

/* liblaunch_b.so: performs one launch of `variant`. Returns the CUDA status (an error without a
 * GPU, which is expected), or -1 for an unknown/unavailable variant. */
int libb_launch(int variant);

/* liblaunch_b.so: 1 when `variant` was built in (rt13 needs nvcc), else 0. */
int libb_variant_available(int variant);

/* liblaunch_b.so: host function whose address is passed as the "kernel" to the runtime
 * launches, so symbolizing the func argument yields "vector_add_kernel". */
void vector_add_kernel(const float *a, const float *b, float *c, int n);

#endif
