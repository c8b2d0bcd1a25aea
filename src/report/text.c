/* text.c - the text output of `ncclprobe report` (view.h): a header saying
 * what was matched, the stacks root first with their kernel leaves and
 * "Appeared N times", the diagnostics of an empty result; and the list of
 * occurrences of an ambiguous --function. docs/report.md, "Text output". */
#include <errno.h>
#include <inttypes.h>

#include "ncclprobe/recording.h"
#include "report/view.h"

static const char *plural(uint64_t n) {
    return n == 1 ? "" : "s";
}

/* "NCCL kernels, op AllReduce, window [S, E) ns (--function ...)" */
static void describe(struct np_str *s, const struct np_report_view *v) {
    const struct np_report_filter *f = v->filter;
    np_report_kernels_noun(s, v, 2);
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

static void print_stack(FILE *f, const struct np_report_stack *s) {
    if (s->cut)
        fputs("  ...\n", f);
    for (uint32_t i = 0; i < s->nframes; i++)
        fprintf(f, "  %s\n", s->frames[i]);
    for (size_t i = 0; i < s->kernels.n; i++) {
        const struct np_count *k = &s->kernels.items[i];
        if (s->kernels.n == 1)
            fprintf(f, "  " NP_LEAF_KERNEL "%s\n", k->name);
        else
            fprintf(f, "  " NP_LEAF_KERNEL "%s (%" PRIu64 ")\n", k->name, k->count);
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
        } else if (diags[i] == NP_DIAG_GRAPH_UNPLACED) {
            print_names(f, &v->rep->unplaced);
        } else if (diags[i] == NP_DIAG_GRAPH_UNSEEN) {
            print_names(f, v->unseen);
        }
    }
}

static int flushed(FILE *f) {
    return fflush(f) == 0 && !ferror(f) ? 0 : -EIO;
}

int np_report_print_text(FILE *f, const struct np_report_view *v) {
    const struct np_report *rep = v->rep;
    struct np_str line;
    np_str_init(&line);
    np_str_append(&line, "Matched ");
    describe(&line, v);
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
    return failed ? -ENOMEM : flushed(f);
}

int np_report_print_occurrences_text(FILE *f, const char *name, const struct np_occurrences *o) {
    fprintf(f, "Occurrences of %s:\n", name);
    fprintf(f, "  %5s  %-8s %-8s %-20s %-14s %-9s %s\n", "index", "pid", "tid", "start_ns",
            "duration_ns", "launches", "frame");
    for (size_t i = 0; i < o->n; i++) {
        const struct np_occurrence *c = &o->items[i];
        fprintf(f, "  %5zu  %-8u %-8u %-20" PRIu64 " %-14" PRIu64 " %-9zu %s\n", i, c->pid, c->tid,
                c->start_ns, c->end_ns - c->start_ns, c->launches, c->frame);
    }
    return flushed(f);
}
