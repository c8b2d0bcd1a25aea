/* output.h - the per-launch writers of a recording directory:
 *   stacks.ext.folded  one line per launch: "ts comm pid tid cpu frames;[GPU_Kernel]NAME"
 *   launches.folded    the same stacks aggregated: "frames;[GPU_Kernel]NAME COUNT"
 *   launches.jsonl     one JSON object per launch with its decoded arguments
 *   nccl.jsonl         one JSON object per NCCL API call
 *   stacks.jsonl       the stacks the two .jsonl files refer to by stack_id
 *   merged.folded      stacks with their GPU work as leaves: "frames;[GPU_Kernel]K COUNT"
 *   merged.gpu_ns.folded  the same weighted by GPU nanoseconds
 *   gpu_unmatched.jsonl   GPU records no launch claimed (once there is one)
 * The names are include/ncclprobe/recording.h's; the formats are documented
 * in docs/output-formats.md. */
#ifndef NP_OUTPUT_H
#define NP_OUTPUT_H

#include <stdint.h>

#include "correlate/gpu.h"
#include "ingest/launch.h"
#include "lib/hashmap.h"
#include "lib/util.h"

struct np_output;

struct np_output_totals {
    uint64_t launches;         /* outermost launches written */
    uint64_t captured;         /* launches into a graph being captured (they ran nothing) */
    uint64_t replayed_kernels; /* kernels counted for graph replays (in launches.folded) */
    uint64_t nested;           /* launches inside another launch (launches.jsonl only) */
    uint64_t nccl_ops;
    uint64_t write_errors;
    /* Set by np_output_finish: records in the per-launch files, records left
     * out of them because they were cut (a full disk), and why (-errno). */
    uint64_t records_written, records_cut;
    int cut_error;
};

/* Creates dir (and missing parents) and opens the files; -errno. */
int np_output_open(const char *dir, struct np_output **out);
/* The same with flags: NP_OUTPUT_AGGREGATE writes only the aggregated files
 * (launches.folded, merged*.folded) at close, no per-launch streams - the
 * daemon's always-on mode, whose memory and disk do not grow per launch. */
#define NP_OUTPUT_AGGREGATE 1u
int np_output_open_flags(const char *dir, unsigned flags, struct np_output **out);
/* A launch that waits in the GPU join for its records: what np_output_launch
 * renders for it (its launches.jsonl object with a slot for the kernel's
 * name, and its stacks.ext.folded prefix), for the join to keep. */
struct np_output_held {
    struct np_str json, ext;
};

/* stack: the launch's stack texts (ingest.h): folded for the folded
 * outputs; detailed (with inlined frames) and locations for stacks.jsonl
 * (stack_id refers to it). Returns the stack's id. With held, nothing is
 * written or counted yet: the launch is rendered into held, and the GPU join
 * hands it back to np_output_gpu_launch once its records are in (or not). */
struct np_stack_texts;
uint64_t np_output_launch(struct np_output *o, const struct np_launch *l,
                          const struct np_stack_texts *stack, const char *kernel,
                          struct np_output_held *held);
/* A graph launch's GPU records tied to the captured launches that made
 * their nodes (correlate/graphs.h, np_graphs_attribute). */
struct np_graph_node;
struct np_output_replay {
    const struct np_stack_texts *stack; /* the replay's */
    const struct np_graph_node **node;  /* per record: its captured node, or NULL */
    const char **by;                    /* per record: NP_CAPTURE_BY_*, or NULL */
};

/* A held launch, complete: written and counted under `kernel`, the name the
 * session settles on once its records are in (a handle made before we
 * attached gets its name late, from the CUPTI library), with its GPU work
 * as leaves of merged.folded. With replay (a graph launch), a record tied
 * to its capture goes under replay;API;[graph capture];capture frames
 * instead - in launches.folded as a kernel run (the graph launch itself is
 * not counted there then), merged.folded and merged.gpu_ns.folded - and its
 * launches.jsonl record names that stack (capture_stack_id). */
void np_output_gpu_launch(struct np_output *o, const struct np_gpu_launch *gl,
                          enum np_gpu_status status, const char *kernel,
                          const struct np_output_replay *replay);
/* GPU work no launch claimed: under "[no launch stack]" in merged.*. */
void np_output_gpu_unmatched(struct np_output *o, const struct np_gpu_record *r);
void np_output_nccl_op(struct np_output *o, const struct np_launch *l,
                       const struct np_stack_texts *stack);
/* Flushes everything written so far (stream files stay usable). */
void np_output_flush(struct np_output *o);
/* Ends the per-launch files and writes the aggregated ones (launches.folded,
 * merged*.folded) in the room reserved for them; the totals are final then,
 * for summary.json. Returns the first error. */
int np_output_finish(struct np_output *o);
/* np_output_finish if not done yet, then frees; returns the first error. */
int np_output_close(struct np_output *o);

const struct np_output_totals *np_output_totals(const struct np_output *o);
/* kernel name -> (uintptr_t) count */
const struct np_map *np_output_kernel_counts(const struct np_output *o);
const char *np_output_dir(const struct np_output *o);

/* Makes a comm safe for a space-separated line (exposed for tests). */
void np_output_safe_comm(char *out, size_t size, const char *comm);

/* A launch into a graph being captured: in launches.jsonl ("captured":
 * true) and its stack in stacks.jsonl, but never counted as GPU work. */
struct np_graph_nodes;
void np_output_captured(struct np_output *o, const struct np_launch *l,
                        const struct np_stack_texts *stack, const char *kernel);
/* A graph launch whose captured kernels are known: written like a launch
 * (launches.jsonl with graph_nodes), and each node counted once per replay
 * in launches.folded and merged.folded under the replay's stack, then
 * [graph capture] and the capture's frames. The counting is deferred: a
 * replay costs one hash update here, the nodes are expanded when the
 * output finishes (it holds a reference to nodes until then). */
void np_output_graph_replay(struct np_output *o, const struct np_launch *l,
                            const struct np_stack_texts *stack, const char *kernel,
                            struct np_graph_nodes *nodes);
/* A graph launch whose kernels are not known: written as one launch whose
 * launches.jsonl row says why (graph_unknown). */
uint64_t np_output_graph_unknown(struct np_output *o, const struct np_launch *l,
                                 const struct np_stack_texts *stack, const char *kernel,
                                 const char *why);

#endif
