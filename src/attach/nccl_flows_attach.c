/* nccl_flows_attach.c - attaches the --nccl-flows probes of one libnccl
 * and writes its flow_cfg row (see nccl_flows_attach.h). */
#define _GNU_SOURCE
#include "attach/nccl_flows_attach.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "attach/uprobe_multi.h"
#include "lib/util.h"
#include "nccl_flows.skel.h"

void np_flow_attacher_init(struct np_flow_attacher *fa, struct nccl_flows_bpf *skel,
                           bool use_multi) {
    memset(fa, 0, sizeof(*fa));
    fa->skel = skel;
    fa->use_multi = use_multi;
    fa->nlibs = 1;
}

/* A free slot: one released, or a new one; 0 when all are taken. */
static uint32_t free_slot(struct np_flow_attacher *fa) {
    for (uint32_t i = 1; i < fa->nlibs; i++)
        if (fa->libs[i].released) {
            memset(&fa->libs[i], 0, sizeof(fa->libs[i]));
            return i;
        }
    return fa->nlibs < NP_FLOW_MAX_LIBS ? fa->nlibs++ : 0;
}

static uint32_t off32(const struct np_flow_layout *l, enum np_flow_field f) {
    return l->f[f].offset >= 0 && l->f[f].offset <= UINT32_MAX ? (uint32_t)l->f[f].offset : 0;
}

/* The ncclProxyOp span the decoder reads: from its lowest to its highest field. */
static int op_span(const struct np_flow_layout *l, uint32_t *lo, uint32_t *len) {
    int64_t start = -1, end = -1;
    for (int i = NPFF_OP_OPCOUNT; i <= NPFF_OP_NCHANNELS; i++) {
        const struct np_field *f = &l->f[i];
        if (f->offset < 0)
            continue;
        if (start < 0 || f->offset < start)
            start = f->offset;
        if (f->offset + (f->size ? f->size : 1) > end)
            end = f->offset + (f->size ? f->size : 1);
    }
    if (start < 0 || end - start > NP_FLOW_OP_BYTES)
        return -E2BIG;
    *lo = (uint32_t)start;
    *len = (uint32_t)(end - start);
    return 0;
}

static uint32_t opt32(const struct np_flow_layout *l, enum np_flow_field f) {
    return l->f[f].offset >= 0 && l->f[f].offset <= UINT32_MAX ? (uint32_t)l->f[f].offset
                                                               : NP_FLOW_NO_FIELD;
}

/* The channel topology BPF copies at a communicator's first op: ring.prev .. tree.down as one
 * span, the optional NVLS / CollNet peers, the ring's user ranks through their pointer. */
static int topo_cfg(const struct np_nccl_layout *nccl, const struct np_flow_layout *l,
                    struct np_flow_cfg *c) {
    static const enum np_flow_field span[] = {NPFF_CH_RING_PREV, NPFF_CH_RING_NEXT, NPFF_CH_TREE_UP,
                                              NPFF_CH_TREE_DOWN};
    int64_t lo = -1, hi = -1;
    for (size_t i = 0; i < sizeof(span) / sizeof(span[0]); i++) {
        const struct np_field *f = &l->f[span[i]];
        if (lo < 0 || f->offset < lo)
            lo = f->offset;
        if (f->offset + f->size > hi)
            hi = f->offset + f->size;
    }
    if (lo < 0 || hi - lo > NP_FLOW_CH_SPAN || nccl->f[NPF_NRANKS].offset < 0)
        return -E2BIG;
    c->ch_span_lo = (uint32_t)lo;
    c->ch_span_len = (uint32_t)(hi - lo);
    c->comm_channels = off32(l, NPFF_COMM_CHANNELS);
    c->comm_nchannels = off32(l, NPFF_COMM_NCHANNELS);
    c->comm_nranks = (uint32_t)nccl->f[NPF_NRANKS].offset;
    c->ch_size = l->f[NPFF_CH_SIZE].size;
    c->ch_user_ranks = off32(l, NPFF_CH_RING_USER_RANKS);
    c->ch_nvls_out = opt32(l, NPFF_CH_NVLS_OUT);
    c->ch_chain_up = opt32(l, NPFF_CH_COLLNET_CHAIN_UP);
    c->ch_direct_out = opt32(l, NPFF_CH_COLLNET_DIRECT_OUT);
    return 0;
}

static int build_cfg(const struct np_nccl_layout *nccl, const struct np_flow_layout *l,
                     struct np_flow_cfg *c) {
    memset(c, 0, sizeof(*c));
    int err = op_span(l, &c->op_lo, &c->op_len);
    if (err)
        return err;
    if (!nccl->comm_ok || nccl->cfg.comm_len > NP_FLOW_COMM_BYTES)
        return -E2BIG;
    c->comm_lo = nccl->cfg.comm_lo;
    c->comm_len = nccl->cfg.comm_len;
    c->ch_peers = off32(l, NPFF_CH_PEERS);
    c->ch_id = off32(l, NPFF_CH_ID);
    c->ch_tree_up = off32(l, NPFF_CH_TREE_UP);
    c->peer_send = off32(l, NPFF_PEER_SEND);
    c->peer_recv = off32(l, NPFF_PEER_RECV);
    c->conn_size = l->f[NPFF_CONN_SIZE].size;
    c->conn_progress = off32(l, NPFF_CONN_PROXY_PROGRESS);
    return topo_cfg(nccl, l, c);
}

/* Attaches prog at file_offset of binary in pid as probe k of lib. */
static int attach_one(const struct np_flow_attacher *fa, struct np_flow_lib *lib, int k,
                      struct bpf_program *prog, pid_t pid, const char *binary, uint64_t file_offset,
                      uint64_t cookie) {
    if (fa->use_multi) {
        int fd = np_uprobe_multi_attach(bpf_program__fd(prog), pid, binary, &file_offset, &cookie,
                                        1, false);
        if (fd < 0)
            return fd;
        lib->link_fds[k] = fd + 1;
        return 0;
    }
    LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = cookie);
    lib->links[k] = bpf_program__attach_uprobe_opts(prog, pid, binary, (size_t)file_offset, &opts);
    return lib->links[k] ? 0 : -errno;
}

/* Probe sym of lib, one the flows work without (nccl_flow_layout.c): 0, -ENOENT when the
 * library has no such symbol, or why it could not be attached (said, with what is lost). */
static int attach_optional(const struct np_flow_attacher *fa, struct np_flow_lib *lib,
                           enum np_flow_symbol sym, struct bpf_program *prog,
                           enum np_flow_probe probe, uint32_t slot, const char *binary,
                           const char *target_path, const char *lost) {
    if (!lib->flow->sym_vaddr[sym])
        return -ENOENT;
    int err = attach_one(fa, lib, (int)sym, prog, lib->pid, binary, lib->flow->sym_offset[sym],
                         NP_FLOW_COOKIE(probe, slot));
    if (err)
        np_warn("pid %d: cannot probe %s in %s (%s): %s", lib->pid, np_flow_symbol_name(sym),
                target_path, lost, strerror(-err));
    return err;
}

int np_flow_attach_library(struct np_flow_attacher *fa, pid_t pid, const char *binary,
                           const char *target_path, const struct np_nccl_layout *nccl,
                           const struct np_flow_layout *flow) {
    uint32_t slot = free_slot(fa);
    if (!slot)
        return -ENOSPC;
    struct np_flow_lib *lib = &fa->libs[slot];
    struct np_flow_cfg cfg;
    lib->pid = pid;
    snprintf(lib->path, sizeof(lib->path), "%s", target_path);
    lib->nccl = nccl;
    lib->flow = flow;
    lib->err = flow->status ? flow->status : build_cfg(nccl, flow, &cfg);
    if (lib->err)
        return (int)slot;
    if (bpf_map__update_elem(fa->skel->maps.flow_cfg, &slot, sizeof(slot), &cfg, sizeof(cfg),
                             BPF_ANY) < 0) {
        lib->err = -errno;
        return (int)slot;
    }
    enum np_flow_probe proxy_kind =
        flow->save_proxy_clone ? NP_FLOW_PROBE_SAVE_PROXY_ISRA : NP_FLOW_PROBE_SAVE_PROXY;
    lib->err = attach_one(fa, lib, 0, fa->skel->progs.np_flow_save_op, pid, binary,
                          flow->sym_offset[NP_FLOW_SYM_SAVE_OP],
                          NP_FLOW_COOKIE(NP_FLOW_PROBE_SAVE_OP, slot));
    if (!lib->err)
        lib->err =
            attach_one(fa, lib, 1, fa->skel->progs.np_flow_save_proxy, pid, binary,
                       flow->sym_offset[NP_FLOW_SYM_SAVE_PROXY], NP_FLOW_COOKIE(proxy_kind, slot));
    if (lib->err) {
        np_warn("pid %d: cannot probe NCCL's proxy flows in %s: %s", pid, target_path,
                strerror(-lib->err));
        return (int)slot;
    }
    lib->upload_err = attach_optional(fa, lib, NP_FLOW_SYM_UPLOAD, fa->skel->progs.np_flow_upload,
                                      NP_FLOW_PROBE_UPLOAD, slot, binary, target_path,
                                      "flows carry no launch_id");
    lib->launch_err = attach_optional(fa, lib, NP_FLOW_SYM_LAUNCH, fa->skel->progs.np_flow_launch,
                                      NP_FLOW_PROBE_LAUNCH, slot, binary, target_path,
                                      "topology only at a communicator's first proxy op");
    return (int)slot;
}

/* Drops probe k of lib: its perf link, or its uprobe_multi link's fd handed to close_fd. */
static void drop_link(struct np_flow_lib *lib, int k, void (*close_fd)(void *ctx, int fd),
                      void *ctx) {
    bpf_link__destroy(lib->links[k]);
    lib->links[k] = NULL;
    if (lib->link_fds[k])
        close_fd(ctx, lib->link_fds[k] - 1);
    lib->link_fds[k] = 0;
}

static void close_now(void *ctx, int fd) {
    (void)ctx;
    close(fd);
}

const struct np_flow_lib *np_flow_lib_of(const struct np_flow_attacher *fa, uint32_t slot) {
    return slot > 0 && slot < fa->nlibs ? &fa->libs[slot] : NULL;
}

void np_flow_attacher_release_pid(struct np_flow_attacher *fa, pid_t pid,
                                  void (*close_fd)(void *ctx, int fd), void *ctx) {
    for (uint32_t i = 1; i < fa->nlibs; i++) {
        struct np_flow_lib *lib = &fa->libs[i];
        if (lib->pid != pid || lib->released)
            continue;
        for (int k = 0; k < NP_FLOW_SYMS; k++)
            drop_link(lib, k, close_fd, ctx);
        lib->released = true;
    }
}

void np_flow_attacher_destroy(struct np_flow_attacher *fa) {
    for (uint32_t i = 1; i < fa->nlibs; i++)
        for (int k = 0; k < NP_FLOW_SYMS; k++)
            drop_link(&fa->libs[i], k, close_now, NULL);
}
