/* target.h - one traced process as the session holds it: the attacher's
 * part of it (attach/process.h: pid, probed libraries, CPython runtime),
 * ingest's part (ingest.h: symbolizer, unwinder, code-object reader, stack
 * cache), and what the session itself keeps - identity, pidfd, kernel
 * names, counts, and the state of its CUPTI library. Each stage sees only
 * its own part; the session gets the target back from a part with
 * np_target_of_ingest (container_of: typed, not a cast). */
#ifndef NP_SESSION_TARGET_H
#define NP_SESSION_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "attach/process.h"
#include "correlate/graphs.h"
#include "ingest/ingest.h"
#include "lib/util.h"
#include "ncclprobe/events.h"
#include "ncclprobe/gpu_wire.h"
#include "session/agent.h"

struct np_kernel_names;
struct cJSON;

struct np_target {
    struct np_process proc;   /* attach's: pid, libraries, Python runtime */
    struct np_ingest_proc in; /* ingest's: symbols, unwinding, code objects */
    char comm[NP_COMM_LEN];
    char *exe;
    int pidfd; /* readable once the process exits */
    bool exited;
    struct np_kernel_names *kernels;
    uint64_t launches, nested, nccl_ops;
    bool python_walked;             /* the BPF walker has this process's layout */
    bool python_refused;            /* its frames cannot be walked: said once */
    bool gpu_off;                   /* its library stayed out or left: launches are not held */
    bool gpu_hello;                 /* its library said hello on the GPU socket */
    uint64_t gpu_first_held_ns;     /* when a launch first waited for its GPU records */
    int64_t gpu_clock_offset_ns;    /* its CLOCK_MONOTONIC minus ours, when over a second */
    uint64_t gpu_started_ns;        /* when its live-brought library last said hello (ours) */
    uint32_t gpu_status;            /* enum np_hello_status */
    char gpu_message[256];          /* what the library said (why it stayed out) */
    struct np_wire_stats gpu_stats; /* the library's last counters */
    bool gpu_cupti_known;           /* gpu_cupti came */
    struct np_wire_cupti gpu_cupti; /* the CUPTI its library uses (NP_WIRE_CUPTI) */
    struct np_agent_state agent;    /* how the library came, or why it did not */
    struct np_graphs graphs;        /* its stream captures, graphs and execs */
    unsigned graphs_bound_said;     /* a capture over the memory bound was warned about */
    unsigned graphs_unknown_said;   /* a replay of an unseen capture was said */
};

/* Reads comm and exe of a live pid and opens its pidfd; -ESRCH if it does
 * not exist. */
int np_target_new(pid_t pid, struct np_target **out);
void np_target_free(struct np_target *t);
/* Re-reads comm and exe (they change when the process execs). */
void np_target_refresh_identity(struct np_target *t);

/* summary.json's targets[] entry of the process (session/targets.c). */
struct cJSON *np_target_json(const struct np_target *t);

static inline struct np_target *np_target_of_ingest(struct np_ingest_proc *p) {
    return np_container_of(p, struct np_target, in);
}

#endif
