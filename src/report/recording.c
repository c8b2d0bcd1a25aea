/* recording.c - loads a recording directory for `ncclprobe report`:
 * stacks.jsonl first (launches name their stack by id), then the outermost
 * launches of launches.jsonl (nested ones are counted and skipped: they are
 * part of the launch around them), then gpu_unmatched.jsonl when present.
 * Only the members the report uses are checked; unknown ones are ignored. */
#include "report/recording.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "report/frames.h"
#include "report/jsonl.h"

void np_recording_init(struct np_recording *rec, const char *dir) {
    memset(rec, 0, sizeof(*rec));
    rec->dir = dir;
    np_strtab_init(&rec->strings);
    np_map_init(&rec->stack_index);
}

void np_recording_free(struct np_recording *rec) {
    for (size_t i = 0; i < rec->nstacks; i++)
        free(rec->stacks[i].frames);
    free(rec->stacks);
    free(rec->launches);
    free(rec->gpu);
    free(rec->ops);
    free(rec->unmatched);
    np_map_free(&rec->stack_index, NULL);
    np_strtab_free(&rec->strings);
    memset(rec, 0, sizeof(*rec));
}

static int intern(struct np_recording *rec, const char *text, const char **out) {
    uint32_t id;
    int err = np_strtab_intern(&rec->strings, text, &id);
    if (!err)
        *out = np_strtab_text(&rec->strings, id);
    return err;
}

/* ---- typed members, errors said with file and line ---------------------- */

static int need_u64(const struct np_jsonl *r, const cJSON *obj, const char *where, const char *key,
                    uint64_t max, uint64_t *out) {
    int err = np_json_u64(obj, key, out);
    if (err == -ENOENT)
        return np_jsonl_error(r, "%s\"%s\" is missing", where, key);
    if (err || *out > max)
        return np_jsonl_error(r, "%s\"%s\" is not an integer in [0, %llu]", where, key,
                              (unsigned long long)max);
    return 0;
}

static int opt_u64(const struct np_jsonl *r, const cJSON *obj, const char *where, const char *key,
                   uint64_t *out) {
    int err = np_json_u64(obj, key, out);
    if (err == -EINVAL)
        return np_jsonl_error(r, "%s\"%s\" is not a non-negative integer", where, key);
    return 0; /* absent: *out keeps its default */
}

static int need_str(const struct np_jsonl *r, const cJSON *obj, const char *where, const char *key,
                    const char **out) {
    int err = np_json_str(obj, key, out);
    if (err == -ENOENT)
        return np_jsonl_error(r, "%s\"%s\" is missing", where, key);
    if (err)
        return np_jsonl_error(r, "%s\"%s\" is not a string", where, key);
    return 0;
}

/* ---- stacks.jsonl ------------------------------------------------------- */

static int stack_frames(struct np_recording *rec, const struct np_jsonl *r, const cJSON *frames,
                        struct np_rep_stack *s) {
    int n = cJSON_GetArraySize(frames), i = 0;
    s->frames = calloc((size_t)n + 1, sizeof(*s->frames));
    if (!s->frames)
        return -ENOMEM;
    for (const cJSON *f = frames->child; f; f = f->next, i++) {
        if (!cJSON_IsString(f))
            return np_jsonl_error(r, "\"frames\"[%d] is not a string", i);
        int err = intern(rec, f->valuestring, &s->frames[i]);
        if (err)
            return err;
        if (strncmp(f->valuestring, NP_NCCL_FRAME_PREFIX, strlen(NP_NCCL_FRAME_PREFIX)) == 0)
            s->nccl_frame = s->frames[i];
    }
    s->nframes = (uint32_t)i;
    return 0;
}

static int parse_stack(struct np_recording *rec, const struct np_jsonl *r, const cJSON *obj) {
    uint64_t id;
    int err = need_u64(r, obj, "", "stack_id", UINT64_MAX, &id);
    if (err)
        return err;
    const cJSON *frames = cJSON_GetObjectItemCaseSensitive(obj, "frames");
    if (!cJSON_IsArray(frames))
        return np_jsonl_error(r, "\"frames\" is %s", frames ? "not an array" : "missing");
    if (np_map_get_u64(&rec->stack_index, id))
        return np_jsonl_error(r, "stack_id %llu appears a second time", (unsigned long long)id);
    struct np_rep_stack *stacks =
        np_grow_array(rec->stacks, &rec->stacks_cap, rec->nstacks + 1, sizeof(*stacks));
    if (!stacks || rec->nstacks >= UINT32_MAX)
        return -ENOMEM;
    rec->stacks = stacks;
    struct np_rep_stack *s = &stacks[rec->nstacks++];
    memset(s, 0, sizeof(*s));
    err = stack_frames(rec, r, frames, s);
    if (!err)
        err = np_map_put_u64(&rec->stack_index, id, (void *)(uintptr_t)rec->nstacks);
    return err;
}

/* ---- GPU records ---------------------------------------------------------- */

static enum np_rep_gpu_type gpu_type(const char *text) {
    if (strcmp(text, "kernel") == 0)
        return NP_REP_KERNEL;
    if (strcmp(text, "memcpy") == 0)
        return NP_REP_MEMCPY;
    return strcmp(text, "memset") == 0 ? NP_REP_MEMSET : NP_REP_OTHER;
}

static int parse_gpu(struct np_recording *rec, const struct np_jsonl *r, const cJSON *obj,
                     const char *where, struct np_rep_gpu *g) {
    const char *type, *name;
    memset(g, 0, sizeof(*g));
    if (!cJSON_IsObject(obj))
        return np_jsonl_error(r, "%snot a JSON object", where);
    int err = need_str(r, obj, where, "type", &type);
    if (!err)
        err = need_u64(r, obj, where, "start_ns", UINT64_MAX, &g->start_ns);
    g->end_ns = g->start_ns;
    if (!err)
        err = opt_u64(r, obj, where, "end_ns", &g->end_ns);
    if (!err)
        err = opt_u64(r, obj, where, "graph_id", &g->graph_id);
    if (err)
        return err;
    g->type = gpu_type(type);
    if (g->type != NP_REP_KERNEL)
        return 0;
    err = need_str(r, obj, where, "name", &name);
    return err ? err : intern(rec, name, &g->name);
}

static int launch_gpu(struct np_recording *rec, const struct np_jsonl *r, const cJSON *gpu,
                      struct np_rep_launch *l) {
    if (!gpu || cJSON_IsNull(gpu))
        return 0;
    if (!cJSON_IsArray(gpu))
        return np_jsonl_error(r, "\"gpu\" is not an array");
    l->gpu = rec->ngpu;
    for (const cJSON *item = gpu->child; item; item = item->next) {
        struct np_rep_gpu *all =
            np_grow_array(rec->gpu, &rec->gpu_cap, rec->ngpu + 1, sizeof(*all));
        if (!all)
            return -ENOMEM;
        rec->gpu = all;
        char where[32];
        snprintf(where, sizeof(where), "gpu[%u]: ", l->ngpu);
        struct np_rep_gpu *g = &all[rec->ngpu];
        int err = parse_gpu(rec, r, item, where, g);
        if (err)
            return err;
        rec->ngpu++;
        l->ngpu++;
        l->nkernels += g->type == NP_REP_KERNEL;
        if (g->end_ns > l->gpu_end_ns)
            l->gpu_end_ns = g->end_ns;
    }
    return 0;
}

/* ---- NCCL ops ----------------------------------------------------------------- */

static int add_op(struct np_recording *rec, const char *op) {
    const char **ops = np_grow_array(rec->ops, &rec->ops_cap, rec->nops + 1, sizeof(*ops));
    if (!ops)
        return -ENOMEM;
    rec->ops = ops;
    return intern(rec, op, &ops[rec->nops++]);
}

static int launch_nccl(struct np_recording *rec, const struct np_jsonl *r, const cJSON *nccl,
                       struct np_rep_launch *l) {
    if (!nccl || cJSON_IsNull(nccl))
        return 0;
    if (!cJSON_IsObject(nccl))
        return np_jsonl_error(r, "\"nccl\" is not an object");
    l->nccl = true;
    l->ops = rec->nops;
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(nccl, "ops");
    if (!ops || cJSON_IsNull(ops))
        return 0;
    if (!cJSON_IsArray(ops))
        return np_jsonl_error(r, "\"nccl\".\"ops\" is not an array");
    for (const cJSON *item = ops->child; item; item = item->next) {
        const char *op;
        if (!cJSON_IsObject(item))
            return np_jsonl_error(r, "\"nccl\".\"ops\"[%u] is not an object", l->nops);
        int err = np_json_str(item, "op", &op);
        if (err == -EINVAL)
            return np_jsonl_error(r, "\"nccl\".\"ops\"[%u].\"op\" is not a string", l->nops);
        if (!err && (err = add_op(rec, op)) != 0)
            return err;
        l->nops += err == 0;
    }
    return 0;
}

/* ---- launches.jsonl ------------------------------------------------------------ */

static int launch_stack(struct np_recording *rec, const struct np_jsonl *r, const cJSON *obj,
                        struct np_rep_launch *l) {
    uint64_t id;
    int err = need_u64(r, obj, "", "stack_id", UINT64_MAX, &id);
    if (err)
        return err;
    uintptr_t index = (uintptr_t)np_map_get_u64(&rec->stack_index, id);
    if (!index)
        return np_jsonl_error(r, "stack_id %llu is not in stacks.jsonl", (unsigned long long)id);
    l->stack = (uint32_t)(index - 1);
    return 0;
}

static int parse_launch(struct np_recording *rec, const struct np_jsonl *r, const cJSON *obj,
                        struct np_rep_launch *l) {
    uint64_t pid, tid;
    const char *kernel;
    memset(l, 0, sizeof(*l));
    l->line = r->line;
    int err = need_u64(r, obj, "", "ts_ns", UINT64_MAX, &l->ts_ns);
    if (!err)
        err = need_u64(r, obj, "", "pid", UINT32_MAX, &pid);
    if (!err)
        err = need_u64(r, obj, "", "tid", UINT32_MAX, &tid);
    if (!err)
        err = need_str(r, obj, "", "kernel", &kernel);
    if (!err)
        err = launch_stack(rec, r, obj, l);
    if (!err)
        err = intern(rec, kernel, &l->kernel);
    if (!err)
        err = launch_gpu(rec, r, cJSON_GetObjectItemCaseSensitive(obj, "gpu"), l);
    if (!err)
        err = launch_nccl(rec, r, cJSON_GetObjectItemCaseSensitive(obj, "nccl"), l);
    l->pid = (uint32_t)pid;
    l->tid = (uint32_t)tid;
    return err;
}

static int add_launch(struct np_recording *rec, const struct np_jsonl *r, const cJSON *obj) {
    bool nested = false;
    int err = np_json_bool(obj, "nested", &nested);
    if (err == -EINVAL)
        return np_jsonl_error(r, "\"nested\" is not true or false");
    if (nested) {
        rec->nested++;
        return 0;
    }
    struct np_rep_launch *all =
        np_grow_array(rec->launches, &rec->launches_cap, rec->nlaunches + 1, sizeof(*all));
    if (!all)
        return -ENOMEM;
    rec->launches = all;
    err = parse_launch(rec, r, obj, &all[rec->nlaunches]);
    rec->nlaunches += err == 0;
    return err;
}

/* ---- gpu_unmatched.jsonl ---------------------------------------------------------- */

static int add_unmatched(struct np_recording *rec, const struct np_jsonl *r, const cJSON *obj) {
    struct np_rep_gpu *all =
        np_grow_array(rec->unmatched, &rec->unmatched_cap, rec->nunmatched + 1, sizeof(*all));
    if (!all)
        return -ENOMEM;
    rec->unmatched = all;
    int err = parse_gpu(rec, r, obj, "", &all[rec->nunmatched]);
    rec->nunmatched += err == 0;
    return err;
}

/* ---- the directory ------------------------------------------------------------------ */

typedef int (*line_fn)(struct np_recording *rec, const struct np_jsonl *r, const cJSON *obj);

/* Feeds every line of DIR/name to fn; an absent optional file is 1. */
static int read_file(struct np_recording *rec, const char *name, bool optional, line_fn fn) {
    struct np_jsonl r;
    cJSON *obj = NULL;
    int err = np_jsonl_open(&r, rec->dir, name);
    if (err == -ENOENT && optional) {
        np_jsonl_close(&r);
        return 1;
    }
    if (err)
        np_err("cannot open %s: %s", r.path ? r.path : name, strerror(-err));
    while (!err && (err = np_jsonl_next(&r, &obj)) > 0) {
        err = fn(rec, &r, obj);
        cJSON_Delete(obj);
    }
    if (err == -ENOMEM)
        np_err("%s:%ld: out of memory", r.path ? r.path : name, r.line);
    np_jsonl_close(&r);
    return err;
}

/* Says which required file is missing before anything else is read. */
static int check_launches_file(const struct np_recording *rec) {
    struct np_jsonl r;
    int err = np_jsonl_open(&r, rec->dir, "launches.jsonl");
    if (err)
        np_err("cannot open %s: %s%s", r.path ? r.path : "launches.jsonl", strerror(-err),
               err == -ENOENT ? " (is this a directory written by ncclprobe record?)" : "");
    np_jsonl_close(&r);
    return err;
}

int np_recording_load(struct np_recording *rec) {
    int err = check_launches_file(rec);
    if (!err)
        err = read_file(rec, "stacks.jsonl", false, parse_stack);
    if (!err)
        err = read_file(rec, "launches.jsonl", false, add_launch);
    if (!err) {
        err = read_file(rec, "gpu_unmatched.jsonl", true, add_unmatched);
        rec->has_unmatched_file = err == 0;
        err = err == 1 ? 0 : err;
    }
    return err;
}
