/* load.h - a recording as `ncclprobe report` needs it, read through
 * src/recording/ (strictly: a malformed line is an error): the outermost
 * launches of launches.jsonl with their stacks, kernel names, GPU records
 * and NCCL ops, the GPU records no launch claimed (gpu_unmatched.jsonl),
 * and whether summary.json says the per-launch files were cut. Every text
 * is interned in the recording, so equal frames and names are equal
 * pointers. */
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
    struct np_rec_meta meta;
};

void np_rep_input_free(struct np_rep_input *in);

/* Reads dir into in: 0, -EBADMSG (malformed input, said with file and
 * line), -ENOENT (a required file missing, said) or another -errno (said). */
int np_rep_input_load(struct np_rep_input *in, const char *dir);

#endif
