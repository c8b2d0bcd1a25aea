/* summary.h - summary.json of a recording: what was attached (and what
 * failed, and why), what fired, what was captured and what was dropped. */
#ifndef NP_SUMMARY_H
#define NP_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "ncclprobe/events.h"

struct np_attacher;
struct np_gpu_counters;
struct np_gpu_server_stats;
struct np_nccl_comms;
struct np_ingest_stats;
struct np_unwind_stats;
struct np_output;
struct np_process;
struct cJSON;

struct np_summary {
    const char *stop_reason;
    uint64_t start_realtime_ns;
    double duration_s;
    /* targets[]: built by the session (what it knows of each process); the
     * summary takes it over. processes: their probed libraries. */
    struct cJSON *targets;
    const struct np_process *const *processes;
    size_t nprocesses;
    const struct np_attacher *attacher;
    const uint64_t *probe_hits;  /* per probe id, summed over CPUs */
    const uint64_t *probe_drops; /* per probe id */
    size_t nprobes;              /* length of the two arrays */
    const uint64_t *counters;    /* enum np_counter */
    const struct np_ingest_stats *ingest;
    const struct np_backlog *backlog;     /* the reader's; NULL: records were handled as read */
    uint64_t ring_bytes;                  /* the BPF ring buffer's size */
    uint64_t wakeup_bytes;                /* its fill that wakes the reader (0: every record) */
    const uint64_t *thread_stacks;        /* stacks each reader thread built */
    unsigned reader_threads;              /* how many (0: the reader alone) */
    const struct np_unwind_stats *unwind; /* NULL in frame-pointer mode */
    const char *unwind_mode;
    uint32_t stack_bytes;
    const struct np_output *out;
    const struct np_gpu_server_stats *gpu_server; /* NULL: not listening */
    const struct np_gpu_counters *gpu_join;
    const char *gpu_socket;
    const struct np_nccl_comms *nccl_comms;
    /* --nccl-flows: what was probed and written, built by the session (taken over);
     * NULL: not asked for */
    struct cJSON *nccl_flows;
};

int np_summary_write(const char *path, const struct np_summary *s);

#endif
