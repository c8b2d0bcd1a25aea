/* view.h - one run of `ncclprobe report` as its outputs see it: the options,
 * the filter they made, what matched, and what the diagnostics count; the
 * diagnostics as plain functions (which apply, their kind
 * and sentence, diagnostics.c) shared by the text (text.c) and JSON
 * (json.c) outputs, so neither output depends on the other. */
#ifndef NP_REPORT_VIEW_H
#define NP_REPORT_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lib/util.h"
#include "report/occurrence.h"
#include "report/report.h"

struct np_report_options {
    const char *dir, *kernel, *op, *function, *output;
    uint64_t start_ts, duration;
    size_t index, top; /* top 0: every stack */
    uint32_t depth;    /* 0: every frame */
    bool has_start, has_duration, has_index, json;
    bool flows; /* --flows: the NCCL flow totals instead (report/flows.h) */
};

struct np_report_view {
    const struct np_report_options *opt;
    const struct np_report_filter *filter;
    bool windowed;                          /* --start-ts, --duration or --function */
    const struct np_occurrence *occurrence; /* --function: the chosen one, else NULL */
    size_t occurrence_index;
    const struct np_report *rep;
    /* The diagnostics, counted when rep->total is 0: */
    const struct np_report *replays;   /* matching kernels of graph replays in the window */
    const struct np_counts *unmatched; /* ... of gpu_unmatched.jsonl in the window */
    const struct np_counts *seen;      /* NCCL-like kernels of the whole recording */
    /* ... and always: graph launches in the window whose capture was not
     * seen, by reason (rep->unplaced: those whose replays were not placed) */
    const struct np_counts *unseen;
};

/* The diagnostics, in the order they are printed: those of an empty result,
 * then those that apply whatever matched. */
enum np_report_diag {
    NP_DIAG_NO_MATCH,       /* why nothing matched */
    NP_DIAG_GRAPH_REPLAYS,  /* matching kernels ran from graph replays: their stacks */
    NP_DIAG_UNMATCHED,      /* ... without any probed launch */
    NP_DIAG_NCCL_SEEN,      /* neither: the NCCL-like kernels of the recording */
    NP_DIAG_NO_NCCL,        /* ... none at all */
    NP_DIAG_GRAPH_UNPLACED, /* graph replays in the window not placed: kernels not counted */
    NP_DIAG_GRAPH_UNSEEN,   /* graph launches in the window whose capture was not seen */
    NP_DIAG_MAX
};

/* Which diagnostics apply: how many in out. */
size_t np_report_diagnostics(const struct np_report_view *v, enum np_report_diag *out);
const char *np_report_diag_kind(enum np_report_diag d);
/* The diagnostic's sentence (appended to s). */
void np_report_diag_message(struct np_str *s, const struct np_report_view *v,
                            enum np_report_diag d);
/* "NCCL kernels", "kernel containing "gemm"" for a count of n (appended to s). */
void np_report_kernels_noun(struct np_str *s, const struct np_report_view *v, uint64_t n);

/* The outputs: 0, or -EIO when f could not be written (-ENOMEM). */
int np_report_print_text(FILE *f, const struct np_report_view *v);
int np_report_print_json(FILE *f, const struct np_report_view *v);

/* The occurrences of --function NAME, one a line, or as JSON. */
int np_report_print_occurrences_text(FILE *f, const char *name, const struct np_occurrences *o);
int np_report_print_occurrences_json(FILE *f, const char *name, const struct np_occurrences *o);

#endif
