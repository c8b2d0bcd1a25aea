/* gpu_input.h - the GPU input of `ncclprobe merge`: reads a Chrome trace (the
 * CUPTI injection library's, Kineto-style; parsed by trace_json.c) into its
 * runtime launch events (cudaLaunchKernel, cudaGraphLaunch, ...) and its
 * kernels, each with its correlation id and exact nanosecond timing; the
 * other events are only counted. Kernel names are interned as they will be
 * written: "Kernel: " stripped, made safe for a folded-stack frame. */
#ifndef NP_MERGE_GPU_INPUT_H
#define NP_MERGE_GPU_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/hashmap.h"
#include "lib/strtab.h"
#include "merge/malformed.h"

/* A CUDA_Runtime launch call. */
struct np_runtime_event {
    int64_t start_ns;
    uint64_t thread; /* np_match_thread_key(), or NP_MATCH_NO_THREAD */
    int64_t correlation;
    size_t seq; /* order in the file */
    bool graph; /* a graph launch: runs every kernel of its correlation id */
};

struct np_kernel_event {
    int64_t correlation;
    size_t seq;       /* order in the file */
    uint32_t name_id; /* into kernel_names */
    int64_t gpu_ns;
};

struct np_merge_gpu {
    struct np_strtab kernel_names;  /* as written: "Kernel: " stripped, sanitized */
    struct np_map raw_kernel_names; /* name as in the trace -> struct np_interned */
    struct np_runtime_event *launches;
    size_t nlaunches, launches_cap;
    struct np_kernel_event *kernels;
    size_t nkernels, kernels_cap;
    size_t duplicate_launches; /* replaced by a later one with the same correlation id */
    size_t invalid_values;     /* launch or kernel events with ts, dur or id <= 0 */
    size_t memcpy_events, memset_events, metadata_events, other_events;
    struct np_malformed_log malformed;
};

void np_merge_gpu_init(struct np_merge_gpu *gpu, const char *path);
void np_merge_gpu_free(struct np_merge_gpu *gpu);

/* Reads the trace at path (the one given to init), appending launches and
 * kernels in file order: 0, or -errno (said on stderr). */
int np_merge_gpu_read(const char *path, struct np_merge_gpu *gpu);

#endif
