/* report.c - filters the launches of a recording, groups their matching
 * kernels by the stack that launched them, cut to --depth (report.h), and
 * counts what the diagnostics need. A CUDA graph replay's kernel whose
 * capture is known (a GPU record's capture stack, a line of
 * graph_replays.jsonl) counts under the stack that captured it. Stacks are
 * grouped by their kept frames: interned, so a group's key is the frame
 * pointers. */
#define _GNU_SOURCE
#include "report/report.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/util.h"
#include "recording/frames.h"

#define NCCL_NAME "nccl"

void np_report_init(struct np_report *rep) {
    memset(rep, 0, sizeof(*rep));
    np_map_init(&rep->index);
    np_counts_init(&rep->unplaced);
}

void np_report_free(struct np_report *rep) {
    for (size_t i = 0; i < rep->n; i++)
        np_counts_free(&rep->stacks[i].kernels);
    free(rep->stacks);
    free(rep->of_stack);
    np_map_free(&rep->index, NULL);
    np_counts_free(&rep->unplaced);
    np_report_init(rep);
}

/* ---- filters ------------------------------------------------------------------ */

/* Whether needle occurs in hay, ignoring ASCII case. */
static bool contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        if (strncasecmp(hay, needle, n) == 0)
            return true;
    }
    return n == 0;
}

static bool in_window(const struct np_report_filter *f, uint64_t ts) {
    return ts >= f->start_ns && ts < f->end_ns;
}

/* No window: the whole recording. */
static bool whole(const struct np_report_filter *f) {
    return f->start_ns == 0 && f->end_ns == UINT64_MAX;
}

static bool np_report_kernel_matches(const struct np_report_filter *f,
                                     const struct np_rep_launch *l, const char *name) {
    if (f->kernel)
        return strstr(name, f->kernel) != NULL;
    return (l && l->nccl) || contains_nocase(name, NCCL_NAME);
}

static bool stack_has_op(const struct np_rep_input *in, uint32_t stack, const char *op) {
    const char *frame = in->stacks[stack].nccl_frame;
    return frame && np_frame_nccl_has_op(frame, op);
}

static bool launch_has_op(const struct np_rep_input *in, const struct np_rep_launch *l,
                          const char *op) {
    for (uint32_t i = 0; i < l->nops; i++) {
        if (strcasecmp(in->ops[l->ops + i], op) == 0)
            return true;
    }
    return stack_has_op(in, l->stack, op);
}

/* Whether --op selects a GPU record of l: by the [NCCL] frame of the stack
 * that captured it when it was captured, else by its launch. */
static bool record_has_op(const struct np_rep_input *in, const struct np_rep_launch *l,
                          const struct np_rep_gpu *g, const char *op) {
    return g->capture ? stack_has_op(in, g->capture - 1, op) : launch_has_op(in, l, op);
}

/* ---- groups ------------------------------------------------------------------------ */

/* The key of a stack's kept frames: their addresses, and whether it was cut. */
static char *group_key(const char *const *frames, uint32_t n, bool cut) {
    struct np_str key;
    np_str_init(&key);
    for (uint32_t i = 0; i < n; i++)
        np_str_appendf(&key, "%" PRIxPTR ",", (uintptr_t)frames[i]);
    np_str_append(&key, cut ? "cut" : "whole");
    if (key.failed) {
        np_str_free(&key);
        return NULL;
    }
    return key.buf;
}

static int new_group(struct np_report *rep, const char *const *frames, uint32_t n, bool cut,
                     const char *key) {
    struct np_report_stack *stacks =
        np_grow_array(rep->stacks, &rep->cap, rep->n + 1, sizeof(*stacks));
    if (!stacks)
        return -ENOMEM;
    rep->stacks = stacks;
    struct np_report_stack *g = &rep->stacks[rep->n];
    *g = (struct np_report_stack){.frames = frames, .nframes = n, .cut = cut};
    np_counts_init(&g->kernels);
    rep->n++;
    return np_map_put_str(&rep->index, key, (void *)(uintptr_t)rep->n);
}

/* The group of a recording stack (made on first use): index + 1, 0 on -ENOMEM. */
static size_t group_of(struct np_report *rep, const struct np_rep_input *in, uint32_t stack,
                       uint32_t depth) {
    if (rep->of_stack[stack])
        return rep->of_stack[stack];
    const struct np_rec_stack *s = &in->stacks[stack];
    uint32_t keep = depth && s->nframes > depth ? depth : s->nframes;
    const char *const *frames = s->frames + (s->nframes - keep);
    bool cut = keep < s->nframes;
    char *key = group_key(frames, keep, cut);
    if (!key)
        return 0;
    uintptr_t g = (uintptr_t)np_map_get_str(&rep->index, key);
    if (!g && new_group(rep, frames, keep, cut, key) == 0)
        g = rep->n;
    free(key);
    rep->of_stack[stack] = (uint32_t)g;
    return g;
}

/* Where kernels are counted: a stack, and the time and line that order the
 * groups (their first counted launch). */
struct place {
    uint32_t stack;
    uint64_t ts_ns;
    long line;
};

/* Counts n kernels name under at->stack; captured: that stack captured them. */
static int add_kernels(struct np_report *rep, const struct np_rep_input *in,
                       const struct np_report_filter *f, const struct place *at, const char *name,
                       uint64_t n, bool captured) {
    if (n == 0)
        return 0;
    size_t g = group_of(rep, in, at->stack, f->depth);
    if (!g)
        return -ENOMEM;
    struct np_report_stack *s = &rep->stacks[g - 1];
    if (s->kernels.total == 0 || at->ts_ns < s->first_ts ||
        (at->ts_ns == s->first_ts && at->line < s->first_line)) {
        s->first_ts = at->ts_ns;
        s->first_line = at->line;
    }
    rep->total += n;
    rep->captured += captured ? n : 0;
    return np_counts_add(&s->kernels, name, n);
}

/* The matching kernels of a launch: its GPU kernels when it has any (a
 * replayed one under the stack that captured it, when known), else its
 * CPU-side name. A graph launch without GPU records whose kernels
 * graph_replays.jsonl counts is collect_graph_replays()'s. */
static int collect_launch(struct np_report *rep, const struct np_rep_input *in,
                          const struct np_report_filter *f, const struct np_rep_launch *l) {
    struct place at = {l->stack, l->ts_ns, l->line};
    if (!in_window(f, l->ts_ns) || (l->graph_nodes && !l->ngpu))
        return 0;
    if (l->nkernels == 0) {
        bool match =
            (!f->op || launch_has_op(in, l, f->op)) && np_report_kernel_matches(f, l, l->kernel);
        return match ? add_kernels(rep, in, f, &at, l->kernel, 1, false) : 0;
    }
    int err = 0;
    for (uint32_t i = 0; i < l->ngpu && !err; i++) {
        const struct np_rep_gpu *g = &in->gpu[l->gpu + i];
        if (g->type != NP_REC_GPU_KERNEL || !np_report_kernel_matches(f, l, g->name) ||
            (f->op && !record_has_op(in, l, g, f->op)))
            continue;
        at.stack = g->capture ? g->capture - 1 : l->stack;
        err = add_kernels(rep, in, f, &at, g->name, 1, g->capture != 0);
    }
    return err;
}

/* The matching kernels a graph launch's replay started in the window. --op
 * leaves out a kernel only when the stack that captured it names other ops
 * (the ops of a replay are not known otherwise). */
static int collect_replay(struct np_report *rep, const struct np_rep_input *in,
                          const struct np_report_filter *f, const struct np_rep_launch *l) {
    int err = 0;
    for (uint32_t i = 0; i < l->ngpu && !err; i++) {
        const struct np_rep_gpu *g = &in->gpu[l->gpu + i];
        struct place at = {g->capture ? g->capture - 1 : l->stack, l->ts_ns, l->line};
        if (g->type != NP_REC_GPU_KERNEL || g->graph_id == 0 || !in_window(f, g->start_ns) ||
            !np_report_kernel_matches(f, l, g->name))
            continue;
        if (f->op && g->capture && in->stacks[at.stack].nccl_frame &&
            !stack_has_op(in, at.stack, f->op))
            continue;
        err = add_kernels(rep, in, f, &at, g->name, 1, g->capture != 0);
    }
    return err;
}

/* ---- graph_replays.jsonl: replays without GPU records ------------------------------ */

/* A replay group's launches in the window, and the first of them. */
struct group_window {
    uint64_t launches, ts_ns;
    long line;
    bool unplaced; /* matching kernels of it could not be placed */
};

static struct group_window *groups_in_window(const struct np_rep_input *in,
                                             const struct np_report_filter *f) {
    struct group_window *gw = calloc(in->ngroups + 1, sizeof(*gw));
    for (size_t i = 0; gw && i < in->nlaunches; i++) {
        const struct np_rep_launch *l = &in->launches[i];
        struct group_window *w = l->replay_group ? &gw[l->replay_group - 1] : NULL;
        if (!w || !in_window(f, l->ts_ns))
            continue;
        if (!w->launches++ || l->ts_ns < w->ts_ns || (l->ts_ns == w->ts_ns && l->line < w->line)) {
            w->ts_ns = l->ts_ns;
            w->line = l->line;
        }
    }
    return gw;
}

#define UNPLACED UINT64_MAX

/* How many of a line's kernels its group's launches in the window ran:
 * all of them when every launch of the group is in it, a share when each
 * launch ran the same kernels, else UNPLACED. */
static uint64_t replay_share(const struct np_rep_input *in, const struct np_report_filter *f,
                             const struct np_rep_replay *r, const struct group_window *w) {
    const struct np_rep_replay_group *g = &in->groups[r->group];
    if (whole(f) || (g->launches && w->launches == g->launches))
        return r->count;
    if (w->launches == 0)
        return 0;
    return g->per_launch ? r->count / g->launches * w->launches : UNPLACED;
}

static int collect_one_replay(struct np_report *rep, const struct np_rep_input *in,
                              const struct np_report_filter *f, const struct np_rep_replay *r,
                              struct group_window *w) {
    if (!np_report_kernel_matches(f, NULL, r->kernel) ||
        (f->op && !stack_has_op(in, r->stack, f->op)))
        return 0;
    uint64_t n = replay_share(in, f, r, w);
    if (n == UNPLACED) {
        w->unplaced = true;
        return np_counts_add(&rep->unplaced, r->kernel, r->count);
    }
    struct place at = {r->stack, w->launches ? w->ts_ns : UINT64_MAX,
                       w->launches ? w->line : r->line};
    return add_kernels(rep, in, f, &at, r->kernel, n, true);
}

/* The matching kernels graph_replays.jsonl counts for graph launches
 * without GPU records, under the stacks that captured them. */
static int collect_graph_replays(struct np_report *rep, const struct np_rep_input *in,
                                 const struct np_report_filter *f) {
    struct group_window *gw = groups_in_window(in, f);
    int err = gw ? 0 : -ENOMEM;
    for (size_t i = 0; i < in->nreplays && !err; i++)
        err = collect_one_replay(rep, in, f, &in->replays[i], &gw[in->replays[i].group]);
    for (size_t g = 0; g < in->ngroups && !err; g++)
        rep->unplaced_launches += gw[g].unplaced ? gw[g].launches : 0;
    free(gw);
    return err;
}

static int compare_groups(const void *a, const void *b) {
    const struct np_report_stack *x = a, *y = b;
    if (x->kernels.total != y->kernels.total)
        return x->kernels.total > y->kernels.total ? -1 : 1;
    if (x->first_ts != y->first_ts)
        return x->first_ts < y->first_ts ? -1 : 1;
    return x->first_line < y->first_line ? -1 : x->first_line > y->first_line;
}

int np_report_collect(struct np_report *rep, const struct np_rep_input *in,
                      const struct np_report_filter *f, enum np_report_source source) {
    int err = 0;
    rep->of_stack = calloc(in->nstacks + 1, sizeof(*rep->of_stack));
    if (!rep->of_stack)
        return -ENOMEM;
    for (size_t i = 0; i < in->nlaunches && !err; i++) {
        const struct np_rep_launch *l = &in->launches[i];
        err = source == NP_REPORT_LAUNCHES ? collect_launch(rep, in, f, l)
                                           : collect_replay(rep, in, f, l);
    }
    if (!err && source == NP_REPORT_LAUNCHES)
        err = collect_graph_replays(rep, in, f);
    np_counts_sort(&rep->unplaced);
    free(rep->of_stack);
    rep->of_stack = NULL;
    if (err)
        return err;
    if (rep->n > 1)
        qsort(rep->stacks, rep->n, sizeof(*rep->stacks), compare_groups);
    for (size_t i = 0; i < rep->n; i++)
        np_counts_sort(&rep->stacks[i].kernels);
    return 0;
}

/* ---- diagnostics ---------------------------------------------------------------------- */

int np_report_unmatched(const struct np_rep_input *in, const struct np_report_filter *f,
                        struct np_counts *out) {
    int err = 0;
    for (size_t i = 0; i < in->nunmatched && !err; i++) {
        const struct np_rep_gpu *g = &in->unmatched[i];
        if (g->type == NP_REC_GPU_KERNEL && in_window(f, g->start_ns) &&
            np_report_kernel_matches(f, NULL, g->name))
            err = np_counts_add(out, g->name, 1);
    }
    np_counts_sort(out);
    return err;
}

static int add_if_nccl(struct np_counts *out, const char *name, uint64_t n) {
    return n && contains_nocase(name, NCCL_NAME) ? np_counts_add(out, name, n) : 0;
}

int np_report_nccl_seen(const struct np_rep_input *in, struct np_counts *out) {
    int err = 0;
    for (size_t i = 0; i < in->nlaunches && !err; i++) {
        const struct np_rep_launch *l = &in->launches[i];
        if (l->nkernels == 0 && !(l->graph_nodes && !l->ngpu))
            err = add_if_nccl(out, l->kernel, 1);
        for (uint32_t k = 0; k < l->ngpu && !err; k++) {
            const struct np_rep_gpu *g = &in->gpu[l->gpu + k];
            if (g->type == NP_REC_GPU_KERNEL)
                err = add_if_nccl(out, g->name, 1);
        }
    }
    for (size_t i = 0; i < in->nreplays && !err; i++)
        err = add_if_nccl(out, in->replays[i].kernel, in->replays[i].count);
    for (size_t i = 0; i < in->nunmatched && !err; i++) {
        if (in->unmatched[i].type == NP_REC_GPU_KERNEL)
            err = add_if_nccl(out, in->unmatched[i].name, 1);
    }
    np_counts_sort(out);
    return err;
}

int np_report_graph_unseen(const struct np_rep_input *in, const struct np_report_filter *f,
                           struct np_counts *out) {
    int err = 0;
    for (size_t i = 0; i < in->nlaunches && !err; i++) {
        const struct np_rep_launch *l = &in->launches[i];
        if (l->graph_unknown && in_window(f, l->ts_ns))
            err = np_counts_add(out, l->graph_unknown, 1);
    }
    np_counts_sort(out);
    return err;
}
