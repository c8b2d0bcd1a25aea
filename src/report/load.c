/* load.c - reads a recording for `ncclprobe report` (load.h): launches.jsonl
 * must be there (said first, with a hint), then stacks.jsonl is loaded
 * (launches name their stack by id), then the outermost launches are kept
 * (nested ones are skipped: they are part of the launch around them), then
 * gpu_unmatched.jsonl when present. A launch whose stack_id stacks.jsonl
 * lacks is an error. */
#include "report/load.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ncclprobe/recording.h"

void np_rep_input_free(struct np_rep_input *in) {
    free(in->launches);
    free(in->gpu);
    free(in->ops);
    free(in->unmatched);
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

static int launch_gpu(struct np_rep_input *in, const struct np_rec_launch *src,
                      struct np_rep_launch *l) {
    l->gpu = in->ngpu;
    for (uint32_t i = 0; i < src->ngpu; i++) {
        struct np_rep_gpu *g = add_gpu(&in->gpu, &in->ngpu, &in->gpu_cap);
        if (!g || keep_gpu(in, &src->gpu[i], g) < 0)
            return -ENOMEM;
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
                                .nccl = src->nccl};
    int err = l->kernel ? launch_gpu(in, src, l) : -ENOMEM;
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
        err = np_recording_meta(&in->rec, &in->meta);
    if (err == -ENOMEM)
        np_err("%s: out of memory", dir);
    return err;
}
