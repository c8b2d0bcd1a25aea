/* graphs.c - CUDA graphs followed through stream capture (see graphs.h). */
#define _GNU_SOURCE
#include "correlate/graphs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "attach/probes.h"
#include "ingest/ingest.h"
#include "ncclprobe/recording.h"
#include "symbolize/symbolize.h"

#define PER_THREAD_STREAM 0x2 /* cudaStreamPerThread / CU_STREAM_PER_THREAD */
/* cudaErrorStreamCaptureInvalidated / CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
 * the end that returns it ends the capture too (other errors do not) */
#define CAPTURE_INVALIDATED 901

struct np_capture {
    uint64_t id;
    uint64_t origin;     /* the stream key it began on */
    uint64_t into_graph; /* capture to an existing graph (0: a new graph) */
    enum np_capture_mode mode;
    bool dropped; /* over the memory bound: its graph is not kept */
    struct np_graph_nodes *nodes;
};

/* ---- interned stacks ------------------------------------------------------ */

/* A stack outlives the process's tables while an output still holds a
 * replay of it: `owner` is then NULL and the last reference frees it. */
struct stack_box {
    struct np_graph_stack s;
    struct np_graphs *owner;
};

static size_t stack_size(const struct np_graph_stack *s) {
    return sizeof(struct stack_box) + strlen(s->folded) + strlen(s->detailed) +
           strlen(s->locations) + 3;
}

static struct np_graph_stack *stack_get(struct np_graphs *g, const struct np_stack_texts *t) {
    const char *detailed = np_str_cstr(&t->detailed);
    uint64_t h = np_hash_bytes(detailed, strlen(detailed));
    struct np_graph_stack *head = np_map_get_u64(&g->stacks, h);
    for (struct np_graph_stack *s = head; s; s = s->next)
        if (strcmp(s->detailed, detailed) == 0) {
            s->refs++;
            return s;
        }
    struct stack_box *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->owner = g;
    b->s.hash = h;
    b->s.refs = 1;
    b->s.folded = strdup(np_str_cstr(&t->folded));
    b->s.detailed = strdup(detailed);
    b->s.locations = strdup(np_str_cstr(&t->locations));
    b->s.next = head;
    if (!b->s.folded || !b->s.detailed || !b->s.locations ||
        np_map_put_u64(&g->stacks, h, &b->s) < 0) {
        free(b->s.folded), free(b->s.detailed), free(b->s.locations), free(b);
        return NULL;
    }
    g->stack_bytes += stack_size(&b->s);
    return &b->s;
}

static void stack_put(struct np_graph_stack *s) {
    if (!s || --s->refs > 0)
        return;
    struct stack_box *b = (struct stack_box *)s;
    struct np_graphs *g = b->owner;
    if (g) { /* unlink from its hash chain */
        struct np_graph_stack *head = np_map_get_u64(&g->stacks, s->hash);
        if (head == s) {
            if (s->next)
                np_map_put_u64(&g->stacks, s->hash, s->next);
            else
                np_map_del_u64(&g->stacks, s->hash);
        } else {
            for (struct np_graph_stack *p = head; p; p = p->next)
                if (p->next == s) {
                    p->next = s->next;
                    break;
                }
        }
        g->stack_bytes -= stack_size(s);
    }
    free(s->folded), free(s->detailed), free(s->locations), free(b);
}

/* ---- node lists ----------------------------------------------------------- */

static size_t node_size(const char *kernel) {
    return sizeof(struct np_graph_node) + strlen(kernel) + 1;
}

static struct np_graph_nodes *nodes_new(struct np_graphs *g) {
    struct np_graph_nodes *n = calloc(1, sizeof(*n));
    if (!n)
        return NULL;
    n->refs = 1;
    n->id = ++g->next_nodes_id;
    n->owner = g;
    if (np_map_put_u64(&g->lists, n->id, n) < 0) {
        free(n);
        return NULL;
    }
    return n;
}

void np_graph_nodes_ref(struct np_graph_nodes *n) {
    if (n)
        n->refs++;
}

void np_graph_nodes_put(struct np_graph_nodes *n) {
    if (!n || --n->refs > 0)
        return;
    for (size_t i = 0; i < n->n; i++) {
        if (n->owner)
            n->owner->node_bytes -= node_size(n->v[i].kernel);
        stack_put(n->v[i].stack);
        free(n->v[i].kernel);
    }
    if (n->owner) {
        n->owner->nodes_live -= n->n;
        np_map_del_u64(&n->owner->lists, n->id);
    }
    free(n->v);
    free(n);
}

static int nodes_push(struct np_graph_nodes *n, struct np_graph_stack *stack, const char *kernel) {
    if (n->n == n->cap) {
        size_t cap = n->cap ? n->cap * 2 : 16;
        struct np_graph_node *v = realloc(n->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        n->v = v;
        n->cap = cap;
    }
    char *k = strdup(kernel ? kernel : "");
    if (!k)
        return -ENOMEM;
    n->v[n->n++] = (struct np_graph_node){.stack = stack, .kernel = k};
    if (n->owner) {
        n->owner->nodes_live++;
        n->owner->node_bytes += node_size(k);
    }
    return 0;
}

/* A new list: a's nodes then b's (capture into an existing graph). */
static struct np_graph_nodes *nodes_concat(struct np_graphs *g, const struct np_graph_nodes *a,
                                           const struct np_graph_nodes *b) {
    struct np_graph_nodes *n = nodes_new(g);
    const struct np_graph_nodes *parts[2] = {a, b};
    for (int p = 0; n && p < 2; p++)
        for (size_t i = 0; parts[p] && i < parts[p]->n; i++) {
            struct np_graph_stack *s = parts[p]->v[i].stack;
            s->refs++;
            if (nodes_push(n, s, parts[p]->v[i].kernel) < 0) {
                stack_put(s);
                np_graph_nodes_put(n);
                return NULL;
            }
        }
    return n;
}

/* Replaces what `map[key]` holds (a node list), putting the old one. */
static void set_nodes(struct np_map *map, uint64_t key, struct np_graph_nodes *n) {
    struct np_graph_nodes *old = np_map_get_u64(map, key);
    if (np_map_put_u64(map, key, n) < 0) {
        np_graph_nodes_put(n);
        return;
    }
    np_graph_nodes_put(old); /* n came with a reference of its own, even when n == old */
}

static void drop_nodes(struct np_map *map, uint64_t key) {
    np_graph_nodes_put(np_map_del_u64(map, key));
}

/* ---- captures ------------------------------------------------------------- */

void np_graphs_init(struct np_graphs *g) {
    memset(g, 0, sizeof(*g));
    np_map_init(&g->captures);
    np_map_init(&g->streams);
    np_map_init(&g->events);
    np_map_init(&g->graphs);
    np_map_init(&g->execs);
    np_map_init(&g->unseen_execs);
    np_map_init(&g->stacks);
    np_map_init(&g->lists);
    np_map_init(&g->open_nodes);
    np_map_init(&g->corr_nodes);
    np_map_init(&g->cupti_created);
    np_map_init(&g->cupti_clones);
}

static void capture_free(void *p) {
    struct np_capture *c = p;
    if (c)
        np_graph_nodes_put(c->nodes);
    free(c);
}

static void put_nodes_value(void *p) {
    np_graph_nodes_put(p);
}

void np_graphs_free(struct np_graphs *g) {
    np_map_free(&g->captures, capture_free);
    np_map_free(&g->streams, NULL);
    np_map_free(&g->events, NULL);
    np_map_free(&g->graphs, put_nodes_value);
    np_map_free(&g->execs, put_nodes_value);
    np_map_free(&g->unseen_execs, NULL);
    np_map_free(&g->open_nodes, NULL);
    np_map_free(&g->corr_nodes, NULL);
    np_map_free(&g->cupti_created, NULL);
    np_map_free(&g->cupti_clones, NULL);
    /* Lists outputs still hold outlive us, and so do their stacks. */
    for (size_t i = 0; i < g->lists.cap; i++)
        if (g->lists.slots[i].used)
            ((struct np_graph_nodes *)g->lists.slots[i].value)->owner = NULL;
    np_map_free(&g->lists, NULL);
    for (size_t i = 0; i < g->stacks.cap; i++)
        if (g->stacks.slots[i].used)
            for (struct np_graph_stack *s = g->stacks.slots[i].value; s; s = s->next)
                ((struct stack_box *)s)->owner = NULL;
    np_map_free(&g->stacks, NULL);
}

/* The key of a stream in `streams`: the per-thread default stream is one
 * per thread (its handle value is the same in all of them). */
static uint64_t stream_key(uint64_t stream, uint32_t tid, bool per_thread) {
    if (stream == PER_THREAD_STREAM || (stream == 0 && per_thread))
        return ((uint64_t)tid << 32) | PER_THREAD_STREAM;
    return stream;
}

static bool is_per_thread_api(const struct np_probe_def *def) {
    size_t n = strlen(def->symbol);
    return n > 5 && strcmp(def->symbol + n - 5, "_ptsz") == 0;
}

static struct np_capture *capture_by_id(const struct np_graphs *g, uint64_t id) {
    return id ? np_map_get_u64(&g->captures, id) : NULL;
}

uint64_t np_graphs_capture_of(const struct np_graphs *g, uint64_t stream, uint32_t tid,
                              const struct np_probe_def *def) {
    if (!g->streams.count)
        return 0;
    uint64_t key = stream_key(stream, tid, is_per_thread_api(def));
    uint64_t id = (uint64_t)(uintptr_t)np_map_get_u64(&g->streams, key);
    /* a dropped capture still captures: its launches ran nothing */
    return capture_by_id(g, id) ? id : 0;
}

static void begin(struct np_graphs *g, uint64_t key, uint64_t into_graph, int64_t mode) {
    if (capture_by_id(g, (uint64_t)(uintptr_t)np_map_get_u64(&g->streams, key)))
        return; /* the runtime's begin, seen again in the driver */
    struct np_capture *c = calloc(1, sizeof(*c));
    if (!c)
        return;
    c->id = ++g->next_capture_id;
    c->origin = key;
    c->into_graph = into_graph;
    c->mode = mode >= 0 && mode <= NP_CAPTURE_RELAXED ? (enum np_capture_mode)mode : 0;
    c->nodes = nodes_new(g);
    if (!c->nodes || np_map_put_u64(&g->captures, c->id, c) < 0) {
        capture_free(c);
        return;
    }
    np_map_put_u64(&g->streams, key, (void *)(uintptr_t)c->id);
    g->stats.captures++;
}

/* Every stream in capture id leaves it. */
static void release_streams(struct np_graphs *g, uint64_t id) {
    for (size_t i = 0; i < g->streams.cap; i++)
        if (g->streams.slots[i].used && (uint64_t)(uintptr_t)g->streams.slots[i].value == id) {
            np_map_del_u64(&g->streams, g->streams.slots[i].ikey);
            i = (size_t)-1; /* deletion may move entries: start over (few streams) */
        }
}

static void end(struct np_graphs *g, uint64_t key, uint64_t graph, bool ok) {
    uint64_t id = (uint64_t)(uintptr_t)np_map_get_u64(&g->streams, key);
    struct np_capture *c = capture_by_id(g, id);
    if (!c || c->origin != key)
        return; /* not capturing (the driver's end, seen again in the runtime) */
    release_streams(g, id);
    np_map_del_u64(&g->captures, id);
    if (!ok || !graph || c->dropped) {
        g->stats.captures_failed += !ok;
        capture_free(c);
        return;
    }
    struct np_graph_nodes *n = c->nodes;
    c->nodes = NULL;
    if (c->into_graph) { /* the graph grew: a new list, its execs keep theirs */
        struct np_graph_nodes *joined = nodes_concat(g, np_map_get_u64(&g->graphs, graph), n);
        np_graph_nodes_put(n);
        n = joined;
    }
    if (n)
        set_nodes(&g->graphs, graph, n);
    capture_free(c);
}

/* An event recorded on a capturing stream forks the capture: a stream that
 * waits on it joins. Recorded elsewhere, it forks nothing. */
static void event_record(struct np_graphs *g, uint64_t event, uint64_t key) {
    uint64_t id = (uint64_t)(uintptr_t)np_map_get_u64(&g->streams, key);
    if (capture_by_id(g, id))
        np_map_put_u64(&g->events, event, (void *)(uintptr_t)id);
    else
        np_map_del_u64(&g->events, event);
}

static void stream_wait(struct np_graphs *g, uint64_t key, uint64_t event) {
    uint64_t id = (uint64_t)(uintptr_t)np_map_get_u64(&g->events, event);
    if (!capture_by_id(g, id))
        return;
    if (capture_by_id(g, (uint64_t)(uintptr_t)np_map_get_u64(&g->streams, key)))
        return; /* already in a capture (this one: a join back) */
    np_map_put_u64(&g->streams, key, (void *)(uintptr_t)id);
}

static void instantiate(struct np_graphs *g, uint64_t exec, uint64_t graph) {
    struct np_graph_nodes *n = np_map_get_u64(&g->graphs, graph);
    if (!n) { /* made before we attached, or by explicit node calls */
        drop_nodes(&g->execs, exec);
        np_map_put_u64(&g->unseen_execs, exec, (void *)1);
        return;
    }
    np_map_del_u64(&g->unseen_execs, exec);
    np_graph_nodes_ref(n);
    set_nodes(&g->execs, exec, n);
}

void np_graphs_on_call(struct np_graphs *g, const struct np_probe_def *def,
                       const struct np_graph_event *e) {
    const __u64 *a = e->args;
    bool ok = e->ret == 0, pt = is_per_thread_api(def);
    uint32_t tid = e->hdr.tid;
    int64_t mode = def->src_arg >= 0 && def->src_arg < NP_REG_ARGS ? (int64_t)a[def->src_arg] : 0;
    switch ((enum np_graph_op)e->op) {
    case NP_GOP_BEGIN:
        if (ok)
            begin(g, stream_key(a[0], tid, pt), 0, mode);
        break;
    case NP_GOP_BEGIN_TO_GRAPH:
        if (ok)
            begin(g, stream_key(a[0], tid, pt), a[1], mode);
        break;
    case NP_GOP_END:
        if (ok || e->ret == CAPTURE_INVALIDATED)
            end(g, stream_key(a[0], tid, pt), e->out, ok);
        break;
    case NP_GOP_EVENT_RECORD:
        if (ok)
            event_record(g, a[0], stream_key(a[1], tid, pt));
        break;
    case NP_GOP_STREAM_WAIT:
        if (ok)
            stream_wait(g, stream_key(a[0], tid, pt), a[1]);
        break;
    case NP_GOP_INSTANTIATE:
        if (ok && e->out) {
            g->stats.instantiations++;
            instantiate(g, e->out, a[1]);
        }
        break;
    case NP_GOP_EXEC_UPDATE:
        if (ok) {
            g->stats.updates++;
            instantiate(g, a[0], a[1]);
        }
        break;
    case NP_GOP_GRAPH_DESTROY:
        if (ok && np_map_get_u64(&g->graphs, a[0])) {
            g->stats.graphs_destroyed++;
            drop_nodes(&g->graphs, a[0]);
        }
        break;
    case NP_GOP_EXEC_DESTROY:
        if (ok) {
            g->stats.execs_destroyed += np_map_get_u64(&g->execs, a[0]) != NULL ||
                                        np_map_del_u64(&g->unseen_execs, a[0]) != NULL;
            drop_nodes(&g->execs, a[0]);
        }
        break;
    case NP_GOP_NONE:
        break;
    }
}

int np_graphs_add_node(struct np_graphs *g, uint64_t capture, const char *kernel,
                       const struct np_stack_texts *stack) {
    struct np_capture *c = capture_by_id(g, capture);
    if (!c || c->dropped)
        return 0;
    if (g->nodes_live >= NP_GRAPH_MAX_NODES || g->stack_bytes >= NP_GRAPH_MAX_STACK_BYTES) {
        c->dropped = true; /* a graph missing nodes would be wrong: none of it is kept */
        g->stats.captures_dropped++;
        return -ENOMEM;
    }
    struct np_graph_stack *s = stack_get(g, stack);
    if (!s || nodes_push(c->nodes, s, kernel) < 0) {
        stack_put(s);
        c->dropped = true;
        g->stats.captures_dropped++;
        return -ENOMEM;
    }
    g->stats.captured_launches++;
    return 0;
}

struct np_graph_nodes *np_graphs_replay(struct np_graphs *g, uint64_t exec, const char **why) {
    g->stats.replays++;
    struct np_graph_nodes *n = np_map_get_u64(&g->execs, exec);
    if (n && n->n) {
        g->stats.replays_expanded++;
        np_graph_nodes_ref(n);
        return n;
    }
    g->stats.replays_unknown++;
    *why = n ? "its graph has no captured kernel"
           : np_map_get_u64(&g->unseen_execs, exec)
               ? "its graph was not captured while traced (or was built node by node)"
               : "the graph was instantiated before ncclprobe attached";
    return NULL;
}

/* ---- composing a replayed node's stack ------------------------------------ */

/* Frames of a ';'-joined text: the offset where frame i starts. */
static size_t frame_count(const char *s) {
    if (!*s)
        return 0;
    size_t n = 1;
    for (; *s; s++)
        n += *s == NP_FRAME_SEPARATOR;
    return n;
}

/* Frames `a` and `b` share from the root. */
static size_t common_frames(const char *a, const char *b) {
    size_t n = 0;
    for (;;) {
        size_t la = strcspn(a, ";"), lb = strcspn(b, ";");
        if (la != lb || memcmp(a, b, la) != 0 || (!a[la] && !b[lb] && la == 0))
            return n;
        n++;
        if (!a[la] || !b[lb])
            return n;
        a += la + 1, b += lb + 1;
    }
}

/* The text after the first `skip` frames ("" when none is left). */
static const char *after_frames(const char *s, size_t skip) {
    for (; skip && *s; skip--) {
        s += strcspn(s, ";");
        if (*s)
            s++;
    }
    return s;
}

/* The same for a locations list: JSON objects joined by ',' (a string may
 * hold a brace or a comma). */
static const char *after_locations(const char *s, size_t skip) {
    int depth = 0;
    bool in_string = false;
    for (; skip && *s; s++) {
        char ch = *s;
        if (in_string) {
            if (ch == '\\' && s[1])
                s++;
            else if (ch == '"')
                in_string = false;
        } else if (ch == '"') {
            in_string = true;
        } else if (ch == '{') {
            depth++;
        } else if (ch == '}' && --depth == 0) {
            skip--;
            if (s[1] == ',')
                s++;
        }
    }
    return s;
}

static void join(struct np_str *out, const char *a, const char *mark, const char *b) {
    np_str_append(out, a);
    if (*a)
        np_str_append(out, ";");
    np_str_append(out, mark);
    if (*b) {
        np_str_append(out, ";");
        np_str_append(out, b);
    }
}

void np_graph_compose(const struct np_stack_texts *replay, const struct np_graph_node *node,
                      struct np_stack_texts *out) {
    const char *rf = np_str_cstr(&replay->folded), *rd = np_str_cstr(&replay->detailed);
    const struct np_graph_stack *c = node->stack;
    size_t shared_f = common_frames(rf, c->folded), shared_d = common_frames(rd, c->detailed);
    /* the capture is never cut to nothing: its launch frame at least */
    if (shared_f >= frame_count(c->folded) && shared_f)
        shared_f--;
    if (shared_d >= frame_count(c->detailed) && shared_d)
        shared_d--;
    np_str_reset(&out->folded);
    np_str_reset(&out->detailed);
    np_str_reset(&out->locations);
    join(&out->folded, rf, NP_FRAME_GRAPH_CAPTURE, after_frames(c->folded, shared_f));
    join(&out->detailed, rd, NP_FRAME_GRAPH_CAPTURE, after_frames(c->detailed, shared_d));
    const char *rl = np_str_cstr(&replay->locations);
    np_str_append(&out->locations, rl);
    np_ingest_append_location(&out->locations);
    const char *cl = after_locations(c->locations, shared_d);
    if (*cl) {
        np_str_append(&out->locations, ",");
        np_str_append(&out->locations, cl);
    }
}

/* ---- CUPTI's node identity ------------------------------------------------ */

/* A node ref: (list id << INDEX_BITS) | index; never 0 (list ids start at
 * 1). In open_nodes, the top bits say which CUPTI domains' markers it had. */
#define INDEX_BITS 20 /* NP_GRAPH_MAX_NODES */
#define REF_MASK ((1ull << 60) - 1)
#define REF_DOMAIN_BIT(d) (1ull << (60 + ((d)&3)))
/* Entries kept per map before the dead ones (of lists gone) are swept, and
 * after which no more are taken. */
#define IDENTITY_MAX (2ull * NP_GRAPH_MAX_NODES)

static uint64_t node_ref(const struct np_graph_nodes *n, size_t index) {
    return (n->id << INDEX_BITS) | index;
}

static const struct np_graph_node *node_at(const struct np_graphs *g, uint64_t ref) {
    const struct np_graph_nodes *n = np_map_get_u64(&g->lists, (ref & REF_MASK) >> INDEX_BITS);
    size_t index = ref & ((1ull << INDEX_BITS) - 1);
    return n && index < n->n ? &n->v[index] : NULL;
}

void np_graphs_thread_launch(struct np_graphs *g, uint32_t tid, uint64_t capture) {
    const struct np_capture *c = capture_by_id(g, capture);
    if (c && !c->dropped && c->nodes && c->nodes->n) {
        np_map_put_u64(&g->open_nodes, tid, (void *)(uintptr_t)node_ref(c->nodes, c->nodes->n - 1));
        return;
    }
    if (g->open_nodes.count)
        np_map_del_u64(&g->open_nodes, tid);
}

/* Drops the entries of `m` whose node is gone (resolve says), when it is
 * over the bound; false when it is still full after that. */
static bool room_in(struct np_graphs *g, struct np_map *m,
                    bool (*alive)(const struct np_graphs *, uint64_t key, uint64_t value)) {
    if (m->count < IDENTITY_MAX)
        return true;
    /* the keys first: a deletion may move entries */
    uint64_t *dead = malloc(m->count * sizeof(*dead));
    size_t n = 0;
    for (size_t i = 0; dead && i < m->cap; i++)
        if (m->slots[i].used && !alive(g, m->slots[i].ikey, (uint64_t)(uintptr_t)m->slots[i].value))
            dead[n++] = m->slots[i].ikey;
    for (size_t i = 0; i < n; i++)
        np_map_del_u64(m, dead[i]);
    free(dead);
    return m->count < IDENTITY_MAX;
}

static bool ref_alive(const struct np_graphs *g, uint64_t key, uint64_t ref) {
    (void)key;
    return node_at(g, ref) != NULL;
}

bool np_graphs_marker(struct np_graphs *g, uint32_t tid, uint32_t correlation_id, uint32_t domain) {
    if (!g->open_nodes.count)
        return false;
    uint64_t open = (uint64_t)(uintptr_t)np_map_get_u64(&g->open_nodes, tid);
    if (!open || (open & REF_DOMAIN_BIT(domain)))
        return false; /* not after a captured launch, or a second call of that kind */
    np_map_put_u64(&g->open_nodes, tid, (void *)(uintptr_t)(open | REF_DOMAIN_BIT(domain)));
    if (room_in(g, &g->corr_nodes, ref_alive))
        np_map_put_u64(&g->corr_nodes, correlation_id, (void *)(uintptr_t)(open & REF_MASK));
    return true;
}

/* The captured node of a CUPTI node id, following clones (a clone of a
 * clone: an exec updated from a cloned graph) a few steps back. */
const struct np_graph_node *np_graphs_node_of(const struct np_graphs *g, uint64_t node_id) {
    for (int hop = 0; hop < 8 && node_id; hop++) {
        uint64_t corr = (uint64_t)(uintptr_t)np_map_get_u64(&g->cupti_created, node_id);
        if (corr) {
            uint64_t ref = (uint64_t)(uintptr_t)np_map_get_u64(&g->corr_nodes, corr);
            return ref ? node_at(g, ref) : NULL;
        }
        node_id = (uint64_t)(uintptr_t)np_map_get_u64(&g->cupti_clones, node_id);
    }
    return NULL;
}

static bool cupti_alive(const struct np_graphs *g, uint64_t node_id, uint64_t value) {
    (void)value;
    return np_graphs_node_of(g, node_id) != NULL;
}

void np_graphs_cupti_node(struct np_graphs *g, const struct np_wire_graph_node *e) {
    bool created = e->event == NP_GRAPH_NODE_CREATED;
    if (created && !e->correlation_id)
        return; /* added explicitly, not by a launch: no stack of ours */
    struct np_map *m = created ? &g->cupti_created : &g->cupti_clones;
    uint64_t value = created ? e->correlation_id : e->original_node_id;
    if (!room_in(g, m, cupti_alive) ||
        np_map_put_u64(m, e->node_id, (void *)(uintptr_t)value) < 0) {
        g->stats.cupti_nodes_dropped++;
        return;
    }
    g->stats.cupti_nodes++;
}

/* ---- a replay's GPU records ----------------------------------------------- */

struct np_graph_replay *np_graph_replay_new(struct np_graph_nodes *nodes,
                                            const struct np_stack_texts *stack) {
    struct np_graph_replay *r = calloc(1, sizeof(*r));
    struct np_stack_texts *t = calloc(1, sizeof(*t));
    if (!r || !t) {
        free(r), free(t);
        return NULL;
    }
    np_str_init(&t->folded);
    np_str_init(&t->detailed);
    np_str_init(&t->locations);
    np_str_append(&t->folded, np_str_cstr(&stack->folded));
    np_str_append(&t->detailed, np_str_cstr(&stack->detailed));
    np_str_append(&t->locations, np_str_cstr(&stack->locations));
    r->stack = t;
    np_graph_nodes_ref(nodes);
    r->nodes = nodes;
    if (t->folded.failed || t->detailed.failed || t->locations.failed) {
        np_graph_replay_free(r);
        return NULL;
    }
    return r;
}

void np_graph_replay_free(void *p) {
    struct np_graph_replay *r = p;
    if (!r)
        return;
    np_graph_nodes_put(r->nodes);
    np_str_free(&r->stack->folded);
    np_str_free(&r->stack->detailed);
    np_str_free(&r->stack->locations);
    free(r->stack);
    free(r);
}

/* Whether a GPU record's kernel name is the node's (the CPU side may have
 * it demangled). */
static bool same_kernel(const char *node_kernel, const struct np_gpu_record *rec) {
    char name[NP_WIRE_MAX_NAME + 1];
    memcpy(name, rec->name, rec->name_len);
    name[rec->name_len] = '\0';
    if (strcmp(node_kernel, name) == 0)
        return true;
    char *short_name = np_demangle_short(name);
    bool same = short_name && strcmp(node_kernel, short_name) == 0;
    free(short_name);
    return same;
}

/* Records in the order they started (ties: as they came). */
static int by_start(const void *a, const void *b, void *recs) {
    struct np_gpu_record *const *r = recs;
    uint32_t ia = *(const uint32_t *)a, ib = *(const uint32_t *)b;
    if (r[ia]->start_ns != r[ib]->start_ns)
        return r[ia]->start_ns < r[ib]->start_ns ? -1 : 1;
    return ia < ib ? -1 : ia > ib;
}

/* The records no node id tied, matched to the list's nodes by kernel name,
 * each node once, in capture order. */
static void attribute_by_order(const struct np_graph_nodes *list,
                               struct np_gpu_record *const *records, uint32_t n,
                               const struct np_graph_node **node, const char **by) {
    uint32_t *order = calloc(n, sizeof(*order));
    bool *used = calloc(list->n ? list->n : 1, sizeof(*used));
    if (!order || !used) {
        free(order), free(used);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        order[i] = i;
        uintptr_t at = (uintptr_t)node[i], first = (uintptr_t)list->v;
        if (node[i] && at >= first && at < first + list->n * sizeof(*list->v)) /* tied by id */
            used[(at - first) / sizeof(*list->v)] = true;
    }
    qsort_r(order, n, sizeof(*order), by_start, (void *)records);
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = order[k];
        if (node[i] || records[i]->kind != NP_GPU_KERNEL || !records[i]->graph_id)
            continue;
        for (size_t j = 0; j < list->n; j++)
            if (!used[j] && same_kernel(list->v[j].kernel, records[i])) {
                used[j] = true;
                node[i] = &list->v[j];
                by[i] = NP_CAPTURE_BY_ORDER;
                break;
            }
    }
    free(order);
    free(used);
}

void np_graphs_attribute(struct np_graphs *g, const struct np_graph_replay *r,
                         struct np_gpu_record *const *records, uint32_t n,
                         const struct np_graph_node **node, const char **by) {
    bool any_unresolved = false;
    for (uint32_t i = 0; i < n; i++) {
        node[i] = NULL;
        by[i] = NULL;
        if (g && records[i]->graph_node_id)
            node[i] = np_graphs_node_of(g, records[i]->graph_node_id);
        if (node[i])
            by[i] = NP_CAPTURE_BY_NODE;
        else
            any_unresolved = true;
    }
    if (any_unresolved && r->nodes)
        attribute_by_order(r->nodes, records, n, node, by);
    if (!g)
        return;
    for (uint32_t i = 0; i < n; i++) {
        if (!by[i]) {
            g->stats.records_unattributed++;
            continue;
        }
        g->stats.replayed_kernels++;
        if (strcmp(by[i], NP_CAPTURE_BY_NODE) == 0)
            g->stats.records_by_node++;
        else
            g->stats.records_by_order++;
    }
}
