/* join.c - the joining step of `ncclprobe merge` (join.h): an
 * index of launches and kernels by correlation id (sorted arrays and binary
 * search: ids mostly grow through a CUPTI trace, so sorting is rarely
 * needed), the time matcher, then one count per (stack, kernel) pair. */
#include "merge/join.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "merge/match.h"

/* ---- correlation ids -------------------------------------------------------- */

static int compare_by_correlation(int64_t a_id, size_t a_seq, int64_t b_id, size_t b_seq) {
    if (a_id != b_id)
        return a_id < b_id ? -1 : 1;
    return a_seq < b_seq ? -1 : a_seq > b_seq;
}

static int compare_launches(const void *a, const void *b) {
    const struct np_runtime_event *x = a, *y = b;
    return compare_by_correlation(x->correlation, x->seq, y->correlation, y->seq);
}

static int compare_kernels(const void *a, const void *b) {
    const struct np_kernel_event *x = a, *y = b;
    return compare_by_correlation(x->correlation, x->seq, y->correlation, y->seq);
}

/* Sorts unless already in order (ids mostly grow through a CUPTI trace). */
static void sort_unless_sorted(void *items, size_t n, size_t size,
                               int (*compare)(const void *, const void *)) {
    const char *p = items;
    for (size_t i = 1; i < n; i++) {
        if (compare(p + (i - 1) * size, p + i * size) > 0) {
            qsort(items, n, size, compare);
            return;
        }
    }
}

/* One runtime event per correlation id: the last one in the file. */
static void keep_last_launch_per_id(struct np_merge_gpu *gpu) {
    size_t kept = 0;

    sort_unless_sorted(gpu->launches, gpu->nlaunches, sizeof(*gpu->launches), compare_launches);
    for (size_t i = 0; i < gpu->nlaunches; i++) {
        bool last_of_id = i + 1 == gpu->nlaunches ||
                          gpu->launches[i + 1].correlation != gpu->launches[i].correlation;
        if (last_of_id)
            gpu->launches[kept++] = gpu->launches[i];
    }
    gpu->duplicate_launches = gpu->nlaunches - kept;
    gpu->nlaunches = kept;
}

/* Index of the first kernel (in file order) with this correlation id, and
 * how many kernels have it. */
static size_t find_kernels(const struct np_merge_gpu *gpu, int64_t correlation, size_t *count) {
    size_t lo = 0, hi = gpu->nkernels;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (gpu->kernels[mid].correlation < correlation)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t end = lo;
    while (end < gpu->nkernels && gpu->kernels[end].correlation == correlation)
        end++;
    *count = end - lo;
    return lo;
}

/* ---- merging ------------------------------------------------------------------ */

static int count_stack(struct np_merge_result *result, uint32_t stack_id, uint32_t kernel_slot,
                       uint64_t gpu_ns) {
    uint64_t key = (uint64_t)stack_id << 32 | kernel_slot;
    struct np_merged_stack *m = np_map_get_u64(&result->merged, key);
    if (!m) {
        m = calloc(1, sizeof(*m));
        if (!m || np_map_put_u64(&result->merged, key, m) < 0) {
            free(m);
            return -ENOMEM;
        }
        m->stack_id = stack_id;
        m->kernel_slot = kernel_slot;
    }
    m->count++;
    m->gpu_ns += gpu_ns;
    return 0;
}

/* The CPU stack once per kernel its launch ran: the first kernel of the
 * correlation id, every kernel of it for a graph launch. */
static int merge_launch(struct np_merge_result *result, const struct np_merge_gpu *gpu,
                        uint32_t stack_id, const struct np_runtime_event *launch) {
    size_t count, first = find_kernels(gpu, launch->correlation, &count);

    result->launches_used++;
    if (count == 0) {
        result->pending_no_kernel++;
        return count_stack(result, stack_id, 0, 0);
    }
    if (!launch->graph)
        count = 1;
    result->matched++;
    for (size_t k = first; k < first + count; k++) {
        const struct np_kernel_event *kernel = &gpu->kernels[k];
        int err = count_stack(result, stack_id, kernel->name_id + 1, (uint64_t)kernel->gpu_ns);
        if (err)
            return err;
        result->per_kernel[kernel->name_id].count++;
        result->per_kernel[kernel->name_id].gpu_ns += (uint64_t)kernel->gpu_ns;
        result->kernels_used++;
    }
    return 0;
}

static int merge_all(const struct np_merge_cpu *cpu, const struct np_merge_gpu *gpu,
                     const size_t *cpu_to_event, struct np_merge_result *result) {
    for (size_t i = 0; i < cpu->count; i++) {
        int err;
        if (cpu_to_event[i] == NP_MATCH_NONE) {
            result->pending_no_event++;
            err = count_stack(result, cpu->stack_ids[i], 0, 0);
        } else {
            err = merge_launch(result, gpu, cpu->stack_ids[i], &gpu->launches[cpu_to_event[i]]);
        }
        if (err)
            return err;
    }
    return 0;
}

static struct np_match_point *launch_points(const struct np_merge_gpu *gpu) {
    struct np_match_point *points = malloc((gpu->nlaunches ? gpu->nlaunches : 1) * sizeof(*points));
    for (size_t i = 0; points && i < gpu->nlaunches; i++)
        points[i] = (struct np_match_point){gpu->launches[i].start_ns, gpu->launches[i].thread};
    return points;
}

int np_merge_join(const struct np_merge_cpu *cpu, struct np_merge_gpu *gpu, int64_t tolerance_ns,
                  struct np_merge_result *result) {
    keep_last_launch_per_id(gpu);
    sort_unless_sorted(gpu->kernels, gpu->nkernels, sizeof(*gpu->kernels), compare_kernels);
    struct np_match_point *events = launch_points(gpu);
    size_t *cpu_to_event = malloc((cpu->count ? cpu->count : 1) * sizeof(*cpu_to_event));
    result->per_kernel = calloc(gpu->kernel_names.count + 1, sizeof(*result->per_kernel));
    int err = events && cpu_to_event && result->per_kernel ? 0 : -ENOMEM;
    if (!err)
        err = np_match_launches(cpu->points, cpu->count, events, gpu->nlaunches, tolerance_ns,
                                cpu_to_event);
    if (!err)
        err = merge_all(cpu, gpu, cpu_to_event, result);
    free(events);
    free(cpu_to_event);
    return err;
}

void np_merge_result_init(struct np_merge_result *result) {
    memset(result, 0, sizeof(*result));
    np_map_init(&result->merged);
}

void np_merge_result_free(struct np_merge_result *result) {
    np_map_free(&result->merged, free);
    free(result->per_kernel);
}
