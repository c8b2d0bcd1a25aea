/* report.h - the computing half of `ncclprobe report`: which kernels of a
 * recording match the filters, grouped by the (cut) stack that launched
 * them - for a CUDA graph replay's kernel, the stack that captured it when
 * known - and sorted most frequent first; and what the diagnostics count
 * (graph replays, GPU work without a launch, NCCL-like kernels seen at all,
 * graph launches whose capture was not seen or whose replays cannot be
 * placed in the window). The outputs are text.c's and json.c's (view.h). */
#ifndef NP_REPORT_REPORT_H
#define NP_REPORT_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/hashmap.h"
#include "report/load.h"

struct np_report_filter {
    const char *kernel;        /* substring of the kernel name; NULL: NCCL kernels */
    const char *op;            /* an NCCL op type (any case); NULL: any launch */
    uint64_t start_ns, end_ns; /* [start, end): launches by ts_ns, GPU records by start_ns */
    uint32_t depth;            /* innermost frames kept per stack; 0: all */
};

/* Names (interned: compared as pointers) with counts, in the order first
 * added until np_counts_sort(). */
struct np_count {
    const char *name;
    uint64_t count;
    size_t order; /* position when added */
};

struct np_counts {
    struct np_count *items;
    size_t n, cap;
    struct np_map index; /* name pointer -> index + 1, once there are many */
    uint64_t total;
};

void np_counts_init(struct np_counts *c);
void np_counts_free(struct np_counts *c);
int np_counts_add(struct np_counts *c, const char *name, uint64_t n);
/* Most frequent first, ties in the order first added; no adding afterwards. */
void np_counts_sort(struct np_counts *c);

/* One group: the kept frames of a stack and the kernels counted under it. */
struct np_report_stack {
    const char *const *frames; /* root first, into the recording's stack */
    uint32_t nframes;
    bool cut; /* frames on the root side were left out (--depth) */
    uint64_t first_ts;
    long first_line;
    struct np_counts kernels; /* kernels.total: the group's count */
};

struct np_report {
    struct np_report_stack *stacks;
    size_t n, cap;
    uint64_t total;
    uint64_t captured; /* of total: kernels under the stack that captured them */
    /* Graph launches in the window whose replays graph_replays.jsonl counts
     * only over the whole recording (not placed), and the matching kernels
     * those replays ran in the whole recording (not counted). */
    uint64_t unplaced_launches;
    struct np_counts unplaced;
    struct np_map index; /* kept frames -> index + 1 */
    uint32_t *of_stack;  /* recording stack -> index + 1, while collecting */
};

enum np_report_source {
    NP_REPORT_LAUNCHES,      /* the kernels of matching launches */
    NP_REPORT_GRAPH_REPLAYS, /* the matching kernels of graph replays, by GPU start time */
};

void np_report_init(struct np_report *rep);
void np_report_free(struct np_report *rep);

/* Fills rep (fresh from init) and sorts it: 0 or -ENOMEM. */
int np_report_collect(struct np_report *rep, const struct np_rep_input *in,
                      const struct np_report_filter *f, enum np_report_source source);

/* Matching kernels of gpu_unmatched.jsonl that started in the window. */
int np_report_unmatched(const struct np_rep_input *in, const struct np_report_filter *f,
                        struct np_counts *out);

/* Every kernel name containing "nccl" (any case) in the recording: launches'
 * kernels (their GPU kernels, else their CPU-side name), graph_replays.jsonl
 * and gpu_unmatched. */
int np_report_nccl_seen(const struct np_rep_input *in, struct np_counts *out);

/* The graph launches in the window whose capture was not seen, by reason
 * (graph_unknown). */
int np_report_graph_unseen(const struct np_rep_input *in, const struct np_report_filter *f,
                           struct np_counts *out);

#endif
