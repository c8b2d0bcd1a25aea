/* run.c - one run of `ncclprobe report` (run.h): the recording (load.c),
 * the time window of --start-ts, --duration and --function (occurrence.c),
 * the groups (report.c), the diagnostics and the output (text.c, json.c)
 * to stdout or -o FILE. */
#include "report/run.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "report/load.h"

/* ---- the window --------------------------------------------------------------------- */

static uint64_t first_launch_ts(const struct np_rep_input *in) {
    uint64_t first = UINT64_MAX;
    for (size_t i = 0; i < in->nlaunches; i++) {
        if (in->launches[i].ts_ns < first)
            first = in->launches[i].ts_ns;
    }
    return in->nlaunches ? first : 0;
}

static void time_window(const struct np_report_options *opt, const struct np_rep_input *in,
                        struct np_report_filter *f) {
    f->start_ns = opt->has_start ? opt->start_ts : 0;
    f->end_ns = UINT64_MAX;
    if (!opt->has_duration)
        return;
    if (!opt->has_start)
        f->start_ns = first_launch_ts(in);
    f->end_ns = f->start_ns > UINT64_MAX - opt->duration ? UINT64_MAX : f->start_ns + opt->duration;
}

/* Different functions NAME matched: two of them, for the message. */
static const char *other_function(const struct np_occurrences *occ) {
    for (size_t i = 1; i < occ->n; i++) {
        if (strcmp(occ->items[i].frame, occ->items[0].frame) != 0)
            return occ->items[i].frame;
    }
    return "";
}

static void list_occurrences(const struct np_report_options *opt,
                             const struct np_occurrences *occ) {
    if (opt->json)
        np_report_print_occurrences_json(stdout, opt->function, occ);
    else
        np_report_print_occurrences_text(stdout, opt->function, occ);
}

/* The occurrence --function/--index name: 0, or -errno (said; the list of
 * occurrences printed on stdout when the choice is ambiguous or out of range). */
static int choose_occurrence(const struct np_rep_input *in, const struct np_report_options *opt,
                             struct np_occurrences *occ) {
    int err = np_find_occurrences(in, opt->function, occ);
    if (err) {
        np_err("report: %s", strerror(-err));
        return err;
    }
    if (occ->n == 0) {
        np_err("no launch stack has a frame named '%s'", opt->function);
        return -ENOENT;
    }
    if (occ->ambiguous && !opt->has_index) {
        list_occurrences(opt, occ);
        np_err("'%s' names frames of different functions ('%s', '%s', ...): choose one of the "
               "occurrences listed with --index I, or name the function fully with --function",
               opt->function, occ->items[0].frame, other_function(occ));
        return -EINVAL;
    }
    if (opt->index >= occ->n) {
        list_occurrences(opt, occ);
        np_err("--index %zu is out of range: '%s' has %zu occurrence%s (--index 0 to %zu, "
               "listed above)",
               opt->index, opt->function, occ->n, occ->n == 1 ? "" : "s", occ->n - 1);
        return -ERANGE;
    }
    return 0;
}

static void intersect(struct np_report_filter *f, const struct np_occurrence *c) {
    if (c->start_ns > f->start_ns)
        f->start_ns = c->start_ns;
    if (c->end_ns < f->end_ns)
        f->end_ns = c->end_ns;
    if (f->end_ns < f->start_ns)
        f->end_ns = f->start_ns;
}

/* ---- the results -------------------------------------------------------------------------- */

struct results {
    struct np_report rep, replays;
    struct np_counts unmatched, seen, unseen;
    struct np_occurrences occ;
};

static void results_init(struct results *r) {
    memset(r, 0, sizeof(*r));
    np_report_init(&r->rep);
    np_report_init(&r->replays);
    np_counts_init(&r->unmatched);
    np_counts_init(&r->seen);
    np_counts_init(&r->unseen);
}

static void results_free(struct results *r) {
    np_counts_free(&r->unseen);
    np_counts_free(&r->seen);
    np_counts_free(&r->unmatched);
    np_report_free(&r->replays);
    np_report_free(&r->rep);
    np_occurrences_free(&r->occ);
}

static int collect(const struct np_rep_input *in, const struct np_report_filter *f,
                   struct results *r) {
    int err = np_report_collect(&r->rep, in, f, NP_REPORT_LAUNCHES);
    if (!err && r->rep.total == 0)
        err = np_report_collect(&r->replays, in, f, NP_REPORT_GRAPH_REPLAYS);
    if (!err && r->rep.total == 0)
        err = np_report_unmatched(in, f, &r->unmatched);
    if (!err && r->rep.total == 0)
        err = np_report_nccl_seen(in, &r->seen);
    if (!err)
        err = np_report_graph_unseen(in, f, &r->unseen);
    if (err)
        np_err("report: %s", strerror(-err));
    return err;
}

static int print(const struct np_report_view *v) {
    const char *path = v->opt->output;
    FILE *f = path ? fopen(path, "we") : stdout;
    if (!f) {
        int err = -errno;
        np_err("cannot write %s: %s", path, strerror(-err));
        return err;
    }
    int err = v->opt->json ? np_report_print_json(f, v) : np_report_print_text(f, v);
    if (path && fclose(f) != 0 && !err)
        err = -EIO;
    if (err)
        np_err("cannot write %s: %s", path ? path : "the output", strerror(-err));
    return err;
}

/* summary.json says the per-launch files end early (a full disk): the
 * report covers what they hold. */
static void warn_if_cut(const struct np_report_options *opt, const struct np_rec_meta *m) {
    if (m->files_known && !m->per_launch_complete)
        np_warn("%s: the per-launch files were cut (%" PRIu64 " records not written%s%s): the "
                "report covers the launches written before the cut",
                opt->dir, m->records_cut, *m->cut_reason ? ": " : "", m->cut_reason);
}

static int report(const struct np_report_options *opt, const struct np_rep_input *in,
                  struct results *r) {
    struct np_report_filter f = {.kernel = opt->kernel, .op = opt->op, .depth = opt->depth};
    struct np_report_view v = {.opt = opt, .filter = &f, .rep = &r->rep};
    time_window(opt, in, &f);
    v.windowed = opt->has_start || opt->has_duration || opt->function;
    if (opt->function) {
        int err = choose_occurrence(in, opt, &r->occ);
        if (err)
            return err;
        v.occurrence = &r->occ.items[opt->index];
        v.occurrence_index = opt->index;
        intersect(&f, v.occurrence);
    }
    int err = collect(in, &f, r);
    if (err)
        return err;
    v.replays = &r->replays;
    v.unmatched = &r->unmatched;
    v.seen = &r->seen;
    v.unseen = &r->unseen;
    return print(&v);
}

int np_report_run(const struct np_report_options *opt) {
    struct np_rep_input in;
    struct results r;
    results_init(&r);
    int err = np_rep_input_load(&in, opt->dir);
    if (!err) {
        warn_if_cut(opt, &in.meta);
        err = report(opt, &in, &r);
    }
    results_free(&r);
    np_rep_input_free(&in);
    return err;
}
