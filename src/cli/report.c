/* report.c - `ncclprobe report [DIR]`: the command. Parses the options,
 * loads the recording (report/recording.c), turns --start-ts, --duration and
 * --function into one time window (report/occurrence.c), groups the matching
 * kernels by launch stack (report/report.c), counts the diagnostics of an
 * empty result and prints (report_print.c, report_json.c). docs/report.md. */
#include "cli/report.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/report_print.h"
#include "lib/util.h"
#include "report/occurrence.h"
#include "report/recording.h"
#include "report/report.h"

#define DEFAULT_DEPTH 12
#define MAX_DEPTH 100000

/* ---- options -------------------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: ncclprobe report [DIR] [options]\n"
            "\n"
            "Prints the call stacks that launched the matching kernels of a recording\n"
            "(DIR, written by ncclprobe record; default: the current directory), most\n"
            "frequent first, each followed by 'Appeared N times'.\n"
            "\n"
            "options:\n"
            "      --kernel SUBSTR    kernels whose name contains SUBSTR (default: NCCL kernels)\n"
            "      --op NAME          only NCCL launches of op NAME (AllReduce, Send, ...)\n"
            "      --start-ts NS      only launches at or after CLOCK_MONOTONIC time NS\n"
            "      --duration NS      ... and before start + NS (start: the first launch\n"
            "                         without --start-ts)\n"
            "      --function NAME    only launches during one call of the function NAME\n"
            "      --index I          which occurrence of --function NAME (default 0)\n"
            "      --depth N          keep the N innermost frames of a stack (default %d, 0: all)\n"
            "      --top N            only the N most frequent stacks\n"
            "  -o, --output FILE      write to FILE instead of stdout\n"
            "      --json             one JSON object\n"
            "  -h, --help             this text\n"
            "\n"
            "Exit codes: 0 done (also when nothing matched: the output says why),\n"
            "1 bad input or failure, 2 usage error.\n",
            DEFAULT_DEPTH);
}

static int parse_u64(const char *option, const char *text, uint64_t min, uint64_t max,
                     uint64_t *out) {
    if (np_parse_u64(text, min, max, out) < 0) {
        np_err("invalid %s '%s': expected a whole number from %llu to %llu", option, text,
               (unsigned long long)min, (unsigned long long)max);
        return -EINVAL;
    }
    return 0;
}

enum {
    OPT_KERNEL = 256,
    OPT_OP,
    OPT_START,
    OPT_DURATION,
    OPT_FUNCTION,
    OPT_INDEX,
    OPT_DEPTH,
    OPT_TOP,
    OPT_JSON
};

/* A numeric option: 0 or -EINVAL. */
static int take_number(int c, const char *arg, struct np_report_options *opt) {
    uint64_t v = 0;
    int err;
    switch (c) {
    case OPT_START:
        opt->has_start = true;
        return parse_u64("--start-ts", arg, 0, UINT64_MAX, &opt->start_ts);
    case OPT_DURATION:
        opt->has_duration = true;
        return parse_u64("--duration", arg, 1, UINT64_MAX, &opt->duration);
    case OPT_INDEX:
        opt->has_index = true;
        err = parse_u64("--index", arg, 0, SIZE_MAX, &v);
        opt->index = (size_t)v;
        return err;
    case OPT_DEPTH:
        err = parse_u64("--depth", arg, 0, MAX_DEPTH, &v);
        opt->depth = (uint32_t)v;
        return err;
    default: /* OPT_TOP */
        err = parse_u64("--top", arg, 1, SIZE_MAX, &v);
        opt->top = (size_t)v;
        return err;
    }
}

/* One option: 0, 1 after --help, -EINVAL. */
static int take_option(int c, const char *arg, struct np_report_options *opt) {
    switch (c) {
    case OPT_KERNEL:
        opt->kernel = arg;
        return 0;
    case OPT_OP:
        opt->op = arg;
        return 0;
    case OPT_FUNCTION:
        opt->function = arg;
        return 0;
    case 'o':
        opt->output = arg;
        return 0;
    case OPT_JSON:
        opt->json = true;
        return 0;
    case OPT_START:
    case OPT_DURATION:
    case OPT_INDEX:
    case OPT_DEPTH:
    case OPT_TOP:
        return take_number(c, arg, opt);
    case 'h':
        usage(stdout);
        return 1;
    default:
        return -EINVAL;
    }
}

static int check_options(struct np_report_options *opt, int argc, char **argv) {
    struct stat st;
    if (optind < argc)
        opt->dir = argv[optind++];
    if (optind < argc) {
        np_err("unexpected argument '%s' (one recording directory at most)", argv[optind]);
        return -EINVAL;
    }
    if (opt->has_index && !opt->function) {
        np_err("--index needs --function");
        return -EINVAL;
    }
    if (opt->kernel && !*opt->kernel) {
        np_err("--kernel needs a non-empty SUBSTR");
        return -EINVAL;
    }
    if (stat(opt->dir, &st) != 0) {
        np_err("cannot use %s: %s", opt->dir, strerror(errno));
        return -EINVAL;
    }
    if (!S_ISDIR(st.st_mode)) {
        np_err("%s is not a directory (give the directory ncclprobe record wrote)", opt->dir);
        return -EINVAL;
    }
    return 0;
}

/* 0, 1 after --help, -EINVAL on a bad command line. */
static int parse_options(int argc, char **argv, struct np_report_options *opt) {
    static const struct option longopts[] = {
        {"kernel", required_argument, NULL, OPT_KERNEL},
        {"op", required_argument, NULL, OPT_OP},
        {"start-ts", required_argument, NULL, OPT_START},
        {"duration", required_argument, NULL, OPT_DURATION},
        {"function", required_argument, NULL, OPT_FUNCTION},
        {"index", required_argument, NULL, OPT_INDEX},
        {"depth", required_argument, NULL, OPT_DEPTH},
        {"top", required_argument, NULL, OPT_TOP},
        {"output", required_argument, NULL, 'o'},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    int c;

    *opt = (struct np_report_options){.dir = ".", .depth = DEFAULT_DEPTH};
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        int r = take_option(c, optarg, opt);
        if (r != 0)
            return r;
    }
    return check_options(opt, argc, argv);
}

/* ---- the window --------------------------------------------------------------------- */

static uint64_t first_launch_ts(const struct np_recording *rec) {
    uint64_t first = UINT64_MAX;
    for (size_t i = 0; i < rec->nlaunches; i++) {
        if (rec->launches[i].ts_ns < first)
            first = rec->launches[i].ts_ns;
    }
    return rec->nlaunches ? first : 0;
}

static void time_window(const struct np_report_options *opt, const struct np_recording *rec,
                        struct np_report_filter *f) {
    f->start_ns = opt->has_start ? opt->start_ts : 0;
    f->end_ns = UINT64_MAX;
    if (!opt->has_duration)
        return;
    if (!opt->has_start)
        f->start_ns = first_launch_ts(rec);
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

/* The occurrence --function/--index name: 0, or -errno (said; the list of
 * occurrences printed on stdout when the choice is ambiguous or out of range). */
static int choose_occurrence(const struct np_recording *rec, const struct np_report_options *opt,
                             struct np_occurrences *occ) {
    int err = np_find_occurrences(rec, opt->function, occ);
    if (err) {
        np_err("report: %s", strerror(-err));
        return err;
    }
    if (occ->n == 0) {
        np_err("no launch stack has a frame named '%s'", opt->function);
        return -ENOENT;
    }
    if (occ->ambiguous && !opt->has_index) {
        np_report_print_occurrences(stdout, opt->function, occ, opt->json);
        np_err("'%s' names frames of different functions ('%s', '%s', ...): choose one of the "
               "occurrences listed with --index I, or name the function fully with --function",
               opt->function, occ->items[0].frame, other_function(occ));
        return -EINVAL;
    }
    if (opt->index >= occ->n) {
        np_report_print_occurrences(stdout, opt->function, occ, opt->json);
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

/* ---- the command ------------------------------------------------------------------------- */

struct results {
    struct np_report rep, replays;
    struct np_counts unmatched, seen;
};

static int collect(const struct np_recording *rec, const struct np_report_filter *f,
                   struct results *r) {
    int err = np_report_collect(&r->rep, rec, f, NP_REPORT_LAUNCHES);
    if (!err && r->rep.total == 0)
        err = np_report_collect(&r->replays, rec, f, NP_REPORT_GRAPH_REPLAYS);
    if (!err && r->rep.total == 0)
        err = np_report_unmatched(rec, f, &r->unmatched);
    if (!err && r->rep.total == 0)
        err = np_report_nccl_seen(rec, &r->seen);
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

static int report(const struct np_report_options *opt, const struct np_recording *rec,
                  struct np_occurrences *occ, struct results *r) {
    struct np_report_filter f = {.kernel = opt->kernel, .op = opt->op, .depth = opt->depth};
    struct np_report_view v = {.opt = opt, .filter = &f, .rep = &r->rep};
    time_window(opt, rec, &f);
    v.windowed = opt->has_start || opt->has_duration || opt->function;
    if (opt->function) {
        int err = choose_occurrence(rec, opt, occ);
        if (err)
            return err;
        v.occurrence = &occ->items[opt->index];
        v.occurrence_index = opt->index;
        intersect(&f, v.occurrence);
    }
    int err = collect(rec, &f, r);
    if (err)
        return err;
    v.replays = &r->replays;
    v.unmatched = &r->unmatched;
    v.seen = &r->seen;
    return print(&v);
}

int np_cmd_report(int argc, char **argv) {
    struct np_report_options opt;
    struct np_recording rec;
    struct np_occurrences occ = {0};
    struct results r;

    int parsed = parse_options(argc, argv, &opt);
    if (parsed != 0) {
        if (parsed < 0)
            fprintf(stderr, "Run 'ncclprobe report --help' for the options.\n");
        return parsed < 0 ? 2 : 0;
    }
    np_recording_init(&rec, opt.dir);
    np_report_init(&r.rep);
    np_report_init(&r.replays);
    np_counts_init(&r.unmatched);
    np_counts_init(&r.seen);
    int err = np_recording_load(&rec);
    if (!err)
        err = report(&opt, &rec, &occ, &r);
    np_counts_free(&r.seen);
    np_counts_free(&r.unmatched);
    np_report_free(&r.replays);
    np_report_free(&r.rep);
    np_occurrences_free(&occ);
    np_recording_free(&rec);
    return err ? 1 : 0;
}
