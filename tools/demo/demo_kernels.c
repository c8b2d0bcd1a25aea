/* libdemo_kernels.so: the demo's kernel library. Each launch_* function issues one kernel launch
 * through a real CUDA entry point (cudaLaunchKernel, cudaLaunchKernelExC, cudaGraphLaunch or the
 * driver's cuLaunchKernel), passing the address of a host function named like the device kernel
 * so that ncclprobe can symbolize it. The kernels are never executed (there is no GPU: every
 * launch fails fast, and the demo ignores the status). */
#include <stdatomic.h>
#include <stdint.h>

#include "demo_cuda.h"
#include "demo_kernels.h"

#define NOINLINE __attribute__((noinline))
#define KEEP_FRAME() __asm__ volatile("" ::: "memory") /* no tail calls: keep every frame */

static atomic_ulong launches_rt, launches_rt_exc, launches_graph, launches_drv;

/* ---- host stand-ins for the device kernels (distinct bodies, so never folded together) ---- */

NOINLINE void flash_attn_fwd_kernel(const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                    uint16_t *out, int seq_len) {
    for (int i = 0; i < seq_len; i++)
        out[i] = (uint16_t)(q[i] ^ k[i] ^ v[i]);
}

NOINLINE void gemm_bf16_kernel(const uint16_t *a, const uint16_t *b, uint16_t *c, int m, int n,
                               int k) {
    for (int i = 0; i < m * n; i++)
        c[i] = (uint16_t)(a[i % k] * b[i % k]);
}

NOINLINE void rmsnorm_kernel(const float *x, const float *weight, float *y, int hidden, float eps) {
    float sum = 0.0f;
    for (int i = 0; i < hidden; i++)
        sum += x[i] * x[i];
    for (int i = 0; i < hidden; i++)
        y[i] = x[i] * weight[i] / (sum / (float)hidden + eps);
}

NOINLINE void silu_mul_kernel(const float *gate, const float *up, float *out, int n) {
    for (int i = 0; i < n; i++)
        out[i] = gate[i] / (1.0f + (gate[i] < 0 ? -gate[i] : gate[i])) * up[i];
}

NOINLINE void allreduce_ring_kernel(float *buf, unsigned long n, int rank) {
    for (unsigned long i = 0; i < n; i++)
        buf[i] += (float)rank;
}

/* ---- launch functions ---- */

static dim3 make_dim3(unsigned x, unsigned y, unsigned z) {
    dim3 d = {x, y, z};
    return d;
}

static unsigned ceil_div(unsigned long a, unsigned b) {
    return (unsigned)((a + b - 1) / b);
}

NOINLINE int launch_rmsnorm(void *stream, unsigned tokens, unsigned hidden) {
    const float *x = NULL, *weight = NULL;
    float *y = NULL, eps = 1e-6f;
    int h = (int)hidden;
    void *args[] = {&x, &weight, &y, &h, &eps};
    int status = cudaLaunchKernel((const void *)rmsnorm_kernel, make_dim3(tokens, 1, 1),
                                  make_dim3(256, 1, 1), args, 0, (cudaStream_t)stream);
    KEEP_FRAME();
    atomic_fetch_add(&launches_rt, 1);
    return status;
}

NOINLINE int launch_matmul(void *stream, unsigned m, unsigned n, unsigned k) {
    const uint16_t *a = NULL, *b = NULL;
    uint16_t *c = NULL;
    int mm = (int)m, nn = (int)n, kk = (int)k;
    void *args[] = {&a, &b, &c, &mm, &nn, &kk};
    int status = cudaLaunchKernel((const void *)gemm_bf16_kernel,
                                  make_dim3(ceil_div(n, 128), ceil_div(m, 128), 1),
                                  make_dim3(256, 1, 1), args, 49152, (cudaStream_t)stream);
    KEEP_FRAME();
    atomic_fetch_add(&launches_rt, 1);
    return status;
}

NOINLINE int launch_attention(void *stream, unsigned batch, unsigned heads, unsigned seq_len) {
    const uint16_t *q = NULL, *k = NULL, *v = NULL;
    uint16_t *out = NULL;
    int len = (int)seq_len;
    void *args[] = {&q, &k, &v, &out, &len};
    cudaLaunchConfig_t config = {
        .gridDim = make_dim3(ceil_div(seq_len, 128), heads, batch),
        .blockDim = make_dim3(128, 1, 1),
        .dynamicSmemBytes = 98304,
        .stream = (cudaStream_t)stream,
        .attrs = NULL,
        .numAttrs = 0,
    };
    int status = cudaLaunchKernelExC(&config, (const void *)flash_attn_fwd_kernel, args);
    KEEP_FRAME();
    atomic_fetch_add(&launches_rt_exc, 1);
    return status;
}

NOINLINE int launch_silu_mul(void *stream, unsigned tokens, unsigned intermediate) {
    const float *gate = NULL, *up = NULL;
    float *out = NULL;
    int n = (int)(tokens * intermediate);
    void *params[] = {&gate, &up, &out, &n};
    int status = cuLaunchKernel((CUfunction)(uintptr_t)silu_mul_kernel,
                                ceil_div((unsigned long)tokens * intermediate, 1024), 1, 1, 1024, 1,
                                1, 0, (CUstream)stream, params, NULL);
    KEEP_FRAME();
    atomic_fetch_add(&launches_drv, 1);
    return status;
}

NOINLINE int launch_allreduce_stub(void *stream, unsigned long elements) {
    float *buf = NULL;
    unsigned long n = elements;
    int rank = 0;
    void *params[] = {&buf, &n, &rank};
    int status = cuLaunchKernel((CUfunction)(uintptr_t)allreduce_ring_kernel, 16, 1, 1, 512, 1, 1,
                                0, (CUstream)stream, params, NULL);
    KEEP_FRAME();
    atomic_fetch_add(&launches_drv, 1);
    return status;
}

NOINLINE int launch_decode_graph(void *stream, unsigned graph_id) {
    cudaGraphExec_t exec = (cudaGraphExec_t)(uintptr_t)(0x6a000 + graph_id);
    int status = cudaGraphLaunch(exec, (cudaStream_t)stream);
    KEEP_FRAME();
    atomic_fetch_add(&launches_graph, 1);
    return status;
}

void demo_kernels_stats(struct demo_launch_stats *out) {
    out->cuda_launch_kernel = atomic_load(&launches_rt);
    out->cuda_launch_kernel_exc = atomic_load(&launches_rt_exc);
    out->cuda_graph_launch = atomic_load(&launches_graph);
    out->cu_launch_kernel = atomic_load(&launches_drv);
}
