/* options.c - `ncclprobe record`'s command line (see options.h): the getopt
 * loop over np_settings_table's flags (session/settings.c parses, checks
 * and explains each value), --pid, --help, `-- CMD`, and the checks
 * between options. */
#define _GNU_SOURCE
#include "cli/options.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "lib/util.h"
#include "symbolize/symbolize.h"

#define OPT_ROW 256 /* getopt's value for the flag of np_settings_table[i]: OPT_ROW + i */
#define MAX_OPTIONS 64

static void usage(FILE *f) {
    fprintf(f, "usage: ncclprobe record [options] --pid PID[,PID...]\n"
               "       ncclprobe record [options] -- CMD [ARGS...]\n"
               "       ncclprobe --pid PID            (same as record --pid)\n"
               "\n"
               "Records every CUDA kernel launch and NCCL call of the targets with its call\n"
               "stack, without restarting them.\n"
               "\n"
               "options:\n"
               "  -p, --pid PID[,PID...]   attach to running processes (all their threads)\n");
    np_settings_usage(NP_SIDE_RECORD, f);
    fprintf(f, "  -h, --help               this text\n");
}

static int add_pid(const char *tok, struct np_settings *opt) {
    long pid;
    if (np_parse_long(tok, 1, 0x3fffffff, &pid) < 0) {
        np_err("invalid pid '%s': expected a positive number", tok);
        return -EINVAL;
    }
    pid_t *pids = realloc(opt->pids, (opt->npids + 1) * sizeof(*pids));
    if (!pids)
        return -ENOMEM;
    opt->pids = pids;
    opt->pids[opt->npids++] = (pid_t)pid;
    return 0;
}

static int parse_pids(const char *text, struct np_settings *opt) {
    char *copy = strdup(text), *save = NULL;
    int rc = copy ? 0 : -ENOMEM;
    for (char *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok && !rc;
         tok = strtok_r(NULL, ",", &save))
        rc = add_pid(tok, opt);
    free(copy);
    return rc;
}

/* getopt_long's tables for the flags of np_settings_table, --pid and --help. */
struct getopt_tables {
    struct option longopts[MAX_OPTIONS];
    char optstring[2 * MAX_OPTIONS];
};

static void add_option(struct getopt_tables *t, size_t *n, const char *name, bool arg, int val,
                       char short_flag) {
    t->longopts[(*n)++] = (struct option){name, arg ? required_argument : no_argument, NULL, val};
    if (short_flag) {
        size_t len = strlen(t->optstring);
        t->optstring[len++] = short_flag;
        if (arg)
            t->optstring[len++] = ':';
        t->optstring[len] = '\0';
    }
}

static void getopt_tables(struct getopt_tables *t) {
    size_t n = 0;
    memset(t, 0, sizeof(*t));
    strcpy(t->optstring, "+"); /* stop at the first non-option: the command */
    add_option(t, &n, "pid", true, 'p', 'p');
    add_option(t, &n, "help", false, 'h', 'h');
    for (size_t i = 0; i < np_settings_count && n + 1 < MAX_OPTIONS; i++) {
        const struct np_setting *r = &np_settings_table[i];
        if (r->flag)
            add_option(t, &n, r->flag, r->metavar != NULL, OPT_ROW + (int)i, r->short_flag);
    }
}

/* The row getopt's value c stands for (a short flag, or OPT_ROW + row). */
static const struct np_setting *row_of(int c) {
    if (c >= OPT_ROW && (size_t)(c - OPT_ROW) < np_settings_count)
        return &np_settings_table[c - OPT_ROW];
    for (size_t i = 0; i < np_settings_count; i++)
        if (c && np_settings_table[i].short_flag == c)
            return &np_settings_table[i];
    return NULL;
}

static int parse_flag(int c, struct np_settings *opt) {
    const struct np_setting *row = row_of(c);
    char msg[768];
    if (!row) {
        usage(stderr);
        return -EINVAL;
    }
    int rc =
        np_setting_set(row, NP_SIDE_RECORD, row->metavar ? optarg : NULL, opt, msg, sizeof(msg));
    if (rc == -EINVAL)
        np_err("%s", msg);
    return rc;
}

/* What no single option can check: what to record, and --cupti with it. */
static int check_combination(struct np_settings *opt) {
    if (!opt->npids && !opt->command) {
        np_err("nothing to record: give --pid PID or -- CMD");
        usage(stderr);
        return -EINVAL;
    }
    if (opt->npids && opt->command) {
        np_err("give either --pid or -- CMD, not both");
        return -EINVAL;
    }
    if (opt->inject_cupti && opt->no_gpu) {
        np_err("--cupti needs ncclprobe to listen for GPU records: not with --no-gpu");
        return -EINVAL;
    }
    return 0;
}

int np_record_parse_options(int argc, char **argv, struct np_settings *opt) {
    struct getopt_tables t;
    int c, rc = np_settings_defaults(NP_SIDE_RECORD, opt);

    getopt_tables(&t);
    optind = 1;
    while (!rc && (c = getopt_long(argc, argv, t.optstring, t.longopts, NULL)) != -1) {
        if (c == 'p') {
            rc = parse_pids(optarg, opt);
        } else if (c == 'h') {
            usage(stdout);
            exit(0);
        } else {
            rc = parse_flag(c, opt);
        }
    }
    if (rc == -ENOMEM)
        np_err("out of memory");
    if (rc)
        return -EINVAL;
    if (opt->verbose)
        np_log_set_level(NP_LOG_DEBUG);
    if (opt->debuginfo_path)
        np_symbolizer_set_debuginfo_path(opt->debuginfo_path);
    if (optind < argc)
        opt->command = &argv[optind];
    return check_combination(opt);
}

char *np_default_output_dir(void) {
    char name[64];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(name, sizeof(name), "ncclprobe-%Y%m%d-%H%M%S", &tm);
    struct stat st;
    for (int i = 2; stat(name, &st) == 0 && i < 1000; i++) {
        size_t base = strlen("ncclprobe-YYYYmmdd-HHMMSS");
        snprintf(name + base, sizeof(name) - base, "-%d", i);
    }
    return strdup(name);
}
