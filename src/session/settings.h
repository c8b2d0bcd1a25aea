/* settings.h - every setting ncclprobe is given, defined once.
 *
 * struct np_settings is what a tracing session is asked to do: `record`
 * fills it from its command line (cli/options.c), the daemon from its
 * configuration (np_settings_from_config). struct np_daemon_config is what
 * the daemon's configuration file holds (daemon/config.c reads the file).
 *
 * np_settings_table[] has one row per setting: record's flag and/or the
 * configuration key, the type and range, the default, the help text, and
 * where each side keeps the value. Both parsers go through np_setting_set,
 * so that a setting's syntax, range check and error message exist once
 * (settings.c). Kept out of the table: record's --pid (a list whose errors
 * name the element), --help and `-- CMD`, and the daemon's own command line
 * (--config, --output-dir, -v): none of them is a value with a range. */
#ifndef NP_SESSION_SETTINGS_H
#define NP_SESSION_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "ingest/ingest.h" /* enum np_python_mode */
#include "lib/util.h"      /* enum np_log_level */

/* The program's version: `ncclprobe --version` and the daemon's status. */
#define NCCLPROBE_VERSION "0.1.0"

/* Where launches of a process served by libncclprobe_cupti.so are taken
 * (names: "auto", "int3"): auto, at the agent's marker (its fast path, the
 * int3 uprobes on those launch functions removed meanwhile); int3, always
 * at the int3 uprobes. */
enum np_launch_probes { NP_LAUNCH_PROBES_AUTO, NP_LAUNCH_PROBES_INT3 };

/* How call stacks are unwound: the one enum of it (names: "auto", "dwarf", "fp"). */
enum unwind_mode { UNWIND_AUTO, UNWIND_DWARF, UNWIND_FP };

struct np_settings {
    pid_t *pids;
    size_t npids;
    char *output_dir;
    double duration_s; /* 0: until stopped */
    bool no_wait;
    long ring_mb;
    long backlog_mb;     /* the reader's backlog (ingest/backlog.h); 0: none */
    long wakeup_kb;      /* -1: auto, an eighth of the ring */
    long reader_threads; /* worker threads beside the reader (ingest/workers.h); -1: auto */
    enum unwind_mode unwind;
    bool inline_frames;
    const char *debuginfo_path;
    const char *raw_dump;
    long stack_bytes;
    bool fixed_stack_copy; /* no stack hints (ingest/stack_hints.h) */
    int launch_probes;     /* enum np_launch_probes */
    enum np_python_mode python;
    long python_depth;
    const char *cupti_socket; /* where libncclprobe_cupti.so sends GPU records */
    bool inject_cupti;        /* --cupti: CUDA_INJECTION64_PATH for -- CMD */
    bool nccl_flows;          /* --nccl-flows: NCCL's proxy flows and topology (flows/) */
    bool no_gpu;
    long gpu_timeout_ms;
    bool verbose;
    unsigned formats; /* --format: enum np_format bits */
    char **command;   /* argv after "--", NULL-terminated */
};

/* A list of glob patterns (each a NUL-terminated, non-empty string). */
struct np_globs {
    char **items;
    size_t n;
};

/* The daemon's configuration file (docs/daemon.md, "Configuration"). Every
 * string and list is its own (np_config_free). */
/* When the daemon brings the CUPTI library into the processes it traces. */
enum np_cupti_inject { NP_CUPTI_INJECT_NEVER, NP_CUPTI_INJECT_WINDOW, NP_CUPTI_INJECT_ALWAYS };

struct np_daemon_config {
    char *output_dir, *ctl_socket, *cupti_socket, *flag_file; /* flag_file NULL: none */
    bool gpu, aggregate;
    bool nccl_flows;  /* into capture windows' sets (flows/) */
    int cupti_inject; /* enum np_cupti_inject */
    /* max_output_age_ms 0: no age cap. Every duration is at most 36500 days,
     * so converting one to nanoseconds cannot overflow a uint64_t. */
    uint64_t gpu_timeout_ms, aggregate_interval_ms, max_window_ms, max_output_age_ms;
    struct np_globs include_comm, exclude_comm, include_exe, exclude_exe, include_cgroup,
        exclude_cgroup, include_container, exclude_container;
    uint64_t max_output_bytes, cache_bytes, ring_buffer_bytes, reader_backlog_bytes;
    double cpu_budget_percent; /* 1..6400 */
    long reader_threads;       /* -1: auto (budget_reader_threads) */
    uint64_t rate_limit;       /* launches/s per probe while over budget, 1..1e9 */
    enum unwind_mode unwind;
    uint64_t stack_bytes, python_depth;
    enum np_python_mode python;
    enum np_log_level log_level;
    unsigned formats; /* enum np_format bits: outputs made from each finished set */
    char *http_listen, *http_token_file; /* NULL or "": none */
    bool http_allow_remote;
};

/* ---- the table ---------------------------------------------------------- */

/* What a value is, as the configuration file writes it. */
enum np_value_type {
    NP_V_BOOL,     /* yes/no, true/false, on/off, 1/0, any case */
    NP_V_UINT,     /* a whole number in [min, max], a multiple of `multiple` when set */
    NP_V_SIZE,     /* bytes: "4096", "512K", "64M", "10G", "1T" (binary) */
    NP_V_DURATION, /* milliseconds: "90" (seconds), "1.5s", "500ms", "10m", "2h", "7d" */
    NP_V_SECONDS,  /* a positive number of seconds ("2", "0.5") */
    NP_V_PERCENT,  /* "10" or "10%", in [min, max] */
    NP_V_ENUM,     /* one of names[] (any case); the value is the index */
    NP_V_PATH,     /* a path shorter than max_len; absolute in the configuration */
    NP_V_TEXT,     /* any text */
    NP_V_FORMATS,  /* a --format list (writers/formats.h) */
    NP_V_GLOBS,    /* whitespace-separated fnmatch(3) patterns */
};

/* The C type a side keeps a value in, at the field's offset. */
enum np_store {
    NP_STORE_NONE = 0, /* this side has no such setting */
    NP_STORE_BOOL,
    NP_STORE_NOT,  /* bool, the negation (record's no_gpu of `gpu`) */
    NP_STORE_INT,  /* an enum */
    NP_STORE_LONG, /* long; in flag_unit's when the row has one */
    NP_STORE_U64,
    NP_STORE_UNSIGNED, /* enum np_format bits */
    NP_STORE_DOUBLE,
    NP_STORE_BORROW, /* const char *: the text itself (argv, the table) */
    NP_STORE_STR,    /* char *, owned; empty is NULL when empty_ok */
    NP_STORE_GLOBS,  /* struct np_globs, owned */
};

struct np_setting_field {
    enum np_store store;
    size_t off;
};

/* Who gives the value: record's command line into struct np_settings, or
 * the daemon's configuration file into struct np_daemon_config. */
enum np_side { NP_SIDE_RECORD, NP_SIDE_CONFIG };

struct np_setting {
    const char *flag;       /* record's long option ("ring-buffer-mb"); NULL: none */
    char short_flag;        /* its one-letter form, or 0 */
    const char *metavar;    /* its value in --help; NULL: it takes none and sets flag_value */
    const char *flag_value; /* what a flag without a value sets */
    uint64_t flag_unit;     /* nonzero: the flag takes a whole number of these units
                             * (MiB for --ring-buffer-mb), and record keeps that number */
    const char *key;        /* the configuration key; NULL: none */
    enum np_value_type type;
    uint64_t min, max;        /* in the type's unit (bytes, milliseconds, percent) */
    uint64_t multiple;        /* NP_V_UINT: 0, or the value is a multiple of it */
    bool auto_ok;             /* NP_V_UINT: "auto" is allowed too (NP_SETTING_AUTO: -1 in a long) */
    bool pow2;                /* a power of two */
    bool zero_ok;             /* NP_V_DURATION: 0 is allowed below min ("no limit") */
    bool empty_ok;            /* NP_V_PATH: empty is allowed ("none") */
    size_t max_len;           /* NP_V_PATH: 0, or the path is shorter than this */
    const char *const *names; /* NP_V_ENUM: in the enum's order, NULL-terminated */
    bool restart;             /* the daemon takes a new value at its next start only */
    const char *def;          /* the default, as the configuration writes it; NULL: none */
    const char *allowed;      /* the "(expected ...)" of its messages; NULL: the error says it */
    const char *flag_allowed; /* the same in flag_unit's terms; NULL: allowed */
    const char *help;         /* what it does ('\n' breaks the lines of --help) */
    const char *flag_help;    /* record --help's, where the flag says otherwise (--no-gpu) */
    struct np_setting_field record; /* in struct np_settings */
    struct np_setting_field config; /* in struct np_daemon_config */
};

/* The value of "auto" where auto_ok: the one the session works out. */
#define NP_SETTING_AUTO UINT64_MAX

extern const struct np_setting np_settings_table[];
extern const size_t np_settings_count;

/* A parsed value, before it is stored. */
union np_value {
    bool b;
    uint64_t u;
    double d;
    int e;
    const char *s; /* NP_V_PATH, NP_V_TEXT: the text itself */
    struct np_globs g;
};

/* The row of configuration key key[0..len), or of record's --flag; NULL: none. */
const struct np_setting *np_setting_by_key(const char *key, size_t len);
const struct np_setting *np_setting_by_flag(const char *flag);
/* The field the side keeps the row's value in (store NP_STORE_NONE: none). */
const struct np_setting_field *np_setting_field(const struct np_setting *row, enum np_side side);

/* Checks text as the side writes the row's value (text NULL: the flag's
 * flag_value). 0 with *out set (a list is the caller's: np_globs_free), or
 * -EINVAL with msg = the message: record "invalid --FLAG 'TEXT': what is
 * wrong (expected ...)", the configuration "KEY: what is wrong (expected
 * ...)"; -ENOMEM. */
int np_setting_parse(const struct np_setting *row, enum np_side side, const char *text,
                     union np_value *out, char *msg, size_t size);
/* np_setting_parse, then stores the value in the side's struct at base. */
int np_setting_set(const struct np_setting *row, enum np_side side, const char *text, void *base,
                   char *msg, size_t size);

/* Every setting the side has that has a default, set to it. 0 or -ENOMEM. */
int np_settings_defaults(enum np_side side, void *base);
/* Frees the strings and lists the side owns at base (they become NULL). */
void np_settings_free(enum np_side side, void *base);
void np_globs_free(struct np_globs *g);

/* The session's settings of a daemon configuration (c must outlive s:
 * s borrows its strings). */
void np_settings_from_config(const struct np_daemon_config *c, struct np_settings *s);
/* Whether two configurations hold the same value of the row (a string or
 * a scalar: lists are not compared); swaps it. */
bool np_setting_same(const struct np_setting *row, const struct np_daemon_config *a,
                     const struct np_daemon_config *b);
void np_setting_swap(const struct np_setting *row, struct np_daemon_config *a,
                     struct np_daemon_config *b);

/* The lines of record --help for the flags ("  -o, --output DIR   ..."),
 * or of the daemon's for the keys ("  key = default   ..."). */
void np_settings_usage(enum np_side side, FILE *f);

#endif
