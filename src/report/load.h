/* load.h - a recording as `ncclprobe report` needs it, read through
 * src/recording/ (strictly: a malformed line is an error): the outermost
 * launches of launches.jsonl with their stacks, kernel names, GPU records
 * (a graph replay's tied to the stack that captured them) and NCCL ops, the
 * GPU records no launch claimed (gpu_unmatched.jsonl), the kernels graph
 * replays without GPU records ran (graph_replays.jsonl, grouped by the
 * process and stack that replayed them), and whether summary.json says the
 * per-launch files were cut. Every text is interned in the recording, so
 * equal frames and names are equal pointers. */
#ifndef NP_REPORT_LOAD_H
#define NP_REPORT_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recording/recording.h"

struct np_rep_gpu {
    const char *name; /* kernels only, else NULL */
    uint64_t start_ns, end_ns;
    uint64_t graph_id; /* != 0: run by a CUDA graph replay */
    uint32_t capture;  /* tied to the launch that captured it: that stack's index + 1; 0: not */
    enum np_rec_gpu_type type;
};

struct np_rep_launch {
    uint64_t ts_ns;
    uint32_t pid, tid;
    const char *kernel;            /* the CPU-side name */
    uint32_t stack;                /* index into np_rep_input.stacks */
    uint32_t ngpu, nops, nkernels; /* nkernels: GPU records that are kernels */
    size_t gpu;                    /* first of its records in np_rep_input.gpu */
    size_t ops;                    /* first of its op names in np_rep_input.ops */
    uint64_t gpu_end_ns;           /* latest end of its GPU records, 0 when none */
    long line;
    bool nccl; /* has an "nccl" object */
    /* A graph launch: without GPU records, its kernels are graph_replays.jsonl's
     * (graph_nodes != 0; replay_group: its group's index + 1, 0 when it has
     * none); graph_unknown: why its capture was not seen, else NULL. */
    uint64_t graph_nodes;
    uint32_t replay_group;
    const char *graph_unknown;
    /* The stacks that captured what it ran (its records' capture stacks, or
     * its replay group's when that can be told per launch), distinct: in
     * np_rep_input.captures from `captures`. */
    size_t captures;
    uint32_t ncaptures;
};

/* A line of graph_replays.jsonl: kernel ran `count` times under stack
 * (replay;API;[graph capture];capture) in the replays of its group. */
struct np_rep_replay {
    const char *kernel;
    uint32_t stack, group; /* stack: an index into np_rep_input.stacks */
    uint64_t count;
    long line;
};

/* The graph launches of one process from one stack (replay_stack) whose
 * kernels graph_replays.jsonl counts together. per_launch: each of them ran
 * the same kernels (the same graph_nodes, each line's count a multiple of
 * `launches`), so a launch's share is known; otherwise only the whole. */
struct np_rep_replay_group {
    uint32_t pid, replay_stack;
    uint64_t launches, graph_nodes;
    bool per_launch;
    size_t captures; /* per_launch: the distinct stacks of its lines, in np_rep_input.captures */
    uint32_t ncaptures;
};

struct np_rep_input {
    struct np_recording rec;
    const struct np_rec_stack *stacks; /* rec's, once loaded */
    size_t nstacks;
    struct np_rep_launch *launches; /* outermost ones, in file order */
    size_t nlaunches, launches_cap;
    struct np_rep_gpu *gpu;
    size_t ngpu, gpu_cap;
    const char **ops;
    size_t nops, ops_cap;
    struct np_rep_gpu *unmatched; /* gpu_unmatched.jsonl */
    size_t nunmatched, unmatched_cap;
    struct np_rep_replay *replays; /* graph_replays.jsonl */
    size_t nreplays, replays_cap;
    struct np_rep_replay_group *groups;
    size_t ngroups, groups_cap;
    uint32_t *captures; /* capture stacks of launches (np_rep_launch.captures) */
    size_t ncaptures, captures_cap;
    struct np_rec_meta meta;
};

void np_rep_input_free(struct np_rep_input *in);

/* Reads dir into in: 0, -EBADMSG (malformed input, said with file and
 * line), -ENOENT (a required file missing, said) or another -errno (said). */
int np_rep_input_load(struct np_rep_input *in, const char *dir);

#endif
