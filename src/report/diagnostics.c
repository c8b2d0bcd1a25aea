/* diagnostics.c - why a report found nothing (view.h): which diagnostics
 * apply, their kinds (the JSON "kind") and their sentences, written once
 * for the text and the JSON outputs. docs/report.md, "Nothing matched". */
#include <inttypes.h>

#include "ncclprobe/recording.h"
#include "report/view.h"

static const char *plural(uint64_t n) {
    return n == 1 ? "" : "s";
}

void np_report_kernels_noun(struct np_str *s, const struct np_report_view *v, uint64_t n) {
    if (v->opt->kernel)
        np_str_appendf(s, "kernel%s containing \"%s\"", plural(n), v->opt->kernel);
    else
        np_str_appendf(s, "NCCL kernel%s", plural(n));
}

static const char *where(const struct np_report_view *v) {
    return v->windowed ? "in the window" : "in the recording";
}

size_t np_report_diagnostics(const struct np_report_view *v, enum np_report_diag *out) {
    size_t n = 0;
    if (v->rep->total > 0)
        return 0;
    out[n++] = NP_DIAG_NO_MATCH;
    if (v->replays && v->replays->total > 0)
        out[n++] = NP_DIAG_GRAPH_REPLAYS;
    if (v->unmatched && v->unmatched->total > 0)
        out[n++] = NP_DIAG_UNMATCHED;
    if (n == 1)
        out[n++] = v->seen && v->seen->total > 0 ? NP_DIAG_NCCL_SEEN : NP_DIAG_NO_NCCL;
    return n;
}

const char *np_report_diag_kind(enum np_report_diag d) {
    static const char *const kinds[NP_DIAG_MAX] = {"no_match", "graph_replays", "unmatched",
                                                   "nccl_kernels_seen", "no_nccl_kernels"};
    return d < NP_DIAG_MAX ? kinds[d] : "";
}

/* "N NCCL kernels" */
static void counted_kernels(struct np_str *s, const struct np_report_view *v, uint64_t n) {
    np_str_appendf(s, "%" PRIu64 " ", n);
    np_report_kernels_noun(s, v, n);
}

void np_report_diag_message(struct np_str *s, const struct np_report_view *v,
                            enum np_report_diag d) {
    switch (d) {
    case NP_DIAG_NO_MATCH:
        np_str_append(s, "No launch ran ");
        np_report_kernels_noun(s, v, 2);
        if (v->opt->op)
            np_str_appendf(s, " with op %s", v->opt->op);
        np_str_appendf(s, " %s.", where(v));
        return;
    case NP_DIAG_GRAPH_REPLAYS:
        counted_kernels(s, v, v->replays->total);
        np_str_appendf(s,
                       " ran %s from CUDA graph replays%s; their launch stacks are the graph "
                       "launches:",
                       where(v),
                       v->opt->op ? " (the ops of a replay are not known: --op cannot select them)"
                                  : "");
        return;
    case NP_DIAG_UNMATCHED:
        counted_kernels(s, v, v->unmatched->total);
        np_str_appendf(s,
                       " ran %s without any probed launch (" NP_REC_GPU_UNMATCHED_JSONL
                       "): from a CUDA graph captured before ncclprobe attached, or launched by "
                       "a path it does not probe:",
                       where(v));
        return;
    case NP_DIAG_NCCL_SEEN:
        np_str_append(s, "NCCL-like kernels seen in the whole recording (names containing "
                         "\"nccl\", at any time, with any op):");
        return;
    default:
        np_str_append(s, "No NCCL-like kernel (name containing \"nccl\") was seen in the "
                         "recording; choose the kernels to report with --kernel SUBSTR.");
        return;
    }
}
