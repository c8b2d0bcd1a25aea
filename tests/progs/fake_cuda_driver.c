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
 * calls CUPTI: a process that links it has a usable driver.
 *
 * Streams, events, stream capture and graphs (fake_cuda.h lists every
 * export), with CUDA's semantics as far as a host-only double can have
 * them (tests/progs/README.md says what is left out):
 *  - cuStreamCreate hands out distinct handles; NULL is the legacy stream
 *    (the per-thread default stream for the _ptsz names), CU_STREAM_LEGACY
 *    and CU_STREAM_PER_THREAD are what cuda.h says. A stream handle the
 *    double never made is an ordinary stream to launches, event records
 *    and waits (programs pass made-up handles), and invalid elsewhere.
 *  - A launch (cuLaunchKernel, cuLaunchKernelEx) on a capturing stream
 *    runs nothing: it becomes a kernel node of the capture's graph,
 *    depending on the stream's current dependency set; on any other stream
 *    it "runs" (does nothing, counted).
 *  - cuEventRecord on a capturing stream snapshots its dependency set;
 *    cuStreamWaitEvent of that event makes another stream join the
 *    capture (fork) or adds to its set (join). cuStreamEndCapture on the
 *    origin stream returns the graph, or NULL and
 *    CUDA_ERROR_STREAM_CAPTURE_UNJOINED when a node captured in the
 *    sequence is not reachable from the origin stream's dependency set (a
 *    fork not joined back), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED after a
 *    violation (a wait on an event recorded outside the capture: ISOLATION;
 *    events of two captures: MERGE; cuStreamSynchronize of a capturing
 *    stream: UNSUPPORTED; the legacy stream while a blocking stream
 *    captures: IMPLICIT; a potentially unsafe call, cuMemAlloc_v2 /
 *    cuMemFree_v2, that the capture modes prohibit: UNSUPPORTED). Modes
 *    GLOBAL, THREAD_LOCAL and RELAXED as cuThreadExchangeStreamCaptureMode
 *    documents them; cuStreamEndCapture of a non-RELAXED capture from
 *    another thread is CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD.
 *  - An executable graph is a copy of its graph's nodes; cuGraphExecUpdate
 *    replaces them with another graph's of the same topology (else
 *    CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, TOPOLOGY_CHANGED); cuGraphLaunch
 *    runs each node once and counts the replay.
 *  - Destroyed streams, events, graphs and executable graphs are kept on a
 *    free list per kind, last destroyed first: the next create hands out
 *    the same handle value, as a driver's allocator may.
 *  - One mutex guards it all. fakecuda_exec_info / fakecuda_exec_node /
 *    fakecuda_kernel_counts (not CUDA) say what ran, for the workloads'
 *    self-checks. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"
#include "progs_common.h"

#define EXPORT __attribute__((visibility("default"), noinline))

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

/* FAKECUDA_NAME_DELAY_MS, if set: each name query answers that much later, as one may whose
 * thread is preempted (another thread's launches go on meanwhile). */
#define NAME_DELAY_ENV "FAKECUDA_NAME_DELAY_MS"

EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc) {
    progs_sleep_env_ms(NAME_DELAY_ENV);
    return name_of(name, hfunc, KIND_FUNCTION);
}

EXPORT CUresult cuKernelGetName(const char **name, CUkernel hfunc) {
    progs_sleep_env_ms(NAME_DELAY_ENV);
    return name_of(name, hfunc, KIND_KERNEL);
}

/* ==== streams, events, stream capture, graphs ==== */

/* Guards everything below (the function handles have their own lock, taken after this one). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The double has no way to report allocation failure through every path (a driver would say
 * CUDA_ERROR_OUT_OF_MEMORY): it aborts. */
static void *xrealloc(void *p, size_t size) {
    p = realloc(p, size ? size : 1);
    if (!p) {
        fputs("libfakecuda: out of memory\n", stderr);
        abort();
    }
    return p;
}

/* What ran, per kernel name. */
struct kcount {
    struct kcount *next;
    const char *name;
    unsigned long long eager, captured, replayed;
};

static struct kcount *kcounts;

static struct kcount *kcount_of(const char *name) {
    for (struct kcount *k = kcounts; k; k = k->next)
        if (strcmp(k->name, name) == 0)
            return k;
    struct kcount *k = xrealloc(NULL, sizeof(*k));
    *k = (struct kcount){.next = kcounts, .name = name};
    kcounts = k;
    return k;
}

/* The name of a function handle this double made (of either kind: a CUkernel may be launched
 * as a CUfunction), "?" for any other value. The names live as long as the process. */
static const char *kernel_name(const void *f) {
    const char *name = "?";
    pthread_mutex_lock(&handles_lock);
    for (struct handle *h = handles; h; h = h->next) {
        if (h == f) {
            name = h->name;
            break;
        }
    }
    pthread_mutex_unlock(&handles_lock);
    return name;
}

/* Every stream, event, graph and executable graph starts with this. None is ever freed: a
 * destroyed one goes on its kind's free list (LIFO), and the next create of that kind takes it
 * back, so a handle value is handed out again; handles are checked against the list of all of
 * them (a value the double never made is never read through). */
enum obj_kind { OBJ_STREAM, OBJ_EVENT, OBJ_GRAPH, OBJ_EXEC, OBJ_KINDS };

struct obj {
    struct obj *all_next;  /* every object made */
    struct obj *free_next; /* on the free list, while not live */
    enum obj_kind kind;
    bool live;
};

static struct obj *all_objs, *free_objs[OBJ_KINDS];

static void *obj_new(enum obj_kind kind, size_t size) {
    struct obj *o = free_objs[kind];
    if (o) {
        free_objs[kind] = o->free_next;
        struct obj *all_next = o->all_next;
        memset(o, 0, size);
        o->all_next = all_next;
    } else {
        o = xrealloc(NULL, size);
        memset(o, 0, size);
        o->all_next = all_objs;
        all_objs = o;
    }
    o->kind = kind;
    o->live = true;
    return o;
}

static void obj_release(struct obj *o) {
    o->live = false;
    o->free_next = free_objs[o->kind];
    free_objs[o->kind] = o;
}

static void *obj_find(const void *handle, enum obj_kind kind) {
    if (!handle)
        return NULL;
    for (struct obj *o = all_objs; o; o = o->all_next)
        if (o == handle)
            return o->live && o->kind == kind ? o : NULL;
    return NULL;
}

/* The status of a handle argument: NULL is CUDA_ERROR_INVALID_VALUE, a value that is not a
 * live object of the kind CUDA_ERROR_INVALID_HANDLE. */
static CUresult find_or(void **out, const void *handle, enum obj_kind kind) {
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    *out = obj_find(handle, kind);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

struct node;

/* A set of graph nodes (no duplicates), in insertion order. */
struct nodeset {
    struct node **v;
    size_t n, cap;
};

static void set_add(struct nodeset *s, struct node *n) {
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i] == n)
            return;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 4;
        s->v = xrealloc(s->v, s->cap * sizeof(*s->v));
    }
    s->v[s->n++] = n;
}

static void set_copy(struct nodeset *dst, const struct nodeset *src) {
    dst->n = 0;
    for (size_t i = 0; i < src->n; i++)
        set_add(dst, src->v[i]);
}

static void set_free(struct nodeset *s) {
    free(s->v);
    *s = (struct nodeset){0};
}

struct graph;

/* A kernel node: the function, its name's counters, the capture sequence that made it. */
struct node {
    struct graph *graph;
    size_t index; /* in graph->nodes */
    CUfunction func;
    struct kcount *kernel;
    uint64_t capture_id;
    struct nodeset deps;
};

struct capture;

struct graph {
    struct obj o;
    struct node **nodes;
    size_t nnodes, cap;
    struct capture *capture; /* the capture sequence adding to it, if any */
};

/* A node of an executable graph: a copy, which outlives the graph. */
struct exec_node {
    CUfunction func;
    struct kcount *kernel;
    uint64_t capture_id;
    size_t *deps; /* indices */
    size_t ndeps;
};

struct exec {
    struct obj o;
    struct exec_node *nodes;
    size_t nnodes;
    unsigned long long replays;
};

struct stream;

/* An active capture sequence: every stream in it (the origin first), the graph it adds to. */
struct capture {
    struct capture *next;
    uint64_t id;
    struct graph *graph;
    bool own_graph; /* made by cuStreamBeginCapture (not ...ToGraph) */
    CUstreamCaptureMode mode;
    pthread_t thread; /* that began it */
    bool invalidated;
    struct stream **streams;
    size_t nstreams;
};

struct stream {
    struct obj o;
    unsigned flags;
    bool legacy;
    struct capture *capture;
    struct nodeset deps;    /* while capturing: what the next captured node depends on */
    struct nodeset view;    /* the copy cuStreamGetCaptureInfo hands out */
    CUgraphEdgeData *edges; /* zeroed, as many as view.n */
};

struct event {
    struct obj o;
    bool recorded;
    uint64_t capture_id; /* last recorded in this capture sequence (0: outside capture) */
    struct nodeset deps; /* the recording stream's dependency set then */
};

static struct capture *captures; /* active */
static uint64_t next_capture_id = 1;
static struct stream legacy_stream = {.legacy = true};
static _Thread_local struct stream *per_thread_stream;
static _Thread_local CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static CUdeviceptr next_dptr = 0x7f0000000000ull;

/* The stream a handle names: NULL is the legacy stream, or the calling thread's default stream
 * for the _ptsz names; NULL for a value the double never made. */
static struct stream *stream_of(CUstream h, bool ptsz) {
    if (h == CU_STREAM_LEGACY || (!h && !ptsz))
        return &legacy_stream;
    if (h == CU_STREAM_PER_THREAD || !h) {
        if (!per_thread_stream) {
            per_thread_stream = xrealloc(NULL, sizeof(*per_thread_stream));
            memset(per_thread_stream, 0, sizeof(*per_thread_stream));
        }
        return per_thread_stream;
    }
    return obj_find(h, OBJ_STREAM);
}

static struct capture *capture_by_id(uint64_t id) {
    for (struct capture *c = captures; c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

/* Whether a stream not created CU_STREAM_NON_BLOCKING captures now: an operation on the legacy
 * stream would depend on it (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT). With `invalidate`, such
 * captures are invalidated, as the operation's attempt does. */
static bool legacy_conflict(bool invalidate) {
    bool any = false;
    for (struct capture *c = captures; c; c = c->next) {
        for (size_t i = 0; i < c->nstreams; i++) {
            if (!(c->streams[i]->flags & CU_STREAM_NON_BLOCKING)) {
                any = true;
                if (invalidate)
                    c->invalidated = true;
                break;
            }
        }
    }
    return any;
}

/* A potentially unsafe call (cuMemAlloc...) from this thread: prohibited, and the captures that
 * prohibit it invalidated, per cuThreadExchangeStreamCaptureMode's rules. */
static bool unsafe_call_prohibited(void) {
    if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return false;
    bool prohibited = false;
    for (struct capture *c = captures; c; c = c->next) {
        bool own = pthread_equal(c->thread, pthread_self());
        if ((own && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
            (!own && thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
             c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
            c->invalidated = true;
            prohibited = true;
        }
    }
    return prohibited;
}

static void capture_add_stream(struct capture *c, struct stream *s) {
    c->streams = xrealloc(c->streams, (c->nstreams + 1) * sizeof(*c->streams));
    c->streams[c->nstreams++] = s;
    s->capture = c;
}

static struct graph *graph_new(void) {
    return obj_new(OBJ_GRAPH, sizeof(struct graph));
}

static bool graph_has(const struct graph *g, const void *node) {
    for (size_t i = 0; i < g->nnodes; i++)
        if (g->nodes[i] == node)
            return true;
    return false;
}

static struct node *graph_add_kernel(struct graph *g, CUfunction f, uint64_t capture_id,
                                     const struct nodeset *deps) {
    struct node *n = xrealloc(NULL, sizeof(*n));
    *n = (struct node){.graph = g,
                       .index = g->nnodes,
                       .func = f,
                       .kernel = kcount_of(kernel_name(f)),
                       .capture_id = capture_id};
    set_copy(&n->deps, deps);
    if (g->nnodes == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 8;
        g->nodes = xrealloc(g->nodes, g->cap * sizeof(*g->nodes));
    }
    g->nodes[g->nnodes++] = n;
    return n;
}

/* Removes the nodes one capture sequence added (a failed capture into an existing graph). */
static void graph_drop_capture(struct graph *g, uint64_t capture_id) {
    size_t kept = 0;
    for (size_t i = 0; i < g->nnodes; i++) {
        struct node *n = g->nodes[i];
        if (n->capture_id == capture_id) {
            set_free(&n->deps);
            free(n);
        } else {
            n->index = kept;
            g->nodes[kept++] = n;
        }
    }
    g->nnodes = kept;
}

static void graph_release(struct graph *g) {
    for (size_t i = 0; i < g->nnodes; i++) {
        set_free(&g->nodes[i]->deps);
        free(g->nodes[i]);
    }
    free(g->nodes);
    g->nodes = NULL;
    g->nnodes = g->cap = 0;
    obj_release(&g->o);
}

/* Whether a node captured in the sequence is unreachable from the origin stream's dependency
 * set: a fork that was not joined back. */
static bool capture_unjoined(const struct capture *c) {
    const struct graph *g = c->graph;
    bool *seen = xrealloc(NULL, g->nnodes * sizeof(*seen) + 1);
    memset(seen, 0, g->nnodes * sizeof(*seen));
    struct node **todo = xrealloc(NULL, (g->nnodes + 1) * sizeof(*todo));
    size_t ntodo = 0;
    const struct nodeset *tails = &c->streams[0]->deps;
    for (size_t i = 0; i < tails->n; i++) {
        if (!seen[tails->v[i]->index]) {
            seen[tails->v[i]->index] = true;
            todo[ntodo++] = tails->v[i];
        }
    }
    while (ntodo) {
        struct node *n = todo[--ntodo];
        for (size_t i = 0; i < n->deps.n; i++) {
            if (!seen[n->deps.v[i]->index]) {
                seen[n->deps.v[i]->index] = true;
                todo[ntodo++] = n->deps.v[i];
            }
        }
    }
    bool unjoined = false;
    for (size_t i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->capture_id == c->id && !seen[i])
            unjoined = true;
    free(todo);
    free(seen);
    return unjoined;
}

/* Ends a capture sequence: every stream leaves it; on failure the graph it made is destroyed
 * (the nodes it added to an existing graph removed). */
static void capture_finish(struct capture *c, bool ok) {
    for (size_t i = 0; i < c->nstreams; i++) {
        c->streams[i]->capture = NULL;
        c->streams[i]->deps.n = 0;
    }
    c->graph->capture = NULL;
    if (!ok) {
        if (c->own_graph)
            graph_release(c->graph);
        else
            graph_drop_capture(c->graph, c->id);
    }
    for (struct capture **p = &captures; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    free(c->streams);
    free(c);
}

static CUresult begin_capture(CUstream h, bool ptsz, bool to_graph, CUgraph hgraph,
                              const CUgraphNode *deps, size_t ndeps, CUstreamCaptureMode mode) {
    if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if (ndeps && !deps)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    struct graph *g = NULL;
    pthread_mutex_lock(&lock);
    struct stream *s = stream_of(h, ptsz);
    if (!s)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (s->legacy)
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else if (s->capture)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    else if (to_graph && (rc = find_or((void **)&g, hgraph, OBJ_GRAPH)) != CUDA_SUCCESS)
        ;
    else if (to_graph && g->capture)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    if (rc == CUDA_SUCCESS && to_graph)
        for (size_t i = 0; i < ndeps; i++)
            if (!graph_has(g, deps[i]))
                rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        struct capture *c = xrealloc(NULL, sizeof(*c));
        *c = (struct capture){.next = captures,
                              .id = next_capture_id++,
                              .graph = to_graph ? g : graph_new(),
                              .own_graph = !to_graph,
                              .mode = mode,
                              .thread = pthread_self()};
        captures = c;
        c->graph->capture = c;
        capture_add_stream(c, s);
        s->deps.n = 0;
        for (size_t i = 0; i < ndeps; i++)
            set_add(&s->deps, (struct node *)deps[i]);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static CUresult end_capture(CUstream h, bool ptsz, CUgraph *out) {
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc;
    pthread_mutex_lock(&lock);
    struct stream *s = stream_of(h, ptsz);
    struct capture *c = s ? s->capture : NULL;
    if (!s)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (!c)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    else if (c->streams[0] != s) {
        c->invalidated = true;
        rc = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    } else if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
               !pthread_equal(c->thread, pthread_self())) {
        rc = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    } else {
        struct graph *g = c->graph;
        if (c->invalidated)
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        else if (capture_unjoined(c))
            rc = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
        else
            rc = CUDA_SUCCESS;
        capture_finish(c, rc == CUDA_SUCCESS);
        *out = rc == CUDA_SUCCESS ? (CUgraph)g : NULL;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static CUresult capture_info(CUstream h, bool ptsz, CUstreamCaptureStatus *status, cuuint64_t *id,
                             CUgraph *graph, const CUgraphNode **deps,
                             const CUgraphEdgeData **edges, size_t *ndeps) {
    if (!status || (edges && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct stream *s = stream_of(h, ptsz);
    if (!s) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else if (s->legacy) {
        if (legacy_conflict(false))
            rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        else
            *status = CU_STREAM_CAPTURE_STATUS_NONE;
    } else if (!s->capture) {
        *status = CU_STREAM_CAPTURE_STATUS_NONE;
    } else if (s->capture->invalidated) {
        *status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    } else {
        *status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        if (id)
            *id = s->capture->id;
        if (graph)
            *graph = (CUgraph)s->capture->graph;
        set_copy(&s->view, &s->deps);
        if (deps)
            *deps = (const CUgraphNode *)s->view.v;
        if (edges) {
            s->edges = xrealloc(s->edges, (s->view.n + 1) * sizeof(*s->edges));
            memset(s->edges, 0, (s->view.n + 1) * sizeof(*s->edges));
            *edges = s->edges;
        }
        if (ndeps)
            *ndeps = s->view.n;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* A kernel launch on stream h: a node of the capture's graph, or run (counted). */
static CUresult launch(CUfunction f, CUstream h, bool ptsz) {
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct stream *s = stream_of(h, ptsz);
    if (s && s->capture) {
        struct capture *c = s->capture;
        if (c->invalidated) {
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else {
            struct node *n = graph_add_kernel(c->graph, f, c->id, &s->deps);
            s->deps.n = 0;
            set_add(&s->deps, n);
            n->kernel->captured++;
        }
    } else if (s && s->legacy && legacy_conflict(true)) {
        rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    } else {
        kcount_of(kernel_name(f))->eager++;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shmem, CUstream stream,
                               void **params, void **extra) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem;
    (void)params, (void)extra;
    return launch(f, stream, false);
}

EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                    unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                    CUstream stream, void **params, void **extra) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem;
    (void)params, (void)extra;
    return launch(f, stream, true);
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                                 void **extra) {
    (void)params, (void)extra;
    return config ? launch(f, config->hStream, false) : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                      void **extra) {
    (void)params, (void)extra;
    return config ? launch(f, config->hStream, true) : CUDA_ERROR_INVALID_VALUE;
}

/* ---- streams ---- */

static CUresult stream_create(CUstream *out, unsigned flags) {
    if (!out || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct stream *s = obj_new(OBJ_STREAM, sizeof(*s));
    s->flags = flags;
    *out = (CUstream)s;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int flags) {
    return stream_create(phStream, flags);
}

EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority) {
    (void)priority;
    return stream_create(phStream, flags);
}

/* A stream taking part in a capture is not destroyed (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED). */
static CUresult stream_destroy(CUstream h) {
    struct stream *s = NULL;
    pthread_mutex_lock(&lock);
    CUresult rc = find_or((void **)&s, h, OBJ_STREAM);
    if (rc == CUDA_SUCCESS && s->capture)
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (rc == CUDA_SUCCESS) {
        set_free(&s->deps);
        set_free(&s->view);
        free(s->edges);
        s->edges = NULL;
        obj_release(&s->o);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuStreamDestroy(CUstream hStream) {
    return stream_destroy(hStream);
}

EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) {
    return stream_destroy(hStream);
}

/* Nothing to wait for; a capturing stream cannot be synchronized (and its capture is
 * invalidated). */
static CUresult stream_sync(CUstream h, bool ptsz) {
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct stream *s = stream_of(h, ptsz);
    if (s && s->capture) {
        s->capture->invalidated = true;
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (s && s->legacy && legacy_conflict(true)) {
        rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
    return stream_sync(hStream, false);
}

EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
    return stream_sync(hStream, true);
}

/* ---- events ---- */

EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int flags) {
    if (!phEvent || (flags & ~0xfu))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    *phEvent = (CUevent)obj_new(OBJ_EVENT, sizeof(struct event));
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

static CUresult event_destroy(CUevent h) {
    struct event *e = NULL;
    pthread_mutex_lock(&lock);
    CUresult rc = find_or((void **)&e, h, OBJ_EVENT);
    if (rc == CUDA_SUCCESS) {
        set_free(&e->deps);
        obj_release(&e->o);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuEventDestroy(CUevent hEvent) {
    return event_destroy(hEvent);
}

EXPORT CUresult cuEventDestroy_v2(CUevent hEvent) {
    return event_destroy(hEvent);
}

/* On a capturing stream the event takes the stream's dependency set (a fork or join point);
 * elsewhere it is an ordinary record. */
static CUresult event_record(CUevent he, CUstream h, bool ptsz, unsigned flags) {
    if (flags & ~1u)
        return CUDA_ERROR_INVALID_VALUE;
    struct event *e = NULL;
    pthread_mutex_lock(&lock);
    CUresult rc = find_or((void **)&e, he, OBJ_EVENT);
    struct stream *s = stream_of(h, ptsz);
    if (rc != CUDA_SUCCESS) {
    } else if (s && s->capture) {
        if (s->capture->invalidated) {
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else {
            e->recorded = true;
            e->capture_id = s->capture->id;
            set_copy(&e->deps, &s->deps);
        }
    } else if (s && s->legacy && legacy_conflict(true)) {
        rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    } else {
        e->recorded = true;
        e->capture_id = 0;
        e->deps.n = 0;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
    return event_record(hEvent, hStream, false, 0);
}

EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
    return event_record(hEvent, hStream, true, 0);
}

EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
    return event_record(hEvent, hStream, false, flags);
}

EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags) {
    return event_record(hEvent, hStream, true, flags);
}

/* A wait on an event recorded in a capture sequence: a stream outside capture joins it (its
 * dependency set becomes the event's), a stream in it adds the event's set to its own. */
static CUresult stream_wait(CUstream h, CUevent he, unsigned flags, bool ptsz) {
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    struct event *e = NULL;
    pthread_mutex_lock(&lock);
    CUresult rc = find_or((void **)&e, he, OBJ_EVENT);
    struct stream *s = stream_of(h, ptsz);
    if (rc != CUDA_SUCCESS) {
    } else if (e->capture_id) {
        struct capture *c = capture_by_id(e->capture_id);
        if (!c) {
            rc = CUDA_ERROR_CAPTURED_EVENT; /* its capture sequence has ended */
        } else if (c->invalidated) {
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else if (!s) {
            rc = CUDA_ERROR_INVALID_HANDLE; /* a stream the double does not know cannot join */
        } else if (s->legacy) {
            c->invalidated = true;
            rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        } else if (!s->capture) {
            capture_add_stream(c, s);
            set_copy(&s->deps, &e->deps);
        } else if (s->capture == c) {
            for (size_t i = 0; i < e->deps.n; i++)
                set_add(&s->deps, e->deps.v[i]);
        } else {
            s->capture->invalidated = true;
            c->invalidated = true;
            rc = CUDA_ERROR_STREAM_CAPTURE_MERGE;
        }
    } else if (s && s->capture) {
        if (s->capture->invalidated) {
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else if (e->recorded && !(flags & CU_EVENT_WAIT_EXTERNAL)) {
            s->capture->invalidated = true;
            rc = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
        }
    } else if (s && s->legacy && legacy_conflict(true)) {
        rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int flags) {
    return stream_wait(hStream, hEvent, flags, false);
}

EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int flags) {
    return stream_wait(hStream, hEvent, flags, true);
}

/* ---- stream capture ---- */

EXPORT CUresult cuStreamBeginCapture(CUstream hStream) {
    return begin_capture(hStream, false, false, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
    return begin_capture(hStream, true, false, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
    return begin_capture(hStream, false, false, NULL, NULL, 0, mode);
}

EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
    return begin_capture(hStream, true, false, NULL, NULL, 0, mode);
}

/* Edge data is accepted and not kept (every edge is a full dependency). */
EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                            const CUgraphNode *dependencies,
                                            const CUgraphEdgeData *dependencyData,
                                            size_t numDependencies, CUstreamCaptureMode mode) {
    (void)dependencyData;
    return begin_capture(hStream, false, true, hGraph, dependencies, numDependencies, mode);
}

EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                 const CUgraphNode *dependencies,
                                                 const CUgraphEdgeData *dependencyData,
                                                 size_t numDependencies, CUstreamCaptureMode mode) {
    (void)dependencyData;
    return begin_capture(hStream, true, true, hGraph, dependencies, numDependencies, mode);
}

EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
    return end_capture(hStream, false, phGraph);
}

EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) {
    return end_capture(hStream, true, phGraph);
}

EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
    return capture_info(hStream, false, captureStatus, NULL, NULL, NULL, NULL, NULL);
}

EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
    return capture_info(hStream, true, captureStatus, NULL, NULL, NULL, NULL, NULL);
}

EXPORT CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                       cuuint64_t *id_out) {
    return capture_info(hStream, false, captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}

EXPORT CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream,
                                            CUstreamCaptureStatus *captureStatus_out,
                                            cuuint64_t *id_out) {
    return capture_info(hStream, true, captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}

EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream hStream,
                                          CUstreamCaptureStatus *captureStatus_out,
                                          cuuint64_t *id_out, CUgraph *graph_out,
                                          const CUgraphNode **dependencies_out,
                                          size_t *numDependencies_out) {
    return capture_info(hStream, false, captureStatus_out, id_out, graph_out, dependencies_out,
                        NULL, numDependencies_out);
}

EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
                                               CUstreamCaptureStatus *captureStatus_out,
                                               cuuint64_t *id_out, CUgraph *graph_out,
                                               const CUgraphNode **dependencies_out,
                                               size_t *numDependencies_out) {
    return capture_info(hStream, true, captureStatus_out, id_out, graph_out, dependencies_out, NULL,
                        numDependencies_out);
}

EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream hStream,
                                          CUstreamCaptureStatus *captureStatus_out,
                                          cuuint64_t *id_out, CUgraph *graph_out,
                                          const CUgraphNode **dependencies_out,
                                          const CUgraphEdgeData **edgeData_out,
                                          size_t *numDependencies_out) {
    return capture_info(hStream, false, captureStatus_out, id_out, graph_out, dependencies_out,
                        edgeData_out, numDependencies_out);
}

EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                               CUstreamCaptureStatus *captureStatus_out,
                                               cuuint64_t *id_out, CUgraph *graph_out,
                                               const CUgraphNode **dependencies_out,
                                               const CUgraphEdgeData **edgeData_out,
                                               size_t *numDependencies_out) {
    return capture_info(hStream, true, captureStatus_out, id_out, graph_out, dependencies_out,
                        edgeData_out, numDependencies_out);
}

EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
    if (!mode || *mode < CU_STREAM_CAPTURE_MODE_GLOBAL || *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

/* ---- potentially unsafe calls: fake device addresses, nothing behind them ---- */

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    if (!dptr || !bytesize)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    if (unsafe_call_prohibited()) {
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else {
        *dptr = next_dptr;
        next_dptr += (bytesize + 0xfffu) & ~(CUdeviceptr)0xfff;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult rc = unsafe_call_prohibited() ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- graphs ---- */

EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
    if (!phGraph || flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    *phGraph = (CUgraph)graph_new();
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* A graph being captured into is not destroyed (CUDA_ERROR_ILLEGAL_STATE). */
EXPORT CUresult cuGraphDestroy(CUgraph hGraph) {
    struct graph *g = NULL;
    pthread_mutex_lock(&lock);
    CUresult rc = find_or((void **)&g, hGraph, OBJ_GRAPH);
    if (rc == CUDA_SUCCESS && g->capture)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    if (rc == CUDA_SUCCESS)
        graph_release(g);
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
    if (!numNodes)
        return CUDA_ERROR_INVALID_VALUE;
    struct graph *g = NULL;
    pthread_mutex_lock(&lock);
    CUresult rc = find_or((void **)&g, hGraph, OBJ_GRAPH);
    if (rc == CUDA_SUCCESS && !nodes) {
        *numNodes = g->nnodes;
    } else if (rc == CUDA_SUCCESS) {
        size_t n = *numNodes < g->nnodes ? *numNodes : g->nnodes;
        for (size_t i = 0; i < *numNodes; i++)
            nodes[i] = i < n ? (CUgraphNode)g->nodes[i] : NULL;
        *numNodes = n;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static void exec_nodes_free(struct exec *x) {
    for (size_t i = 0; i < x->nnodes; i++)
        free(x->nodes[i].deps);
    free(x->nodes);
    x->nodes = NULL;
    x->nnodes = 0;
}

/* A graph being captured into is not instantiable until its capture ends
 * (CUDA_ERROR_ILLEGAL_STATE). */
static CUresult instantiate(CUgraphExec *out, CUgraph hg, unsigned long long flags) {
    if (!out || (flags & ~0xfull))
        return CUDA_ERROR_INVALID_VALUE;
    struct graph *g = NULL;
    pthread_mutex_lock(&lock);
    CUresult rc = find_or((void **)&g, hg, OBJ_GRAPH);
    if (rc == CUDA_SUCCESS && g->capture)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    if (rc == CUDA_SUCCESS) {
        struct exec *x = obj_new(OBJ_EXEC, sizeof(*x));
        x->nodes = xrealloc(NULL, (g->nnodes + 1) * sizeof(*x->nodes));
        x->nnodes = g->nnodes;
        for (size_t i = 0; i < g->nnodes; i++) {
            const struct node *n = g->nodes[i];
            struct exec_node *xn = &x->nodes[i];
            *xn = (struct exec_node){.func = n->func,
                                     .kernel = n->kernel,
                                     .capture_id = n->capture_id,
                                     .ndeps = n->deps.n};
            xn->deps = xrealloc(NULL, (n->deps.n + 1) * sizeof(*xn->deps));
            for (size_t d = 0; d < n->deps.n; d++)
                xn->deps[d] = n->deps.v[d]->index;
        }
        *out = (CUgraphExec)x;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static CUresult instantiate_legacy(CUgraphExec *out, CUgraph hg, CUgraphNode *err_node, char *log,
                                   size_t log_size) {
    CUresult rc = instantiate(out, hg, 0);
    if (err_node)
        *err_node = NULL;
    if (log && log_size)
        log[0] = '\0';
    return rc;
}

EXPORT CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                   CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize) {
    return instantiate_legacy(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                      CUgraphNode *phErrorNode, char *logBuffer,
                                      size_t bufferSize) {
    return instantiate_legacy(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                            unsigned long long flags) {
    return instantiate(phGraphExec, hGraph, flags);
}

static CUresult instantiate_params(CUgraphExec *out, CUgraph hg,
                                   CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    if (!params)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = instantiate(out, hg, params->flags);
    params->hErrNode_out = NULL;
    params->result_out =
        rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    return rc;
}

EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
    return instantiate_params(phGraphExec, hGraph, instantiateParams);
}

EXPORT CUresult cuGraphInstantiateWithParams_ptsz(
    CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
    /* the upload stream (CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) is not used: nothing to upload */
    return instantiate_params(phGraphExec, hGraph, instantiateParams);
}

/* Replaces an executable graph's nodes with the graph's, which must have the same topology
 * (node count and each node's dependencies, in creation order); the kernels may change. */
static CUresult exec_update(CUgraphExec hx, CUgraph hg, CUgraphNode *err_node, int *result) {
    struct exec *x = NULL;
    struct graph *g = NULL;
    pthread_mutex_lock(&lock);
    CUresult rc = find_or((void **)&x, hx, OBJ_EXEC);
    if (rc == CUDA_SUCCESS)
        rc = find_or((void **)&g, hg, OBJ_GRAPH);
    if (rc == CUDA_SUCCESS && g->capture)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    *err_node = NULL;
    *result = rc == CUDA_SUCCESS ? CU_GRAPH_EXEC_UPDATE_SUCCESS : CU_GRAPH_EXEC_UPDATE_ERROR;
    if (rc == CUDA_SUCCESS) {
        bool same = x->nnodes == g->nnodes;
        for (size_t i = 0; same && i < g->nnodes; i++) {
            const struct node *n = g->nodes[i];
            same = n->deps.n == x->nodes[i].ndeps;
            for (size_t d = 0; same && d < n->deps.n; d++)
                same = n->deps.v[d]->index == x->nodes[i].deps[d];
            if (!same)
                *err_node = (CUgraphNode)g->nodes[i];
        }
        if (!same) {
            *result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
            rc = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
        } else {
            for (size_t i = 0; i < g->nnodes; i++) {
                x->nodes[i].func = g->nodes[i]->func;
                x->nodes[i].kernel = g->nodes[i]->kernel;
                x->nodes[i].capture_id = g->nodes[i]->capture_id;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph,
                                  CUgraphNode *hErrorNode_out, int *updateResult_out) {
    if (!hErrorNode_out || !updateResult_out)
        return CUDA_ERROR_INVALID_VALUE;
    return exec_update(hGraphExec, hGraph, hErrorNode_out, updateResult_out);
}

EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                     CUgraphExecUpdateResultInfo *resultInfo) {
    if (!resultInfo)
        return CUDA_ERROR_INVALID_VALUE;
    resultInfo->errorFromNode = NULL;
    return exec_update(hGraphExec, hGraph, &resultInfo->errorNode, &resultInfo->result);
}

/* Runs every node once. A graph launched into a capturing stream would become a child graph
 * node: not in this double (CUDA_ERROR_NOT_SUPPORTED). */
static CUresult graph_launch(CUgraphExec hx, CUstream h, bool ptsz) {
    struct exec *x = NULL;
    pthread_mutex_lock(&lock);
    CUresult rc = find_or((void **)&x, hx, OBJ_EXEC);
    struct stream *s = stream_of(h, ptsz);
    if (rc != CUDA_SUCCESS) {
    } else if (s && s->capture) {
        rc = CUDA_ERROR_NOT_SUPPORTED;
    } else if (s && s->legacy && legacy_conflict(true)) {
        rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    } else {
        x->replays++;
        for (size_t i = 0; i < x->nnodes; i++)
            x->nodes[i].kernel->replayed++;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    return graph_launch(hGraphExec, hStream, false);
}

EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    return graph_launch(hGraphExec, hStream, true);
}

EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
    struct exec *x = NULL;
    pthread_mutex_lock(&lock);
    CUresult rc = find_or((void **)&x, hGraphExec, OBJ_EXEC);
    if (rc == CUDA_SUCCESS) {
        exec_nodes_free(x);
        obj_release(&x->o);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- the double's own queries (not CUDA) ---- */

EXPORT CUresult fakecuda_exec_info(CUgraphExec exec, unsigned long long *replays, size_t *nodes) {
    struct exec *x = NULL;
    pthread_mutex_lock(&lock);
    CUresult rc = find_or((void **)&x, exec, OBJ_EXEC);
    if (rc == CUDA_SUCCESS) {
        if (replays)
            *replays = x->replays;
        if (nodes)
            *nodes = x->nnodes;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult fakecuda_exec_node(CUgraphExec exec, size_t i, const char **kernel,
                                   unsigned long long *capture_id) {
    struct exec *x = NULL;
    pthread_mutex_lock(&lock);
    CUresult rc = find_or((void **)&x, exec, OBJ_EXEC);
    if (rc == CUDA_SUCCESS && i >= x->nnodes)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        if (kernel)
            *kernel = x->nodes[i].kernel->name;
        if (capture_id)
            *capture_id = x->nodes[i].capture_id;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult fakecuda_kernel_counts(const char *name, unsigned long long *eager,
                                       unsigned long long *captured, unsigned long long *replayed) {
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long e = 0, c = 0, r = 0;
    pthread_mutex_lock(&lock);
    for (struct kcount *k = kcounts; k; k = k->next) {
        if (strcmp(k->name, name) == 0) {
            e = k->eager, c = k->captured, r = k->replayed;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    if (eager)
        *eager = e;
    if (captured)
        *captured = c;
    if (replayed)
        *replayed = r;
    return CUDA_SUCCESS;
}
