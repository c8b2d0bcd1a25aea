/* report.c - `ncclprobe report [DIR]`: the command line. Parses and checks
 * the options; the report itself is src/report/'s (run.c). docs/report.md. */
#include "cli/report.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/util.h"
#include "report/flows.h"
#include "report/run.h"

#define DEFAULT_DEPTH 12
#define MAX_DEPTH 100000

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
            "      --flows            instead: per communicator of a --nccl-flows recording,\n"
            "                         steps and bytes per peer and channel, steps per\n"
            "                         pattern and protocol\n"
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
    OPT_JSON,
    OPT_FLOWS
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
    case OPT_FLOWS:
        opt->flows = true;
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
        {"flows", no_argument, NULL, OPT_FLOWS},
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

int np_cmd_report(int argc, char **argv) {
    struct np_report_options opt;
    int parsed = parse_options(argc, argv, &opt);
    if (parsed != 0) {
        if (parsed < 0)
            fprintf(stderr, "Run 'ncclprobe report --help' for the options.\n");
        return parsed < 0 ? 2 : 0;
    }
    if (opt.flows)
        return np_report_flows(&opt) ? 1 : 0;
    return np_report_run(&opt) ? 1 : 0;
}
