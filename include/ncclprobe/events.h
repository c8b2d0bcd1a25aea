/* events.h - the records that cross the BPF ring buffer, and the per-probe
 * configuration that user space hands to BPF.
 *
 * This is the one definition of every on-wire record: bpf/ncclprobe.bpf.c and
 * user space (src/) both include it. The BPF side includes vmlinux.h first
 * (which defines __u8..__u64); user space gets them from <linux/types.h>.
 *
 * Every record starts with struct np_event_header; `size` is the number of
 * bytes actually sent, so variable-length tails (a launch's return addresses,
 * copied stack bytes and Python frames; an NCCL plan's tasks) can grow
 * without changing the header.
 * Bump NP_EVENT_VERSION whenever a fixed part changes.
 */
#ifndef NCCLPROBE_EVENTS_H
#define NCCLPROBE_EVENTS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define NP_EVENT_VERSION 4
#define NP_COMM_LEN 16
#define NP_MAX_STACK 127 /* kernel's default perf_event_max_stack */
#define NP_REG_ARGS 6    /* SysV x86-64 integer argument registers */
#define NP_STACK_ARGS 6  /* words read above the return address */
#define NP_DEREF_BYTES 128
#define NP_NAME_LEN 128
#define NP_MAX_PROBES 16384
#define NP_MAX_STACK_BYTES 65536 /* upper bound of --stack-bytes */
#define NP_PY_MAX_FRAMES 1024    /* upper bound of --python-depth */

enum np_event_type {
    NP_EV_LAUNCH = 1, /* a probed launch / NCCL API entry (struct np_launch_event) */
    NP_EV_HANDLE = 2, /* a kernel handle was produced (struct np_handle_event) */
    NP_EV_MAP = 3,    /* a target loaded a library (struct np_map_event) */
    NP_EV_MARKER = 4, /* libncclprobe_cupti.so named a launch's correlation id (np_marker_event) */
    NP_EV_NCCL_PLAN = 5, /* an NCCL kernel plan, sent just before its launch's record (below) */
    NP_EV_GRAPH = 6,     /* a stream-capture or graph call returned (struct np_graph_event) */
    NP_EV_PY_CODE = 7,   /* CPython freed a code object of a launch stack (np_py_code_event) */
};

struct np_event_header {
    __u16 type;    /* enum np_event_type */
    __u16 version; /* NP_EVENT_VERSION */
    __u32 size;    /* bytes of this record, header included */
    __u64 ts_ns;   /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
    __u32 pid;     /* host tgid */
    __u32 tid;     /* host tid */
};

/* What a probe does when it fires; set per probe id in the probe_cfg map. */
enum np_probe_role {
    NP_ROLE_NONE = 0,
    NP_ROLE_LAUNCH = 1,        /* a launch entry point: emits np_launch_event */
    NP_ROLE_THUNK = 2,         /* tail-jumps into another launch probe: remembered, no event */
    NP_ROLE_API = 3,           /* an API call that is not itself a launch (NCCL collectives) */
    NP_ROLE_HANDLE_ENTRY = 4,  /* entry of a call that produces a kernel handle */
    NP_ROLE_HANDLE_RETURN = 5, /* its return (uretprobe): emits np_handle_event */
    NP_ROLE_LOADER = 6,        /* the dynamic loader's r_brk (a library was loaded) or CPython's
                                  Py_FinalizeEx: user space catches up before a held process goes on */
    NP_ROLE_MARKER = 7,        /* ncclprobe_cupti_marker(correlation id, domain, cbid), called
                                  by our CUPTI library inside a launch: emits np_marker_event */
    NP_ROLE_GRAPH_CALL = 8,    /* a capture, event or graph call (enum np_graph_op): its
                                  arguments kept at entry, np_graph_event sent at its return */
    NP_ROLE_PY_CODE_FREE = 9   /* CPython's code-object deallocator (PyCode_Type.tp_dealloc):
                                  a code object of a launch stack freed makes Python stacks
                                  new again (np_py_code_key) */
};

/* What a NP_ROLE_GRAPH_CALL probe's function does to stream capture and
 * graphs (np_probe_cfg.graph_op): the runtime's and the driver's alike. */
enum np_graph_op {
    NP_GOP_NONE = 0,
    NP_GOP_BEGIN,          /* (stream[, mode]): the stream starts capturing */
    NP_GOP_BEGIN_TO_GRAPH, /* (stream, graph, deps, edges, n, mode): ... into an existing graph */
    NP_GOP_END,            /* (stream, &graph): the capture ends, its graph comes out */
    NP_GOP_EVENT_RECORD,   /* (event, stream): a capturing stream's event forks the capture */
    NP_GOP_STREAM_WAIT,    /* (stream, event, flags): the stream joins the event's capture */
    NP_GOP_INSTANTIATE,    /* (&exec, graph, ...): an executable graph of the graph */
    NP_GOP_EXEC_UPDATE,    /* (exec, graph, ...): the exec now runs the graph's nodes */
    NP_GOP_GRAPH_DESTROY,  /* (graph) */
    NP_GOP_EXEC_DESTROY,   /* (exec) */
};

/* How a handle producer names its handle (enum np_probe_cfg.src_kind). */
enum np_handle_source {
    NP_SRC_POINTER = 0, /* source argument is a host function pointer (a stub) */
    NP_SRC_STRING = 1,  /* source argument is a C string (a kernel name) */
    NP_SRC_HANDLE = 2,  /* source argument is another handle (CUkernel -> CUfunction) */
};

struct np_probe_cfg {
    __u32 pid;      /* the only process this probe id serves */
    __u8 role;      /* enum np_probe_role */
    __s8 deref_arg; /* argument (0-5 registers, 6-11 stack words) to copy from, -1: none */
    __u8 out_arg;   /* handle producers: the argument that points at the result */
    __u8 src_arg;   /* handle producers: the argument naming the handle */
    __u8 src_kind;  /* enum np_handle_source */
    __u8 hold;      /* loader hook of a process ncclprobe started: stop it until probed */
    __u8 nccl_plan; /* an NCCL launch: nccl_cfg[probe id] says what of its plan to read */
    __u8 graph_op;  /* NP_ROLE_GRAPH_CALL: enum np_graph_op */
    __u8 fast;      /* a launch the CUPTI marker can take instead (np_fast_cfg) */
    __u8 pad[3];
    __u32 deref_off; /* added to the dereferenced pointer */
    __u32 deref_len; /* bytes to copy, at most NP_DEREF_BYTES */
};

enum np_launch_flags {
    NP_LF_NESTED = 1u << 0,        /* fired inside another launch probe's activation, same thread */
    NP_LF_VIA_THUNK = 1u << 1,     /* entered through a thunk: called_as names the thunk */
    NP_LF_STACK_ERR = 1u << 2,     /* bpf_get_stack failed: stack_err holds the error */
    NP_LF_DEREF_ERR = 1u << 3,     /* copying the dereferenced argument failed */
    NP_LF_ARGS_ERR = 1u << 4,      /* reading the stack-passed arguments failed */
    NP_LF_STACK_COPY = 1u << 5,    /* data[] holds a stack copy for DWARF unwinding */
    NP_LF_PY = 1u << 6,            /* the thread runs Python: n_py frames follow */
    NP_LF_PY_TRUNCATED = 1u << 7,  /* more Python frames than --python-depth */
    NP_LF_PY_ERR = 1u << 8,        /* a Python frame could not be read: the walk stopped */
    NP_LF_PY_NO_THREAD = 1u << 9,  /* a Python process, but this thread has no thread state */
    NP_LF_PY_NEW = 1u << 10,       /* these code objects were not seen together before: the
                                      reader was woken at once to read them while they live */
    NP_LF_STACK_HINTED = 1u << 11, /* the stack copy was cut to its stack_hints entry */
    NP_LF_AT_MARKER = 1u << 12,    /* taken at ncclprobe_cupti_marker (the fast path, below):
                                      args[]/stack_args[] hold the raw bytes of CUPTI's params
                                      struct, the stack was copied from the marker (user space
                                      drops the CUPTI frames), corr_id is its correlation id */
};

/* ---- The agent's fast path ------------------------------------------------
 *
 * While libncclprobe_cupti.so serves a process (fast_cbids has its entries) its
 * marker, ncclprobe_cupti_marker(corr, domain, cbid, params), takes the
 * launch: BPF copies NP_FAST_PARAMS_MAX bytes of CUPTI's per-cbid params
 * struct (the arguments by value) and, for the Ex launches, the config the
 * params point at, plus the stack and Python frames, and sends the launch
 * record the int3 probe would have sent. The launch's int3 uprobe (a probe
 * with np_probe_cfg.fast) is detached meanwhile. fast_cbids says, per
 * process and callback id, which probe the launch is reported as. */
#define NP_FAST_PARAMS_MAX 96 /* args[] + stack_args[] */
struct np_fast_key {
    __u32 pid;
    __u32 domain; /* CUpti_CallbackDomain */
    __u32 cbid;
};

struct np_fast_cfg {
    __u32 probe_id;   /* the launch probe (in this process) the record is sent as */
    __u32 called_as;  /* the probe the caller called: a thunk into probe_id (VIA_THUNK), or it */
    __u32 params_len; /* bytes of the params struct copied, <= NP_FAST_PARAMS_MAX */
    __s32 deref_at;   /* offset of a pointer in the params whose pointee goes to deref[]; -1 */
    __u32 deref_len;  /* ... bytes of it, <= NP_DEREF_BYTES */
};

/* The stack_hints map: how many bytes at the top of a thread's stack (below
 * the end of its mapping, or of the main thread's start_stack) unwinding
 * never needs - what lies above its outermost frame, less a margin, learned
 * by the reader (src/ingest/stack_hints.c). BPF copies from sp up to there:
 * exactly as deep as the stack is at each launch. Without an entry it copies
 * --stack-bytes. */
#define NP_STACK_HINTS_MAX 65536
struct np_stack_hint_key {
    __u32 pid, tid;
    __u64 stack_top; /* struct np_launch_event.stack_top */
};

/* One CPython frame, innermost first, as the BPF walker saw it: the code
 * object, and the offset in bytes of the instruction executing in it
 * (3.10: 2 * f_lasti; 3.11+: from co_code_adaptive; negative: not started).
 * NP_PYF_ENTRY marks the outermost Python frame of one C activation of the
 * eval loop: the frames up to it belong to one _PyEval_EvalFrameDefault. */
#define NP_PYF_ENTRY 1u

struct np_py_frame {
    __u64 code;
    __s32 instr;
    __u32 flags;
};

/* A code object of a process's launch stacks (map py_stack_codes): user
 * space adds each one it reads for a stack BPF reported new. When CPython
 * frees one (NP_ROLE_PY_CODE_FREE), BPF finds it there, sends an
 * np_py_code_event and bumps the process's slot of py_code_epochs, which
 * its Python stacks' hashes start from: each of its stacks is reported new
 * once more, and an address that holds another code object by then is read
 * again, not named by the old one (whose fields a new one can repeat:
 * strings and line tables freed with it, made again at the same places). */
struct np_py_code_key {
    __u32 pid;
    __u32 pad;
    __u64 code;
};

/* Where the BPF walker finds a thread's frames, per Python process (map
 * py_procs, key = tgid). Offsets are bytes; NP_PY_NO_FIELD: the version
 * has no such field. From per-version tables (3.10-3.12) or from the
 * target's _Py_DebugOffsets (3.13+), see src/attach/python.c. */
#define NP_PY_NO_FIELD 0xffffu
#define NP_PY_FRAME_READ 128 /* bytes of a frame read at once: every field used lies below */

struct np_py_cfg {
    __u64 runtime;        /* &_PyRuntime in the target */
    __u32 max_frames;     /* --python-depth */
    __u32 interp_head;    /* _PyRuntime.interpreters.head */
    __u32 interp_next;    /* PyInterpreterState.next */
    __u32 interp_threads; /* PyInterpreterState.threads.head (3.10: tstate_head) */
    __u16 tstate_next;
    __u16 tstate_thread_id; /* pthread_t: equals the thread's fsbase on x86-64 */
    __u16 tstate_frame;     /* 3.10 frame, 3.11/3.12 cframe, 3.13+ current_frame */
    __u16 cframe_frame;     /* 3.11/3.12: _PyCFrame.current_frame; else NP_PY_NO_FIELD */
    __u16 frame_previous;   /* f_back / previous */
    __u16 frame_code;       /* f_code / f_executable (tag bits masked) */
    __u16 frame_instr;      /* 3.10 f_lasti (int, code units); prev_instr / instr_ptr */
    __u16 frame_owner;      /* 3.11+: owner (char); else NP_PY_NO_FIELD */
    __u16 frame_is_entry;   /* 3.11: is_entry (bool); else NP_PY_NO_FIELD */
    __u16 code_adaptive;    /* offset of the bytecode in the code object (3.11+) */
    __u8 legacy_frames;     /* 3.10: PyFrameObject chain, instruction = f_lasti */
    __u8 owner_shim;        /* owner values >= this are C-stack shims: skipped */
    __u16 frame_read;       /* bytes read per frame, <= NP_PY_FRAME_READ */
    __u8 hold;              /* a process ncclprobe started: stopped at a new stack until
                               user space has read its code objects (see NP_LF_PY_NEW) */
    __u8 pad;
    /* 3.11+: the thread's data stack, where the frames of ordinary calls lie
     * contiguously (innermost highest), read in bulk instead of frame by
     * frame. NP_PY_NO_FIELD in either: frames are read one by one. */
    __u16 tstate_chunk; /* PyThreadState.datastack_chunk (the current _PyStackChunk) */
    __u16 chunk_data;   /* _PyStackChunk.data (after previous, size (bytes), top) */
    __u16 pad2;
};

struct np_launch_event {
    struct np_event_header hdr;
    __u32 cpu;
    __u32 probe_id;    /* the probe that fired */
    __u32 called_as;   /* the probe the caller entered (differs from probe_id via a thunk) */
    __u32 outer_probe; /* NP_LF_NESTED: the enclosing launch's probe id */
    __u32 flags;       /* enum np_launch_flags */
    __s32 stack_err;
    char comm[NP_COMM_LEN];
    __u64 sp;                        /* user stack pointer at entry */
    __u64 bp;                        /* user frame pointer register at entry */
    __u64 ret_addr;                  /* [sp] at entry: the return address into the caller */
    __u64 args[NP_REG_ARGS];         /* rdi rsi rdx rcx r8 r9 */
    __u64 stack_args[NP_STACK_ARGS]; /* [sp+8], [sp+16], ... */
    __u8 deref[NP_DEREF_BYTES];      /* probe_cfg's dereferenced argument */
    __u32 n_ips;                     /* instruction pointers at the start of data[] */
    __u32 stack_len;                 /* user stack bytes copied from sp upwards, after them */
    __u32 n_py;                      /* NP_LF_PY: Python frames after the stack (np_launch_py) */
    __u32 corr_id;                   /* NP_LF_AT_MARKER: the CUPTI correlation id */
    __u64 stack_top; /* DWARF modes: where the copy may end at most - the end of sp's mapping,
                        or just above the main thread's start_stack (0: not found) */
    __u64 launch_id; /* the hit's number in this BPF object's life (1, 2, ...): launches.jsonl's
                        launch_id; an NCCL plan's proxy ops carry it (flows.h, plan_launches) */
    /* Frame-pointer mode: data[] holds bpf_get_stack's user stack - ips[0] is
     * the probed function, then the frame-pointer chain (kernels before 6.12
     * miss the caller at a function entry; user space inserts ret_addr then).
     * DWARF modes: one ip (the probed function), then stack_len bytes of the
     * user stack starting at sp, unwound in user space. Then, 8-byte
     * aligned, n_py struct np_py_frame. */
    __u64 data[NP_MAX_STACK + NP_MAX_STACK_BYTES / 8 + NP_PY_MAX_FRAMES * 2];
};

#define NP_LAUNCH_FIXED_SIZE __builtin_offsetof(struct np_launch_event, data)

static inline const __u64 *np_launch_ips(const struct np_launch_event *e) {
    return e->data;
}

static inline const __u8 *np_launch_stack(const struct np_launch_event *e) {
    return (const __u8 *)(e->data + e->n_ips);
}

/* Index in data[] of the first Python frame. */
static inline __u32 np_launch_py_index(__u32 n_ips, __u32 stack_len) {
    return n_ips + (stack_len + 7) / 8;
}

static inline const struct np_py_frame *np_launch_py(const struct np_launch_event *e) {
    return (const struct np_py_frame *)(e->data + np_launch_py_index(e->n_ips, e->stack_len));
}

struct np_handle_event {
    struct np_event_header hdr;
    __u32 probe_id;
    __s32 name_err; /* < 0 when reading the name string failed */
    __u64 handle;   /* the produced CUfunction / CUkernel / cudaKernel_t */
    __u64 source;   /* stub pointer or source handle (src_kind) */
    char name[NP_NAME_LEN];
};

struct np_map_event {
    struct np_event_header hdr;
};

/* CPython freed the code object at code, one a launch stack held (its
 * py_stack_codes entry, np_py_code_key): what user space read there names
 * it no more. Every Python stack is reported new after it. */
struct np_py_code_event {
    struct np_event_header hdr;
    __u64 code;
};

/* A CUPTI launch callback on this thread: the launch this thread is in has
 * this correlation id, which its GPU records carry (see gpu_wire.h). */
struct np_marker_event {
    struct np_event_header hdr;
    __u32 correlation_id;
    __u32 domain; /* CUpti_CallbackDomain: 1 driver API, 2 runtime API */
    __u32 cbid;   /* the API's callback id */
    __u32 pad;
};

/* A capture, event or graph call, sent at its return: its register
 * arguments as at the entry, what its out argument (probe_cfg.out_arg)
 * pointed at once it returned (the graph of an end of capture, the exec of
 * an instantiation), and its return value (a CUresult / cudaError_t). */
struct np_graph_event {
    struct np_event_header hdr;
    __u32 probe_id;
    __u32 op; /* enum np_graph_op */
    __u64 args[NP_REG_ARGS];
    __u64 out;
    __s64 ret;
};

/* ---- NCCL kernel plans -----------------------------------------------------
 *
 * At ncclLaunchKernel(comm, plan) / ncclLaunchCeColl(comm, plan) /
 * ncclLaunchRma(comm, plan) BPF copies, as raw bytes, the parts of libnccl's
 * structs that user space asks for in nccl_cfg[probe id]: a span of the
 * communicator (commHash, rank, nRanks, cudaDev), the launch stream
 * (comm->planner.streams->stream, or tasks.streams before 2.23), a span of
 * the plan (kernelFn, channelMask, threadPerBlock, isSymColl, isCeColl,
 * isRma), what the plan's argument pointer points at (the copy-engine or RMA
 * arguments), and a span of each task on the plan's task lists. The offsets
 * come from the DWARF of the libnccl the target mapped (see
 * src/attach/nccl_layout.c); BPF knows no NCCL struct, user space decodes. */
#define NP_NCCL_NO_FIELD 0xffffffffu
#define NP_NCCL_COMM_BYTES 128
#define NP_NCCL_PLAN_BYTES 256
#define NP_NCCL_AUX_BYTES 64
#define NP_NCCL_TASK_BYTES 256
#define NP_NCCL_MAX_TASKS 64 /* tasks copied per plan (in list order) */
#define NP_NCCL_MAX_WALK 512 /* list nodes counted per plan: ops_total is at most this */
/* 0: collTaskQueue (ncclTaskColl), 1: p2pTaskQueue, 2: bcastTaskQueue (2.29+),
 * 3: rmaTaskQueueProxy, 4: rmaTaskQueueCe (ncclTaskRma, 2.29+); a list the
 * library does not have is NP_NCCL_NO_FIELD (enum np_nccl_list) */
#define NP_NCCL_LISTS 5

struct np_nccl_list_cfg {
    __u32 head; /* offset of the list head in the plan; NP_NCCL_NO_FIELD: no such list */
    __u32 next; /* offset of the next pointer in a task */
    __u32 lo;   /* first task byte copied */
    __u32 len;  /* bytes copied per task, <= NP_NCCL_TASK_BYTES */
};

struct np_nccl_cfg {
    __s8 comm_arg; /* register argument (0-5) holding the communicator */
    __s8 plan_arg; /* register argument holding the plan, -1: none */
    __u8 pad[2];
    __u32 comm_lo, comm_len; /* span of the communicator, len <= NP_NCCL_COMM_BYTES */
    __u32 comm_streams;      /* offset of planner.streams (tasks.streams); NO_FIELD: unknown */
    __u32 stream_off;        /* offset of stream in ncclCudaStreamList */
    __u32 plan_lo, plan_len; /* span of the plan, len <= NP_NCCL_PLAN_BYTES */
    __u32 plan_aux;          /* offset of a pointer in the plan whose pointee is copied */
    __u32 aux_len;           /* ... bytes of it, <= NP_NCCL_AUX_BYTES */
    struct np_nccl_list_cfg lists[NP_NCCL_LISTS];
};

enum np_nccl_flags {
    NP_NF_COMM_ERR = 1u << 0,   /* the communicator span could not be read */
    NP_NF_STREAM_ERR = 1u << 1, /* the launch stream could not be read */
    NP_NF_PLAN_ERR = 1u << 2,   /* the plan span could not be read */
    NP_NF_AUX_ERR = 1u << 3,    /* the plan's argument pointee could not be read */
    NP_NF_TASK_ERR = 1u << 4,   /* a task could not be read: its list stopped there */
    NP_NF_TRUNCATED = 1u << 5,  /* more tasks than NP_NCCL_MAX_TASKS: the rest counted only */
};

struct np_nccl_plan_event {
    struct np_event_header hdr;
    __u32 probe_id;
    __u32 flags; /* enum np_nccl_flags */
    __u64 comm, plan, stream;
    __u16 n_tasks[NP_NCCL_LISTS]; /* tasks copied per list, in list order */
    __u32 total[NP_NCCL_LISTS];   /* tasks counted per list (up to NP_NCCL_MAX_WALK) */
    __u8 comm_bytes[NP_NCCL_COMM_BYTES];
    __u8 plan_bytes[NP_NCCL_PLAN_BYTES];
    __u8 aux_bytes[NP_NCCL_AUX_BYTES];
    /* n_tasks[0] + ... + n_tasks[4] slots of NP_NCCL_TASK_BYTES, list 0 first; a
     * slot holds the task's bytes from its list's lo */
    __u8 tasks[NP_NCCL_MAX_TASKS][NP_NCCL_TASK_BYTES];
};

#define NP_NCCL_PLAN_FIXED_SIZE __builtin_offsetof(struct np_nccl_plan_event, tasks)

/* The communicator span also rides in an API call's deref copy; the plan
 * record is a per-CPU array value (32 KiB at most). */
_Static_assert(NP_NCCL_COMM_BYTES <= NP_DEREF_BYTES, "comm span must fit deref");
_Static_assert(sizeof(struct np_nccl_plan_event) <= 32768, "per-CPU value limit");

/* probe_rate[probe id]: the daemon's per-probe rate limit window (user
 * space zeroes it when a probe id is reused). */
struct np_rate_window {
    __u64 start_ns;
    __u64 sent; /* launches sent in the window */
};

/* Global counters (per-CPU array "counters", summed by user space). */
enum np_counter {
    NP_CNT_LAUNCH_SENT = 0, /* launch/API events written to the ring buffer */
    NP_CNT_LAUNCH_DROPPED,  /* launch/API events lost: ring buffer full */
    NP_CNT_HANDLE_SENT,
    NP_CNT_HANDLE_DROPPED,
    NP_CNT_MAP_SENT, /* library-load notifications */
    NP_CNT_MAP_DROPPED,
    NP_CNT_FOREIGN_HITS, /* a probe fired in a process it does not serve */
    NP_CNT_THUNK_HITS,
    NP_CNT_LAUNCH_HITS,  /* launch/API probe hits: = LAUNCH_SENT + LAUNCH_DROPPED */
    NP_CNT_PY_WALKS,     /* launches in a Python process whose frames were walked */
    NP_CNT_PY_NO_THREAD, /* ... on a thread without a Python thread state */
    NP_CNT_PY_ERRORS,    /* ... where reading a frame failed */
    NP_CNT_PY_TRUNCATED, /* ... with more frames than --python-depth */
    NP_CNT_MARKER_SENT,  /* correlation markers written to the ring buffer */
    NP_CNT_MARKER_DROPPED,
    NP_CNT_NCCL_PLAN_SENT, /* NCCL plan records written to the ring buffer */
    NP_CNT_NCCL_PLAN_DROPPED,
    NP_CNT_RATE_LIMITED, /* launch/API hits not sent: over rate_limit (daemon over its CPU budget)
                          */
    NP_CNT_GRAPH_SENT,   /* capture/graph call records written to the ring buffer */
    NP_CNT_GRAPH_DROPPED,
    NP_CNT_PY_FRAMES,       /* Python frames the walker read (C-stack shims included) */
    NP_CNT_PY_FRAMES_BULK,  /* ... of them from a bulk copy of the thread's data stack */
    NP_CNT_FAST_LAUNCHES,   /* launch records sent from the CUPTI marker (the fast path) */
    NP_CNT_PY_CODE_FREED,   /* code objects of launch stacks freed (NP_ROLE_PY_CODE_FREE) */
    NP_CNT_PY_CODE_DROPPED, /* ... whose np_py_code_event the full ring buffer lost */
    NP_CNT_MAX
};

#endif /* NCCLPROBE_EVENTS_H */
