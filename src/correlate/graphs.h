/* graphs.h - CUDA graphs, followed through the uprobes on stream capture:
 * which launches were captured (they ran nothing: each became a node of a
 * graph), which graph each capture made, which executable graphs run which
 * nodes, so that every replay of an exec counts each of its kernels under
 * the line of code that captured it.
 *
 * Per process (struct np_graphs), fed in the order the records come:
 *   - a capture begins on a stream (global, thread-local or relaxed mode);
 *     other streams join it by waiting on an event recorded on a capturing
 *     stream (fork), and leave when it ends (join);
 *   - a launch on a capturing stream is a node: its kernel and stack;
 *   - the end of the capture gives the graph its nodes; an instantiation
 *     gives them to the exec, an exec update replaces them;
 *   - destroying a graph or an exec forgets it, so a handle value reused
 *     later never inherits old stacks.
 * The node list of a graph is shared (reference counted) by the graph and
 * its execs, and by the outputs that still have replays of it to write.
 * Stacks are interned: the 30-60 graphs a server captures (one per batch
 * size) share their capture sites. Memory is bounded per process
 * (NP_GRAPH_MAX_NODES, NP_GRAPH_MAX_STACK_BYTES): past it, captures are
 * not kept and their replays say so. Every call is idempotent where the
 * runtime calls the driver (both are probed): a second begin on a
 * capturing stream, an end on one that is not, are no-ops. */
#ifndef NP_CORRELATE_GRAPHS_H
#define NP_CORRELATE_GRAPHS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/hashmap.h"
#include "ncclprobe/events.h"
#include "ncclprobe/gpu_wire.h"

struct np_stack_texts;
struct np_probe_def;

#define NP_GRAPH_MAX_NODES (1u << 20)          /* nodes kept per process */
#define NP_GRAPH_MAX_STACK_BYTES (64ull << 20) /* interned stack text per process */

enum np_capture_mode { NP_CAPTURE_GLOBAL = 0, NP_CAPTURE_THREAD_LOCAL = 1, NP_CAPTURE_RELAXED = 2 };

/* One interned capture stack (texts as struct np_stack_texts holds them). */
struct np_graph_stack {
    struct np_graph_stack *next; /* hash chain */
    uint64_t hash;
    int refs;
    char *folded, *detailed, *locations;
};

/* One captured launch: what a replay of its graph runs. */
struct np_graph_node {
    struct np_graph_stack *stack;
    char *kernel;
};

/* The nodes of one captured graph (or of a graph that grew by capture into
 * it: a new list, the old one stays with the execs made from it). */
struct np_graph_nodes {
    int refs;
    uint64_t id; /* unique per process: never reused */
    struct np_graphs *owner;
    size_t n, cap;
    struct np_graph_node *v;
};

/* Counters of summary.json's targets[].graphs. */
struct np_graph_stats {
    uint64_t captures, captures_failed, captures_dropped; /* dropped: over the memory bound */
    uint64_t captured_launches;
    uint64_t replays, replays_expanded;
    uint64_t replays_unknown;  /* execs whose graph we did not see captured */
    uint64_t replayed_kernels; /* nodes counted by the expanded replays (or GPU records of
                                * replays tied to their capture) */
    uint64_t instantiations, updates, graphs_destroyed, execs_destroyed;
    /* With the CUPTI library: nodes it announced (kept, and not kept: over the
     * bound), and the GPU records of replays tied to their capture by node
     * id, by kernel order, or not at all. */
    uint64_t cupti_nodes, cupti_nodes_dropped;
    uint64_t records_by_node, records_by_order, records_unattributed;
};

struct np_graphs {
    struct np_map captures;     /* capture id -> struct np_capture * */
    struct np_map streams;      /* stream key -> capture id */
    struct np_map events;       /* event -> capture id it was recorded in */
    struct np_map graphs;       /* CUgraph -> struct np_graph_nodes * */
    struct np_map execs;        /* CUgraphExec -> struct np_graph_nodes * */
    struct np_map unseen_execs; /* CUgraphExec instantiated from a graph not seen captured */
    struct np_map stacks;       /* hash of detailed text -> struct np_graph_stack * chain */
    struct np_map lists;        /* id -> every struct np_graph_nodes alive (outputs hold some) */
    /* CUPTI's node identity (with the CUPTI library; node refs: list id and
     * index, which stay valid while the list lives): */
    struct np_map open_nodes;    /* tid -> node ref of its last launch, when captured: the
                                  * CUPTI markers of that launch's API calls follow */
    struct np_map corr_nodes;    /* correlation id of a captured launch's API call -> node ref */
    struct np_map cupti_created; /* CUPTI node id -> correlation id of the call that made it */
    struct np_map cupti_clones;  /* CUPTI node id -> the CUPTI node id it is a copy of */
    uint64_t next_capture_id, next_nodes_id;
    uint64_t nodes_live, node_bytes; /* nodes held, and what they take (not their stacks) */
    uint64_t stack_bytes;            /* interned capture stacks */
    struct np_graph_stats stats;
};

void np_graphs_init(struct np_graphs *g);
void np_graphs_free(struct np_graphs *g);

/* A capture/event/graph call returned (what BPF sent). */
void np_graphs_on_call(struct np_graphs *g, const struct np_probe_def *def,
                       const struct np_graph_event *e);

/* The capture a launch of `def` on this stream by thread tid goes into (0:
 * none). For a _ptsz API, stream 0 is the thread's own stream. */
uint64_t np_graphs_capture_of(const struct np_graphs *g, uint64_t stream, uint32_t tid,
                              const struct np_probe_def *def);

/* Adds a captured launch to capture `capture`; 0, or -ENOMEM (also: over
 * the bound - the capture is then dropped, and counted). */
int np_graphs_add_node(struct np_graphs *g, uint64_t capture, const char *kernel,
                       const struct np_stack_texts *stack);

/* The nodes a replay of exec runs (a new reference the caller puts), or
 * NULL: the exec's graph was not seen captured (*why says why). */
struct np_graph_nodes *np_graphs_replay(struct np_graphs *g, uint64_t exec, const char **why);

/* ---- with the CUPTI library: which node each replayed GPU record ran ---- */

/* Thread tid's launch went into capture `capture` (0: it was not captured,
 * or was nested in another). Called for every outermost launch, after
 * np_graphs_add_node for a captured one. */
void np_graphs_thread_launch(struct np_graphs *g, uint32_t tid, uint64_t capture);
/* A CUPTI marker (its API call's correlation id, domain 1 driver, 2
 * runtime) on thread tid: true when it is an API call of the captured launch
 * the thread made last - it is then that node's, and no launch of the GPU
 * join's. One call per domain. */
bool np_graphs_marker(struct np_graphs *g, uint32_t tid, uint32_t correlation_id, uint32_t domain);
/* A node the CUPTI library announced (GRAPH_NODES). */
void np_graphs_cupti_node(struct np_graphs *g, const struct np_wire_graph_node *e);
/* The captured node whose copy CUPTI node id `node_id` is (following
 * clones back to the captured launch), or NULL. */
const struct np_graph_node *np_graphs_node_of(const struct np_graphs *g, uint64_t node_id);

/* What a graph launch waiting for its GPU records keeps (the GPU join's
 * `extra`): its stack, and the nodes its exec ran when launched (NULL: the
 * capture was not seen). */
struct np_graph_replay {
    struct np_graph_nodes *nodes; /* a reference */
    struct np_stack_texts *stack; /* a copy */
};
/* Takes a new reference to nodes (may be NULL); NULL on ENOMEM. */
struct np_graph_replay *np_graph_replay_new(struct np_graph_nodes *nodes,
                                            const struct np_stack_texts *stack);
void np_graph_replay_free(void *replay);

/* Ties each GPU record of a replay to the captured node that ran it: by
 * CUPTI's node id where the library announced the node (g may be NULL: the
 * process is gone), else by kernel name in capture order (records in the
 * order they started; a name matches the node's kernel as it is, or
 * demangled). node[i] is NULL and by[i] NULL for a record tied to none.
 * Counts the outcome in g's stats. */
void np_graphs_attribute(struct np_graphs *g, const struct np_graph_replay *r,
                         struct np_gpu_record *const *records, uint32_t n,
                         const struct np_graph_node **node, const char **by);

void np_graph_nodes_ref(struct np_graph_nodes *n);
/* Drops a reference; the last one frees the list (and its stacks' refs). */
void np_graph_nodes_put(struct np_graph_nodes *n);

/* The stack a replayed node is counted under: the replay's stack (ending
 * in the graph launch API), NP_FRAME_GRAPH_CAPTURE, then the capture's
 * frames from where they leave the replay's common prefix (all of them if
 * none is shared). out's texts are reset first. */
void np_graph_compose(const struct np_stack_texts *replay, const struct np_graph_node *node,
                      struct np_stack_texts *out);

#endif
