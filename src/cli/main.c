/* main.c - ncclprobe's entry point: dispatches to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli/convert.h"
#include "cli/ctl.h"
#include "cli/flamegraph.h"
#include "cli/merge.h"
#include "cli/record.h"
#include "cli/report.h"
#include "daemon/daemon.h"
#include "lib/util.h"
#include "session/settings.h"
#include "writers/formats.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: ncclprobe record [options] (--pid PID[,PID...] | -- CMD [ARGS...])\n"
        "       ncclprobe --pid PID [options]\n"
        "       ncclprobe merge --cpu EXT_FOLDED --gpu TRACE_JSON -o OUT [options]\n"
        "       ncclprobe report [DIR] [options]\n"
        "       ncclprobe flamegraph IN.folded [-o OUT.svg] [--title T] [--unit count|ns]\n"
        "       ncclprobe convert DIR [--format LIST]\n"
        "       ncclprobe daemon [--config FILE] [--output-dir DIR] [-v]\n"
        "       ncclprobe ctl [--socket PATH] [--json] start [--duration S]|stop|status|snapshot\n"
        "       ncclprobe --version\n"
        "Run 'ncclprobe record --help' (merge, report) for the options.\n");
}

static int dispatch(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "record") == 0)
        return np_cmd_record(argc - 1, argv + 1);
    if (strcmp(argv[1], "merge") == 0)
        return np_cmd_merge(argc - 1, argv + 1);
    if (strcmp(argv[1], "report") == 0)
        return np_cmd_report(argc - 1, argv + 1);
    if (strcmp(argv[1], "daemon") == 0)
        return np_cmd_daemon(argc - 1, argv + 1);
    if (strcmp(argv[1], "ctl") == 0)
        return np_cmd_ctl(argc - 1, argv + 1);
    if (strcmp(argv[1], "flamegraph") == 0)
        return np_cmd_flamegraph(argc - 1, argv + 1);
    if (strcmp(argv[1], "convert") == 0)
        return np_cmd_convert(argc - 1, argv + 1);
    if (strcmp(argv[1], "--version") == 0) {
        printf("ncclprobe %s\n", NCCLPROBE_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (argv[1][0] == '-') /* "ncclprobe --pid PID" is "ncclprobe record --pid PID" */
        return np_cmd_record(argc, argv);
    fprintf(stderr, "ncclprobe: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}

/* The rule: a command that said "error:" exits non-zero, whatever path it
 * took to its end. */
int main(int argc, char **argv) {
    int rc = dispatch(argc, argv);
    return rc == 0 && np_log_errors() ? 1 : rc;
}
