/* summary.c - the counts of a merge (summary.h): the kernels that ran, by
 * total GPU time, then what was matched, left pending, skipped and only
 * counted, as the join and the two readers counted them. */
#include "merge/summary.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

struct kernel_row {
    const char *name;
    struct np_kernel_stats stats;
};

/* Most GPU time first; equal times by name. */
static int compare_kernel_rows(const void *a, const void *b) {
    const struct kernel_row *x = a, *y = b;
    if (x->stats.gpu_ns != y->stats.gpu_ns)
        return x->stats.gpu_ns > y->stats.gpu_ns ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int print_kernel_table(const struct np_merge_gpu *gpu,
                              const struct np_merge_result *result) {
    size_t n = 0;
    struct kernel_row *rows = calloc(gpu->kernel_names.count + 1, sizeof(*rows));
    if (!rows)
        return -ENOMEM;
    for (uint32_t id = 0; id < gpu->kernel_names.count; id++) {
        if (result->per_kernel[id].count > 0)
            rows[n++] =
                (struct kernel_row){np_strtab_text(&gpu->kernel_names, id), result->per_kernel[id]};
    }
    qsort(rows, n, sizeof(*rows), compare_kernel_rows);
    printf("%10s %14s %12s  %s\n", "count", "total_gpu_ms", "mean_us", "kernel");
    for (size_t i = 0; i < n; i++)
        printf("%10llu %14.3f %12.3f  %s\n", (unsigned long long)rows[i].stats.count,
               (double)rows[i].stats.gpu_ns / 1e6,
               (double)rows[i].stats.gpu_ns / 1e3 / (double)rows[i].stats.count, rows[i].name);
    free(rows);
    return 0;
}

static void print_counts(const struct np_merge_cpu *cpu, const struct np_merge_gpu *gpu,
                         const struct np_merge_result *result) {
    size_t pending = result->pending_no_event + result->pending_no_kernel;
    printf("\nCPU launches: %zu (matched %zu, pending %zu: %zu without a runtime event, "
           "%zu without a kernel)\n",
           cpu->count, result->matched, pending, result->pending_no_event,
           result->pending_no_kernel);
    printf("runtime launch events: %zu (used %zu, unused %zu; %zu replaced by a later event "
           "with the same correlationId)\n",
           gpu->nlaunches, result->launches_used, gpu->nlaunches - result->launches_used,
           gpu->duplicate_launches);
    printf("kernels: %zu (used %zu, unused %zu)\n", gpu->nkernels, result->kernels_used,
           gpu->nkernels - result->kernels_used);
    printf("skipped: %zu malformed CPU lines, %zu CPU lines with no frames left, %zu malformed "
           "trace events, %zu launch/kernel events with ts, dur or correlationId <= 0\n",
           cpu->malformed.count, cpu->no_frames, gpu->malformed.count, gpu->invalid_values);
    printf("other trace events: %zu GPU_Memcpy, %zu GPU_Memset, %zu metadata, %zu other\n",
           gpu->memcpy_events, gpu->memset_events, gpu->metadata_events, gpu->other_events);
}

int np_merge_print_summary(const struct np_merge_cpu *cpu, const struct np_merge_gpu *gpu,
                           const struct np_merge_result *result) {
    int err = print_kernel_table(gpu, result);
    if (err)
        return err;
    print_counts(cpu, gpu, result);
    return fflush(stdout) == 0 ? 0 : -EIO;
}

void np_merge_say_counts(const struct np_merge_cpu *cpu, const struct np_merge_gpu *gpu,
                         const struct np_merge_result *result) {
    np_info("merged %zu CPU launches: %zu matched, %zu pending; %zu malformed CPU lines and %zu "
            "malformed trace events skipped",
            cpu->count, result->matched, result->pending_no_event + result->pending_no_kernel,
            cpu->malformed.count, gpu->malformed.count);
}
