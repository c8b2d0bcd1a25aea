/* cupti_app: the workload for testing libncclprobe_cupti.so without a GPU. It loads the
 * injection library the way the CUDA driver would (dlopen + InitializeInjection), pointing it at
 * the CUPTI test double it is linked with (libcupti_replay.so), then makes REAL calls into the
 * toolkit's libcudart (they fail: no GPU) and, right after each one on the same thread, plays
 * what the driver and GPU would have told CUPTI: the API callbacks and activity records,
 * scripted through cupti_replay_*. What it scripted is written to --expect as the truth:
 *
 *   main -> run_scenario -> run_eager/run_graph/run_copies -> eager_launch/graph_launch/...
 *   thread_main -> run_thread_launches -> thread_launch            (--scenario threads)
 *     -> cudaLaunchKernel / cudaGraphLaunch / cudaMemcpyAsync / cudaMemsetAsync, then
 *     -> cupti_replay_api_ex (ENTER/EXIT callbacks) and cupti_replay_kernel/memcpy/memset
 *
 * --scenario live: a process the CUPTI library is loaded into while it runs (ncclprobe's
 * injector, or a test calling ncclprobe_cupti_attach). Nothing is loaded at start (unless
 * --injection says so); the kernel handles are made first (cuModuleGetFunction and
 * cuLibraryGetKernel of libfakecuda.so, the driver test double), then `ready PID` is printed and
 * --threads threads (default 1) launch until SIGTERM, SIGINT or SIGUSR2:
 *   live_main -> run_live_round -> live_rt_launch  -> eager_launch -> cudaLaunchKernel
 *                               -> live_drv_launch -> cuLaunchKernel (libfakecuda.so), of a
 *                                  CUfunction and of a CUkernel passed as one
 * each followed by its CUPTI side with the same parameters. CUPTI's symbolName is given for the
 * runtime launches only: the driver launches must be named by the driver's own query
 * (cuFuncGetName / cuKernelGetName). Each --expect line also says whether a subscriber held
 * CUPTI once the call's records were scripted ("subscriber") and the launch's function handle
 * ("handle"); its "gpu" holds the records the double took (none before the library turned
 * CUPTI on).
 *
 * --scenario capture: a CUDA graph made by stream capture through libfakecuda.so's driver API,
 * with CUPTI's graph-node resource callbacks (unless --no-graph-nodes):
 *   main -> run_scenario -> run_capture -> capture_model -> capture_attention|capture_mlp|
 *     capture_proj -> capture_launch -> cuLaunchKernel     (captured: ENTER, GRAPHNODE_CREATED,
 *                                                           EXIT; no GPU work)
 *                                       -> instantiate_graph -> cuGraphInstantiateWithFlags
 *                                                          (GRAPHNODE_CLONED per node)
 *                      run_capture -> eager_after -> cuLaunchKernel              (eager)
 *                      run_capture -> replay_step -> cuGraphLaunch    (a kernel record per node,
 *                                                                      last node queued first) */
#include <dlfcn.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "cuda_api.h"
#include "cupti_replay.h"
#include "progs_common.h"

#include <signal.h>

/* Third grid dimension of every launch: which scenario made it. */
enum scenario_code {
    CODE_EAGER = 1,
    CODE_GRAPH = 2,
    CODE_COPIES = 3,
    CODE_THREADS = 4,
    CODE_LIVE_RT = 5,  /* live: cudaLaunchKernel */
    CODE_LIVE_DRV = 6, /* live: cuLaunchKernel of a CUfunction */
    CODE_LIVE_LIB = 7, /* live: cuLaunchKernel of a CUkernel */
    CODE_CAPTURE = 8,  /* capture: captured and eager cuLaunchKernel */
};

enum { GPU_KERNEL, GPU_MEMCPY, GPU_MEMSET };

#define MAX_GPU_RECORDS 8
#define GPU_DEVICE 0
#define EAGER_STREAM_ID 7 /* CUPTI stream ids of the records */
#define GRAPH_STREAM_ID 9
#define COPY_STREAM_ID 11
#define LIVE_STREAM_ID 13
#define GRAPH_ID 1
#define GRAPH_KERNEL_NODES 5
#define GRAPH_MEMCPY_BYTES 4096
#define COPY_BYTES 65536
#define MEMSET_BYTES 32768
#define GPU_DELAY_NS 20000 /* first GPU record starts this long after the API call */
#define REVERSE_BATCH 3    /* records per buffer with --reverse-buffers */

#define STREAM(value) ((cudaStream_t)(uintptr_t)(value))

/* One GPU record as scripted (and as written to --expect). */
struct gpu_record {
    int type;
    const char *name; /* kernels */
    uint8_t copy_kind;
    uint64_t bytes;
    uint64_t start_ns;
    uint64_t end_ns;
    uint32_t stream;
    uint32_t graph_id;
    uint64_t graph_node_id;
    const char *capture_site; /* capture scenario's replays: the function that captured the node */
};

/* One API call and the GPU work it caused. */
struct call_truth {
    const char *api;
    bool has_grid;
    dim3 grid;
    bool live;       /* live scenario: handle and subscriber are written too */
    uint64_t handle; /* the launched function's handle */
    bool subscriber; /* a CUPTI subscriber existed once the callbacks were made */
    bool captured;   /* capture: a launch that became a graph node (kernel, capture_site too) */
    const char *kernel;
    const char *capture_site;
    uint64_t graph_node_id; /* captured: the node's id as CUPTI announced it (0: never) */
    long replay;            /* capture's cuGraphLaunch: which replay (else -1) */
    uint32_t corr;
    long tid;
    int n_gpu;
    int taken; /* of gpu[], how many the double took */
    struct gpu_record gpu[MAX_GPU_RECORDS];
};

struct options {
    const char *injection;
    const char *scenario;
    long threads;
    long iters;
    bool reverse_buffers;
    long drop;
    const char *expect;
    bool wait_signal;
    bool no_records; /* the GPU never reports: launches stay without records */
    bool threads_given;
    long sleep_us;            /* live: pause between rounds */
    long pace_us;             /* other scenarios: pause after each call (0: none) */
    bool no_graph_nodes;      /* capture: CUPTI announces no graph nodes */
    bool replay_until_signal; /* capture: replays until a stop signal, not --iters */
};

static struct options opts = {.scenario = "eager", .threads = 8, .iters = 4, .sleep_us = 1000};
static FILE *expect_file;
static pthread_mutex_t expect_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint launch_seq; /* makes every GPU duration distinct */
static pthread_barrier_t start_gate;
static char host_src[COPY_BYTES], host_dst[COPY_BYTES];

/* Stand-in "kernels": host functions whose addresses are the launches' func argument. Their
 * bodies differ so the linker cannot fold them into one. */
NOINLINE void eager_kernel_a(float *data, int n) {
    for (int i = 0; i < n; i++)
        data[i] += 1.0f;
}

NOINLINE void eager_kernel_b(float *data, int n) {
    for (int i = 0; i < n; i++)
        data[i] *= 2.0f;
}

/* ---- the truth file ---- */

struct text {
    char buf[4096];
    size_t len;
};

static void append(struct text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, sizeof(t->buf) - t->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->len += (size_t)n < sizeof(t->buf) - t->len ? (size_t)n : sizeof(t->buf) - t->len - 1;
}

static const char *copy_kind_name(uint8_t kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
        return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
        return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
        return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
        return "HtoH";
    default:
        return "Unknown";
    }
}

static void append_gpu_record(struct text *t, const struct gpu_record *r) {
    if (r->type == GPU_KERNEL)
        append(t, "{\"type\":\"kernel\",\"name\":\"%s\"", r->name);
    else if (r->type == GPU_MEMCPY)
        append(t, "{\"type\":\"memcpy\",\"copy_kind\":\"%s\",\"bytes\":%lu",
               copy_kind_name(r->copy_kind), (unsigned long)r->bytes);
    else
        append(t, "{\"type\":\"memset\",\"bytes\":%lu", (unsigned long)r->bytes);
    append(t,
           ",\"start_ns\":%lu,\"end_ns\":%lu,\"device\":%d,\"stream\":%u,\"graph_id\":%u,"
           "\"graph_node_id\":%lu",
           (unsigned long)r->start_ns, (unsigned long)r->end_ns, GPU_DEVICE, r->stream, r->graph_id,
           (unsigned long)r->graph_node_id);
    if (r->capture_site)
        append(t, ",\"capture_site\":\"%s\"", r->capture_site);
    append(t, "}");
}

static void write_line(const struct text *t) {
    if (!expect_file)
        return;
    pthread_mutex_lock(&expect_lock);
    fprintf(expect_file, "%s\n", t->buf);
    fflush(expect_file); /* whole lines, for a reader while the app runs */
    pthread_mutex_unlock(&expect_lock);
}

static void write_truth(const struct call_truth *c) {
    if (opts.pace_us && !c->live) /* a steady rate: launches go on while ncclprobe switches */
        progs_sleep_us(opts.pace_us);
    struct text t = {.len = 0};
    append(&t, "{\"tid\":%ld,\"api\":\"%s\"", c->tid, c->api);
    if (c->has_grid)
        append(&t, ",\"grid\":[%u,%u,%u]", c->grid.x, c->grid.y, c->grid.z);
    if (c->live)
        append(&t, ",\"handle\":%lu,\"subscriber\":%s", (unsigned long)c->handle,
               c->subscriber ? "true" : "false");
    if (c->captured)
        append(&t, ",\"captured\":true");
    append(&t, ",\"correlation_id\":%u", c->corr);
    if (c->captured)
        append(&t, ",\"kernel\":\"%s\",\"capture_site\":\"%s\",\"graph_node_id\":%lu", c->kernel,
               c->capture_site, (unsigned long)c->graph_node_id);
    if (c->replay >= 0)
        append(&t, ",\"replay\":%ld", c->replay);
    append(&t, ",\"gpu\":[");
    for (int i = 0; i < c->n_gpu; i++) {
        append(&t, i ? "," : "");
        append_gpu_record(&t, &c->gpu[i]);
    }
    append(&t, "]}");
    write_line(&t);
}

static void write_dropped(long dropped) {
    struct text t = {.len = 0};
    append(&t, "{\"dropped\":%ld}", dropped);
    write_line(&t);
}

/* ---- scripting the GPU side ---- */

static struct gpu_record *add_gpu(struct call_truth *c, int type, uint64_t start_ns,
                                  uint64_t duration_ns, uint32_t stream) {
    struct gpu_record *r = &c->gpu[c->n_gpu++];
    memset(r, 0, sizeof(*r));
    r->type = type;
    r->start_ns = start_ns;
    r->end_ns = start_ns + duration_ns;
    r->stream = stream;
    return r;
}

/* Queues c's GPU records with the double (each is dropped there if its kind is off); returns
 * how many it took. */
static int script_gpu(const struct call_truth *c) {
    int taken = 0;
    for (int i = 0; i < c->n_gpu && !opts.no_records; i++) {
        const struct gpu_record *r = &c->gpu[i];
        int rc;
        if (r->type == GPU_KERNEL)
            rc = cupti_replay_kernel(c->corr, r->name, r->start_ns, r->end_ns, GPU_DEVICE,
                                     r->stream, r->graph_id, r->graph_node_id);
        else if (r->type == GPU_MEMCPY)
            rc = cupti_replay_memcpy(c->corr, r->copy_kind, r->bytes, r->start_ns, r->end_ns,
                                     GPU_DEVICE, r->stream, r->graph_id, r->graph_node_id);
        else
            rc = cupti_replay_memset(c->corr, r->bytes, r->start_ns, r->end_ns, GPU_DEVICE,
                                     r->stream, r->graph_id, r->graph_node_id);
        taken += rc == 0;
    }
    return taken;
}

/* A duration no other launch of this process has. */
static uint64_t distinct_duration_ns(void) {
    return 2000 + 50 * (uint64_t)atomic_fetch_add(&launch_seq, 1);
}

/* ---- call sites: a real libcudart call, then the CUPTI side on the same thread ---- */

/* cudaLaunchKernel(stub, grid, {128,1,1}, args, 0, 0x5030): one kernel record named
 * `kernel_name` on stream 7, starting GPU_DELAY_NS after the call. */
NOINLINE void eager_launch(struct call_truth *c, const void *stub, const char *kernel_name,
                           dim3 grid) {
    float value = 1.0f;
    float *data = &value;
    int n = 1;
    void *args[] = {&data, &n};
    dim3 block = {128, 1, 1};
    cudaLaunchKernel_v7000_params params = {stub, grid, block, args, 0, STREAM(0x5030)};
    cudaError_t status = cudaLaunchKernel(stub, grid, block, args, 0, STREAM(0x5030));
    KEEP_FRAME();
    c->corr = cupti_replay_api_ex(CUPTI_CB_DOMAIN_RUNTIME_API,
                                  CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
                                  "cudaLaunchKernel", kernel_name, &params, (int)status);
    KEEP_FRAME();
    struct gpu_record *k = add_gpu(c, GPU_KERNEL, cupti_replay_now() + GPU_DELAY_NS,
                                   distinct_duration_ns(), EAGER_STREAM_ID);
    k->name = kernel_name;
    c->api = "cudaLaunchKernel";
    c->has_grid = true;
    c->grid = grid;
    c->tid = progs_gettid();
    c->taken = script_gpu(c);
}

/* cudaGraphLaunch(0x6000, 0x5003): kernels graph_node_1..5 (graph 1, nodes 1..5) and an HtoD
 * memcpy node (node 6), all with the launch's correlation id. */
NOINLINE void graph_launch(struct call_truth *c) {
    cudaGraphExec_t exec = (cudaGraphExec_t)(uintptr_t)0x6000;
    cudaGraphLaunch_v10000_params params = {exec, STREAM(0x5003)};
    cudaError_t status = cudaGraphLaunch(exec, STREAM(0x5003));
    KEEP_FRAME();
    c->corr = cupti_replay_api_ex(CUPTI_CB_DOMAIN_RUNTIME_API,
                                  CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
                                  "cudaGraphLaunch", NULL, &params, (int)status);
    KEEP_FRAME();
    static const char *const names[GRAPH_KERNEL_NODES] = {
        "graph_node_1", "graph_node_2", "graph_node_3", "graph_node_4", "graph_node_5"};
    uint64_t start = cupti_replay_now() + GPU_DELAY_NS;
    for (int node = 1; node <= GRAPH_KERNEL_NODES + 1; node++, start += 5000) {
        bool copy = node > GRAPH_KERNEL_NODES;
        struct gpu_record *r = add_gpu(c, copy ? GPU_MEMCPY : GPU_KERNEL, start,
                                       distinct_duration_ns(), GRAPH_STREAM_ID);
        r->name = copy ? NULL : names[node - 1];
        r->copy_kind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
        r->bytes = copy ? GRAPH_MEMCPY_BYTES : 0;
        r->graph_id = GRAPH_ID;
        r->graph_node_id = (uint64_t)node;
    }
    c->api = "cudaGraphLaunch";
    c->tid = progs_gettid();
    script_gpu(c);
}

/* cudaMemcpyAsync(host_dst, host_src, 65536, HostToDevice, 0x5031): one HtoD memcpy record. */
NOINLINE void memcpy_call(struct call_truth *c) {
    cudaMemcpyAsync_v3020_params params = {host_dst, host_src, COPY_BYTES, cudaMemcpyHostToDevice,
                                           STREAM(0x5031)};
    cudaError_t status =
        cudaMemcpyAsync(host_dst, host_src, COPY_BYTES, cudaMemcpyHostToDevice, STREAM(0x5031));
    KEEP_FRAME();
    c->corr = cupti_replay_api_ex(CUPTI_CB_DOMAIN_RUNTIME_API,
                                  CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, "cudaMemcpyAsync",
                                  NULL, &params, (int)status);
    KEEP_FRAME();
    struct gpu_record *r = add_gpu(c, GPU_MEMCPY, cupti_replay_now() + GPU_DELAY_NS,
                                   distinct_duration_ns(), COPY_STREAM_ID);
    r->copy_kind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    r->bytes = COPY_BYTES;
    c->api = "cudaMemcpyAsync";
    c->tid = progs_gettid();
    script_gpu(c);
}

/* cudaMemsetAsync(host_dst, 0, 32768, 0x5031): one memset record. */
NOINLINE void memset_call(struct call_truth *c) {
    cudaMemsetAsync_v3020_params params = {host_dst, 0, MEMSET_BYTES, STREAM(0x5031)};
    cudaError_t status = cudaMemsetAsync(host_dst, 0, MEMSET_BYTES, STREAM(0x5031));
    KEEP_FRAME();
    c->corr = cupti_replay_api_ex(CUPTI_CB_DOMAIN_RUNTIME_API,
                                  CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, "cudaMemsetAsync",
                                  NULL, &params, (int)status);
    KEEP_FRAME();
    struct gpu_record *r = add_gpu(c, GPU_MEMSET, cupti_replay_now() + GPU_DELAY_NS,
                                   distinct_duration_ns(), COPY_STREAM_ID);
    r->bytes = MEMSET_BYTES;
    c->api = "cudaMemsetAsync";
    c->tid = progs_gettid();
    script_gpu(c);
}

/* ---- scenarios ---- */

static dim3 launch_grid(long thread_index, long iteration, unsigned code) {
    dim3 grid = {(unsigned)thread_index + 1, (unsigned)iteration + 1, code};
    return grid;
}

/* eager: --iters launches on this thread, eager_kernel_a and eager_kernel_b alternating. */
NOINLINE long run_eager(void) {
    for (long it = 0; it < opts.iters; it++) {
        struct call_truth c = {.replay = -1};
        bool b = it % 2 == 1;
        eager_launch(&c, b ? (const void *)eager_kernel_b : (const void *)eager_kernel_a,
                     b ? "eager_kernel_b" : "eager_kernel_a", launch_grid(0, it, CODE_EAGER));
        KEEP_FRAME();
        write_truth(&c);
    }
    return opts.iters;
}

NOINLINE long run_graph(void) {
    for (long it = 0; it < opts.iters; it++) {
        struct call_truth c = {.replay = -1};
        graph_launch(&c);
        KEEP_FRAME();
        write_truth(&c);
    }
    return opts.iters;
}

/* memcpy: per iteration one cudaMemcpyAsync and one cudaMemsetAsync (no launches). */
NOINLINE long run_copies(void) {
    for (long it = 0; it < opts.iters; it++) {
        struct call_truth copy = {.replay = -1}, set = {.replay = -1};
        memcpy_call(&copy);
        KEEP_FRAME();
        write_truth(&copy);
        memset_call(&set);
        KEEP_FRAME();
        write_truth(&set);
    }
    return 2 * opts.iters;
}

/* threads: thread i launches stub eager_kernel_a --iters times; CUPTI names the kernel
 * thread_kernel_<i>. */
NOINLINE void thread_launch(long index, long it, const char *kernel_name) {
    struct call_truth c = {.replay = -1};
    eager_launch(&c, (const void *)eager_kernel_a, kernel_name,
                 launch_grid(index, it, CODE_THREADS));
    KEEP_FRAME();
    write_truth(&c);
}

struct worker {
    pthread_t thread;
    long index;
    char kernel_name[48];
};

NOINLINE void run_thread_launches(struct worker *w) {
    for (long it = 0; it < opts.iters; it++) {
        thread_launch(w->index, it, w->kernel_name);
        KEEP_FRAME();
    }
    printf("thread tid=%ld scenario=threads calls=%ld\n", progs_gettid(), opts.iters);
}

NOINLINE void *thread_main(void *arg) {
    pthread_barrier_wait(&start_gate);
    run_thread_launches(arg);
    KEEP_FRAME();
    return NULL;
}

static struct worker *start_workers(void) {
    struct worker *workers = calloc((size_t)opts.threads, sizeof(*workers));
    if (!workers)
        exit(PROGS_EXIT_RUNTIME);
    pthread_barrier_init(&start_gate, NULL, (unsigned)opts.threads + 1);
    for (long i = 0; i < opts.threads; i++) {
        workers[i].index = i;
        snprintf(workers[i].kernel_name, sizeof(workers[i].kernel_name), "thread_kernel_%ld", i);
        int err = pthread_create(&workers[i].thread, NULL, thread_main, &workers[i]);
        if (err != 0) {
            fprintf(stderr, "cupti_app: pthread_create: %s\n", strerror(err));
            exit(PROGS_EXIT_RUNTIME);
        }
    }
    return workers;
}

static void join_workers(struct worker *workers) {
    pthread_barrier_wait(&start_gate);
    for (long i = 0; i < opts.threads; i++)
        pthread_join(workers[i].thread, NULL);
    free(workers);
}

/* ---- capture: a CUDA graph captured through the driver double, with CUPTI's graph nodes ---- */

#define CAPTURE_NODES 4
#define CAPTURE_GRAPH_ID 1       /* cuptiGetGraphId of the captured graph */
#define EXEC_GRAPH_ID 2          /* of the executable graph's: what the replays' records say */
#define CAPTURE_NODE_ID_BASE 101 /* cuptiGetGraphNodeId of the captured nodes: 101, 102, ... */
#define CLONE_NODE_ID_BASE 1001  /* of their clones in the executable graph: 1001, 1002, ... */
#define REPLAY_GAP_NS 5000       /* between the starts of a replay's nodes */
#define CAPTURE_MODULE ((CUmodule)(uintptr_t)0x30)

enum { KERNEL_ATTN, KERNEL_GEMM, KERNEL_MLP, CAPTURE_KERNELS };

static const char *const capture_kernel_names[CAPTURE_KERNELS] = {"attn_kernel", "gemm_kernel",
                                                                  "mlp_kernel"};

/* One captured launch: its graph node (the driver double's) and that node's clone in the
 * executable graph (a handle of ours: the double's executable graph has no node handles). */
struct captured_node {
    const char *kernel;
    const char *site; /* the function that captured it */
    CUgraphNode node;
    uint64_t id;
    CUgraphNode clone;
    uint64_t clone_id;
};

static struct {
    CUfunction fn[CAPTURE_KERNELS];
    CUstream stream;       /* captured, then replayed on */
    CUstream eager_stream; /* the eager launch, never capturing */
    CUgraph graph;
    CUgraphExec exec;
    int n;
    struct captured_node nodes[CAPTURE_NODES];
    uint64_t stream_busy_until; /* the last replay's last end: replays on S do not overlap */
} cap;

/* Distinct addresses for the synthetic handles: the executable graph's graph and node clones. */
static char exec_graph_storage, clone_storage[CAPTURE_NODES];

static void check_cu(CUresult rc, const char *what) {
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "cupti_app: %s: CUDA error %d\n", what, (int)rc);
        exit(PROGS_EXIT_RUNTIME);
    }
}

static void capture_setup(void) {
    for (int k = 0; k < CAPTURE_KERNELS; k++)
        check_cu(cuModuleGetFunction(&cap.fn[k], CAPTURE_MODULE, capture_kernel_names[k]),
                 "cuModuleGetFunction");
    check_cu(cuStreamCreate(&cap.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    check_cu(cuStreamCreate(&cap.eager_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
}

/* The graph s captures into and the node its last captured launch made (the stream's one
 * dependency now). */
static CUgraphNode last_captured_node(CUstream s, CUgraph *graph) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUgraphNode *deps = NULL;
    size_t n = 0;
    check_cu(cuStreamGetCaptureInfo(s, &status, NULL, graph, &deps, NULL, &n),
             "cuStreamGetCaptureInfo");
    if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE || n != 1 || !deps[0]) {
        fprintf(stderr, "cupti_app: capture status %d, %zu dependencies\n", (int)status, n);
        exit(PROGS_EXIT_RUNTIME);
    }
    return deps[0];
}

/* cuLaunchKernel(kernel, {x,1,8}, {128,1,1}, 0, S) on the capturing stream: a graph node, no GPU
 * work. Its CUPTI side as CUPTI orders it inside the call: ENTER, the node's GRAPHNODE_CREATED
 * (unless --no-graph-nodes), EXIT. */
NOINLINE void capture_launch(const char *site, int kernel, unsigned x) {
    CUfunction f = cap.fn[kernel];
    const char *name = capture_kernel_names[kernel];
    CUstream s = cap.stream;
    dim3 grid = {x, 1, CODE_CAPTURE};
    cuLaunchKernel_params params = {f, grid.x, grid.y, grid.z, 128, 1, 1, 0, s, NULL, NULL};
    CUresult status = cuLaunchKernel(f, grid.x, grid.y, grid.z, 128, 1, 1, 0, s, NULL, NULL);
    KEEP_FRAME();
    check_cu(status, "cuLaunchKernel (captured)");
    struct call_truth c = {.replay = -1};
    c.corr =
        cupti_replay_api_enter(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                               "cuLaunchKernel", name, &params);
    KEEP_FRAME();
    struct captured_node *n = &cap.nodes[cap.n];
    CUgraph graph = NULL;
    n->kernel = name;
    n->site = site;
    n->node = last_captured_node(s, &graph);
    n->id = CAPTURE_NODE_ID_BASE + (uint64_t)cap.n;
    cupti_replay_set_graph_node_id(n->node, n->id);
    if (!opts.no_graph_nodes) {
        CUpti_GraphData created = {
            .graph = graph, .node = n->node, .nodeType = CU_GRAPH_NODE_TYPE_KERNEL};
        cupti_replay_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, NULL, &created);
    }
    cupti_replay_api_exit(c.corr, (int)status);
    KEEP_FRAME();
    cap.n++;
    c.api = "cuLaunchKernel";
    c.has_grid = true;
    c.grid = grid;
    c.captured = true;
    c.kernel = name;
    c.capture_site = site;
    c.graph_node_id = opts.no_graph_nodes ? 0 : n->id;
    c.tid = progs_gettid();
    write_truth(&c);
}

NOINLINE void capture_attention(void) {
    capture_launch(__func__, KERNEL_ATTN, 1);
    KEEP_FRAME();
}

NOINLINE void capture_mlp(void) {
    capture_launch(__func__, KERNEL_GEMM, 2);
    KEEP_FRAME();
    capture_launch(__func__, KERNEL_MLP, 3);
    KEEP_FRAME();
}

/* The same kernel as capture_mlp's first node, captured at another site. */
NOINLINE void capture_proj(void) {
    capture_launch(__func__, KERNEL_GEMM, 4);
    KEEP_FRAME();
}

/* cuGraphInstantiate (cuGraphInstantiateWithFlags), then CUPTI's GRAPHNODE_CLONED for each node
 * in capture order (unless --no-graph-nodes): the executable graph's copies, whose ids the
 * replays' records carry. */
NOINLINE void instantiate_graph(void) {
    CUresult status = cuGraphInstantiate(&cap.exec, cap.graph, 0);
    KEEP_FRAME();
    check_cu(status, "cuGraphInstantiate");
    CUgraph exec_graph = (CUgraph)(void *)&exec_graph_storage;
    cupti_replay_set_graph_id(exec_graph, EXEC_GRAPH_ID);
    for (int i = 0; i < cap.n; i++) {
        struct captured_node *n = &cap.nodes[i];
        n->clone = (CUgraphNode)(void *)&clone_storage[i];
        n->clone_id = CLONE_NODE_ID_BASE + (uint64_t)i;
        cupti_replay_set_graph_node_id(n->clone, n->clone_id);
        if (opts.no_graph_nodes)
            continue;
        CUpti_GraphData cloned = {.graph = exec_graph,
                                  .originalGraph = cap.graph,
                                  .node = n->clone,
                                  .originalNode = n->node,
                                  .nodeType = CU_GRAPH_NODE_TYPE_KERNEL,
                                  .graphExec = cap.exec};
        cupti_replay_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, NULL, &cloned);
    }
}

/* The captured graph holds exactly the captured nodes, in capture order. */
static void check_graph_nodes(void) {
    CUgraphNode nodes[CAPTURE_NODES + 1];
    size_t n = CAPTURE_NODES + 1;
    check_cu(cuGraphGetNodes(cap.graph, nodes, &n), "cuGraphGetNodes");
    bool same = n == (size_t)cap.n;
    for (size_t i = 0; same && i < n; i++)
        same = nodes[i] == cap.nodes[i].node;
    if (!same) {
        fprintf(stderr, "cupti_app: the captured graph has %zu nodes, not the %d captured\n", n,
                cap.n);
        exit(PROGS_EXIT_RUNTIME);
    }
}

/* Captures attention, mlp and proj on S in global mode into graph G (id 1), then instantiates
 * it. */
NOINLINE void capture_model(void) {
    CUresult status = cuStreamBeginCapture(cap.stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
    KEEP_FRAME();
    check_cu(status, "cuStreamBeginCapture");
    CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
    CUgraph graph = NULL;
    check_cu(cuStreamGetCaptureInfo(cap.stream, &capturing, NULL, &graph, NULL, NULL, NULL),
             "cuStreamGetCaptureInfo");
    cupti_replay_set_graph_id(graph, CAPTURE_GRAPH_ID);
    capture_attention();
    KEEP_FRAME();
    capture_mlp();
    KEEP_FRAME();
    capture_proj();
    KEEP_FRAME();
    status = cuStreamEndCapture(cap.stream, &cap.graph);
    KEEP_FRAME();
    check_cu(status, "cuStreamEndCapture");
    if (cap.graph != graph) {
        fprintf(stderr, "cupti_app: cuStreamEndCapture gave another graph\n");
        exit(PROGS_EXIT_RUNTIME);
    }
    check_graph_nodes();
    instantiate_graph();
    KEEP_FRAME();
}

/* cuLaunchKernel(mlp_kernel, {5,1,8}, ...) on a stream that does not capture: it runs, one
 * kernel record outside any graph. */
NOINLINE void eager_after(struct call_truth *c) {
    CUfunction f = cap.fn[KERNEL_MLP];
    CUstream s = cap.eager_stream;
    dim3 grid = {CAPTURE_NODES + 1, 1, CODE_CAPTURE};
    cuLaunchKernel_params params = {f, grid.x, grid.y, grid.z, 128, 1, 1, 0, s, NULL, NULL};
    CUresult status = cuLaunchKernel(f, grid.x, grid.y, grid.z, 128, 1, 1, 0, s, NULL, NULL);
    KEEP_FRAME();
    c->corr = cupti_replay_api_ex(CUPTI_CB_DOMAIN_DRIVER_API,
                                  CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, "cuLaunchKernel",
                                  capture_kernel_names[KERNEL_MLP], &params, (int)status);
    KEEP_FRAME();
    struct gpu_record *k = add_gpu(c, GPU_KERNEL, cupti_replay_now() + GPU_DELAY_NS,
                                   distinct_duration_ns(), EAGER_STREAM_ID);
    k->name = capture_kernel_names[KERNEL_MLP];
    c->api = "cuLaunchKernel";
    c->has_grid = true;
    c->grid = grid;
    c->tid = progs_gettid();
    c->taken = script_gpu(c);
}

/* When each node of a replay starts, in REPLAY_GAP_NS steps: capture order, except that with
 * graph nodes announced the two gemm_kernel nodes swap (capture_proj's, node 3, runs before
 * capture_mlp's, node 1, as on a side stream): only the node ids tell them apart. */
static const int replay_start_slot[CAPTURE_NODES] = {0, 2, 3, 1};

/* cuGraphLaunch(exec, S): one kernel record per node, with the launch's correlation id, graph
 * id 2 and the clone's node id, queued last node first. A replay starts GPU_DELAY_NS after the
 * call, or once the previous one is over. */
NOINLINE void replay_step(struct call_truth *c, long replay) {
    CUresult status = cuGraphLaunch(cap.exec, cap.stream);
    KEEP_FRAME();
    check_cu(status, "cuGraphLaunch");
    cuGraphLaunch_params params = {cap.exec, cap.stream};
    c->corr = cupti_replay_api_ex(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
                                  "cuGraphLaunch", NULL, &params, (int)status);
    KEEP_FRAME();
    uint64_t start = cupti_replay_now() + GPU_DELAY_NS;
    if (start <= cap.stream_busy_until)
        start = cap.stream_busy_until + REPLAY_GAP_NS;
    for (int i = 0; i < cap.n; i++) {
        int slot = opts.no_graph_nodes ? i : replay_start_slot[i];
        struct gpu_record *r = add_gpu(c, GPU_KERNEL, start + (uint64_t)slot * REPLAY_GAP_NS,
                                       distinct_duration_ns(), GRAPH_STREAM_ID);
        r->name = cap.nodes[i].kernel;
        r->graph_id = EXEC_GRAPH_ID;
        r->graph_node_id = cap.nodes[i].clone_id;
        r->capture_site = cap.nodes[i].site;
        if (r->end_ns > cap.stream_busy_until)
            cap.stream_busy_until = r->end_ns;
    }
    for (int i = c->n_gpu - 1; i >= 0 && !opts.no_records; i--) {
        const struct gpu_record *r = &c->gpu[i];
        c->taken += cupti_replay_kernel(c->corr, r->name, r->start_ns, r->end_ns, GPU_DEVICE,
                                        r->stream, r->graph_id, r->graph_node_id) == 0;
    }
    c->api = "cuGraphLaunch";
    c->replay = replay;
    c->tid = progs_gettid();
}

static void catch_stop_signals(sigset_t *old);
static bool stop_requested(void);

/* --replay-until-signal: a replay every --sleep-us until SIGTERM, SIGINT or SIGUSR2, each
 * truth line saying whether a CUPTI subscriber existed when its records were scripted (a
 * library injected while it runs: earlier replays reached nobody). Returns the replays. */
static long replay_until_signal(void) {
    sigset_t old;
    catch_stop_signals(&old);
    pthread_sigmask(SIG_SETMASK, &old, NULL); /* the handler only sets a flag */
    long it = 0;
    for (; !stop_requested(); it++) {
        struct call_truth c = {.replay = -1, .live = true, .handle = (uintptr_t)cap.exec};
        c.subscriber = cupti_replay_subscribed();
        replay_step(&c, it);
        KEEP_FRAME();
        if (!c.subscriber)
            c.n_gpu = 0; /* nobody took them */
        write_truth(&c);
        progs_sleep_us(opts.sleep_us);
    }
    return it;
}

/* capture: the capture (4 captured launches), one eager launch, --iters replays (or until a
 * stop signal). */
NOINLINE long run_capture(void) {
    capture_setup();
    capture_model();
    KEEP_FRAME();
    struct call_truth eager = {.replay = -1};
    eager_after(&eager);
    KEEP_FRAME();
    write_truth(&eager);
    if (opts.replay_until_signal)
        return cap.n + 1 + replay_until_signal();
    for (long it = 0; it < opts.iters; it++) {
        struct call_truth c = {.replay = -1};
        replay_step(&c, it);
        KEEP_FRAME();
        write_truth(&c);
    }
    return cap.n + 1 + opts.iters;
}

/* bench (bench/fastpath.py): cudaLaunchKernel and its CUPTI callbacks, as eager_launch
 * makes them but with no GPU record and nothing written, in a loop: 1.5 s of warm-up (a
 * tracer switches its probes meanwhile), "bench-start", 0.3 s, then --iters timed
 * launches, "bench-done N WALL CPU" (ns per launch: wall clock, the thread's CPU time), and
 * 0.5 s more, so that a harness can read
 * the tracer's BPF statistics at both lines. */
NOINLINE static void bench_launch(dim3 grid) {
    float value = 1.0f;
    float *data = &value;
    int n = 1;
    void *args[] = {&data, &n};
    dim3 block = {128, 1, 1};
    const void *stub = (const void *)eager_kernel_a;
    cudaLaunchKernel_v7000_params params = {stub, grid, block, args, 0, STREAM(0x5030)};
    cudaError_t status = cudaLaunchKernel(stub, grid, block, args, 0, STREAM(0x5030));
    KEEP_FRAME();
    cupti_replay_api_ex(CUPTI_CB_DOMAIN_RUNTIME_API,
                        CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, "cudaLaunchKernel",
                        "eager_kernel_a", &params, (int)status);
    KEEP_FRAME();
}

NOINLINE static long run_bench(void) {
    const char *cpu = getenv("CUPTI_APP_BENCH_CPU"); /* the launching thread on this CPU */
    if (cpu && *cpu) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(atoi(cpu), &set);
        sched_setaffinity(0, sizeof(set), &set);
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t t0 = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec, now = t0;
    dim3 grid = {1, 1, 1};
    long warm = 0;
    while (now - t0 < 1500000000ull) {
        for (int i = 0; i < 100; i++, warm++)
            bench_launch(grid);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    }
    printf("bench-start\n");
    fflush(stdout);
    progs_sleep_us(300000);
    /* the thread's CPU time too (user + kernel: the uprobe handlers run in its context),
     * which time slices other processes take on a shared machine do not inflate */
    struct timespec cs;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cs);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t0 = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    uint64_t c0 = (uint64_t)cs.tv_sec * 1000000000ull + (uint64_t)cs.tv_nsec;
    for (long it = 0; it < opts.iters; it++)
        bench_launch(grid);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cs);
    now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    uint64_t c1 = (uint64_t)cs.tv_sec * 1000000000ull + (uint64_t)cs.tv_nsec;
    printf("bench-done %ld %.1f %.1f\n", opts.iters, (double)(now - t0) / (double)opts.iters,
           (double)(c1 - c0) / (double)opts.iters);
    fflush(stdout);
    progs_sleep_us(500000);
    return warm + opts.iters;
}

/* Runs the main-thread scenarios; returns the number of API calls made. */
NOINLINE long run_scenario(void) {
    long calls = 0;
    bool mixed = strcmp(opts.scenario, "mixed") == 0;
    if (mixed || strcmp(opts.scenario, "eager") == 0)
        calls += run_eager();
    KEEP_FRAME();
    if (mixed || strcmp(opts.scenario, "graph") == 0)
        calls += run_graph();
    KEEP_FRAME();
    if (mixed || strcmp(opts.scenario, "memcpy") == 0)
        calls += run_copies();
    KEEP_FRAME();
    if (strcmp(opts.scenario, "capture") == 0)
        calls += run_capture();
    if (strcmp(opts.scenario, "bench") == 0)
        calls += run_bench();
    KEEP_FRAME();
    return calls;
}

/* ---- live: the library comes while the process runs ---- */

#define LIVE_RT_KERNEL "live_rt_kernel"
#define LIVE_LIB_KERNEL "live_lib_kernel"
#define LIVE_MODULE ((CUmodule)(uintptr_t)0x10)
#define LIVE_LIBRARY ((CUlibrary)(uintptr_t)0x20)

static const char *const live_fn_names[2] = {"live_drv_kernel_a", "live_drv_kernel_b"};
static struct {
    CUfunction fn[2]; /* cuModuleGetFunction, before anything is loaded */
    CUkernel kernel;  /* cuLibraryGetKernel, launched as a CUfunction */
    volatile sig_atomic_t stop;
} live;

static void live_stop(int sig) {
    (void)sig;
    live.stop = 1;
}

static bool stop_requested(void) {
    return live.stop != 0;
}

/* The handles, made before any CUPTI library exists in the process. */
static void make_live_handles(void) {
    for (int i = 0; i < 2; i++)
        if (cuModuleGetFunction(&live.fn[i], LIVE_MODULE, live_fn_names[i]) != CUDA_SUCCESS)
            exit(PROGS_EXIT_RUNTIME);
    if (cuLibraryGetKernel(&live.kernel, LIVE_LIBRARY, LIVE_LIB_KERNEL) != CUDA_SUCCESS)
        exit(PROGS_EXIT_RUNTIME);
}

/* The live truth of c once its records were scripted: its handle, whether a subscriber held
 * CUPTI by then (if not, none did at its callbacks: the double took nothing), and only the
 * records the double took. */
static void mark_live(struct call_truth *c, const void *handle) {
    c->live = true;
    c->handle = (uint64_t)(uintptr_t)handle;
    c->subscriber = cupti_replay_subscribed();
    if (c->taken != c->n_gpu)
        c->n_gpu = 0;
}

/* The eager launch of eager_kernel_a; CUPTI's symbolName names it live_rt_kernel. */
NOINLINE void live_rt_launch(struct call_truth *c, dim3 grid) {
    eager_launch(c, (const void *)eager_kernel_a, LIVE_RT_KERNEL, grid);
    KEEP_FRAME();
    mark_live(c, (const void *)eager_kernel_a);
}

/* cuLaunchKernel(f, grid, 64,1,1, 0, 0x5041, NULL, NULL) through the driver double, one kernel
 * record on stream 13; CUPTI gives no symbolName: the library must ask the driver. */
NOINLINE void live_drv_launch(struct call_truth *c, CUfunction f, const char *kernel_name,
                              dim3 grid) {
    CUstream stream = (CUstream)(uintptr_t)0x5041;
    cuLaunchKernel_params params = {f, grid.x, grid.y, grid.z, 64, 1, 1, 0, stream, NULL, NULL};
    CUresult status = cuLaunchKernel(f, grid.x, grid.y, grid.z, 64, 1, 1, 0, stream, NULL, NULL);
    KEEP_FRAME();
    c->corr =
        cupti_replay_api_ex(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                            "cuLaunchKernel", NULL, &params, (int)status);
    KEEP_FRAME();
    struct gpu_record *k = add_gpu(c, GPU_KERNEL, cupti_replay_now() + GPU_DELAY_NS,
                                   distinct_duration_ns(), LIVE_STREAM_ID);
    k->name = kernel_name;
    c->api = "cuLaunchKernel";
    c->has_grid = true;
    c->grid = grid;
    c->tid = progs_gettid();
    c->taken = script_gpu(c);
    mark_live(c, f);
}

/* One round on thread `index`: a runtime launch, a driver launch of one of the CUfunctions
 * (alternating), a driver launch of the CUkernel. */
NOINLINE void run_live_round(long index, long round) {
    struct call_truth rt = {.replay = -1}, drv = {.replay = -1}, lib = {.replay = -1};
    live_rt_launch(&rt, launch_grid(index, round, CODE_LIVE_RT));
    KEEP_FRAME();
    write_truth(&rt);
    live_drv_launch(&drv, live.fn[round % 2], live_fn_names[round % 2],
                    launch_grid(index, round, CODE_LIVE_DRV));
    KEEP_FRAME();
    write_truth(&drv);
    live_drv_launch(&lib, (CUfunction)live.kernel, LIVE_LIB_KERNEL,
                    launch_grid(index, round, CODE_LIVE_LIB));
    KEEP_FRAME();
    write_truth(&lib);
}

NOINLINE void *live_main(void *arg) {
    long index = (long)(intptr_t)arg, round = 0;
    for (; !live.stop; round++) {
        run_live_round(index, round);
        KEEP_FRAME();
        progs_sleep_us(opts.sleep_us);
    }
    printf("thread tid=%ld scenario=live calls=%ld\n", progs_gettid(), 3 * round);
    return NULL;
}

/* SIGTERM, SIGINT and SIGUSR2 set live.stop; they are blocked here (and in the threads made
 * from here on) and taken in sigsuspend(old). */
static void catch_stop_signals(sigset_t *old) {
    static const int stops[] = {SIGTERM, SIGINT, SIGUSR2};
    struct sigaction sa = {.sa_handler = live_stop};
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof(stops) / sizeof(stops[0]); i++) {
        sigaddset(&set, stops[i]);
        if (sigaction(stops[i], &sa, NULL) != 0)
            exit(PROGS_EXIT_RUNTIME);
    }
    pthread_sigmask(SIG_BLOCK, &set, old);
}

/* --threads launchers (default 1) until a stop signal. */
static void run_live(void) {
    sigset_t old;
    catch_stop_signals(&old);
    long n = opts.threads_given ? opts.threads : 1;
    pthread_t *threads = calloc((size_t)n, sizeof(*threads));
    if (!threads)
        exit(PROGS_EXIT_RUNTIME);
    for (long i = 0; i < n; i++)
        if (pthread_create(&threads[i], NULL, live_main, (void *)(intptr_t)i) != 0)
            exit(PROGS_EXIT_RUNTIME);
    progs_announce_ready();
    while (!live.stop)
        sigsuspend(&old);
    for (long i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
    free(threads);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* ---- loading the injection library ---- */

/* Points the injection library at the double this program is linked with, unless the caller
 * chose a CUPTI already. */
static void export_cupti_path(void) {
    Dl_info info;
    char path[PATH_MAX];
    if (getenv("NCCLPROBE_CUPTI_LIBRARY"))
        return;
    if (!dladdr((void *)cupti_replay_now, &info) || !info.dli_fname ||
        !realpath(info.dli_fname, path)) {
        fprintf(stderr, "cupti_app: cannot locate libcupti_replay.so\n");
        exit(PROGS_EXIT_RUNTIME);
    }
    setenv("NCCLPROBE_CUPTI_LIBRARY", path, 1);
}

/* dlopen + InitializeInjection, as the driver does for CUDA_INJECTION64_PATH. A 0 return (the
 * library stayed out, e.g. CUPTI was busy) is reported and the program goes on. */
static void load_injection(const char *path) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "cupti_app: dlopen %s: %s\n", path, dlerror());
        exit(PROGS_EXIT_RUNTIME);
    }
    int (*init)(void);
    *(void **)(&init) = dlsym(lib, "InitializeInjection");
    if (!init) {
        fprintf(stderr, "cupti_app: %s has no InitializeInjection\n", path);
        exit(PROGS_EXIT_RUNTIME);
    }
    int rc = init();
    fprintf(stderr, "cupti_app: InitializeInjection returned %d\n", rc);
}

/* ---- options ---- */

static void usage(FILE *out) {
    fprintf(out,
            "usage: cupti_app [--injection LIB]\n"
            "                 [--scenario eager|graph|memcpy|threads|mixed|live|capture|bench]\n"
            "                 [--threads N] [--iters N] [--reverse-buffers] [--drop N]\n"
            "                 [--expect FILE] [--wait-signal] [--no-records] [--sleep-us N]\n"
            "                 [--no-graph-nodes] [--replay-until-signal] [--pace-us N]\n");
}

static bool known_scenario(const char *name) {
    static const char *const names[] = {"eager", "graph", "memcpy",  "threads",
                                        "mixed", "live",  "capture", "bench"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(name, names[i]) == 0)
            return true;
    return false;
}

static void parse_options(int argc, char **argv) {
    enum {
        OPT_INJ = 256,
        OPT_SCEN,
        OPT_THREADS,
        OPT_ITERS,
        OPT_REV,
        OPT_DROP,
        OPT_EXP,
        OPT_WAIT,
        OPT_NOREC,
        OPT_SLEEP,
        OPT_PACE,
        OPT_NO_NODES,
        OPT_REPLAY_LOOP
    };
    static const struct option long_opts[] = {
        {"injection", required_argument, NULL, OPT_INJ},
        {"scenario", required_argument, NULL, OPT_SCEN},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"iters", required_argument, NULL, OPT_ITERS},
        {"reverse-buffers", no_argument, NULL, OPT_REV},
        {"drop", required_argument, NULL, OPT_DROP},
        {"expect", required_argument, NULL, OPT_EXP},
        {"wait-signal", no_argument, NULL, OPT_WAIT},
        {"no-records", no_argument, NULL, OPT_NOREC},
        {"sleep-us", required_argument, NULL, OPT_SLEEP},
        {"pace-us", required_argument, NULL, OPT_PACE},
        {"no-graph-nodes", no_argument, NULL, OPT_NO_NODES},
        {"replay-until-signal", no_argument, NULL, OPT_REPLAY_LOOP},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        switch (opt) {
        case OPT_INJ:
            opts.injection = optarg;
            break;
        case OPT_SCEN:
            opts.scenario = optarg;
            break;
        case OPT_THREADS:
            opts.threads = progs_parse_long("--threads", optarg, 1);
            opts.threads_given = true;
            break;
        case OPT_ITERS:
            opts.iters = progs_parse_long("--iters", optarg, 0);
            break;
        case OPT_REV:
            opts.reverse_buffers = true;
            break;
        case OPT_DROP:
            opts.drop = progs_parse_long("--drop", optarg, 0);
            break;
        case OPT_EXP:
            opts.expect = optarg;
            break;
        case OPT_NOREC:
            opts.no_records = true;
            break;
        case OPT_SLEEP:
            opts.sleep_us = progs_parse_long("--sleep-us", optarg, 0);
            break;
        case OPT_PACE:
            opts.pace_us = progs_parse_long("--pace-us", optarg, 0);
            break;
        case OPT_WAIT:
            opts.wait_signal = true;
            break;
        case OPT_NO_NODES:
            opts.no_graph_nodes = true;
            break;
        case OPT_REPLAY_LOOP:
            opts.replay_until_signal = true;
            break;
        case 'h':
            usage(stdout);
            exit(PROGS_EXIT_OK);
        default:
            usage(stderr);
            exit(PROGS_EXIT_USAGE);
        }
    }
    if (optind != argc || !known_scenario(opts.scenario)) {
        usage(stderr);
        exit(PROGS_EXIT_USAGE);
    }
}

static void open_expect(void) {
    if (!opts.expect)
        return;
    expect_file = fopen(opts.expect, "w");
    if (!expect_file) {
        perror("cupti_app: --expect");
        exit(PROGS_EXIT_RUNTIME);
    }
}

/* live: a library loaded later finds the double through NCCLPROBE_CUPTI_LIBRARY too. */
static int main_live(void) {
    export_cupti_path();
    if (opts.injection)
        load_injection(opts.injection);
    make_live_handles();
    run_live();
    fflush(stdout);
    if (expect_file)
        fclose(expect_file);
    return PROGS_EXIT_OK; /* the library's final flush (atexit) runs now */
}

int main(int argc, char **argv) {
    parse_options(argc, argv);
    open_expect();
    if (strcmp(opts.scenario, "live") == 0)
        return main_live();
    if (opts.injection || opts.replay_until_signal) /* a library may come later, too */
        export_cupti_path();
    if (opts.injection)
        load_injection(opts.injection);
    bool threads = strcmp(opts.scenario, "threads") == 0;
    if (opts.wait_signal)
        progs_block_start_signal();
    struct worker *workers = threads ? start_workers() : NULL;
    if (opts.wait_signal) {
        progs_announce_ready();
        progs_wait_start_signal();
    }

    /* Out-of-order buffers from every flush too: the injection library may flush on its own
     * (periodically) before the explicit delivery below. */
    if (opts.reverse_buffers)
        cupti_replay_set_flush_order(REVERSE_BATCH, 1);
    if (opts.drop > 0)
        cupti_replay_drop((uint64_t)opts.drop);
    if (threads) {
        join_workers(workers);
    } else {
        long calls = run_scenario();
        KEEP_FRAME();
        printf("thread tid=%ld scenario=%s calls=%ld\n", progs_gettid(), opts.scenario, calls);
    }
    fflush(stdout);
    if (opts.reverse_buffers)
        cupti_replay_deliver(REVERSE_BATCH, 1);
    write_dropped(opts.drop);
    if (expect_file)
        fclose(expect_file);
    return PROGS_EXIT_OK; /* atexit handlers (the injection library's final flush) run now */
}
