/* diagnostics.c - why a report found nothing, and what it could not count
 * (view.h): which diagnostics apply, their kinds (the JSON "kind") and their
 * sentences, written once for the text and the JSON outputs. docs/report.md,
 * "Diagnostics". */
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

/* Those of an empty result: why, and what ran instead. */
static size_t empty_result(const struct np_report_view *v, enum np_report_diag *out) {
    size_t n = 0;
    out[n++] = NP_DIAG_NO_MATCH;
    if (v->replays && v->replays->total > 0)
        out[n++] = NP_DIAG_GRAPH_REPLAYS;
    if (v->unmatched && v->unmatched->total > 0)
        out[n++] = NP_DIAG_UNMATCHED;
    if (n == 1)
        out[n++] = v->seen && v->seen->total > 0 ? NP_DIAG_NCCL_SEEN : NP_DIAG_NO_NCCL;
    return n;
}

size_t np_report_diagnostics(const struct np_report_view *v, enum np_report_diag *out) {
    size_t n = v->rep->total > 0 ? 0 : empty_result(v, out);
    if (v->rep->unplaced.total > 0)
        out[n++] = NP_DIAG_GRAPH_UNPLACED;
    if (v->unseen && v->unseen->total > 0)
        out[n++] = NP_DIAG_GRAPH_UNSEEN;
    return n;
}

const char *np_report_diag_kind(enum np_report_diag d) {
    static const char *const kinds[NP_DIAG_MAX] = {
        "no_match",        "graph_replays",          "unmatched",           "nccl_kernels_seen",
        "no_nccl_kernels", "graph_replays_unplaced", "graph_capture_unseen"};
    return d < NP_DIAG_MAX ? kinds[d] : "";
}

/* "N NCCL kernels" */
static void counted_kernels(struct np_str *s, const struct np_report_view *v, uint64_t n) {
    np_str_appendf(s, "%" PRIu64 " ", n);
    np_report_kernels_noun(s, v, n);
}

/* Where the stacks of graph replays' kernels come from: the graph launches,
 * the lines that captured them (rep->captured of rep->total), or both. */
static void replay_stacks(struct np_str *s, const struct np_report *rep) {
    if (rep->captured == 0)
        np_str_append(s, "their launch stacks are the graph launches:");
    else if (rep->captured == rep->total)
        np_str_append(
            s, "their stacks are the lines that captured them (below " NP_FRAME_GRAPH_CAPTURE "):");
    else
        np_str_append(s,
                      "their stacks are the lines that captured them (below " NP_FRAME_GRAPH_CAPTURE
                      ") or, where the capture was not seen, the graph launches:");
}

static void graph_replays(struct np_str *s, const struct np_report_view *v) {
    bool ops_unknown = v->opt->op && v->replays->captured < v->replays->total;
    counted_kernels(s, v, v->replays->total);
    np_str_appendf(s, " ran %s from CUDA graph replays%s; ", where(v),
                   ops_unknown ? " (the ops of a replay are not known: --op cannot select them)"
                               : "");
    replay_stacks(s, v->replays);
}

static void graph_unplaced(struct np_str *s, const struct np_report_view *v) {
    uint64_t n = v->rep->unplaced_launches;
    np_str_appendf(
        s,
        "%" PRIu64
        " CUDA graph launch%s %s replayed graphs whose kernels " NP_REC_GRAPH_REPLAYS_JSONL
        " counts only over the whole recording (different "
        "graphs replayed from one line, some outside the window, without GPU records): "
        "their ",
        n, n == 1 ? "" : "es", where(v));
    np_report_kernels_noun(s, v, 2);
    np_str_append(s, " are not counted; from those lines, in the whole recording:");
}

static void graph_unseen(struct np_str *s, const struct np_report_view *v) {
    uint64_t n = v->unseen->total;
    np_str_appendf(s,
                   "%" PRIu64 " CUDA graph launch%s %s replayed graphs whose capture ncclprobe did "
                   "not see: their kernels are under the graph launch's stack, not the lines that "
                   "captured them (without GPU records, each replay is one " NP_KERNEL_GRAPH_PREFIX
                   "...> kernel); why:",
                   n, n == 1 ? "" : "es", where(v));
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
        graph_replays(s, v);
        return;
    case NP_DIAG_GRAPH_UNPLACED:
        graph_unplaced(s, v);
        return;
    case NP_DIAG_GRAPH_UNSEEN:
        graph_unseen(s, v);
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
