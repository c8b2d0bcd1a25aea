/* recording.h - the one reader of recording directories (the files of
 * include/ncclprobe/recording.h, docs/output-formats.md), for report,
 * convert and the pprof, trace.json and flame graph writers:
 *
 *   np_recording_open()       a directory, read strictly or leniently
 *   np_recording_stacks()     stacks.jsonl, loaded; np_recording_stack() by id
 *   np_rec_lines_*            launches.jsonl, gpu_unmatched.jsonl and
 *                             nccl.jsonl, streamed one typed line at a time
 *   np_recording_meta()       summary.json / window.json (meta.c)
 *   np_folded_*               the folded files (folded.h)
 *
 * What a well-formed line is, is defined once, in lines.c. A malformed line is
 * said as an error with its file and line ("DIR/launches.jsonl:3: "gpu" is
 * not an array"): read strictly, it ends the reading (-EBADMSG); read
 * leniently, it is skipped and counted (the first few are said). The
 * "locations" of stacks.jsonl are detail: a member of the wrong type there
 * is taken as unknown. Text is interned in the recording: equal frames of
 * stacks are equal pointers. */
#ifndef NP_RECORDING_RECORDING_H
#define NP_RECORDING_RECORDING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "lib/hashmap.h"
#include "lib/strtab.h"
#include "recording/jsonl.h"

enum np_rec_mode {
    NP_REC_STRICT,  /* the first malformed line is an error: -EBADMSG */
    NP_REC_LENIENT, /* malformed lines are skipped, counted in malformed */
};

/* Where a frame's code is (stacks.jsonl "locations"); NULL / 0: not known. */
struct np_rec_location {
    const char *module, *build_id, *file;
    uint64_t offset, line;
    bool has_offset;
};

struct np_rec_stack {
    uint64_t id;
    const char **frames;                     /* root first */
    const struct np_rec_location *locations; /* one per frame, or NULL */
    uint32_t nframes;
    const char *nccl_frame; /* the last "[NCCL]..." frame, or NULL */
};

struct np_recording {
    char *dir;
    enum np_rec_mode mode;
    struct np_strtab strings;
    struct np_rec_stack *stacks; /* stacks.jsonl, in file order */
    size_t nstacks, stacks_cap;
    struct np_map stack_index; /* stack_id -> index + 1 */
    uint64_t malformed;        /* lines skipped (lenient) */
    uint64_t said;             /* ... of which said */
};

/* Opens dir (nothing read yet): 0 or -ENOMEM. rec is ready for
 * np_recording_close() either way. */
int np_recording_open(struct np_recording *rec, const char *dir, enum np_rec_mode mode);
void np_recording_close(struct np_recording *rec);

/* "DIR/NAME", malloc'd (NULL when out of memory). */
char *np_rec_path(const char *dir, const char *name);
/* Whether DIR/NAME exists. */
bool np_recording_has(const struct np_recording *rec, const char *name);

/* Loads stacks.jsonl (lines.c): 0, -ENOENT when there is none (not said),
 * -EBADMSG (strict), -ENOMEM or another -errno (said). */
int np_recording_stacks(struct np_recording *rec);
/* Keeps a stack read from stacks.jsonl (its arrays now the recording's;
 * freed when adding fails): 0 or -ENOMEM. */
int np_recording_add_stack(struct np_recording *rec, struct np_rec_stack *s);
/* The stack of a stack_id (its index in rec->stacks in *index), or NULL. */
const struct np_rec_stack *np_recording_stack(const struct np_recording *rec, uint64_t id,
                                              size_t *index);
/* Text interned in the recording (equal texts, equal pointers); NULL when
 * out of memory. */
const char *np_recording_intern(struct np_recording *rec, const char *text);

/* ---- JSON Lines ---------------------------------------------------------------- */

enum np_rec_gpu_type { NP_REC_GPU_KERNEL, NP_REC_GPU_MEMCPY, NP_REC_GPU_MEMSET, NP_REC_GPU_OTHER };

/* A GPU record ("gpu"[] of a launch, or a line of gpu_unmatched.jsonl). */
struct np_rec_gpu {
    enum np_rec_gpu_type type;
    const char *type_name;            /* as written: "kernel", ... */
    const char *name;                 /* kernels: the kernel, else NULL */
    const char *copy_kind;            /* memcpys: "HtoD", ..., or NULL */
    uint64_t start_ns, end_ns;        /* end_ns >= start_ns (start_ns when not known) */
    uint64_t device, context, stream; /* 0 when not written */
    uint64_t graph_id;                /* != 0: run by a CUDA graph replay */
    /* A replayed record tied to the launch that captured it: the stacks.jsonl
     * id of "replay;API;[graph capture];capture frames" (0: none), and how it
     * was tied (NP_CAPTURE_BY_NODE, NP_CAPTURE_BY_ORDER; NULL: not said). */
    uint64_t capture_stack_id;
    const char *capture_by;
    const cJSON *json; /* the record as written */
};

/* A line of launches.jsonl. */
struct np_rec_launch {
    long line;
    uint64_t ts_ns, stack_id;
    uint32_t pid, tid;
    const char *kernel;           /* the CPU-side name */
    const char *comm, *api;       /* NULL when not written */
    const char *gpu_status;       /* "matched", "pending", "none", or NULL */
    bool nested;                  /* part of the launch around it */
    const struct np_rec_gpu *gpu; /* its GPU records */
    uint32_t ngpu;
    bool nccl;              /* has an "nccl" object (an NCCL kernel launch) */
    const char *const *ops; /* the "op" of each planned op that has one */
    uint32_t nops;
    const char *comm_hash;     /* nccl.comm_hash, or NULL */
    bool captured;             /* into a graph being captured: it ran nothing */
    uint64_t graph_nodes;      /* a graph launch whose kernels graph_replays.jsonl counts */
    const char *graph_unknown; /* ... or why its kernels are not known (NULL: not said) */
    const cJSON *json;         /* the line as written */
};

/* A line of graph_replays.jsonl: a captured kernel, counted `count` times
 * by the replays of its graph from one replay stack. */
struct np_rec_graph_replay {
    long line;
    uint32_t pid;
    uint64_t stack_id, replay_stack_id, count;
    const char *kernel;
};

/* A line of nccl.jsonl. */
struct np_rec_nccl_call {
    long line;
    uint64_t ts_ns, stack_id;
    uint32_t pid, tid;
    const char *thread, *op; /* NULL when not written */
    bool has_stack;
    const cJSON *json;
};

/* One JSONL file of a recording being read. What a next() hands out is
 * valid until the next call. */
struct np_rec_lines {
    struct np_recording *rec;
    struct np_jsonl r;
    cJSON *obj;
    struct np_rec_gpu *gpu;
    size_t gpu_cap;
    const char **ops;
    size_t ops_cap;
};

/* Opens DIR/name: 0, -ENOENT when absent (not said), another -errno (said).
 * it is ready for np_rec_lines_close() either way. */
int np_rec_lines_open(struct np_recording *rec, const char *name, struct np_rec_lines *it);
void np_rec_lines_close(struct np_rec_lines *it);
const char *np_rec_lines_path(const struct np_rec_lines *it);

/* The next well-formed line: 1, 0 at the end, or -errno (-EBADMSG: strict
 * and malformed, said). */
int np_rec_next_launch(struct np_rec_lines *it, struct np_rec_launch *out);
int np_rec_next_gpu(struct np_rec_lines *it, struct np_rec_gpu *out);
int np_rec_next_nccl_call(struct np_rec_lines *it, struct np_rec_nccl_call *out);
int np_rec_next_graph_replay(struct np_rec_lines *it, struct np_rec_graph_replay *out);

/* The next line of stacks.jsonl, its arrays malloc'd for the caller (what
 * np_recording_stacks() keeps). */
int np_rec_next_stack(struct np_rec_lines *it, struct np_rec_stack *out);

/* Says "PATH:LINE: MESSAGE" about the line last read, as a malformed line
 * is said (a reader's own finding: a stack_id stacks.jsonl lacks); -EBADMSG. */
int np_rec_lines_error(struct np_rec_lines *it, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The leaf of a GPU record in a folded stack: "[GPU_Kernel]NAME",
 * "[GPU_Memcpy]HtoD", "[GPU_Memset]", "[GPU_TYPE]" (appended to out). */
void np_rec_gpu_leaf(struct np_str *out, const struct np_rec_gpu *g);

/* ---- summary.json and window.json (meta.c) ----------------------------------------- */

/* A process the metadata names; pid 0 / comm NULL: not said. */
struct np_rec_process {
    uint64_t pid;
    const char *comm;
};

struct np_rec_meta {
    bool summary, window;           /* which of the files were read */
    uint64_t start_unix_ns;         /* window.json's window, else summary.json's start */
    uint64_t duration_ns;           /* ... and its length; 0 when not known */
    struct np_rec_process *targets; /* summary.json targets[] (record) */
    size_t ntargets;
    struct np_rec_process process; /* window.json (a daemon output set) */
    /* summary.json "files": whether the per-launch files are whole */
    bool files_known, per_launch_complete;
    uint64_t records_written, records_cut;
    const char *cut_reason; /* "" when not cut */
};

/* Reads what of summary.json and window.json is there (a file missing or
 * not valid JSON is not read: nothing said): 0 or -ENOMEM. */
int np_recording_meta(struct np_recording *rec, struct np_rec_meta *out);
void np_rec_meta_free(struct np_rec_meta *m);

#endif
