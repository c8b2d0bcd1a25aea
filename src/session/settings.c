/* settings.c - the one table of settings (see settings.h) and what goes with
 * it: the value syntaxes (booleans, sizes, durations, percentages, lists),
 * the range checks and their messages, defaults, storing a value where a
 * side keeps it, and the help lines of record and the daemon. The
 * configuration file's line syntax is daemon/config.c's; record's getopt
 * loop is cli/options.c's. */
#define _GNU_SOURCE
#include "session/settings.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ncclprobe/events.h"
#include "ncclprobe/gpu_wire.h"
#include "writers/formats.h"

#define SEC_MS 1000ull
#define MIN_MS (60 * SEC_MS)
#define HOUR_MS (60 * MIN_MS)
#define DAY_MS (24 * HOUR_MS)
#define MAX_DURATION_MS (36500 * DAY_MS) /* in ns still fits a uint64_t */
#define MIB (1ull << 20)
#define GIB (1ull << 30)
#define SUN_PATH_MAX 108 /* sizeof(((struct sockaddr_un *)0)->sun_path) */
#define SHOW 200         /* at most this much of a value is quoted in a message */
#define HELP_COLUMN 27   /* where --help's texts start */

_Static_assert(sizeof(enum unwind_mode) == sizeof(int), "NP_STORE_INT");
_Static_assert(sizeof(enum np_python_mode) == sizeof(int), "NP_STORE_INT");
_Static_assert(sizeof(enum np_log_level) == sizeof(int), "NP_STORE_INT");

/* ---- the table ---------------------------------------------------------- */

static const char *const unwind_names[] = {"auto", "dwarf", "fp", NULL};
static const char *const python_names[] = {"merge", "raw", "off", NULL};
static const char *const launch_probe_names[] = {"auto", "int3", NULL};
static const char *const cupti_inject_names[] = {"never", "window", "always", NULL};
static const char *const log_names[] = {"error", "warn", "info", "debug", NULL};

#define REC(how, field) .record = {NP_STORE_##how, offsetof(struct np_settings, field)}
#define CONF(how, field) .config = {NP_STORE_##how, offsetof(struct np_daemon_config, field)}
#define BOOLS "yes, no, true, false, on, off, 1 or 0"
#define GLOB_ROW(name, field, what)                                                                \
    {                                                                                              \
        .key = name, .type = NP_V_GLOBS, .allowed = "whitespace-separated glob patterns",          \
        .help = what, CONF(GLOBS, field)                                                           \
    }

/* One row per setting, kept as compact as its fields allow. */
/* clang-format off */
const struct np_setting np_settings_table[] = {
    /* where things go */
    {.flag = "output", .short_flag = 'o', .metavar = "DIR", .type = NP_V_TEXT,
     .help = "recording directory (default ncclprobe-YYYYmmdd-HHMMSS)", REC(STR, output_dir)},
    {.flag = "duration", .short_flag = 'd', .metavar = "SEC", .type = NP_V_SECONDS,
     .allowed = "a positive number of seconds",
     .help = "stop after SEC seconds (default: Ctrl-C, SIGTERM or\n"
             "when every target has exited)",
     REC(DOUBLE, duration_s)},
    {.flag = "no-wait", .flag_value = "yes", .type = NP_V_BOOL,
     .help = "fail instead of waiting when a target has no CUDA or\n"
             "NCCL library loaded yet",
     REC(BOOL, no_wait)},
    {.key = "output_dir", .type = NP_V_PATH, .restart = true, .def = "/var/lib/ncclprobe",
     .allowed = "an absolute path", .help = "where output sets are written", CONF(STR, output_dir)},
    {.key = "ctl_socket", .type = NP_V_PATH, .max_len = SUN_PATH_MAX, .restart = true,
     .def = "/run/ncclprobe/ctl.sock", .allowed = "an absolute path shorter than 108 bytes",
     .help = "the control socket `ncclprobe ctl` talks to", CONF(STR, ctl_socket)},
    /* GPU records */
    {.flag = "cupti-socket", .metavar = "PATH", .key = "cupti_socket", .type = NP_V_PATH,
     .max_len = SUN_PATH_MAX, .restart = true, .def = NP_WIRE_DEFAULT_SOCKET,
     .allowed = "an absolute path shorter than 108 bytes",
     .flag_allowed = "a path shorter than 108 bytes",
     .help = "where targets running libncclprobe_cupti.so\n"
             "(CUDA_INJECTION64_PATH) send GPU records",
     REC(BORROW, cupti_socket), CONF(STR, cupti_socket)},
    {.flag = "cupti", .flag_value = "yes", .type = NP_V_BOOL,
     .help = "our CUPTI library in the targets (GPU kernels and\n"
             "times joined to each launch): -- CMD starts with it;\n"
             "--pid: loaded into the running process, or woken",
     REC(BOOL, inject_cupti)},
    {.flag = "nccl-flows", .flag_value = "yes", .key = "nccl_flows", .type = NP_V_BOOL,
     .restart = true, .def = "no", .allowed = BOOLS,
     .help = "NCCL's proxy flows (ops, per-step SEND/RECV with their\n"
             "peers) and channel topology into flows/ (docs/nccl.md);\n"
             "the daemon: into capture windows' sets",
     REC(BOOL, nccl_flows), CONF(BOOL, nccl_flows)},
    {.flag = "no-gpu", .flag_value = "no", .key = "gpu", .type = NP_V_BOOL, .restart = true,
     .def = "yes", .allowed = BOOLS, .help = "listen for GPU records and join them to the launches",
     .flag_help = "do not listen for GPU records", REC(NOT, no_gpu), CONF(BOOL, gpu)},
    {.flag = "gpu-timeout-ms", .metavar = "MS", .flag_unit = 1, .key = "gpu_timeout",
     .type = NP_V_DURATION, .min = 1, .max = HOUR_MS, .restart = true, .def = "5s",
     .allowed = "a duration from 1ms to 1h, e.g. 5s or 500ms",
     .flag_allowed = "an integer from 1 to 3600000",
     .help = "how long a launch waits for its GPU records before\n"
             "it is written as [GPU_Launch_Pending]",
     REC(LONG, gpu_timeout_ms), CONF(U64, gpu_timeout_ms)},
    {.key = "cupti_inject", .type = NP_V_ENUM, .names = cupti_inject_names, .def = "never",
     .allowed = "never, window or always",
     .help = "bring libncclprobe_cupti.so into running processes (loaded\n"
             "live, or woken where it is): never (only `ctl start --cupti`\n"
             "windows), window (every capture window), always (every\n"
             "process, as soon as it is traced)",
     CONF(INT, cupti_inject)},
    /* capture windows and aggregation */
    {.key = "flag_file", .type = NP_V_PATH, .empty_ok = true,
     .allowed = "an absolute path, or empty for none",
     .help = "while this file exists a capture window is open", CONF(STR, flag_file)},
    {.key = "aggregate", .type = NP_V_BOOL, .def = "yes", .allowed = BOOLS,
     .help = "always-on aggregation between capture windows", CONF(BOOL, aggregate)},
    {.key = "aggregate_interval", .type = NP_V_DURATION, .min = 10 * SEC_MS, .max = MAX_DURATION_MS,
     .def = "10m", .allowed = "a duration of at least 10s, e.g. 10m",
     .help = "how often the always-on output sets rotate", CONF(U64, aggregate_interval_ms)},
    {.key = "max_window", .type = NP_V_DURATION, .min = SEC_MS, .max = MAX_DURATION_MS, .def = "1h",
     .allowed = "a duration of at least 1s, e.g. 1h",
     .help = "a capture window closes by itself after this", CONF(U64, max_window_ms)},
    /* which processes are traced */
    GLOB_ROW("include_comm", include_comm, "process names (/proc/PID/comm) traced"),
    GLOB_ROW("exclude_comm", exclude_comm, "process names not traced"),
    GLOB_ROW("include_exe", include_exe, "executable paths traced"),
    GLOB_ROW("exclude_exe", exclude_exe, "executable paths not traced"),
    GLOB_ROW("include_cgroup", include_cgroup, "cgroup v2 paths traced"),
    GLOB_ROW("exclude_cgroup", exclude_cgroup, "cgroup v2 paths not traced"),
    GLOB_ROW("include_container", include_container, "container ids traced (\"?*\": any)"),
    GLOB_ROW("exclude_container", exclude_container, "container ids not traced"),
    /* bounded resources */
    {.key = "max_output_size", .type = NP_V_SIZE, .min = MIB, .max = UINT64_MAX, .def = "10G",
     .allowed = "a size of at least 1M, e.g. 10G; K, M, G, T are binary",
     .help = "total size of the output sets; the oldest go first", CONF(U64, max_output_bytes)},
    {.key = "max_output_age", .type = NP_V_DURATION, .min = MIN_MS, .max = MAX_DURATION_MS,
     .zero_ok = true, .def = "7d",
     .allowed = "0 for no limit, or a duration of at least 1m, e.g. 7d",
     .help = "output sets older than this are deleted (0: no limit)", CONF(U64, max_output_age_ms)},
    {.key = "cache_size", .type = NP_V_SIZE, .min = MIB, .max = UINT64_MAX, .def = "256M",
     .allowed = "a size of at least 1M, e.g. 256M; K, M, G, T are binary",
     .help = "memory for the symbol and stack caches", CONF(U64, cache_bytes)},
    {.key = "cpu_budget", .type = NP_V_PERCENT, .min = 1, .max = 6400, .def = "10",
     .allowed = "a percentage of one core from 1 to 6400, e.g. 10, 10% or 250 (2.5 cores)",
     .help = "CPU the daemon may use (percent of one core, all its\n"
             "threads) before it rate-limits; above 100, reader\n"
             "threads (reader_threads = auto)",
     CONF(DOUBLE, cpu_budget_percent)},
    {.key = "rate_limit", .type = NP_V_UINT, .min = 1, .max = 1000000000, .def = "2000",
     .allowed = "launches per second, an integer from 1 to 1000000000",
     .help = "launches per second kept per probe while over the budget", CONF(U64, rate_limit)},
    /* the BPF side */
    {.flag = "ring-buffer-mb", .metavar = "N", .flag_unit = MIB, .key = "ring_buffer",
     .type = NP_V_SIZE, .min = MIB, .max = GIB, .pow2 = true, .restart = true, .def = "64M",
     .allowed = "a power of two from 1M to 1G, e.g. 64M",
     .flag_allowed = "a power of two from 1 to 1024",
     .help = "BPF ring buffer size, a power of two", REC(LONG, ring_mb),
     CONF(U64, ring_buffer_bytes)},
    {.flag = "reader-backlog-mb", .metavar = "N", .flag_unit = MIB, .key = "reader_backlog",
     .type = NP_V_SIZE, .min = MIB, .max = UINT64_MAX, .zero_ok = true, .restart = true,
     .def = "2G", .allowed = "0, or a size of at least 1M, e.g. 2G",
     .flag_allowed = "0, or a whole number of MiB",
     .help = "memory for records read from the ring buffer and\n"
             "not yet unwound (a burst waits there instead of\n"
             "overflowing the ring); 0: unwind as they are read",
     REC(LONG, backlog_mb), CONF(U64, reader_backlog_bytes)},
    {.flag = "wakeup-kb", .metavar = "N", .type = NP_V_UINT, .max = 1 << 20, .auto_ok = true,
     .def = "auto", .allowed = "auto, or an integer from 0 to 1048576",
     .help = "wake the reader once N KiB are queued; auto:\n"
             "an eighth of the ring buffer",
     REC(LONG, wakeup_kb)},
    {.flag = "reader-threads", .metavar = "N", .key = "reader_threads", .type = NP_V_UINT,
     .max = 64, .auto_ok = true, .restart = true, .def = "auto",
     .allowed = "auto, or an integer from 0 to 64",
     .help = "threads that unwind and symbolize beside the\n"
             "reader, a traced process's launches on one of them;\n"
             "0: the reader alone; auto: record, half the CPUs\n"
             "less one (at most 8); the daemon, one per whole core\n"
             "of cpu_budget above the first (at most 8, and fewer\n"
             "than the CPUs)",
     REC(LONG, reader_threads), CONF(LONG, reader_threads)},
    /* call stacks */
    {.flag = "unwind", .metavar = "MODE", .key = "unwind", .type = NP_V_ENUM, .names = unwind_names,
     .restart = true, .def = "auto", .allowed = "auto, dwarf or fp",
     .help = "auto: DWARF CFI unwinding of a copy of the stack,\n"
             "frame pointers where code has no CFI; dwarf: CFI only;\n"
             "fp: frame pointers only (cheapest, incomplete through\n"
             "code built without them)",
     REC(INT, unwind), CONF(INT, unwind)},
    {.flag = "stack-bytes", .metavar = "N", .key = "stack_bytes", .type = NP_V_UINT, .min = 512,
     .max = NP_MAX_STACK_BYTES, .multiple = 8, .restart = true, .def = "16384",
     .allowed = "a multiple of 8 from 512 to 65536",
     .help = "user stack copied per launch for DWARF unwinding\n"
             "(a multiple of 8, at most 65536)",
     REC(LONG, stack_bytes), CONF(U64, stack_bytes)},
    {.flag = "fixed-stack-copy", .flag_value = "yes", .type = NP_V_BOOL,
     .help = "copy all of --stack-bytes at every launch, not what\n"
             "unwinding needed at that thread and call site (a\n"
             "benchmark's baseline)",
     REC(BOOL, fixed_stack_copy)},
    {.flag = "launch-probes", .metavar = "MODE", .type = NP_V_ENUM, .names = launch_probe_names,
     .def = "int3", .allowed = "auto or int3",
     .help = "int3: launches always at the int3 uprobes; auto:\n"
             "while libncclprobe_cupti.so serves a process, take its\n"
             "launches at the library's marker and remove the int3\n"
             "uprobes of those launch functions (docs/gpu.md)",
     REC(INT, launch_probes)},
    {.flag = "inline", .flag_value = "yes", .type = NP_V_BOOL,
     .help = "inlined functions (from debug info, marked \"[inlined]\")\n"
             "in the folded files too; stacks.jsonl always has them",
     REC(BOOL, inline_frames)},
    {.flag = "debuginfo-path", .metavar = "P", .type = NP_V_TEXT,
     .help = "where to find separate debug files (libdw syntax,\n"
             "default :.debug:/usr/lib/debug with build-id dirs)",
     REC(BORROW, debuginfo_path)},
    /* Python */
    {.flag = "python", .metavar = "MODE", .key = "python", .type = NP_V_ENUM, .names = python_names,
     .restart = true, .def = "merge", .allowed = "merge, raw or off",
     .help = "Python frames of CPython 3.10+ targets: merge puts\n"
             "them where the interpreter ran them, in place of its\n"
             "own frames; raw keeps every interpreter frame beside\n"
             "them; off",
     REC(INT, python), CONF(INT, python)},
    {.flag = "python-depth", .metavar = "N", .key = "python_depth", .type = NP_V_UINT, .min = 1,
     .max = NP_PY_MAX_FRAMES, .restart = true, .def = "128", .allowed = "an integer from 1 to 1024",
     .help = "Python frames kept per launch, innermost first (at\n"
             "most 1024); deeper stacks end in \"[python truncated]\"",
     REC(LONG, python_depth), CONF(U64, python_depth)},
    /* what is written, and said */
    {.flag = "raw-dump", .metavar = "FILE", .type = NP_V_TEXT,
     .help = "also write every BPF record as received (for\n"
             "bench/unwind_bench and bug reports)",
     REC(BORROW, raw_dump)},
    {.flag = "format", .metavar = "LIST", .key = "formats", .type = NP_V_FORMATS, .def = "all",
     .allowed = NP_FORMATS_HELP,
     .help = "outputs made from a finished recording: pprof\n"
             "(profile.pb.gz), perfetto (trace.json), svg\n"
             "(flamegraph*.svg), all or none",
     REC(UNSIGNED, formats), CONF(UNSIGNED, formats)},
    {.key = "log_level", .type = NP_V_ENUM, .names = log_names, .def = "info",
     .allowed = "error, warn, info or debug", .help = "what the daemon logs", CONF(INT, log_level)},
    /* the HTTP endpoints (docs/daemon.md, "HTTP") */
    {.key = "http_listen", .type = NP_V_TEXT, .restart = true,
     .allowed = "ADDR:PORT with a numeric address, e.g. 127.0.0.1:9464, or empty",
     .help = "serve /metrics, /pprof/launches, /pprof/gpu_time and\n"
             "/healthz here (empty: no HTTP server)",
     CONF(STR, http_listen)},
    {.key = "http_allow_remote", .type = NP_V_BOOL, .restart = true, .def = "no", .allowed = BOOLS,
     .help = "let http_listen be a non-loopback address (stacks\n"
             "reveal code paths: use a token and a firewall)",
     CONF(BOOL, http_allow_remote)},
    {.key = "http_token_file", .type = NP_V_PATH, .empty_ok = true, .restart = true,
     .allowed = "an absolute path, or empty for none",
     .help = "a file (mode 0600 or 0400, root's) holding the bearer\n"
             "token every HTTP request must send",
     CONF(STR, http_token_file)},
    {.flag = "verbose", .short_flag = 'v', .flag_value = "yes", .type = NP_V_BOOL,
     .help = "more diagnostics", REC(BOOL, verbose)},
};
/* clang-format on */

const size_t np_settings_count = NP_ARRAY_SIZE(np_settings_table);

const struct np_setting *np_setting_by_key(const char *key, size_t len) {
    for (size_t i = 0; i < np_settings_count; i++) {
        const char *k = np_settings_table[i].key;
        if (k && strlen(k) == len && memcmp(k, key, len) == 0)
            return &np_settings_table[i];
    }
    return NULL;
}

const struct np_setting *np_setting_by_flag(const char *flag) {
    for (size_t i = 0; i < np_settings_count; i++) {
        const char *f = np_settings_table[i].flag;
        if (f && strcmp(f, flag) == 0)
            return &np_settings_table[i];
    }
    return NULL;
}

const struct np_setting_field *np_setting_field(const struct np_setting *row, enum np_side side) {
    return side == NP_SIDE_RECORD ? &row->record : &row->config;
}

/* ---- value syntaxes ----------------------------------------------------- */

static bool is_blank(char c) {
    return c == ' ' || c == '\t';
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* The leading run of digits of *p as a number (np_parse_u64: -ERANGE past
 * UINT64_MAX); *p moves past it. -EINVAL when there is no digit. */
static int leading_u64(const char **p, uint64_t *out) {
    const char *s = *p, *e = s;
    while (is_digit(*e))
        e++;
    if (e == s)
        return -EINVAL;
    char *digits = strndup(s, (size_t)(e - s));
    if (!digits)
        return -ENOMEM;
    int rc = np_parse_u64(digits, 0, UINT64_MAX, out);
    free(digits);
    *p = e;
    return rc;
}

/* The digits after a decimal point at *p as frac / scale (18 digits are
 * plenty); *any: one of them is not '0'. */
static int fraction(const char **p, uint64_t *frac, uint64_t *scale, bool *any) {
    const char *d = *p;
    if (!is_digit(*d))
        return -EINVAL;
    for (; is_digit(*d); d++) {
        *any |= *d != '0';
        if (*scale < 1000000000000000000ull) {
            *frac = *frac * 10 + (uint64_t)(*d - '0');
            *scale *= 10;
        }
    }
    *p = d;
    return 0;
}

/* Milliseconds per unit of a duration's suffix; 0: no such unit. */
static uint64_t duration_unit(const char *suffix) {
    static const struct {
        const char *suffix;
        uint64_t ms;
    } units[] = {{"", SEC_MS},  {"ms", 1},      {"s", SEC_MS},
                 {"m", MIN_MS}, {"h", HOUR_MS}, {"d", DAY_MS}};
    for (size_t u = 0; u < NP_ARRAY_SIZE(units); u++)
        if (strcmp(suffix, units[u].suffix) == 0)
            return units[u].ms;
    return 0;
}

/* "90", "1.5s", "500ms", "10m", "2h", "7d" -> milliseconds (a fraction of a
 * millisecond is dropped). *nonzero: the text is not a zero. */
static int parse_duration(const char *v, uint64_t *out, bool *nonzero, const char **why) {
    const char *p = v;
    uint64_t whole = 0, frac = 0, scale = 1;
    bool any = false;

    *why = "not a duration";
    int rc = leading_u64(&p, &whole);
    if (rc == -ENOMEM || rc == -EINVAL)
        return rc;
    bool whole_overflow = rc == -ERANGE;
    for (const char *d = v; d < p; d++)
        any |= *d != '0';
    if (*p == '.' && (p++, fraction(&p, &frac, &scale, &any) < 0)) {
        *why = "no digit after the decimal point";
        return -EINVAL;
    }
    uint64_t unit = duration_unit(p);
    if (!unit) {
        *why = "unknown unit";
        return -EINVAL;
    }
    *nonzero = any;
    *why = "too large";
    if (whole_overflow || whole > UINT64_MAX / unit)
        return -ERANGE;
    uint64_t ms = whole * unit;
    uint64_t frac_ms = (uint64_t)((unsigned __int128)frac * unit / scale); /* < unit */
    if (ms > UINT64_MAX - frac_ms)
        return -ERANGE;
    *out = ms + frac_ms;
    return 0;
}

/* "4096", "512K", "64M", "10G", "1T" (also "k", "KiB"...) -> bytes. */
static int parse_size(const char *v, uint64_t *out, const char **why) {
    const char *p = v;
    uint64_t n = 0, mult = 1;

    *why = "not a size";
    int rc = leading_u64(&p, &n);
    if (rc == -ENOMEM || rc == -EINVAL)
        return rc;
    if (*p == '.') {
        *why = "not a whole number";
        return -EINVAL;
    }
    if (*p) {
        const char *units = "KMGT";
        const char *at = strchr(units, *p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
        if (!at || (p[1] && strcmp(p + 1, "iB") != 0)) {
            *why = "unknown unit";
            return -EINVAL;
        }
        mult = 1ull << (10 * (at - units + 1));
    }
    if (rc == -ERANGE || n > UINT64_MAX / mult) {
        *why = "too large";
        return -ERANGE;
    }
    *out = n * mult;
    return 0;
}

/* "10", "2.5", "10%" -> 10, 2.5, 10. */
static int parse_percent(const char *v, double *out) {
    const char *p = v;
    uint64_t frac = 0, scale = 1;
    bool any = false;
    size_t len = strlen(v);

    if (len && v[len - 1] == '%')
        len--;
    if (!len || !is_digit(*p))
        return -EINVAL;
    while (is_digit(*p))
        p++;
    if (*p == '.' && (p++, fraction(&p, &frac, &scale, &any) < 0))
        return -EINVAL;
    if ((size_t)(p - v) != len)
        return -EINVAL;
    char *num = strndup(v, len);
    if (!num)
        return -ENOMEM;
    *out = strtod(num, NULL); /* the form is checked: no sign, exponent, inf or hex */
    free(num);
    return 0;
}

static int parse_bool(const char *v, bool *out) {
    static const char *const yes[] = {"yes", "true", "on", "1"};
    static const char *const no[] = {"no", "false", "off", "0"};
    for (size_t i = 0; i < NP_ARRAY_SIZE(yes); i++) {
        if (strcasecmp(v, yes[i]) == 0 || strcasecmp(v, no[i]) == 0) {
            *out = strcasecmp(v, yes[i]) == 0;
            return 0;
        }
    }
    return -EINVAL;
}

void np_globs_free(struct np_globs *g) {
    for (size_t i = 0; i < g->n; i++)
        free(g->items[i]);
    free(g->items);
    g->items = NULL;
    g->n = 0;
}

static int globs_add(struct np_globs *g, const char *s, size_t len) {
    char **items = realloc(g->items, (g->n + 1) * sizeof(*items));
    if (!items)
        return -ENOMEM;
    g->items = items;
    if (!(g->items[g->n] = strndup(s, len)))
        return -ENOMEM;
    g->n++;
    return 0;
}

static int parse_globs(const char *v, struct np_globs *out) {
    struct np_globs g = {0};
    for (const char *p = v;;) {
        while (is_blank(*p))
            p++;
        if (!*p)
            break;
        const char *s = p;
        while (*p && !is_blank(*p))
            p++;
        if (globs_add(&g, s, (size_t)(p - s)) < 0) {
            np_globs_free(&g);
            return -ENOMEM;
        }
    }
    *out = g;
    return 0;
}

/* ---- checks --------------------------------------------------------------- */

/* How the configuration's message shows the value next to what is wrong. */
enum shape {
    SAY_IS,    /* 'V' is not a boolean */
    SAY_COLON, /* 'V': too small */
    SAY_OF,    /* unknown value 'V' */
    SAY_BARE,  /* empty value */
};

struct problem {
    enum shape shape;
    bool units;  /* a duration: the message lists the units */
    bool listed; /* why names the bad element of a list, and what is allowed */
    char why[256];
};

static int bad(struct problem *p, enum shape shape, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(struct problem *p, enum shape shape, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why, sizeof(p->why), fmt, ap);
    va_end(ap);
    p->shape = shape;
    return -EINVAL;
}

/* u (nonzero: the text was not a zero) against the row's range. */
static int check_range(const struct np_setting *r, uint64_t u, bool nonzero, struct problem *p) {
    if (u == 0 && !nonzero && r->zero_ok)
        return 0;
    if (u < r->min || (nonzero && u == 0))
        return bad(p, SAY_COLON, "too small");
    if (u > r->max)
        return bad(p, SAY_COLON, "too large");
    if (r->pow2 && (u & (u - 1)))
        return bad(p, SAY_COLON, "not a power of two");
    return 0;
}

/* A size or duration written as one number (the syntax's -EINVAL/-ERANGE
 * said in *why), then checked against the range. */
static int check_number(const struct np_setting *r, int rc, const char *why, uint64_t u,
                        bool nonzero, struct problem *p) {
    if (rc == -ENOMEM)
        return rc;
    if (rc < 0)
        return bad(p, SAY_COLON, "%s", why);
    return check_range(r, u, nonzero, p);
}

/* A flag with a unit: a whole number of them. */
static int parse_in_units(const struct np_setting *r, const char *v, uint64_t *out,
                          struct problem *p) {
    uint64_t n;
    int rc = np_parse_u64(v, 0, UINT64_MAX, &n);
    if (rc == -EINVAL)
        return bad(p, SAY_IS, "not a whole number");
    if (rc < 0 || n > UINT64_MAX / r->flag_unit)
        return bad(p, SAY_COLON, "too large");
    *out = n * r->flag_unit;
    return check_range(r, *out, n != 0, p);
}

static int parse_uint(const struct np_setting *r, const char *v, uint64_t *out, struct problem *p) {
    if (r->auto_ok && strcasecmp(v, "auto") == 0) {
        *out = NP_SETTING_AUTO;
        return 0;
    }
    int rc = np_parse_u64(v, r->min, r->max, out);
    if (rc == -EINVAL)
        return bad(p, SAY_IS, "not a whole number");
    if (rc < 0)
        return bad(p, SAY_IS, "out of range");
    if (r->multiple && *out % r->multiple)
        return bad(p, SAY_IS, "not a multiple of %llu", (unsigned long long)r->multiple);
    return 0;
}

static int parse_percent_in_range(const struct np_setting *r, const char *v, double *out,
                                  struct problem *p) {
    int rc = parse_percent(v, out);
    if (rc == -ENOMEM)
        return rc;
    if (rc < 0)
        return bad(p, SAY_IS, "not a percentage");
    if (*out < (double)r->min || *out > (double)r->max)
        return bad(p, SAY_IS, "out of range");
    return 0;
}

static int parse_seconds(const char *v, double *out, struct problem *p) {
    if (np_parse_seconds(v, out) < 0)
        return bad(p, SAY_IS, "not a number of seconds");
    if (*out <= 0)
        return bad(p, SAY_IS, "not positive");
    return 0;
}

static int parse_enum(const struct np_setting *r, const char *v, int *out, struct problem *p) {
    for (int i = 0; r->names[i]; i++) {
        if (strcasecmp(v, r->names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    return bad(p, SAY_OF, "unknown value");
}

/* The configuration's paths are absolute: a service has no working directory of its own. */
static int parse_path(const struct np_setting *r, enum np_side side, const char *v,
                      struct problem *p) {
    if (!*v)
        return 0; /* empty_ok */
    if (side == NP_SIDE_CONFIG && *v != '/')
        return bad(p, SAY_IS, "not an absolute path");
    if (r->max_len && strlen(v) >= r->max_len)
        return bad(p, SAY_BARE, "path too long, %zu bytes", strlen(v));
    return 0;
}

static int parse_formats(const char *v, uint64_t *out, struct problem *p) {
    char why[256];
    unsigned bits;
    if (np_formats_parse(v, &bits, why, sizeof(why)) < 0) {
        p->listed = true;
        return bad(p, SAY_BARE, "%s", why);
    }
    *out = bits;
    return 0;
}

static int parse_value(const struct np_setting *r, enum np_side side, const char *v,
                       union np_value *out, struct problem *p) {
    const char *why = "not a value";
    bool nonzero = true;
    int rc;

    if (!*v && r->type != NP_V_TEXT && r->type != NP_V_GLOBS && !r->empty_ok)
        return bad(p, SAY_BARE, "empty value");
    if (side == NP_SIDE_RECORD && r->flag_unit)
        return parse_in_units(r, v, &out->u, p);
    switch (r->type) {
    case NP_V_BOOL:
        return parse_bool(v, &out->b) < 0 ? bad(p, SAY_IS, "not a boolean") : 0;
    case NP_V_UINT:
        return parse_uint(r, v, &out->u, p);
    case NP_V_SIZE:
        rc = parse_size(v, &out->u, &why);
        return check_number(r, rc, why, out->u, out->u != 0, p); /* 0 where zero_ok */
    case NP_V_DURATION:
        p->units = true;
        rc = parse_duration(v, &out->u, &nonzero, &why);
        return check_number(r, rc, why, out->u, nonzero, p);
    case NP_V_SECONDS:
        return parse_seconds(v, &out->d, p);
    case NP_V_PERCENT:
        return parse_percent_in_range(r, v, &out->d, p);
    case NP_V_ENUM:
        return parse_enum(r, v, &out->e, p);
    case NP_V_PATH:
        out->s = v;
        return parse_path(r, side, v, p);
    case NP_V_TEXT:
        out->s = v;
        return 0;
    case NP_V_FORMATS:
        return parse_formats(v, &out->u, p);
    case NP_V_GLOBS:
        return parse_globs(v, &out->g);
    }
    return -EINVAL;
}

/* record: "invalid --FLAG 'V': why (expected ...)", or "--FLAG: why" when
 * the why names the bad part of a list; the configuration: "KEY: <why,
 * with 'V' where it reads best> (expected ...)". */
static void say(const struct np_setting *r, enum np_side side, const char *v,
                const struct problem *p, char *msg, size_t size) {
    const char *allowed = side == NP_SIDE_RECORD && r->flag_allowed ? r->flag_allowed : r->allowed;
    bool units = p->units && side == NP_SIDE_CONFIG && p->shape != SAY_BARE;
    char expected[384] = "";

    if (allowed && !p->listed)
        snprintf(expected, sizeof(expected), " (expected %s%s)", allowed,
                 units ? "; units ms, s, m, h, d, plain = seconds" : "");
    if (side == NP_SIDE_RECORD) {
        if (p->listed) /* the why names the bad element of the list */
            snprintf(msg, size, "--%s: %s", r->flag, p->why);
        else
            snprintf(msg, size, "invalid --%s '%.*s': %s%s", r->flag, SHOW, v, p->why, expected);
        return;
    }
    switch (p->shape) {
    case SAY_IS:
        snprintf(msg, size, "%s: '%.*s' is %s%s", r->key, SHOW, v, p->why, expected);
        return;
    case SAY_COLON:
        snprintf(msg, size, "%s: '%.*s': %s%s", r->key, SHOW, v, p->why, expected);
        return;
    case SAY_OF:
        snprintf(msg, size, "%s: %s '%.*s'%s", r->key, p->why, SHOW, v, expected);
        return;
    case SAY_BARE:
        snprintf(msg, size, "%s: %s%s", r->key, p->why, expected);
        return;
    }
}

int np_setting_parse(const struct np_setting *row, enum np_side side, const char *text,
                     union np_value *out, char *msg, size_t size) {
    struct problem p = {0};
    if (!text)
        text = row->flag_value;
    int rc = parse_value(row, side, text, out, &p);
    if (rc == -EINVAL && msg && size)
        say(row, side, text, &p, msg, size);
    return rc;
}

/* ---- where a side keeps a value ------------------------------------------ */

static void *field_at(const struct np_setting_field *f, const void *base) {
    return (char *)base + f->off;
}

static size_t field_size(enum np_store how) {
    switch (how) {
    case NP_STORE_BOOL:
    case NP_STORE_NOT:
        return sizeof(bool);
    case NP_STORE_INT:
        return sizeof(int);
    case NP_STORE_LONG:
        return sizeof(long);
    case NP_STORE_U64:
        return sizeof(uint64_t);
    case NP_STORE_UNSIGNED:
        return sizeof(unsigned);
    case NP_STORE_DOUBLE:
        return sizeof(double);
    case NP_STORE_BORROW:
    case NP_STORE_STR:
        return sizeof(char *);
    case NP_STORE_GLOBS:
        return sizeof(struct np_globs);
    case NP_STORE_NONE:
        break;
    }
    return 0;
}

static uint64_t record_unit(const struct np_setting *r) {
    return r->flag_unit ? r->flag_unit : 1;
}

/* Stores v (taking a list's memory) in the field at base. */
static int store(const struct np_setting *r, const struct np_setting_field *f, void *base,
                 union np_value *v) {
    void *at = field_at(f, base);
    char *copy = NULL;

    switch (f->store) {
    case NP_STORE_BOOL:
    case NP_STORE_NOT:
        *(bool *)at = f->store == NP_STORE_NOT ? !v->b : v->b;
        return 0;
    case NP_STORE_INT:
        *(int *)at = v->e;
        return 0;
    case NP_STORE_LONG:
        *(long *)at = (long)(v->u / record_unit(r));
        return 0;
    case NP_STORE_U64:
        *(uint64_t *)at = v->u;
        return 0;
    case NP_STORE_UNSIGNED:
        *(unsigned *)at = (unsigned)v->u;
        return 0;
    case NP_STORE_DOUBLE:
        *(double *)at = v->d;
        return 0;
    case NP_STORE_BORROW:
        *(const char **)at = v->s;
        return 0;
    case NP_STORE_STR:
        if ((*v->s || !r->empty_ok) && !(copy = strdup(v->s)))
            return -ENOMEM;
        free(*(char **)at);
        *(char **)at = copy;
        return 0;
    case NP_STORE_GLOBS:
        np_globs_free(at);
        *(struct np_globs *)at = v->g;
        v->g = (struct np_globs){0};
        return 0;
    case NP_STORE_NONE:
        break;
    }
    return 0;
}

/* The value in the field at base (a list and a string stay the field's). */
static union np_value load(const struct np_setting *r, const struct np_setting_field *f,
                           const void *base) {
    const void *at = field_at(f, base);
    union np_value v = {0};

    switch (f->store) {
    case NP_STORE_BOOL:
    case NP_STORE_NOT:
        v.b = f->store == NP_STORE_NOT ? !*(const bool *)at : *(const bool *)at;
        break;
    case NP_STORE_INT:
        v.e = *(const int *)at;
        break;
    case NP_STORE_LONG:
        v.u = (uint64_t) * (const long *)at * record_unit(r);
        break;
    case NP_STORE_U64:
        v.u = *(const uint64_t *)at;
        break;
    case NP_STORE_UNSIGNED:
        v.u = *(const unsigned *)at;
        break;
    case NP_STORE_DOUBLE:
        v.d = *(const double *)at;
        break;
    case NP_STORE_BORROW:
    case NP_STORE_STR:
        v.s = *(const char *const *)at;
        break;
    case NP_STORE_GLOBS:
        v.g = *(const struct np_globs *)at;
        break;
    case NP_STORE_NONE:
        break;
    }
    return v;
}

int np_setting_set(const struct np_setting *row, enum np_side side, const char *text, void *base,
                   char *msg, size_t size) {
    union np_value v;
    int rc = np_setting_parse(row, side, text, &v, msg, size);
    if (rc < 0)
        return rc;
    rc = store(row, np_setting_field(row, side), base, &v);
    if (row->type == NP_V_GLOBS)
        np_globs_free(&v.g); /* what store did not take */
    return rc;
}

int np_settings_defaults(enum np_side side, void *base) {
    for (size_t i = 0; i < np_settings_count; i++) {
        const struct np_setting *r = &np_settings_table[i];
        if (!r->def || np_setting_field(r, side)->store == NP_STORE_NONE)
            continue;
        char msg[512];
        /* a default is written as the configuration writes it */
        union np_value v;
        int rc = np_setting_parse(r, NP_SIDE_CONFIG, r->def, &v, msg, sizeof(msg));
        if (rc == 0)
            rc = store(r, np_setting_field(r, side), base, &v);
        if (rc < 0)
            return rc;
    }
    return 0;
}

void np_settings_free(enum np_side side, void *base) {
    for (size_t i = 0; i < np_settings_count; i++) {
        const struct np_setting_field *f = np_setting_field(&np_settings_table[i], side);
        void *at = field_at(f, base);
        if (f->store == NP_STORE_STR) {
            free(*(char **)at);
            *(char **)at = NULL;
        } else if (f->store == NP_STORE_GLOBS) {
            np_globs_free(at);
        }
    }
}

void np_settings_from_config(const struct np_daemon_config *c, struct np_settings *s) {
    for (size_t i = 0; i < np_settings_count; i++) {
        const struct np_setting *r = &np_settings_table[i];
        if (r->record.store == NP_STORE_NONE || r->config.store == NP_STORE_NONE)
            continue;
        union np_value v = load(r, &r->config, c);
        store(r, &r->record, s, &v); /* record's strings are borrowed: no allocation */
    }
}

static bool same_text(const char *a, const char *b) {
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

bool np_setting_same(const struct np_setting *row, const struct np_daemon_config *a,
                     const struct np_daemon_config *b) {
    const struct np_setting_field *f = &row->config;
    union np_value x = load(row, f, a), y = load(row, f, b);
    if (f->store == NP_STORE_STR)
        return same_text(x.s, y.s);
    return memcmp(field_at(f, a), field_at(f, b), field_size(f->store)) == 0;
}

void np_setting_swap(const struct np_setting *row, struct np_daemon_config *a,
                     struct np_daemon_config *b) {
    const struct np_setting_field *f = &row->config;
    unsigned char tmp[sizeof(struct np_globs)]; /* the largest field */
    size_t n = field_size(f->store);
    memcpy(tmp, field_at(f, a), n);
    memcpy(field_at(f, a), field_at(f, b), n);
    memcpy(field_at(f, b), tmp, n);
}

/* ---- help --------------------------------------------------------------- */

/* The default as the side writes it ("" when it has none to show). */
static void default_text(const struct np_setting *r, enum np_side side, char *out, size_t size) {
    union np_value v;
    *out = '\0';
    if (!r->def || (side == NP_SIDE_RECORD && !r->metavar))
        return;
    if (side == NP_SIDE_RECORD && r->flag_unit &&
        np_setting_parse(r, NP_SIDE_CONFIG, r->def, &v, NULL, 0) == 0)
        snprintf(out, size, "%llu", (unsigned long long)(v.u / r->flag_unit));
    else
        snprintf(out, size, "%s", r->def);
}

/* "  HEAD   help line 1\n   ...   help line n (default D)\n" */
static void print_entry(FILE *f, const char *head, const char *help, const char *def) {
    int col = fprintf(f, "  %s", head);
    const char *line = help ? help : "";
    for (;;) {
        size_t len = strcspn(line, "\n");
        if (col >= HELP_COLUMN) {
            fputc('\n', f);
            col = 0;
        }
        col += fprintf(f, "%*s%.*s", HELP_COLUMN - col, "", (int)len, line);
        if (!line[len])
            break;
        line += len + 1;
        fputc('\n', f);
        col = 0;
    }
    if (*def && col + (int)strlen(def) + 11 > 80) {
        fputc('\n', f);
        col = fprintf(f, "%*s(default %s)", HELP_COLUMN, "", def);
    } else if (*def) {
        fprintf(f, " (default %s)", def);
    }
    fputc('\n', f);
}

void np_settings_usage(enum np_side side, FILE *f) {
    for (size_t i = 0; i < np_settings_count; i++) {
        const struct np_setting *r = &np_settings_table[i];
        char head[64], def[128];
        if (side == NP_SIDE_RECORD && r->flag)
            snprintf(head, sizeof(head), "%c%c%c --%s%s%s", r->short_flag ? '-' : ' ',
                     r->short_flag ? r->short_flag : ' ', r->short_flag ? ',' : ' ', r->flag,
                     r->metavar ? " " : "", r->metavar ? r->metavar : "");
        else if (side == NP_SIDE_CONFIG && r->key)
            snprintf(head, sizeof(head), "%s", r->key);
        else
            continue;
        default_text(r, side, def, sizeof(def));
        print_entry(f, head, side == NP_SIDE_RECORD && r->flag_help ? r->flag_help : r->help, def);
    }
}
