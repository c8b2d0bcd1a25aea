/* json.c - `ncclprobe report --json`: what was found as one JSON
 * object (docs/report.md). Written by hand rather than through cJSON, whose
 * doubles would round nanosecond times past 2^53; names go through
 * np_json_string, so invalid UTF-8 in a target's names still gives valid JSON. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "lib/json.h"
#include "report/view.h"

static void key(struct np_str *s, const char *name) {
    np_json_string(s, name);
    np_str_append(s, ":");
}

static void str_or_null(struct np_str *s, const char *name, const char *value, bool more) {
    key(s, name);
    if (value)
        np_json_string(s, value);
    else
        np_str_append(s, "null");
    np_str_append(s, more ? "," : "");
}

static void u64_or_null(struct np_str *s, const char *name, bool present, uint64_t value,
                        bool more) {
    key(s, name);
    if (present)
        np_str_appendf(s, "%" PRIu64, value);
    else
        np_str_append(s, "null");
    np_str_append(s, more ? "," : "");
}

static void filters(struct np_str *s, const struct np_report_view *v) {
    const struct np_report_options *o = v->opt;
    np_str_append(s, "\"filters\":{");
    str_or_null(s, "kernel", o->kernel, true);
    np_str_appendf(s, "\"nccl\":%s,", o->kernel ? "false" : "true");
    str_or_null(s, "op", o->op, true);
    str_or_null(s, "function", o->function, true);
    u64_or_null(s, "index", o->function != NULL, v->occurrence_index, true);
    u64_or_null(s, "start_ts", o->has_start, o->start_ts, true);
    u64_or_null(s, "duration", o->has_duration, o->duration, true);
    np_str_appendf(s, "\"depth\":%u,", o->depth);
    u64_or_null(s, "top", o->top != 0, o->top, false);
    np_str_append(s, "},");
}

static void occurrence(struct np_str *s, size_t index, const struct np_occurrence *c) {
    np_str_appendf(s, "{\"index\":%zu,", index);
    str_or_null(s, "frame", c->frame, true);
    np_str_appendf(s,
                   "\"pid\":%u,\"tid\":%u,\"start_ns\":%" PRIu64 ",\"end_ns\":%" PRIu64
                   ",\"duration_ns\":%" PRIu64 ",\"launches\":%zu}",
                   c->pid, c->tid, c->start_ns, c->end_ns, c->end_ns - c->start_ns, c->launches);
}

static void window(struct np_str *s, const struct np_report_view *v) {
    const struct np_report_filter *f = v->filter;
    if (!v->windowed) {
        np_str_append(s, "\"window\":null,");
        return;
    }
    np_str_appendf(s, "\"window\":{\"start_ns\":%" PRIu64 ",", f->start_ns);
    u64_or_null(s, "end_ns", f->end_ns != UINT64_MAX, f->end_ns, true);
    key(s, "occurrence");
    if (v->occurrence)
        occurrence(s, v->occurrence_index, v->occurrence);
    else
        np_str_append(s, "null");
    np_str_append(s, "},");
}

static void counts(struct np_str *s, const struct np_counts *c) {
    np_str_append(s, "{");
    for (size_t i = 0; i < c->n; i++) {
        if (i)
            np_str_append(s, ",");
        key(s, c->items[i].name);
        np_str_appendf(s, "%" PRIu64, c->items[i].count);
    }
    np_str_append(s, "}");
}

static void stacks(struct np_str *s, const struct np_report *rep, size_t top) {
    size_t shown = top && top < rep->n ? top : rep->n;
    np_str_append(s, "[");
    for (size_t i = 0; i < shown; i++) {
        const struct np_report_stack *g = &rep->stacks[i];
        np_str_appendf(s, "%s{\"count\":%" PRIu64 ",\"truncated\":%s,\"frames\":[", i ? "," : "",
                       g->kernels.total, g->cut ? "true" : "false");
        for (uint32_t k = 0; k < g->nframes; k++) {
            if (k)
                np_str_append(s, ",");
            np_json_string(s, g->frames[k]);
        }
        np_str_append(s, "],\"kernels\":");
        counts(s, &g->kernels);
        np_str_append(s, "}");
    }
    np_str_append(s, "]");
}

static void diagnostic(struct np_str *s, const struct np_report_view *v, enum np_report_diag d,
                       struct np_str *message) {
    np_str_reset(message);
    np_report_diag_message(message, v, d);
    np_str_append(s, "{");
    str_or_null(s, "kind", np_report_diag_kind(d), true);
    str_or_null(s, "message", np_str_cstr(message), false);
    if (d == NP_DIAG_GRAPH_REPLAYS) {
        np_str_appendf(s, ",\"count\":%" PRIu64 ",\"stacks\":", v->replays->total);
        stacks(s, v->replays, 0);
    } else if (d == NP_DIAG_UNMATCHED || d == NP_DIAG_NCCL_SEEN) {
        const struct np_counts *c = d == NP_DIAG_UNMATCHED ? v->unmatched : v->seen;
        np_str_appendf(s, ",\"count\":%" PRIu64 ",\"kernels\":", c->total);
        counts(s, c);
    } else if (d == NP_DIAG_GRAPH_UNPLACED) {
        np_str_appendf(s, ",\"count\":%" PRIu64 ",\"kernels\":", v->rep->unplaced_launches);
        counts(s, &v->rep->unplaced);
    } else if (d == NP_DIAG_GRAPH_UNSEEN) {
        np_str_appendf(s, ",\"count\":%" PRIu64 ",\"reasons\":", v->unseen->total);
        counts(s, v->unseen);
    }
    np_str_append(s, "}");
}

static int write_out(FILE *f, struct np_str *s) {
    int err = s->failed ? -ENOMEM : 0;
    if (!err && (fwrite(s->buf, 1, s->len, f) != s->len || fflush(f) != 0))
        err = -EIO;
    np_str_free(s);
    return err;
}

int np_report_print_json(FILE *f, const struct np_report_view *v) {
    enum np_report_diag diags[NP_DIAG_MAX];
    size_t ndiags = np_report_diagnostics(v, diags);
    struct np_str s, message;
    np_str_init(&s);
    np_str_init(&message);
    np_str_append(&s, "{");
    str_or_null(&s, "directory", v->opt->dir, true);
    filters(&s, v);
    window(&s, v);
    np_str_appendf(&s, "\"total\":%" PRIu64 ",\"stack_count\":%zu,\"stacks\":", v->rep->total,
                   v->rep->n);
    stacks(&s, v->rep, v->opt->top);
    np_str_append(&s, ",\"diagnostics\":[");
    for (size_t i = 0; i < ndiags; i++) {
        np_str_append(&s, i ? "," : "");
        diagnostic(&s, v, diags[i], &message);
    }
    np_str_append(&s, "]}\n");
    s.failed |= message.failed;
    np_str_free(&message);
    return write_out(f, &s);
}

int np_report_print_occurrences_json(FILE *f, const char *name, const struct np_occurrences *o) {
    struct np_str s;
    np_str_init(&s);
    np_str_append(&s, "{");
    str_or_null(&s, "function", name, true);
    np_str_append(&s, "\"occurrences\":[");
    for (size_t i = 0; i < o->n; i++) {
        np_str_append(&s, i ? "," : "");
        occurrence(&s, i, &o->items[i]);
    }
    np_str_append(&s, "]}\n");
    return write_out(f, &s);
}
