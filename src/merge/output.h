/* output.h - the files `ncclprobe merge` writes (docs/merge.md, "Output
 * formats"): the joined stacks as text, `frame;...;[GPU_Kernel]NAME COUNT`
 * (or `;[GPU_Launch_Pending]`), one line per distinct stack sorted byte-wise,
 * weighted by launch count (-o) and by GPU nanoseconds (--gpu-ns-output);
 * then, with --format, their flame graphs and pprof profile (the writers'). */
#ifndef NP_MERGE_OUTPUT_H
#define NP_MERGE_OUTPUT_H

#include "merge/cpu_input.h"
#include "merge/gpu_input.h"
#include "merge/join.h"
#include "merge/merge.h"

/* Writes opts->out_path (and opts->gpu_ns_path) from the joined stacks:
 * each as FILE.tmp, renamed over FILE only once all are complete, so a
 * failed merge leaves no half-written file. Then opts->formats. 0, or
 * -errno (said on stderr). */
int np_merge_write_outputs(const struct np_merge_opts *opts, const struct np_merge_cpu *cpu,
                           const struct np_merge_gpu *gpu, const struct np_merge_result *result);

#endif
