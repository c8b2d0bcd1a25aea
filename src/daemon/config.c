/* config.c - the daemon's configuration file: defaults, the `key = value`
 * parser with its per-key checks and messages, and the process filter
 * (see config.h; the keys are documented in docs/daemon.md and
 * packaging/ncclprobe.conf). */
#define _GNU_SOURCE
#include "daemon/config.h"
#include "writers/formats.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "ncclprobe/events.h"
#include "ncclprobe/gpu_wire.h"

#define SEC_MS 1000ull
#define MIN_MS (60 * SEC_MS)
#define HOUR_MS (60 * MIN_MS)
#define DAY_MS (24 * HOUR_MS)
#define MAX_DURATION_MS (36500 * DAY_MS) /* in ns still fits a uint64_t */
#define MIB (1ull << 20)
#define GIB (1ull << 30)
#define SUN_PATH_MAX 108 /* sizeof(((struct sockaddr_un *)0)->sun_path) */
#define SHOW 200         /* at most this much of a value is quoted in a message */

enum vtype {
    V_FORMATS,  /* a --format list (writers/formats.h) */
    V_PATH,     /* absolute path */
    V_OPT_PATH, /* absolute path, or empty: none */
    V_BOOL,
    V_DURATION, /* milliseconds in [min, max], or 0 when zero_ok */
    V_SIZE,     /* bytes in [min, max], a power of two when pow2 */
    V_GLOBS,
    V_PERCENT, /* [min, max] */
    V_UINT,    /* [min, max], a multiple of `multiple` when set */
    V_ENUM,    /* one of names[] (case-insensitive) */
};

enum key_id {
    K_OUTPUT_DIR,
    K_CTL_SOCKET,
    K_CUPTI_SOCKET,
    K_GPU,
    K_GPU_TIMEOUT,
    K_FLAG_FILE,
    K_AGGREGATE,
    K_AGGREGATE_INTERVAL,
    K_MAX_WINDOW,
    K_INCLUDE_COMM,
    K_EXCLUDE_COMM,
    K_INCLUDE_EXE,
    K_EXCLUDE_EXE,
    K_INCLUDE_CGROUP,
    K_EXCLUDE_CGROUP,
    K_INCLUDE_CONTAINER,
    K_EXCLUDE_CONTAINER,
    K_MAX_OUTPUT_SIZE,
    K_MAX_OUTPUT_AGE,
    K_CACHE_SIZE,
    K_CPU_BUDGET,
    K_RATE_LIMIT,
    K_RING_BUFFER,
    K_UNWIND,
    K_STACK_BYTES,
    K_PYTHON,
    K_PYTHON_DEPTH,
    K_LOG_LEVEL,
    K_FORMATS,
    K_COUNT
};

struct key_def {
    const char *name;
    enum vtype type;
    uint64_t min, max;
    bool zero_ok, pow2;
    uint64_t multiple;
    size_t max_len;           /* V_PATH: the path's length is below this; 0: no limit */
    const char *const *names; /* V_ENUM: NULL-terminated; the index is the value */
    const char *allowed;      /* the "(...)" of every message about this key */
};

static const char *const unwind_names[] = {"auto", "dwarf", "fp", NULL};
static const char *const python_names[] = {"merge", "raw", "off", NULL};
static const char *const log_names[] = {"error", "warn", "info", "debug", NULL};

#define GLOBS(key, name) [key] = {name, V_GLOBS, .allowed = "whitespace-separated glob patterns"}

static const struct key_def keys[K_COUNT] = {
    [K_OUTPUT_DIR] = {"output_dir", V_PATH, .allowed = "an absolute path"},
    [K_CTL_SOCKET] = {"ctl_socket", V_PATH, .max_len = SUN_PATH_MAX,
                      .allowed = "an absolute path shorter than 108 bytes"},
    [K_CUPTI_SOCKET] = {"cupti_socket", V_PATH, .max_len = SUN_PATH_MAX,
                        .allowed = "an absolute path shorter than 108 bytes"},
    [K_GPU] = {"gpu", V_BOOL, .allowed = "yes, no, true, false, on, off, 1 or 0"},
    [K_GPU_TIMEOUT] = {"gpu_timeout", V_DURATION, 1, HOUR_MS,
                       .allowed = "a duration from 1ms to 1h, e.g. 5s or 500ms"},
    [K_FLAG_FILE] = {"flag_file", V_OPT_PATH, .allowed = "an absolute path, or empty for none"},
    [K_AGGREGATE] = {"aggregate", V_BOOL, .allowed = "yes, no, true, false, on, off, 1 or 0"},
    [K_AGGREGATE_INTERVAL] = {"aggregate_interval", V_DURATION, 10 * SEC_MS, MAX_DURATION_MS,
                              .allowed = "a duration of at least 10s, e.g. 10m"},
    [K_MAX_WINDOW] = {"max_window", V_DURATION, SEC_MS, MAX_DURATION_MS,
                      .allowed = "a duration of at least 1s, e.g. 1h"},
    GLOBS(K_INCLUDE_COMM, "include_comm"),
    GLOBS(K_EXCLUDE_COMM, "exclude_comm"),
    GLOBS(K_INCLUDE_EXE, "include_exe"),
    GLOBS(K_EXCLUDE_EXE, "exclude_exe"),
    GLOBS(K_INCLUDE_CGROUP, "include_cgroup"),
    GLOBS(K_EXCLUDE_CGROUP, "exclude_cgroup"),
    GLOBS(K_INCLUDE_CONTAINER, "include_container"),
    GLOBS(K_EXCLUDE_CONTAINER, "exclude_container"),
    [K_MAX_OUTPUT_SIZE] = {"max_output_size", V_SIZE, MIB, UINT64_MAX,
                           .allowed = "a size of at least 1M, e.g. 10G; K, M, G, T are binary"},
    [K_MAX_OUTPUT_AGE] = {"max_output_age", V_DURATION, MIN_MS, MAX_DURATION_MS, .zero_ok = true,
                          .allowed = "0 for no limit, or a duration of at least 1m, e.g. 7d"},
    [K_CACHE_SIZE] = {"cache_size", V_SIZE, MIB, UINT64_MAX,
                      .allowed = "a size of at least 1M, e.g. 256M; K, M, G, T are binary"},
    [K_CPU_BUDGET] = {"cpu_budget", V_PERCENT, 1, 100,
                      .allowed = "a percentage of one core from 1 to 100, e.g. 10 or 10%"},
    [K_RATE_LIMIT] = {"rate_limit", V_UINT, 1, 1000000000,
                      .allowed = "launches per second, an integer from 1 to 1000000000"},
    [K_RING_BUFFER] = {"ring_buffer", V_SIZE, MIB, GIB, .pow2 = true,
                       .allowed = "a power of two from 1M to 1G, e.g. 64M"},
    [K_UNWIND] = {"unwind", V_ENUM, .names = unwind_names, .allowed = "auto, dwarf or fp"},
    [K_STACK_BYTES] = {"stack_bytes", V_UINT, 512, NP_MAX_STACK_BYTES, .multiple = 8,
                       .allowed = "a multiple of 8 from 512 to 65536"},
    [K_PYTHON] = {"python", V_ENUM, .names = python_names, .allowed = "merge, raw or off"},
    [K_PYTHON_DEPTH] = {"python_depth", V_UINT, 1, NP_PY_MAX_FRAMES,
                        .allowed = "an integer from 1 to 1024"},
    [K_LOG_LEVEL] = {"log_level", V_ENUM, .names = log_names,
                     .allowed = "error, warn, info or debug"},
    [K_FORMATS] = {"formats", V_FORMATS, .allowed = NP_FORMATS_HELP},
};

/* ---- defaults and freeing ---------------------------------------------- */

static void globs_free(struct np_globs *g) {
    for (size_t i = 0; i < g->n; i++)
        free(g->items[i]);
    free(g->items);
    g->items = NULL;
    g->n = 0;
}

void np_config_free(struct np_daemon_config *c) {
    free(c->output_dir);
    free(c->ctl_socket);
    free(c->cupti_socket);
    free(c->flag_file);
    globs_free(&c->include_comm);
    globs_free(&c->exclude_comm);
    globs_free(&c->include_exe);
    globs_free(&c->exclude_exe);
    globs_free(&c->include_cgroup);
    globs_free(&c->exclude_cgroup);
    globs_free(&c->include_container);
    globs_free(&c->exclude_container);
    memset(c, 0, sizeof(*c));
}

int np_config_defaults(struct np_daemon_config *c) {
    memset(c, 0, sizeof(*c));
    c->output_dir = strdup("/var/lib/ncclprobe");
    c->ctl_socket = strdup("/run/ncclprobe/ctl.sock");
    c->cupti_socket = strdup(NP_WIRE_DEFAULT_SOCKET);
    c->flag_file = NULL;
    c->gpu = true;
    c->gpu_timeout_ms = 5 * SEC_MS;
    c->aggregate = true;
    c->aggregate_interval_ms = 10 * MIN_MS;
    c->max_window_ms = HOUR_MS;
    c->max_output_bytes = 10 * GIB;
    c->max_output_age_ms = 7 * DAY_MS;
    c->cache_bytes = 256 * MIB;
    c->cpu_budget_percent = 10;
    c->rate_limit = 2000;
    c->ring_buffer_bytes = 64 * MIB;
    c->unwind = NP_CFG_UNWIND_AUTO;
    c->stack_bytes = 16384;
    c->python = NP_PYTHON_MERGE;
    c->python_depth = 128;
    c->log_level = NP_LOG_INFO;
    c->formats = NP_FORMATS_DEFAULT;
    if (!c->output_dir || !c->ctl_socket || !c->cupti_socket) {
        np_config_free(c);
        return -ENOMEM;
    }
    return 0;
}

/* ---- value parsers ------------------------------------------------------ */

/* Where a message goes: "FILE:LINE: " starts each. */
struct parser {
    const char *file;
    unsigned line;
    char *err;
    size_t errlen;
};

static int fail(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parser *ps, const char *fmt, ...) {
    if (ps->err && ps->errlen) {
        int n = snprintf(ps->err, ps->errlen, "%s:%u: ", ps->file, ps->line);
        if (n >= 0 && (size_t)n < ps->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -EINVAL;
}

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

/* "90", "1.5s", "500ms", "10m", "2h", "7d" -> milliseconds (a fraction of a
 * millisecond is dropped). *nonzero: the text is not a zero. */
static int parse_duration(const char *v, uint64_t *out, bool *nonzero, const char **why) {
    static const struct {
        const char *suffix;
        uint64_t ms;
    } units[] = {{"", SEC_MS},  {"ms", 1},      {"s", SEC_MS},
                 {"m", MIN_MS}, {"h", HOUR_MS}, {"d", DAY_MS}};
    const char *p = v;
    uint64_t whole = 0, frac = 0, scale = 1;
    bool any = false;

    *why = "not a duration";
    int rc = leading_u64(&p, &whole);
    if (rc == -ENOMEM)
        return rc;
    if (rc == -EINVAL)
        return -EINVAL;
    bool whole_overflow = rc == -ERANGE;
    for (const char *d = v; d < p; d++)
        any |= *d != '0';
    if (*p == '.') {
        p++;
        if (!is_digit(*p)) {
            *why = "no digit after the decimal point";
            return -EINVAL;
        }
        for (; is_digit(*p); p++) {
            any |= *p != '0';
            if (scale < 1000000000000000000ull) { /* 18 digits are plenty */
                frac = frac * 10 + (uint64_t)(*p - '0');
                scale *= 10;
            }
        }
    }
    size_t u = 0;
    while (u < NP_ARRAY_SIZE(units) && strcmp(p, units[u].suffix) != 0)
        u++;
    if (u == NP_ARRAY_SIZE(units)) {
        *why = "unknown unit";
        return -EINVAL;
    }
    *nonzero = any;
    uint64_t unit = units[u].ms;
    if (whole_overflow || whole > UINT64_MAX / unit) {
        *why = "too large";
        return -ERANGE;
    }
    uint64_t ms = whole * unit;
    uint64_t frac_ms = (uint64_t)((unsigned __int128)frac * unit / scale); /* < unit */
    if (ms > UINT64_MAX - frac_ms) {
        *why = "too large";
        return -ERANGE;
    }
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
    size_t len = strlen(v);

    if (len && v[len - 1] == '%')
        len--;
    if (!len || !is_digit(*p))
        return -EINVAL;
    while (is_digit(*p))
        p++;
    if (*p == '.') {
        p++;
        if (!is_digit(*p))
            return -EINVAL;
        while (is_digit(*p))
            p++;
    }
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
        if (strcasecmp(v, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -EINVAL;
}

static int parse_globs(const char *v, struct np_globs *out) {
    struct np_globs g = {0};
    const char *p = v;

    for (;;) {
        while (is_blank(*p))
            p++;
        if (!*p)
            break;
        const char *s = p;
        while (*p && !is_blank(*p))
            p++;
        char **items = realloc(g.items, (g.n + 1) * sizeof(*items));
        if (!items) {
            globs_free(&g);
            return -ENOMEM;
        }
        g.items = items;
        if (!(g.items[g.n] = strndup(s, (size_t)(p - s)))) {
            globs_free(&g);
            return -ENOMEM;
        }
        g.n++;
    }
    *out = g;
    return 0;
}

/* A parsed value, before it is stored in its field. */
union value {
    char *s; /* NULL: empty V_OPT_PATH */
    bool b;
    uint64_t u;
    double d;
    int e;
    struct np_globs g;
};

/* Checks value v (unquoted) of key k against its type; fills *out. */
static int parse_value(struct parser *ps, const struct key_def *k, const char *v,
                       union value *out) {
    const char *why = NULL;
    bool nonzero = true;
    int rc;

    if (!*v && k->type != V_GLOBS && k->type != V_OPT_PATH)
        return fail(ps, "%s: empty value (expected %s)", k->name, k->allowed);
    switch (k->type) {
    case V_PATH:
    case V_OPT_PATH:
        if (!*v) {
            out->s = NULL;
            return 0;
        }
        if (*v != '/')
            return fail(ps, "%s: '%.*s' is not an absolute path (expected %s)", k->name, SHOW, v,
                        k->allowed);
        if (k->max_len && strlen(v) >= k->max_len)
            return fail(ps, "%s: path too long, %zu bytes (expected %s)", k->name, strlen(v),
                        k->allowed);
        return (out->s = strdup(v)) ? 0 : -ENOMEM;
    case V_BOOL:
        if (parse_bool(v, &out->b) < 0)
            return fail(ps, "%s: '%.*s' is not a boolean (expected %s)", k->name, SHOW, v,
                        k->allowed);
        return 0;
    case V_DURATION:
        rc = parse_duration(v, &out->u, &nonzero, &why);
        if (rc == -ENOMEM)
            return rc;
        if (rc == 0 && out->u == 0 && !nonzero && k->zero_ok)
            return 0;
        if (rc == 0 && (out->u < k->min || (nonzero && out->u == 0)))
            why = "too small";
        else if (rc == 0 && out->u > k->max)
            why = "too large";
        else if (rc == 0)
            return 0;
        return fail(ps, "%s: '%.*s': %s (expected %s; units ms, s, m, h, d, plain = seconds)",
                    k->name, SHOW, v, why, k->allowed);
    case V_SIZE:
        rc = parse_size(v, &out->u, &why);
        if (rc == -ENOMEM)
            return rc;
        if (rc == 0 && out->u < k->min)
            why = "too small";
        else if (rc == 0 && out->u > k->max)
            why = "too large";
        else if (rc == 0 && k->pow2 && (out->u & (out->u - 1)))
            why = "not a power of two";
        else if (rc == 0)
            return 0;
        return fail(ps, "%s: '%.*s': %s (expected %s)", k->name, SHOW, v, why, k->allowed);
    case V_GLOBS:
        return parse_globs(v, &out->g);
    case V_FORMATS: {
        char err[256];
        unsigned bits;
        if (np_formats_parse(v, &bits, err, sizeof(err)) < 0)
            return fail(ps, "%s: %s", k->name, err);
        out->u = bits;
        return 0;
    }
    case V_PERCENT:
        rc = parse_percent(v, &out->d);
        if (rc == -ENOMEM)
            return rc;
        if (rc < 0)
            return fail(ps, "%s: '%.*s' is not a percentage (expected %s)", k->name, SHOW, v,
                        k->allowed);
        if (out->d < (double)k->min || out->d > (double)k->max)
            return fail(ps, "%s: '%.*s' is out of range (expected %s)", k->name, SHOW, v,
                        k->allowed);
        return 0;
    case V_UINT:
        rc = np_parse_u64(v, k->min, k->max, &out->u);
        if (rc == -EINVAL)
            return fail(ps, "%s: '%.*s' is not a whole number (expected %s)", k->name, SHOW, v,
                        k->allowed);
        if (rc < 0)
            return fail(ps, "%s: '%.*s' is out of range (expected %s)", k->name, SHOW, v,
                        k->allowed);
        if (k->multiple && out->u % k->multiple)
            return fail(ps, "%s: '%.*s' is not a multiple of %llu (expected %s)", k->name, SHOW, v,
                        (unsigned long long)k->multiple, k->allowed);
        return 0;
    case V_ENUM:
        for (int i = 0; k->names[i]; i++) {
            if (strcasecmp(v, k->names[i]) == 0) {
                out->e = i;
                return 0;
            }
        }
        return fail(ps, "%s: unknown value '%.*s' (expected %s)", k->name, SHOW, v, k->allowed);
    }
    return -EINVAL;
}

static void replace_str(char **field, char *s) {
    free(*field);
    *field = s;
}

static void replace_globs(struct np_globs *field, struct np_globs g) {
    globs_free(field);
    *field = g;
}

/* Stores a checked value in its field of c (taking its memory). */
static void store(struct np_daemon_config *c, enum key_id id, union value *v) {
    switch (id) {
    case K_OUTPUT_DIR:
        replace_str(&c->output_dir, v->s);
        return;
    case K_CTL_SOCKET:
        replace_str(&c->ctl_socket, v->s);
        return;
    case K_CUPTI_SOCKET:
        replace_str(&c->cupti_socket, v->s);
        return;
    case K_FLAG_FILE:
        replace_str(&c->flag_file, v->s);
        return;
    case K_GPU:
        c->gpu = v->b;
        return;
    case K_AGGREGATE:
        c->aggregate = v->b;
        return;
    case K_GPU_TIMEOUT:
        c->gpu_timeout_ms = v->u;
        return;
    case K_AGGREGATE_INTERVAL:
        c->aggregate_interval_ms = v->u;
        return;
    case K_MAX_WINDOW:
        c->max_window_ms = v->u;
        return;
    case K_MAX_OUTPUT_AGE:
        c->max_output_age_ms = v->u;
        return;
    case K_INCLUDE_COMM:
        replace_globs(&c->include_comm, v->g);
        return;
    case K_EXCLUDE_COMM:
        replace_globs(&c->exclude_comm, v->g);
        return;
    case K_INCLUDE_EXE:
        replace_globs(&c->include_exe, v->g);
        return;
    case K_EXCLUDE_EXE:
        replace_globs(&c->exclude_exe, v->g);
        return;
    case K_INCLUDE_CGROUP:
        replace_globs(&c->include_cgroup, v->g);
        return;
    case K_EXCLUDE_CGROUP:
        replace_globs(&c->exclude_cgroup, v->g);
        return;
    case K_INCLUDE_CONTAINER:
        replace_globs(&c->include_container, v->g);
        return;
    case K_EXCLUDE_CONTAINER:
        replace_globs(&c->exclude_container, v->g);
        return;
    case K_MAX_OUTPUT_SIZE:
        c->max_output_bytes = v->u;
        return;
    case K_CACHE_SIZE:
        c->cache_bytes = v->u;
        return;
    case K_RING_BUFFER:
        c->ring_buffer_bytes = v->u;
        return;
    case K_CPU_BUDGET:
        c->cpu_budget_percent = v->d;
        return;
    case K_RATE_LIMIT:
        c->rate_limit = v->u;
        return;
    case K_STACK_BYTES:
        c->stack_bytes = (uint32_t)v->u;
        return;
    case K_PYTHON_DEPTH:
        c->python_depth = (uint32_t)v->u;
        return;
    case K_UNWIND:
        c->unwind = v->e == 1   ? NP_CFG_UNWIND_DWARF
                    : v->e == 2 ? NP_CFG_UNWIND_FP
                                : NP_CFG_UNWIND_AUTO;
        return;
    case K_PYTHON:
        c->python = v->e == 1 ? NP_PYTHON_RAW : v->e == 2 ? NP_PYTHON_OFF : NP_PYTHON_MERGE;
        return;
    case K_LOG_LEVEL:
        c->log_level = (enum np_log_level)v->e; /* log_names is in enum order */
        return;
    case K_FORMATS:
        c->formats = (unsigned)v->u;
        return;
    case K_COUNT:
        break;
    }
}

/* ---- lines --------------------------------------------------------------- */

/* The value after '=' (p..e, blanks skipped): unquoted into a new string. */
static int line_value(struct parser *ps, const char *key, const char *p, const char *e,
                      char **out) {
    if (p < e && *p == '"') {
        struct np_str s;
        np_str_init(&s);
        np_str_append(&s, ""); /* "" is a value too */
        for (p++;; p++) {
            if (p == e) {
                np_str_free(&s);
                return fail(ps, "%s: unterminated quoted value (a closing '\"' is missing)", key);
            }
            if (*p == '"')
                break;
            if (*p == '\\') {
                if (p + 1 == e || (p[1] != '"' && p[1] != '\\')) {
                    np_str_free(&s);
                    return fail(ps, "%s: unknown escape in quoted value (only \\\" and \\\\)", key);
                }
                p++;
            }
            np_str_append_n(&s, p, 1);
        }
        for (p++; p < e && is_blank(*p); p++)
            ;
        if (p < e && *p != '#') {
            np_str_free(&s);
            return fail(ps, "%s: text after the closing quote (only a # comment may follow)", key);
        }
        if (s.failed) {
            np_str_free(&s);
            return -ENOMEM;
        }
        *out = s.buf;
        return 0;
    }
    /* unquoted: up to a '#' that follows a blank, blanks trimmed */
    const char *end = p;
    while (end < e && !(*end == '#' && is_blank(end[-1]))) /* p[-1] is '=' or a blank */
        end++;
    while (end > p && is_blank(end[-1]))
        end--;
    if (memchr(p, '"', (size_t)(end - p)))
        return fail(ps, "%s: '\"' inside an unquoted value (quote the whole value: \"...\")", key);
    return (*out = strndup(p, (size_t)(end - p))) ? 0 : -ENOMEM;
}

static const struct key_def *find_key(const char *name, size_t len) {
    for (size_t i = 0; i < K_COUNT; i++)
        if (strlen(keys[i].name) == len && memcmp(keys[i].name, name, len) == 0)
            return &keys[i];
    return NULL;
}

/* One line (s..e, no line end) into c; seen[] holds the line each key was set on. */
static int parse_line(struct parser *ps, const char *s, const char *e, struct np_daemon_config *c,
                      unsigned *seen) {
    const char *p = s;

    for (const char *q = s; q < e; q++) {
        unsigned char ch = (unsigned char)*q;
        if (ch == '\0')
            return fail(ps, "NUL byte at column %zu (a configuration file is text)",
                        (size_t)(q - s) + 1);
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return fail(ps, "control character 0x%02x at column %zu (only text and tabs)", ch,
                        (size_t)(q - s) + 1);
    }
    while (p < e && is_blank(*p))
        p++;
    if (p == e || *p == '#')
        return 0;

    const char *eq = p;
    while (eq < e && *eq != '=' && !(*eq == '#' && is_blank(eq[-1])))
        eq++;
    if (eq == e || *eq != '=') {
        const char *w = p;
        while (w < e && !is_blank(*w) && *w != '#')
            w++;
        return fail(ps, "%.*s: not a 'key = value' line (no '='; '#' starts a comment)",
                    (int)(w - p > 64 ? 64 : w - p), p);
    }
    const char *key_end = eq;
    while (key_end > p && is_blank(key_end[-1]))
        key_end--;
    if (key_end == p)
        return fail(ps, "missing key before '=' (lines are 'key = value')");
    int key_len = (int)(key_end - p > 64 ? 64 : key_end - p);
    const struct key_def *k = find_key(p, (size_t)(key_end - p));
    if (!k)
        return fail(ps,
                    "%.*s: unknown key (the keys are listed in `man ncclprobe` and "
                    "docs/daemon.md)",
                    key_len, p);
    enum key_id id = (enum key_id)(k - keys);
    if (seen[id])
        return fail(ps, "%s: set again, first set on line %u (each key at most once)", k->name,
                    seen[id]);
    seen[id] = ps->line;

    const char *v = eq + 1;
    while (v < e && is_blank(*v))
        v++;
    char *text = NULL;
    int rc = line_value(ps, k->name, v, e, &text);
    if (rc < 0)
        return rc;
    union value val;
    rc = parse_value(ps, k, text, &val);
    free(text);
    if (rc < 0)
        return rc;
    store(c, id, &val);
    return 0;
}

int np_config_parse(const char *text, size_t len, const char *filename,
                    struct np_daemon_config *out, char *err, size_t errlen) {
    struct parser ps = {.file = filename ? filename : "(config)", .err = err, .errlen = errlen};
    struct np_daemon_config tmp;
    unsigned seen[K_COUNT] = {0};
    size_t pos = 0;
    int rc;

    if (err && errlen)
        err[0] = '\0';
    if ((rc = np_config_defaults(&tmp)) < 0) {
        if (err && errlen)
            snprintf(err, errlen, "%s: out of memory", ps.file);
        return rc;
    }
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) /* a UTF-8 byte order mark */
        pos = 3;
    while (pos < len) {
        const char *s = text + pos;
        const char *nl = memchr(s, '\n', len - pos);
        const char *e = nl ? nl : text + len;
        pos = (size_t)(e - text) + (nl ? 1 : 0);
        if (e > s && e[-1] == '\r') /* CRLF */
            e--;
        ps.line++;
        if ((rc = parse_line(&ps, s, e, &tmp, seen)) < 0) {
            if (rc == -ENOMEM && err && errlen)
                snprintf(err, errlen, "%s:%u: out of memory", ps.file, ps.line);
            np_config_free(&tmp);
            return rc;
        }
    }
    np_config_free(out);
    *out = tmp;
    return 0;
}

int np_config_load(const char *path, struct np_daemon_config *out, char *err, size_t errlen) {
    struct stat st;
    char *text = NULL;
    size_t len = 0;
    int rc;

    char scratch[1];
    if (!err || !errlen) {
        err = scratch;
        errlen = sizeof(scratch);
    }
    if (stat(path, &st) < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(-rc));
        return rc;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "cannot read %s: %s (expected a configuration file)", path,
                 strerror(EISDIR));
        return -EISDIR;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "cannot read %s: not a regular file", path);
        return -EINVAL;
    }
    if (st.st_size > NP_CONFIG_MAX_FILE_BYTES) {
        snprintf(err, errlen,
                 "cannot read %s: %lld bytes, more than a configuration file has "
                 "(at most 1 MiB)",
                 path, (long long)st.st_size);
        return -EFBIG;
    }
    if ((rc = np_read_file(path, &text, &len)) < 0) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(-rc));
        return rc;
    }
    if (len > NP_CONFIG_MAX_FILE_BYTES) { /* grew since stat() */
        free(text);
        snprintf(err, errlen, "cannot read %s: more than a configuration file has (at most 1 MiB)",
                 path);
        return -EFBIG;
    }
    rc = np_config_parse(text, len, path, out, err, errlen);
    free(text);
    return rc;
}

/* ---- the process filter ------------------------------------------------- */

static bool matches_any(const struct np_globs *g, const char *s) {
    for (size_t i = 0; i < g->n; i++)
        if (fnmatch(g->items[i], s, 0) == 0)
            return true;
    return false;
}

static bool label_selected(const struct np_globs *include, const struct np_globs *exclude,
                           const char *s) {
    if (!s)
        s = "";
    if (include->n && !matches_any(include, s))
        return false;
    return !matches_any(exclude, s);
}

bool np_config_selects(const struct np_daemon_config *c, const struct np_process_labels *p) {
    static const struct np_process_labels none = {0};
    if (!p)
        p = &none;
    return label_selected(&c->include_comm, &c->exclude_comm, p->comm) &&
           label_selected(&c->include_exe, &c->exclude_exe, p->exe) &&
           label_selected(&c->include_cgroup, &c->exclude_cgroup, p->cgroup) &&
           label_selected(&c->include_container, &c->exclude_container, p->container);
}
