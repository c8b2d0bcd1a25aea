/* report.c - filters the launches of a recording, groups their matching
 * kernels by the stack that launched them, cut to --depth (report.h), and
 * counts what the diagnostics of an empty result need. Stacks are grouped
 * by their kept frames: interned, so a group's key is the frame pointers. */
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
}

void np_report_free(struct np_report *rep) {
    for (size_t i = 0; i < rep->n; i++)
        np_counts_free(&rep->stacks[i].kernels);
    free(rep->stacks);
    free(rep->of_stack);
    np_map_free(&rep->index, NULL);
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

static bool np_report_kernel_matches(const struct np_report_filter *f,
                                     const struct np_rep_launch *l, const char *name) {
    if (f->kernel)
        return strstr(name, f->kernel) != NULL;
    return (l && l->nccl) || contains_nocase(name, NCCL_NAME);
}

static bool launch_has_op(const struct np_rep_input *in, const struct np_rep_launch *l,
                          const char *op) {
    for (uint32_t i = 0; i < l->nops; i++) {
        if (strcasecmp(in->ops[l->ops + i], op) == 0)
            return true;
    }
    const char *frame = in->stacks[l->stack].nccl_frame;
    return frame && np_frame_nccl_has_op(frame, op);
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

static int add_kernel(struct np_report *rep, const struct np_rep_input *in,
                      const struct np_report_filter *f, const struct np_rep_launch *l,
                      const char *name) {
    size_t g = group_of(rep, in, l->stack, f->depth);
    if (!g)
        return -ENOMEM;
    struct np_report_stack *s = &rep->stacks[g - 1];
    if (s->kernels.total == 0 || l->ts_ns < s->first_ts ||
        (l->ts_ns == s->first_ts && l->line < s->first_line)) {
        s->first_ts = l->ts_ns;
        s->first_line = l->line;
    }
    rep->total++;
    return np_counts_add(&s->kernels, name, 1);
}

/* The matching kernels of a launch: its GPU kernels when it has any, else its CPU-side name. */
static int collect_launch(struct np_report *rep, const struct np_rep_input *in,
                          const struct np_report_filter *f, const struct np_rep_launch *l) {
    if (!in_window(f, l->ts_ns) || (f->op && !launch_has_op(in, l, f->op)))
        return 0;
    if (l->nkernels == 0)
        return np_report_kernel_matches(f, l, l->kernel) ? add_kernel(rep, in, f, l, l->kernel) : 0;
    int err = 0;
    for (uint32_t i = 0; i < l->ngpu && !err; i++) {
        const struct np_rep_gpu *g = &in->gpu[l->gpu + i];
        if (g->type == NP_REC_GPU_KERNEL && np_report_kernel_matches(f, l, g->name))
            err = add_kernel(rep, in, f, l, g->name);
    }
    return err;
}

/* The matching kernels a graph launch's replay started in the window (no --op:
 * the ops of a replay are not known). */
static int collect_replay(struct np_report *rep, const struct np_rep_input *in,
                          const struct np_report_filter *f, const struct np_rep_launch *l) {
    int err = 0;
    for (uint32_t i = 0; i < l->ngpu && !err; i++) {
        const struct np_rep_gpu *g = &in->gpu[l->gpu + i];
        if (g->type == NP_REC_GPU_KERNEL && g->graph_id != 0 && in_window(f, g->start_ns) &&
            np_report_kernel_matches(f, l, g->name))
            err = add_kernel(rep, in, f, l, g->name);
    }
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

static int add_if_nccl(struct np_counts *out, const char *name) {
    return contains_nocase(name, NCCL_NAME) ? np_counts_add(out, name, 1) : 0;
}

int np_report_nccl_seen(const struct np_rep_input *in, struct np_counts *out) {
    int err = 0;
    for (size_t i = 0; i < in->nlaunches && !err; i++) {
        const struct np_rep_launch *l = &in->launches[i];
        if (l->nkernels == 0)
            err = add_if_nccl(out, l->kernel);
        for (uint32_t k = 0; k < l->ngpu && !err; k++) {
            const struct np_rep_gpu *g = &in->gpu[l->gpu + k];
            if (g->type == NP_REC_GPU_KERNEL)
                err = add_if_nccl(out, g->name);
        }
    }
    for (size_t i = 0; i < in->nunmatched && !err; i++) {
        if (in->unmatched[i].type == NP_REC_GPU_KERNEL)
            err = add_if_nccl(out, in->unmatched[i].name);
    }
    np_counts_sort(out);
    return err;
}
