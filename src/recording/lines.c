/* lines.c - the JSON Lines of a recording, one typed line at a time
 * (recording.h): launches.jsonl, gpu_unmatched.jsonl, nccl.jsonl and the
 * lines of stacks.jsonl. This file is the definition of a well-formed line:
 * each member is checked for the type docs/output-formats.md gives it (a
 * null one is absent), required ones for presence; unknown members are
 * ignored. A malformed line is said with its file and line, and either ends
 * the reading (strict) or is skipped and counted (lenient). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ncclprobe/recording.h"
#include "recording/frames.h"
#include "recording/recording.h"

#define MAX_SAID 5 /* malformed lines said one by one when lenient; the rest only counted */

int np_rec_lines_open(struct np_recording *rec, const char *name, struct np_rec_lines *it) {
    memset(it, 0, sizeof(*it));
    it->rec = rec;
    char *path = np_rec_path(rec->dir, name);
    int err = path ? np_jsonl_open(&it->r, path) : -ENOMEM;
    free(path);
    if (err && err != -ENOENT && err != -ENOMEM)
        np_err("cannot open %s: %s", it->r.path, strerror(-err));
    return err;
}

void np_rec_lines_close(struct np_rec_lines *it) {
    cJSON_Delete(it->obj);
    np_jsonl_close(&it->r);
    free(it->gpu);
    free(it->ops);
    memset(it, 0, sizeof(*it));
}

const char *np_rec_lines_path(const struct np_rec_lines *it) {
    return it->r.path ? it->r.path : "";
}

static int vmalformed(struct np_rec_lines *it, const char *fmt, va_list ap) {
    struct np_recording *rec = it->rec;
    rec->malformed++;
    if (rec->mode == NP_REC_LENIENT && rec->said >= MAX_SAID)
        return -EBADMSG;
    rec->said++;
    char *text = NULL;
    if (vasprintf(&text, fmt, ap) < 0)
        text = NULL;
    np_err("%s:%ld: %s", np_rec_lines_path(it), it->r.line, text ? text : "malformed line");
    free(text);
    return -EBADMSG;
}

int np_rec_lines_error(struct np_rec_lines *it, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int err = vmalformed(it, fmt, ap);
    va_end(ap);
    return err;
}

/* ---- typed members; where: what holds them ("gpu[2]: "), for messages --------------- */

static int need_u64(struct np_rec_lines *it, const cJSON *obj, const char *where, const char *key,
                    uint64_t max, uint64_t *out) {
    int err = np_json_u64(obj, key, out);
    if (err == -ENOENT)
        return np_rec_lines_error(it, "%s\"%s\" is missing", where, key);
    if (err || *out > max)
        return np_rec_lines_error(it, "%s\"%s\" is not an integer in [0, %llu]", where, key,
                                  (unsigned long long)max);
    return 0;
}

static int need_u32(struct np_rec_lines *it, const cJSON *obj, const char *key, uint32_t *out) {
    uint64_t v;
    int err = need_u64(it, obj, "", key, UINT32_MAX, &v);
    *out = (uint32_t)v;
    return err;
}

/* ts_ns, pid and tid: when and where a launch or an NCCL call was made. */
static int when_where(struct np_rec_lines *it, const cJSON *obj, uint64_t *ts, uint32_t *pid,
                      uint32_t *tid) {
    int err = need_u64(it, obj, "", NP_KEY_TS_NS, UINT64_MAX, ts);
    if (!err)
        err = need_u32(it, obj, NP_KEY_PID, pid);
    return err ? err : need_u32(it, obj, NP_KEY_TID, tid);
}

/* An optional integer: absent, *out keeps its default. */
static int opt_u64(struct np_rec_lines *it, const cJSON *obj, const char *where, const char *key,
                   uint64_t *out) {
    int err = np_json_u64(obj, key, out);
    if (err == -EINVAL)
        return np_rec_lines_error(it, "%s\"%s\" is not a non-negative integer", where, key);
    return 0;
}

/* A string member: absent, *out is NULL, which is an error when required. */
static int str_member(struct np_rec_lines *it, const cJSON *obj, const char *where, const char *key,
                      bool required, const char **out) {
    *out = NULL;
    int err = np_json_str(obj, key, out);
    if (err == -ENOENT && required)
        return np_rec_lines_error(it, "%s\"%s\" is missing", where, key);
    if (err == -EINVAL)
        return np_rec_lines_error(it, "%s\"%s\" is not a string", where, key);
    return 0;
}

static int need_str(struct np_rec_lines *it, const cJSON *obj, const char *where, const char *key,
                    const char **out) {
    return str_member(it, obj, where, key, true, out);
}

static int opt_str(struct np_rec_lines *it, const cJSON *obj, const char *where, const char *key,
                   const char **out) {
    return str_member(it, obj, where, key, false, out);
}

/* A member that must be an array (or object) when present: NULL when absent. */
static int opt_container(struct np_rec_lines *it, const cJSON *obj, const char *key, bool array,
                         const char *name, const cJSON **out) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!item || cJSON_IsNull(item))
        return 0;
    if (array ? !cJSON_IsArray(item) : !cJSON_IsObject(item))
        return np_rec_lines_error(it, "%s is not an %s", name, array ? "array" : "object");
    *out = item;
    return 0;
}

/* ---- the loop ------------------------------------------------------------------------- */

typedef int (*parse_fn)(struct np_rec_lines *it, const cJSON *obj, void *out);

/* The next line parse() takes: 1, 0 at the end (or when the file was not
 * opened), -errno. parse returns 0, -EBADMSG (said) or -ENOMEM. */
static int next_line(struct np_rec_lines *it, parse_fn parse, void *out) {
    while (it->r.f) {
        const char *why;
        cJSON_Delete(it->obj);
        it->obj = NULL;
        int err = np_jsonl_next(&it->r, &it->obj, &why);
        if (err == -EBADMSG)
            err = np_rec_lines_error(it, "%s", why);
        else if (err > 0)
            err = parse(it, it->obj, out);
        else
            return err;
        if (err == 0)
            return 1;
        if (err != -EBADMSG || it->rec->mode == NP_REC_STRICT)
            return err;
    }
    return 0;
}

/* ---- GPU records ---------------------------------------------------------------------- */

static enum np_rec_gpu_type gpu_type(const char *text) {
    if (strcmp(text, NP_GPU_TYPE_KERNEL) == 0)
        return NP_REC_GPU_KERNEL;
    if (strcmp(text, NP_GPU_TYPE_MEMCPY) == 0)
        return NP_REC_GPU_MEMCPY;
    return strcmp(text, NP_GPU_TYPE_MEMSET) == 0 ? NP_REC_GPU_MEMSET : NP_REC_GPU_OTHER;
}

/* Where a replayed record was captured: both members optional. */
static int gpu_capture(struct np_rec_lines *it, const cJSON *obj, const char *where,
                       struct np_rec_gpu *g) {
    int err = opt_u64(it, obj, where, NP_KEY_CAPTURE_STACK_ID, &g->capture_stack_id);
    return err ? err : opt_str(it, obj, where, NP_KEY_CAPTURE_BY, &g->capture_by);
}

static int gpu_where(struct np_rec_lines *it, const cJSON *obj, const char *where,
                     struct np_rec_gpu *g) {
    if (!cJSON_IsObject(obj))
        return np_rec_lines_error(it, "%snot a JSON object", where);
    int err = need_str(it, obj, where, NP_KEY_GPU_TYPE, &g->type_name);
    if (!err)
        err = need_u64(it, obj, where, NP_KEY_START_NS, UINT64_MAX, &g->start_ns);
    g->end_ns = g->start_ns;
    const struct {
        const char *key;
        uint64_t *out;
    } numbers[] = {{NP_KEY_END_NS, &g->end_ns},
                   {NP_KEY_GRAPH_ID, &g->graph_id},
                   {NP_KEY_DEVICE, &g->device},
                   {NP_KEY_CONTEXT, &g->context},
                   {NP_KEY_STREAM, &g->stream}};
    for (size_t i = 0; i < NP_ARRAY_SIZE(numbers) && !err; i++)
        err = opt_u64(it, obj, where, numbers[i].key, numbers[i].out);
    if (!err)
        err = gpu_capture(it, obj, where, g);
    if (err)
        return err;
    if (g->end_ns < g->start_ns)
        g->end_ns = g->start_ns;
    g->type = gpu_type(g->type_name);
    g->json = obj;
    if (g->type == NP_REC_GPU_MEMCPY)
        return opt_str(it, obj, where, NP_KEY_COPY_KIND, &g->copy_kind);
    return g->type == NP_REC_GPU_KERNEL ? need_str(it, obj, where, NP_KEY_GPU_NAME, &g->name) : 0;
}

static int parse_gpu(struct np_rec_lines *it, const cJSON *obj, void *out) {
    struct np_rec_gpu *g = out;
    memset(g, 0, sizeof(*g));
    return gpu_where(it, obj, "", g);
}

int np_rec_next_gpu(struct np_rec_lines *it, struct np_rec_gpu *out) {
    return next_line(it, parse_gpu, out);
}

void np_rec_gpu_leaf(struct np_str *out, const struct np_rec_gpu *g) {
    switch (g->type) {
    case NP_REC_GPU_KERNEL:
        np_str_appendf(out, NP_LEAF_KERNEL "%s", g->name);
        return;
    case NP_REC_GPU_MEMCPY:
        np_str_appendf(out, NP_LEAF_MEMCPY "%s", g->copy_kind ? g->copy_kind : "");
        return;
    case NP_REC_GPU_MEMSET:
        np_str_append(out, NP_LEAF_MEMSET);
        return;
    default:
        np_str_appendf(out, NP_LEAF_GPU_PREFIX "%s]", g->type_name);
        return;
    }
}

/* ---- launches.jsonl ----------------------------------------------------------------- */

static int launch_gpu(struct np_rec_lines *it, const cJSON *obj, struct np_rec_launch *l) {
    const cJSON *gpu;
    int err = opt_container(it, obj, NP_KEY_GPU, true, "\"" NP_KEY_GPU "\"", &gpu);
    size_t n = gpu ? (size_t)cJSON_GetArraySize(gpu) : 0;
    if (err || n == 0)
        return err;
    struct np_rec_gpu *all = np_grow_array(it->gpu, &it->gpu_cap, n, sizeof(*all));
    if (!all)
        return -ENOMEM;
    it->gpu = all;
    for (const cJSON *item = gpu->child; item && !err; item = item->next) {
        char where[32];
        snprintf(where, sizeof(where), NP_KEY_GPU "[%u]: ", l->ngpu);
        memset(&all[l->ngpu], 0, sizeof(*all));
        err = gpu_where(it, item, where, &all[l->ngpu]);
        l->ngpu += err == 0;
    }
    l->gpu = all;
    return err;
}

static int plan_op(struct np_rec_lines *it, const cJSON *item, uint32_t index,
                   struct np_rec_launch *l) {
    const char *op;
    if (!cJSON_IsObject(item))
        return np_rec_lines_error(
            it, "\"" NP_KEY_NCCL "\".\"" NP_KEY_NCCL_OPS "\"[%u] is not an object", index);
    int err = np_json_str(item, NP_KEY_NCCL_OP, &op);
    if (err == -EINVAL)
        return np_rec_lines_error(it,
                                  "\"" NP_KEY_NCCL "\".\"" NP_KEY_NCCL_OPS
                                  "\"[%u].\"" NP_KEY_NCCL_OP "\" is not a string",
                                  index);
    if (err == 0)
        it->ops[l->nops++] = op;
    return 0;
}

static int launch_nccl(struct np_rec_lines *it, const cJSON *obj, struct np_rec_launch *l) {
    const cJSON *nccl, *ops;
    int err = opt_container(it, obj, NP_KEY_NCCL, false, "\"" NP_KEY_NCCL "\"", &nccl);
    if (err || !nccl)
        return err;
    l->nccl = true;
    err = opt_str(it, nccl, "\"" NP_KEY_NCCL "\".", NP_KEY_COMM_HASH, &l->comm_hash);
    if (!err)
        err = opt_container(it, nccl, NP_KEY_NCCL_OPS, true,
                            "\"" NP_KEY_NCCL "\".\"" NP_KEY_NCCL_OPS "\"", &ops);
    size_t n = !err && ops ? (size_t)cJSON_GetArraySize(ops) : 0;
    if (err || n == 0)
        return err;
    const char **all = np_grow_array(it->ops, &it->ops_cap, n, sizeof(*all));
    if (!all)
        return -ENOMEM;
    it->ops = all;
    uint32_t index = 0;
    for (const cJSON *item = ops->child; item && !err; item = item->next)
        err = plan_op(it, item, index++, l);
    l->ops = all;
    return err;
}

static int launch_strings(struct np_rec_lines *it, const cJSON *obj, struct np_rec_launch *l) {
    int err = need_str(it, obj, "", NP_KEY_KERNEL, &l->kernel);
    if (!err)
        err = opt_str(it, obj, "", NP_KEY_COMM, &l->comm);
    if (!err)
        err = opt_str(it, obj, "", NP_KEY_API, &l->api);
    if (!err)
        err = opt_str(it, obj, "", NP_KEY_GPU_STATUS, &l->gpu_status);
    if (!err)
        err = opt_str(it, obj, "", NP_KEY_GRAPH_UNKNOWN, &l->graph_unknown);
    return err;
}

static int parse_launch(struct np_rec_lines *it, const cJSON *obj, void *out) {
    struct np_rec_launch *l = out;
    memset(l, 0, sizeof(*l));
    l->line = it->r.line;
    l->json = obj;
    if (np_json_bool(obj, NP_KEY_NESTED, &l->nested) == -EINVAL)
        return np_rec_lines_error(it, "\"" NP_KEY_NESTED "\" is not true or false");
    if (np_json_bool(obj, NP_KEY_CAPTURED, &l->captured) == -EINVAL)
        return np_rec_lines_error(it, "\"" NP_KEY_CAPTURED "\" is not true or false");
    int err = opt_u64(it, obj, "", NP_KEY_GRAPH_NODES, &l->graph_nodes);
    if (!err)
        err = when_where(it, obj, &l->ts_ns, &l->pid, &l->tid);
    if (!err)
        err = launch_strings(it, obj, l);
    if (!err)
        err = need_u64(it, obj, "", NP_KEY_STACK_ID, UINT64_MAX, &l->stack_id);
    if (!err)
        err = launch_gpu(it, obj, l);
    return err ? err : launch_nccl(it, obj, l);
}

int np_rec_next_launch(struct np_rec_lines *it, struct np_rec_launch *out) {
    return next_line(it, parse_launch, out);
}

/* ---- graph_replays.jsonl -------------------------------------------------------------- */

static int parse_graph_replay(struct np_rec_lines *it, const cJSON *obj, void *out) {
    struct np_rec_graph_replay *r = out;
    memset(r, 0, sizeof(*r));
    r->line = it->r.line;
    int err = need_u32(it, obj, NP_KEY_PID, &r->pid);
    if (!err)
        err = need_u64(it, obj, "", NP_KEY_STACK_ID, UINT64_MAX, &r->stack_id);
    if (!err)
        err = need_u64(it, obj, "", NP_KEY_REPLAY_STACK_ID, UINT64_MAX, &r->replay_stack_id);
    if (!err)
        err = need_u64(it, obj, "", NP_KEY_COUNT, UINT64_MAX, &r->count);
    return err ? err : need_str(it, obj, "", NP_KEY_KERNEL, &r->kernel);
}

int np_rec_next_graph_replay(struct np_rec_lines *it, struct np_rec_graph_replay *out) {
    return next_line(it, parse_graph_replay, out);
}

/* ---- nccl.jsonl ------------------------------------------------------------------------- */

static int parse_nccl_call(struct np_rec_lines *it, const cJSON *obj, void *out) {
    struct np_rec_nccl_call *c = out;
    memset(c, 0, sizeof(*c));
    c->line = it->r.line;
    c->json = obj;
    int err = when_where(it, obj, &c->ts_ns, &c->pid, &c->tid);
    if (!err)
        err = opt_str(it, obj, "", NP_KEY_THREAD, &c->thread);
    if (!err)
        err = opt_str(it, obj, "", NP_KEY_NCCL_OP, &c->op);
    if (err)
        return err;
    int got = np_json_u64(obj, NP_KEY_STACK_ID, &c->stack_id);
    if (got == -EINVAL)
        return np_rec_lines_error(it, "\"" NP_KEY_STACK_ID "\" is not a non-negative integer");
    c->has_stack = got == 0;
    return 0;
}

int np_rec_next_nccl_call(struct np_rec_lines *it, struct np_rec_nccl_call *out) {
    return next_line(it, parse_nccl_call, out);
}

/* ---- stacks.jsonl --------------------------------------------------------------------- */

static void read_location(struct np_recording *rec, const cJSON *obj, struct np_rec_location *loc) {
    const char *text;
    memset(loc, 0, sizeof(*loc));
    if (!cJSON_IsObject(obj))
        return;
    if (np_json_str(obj, NP_KEY_MODULE, &text) == 0)
        loc->module = np_recording_intern(rec, text);
    if (np_json_str(obj, NP_KEY_BUILD_ID, &text) == 0)
        loc->build_id = np_recording_intern(rec, text);
    if (np_json_str(obj, NP_KEY_FILE, &text) == 0)
        loc->file = np_recording_intern(rec, text);
    if (np_json_str(obj, NP_KEY_OFFSET, &text) == 0) {
        loc->offset = strtoull(text, NULL, 16);
        loc->has_offset = true;
    }
    if (np_json_u64(obj, NP_KEY_LINE, &loc->line) != 0)
        loc->line = 0;
}

/* The "locations" of a stack: one per frame, or none at all. */
static int stack_locations(struct np_rec_lines *it, const cJSON *obj, struct np_rec_stack *s) {
    const cJSON *locations = cJSON_GetObjectItemCaseSensitive(obj, NP_KEY_LOCATIONS);
    if (!cJSON_IsArray(locations) || (uint32_t)cJSON_GetArraySize(locations) != s->nframes)
        return 0;
    struct np_rec_location *all = calloc(s->nframes + 1, sizeof(*all));
    if (!all)
        return -ENOMEM;
    s->locations = all;
    for (const cJSON *l = locations->child; l; l = l->next, all++)
        read_location(it->rec, l, all);
    return 0;
}

static int stack_frames(struct np_rec_lines *it, const cJSON *frames, struct np_rec_stack *s) {
    int i = 0;
    s->frames = calloc((size_t)cJSON_GetArraySize(frames) + 1, sizeof(*s->frames));
    if (!s->frames)
        return -ENOMEM;
    for (const cJSON *f = frames->child; f; f = f->next, i++) {
        if (!cJSON_IsString(f))
            return np_rec_lines_error(it, "\"" NP_KEY_FRAMES "\"[%d] is not a string", i);
        s->frames[i] = np_recording_intern(it->rec, f->valuestring);
        if (!s->frames[i])
            return -ENOMEM;
    }
    s->nframes = (uint32_t)i;
    s->nccl_frame = np_frames_last_nccl(s->frames, s->nframes);
    return 0;
}

static int parse_stack(struct np_rec_lines *it, const cJSON *obj, void *out) {
    struct np_rec_stack *s = out;
    memset(s, 0, sizeof(*s));
    int err = need_u64(it, obj, "", NP_KEY_STACK_ID, UINT64_MAX, &s->id);
    if (err)
        return err;
    const cJSON *frames = cJSON_GetObjectItemCaseSensitive(obj, NP_KEY_FRAMES);
    if (!cJSON_IsArray(frames))
        return np_rec_lines_error(it, "\"" NP_KEY_FRAMES "\" is %s",
                                  frames ? "not an array" : "missing");
    if (np_recording_stack(it->rec, s->id, NULL))
        return np_rec_lines_error(it, NP_KEY_STACK_ID " %llu appears a second time",
                                  (unsigned long long)s->id);
    err = stack_frames(it, frames, s);
    return err ? err : stack_locations(it, obj, s);
}

/* Frees what a failed parse_stack allocated (before the next line reuses s). */
static int parse_stack_or_free(struct np_rec_lines *it, const cJSON *obj, void *out) {
    struct np_rec_stack *s = out;
    int err = parse_stack(it, obj, s);
    if (err) {
        free(s->frames);
        free((void *)s->locations);
        memset(s, 0, sizeof(*s));
    }
    return err;
}

int np_rec_next_stack(struct np_rec_lines *it, struct np_rec_stack *out) {
    return next_line(it, parse_stack_or_free, out);
}

int np_recording_stacks(struct np_recording *rec) {
    struct np_rec_lines it;
    struct np_rec_stack s;
    int err = np_rec_lines_open(rec, NP_REC_STACKS_JSONL, &it);
    while (!err && (err = np_rec_next_stack(&it, &s)) > 0)
        err = np_recording_add_stack(rec, &s);
    np_rec_lines_close(&it);
    return err;
}
