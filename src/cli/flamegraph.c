/* flamegraph.c - `ncclprobe flamegraph IN.folded [-o OUT.svg] [--title T]
 * [--unit count|ns] [--width PX]`: the options, the input ("-": stdin), and
 * the output: rendered in memory first, so that a failed run writes nothing;
 * to OUT.svg atomically (through OUT.svg.tmp) or to stdout. */
#define _GNU_SOURCE
#include "cli/flamegraph.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/util.h"
#include "writers/flamegraph.h"

struct flame_cli {
    const char *in_path;
    const char *out_path; /* NULL or "-": stdout */
    struct np_flame_opts opts;
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: ncclprobe flamegraph IN.folded [-o OUT.svg] [--title T] [--unit count|ns] "
            "[--width PX]\n"
            "\n"
            "Renders folded stacks (\"frame;frame;...;leaf WEIGHT\" lines, e.g. merged.folded)\n"
            "as an interactive SVG flame graph: click to zoom, Ctrl-F to search.\n"
            "IN.folded '-' reads stdin.\n"
            "\n"
            "options:\n"
            "  -o, --output FILE   the SVG (default: stdout)\n"
            "      --title TEXT    the title (default: \"Flame Graph\")\n"
            "      --unit UNIT     what the weights are: count (default) or ns (GPU\n"
            "                      nanoseconds, shown as milliseconds)\n"
            "      --width PX      image width in pixels (default %d)\n"
            "  -h, --help          this text\n",
            NP_FLAME_DEFAULT_WIDTH);
}

static int parse_unit(const char *text, enum np_flame_unit *unit) {
    if (strcmp(text, "count") == 0)
        *unit = NP_FLAME_COUNT;
    else if (strcmp(text, "ns") == 0)
        *unit = NP_FLAME_NS;
    else {
        np_err("invalid --unit '%s': expected count or ns", text);
        return -EINVAL;
    }
    return 0;
}

static int parse_width(const char *text, int *width) {
    long v;
    if (np_parse_long(text, NP_FLAME_MIN_WIDTH, NP_FLAME_MAX_WIDTH, &v) < 0) {
        np_err("invalid --width '%s': expected %d to %d pixels", text, NP_FLAME_MIN_WIDTH,
               NP_FLAME_MAX_WIDTH);
        return -EINVAL;
    }
    *width = (int)v;
    return 0;
}

/* 0, 1 after --help, -EINVAL on a bad command line. */
static int parse_options(int argc, char **argv, struct flame_cli *cli) {
    enum { OPT_TITLE = 256, OPT_UNIT, OPT_WIDTH };
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"title", required_argument, NULL, OPT_TITLE},
        {"unit", required_argument, NULL, OPT_UNIT},
        {"width", required_argument, NULL, OPT_WIDTH},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    int c;

    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        int err = 0;
        if (c == 'o')
            cli->out_path = optarg;
        else if (c == OPT_TITLE)
            cli->opts.title = optarg;
        else if (c == OPT_UNIT)
            err = parse_unit(optarg, &cli->opts.unit);
        else if (c == OPT_WIDTH)
            err = parse_width(optarg, &cli->opts.width);
        else if (c == 'h') {
            usage(stdout);
            return 1;
        } else
            err = -EINVAL;
        if (err)
            return err;
    }
    if (argc - optind != 1) {
        np_err("flamegraph needs one input file (see --help)");
        return -EINVAL;
    }
    cli->in_path = argv[optind];
    return 0;
}

struct rendered {
    const char *text;
    size_t len;
};

static int fill_rendered(FILE *f, void *ctx) {
    const struct rendered *r = ctx;
    return fwrite(r->text, 1, r->len, f) == r->len ? 0 : -EIO;
}

static int write_output(const struct flame_cli *cli, const char *text, size_t len) {
    if (!cli->out_path || strcmp(cli->out_path, "-") == 0) {
        if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
            np_err("cannot write the SVG to stdout: %s", strerror(errno));
            return -EIO;
        }
        return 0;
    }
    struct rendered r = {text, len};
    int err = np_write_atomic(cli->out_path, fill_rendered, &r);
    if (err)
        np_err("cannot write %s: %s", cli->out_path, strerror(-err));
    return err;
}

/* Renders the input into memory: 0, 1 when no line was valid, -errno. */
static int render(struct flame_cli *cli, FILE *in, char **text, size_t *len) {
    struct np_flame_stats stats;
    FILE *mem = open_memstream(text, len);
    if (!mem)
        return -errno;
    int err = np_flamegraph_render_stats(in, mem, &cli->opts, &stats);
    if (fclose(mem) != 0 && !err)
        err = -EIO;
    if (!err && stats.lines == 0 && stats.skipped > 0) {
        np_err("%s: no valid folded line ('frame;frame;... WEIGHT')", cli->opts.source);
        return 1;
    }
    return err;
}

int np_cmd_flamegraph(int argc, char **argv) {
    struct flame_cli cli = {0};
    int r = parse_options(argc, argv, &cli);
    if (r)
        return r > 0 ? 0 : 2;

    bool use_stdin = strcmp(cli.in_path, "-") == 0;
    cli.opts.source = use_stdin ? "stdin" : cli.in_path;
    FILE *in = use_stdin ? stdin : fopen(cli.in_path, "re");
    if (!in) {
        np_err("cannot open %s: %s", cli.in_path, strerror(errno));
        return 1;
    }
    char *text = NULL;
    size_t len = 0;
    r = render(&cli, in, &text, &len);
    if (!use_stdin)
        fclose(in);
    if (r == 0)
        r = write_output(&cli, text, len);
    else if (r < 0)
        np_err("cannot render %s: %s", cli.opts.source, strerror(-r));
    free(text);
    return r == 0 ? 0 : 1;
}
