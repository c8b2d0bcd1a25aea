/* load.c - reads a recording for `ncclprobe report` (load.h): launches.jsonl
 * must be there (said first, with a hint), then stacks.jsonl is loaded
 * (launches name their stack by id), then the outermost launches are kept
 * (nested ones are skipped: they are part of the launch around them), then
 * gpu_unmatched.jsonl and graph_replays.jsonl when present. A stack_id (a
 * launch's, a GPU record's capture_stack_id, a graph replay's) that
 * stacks.jsonl lacks is an error. */
#include "report/load.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/hashmap.h"
#include "ncclprobe/recording.h"

void np_rep_input_free(struct np_rep_input *in) {
    free(in->launches);
    free(in->gpu);
    free(in->ops);
    free(in->unmatched);
    free(in->replays);
    free(in->groups);
    free(in->captures);
    np_rec_meta_free(&in->meta);
    np_recording_close(&in->rec);
    memset(in, 0, sizeof(*in));
}

static struct np_rep_gpu *add_gpu(struct np_rep_gpu **all, size_t *n, size_t *cap) {
    struct np_rep_gpu *grown = np_grow_array(*all, cap, *n + 1, sizeof(**all));
    if (!grown)
        return NULL;
    *all = grown;
    return &grown[(*n)++];
}

/* A GPU record as the report keeps it (its name interned). */
static int keep_gpu(struct np_rep_input *in, const struct np_rec_gpu *g, struct np_rep_gpu *out) {
    *out = (struct np_rep_gpu){
        .start_ns = g->start_ns, .end_ns = g->end_ns, .graph_id = g->graph_id, .type = g->type};
    if (g->type == NP_REC_GPU_KERNEL && !(out->name = np_recording_intern(&in->rec, g->name)))
        return -ENOMEM;
    return 0;
}

/* Appends stack to the captures of l (the last ones of in->captures) when
 * not there yet. */
static int add_capture(struct np_rep_input *in, struct np_rep_launch *l, uint32_t stack) {
    for (uint32_t i = 0; i < l->ncaptures; i++) {
        if (in->captures[l->captures + i] == stack)
            return 0;
    }
    uint32_t *all = np_grow_array(in->captures, &in->captures_cap, in->ncaptures + 1, sizeof(*all));
    if (!all)
        return -ENOMEM;
    in->captures = all;
    all[in->ncaptures++] = stack;
    l->ncaptures++;
    return 0;
}

/* The stack a replayed record was captured at, which stacks.jsonl must have. */
static int record_capture(struct np_rep_input *in, struct np_rec_lines *it, uint32_t index,
                          const struct np_rec_gpu *g, struct np_rep_launch *l,
                          struct np_rep_gpu *out) {
    size_t stack;
    if (!g->capture_stack_id)
        return 0;
    if (!np_recording_stack(&in->rec, g->capture_stack_id, &stack))
        return np_rec_lines_error(
            it, NP_KEY_GPU "[%u]: " NP_KEY_CAPTURE_STACK_ID " %llu is not in " NP_REC_STACKS_JSONL,
            index, (unsigned long long)g->capture_stack_id);
    out->capture = (uint32_t)stack + 1;
    return add_capture(in, l, (uint32_t)stack);
}

static int launch_gpu(struct np_rep_input *in, struct np_rec_lines *it,
                      const struct np_rec_launch *src, struct np_rep_launch *l) {
    l->gpu = in->ngpu;
    l->captures = in->ncaptures;
    for (uint32_t i = 0; i < src->ngpu; i++) {
        struct np_rep_gpu *g = add_gpu(&in->gpu, &in->ngpu, &in->gpu_cap);
        if (!g || keep_gpu(in, &src->gpu[i], g) < 0)
            return -ENOMEM;
        int err = record_capture(in, it, i, &src->gpu[i], l, g);
        if (err)
            return err;
        l->ngpu++;
        l->nkernels += g->type == NP_REC_GPU_KERNEL;
        if (g->end_ns > l->gpu_end_ns)
            l->gpu_end_ns = g->end_ns;
    }
    return 0;
}

static int launch_ops(struct np_rep_input *in, const struct np_rec_launch *src,
                      struct np_rep_launch *l) {
    l->ops = in->nops;
    for (uint32_t i = 0; i < src->nops; i++) {
        const char **ops = np_grow_array(in->ops, &in->ops_cap, in->nops + 1, sizeof(*ops));
        if (!ops)
            return -ENOMEM;
        in->ops = ops;
        if (!(ops[in->nops] = np_recording_intern(&in->rec, src->ops[i])))
            return -ENOMEM;
        in->nops++;
        l->nops++;
    }
    return 0;
}

static int keep_launch(struct np_rep_input *in, struct np_rec_lines *it,
                       const struct np_rec_launch *src) {
    size_t stack;
    if (!np_recording_stack(&in->rec, src->stack_id, &stack))
        return np_rec_lines_error(it, NP_KEY_STACK_ID " %llu is not in " NP_REC_STACKS_JSONL,
                                  (unsigned long long)src->stack_id);
    struct np_rep_launch *all =
        np_grow_array(in->launches, &in->launches_cap, in->nlaunches + 1, sizeof(*all));
    if (!all)
        return -ENOMEM;
    in->launches = all;
    struct np_rep_launch *l = &all[in->nlaunches];
    *l = (struct np_rep_launch){.ts_ns = src->ts_ns,
                                .pid = src->pid,
                                .tid = src->tid,
                                .kernel = np_recording_intern(&in->rec, src->kernel),
                                .stack = (uint32_t)stack,
                                .line = src->line,
                                .nccl = src->nccl,
                                .graph_nodes = src->graph_nodes};
    if (src->graph_unknown)
        l->graph_unknown = np_recording_intern(&in->rec, src->graph_unknown);
    int err = l->kernel && (l->graph_unknown || !src->graph_unknown) ? 0 : -ENOMEM;
    if (!err)
        err = launch_gpu(in, it, src, l);
    if (!err)
        err = launch_ops(in, src, l);
    in->nlaunches += err == 0;
    return err;
}

static int read_launches(struct np_rep_input *in, struct np_rec_lines *it) {
    struct np_rec_launch l;
    int err;
    while ((err = np_rec_next_launch(it, &l)) > 0) {
        if (!l.nested && !l.captured && (err = keep_launch(in, it, &l)) < 0)
            return err;
    }
    return err;
}

static int read_unmatched(struct np_rep_input *in) {
    struct np_rec_lines it;
    struct np_rec_gpu g;
    int err = np_rec_lines_open(&in->rec, NP_REC_GPU_UNMATCHED_JSONL, &it);
    if (err == -ENOENT)
        err = 0;
    while (!err && (err = np_rec_next_gpu(&it, &g)) > 0) {
        struct np_rep_gpu *kept = add_gpu(&in->unmatched, &in->nunmatched, &in->unmatched_cap);
        err = kept ? keep_gpu(in, &g, kept) : -ENOMEM;
    }
    np_rec_lines_close(&it);
    return err;
}

/* ---- graph_replays.jsonl ---------------------------------------------------------- */

static uint64_t group_key(uint32_t pid, uint32_t replay_stack) {
    return (uint64_t)pid << 32 | replay_stack;
}

/* The group of (pid, replay_stack), made on first use: its index, or -ENOMEM. */
static int64_t replay_group(struct np_rep_input *in, struct np_map *index, uint32_t pid,
                            uint32_t replay_stack) {
    uintptr_t at = (uintptr_t)np_map_get_u64(index, group_key(pid, replay_stack));
    if (at)
        return (int64_t)at - 1;
    struct np_rep_replay_group *all =
        np_grow_array(in->groups, &in->groups_cap, in->ngroups + 1, sizeof(*all));
    if (!all)
        return -ENOMEM;
    in->groups = all;
    all[in->ngroups] =
        (struct np_rep_replay_group){.pid = pid, .replay_stack = replay_stack, .per_launch = true};
    int err =
        np_map_put_u64(index, group_key(pid, replay_stack), (void *)(uintptr_t)(in->ngroups + 1));
    return err ? err : (int64_t)in->ngroups++;
}

/* A line of graph_replays.jsonl, whose stacks stacks.jsonl must have. */
static int keep_replay(struct np_rep_input *in, struct np_rec_lines *it, struct np_map *index,
                       const struct np_rec_graph_replay *r) {
    size_t stack, replay;
    if (!np_recording_stack(&in->rec, r->stack_id, &stack))
        return np_rec_lines_error(it, NP_KEY_STACK_ID " %llu is not in " NP_REC_STACKS_JSONL,
                                  (unsigned long long)r->stack_id);
    if (!np_recording_stack(&in->rec, r->replay_stack_id, &replay))
        return np_rec_lines_error(it, NP_KEY_REPLAY_STACK_ID " %llu is not in " NP_REC_STACKS_JSONL,
                                  (unsigned long long)r->replay_stack_id);
    int64_t group = replay_group(in, index, r->pid, (uint32_t)replay);
    struct np_rep_replay *all =
        group < 0 ? NULL
                  : np_grow_array(in->replays, &in->replays_cap, in->nreplays + 1, sizeof(*all));
    if (!all)
        return -ENOMEM;
    in->replays = all;
    all[in->nreplays] = (struct np_rep_replay){.kernel = np_recording_intern(&in->rec, r->kernel),
                                               .stack = (uint32_t)stack,
                                               .group = (uint32_t)group,
                                               .count = r->count,
                                               .line = r->line};
    return all[in->nreplays++].kernel ? 0 : -ENOMEM;
}

static int read_replay_lines(struct np_rep_input *in, struct np_map *index) {
    struct np_rec_lines it;
    struct np_rec_graph_replay r;
    int err = np_rec_lines_open(&in->rec, NP_REC_GRAPH_REPLAYS_JSONL, &it);
    if (err == -ENOENT)
        err = 0;
    while (!err && (err = np_rec_next_graph_replay(&it, &r)) > 0)
        err = keep_replay(in, &it, index, &r);
    np_rec_lines_close(&it);
    return err;
}

/* Each graph launch without GPU records into the group of its process and
 * stack; whether the group's launches each ran the same kernels. */
static void group_launches(struct np_rep_input *in, const struct np_map *index) {
    for (size_t i = 0; i < in->nlaunches; i++) {
        struct np_rep_launch *l = &in->launches[i];
        if (!l->graph_nodes || l->ngpu)
            continue;
        uintptr_t at = (uintptr_t)np_map_get_u64(index, group_key(l->pid, l->stack));
        if (!at)
            continue;
        struct np_rep_replay_group *g = &in->groups[at - 1];
        l->replay_group = (uint32_t)at;
        if (g->launches++ && g->graph_nodes != l->graph_nodes)
            g->per_launch = false;
        g->graph_nodes = l->graph_nodes;
    }
    for (size_t i = 0; i < in->nreplays; i++) {
        struct np_rep_replay_group *g = &in->groups[in->replays[i].group];
        if (!g->launches || in->replays[i].count % g->launches)
            g->per_launch = false;
    }
}

/* The lines of graph_replays.jsonl ordered by group (a counting sort):
 * group g's are order[first[g]] .. order[first[g + 1] - 1]. */
static int order_by_group(const struct np_rep_input *in, size_t **order, size_t **first) {
    *order = calloc(in->nreplays + 1, sizeof(**order));
    *first = calloc(in->ngroups + 2, sizeof(**first));
    if (!*order || !*first)
        return -ENOMEM;
    for (size_t i = 0; i < in->nreplays; i++)
        (*first)[in->replays[i].group + 2]++;
    for (size_t g = 2; g < in->ngroups + 2; g++)
        (*first)[g] += (*first)[g - 1];
    for (size_t i = 0; i < in->nreplays; i++)
        (*order)[(*first)[in->replays[i].group + 1]++] = i;
    return 0;
}

/* The distinct stacks of a group's lines, one run of in->captures. */
static int one_group_captures(struct np_rep_input *in, struct np_rep_replay_group *g,
                              const size_t *lines, size_t n) {
    struct np_rep_launch run = {.captures = in->ncaptures};
    int err = 0;
    for (size_t i = 0; i < n && !err; i++)
        err = add_capture(in, &run, in->replays[lines[i]].stack);
    g->captures = run.captures;
    g->ncaptures = run.ncaptures;
    return err;
}

/* The capture stacks of the groups whose launches each ran the same kernels,
 * given to each of their launches (--function looks in them). */
static int group_captures(struct np_rep_input *in) {
    size_t *order = NULL, *first = NULL;
    int err = order_by_group(in, &order, &first);
    for (size_t g = 0; g < in->ngroups && !err; g++) {
        if (in->groups[g].per_launch)
            err = one_group_captures(in, &in->groups[g], order + first[g], first[g + 1] - first[g]);
    }
    for (size_t i = 0; i < in->nlaunches && !err; i++) {
        struct np_rep_launch *l = &in->launches[i];
        const struct np_rep_replay_group *g =
            l->replay_group ? &in->groups[l->replay_group - 1] : NULL;
        if (g && g->per_launch) {
            l->captures = g->captures;
            l->ncaptures = g->ncaptures;
        }
    }
    free(order);
    free(first);
    return err;
}

static int read_graph_replays(struct np_rep_input *in) {
    struct np_map index;
    np_map_init(&index);
    int err = read_replay_lines(in, &index);
    if (!err)
        group_launches(in, &index);
    np_map_free(&index, NULL);
    return err ? err : group_captures(in);
}

/* ---- the recording -------------------------------------------------------------- */

/* launches.jsonl, said when missing before anything else is read. */
static int open_launches(struct np_rep_input *in, struct np_rec_lines *it) {
    int err = np_rec_lines_open(&in->rec, NP_REC_LAUNCHES_JSONL, it);
    if (err == -ENOENT)
        np_err("cannot open %s: %s (is this a directory written by ncclprobe record?)",
               np_rec_lines_path(it), strerror(-err));
    return err;
}

static int load_stacks(struct np_rep_input *in) {
    int err = np_recording_stacks(&in->rec);
    if (err == -ENOENT) {
        char *path = np_rec_path(in->rec.dir, NP_REC_STACKS_JSONL);
        np_err("cannot open %s: %s", path ? path : NP_REC_STACKS_JSONL, strerror(-err));
        free(path);
    }
    in->stacks = in->rec.stacks;
    in->nstacks = in->rec.nstacks;
    return err;
}

int np_rep_input_load(struct np_rep_input *in, const char *dir) {
    struct np_rec_lines launches = {0};
    memset(in, 0, sizeof(*in));
    int err = np_recording_open(&in->rec, dir, NP_REC_STRICT);
    if (!err)
        err = open_launches(in, &launches);
    if (!err)
        err = load_stacks(in);
    if (!err)
        err = read_launches(in, &launches);
    np_rec_lines_close(&launches);
    if (!err)
        err = read_unmatched(in);
    if (!err)
        err = read_graph_replays(in);
    if (!err)
        err = np_recording_meta(&in->rec, &in->meta);
    if (err == -ENOMEM)
        np_err("%s: out of memory", dir);
    return err;
}
