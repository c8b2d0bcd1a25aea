/* perfetto.c - the trace.json writer (see perfetto.h): reads a recording
 * directory's JSONL files line by line and streams Chrome Trace Event JSON.
 * It owns the track layout (CPU threads, GPU devices and their streams,
 * overlap lanes) and the flow ids. */
#define _GNU_SOURCE
#include "writers/perfetto.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/hashmap.h"
#include "lib/util.h"
#include "report/jsonl.h"
#include "writers/json.h"

#define CPU_SLICE_NS 1000u              /* nominal length of a launch slice */
#define CPU_RING 16u                    /* recent slices per thread kept for nesting */
#define MAX_LANES 16u                   /* tracks per GPU stream for overlapping records */
#define GPU_PID_BASE 1000000000u        /* synthetic pid of "GPU N": above any Linux pid */
#define GPU_TID_BASE 1100000000u        /* synthetic tids of the stream tracks */
#define LONG_INT_MARK '\x01'            /* jsonl.c writes integers > 15 digits as "\x01DIGITS" */
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
    uint64_t skipped_lines, gpu_overlaps, lanes;
};

struct trace {
    const char *dir;
    FILE *f;
    struct np_str ev; /* the event being written */
    bool first_event;
    struct np_map stacks;     /* stack_id -> char *: its frames as a JSON array */
    struct np_map proc_names; /* pid -> char *: from summary.json / window.json */
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
    const cJSON *nccl;
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

static bool long_integer(const char *text) {
    return text[0] == LONG_INT_MARK && text[1] &&
           strspn(text + 1, "0123456789") == strlen(text + 1);
}

/* Any parsed value back as JSON, strings made valid UTF-8. */
static void put_value(struct np_str *s, const cJSON *v) {
    if (cJSON_IsString(v) && long_integer(v->valuestring)) {
        np_str_append(s, v->valuestring + 1);
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

/* ---- members of the input lines --------------------------------------------- */

static uint64_t u64_or(const cJSON *o, const char *key, uint64_t dflt) {
    uint64_t v;
    return np_json_u64(o, key, &v) == 0 ? v : dflt;
}

static const char *str_or(const cJSON *o, const char *key, const char *dflt) {
    const char *v;
    return np_json_str(o, key, &v) == 0 ? v : dflt;
}

/* ts_ns, pid and tid of a launch or NCCL line; false when one is missing. */
static bool when_where(const cJSON *o, uint64_t *ts, uint32_t *pid, uint32_t *tid) {
    uint64_t p, th;
    if (np_json_u64(o, "ts_ns", ts) || np_json_u64(o, "pid", &p) || np_json_u64(o, "tid", &th) ||
        p > UINT32_MAX || th > UINT32_MAX)
        return false;
    *pid = (uint32_t)p;
    *tid = (uint32_t)th;
    return true;
}

static void put_stack(struct trace *t, bool *first, const cJSON *o) {
    uint64_t id;
    if (np_json_u64(o, "stack_id", &id) != 0)
        return;
    const char *frames = np_map_get_u64(&t->stacks, id);
    if (frames) {
        put_key(&t->ev, first, "stack");
        np_str_append(&t->ev, frames);
    }
}

/* ---- GPU records --------------------------------------------------------------- */

static const char *gpu_cat(const char *type) {
    if (strcmp(type, "kernel") == 0)
        return "gpu_kernel";
    if (strcmp(type, "memcpy") == 0)
        return "gpu_memcpy";
    return strcmp(type, "memset") == 0 ? "gpu_memset" : "gpu";
}

/* A kernel's name, "Memcpy HtoD", "Memset" (buf holds what is made up). */
static const char *gpu_name(const cJSON *r, const char *type, char *buf, size_t size) {
    if (strcmp(type, "kernel") == 0)
        return str_or(r, "name", "kernel");
    if (strcmp(type, "memcpy") == 0) {
        snprintf(buf, size, "Memcpy %s", str_or(r, "copy_kind", "?"));
        return buf;
    }
    return strcmp(type, "memset") == 0 ? "Memset" : type;
}

/* The NCCL plan's op types and communicator, on a kernel of an NCCL launch. */
static void put_nccl_summary(struct np_str *s, bool *first, const cJSON *nccl) {
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(nccl, "ops");
    put_key(s, first, "nccl_ops");
    np_str_append(s, "[");
    bool any = false;
    for (const cJSON *op = cJSON_IsArray(ops) ? ops->child : NULL; op; op = op->next) {
        const char *name = str_or(op, "op", NULL);
        if (!name)
            continue;
        np_str_append(s, any ? "," : "");
        np_json_string(s, name);
        any = true;
    }
    np_str_append(s, "]");
    const cJSON *hash = cJSON_GetObjectItemCaseSensitive(nccl, "comm_hash");
    if (hash) {
        put_key(s, first, "comm_hash");
        put_value(s, hash);
    }
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
static int gpu_record(struct trace *t, const cJSON *r, const struct launch_ref *from) {
    static const char *const skip[] = {"type",       "name",       "start_ns", "end_ns",
                                       "launch_pid", "launch_tid", "nccl_ops", "comm_hash",
                                       "unmatched",  NULL};
    uint64_t start, end;
    if (!cJSON_IsObject(r) || np_json_u64(r, "start_ns", &start) != 0) {
        t->n.skipped_lines++;
        return 0;
    }
    end = u64_or(r, "end_ns", start);
    end = end < start ? start : end;
    uint32_t device = (uint32_t)u64_or(r, "device", 0), tid;
    int err = gpu_track(t, device, (uint32_t)u64_or(r, "context", 0),
                        (uint32_t)u64_or(r, "stream", 0), start, end, &tid);
    if (err)
        return err;
    const char *type = str_or(r, "type", "gpu");
    char buf[128];
    event_open(t, "X", GPU_PID_BASE + device, tid);
    event_name(t, gpu_name(r, type, buf, sizeof(buf)), gpu_cat(type));
    put_us(&t->ev, "ts", start);
    put_us(&t->ev, "dur", end - start);
    np_str_append(&t->ev, ",\"args\":{");
    bool first = true;
    put_members(&t->ev, &first, r, skip);
    if (from) {
        put_key(&t->ev, &first, "launch_pid");
        np_str_appendf(&t->ev, "%" PRIu32, from->pid);
        put_key(&t->ev, &first, "launch_tid");
        np_str_appendf(&t->ev, "%" PRIu32, from->tid);
        if (from->nccl)
            put_nccl_summary(&t->ev, &first, from->nccl);
    } else {
        put_key(&t->ev, &first, "unmatched");
        np_str_append(&t->ev, "true");
    }
    np_str_append(&t->ev, "}");
    err = event_close(t);
    if (!err && from && from->flow)
        err = flow(t, from, GPU_PID_BASE + device, tid, start);
    t->n.gpu_records += from != NULL;
    t->n.unmatched += from == NULL;
    return err;
}

/* ---- launches.jsonl, nccl.jsonl, gpu_unmatched.jsonl ---------------------------- */

static int launch_line(struct trace *t, const cJSON *o) {
    static const char *const skip[] = {"ts_ns", "pid",         "tid",   "comm",
                                       "gpu",   "gpu_records", "stack", NULL};
    struct launch_ref ref = {0};
    if (!when_where(o, &ref.ts_ns, &ref.pid, &ref.tid)) {
        t->n.skipped_lines++;
        return 0;
    }
    bool nested = false;
    np_json_bool(o, "nested", &nested);
    struct cpu_thread *th = cpu_thread(t, ref.pid, ref.tid, str_or(o, "comm", NULL));
    if (!th)
        return -ENOMEM;
    const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(o, "gpu");
    ref.flow = !nested;
    ref.nccl = cJSON_GetObjectItemCaseSensitive(o, "nccl");
    ref.nccl = cJSON_IsObject(ref.nccl) ? ref.nccl : NULL;

    event_open(t, nested ? "i" : "X", ref.pid, ref.tid);
    event_name(t, str_or(o, "api", str_or(o, "kernel", "launch")), "launch");
    put_us(&t->ev, "ts", ref.ts_ns);
    if (nested)
        np_str_append(&t->ev, ",\"s\":\"t\"");
    else
        put_us(&t->ev, "dur", cpu_slice_end(th, ref.ts_ns) - ref.ts_ns);
    np_str_append(&t->ev, ",\"args\":{");
    bool first = true;
    put_members(&t->ev, &first, o, skip);
    put_key(&t->ev, &first, "gpu_records");
    np_str_appendf(&t->ev, "%d", cJSON_IsArray(gpu) ? cJSON_GetArraySize(gpu) : 0);
    put_stack(t, &first, o);
    np_str_append(&t->ev, "}");
    int err = event_close(t);
    t->n.launches += !nested;
    t->n.nested += nested;
    for (const cJSON *r = cJSON_IsArray(gpu) ? gpu->child : NULL; r && !err; r = r->next)
        err = gpu_record(t, r, &ref);
    return err;
}

static int nccl_line(struct trace *t, const cJSON *o) {
    static const char *const skip[] = {"ts_ns", "pid", "tid", "thread", "stack", NULL};
    uint64_t ts;
    uint32_t pid, tid;
    if (!when_where(o, &ts, &pid, &tid)) {
        t->n.skipped_lines++;
        return 0;
    }
    if (!cpu_thread(t, pid, tid, str_or(o, "thread", NULL)))
        return -ENOMEM;
    char name[128];
    snprintf(name, sizeof(name), "nccl%s", str_or(o, "op", ""));
    event_open(t, "i", pid, tid);
    event_name(t, name, "nccl");
    put_us(&t->ev, "ts", ts);
    np_str_append(&t->ev, ",\"s\":\"t\",\"args\":{");
    bool first = true;
    put_members(&t->ev, &first, o, skip);
    put_stack(t, &first, o);
    np_str_append(&t->ev, "}");
    t->n.nccl_ops++;
    return event_close(t);
}

static int unmatched_line(struct trace *t, const cJSON *o) {
    return gpu_record(t, o, NULL);
}

/* ---- reading ------------------------------------------------------------------ */

/* One JSONL file read a line at a time, its current line held with a sort key. */
struct source {
    struct np_jsonl r;
    cJSON *line;
    uint64_t key;
    uint64_t (*key_of)(const cJSON *o);
    bool open;
};

static int source_open(struct source *s, const char *dir, const char *name,
                       uint64_t (*key_of)(const cJSON *)) {
    memset(s, 0, sizeof(*s));
    s->key_of = key_of;
    int err = np_jsonl_open(&s->r, dir, name);
    if (err == -ENOENT)
        return 0;
    if (err) {
        np_err("cannot open %s: %s", s->r.path ? s->r.path : name, strerror(-err));
        return err;
    }
    s->open = true;
    return 0;
}

/* Moves to the next line (s->line NULL at the end); malformed lines are
 * skipped (np_jsonl_next said where). */
static int source_next(struct source *s, struct trace_counts *n) {
    cJSON_Delete(s->line);
    s->line = NULL;
    while (s->open) {
        int got = np_jsonl_next(&s->r, &s->line);
        if (got == -EBADMSG) {
            n->skipped_lines++;
            continue;
        }
        if (got < 0)
            return got;
        if (got == 0)
            break;
        s->key = s->key_of ? s->key_of(s->line) : 0;
        return 0;
    }
    return 0;
}

static void source_close(struct source *s) {
    cJSON_Delete(s->line);
    s->line = NULL;
    np_jsonl_close(&s->r);
}

typedef int (*line_fn)(struct trace *t, const cJSON *o);

/* Every line of DIR/name (absent: nothing) through fn. */
static int each_line(struct trace *t, const char *name, line_fn fn) {
    struct source s;
    int err = source_open(&s, t->dir, name, NULL);
    while (!err && !(err = source_next(&s, &t->n)) && s.line)
        err = fn(t, s.line);
    source_close(&s);
    return err;
}

/* When a launch's GPU work starts (its launch time without records). */
static uint64_t launch_key(const cJSON *o) {
    uint64_t key = u64_or(o, "ts_ns", 0), start;
    const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(o, "gpu");
    bool any = false;
    for (const cJSON *r = cJSON_IsArray(gpu) ? gpu->child : NULL; r; r = r->next)
        if (np_json_u64(r, "start_ns", &start) == 0 && (!any || start < key))
            key = start, any = true;
    return key;
}

static uint64_t record_key(const cJSON *o) {
    return u64_or(o, "start_ns", 0);
}

/* launches.jsonl and gpu_unmatched.jsonl together, whichever line's GPU work
 * starts first next: both files are nearly in time order, so records of one
 * stream come nearly in order and share its first lane. */
static int launches_and_unmatched(struct trace *t) {
    struct source l, u;
    int err = source_open(&l, t->dir, "launches.jsonl", launch_key);
    int uerr = source_open(&u, t->dir, "gpu_unmatched.jsonl", record_key);
    err = err ? err : uerr;
    if (!err)
        err = source_next(&l, &t->n);
    if (!err)
        err = source_next(&u, &t->n);
    while (!err && (l.line || u.line)) {
        bool launch = l.line && (!u.line || l.key <= u.key);
        struct source *s = launch ? &l : &u;
        err = launch ? launch_line(t, s->line) : unmatched_line(t, s->line);
        if (!err)
            err = source_next(s, &t->n);
    }
    source_close(&l);
    source_close(&u);
    return err;
}

/* ---- stacks.jsonl and process names ---------------------------------------------- */

static int stack_line(struct trace *t, const cJSON *o) {
    uint64_t id;
    const cJSON *frames = cJSON_GetObjectItemCaseSensitive(o, "frames");
    if (np_json_u64(o, "stack_id", &id) != 0 || !cJSON_IsArray(frames)) {
        t->n.skipped_lines++;
        return 0;
    }
    struct np_str s;
    np_str_init(&s);
    np_str_append(&s, "[");
    for (const cJSON *f = frames->child; f; f = f->next) {
        np_str_append(&s, f == frames->child ? "" : ",");
        np_json_string(&s, cJSON_IsString(f) ? f->valuestring : "?");
    }
    np_str_append(&s, "]");
    if (s.failed) {
        np_str_free(&s);
        return -ENOMEM;
    }
    free(np_map_get_u64(&t->stacks, id));
    int err = np_map_put_u64(&t->stacks, id, s.buf);
    if (err)
        free(s.buf);
    return err;
}

static int add_proc_name(struct trace *t, const cJSON *proc) {
    uint64_t pid;
    const char *comm;
    if (np_json_u64(proc, "pid", &pid) != 0 || pid > UINT32_MAX ||
        np_json_str(proc, "comm", &comm) != 0 || !*comm || np_map_get_u64(&t->proc_names, pid))
        return 0;
    char *copy = strdup(comm);
    if (!copy || np_map_put_u64(&t->proc_names, pid, copy) != 0) {
        free(copy);
        return -ENOMEM;
    }
    return 0;
}

/* summary.json's targets[] (record) or window.json's process (daemon). */
static int load_proc_names(struct trace *t) {
    static const char *const files[] = {"summary.json", "window.json"};
    for (size_t i = 0; i < NP_ARRAY_SIZE(files); i++) {
        char *path = NULL, *text = NULL;
        size_t len;
        if (asprintf(&path, "%s/%s", t->dir, files[i]) < 0)
            return -ENOMEM;
        int err = np_read_file(path, &text, &len);
        free(path);
        if (err)
            continue;
        cJSON *root = cJSON_Parse(text);
        free(text);
        const cJSON *targets = cJSON_GetObjectItemCaseSensitive(root, "targets");
        for (const cJSON *p = cJSON_IsArray(targets) ? targets->child : NULL; p && !err;
             p = p->next)
            err = add_proc_name(t, p);
        const cJSON *proc = cJSON_GetObjectItemCaseSensitive(root, "process");
        if (!err && cJSON_IsObject(proc))
            err = add_proc_name(t, proc);
        cJSON_Delete(root);
        if (err)
            return err;
    }
    return 0;
}

/* ---- the file ----------------------------------------------------------------------- */

static void write_footer(struct trace *t) {
    const struct trace_counts *n = &t->n;
    fprintf(t->f,
            "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"generator\":\"ncclprobe\","
            "\"ts\":\"CLOCK_MONOTONIC microseconds, the clock of ts_ns in launches.jsonl\","
            "\"cpu_launch_slice_ns\":%u,"
            "\"cpu_launch_slice\":\"nominal: the probes see the entry of a call only\","
            "\"launches\":%" PRIu64 ",\"nested_launches\":%" PRIu64 ",\"nccl_ops\":%" PRIu64
            ",\"gpu_records\":%" PRIu64 ",\"gpu_unmatched\":%" PRIu64 ",\"flows\":%" PRIu64
            ",\"gpu_extra_lanes\":%" PRIu64 ",\"gpu_overlapping_records\":%" PRIu64
            ",\"skipped_lines\":%" PRIu64 "}}\n",
            CPU_SLICE_NS, n->launches, n->nested, n->nccl_ops, n->gpu_records, n->unmatched,
            n->flows, n->lanes, n->gpu_overlaps, n->skipped_lines);
}

static int write_events(struct trace *t) {
    fputs("{\"traceEvents\":[\n", t->f);
    t->first_event = true;
    int err = launches_and_unmatched(t);
    if (!err)
        err = each_line(t, "nccl.jsonl", nccl_line);
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

static int write_file(struct trace *t, const char *path) {
    int err = np_write_atomic(path, fill_trace, t);
    if (err)
        np_err("cannot write %s: %s", path, strerror(-err));
    return err;
}

static void warn_counts(const struct trace *t) {
    if (t->n.skipped_lines)
        np_warn("%s/trace.json: %" PRIu64 " malformed input lines or records skipped", t->dir,
                t->n.skipped_lines);
    if (t->n.gpu_overlaps)
        np_warn("%s/trace.json: %" PRIu64 " GPU records overlap others on their stream track "
                "(more than %u at once): Perfetto may not show them",
                t->dir, t->n.gpu_overlaps, MAX_LANES);
}

/* 0 when dir has launches.jsonl; 1 for an aggregate set (skipped). */
static int check_dir(const char *dir) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/launches.jsonl", dir);
    if (access(path, R_OK) == 0)
        return 0;
    int err = -errno;
    snprintf(path, sizeof(path), "%s/launches.folded", dir);
    if (err == -ENOENT && access(path, F_OK) == 0) {
        /* every daemon aggregate set: expected, not worth a warning */
        np_debug("%s: no launches.jsonl (an aggregate set has no times): trace.json not written",
                 dir);
        return 1;
    }
    np_err("cannot read %s/launches.jsonl: %s", dir, strerror(-err));
    return err;
}

static void trace_free(struct trace *t) {
    np_str_free(&t->ev);
    np_map_free(&t->stacks, free);
    np_map_free(&t->proc_names, free);
    np_map_free(&t->procs, NULL);
    np_map_free(&t->threads, free);
    np_map_free(&t->devices, NULL);
    np_map_free(&t->streams, free);
}

int np_write_trace_json(const char *dir) {
    int err = check_dir(dir);
    if (err)
        return err > 0 ? 0 : err;
    struct trace t;
    memset(&t, 0, sizeof(t));
    t.dir = dir;
    np_str_init(&t.ev);
    np_map_init(&t.stacks);
    np_map_init(&t.proc_names);
    np_map_init(&t.procs);
    np_map_init(&t.threads);
    np_map_init(&t.devices);
    np_map_init(&t.streams);
    char *path = NULL;
    if (asprintf(&path, "%s/trace.json", dir) < 0)
        path = NULL;
    err = path ? 0 : -ENOMEM;
    if (!err)
        err = load_proc_names(&t);
    if (!err)
        err = each_line(&t, "stacks.jsonl", stack_line);
    if (!err)
        err = write_file(&t, path);
    if (!err)
        warn_counts(&t);
    else if (err == -ENOMEM)
        np_err("%s: out of memory", path ? path : dir);
    free(path);
    trace_free(&t);
    return err;
}
