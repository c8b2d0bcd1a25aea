/* gpu.h - the exact launch <-> GPU join of a recording, streaming.
 *
 *   launch event (BPF, thread T)  ->  opens T's launch
 *   marker (BPF, thread T, id C)  ->  C belongs to T's open launch
 *   GPU record (socket, id C)     ->  appended to the launch that owns C
 *
 * A launch can own several ids (a runtime call and the driver call inside
 * it) and an id many records (every kernel of a CUDA graph launch). A launch
 * retires - handed to the writer - once its records stop coming (linger) or,
 * with none, after the timeout ([GPU_Launch_Pending]). Memory is bounded:
 * at most max_pending launches wait, the oldest retires early beyond that;
 * records whose id no launch claims wait `timeout` and are then written
 * without a launch stack. Times are CLOCK_MONOTONIC ns.
 */
#ifndef NP_CORRELATE_GPU_H
#define NP_CORRELATE_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ncclprobe/gpu_wire.h"

#define NP_GPU_MAX_IDS 4

enum np_gpu_status {
    NP_GPU_NONE = 0, /* the process gives no GPU records (no CUPTI library, or it stayed out) */
    NP_GPU_MATCHED,  /* records arrived */
    NP_GPU_PENDING,  /* none arrived within the timeout */
};

/* What the writer keeps of a launch while it waits (copied by the join). */
struct np_gpu_held {
    uint64_t stack_id; /* the writer's id of the launch's stack */
    const char *json;  /* its launches.jsonl object, without its closing brace; where the
                          kernel's name goes, NP_GPU_KERNEL_SLOT */
    const char *ext;   /* its stacks.ext.folded line up to the stack ("ts comm pid tid cpu ") */
    const char *cpu_kernel; /* the kernel name the CPU side knows at the launch */
    uint64_t handle;        /* the function the launch passed: names it late (NAMES frames) */
    uint64_t tag;           /* the caller's, handed back (an NCCL launch's communicator) */
    void *owner; /* the caller's: the writer the launch belongs to (NULL: the only one) */
    /* the caller's, handed back; once the launch is held the join owns it
     * and frees it with free_extra (a graph launch's struct np_graph_replay) */
    void *extra;
    void (*free_extra)(void *extra);
    uint64_t cookie; /* the caller's, handed back (the daemon's live profile key) */
    /* made before its process's library started (np_gpu_join_library_started's
     * time): no record will come, it retires as NONE without one */
    bool before_start;
};
/* Stands for the kernel's name in a held launch's JSON: a control byte, which JSON text escapes,
 * so it is never part of what was rendered around it. */
#define NP_GPU_KERNEL_SLOT '\x01'

struct np_gpu_launch {
    uint32_t pid, tid;
    uint64_t stack_id;
    char *json, *ext, *cpu_kernel; /* as in struct np_gpu_held */
    uint64_t handle;
    uint64_t tag;
    void *owner;
    void *extra; /* as in struct np_gpu_held */
    void (*free_extra)(void *extra);
    uint64_t cookie; /* as in struct np_gpu_held */
    uint32_t ids[NP_GPU_MAX_IDS];
    uint32_t nids;
    uint8_t domains_seen; /* CUPTI callback domains that named an id (bit = domain) */
    bool before_start;    /* made before its process's library started: no records will come */
    bool accepts_runtime; /* a runtime-API launch: runtime callbacks belong to it too */
    struct np_gpu_record **records;
    uint32_t nrecords, records_cap;
    uint64_t added_ns, last_record_ns;
    struct np_gpu_launch *prev, *next; /* age order */
};

struct np_gpu_counters {
    uint64_t launches_held;     /* launches that waited for GPU records */
    uint64_t launches_matched;  /* ... and got at least one */
    uint64_t launches_pending;  /* ... and got none ([GPU_Launch_Pending]) */
    uint64_t launches_evicted;  /* retired early: more than max_pending waiting */
    uint64_t markers;           /* correlation markers received */
    uint64_t markers_unpaired;  /* with no open launch on their thread */
    uint64_t records;           /* GPU records received */
    uint64_t records_matched;   /* joined to a launch */
    uint64_t records_unmatched; /* no launch claimed their id in time */
};

struct np_gpu_ops {
    void *ctx;
    void (*retire)(void *ctx, const struct np_gpu_launch *l, enum np_gpu_status status);
    /* A record no launch claimed (its launch was not probed, or came before). */
    void (*unmatched)(void *ctx, uint32_t pid, const struct np_gpu_record *r);
};

struct np_gpu_join;

struct np_gpu_join *np_gpu_join_new(const struct np_gpu_ops *ops, uint64_t linger_ns,
                                    uint64_t timeout_ns, uint64_t max_pending);
void np_gpu_join_free(struct np_gpu_join *j);

/* A launch of a process whose library will send records: held until they
 * come. Takes copies of held's texts, and held->extra; the rest is handed
 * back at retirement. -ENOMEM: not held (the caller writes it at once, and
 * keeps its extra). */
int np_gpu_join_launch(struct np_gpu_join *j, uint32_t pid, uint32_t tid,
                       const struct np_gpu_held *held, bool runtime_api, uint64_t now);

/* A CUPTI callback (domain 1 driver, 2 runtime) on thread tid named id. It
 * belongs to the thread's open launch when that launch can contain it: one
 * id per domain (a runtime call and the driver call it makes), runtime ids
 * only for runtime launches. Anything else was a launch we do not probe. */
void np_gpu_join_marker(struct np_gpu_join *j, uint32_t pid, uint32_t tid, uint32_t id,
                        uint32_t domain, uint64_t now);
void np_gpu_join_record(struct np_gpu_join *j, uint32_t pid, const struct np_gpu_record *r,
                        uint64_t now);
/* pid's library started sending at started_ns (CLOCK_MONOTONIC; brought
 * into a running process, or woken): the launches held for pid that were
 * made before then ran while CUPTI was off, or on with nobody to send to.
 * They wait on (their records, or the library's names of their kernels, may
 * still come) and retire as NONE, not PENDING, when no record comes. Decided
 * by the launch's time, not by when it was read: a launch made before the
 * library started can be read from the ring after its HELLO (the caller
 * sets np_gpu_held.before_start for those). */
void np_gpu_join_library_started(struct np_gpu_join *j, uint32_t pid, uint64_t started_ns);
/* Retires what is due at `now`. */
void np_gpu_join_tick(struct np_gpu_join *j, uint64_t now);
/* Nothing more will come from pid (its library disconnected, or stayed out):
 * its launches retire now, with what they have (status_if_none when none). */
void np_gpu_join_finish_pid(struct np_gpu_join *j, uint32_t pid, enum np_gpu_status status_if_none);
/* Retires everything (end of recording). */
void np_gpu_join_finish_all(struct np_gpu_join *j);
size_t np_gpu_join_waiting(const struct np_gpu_join *j);
const struct np_gpu_counters *np_gpu_join_counters(const struct np_gpu_join *j);

#endif
