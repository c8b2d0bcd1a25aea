/* status_schema.c - the table of `ctl status`'s fields (see status_schema.h),
 * adding a field to a reply by its id, and the schema as JSON for `ncclprobe
 * ctl --schema`. */
#include "daemon/status_schema.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "lib/json.h"

#define MIB (1024.0 * 1024.0)

/* A field of parent shown on `line`. */
#define NUM(p, k, l, fmt, h)                                                                       \
    {                                                                                              \
        .parent = p, .key = k, .type = NP_STATUS_NUMBER, .line = l, .show = NP_SHOW_NUMBER,        \
        .text = fmt, .help = h                                                                     \
    }
#define HIDDEN(p, k, t, h)                                                                         \
    { .parent = p, .key = k, .type = t, .help = h }
#define GROUP(k, h)                                                                                \
    { .parent = NP_ST_TOP, .key = k, .type = NP_STATUS_OBJECT, .help = h }

/* One row per field, kept as compact as its attributes allow. */
/* clang-format off */
const struct np_status_field np_status_fields[NP_ST_COUNT] = {
    [NP_ST_OK] = HIDDEN(NP_ST_TOP, "ok", NP_STATUS_BOOL, "the request was served"),
    [NP_ST_PID] = NUM(NP_ST_TOP, "pid", "daemon:", "pid %.0f", "the daemon's process id"),
    [NP_ST_VERSION] = {.parent = NP_ST_TOP, .key = "version", .type = NP_STATUS_STRING,
                       .line = "daemon:", .show = NP_SHOW_STRING, .text = "version ",
                       .help = "ncclprobe's version"},
    [NP_ST_UPTIME_S] = {.parent = NP_ST_TOP, .key = "uptime_s", .type = NP_STATUS_NUMBER,
                        .line = "daemon:", .show = NP_SHOW_DURATION, .text = "up ",
                        .help = "seconds since the daemon started"},
    [NP_ST_CONFIG] = {.parent = NP_ST_TOP, .key = "config", .type = NP_STATUS_STRING,
                      .line = "config:", .show = NP_SHOW_STRING, .text = "",
                      .help = "the configuration file"},
    [NP_ST_OUTPUT_DIR] = {.parent = NP_ST_TOP, .key = "output_dir", .type = NP_STATUS_STRING,
                          .line = "output dir:", .show = NP_SHOW_STRING, .text = "",
                          .help = "where output sets are written"},
    [NP_ST_WINDOW] = GROUP("window", "the capture window"),
    [NP_ST_WINDOW_OPEN] = {.parent = NP_ST_WINDOW, .key = "open", .type = NP_STATUS_BOOL,
                           .line = "window:", .show = NP_SHOW_BOOL, .text = "open", .no = "closed",
                           .help = "whether a capture window is open"},
    [NP_ST_WINDOW_ID] = {.parent = NP_ST_WINDOW, .key = "id", .type = NP_STATUS_NUMBER,
                         .flags = NP_SF_OPEN | NP_SF_JOINED, .line = "window:",
                         .show = NP_SHOW_NUMBER, .text = " #%.0f",
                         .help = "the window's number: 1, 2, ... since the daemon started"},
    [NP_ST_WINDOW_REASON] = {.parent = NP_ST_WINDOW, .key = "reason", .type = NP_STATUS_STRING,
                             .flags = NP_SF_OPEN, .line = "window:", .show = NP_SHOW_STRING,
                             .text = "reason ", .help = "what opened it: ctl or flag_file"},
    [NP_ST_WINDOW_STARTED] = {.parent = NP_ST_WINDOW, .key = "started", .type = NP_STATUS_STRING,
                              .flags = NP_SF_OPEN, .line = "window:", .show = NP_SHOW_STRING,
                              .text = "started ", .help = "when it opened (UTC)"},
    [NP_ST_WINDOW_ELAPSED_S] = {.parent = NP_ST_WINDOW, .key = "elapsed_s",
                                .type = NP_STATUS_NUMBER, .flags = NP_SF_OPEN, .line = "window:",
                                .show = NP_SHOW_DURATION, .text = "elapsed ",
                                .help = "seconds since it opened"},
    [NP_ST_WINDOW_ENDS_IN_S] = {.parent = NP_ST_WINDOW, .key = "ends_in_s",
                                .type = NP_STATUS_NUMBER, .flags = NP_SF_OPEN | NP_SF_NULL,
                                .line = "window:", .show = NP_SHOW_DURATION, .text = "ends in ",
                                .null_text = "until stopped",
                                .help = "seconds until its duration or max_window ends it"},
    [NP_ST_AGGREGATE] = GROUP("aggregate", "the always-on aggregation"),
    [NP_ST_AGGREGATE_ON] = {.parent = NP_ST_AGGREGATE, .key = "on", .type = NP_STATUS_BOOL,
                            .line = "aggregate:", .show = NP_SHOW_BOOL, .text = "on", .no = "off",
                            .help = "the configuration's aggregate"},
    [NP_ST_AGGREGATE_INTERVAL_S] = {.parent = NP_ST_AGGREGATE, .key = "interval_s",
                                    .type = NP_STATUS_NUMBER, .line = "aggregate:",
                                    .show = NP_SHOW_DURATION, .text = "every ",
                                    .help = "aggregate_interval, in seconds"},
    [NP_ST_AGGREGATE_PERIOD_STARTED] = {.parent = NP_ST_AGGREGATE, .key = "period_started",
                                        .type = NP_STATUS_STRING, .line = "aggregate:",
                                        .show = NP_SHOW_STRING, .text = "period started ",
                                        .help = "when the current period began (UTC)"},
    [NP_ST_TARGETS] = {.parent = NP_ST_TOP, .key = "targets", .type = NP_STATUS_ARRAY,
                       .line = "targets:", .show = NP_SHOW_LIST,
                       .help = "the traced processes, one object each"},
    [NP_ST_TARGET_PID] = {.parent = NP_ST_TARGETS, .key = "pid", .type = NP_STATUS_NUMBER,
                          .column = "PID", .width = 7, .help = "its pid (ours)"},
    [NP_ST_TARGET_NS_PID] = {.parent = NP_ST_TARGETS, .key = "ns_pid", .type = NP_STATUS_NUMBER,
                             .column = "NS_PID", .width = 7,
                             .help = "its pid in its own PID namespace"},
    [NP_ST_TARGET_COMM] = {.parent = NP_ST_TARGETS, .key = "comm", .type = NP_STATUS_STRING,
                           .flags = NP_SF_SANITIZED, .column = "COMM", .width = -16,
                           .precision = 16, .help = "its name (/proc/PID/comm)"},
    [NP_ST_TARGET_EXE] = {.parent = NP_ST_TARGETS, .key = "exe", .type = NP_STATUS_STRING,
                          .flags = NP_SF_SANITIZED, .help = "its executable, as it sees it"},
    [NP_ST_TARGET_CONTAINER] = {.parent = NP_ST_TARGETS, .key = "container",
                                .type = NP_STATUS_STRING, .flags = NP_SF_SANITIZED,
                                .column = "CONTAINER", .width = -12, .precision = 12,
                                .help = "its container id, \"\" on the host"},
    [NP_ST_TARGET_CGROUP] = {.parent = NP_ST_TARGETS, .key = "cgroup", .type = NP_STATUS_STRING,
                             .flags = NP_SF_SANITIZED, .help = "its cgroup v2 path"},
    [NP_ST_TARGET_PROBES] = {.parent = NP_ST_TARGETS, .key = "probes", .type = NP_STATUS_NUMBER,
                             .column = "PROBES", .width = 6, .help = "probes attached to it"},
    [NP_ST_TARGET_LIBRARIES] =
        HIDDEN(NP_ST_TARGETS, "libraries", NP_STATUS_NUMBER, "CUDA/NCCL libraries probed in it"),
    [NP_ST_TARGET_LAUNCHES] = {.parent = NP_ST_TARGETS, .key = "launches", .type = NP_STATUS_NUMBER,
                               .column = "LAUNCHES", .width = 10,
                               .help = "launches recorded since it was traced"},
    [NP_ST_TARGET_LAUNCHES_PER_S] = {.parent = NP_ST_TARGETS, .key = "launches_per_s",
                                     .type = NP_STATUS_NUMBER, .column = "LAUNCHES/S", .width = 10,
                                     .precision = 1, .help = "launches in the last second"},
    [NP_ST_TARGET_DROPS] = {.parent = NP_ST_TARGETS, .key = "drops", .type = NP_STATUS_NUMBER,
                            .column = "DROPS", .width = 7,
                            .help = "its launches lost to a full ring buffer"},
    [NP_ST_TARGET_RATE_LIMITED] = HIDDEN(NP_ST_TARGETS, "rate_limited", NP_STATUS_NUMBER,
                                         "its launches not recorded while over the CPU budget"),
    [NP_ST_TARGET_GPU] = {.parent = NP_ST_TARGETS, .key = "gpu", .type = NP_STATUS_STRING,
                          .column = "GPU", .width = -12, .precision = 40,
                          .help = "its CUPTI library: active, off, waiting for hello, or no "
                                  "CUPTI library"},
    [NP_ST_TARGET_CUPTI_ORIGIN] =
        HIDDEN(NP_ST_TARGETS, "cupti_origin", NP_STATUS_STRING,
               "how its CUPTI library came: start (CUDA_INJECTION64_PATH), injected (loaded "
               "live by the daemon), woken (loaded before, woken by the daemon), or empty"),
    [NP_ST_TARGET_CUPTI_WHY] =
        HIDDEN(NP_ST_TARGETS, "cupti_why", NP_STATUS_STRING,
               "why the daemon could not bring its CUPTI library in; empty when it did or "
               "did not try"),
    [NP_ST_TARGET_CUPTI_LIBRARY] =
        HIDDEN(NP_ST_TARGETS, "cupti_library", NP_STATUS_STRING,
               "the libcupti its CUPTI library uses: CUDA release of the record layouts read "
               "(\"assumed\" when not its own), API version and path; empty before it said"),
    [NP_ST_TARGET_OUTPUT] = {.parent = NP_ST_TARGETS, .key = "output", .type = NP_STATUS_STRING,
                             .flags = NP_SF_NULL, .column = "OUTPUT", .precision = 4096,
                             .help = "the output set its records go to; null: none now"},
    [NP_ST_TARGET_EXITED] = HIDDEN(NP_ST_TARGETS, "exited", NP_STATUS_BOOL,
                                   "it exited; its last records are being read"),
    [NP_ST_PROBES] = GROUP("probes", "probes of every target"),
    [NP_ST_PROBES_ATTACHED] =
        NUM(NP_ST_PROBES, "attached", "probes:", "%.0f attached", "probes attached"),
    [NP_ST_PROBES_FAILED] =
        NUM(NP_ST_PROBES, "failed", "probes:", "%.0f failed", "probes that could not be attached"),
    [NP_ST_RATES] = GROUP("rates", "the last second"),
    [NP_ST_RATES_LAUNCHES_PER_S] =
        NUM(NP_ST_RATES, "launches_per_s", "rates:", "%.1f launches/s", "launches recorded"),
    [NP_ST_RATES_RECORDS_PER_S] =
        NUM(NP_ST_RATES, "records_per_s", "rates:", "%.1f records/s", "ring buffer records read"),
    [NP_ST_RATES_BACKLOG] = NUM(NP_ST_RATES, "backlog_records", "rates:", "%.0f records waiting",
                                "records read from the ring and waiting to be unwound now"),
    [NP_ST_DROPS] = GROUP("drops", "launches not recorded since the daemon started"),
    [NP_ST_DROPS_RING_BUFFER] =
        NUM(NP_ST_DROPS, "ring_buffer", "drops:", "%.0f ring buffer", "lost to a full ring buffer"),
    [NP_ST_DROPS_BACKLOG] = NUM(NP_ST_DROPS, "backlog", "drops:", "%.0f backlog",
                                "lost to a full reader backlog (reader_backlog)"),
    [NP_ST_DROPS_RATE_LIMITED] = NUM(NP_ST_DROPS, "rate_limited", "drops:", "%.0f rate limited",
                                     "held back by the rate limit"),
    [NP_ST_RATE_LIMIT] = GROUP("rate_limit", "the CPU budget and the rate limit it turns on"),
    [NP_ST_RATE_LIMIT_ACTIVE] = {.parent = NP_ST_RATE_LIMIT, .key = "active",
                                 .type = NP_STATUS_BOOL, .line = "rate limit:",
                                 .show = NP_SHOW_BOOL, .text = "ACTIVE", .no = "inactive",
                                 .help = "whether BPF limits the launches now"},
    [NP_ST_RATE_LIMIT_PER_PROBE_PER_S] =
        NUM(NP_ST_RATE_LIMIT, "per_probe_per_s",
            "rate limit:", "%.0f launches/s per probe when over budget", "rate_limit"),
    [NP_ST_RATE_LIMIT_CPU_PERCENT] = {.parent = NP_ST_RATE_LIMIT, .key = "cpu_percent",
                                      .type = NP_STATUS_NUMBER, .line = "rate limit:",
                                      .show = NP_SHOW_NUMBER, .text = "CPU %.1f%%",
                                      .with = NP_ST_RATE_LIMIT_BUDGET_PERCENT,
                                      .text_with = "CPU %.1f%% of %.1f%% budget",
                                      .help = "the daemon's CPU use in the last second, in "
                                              "percent of one core"},
    [NP_ST_RATE_LIMIT_BUDGET_PERCENT] =
        NUM(NP_ST_RATE_LIMIT, "budget_percent", "rate limit:", "budget %.1f%% CPU", "cpu_budget"),
    [NP_ST_RATE_LIMIT_ACTIVATIONS] = NUM(NP_ST_RATE_LIMIT, "activations", "rate limit:",
                                         "%.0f activations", "times the limit was turned on"),
    [NP_ST_RATE_LIMIT_READER_THREADS] =
        NUM(NP_ST_RATE_LIMIT, "reader_threads", "rate limit:", "%.0f reader threads",
            "threads unwinding beside the reader (reader_threads; auto: from cpu_budget)"),
    [NP_ST_CUPTI] = GROUP("cupti", "the CUPTI libraries' socket"),
    [NP_ST_CUPTI_SOCKET] = {.parent = NP_ST_CUPTI, .key = "socket", .type = NP_STATUS_STRING,
                            .flags = NP_SF_NULL, .line = "cupti:", .show = NP_SHOW_STRING,
                            .text = "", .null_text = "off",
                            .help = "cupti_socket; null: gpu is off"},
    [NP_ST_CUPTI_PEERS] = {.parent = NP_ST_CUPTI, .key = "peers", .type = NP_STATUS_NUMBER,
                           .line = "cupti:", .show = NP_SHOW_COUNT, .text = "%.0f peer%s",
                           .help = "CUPTI libraries connected and active"},
    [NP_ST_DISK] = GROUP("disk", "output_dir"),
    [NP_ST_DISK_BYTES] = {.parent = NP_ST_DISK, .key = "bytes", .type = NP_STATUS_NUMBER,
                          .line = "disk:", .show = NP_SHOW_NUMBER, .text = "%.1f MiB", .scale = MIB,
                          .help = "bytes its sets hold"},
    [NP_ST_DISK_SETS] = {.parent = NP_ST_DISK, .key = "sets", .type = NP_STATUS_NUMBER,
                         .line = "disk:", .show = NP_SHOW_COUNT, .text = "%.0f set%s",
                         .help = "sets it holds"},
    [NP_ST_DISK_MAX_BYTES] = {.parent = NP_ST_DISK, .key = "max_bytes", .type = NP_STATUS_NUMBER,
                              .line = "disk:", .show = NP_SHOW_NUMBER, .text = "max %.1f MiB",
                              .scale = MIB, .help = "max_output_size"},
    [NP_ST_DISK_DELETED_SETS] =
        NUM(NP_ST_DISK, "deleted_sets", "disk:", "%.0f deleted", "sets retention deleted"),
    [NP_ST_DISK_SETS_WRITTEN] = HIDDEN(NP_ST_DISK, "sets_written", NP_STATUS_NUMBER,
                                       "sets written since the daemon started"),
    [NP_ST_MEMORY] = GROUP("memory", "the daemon's memory"),
    [NP_ST_MEMORY_RSS_BYTES] = {.parent = NP_ST_MEMORY, .key = "rss_bytes",
                                .type = NP_STATUS_NUMBER, .line = "memory:", .show = NP_SHOW_NUMBER,
                                .text = "RSS %.1f MiB", .scale = MIB, .help = "resident memory"},
    [NP_ST_MEMORY_CACHE_BYTES] = {.parent = NP_ST_MEMORY, .key = "cache_bytes",
                                  .type = NP_STATUS_NUMBER, .line = "memory:",
                                  .show = NP_SHOW_NUMBER, .text = "caches %.1f MiB", .scale = MIB,
                                  .with = NP_ST_MEMORY_CACHE_MAX_BYTES,
                                  .text_with = "caches %.1f of %.1f MiB",
                                  .help = "the stack caches"},
    [NP_ST_MEMORY_CACHE_MAX_BYTES] =
        HIDDEN(NP_ST_MEMORY, "cache_max_bytes", NP_STATUS_NUMBER, "cache_size"),
    [NP_ST_MEMORY_CACHE_RESETS] = HIDDEN(NP_ST_MEMORY, "cache_resets", NP_STATUS_NUMBER,
                                         "times the caches went over cache_size and were "
                                         "cleared"),
    [NP_ST_DISCOVERY] = GROUP("discovery", "finding the CUDA processes"),
    [NP_ST_DISCOVERY_DELAY_MS_P50] =
        NUM(NP_ST_DISCOVERY, "delay_ms_p50", "discovery:", "delay p50 %.1f ms",
            "median time from a library load to its probes"),
    [NP_ST_DISCOVERY_DELAY_MS_MAX] =
        NUM(NP_ST_DISCOVERY, "delay_ms_max", "discovery:", "max %.1f ms", "the longest of them"),
    [NP_ST_DISCOVERY_DELAYS_MEASURED] =
        HIDDEN(NP_ST_DISCOVERY, "delays_measured", NP_STATUS_NUMBER, "library loads timed"),
    [NP_ST_DISCOVERY_ATTACHED] = NUM(NP_ST_DISCOVERY, "attached", "discovery:", "%.0f attached",
                                     "processes traced since the daemon started"),
    [NP_ST_DISCOVERY_DETACHED] = NUM(NP_ST_DISCOVERY, "detached", "discovery:", "%.0f detached",
                                     "processes no longer traced"),
    [NP_ST_DISCOVERY_SKIPPED_BY_FILTER] =
        NUM(NP_ST_DISCOVERY, "skipped_by_filter", "discovery:", "%.0f skipped by filter",
            "processes the filters left out"),
    [NP_ST_DISCOVERY_SKIPPED_PTRACED] =
        NUM(NP_ST_DISCOVERY, "skipped_ptraced", "discovery:", "%.0f left to a debugger",
            "processes under ptrace (a debugger) when found: not traced until they exec"),
    [NP_ST_DISCOVERY_MISSED_EXITED] = HIDDEN(NP_ST_DISCOVERY, "missed_exited", NP_STATUS_NUMBER,
                                             "processes gone before they could be attached"),
    [NP_ST_DISCOVERY_LOST_NOTIFICATIONS] =
        HIDDEN(NP_ST_DISCOVERY, "lost_notifications", NP_STATUS_NUMBER,
               "notifications lost to a full ring "
               "(/proc walked instead)"),
    [NP_ST_DISCOVERY_MODE] = HIDDEN(NP_ST_DISCOVERY, "mode", NP_STATUS_STRING,
                                    "how processes are found: tp_btf or tracefs"),
};
/* clang-format on */

static const struct np_status_field *field(enum np_status_id id, enum np_status_type type) {
    const struct np_status_field *f = &np_status_fields[id];
    assert(f->type == type || (type == NP_STATUS_OBJECT && f->type == NP_STATUS_ARRAY));
    return f;
}

cJSON *np_status_add_object(cJSON *obj, enum np_status_id id) {
    const struct np_status_field *f = field(id, NP_STATUS_OBJECT);
    return f->type == NP_STATUS_ARRAY ? cJSON_AddArrayToObject(obj, f->key)
                                      : cJSON_AddObjectToObject(obj, f->key);
}

void np_status_add_number(cJSON *obj, enum np_status_id id, double v) {
    cJSON_AddNumberToObject(obj, field(id, NP_STATUS_NUMBER)->key, v);
}

void np_status_add_bool(cJSON *obj, enum np_status_id id, bool v) {
    cJSON_AddBoolToObject(obj, field(id, NP_STATUS_BOOL)->key, v);
}

void np_status_add_string(cJSON *obj, enum np_status_id id, const char *v) {
    const struct np_status_field *f = field(id, NP_STATUS_STRING);
    assert(v || (f->flags & NP_SF_NULL));
    if (!v)
        cJSON_AddNullToObject(obj, f->key);
    else if (f->flags & NP_SF_SANITIZED)
        np_json_add_text(obj, f->key, v);
    else
        cJSON_AddStringToObject(obj, f->key, v);
}

void np_status_path(enum np_status_id id, char *out, size_t size) {
    const struct np_status_field *f = &np_status_fields[id];
    char parent[128] = "";
    if (f->parent != NP_ST_TOP) {
        np_status_path(f->parent, parent, sizeof(parent));
        strcat(parent, np_status_fields[f->parent].type == NP_STATUS_ARRAY ? "[]." : ".");
    }
    snprintf(out, size, "%s%s", parent, f->key);
}

static const char *type_name(enum np_status_type t) {
    static const char *const names[] = {"number", "string", "boolean", "object", "array"};
    return names[t];
}

cJSON *np_status_schema_json(void) {
    cJSON *root = cJSON_CreateObject(), *fields = cJSON_AddArrayToObject(root, "fields");
    for (int id = 0; fields && id < NP_ST_COUNT; id++) {
        const struct np_status_field *f = &np_status_fields[id];
        char path[160];
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        if (!cJSON_AddItemToArray(fields, o)) {
            cJSON_Delete(o);
            break;
        }
        np_status_path((enum np_status_id)id, path, sizeof(path));
        cJSON_AddStringToObject(o, "path", path);
        cJSON_AddStringToObject(o, "type", type_name(f->type));
        cJSON_AddBoolToObject(o, "nullable", (f->flags & NP_SF_NULL) != 0);
        cJSON_AddBoolToObject(o, "window_open_only", (f->flags & NP_SF_OPEN) != 0);
        cJSON_AddStringToObject(o, "help", f->help);
    }
    return root;
}
