/* ingest.h - the ring-buffer consumer: validates each record, finds its
 * process and probe, and routes it - launches through symbolization and
 * kernel naming to the writers, handle records to the kernel-name table,
 * mapping records back to the session (new libraries to probe).
 * Records are handled as they arrive, while the process's mappings exist. */
#ifndef NP_INGEST_H
#define NP_INGEST_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "correlate/nccl_comms.h"
#include "lib/hashmap.h"
#include "lib/util.h"
#include <sys/types.h>

struct np_attacher;
struct np_gpu_join;
struct np_output;
struct np_target;

struct np_ingest_stats {
    uint64_t launch_events; /* launch + NCCL API records received */
    uint64_t handle_events;
    uint64_t map_events;
    uint64_t malformed;            /* wrong size, type or version */
    uint64_t unknown_source;       /* probe id or pid we do not know (already detached) */
    uint64_t unsymbolized;         /* launches of a process gone before its mappings were read */
    uint64_t marker_events;        /* CUPTI correlation markers */
    uint64_t nccl_plan_events;     /* NCCL plan records received from a known probe */
    uint64_t nccl_plans;           /* ... decoded (the others: inconsistent sizes, no memory) */
    uint64_t nccl_plans_unclaimed; /* ... whose launch record never came (dropped) */
    uint64_t nccl_launches_without_plan; /* NCCL launches whose plan was not read */
    uint64_t nccl_internal_calls;        /* NCCL API calls made by libnccl itself: not written */
    uint64_t not_recorded;               /* launches of a target with no output set open */
    uint64_t *per_probe; /* launches by the probe the caller called, index = probe id */
    size_t per_probe_len;
};

/* np_ingest_record's result once `budget` records were handled: libbpf then
 * stops consuming, so a producer faster than us cannot starve the loop. */
#define NP_INGEST_YIELD (-EAGAIN)

/* How DWARF unwinding went; bytes_needed is a histogram of the stack bytes
 * complete stacks needed, bucket i counting up to 256 << i bytes. */
#define NP_UNWIND_BUCKETS 9
struct np_unwind_stats {
    uint64_t complete, truncated, unknown;
    uint64_t fp_fallback_frames;
    uint64_t bytes_needed[NP_UNWIND_BUCKETS];
    uint64_t max_bytes_needed;
};

/* A launch's stack as text, root first, frames joined by ';': folded (for
 * the .folded outputs) and detailed (stacks.jsonl: inlined frames always,
 * marked "[inlined]"); locations: one JSON object per detailed frame,
 * joined by ',' (module, build_id, offset, file, line where known), for
 * the writers that want more than names (pprof). */
struct np_stack_texts {
    struct np_str folded, detailed, locations;
};

/* --python: Python frames merged into the native stack at the eval loop,
 * added beside the raw interpreter frames, or not walked at all. */
enum np_python_mode { NP_PYTHON_MERGE = 0, NP_PYTHON_RAW, NP_PYTHON_OFF };

struct np_ingest {
    struct np_attacher *attacher;
    struct np_output *out;
    struct np_target *(*find_target)(void *ctx, pid_t pid);
    void (*on_new_mapping)(void *ctx, struct np_target *t, uint64_t ts_ns);
    /* Where a target's records go now (the daemon: its current output set;
     * NULL: nowhere, the record is counted in not_recorded). Without this
     * callback every record goes to `out`. */
    struct np_output *(*output_for)(void *ctx, struct np_target *t);
    /* A launch written to `out` waits in the GPU join for its records (the
     * join hands it back to the session's retire, with out as its owner). */
    void (*on_held)(void *ctx, struct np_output *out);
    void *ctx;
    long budget;        /* records left before yielding; <= 0: no limit */
    bool fp_fallback;   /* --unwind auto: follow frame pointers where CFI is missing */
    bool inline_folded; /* --inline: inlined frames in the folded outputs too */
    enum np_python_mode python_mode;
    struct np_gpu_join *gpu;     /* the launch <-> GPU record join; NULL: no GPU side */
    struct np_str held_json;     /* a launch's JSON while the join holds it */
    FILE *raw_dump;              /* --raw-dump: every record as received, "u32 size, bytes" */
    struct np_stack_texts stack; /* reused for each launch's stack */
    struct np_map nccl_pending;  /* tid -> struct np_nccl_plan * waiting for its launch record */
    struct np_nccl_comms nccl_comms;
    struct np_ingest_stats stats;
    struct np_unwind_stats unwind;
};

/* libbpf ring_buffer sample callback; ctx is a struct np_ingest. */
int np_ingest_record(void *ctx, void *data, size_t size);
void np_ingest_free(struct np_ingest *in);
/* Drops what waits for records that will not come (NCCL plans whose
 * launch record was lost), counting it; before the summary is written. */
void np_ingest_settle(struct np_ingest *in);

/* Builds the stack texts of a launch: frame pointers, or DWARF unwinding
 * of the copied stack. entry_name replaces the probed function's own name
 * (a launch entered through a thunk). */
/* An empty location (a synthetic frame: a marker, [NCCL]Op) in a
 * np_stack_texts.locations list. */
void np_ingest_append_location(struct np_str *locations);

struct np_launch_event;
void np_ingest_build_stack(struct np_ingest *in, struct np_target *t,
                           const struct np_launch_event *e, const char *entry_name,
                           struct np_stack_texts *out);

#endif
