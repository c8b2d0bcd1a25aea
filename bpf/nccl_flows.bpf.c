// SPDX-License-Identifier: GPL-2.0
/* nccl_flows.bpf.c - the proxy-flow probes of --nccl-flows, a BPF object of
 * its own (loaded only then, so the default path costs nothing): one
 * program on ncclProxySaveOp (an op posted to NCCL's proxy thread) and one
 * on SaveProxy (each direction and peer the proxy progresses). Both copy
 * the ncclProxyOp and the communicator's identity at the offsets user
 * space read from the library's DWARF (flow_cfg, include/ncclprobe/flows.h);
 * BPF knows no NCCL struct. Never blocks, never fails the target: a full
 * ring buffer is counted in flow_drops. A third program, on uploadProxyOps
 * (comm, plan), names the launch the posted ops belong to; a fourth, on
 * ncclLaunchKernel, sends a communicator's topology at its first kernel. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "ncclprobe/flows.h"

char LICENSE[] SEC("license") = "GPL";

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 8 * 1024 * 1024);
} flow_events SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, NP_FLOW_MAX_LIBS);
    __type(key, __u32);
    __type(value, struct np_flow_cfg);
} flow_cfg SEC(".maps");

/* Communicators whose topology was sent: {address, tgid} (the same address may be a
 * communicator in two processes). */
struct comm_key {
    __u64 comm;
    __u32 tgid;
    __u32 pad;
};

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 4096);
    __type(key, struct comm_key);
    __type(value, __u8);
} topo_sent SEC(".maps");

/* The main object's map (user space reuses its fd): plan -> launch_id. */
NP_PLAN_LAUNCHES_MAP;

/* Per thread: the uploadProxyOps activation it is in, and its plan's launch. */
struct upload_scope {
    __u64 sp;  /* the stack pointer at its entry */
    __u64 ret; /* the return address there: still in place while it runs */
    __u64 launch_id;
};

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 16384);
    __type(key, __u32);
    __type(value, struct upload_scope);
} upload_scopes SEC(".maps");

/* [0]: records sent, [1]: lost (ring buffer full) */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 2);
    __type(key, __u32);
    __type(value, __u64);
} flow_counts SEC(".maps");

static __always_inline void count(__u32 which) {
    __u64 *n = bpf_map_lookup_elem(&flow_counts, &which);
    if (n)
        (*n)++;
}

static __always_inline __u64 read_ptr(__u64 addr) {
    __u64 v = 0;
    if (bpf_probe_read_user(&v, sizeof(v), (void *)addr) != 0)
        return 0;
    return v;
}

static __always_inline __s32 read_s32(__u64 addr) {
    __s32 v = -1;
    bpf_probe_read_user(&v, sizeof(v), (void *)addr);
    return v;
}

/* Copies len (at most cap) bytes from addr; how many were copied (0: none). */
static __always_inline __u32 copy(void *dst, __u64 cap, __u64 len, __u64 addr) {
    if (len == 0 || len > cap)
        return 0;
    barrier_var(len); /* the bounded register is the one passed */
    return bpf_probe_read_user(dst, len, (void *)addr) == 0 ? (__u32)len : 0;
}

/* The launch whose plan this thread is posting, when the thread is inside
 * uploadProxyOps (below its entry stack pointer, the return address still
 * there); 0: not inside one, or the plan's launch was not seen. */
static __always_inline __u64 current_launch(struct pt_regs *ctx, __u32 tid) {
    struct upload_scope *u = bpf_map_lookup_elem(&upload_scopes, &tid);
    if (!u || PT_REGS_SP(ctx) >= u->sp || read_ptr(u->sp) != u->ret)
        return 0;
    return u->launch_id;
}

/* Reserves and fills the common part; NULL when the ring is full. */
static __always_inline struct np_flow_event *start(struct pt_regs *ctx,
                                                   const struct np_flow_cfg *cfg, __u32 kind,
                                                   __u32 slot, __u64 comm, __u64 op) {
    struct np_flow_event *e = bpf_ringbuf_reserve(&flow_events, sizeof(*e), 0);
    if (!e) {
        count(1);
        return NULL;
    }
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    e->kind = kind;
    e->slot = slot;
    e->pid = pid_tgid >> 32;
    e->tid = (__u32)pid_tgid;
    e->ts_ns = bpf_ktime_get_ns();
    e->comm = comm;
    e->launch_id = current_launch(ctx, e->tid);
    e->type = e->peer = e->conn_index = e->channel = e->tree_up = -1;
    e->pad = 0;
    e->comm_len = copy(e->comm_bytes, NP_FLOW_COMM_BYTES, cfg->comm_len, comm + cfg->comm_lo);
    e->op_len = copy(e->op, NP_FLOW_OP_BYTES, cfg->op_len, op + cfg->op_lo);
    return e;
}

static __always_inline void send(struct np_flow_event *e) {
    bpf_ringbuf_submit(e, 0);
    count(0);
}

static __always_inline __s32 read_opt_s32(__u64 base, __u32 off) {
    return off == NP_FLOW_NO_FIELD ? -1 : read_s32(base + off);
}

static __always_inline void copy_channel(const struct np_flow_cfg *cfg, __u64 ch, __s32 nranks,
                                         struct np_flow_topo_channel *t) {
    copy(t->span, NP_FLOW_CH_SPAN, cfg->ch_span_len, ch + cfg->ch_span_lo);
    t->nvls_out = read_opt_s32(ch, cfg->ch_nvls_out);
    t->chain_up = read_opt_s32(ch, cfg->ch_chain_up);
    t->direct_out = read_opt_s32(ch, cfg->ch_direct_out);
    __u64 user = read_ptr(ch + cfg->ch_user_ranks);
    __u64 n = nranks > 0 ? (nranks < NP_FLOW_TOPO_RANKS ? nranks : NP_FLOW_TOPO_RANKS) : 0;
    t->nuser = user ? copy(t->user_ranks, sizeof(t->user_ranks), n * 4, user) / 4 : 0;
}

/* The communicator's channels, once per communicator (its first kernel or posted op). */
static __always_inline void send_topology(const struct np_flow_cfg *cfg, __u32 slot, __u64 comm) {
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    struct comm_key key = {.comm = comm, .tgid = pid_tgid >> 32};
    __u8 one = 1;
    if (!comm || bpf_map_update_elem(&topo_sent, &key, &one, BPF_NOEXIST) != 0)
        return;
    struct np_flow_topo_event *e = bpf_ringbuf_reserve(&flow_events, sizeof(*e), 0);
    if (!e) {
        count(1);
        bpf_map_delete_elem(&topo_sent, &key);
        return;
    }
    e->kind = NP_FLOW_EV_TOPO;
    e->slot = slot;
    e->pid = pid_tgid >> 32;
    e->tid = (__u32)pid_tgid;
    e->ts_ns = bpf_ktime_get_ns();
    e->comm = comm;
    e->pad = 0;
    e->comm_len = copy(e->comm_bytes, NP_FLOW_COMM_BYTES, cfg->comm_len, comm + cfg->comm_lo);
    e->nchannels = read_s32(comm + cfg->comm_nchannels);
    e->nranks = read_s32(comm + cfg->comm_nranks);
    for (int c = 0; c < NP_FLOW_MAX_CHANNELS; c++) {
        if (c >= e->nchannels)
            break;
        copy_channel(cfg, comm + cfg->comm_channels + (__u64)c * cfg->ch_size, e->nranks,
                     &e->ch[c]);
    }
    bpf_ringbuf_submit(e, 0);
    count(0);
}

SEC("uprobe")
int np_flow_save_op(struct pt_regs *ctx) {
    __u32 slot = (__u32)bpf_get_attach_cookie(ctx);
    const struct np_flow_cfg *cfg = bpf_map_lookup_elem(&flow_cfg, &slot);
    /* justInquire != NULL: planning asks whether the op needs the proxy; nothing is posted */
    if (!cfg || PT_REGS_PARM3(ctx) != 0)
        return 0;
    send_topology(cfg, slot, PT_REGS_PARM1(ctx));
    struct np_flow_event *e =
        start(ctx, cfg, NP_FLOW_EV_OP, slot, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx));
    if (e)
        send(e);
    return 0;
}

/* The proxy progresses this connector (net, collnet...), not P2P / NVLink / SHM. */
static __always_inline bool proxied(const struct np_flow_cfg *cfg, __u64 channel, __s32 type,
                                    __s32 peer, __s32 conn_index) {
    if (peer < 0 || peer > 65536 || conn_index < 0 || conn_index > 8)
        return false;
    __u64 peers = read_ptr(channel + cfg->ch_peers);
    __u64 p = peers ? read_ptr(peers + 8 * (__u64)peer) : 0;
    if (!p)
        return false;
    __u64 conn =
        p + (type == 1 ? cfg->peer_send : cfg->peer_recv) + (__u64)conn_index * cfg->conn_size;
    return read_ptr(conn + cfg->conn_progress) != 0;
}

SEC("uprobe")
int np_flow_save_proxy(struct pt_regs *ctx) {
    __u64 cookie = bpf_get_attach_cookie(ctx);
    __u32 slot = (__u32)cookie, probe = cookie >> 32;
    const struct np_flow_cfg *cfg = bpf_map_lookup_elem(&flow_cfg, &slot);
    if (!cfg)
        return 0;
    __u64 sp = PT_REGS_SP(ctx), channel, op, inquire;
    __s32 type, peer, conn_index;
    if (probe == NP_FLOW_PROBE_SAVE_PROXY_ISRA) {
        channel = PT_REGS_PARM2(ctx) - cfg->ch_peers; /* &channel->peers */
        type = (__s32)PT_REGS_PARM4(ctx);
        peer = (__s32)PT_REGS_PARM5(ctx);
        op = ctx->r9;
        conn_index = (__s32)read_ptr(sp + 8);
        inquire = read_ptr(sp + 16);
    } else {
        channel = PT_REGS_PARM2(ctx);
        type = (__s32)PT_REGS_PARM3(ctx);
        peer = (__s32)PT_REGS_PARM4(ctx);
        op = PT_REGS_PARM5(ctx);
        conn_index = (__s32)ctx->r9;
        inquire = read_ptr(sp + 8);
    }
    if (inquire != 0 || !proxied(cfg, channel, type, peer, conn_index))
        return 0;
    struct np_flow_event *e = start(ctx, cfg, NP_FLOW_EV_PEER, slot, PT_REGS_PARM1(ctx), op);
    if (!e)
        return 0;
    e->type = type;
    e->peer = peer;
    e->conn_index = conn_index;
    e->channel = read_s32(channel + cfg->ch_id);
    e->tree_up = read_s32(channel + cfg->ch_tree_up);
    send(e);
    return 0;
}

/* uploadProxyOps(comm, plan): the thread now posts this plan's ops; its
 * launch is the one plan_launches has for the plan (0: not seen - sent
 * before the attach, or rate-limited). */
SEC("uprobe")
int np_flow_upload(struct pt_regs *ctx) {
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    __u32 tid = (__u32)pid_tgid;
    struct np_plan_key key = {.plan = PT_REGS_PARM2(ctx), .tgid = pid_tgid >> 32};
    __u64 *id = bpf_map_lookup_elem(&plan_launches, &key);
    struct upload_scope u = {
        .sp = PT_REGS_SP(ctx), .ret = read_ptr(PT_REGS_SP(ctx)), .launch_id = id ? *id : 0};
    bpf_map_update_elem(&upload_scopes, &tid, &u, BPF_ANY);
    return 0;
}

/* ncclLaunchKernel(comm, plan): a communicator's first kernel sends its topology, also
 * when its transports (P2P, NVLink, SHM) give the proxy nothing to post. */
SEC("uprobe")
int np_flow_launch(struct pt_regs *ctx) {
    __u32 slot = (__u32)bpf_get_attach_cookie(ctx);
    const struct np_flow_cfg *cfg = bpf_map_lookup_elem(&flow_cfg, &slot);
    if (cfg)
        send_topology(cfg, slot, PT_REGS_PARM1(ctx));
    return 0;
}
