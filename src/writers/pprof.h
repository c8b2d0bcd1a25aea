/* pprof.h - profile.pb.gz: a recording directory as a pprof profile
 * (github.com/google/pprof, proto/profile.proto), for `go tool pprof`,
 * Pyroscope, Grafana and the like.
 *
 *   sample types   launches/count, and gpu_time/nanoseconds when the recording
 *                  has GPU records; the default is launches.
 *   samples        one per distinct (stack with its GPU leaf, labels): the leaf
 *                  ([GPU_Kernel]K, [GPU_Memcpy]HtoD, [GPU_Launch_Pending], ...)
 *                  is a location of its own, under the launch function and the
 *                  [NCCL]Op frame. A launch whose GPU work is one record counts
 *                  under that record's leaf; one with several (a graph launch)
 *                  counts once under the CPU-side kernel name and puts each
 *                  record's GPU time under its own leaf. A graph replay's
 *                  record tied to the launch that captured it (its
 *                  capture_stack_id) counts as one launch of that stack,
 *                  with its GPU time, as graph_replays.jsonl's replays do.
 *   labels         pid, tid (numbers), comm, kernel, nccl_op, comm_hash,
 *                  capture_by (records tied to their capture).
 *   functions      the frame's function (a Python frame's qualname, with its
 *                  file and line; "f [inlined]" as an inline line of the
 *                  location of the frame it was inlined into), file and line
 *                  from stacks.jsonl's "locations" when there; one mapping per
 *                  module (path, build id), addresses relative to the module's
 *                  load address (stacks.jsonl's "offset").
 *                  system_name stays "": the names are demangled already, and
 *                  pprof re-"demangles" a function whose system_name equals its
 *                  name by cutting out every <...>, which would leave "" of
 *                  Python's "<module>" and of "<graph cudaGraphLaunch>".
 *
 * From launches.jsonl + stacks.jsonl (+ gpu_unmatched.jsonl) when the
 * directory has them; otherwise (a daemon aggregate set) from merged.folded
 * and merged.gpu_ns.folded, labelled with window.json's pid and comm; there
 * `launches` counts what merged.folded counts (a graph launch once per GPU
 * record). */
#ifndef NP_WRITERS_PPROF_H
#define NP_WRITERS_PPROF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writes DIR/profile.pb.gz (through a temporary file, renamed): 0, or -errno
 * (said). Malformed input lines are skipped (the first few said,
 * src/recording/) and counted in a warning. */
int np_write_pprof(const char *dir);
/* The same from folded files alone (`ncclprobe merge`): counts weighted
 * by launches, gpu_ns (may be NULL) by GPU nanoseconds; written to out. */
int np_write_pprof_folded(const char *counts, const char *gpu_ns, const char *out);

/* One sample of a live profile (the daemon's /pprof endpoints, docs/daemon.md):
 * a folded stack "frame;...;leaf" as merged.folded writes it (so frames and
 * functions are those of the sets' profile.pb.gz), its process (labels pid,
 * comm, container; "" or NULL: no label) and its values. */
struct np_pprof_sample {
    const char *stack;
    int64_t pid;
    const char *comm, *container;
    int64_t count, gpu_ns;
};
/* The samples as a gzipped profile in memory (*out malloc'ed, *out_len bytes),
 * time_ns (Unix) and duration_ns its span; with gpu, gpu_time/nanoseconds is
 * a sample type and the default one. 0 or -errno (-ENOMEM). */
int np_pprof_encode_samples(const struct np_pprof_sample *samples, size_t n, int64_t time_ns,
                            int64_t duration_ns, bool gpu, uint8_t **out, size_t *out_len);

#endif
