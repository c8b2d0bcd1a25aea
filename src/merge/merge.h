/* merge.h - the offline merge (`ncclprobe merge`, docs/merge.md) as one call:
 * joins the CPU launch stacks of a recording (stacks.ext.folded) with the
 * kernels of a CUPTI Chrome trace of the same run, and writes folded stacks
 * whose leaf is the kernel each launch ran. The whole feature lives in this
 * folder: the input readers (cpu_input.c, gpu_input.c, trace_json.c), the
 * matcher (match.c), the join (join.c), the files (output.c) and the counts
 * (summary.c); the command line is cli/merge.c's. */
#ifndef NP_MERGE_MERGE_H
#define NP_MERGE_MERGE_H

#include <stdbool.h>
#include <stdint.h>

/* The largest CPU/trace clock gap of a pair unless told otherwise: 10 ms. */
#define NP_MERGE_DEFAULT_TOLERANCE_NS 10000000LL

struct np_merge_opts {
    const char *cpu_path;    /* extended folded stacks */
    const char *gpu_path;    /* Chrome trace JSON */
    const char *out_path;    /* folded stacks weighted by launch count */
    const char *gpu_ns_path; /* NULL, or the same weighted by GPU nanoseconds */
    int64_t tolerance_ns;    /* > 0 */
    bool summary;            /* per-kernel table and counts on stdout */
    unsigned formats;        /* NP_FORMAT_PPROF, NP_FORMAT_SVG (writers/formats.h) */
};

/* Reads both inputs (at the same time, the trace on a thread of its own),
 * joins them and writes the outputs atomically, then the summary and the
 * closing counts. 0, or -errno (said on stderr). */
int np_merge_run(const struct np_merge_opts *opts);

#endif
