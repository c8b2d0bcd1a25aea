/* merge.c - `ncclprobe merge`: the command line. Parses the options into
 * struct np_merge_opts and makes the one call that does the merge
 * (merge/merge.c, docs/merge.md); the exit code comes from its result. */
#define _GNU_SOURCE
#include "cli/merge.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "lib/util.h"
#include "merge/merge.h"
#include "writers/formats.h"

struct merge_cli {
    struct np_merge_opts merge;
    bool quiet;
};

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: ncclprobe merge --cpu EXT_FOLDED --gpu TRACE_JSON -o OUT [options]\n"
        "\n"
        "Joins the CPU launch stacks of a recording (stacks.ext.folded) with the\n"
        "kernels of a CUPTI Chrome trace: writes folded stacks ending in\n"
        "[GPU_Kernel]NAME (or [GPU_Launch_Pending]) with their counts.\n"
        "\n"
        "options:\n"
        "      --cpu FILE             extended folded stacks (timestamp comm pid tid cpu stack)\n"
        "      --gpu FILE             Chrome trace JSON with CUDA_Runtime and GPU_Kernel events\n"
        "  -o, --output FILE          folded stacks weighted by launch count\n"
        "      --gpu-ns-output FILE   the same stacks weighted by GPU nanoseconds\n"
        "      --tolerance-ms MS      largest CPU/trace clock gap of a pair (default 10)\n"
        "      --summary              per-kernel counts and GPU time, match counts, on stdout\n"
        "      --quiet                no warnings or closing counts on stderr\n"
        "      --format LIST          also OUT.pb.gz (pprof) and OUT.svg, GPU_NS_OUT.svg\n"
        "                             (svg) from the merged files (default none)\n"
        "  -h, --help                 this text\n");
}

static int parse_tolerance(const char *text, int64_t *out) {
    double ms;
    if (np_parse_seconds(text, &ms) < 0 || ms <= 0 || ms > 1e9) {
        np_err("invalid --tolerance-ms '%s': expected a positive number of milliseconds", text);
        return -EINVAL;
    }
    *out = (int64_t)(ms * 1e6 + 0.5);
    if (*out < 1)
        *out = 1;
    return 0;
}

static int check_options(const struct np_merge_opts *m) {
    if (!m->cpu_path || !m->gpu_path || !m->out_path) {
        np_err("merge needs --cpu, --gpu and -o");
        return -EINVAL;
    }
    if (m->gpu_ns_path && strcmp(m->gpu_ns_path, m->out_path) == 0) {
        np_err("-o and --gpu-ns-output name the same file");
        return -EINVAL;
    }
    return 0;
}

static int parse_formats(const char *text, unsigned *formats) {
    char why[256];
    if (np_formats_parse(text, formats, why, sizeof(why)) < 0) {
        np_err("--format: %s", why);
        return -EINVAL;
    }
    if (*formats & NP_FORMAT_PERFETTO)
        np_warn("--format perfetto: merge has no per-launch times to draw; use a "
                "recording's trace.json");
    return 0;
}

enum { OPT_CPU = 256, OPT_GPU, OPT_GPU_NS, OPT_TOLERANCE, OPT_SUMMARY, OPT_QUIET, OPT_FORMAT };

static const struct option longopts[] = {
    {"cpu", required_argument, NULL, OPT_CPU},
    {"gpu", required_argument, NULL, OPT_GPU},
    {"output", required_argument, NULL, 'o'},
    {"gpu-ns-output", required_argument, NULL, OPT_GPU_NS},
    {"tolerance-ms", required_argument, NULL, OPT_TOLERANCE},
    {"summary", no_argument, NULL, OPT_SUMMARY},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"help", no_argument, NULL, 'h'},
    {0},
};

/* One option from getopt_long: 0, 1 after --help, -EINVAL. */
static int take_option(int c, const char *arg, struct merge_cli *cli) {
    struct np_merge_opts *m = &cli->merge;
    switch (c) {
    case OPT_CPU:
        m->cpu_path = arg;
        return 0;
    case OPT_GPU:
        m->gpu_path = arg;
        return 0;
    case 'o':
        m->out_path = arg;
        return 0;
    case OPT_GPU_NS:
        m->gpu_ns_path = arg;
        return 0;
    case OPT_TOLERANCE:
        return parse_tolerance(arg, &m->tolerance_ns);
    case OPT_SUMMARY:
        m->summary = true;
        return 0;
    case OPT_QUIET:
        cli->quiet = true;
        return 0;
    case OPT_FORMAT:
        return parse_formats(arg, &m->formats);
    case 'h':
        usage(stdout);
        return 1;
    default:
        return -EINVAL;
    }
}

/* 0, 1 after --help, -EINVAL on a bad command line. */
static int parse_options(int argc, char **argv, struct merge_cli *cli) {
    int c, ret = 0;

    cli->merge.tolerance_ns = NP_MERGE_DEFAULT_TOLERANCE_NS;
    optind = 1;
    while (ret == 0 && (c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1)
        ret = take_option(c, optarg, cli);
    if (ret != 0)
        return ret;
    if (optind < argc) {
        np_err("unexpected argument '%s'", argv[optind]);
        return -EINVAL;
    }
    return check_options(&cli->merge);
}

int np_cmd_merge(int argc, char **argv) {
    struct merge_cli cli = {0};

    int parsed = parse_options(argc, argv, &cli);
    if (parsed != 0) {
        if (parsed < 0)
            usage(stderr);
        return parsed < 0 ? 2 : 0;
    }
    if (cli.quiet)
        np_log_set_level(NP_LOG_ERROR);
    return np_merge_run(&cli.merge) ? 1 : 0;
}
