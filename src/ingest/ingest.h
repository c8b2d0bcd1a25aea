/* ingest.h - the ring-buffer consumer: validates each record, finds its
 * process and probe, decodes it, and hands it on through struct
 * np_ingest_ops - launches and NCCL calls decoded and with their stacks
 * (unwound, symbolized, Python frames merged), kernel-handle records,
 * CUPTI correlation markers, and library loads (new code to probe).
 * Records are handled as they arrive, while the process's mappings exist.
 * What happens next (kernel names, the GPU join, the writers) is the
 * session's: ingest knows nothing after itself. */
#ifndef NP_INGEST_H
#define NP_INGEST_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <sys/types.h>

#include "ingest/backlog.h"
#include "ingest/stack_hints.h"
#include "lib/hashmap.h"
#include "lib/util.h"

struct np_attacher;
struct np_process;
struct np_symbolizer;
struct np_unwinder;
struct np_pycode;
struct np_probe_site;
struct np_launch;
struct np_handle_event;
struct np_marker_event;
struct np_graph_event;
struct np_workers;
struct stack_job;

struct np_ingest_stats {
    uint64_t launch_events; /* launch + NCCL API records received */
    uint64_t handle_events;
    uint64_t map_events;
    uint64_t graph_events;         /* capture, event and graph calls returned */
    uint64_t py_code_events;       /* code objects of launch stacks freed (np_py_code_event) */
    uint64_t malformed;            /* wrong size, type or version */
    uint64_t unknown_source;       /* probe id or pid we do not know (already detached) */
    uint64_t unsymbolized;         /* launches of a process gone before its mappings were read */
    uint64_t marker_events;        /* CUPTI correlation markers */
    uint64_t nccl_plan_events;     /* NCCL plan records received from a known probe */
    uint64_t nccl_plans;           /* ... decoded (the others: inconsistent sizes, no memory) */
    uint64_t nccl_plans_unclaimed; /* ... whose launch record never came (dropped) */
    uint64_t nccl_launches_without_plan; /* NCCL launches whose plan was not read */
    uint64_t nccl_internal_calls;        /* NCCL API calls made by libnccl itself: not written */
    uint64_t not_recorded;               /* launches of a process not recorded now (daemon) */
    uint64_t fast_launches; /* launches taken at the CUPTI marker (the agent's fast path) */
    uint64_t fast_doubles;  /* ... that were the marker of a launch its int3 probe sent */
    uint64_t *per_probe;    /* launches by the probe the caller called, index = probe id */
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
    uint64_t hinted;     /* copies cut to what unwinding needed there before */
    uint64_t hint_short; /* ... that came out short (not complete): the hint is dropped */
};

/* A launch's stack as text, root first, frames joined by ';': folded (for
 * the .folded outputs) and detailed (stacks.jsonl: inlined frames always,
 * marked "[inlined]"); locations: one JSON object per detailed frame,
 * joined by ',' (module, build_id, offset, file, line where known), for
 * the writers that want more than names (pprof). */
struct np_stack_texts {
    struct np_str folded, detailed, locations;
    /* np_hash_str(detailed) when hashed_len == detailed.len + 1, else not
     * known (0): ingest hashes each distinct stack once, not every launch;
     * a frame appended afterwards changes the length, and so the hash is
     * computed again where it is needed (np_stack_texts_hash). */
    uint64_t detailed_hash;
    size_t hashed_len;
    /* With them: the serial number of the stack cache's entry these texts
     * are (0: none). An entry never changes and a number is never reused,
     * so equal serials mean equal texts (np_stack_texts_serial). */
    uint64_t serial;
};

/* The hash of texts->detailed (np_hash_str), computed only when not known. */
uint64_t np_stack_texts_hash(const struct np_stack_texts *texts);
/* Their cache entry's serial number; 0 when none, or the texts were changed. */
uint64_t np_stack_texts_serial(const struct np_stack_texts *texts);

/* --python: Python frames merged into the native stack at the eval loop,
 * added beside the raw interpreter frames, or not walked at all. */
enum np_python_mode { NP_PYTHON_MERGE = 0, NP_PYTHON_RAW, NP_PYTHON_OFF };

/* What ingest reads and keeps per traced process (the session's target
 * embeds one). */
struct np_ingest_proc {
    struct np_process *process;   /* pid, libraries (a probe's lib_index), hold_loads */
    struct np_symbolizer *sym;    /* NULL until the process's mappings could be read */
    struct np_unwinder *unwinder; /* with sym */
    struct np_pycode *pycode;     /* reads its code objects (Python frames -> file:line) */
    struct np_map stack_texts;    /* hash of a PC sequence -> its folded text */
    uint64_t stack_text_bytes;    /* ... and the bytes it holds */
    struct np_map py_frame_texts; /* (code object, instruction) -> a Python frame's texts */
    uint64_t py_frame_text_bytes; /* ... and the bytes it holds */
    uint64_t batch;               /* the last batch of records it had a stack job in */
    unsigned worker;              /* the worker thread that builds its stacks, */
    bool has_worker;              /* ... once given one (in turn, at its first job) */
};

/* Drops the cached stack and Python frame texts (a library was loaded or a
 * code object replaced: names may change; over the daemon's cache_size;
 * the process is gone). */
void np_ingest_proc_forget_stacks(struct np_ingest_proc *p);

struct np_ingest;

/* Where ingest hands what it decoded. The owner of the struct np_ingest
 * implements these and finds itself from `in` (np_container_of). */
struct np_ingest_ops {
    /* The process of a pid we trace, or NULL. */
    struct np_ingest_proc *(*find)(struct np_ingest *in, pid_t pid);
    /* Whether its launches are recorded now (NULL: always). Those that are
     * not are counted (not_recorded) and cost no unwinding. */
    bool (*recording)(struct np_ingest *in, struct np_ingest_proc *p);
    /* It mapped new code (a library load), or this is the first record of
     * a process ncclprobe started: probe it, refresh its symbols. */
    void (*new_mapping)(struct np_ingest *in, struct np_ingest_proc *p, uint64_t ts_ns);
    /* A launch or an NCCL API call, decoded, with its stack; the callee may
     * add frames to the texts (NCCL's [NCCL]Op). */
    void (*launch)(struct np_ingest *in, struct np_ingest_proc *p, const struct np_launch *l,
                   struct np_stack_texts *stack);
    /* A handle producer returned (cuModuleGetFunction...): a kernel's name. */
    void (*handle)(struct np_ingest *in, struct np_ingest_proc *p, const struct np_probe_site *site,
                   const struct np_handle_event *h);
    /* A CUPTI correlation marker of a launch. */
    void (*marker)(struct np_ingest *in, const struct np_marker_event *m);
    /* A capture, event or graph call returned (NULL: not followed). */
    void (*graph)(struct np_ingest *in, struct np_ingest_proc *p, const struct np_probe_site *site,
                  const struct np_graph_event *g);
    /* Whether a launch goes into a graph being captured (decoded; no stack
     * yet): such a launch is handed on even when not recording (NULL: none). */
    bool (*captured)(struct np_ingest *in, struct np_ingest_proc *p, const struct np_launch *l);
};

struct np_ingest {
    struct np_attacher *attacher;
    const struct np_ingest_ops *ops;
    long budget;               /* records read from the ring before yielding; <= 0: no limit */
    bool queue;                /* records wait in the backlog (np_ingest_work handles them) */
    struct np_backlog backlog; /* filled by the drain thread (drain.h) */
    bool fp_fallback;          /* --unwind auto: follow frame pointers where CFI is missing */
    bool inline_folded;        /* --inline: inlined frames in the folded outputs too */
    enum np_python_mode python_mode;
    FILE *raw_dump;              /* --raw-dump: every record as received, "u32 size, bytes" */
    struct np_stack_texts stack; /* reused for each launch's stack */
    struct np_map nccl_pending;  /* tid -> struct np_nccl_plan * waiting for its launch record */
    /* tid -> ts_ns << 14 | probe id: the thread's last launch sent by the
     * int3 uprobe of a fast-path probe, while its CUPTI marker has not come
     * (a marker the fast path turned into a launch record is that marker) */
    struct np_map fast_awaiting;
    struct np_ingest_stats stats;
    /* unwind and hints are updated by worker threads too, under learn_lock
     * (a zeroed mutex is an unlocked one) */
    pthread_mutex_t learn_lock;
    struct np_unwind_stats unwind;
    struct np_stack_hints hints; /* how much stack BPF copies (stack_hints.h) */
    /* Worker threads building stacks ahead of turn (NULL: none; see
     * "Worker threads" in ingest.c), and the jobs of the batch of records
     * np_ingest_work hands them, in record order. */
    struct np_workers *workers;
    struct stack_job *jobs;
    size_t njobs, next_job;
    uint64_t batch;                /* batches started */
    unsigned next_worker;          /* the worker the next process new to them is given */
    struct stack_job *current_job; /* the job of the record being handled, or NULL */
    bool behind;    /* the last np_ingest_work ran out of time with a batch or more waiting */
    bool scan_held; /* scan_arrivals stopped at a barrier (a freed code object's record) */
};

/* libbpf ring_buffer sample callback; ctx is a struct np_ingest. With
 * in->queue (on the drain thread) it only copies the record into the
 * backlog; without, it handles the record now. */
int np_ingest_record(void *ctx, void *data, size_t size);
/* Sets the backlog up: records wait there, up to budget_bytes of memory
 * (0: no backlog, records are handled as they are read). */
void np_ingest_set_backlog(struct np_ingest *in, uint64_t budget_bytes);
/* Starts n worker threads that build the stacks of queued records (none
 * without a backlog, or with n 0: stacks are built on the caller's
 * thread). Negative errno when they cannot be started. */
int np_ingest_set_workers(struct np_ingest *in, unsigned n);
/* Worker threads started (0: none), and the stacks worker i built. */
unsigned np_ingest_workers(const struct np_ingest *in);
uint64_t np_ingest_worker_jobs(struct np_ingest *in, unsigned i);
/* First does, for every record queued since, what cannot wait: a library
 * load (new code to probe), the code objects of Python stacks not seen
 * before (they may not live long), the first record of a process we
 * started (its symbols). Then handles waiting records, oldest first, for
 * about max_ns (0: all of them); returns how many still wait. */
uint64_t np_ingest_work(struct np_ingest *in, uint64_t max_ns);
void np_ingest_free(struct np_ingest *in);
/* Drops what waits for records that will not come (NCCL plans whose
 * launch record was lost), counting it; before the summary is written. */
void np_ingest_settle(struct np_ingest *in);

/* An empty location (a synthetic frame: a marker, [NCCL]Op) in a
 * np_stack_texts.locations list. */
void np_ingest_append_location(struct np_str *locations);

struct np_launch_event;
/* A launch taken at the CUPTI marker (NP_LF_AT_MARKER): unwinds its stack
 * and drops the callback's frames (our library, CUPTI, the CUDA libraries,
 * launch_lib) from the leaf, entry_pc in their place; the next
 * np_ingest_build_stack of e uses that. Returns the launch API's caller
 * (0: unknown). */
uint64_t np_ingest_unwind_at_marker(struct np_ingest *in, struct np_ingest_proc *p,
                                    const struct np_launch_event *e, uint64_t entry_pc,
                                    const char *launch_lib);
/* Builds the stack texts of a launch: frame pointers, or DWARF unwinding
 * of the copied stack. entry_name replaces the probed function's own name
 * (a launch entered through a thunk). cache_pinned: texts handed out
 * earlier may still be read, so the process's stack cache frees nothing. */
void np_ingest_build_stack(struct np_ingest *in, struct np_ingest_proc *p,
                           const struct np_launch_event *e, const char *entry_name,
                           bool cache_pinned, struct np_stack_texts *out);

#endif
