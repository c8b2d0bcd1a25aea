/* perfetto.c - the trace.json writer (see perfetto.h): reads a recording
 * directory's JSONL files line by line (src/recording/, leniently) and
 * streams Chrome Trace Event JSON. It owns the track layout (CPU threads,
 * GPU devices and their streams, overlap lanes), the flow ids, and the args
 * of each slice (a launch's stack; a graph replay's record's capture stack
 * and capture site). */
#define _GNU_SOURCE
#include "writers/perfetto.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/hashmap.h"
#include "lib/json.h"
#include "lib/util.h"
#include "ncclprobe/recording.h"
#include "recording/frames.h"
#include "recording/recording.h"

#define CPU_SLICE_NS 1000u              /* nominal length of a launch slice */
#define CPU_RING 16u                    /* recent slices per thread kept for nesting */
#define MAX_LANES 16u                   /* tracks per GPU stream for overlapping records */
#define GPU_PID_BASE 1000000000u        /* synthetic pid of "GPU N": above any Linux pid */
#define GPU_TID_BASE 1100000000u        /* synthetic tids of the stream tracks */
#define DOUBLE_EXACT 9007199254740992.0 /* 2^53 */

struct cpu_thread {
    uint64_t start[CPU_RING], end[CPU_RING]; /* the last slices written on it */
    unsigned n, next;
};

struct gpu_stream {
    uint64_t end[MAX_LANES]; /* the latest end placed on each lane */
    uint32_t tid[MAX_LANES];
    unsigned nlanes;
};

struct trace_counts {
    uint64_t launches, nested, nccl_ops, gpu_records, unmatched, flows;
    uint64_t gpu_overlaps, lanes;
    uint64_t unknown_capture_stacks; /* records naming a capture stack stacks.jsonl lacks */
};

/* One of the JSONL files, read a line ahead, with the line's sort key. */
struct source {
    struct np_rec_lines it;
    bool launches; /* launches.jsonl, else gpu_unmatched.jsonl */
    bool have;     /* a line is held */
    struct np_rec_launch launch;
    struct np_rec_gpu gpu;
    uint64_t key;
};

struct trace {
    const char *dir;
    struct np_recording rec;
    struct source launches, unmatched;
    FILE *f;
    struct np_str ev; /* the event being written */
    bool first_event;
    char **stack_json;        /* per stack of rec: its frames as a JSON array, once used */
    struct np_map proc_names; /* pid -> const char *: from summary.json / window.json */
    struct np_map procs;      /* pid (CPU) or GPU pid -> seen */
    struct np_map threads;    /* pid << 32 | tid -> struct cpu_thread */
    struct np_map devices;    /* device -> first context seen + 1 */
    struct np_map streams;    /* "device:context:stream" -> struct gpu_stream */
    uint32_t next_gpu_tid;
    uint64_t next_flow;
    struct trace_counts n;
};

/* What a GPU record's slice needs to know of the launch that made it. */
struct launch_ref {
    uint32_t pid, tid;
    uint64_t ts_ns;
    bool flow; /* the launch has a slice to start an arrow from */
    const struct np_rec_launch *launch;
};

/* ---- JSON output ----------------------------------------------------------- */

/* ,"key":US.NNN (nanoseconds as microseconds, exactly). */
static void put_us(struct np_str *s, const char *key, uint64_t ns) {
    np_str_appendf(s, ",\"%s\":%" PRIu64 ".%03u", key, ns / 1000, (unsigned)(ns % 1000));
}

static void put_number(struct np_str *s, double v) {
    if (!isfinite(v)) /* "1e999" parses as infinity, which JSON cannot say */
        np_str_append(s, "null");
    else if (v > -DOUBLE_EXACT && v < DOUBLE_EXACT && v == (double)(int64_t)v)
        np_str_appendf(s, "%" PRId64, (int64_t)v);
    else
        np_str_appendf(s, "%.17g", v);
}

/* Any parsed value back as JSON, strings made valid UTF-8. */
static void put_value(struct np_str *s, const cJSON *v) {
    const char *digits;
    if (np_json_long_integer(v, &digits)) {
        np_str_append(s, digits);
    } else if (cJSON_IsString(v)) {
        np_json_string(s, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        put_number(s, v->valuedouble);
    } else if (cJSON_IsBool(v)) {
        np_str_append(s, cJSON_IsTrue(v) ? "true" : "false");
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        bool object = cJSON_IsObject(v);
        np_str_append(s, object ? "{" : "[");
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child)
                np_str_append(s, ",");
            if (object) {
                np_json_string(s, c->string ? c->string : "");
                np_str_append(s, ":");
            }
            put_value(s, c);
        }
        np_str_append(s, object ? "}" : "]");
    } else {
        np_str_append(s, "null");
    }
}

/* Starts the next member of an object being written. */
static void put_key(struct np_str *s, bool *first, const char *key) {
    if (!*first)
        np_str_append(s, ",");
    *first = false;
    np_json_string(s, key);
    np_str_append(s, ":");
}

static bool listed(const char *key, const char *const *keys) {
    for (; *keys; keys++)
        if (strcmp(key, *keys) == 0)
            return true;
    return false;
}

/* The members of obj but those in skip (NULL-terminated). */
static void put_members(struct np_str *s, bool *first, const cJSON *obj, const char *const *skip) {
    for (const cJSON *c = obj->child; c; c = c->next) {
        if (!c->string || listed(c->string, skip))
            continue;
        put_key(s, first, c->string);
        put_value(s, c);
    }
}

static void event_open(struct trace *t, const char *ph, uint32_t pid, uint32_t tid) {
    np_str_reset(&t->ev);
    np_str_appendf(&t->ev, "{\"ph\":\"%s\",\"pid\":%" PRIu32 ",\"tid\":%" PRIu32, ph, pid, tid);
}

static void event_name(struct trace *t, const char *name, const char *cat) {
    np_str_append(&t->ev, ",\"name\":");
    np_json_string(&t->ev, name);
    if (cat)
        np_str_appendf(&t->ev, ",\"cat\":\"%s\"", cat);
}

static int event_close(struct trace *t) {
    np_str_append(&t->ev, "}");
    if (t->ev.failed)
        return -ENOMEM;
    if (!t->first_event)
        fputs(",\n", t->f);
    t->first_event = false;
    fwrite(t->ev.buf, 1, t->ev.len, t->f);
    return 0;
}

/* ---- tracks ------------------------------------------------------------------ */

static int metadata(struct trace *t, const char *what, uint32_t pid, uint32_t tid, const char *name,
                    int64_t sort_index) {
    event_open(t, "M", pid, tid);
    event_name(t, what, NULL);
    if (name) {
        np_str_append(&t->ev, ",\"args\":{\"name\":");
        np_json_string(&t->ev, name);
    } else {
        np_str_appendf(&t->ev, ",\"args\":{\"sort_index\":%" PRId64, sort_index);
    }
    np_str_append(&t->ev, "}");
    return event_close(t);
}

/* process_name and process_sort_index the first time pid is seen. */
static int ensure_process(struct trace *t, uint32_t pid, const char *name) {
    if (np_map_get_u64(&t->procs, pid))
        return 0;
    int err = np_map_put_u64(&t->procs, pid, (void *)1);
    if (!err && name)
        err = metadata(t, "process_name", pid, pid, name, 0);
    return err ? err : metadata(t, "process_sort_index", pid, pid, NULL, pid);
}

/* A CPU thread's track, named at first sight (comm may be NULL). */
static struct cpu_thread *cpu_thread(struct trace *t, uint32_t pid, uint32_t tid,
                                     const char *comm) {
    uint64_t key = (uint64_t)pid << 32 | tid;
    struct cpu_thread *th = np_map_get_u64(&t->threads, key);
    if (th)
        return th;
    const char *pname = np_map_get_u64(&t->proc_names, pid);
    th = calloc(1, sizeof(*th));
    if (!th || np_map_put_u64(&t->threads, key, th) != 0) {
        free(th);
        return NULL;
    }
    int err = ensure_process(t, pid, pname ? pname : comm);
    if (!err && comm)
        err = metadata(t, "thread_name", pid, tid, comm, 0);
    return err ? NULL : th;
}

/* The end of a slice [start, start + CPU_SLICE_NS) on th, cut short so that
 * it nests in, or ends before, each recent slice of the thread. */
static uint64_t cpu_slice_end(struct cpu_thread *th, uint64_t start) {
    uint64_t end = start + CPU_SLICE_NS;
    for (unsigned i = 0; i < th->n; i++) {
        uint64_t a = th->start[i], b = th->end[i];
        if (a <= start && start < b && end > b)
            end = b;
        else if (start < a && a < end)
            end = a;
    }
    th->start[th->next] = start;
    th->end[th->next] = end;
    th->next = (th->next + 1) % CPU_RING;
    th->n += th->n < CPU_RING;
    return end;
}

static int ensure_gpu(struct trace *t, uint32_t device, uint32_t context, bool *first_context) {
    uintptr_t seen = (uintptr_t)np_map_get_u64(&t->devices, device);
    if (!seen) {
        char name[32];
        seen = (uintptr_t)context + 1;
        snprintf(name, sizeof(name), "GPU %" PRIu32, device);
        int err = np_map_put_u64(&t->devices, device, (void *)seen);
        if (!err)
            err = ensure_process(t, GPU_PID_BASE + device, name);
        if (err)
            return err;
    }
    *first_context = seen == (uintptr_t)context + 1;
    return 0;
}

static int new_lane(struct trace *t, struct gpu_stream *gs, uint32_t device, uint32_t context,
                    uint32_t stream) {
    bool first_context;
    int err = ensure_gpu(t, device, context, &first_context);
    if (err)
        return err;
    unsigned lane = gs->nlanes++;
    char name[96];
    int n = snprintf(name, sizeof(name), "stream %" PRIu32, stream);
    if (!first_context)
        n += snprintf(name + n, sizeof(name) - (size_t)n, " (context %" PRIu32 ")", context);
    if (lane)
        snprintf(name + n, sizeof(name) - (size_t)n, " (lane %u)", lane + 1);
    gs->tid[lane] = GPU_TID_BASE + t->next_gpu_tid++;
    gs->end[lane] = 0;
    t->n.lanes += lane > 0;
    uint32_t pid = GPU_PID_BASE + device;
    err = metadata(t, "thread_name", pid, gs->tid[lane], name, 0);
    return err ? err
               : metadata(t, "thread_sort_index", pid, gs->tid[lane], NULL,
                          (int64_t)stream * MAX_LANES + lane);
}

/* The track for a record [start, end) on a stream: the first of its lanes
 * where everything placed so far ended by start, so none overlap. */
static int gpu_track(struct trace *t, uint32_t device, uint32_t context, uint32_t stream,
                     uint64_t start, uint64_t end, uint32_t *tid) {
    char key[48];
    snprintf(key, sizeof(key), "%" PRIu32 ":%" PRIu32 ":%" PRIu32, device, context, stream);
    struct gpu_stream *gs = np_map_get_str(&t->streams, key);
    if (!gs) {
        gs = calloc(1, sizeof(*gs));
        if (!gs || np_map_put_str(&t->streams, key, gs) != 0) {
            free(gs);
            return -ENOMEM;
        }
    }
    unsigned lane = 0;
    while (lane < gs->nlanes && gs->end[lane] > start)
        lane++;
    if (lane == gs->nlanes && gs->nlanes < MAX_LANES) {
        int err = new_lane(t, gs, device, context, stream);
        if (err)
            return err;
    } else if (lane == gs->nlanes) { /* every lane taken: the one free soonest */
        lane = 0;
        for (unsigned i = 1; i < gs->nlanes; i++)
            lane = gs->end[i] < gs->end[lane] ? i : lane;
        t->n.gpu_overlaps++;
    }
    if (end > gs->end[lane])
        gs->end[lane] = end;
    *tid = gs->tid[lane];
    return 0;
}

/* ---- stacks ----------------------------------------------------------------------- */

/* The frames of a stack as a JSON array, made the first time it is used:
 * 0 (*out NULL when stacks.jsonl does not have it) or -ENOMEM. */
static int stack_json(struct trace *t, uint64_t id, const char **out) {
    size_t index;
    const struct np_rec_stack *rs = np_recording_stack(&t->rec, id, &index);
    *out = rs ? t->stack_json[index] : NULL;
    if (!rs || *out)
        return 0;
    struct np_str s;
    np_str_init(&s);
    np_str_append(&s, "[");
    for (uint32_t i = 0; i < rs->nframes; i++) {
        np_str_append(&s, i ? "," : "");
        np_json_string(&s, rs->frames[i]);
    }
    np_str_append(&s, "]");
    if (s.failed) {
        np_str_free(&s);
        return -ENOMEM;
    }
    *out = t->stack_json[index] = s.buf;
    return 0;
}

static int put_stack(struct trace *t, bool *first, uint64_t id) {
    const char *frames;
    int err = stack_json(t, id, &frames);
    if (!err && frames) {
        put_key(&t->ev, first, "stack");
        np_str_append(&t->ev, frames);
    }
    return err;
}

/* A replayed record tied to the launch that captured it: that launch's
 * stack (replay;API;[graph capture];capture frames), the line that captured
 * it (frames.h), and how it was tied. */
static int put_capture(struct trace *t, bool *first, const struct np_rec_gpu *g) {
    const struct np_rec_stack *rs = np_recording_stack(&t->rec, g->capture_stack_id, NULL);
    const char *frames = NULL, *site = NULL;
    int err = g->capture_stack_id ? stack_json(t, g->capture_stack_id, &frames) : 0;
    if (err)
        return err;
    t->n.unknown_capture_stacks += g->capture_stack_id && !rs;
    if (frames) {
        put_key(&t->ev, first, "capture_stack");
        np_str_append(&t->ev, frames);
        site = np_frames_capture_site(rs->frames, rs->nframes);
    }
    if (site) {
        put_key(&t->ev, first, "capture_site");
        np_json_string(&t->ev, site);
    }
    if (g->capture_by) {
        put_key(&t->ev, first, NP_KEY_CAPTURE_BY);
        np_json_string(&t->ev, g->capture_by);
    }
    return 0;
}

/* ---- GPU records --------------------------------------------------------------- */

static const char *gpu_cat(enum np_rec_gpu_type type) {
    static const char *const cats[] = {[NP_REC_GPU_KERNEL] = "gpu_kernel",
                                       [NP_REC_GPU_MEMCPY] = "gpu_memcpy",
                                       [NP_REC_GPU_MEMSET] = "gpu_memset",
                                       [NP_REC_GPU_OTHER] = "gpu"};
    return cats[type];
}

/* A kernel's name, "Memcpy HtoD", "Memset" (buf holds what is made up). */
static const char *gpu_name(const struct np_rec_gpu *g, char *buf, size_t size) {
    switch (g->type) {
    case NP_REC_GPU_KERNEL:
        return g->name;
    case NP_REC_GPU_MEMCPY:
        snprintf(buf, size, "Memcpy %s", g->copy_kind ? g->copy_kind : "?");
        return buf;
    case NP_REC_GPU_MEMSET:
        return "Memset";
    default:
        return g->type_name;
    }
}

/* The NCCL plan's op types and communicator, on a kernel of an NCCL launch. */
static void put_nccl_summary(struct np_str *s, bool *first, const struct np_rec_launch *l) {
    put_key(s, first, "nccl_ops");
    np_str_append(s, "[");
    for (uint32_t i = 0; i < l->nops; i++) {
        np_str_append(s, i ? "," : "");
        np_json_string(s, l->ops[i]);
    }
    np_str_append(s, "]");
    put_key(s, first, NP_KEY_COMM_HASH);
    if (l->comm_hash)
        np_json_string(s, l->comm_hash);
    else
        np_str_append(s, "null"); /* the communicator could not be read */
}

static int flow(struct trace *t, const struct launch_ref *from, uint32_t pid, uint32_t tid,
                uint64_t start) {
    uint64_t id = ++t->next_flow;
    event_open(t, "s", from->pid, from->tid);
    event_name(t, "launch", "launch");
    np_str_appendf(&t->ev, ",\"id\":%" PRIu64, id);
    put_us(&t->ev, "ts", from->ts_ns);
    int err = event_close(t);
    if (err)
        return err;
    event_open(t, "f", pid, tid);
    event_name(t, "launch", "launch");
    np_str_appendf(&t->ev, ",\"id\":%" PRIu64 ",\"bp\":\"e\"", id);
    put_us(&t->ev, "ts", start);
    t->n.flows++;
    return event_close(t);
}

/* One kernel, memcpy or memset: a slice on its stream's track; from is the
 * launch that made it, NULL for gpu_unmatched.jsonl. */
static int gpu_record(struct trace *t, const struct np_rec_gpu *g, const struct launch_ref *from) {
    static const char *const skip[] = {NP_KEY_GPU_TYPE,
                                       NP_KEY_GPU_NAME,
                                       NP_KEY_START_NS,
                                       NP_KEY_END_NS,
                                       "launch_pid",
                                       "launch_tid",
                                       "nccl_ops",
                                       NP_KEY_COMM_HASH,
                                       "unmatched",
                                       NP_KEY_CAPTURE_BY,
                                       "capture_stack",
                                       "capture_site",
                                       NULL};
    uint32_t device = (uint32_t)g->device, tid;
    int err = gpu_track(t, device, (uint32_t)g->context, (uint32_t)g->stream, g->start_ns,
                        g->end_ns, &tid);
    if (err)
        return err;
    char buf[128];
    event_open(t, "X", GPU_PID_BASE + device, tid);
    event_name(t, gpu_name(g, buf, sizeof(buf)), gpu_cat(g->type));
    put_us(&t->ev, "ts", g->start_ns);
    put_us(&t->ev, "dur", g->end_ns - g->start_ns);
    np_str_append(&t->ev, ",\"args\":{");
    bool first = true;
    put_members(&t->ev, &first, g->json, skip);
    err = put_capture(t, &first, g);
    if (err)
        return err;
    if (from) {
        put_key(&t->ev, &first, "launch_pid");
        np_str_appendf(&t->ev, "%" PRIu32, from->pid);
        put_key(&t->ev, &first, "launch_tid");
        np_str_appendf(&t->ev, "%" PRIu32, from->tid);
        if (from->launch->nccl)
            put_nccl_summary(&t->ev, &first, from->launch);
    } else {
        put_key(&t->ev, &first, "unmatched");
        np_str_append(&t->ev, "true");
    }
    np_str_append(&t->ev, "}");
    err = event_close(t);
    if (!err && from && from->flow)
        err = flow(t, from, GPU_PID_BASE + device, tid, g->start_ns);
    t->n.gpu_records += from != NULL;
    t->n.unmatched += from == NULL;
    return err;
}

/* ---- launches.jsonl, nccl.jsonl, gpu_unmatched.jsonl ---------------------------- */

static int launch_line(struct trace *t, const struct np_rec_launch *l) {
    static const char *const skip[] = {NP_KEY_TS_NS, NP_KEY_PID,    NP_KEY_TID, NP_KEY_COMM,
                                       NP_KEY_GPU,   "gpu_records", "stack",    NULL};
    /* nested in another launch, or captured into a graph (it ran nothing):
     * an instant, not a slice of its own */
    bool instant = l->nested || l->captured;
    struct launch_ref ref = {
        .pid = l->pid, .tid = l->tid, .ts_ns = l->ts_ns, .flow = !instant, .launch = l};
    struct cpu_thread *th = cpu_thread(t, l->pid, l->tid, l->comm);
    if (!th)
        return -ENOMEM;
    event_open(t, instant ? "i" : "X", l->pid, l->tid);
    event_name(t, l->api ? l->api : l->kernel, l->captured ? "captured" : "launch");
    put_us(&t->ev, "ts", l->ts_ns);
    if (instant)
        np_str_append(&t->ev, ",\"s\":\"t\"");
    else
        put_us(&t->ev, "dur", cpu_slice_end(th, l->ts_ns) - l->ts_ns);
    np_str_append(&t->ev, ",\"args\":{");
    bool first = true;
    put_members(&t->ev, &first, l->json, skip);
    put_key(&t->ev, &first, "gpu_records");
    np_str_appendf(&t->ev, "%" PRIu32, l->ngpu);
    int err = put_stack(t, &first, l->stack_id);
    np_str_append(&t->ev, "}");
    err = err ? err : event_close(t);
    t->n.launches += !instant;
    t->n.nested += l->nested;
    for (uint32_t i = 0; i < l->ngpu && !err; i++)
        err = gpu_record(t, &l->gpu[i], &ref);
    return err;
}

static int nccl_line(struct trace *t, const struct np_rec_nccl_call *c) {
    static const char *const skip[] = {NP_KEY_TS_NS,  NP_KEY_PID, NP_KEY_TID,
                                       NP_KEY_THREAD, "stack",    NULL};
    if (!cpu_thread(t, c->pid, c->tid, c->thread))
        return -ENOMEM;
    char name[128];
    snprintf(name, sizeof(name), "nccl%s", c->op ? c->op : "");
    event_open(t, "i", c->pid, c->tid);
    event_name(t, name, "nccl");
    put_us(&t->ev, "ts", c->ts_ns);
    np_str_append(&t->ev, ",\"s\":\"t\",\"args\":{");
    bool first = true;
    put_members(&t->ev, &first, c->json, skip);
    int err = c->has_stack ? put_stack(t, &first, c->stack_id) : 0;
    np_str_append(&t->ev, "}");
    t->n.nccl_ops++;
    return err ? err : event_close(t);
}

/* ---- reading ------------------------------------------------------------------ */

/* When a launch's GPU work starts (its launch time without records). */
static uint64_t launch_key(const struct np_rec_launch *l) {
    uint64_t key = l->ts_ns;
    for (uint32_t i = 0; i < l->ngpu; i++)
        if (i == 0 || l->gpu[i].start_ns < key)
            key = l->gpu[i].start_ns;
    return key;
}

/* Opens DIR/name for src (absent: no lines). */
static int source_open(struct trace *t, struct source *src, const char *name, bool launches) {
    src->launches = launches;
    int err = np_rec_lines_open(&t->rec, name, &src->it);
    return err == -ENOENT ? 0 : err;
}

/* Moves src to its next line (src->have false at the end). */
static int source_next(struct source *src) {
    int got = src->launches ? np_rec_next_launch(&src->it, &src->launch)
                            : np_rec_next_gpu(&src->it, &src->gpu);
    src->have = got > 0;
    if (src->have)
        src->key = src->launches ? launch_key(&src->launch) : src->gpu.start_ns;
    return got < 0 ? got : 0;
}

/* launches.jsonl and gpu_unmatched.jsonl together, whichever line's GPU work
 * starts first next: both files are nearly in time order, so records of one
 * stream come nearly in order and share its first lane. */
static int launches_and_unmatched(struct trace *t) {
    struct source *l = &t->launches, *u = &t->unmatched;
    int err = source_open(t, u, NP_REC_GPU_UNMATCHED_JSONL, false);
    if (!err)
        err = source_next(l);
    if (!err)
        err = source_next(u);
    while (!err && (l->have || u->have)) {
        bool launch = l->have && (!u->have || l->key <= u->key);
        struct source *s = launch ? l : u;
        err = launch ? launch_line(t, &l->launch) : gpu_record(t, &u->gpu, NULL);
        if (!err)
            err = source_next(s);
    }
    return err;
}

static int nccl_calls(struct trace *t) {
    struct np_rec_lines it;
    struct np_rec_nccl_call c;
    int err = np_rec_lines_open(&t->rec, NP_REC_NCCL_JSONL, &it);
    if (err == -ENOENT)
        err = 0;
    while (!err && (err = np_rec_next_nccl_call(&it, &c)) > 0)
        err = nccl_line(t, &c);
    np_rec_lines_close(&it);
    return err;
}

/* ---- stacks and process names ---------------------------------------------- */

static int add_proc_name(struct trace *t, const struct np_rec_process *p) {
    if (!p->pid || p->pid > UINT32_MAX || !p->comm || !*p->comm ||
        np_map_get_u64(&t->proc_names, p->pid))
        return 0;
    return np_map_put_u64(&t->proc_names, p->pid, (void *)p->comm);
}

/* summary.json's targets[] (record) and window.json's process (daemon). */
static int load_proc_names(struct trace *t) {
    struct np_rec_meta m;
    int err = np_recording_meta(&t->rec, &m);
    for (size_t i = 0; !err && i < m.ntargets; i++)
        err = add_proc_name(t, &m.targets[i]);
    if (!err)
        err = add_proc_name(t, &m.process);
    np_rec_meta_free(&m);
    return err;
}

static int load_stacks(struct trace *t) {
    int err = np_recording_stacks(&t->rec);
    if (err && err != -ENOENT)
        return err;
    t->stack_json = calloc(t->rec.nstacks + 1, sizeof(*t->stack_json));
    return t->stack_json ? 0 : -ENOMEM;
}

/* ---- the file ----------------------------------------------------------------------- */

static void write_footer(struct trace *t) {
    const struct trace_counts *n = &t->n;
    fprintf(t->f,
            "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"generator\":\"ncclprobe\","
            "\"ts\":\"CLOCK_MONOTONIC microseconds, the clock of ts_ns in " NP_REC_LAUNCHES_JSONL
            "\",\"cpu_launch_slice_ns\":%u,"
            "\"cpu_launch_slice\":\"nominal: the probes see the entry of a call only\","
            "\"launches\":%" PRIu64 ",\"nested_launches\":%" PRIu64 ",\"nccl_ops\":%" PRIu64
            ",\"gpu_records\":%" PRIu64 ",\"gpu_unmatched\":%" PRIu64 ",\"flows\":%" PRIu64
            ",\"gpu_extra_lanes\":%" PRIu64 ",\"gpu_overlapping_records\":%" PRIu64
            ",\"skipped_lines\":%" PRIu64 "}}\n",
            CPU_SLICE_NS, n->launches, n->nested, n->nccl_ops, n->gpu_records, n->unmatched,
            n->flows, n->lanes, n->gpu_overlaps, t->rec.malformed);
}

static int write_events(struct trace *t) {
    fputs("{\"traceEvents\":[\n", t->f);
    t->first_event = true;
    int err = launches_and_unmatched(t);
    if (!err)
        err = nccl_calls(t);
    if (!err)
        write_footer(t);
    return err;
}

static int fill_trace(FILE *f, void *ctx) {
    struct trace *t = ctx;
    t->f = f;
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    int err = write_events(t);
    t->f = NULL;
    return err;
}

static void warn_counts(const struct trace *t) {
    if (t->rec.malformed)
        np_warn("%s/" NP_REC_TRACE_JSON ": %" PRIu64 " malformed input lines skipped", t->dir,
                t->rec.malformed);
    if (t->n.unknown_capture_stacks)
        np_warn("%s/" NP_REC_TRACE_JSON ": %" PRIu64 " GPU records name a " NP_KEY_CAPTURE_STACK_ID
                " " NP_REC_STACKS_JSONL " does not have: shown without their capture stack",
                t->dir, t->n.unknown_capture_stacks);
    if (t->n.gpu_overlaps)
        np_warn("%s/" NP_REC_TRACE_JSON ": %" PRIu64 " GPU records overlap others on their "
                "stream track (more than %u at once): Perfetto may not show them",
                t->dir, t->n.gpu_overlaps, MAX_LANES);
}

/* Opens launches.jsonl: 0; 1 for an aggregate set (skipped); -errno (said). */
static int open_launches(struct trace *t) {
    t->launches.launches = true;
    int err = np_rec_lines_open(&t->rec, NP_REC_LAUNCHES_JSONL, &t->launches.it);
    if (err != -ENOENT)
        return err;
    if (np_recording_has(&t->rec, NP_REC_LAUNCHES_FOLDED)) {
        /* every daemon aggregate set: expected, not worth a warning */
        np_debug("%s: no " NP_REC_LAUNCHES_JSONL
                 " (an aggregate set has no times): " NP_REC_TRACE_JSON " not written",
                 t->dir);
        return 1;
    }
    np_err("cannot read %s: %s", np_rec_lines_path(&t->launches.it), strerror(-err));
    return err;
}

static int trace_init(struct trace *t, const char *dir) {
    memset(t, 0, sizeof(*t));
    t->dir = dir;
    np_str_init(&t->ev);
    np_map_init(&t->proc_names);
    np_map_init(&t->procs);
    np_map_init(&t->threads);
    np_map_init(&t->devices);
    np_map_init(&t->streams);
    return np_recording_open(&t->rec, dir, NP_REC_LENIENT);
}

static void trace_free(struct trace *t) {
    for (size_t i = 0; t->stack_json && i < t->rec.nstacks; i++)
        free(t->stack_json[i]);
    free(t->stack_json);
    np_rec_lines_close(&t->launches.it);
    np_rec_lines_close(&t->unmatched.it);
    np_str_free(&t->ev);
    np_map_free(&t->proc_names, NULL);
    np_map_free(&t->procs, NULL);
    np_map_free(&t->threads, free);
    np_map_free(&t->devices, NULL);
    np_map_free(&t->streams, free);
    np_recording_close(&t->rec);
}

static int write_trace(struct trace *t) {
    char *path = np_rec_path(t->dir, NP_REC_TRACE_JSON);
    int err = path ? load_proc_names(t) : -ENOMEM;
    if (!err)
        err = load_stacks(t);
    if (!err && (err = np_write_atomic(path, fill_trace, t)) < 0 && err != -ENOMEM)
        np_err("cannot write %s: %s", path, strerror(-err));
    if (!err)
        warn_counts(t);
    else if (err == -ENOMEM)
        np_err("%s: out of memory", path ? path : t->dir);
    free(path);
    return err;
}

int np_write_trace_json(const char *dir) {
    struct trace t;
    int err = trace_init(&t, dir);
    if (!err)
        err = open_launches(&t);
    if (!err)
        err = write_trace(&t);
    else if (err == -ENOMEM)
        np_err("%s: out of memory", dir);
    trace_free(&t);
    return err > 0 ? 0 : err;
}
