/* session.h - a tracing session: the BPF object and its ring buffer, the
 * probe registry, the traced processes, the ingest pipeline, the GPU side
 * (the CUPTI library's socket and the launch <-> GPU record join), and
 * where records go. `ncclprobe record` runs one session over a fixed set of
 * processes and one output directory; `ncclprobe daemon` runs one for the
 * whole machine, adding and dropping processes and routing each one's
 * records to its current output set (struct np_sink_ops).
 *
 * The session is the only place that knows every stage: ingest hands it
 * decoded records (route.c), it names and correlates them (correlate/) and
 * hands them to the writers. agent.c brings the CUPTI library into running
 * processes. Files: session.c (signals, BPF, counters,
 * draining), targets.c and target.c (the traced processes), route.c
 * (records to the writers), gpu.c (the GPU side), summary.c (summary.json),
 * settings.c (the one table of settings of record and the daemon),
 * preflight.c (checks before anything is loaded). */
#ifndef NP_SESSION_H
#define NP_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "attach/attach.h"
#include "correlate/nccl_comms.h"
#include "ingest/ingest.h"
#include "lib/util.h"
#include "ncclprobe/events.h"
#include "session/settings.h"
#include "writers/flows.h"
#include "writers/output.h"

struct bpf_map;
struct np_target;
struct np_gpu_server;
struct np_gpu_join;
struct np_output;
struct np_session;
struct np_agents;
struct np_drain;
struct nccl_flows_bpf;
struct np_flow_topo_kept;

/* Where a session's records go when it has more than one output (the
 * daemon: one output set per process and window). Without it every record
 * goes to s->out. */
struct np_sink_ops {
    /* The output a target's records go to now; NULL: not recorded now. */
    struct np_output *(*output_for)(struct np_session *s, struct np_target *t);
    /* A launch written to out waits in the GPU join for its records ... */
    void (*held)(struct np_session *s, struct np_output *out);
    /* ... and has been written (its records came, or stopped coming). */
    void (*retired)(struct np_session *s, struct np_output *out);
    /* Optional, the daemon's live metrics and profiles: every outermost launch
     * counted in its target's launches (recorded or not), with its stack and
     * the kernel name known at the launch. held: it waits in the GPU join,
     * and gpu_retired comes for it, with the cookie this returns ... */
    uint64_t (*launched)(struct np_session *s, struct np_target *t, const struct np_launch *l,
                         const struct np_stack_texts *stack, const char *kernel, bool held);
    /* ... once it is written: under the kernel name settled on then, with the
     * GPU time of its records (0: none came). */
    void (*gpu_retired)(struct np_session *s, uint32_t pid, uint64_t cookie, const char *kernel,
                        uint64_t gpu_ns);
    /* Optional, --nccl-flows: where a process's flow records go now (NULL:
     * not recorded now). Without it they go to s->flows_out. */
    struct np_flows_out *(*flows_for)(struct np_session *s, uint32_t pid);
};

struct np_session {
    struct np_settings opt;
    struct ncclprobe_bpf *skel;
    struct ring_buffer *rb;
    struct np_drain *drain; /* empties rb into the reader's backlog; NULL: none (rb read here) */
    /* The ring's consumer and producer positions, mapped read-only on the first
     * np_session_ring_fill (NULL until then). */
    const uint64_t *ring_consumer, *ring_producer;
    uint64_t wakeup_bytes; /* the ring's fill that wakes the reader (0: every record) */
    struct np_attacher attacher;
    struct np_target **targets;
    size_t ntargets;
    struct np_output *out;          /* record: the one output; the daemon: NULL (sink) */
    const struct np_sink_ops *sink; /* NULL: everything to out */
    struct np_ingest ingest;
    struct np_nccl_comms nccl_comms; /* per-communicator totals */
    struct np_output_held held;      /* a launch's texts as the join takes them */
    int epfd, sigfd;
    uint64_t start_ns, start_realtime_ns;
    const char *stop_reason;
    bool backlog; /* the last turn left records in the ring or the reader's backlog */
    struct np_gpu_server *gpu_server; /* the CUPTI library's socket; NULL: none */
    struct np_gpu_join *gpu_join;
    pid_t *gpu_closed; /* processes whose library disconnected, not yet finished */
    size_t ngpu_closed;
    struct np_agents *agents;    /* the injector's worker (agent.c); NULL until asked for */
    uint64_t cudart_majors_said; /* bit N: an untested libcudart.so.N was warned about */
    /* --nccl-flows (flows.c): its BPF object, the libraries it probes, its files */
    struct nccl_flows_bpf *flows_skel;
    /* The flow probes' ring, read on the session's thread at every turn (not
     * through rb: the drain thread reads rb, and the flow writer is this
     * thread's). NULL without --nccl-flows. */
    struct ring_buffer *flows_rb;
    struct np_flow_attacher *flow_attacher;
    struct np_flows_out *flows_out;
    struct np_flows_totals flows_totals;
    /* Each communicator's topology as BPF sent it (once, at its first op),
     * kept while its process is traced: every later file set of the process
     * gets it too (the daemon's windows). */
    struct np_flow_topo_kept *flow_topos;
    size_t nflow_topos;
};

/* epoll tags of the session's fds; a target's pidfd is NP_TAG_TARGET + pid. */
enum {
    NP_TAG_RING = 0,
    NP_TAG_SIGNAL = 1,
    NP_TAG_GPU = 2,
    NP_TAG_AGENT = 3, /* injections finished (agent.c) */
    NP_TAG_EXTRA = 4, /* the daemon's own, from here */
    NP_TAG_TARGET = 64,
};

void np_session_set_verbose(bool verbose);
/* SIGINT, SIGTERM and `extra` (record: SIGCHLD, the daemon: SIGHUP) arrive
 * on s->sigfd, watched by the loop; SIGPIPE is ignored (a socket peer that
 * left is an error return, not our death). */
int np_session_setup_signals(struct np_session *s, int extra);
int np_session_watch(int epfd, int fd, uint64_t tag);

/* ---- targets (targets.c) ---- */
struct np_target *np_session_find_target(struct np_session *s, pid_t pid);
int np_session_add_target(struct np_session *s, pid_t pid, struct np_target **out);
/* The process exited: its pidfd is no longer watched, BPF forgets it. */
void np_session_target_exited(struct np_session *s, struct np_target *t);
/* Frees an exited target and removes it from the list (the daemon). */
void np_session_remove_target(struct np_session *s, struct np_target *t);
bool np_session_all_targets_gone(const struct np_session *s);
int np_session_ensure_symbolizer(struct np_target *t);
/* Finds the CPython runtime and hands its layout to the frame walker; a
 * no-op once found. Called before a process found running is probed: a
 * probe that fired first would record launches without their Python frames
 * (and again when it maps a library). */
void np_session_find_python(struct np_session *s, struct np_target *t);
/* After probes were placed: says (once per session and version) a CUDA
 * runtime newer or older than the tested ones, and probes the code-object
 * deallocator of a CPython found by then (its library's record is there). */
void np_session_probes_placed(struct np_session *s, struct np_target *t);
/* A target mapped new code: probe it, refresh its symbols. */
void np_session_on_new_mapping(struct np_session *s, struct np_target *t, uint64_t ts_ns);

/* ---- records (route.c) ---- */
/* Sets up s->ingest to hand its records to this session. */
void np_session_setup_ingest(struct np_session *s);
/* The output a target's records go to now (s->out, or the sink's). */
struct np_output *np_session_output_for(struct np_session *s, struct np_target *t);

/* ---- BPF, GPU ---- */
int np_session_setup_bpf(struct np_session *s);
/* ---- --nccl-flows (flows.c) ---- */
/* Loads the flow probes' BPF object and makes its own ring manager
 * (flows_rb, which np_session_setup_bpf watches). */
int np_session_setup_flows(struct np_session *s);
/* Reads what the flow ring holds (np_session_read does, every turn). */
void np_session_read_flows(struct np_session *s);
/* The flow files go to dir/flows. */
int np_session_flows_open(struct np_session *s, const char *dir);
/* Writes the topologies kept for pid to out (a file set opened later than
 * its communicators' first ops). */
void np_session_flows_topologies(struct np_session *s, uint32_t pid, struct np_flows_out *out);
/* pid is no longer traced: its kept topologies go. */
void np_session_flows_forget(struct np_session *s, uint32_t pid);
/* Writes what is left, closes the files (totals kept for the summary). */
void np_session_flows_close(struct np_session *s);
/* summary.json's "nccl_flows"; NULL when flows were not asked for. */
struct cJSON *np_session_flows_json(struct np_session *s);
void np_session_flows_free(struct np_session *s);
int np_session_setup_gpu(struct np_session *s);
/* Once per loop: GPU clients that closed (when the ring is read: !backlog),
 * launches whose records stopped coming, clients that never said hello. */
void np_session_gpu_tick(struct np_session *s, bool ring_read);
uint64_t np_session_counter(struct np_session *s, __u32 which);
/* How many bytes of the BPF ring buffer hold records not yet read (*used), of
 * its *size: 0, or -errno when its pages cannot be mapped. */
int np_session_ring_fill(struct np_session *s, uint64_t *used, uint64_t *size);
/* Sums a per-CPU per-probe counter map (probe_hits, probe_drops, probe_limited). */
uint64_t np_session_probe_counter(struct bpf_map *map, uint32_t id);
uint64_t np_session_records_received(const struct np_session *s);
/* One turn of the loop's reading: the ring drained into the reader's
 * backlog (at most budget records; <= 0: all), then the backlog worked off
 * for a slice of time (budget <= 0: all of it); s->backlog says whether
 * records still wait. */
void np_session_read(struct np_session *s, long budget);
/* With a backlog: starts the thread that drains the ring into it (after
 * np_session_setup_bpf and np_session_setup_ingest); on failure records
 * are read as they come, as without one. */
int np_session_start_drain(struct np_session *s);
/* Everything sent so far read and handled (a process about to go). */
void np_session_read_all(struct np_session *s);
void np_session_stop_and_drain(struct np_session *s);
void np_session_finish_gpu(struct np_session *s);
/* summary.json of the session at path (record). */
int np_session_write_summary(struct np_session *s, const char *path);
/* Releases everything but opt (the caller's); np_session_agents_stop first
 * when agents were asked for. */
void np_session_free(struct np_session *s);

#endif
