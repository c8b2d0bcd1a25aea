/* graph_app: CUDA graphs made by stream capture and replayed, through the driver API of the test
 * double libfakecuda.so (fake_cuda_driver.c), for ncclprobe's graph tests. It prints its own
 * truth - every launch, by kind and call chain, with exact counts - so a test never takes its
 * expectations from ncclprobe. Stacks (every function here NOINLINE, calls never tail calls):
 *
 *   main -> build_graphs -> warmup -> launch_named -> cuLaunchKernel              (eager)
 *                        -> capture_model -> capture_attention -> launch_named     (captured)
 *                                         -> capture_mlp       -> launch_named (cuLaunchKernelEx
 *                                                                  for mlp_up_kernel)
 *                                         -> capture_allreduce -> launch_named (side stream:
 *                                                                  fork and join by events)
 *                        -> capture_prefill -> capture_attention, capture_mlp      (captured)
 *   eager_worker -> eager_step -> launch_named       (another thread, during the prefill capture)
 *   main -> serve -> decode_step -> cuGraphLaunch                                  (replayed)
 *                                -> sample_tokens -> launch_named                  (eager)
 *                 -> prefill_step -> cuGraphLaunch                                 (replayed)
 *   main -> update_graphs -> capture_model -> ...  -> cuGraphExecUpdate_v2 of the decode exec
 *   main -> recycle_graphs -> capture_prefill -> capture_attention -> ...  (same handle values)
 *
 * See README.md for the scenarios, the options and the truth format. Each function of a chain
 * says FRAME() first: the truth's chains are built from them at run time, so they are the call
 * chain by construction. */
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "fake_cuda.h"
#include "progs_common.h"

enum {
    SC_FORK = 1 << 0,
    SC_PREFILL = 1 << 1,
    SC_THREAD = 1 << 2,
    SC_UPDATE = 1 << 3,
    SC_RECYCLE = 1 << 4,
    SC_ALL = (1 << 5) - 1,
};

static const char *const scenario_names[] = {"fork", "prefill", "thread", "update", "recycle"};

#define THREAD_LAUNCHES 16 /* eager launches of the other thread during the prefill capture */
#define EXIT_SELFCHECK 1   /* the double disagrees with the truth */

static struct {
    long replays;         /* decode replays per serve round */
    long prefill_replays; /* prefill replays per serve round */
    unsigned scenarios;
    bool ptsz;
    bool wait_signal;
    bool attach_after_capture;
} opts = {.replays = 1000, .prefill_replays = 10, .scenarios = SC_ALL};

/* ---- the call chain of this thread, from main's callee (or the thread's entry) down ---- */

#define CHAIN_MAX 16
#define CHAIN_TEXT 512

static _Thread_local struct {
    const char *fn[CHAIN_MAX];
    int depth;
} chain;

static int chain_push(const char *fn) {
    if (chain.depth == CHAIN_MAX) {
        fprintf(stderr, "graph_app: call chain too deep\n");
        exit(PROGS_EXIT_RUNTIME);
    }
    chain.fn[chain.depth++] = fn;
    return 0;
}

static void chain_pop(int *unused) {
    (void)unused;
    chain.depth--;
}

/* First statement of every chain function: pushes its name, popped when it returns. */
#define FRAME() __attribute__((cleanup(chain_pop), unused)) int chain_frame_ = chain_push(__func__)

/* "fn;fn;...;fn" of this thread's chain now. */
static void chain_text(char *out) {
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < chain.depth; i++)
        len += (size_t)snprintf(out + len, CHAIN_TEXT - len, "%s%s", i ? ";" : "", chain.fn[i]);
}

/* ---- the truth ---- */

enum truth_kind { T_EAGER, T_CAPTURED, T_REPLAYED };

struct truth {
    enum truth_kind kind;
    char *stack;   /* eager: the launch's chain; captured: the capture's; replayed: the replay's */
    char *capture; /* replayed: the chain that captured the node */
    const char *kernel;
    bool before_attach; /* --attach-after-capture: happened (or was captured) before SIGUSR1 */
    unsigned long long count;
};

static struct truth *truths;
static size_t ntruths, truths_cap;
static pthread_mutex_t truth_lock = PTHREAD_MUTEX_INITIALIZER;
static bool attached = true; /* false until SIGUSR1 with --attach-after-capture */

static void *xalloc(void *p, size_t size) {
    p = realloc(p, size);
    if (!p) {
        perror("graph_app: realloc");
        exit(PROGS_EXIT_RUNTIME);
    }
    return p;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(xalloc(NULL, n), s, n);
}

static void truth_add(enum truth_kind kind, const char *stack, const char *capture,
                      const char *kernel, bool before_attach) {
    pthread_mutex_lock(&truth_lock);
    struct truth *t = NULL;
    for (size_t i = 0; i < ntruths && !t; i++) {
        struct truth *c = &truths[i];
        if (c->kind == kind && c->before_attach == before_attach &&
            strcmp(c->kernel, kernel) == 0 && strcmp(c->stack, stack) == 0 &&
            (!capture || strcmp(c->capture, capture) == 0))
            t = c;
    }
    if (!t) {
        if (ntruths == truths_cap) {
            truths_cap = truths_cap ? 2 * truths_cap : 32;
            truths = xalloc(truths, truths_cap * sizeof(*truths));
        }
        t = &truths[ntruths++];
        *t = (struct truth){.kind = kind,
                            .stack = xstrdup(stack),
                            .capture = capture ? xstrdup(capture) : NULL,
                            .kernel = kernel,
                            .before_attach = before_attach};
    }
    t->count++;
    pthread_mutex_unlock(&truth_lock);
}

/* ---- kernels, streams, graphs as this program knows them ---- */

struct kernel {
    const char *name;
    bool ex; /* launched with cuLaunchKernelEx */
    CUfunction f;
};

enum {
    K_EMBED,
    K_QKV,
    K_SOFTMAX,
    K_MLP_UP,
    K_MLP_DOWN,
    K_MLP_DOWN_V2,
    K_ALLREDUCE,
    K_RESIDUAL,
    K_SAMPLE,
    K_KV_COPY,
    K_COUNT,
};

static struct kernel kernels[K_COUNT] = {
    [K_EMBED] = {"embed_kernel", false, NULL},
    [K_QKV] = {"attn_qkv_kernel", false, NULL},
    [K_SOFTMAX] = {"attn_softmax_kernel", false, NULL},
    [K_MLP_UP] = {"mlp_up_kernel", true, NULL},
    [K_MLP_DOWN] = {"mlp_down_kernel", false, NULL},
    [K_MLP_DOWN_V2] = {"mlp_down_v2_kernel", false, NULL},
    [K_ALLREDUCE] = {"allreduce_kernel", false, NULL},
    [K_RESIDUAL] = {"residual_kernel", false, NULL},
    [K_SAMPLE] = {"sample_kernel", false, NULL},
    [K_KV_COPY] = {"kv_copy_kernel", false, NULL},
};

/* A node as captured: the chain that launched it. */
struct rec_node {
    char *capture;
    const char *kernel;
    bool before_attach;
};

struct recording {
    struct rec_node *v;
    size_t n;
};

static void rec_add(struct recording *r, const char *capture, const char *kernel, bool before) {
    r->v = xalloc(r->v, (r->n + 1) * sizeof(*r->v));
    r->v[r->n++] = (struct rec_node){xstrdup(capture), kernel, before};
}

static void rec_copy(struct recording *dst, const struct recording *src) {
    dst->n = 0;
    for (size_t i = 0; i < src->n; i++)
        rec_add(dst, src->v[i].capture, src->v[i].kernel, src->v[i].before_attach);
}

struct app_graph {
    const char *name;
    const char *mode;
    CUgraph graph;
    CUgraphExec exec; /* the exec made from it (decode_v2: the decode exec it updated) */
    struct recording rec;
};

/* An executable graph: what its nodes are now, how often this program launched it. */
struct app_exec {
    const char *name;
    CUgraphExec exec;
    struct recording nodes;
    unsigned long long launches;
};

/* Which streams capture into which recording now (this program's own bookkeeping). */
#define MAX_CAPTURING 4
static struct {
    CUstream stream;
    struct recording *rec;
} capturing[MAX_CAPTURING];

static void capturing_set(CUstream s, struct recording *rec) {
    pthread_mutex_lock(&truth_lock);
    for (int i = 0; i < MAX_CAPTURING; i++) {
        if (!capturing[i].rec) {
            capturing[i].stream = s;
            capturing[i].rec = rec;
            break;
        }
    }
    pthread_mutex_unlock(&truth_lock);
}

/* The capture sequence ends: every stream in it leaves. */
static void capturing_end(struct recording *rec) {
    pthread_mutex_lock(&truth_lock);
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (capturing[i].rec == rec)
            capturing[i].rec = NULL;
    pthread_mutex_unlock(&truth_lock);
}

static struct recording *capturing_of(CUstream s) {
    struct recording *rec = NULL;
    pthread_mutex_lock(&truth_lock);
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (capturing[i].rec && capturing[i].stream == s)
            rec = capturing[i].rec;
    pthread_mutex_unlock(&truth_lock);
    return rec;
}

/* The entry points used: the _ptsz names with --ptsz. */
static struct {
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void **, void **);
    CUresult (*launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **);
    CUresult (*begin_capture)(CUstream, CUstreamCaptureMode);
    CUresult (*begin_capture_to_graph)(CUstream, CUgraph, const CUgraphNode *,
                                       const CUgraphEdgeData *, size_t, CUstreamCaptureMode);
    CUresult (*end_capture)(CUstream, CUgraph *);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*wait_event)(CUstream, CUevent, unsigned);
    CUresult (*instantiate_params)(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *);
    CUresult (*graph_launch)(CUgraphExec, CUstream);
} api;

static void pick_api(bool ptsz) {
    api.launch = ptsz ? cuLaunchKernel_ptsz : cuLaunchKernel;
    api.launch_ex = ptsz ? cuLaunchKernelEx_ptsz : cuLaunchKernelEx;
    api.begin_capture = ptsz ? cuStreamBeginCapture_v2_ptsz : cuStreamBeginCapture_v2;
    api.begin_capture_to_graph =
        ptsz ? cuStreamBeginCaptureToGraph_ptsz : cuStreamBeginCaptureToGraph;
    api.end_capture = ptsz ? cuStreamEndCapture_ptsz : cuStreamEndCapture;
    api.event_record = ptsz ? cuEventRecord_ptsz : cuEventRecord;
    api.wait_event = ptsz ? cuStreamWaitEvent_ptsz : cuStreamWaitEvent;
    api.instantiate_params =
        ptsz ? cuGraphInstantiateWithParams_ptsz : cuGraphInstantiateWithParams;
    api.graph_launch = ptsz ? cuGraphLaunch_ptsz : cuGraphLaunch;
}

static void check(CUresult rc, const char *what) {
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "graph_app: %s failed: CUresult %d\n", what, rc);
        exit(PROGS_EXIT_RUNTIME);
    }
}

struct app {
    CUstream s0;     /* captures, replays */
    CUstream side;   /* joins the decode capture (fork) */
    CUstream worker; /* the other thread's */
    CUevent fork_ev, join_ev;
    struct app_graph decode, prefill, decode_v2, prefill_v2;
    struct app_exec decode_exec, prefill_exec;
    struct app_exec retired; /* the prefill exec before recycle_graphs destroyed it */
    pthread_barrier_t capture_started, thread_done;
    CUgraph reused_graph;
    CUgraphExec reused_exec;
};

/* ---- launches ---- */

/* The one function that calls the launch APIs: cuLaunchKernel, or cuLaunchKernelEx. */
NOINLINE void launch_named(CUstream stream, const struct kernel *k) {
    FRAME();
    char stack[CHAIN_TEXT];
    chain_text(stack);
    struct recording *rec = capturing_of(stream);
    CUresult rc;
    if (k->ex) {
        CUlaunchConfig cfg = {.gridDimX = 8,
                              .gridDimY = 1,
                              .gridDimZ = 1,
                              .blockDimX = 128,
                              .blockDimY = 1,
                              .blockDimZ = 1,
                              .hStream = stream};
        rc = api.launch_ex(&cfg, k->f, NULL, NULL);
    } else {
        rc = api.launch(k->f, 4, 1, 1, 256, 1, 1, 0, stream, NULL, NULL);
    }
    KEEP_FRAME();
    check(rc, k->name);
    if (rec) {
        pthread_mutex_lock(&truth_lock);
        rec_add(rec, stack, k->name, !attached);
        pthread_mutex_unlock(&truth_lock);
        truth_add(T_CAPTURED, stack, NULL, k->name, !attached);
    } else {
        truth_add(T_EAGER, stack, NULL, k->name, !attached);
    }
}

NOINLINE void warmup(struct app *a) {
    FRAME();
    launch_named(a->s0, &kernels[K_EMBED]);
    KEEP_FRAME();
}

NOINLINE void capture_attention(CUstream s) {
    FRAME();
    launch_named(s, &kernels[K_QKV]);
    launch_named(s, &kernels[K_SOFTMAX]);
    KEEP_FRAME();
}

NOINLINE void capture_mlp(CUstream s, int variant) {
    FRAME();
    launch_named(s, &kernels[K_MLP_UP]);
    launch_named(s, &kernels[variant == 2 ? K_MLP_DOWN_V2 : K_MLP_DOWN]);
    KEEP_FRAME();
}

/* With the fork scenario: the side stream joins the capture (event recorded on the origin,
 * waited on the side), runs the allreduce while the origin runs the residual, and is joined
 * back (event recorded on the side, waited on the origin). */
NOINLINE void capture_allreduce(struct app *a, CUstream s, struct recording *rec) {
    FRAME();
    if (opts.scenarios & SC_FORK) {
        check(api.event_record(a->fork_ev, s), "cuEventRecord (fork)");
        check(api.wait_event(a->side, a->fork_ev, 0), "cuStreamWaitEvent (fork)");
        capturing_set(a->side, rec);
        launch_named(a->side, &kernels[K_ALLREDUCE]);
        launch_named(s, &kernels[K_RESIDUAL]);
        check(api.event_record(a->join_ev, a->side), "cuEventRecord (join)");
        check(api.wait_event(s, a->join_ev, 0), "cuStreamWaitEvent (join)");
    } else {
        launch_named(s, &kernels[K_ALLREDUCE]);
        launch_named(s, &kernels[K_RESIDUAL]);
    }
    KEEP_FRAME();
}

/* The decode graph: attention, mlp, allreduce (6 kernels). into_new_graph: cuGraphCreate and
 * cuStreamBeginCaptureToGraph instead of cuStreamBeginCapture_v2. */
NOINLINE void capture_model(struct app *a, struct app_graph *g, CUstreamCaptureMode mode,
                            int variant, bool into_new_graph) {
    FRAME();
    if (into_new_graph) {
        check(cuGraphCreate(&g->graph, 0), "cuGraphCreate");
        check(api.begin_capture_to_graph(a->s0, g->graph, NULL, NULL, 0, mode),
              "cuStreamBeginCaptureToGraph");
    } else {
        check(api.begin_capture(a->s0, mode), "cuStreamBeginCapture_v2");
    }
    capturing_set(a->s0, &g->rec);
    capture_attention(a->s0);
    if (mode == CU_STREAM_CAPTURE_MODE_RELAXED) {
        /* an allocation during capture: allowed in relaxed mode only */
        CUdeviceptr scratch = 0;
        check(cuMemAlloc_v2(&scratch, 1 << 20), "cuMemAlloc_v2 (relaxed capture)");
        check(cuMemFree_v2(scratch), "cuMemFree_v2 (relaxed capture)");
    }
    capture_mlp(a->s0, variant);
    capture_allreduce(a, a->s0, &g->rec);
    CUgraph out = NULL;
    check(api.end_capture(a->s0, &out), "cuStreamEndCapture");
    KEEP_FRAME();
    capturing_end(&g->rec);
    if (into_new_graph && out != g->graph) {
        fprintf(stderr, "graph_app: captured into %p, got %p back\n", (void *)g->graph,
                (void *)out);
        exit(PROGS_EXIT_RUNTIME);
    }
    g->graph = out;
}

/* The prefill graph, thread-local mode: attention and mlp (4 kernels), or attention alone
 * (2 kernels) when chunked; with_thread: the other thread launches while it captures. */
NOINLINE void capture_prefill(struct app *a, struct app_graph *g, bool with_thread, bool chunked) {
    FRAME();
    check(api.begin_capture(a->s0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture_v2");
    capturing_set(a->s0, &g->rec);
    if (with_thread)
        pthread_barrier_wait(&a->capture_started);
    capture_attention(a->s0);
    if (!chunked)
        capture_mlp(a->s0, 1);
    if (with_thread)
        pthread_barrier_wait(&a->thread_done);
    CUgraph out = NULL;
    check(api.end_capture(a->s0, &out), "cuStreamEndCapture");
    KEEP_FRAME();
    capturing_end(&g->rec);
    g->graph = out;
}

NOINLINE void eager_step(struct app *a) {
    FRAME();
    launch_named(a->worker, &kernels[K_KV_COPY]);
    KEEP_FRAME();
}

/* The other thread: THREAD_LAUNCHES eager launches on its own stream while the main thread
 * captures the prefill graph. */
NOINLINE void *eager_worker(void *arg) {
    FRAME();
    struct app *a = arg;
    pthread_barrier_wait(&a->capture_started);
    for (int i = 0; i < THREAD_LAUNCHES; i++) {
        eager_step(a);
        KEEP_FRAME();
    }
    pthread_barrier_wait(&a->thread_done);
    return NULL;
}

static void exec_from(struct app_exec *x, const char *name, CUgraphExec exec,
                      const struct app_graph *g) {
    x->name = name;
    x->exec = exec;
    x->launches = 0;
    rec_copy(&x->nodes, &g->rec);
}

NOINLINE void build_graphs(struct app *a) {
    FRAME();
    warmup(a);
    a->decode = (struct app_graph){.name = "decode", .mode = "global"};
    capture_model(a, &a->decode, CU_STREAM_CAPTURE_MODE_GLOBAL, 1, false);
    check(cuGraphInstantiateWithFlags(&a->decode.exec, a->decode.graph, 0),
          "cuGraphInstantiateWithFlags");
    exec_from(&a->decode_exec, "decode", a->decode.exec, &a->decode);
    if (opts.scenarios & SC_PREFILL) {
        bool with_thread = opts.scenarios & SC_THREAD;
        pthread_t thread;
        if (with_thread) {
            pthread_barrier_init(&a->capture_started, NULL, 2);
            pthread_barrier_init(&a->thread_done, NULL, 2);
            int err = pthread_create(&thread, NULL, eager_worker, a);
            if (err) {
                fprintf(stderr, "graph_app: pthread_create: %s\n", strerror(err));
                exit(PROGS_EXIT_RUNTIME);
            }
        }
        a->prefill = (struct app_graph){.name = "prefill", .mode = "thread_local"};
        capture_prefill(a, &a->prefill, with_thread, false);
        CUDA_GRAPH_INSTANTIATE_PARAMS params = {.flags = 0};
        check(api.instantiate_params(&a->prefill.exec, a->prefill.graph, &params),
              "cuGraphInstantiateWithParams");
        exec_from(&a->prefill_exec, "prefill", a->prefill.exec, &a->prefill);
        if (with_thread) {
            pthread_join(thread, NULL);
            pthread_barrier_destroy(&a->capture_started);
            pthread_barrier_destroy(&a->thread_done);
        }
    }
    KEEP_FRAME();
}

/* ---- replays ---- */

static void replayed(struct app_exec *x, const char *replay_chain) {
    x->launches++;
    for (size_t i = 0; i < x->nodes.n; i++)
        truth_add(T_REPLAYED, replay_chain, x->nodes.v[i].capture, x->nodes.v[i].kernel,
                  x->nodes.v[i].before_attach);
}

NOINLINE void sample_tokens(struct app *a) {
    FRAME();
    launch_named(a->s0, &kernels[K_SAMPLE]);
    KEEP_FRAME();
}

NOINLINE void decode_step(struct app *a) {
    FRAME();
    char stack[CHAIN_TEXT];
    chain_text(stack);
    check(api.graph_launch(a->decode_exec.exec, a->s0), "cuGraphLaunch (decode)");
    KEEP_FRAME();
    replayed(&a->decode_exec, stack);
    sample_tokens(a);
    KEEP_FRAME();
}

NOINLINE void prefill_step(struct app *a) {
    FRAME();
    char stack[CHAIN_TEXT];
    chain_text(stack);
    check(api.graph_launch(a->prefill_exec.exec, a->s0), "cuGraphLaunch (prefill)");
    KEEP_FRAME();
    replayed(&a->prefill_exec, stack);
}

/* One round: the prefill exec --prefill-replays times, then the decode exec --replays times. */
NOINLINE void serve(struct app *a) {
    FRAME();
    if (opts.scenarios & SC_PREFILL) {
        for (long i = 0; i < opts.prefill_replays; i++) {
            prefill_step(a);
            KEEP_FRAME();
        }
    }
    for (long i = 0; i < opts.replays; i++) {
        decode_step(a);
        KEEP_FRAME();
    }
}

/* ---- the exec update, the recycled handles ---- */

/* The decode model captured again (relaxed mode, into a graph made by cuGraphCreate) with
 * mlp_down_v2_kernel for mlp_down_kernel; the decode exec is updated to it; the new graph is
 * destroyed. */
NOINLINE void update_graphs(struct app *a) {
    FRAME();
    a->decode_v2 = (struct app_graph){.name = "decode_v2", .mode = "relaxed"};
    capture_model(a, &a->decode_v2, CU_STREAM_CAPTURE_MODE_RELAXED, 2, true);
    CUgraphExecUpdateResultInfo info = {0};
    check(cuGraphExecUpdate_v2(a->decode_exec.exec, a->decode_v2.graph, &info),
          "cuGraphExecUpdate_v2");
    KEEP_FRAME();
    a->decode_v2.exec = a->decode_exec.exec;
    rec_copy(&a->decode_exec.nodes, &a->decode_v2.rec);
    check(cuGraphDestroy(a->decode_v2.graph), "cuGraphDestroy (decode_v2)");
}

static bool check_exec_against_double(const struct app_exec *x);

/* The prefill exec and graph destroyed, the prefill model captured again (chunked: attention
 * only) and instantiated: the double hands out the same two handle values. */
NOINLINE void recycle_graphs(struct app *a) {
    FRAME();
    a->retired = a->prefill_exec;
    check_exec_against_double(&a->retired);
    CUgraph old_graph = a->prefill.graph;
    check(cuGraphExecDestroy(a->prefill_exec.exec), "cuGraphExecDestroy");
    check(cuGraphDestroy(a->prefill.graph), "cuGraphDestroy");
    a->prefill_v2 = (struct app_graph){.name = "prefill_v2", .mode = "thread_local"};
    capture_prefill(a, &a->prefill_v2, false, true);
    CUDA_GRAPH_INSTANTIATE_PARAMS params = {.flags = 0};
    check(api.instantiate_params(&a->prefill_v2.exec, a->prefill_v2.graph, &params),
          "cuGraphInstantiateWithParams");
    KEEP_FRAME();
    a->prefill_exec = (struct app_exec){0};
    exec_from(&a->prefill_exec, "prefill_v2", a->prefill_v2.exec, &a->prefill_v2);
    if (a->prefill_v2.graph != old_graph || a->prefill_v2.exec != a->retired.exec) {
        fprintf(stderr, "graph_app: handles not reused: graph %p -> %p, exec %p -> %p\n",
                (void *)old_graph, (void *)a->prefill_v2.graph, (void *)a->retired.exec,
                (void *)a->prefill_v2.exec);
        exit(EXIT_SELFCHECK);
    }
    a->reused_graph = a->prefill_v2.graph;
    a->reused_exec = a->prefill_v2.exec;
}

/* ---- setup, output, self-check ---- */

static void setup(struct app *a) {
    check(cuInit(0), "cuInit");
    for (int i = 0; i < K_COUNT; i++)
        check(cuModuleGetFunction(&kernels[i].f, (CUmodule)0x10, kernels[i].name),
              "cuModuleGetFunction");
    check(cuStreamCreate(&a->s0, CU_STREAM_DEFAULT), "cuStreamCreate");
    check(cuStreamCreate(&a->side, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    check(cuStreamCreate(&a->worker, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    check(cuEventCreate(&a->fork_ev, 0), "cuEventCreate");
    check(cuEventCreate(&a->join_ev, 0), "cuEventCreate");
}

static const char *const kind_names[] = {"eager", "captured", "replayed"};

static int truth_cmp(const void *pa, const void *pb) {
    const struct truth *x = pa, *y = pb;
    if (x->kind != y->kind)
        return (int)x->kind - (int)y->kind;
    int c = strcmp(x->stack, y->stack);
    if (!c && x->capture)
        c = strcmp(x->capture, y->capture);
    if (!c)
        c = strcmp(x->kernel, y->kernel);
    if (!c)
        c = (int)x->before_attach - (int)y->before_attach;
    return c;
}

static void print_truth(const struct app *a) {
    qsort(truths, ntruths, sizeof(*truths), truth_cmp);
    for (size_t i = 0; i < ntruths; i++) {
        const struct truth *t = &truths[i];
        printf("truth kind=%s ", kind_names[t->kind]);
        if (t->kind == T_EAGER)
            printf("stack=%s", t->stack);
        else if (t->kind == T_CAPTURED)
            printf("capture=%s", t->stack);
        else
            printf("replay=%s capture=%s", t->stack, t->capture);
        printf(" kernel=%s count=%llu%s\n", t->kernel, t->count,
               t->before_attach ? " before_attach=1" : "");
    }
    const struct app_graph *graphs[] = {&a->decode, &a->prefill, &a->decode_v2, &a->prefill_v2};
    for (size_t i = 0; i < sizeof(graphs) / sizeof(graphs[0]); i++) {
        const struct app_graph *g = graphs[i];
        if (g->name)
            printf("truth graph name=%s mode=%s graph=%p exec=%p nodes=%zu\n", g->name, g->mode,
                   (void *)g->graph, (void *)g->exec, g->rec.n);
    }
    if (a->reused_graph)
        printf("truth handles graph_reused=%p exec_reused=%p\n", (void *)a->reused_graph,
               (void *)a->reused_exec);
}

static int selfcheck_failures;

static void selfcheck_fail(const char *fmt, const char *a, unsigned long long x,
                           unsigned long long y) {
    fprintf(stderr, "graph_app: selfcheck: ");
    fprintf(stderr, fmt, a, x, y);
    fputc('\n', stderr);
    selfcheck_failures++;
}

/* The double's replay counter and nodes of an exec against this program's; prints them. */
static bool check_exec_against_double(const struct app_exec *x) {
    unsigned long long replays = 0;
    size_t nodes = 0;
    if (fakecuda_exec_info(x->exec, &replays, &nodes) != CUDA_SUCCESS) {
        selfcheck_fail("exec %s unknown to the double (%llu %llu)", x->name, 0, 0);
        return false;
    }
    printf("double exec=%s handle=%p replays=%llu nodes=%zu kernels=", x->name, (void *)x->exec,
           replays, nodes);
    for (size_t i = 0; i < nodes; i++) {
        const char *kernel = "?";
        fakecuda_exec_node(x->exec, i, &kernel, NULL);
        printf("%s%s", i ? "," : "", kernel);
        if (i >= x->nodes.n || strcmp(kernel, x->nodes.v[i].kernel) != 0)
            selfcheck_fail("exec %s node %llu is another kernel (%llu)", x->name, i, 0);
    }
    printf("\n");
    if (replays != x->launches)
        selfcheck_fail("exec %s: the double counted %llu replays, the program %llu", x->name,
                       replays, x->launches);
    if (nodes != x->nodes.n)
        selfcheck_fail("exec %s: the double has %llu nodes, the program %llu", x->name, nodes,
                       x->nodes.n);
    return true;
}

/* Per kernel: the double's eager / captured / replayed counters against the truth's sums. */
static void check_kernels_against_double(void) {
    for (int k = 0; k < K_COUNT; k++) {
        unsigned long long want[3] = {0, 0, 0}, got[3] = {0, 0, 0};
        for (size_t i = 0; i < ntruths; i++)
            if (strcmp(truths[i].kernel, kernels[k].name) == 0)
                want[truths[i].kind] += truths[i].count;
        fakecuda_kernel_counts(kernels[k].name, &got[0], &got[1], &got[2]);
        printf("double kernel=%s eager=%llu captured=%llu replayed=%llu\n", kernels[k].name, got[0],
               got[1], got[2]);
        for (int kind = 0; kind < 3; kind++)
            if (got[kind] != want[kind])
                selfcheck_fail("kernel %s: the double counted %llu, the truth says %llu",
                               kernels[k].name, got[kind], want[kind]);
    }
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: graph_app [--replays N] [--prefill-replays N] [--scenarios LIST] [--ptsz]\n"
            "                 [--wait-signal] [--attach-after-capture]\n"
            "scenarios: fork,prefill,thread,update,recycle (default: all) or none;\n"
            "           thread and recycle need prefill\n");
}

static unsigned parse_scenarios(const char *list) {
    if (strcmp(list, "none") == 0)
        return 0;
    unsigned set = 0;
    char *copy = xstrdup(list), *save = NULL;
    for (char *name = strtok_r(copy, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        unsigned bit = 0;
        for (size_t i = 0; i < sizeof(scenario_names) / sizeof(scenario_names[0]); i++)
            if (strcmp(name, scenario_names[i]) == 0)
                bit = 1u << i;
        if (!bit) {
            fprintf(stderr, "graph_app: unknown scenario '%s'\n", name);
            usage(stderr);
            exit(PROGS_EXIT_USAGE);
        }
        set |= bit;
    }
    free(copy);
    return set;
}

static void parse_options(int argc, char **argv) {
    enum { OPT_REPLAYS = 256, OPT_PREFILL, OPT_SCENARIOS, OPT_PTSZ, OPT_WAIT, OPT_AFTER };
    static const struct option long_opts[] = {
        {"replays", required_argument, NULL, OPT_REPLAYS},
        {"prefill-replays", required_argument, NULL, OPT_PREFILL},
        {"scenarios", required_argument, NULL, OPT_SCENARIOS},
        {"ptsz", no_argument, NULL, OPT_PTSZ},
        {"wait-signal", no_argument, NULL, OPT_WAIT},
        {"attach-after-capture", no_argument, NULL, OPT_AFTER},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        switch (opt) {
        case OPT_REPLAYS:
            opts.replays = progs_parse_long("--replays", optarg, 0);
            break;
        case OPT_PREFILL:
            opts.prefill_replays = progs_parse_long("--prefill-replays", optarg, 0);
            break;
        case OPT_SCENARIOS:
            opts.scenarios = parse_scenarios(optarg);
            break;
        case OPT_PTSZ:
            opts.ptsz = true;
            break;
        case OPT_WAIT:
            opts.wait_signal = true;
            break;
        case OPT_AFTER:
            opts.attach_after_capture = true;
            break;
        case 'h':
            usage(stdout);
            exit(PROGS_EXIT_OK);
        default:
            usage(stderr);
            exit(PROGS_EXIT_USAGE);
        }
    }
    if (optind != argc ||
        ((opts.scenarios & (SC_THREAD | SC_RECYCLE)) && !(opts.scenarios & SC_PREFILL))) {
        usage(stderr);
        exit(PROGS_EXIT_USAGE);
    }
}

int main(int argc, char **argv) {
    parse_options(argc, argv);
    pick_api(opts.ptsz);
    if (opts.wait_signal || opts.attach_after_capture)
        progs_block_start_signal();
    if (opts.wait_signal) {
        progs_announce_ready();
        progs_wait_start_signal();
    }
    attached = !opts.attach_after_capture;

    static struct app app;
    setup(&app);
    build_graphs(&app);
    KEEP_FRAME();
    if (opts.attach_after_capture) {
        progs_announce_ready();
        progs_wait_start_signal();
        attached = true;
    }
    serve(&app);
    KEEP_FRAME();
    if (opts.scenarios & SC_UPDATE) {
        update_graphs(&app);
        KEEP_FRAME();
        serve(&app);
        KEEP_FRAME();
    }
    if (opts.scenarios & SC_RECYCLE) {
        recycle_graphs(&app);
        KEEP_FRAME();
        serve(&app);
        KEEP_FRAME();
    }

    print_truth(&app);
    check_exec_against_double(&app.decode_exec);
    if (opts.scenarios & SC_PREFILL)
        check_exec_against_double(&app.prefill_exec);
    check_kernels_against_double();
    if (selfcheck_failures) {
        printf("selfcheck FAIL failures=%d\n", selfcheck_failures);
        fflush(stdout);
        return EXIT_SELFCHECK;
    }
    printf("selfcheck ok\n");
    fflush(stdout);
    return PROGS_EXIT_OK;
}
