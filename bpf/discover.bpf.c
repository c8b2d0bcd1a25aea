// SPDX-License-Identifier: GPL-2.0
/* discover.bpf.c - system-wide notifications for `ncclprobe daemon`: every
 * exec, and every executable file mapping whose file name starts with a
 * CUDA/NCCL library prefix. The daemon then reads /proc/PID/maps and
 * attaches its uprobes (bpf/ncclprobe.bpf.c) to that process.
 *
 * mmap is seen at the system call, two ways, chosen by user space
 * (src/daemon/discover.c):
 * - BTF-enabled raw tracepoints (tp_btf): need only /sys/kernel/btf/vmlinux,
 *   which ncclprobe requires anyway, and no tracefs. One program at
 *   sys_exit, which fires for every system call: it compares the call number
 *   first. At mmap's exit the registers still hold prot and fd, the fd is
 *   open and the mapping exists. (An entry program as well cost 140 ns per
 *   system call where this one costs 100: docs/daemon.md.)
 * - the syscalls/sys_{enter,exit}_mmap tracepoints, where tp_btf cannot be
 *   loaded: the entry decides whether the file is interesting, the exit
 *   sends the record. These need tracefs for their ids (user space mounts
 *   it privately).
 * Tracepoints, not kprobes or fentry: they exist on every kernel we support,
 * also those built without kprobes or that refuse fentry. Nothing here ever
 * delays the caller beyond a map lookup and, for matching files only, one
 * record. */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "ncclprobe/discover.h"

char LICENSE[] SEC("license") = "GPL";

#define NP_PROT_EXEC 0x4

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 256 * 1024);
} disc_events SEC(".maps");

/* Set by user space: which file names matter (struct np_disc_prefix). */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, NP_DISC_MAX_PREFIXES);
    __type(key, __u32);
    __type(value, struct np_disc_prefix);
} lib_prefixes SEC(".maps");

/* tid -> the base name of the file its mmap() in progress maps. */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 4096);
    __type(key, __u32);
    __type(value, struct np_disc_event);
} mmap_in_flight SEC(".maps");

/* Records that did not fit in the ring buffer (user space rescans then). */
__u64 lost_records = 0;

struct sys_enter_mmap_args {
    __u64 common;
    __s32 nr;
    __u32 pad;
    __u64 addr, len, prot, flags, fd, off;
};

struct sys_exit_args {
    __u64 common;
    __s32 nr;
    __u32 pad;
    __s64 ret;
};

static __always_inline bool has_prefix(const char *name, __u32 index) {
    struct np_disc_prefix *p = bpf_map_lookup_elem(&lib_prefixes, &index);
    if (!p || p->len == 0 || p->len > NP_DISC_PREFIX_LEN)
        return false;
    for (__u32 i = 0; i < NP_DISC_PREFIX_LEN; i++) {
        if (i >= p->len)
            return true;
        if (name[i] != p->text[i])
            return false;
    }
    return true;
}

static __always_inline bool interesting(const char *name) {
    for (__u32 i = 0; i < NP_DISC_MAX_PREFIXES; i++)
        if (has_prefix(name, i))
            return true;
    return false;
}

/* The base name of the file open on fd in the calling process. */
static __always_inline int fd_name(__u64 fd, char *out) {
    struct task_struct *task = (struct task_struct *)bpf_get_current_task();
    struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
    if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
        return -1;
    struct file **fds = BPF_CORE_READ(fdt, fd);
    struct file *file = NULL;
    if (bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]) < 0 || !file)
        return -1;
    const unsigned char *name = BPF_CORE_READ(file, f_path.dentry, d_name.name);
    return bpf_probe_read_kernel_str(out, NP_DISC_NAME_LEN, name) > 0 ? 0 : -1;
}

static __always_inline void send(struct np_disc_event *ev) {
    struct np_disc_event *rec = bpf_ringbuf_reserve(&disc_events, sizeof(*rec), 0);
    if (!rec) {
        __sync_fetch_and_add(&lost_records, 1);
        return;
    }
    __builtin_memcpy(rec, ev, sizeof(*rec));
    bpf_ringbuf_submit(rec, 0);
}

/* A process exec'd: its new comm goes with the record. */
static __always_inline void send_exec(void) {
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    struct np_disc_event ev = {
        .kind = NP_DISC_EXEC,
        .pid = pid_tgid >> 32,
        .tid = (__u32)pid_tgid,
        .ts_ns = bpf_ktime_get_ns(),
    };
    bpf_get_current_comm(ev.name, sizeof(ev.name));
    send(&ev);
}

/* The record of an executable mapping of fd, when its file is one we want. */
static __always_inline bool mmap_record(__u64 prot, __u64 fd, struct np_disc_event *ev) {
    if (!(prot & NP_PROT_EXEC) || (__s64)fd < 0)
        return false;
    if (fd_name(fd, ev->name) < 0 || !interesting(ev->name))
        return false;
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    ev->kind = NP_DISC_MMAP;
    ev->pid = pid_tgid >> 32;
    ev->tid = (__u32)pid_tgid;
    return true;
}

/* The entry of mmap(fd, prot): remembers the file if it is one we want. */
static __always_inline void mmap_enter(__u64 prot, __u64 fd) {
    struct np_disc_event ev = {};
    if (mmap_record(prot, fd, &ev))
        bpf_map_update_elem(&mmap_in_flight, &ev.tid, &ev, BPF_ANY);
}

/* The exit of a remembered mmap: the mapping exists now, if it succeeded. */
static __always_inline void mmap_exit(__s64 ret) {
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    struct np_disc_event *ev = bpf_map_lookup_elem(&mmap_in_flight, &tid);
    if (!ev)
        return;
    if (ret >= 0 || ret < -4095) { /* an address, not -errno */
        ev->ts_ns = bpf_ktime_get_ns();
        send(ev);
    }
    bpf_map_delete_elem(&mmap_in_flight, &tid);
}

/* ---- BTF-enabled raw tracepoints: no tracefs needed ---------------------- */

/* A successful mmap(fd, prot) returned: reports the file if it is one we want. */
static __always_inline void mmap_done(__u64 prot, __u64 fd) {
    struct np_disc_event ev = {};
    if (!mmap_record(prot, fd, &ev))
        return;
    ev.ts_ns = bpf_ktime_get_ns();
    send(&ev);
}

#define NP_NR_MMAP 9 /* x86-64 */

SEC("tp_btf/sys_exit")
int BPF_PROG(np_btf_sys_exit, struct pt_regs *regs, long ret) {
    if (regs->orig_ax != NP_NR_MMAP) /* a trusted BTF pointer: a plain load */
        return 0;
    /* mmap(addr, len, prot, flags, fd, off): the registers still hold the
     * arguments (prot in rdx, fd in r8), the fd is still open, and the
     * mapping exists now. */
    if (ret < 0 && ret >= -4095)
        return 0;
    mmap_done(regs->dx, regs->r8);
    return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(np_btf_exec) {
    send_exec();
    return 0;
}

/* ---- tracefs tracepoints: the fallback ----------------------------------- */

SEC("tracepoint/syscalls/sys_enter_mmap")
int np_mmap_enter(struct sys_enter_mmap_args *args) {
    mmap_enter(args->prot, args->fd);
    return 0;
}

SEC("tracepoint/syscalls/sys_exit_mmap")
int np_mmap_exit(struct sys_exit_args *args) {
    mmap_exit(args->ret);
    return 0;
}

SEC("tracepoint/sched/sched_process_exec")
int np_exec(void *args) {
    send_exec();
    return 0;
}
