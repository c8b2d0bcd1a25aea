/* report_print.c - the text output of `ncclprobe report` and what the text
 * and JSON outputs share: the description of what was matched and the
 * diagnostics' sentences (report_print.h). JSON is report_json.c's. */
#include "cli/report_print.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define KERNEL_LEAF "[GPU_Kernel]"

static const char *plural(uint64_t n) {
    return n == 1 ? "" : "s";
}

/* "NCCL kernels", "kernel containing "gemm"". */
static void kernels_noun(struct np_str *s, const struct np_report_view *v, uint64_t n) {
    if (v->opt->kernel)
        np_str_appendf(s, "kernel%s containing \"%s\"", plural(n), v->opt->kernel);
    else
        np_str_appendf(s, "NCCL kernel%s", plural(n));
}

static const char *where(const struct np_report_view *v) {
    return v->windowed ? "in the window" : "in the recording";
}

static void np_report_describe(struct np_str *s, const struct np_report_view *v) {
    const struct np_report_filter *f = v->filter;
    kernels_noun(s, v, 2);
    if (v->opt->op)
        np_str_appendf(s, ", op %s", v->opt->op);
    if (!v->windowed)
        return;
    np_str_appendf(s, ", window [%" PRIu64 ", ", f->start_ns);
    if (f->end_ns == UINT64_MAX)
        np_str_append(s, "end) ns");
    else
        np_str_appendf(s, "%" PRIu64 ") ns", f->end_ns);
    if (v->occurrence)
        np_str_appendf(s, " (--function %s --index %zu: %s, pid %u tid %u)", v->opt->function,
                       v->occurrence_index, v->occurrence->frame, v->occurrence->pid,
                       v->occurrence->tid);
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

void np_report_diag_message(struct np_str *s, const struct np_report_view *v,
                            enum np_report_diag d) {
    uint64_t n = 0;
    switch (d) {
    case NP_DIAG_NO_MATCH:
        np_str_append(s, "No launch ran ");
        kernels_noun(s, v, 2);
        if (v->opt->op)
            np_str_appendf(s, " with op %s", v->opt->op);
        np_str_appendf(s, " %s.", where(v));
        return;
    case NP_DIAG_GRAPH_REPLAYS:
        n = v->replays->total;
        np_str_appendf(s, "%" PRIu64 " ", n);
        kernels_noun(s, v, n);
        np_str_appendf(s,
                       " ran %s from CUDA graph replays%s; their launch stacks are the graph "
                       "launches:",
                       where(v),
                       v->opt->op ? " (the ops of a replay are not known: --op cannot select them)"
                                  : "");
        return;
    case NP_DIAG_UNMATCHED:
        n = v->unmatched->total;
        np_str_appendf(s, "%" PRIu64 " ", n);
        kernels_noun(s, v, n);
        np_str_appendf(s,
                       " ran %s without any probed launch (gpu_unmatched.jsonl): from a CUDA "
                       "graph captured before ncclprobe attached, or launched by a path it does "
                       "not probe:",
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

/* ---- text ------------------------------------------------------------------- */

static void print_stack(FILE *f, const struct np_report_stack *s) {
    if (s->cut)
        fputs("  ...\n", f);
    for (uint32_t i = 0; i < s->nframes; i++)
        fprintf(f, "  %s\n", s->frames[i]);
    for (size_t i = 0; i < s->kernels.n; i++) {
        const struct np_count *k = &s->kernels.items[i];
        if (s->kernels.n == 1)
            fprintf(f, "  " KERNEL_LEAF "%s\n", k->name);
        else
            fprintf(f, "  " KERNEL_LEAF "%s (%" PRIu64 ")\n", k->name, k->count);
    }
    fprintf(f, "Appeared %" PRIu64 " times\n\n", s->kernels.total);
}

static void print_stacks(FILE *f, const struct np_report *rep, size_t top) {
    size_t shown = top && top < rep->n ? top : rep->n;
    for (size_t i = 0; i < shown; i++)
        print_stack(f, &rep->stacks[i]);
}

static void print_names(FILE *f, const struct np_counts *c) {
    for (size_t i = 0; i < c->n; i++)
        fprintf(f, "  %s (%" PRIu64 ")\n", c->items[i].name, c->items[i].count);
    fputc('\n', f);
}

static void print_diagnostics(FILE *f, const struct np_report_view *v, struct np_str *line) {
    enum np_report_diag diags[NP_DIAG_MAX];
    size_t n = np_report_diagnostics(v, diags);
    for (size_t i = 0; i < n; i++) {
        np_str_reset(line);
        np_report_diag_message(line, v, diags[i]);
        fprintf(f, "%s\n", np_str_cstr(line));
        if (diags[i] == NP_DIAG_GRAPH_REPLAYS) {
            fputc('\n', f);
            print_stacks(f, v->replays, 0);
        } else if (diags[i] == NP_DIAG_UNMATCHED) {
            print_names(f, v->unmatched);
        } else if (diags[i] == NP_DIAG_NCCL_SEEN) {
            print_names(f, v->seen);
        }
    }
}

int np_report_print_text(FILE *f, const struct np_report_view *v) {
    const struct np_report *rep = v->rep;
    struct np_str line;
    np_str_init(&line);
    np_str_append(&line, "Matched ");
    np_report_describe(&line, v);
    np_str_appendf(&line, ": %" PRIu64 " kernel%s", rep->total, plural(rep->total));
    if (rep->total)
        np_str_appendf(&line, " in %zu stack%s", rep->n, plural(rep->n));
    if (v->opt->top && v->opt->top < rep->n)
        np_str_appendf(&line, " (top %zu shown)", v->opt->top);
    fprintf(f, "%s\n\n", np_str_cstr(&line));
    print_stacks(f, rep, v->opt->top);
    print_diagnostics(f, v, &line);
    bool failed = line.failed;
    np_str_free(&line);
    if (failed)
        return -ENOMEM;
    return fflush(f) == 0 && !ferror(f) ? 0 : -EIO;
}

/* ---- --function occurrences ------------------------------------------------------- */

int np_report_print_occurrences(FILE *f, const char *name, const struct np_occurrences *o,
                                bool json) {
    if (json)
        return np_report_print_occurrences_json(f, name, o);
    fprintf(f, "Occurrences of %s:\n", name);
    fprintf(f, "  %5s  %-8s %-8s %-20s %-14s %-9s %s\n", "index", "pid", "tid", "start_ns",
            "duration_ns", "launches", "frame");
    for (size_t i = 0; i < o->n; i++) {
        const struct np_occurrence *c = &o->items[i];
        fprintf(f, "  %5zu  %-8u %-8u %-20" PRIu64 " %-14" PRIu64 " %-9zu %s\n", i, c->pid, c->tid,
                c->start_ns, c->end_ns - c->start_ns, c->launches, c->frame);
    }
    return fflush(f) == 0 && !ferror(f) ? 0 : -EIO;
}
