/* summary.h - the counts `ncclprobe merge` tells (docs/merge.md): --summary's
 * kernel table (by total GPU time) and its match, skip and event counts on
 * stdout, and the one closing line on stderr. */
#ifndef NP_MERGE_SUMMARY_H
#define NP_MERGE_SUMMARY_H

#include "merge/cpu_input.h"
#include "merge/gpu_input.h"
#include "merge/join.h"

/* --summary on stdout: 0, -ENOMEM, or -EIO when stdout could not be written. */
int np_merge_print_summary(const struct np_merge_cpu *cpu, const struct np_merge_gpu *gpu,
                           const struct np_merge_result *result);

/* "merged N CPU launches: ..." on stderr (an info line: --quiet hides it). */
void np_merge_say_counts(const struct np_merge_cpu *cpu, const struct np_merge_gpu *gpu,
                         const struct np_merge_result *result);

#endif
