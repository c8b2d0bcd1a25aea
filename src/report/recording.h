/* recording.h - a recording directory as `ncclprobe report` needs it: the
 * outermost launches of launches.jsonl with their stacks (stacks.jsonl),
 * kernel names, GPU records and NCCL ops, and the GPU records no launch
 * claimed (gpu_unmatched.jsonl). Every text is interned once, so equal
 * frames and names are equal pointers. */
#ifndef NP_REPORT_RECORDING_H
#define NP_REPORT_RECORDING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/hashmap.h"
#include "lib/strtab.h"

enum np_rep_gpu_type { NP_REP_KERNEL, NP_REP_MEMCPY, NP_REP_MEMSET, NP_REP_OTHER };

struct np_rep_gpu {
    const char *name; /* kernels only, else NULL */
    uint64_t start_ns, end_ns;
    uint64_t graph_id; /* != 0: run by a CUDA graph replay */
    enum np_rep_gpu_type type;
};

struct np_rep_stack {
    const char **frames; /* root first */
    uint32_t nframes;
    const char *nccl_frame; /* the last "[NCCL]..." frame, or NULL */
};

struct np_rep_launch {
    uint64_t ts_ns;
    uint32_t pid, tid;
    const char *kernel;            /* the CPU-side name */
    uint32_t stack;                /* index into np_recording.stacks */
    uint32_t ngpu, nops, nkernels; /* nkernels: GPU records that are kernels */
    size_t gpu;                    /* first of its records in np_recording.gpu */
    size_t ops;                    /* first of its op names in np_recording.ops */
    uint64_t gpu_end_ns;           /* latest end of its GPU records, 0 when none */
    long line;
    bool nccl; /* has an "nccl" object */
};

struct np_recording {
    const char *dir;
    struct np_strtab strings;
    struct np_rep_stack *stacks;
    size_t nstacks, stacks_cap;
    struct np_map stack_index;      /* stack_id -> index + 1 */
    struct np_rep_launch *launches; /* outermost ones, in file order */
    size_t nlaunches, launches_cap;
    size_t nested; /* lines skipped as nested */
    struct np_rep_gpu *gpu;
    size_t ngpu, gpu_cap;
    const char **ops;
    size_t nops, ops_cap;
    struct np_rep_gpu *unmatched; /* gpu_unmatched.jsonl */
    size_t nunmatched, unmatched_cap;
    bool has_unmatched_file;
};

void np_recording_init(struct np_recording *rec, const char *dir);
void np_recording_free(struct np_recording *rec);

/* Reads the directory: 0, -EBADMSG (malformed input, said with file and
 * line), -ENOENT (a required file missing, said) or another -errno (said). */
int np_recording_load(struct np_recording *rec);

#endif
