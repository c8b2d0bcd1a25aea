/* occurrence.c - finds the occurrences of --function NAME (occurrence.h).
 * The outermost launches are put in (pid, tid, ts_ns, line) order; walking
 * them, a run goes on while each launch's stack has the NAME frame at the
 * same depth under the same callers. A graph launch's stack is its own, or,
 * when NAME is not in it, the first of the stacks that captured what it ran
 * that has NAME (replay;API;[graph capture];capture frames). Two
 * back-to-back calls from one call site with no launch in between cannot be
 * told apart: they are one run. */
#include "report/occurrence.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "recording/frames.h"

#define NOT_FOUND UINT32_MAX

struct run {
    const struct np_rep_launch *first, *last;
    const struct np_rec_stack *stack;
    uint32_t depth; /* index of the NAME frame in stack */
    size_t launches;
};

void np_occurrences_free(struct np_occurrences *o) {
    free(o->items);
    memset(o, 0, sizeof(*o));
}

static int compare_launches(const void *a, const void *b) {
    const struct np_rep_launch *x = *(const struct np_rep_launch *const *)a;
    const struct np_rep_launch *y = *(const struct np_rep_launch *const *)b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->ts_ns != y->ts_ns)
        return x->ts_ns < y->ts_ns ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

static int compare_occurrences(const void *a, const void *b) {
    const struct np_occurrence *x = a, *y = b;
    if (x->start_ns != y->start_ns)
        return x->start_ns < y->start_ns ? -1 : 1;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->tid < y->tid ? -1 : x->tid > y->tid;
}

/* Index of the outermost frame NAME matches, or NOT_FOUND. */
static uint32_t find_frame(const struct np_rec_stack *s, const char *name) {
    for (uint32_t i = 0; i < s->nframes; i++) {
        if (np_frame_matches(s->frames[i], name))
            return i;
    }
    return NOT_FOUND;
}

static bool continues(const struct run *run, const struct np_rep_launch *l,
                      const struct np_rec_stack *s, uint32_t depth) {
    if (!run->first || run->first->pid != l->pid || run->first->tid != l->tid ||
        run->depth != depth)
        return false;
    if (run->stack == s)
        return true;
    for (uint32_t i = 0; i < depth; i++) {
        if (run->stack->frames[i] != s->frames[i])
            return false;
    }
    return np_frame_same_call(run->stack->frames[depth], s->frames[depth]);
}

static int close_run(struct np_occurrences *o, struct run *run) {
    if (!run->first)
        return 0;
    struct np_occurrence *items = np_grow_array(o->items, &o->cap, o->n + 1, sizeof(*items));
    if (!items)
        return -ENOMEM;
    o->items = items;
    uint64_t last = run->last->ts_ns;
    if (run->last->gpu_end_ns > last)
        last = run->last->gpu_end_ns;
    o->items[o->n++] = (struct np_occurrence){
        .frame = run->stack->frames[run->depth],
        .pid = run->first->pid,
        .tid = run->first->tid,
        .start_ns = run->first->ts_ns,
        .end_ns = last == UINT64_MAX ? last : last + 1,
        .launches = run->launches,
    };
    memset(run, 0, sizeof(*run));
    return 0;
}

/* The stack of l that has the NAME frame: its own, else the first of its
 * capture stacks that has it (index in *stack; NOT_FOUND: none). */
static uint32_t named_stack(const struct np_rep_input *in, const struct np_rep_launch *l,
                            const uint32_t *depth_of, uint32_t *stack) {
    *stack = l->stack;
    for (uint32_t i = 0; depth_of[*stack] == NOT_FOUND && i < l->ncaptures; i++)
        *stack = in->captures[l->captures + i];
    return depth_of[*stack];
}

/* Walks the launches in thread and time order, cutting them into runs. */
static int find_runs(const struct np_rep_input *in, const struct np_rep_launch **order,
                     const uint32_t *depth_of, struct np_occurrences *o) {
    struct run run = {0};
    int err = 0;
    for (size_t i = 0; i < in->nlaunches && !err; i++) {
        const struct np_rep_launch *l = order[i];
        uint32_t stack, depth = named_stack(in, l, depth_of, &stack);
        const struct np_rec_stack *s = &in->stacks[stack];
        if (depth != NOT_FOUND && continues(&run, l, s, depth)) {
            run.last = l;
            run.launches++;
            continue;
        }
        err = close_run(o, &run);
        if (depth != NOT_FOUND)
            run = (struct run){l, l, s, depth, 1};
    }
    return err ? err : close_run(o, &run);
}

static bool ambiguous(const struct np_occurrences *o) {
    for (size_t i = 1; i < o->n; i++) {
        if (!np_frame_same_call(o->items[0].frame, o->items[i].frame))
            return true;
    }
    return false;
}

int np_find_occurrences(const struct np_rep_input *in, const char *name,
                        struct np_occurrences *out) {
    const struct np_rep_launch **order = calloc(in->nlaunches + 1, sizeof(*order));
    uint32_t *depth_of = calloc(in->nstacks + 1, sizeof(*depth_of));
    int err = order && depth_of ? 0 : -ENOMEM;
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; !err && i < in->nstacks; i++)
        depth_of[i] = find_frame(&in->stacks[i], name);
    for (size_t i = 0; !err && i < in->nlaunches; i++)
        order[i] = &in->launches[i];
    if (!err && in->nlaunches > 1)
        qsort(order, in->nlaunches, sizeof(*order), compare_launches);
    if (!err)
        err = find_runs(in, order, depth_of, out);
    free(order);
    free(depth_of);
    if (err) {
        np_occurrences_free(out);
        return err;
    }
    if (out->n > 1)
        qsort(out->items, out->n, sizeof(*out->items), compare_occurrences);
    out->ambiguous = ambiguous(out);
    return 0;
}
