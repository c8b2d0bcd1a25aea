/* join.h - the joining step of `ncclprobe merge`: pairs each CPU launch with
 * a runtime launch event (match.c's matcher), follows the event's correlation
 * id to its kernels and counts every (stack, kernel) pair with its GPU time.
 * Launches without an event or kernel count as pending. Input: the two
 * readers' output (cpu_input.h, gpu_input.h); output: counted stacks by id,
 * for output.c to turn into text and summary.c into counts. */
#ifndef NP_MERGE_JOIN_H
#define NP_MERGE_JOIN_H

#include <stddef.h>
#include <stdint.h>

#include "lib/hashmap.h"
#include "merge/cpu_input.h"
#include "merge/gpu_input.h"

/* One (stack, leaf) pair of the output, counted. */
struct np_merged_stack {
    uint32_t stack_id;    /* into the CPU side's stacks */
    uint32_t kernel_slot; /* kernel name id + 1; 0: pending */
    uint64_t count;
    uint64_t gpu_ns;
};

struct np_kernel_stats {
    uint64_t count;
    uint64_t gpu_ns;
};

struct np_merge_result {
    struct np_map merged;               /* stack_id << 32 | kernel_slot -> struct np_merged_stack */
    struct np_kernel_stats *per_kernel; /* by kernel name id */
    size_t matched, pending_no_event, pending_no_kernel, launches_used, kernels_used;
};

void np_merge_result_init(struct np_merge_result *result);
void np_merge_result_free(struct np_merge_result *result);

/* Joins the two sides into result. Reorders the GPU side's launches and
 * kernels by correlation id and keeps only the last launch event of each id
 * (counted in gpu->duplicate_launches). 0 or -ENOMEM. */
int np_merge_join(const struct np_merge_cpu *cpu, struct np_merge_gpu *gpu, int64_t tolerance_ns,
                  struct np_merge_result *result);

#endif
