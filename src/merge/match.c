/* match.c - one-to-one, per-thread, closest-pair-first pairing of CPU
 * launches with runtime API events (see match.h for the rules): threads
 * grouped, each group's points on one timeline, isolated pairs taken in one
 * pass, then a heap of neighbouring pairs for the rest. */
#include "merge/match.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "lib/hashmap.h"

/* Group 0 is the shared pool; every thread with both CPU launches and events
 * has a group of its own. */
#define POOL_GROUP 0

struct thread_info {
    bool on_cpu;
    bool has_events;
    uint32_t group;
};

/* A point tagged with its group, to be sorted by group, then time. */
struct sorted_point {
    uint32_t group;
    int64_t ts_ns;
    size_t index; /* into the caller's array */
};

/* One group's CPU launches and events merged in time order: a doubly linked
 * list that matched points leave. */
struct timeline_point {
    int64_t ts_ns;
    size_t index; /* into the caller's CPU or event array */
    bool is_event;
};

struct timeline {
    struct timeline_point *points;
    size_t n;
    size_t *prev, *next; /* NP_MATCH_NONE at the ends */
    bool *alive;
};

/* Two neighbours on the timeline, one CPU launch and one event. */
struct candidate {
    int64_t gap_ns;
    size_t left, right; /* timeline positions */
};

/* Binary min-heap of candidates, closest (then earliest) first. */
struct candidate_heap {
    struct candidate *items;
    size_t count, cap;
};

uint64_t np_match_thread_key(uint32_t pid, uint32_t tid) {
    return (uint64_t)pid << 32 | tid;
}

static int note_threads(struct np_map *threads, const struct np_match_point *points, size_t n,
                        bool cpu_side) {
    struct thread_info *info = NULL;

    for (size_t i = 0; i < n; i++) {
        if (i > 0 && points[i].thread == points[i - 1].thread && info)
            continue; /* same thread as the line before: already noted */
        info = np_map_get_u64(threads, points[i].thread);
        if (!info) {
            info = calloc(1, sizeof(*info));
            if (!info || np_map_put_u64(threads, points[i].thread, info) < 0) {
                free(info);
                return -ENOMEM;
            }
        }
        if (cpu_side)
            info->on_cpu = true;
        else
            info->has_events = true;
    }
    return 0;
}

/* Numbers the groups; returns how many there are (the pool included). */
static uint32_t assign_groups(struct np_map *threads) {
    uint32_t next_group = POOL_GROUP + 1;

    for (size_t i = 0; i < threads->cap; i++) {
        if (!threads->slots[i].used)
            continue;
        struct thread_info *info = threads->slots[i].value;
        info->group = info->on_cpu && info->has_events ? next_group++ : POOL_GROUP;
    }
    return next_group;
}

static int compare_sorted_points(const void *a, const void *b) {
    const struct sorted_point *x = a, *y = b;
    if (x->group != y->group)
        return x->group < y->group ? -1 : 1;
    if (x->ts_ns != y->ts_ns)
        return x->ts_ns < y->ts_ns ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static bool sorted_by_time(const struct sorted_point *p, size_t n) {
    for (size_t i = 1; i < n; i++)
        if (compare_sorted_points(&p[i - 1], &p[i]) > 0)
            return false;
    return true;
}

/* The points grouped (a stable counting pass: file order kept), then sorted
 * by time within each group - usually they already are. */
static struct sorted_point *sort_by_group(const struct np_map *threads, uint32_t ngroups,
                                          const struct np_match_point *points, size_t n) {
    struct sorted_point *sorted = malloc((n ? n : 1) * sizeof(*sorted));
    size_t *starts = calloc(ngroups + 1, sizeof(*starts));
    const struct thread_info *info = NULL;

    if (!sorted || !starts) {
        free(sorted);
        free(starts);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || points[i].thread != points[i - 1].thread)
            info = np_map_get_u64(threads, points[i].thread);
        starts[info->group + 1]++;
    }
    for (uint32_t g = 0; g < ngroups; g++)
        starts[g + 1] += starts[g];
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || points[i].thread != points[i - 1].thread)
            info = np_map_get_u64(threads, points[i].thread);
        sorted[starts[info->group]++] = (struct sorted_point){info->group, points[i].ts_ns, i};
    }
    size_t from = 0; /* starts[g] is now where group g ends */
    for (uint32_t g = 0; g < ngroups; g++) {
        size_t count = starts[g] - from;
        if (!sorted_by_time(sorted + from, count))
            qsort(sorted + from, count, sizeof(*sorted), compare_sorted_points);
        from = starts[g];
    }
    free(starts);
    return sorted;
}

static void timeline_free(struct timeline *line) {
    free(line->points);
    free(line->prev);
    free(line->next);
    free(line->alive);
}

static void timeline_append(struct timeline *line, const struct sorted_point *p, bool is_event) {
    size_t i = line->n++;
    line->points[i] = (struct timeline_point){p->ts_ns, p->index, is_event};
    line->prev[i] = i > 0 ? i - 1 : NP_MATCH_NONE;
    line->next[i] = NP_MATCH_NONE;
    if (i > 0)
        line->next[i - 1] = i;
    line->alive[i] = true;
}

/* Merges a group's CPU launches and events (each sorted by time). */
static int timeline_init(struct timeline *line, const struct sorted_point *cpu, size_t ncpu,
                         const struct sorted_point *events, size_t nevents) {
    size_t n = ncpu + nevents, c = 0, e = 0;

    line->n = 0;
    line->points = malloc(n * sizeof(*line->points));
    line->prev = malloc(n * sizeof(*line->prev));
    line->next = malloc(n * sizeof(*line->next));
    line->alive = malloc(n * sizeof(*line->alive));
    if (!line->points || !line->prev || !line->next || !line->alive) {
        timeline_free(line);
        return -ENOMEM;
    }
    while (c < ncpu || e < nevents) {
        if (e == nevents || (c < ncpu && cpu[c].ts_ns <= events[e].ts_ns))
            timeline_append(line, &cpu[c++], false);
        else
            timeline_append(line, &events[e++], true);
    }
    return 0;
}

static void timeline_remove(struct timeline *line, size_t i) {
    size_t before = line->prev[i], after = line->next[i];
    if (before != NP_MATCH_NONE)
        line->next[before] = after;
    if (after != NP_MATCH_NONE)
        line->prev[after] = before;
    line->alive[i] = false;
}

static bool closer(const struct candidate *a, const struct candidate *b) {
    return a->gap_ns != b->gap_ns ? a->gap_ns < b->gap_ns : a->left < b->left;
}

static void heap_swap(struct candidate_heap *h, size_t a, size_t b) {
    struct candidate tmp = h->items[a];
    h->items[a] = h->items[b];
    h->items[b] = tmp;
}

/* The heap is sized for every push up front (see match_group). */
static void heap_push(struct candidate_heap *h, struct candidate c) {
    size_t i = h->count++;
    h->items[i] = c;
    while (i > 0 && closer(&h->items[i], &h->items[(i - 1) / 2])) {
        heap_swap(h, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static struct candidate heap_pop(struct candidate_heap *h) {
    struct candidate top = h->items[0];
    h->items[0] = h->items[--h->count];
    for (size_t i = 0;;) {
        size_t smallest = i, left = 2 * i + 1, right = 2 * i + 2;
        if (left < h->count && closer(&h->items[left], &h->items[smallest]))
            smallest = left;
        if (right < h->count && closer(&h->items[right], &h->items[smallest]))
            smallest = right;
        if (smallest == i)
            return top;
        heap_swap(h, i, smallest);
        i = smallest;
    }
}

/* Pushes neighbours a < b when they are a CPU launch and an event closer
 * than the tolerance. */
static void consider_pair(const struct timeline *line, struct candidate_heap *heap, size_t a,
                          size_t b, int64_t tolerance_ns) {
    if (line->points[a].is_event == line->points[b].is_event)
        return;
    int64_t gap = line->points[b].ts_ns - line->points[a].ts_ns;
    if (gap < tolerance_ns)
        heap_push(heap, (struct candidate){gap, a, b});
}

static void take_pair(struct timeline *line, const struct candidate *c, size_t *cpu_to_event) {
    const struct timeline_point *left = &line->points[c->left], *right = &line->points[c->right];
    if (left->is_event)
        cpu_to_event[right->index] = left->index;
    else
        cpu_to_event[left->index] = right->index;
    timeline_remove(line, c->left);
    timeline_remove(line, c->right);
}

static int64_t gap_after(const struct timeline *line, size_t i) {
    return line->points[i + 1].ts_ns - line->points[i].ts_ns;
}

/* Takes, in one pass, every CPU/event pair of neighbours closer than the
 * tolerance and strictly closer than both pairs beside it: no other pair
 * with either point can be closer, so closest-first would take it anyway.
 * Most pairs are such when clocks agree; the heap gets the rest. */
static void take_isolated_pairs(struct timeline *line, int64_t tolerance_ns, size_t *cpu_to_event) {
    for (size_t i = 0; i + 1 < line->n; i++) {
        int64_t gap = gap_after(line, i);
        if (line->points[i].is_event == line->points[i + 1].is_event || gap >= tolerance_ns)
            continue;
        bool closer_than_left = i == 0 || gap < gap_after(line, i - 1);
        bool closer_than_right = i + 2 >= line->n || gap < gap_after(line, i + 1);
        if (!closer_than_left || !closer_than_right)
            continue;
        take_pair(line, &(struct candidate){gap, i, i + 1}, cpu_to_event);
        i++;
    }
}

/* Closest pairs first over one group. Both points of a candidate still
 * there are still neighbours: points only ever leave the timeline. */
static int match_group(const struct sorted_point *cpu, size_t ncpu,
                       const struct sorted_point *events, size_t nevents, int64_t tolerance_ns,
                       size_t *cpu_to_event) {
    struct timeline line;
    struct candidate_heap heap = {0};

    if (ncpu == 0 || nevents == 0)
        return 0;
    if (timeline_init(&line, cpu, ncpu, events, nevents) < 0)
        return -ENOMEM;
    /* pushes: at most n - 1 neighbour pairs, then one per pair taken (<= n / 2) */
    heap.cap = line.n + line.n / 2;
    heap.items = malloc(heap.cap * sizeof(*heap.items));
    if (!heap.items) {
        timeline_free(&line);
        return -ENOMEM;
    }
    take_isolated_pairs(&line, tolerance_ns, cpu_to_event);
    for (size_t i = 0; i < line.n; i++)
        if (line.alive[i] && line.next[i] != NP_MATCH_NONE)
            consider_pair(&line, &heap, i, line.next[i], tolerance_ns);
    while (heap.count > 0) {
        struct candidate c = heap_pop(&heap);
        if (!line.alive[c.left] || !line.alive[c.right])
            continue;
        size_t before = line.prev[c.left], after = line.next[c.right];
        take_pair(&line, &c, cpu_to_event);
        if (before != NP_MATCH_NONE && after != NP_MATCH_NONE)
            consider_pair(&line, &heap, before, after, tolerance_ns);
    }
    free(heap.items);
    timeline_free(&line);
    return 0;
}

/* Both arrays sorted by group: matches each CPU group with the same event group. */
static int match_groups(const struct sorted_point *cpu, size_t ncpu,
                        const struct sorted_point *events, size_t nevents, int64_t tolerance_ns,
                        size_t *cpu_to_event) {
    size_t c = 0, e = 0;

    while (c < ncpu) {
        uint32_t group = cpu[c].group;
        size_t c_end = c, e_end;
        while (c_end < ncpu && cpu[c_end].group == group)
            c_end++;
        while (e < nevents && events[e].group < group)
            e++;
        for (e_end = e; e_end < nevents && events[e_end].group == group;)
            e_end++;
        int err =
            match_group(cpu + c, c_end - c, events + e, e_end - e, tolerance_ns, cpu_to_event);
        if (err)
            return err;
        c = c_end;
        e = e_end;
    }
    return 0;
}

int np_match_launches(const struct np_match_point *cpu, size_t ncpu,
                      const struct np_match_point *events, size_t nevents, int64_t tolerance_ns,
                      size_t *cpu_to_event) {
    struct np_map threads;
    struct sorted_point *sorted_cpu = NULL, *sorted_events = NULL;
    int err;

    for (size_t i = 0; i < ncpu; i++)
        cpu_to_event[i] = NP_MATCH_NONE;
    np_map_init(&threads);
    err = note_threads(&threads, cpu, ncpu, true);
    if (!err)
        err = note_threads(&threads, events, nevents, false);
    if (!err) {
        uint32_t ngroups = assign_groups(&threads);
        sorted_cpu = sort_by_group(&threads, ngroups, cpu, ncpu);
        sorted_events = sort_by_group(&threads, ngroups, events, nevents);
        err = sorted_cpu && sorted_events ? 0 : -ENOMEM;
    }
    if (!err)
        err = match_groups(sorted_cpu, ncpu, sorted_events, nevents, tolerance_ns, cpu_to_event);
    free(sorted_cpu);
    free(sorted_events);
    np_map_free(&threads, free);
    return err;
}
