/* libdemo_kernels.so: the demo's "kernel library" — one launch function per kernel, each calling
 * a real CUDA launch API (runtime or driver), plus process-wide launch counters. */
#ifndef NCCLPROBE_DEMO_KERNELS_H
#define NCCLPROBE_DEMO_KERNELS_H

/* Per-API launch counts, summed over all threads. */
struct demo_launch_stats {
    unsigned long cuda_launch_kernel;     /* cudaLaunchKernel */
    unsigned long cuda_launch_kernel_exc; /* cudaLaunchKernelExC */
    unsigned long cuda_graph_launch;      /* cudaGraphLaunch */
    unsigned long cu_launch_kernel;       /* cuLaunchKernel */
};

/* All launch functions take an opaque stream handle and return the CUDA status (an error
 * without a GPU, which the demo ignores). */
int launch_rmsnorm(void *stream, unsigned tokens, unsigned hidden);
int launch_matmul(void *stream, unsigned m, unsigned n, unsigned k);
int launch_attention(void *stream, unsigned batch, unsigned heads, unsigned seq_len);
int launch_silu_mul(void *stream, unsigned tokens, unsigned intermediate);
int launch_allreduce_stub(void *stream, unsigned long elements);
int launch_decode_graph(void *stream, unsigned graph_id);

void demo_kernels_stats(struct demo_launch_stats *out);

#endif
