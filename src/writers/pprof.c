/* pprof.c - writes profile.pb.gz (pprof.h). The recording is read through
 * src/recording/ (leniently) into deduplicated tables (strings, functions,
 * mappings, locations, samples, each with a hash index, so memory grows
 * with distinct stacks and labels, not with launches); the tables then fill
 * protobuf-c's generated structs (profile.pb-c.h, from
 * src/writers/profile.proto), which are packed straight into a gzip stream.
 * Every string goes through np_utf8_clean(): protobuf strings must be valid
 * UTF-8 for Go's decoder. */
#define _GNU_SOURCE
#include "writers/pprof.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "lib/hashmap.h"
#include "lib/json.h"
#include "lib/strtab.h"
#include "lib/util.h"
#include "ncclprobe/recording.h"
#include "profile.pb-c.h"
#include "recording/folded.h"
#include "recording/frames.h"
#include "recording/recording.h"

typedef Perftools__Profiles__Function pp_function;
typedef Perftools__Profiles__Mapping pp_mapping;
typedef Perftools__Profiles__Location pp_location;
typedef Perftools__Profiles__Line pp_line;
typedef Perftools__Profiles__Sample pp_sample;
typedef Perftools__Profiles__Label pp_label;
typedef Perftools__Profiles__ValueType pp_value_type;

#define MAX_LABELS 8

/* A sample's labels: numbers < 0 and string ids 0 are absent. capture_by:
 * how a replayed GPU record was tied to the launch that captured it. */
struct labels {
    int64_t pid, tid;
    int64_t comm, kernel, nccl_op, comm_hash, capture_by;
    int64_t container; /* live profiles (np_pprof_encode_samples) */
};

struct sample {
    uint64_t *locs; /* location ids, leaf first */
    size_t nlocs;
    struct labels labels;
    int64_t count, gpu_ns;
};

/* A stack of stacks.jsonl (or one folded line), resolved. */
struct stack {
    uint64_t *locs; /* leaf first */
    size_t nlocs;
    int64_t nccl_op; /* the [NCCL] frame's op types (string id), 0 when none */
};

/* One frame of a stack, parsed. */
struct frame {
    uint64_t function;
    int64_t line;
    uint64_t mapping; /* 0: none */
    uint64_t address;
    bool inlined;
};

struct builder {
    const char *dir;
    struct np_recording rec;
    struct np_strtab strings;
    struct np_map fn_index, map_index, loc_index, sample_index;
    struct stack *stacks; /* rec.stacks, resolved */
    pp_function *fns;
    size_t nfns, fns_cap;
    pp_mapping *maps;
    size_t nmaps, maps_cap;
    pp_location *locs;
    size_t nlocs, locs_cap;
    struct sample *samples;
    size_t nsamples, samples_cap;
    struct np_str key, text; /* scratch */
    struct stack no_launch_stack;
    struct labels set_labels; /* folded input: the set's process */
    bool have_gpu;
    bool gpu_default;           /* gpu_time is the default sample type (live gpu_time profiles) */
    uint64_t first_ts, last_ts; /* data times (CLOCK_MONOTONIC) */
    int64_t start_unix_ns, meta_duration_ns;
    const char *source;
    uint64_t skipped, unknown_stacks, unknown_capture_stacks;
};

/* ---- tables ------------------------------------------------------------- */

/* The string table index of len bytes of text made valid UTF-8: > 0 (0 for
 * ""), or -errno. */
static int64_t str_id_n(struct builder *b, const char *text, size_t len) {
    if (!text || !len)
        return 0;
    char *raw = strndup(text, len);
    char *clean = raw ? np_utf8_clean(raw) : NULL;
    free(raw);
    if (!clean)
        return -ENOMEM;
    uint32_t id;
    int err = np_strtab_intern(&b->strings, clean, &id);
    free(clean);
    return err ? err : (int64_t)id;
}

static int64_t str_id(struct builder *b, const char *text) {
    return str_id_n(b, text, text ? strlen(text) : 0);
}

/* Looks key (b->key) up in index: its id, 0 when absent, -ENOMEM. */
static int64_t lookup(struct builder *b, const struct np_map *index) {
    if (b->key.failed)
        return -ENOMEM;
    return (int64_t)(uintptr_t)np_map_get_str(index, np_str_cstr(&b->key));
}

static int64_t function_id(struct builder *b, int64_t name, int64_t file) {
    np_str_reset(&b->key);
    np_str_appendf(&b->key, "%" PRId64 ",%" PRId64, name, file);
    int64_t id = lookup(b, &b->fn_index);
    if (id)
        return id;
    pp_function *fns = np_grow_array(b->fns, &b->fns_cap, b->nfns + 1, sizeof(*fns));
    if (!fns)
        return -ENOMEM;
    b->fns = fns;
    pp_function *f = &fns[b->nfns];
    perftools__profiles__function__init(f);
    f->id = b->nfns + 1;
    f->name = name; /* system_name stays "": see pprof.h */
    f->filename = file;
    int err = np_map_put_str(&b->fn_index, np_str_cstr(&b->key), (void *)(uintptr_t)f->id);
    if (err)
        return err;
    b->nfns++;
    return (int64_t)f->id;
}

static int64_t mapping_id(struct builder *b, const char *module, const char *build_id) {
    int64_t file = str_id(b, module), build = str_id(b, build_id);
    if (file < 0 || build < 0)
        return -ENOMEM;
    np_str_reset(&b->key);
    np_str_appendf(&b->key, "%" PRId64 ",%" PRId64, file, build);
    int64_t id = lookup(b, &b->map_index);
    if (id)
        return id;
    pp_mapping *maps = np_grow_array(b->maps, &b->maps_cap, b->nmaps + 1, sizeof(*maps));
    if (!maps)
        return -ENOMEM;
    b->maps = maps;
    pp_mapping *m = &maps[b->nmaps];
    perftools__profiles__mapping__init(m);
    m->id = b->nmaps + 1;
    m->filename = file;
    m->build_id = build;
    m->has_functions = true; /* every frame has a name: pprof must not symbolize */
    int err = np_map_put_str(&b->map_index, np_str_cstr(&b->key), (void *)(uintptr_t)m->id);
    if (err)
        return err;
    b->nmaps++;
    return (int64_t)m->id;
}

/* What a location's lines say about its mapping. */
static void note_mapping(struct builder *b, const pp_location *l) {
    pp_mapping *m = &b->maps[l->mapping_id - 1];
    if (l->address >= m->memory_limit)
        m->memory_limit = l->address + 1;
    m->has_inline_frames |= l->n_line > 1;
    for (size_t i = 0; i < l->n_line; i++) {
        m->has_filenames |= b->fns[l->line[i]->function_id - 1].filename != 0;
        m->has_line_numbers |= l->line[i]->line > 0;
    }
}

static void location_key(struct builder *b, const struct frame *group, size_t n,
                         const struct frame *at) {
    np_str_reset(&b->key);
    np_str_appendf(&b->key, "%" PRIu64 "@%" PRIx64, at->mapping, at->address);
    for (size_t i = n; i-- > 0;)
        np_str_appendf(&b->key, ",%" PRIu64 ":%" PRId64, group[i].function, group[i].line);
}

/* The location of a frame and the frames inlined into it (group[0] the
 * frame, group[1..n) inlined, outermost first): pprof lists the innermost
 * line first. Its mapping and address are the first the group knows. */
static int64_t location_id(struct builder *b, const struct frame *group, size_t n) {
    const struct frame *at = group;
    for (size_t i = 0; i < n && !at->mapping; i++)
        at = &group[i];
    location_key(b, group, n, at);
    int64_t id = lookup(b, &b->loc_index);
    if (id)
        return id;
    pp_location *locs = np_grow_array(b->locs, &b->locs_cap, b->nlocs + 1, sizeof(*locs));
    pp_line **lines = malloc(n * (sizeof(*lines) + sizeof(**lines)));
    if (locs)
        b->locs = locs;
    if (!locs || !lines) {
        free(lines);
        return -ENOMEM;
    }
    pp_line *line = (pp_line *)(lines + n);
    for (size_t i = 0; i < n; i++) {
        perftools__profiles__line__init(&line[i]);
        line[i].function_id = group[n - 1 - i].function;
        line[i].line = group[n - 1 - i].line;
        lines[i] = &line[i];
    }
    pp_location *l = &locs[b->nlocs];
    perftools__profiles__location__init(l);
    *l = (pp_location){.base = l->base,
                       .id = b->nlocs + 1,
                       .mapping_id = at->mapping,
                       .address = at->mapping ? at->address : 0,
                       .n_line = n,
                       .line = lines};
    int err = np_map_put_str(&b->loc_index, np_str_cstr(&b->key), (void *)(uintptr_t)l->id);
    if (err) {
        free(lines);
        return err;
    }
    b->nlocs++;
    if (l->mapping_id)
        note_mapping(b, l);
    return (int64_t)l->id;
}

/* ---- frames --------------------------------------------------------------- */

/* The frame's function: its name and file, and its line. */
static int64_t frame_function(struct builder *b, const char *text,
                              const struct np_rec_location *loc, struct frame *f) {
    size_t len = strlen(text);
    f->inlined = np_frame_inlined(text, len);
    if (f->inlined)
        len -= strlen(NP_FRAME_INLINED_SUFFIX);
    const char *file = NULL;
    size_t file_len = 0;
    if (!f->inlined && !(loc && loc->module)) /* a Python frame: len becomes its qualname's */
        np_frame_python(text, len, &len, &file, &file_len, &f->line);
    if (loc && loc->file) {
        file = loc->file;
        file_len = strlen(loc->file);
    }
    if (loc && loc->line && loc->line <= INT64_MAX)
        f->line = (int64_t)loc->line;
    int64_t name = str_id_n(b, text, len), fname = str_id_n(b, file, file_len);
    if (name < 0 || fname < 0)
        return -ENOMEM;
    return function_id(b, name, fname);
}

static int parse_frame(struct builder *b, const char *text, const struct np_rec_location *loc,
                       struct frame *f) {
    memset(f, 0, sizeof(*f));
    int64_t fn = frame_function(b, text, loc, f);
    if (fn < 0)
        return (int)fn;
    f->function = (uint64_t)fn;
    if (!loc || !loc->module || !*loc->module)
        return 0;
    int64_t m = mapping_id(b, loc->module, loc->build_id);
    if (m < 0)
        return (int)m;
    f->mapping = (uint64_t)m;
    f->address = loc->offset;
    return 0;
}

static void reverse(uint64_t *a, size_t n) {
    for (size_t i = 0; i < n / 2; i++) {
        uint64_t t = a[i];
        a[i] = a[n - 1 - i];
        a[n - 1 - i] = t;
    }
}

/* The op types of the stack's last [NCCL] frame (string id), 0 when none. */
static int64_t stack_nccl_op(struct builder *b, const char *const *frames, size_t n) {
    const char *frame = np_frames_last_nccl(frames, n);
    return frame ? str_id(b, np_frame_nccl_ops(frame)) : 0;
}

/* Frames (root first; locs: one per frame, or NULL) into locations (leaf
 * first), each frame grouped with the frames inlined into it. */
static int resolve_frames(struct builder *b, const char *const *frames,
                          const struct np_rec_location *locs, size_t n, struct stack *s) {
    struct frame *f = calloc(n ? n : 1, sizeof(*f));
    s->locs = calloc(n ? n : 1, sizeof(*s->locs));
    int err = f && s->locs ? 0 : -ENOMEM;
    for (size_t i = 0; i < n && !err; i++)
        err = parse_frame(b, frames[i], locs ? &locs[i] : NULL, &f[i]);
    for (size_t i = 0; i < n && !err;) {
        size_t j = i + 1;
        while (j < n && f[j].inlined)
            j++;
        int64_t id = location_id(b, &f[i], j - i);
        if (id < 0)
            err = (int)id;
        else
            s->locs[s->nlocs++] = (uint64_t)id;
        i = j;
    }
    if (!err)
        s->nccl_op = stack_nccl_op(b, frames, n);
    err = err ? err : s->nccl_op < 0 ? (int)s->nccl_op : 0;
    free(f);
    reverse(s->locs, s->nlocs);
    return err;
}

/* A synthetic leaf frame ([GPU_Kernel]K, ...): its location. */
static int64_t leaf_location(struct builder *b, const char *text) {
    struct frame f = {0};
    int64_t name = str_id(b, text);
    int64_t fn = name < 0 ? name : function_id(b, name, 0);
    if (fn < 0)
        return fn;
    f.function = (uint64_t)fn;
    return location_id(b, &f, 1);
}

/* ---- samples ------------------------------------------------------------ */

static void sample_key(struct builder *b, int64_t leaf, const struct stack *s,
                       const struct labels *l) {
    np_str_reset(&b->key);
    np_str_appendf(&b->key, "%" PRId64, leaf);
    for (size_t i = 0; i < s->nlocs; i++)
        np_str_appendf(&b->key, ",%" PRIu64, s->locs[i]);
    np_str_appendf(&b->key,
                   "|%" PRId64 "|%" PRId64 "|%" PRId64 "|%" PRId64 "|%" PRId64 "|%" PRId64
                   "|%" PRId64 "|%" PRId64,
                   l->pid, l->tid, l->comm, l->kernel, l->nccl_op, l->comm_hash, l->capture_by,
                   l->container);
}

/* Adds values to the sample of (leaf location or 0, stack, labels). */
static int add_sample(struct builder *b, int64_t leaf, const struct stack *s,
                      const struct labels *l, int64_t count, int64_t gpu_ns) {
    if (!count && !gpu_ns)
        return 0;
    sample_key(b, leaf, s, l);
    int64_t id = lookup(b, &b->sample_index);
    if (id < 0)
        return (int)id;
    if (!id) {
        struct sample *all =
            np_grow_array(b->samples, &b->samples_cap, b->nsamples + 1, sizeof(*all));
        if (!all)
            return -ENOMEM;
        b->samples = all;
        struct sample *x = &all[b->nsamples];
        *x = (struct sample){.labels = *l};
        x->locs = malloc((s->nlocs + 1) * sizeof(*x->locs));
        if (!x->locs)
            return -ENOMEM;
        if (leaf)
            x->locs[x->nlocs++] = (uint64_t)leaf;
        if (s->nlocs)
            memcpy(x->locs + x->nlocs, s->locs, s->nlocs * sizeof(*s->locs));
        x->nlocs += s->nlocs;
        id = (int64_t)++b->nsamples;
        int err = np_map_put_str(&b->sample_index, np_str_cstr(&b->key), (void *)(uintptr_t)id);
        if (err)
            return err;
    }
    b->samples[id - 1].count += count;
    b->samples[id - 1].gpu_ns += gpu_ns;
    return 0;
}

static int add_leaf_sample(struct builder *b, const char *leaf, const struct stack *s,
                           const struct labels *l, int64_t count, int64_t gpu_ns) {
    int64_t loc = leaf_location(b, leaf);
    return loc < 0 ? (int)loc : add_sample(b, loc, s, l, count, gpu_ns);
}

/* ---- launches.jsonl, stacks.jsonl, gpu_unmatched.jsonl ------------------------- */

/* Every stack of stacks.jsonl, in file order (so ids come as they always did). */
static int resolve_stacks(struct builder *b) {
    const struct np_recording *rec = &b->rec;
    b->stacks = calloc(rec->nstacks + 1, sizeof(*b->stacks));
    int err = b->stacks ? 0 : -ENOMEM;
    for (size_t i = 0; i < rec->nstacks && !err; i++) {
        const struct np_rec_stack *rs = &rec->stacks[i];
        err = resolve_frames(b, rs->frames, rs->locations, rs->nframes, &b->stacks[i]);
    }
    return err;
}

/* The op types of a launch's NCCL plan, different ones joined with '+' (as
 * the [NCCL] frame names them): a string id, 0 when none. */
static int64_t plan_ops(struct builder *b, const struct np_rec_launch *l) {
    struct np_str *t = &b->text;
    np_str_reset(t);
    for (uint32_t i = 0; i < l->nops; i++) {
        bool seen = !*l->ops[i];
        for (uint32_t j = 0; j < i && !seen; j++)
            seen = strcmp(l->ops[j], l->ops[i]) == 0;
        if (!seen)
            np_str_appendf(t, "%s%s", t->len ? "+" : "", l->ops[i]);
    }
    return t->failed ? -ENOMEM : str_id(b, np_str_cstr(t));
}

static int launch_labels(struct builder *b, const struct np_rec_launch *l, const struct stack *s,
                         struct labels *out) {
    *out = (struct labels){.pid = l->pid, .tid = l->tid, .nccl_op = s->nccl_op};
    out->comm = l->comm ? str_id(b, l->comm) : 0;
    out->kernel = str_id(b, l->kernel);
    if (l->nccl && !out->nccl_op)
        out->nccl_op = plan_ops(b, l);
    if (l->comm_hash)
        out->comm_hash = str_id(b, l->comm_hash);
    return out->comm < 0 || out->kernel < 0 || out->nccl_op < 0 || out->comm_hash < 0 ? -ENOMEM : 0;
}

/* A GPU record's leaf (into b->text) and its duration. */
static int gpu_record(struct builder *b, const struct np_rec_gpu *g, int64_t *ns) {
    *ns = (int64_t)(g->end_ns - g->start_ns);
    b->have_gpu = true;
    if (g->end_ns > b->last_ts)
        b->last_ts = g->end_ns;
    np_str_reset(&b->text);
    np_rec_gpu_leaf(&b->text, g);
    return b->text.failed ? -ENOMEM : 0;
}

static int cpu_leaf(struct builder *b, const struct np_rec_launch *l, const struct stack *s,
                    const struct labels *labels, int64_t count) {
    np_str_reset(&b->text);
    np_str_appendf(&b->text, NP_LEAF_KERNEL "%s", l->kernel);
    if (b->text.failed)
        return -ENOMEM;
    return add_leaf_sample(b, np_str_cstr(&b->text), s, labels, count, 0);
}

/* The stack of a replayed record's capture_stack_id; NULL when it has none
 * or stacks.jsonl lacks it (the record then stays under its launch). */
static const struct stack *capture_stack(const struct builder *b, const struct np_rec_gpu *g) {
    size_t index;
    if (!g->capture_stack_id || !np_recording_stack(&b->rec, g->capture_stack_id, &index))
        return NULL;
    return &b->stacks[index];
}

/* How many of the launch's records count under their capture stack (the
 * ones naming a stack stacks.jsonl lacks are counted, to be said). */
static uint32_t tied_records(struct builder *b, const struct np_rec_launch *l) {
    uint32_t tied = 0;
    for (uint32_t i = 0; i < l->ngpu; i++) {
        bool known = capture_stack(b, &l->gpu[i]) != NULL;
        tied += known;
        b->unknown_capture_stacks += l->gpu[i].capture_stack_id && !known;
    }
    return tied;
}

/* A replayed record tied to the launch that captured it: one launch of its
 * capture stack, labelled with its own kernel, that stack's NCCL op and how
 * it was tied (as graph_replays.jsonl counts replays without GPU records). */
static int captured_record(struct builder *b, const struct np_rec_gpu *g, const struct stack *s,
                           const struct labels *launch) {
    struct labels labels = *launch;
    labels.nccl_op = s->nccl_op;
    labels.kernel = g->name ? str_id(b, g->name) : launch->kernel;
    labels.capture_by = g->capture_by ? str_id(b, g->capture_by) : 0;
    if (labels.kernel < 0 || labels.capture_by < 0)
        return -ENOMEM;
    int64_t ns;
    int err = gpu_record(b, g, &ns);
    return err ? err : add_leaf_sample(b, np_str_cstr(&b->text), s, &labels, 1, ns);
}

/* The launch's samples: under its one GPU record, or counted under the CPU
 * side's kernel with each record's time under the record. Replayed records
 * tied to their capture count as launches of their capture stacks; the
 * CPU side's kernel is then counted only for the records left. */
static int launch_samples(struct builder *b, const struct np_rec_launch *l, const struct stack *s,
                          const struct labels *labels) {
    if (l->gpu_status && strcmp(l->gpu_status, NP_GPU_STATUS_PENDING) == 0)
        return add_leaf_sample(b, NP_LEAF_PENDING, s, labels, 1, 0);
    uint32_t tied = tied_records(b, l);
    bool cpu = l->ngpu == 0 || (l->ngpu > 1 && tied < l->ngpu);
    int err = cpu ? cpu_leaf(b, l, s, labels, 1) : 0;
    for (uint32_t i = 0; i < l->ngpu && !err; i++) {
        const struct stack *at = capture_stack(b, &l->gpu[i]);
        if (at) {
            err = captured_record(b, &l->gpu[i], at, labels);
            continue;
        }
        int64_t ns;
        err = gpu_record(b, &l->gpu[i], &ns);
        if (!err)
            err = add_leaf_sample(b, np_str_cstr(&b->text), s, labels, l->ngpu == 1, ns);
    }
    return err;
}

static int read_launch(struct builder *b, const struct np_rec_launch *l) {
    if (l->nested || l->captured)
        return 0; /* part of the launch around it; or captured: it ran nothing */
    if (l->graph_nodes && !l->ngpu)
        return 0; /* its kernels are graph_replays.jsonl's, under their capture sites */
    size_t index;
    struct stack empty = {0};
    const struct stack *s = &empty;
    if (np_recording_stack(&b->rec, l->stack_id, &index))
        s = &b->stacks[index];
    else
        b->unknown_stacks++;
    if (l->ts_ns < b->first_ts)
        b->first_ts = l->ts_ns;
    if (l->ts_ns > b->last_ts)
        b->last_ts = l->ts_ns;
    struct labels labels;
    int err = launch_labels(b, l, s, &labels);
    return err ? err : launch_samples(b, l, s, &labels);
}

static int read_launches(struct builder *b) {
    struct np_rec_lines it;
    struct np_rec_launch l;
    int err = np_rec_lines_open(&b->rec, NP_REC_LAUNCHES_JSONL, &it);
    while (!err && (err = np_rec_next_launch(&it, &l)) > 0)
        err = read_launch(b, &l);
    np_rec_lines_close(&it);
    return err;
}

/* gpu_unmatched.jsonl: GPU time under "[no launch stack]", no launch counted. */
static int read_unmatched(struct builder *b) {
    static const char *const root[] = {NP_FRAME_NO_LAUNCH_STACK};
    const struct labels none = {.pid = -1, .tid = -1};
    struct np_rec_lines it;
    struct np_rec_gpu g;
    int err = np_rec_lines_open(&b->rec, NP_REC_GPU_UNMATCHED_JSONL, &it);
    while (!err && (err = np_rec_next_gpu(&it, &g)) > 0) {
        int64_t ns;
        err = b->no_launch_stack.locs ? 0 : resolve_frames(b, root, NULL, 1, &b->no_launch_stack);
        if (!err)
            err = gpu_record(b, &g, &ns);
        if (!err)
            err = add_leaf_sample(b, np_str_cstr(&b->text), &b->no_launch_stack, &none, 0, ns);
    }
    np_rec_lines_close(&it);
    return err == -ENOENT ? 0 : err;
}

/* ---- folded input (daemon aggregate sets, merge) ---------------------------------- */

/* One "frame;frame;...;leaf" stack (cut up in place) with its values and labels. */
static int stack_sample(struct builder *b, char *stack, const struct labels *l, int64_t count,
                        int64_t gpu_ns) {
    size_t n = 1;
    for (const char *p = stack; *p; p++)
        n += *p == NP_FRAME_SEPARATOR;
    const char **frames = calloc(n, sizeof(*frames));
    if (!frames)
        return -ENOMEM;
    static const char separator[] = {NP_FRAME_SEPARATOR, '\0'};
    n = 0;
    for (char *p = stack, *f; (f = strsep(&p, separator));)
        frames[n++] = f;
    struct stack s = {0};
    int err = resolve_frames(b, frames, NULL, n, &s);
    if (!err)
        err = add_sample(b, 0, &s, l, count, gpu_ns);
    b->have_gpu |= gpu_ns != 0;
    free(s.locs);
    free(frames);
    return err;
}

/* One folded line with its weight: a count, or GPU nanoseconds. */
static int folded_sample(struct builder *b, const struct np_folded_line *line, bool gpu_ns) {
    int64_t value = (int64_t)line->weight;
    return stack_sample(b, line->stack, &b->set_labels, gpu_ns ? 0 : value, gpu_ns ? value : 0);
}

static int read_folded_file(struct builder *b, const char *path, bool gpu_ns) {
    struct np_folded r;
    struct np_folded_line line;
    int err = np_folded_open(&r, path);
    if (err && err != -ENOENT && err != -ENOMEM) /* a missing input is the caller's to say */
        np_err("cannot read %s: %s", path, strerror(-err));
    r.max_weight = INT64_MAX;
    while (!err && (err = np_folded_next(&r, &line)) > 0)
        err = folded_sample(b, &line, gpu_ns);
    b->skipped += r.malformed;
    np_folded_close(&r);
    return err;
}

static int read_folded(struct builder *b, const char *name, bool gpu_ns) {
    char *path = np_rec_path(b->dir, name);
    int err = path ? read_folded_file(b, path, gpu_ns) : -ENOMEM;
    free(path);
    return err;
}

/* ---- summary.json / window.json ------------------------------------------- */

/* The process of a set (window.json) or of a one-target recording. */
static int process_labels(struct builder *b, const struct np_rec_process *p) {
    if (p->pid > 0 && p->pid <= INT64_MAX)
        b->set_labels.pid = (int64_t)p->pid;
    if (p->comm)
        b->set_labels.comm = str_id(b, p->comm);
    return b->set_labels.comm < 0 ? -ENOMEM : 0;
}

static int read_meta(struct builder *b) {
    struct np_rec_meta m;
    int err = np_recording_meta(&b->rec, &m);
    if (!err) {
        b->start_unix_ns = m.start_unix_ns <= INT64_MAX ? (int64_t)m.start_unix_ns : 0;
        b->meta_duration_ns = m.duration_ns <= INT64_MAX ? (int64_t)m.duration_ns : 0;
    }
    if (!err && m.window)
        err = process_labels(b, &m.process);
    else if (!err && m.ntargets == 1)
        err = process_labels(b, &m.targets[0]);
    np_rec_meta_free(&m);
    return err;
}

/* ---- loading -------------------------------------------------------------- */

/* graph_replays.jsonl: each replayed kernel under replay;API;[graph capture];capture. */
static int read_graph_replays(struct builder *b) {
    struct np_rec_lines it;
    struct np_rec_graph_replay r;
    int err = np_rec_lines_open(&b->rec, NP_REC_GRAPH_REPLAYS_JSONL, &it);
    while (!err && (err = np_rec_next_graph_replay(&it, &r)) > 0) {
        size_t index;
        if (!np_recording_stack(&b->rec, r.stack_id, &index)) {
            b->unknown_stacks++;
            err = 0;
            continue;
        }
        const struct stack *s = &b->stacks[index];
        struct labels labels = {.pid = r.pid, .tid = -1, .nccl_op = s->nccl_op};
        labels.kernel = str_id(b, r.kernel);
        np_str_reset(&b->text);
        np_str_appendf(&b->text, NP_LEAF_KERNEL "%s", r.kernel);
        err = labels.kernel < 0 || b->text.failed
                  ? -ENOMEM
                  : add_leaf_sample(b, np_str_cstr(&b->text), s, &labels,
                                    r.count > INT64_MAX ? INT64_MAX : (int64_t)r.count, 0);
    }
    np_rec_lines_close(&it);
    return err == -ENOENT ? 0 : err;
}

static int load_launches(struct builder *b) {
    int err = np_recording_stacks(&b->rec);
    if (err == -ENOENT)
        np_warn("%s/" NP_REC_STACKS_JSONL " is missing: " NP_REC_PROFILE_PB_GZ
                " has the GPU leaves only",
                b->dir);
    if (err && err != -ENOENT)
        return err;
    err = resolve_stacks(b);
    if (!err)
        err = read_launches(b);
    if (!err)
        err = read_graph_replays(b);
    return err ? err : read_unmatched(b);
}

static int load_folded(struct builder *b) {
    b->source = NP_REC_MERGED_FOLDED;
    int err = read_folded(b, NP_REC_MERGED_FOLDED, false);
    if (err == -ENOENT) {
        np_err("%s has neither " NP_REC_LAUNCHES_JSONL " nor " NP_REC_MERGED_FOLDED
               ": no pprof profile",
               b->dir);
        return err;
    }
    if (!err)
        err = read_folded(b, NP_REC_MERGED_GPU_NS_FOLDED, true);
    return err == -ENOENT ? 0 : err;
}

static int load(struct builder *b) {
    int err = read_meta(b);
    if (err)
        return err;
    if (!np_recording_has(&b->rec, NP_REC_LAUNCHES_JSONL))
        return load_folded(b);
    b->source = NP_REC_LAUNCHES_JSONL;
    return load_launches(b);
}

/* ---- encoding --------------------------------------------------------------- */

struct gz_buffer {
    ProtobufCBuffer base;
    gzFile gz;
    int err;
};

static void gz_append(ProtobufCBuffer *buffer, size_t len, const uint8_t *data) {
    struct gz_buffer *g = (struct gz_buffer *)buffer;
    while (len && !g->err) {
        unsigned chunk = len > (1u << 30) ? 1u << 30 : (unsigned)len;
        int n = gzwrite(g->gz, data, chunk);
        if (n <= 0) {
            g->err = -EIO;
            return;
        }
        data += n;
        len -= (size_t)n;
    }
}

/* The label keys and sample types, interned before the table is copied. */
struct names {
    int64_t launches, count, gpu_time, nanoseconds, comment;
    int64_t pid, tid, comm, kernel, nccl_op, comm_hash, capture_by, container;
};

static int intern_names(struct builder *b, struct names *n) {
    char comment[128];
    snprintf(comment, sizeof(comment), "ncclprobe, from %s", b->source);
    *n = (struct names){
        str_id(b, "launches"),    str_id(b, "count"),     str_id(b, "gpu_time"),
        str_id(b, "nanoseconds"), str_id(b, comment),     str_id(b, "pid"),
        str_id(b, "tid"),         str_id(b, "comm"),      str_id(b, "kernel"),
        str_id(b, "nccl_op"),     str_id(b, "comm_hash"), str_id(b, NP_KEY_CAPTURE_BY),
        str_id(b, "container"),
    };
    const int64_t *all = (const int64_t *)n;
    for (size_t i = 0; i < sizeof(*n) / sizeof(*all); i++)
        if (all[i] < 0)
            return (int)all[i];
    return 0;
}

static size_t fill_labels(const struct names *k, const struct labels *l, pp_label *out) {
    size_t n = 0;
    const struct {
        int64_t key, str, num;
    } all[MAX_LABELS] = {{k->pid, 0, l->pid},
                         {k->tid, 0, l->tid},
                         {k->comm, l->comm, -1},
                         {k->kernel, l->kernel, -1},
                         {k->nccl_op, l->nccl_op, -1},
                         {k->comm_hash, l->comm_hash, -1},
                         {k->capture_by, l->capture_by, -1},
                         {k->container, l->container, -1}};
    for (size_t i = 0; i < MAX_LABELS; i++) {
        if (!all[i].str && all[i].num < 0)
            continue;
        perftools__profiles__label__init(&out[n]);
        out[n].key = all[i].key;
        out[n].str = all[i].str;
        out[n].num = all[i].str ? 0 : all[i].num;
        n++;
    }
    return n;
}

/* Everything the packed Profile points at that the tables do not hold. */
struct encoding {
    char **strings;
    pp_function **fns;
    pp_mapping **maps;
    pp_location **locs;
    pp_sample *samples, **sample_ptrs;
    int64_t *values;
    pp_label *labels, **label_ptrs;
};

static void encoding_free(struct encoding *e) {
    free(e->strings);
    free(e->fns);
    free(e->maps);
    free(e->locs);
    free(e->samples);
    free(e->sample_ptrs);
    free(e->values);
    free(e->labels);
    free(e->label_ptrs);
}

static int alloc_encoding(const struct builder *b, struct encoding *e, size_t nvalues) {
    size_t ns = b->nsamples ? b->nsamples : 1;
    e->strings = calloc(b->strings.count + 1, sizeof(*e->strings));
    e->fns = calloc(b->nfns + 1, sizeof(*e->fns));
    e->maps = calloc(b->nmaps + 1, sizeof(*e->maps));
    e->locs = calloc(b->nlocs + 1, sizeof(*e->locs));
    e->samples = calloc(ns, sizeof(*e->samples));
    e->sample_ptrs = calloc(ns, sizeof(*e->sample_ptrs));
    e->values = calloc(ns * nvalues, sizeof(*e->values));
    e->labels = calloc(ns * MAX_LABELS, sizeof(*e->labels));
    e->label_ptrs = calloc(ns * MAX_LABELS, sizeof(*e->label_ptrs));
    return e->strings && e->fns && e->maps && e->locs && e->samples && e->sample_ptrs &&
                   e->values && e->labels && e->label_ptrs
               ? 0
               : -ENOMEM;
}

static void fill_samples(const struct builder *b, const struct names *k, struct encoding *e,
                         size_t nvalues) {
    for (size_t i = 0; i < b->nsamples; i++) {
        const struct sample *x = &b->samples[i];
        pp_sample *s = &e->samples[i];
        perftools__profiles__sample__init(s);
        s->location_id = x->locs;
        s->n_location_id = x->nlocs;
        s->value = &e->values[i * nvalues];
        s->value[0] = x->count;
        if (nvalues > 1)
            s->value[1] = x->gpu_ns;
        s->n_value = nvalues;
        pp_label *labels = &e->labels[i * MAX_LABELS];
        s->label = &e->label_ptrs[i * MAX_LABELS];
        s->n_label = fill_labels(k, &x->labels, labels);
        for (size_t j = 0; j < s->n_label; j++)
            s->label[j] = &labels[j];
        e->sample_ptrs[i] = s;
    }
}

static void fill_tables(const struct builder *b, struct encoding *e) {
    for (size_t i = 0; i < b->strings.count; i++)
        e->strings[i] = b->strings.items[i]->text;
    for (size_t i = 0; i < b->nfns; i++)
        e->fns[i] = &b->fns[i];
    for (size_t i = 0; i < b->nmaps; i++)
        e->maps[i] = &b->maps[i];
    for (size_t i = 0; i < b->nlocs; i++)
        e->locs[i] = &b->locs[i];
}

static int64_t duration(const struct builder *b) {
    if (b->first_ts < b->last_ts)
        return (int64_t)(b->last_ts - b->first_ts);
    return b->meta_duration_ns;
}

static int pack(const Perftools__Profiles__Profile *p, FILE *f) {
    struct gz_buffer g = {.base = {.append = gz_append}};
    int fd = dup(fileno(f)); /* gzclose closes its own */
    g.gz = fd >= 0 ? gzdopen(fd, "wb") : NULL;
    if (!g.gz) {
        if (fd >= 0)
            close(fd);
        return errno ? -errno : -ENOMEM;
    }
    protobuf_c_message_pack_to_buffer(&p->base, &g.base);
    int cerr = gzclose(g.gz);
    return g.err ? g.err : cerr != Z_OK ? -EIO : 0;
}

/* The profile's sample and period types (launches/count, gpu_time/nanoseconds). */
struct value_types {
    pp_value_type types[2], *ptrs[2], period;
};

static void fill_value_types(struct value_types *v, const struct names *k) {
    for (size_t i = 0; i < 2; i++) {
        perftools__profiles__value_type__init(&v->types[i]);
        v->ptrs[i] = &v->types[i];
    }
    perftools__profiles__value_type__init(&v->period);
    v->types[0].type = v->period.type = k->launches;
    v->types[0].unit = v->period.unit = k->count;
    v->types[1].type = k->gpu_time;
    v->types[1].unit = k->nanoseconds;
}

static void fill_profile(const struct builder *b, struct names *k, const struct encoding *e,
                         struct value_types *v, size_t nvalues, Perftools__Profiles__Profile *p) {
    p->sample_type = v->ptrs;
    p->n_sample_type = nvalues;
    p->sample = e->sample_ptrs;
    p->n_sample = b->nsamples;
    p->mapping = e->maps;
    p->n_mapping = b->nmaps;
    p->location = e->locs;
    p->n_location = b->nlocs;
    p->function = e->fns;
    p->n_function = b->nfns;
    p->string_table = e->strings;
    p->n_string_table = b->strings.count;
    p->time_nanos = b->start_unix_ns;
    p->duration_nanos = duration(b);
    p->period_type = &v->period;
    p->period = 1;
    p->comment = &k->comment;
    p->n_comment = 1;
    p->default_sample_type = b->gpu_default ? k->gpu_time : k->launches;
}

/* Builds b's profile message and hands it to emit (which packs it somewhere):
 * emit's result, or -ENOMEM. */
static int with_profile(struct builder *b,
                        int (*emit)(const Perftools__Profiles__Profile *p, void *ctx), void *ctx) {
    struct names k;
    int err = intern_names(b, &k); /* before the string table is copied */
    if (err)
        return err;
    size_t nvalues = b->have_gpu ? 2 : 1;
    struct encoding e = {0};
    err = alloc_encoding(b, &e, nvalues);
    if (!err) {
        fill_tables(b, &e);
        fill_samples(b, &k, &e, nvalues);
        struct value_types v;
        fill_value_types(&v, &k);
        Perftools__Profiles__Profile p = PERFTOOLS__PROFILES__PROFILE__INIT;
        fill_profile(b, &k, &e, &v, nvalues, &p);
        err = emit(&p, ctx);
    }
    encoding_free(&e);
    return err;
}

static int pack_to_file(const Perftools__Profiles__Profile *p, void *f) {
    return pack(p, f);
}

static int encode(FILE *f, void *ctx) {
    return with_profile(ctx, pack_to_file, f);
}

/* ---- np_write_pprof ----------------------------------------------------------- */

static int builder_init(struct builder *b, const char *dir) {
    memset(b, 0, sizeof(*b));
    b->dir = dir;
    np_strtab_init(&b->strings);
    np_map_init(&b->fn_index);
    np_map_init(&b->map_index);
    np_map_init(&b->loc_index);
    np_map_init(&b->sample_index);
    np_str_init(&b->key);
    np_str_init(&b->text);
    b->first_ts = UINT64_MAX;
    b->set_labels = (struct labels){.pid = -1, .tid = -1};
    uint32_t empty;
    int err = np_recording_open(&b->rec, dir, NP_REC_LENIENT);
    return err ? err : np_strtab_intern(&b->strings, "", &empty); /* string_table[0] */
}

static void builder_free(struct builder *b) {
    for (size_t i = 0; i < b->nlocs; i++)
        free(b->locs[i].line);
    for (size_t i = 0; i < b->nsamples; i++)
        free(b->samples[i].locs);
    for (size_t i = 0; b->stacks && i < b->rec.nstacks; i++)
        free(b->stacks[i].locs);
    free(b->stacks);
    free(b->fns);
    free(b->maps);
    free(b->locs);
    free(b->samples);
    free(b->no_launch_stack.locs);
    np_map_free(&b->fn_index, NULL);
    np_map_free(&b->map_index, NULL);
    np_map_free(&b->loc_index, NULL);
    np_map_free(&b->sample_index, NULL);
    np_strtab_free(&b->strings);
    np_str_free(&b->key);
    np_str_free(&b->text);
    np_recording_close(&b->rec);
}

static void say_skipped(const struct builder *b) {
    uint64_t skipped = b->skipped + b->rec.malformed;
    if (skipped)
        np_warn("pprof: %" PRIu64 " malformed line(s) in %s skipped", skipped, b->dir);
    if (b->unknown_stacks)
        np_warn("pprof: %" PRIu64 " launch(es) in %s/" NP_REC_LAUNCHES_JSONL
                " name a stack_id " NP_REC_STACKS_JSONL
                " does not have: written with their GPU leaf only",
                b->unknown_stacks, b->dir);
    if (b->unknown_capture_stacks)
        np_warn("pprof: %" PRIu64 " GPU record(s) in %s/" NP_REC_LAUNCHES_JSONL
                " name a " NP_KEY_CAPTURE_STACK_ID " " NP_REC_STACKS_JSONL
                " does not have: counted under their launch's stack",
                b->unknown_capture_stacks, b->dir);
}

/* Writes the profile to path; every error said once. */
static int finish(struct builder *b, int err, const char *path) {
    if (err == -ENOMEM || (!err && !path)) {
        np_err("pprof: %s: out of memory", b->dir);
        err = -ENOMEM;
    }
    say_skipped(b);
    if (!err && (err = np_write_atomic(path, encode, b)) < 0)
        np_err("cannot write %s: %s", path, strerror(-err));
    builder_free(b);
    return err;
}

int np_write_pprof(const char *dir) {
    struct builder b;
    int err = builder_init(&b, dir);
    if (!err)
        err = load(&b);
    char *path = err ? NULL : np_rec_path(dir, NP_REC_PROFILE_PB_GZ);
    err = finish(&b, err, path);
    free(path);
    return err;
}

int np_write_pprof_folded(const char *counts, const char *gpu_ns, const char *out) {
    struct builder b;
    int err = builder_init(&b, counts);
    b.source = counts;
    if (!err)
        err = read_folded_file(&b, counts, false);
    if (!err && gpu_ns)
        err = read_folded_file(&b, gpu_ns, true);
    return finish(&b, err, out);
}

/* ---- live profiles (the daemon's /pprof endpoints) ------------------------------ */

/* The packed profile gzipped into memory (pprof reads gzip, not zlib). */
static int gzip_mem(const uint8_t *in, size_t len, uint8_t **out, size_t *out_len) {
    z_stream z = {0};
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return -ENOMEM;
    size_t cap = deflateBound(&z, (uLong)len) + 32;
    uint8_t *buf = malloc(cap);
    int err = buf ? 0 : -ENOMEM;
    if (!err) {
        z.next_in = (Bytef *)in;
        z.avail_in = (uInt)len;
        z.next_out = buf;
        z.avail_out = (uInt)cap;
        err = deflate(&z, Z_FINISH) == Z_STREAM_END ? 0 : -EIO;
    }
    deflateEnd(&z);
    if (err) {
        free(buf);
        return err;
    }
    *out = buf;
    *out_len = z.total_out;
    return 0;
}

struct mem_out {
    uint8_t **out;
    size_t *out_len;
};

static int pack_to_mem(const Perftools__Profiles__Profile *p, void *ctx) {
    struct mem_out *m = ctx;
    size_t size = protobuf_c_message_get_packed_size(&p->base);
    uint8_t *packed = malloc(size ? size : 1);
    if (!packed)
        return -ENOMEM;
    int err = gzip_mem(packed, protobuf_c_message_pack(&p->base, packed), m->out, m->out_len);
    free(packed);
    return err;
}

static int encode_mem(struct builder *b, uint8_t **out, size_t *out_len) {
    struct mem_out m = {out, out_len};
    return with_profile(b, pack_to_mem, &m);
}

static int live_sample(struct builder *b, const struct np_pprof_sample *x) {
    struct labels l = {.pid = x->pid, .tid = -1};
    l.comm = x->comm && *x->comm ? str_id(b, x->comm) : 0;
    l.container = x->container && *x->container ? str_id(b, x->container) : 0;
    if (l.comm < 0 || l.container < 0)
        return -ENOMEM;
    char *stack = strdup(x->stack);
    int err = stack ? stack_sample(b, stack, &l, x->count, x->gpu_ns) : -ENOMEM;
    free(stack);
    return err;
}

int np_pprof_encode_samples(const struct np_pprof_sample *samples, size_t n, int64_t time_ns,
                            int64_t duration_ns, bool gpu, uint8_t **out, size_t *out_len) {
    struct builder b;
    memset(&b, 0, sizeof(b));
    b.dir = "live";
    b.source = "the daemon's live profile";
    np_strtab_init(&b.strings);
    np_map_init(&b.fn_index);
    np_map_init(&b.map_index);
    np_map_init(&b.loc_index);
    np_map_init(&b.sample_index);
    np_str_init(&b.key);
    np_str_init(&b.text);
    b.start_unix_ns = time_ns;
    b.meta_duration_ns = duration_ns;
    b.have_gpu = b.gpu_default = gpu;
    uint32_t empty;
    int err = np_strtab_intern(&b.strings, "", &empty); /* string_table[0] */
    for (size_t i = 0; i < n && !err; i++)
        err = live_sample(&b, &samples[i]);
    if (!err)
        err = encode_mem(&b, out, out_len);
    builder_free(&b);
    return err;
}
