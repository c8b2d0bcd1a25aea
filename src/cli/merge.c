/* merge.c - `ncclprobe merge`: reads the CPU launches (stacks.ext.folded) and
 * the GPU trace (Chrome trace JSON from CUPTI) - the two at once, one on a
 * thread of its own - pairs launches with runtime API events
 * (correlate/tolerance.c), follows correlation ids to kernels and writes
 * folded stacks `frame;...;[GPU_Kernel]NAME COUNT` (and, when asked, weighted
 * by GPU nanoseconds). Stacks are normalized the way the established Python
 * merge tool does, so that its users get the same bytes (docs/merge.md). */
#define _GNU_SOURCE
#include "cli/merge.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "correlate/tolerance.h"
#include "ingest/ext_folded.h"
#include "ingest/trace_json.h"
#include "lib/hashmap.h"
#include "lib/util.h"

#define DEFAULT_TOLERANCE_MS 10.0
#define MALFORMED_SHOWN 5
#define KERNEL_FRAME "[GPU_Kernel]"
#define PENDING_FRAME "[GPU_Launch_Pending]"
#define WRAPPER_FRAME "cudaLaunchKernel"
#define KERNEL_NAME_PREFIX "Kernel: "
#define OUTPUT_BUFFER_SIZE (1 << 20)
/* Distinct stack texts remembered with their normalized stack: stacks repeat,
 * so most lines are one look-up; the bound keeps all-distinct inputs from
 * holding every text twice. */
#define RAW_STACK_CACHE_MAX (1 << 18)

struct merge_options {
    const char *cpu_path;
    const char *gpu_path;
    const char *out_path;
    const char *gpu_ns_path;
    int64_t tolerance_ns;
    bool summary;
    bool quiet;
};

/* A string stored once, numbered in the order strings were first seen. */
struct interned {
    uint32_t id;
    char text[];
};

struct string_table {
    struct np_map index; /* text -> struct interned */
    struct interned **items;
    size_t count, cap;
};

/* Input that could not be used, in one file; the first few are described. */
struct malformed_log {
    const char *path;
    const char *unit; /* "line", "event" */
    size_t count;
    struct np_str shown; /* one description per line */
};

struct cpu_side {
    struct string_table stacks; /* normalized stacks */
    struct np_map raw_stacks;   /* stack text as read -> struct interned of its normalized stack */
    struct np_match_point *points;
    uint32_t *stack_ids;
    size_t count, cap;
    size_t no_frames; /* lines with no frame left once normalized */
    struct malformed_log malformed;
};

struct runtime_event {
    int64_t start_ns;
    uint64_t thread;
    int64_t correlation;
    size_t seq; /* order in the file */
    bool graph;
};

struct kernel_event {
    int64_t correlation;
    size_t seq;
    uint32_t name_id;
    int64_t gpu_ns;
};

struct gpu_side {
    struct string_table kernel_names; /* as written: "Kernel: " stripped, sanitized */
    struct np_map raw_kernel_names;   /* name as in the trace -> struct interned */
    struct runtime_event *launches;
    size_t nlaunches, launches_cap;
    struct kernel_event *kernels;
    size_t nkernels, kernels_cap;
    size_t duplicate_launches; /* replaced by a later one with the same correlation id */
    size_t invalid_values;     /* launch or kernel events with ts, dur or id <= 0 */
    size_t memcpy_events, memset_events, metadata_events, other_events;
    struct malformed_log malformed;
};

/* One (stack, leaf) pair of the output, counted. */
struct merged_stack {
    uint32_t stack_id;
    uint32_t kernel_slot; /* kernel name id + 1; 0: pending */
    uint64_t count;
    uint64_t gpu_ns;
};

struct kernel_stats {
    uint64_t count;
    uint64_t gpu_ns;
};

struct merge_result {
    struct np_map merged; /* stack_id << 32 | kernel_slot -> struct merged_stack */
    struct kernel_stats *per_kernel;
    size_t matched, pending_no_event, pending_no_kernel, launches_used, kernels_used;
};

struct output_line {
    char *text;
    uint64_t count;
    uint64_t gpu_ns;
    bool ran_kernel;
};

enum event_kind {
    EVENT_OTHER,
    EVENT_LAUNCH,
    EVENT_GRAPH_LAUNCH,
    EVENT_KERNEL,
    EVENT_MEMCPY,
    EVENT_MEMSET,
    EVENT_METADATA,
};

/* ---- options ---------------------------------------------------------------- */

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

static int check_options(const struct merge_options *opt) {
    if (!opt->cpu_path || !opt->gpu_path || !opt->out_path) {
        np_err("merge needs --cpu, --gpu and -o");
        return -EINVAL;
    }
    if (opt->gpu_ns_path && strcmp(opt->gpu_ns_path, opt->out_path) == 0) {
        np_err("-o and --gpu-ns-output name the same file");
        return -EINVAL;
    }
    return 0;
}

/* 0, 1 after --help, -EINVAL on a bad command line. */
static int parse_options(int argc, char **argv, struct merge_options *opt) {
    enum { OPT_CPU = 256, OPT_GPU, OPT_GPU_NS, OPT_TOLERANCE, OPT_SUMMARY, OPT_QUIET };
    static const struct option longopts[] = {
        {"cpu", required_argument, NULL, OPT_CPU},
        {"gpu", required_argument, NULL, OPT_GPU},
        {"output", required_argument, NULL, 'o'},
        {"gpu-ns-output", required_argument, NULL, OPT_GPU_NS},
        {"tolerance-ms", required_argument, NULL, OPT_TOLERANCE},
        {"summary", no_argument, NULL, OPT_SUMMARY},
        {"quiet", no_argument, NULL, OPT_QUIET},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    int c;

    opt->tolerance_ns = (int64_t)(DEFAULT_TOLERANCE_MS * 1e6);
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_CPU:
            opt->cpu_path = optarg;
            break;
        case OPT_GPU:
            opt->gpu_path = optarg;
            break;
        case 'o':
            opt->out_path = optarg;
            break;
        case OPT_GPU_NS:
            opt->gpu_ns_path = optarg;
            break;
        case OPT_TOLERANCE:
            if (parse_tolerance(optarg, &opt->tolerance_ns) < 0)
                return -EINVAL;
            break;
        case OPT_SUMMARY:
            opt->summary = true;
            break;
        case OPT_QUIET:
            opt->quiet = true;
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            return -EINVAL;
        }
    }
    if (optind < argc) {
        np_err("unexpected argument '%s'", argv[optind]);
        return -EINVAL;
    }
    return check_options(opt);
}

/* ---- small containers --------------------------------------------------------- */

/* The array, grown (doubling) to hold at least `needed` elements of `size`
 * bytes; NULL when out of memory (the array is then left as it was). */
static void *grow_array(void *array, size_t *cap, size_t needed, size_t size) {
    if (needed <= *cap)
        return array;
    size_t new_cap = *cap ? *cap * 2 : 1024;
    while (new_cap < needed)
        new_cap *= 2;
    if (new_cap > SIZE_MAX / size)
        return NULL;
    void *bigger = realloc(array, new_cap * size);
    if (bigger)
        *cap = new_cap;
    return bigger;
}

static void table_init(struct string_table *t) {
    memset(t, 0, sizeof(*t));
    np_map_init(&t->index);
}

static void table_free(struct string_table *t) {
    for (size_t i = 0; i < t->count; i++)
        free(t->items[i]);
    free(t->items);
    np_map_free(&t->index, NULL);
}

static int table_intern(struct string_table *t, const char *text, uint32_t *id) {
    struct interned *found = np_map_get_str(&t->index, text);
    if (found) {
        *id = found->id;
        return 0;
    }
    if (t->count >= UINT32_MAX - 1)
        return -ERANGE;
    size_t len = strlen(text);
    struct interned *item = malloc(sizeof(*item) + len + 1);
    struct interned **items = grow_array(t->items, &t->cap, t->count + 1, sizeof(*t->items));
    if (items)
        t->items = items;
    int err = item && items ? np_map_put_str(&t->index, text, item) : -ENOMEM;
    if (err) {
        free(item);
        return err;
    }
    item->id = (uint32_t)t->count;
    memcpy(item->text, text, len + 1);
    t->items[t->count++] = item;
    *id = item->id;
    return 0;
}

static const char *table_text(const struct string_table *t, uint32_t id) {
    return t->items[id]->text;
}

static void note_malformed(struct malformed_log *log, long line, const char *why) {
    if (log->count++ < MALFORMED_SHOWN)
        np_str_appendf(&log->shown, "%s:%ld: skipped %s: %s\n", log->path, line, log->unit, why);
}

static void report_malformed(const struct malformed_log *log) {
    const char *p = np_str_cstr(&log->shown);
    for (const char *nl; (nl = strchr(p, '\n')); p = nl + 1)
        np_warn("%.*s", (int)(nl - p), p);
    if (log->count > MALFORMED_SHOWN)
        np_warn("%s: %zu malformed %ss skipped (the first %d shown)", log->path, log->count,
                log->unit, MALFORMED_SHOWN);
}

/* ---- CPU side: normalizing stacks -------------------------------------------- */

/* White space as Python's str.strip() sees it, in ASCII. */
static bool is_strip_space(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

static void trim(const char **start, const char **end) {
    while (*start < *end && is_strip_space(**start))
        (*start)++;
    while (*end > *start && is_strip_space((*end)[-1]))
        (*end)--;
}

static bool frame_is(const char *frame, size_t len, const char *word) {
    return len == strlen(word) && memcmp(frame, word, len) == 0;
}

static bool is_dropped_frame(const char *frame, size_t len) {
    return len == 0 || frame_is(frame, len, "<no-symbol>") || frame_is(frame, len, "_start") ||
           frame_is(frame, len, "__libc_start_main");
}

/* The launch API and the nvcc-generated host stub: one "cudaLaunchKernel". */
static bool is_launch_wrapper(const char *frame, size_t len) {
    return memmem(frame, len, "cudaLaunchKernel", strlen("cudaLaunchKernel")) ||
           memmem(frame, len, "__device_stub__", strlen("__device_stub__"));
}

/* Where the frames to merge end: before the [GPU_Kernel]NAME leaf our own
 * recordings end with (files of other tools have none). */
static const char *frames_end(const char *stack) {
    const char *end = stack + strlen(stack);
    const char *sep = memrchr(stack, ';', (size_t)(end - stack));
    const char *leaf = sep ? sep + 1 : stack, *leaf_end = end;

    trim(&leaf, &leaf_end);
    if (strncmp(leaf, KERNEL_FRAME, strlen(KERNEL_FRAME)) == 0)
        return sep ? sep : stack;
    return end;
}

/* Appends the frame as the established tool keeps it; *wrapper_seen: a
 * launch wrapper frame was kept already. Returns whether it was kept. */
static bool keep_frame(const char *frame, const char *frame_end, bool *wrapper_seen,
                       struct np_str *out) {
    trim(&frame, &frame_end);
    size_t len = (size_t)(frame_end - frame);
    if (is_dropped_frame(frame, len))
        return false;
    if (is_launch_wrapper(frame, len)) {
        if (*wrapper_seen)
            return false;
        *wrapper_seen = true;
        frame = WRAPPER_FRAME;
        len = strlen(WRAPPER_FRAME);
    }
    if (out->len > 0)
        np_str_append_n(out, ";", 1);
    np_str_append_n(out, frame, len);
    return true;
}

/* The stack's frames, trimmed, without empty and startup frames, launch
 * wrappers folded into one, joined by ';' in out. Returns how many. */
static size_t normalize_stack(const char *stack, struct np_str *out) {
    const char *end = frames_end(stack);
    bool wrapper_seen = false;
    size_t kept = 0;

    np_str_reset(out);
    for (const char *p = stack;;) {
        const char *sep = memchr(p, ';', (size_t)(end - p));
        kept += keep_frame(p, sep ? sep : end, &wrapper_seen, out);
        if (!sep)
            return kept;
        p = sep + 1;
    }
}

/* ---- CPU side: reading ------------------------------------------------------ */

/* Room for one more launch in both parallel arrays. */
static int cpu_side_reserve(struct cpu_side *cpu) {
    size_t points_cap = cpu->cap, ids_cap = cpu->cap;
    struct np_match_point *points =
        grow_array(cpu->points, &points_cap, cpu->count + 1, sizeof(*points));
    if (!points)
        return -ENOMEM;
    cpu->points = points;
    uint32_t *ids = grow_array(cpu->stack_ids, &ids_cap, cpu->count + 1, sizeof(*ids));
    if (!ids)
        return -ENOMEM;
    cpu->stack_ids = ids;
    cpu->cap = ids_cap;
    return 0;
}

/* The id of the normalized stack of a line's stack text: 1, 0 when no
 * frame is left, or -errno. */
static int stack_id_of(struct cpu_side *cpu, const char *text, struct np_str *scratch,
                       uint32_t *id) {
    const struct interned *known = np_map_get_str(&cpu->raw_stacks, text);
    if (known) {
        *id = known->id;
        return 1;
    }
    if (normalize_stack(text, scratch) == 0)
        return 0;
    int err = scratch->failed ? -ENOMEM : table_intern(&cpu->stacks, np_str_cstr(scratch), id);
    if (!err && cpu->raw_stacks.count < RAW_STACK_CACHE_MAX)
        err = np_map_put_str(&cpu->raw_stacks, text, cpu->stacks.items[*id]);
    return err ? err : 1;
}

static int add_cpu_launch(struct cpu_side *cpu, const struct np_ext_line *line, uint32_t stack_id) {
    int err = cpu_side_reserve(cpu);
    if (err)
        return err;
    cpu->points[cpu->count] = (struct np_match_point){
        .ts_ns = line->ts_ns,
        .thread = np_match_thread_key(line->pid, line->tid),
    };
    cpu->stack_ids[cpu->count++] = stack_id;
    return 0;
}

static void cpu_side_init(struct cpu_side *cpu, const char *path) {
    memset(cpu, 0, sizeof(*cpu));
    table_init(&cpu->stacks);
    np_map_init(&cpu->raw_stacks);
    cpu->malformed.path = path;
    cpu->malformed.unit = "line";
    np_str_init(&cpu->malformed.shown);
}

static void cpu_side_free(struct cpu_side *cpu) {
    table_free(&cpu->stacks);
    np_map_free(&cpu->raw_stacks, NULL);
    free(cpu->points);
    free(cpu->stack_ids);
    np_str_free(&cpu->malformed.shown);
}

static int read_cpu_lines(struct np_ext_reader *reader, struct cpu_side *cpu) {
    struct np_ext_line line;
    struct np_str scratch;
    uint32_t stack_id;
    int ret, err = 0;

    np_str_init(&scratch);
    while (!err && (ret = np_ext_next(reader, &line)) > 0) {
        if (line.error) {
            note_malformed(&cpu->malformed, line.line_no, line.error);
            continue;
        }
        int found = stack_id_of(cpu, line.stack, &scratch, &stack_id);
        if (found == 0)
            cpu->no_frames++;
        err = found == 1 ? add_cpu_launch(cpu, &line, stack_id) : (found < 0 ? found : 0);
    }
    np_str_free(&scratch);
    return err ? err : ret;
}

static int read_cpu_side(const char *path, struct cpu_side *cpu) {
    struct np_ext_reader *reader;
    int err = np_ext_open(path, &reader);
    if (err) {
        np_err("cannot open %s: %s", path, strerror(-err));
        return err;
    }
    err = read_cpu_lines(reader, cpu);
    if (err)
        np_err("reading %s: %s", path, strerror(-err));
    np_ext_close(reader);
    return err;
}

/* ---- GPU side ------------------------------------------------------------------ */

/* The members of an event the merge reads, found in one pass over it (the
 * first of a name wins, as with cJSON_GetObjectItem). */
struct event_fields {
    const cJSON *name, *cat, *ph, *ts, *dur, *pid, *tid, *args;
    const cJSON *correlation, *start_ns, *end_ns; /* in args */
};

static void keep_first(const cJSON **slot, const cJSON *member) {
    if (!*slot)
        *slot = member;
}

static void gather_event_member(struct event_fields *f, const cJSON *m) {
    const char *key = m->string;
    switch (key[0]) {
    case 'n':
        if (strcmp(key, "name") == 0)
            keep_first(&f->name, m);
        break;
    case 'c':
        if (strcmp(key, "cat") == 0)
            keep_first(&f->cat, m);
        break;
    case 'p':
        if (strcmp(key, "ph") == 0)
            keep_first(&f->ph, m);
        else if (strcmp(key, "pid") == 0)
            keep_first(&f->pid, m);
        break;
    case 't':
        if (strcmp(key, "ts") == 0)
            keep_first(&f->ts, m);
        else if (strcmp(key, "tid") == 0)
            keep_first(&f->tid, m);
        break;
    case 'd':
        if (strcmp(key, "dur") == 0)
            keep_first(&f->dur, m);
        break;
    case 'a':
        if (strcmp(key, "args") == 0)
            keep_first(&f->args, m);
        break;
    }
}

static void gather_arg(struct event_fields *f, const cJSON *m) {
    if (strcmp(m->string, "correlationId") == 0)
        keep_first(&f->correlation, m);
    else if (strcmp(m->string, "start_ns") == 0)
        keep_first(&f->start_ns, m);
    else if (strcmp(m->string, "end_ns") == 0)
        keep_first(&f->end_ns, m);
}

static void gather_fields(const cJSON *json, struct event_fields *f) {
    memset(f, 0, sizeof(*f));
    for (const cJSON *m = json->child; m; m = m->next)
        if (m->string)
            gather_event_member(f, m);
    if (cJSON_IsObject(f->args))
        for (const cJSON *m = f->args->child; m; m = m->next)
            if (m->string)
                gather_arg(f, m);
}

static const char *string_of(const cJSON *item) {
    return cJSON_IsString(item) ? item->valuestring : NULL;
}

static bool equals(const char *text, const char *word) {
    return text && strcmp(text, word) == 0;
}

/* What the event is, from "ph", "cat" and "name"; *why says what is wrong
 * with an event of interest that has no name. */
static enum event_kind classify_event(const struct event_fields *f, const char **why) {
    const char *cat = string_of(f->cat), *name = string_of(f->name);

    if (equals(string_of(f->ph), "M"))
        return EVENT_METADATA;
    if (equals(cat, "GPU_Memcpy"))
        return EVENT_MEMCPY;
    if (equals(cat, "GPU_Memset"))
        return EVENT_MEMSET;
    if (equals(cat, "GPU_Kernel") || (name && strncmp(name, "Kernel:", strlen("Kernel:")) == 0)) {
        *why = name ? NULL : "kernel event without a \"name\" string";
        return EVENT_KERNEL;
    }
    if (!equals(cat, "CUDA_Runtime"))
        return EVENT_OTHER;
    if (!name) {
        *why = "CUDA_Runtime event without a \"name\" string";
        return EVENT_OTHER;
    }
    if (strstr(name, "GraphLaunch"))
        return EVENT_GRAPH_LAUNCH;
    return strstr(name, "LaunchKernel") ? EVENT_LAUNCH : EVENT_OTHER;
}

/* Start, duration (ns) and correlation id of a launch or kernel event;
 * NULL, or what is missing or mistyped. */
static const char *read_timing(const struct np_trace_event *ev, const struct event_fields *f,
                               int64_t *start_ns, int64_t *dur_ns, int64_t *correlation) {
    if (np_trace_number(ev, NULL, f->ts, 3, start_ns) < 0)
        return "\"ts\" is missing or not a number";
    if (np_trace_number(ev, NULL, f->dur, 3, dur_ns) < 0)
        return "\"dur\" is missing or not a number";
    if (!cJSON_IsObject(f->args))
        return "\"args\" is missing or not an object";
    const cJSON *id = f->correlation;
    if (!cJSON_IsNumber(id) || id->valuedouble != (double)(int64_t)id->valuedouble)
        return "\"args.correlationId\" is missing or not an integer";
    *correlation = (int64_t)id->valuedouble;
    return NULL;
}

static bool is_thread_id(const cJSON *item) {
    if (!cJSON_IsNumber(item))
        return false;
    double v = item->valuedouble;
    return v >= 0 && v < 2147483648.0 && v == (double)(uint32_t)v;
}

/* The thread key of an event with integer "pid" and "tid" below 2^31. */
static uint64_t event_thread(const struct event_fields *f) {
    if (!is_thread_id(f->pid) || !is_thread_id(f->tid))
        return NP_MATCH_NO_THREAD;
    return np_match_thread_key((uint32_t)f->pid->valuedouble, (uint32_t)f->tid->valuedouble);
}

static int add_launch(struct gpu_side *gpu, const struct event_fields *f, int64_t start_ns,
                      int64_t correlation, bool graph) {
    struct runtime_event *launches =
        grow_array(gpu->launches, &gpu->launches_cap, gpu->nlaunches + 1, sizeof(*launches));
    if (!launches)
        return -ENOMEM;
    gpu->launches = launches;
    gpu->launches[gpu->nlaunches] = (struct runtime_event){
        .start_ns = start_ns,
        .thread = event_thread(f),
        .correlation = correlation,
        .seq = gpu->nlaunches,
        .graph = graph,
    };
    gpu->nlaunches++;
    return 0;
}

/* GPU time of a kernel: args end_ns - start_ns where both are there, else dur. */
static int64_t kernel_gpu_ns(const struct np_trace_event *ev, const struct event_fields *f,
                             int64_t dur_ns) {
    int64_t start, end;
    if (np_trace_number(ev, "args", f->start_ns, 0, &start) == 0 &&
        np_trace_number(ev, "args", f->end_ns, 0, &end) == 0 && end >= start)
        return end - start;
    return dur_ns;
}

static int intern_kernel_name(struct gpu_side *gpu, const char *raw, uint32_t *id) {
    const struct interned *known = np_map_get_str(&gpu->raw_kernel_names, raw);
    if (known) {
        *id = known->id;
        return 0;
    }
    const char *name = raw;
    if (strncmp(name, KERNEL_NAME_PREFIX, strlen(KERNEL_NAME_PREFIX)) == 0)
        name += strlen(KERNEL_NAME_PREFIX);
    size_t size = strlen(name) + 1;
    char *clean = malloc(size);
    if (!clean)
        return -ENOMEM;
    np_sanitize_frame(clean, size, name, false); /* no ';' or control characters */
    int err = table_intern(&gpu->kernel_names, clean, id);
    free(clean);
    if (!err)
        err = np_map_put_str(&gpu->raw_kernel_names, raw, gpu->kernel_names.items[*id]);
    return err;
}

static int add_kernel(struct gpu_side *gpu, const struct np_trace_event *ev,
                      const struct event_fields *f, int64_t dur_ns, int64_t correlation) {
    uint32_t name_id;
    int err = intern_kernel_name(gpu, string_of(f->name), &name_id);
    if (err)
        return err;
    struct kernel_event *kernels =
        grow_array(gpu->kernels, &gpu->kernels_cap, gpu->nkernels + 1, sizeof(*kernels));
    if (!kernels)
        return -ENOMEM;
    gpu->kernels = kernels;
    gpu->kernels[gpu->nkernels] = (struct kernel_event){
        .correlation = correlation,
        .seq = gpu->nkernels,
        .name_id = name_id,
        .gpu_ns = kernel_gpu_ns(ev, f, dur_ns),
    };
    gpu->nkernels++;
    return 0;
}

/* A launch or kernel event: kept when ts, dur and the id are positive. */
static int add_timed_event(struct gpu_side *gpu, const struct np_trace_event *ev,
                           const struct event_fields *f, enum event_kind kind) {
    int64_t start_ns, dur_ns, correlation;
    const char *why = read_timing(ev, f, &start_ns, &dur_ns, &correlation);

    if (why) {
        note_malformed(&gpu->malformed, ev->line, why);
        return 0;
    }
    if (start_ns <= 0 || dur_ns <= 0 || correlation <= 0) {
        gpu->invalid_values++;
        return 0;
    }
    if (kind == EVENT_KERNEL)
        return add_kernel(gpu, ev, f, dur_ns, correlation);
    return add_launch(gpu, f, start_ns, correlation, kind == EVENT_GRAPH_LAUNCH);
}

static int add_trace_event(struct gpu_side *gpu, const struct np_trace_event *ev) {
    struct event_fields f;
    const char *why = NULL;

    gather_fields(ev->json, &f);
    enum event_kind kind = classify_event(&f, &why);
    if (why) {
        note_malformed(&gpu->malformed, ev->line, why);
        return 0;
    }
    switch (kind) {
    case EVENT_LAUNCH:
    case EVENT_GRAPH_LAUNCH:
    case EVENT_KERNEL:
        return add_timed_event(gpu, ev, &f, kind);
    case EVENT_MEMCPY:
        gpu->memcpy_events++;
        return 0;
    case EVENT_MEMSET:
        gpu->memset_events++;
        return 0;
    case EVENT_METADATA:
        gpu->metadata_events++;
        return 0;
    default:
        gpu->other_events++;
        return 0;
    }
}

static int read_trace_events(struct np_trace_reader *reader, struct gpu_side *gpu) {
    struct np_trace_event ev;
    int ret, err = 0;

    while (!err && (ret = np_trace_next(reader, &ev)) > 0) {
        if (ev.json)
            err = add_trace_event(gpu, &ev);
        else
            note_malformed(&gpu->malformed, ev.line, ev.error);
    }
    return err ? err : ret;
}

static int read_gpu_side(const char *path, struct gpu_side *gpu) {
    struct np_trace_reader *reader;
    int err = np_trace_open(path, &reader);
    if (err) {
        np_err("cannot open %s: %s", path, strerror(-err));
        return err;
    }
    err = read_trace_events(reader, gpu);
    if (err == -EBADMSG)
        np_err("%s: %s", path, np_trace_error(reader));
    else if (err)
        np_err("reading %s: %s", path, strerror(-err));
    np_trace_close(reader);
    return err;
}

static void gpu_side_init(struct gpu_side *gpu, const char *path) {
    memset(gpu, 0, sizeof(*gpu));
    table_init(&gpu->kernel_names);
    np_map_init(&gpu->raw_kernel_names);
    gpu->malformed.path = path;
    gpu->malformed.unit = "event";
    np_str_init(&gpu->malformed.shown);
}

static void gpu_side_free(struct gpu_side *gpu) {
    table_free(&gpu->kernel_names);
    np_map_free(&gpu->raw_kernel_names, NULL);
    free(gpu->launches);
    free(gpu->kernels);
    np_str_free(&gpu->malformed.shown);
}

/* The trace is read on its own thread while the main thread reads the CPU file. */
struct gpu_job {
    const char *path;
    struct gpu_side *gpu;
    int err;
};

static void *gpu_job_run(void *arg) {
    struct gpu_job *job = arg;
    job->err = read_gpu_side(job->path, job->gpu);
    return NULL;
}

static int read_inputs(const struct merge_options *opt, struct cpu_side *cpu,
                       struct gpu_side *gpu) {
    struct gpu_job job = {.path = opt->gpu_path, .gpu = gpu};
    pthread_t thread;
    bool threaded = pthread_create(&thread, NULL, gpu_job_run, &job) == 0;

    if (!threaded)
        gpu_job_run(&job);
    int cpu_err = read_cpu_side(opt->cpu_path, cpu);
    if (threaded)
        pthread_join(thread, NULL);
    return cpu_err ? cpu_err : job.err;
}

/* ---- correlation ids -------------------------------------------------------- */

static int compare_by_correlation(int64_t a_id, size_t a_seq, int64_t b_id, size_t b_seq) {
    if (a_id != b_id)
        return a_id < b_id ? -1 : 1;
    return a_seq < b_seq ? -1 : a_seq > b_seq;
}

static int compare_launches(const void *a, const void *b) {
    const struct runtime_event *x = a, *y = b;
    return compare_by_correlation(x->correlation, x->seq, y->correlation, y->seq);
}

static int compare_kernels(const void *a, const void *b) {
    const struct kernel_event *x = a, *y = b;
    return compare_by_correlation(x->correlation, x->seq, y->correlation, y->seq);
}

/* Sorts unless already in order (ids mostly grow through a CUPTI trace). */
static void sort_unless_sorted(void *items, size_t n, size_t size,
                               int (*compare)(const void *, const void *)) {
    const char *p = items;
    for (size_t i = 1; i < n; i++) {
        if (compare(p + (i - 1) * size, p + i * size) > 0) {
            qsort(items, n, size, compare);
            return;
        }
    }
}

/* One runtime event per correlation id: the last one in the file. */
static void keep_last_launch_per_id(struct gpu_side *gpu) {
    size_t kept = 0;

    sort_unless_sorted(gpu->launches, gpu->nlaunches, sizeof(*gpu->launches), compare_launches);
    for (size_t i = 0; i < gpu->nlaunches; i++) {
        bool last_of_id = i + 1 == gpu->nlaunches ||
                          gpu->launches[i + 1].correlation != gpu->launches[i].correlation;
        if (last_of_id)
            gpu->launches[kept++] = gpu->launches[i];
    }
    gpu->duplicate_launches = gpu->nlaunches - kept;
    gpu->nlaunches = kept;
}

/* Index of the first kernel (in file order) with this correlation id, and
 * how many kernels have it. */
static size_t find_kernels(const struct gpu_side *gpu, int64_t correlation, size_t *count) {
    size_t lo = 0, hi = gpu->nkernels;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (gpu->kernels[mid].correlation < correlation)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t end = lo;
    while (end < gpu->nkernels && gpu->kernels[end].correlation == correlation)
        end++;
    *count = end - lo;
    return lo;
}

/* ---- merging ------------------------------------------------------------------ */

static int count_stack(struct merge_result *result, uint32_t stack_id, uint32_t kernel_slot,
                       uint64_t gpu_ns) {
    uint64_t key = (uint64_t)stack_id << 32 | kernel_slot;
    struct merged_stack *m = np_map_get_u64(&result->merged, key);
    if (!m) {
        m = calloc(1, sizeof(*m));
        if (!m || np_map_put_u64(&result->merged, key, m) < 0) {
            free(m);
            return -ENOMEM;
        }
        m->stack_id = stack_id;
        m->kernel_slot = kernel_slot;
    }
    m->count++;
    m->gpu_ns += gpu_ns;
    return 0;
}

/* The CPU stack once per kernel its launch ran: the first kernel of the
 * correlation id, every kernel of it for a graph launch. */
static int merge_launch(struct merge_result *result, const struct gpu_side *gpu, uint32_t stack_id,
                        const struct runtime_event *launch) {
    size_t count, first = find_kernels(gpu, launch->correlation, &count);

    result->launches_used++;
    if (count == 0) {
        result->pending_no_kernel++;
        return count_stack(result, stack_id, 0, 0);
    }
    if (!launch->graph)
        count = 1;
    result->matched++;
    for (size_t k = first; k < first + count; k++) {
        const struct kernel_event *kernel = &gpu->kernels[k];
        int err = count_stack(result, stack_id, kernel->name_id + 1, (uint64_t)kernel->gpu_ns);
        if (err)
            return err;
        result->per_kernel[kernel->name_id].count++;
        result->per_kernel[kernel->name_id].gpu_ns += (uint64_t)kernel->gpu_ns;
        result->kernels_used++;
    }
    return 0;
}

static int merge_all(const struct cpu_side *cpu, const struct gpu_side *gpu,
                     const size_t *cpu_to_event, struct merge_result *result) {
    for (size_t i = 0; i < cpu->count; i++) {
        int err;
        if (cpu_to_event[i] == NP_MATCH_NONE) {
            result->pending_no_event++;
            err = count_stack(result, cpu->stack_ids[i], 0, 0);
        } else {
            err = merge_launch(result, gpu, cpu->stack_ids[i], &gpu->launches[cpu_to_event[i]]);
        }
        if (err)
            return err;
    }
    return 0;
}

static struct np_match_point *launch_points(const struct gpu_side *gpu) {
    struct np_match_point *points = malloc((gpu->nlaunches ? gpu->nlaunches : 1) * sizeof(*points));
    for (size_t i = 0; points && i < gpu->nlaunches; i++)
        points[i] = (struct np_match_point){gpu->launches[i].start_ns, gpu->launches[i].thread};
    return points;
}

static int correlate(const struct merge_options *opt, const struct cpu_side *cpu,
                     struct gpu_side *gpu, struct merge_result *result) {
    keep_last_launch_per_id(gpu);
    sort_unless_sorted(gpu->kernels, gpu->nkernels, sizeof(*gpu->kernels), compare_kernels);
    struct np_match_point *events = launch_points(gpu);
    size_t *cpu_to_event = malloc((cpu->count ? cpu->count : 1) * sizeof(*cpu_to_event));
    result->per_kernel = calloc(gpu->kernel_names.count + 1, sizeof(*result->per_kernel));
    int err = events && cpu_to_event && result->per_kernel ? 0 : -ENOMEM;
    if (!err)
        err = np_match_launches(cpu->points, cpu->count, events, gpu->nlaunches, opt->tolerance_ns,
                                cpu_to_event);
    if (!err)
        err = merge_all(cpu, gpu, cpu_to_event, result);
    free(events);
    free(cpu_to_event);
    return err;
}

/* ---- output ------------------------------------------------------------------ */

static int compare_lines(const void *a, const void *b) {
    const struct output_line *x = a, *y = b;
    return strcmp(x->text, y->text);
}

static void free_lines(struct output_line *lines, size_t n) {
    for (size_t i = 0; lines && i < n; i++)
        free(lines[i].text);
    free(lines);
}

static char *line_text(const struct merged_stack *m, const struct cpu_side *cpu,
                       const struct gpu_side *gpu) {
    struct np_str text;
    np_str_init(&text);
    np_str_append(&text, table_text(&cpu->stacks, m->stack_id));
    if (m->kernel_slot) {
        np_str_append(&text, ";" KERNEL_FRAME);
        np_str_append(&text, table_text(&gpu->kernel_names, m->kernel_slot - 1));
    } else {
        np_str_append(&text, ";" PENDING_FRAME);
    }
    if (text.failed) {
        np_str_free(&text);
        return NULL;
    }
    return text.buf;
}

/* Sums lines with the same text (sorted), in place; returns how many are left. */
static size_t fold_equal_lines(struct output_line *lines, size_t n) {
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (kept > 0 && strcmp(lines[kept - 1].text, lines[i].text) == 0) {
            lines[kept - 1].count += lines[i].count;
            lines[kept - 1].gpu_ns += lines[i].gpu_ns;
            lines[kept - 1].ran_kernel |= lines[i].ran_kernel;
            free(lines[i].text);
            continue;
        }
        lines[kept++] = lines[i];
    }
    return kept;
}

/* The merged stacks as text, sorted byte-wise. */
static int build_lines(const struct merge_result *result, const struct cpu_side *cpu,
                       const struct gpu_side *gpu, struct output_line **out, size_t *count) {
    size_t n = 0;
    struct output_line *lines = calloc(result->merged.count + 1, sizeof(*lines));
    if (!lines)
        return -ENOMEM;
    for (size_t i = 0; i < result->merged.cap; i++) {
        if (!result->merged.slots[i].used)
            continue;
        const struct merged_stack *m = result->merged.slots[i].value;
        lines[n] =
            (struct output_line){line_text(m, cpu, gpu), m->count, m->gpu_ns, m->kernel_slot != 0};
        if (!lines[n++].text) {
            free_lines(lines, n);
            return -ENOMEM;
        }
    }
    qsort(lines, n, sizeof(*lines), compare_lines);
    *out = lines;
    *count = fold_equal_lines(lines, n);
    return 0;
}

static char *temp_path(const char *path) {
    char *tmp = NULL;
    return asprintf(&tmp, "%s.tmp", path) < 0 ? NULL : tmp;
}

/* Writes path.tmp: lines weighted by count, or by GPU ns (pending ones left out). */
static int write_temp(const char *tmp, const struct output_line *lines, size_t n, bool by_gpu_ns) {
    FILE *f = fopen(tmp, "we");
    if (!f)
        return -errno;
    setvbuf(f, NULL, _IOFBF, OUTPUT_BUFFER_SIZE);
    for (size_t i = 0; i < n; i++) {
        if (by_gpu_ns && !lines[i].ran_kernel)
            continue;
        unsigned long long weight = by_gpu_ns ? lines[i].gpu_ns : lines[i].count;
        fprintf(f, "%s %llu\n", lines[i].text, weight);
    }
    int err = ferror(f) ? (errno ? -errno : -EIO) : 0;
    if (fclose(f) != 0 && !err)
        err = errno ? -errno : -EIO;
    if (err)
        unlink(tmp);
    return err;
}

/* Writes both outputs next to their final names, then renames them: a
 * failed merge leaves no half-written file. */
static int write_outputs(const struct merge_options *opt, const struct output_line *lines,
                         size_t n) {
    const char *paths[2] = {opt->out_path, opt->gpu_ns_path};
    char *tmps[2] = {NULL, NULL};
    size_t count = opt->gpu_ns_path ? 2 : 1, written = 0;
    int err = 0;

    for (; written < count && !err; written++) {
        tmps[written] = temp_path(paths[written]);
        err = tmps[written] ? write_temp(tmps[written], lines, n, written == 1) : -ENOMEM;
        if (err)
            np_err("cannot write %s: %s", paths[written], strerror(-err));
    }
    for (size_t i = 0; i < count && !err; i++) {
        if (rename(tmps[i], paths[i]) != 0) {
            err = -errno;
            np_err("cannot rename %s to %s: %s", tmps[i], paths[i], strerror(errno));
        }
    }
    for (size_t i = 0; i < count; i++) {
        if (err && tmps[i])
            unlink(tmps[i]);
        free(tmps[i]);
    }
    return err;
}

/* ---- summary ------------------------------------------------------------------ */

struct kernel_row {
    const char *name;
    struct kernel_stats stats;
};

static int compare_kernel_rows(const void *a, const void *b) {
    const struct kernel_row *x = a, *y = b;
    if (x->stats.gpu_ns != y->stats.gpu_ns)
        return x->stats.gpu_ns > y->stats.gpu_ns ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int print_kernel_table(const struct gpu_side *gpu, const struct merge_result *result) {
    size_t n = 0;
    struct kernel_row *rows = calloc(gpu->kernel_names.count + 1, sizeof(*rows));
    if (!rows)
        return -ENOMEM;
    for (uint32_t id = 0; id < gpu->kernel_names.count; id++) {
        if (result->per_kernel[id].count > 0)
            rows[n++] =
                (struct kernel_row){table_text(&gpu->kernel_names, id), result->per_kernel[id]};
    }
    qsort(rows, n, sizeof(*rows), compare_kernel_rows);
    printf("%10s %14s %12s  %s\n", "count", "total_gpu_ms", "mean_us", "kernel");
    for (size_t i = 0; i < n; i++)
        printf("%10llu %14.3f %12.3f  %s\n", (unsigned long long)rows[i].stats.count,
               (double)rows[i].stats.gpu_ns / 1e6,
               (double)rows[i].stats.gpu_ns / 1e3 / (double)rows[i].stats.count, rows[i].name);
    free(rows);
    return 0;
}

static int print_summary(const struct cpu_side *cpu, const struct gpu_side *gpu,
                         const struct merge_result *result) {
    int err = print_kernel_table(gpu, result);
    if (err)
        return err;
    size_t pending = result->pending_no_event + result->pending_no_kernel;
    printf("\nCPU launches: %zu (matched %zu, pending %zu: %zu without a runtime event, "
           "%zu without a kernel)\n",
           cpu->count, result->matched, pending, result->pending_no_event,
           result->pending_no_kernel);
    printf("runtime launch events: %zu (used %zu, unused %zu; %zu replaced by a later event "
           "with the same correlationId)\n",
           gpu->nlaunches, result->launches_used, gpu->nlaunches - result->launches_used,
           gpu->duplicate_launches);
    printf("kernels: %zu (used %zu, unused %zu)\n", gpu->nkernels, result->kernels_used,
           gpu->nkernels - result->kernels_used);
    printf("skipped: %zu malformed CPU lines, %zu CPU lines with no frames left, %zu malformed "
           "trace events, %zu launch/kernel events with ts, dur or correlationId <= 0\n",
           cpu->malformed.count, cpu->no_frames, gpu->malformed.count, gpu->invalid_values);
    printf("other trace events: %zu GPU_Memcpy, %zu GPU_Memset, %zu metadata, %zu other\n",
           gpu->memcpy_events, gpu->memset_events, gpu->metadata_events, gpu->other_events);
    return fflush(stdout) == 0 ? 0 : -EIO;
}

static void print_closing_counts(const struct cpu_side *cpu, const struct gpu_side *gpu,
                                 const struct merge_result *result) {
    np_info("merged %zu CPU launches: %zu matched, %zu pending; %zu malformed CPU lines and %zu "
            "malformed trace events skipped",
            cpu->count, result->matched, result->pending_no_event + result->pending_no_kernel,
            cpu->malformed.count, gpu->malformed.count);
}

/* ---- the command ----------------------------------------------------------------- */

static int run_merge(const struct merge_options *opt, struct cpu_side *cpu, struct gpu_side *gpu,
                     struct merge_result *result) {
    struct output_line *lines = NULL;
    size_t nlines = 0;

    int err = read_inputs(opt, cpu, gpu);
    if (err)
        return err;
    report_malformed(&cpu->malformed);
    report_malformed(&gpu->malformed);
    err = correlate(opt, cpu, gpu, result);
    if (!err)
        err = build_lines(result, cpu, gpu, &lines, &nlines);
    if (err) {
        np_err("merge: %s", strerror(-err));
        return err;
    }
    err = write_outputs(opt, lines, nlines);
    free_lines(lines, nlines);
    if (!err && opt->summary)
        err = print_summary(cpu, gpu, result);
    if (!err)
        print_closing_counts(cpu, gpu, result);
    return err;
}

int np_cmd_merge(int argc, char **argv) {
    struct merge_options opt = {0};
    struct cpu_side cpu;
    struct gpu_side gpu;
    struct merge_result result = {0};

    int parsed = parse_options(argc, argv, &opt);
    if (parsed != 0) {
        if (parsed < 0)
            usage(stderr);
        return parsed < 0 ? 2 : 0;
    }
    if (opt.quiet)
        np_log_set_level(NP_LOG_ERROR);
    cpu_side_init(&cpu, opt.cpu_path);
    gpu_side_init(&gpu, opt.gpu_path);
    np_map_init(&result.merged);
    int err = run_merge(&opt, &cpu, &gpu, &result);
    np_map_free(&result.merged, free);
    free(result.per_kernel);
    gpu_side_free(&gpu);
    cpu_side_free(&cpu);
    return err ? 1 : 0;
}
