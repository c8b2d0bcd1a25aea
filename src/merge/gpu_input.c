/* gpu_input.c - reads the Chrome trace for `ncclprobe merge` (gpu_input.h):
 * each event's members gathered in one pass, the event classified by "ph",
 * "cat" and "name", launches and kernels kept with their timing read exactly
 * (np_trace_number: every digit of "ts" and "dur" counts). */
#include "merge/gpu_input.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "merge/match.h"
#include "merge/trace_json.h"

#define KERNEL_NAME_PREFIX "Kernel: "

enum event_kind {
    EVENT_OTHER,
    EVENT_LAUNCH,
    EVENT_GRAPH_LAUNCH,
    EVENT_KERNEL,
    EVENT_MEMCPY,
    EVENT_MEMSET,
    EVENT_METADATA,
};

/* ---- an event's members ------------------------------------------------------ */

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

/* ---- what the event is ------------------------------------------------------- */

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
    /* In int64_t's range before the cast (converting one outside it is undefined). */
    if (!cJSON_IsNumber(id) || !(id->valuedouble >= -0x1p63 && id->valuedouble < 0x1p63) ||
        id->valuedouble != (double)(int64_t)id->valuedouble)
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

/* ---- keeping launches and kernels ----------------------------------------------- */

static int add_launch(struct np_merge_gpu *gpu, const struct event_fields *f, int64_t start_ns,
                      int64_t correlation, bool graph) {
    struct np_runtime_event *launches =
        np_grow_array(gpu->launches, &gpu->launches_cap, gpu->nlaunches + 1, sizeof(*launches));
    if (!launches)
        return -ENOMEM;
    gpu->launches = launches;
    gpu->launches[gpu->nlaunches] = (struct np_runtime_event){
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

static int intern_kernel_name(struct np_merge_gpu *gpu, const char *raw, uint32_t *id) {
    const struct np_interned *known = np_map_get_str(&gpu->raw_kernel_names, raw);
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
    int err = np_strtab_intern(&gpu->kernel_names, clean, id);
    free(clean);
    if (!err)
        err = np_map_put_str(&gpu->raw_kernel_names, raw, gpu->kernel_names.items[*id]);
    return err;
}

static int add_kernel(struct np_merge_gpu *gpu, const struct np_trace_event *ev,
                      const struct event_fields *f, int64_t dur_ns, int64_t correlation) {
    uint32_t name_id;
    int err = intern_kernel_name(gpu, string_of(f->name), &name_id);
    if (err)
        return err;
    struct np_kernel_event *kernels =
        np_grow_array(gpu->kernels, &gpu->kernels_cap, gpu->nkernels + 1, sizeof(*kernels));
    if (!kernels)
        return -ENOMEM;
    gpu->kernels = kernels;
    gpu->kernels[gpu->nkernels] = (struct np_kernel_event){
        .correlation = correlation,
        .seq = gpu->nkernels,
        .name_id = name_id,
        .gpu_ns = kernel_gpu_ns(ev, f, dur_ns),
    };
    gpu->nkernels++;
    return 0;
}

/* A launch or kernel event: kept when ts, dur and the id are positive. */
static int add_timed_event(struct np_merge_gpu *gpu, const struct np_trace_event *ev,
                           const struct event_fields *f, enum event_kind kind) {
    int64_t start_ns, dur_ns, correlation;
    const char *why = read_timing(ev, f, &start_ns, &dur_ns, &correlation);

    if (why) {
        np_malformed_note(&gpu->malformed, ev->line, why);
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

static int add_trace_event(struct np_merge_gpu *gpu, const struct np_trace_event *ev) {
    struct event_fields f;
    const char *why = NULL;

    gather_fields(ev->json, &f);
    enum event_kind kind = classify_event(&f, &why);
    if (why) {
        np_malformed_note(&gpu->malformed, ev->line, why);
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

/* ---- reading ------------------------------------------------------------------- */

static int read_trace_events(struct np_trace_reader *reader, struct np_merge_gpu *gpu) {
    struct np_trace_event ev;
    int ret, err = 0;

    while (!err && (ret = np_trace_next(reader, &ev)) > 0) {
        if (ev.json)
            err = add_trace_event(gpu, &ev);
        else
            np_malformed_note(&gpu->malformed, ev.line, ev.error);
    }
    return err ? err : ret;
}

int np_merge_gpu_read(const char *path, struct np_merge_gpu *gpu) {
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

void np_merge_gpu_init(struct np_merge_gpu *gpu, const char *path) {
    memset(gpu, 0, sizeof(*gpu));
    np_strtab_init(&gpu->kernel_names);
    np_map_init(&gpu->raw_kernel_names);
    np_malformed_init(&gpu->malformed, path, "event");
}

void np_merge_gpu_free(struct np_merge_gpu *gpu) {
    np_strtab_free(&gpu->kernel_names);
    np_map_free(&gpu->raw_kernel_names, NULL);
    free(gpu->launches);
    free(gpu->kernels);
    np_malformed_free(&gpu->malformed);
}
