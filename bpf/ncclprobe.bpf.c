// SPDX-License-Identifier: GPL-2.0
/* ncclprobe.bpf.c - the probes: one uprobe program for every launch entry
 * point and NCCL API function, one uretprobe program for the calls that
 * produce kernel handles; the dynamic loader's debugger hook tells user
 * space when a target loads a library (dlopen).
 *
 * Which probe fired is the attach cookie (the probe id); what it should do
 * is probe_cfg[probe id], written by user space before attaching. The
 * programs never block and never fail the target: every lost record is
 * counted in `counters` and per probe in `probe_drops`.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "ncclprobe/events.h"
#include "ncclprobe/flows.h"

/* libbpf 1.1's bpf_tracing.h stops at the fifth argument on x86-64. */
#ifndef PT_REGS_PARM6
#define PT_REGS_PARM6(x) ((x)->r9)
#endif

char LICENSE[] SEC("license") = "GPL";

#define NP_SIGSTOP 19 /* holds a process ncclprobe started until user space caught up */

/* Set by user space before load. */
const volatile __u64 wakeup_bytes = 256 * 1024; /* wake the reader past this backlog */
const volatile __u32 stack_bytes = 0; /* user stack to copy for DWARF unwinding; 0: fp stacks */

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 16 * 1024 * 1024); /* resized by user space */
} events SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, NP_MAX_PROBES);
    __type(key, __u32);
    __type(value, struct np_probe_cfg);
} probe_cfg SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, NP_MAX_PROBES);
    __type(key, __u32);
    __type(value, __u64);
} probe_hits SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, NP_MAX_PROBES);
    __type(key, __u32);
    __type(value, __u64);
} probe_drops SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, NP_CNT_MAX);
    __type(key, __u32);
    __type(value, __u64);
} counters SEC(".maps");

/* The daemon's CPU budget: while it is exceeded user space sets rate_limit,
 * and each probe sends at most that many launches per second (a window per
 * probe, shared by all CPUs; its edges are approximate). 0: no limit. */
__u32 rate_limit = 0;

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, NP_MAX_PROBES);
    __type(key, __u32);
    __type(value, struct np_rate_window);
} probe_rate SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, NP_MAX_PROBES);
    __type(key, __u32);
    __type(value, __u64);
} probe_limited SEC(".maps");

/* What a thread's launches keep between them, in its task storage (freed
 * with the thread, so a reused tid starts afresh): constants that would
 * otherwise cost a helper call, a map lookup or a user read at every launch. */
struct np_thread {
    /* the stack mapping sp was in at the last launch, [vma_lo, vma_hi), and
     * its stack_top (copy_user_stack) */
    __u64 vma_lo, vma_hi, top;
    __u32 unneeded;   /* stack_hints[pid, tid, top] ... */
    __u32 hints_seen; /* ... as of hints_gen = hints_seen - 1 (0: not looked up) */
    __u32 py_seen;    /* py_gen + 1 when py_is and py_cfg were read (0: look up) */
    __u32 py_is;      /* the process walks Python frames: py_cfg is its py_procs entry */
    struct np_py_cfg py_cfg;
    __u32 py_state;   /* NP_THR_PY_*: what is known of its Python thread state */
    __u64 py_tstate;  /* NP_THR_PY_FOUND: its PyThreadState */
    __u64 py_checked; /* NP_THR_PY_NONE: when that was found out */
    __u64 py_hash;    /* the code objects of its last Python stack (in py_seen_stacks) */
    /* its data-stack chunk's header as last read: {previous, size} of the
     * chunk at py_chunk (a stale one costs a slower walk, never a wrong
     * frame: frames are always read from memory copied at this launch) */
    __u64 py_chunk, py_chunk_prev, py_chunk_size;
    /* the innermost live launch on the thread, to flag launches nested in it:
     * the stack pointer at its entry (its return address lives there) and
     * that return address, to tell a live activation from a stale one */
    __u64 scope_sp, scope_ret;
    __u32 scope_probe, scope_set;
    __u32 scope_flags; /* enum scope_flags: what became of a fast-path launch's int3 hit */
    __u32 hint_asked;  /* an uncut copy on this stack mapping woke the reader (emit_launch) */
    __u32 copy_paged;  /* a one-read stack copy failed: copy page by page until the hint moves */
    __u32 pad;
    /* a thunk that was entered and is about to jump into its target probe */
    __u64 thunk_sp;
    __u32 thunk_probe, thunk_set;
};

/* A launch probe the CUPTI marker can take (np_probe_cfg.fast) sent its
 * launch: the marker inside the same call must then only name its
 * correlation id. The first marker inside the call consumes the scope, so
 * a stale one never decides for a later call (take_at_marker). */
enum scope_flags {
    SCOPE_SENT = 1u << 0,     /* the int3 hit of a fast-path probe sent the launch record */
    SCOPE_CONSUMED = 1u << 1, /* a marker has decided for this call */
};

#define NP_THR_PY_UNKNOWN 0
#define NP_THR_PY_FOUND 1
#define NP_THR_PY_NONE 2

struct {
    __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, int);
    __type(value, struct np_thread);
} thread_state SEC(".maps");

/* Bumped by user space after each change of stack_hints (py_procs): a
 * thread's copy of its entry is looked up again. */
volatile __u32 hints_gen;
volatile __u32 py_gen;

/* Where a thread's state cannot be had (no memory), a per-CPU stand-in,
 * cleared for each use: it remembers nothing, so the launch costs what it
 * did without the cache, and no thread sees another's scope or thunk. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct np_thread);
} thread_standin SEC(".maps");

static __always_inline struct np_thread *this_thread(void) {
    struct np_thread *t = bpf_task_storage_get(&thread_state, bpf_get_current_task_btf(), 0,
                                               BPF_LOCAL_STORAGE_GET_F_CREATE);
    if (t)
        return t;
    __u32 zero = 0;
    t = bpf_map_lookup_elem(&thread_standin, &zero);
    if (t) {
        __builtin_memset(t, 0, sizeof(*t));
        t->hint_asked = 1; /* it would ask at every launch */
    }
    return t;
}

/* A handle-producing call in flight: filled at entry, sent at return. Keyed
 * by thread and entry stack pointer, so a producer calling another (the
 * runtime calling an exported driver function) keeps both. At the return
 * the stack pointer is the entry's plus the popped return address. */
struct call_key {
    __u32 tid;
    __u32 pad;
    __u64 sp;
};

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 16384);
    __type(key, struct call_key);
    __type(value, struct np_handle_event);
} handle_calls SEC(".maps");

/* A capture or graph call in flight (NP_ROLE_GRAPH_CALL), keyed like
 * handle_calls: out holds the out pointer until the return reads it. */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 16384);
    __type(key, struct call_key);
    __type(value, struct np_graph_event);
} graph_calls SEC(".maps");

/* Stream captures going on, per process (tgid): while one is, launches are
 * sent even when the daemon records nothing (paused), so the launches that
 * make up a graph - captured at a server's start - are known when its
 * replays are recorded. User space tells the captured ones by their stream. */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 4096);
    __type(key, __u32);
    __type(value, __s64);
} active_captures SEC(".maps");

/* Scratch for building a launch event, one slot per CPU (user space sets
 * max_entries to the number of possible CPUs). Too big for the 512-byte BPF
 * stack, and over the 32 KiB value limit of per-CPU arrays. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct np_launch_event);
} launch_scratch SEC(".maps");

static __always_inline void count(__u32 which) {
    __u64 *v = bpf_map_lookup_elem(&counters, &which);
    if (v)
        *v += 1;
}

static __always_inline void count_probe(void *map, __u32 probe_id) {
    __u64 *v = bpf_map_lookup_elem(map, &probe_id);
    if (v)
        *v += 1;
}

static __always_inline void read_reg_args(struct pt_regs *ctx, __u64 args[NP_REG_ARGS]) {
    args[0] = PT_REGS_PARM1(ctx);
    args[1] = PT_REGS_PARM2(ctx);
    args[2] = PT_REGS_PARM3(ctx);
    args[3] = PT_REGS_PARM4(ctx);
    args[4] = PT_REGS_PARM5(ctx);
    args[5] = PT_REGS_PARM6(ctx);
}

/* Batch wake-ups: wake the reader once, with the record that makes the
 * backlog cross wakeup_bytes (a wake-up costs microseconds; once awake the
 * reader drains everything). It also polls on a short timer, so nothing
 * waits long. */
static __always_inline __u64 wakeup_flag(__u32 size) {
    if (!wakeup_bytes) /* --wakeup-kb 0: every record */
        return BPF_RB_FORCE_WAKEUP;
    __u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
    return avail < wakeup_bytes && avail + size >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP
                                                                : BPF_RB_NO_WAKEUP;
}

static __always_inline void fill_header(struct np_event_header *h, __u16 type, __u32 size,
                                        __u64 pid_tgid, __u64 ts) {
    h->type = type;
    h->version = NP_EVENT_VERSION;
    h->size = size;
    h->ts_ns = ts;
    h->pid = pid_tgid >> 32;
    h->tid = (__u32)pid_tgid;
}

static __always_inline __u64 arg_value(struct np_launch_event *e, int idx) {
    if (idx >= 0 && idx < NP_REG_ARGS)
        return e->args[idx];
    if (idx >= NP_REG_ARGS && idx < NP_REG_ARGS + NP_STACK_ARGS)
        return e->stack_args[idx - NP_REG_ARGS];
    return 0;
}

/* The thread's scope is live (its activation still on the stack below sp)
 * when sp is below its entry stack pointer and its return address is still
 * in place there. */
static __always_inline bool scope_live(const struct np_thread *t, __u64 sp) {
    __u64 slot = 0;
    return t->scope_set && sp < t->scope_sp &&
           bpf_probe_read_user(&slot, sizeof(slot), (void *)t->scope_sp) == 0 &&
           slot == t->scope_ret;
}

/* Decide whether this launch runs inside another probed launch on the same
 * thread (a runtime launch calling into the driver, ncclLaunchKernel calling
 * cuLaunchKernelEx) and, if not, make it the thread's innermost launch.
 * flags: enum scope_flags for the new scope. */
static __always_inline void track_scope(struct np_launch_event *e, struct np_thread *t,
                                        __u32 flags) {
    if (scope_live(t, e->sp)) {
        e->flags |= NP_LF_NESTED;
        e->outer_probe = t->scope_probe;
        return;
    }
    t->scope_sp = e->sp;
    t->scope_ret = e->ret_addr;
    t->scope_probe = e->called_as;
    t->scope_flags = flags;
    t->scope_set = 1;
}

/* A thunk entered just before us with the same stack pointer means the
 * caller called the thunk: report the launch under the thunk's name. */
static __always_inline void take_thunk(struct np_launch_event *e, struct np_thread *t) {
    if (!t->thunk_set)
        return;
    if (t->thunk_sp == e->sp) {
        e->called_as = t->thunk_probe;
        e->flags |= NP_LF_VIA_THUNK;
    }
    t->thunk_set = 0;
}

static __always_inline void copy_deref(struct np_launch_event *e, const struct np_probe_cfg *cfg) {
    __u64 ptr = arg_value(e, cfg->deref_arg);
    __u32 len = cfg->deref_len;

    if (!ptr)
        return;
    if (len > NP_DEREF_BYTES)
        len = NP_DEREF_BYTES;
    if (bpf_probe_read_user(e->deref, len, (void *)(ptr + cfg->deref_off)) != 0)
        e->flags |= NP_LF_DEREF_ERR;
}

static __always_inline __u32 capture_fp_stack(struct pt_regs *ctx, struct np_launch_event *e) {
    long n = bpf_get_stack(ctx, e->data, NP_MAX_STACK * sizeof(__u64), BPF_F_USER_STACK);
    if (n < 0) {
        e->flags |= NP_LF_STACK_ERR;
        e->stack_err = n;
        e->data[0] = PT_REGS_IP(ctx);
        return 1;
    }
    return n / sizeof(__u64);
}

/* The return address at sp and the stack-passed arguments above it. */
static __always_inline void read_stack_args(struct np_launch_event *e) {
    e->ret_addr = 0;
    bpf_probe_read_user(&e->ret_addr, sizeof(e->ret_addr), (void *)e->sp);
    if (bpf_probe_read_user(e->stack_args, sizeof(e->stack_args), (void *)(e->sp + 8)) != 0) {
        __builtin_memset(e->stack_args, 0, sizeof(e->stack_args));
        e->flags |= NP_LF_ARGS_ERR;
    }
}

struct vma_bounds {
    __u64 start, end;
};

static long stack_vma_bounds(struct task_struct *task, struct vm_area_struct *vma, void *ctx) {
    struct vma_bounds *b = ctx;
    b->start = vma->vm_start;
    b->end = vma->vm_end;
    return 0;
}

#define NP_PAGE 4096

/* DWARF modes: copy up to stack_bytes of the user stack from sp, page by
 * page, stopping at the end of the stack's mapping or at the first page
 * that is not present - a thread's never-touched static TLS sits above its
 * outermost frame, inside the same mapping - so every live frame is kept. */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, NP_STACK_HINTS_MAX);
    __type(key, struct np_stack_hint_key);
    __type(value, __u32);
} stack_hints SEC(".maps");

/* Where the copy may end at most (e->stack_top) and, from stack_hints, how
 * many bytes below that unwinding never needs. Both are constant while the
 * thread stays on one stack mapping and user space changes no hint: kept in
 * the thread's state, so most launches need neither bpf_find_vma nor a
 * lookup. */
static __always_inline __u64 stack_top_of(__u64 sp, __u64 pid_tgid, struct np_thread *t,
                                          __u32 *unneeded) {
    __u64 top;
    if (sp >= t->vma_lo && sp < t->vma_hi) {
        top = t->top;
    } else {
        struct task_struct *task = bpf_get_current_task_btf();
        struct vma_bounds b = {};
        bpf_find_vma(task, sp, stack_vma_bounds, &b, 0);
        top = b.end;
        /* On the main thread every frame lies below start_stack (argc at
         * exec); above it are argv, the environment and auxv, which
         * unwinding never needs. */
        __u64 start_stack = BPF_CORE_READ(task, mm, start_stack);
        if (start_stack > sp && start_stack < top)
            top = start_stack + 8;
        t->vma_lo = b.start;
        t->vma_hi = b.end;
        t->top = top;
        t->hints_seen = 0;
        t->hint_asked = 0;
    }
    __u32 gen = hints_gen;
    if (t->hints_seen == gen + 1) {
        *unneeded = t->unneeded;
        return top;
    }
    /* what lies above this thread's outermost frame, unwinding never needs
     * (a worker thread's TLS and thread descriptor: kilobytes) */
    struct np_stack_hint_key hk = {.pid = pid_tgid >> 32, .tid = (__u32)pid_tgid, .stack_top = top};
    __u32 *hint = bpf_map_lookup_elem(&stack_hints, &hk);
    *unneeded = hint ? *hint : 0;
    t->copy_paged = 0; /* a new bound: try one read again */
    t->unneeded = *unneeded;
    t->hints_seen = gen + 1;
    return top;
}

/* Also takes the return address and the stack arguments from the copy's
 * first words (or reads them). A global function: verified once, whatever
 * the caller's state, which keeps the program within the verifier's limits.
 * Returns the bytes copied. */
__noinline int copy_user_stack(struct np_launch_event *e, struct np_thread *t, __u64 pid_tgid) {
    if (!e || !t)
        return 0;
    __u64 len = stack_bytes, copied = 0, sp = e->sp;
    __u8 *dst = (__u8 *)&e->data[1];
    __u32 unneeded = 0;

    __u64 end = stack_top_of(sp, pid_tgid, t, &unneeded);
    e->stack_top = end;
    if (end > sp && end - sp < len)
        len = end - sp;
    if (unneeded && end > sp + unneeded && end - sp - unneeded < len) {
        len = end - sp - unneeded;
        e->flags |= NP_LF_STACK_HINTED;
    }
    if (len > NP_MAX_STACK_BYTES)
        len = NP_MAX_STACK_BYTES;
    __u64 chunk = NP_PAGE - (sp & (NP_PAGE - 1)); /* up to the first page boundary */
    /* Across pages, one read when every page is there, as it is below a
     * learned hint or the main thread's start_stack: each helper call costs
     * more than its bytes (the kernel's hardened-usercopy checks on the
     * destination). A failed read is remembered until the bound moves. */
    bool whole = false;
    if (len > chunk && !t->copy_paged) {
        whole = bpf_probe_read_user(dst, len, (void *)sp) == 0;
        if (whole)
            copied = len;
        else
            t->copy_paged = 1;
    }
    for (int i = 0; i <= NP_MAX_STACK_BYTES / NP_PAGE && !whole; i++) {
        if (chunk > len - copied)
            chunk = len - copied;
        if (chunk == 0 || chunk > NP_PAGE || copied > NP_MAX_STACK_BYTES - NP_PAGE)
            break;
        if (bpf_probe_read_user(dst + copied, chunk, (void *)(sp + copied)) != 0)
            break;
        copied += chunk;
        chunk = NP_PAGE;
    }
    if (copied == 0)
        e->flags |= NP_LF_STACK_ERR;
    if (e->flags & NP_LF_AT_MARKER) /* taken at the CUPTI marker: its arguments are CUPTI's */
        return copied;
    if (copied >= (1 + NP_STACK_ARGS) * sizeof(__u64)) {
        const __u64 *words = (const __u64 *)dst;
        e->ret_addr = words[0];
        for (int i = 0; i < NP_STACK_ARGS; i++)
            e->stack_args[i] = words[1 + i];
    } else {
        read_stack_args(e);
    }
    return copied;
}

/* ---- Python frames ------------------------------------------------------
 *
 * In a Python process (py_procs has its tgid), each launch also records the
 * calling thread's CPython frames: code object and instruction offset, innermost
 * first. The thread's PyThreadState is the one whose thread_id (pthread_self)
 * equals the thread's fsbase - found by walking every interpreter's thread
 * list, then cached per thread and re-checked with one read. The GIL holder
 * and TLS lookups are wrong here: launches run with the GIL released. Offsets
 * come from user space (struct np_py_cfg), so one walker serves 3.10-3.14.
 */

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __type(key, __u32);
    __type(value, struct np_py_cfg);
} py_procs SEC(".maps");

/* Python stacks (by their code objects) seen before. A new one wakes the
 * reader at once: code objects are read from the live process, and a
 * short-lived one (a script's module code) must be read before it is freed. */
struct py_stack_key {
    __u32 pid;
    __u32 pad;
    __u64 hash;
};

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 65536);
    __type(key, struct py_stack_key);
    __type(value, __u8);
} py_seen_stacks SEC(".maps");

/* The code objects of launch stacks (events.h, np_py_code_key), and how
 * many of them were freed: the seed of every Python stack's hash. */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 65536);
    __type(key, struct np_py_code_key);
    __type(value, __u8);
} py_stack_codes SEC(".maps");

/* How many of them each process freed (a slot per pid modulo its size: two
 * processes sharing one only see their stacks new once more than needed):
 * one process making and freeing code makes no other's stacks new. */
#define NP_PY_EPOCH_SLOTS 65536
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, NP_PY_EPOCH_SLOTS);
    __type(key, __u32);
    __type(value, __u64);
} py_code_epochs SEC(".maps");

static __always_inline __u64 *py_code_epoch(__u32 pid) {
    __u32 slot = pid & (NP_PY_EPOCH_SLOTS - 1);
    return bpf_map_lookup_elem(&py_code_epochs, &slot);
}

/* CPython frees the code object at code: one a launch stack held makes
 * every Python stack new again (the address may soon hold another). A
 * lookup first, which takes no lock: most frees are of code no launch ran
 * (a module's body after its import). */
static __always_inline void python_code_freed(__u64 pid_tgid, __u64 code) {
    struct np_py_code_key key = {.pid = pid_tgid >> 32, .code = code};
    if (!bpf_map_lookup_elem(&py_stack_codes, &key))
        return;
    bpf_map_delete_elem(&py_stack_codes, &key);
    struct np_py_code_event ev = {.code = code};
    fill_header(&ev.hdr, NP_EV_PY_CODE, sizeof(ev), pid_tgid, bpf_ktime_get_ns());
    if (bpf_ringbuf_output(&events, &ev, sizeof(ev), wakeup_flag(sizeof(ev))) != 0)
        count(NP_CNT_PY_CODE_DROPPED);
    /* after the record: a stack new by this epoch is read after it */
    __u64 *epoch = py_code_epoch(key.pid);
    if (epoch)
        __sync_fetch_and_add(epoch, 1);
    count(NP_CNT_PY_CODE_FREED);
}

/* Values stored from globals, not the stack: the verifier adds up the stacks
 * of np_entry, capture_python, frame_walk_step and walk_held (a bpf_loop
 * callback counts as a call), and together they get BPF's 512 bytes. Never
 * written. */
static struct np_handle_event empty_handle_call;
static struct np_graph_event empty_graph_call;
static const __u8 seen_value = 1; /* py_seen_stacks' values */

/* Frames are read one by one into bytes[], or, for 3.11+ frames in the
 * thread's data stack, taken from bulk[]: a copy of up to NP_PY_BULK_BYTES
 * of the stack chunk below (and including) the frame that missed it. The
 * extra NP_PY_FRAME_READ lets a masked offset plus a field stay inside. */
#define NP_PY_BULK_BYTES 16384 /* a power of two */

#define NP_PY_TSTATE_SPAN 512 /* the thread state's fields read at once (a power of two) */

/* A Python walk's state: scalars only, in the per-CPU buffer (py_frame_buf),
 * not on the stack - walk_held, a global function, takes it whole (its
 * memory arguments lose the pointers spilled in them). */
struct py_walk {
    __u64 frame;
    __u64 hash;       /* of the code objects walked */
    __u64 bulk_lo;    /* buf->bulk holds user memory [bulk_lo, bulk_hi) */
    __u64 bulk_hi;    /* 0: nothing */
    __u64 chunk_lo;   /* the data-stack chunk being walked: its frames' area */
    __u64 chunk_hi;   /* 0: none (frames are read one by one) */
    __u64 chunk_prev; /* the chunk before it */
    __u32 base;       /* data[] index of the first Python frame */
    __u32 taken;      /* frames walked by walk_held's last call */
    __u32 flags;      /* NP_LF_PY_* */
    __u32 read;       /* frames read, */
    __u32 bulk;       /* ... of them from buf->bulk */
};

/* A _PyStackChunk's header: {previous, size (bytes)}, then top, data[]. */
struct py_chunk_head {
    __u64 previous;
    __u64 size;
};

/* The thread state's fields the walk starts from. */
struct tstate_fields {
    __u64 thread_id, frame, chunk;
};

/* capture_python's memory: what it reads of user memory, and its own state
 * that need not be on the stack (see empty_handle_call). */
struct py_frame_buf {
    struct tstate_fields tf;
    struct py_walk walk;
    struct py_chunk_head chunk;
    struct py_stack_key seen;
    __u8 bytes[NP_PY_FRAME_READ + 8];
    __u8 bulk[NP_PY_BULK_BYTES + NP_PY_FRAME_READ];
    __u8 tstate[NP_PY_TSTATE_SPAN + 8];
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct py_frame_buf);
} py_frame_scratch SEC(".maps");

#define NP_PY_MAX_THREAD_STEPS 4096          /* thread states (and interpreters) visited */
#define NP_PY_NO_THREAD_RECHECK_NS 100000000 /* a thread without Python is re-checked after */
#define NP_DATA_WORDS (sizeof(((struct np_launch_event *)0)->data) / sizeof(__u64))

static __always_inline void count_n(__u32 which, __u64 n) {
    __u64 *v = bpf_map_lookup_elem(&counters, &which);
    if (v)
        *v += n;
}

static __always_inline __u64 read_user_u64(__u64 addr) {
    __u64 v = 0;
    if (bpf_probe_read_user(&v, sizeof(v), (void *)addr) != 0)
        return 0;
    return v;
}

struct thread_walk {
    const struct np_py_cfg *cfg;
    __u64 fsbase;
    __u64 interp;
    __u64 tstate;
    __u64 found;
};

static long thread_walk_step(__u32 i, void *ctx) {
    struct thread_walk *w = ctx;
    const struct np_py_cfg *cfg = w->cfg;

    if (w->tstate) {
        if (read_user_u64(w->tstate + cfg->tstate_thread_id) == w->fsbase) {
            w->found = w->tstate;
            return 1;
        }
        w->tstate = read_user_u64(w->tstate + cfg->tstate_next);
        return 0;
    }
    w->interp = read_user_u64(w->interp + cfg->interp_next);
    if (!w->interp)
        return 1;
    w->tstate = read_user_u64(w->interp + cfg->interp_threads);
    return 0;
}

/* The calling thread's PyThreadState, or 0, found by walking every
 * interpreter's thread list; remembered in the thread's state. */
static __always_inline __u64 find_thread_state(const struct np_py_cfg *cfg, struct np_thread *t,
                                               __u64 fsbase, __u64 now) {
    struct thread_walk w = {.cfg = cfg, .fsbase = fsbase};
    w.interp = read_user_u64(cfg->runtime + cfg->interp_head);
    if (w.interp) {
        w.tstate = read_user_u64(w.interp + cfg->interp_threads);
        bpf_loop(NP_PY_MAX_THREAD_STEPS, thread_walk_step, &w, 0);
    }
    t->py_state = w.found ? NP_THR_PY_FOUND : NP_THR_PY_NONE;
    t->py_tstate = w.found;
    t->py_checked = now;
    return w.found;
}

/* [addr, addr + len) in the launch's native stack copy, or NULL: user
 * memory the copy already holds (3.11/3.12's _PyCFrame and 3.12+'s entry
 * shim frames are locals of an eval loop's C frame). len <=
 * NP_PY_FRAME_READ, which callers may read up to. */
static __always_inline const __u8 *in_stack_copy(struct np_launch_event *e, __u64 addr, __u32 len) {
    __u64 off = addr - e->sp;
    if (addr < e->sp || off > NP_MAX_STACK_BYTES - NP_PY_FRAME_READ || off + len > e->stack_len)
        return NULL;
    barrier_var(off);
    return (const __u8 *)&e->data[1] + off;
}

/* bpf_loop's context for the walk: on capture_python's stack, which keeps
 * the pointers' types; the walk's scalars are in buf->walk (s). */
struct frame_walk {
    struct np_launch_event *e;
    const struct np_py_cfg *cfg;
    struct py_frame_buf *buf;
    struct py_walk *s; /* &buf->walk, kept: computed in frame_walk_step it
                        * costs that callback 8 more bytes of the 512 */
};

/* Loads the chunk at addr into w; false (w unchanged) when unreadable. */
static __always_inline bool load_chunk(struct frame_walk *w, __u64 addr) {
    struct py_chunk_head *h = &w->buf->chunk;
    if (!addr || bpf_probe_read_user(h, sizeof(*h), (void *)addr) != 0)
        return false;
    if (h->size <= w->cfg->chunk_data)
        return false;
    w->s->chunk_lo = addr + w->cfg->chunk_data;
    w->s->chunk_hi = addr + h->size;
    w->s->chunk_prev = h->previous;
    return true;
}

/* The thread's current chunk: its header from the thread's state when the
 * chunk is the one seen last, else read (and kept). */
static __always_inline void thread_chunk(struct frame_walk *w, struct np_thread *t, __u64 addr) {
    if (addr && addr == t->py_chunk && t->py_chunk_size > w->cfg->chunk_data) {
        w->s->chunk_lo = addr + w->cfg->chunk_data;
        w->s->chunk_hi = addr + t->py_chunk_size;
        w->s->chunk_prev = t->py_chunk_prev;
        return;
    }
    if (!load_chunk(w, addr))
        return;
    t->py_chunk = addr;
    t->py_chunk_prev = w->s->chunk_prev;
    t->py_chunk_size = w->s->chunk_hi - addr;
}

/* Copies the chunk holding [frame, end) from end downwards - at most
 * NP_PY_BULK_BYTES, never below the chunk's start - into buf->bulk. The
 * chunk is the current one, or the one before it (the walk has left the
 * current one for good then: older frames lie in older chunks). False:
 * frame is elsewhere (a generator's), or the copy failed. */
static __always_inline bool fill_bulk(struct frame_walk *w, __u64 frame, __u64 end) {
    if (!w->s->chunk_hi || frame >= end)
        return false;
    if (frame < w->s->chunk_lo || end > w->s->chunk_hi) {
        __u64 lo = w->s->chunk_lo, hi = w->s->chunk_hi, prev = w->s->chunk_prev;
        if (!load_chunk(w, prev))
            return false;
        if (frame < w->s->chunk_lo || end > w->s->chunk_hi) { /* not there either: stay */
            w->s->chunk_lo = lo, w->s->chunk_hi = hi, w->s->chunk_prev = prev;
            return false;
        }
    }
    __u64 start = end - w->s->chunk_lo > NP_PY_BULK_BYTES ? end - NP_PY_BULK_BYTES : w->s->chunk_lo;
    __u64 size = end - start;
    if (size > NP_PY_BULK_BYTES)
        return false;
    barrier_var(size); /* the bounded register is the one passed */
    if (bpf_probe_read_user(w->buf->bulk, size, (void *)start) != 0)
        return false;
    w->s->bulk_lo = start;
    w->s->bulk_hi = end;
    return true;
}

/* The frame's first len bytes: from the bulk copy when it holds them
 * (refilled from the data stack when the frame lies there), from the
 * native stack copy, else read on their own. NULL: unreadable. */
static __always_inline const __u8 *frame_bytes(struct frame_walk *w, __u64 frame, __u32 len) {
    __u64 end = frame + len;
    bool held = frame >= w->s->bulk_lo && end <= w->s->bulk_hi && frame < end;
    if (!held) {
        const __u8 *on_stack = in_stack_copy(w->e, frame, len);
        if (on_stack) {
            w->s->bulk++; /* from a copy: python_frames_from_bulk_reads */
            return on_stack;
        }
        if (!fill_bulk(w, frame, end)) {
            if (bpf_probe_read_user(w->buf->bytes, len, (void *)frame) != 0)
                return NULL;
            return w->buf->bytes;
        }
    }
    __u64 off = (frame - w->s->bulk_lo) & (NP_PY_BULK_BYTES - 1);
    barrier_var(off);
    w->s->bulk++;
    return w->buf->bulk + off;
}

static __always_inline __u64 buf_u64(const __u8 *buf, __u32 off) {
    if (off > NP_PY_FRAME_READ - 8)
        return 0;
    return *(const __u64 *)(buf + off);
}

static __always_inline __u8 buf_u8(const __u8 *buf, __u32 off) {
    if (off >= NP_PY_FRAME_READ)
        return 0;
    return buf[off];
}

static __always_inline __u32 *frame_flags_at(struct frame_walk *w, __u32 n) {
    __u64 idx = (__u64)w->s->base + 2 * (__u64)n;
    if (idx > NP_DATA_WORDS - 2)
        return NULL;
    barrier_var(idx);
    return (__u32 *)&w->e->data[idx + 1] + 1;
}

/* Frames walked at once from the bulk copy, by one call of walk_held
 * before frame_walk_step's general case: the frames of ordinary calls,
 * which the copy holds, with the walk's state in registers. */
#define NP_PY_HELD_FRAMES 64

/* Where CPython 3.12 and 3.13 keep a frame's previous, f_code/f_executable,
 * prev_instr/instr_ptr and owner: walked with these as constants, which
 * leaves the JIT's few registers to the walk: about 45 instructions a frame,
 * against 70 with the offsets in registers (spilled to the stack). */
#define NP_PY_FAST_PREV 0x8
#define NP_PY_FAST_CODE 0x0
#define NP_PY_FAST_INSTR 0x38
#define NP_PY_FAST_OWNER 0x46

/* Walks on while the frame lies in buf->bulk and is an ordinary frame with
 * code (3.12+: no is_entry, shims known by their owner); stops, leaving it
 * to the general case, at any other: outside the copy, a C-stack shim, no
 * code, over max_frames. Does what the general case does for each. The
 * bounds (frames left under max_frames, room in data[]) are checked once,
 * before the loop, so a frame costs one test of where it lies and one of
 * what it is. */
static __always_inline void walk_held_at(struct py_walk *h, struct np_launch_event *e,
                                         const __u8 *bulk, const struct np_py_cfg *cfg, __u32 len,
                                         __u32 prev_off, __u32 code_off, __u32 instr_off,
                                         __u32 owner_off) {
    __u32 n = e->n_py, max = cfg->max_frames;
    if (max > NP_PY_MAX_FRAMES)
        max = NP_PY_MAX_FRAMES;
    __u64 start = (__u64)h->base + 2 * (__u64)n; /* data[] index of the next frame */
    __u64 lo = h->bulk_lo, span = h->bulk_hi - lo;
    if (n >= max || start > NP_DATA_WORDS - 2 * NP_PY_HELD_FRAMES || span < len)
        return;
    barrier_var(start);
    span -= len; /* the highest offset a frame can start at and lie whole in the copy */
    __u32 room = max - n, k;
    __u64 frame = h->frame, hash = h->hash, adaptive = cfg->code_adaptive;
    __u8 shim = cfg->owner_shim;
    __u64 *out = &e->data[start];

    for (k = 0; k < NP_PY_HELD_FRAMES && k < room; k++) {
        __u64 off = frame - lo; /* below lo (or 0): wraps, above span */
        if (off > span)
            break;
        const __u8 *fb = bulk + (off & (NP_PY_BULK_BYTES - 1));
        __u64 code = *(const __u64 *)(fb + code_off) & ~7ull;
        if (fb[owner_off] >= shim || !code)
            break;
        out[2 * k] = code;
        out[2 * k + 1] = (__u32)(*(const __u64 *)(fb + instr_off) - (code + adaptive));
        hash = (hash ^ code) * 0x100000001b3ull;
        __u64 prev = *(const __u64 *)(fb + prev_off);
        frame = prev == frame ? 0 : prev; /* a corrupt chain must not spin */
    }
    h->frame = frame;
    h->hash = hash;
    h->taken = k;
    e->n_py = n + k; /* kept in the record: the verifier tracks no value there */
}

/* A global function, verified once whatever its caller's state: the walk
 * leaves it in as many states as frames it can take, and each would
 * otherwise carry the rest of the step through the verifier. */
__noinline int walk_held(struct py_walk *h, struct np_launch_event *e, struct py_frame_buf *buf,
                         const struct np_py_cfg *cfg, __u32 len) {
    if (!h || !e || !buf || !cfg)
        return 0;
    __u32 prev_off = cfg->frame_previous, code_off = cfg->frame_code, instr_off = cfg->frame_instr;
    __u32 owner_off = cfg->frame_owner;

    h->taken = 0;
    if (cfg->legacy_frames || cfg->frame_is_entry != NP_PY_NO_FIELD || len > NP_PY_FRAME_READ)
        return 0;
    if (prev_off == NP_PY_FAST_PREV && code_off == NP_PY_FAST_CODE &&
        instr_off == NP_PY_FAST_INSTR && owner_off == NP_PY_FAST_OWNER)
        walk_held_at(h, e, buf->bulk, cfg, len, NP_PY_FAST_PREV, NP_PY_FAST_CODE, NP_PY_FAST_INSTR,
                     NP_PY_FAST_OWNER);
    else if (prev_off <= NP_PY_FRAME_READ - 8 && code_off <= NP_PY_FRAME_READ - 8 &&
             instr_off <= NP_PY_FRAME_READ - 8 && owner_off < NP_PY_FRAME_READ)
        walk_held_at(h, e, buf->bulk, cfg, len, prev_off, code_off, instr_off, owner_off);
    return 0;
}

static long frame_walk_step(__u32 i, void *ctx) {
    struct frame_walk *w = ctx;
    const struct np_py_cfg *cfg = w->cfg;
    __u32 len = cfg->frame_read;

    if (len > NP_PY_FRAME_READ)
        len = NP_PY_FRAME_READ;
    walk_held(w->s, w->e, w->buf, cfg, len);
    w->s->read += w->s->taken;
    w->s->bulk += w->s->taken;
    if (!w->s->frame)
        return 1;
    __u64 frame = w->s->frame;
    const __u8 *fb = frame_bytes(w, frame, len);
    if (!fb) {
        w->s->flags |= NP_LF_PY_ERR;
        return 1;
    }
    w->s->read++;
    w->s->frame = buf_u64(fb, cfg->frame_previous);
    if (w->s->frame == frame) /* a corrupt chain must not spin */
        w->s->frame = 0;
    __u64 code = buf_u64(fb, cfg->frame_code) & ~7ull; /* 3.14: tagged _PyStackRef */
    if (cfg->frame_owner != NP_PY_NO_FIELD && buf_u8(fb, cfg->frame_owner) >= cfg->owner_shim) {
        /* the C-stack shim below a C activation's frames: ends that block */
        __u32 n = w->e->n_py;
        __u32 *prev_flags = n ? frame_flags_at(w, n - 1) : NULL;
        if (prev_flags)
            *prev_flags |= NP_PYF_ENTRY;
        return 0;
    }
    if (!code)
        return 0;
    __u32 n = w->e->n_py;
    if (n >= cfg->max_frames || n >= NP_PY_MAX_FRAMES) {
        w->s->flags |= NP_LF_PY_TRUNCATED;
        return 1;
    }
    __u64 idx = (__u64)w->s->base + 2 * (__u64)n;
    if (idx > NP_DATA_WORDS - 2)
        return 1;
    barrier_var(idx);
    __s32 instr;
    __u32 flags = 0;
    if (cfg->legacy_frames) { /* 3.10: f_lasti counts code units */
        __u64 lasti = buf_u64(fb, cfg->frame_instr);
        instr = (__s32)(__u32)lasti * 2;
        flags = NP_PYF_ENTRY;
    } else {
        instr = (__s32)(buf_u64(fb, cfg->frame_instr) - (code + cfg->code_adaptive));
        if (cfg->frame_is_entry != NP_PY_NO_FIELD && buf_u8(fb, cfg->frame_is_entry))
            flags = NP_PYF_ENTRY;
    }
    w->s->hash = (w->s->hash ^ code) * 0x100000001b3ull;
    w->e->data[idx] = code;
    w->e->data[idx + 1] = (__u64)(__u32)instr | ((__u64)flags << 32);
    w->e->n_py = n + 1;
    return 0;
}

static __always_inline __u64 span_u64(const __u8 *buf, __u32 off) {
    if (off > NP_PY_TSTATE_SPAN - 8)
        return 0;
    return *(const __u64 *)(buf + off);
}

/* Reads thread_id, the frame pointer and (chunked) datastack_chunk: one
 * read when they lie within NP_PY_TSTATE_SPAN bytes, as they do in every
 * version, else one by one. False: unreadable. */
static __always_inline bool read_tstate(const struct np_py_cfg *cfg, struct py_frame_buf *buf,
                                        __u64 tstate, bool chunked, struct tstate_fields *f) {
    __u32 id = cfg->tstate_thread_id, fr = cfg->tstate_frame, ch = cfg->tstate_chunk;
    __u32 lo = id < fr ? id : fr, hi = (id > fr ? id : fr) + 8;
    if (chunked) {
        lo = ch < lo ? ch : lo;
        hi = ch + 8 > hi ? ch + 8 : hi;
    }
    __u64 len = (__u64)hi - lo;
    if (len > NP_PY_TSTATE_SPAN) {
        f->thread_id = read_user_u64(tstate + id);
        f->frame = read_user_u64(tstate + fr);
        if (chunked) {
            f->chunk = read_user_u64(tstate + ch);
        }
        return f->thread_id != 0;
    }
    barrier_var(len);
    if (bpf_probe_read_user(buf->tstate, len, (void *)(tstate + lo)) != 0)
        return false;
    f->thread_id = span_u64(buf->tstate, id - lo);
    f->frame = span_u64(buf->tstate, fr - lo);
    if (chunked) {
        f->chunk = span_u64(buf->tstate, ch - lo);
    }
    return true;
}

/* 8 bytes of user memory at addr, from the launch's stack copy when they lie
 * in it (3.11/3.12's _PyCFrame is a local of the innermost eval loop). */
static __always_inline __u64 stack_or_user_u64(struct np_launch_event *e, __u64 addr) {
    const __u8 *held = in_stack_copy(e, addr, sizeof(__u64));
    return held ? *(const __u64 *)held : read_user_u64(addr);
}

/* Appends the thread's Python frames to e, after its stack (e->n_py).
 * A global function, verified once (see copy_user_stack). */
__noinline int capture_python(struct np_launch_event *e, const struct np_py_cfg *cfg,
                              struct np_thread *t, __u64 now) {
    __u32 zero = 0;
    struct py_frame_buf *buf = bpf_map_lookup_elem(&py_frame_scratch, &zero);
    if (!e || !cfg || !t || !buf)
        return 0;
    __u32 pid = bpf_get_current_pid_tgid() >> 32, stack_len = e->stack_len, n_ips = e->n_ips;
    if (stack_len > NP_MAX_STACK_BYTES || n_ips > NP_MAX_STACK)
        return 0;
    __u32 base = np_launch_py_index(n_ips, stack_len);
    e->n_py = 0;
    count(NP_CNT_PY_WALKS);
    __u64 fsbase = bpf_get_current_task_btf()->thread.fsbase;
    bool chunked = cfg->tstate_chunk != NP_PY_NO_FIELD && cfg->chunk_data != NP_PY_NO_FIELD;
    struct tstate_fields *f = &buf->tf; /* read before use, on every path */
    __u64 tstate = 0;
    /* the thread's state found before: checked with the same read that
     * gets the fields */
    if (t->py_state == NP_THR_PY_FOUND && read_tstate(cfg, buf, t->py_tstate, chunked, f) &&
        f->thread_id == fsbase)
        tstate = t->py_tstate;
    if (!tstate &&
        !(t->py_state == NP_THR_PY_NONE && now - t->py_checked < NP_PY_NO_THREAD_RECHECK_NS)) {
        tstate = find_thread_state(cfg, t, fsbase, now);
        __builtin_memset(f, 0, sizeof(*f));
        if (tstate && !read_tstate(cfg, buf, tstate, chunked, f))
            __builtin_memset(f, 0, sizeof(*f));
    }
    if (!tstate) {
        e->flags |= NP_LF_PY_NO_THREAD;
        count(NP_CNT_PY_NO_THREAD);
        return 0;
    }
    struct py_walk *s = &buf->walk;
    __builtin_memset(s, 0, sizeof(*s));
    s->base = base;
    __u64 *epoch = py_code_epoch(pid);
    s->hash = 0xcbf29ce484222325ull ^ (epoch ? *epoch : 0);
    s->frame = f->frame;
    struct frame_walk w = {.e = e, .cfg = cfg, .buf = buf, .s = s};
    if (s->frame && cfg->cframe_frame != NP_PY_NO_FIELD) /* 3.11/3.12: via tstate->cframe */
        s->frame = stack_or_user_u64(e, s->frame + cfg->cframe_frame);
    if (s->frame && chunked)
        thread_chunk(&w, t, f->chunk);
    bpf_loop(2 * NP_PY_MAX_FRAMES + 2, frame_walk_step, &w, 0);
    count_n(NP_CNT_PY_FRAMES, s->read);
    count_n(NP_CNT_PY_FRAMES_BULK, s->bulk);
    e->flags |= NP_LF_PY | s->flags;
    if (s->flags & NP_LF_PY_ERR)
        count(NP_CNT_PY_ERRORS);
    if (s->flags & NP_LF_PY_TRUNCATED)
        count(NP_CNT_PY_TRUNCATED);
    /* the thread's last stack was seen: most launches repeat it */
    if (!e->n_py || t->py_hash == s->hash)
        return 0;
    struct py_stack_key *key = &buf->seen;
    key->pid = pid;
    key->pad = 0;
    key->hash = s->hash;
    if (!bpf_map_lookup_elem(&py_seen_stacks, key)) {
        bpf_map_update_elem(&py_seen_stacks, key, &seen_value, BPF_ANY);
        e->flags |= NP_LF_PY_NEW;
        /* While this thread is in the launch its frames (and their code
         * objects) live; a script may free them right after. A process
         * ncclprobe started waits, stopped, until they are read. */
        if (cfg->hold)
            bpf_send_signal(NP_SIGSTOP);
    }
    t->py_hash = s->hash;
    return 0;
}

/* Whether the process walks Python frames: its py_procs entry, or NULL.
 * A thread keeps a copy of the entry, or that there is none, until user
 * space changes py_procs (py_gen). */
static __always_inline struct np_py_cfg *python_of(__u32 pid, struct np_thread *t) {
    __u32 gen = py_gen;
    if (t->py_seen != gen + 1) {
        struct np_py_cfg *py = bpf_map_lookup_elem(&py_procs, &pid);
        if (py)
            t->py_cfg = *py;
        t->py_is = py != NULL;
        t->py_seen = gen + 1;
    }
    return t->py_is ? &t->py_cfg : NULL;
}

/* ---- The agent's fast path (events.h) ---------------------------------- */

/* The processes on the fast path (tgid): user space's record of the switch
 * (np_attacher_fast_is_on); BPF needs no lookup of it, fast_cbids has a
 * process's entries only while it is on. */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 65536);
    __type(key, __u32); /* tgid */
    __type(value, __u32);
} fast_procs SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 65536);
    __type(key, struct np_fast_key);
    __type(value, struct np_fast_cfg);
} fast_cbids SEC(".maps");

/* The launch's arguments from CUPTI's params struct: its raw bytes in
 * args[] and stack_args[] (user space decodes them per callback id), and
 * the Ex launches' config, which the params point at, in deref[]. */
static __always_inline void take_params(struct np_launch_event *e, const struct np_fast_cfg *fast,
                                        __u64 params) {
    __u32 len = fast->params_len;
    __builtin_memset(e->args, 0, sizeof(e->args));
    __builtin_memset(e->stack_args, 0, sizeof(e->stack_args));
    if (len > NP_FAST_PARAMS_MAX)
        len = NP_FAST_PARAMS_MAX;
    _Static_assert(sizeof(e->args) + sizeof(e->stack_args) == NP_FAST_PARAMS_MAX, "params span");
    if (bpf_probe_read_user(e->args, len, (void *)params) != 0) {
        e->flags |= NP_LF_ARGS_ERR;
        return;
    }
    if (fast->deref_at < 0 || fast->deref_at > NP_FAST_PARAMS_MAX - 8)
        return;
    __u64 ptr = 0;
    bpf_probe_read_user(&ptr, sizeof(ptr), (void *)(params + fast->deref_at));
    __u32 dlen = fast->deref_len;
    if (dlen > NP_DEREF_BYTES)
        dlen = NP_DEREF_BYTES;
    if (ptr && bpf_probe_read_user(e->deref, dlen, (void *)ptr) != 0)
        e->flags |= NP_LF_DEREF_ERR;
}

/* A launch taken at the marker is nested when the thread is inside another
 * probed launch (ncclLaunchKernel calling cuLaunchKernelEx): flagged as
 * the int3 probe would, never made the thread's scope. */
static __always_inline void nested_in_scope(struct np_launch_event *e, const struct np_thread *t) {
    if (!(t->scope_flags & SCOPE_SENT) && scope_live(t, e->sp)) {
        e->flags |= NP_LF_NESTED;
        e->outer_probe = t->scope_probe;
    }
}

/* ts: the hit's time, shared with the NCCL plan record of the same hit;
 * launch_id: its number (next_launch_id), shared with plan_launches. */
/* fast: the launch is taken at the CUPTI marker (NP_LF_AT_MARKER): its
 * arguments come from CUPTI's params struct at `params`, not registers. */
static __always_inline int emit_launch(struct pt_regs *ctx, const struct np_probe_cfg *cfg,
                                       __u32 probe_id, __u64 pid_tgid, __u64 ts, __u64 launch_id,
                                       const struct np_fast_cfg *fast, __u64 params) {
    __u32 cpu = bpf_get_smp_processor_id();
    struct np_launch_event *e = bpf_map_lookup_elem(&launch_scratch, &cpu);
    if (!e)
        return 0;
    struct np_thread *t = this_thread();
    if (!t) { /* never: a per-CPU array's only slot */
        count(NP_CNT_LAUNCH_DROPPED);
        count_probe(&probe_drops, probe_id);
        return 0;
    }

    e->cpu = cpu;
    e->probe_id = probe_id;
    e->called_as = probe_id;
    e->outer_probe = 0;
    e->flags = 0;
    e->stack_err = 0;
    /* read in place: bpf_get_current_comm's copy costs more than the two loads */
    __builtin_memcpy(e->comm, bpf_get_current_task_btf()->comm, sizeof(e->comm));
    e->sp = PT_REGS_SP(ctx);
    e->bp = PT_REGS_FP(ctx);
    e->ret_addr = 0;
    e->corr_id = 0;
    e->launch_id = launch_id;
    __builtin_memset(e->deref, 0, sizeof(e->deref));
    if (fast) {
        /* the arguments (and the Ex launches' config) from CUPTI's params;
         * copy_user_stack leaves them be */
        e->flags |= NP_LF_AT_MARKER;
        take_params(e, fast, params);
        e->corr_id = (__u32)PT_REGS_PARM1(ctx);
    } else {
        read_reg_args(ctx, e->args);
    }
    __u32 n = 1, copied = 0;
    if (stack_bytes) {
        e->flags |= NP_LF_STACK_COPY;
        e->data[0] = PT_REGS_IP(ctx);
        int c = copy_user_stack(e, t, pid_tgid);
        copied = c > 0 && c <= NP_MAX_STACK_BYTES ? c : 0;
    } else {
        read_stack_args(e);
        n = capture_fp_stack(ctx, e);
        if (n > NP_MAX_STACK)
            n = NP_MAX_STACK;
    }
    /* after the stack arguments: the pointer may be one */
    if (!fast && cfg->deref_arg >= 0)
        copy_deref(e, cfg);
    e->n_ips = n;
    e->stack_len = copied;
    e->n_py = 0;

    if (fast) {
        e->called_as = fast->called_as;
        if (fast->called_as != probe_id)
            e->flags |= NP_LF_VIA_THUNK;
        nested_in_scope(e, t);
    } else if (cfg->role == NP_ROLE_LAUNCH) {
        take_thunk(e, t);
        track_scope(e, t, cfg->fast ? SCOPE_SENT : 0);
    }

    __u64 size = NP_LAUNCH_FIXED_SIZE + n * sizeof(__u64) + copied;
    __u32 pid = pid_tgid >> 32;
    struct np_py_cfg *py = python_of(pid, t);
    if (py) {
        capture_python(e, py, t, ts);
        __u32 n_py = e->n_py;
        if (n_py > NP_PY_MAX_FRAMES)
            n_py = 0;
        size = NP_LAUNCH_FIXED_SIZE + np_launch_py_index(n, copied) * sizeof(__u64) +
               n_py * sizeof(struct np_py_frame);
    }
    if (size > sizeof(*e))
        size = sizeof(*e);
    barrier_var(size); /* keep the bounded register for the verifier */
    fill_header(&e->hdr, NP_EV_LAUNCH, size, pid_tgid, ts);

    /* A stack copy no hint cut wakes the reader at once, once per thread
     * and stack mapping: the hint that cuts the thread's later copies is
     * learned from it, not after the next batch or poll (100 ms of
     * full-size copies on a thread launching flat out). */
    bool ask_hint =
        (e->flags & NP_LF_STACK_COPY) && !(e->flags & NP_LF_STACK_HINTED) && !t->hint_asked;
    bool wake_now = (e->flags & NP_LF_PY_NEW) || ask_hint;
    __u64 wake = wake_now ? BPF_RB_FORCE_WAKEUP : wakeup_flag(size);
    if (bpf_ringbuf_output(&events, e, size, wake) != 0) {
        count(NP_CNT_LAUNCH_DROPPED);
        count_probe(&probe_drops, e->called_as);
        return 0;
    }
    count(NP_CNT_LAUNCH_SENT);
    if (ask_hint)
        t->hint_asked = 1;
    if (fast)
        count(NP_CNT_FAST_LAUNCHES);
    return 0;
}

static __always_inline void remember_thunk(struct pt_regs *ctx, __u32 probe_id) {
    struct np_thread *t = this_thread();
    if (t) {
        t->thunk_sp = PT_REGS_SP(ctx);
        t->thunk_probe = probe_id;
        t->thunk_set = 1;
    }
    count(NP_CNT_THUNK_HITS);
}

static __always_inline void remember_handle_call(struct pt_regs *ctx,
                                                 const struct np_probe_cfg *cfg, __u32 probe_id,
                                                 __u32 tid) {
    struct call_key key = {.tid = tid, .sp = PT_REGS_SP(ctx)};
    if (bpf_map_update_elem(&handle_calls, &key, &empty_handle_call, BPF_ANY) != 0)
        return;
    struct np_handle_event *h = bpf_map_lookup_elem(&handle_calls, &key);
    if (!h)
        return;
    __u64 args[NP_REG_ARGS];
    read_reg_args(ctx, args);
    h->probe_id = probe_id;
    /* handle holds the out pointer until the return fills in the handle */
    h->handle = cfg->out_arg < NP_REG_ARGS ? args[cfg->out_arg] : 0;
    h->source = cfg->src_arg < NP_REG_ARGS ? args[cfg->src_arg] : 0;
    /* A name string is read at the return, not here (see on_return). */
}

static __always_inline void remember_graph_call(struct pt_regs *ctx, const struct np_probe_cfg *cfg,
                                                __u32 probe_id, __u32 tid) {
    struct call_key key = {.tid = tid, .sp = PT_REGS_SP(ctx)};
    if (bpf_map_update_elem(&graph_calls, &key, &empty_graph_call, BPF_ANY) != 0)
        return;
    struct np_graph_event *g = bpf_map_lookup_elem(&graph_calls, &key);
    if (!g)
        return;
    read_reg_args(ctx, g->args);
    g->probe_id = probe_id;
    g->op = cfg->graph_op;
    g->out = cfg->out_arg < NP_REG_ARGS ? g->args[cfg->out_arg] : 0;
}

#define CAPTURE_INVALIDATED 901 /* cudaErrorStreamCaptureInvalidated: that end ends it too */

/* A capture began, or ended, in process tgid (the runtime's and the
 * driver's calls both count: they balance). An end that failed otherwise
 * (wrong thread, not capturing) ended nothing. */
static __always_inline void track_capture(__u32 tgid, __u32 op, __s64 ret) {
    if (op == NP_GOP_END) {
        __s64 *n = bpf_map_lookup_elem(&active_captures, &tgid);
        if (n && *n > 0 && (ret == 0 || ret == CAPTURE_INVALIDATED))
            __sync_fetch_and_add(n, -1);
        return;
    }
    if ((op != NP_GOP_BEGIN && op != NP_GOP_BEGIN_TO_GRAPH) || ret != 0)
        return;
    __s64 one = 1;
    __s64 *n = bpf_map_lookup_elem(&active_captures, &tgid);
    if (!n && bpf_map_update_elem(&active_captures, &tgid, &one, BPF_NOEXIST) == 0)
        return;
    n = n ? n : bpf_map_lookup_elem(&active_captures, &tgid); /* another thread's came first */
    if (n)
        __sync_fetch_and_add(n, 1);
}

static __always_inline bool capturing(__u32 tgid) {
    __s64 *n = bpf_map_lookup_elem(&active_captures, &tgid);
    return n && *n > 0;
}

/* Event records and stream waits are frequent (every NCCL collective, the
 * caching allocator) and matter only while a capture is on in the process:
 * then they are sent at once, from the entry (no return probe). */
static __always_inline bool fork_or_join(__u32 op) {
    return op == NP_GOP_EVENT_RECORD || op == NP_GOP_STREAM_WAIT;
}

static __always_inline void graph_call_at_entry(struct pt_regs *ctx, const struct np_probe_cfg *cfg,
                                                __u32 probe_id, __u64 pid_tgid) {
    if (!capturing(pid_tgid >> 32))
        return;
    /* built in the ring, not on the stack (see empty_handle_call) */
    struct np_graph_event *g = bpf_ringbuf_reserve(&events, sizeof(*g), 0);
    if (!g) {
        count(NP_CNT_GRAPH_DROPPED);
        count_probe(&probe_drops, probe_id);
        return;
    }
    __builtin_memset(g, 0, sizeof(*g));
    g->probe_id = probe_id;
    g->op = cfg->graph_op;
    read_reg_args(ctx, g->args);
    fill_header(&g->hdr, NP_EV_GRAPH, sizeof(*g), pid_tgid, bpf_ktime_get_ns());
    bpf_ringbuf_submit(g, wakeup_flag(sizeof(*g)));
    count(NP_CNT_GRAPH_SENT);
}

/* The return of a capture or graph call: its record, with what its out
 * argument points at now. Sent whatever it returned (user space ignores
 * failed calls), and also while paused: graphs outlive recordings. */
static __always_inline int graph_call_returned(struct pt_regs *ctx, __u64 pid_tgid,
                                               __u32 probe_id) {
    struct call_key key = {.tid = (__u32)pid_tgid, .sp = PT_REGS_SP(ctx) - 8};
    struct np_graph_event *g = bpf_map_lookup_elem(&graph_calls, &key);
    if (!g)
        return 0;
    __u64 out_ptr = g->out;
    g->out = 0;
    if (out_ptr)
        bpf_probe_read_user(&g->out, sizeof(g->out), (void *)out_ptr);
    g->ret = (__s64)(__s32)PT_REGS_RC(ctx);
    track_capture(pid_tgid >> 32, g->op, g->ret);
    fill_header(&g->hdr, NP_EV_GRAPH, sizeof(*g), pid_tgid, bpf_ktime_get_ns());
    if (bpf_ringbuf_output(&events, g, sizeof(*g), wakeup_flag(sizeof(*g))) == 0) {
        count(NP_CNT_GRAPH_SENT);
    } else {
        count(NP_CNT_GRAPH_DROPPED);
        count_probe(&probe_drops, probe_id);
    }
    bpf_map_delete_elem(&graph_calls, &key);
    return 0;
}

/* The dynamic loader calls _dl_debug_state (its r_brk, the debugger hook)
 * inside dlopen once the new objects are mapped, before their constructors
 * run and before dlopen returns: wake user space now to probe them. */
static __always_inline void report_loader_change(__u64 pid_tgid, const struct np_probe_cfg *cfg) {
    struct np_map_event m = {};
    fill_header(&m.hdr, NP_EV_MAP, sizeof(m), pid_tgid, bpf_ktime_get_ns());
    if (bpf_ringbuf_output(&events, &m, sizeof(m), BPF_RB_FORCE_WAKEUP) != 0) {
        count(NP_CNT_MAP_DROPPED);
        return;
    }
    count(NP_CNT_MAP_SENT);
    /* A process ncclprobe started (-- CMD) waits, stopped, until the new
     * library is probed: its first launch is seen even right after dlopen.
     * User space continues it. Processes attached with --pid never stop. */
    if (cfg->hold)
        bpf_send_signal(NP_SIGSTOP);
}

/* ncclprobe_cupti_marker(correlation id, domain, cbid): our CUPTI library
 * calls it from its launch callback, on the launching thread, inside the
 * launch. The record follows the launch's own on this thread's ring order. */
static __always_inline void report_marker(struct pt_regs *ctx, __u64 pid_tgid) {
    struct np_marker_event m = {};
    fill_header(&m.hdr, NP_EV_MARKER, sizeof(m), pid_tgid, bpf_ktime_get_ns());
    m.correlation_id = (__u32)PT_REGS_PARM1(ctx);
    m.domain = (__u32)PT_REGS_PARM2(ctx);
    m.cbid = (__u32)PT_REGS_PARM3(ctx);
    if (bpf_ringbuf_output(&events, &m, sizeof(m), wakeup_flag(sizeof(m))) != 0) {
        count(NP_CNT_MARKER_DROPPED);
        return;
    }
    count(NP_CNT_MARKER_SENT);
}

/* ---- NCCL kernel plans --------------------------------------------------
 *
 * At ncclLaunchKernel / ncclLaunchCeColl / ncclLaunchRma, before the launch's own record,
 * one np_nccl_plan_event: raw bytes of the communicator, the plan, and each
 * task on the plan's task lists, at offsets user space read from the
 * library's DWARF (nccl_cfg, per probe id). The launch record follows it on
 * the ring: user space joins them by thread. */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __type(key, __u32);
    __type(value, struct np_nccl_cfg);
} nccl_cfg SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct np_nccl_plan_event);
} nccl_scratch SEC(".maps");

/* Which launch each plan went out with, for the flow probes (flows.h). */
NP_PLAN_LAUNCHES_MAP;

/* Set by user space when --nccl-flows loads the flow probes: only then is plan_launches kept. */
volatile __u32 plan_launch_ids;

struct task_walk {
    struct np_nccl_plan_event *e;
    const struct np_nccl_list_cfg *list;
    __u64 node;
    __u32 slot;  /* next free slot in e->tasks */
    __u32 count; /* nodes seen */
    __u32 copied;
};

static long task_walk_step(__u32 i, void *ctx) {
    struct task_walk *w = ctx;
    if (!w->node)
        return 1;
    __u32 slot = w->slot;
    if (slot < NP_NCCL_MAX_TASKS) {
        __u32 len = w->list->len;
        if (len > NP_NCCL_TASK_BYTES)
            len = NP_NCCL_TASK_BYTES;
        if (bpf_probe_read_user(w->e->tasks[slot], len, (void *)(w->node + w->list->lo)) != 0) {
            w->e->flags |= NP_NF_TASK_ERR;
            return 1;
        }
        w->slot = slot + 1;
        w->copied++;
    } else {
        w->e->flags |= NP_NF_TRUNCATED;
    }
    w->count++;
    __u64 next = read_user_u64(w->node + w->list->next);
    w->node = next == w->node ? 0 : next; /* a corrupt list must not spin */
    return 0;
}

static __always_inline void read_span(__u8 *dst, __u32 max, __u64 base, __u32 lo, __u32 len,
                                      __u32 *flags, __u32 err_flag) {
    if (len > max)
        len = max;
    if (!base || !len)
        return;
    if (bpf_probe_read_user(dst, len, (void *)(base + lo)) != 0)
        *flags |= err_flag;
}

static __always_inline void emit_nccl_plan(struct pt_regs *ctx, const struct np_nccl_cfg *cfg,
                                           __u32 probe_id, __u64 pid_tgid, __u64 ts,
                                           __u64 launch_id) {
    __u32 zero = 0;
    struct np_nccl_plan_event *e = bpf_map_lookup_elem(&nccl_scratch, &zero);
    if (!e)
        return;
    e->probe_id = probe_id;
    e->flags = 0;
    __u64 args[NP_REG_ARGS];
    read_reg_args(ctx, args);
    __u32 comm_arg = (__u8)cfg->comm_arg, plan_arg = (__u8)cfg->plan_arg;
    e->comm = comm_arg < NP_REG_ARGS ? args[comm_arg] : 0;
    e->plan = plan_arg < NP_REG_ARGS ? args[plan_arg] : 0;
    e->stream = 0;
    if (plan_launch_ids && e->plan) {
        struct np_plan_key key = {.plan = e->plan, .tgid = pid_tgid >> 32};
        bpf_map_update_elem(&plan_launches, &key, &launch_id, BPF_ANY);
    }
    __builtin_memset(e->comm_bytes, 0, sizeof(e->comm_bytes));
    __builtin_memset(e->plan_bytes, 0, sizeof(e->plan_bytes));
    __builtin_memset(e->aux_bytes, 0, sizeof(e->aux_bytes));
    read_span(e->comm_bytes, NP_NCCL_COMM_BYTES, e->comm, cfg->comm_lo, cfg->comm_len, &e->flags,
              NP_NF_COMM_ERR);
    if (e->comm && cfg->comm_streams != NP_NCCL_NO_FIELD) {
        __u64 list = 0;
        if (bpf_probe_read_user(&list, sizeof(list), (void *)(e->comm + cfg->comm_streams)) != 0 ||
            (list && bpf_probe_read_user(&e->stream, sizeof(e->stream),
                                         (void *)(list + cfg->stream_off)) != 0))
            e->flags |= NP_NF_STREAM_ERR;
    }
    read_span(e->plan_bytes, NP_NCCL_PLAN_BYTES, e->plan, cfg->plan_lo, cfg->plan_len, &e->flags,
              NP_NF_PLAN_ERR);
    if (e->plan && cfg->plan_aux != NP_NCCL_NO_FIELD && cfg->aux_len)
        read_span(e->aux_bytes, NP_NCCL_AUX_BYTES, read_user_u64(e->plan + cfg->plan_aux), 0,
                  cfg->aux_len, &e->flags, NP_NF_AUX_ERR);
    struct task_walk w = {.e = e};
    for (int l = 0; l < NP_NCCL_LISTS; l++) {
        const struct np_nccl_list_cfg *list = &cfg->lists[l];
        e->n_tasks[l] = 0;
        e->total[l] = 0;
        if (!e->plan || list->head == NP_NCCL_NO_FIELD)
            continue;
        w.list = list;
        w.node = read_user_u64(e->plan + list->head);
        w.count = w.copied = 0;
        bpf_loop(NP_NCCL_MAX_WALK, task_walk_step, &w, 0);
        e->n_tasks[l] = w.copied;
        e->total[l] = w.count;
    }
    __u64 size = NP_NCCL_PLAN_FIXED_SIZE + (__u64)w.slot * NP_NCCL_TASK_BYTES;
    if (size > sizeof(*e))
        size = sizeof(*e);
    barrier_var(size);
    /* the launch record carries the same ts: user space pairs them on it */
    fill_header(&e->hdr, NP_EV_NCCL_PLAN, size, pid_tgid, ts);
    if (bpf_ringbuf_output(&events, e, size, wakeup_flag(size)) != 0) {
        count(NP_CNT_NCCL_PLAN_DROPPED);
        return;
    }
    count(NP_CNT_NCCL_PLAN_SENT);
}

/* Set by user space when the recording stops: from then on nothing is
 * counted or sent, so the final counts add up without waiting for the
 * (slow) removal of every uprobe. */
volatile __u32 stopped;

/* Set by the daemon while nothing is being recorded (no window, no
 * always-on aggregation): launches and API calls return at once, while
 * handle producers, markers and library loads are still followed - so a
 * window opened later names kernels of handles made before it. */
volatile __u32 paused;

/* True when this hit is over the probe's rate limit (counted, not sent);
 * never while a capture is on in the process (a graph must be whole). */
static __always_inline bool over_rate_limit(__u32 probe_id, __u64 now, __u32 tgid) {
    __u32 limit = rate_limit;
    if (!limit)
        return false;
    struct np_rate_window *w = bpf_map_lookup_elem(&probe_rate, &probe_id);
    if (!w)
        return false;
    if (now - w->start_ns >= 1000000000ull) { /* a new second (racy across CPUs: approximate) */
        w->start_ns = now;
        w->sent = 0;
    }
    if (__sync_fetch_and_add(&w->sent, 1) < limit || capturing(tgid))
        return false;
    count(NP_CNT_RATE_LIMITED);
    count_probe(&probe_limited, probe_id);
    return true;
}

/* ncclprobe_cupti_marker(corr, domain, cbid, params): params is set for the
 * outermost launch API call of the thread (NULL for the driver call a
 * runtime launch makes). The marker sends the whole launch when the
 * process is on the fast path and no int3 probe sent this call already:
 * an int3 hit of a fast-path launch probe leaves its scope (SCOPE_SENT),
 * which the first marker inside that call consumes. So at every switch
 * (user space sets fast_procs, then detaches the int3 probes; attaches them
 * again, then clears it) each launch is sent once: by its int3 hit, or by
 * its marker. Returns false when the marker only names its correlation id. */
static __always_inline struct np_fast_cfg *take_at_marker(struct pt_regs *ctx, __u64 pid_tgid,
                                                          __u32 *probe_id,
                                                          struct np_probe_cfg **cfgp, __u64 *ts) {
    __u64 params = PT_REGS_PARM4(ctx);
    __u32 pid = pid_tgid >> 32;
    if (!params || !stack_bytes) /* frame-pointer stacks: the int3 path only */
        return NULL;
    /* no storage yet: the thread has no scope (a lookup, not a creation). Every
     * marker consumes its call's scope, on the fast path or not: a scope an int3
     * hit left before the switch must not decide for a later call at the same
     * call site (same stack pointer, same return address) */
    struct np_thread *t = bpf_task_storage_get(&thread_state, bpf_get_current_task_btf(), 0, 0);
    if (t && (t->scope_flags & SCOPE_SENT) && !(t->scope_flags & SCOPE_CONSUMED) &&
        scope_live(t, PT_REGS_SP(ctx))) {
        t->scope_flags |= SCOPE_CONSUMED;
        return NULL;
    }
    /* fast_cbids holds a process's callback ids only while it is on the fast
     * path (user space writes them where it turns the path on, deletes them
     * where it turns it off): one lookup says both */
    struct np_fast_key key = {
        .pid = pid, .domain = (__u32)PT_REGS_PARM2(ctx), .cbid = (__u32)PT_REGS_PARM3(ctx)};
    struct np_fast_cfg *fast = bpf_map_lookup_elem(&fast_cbids, &key);
    if (!fast)
        return NULL;
    __u32 id = fast->probe_id;
    struct np_probe_cfg *cfg = bpf_map_lookup_elem(&probe_cfg, &id);
    if (!cfg || cfg->pid != pid)
        return NULL;
    count_probe(&probe_hits, fast->called_as);
    if (paused && !capturing(pid))
        return NULL;
    __u64 now = bpf_ktime_get_ns();
    if (over_rate_limit(id, now, pid))
        return NULL;
    count(NP_CNT_LAUNCH_HITS);
    *probe_id = id;
    *cfgp = cfg;
    *ts = now;
    return fast;
}

/* Numbers the hits that send a launch record: launches.jsonl's launch_id. */
__u64 launch_ids;

static __always_inline __u64 next_launch_id(void) {
    return __sync_fetch_and_add(&launch_ids, 1) + 1;
}

static __always_inline int on_entry(struct pt_regs *ctx) {
    __u32 probe_id = (__u32)bpf_get_attach_cookie(ctx);
    __u64 pid_tgid = bpf_get_current_pid_tgid();

    if (stopped)
        return 0;
    struct np_probe_cfg *cfg = bpf_map_lookup_elem(&probe_cfg, &probe_id);
    if (!cfg)
        return 0;
    if (cfg->pid != pid_tgid >> 32) {
        count(NP_CNT_FOREIGN_HITS);
        return 0;
    }
    count_probe(&probe_hits, probe_id);

    struct np_fast_cfg *fast = NULL;
    __u64 launch_ts = 0, launch_id = 0, params = 0;
    switch (cfg->role) {
    case NP_ROLE_LAUNCH: {
        /* while a capture is on in the process its launches all go: the
         * graph's nodes must be complete */
        if (paused && !capturing(pid_tgid >> 32))
            return 0;
        __u64 ts = bpf_ktime_get_ns();
        if (over_rate_limit(probe_id, ts, pid_tgid >> 32))
            return 0;
        launch_id = next_launch_id();
        struct np_nccl_cfg *nccl =
            cfg->nccl_plan ? bpf_map_lookup_elem(&nccl_cfg, &probe_id) : NULL;
        if (nccl)
            emit_nccl_plan(ctx, nccl, probe_id, pid_tgid, ts, launch_id);
        count(NP_CNT_LAUNCH_HITS);
        launch_ts = ts;
        break;
    }
    case NP_ROLE_API: {
        if (paused)
            return 0;
        __u64 ts = bpf_ktime_get_ns();
        if (over_rate_limit(probe_id, ts, pid_tgid >> 32))
            return 0;
        count(NP_CNT_LAUNCH_HITS);
        launch_ts = ts;
        break;
    }
    case NP_ROLE_THUNK:
        remember_thunk(ctx, probe_id);
        return 0;
    case NP_ROLE_HANDLE_ENTRY:
        remember_handle_call(ctx, cfg, probe_id, (__u32)pid_tgid);
        return 0;
    case NP_ROLE_GRAPH_CALL:
        if (fork_or_join(cfg->graph_op))
            graph_call_at_entry(ctx, cfg, probe_id, pid_tgid);
        else
            remember_graph_call(ctx, cfg, probe_id, (__u32)pid_tgid);
        return 0;
    case NP_ROLE_LOADER:
        report_loader_change(pid_tgid, cfg);
        return 0;
    case NP_ROLE_PY_CODE_FREE:
        python_code_freed(pid_tgid, PT_REGS_PARM1(ctx));
        return 0;
    case NP_ROLE_MARKER:
        fast = take_at_marker(ctx, pid_tgid, &probe_id, &cfg, &launch_ts);
        if (!fast) {
            report_marker(ctx, pid_tgid);
            return 0;
        }
        params = PT_REGS_PARM4(ctx);
        break;
    default:
        return 0;
    }
    /* one call site for every launch record: the verifier walks it (its stack copy, its
     * Python walk) once, not once per role */
    if (!launch_id)
        launch_id = next_launch_id();
    return emit_launch(ctx, cfg, probe_id, pid_tgid, launch_ts, launch_id, fast, params);
}

static __always_inline int on_return(struct pt_regs *ctx) {
    __u32 probe_id = (__u32)bpf_get_attach_cookie(ctx);
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    __u32 tid = (__u32)pid_tgid;

    if (stopped)
        return 0;
    struct np_probe_cfg *cfg = bpf_map_lookup_elem(&probe_cfg, &probe_id);
    if (!cfg || cfg->pid != pid_tgid >> 32)
        return 0;
    count_probe(&probe_hits, probe_id);
    if (cfg->role == NP_ROLE_GRAPH_CALL)
        return graph_call_returned(ctx, pid_tgid, probe_id);

    struct call_key key = {.tid = tid, .sp = PT_REGS_SP(ctx) - 8};
    struct np_handle_event *h = bpf_map_lookup_elem(&handle_calls, &key);
    if (!h)
        return 0;
    __u64 out_ptr = h->handle;
    h->handle = 0;
    if (out_ptr)
        bpf_probe_read_user(&h->handle, sizeof(h->handle), (void *)out_ptr);
    fill_header(&h->hdr, NP_EV_HANDLE, sizeof(*h), pid_tgid, bpf_ktime_get_ns());
    /* A call that produced nothing (it failed) names nothing. */
    if (h->handle) {
        /* The name is read now, once the driver has looked it up: at the
         * entry its page may not be mapped in the process yet (the first
         * name a program passes, from .rodata it never touched), and a BPF
         * read cannot fault it in - that first kernel stayed unnamed. */
        if (cfg->src_kind == NP_SRC_STRING && h->source) {
            long n = bpf_probe_read_user_str(h->name, sizeof(h->name), (void *)h->source);
            h->name_err = n < 0 ? n : 0;
        }
        if (bpf_ringbuf_output(&events, h, sizeof(*h), wakeup_flag(sizeof(*h))) == 0) {
            count(NP_CNT_HANDLE_SENT);
        } else {
            count(NP_CNT_HANDLE_DROPPED);
            count_probe(&probe_drops, probe_id);
        }
    }
    bpf_map_delete_elem(&handle_calls, &key);
    return 0;
}

/* The same programs twice: attached one uprobe per perf event (any kernel
 * with uprobe cookies), or many uprobes per uprobe_multi link (Linux 6.6+;
 * user space loads these with that attach type). */
SEC("uprobe")
int np_entry(struct pt_regs *ctx) {
    return on_entry(ctx);
}

SEC("uretprobe")
int np_return(struct pt_regs *ctx) {
    return on_return(ctx);
}

SEC("uprobe")
int np_entry_multi(struct pt_regs *ctx) {
    return on_entry(ctx);
}

SEC("uretprobe")
int np_return_multi(struct pt_regs *ctx) {
    return on_return(ctx);
}
