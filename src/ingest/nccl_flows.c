/* nccl_flows.c - the --nccl-flows records decoded: ops, peers and a
 * communicator's channel topology (see nccl_flows.h). */
#define _GNU_SOURCE
#include "ingest/nccl_flows.h"

#include <errno.h>
#include <string.h>

static const char *const protocols[] = {"LL", "LL128", "SIMPLE"};
static const char *const algorithms[] = {
    "TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"};

/* A field of the copied ncclProxyOp span, sign-extended when signed; `def` when absent. */
static int64_t op_field(const struct np_flow_layout *l, enum np_flow_field f, const uint8_t *op,
                        uint32_t lo, uint32_t len, bool is_signed, int64_t def) {
    const struct np_field *fd = &l->f[f];
    uint32_t size = fd->size && fd->size <= 8 ? fd->size : 8;
    if (fd->offset < (int64_t)lo || fd->offset + size > (int64_t)lo + len)
        return def;
    uint64_t raw = 0;
    memcpy(&raw, op + (fd->offset - lo), size); /* little-endian */
    if (size < 8) {
        raw &= (1ull << (size * 8)) - 1;
        if (is_signed && (raw >> (size * 8 - 1)) & 1)
            raw |= ~0ull << (size * 8);
    }
    return (int64_t)raw;
}

static const char *name_of(const char *const *names, size_t n, int64_t v) {
    return v >= 0 && (size_t)v < n ? names[v] : "?";
}

static void decode_op(const struct np_flow_lib *lib, const struct np_flow_event *e,
                      struct np_flow_rec *r) {
    const struct np_flow_layout *l = lib->flow;
    uint32_t lo = (uint32_t)l->f[NPFF_OP_OPCOUNT].offset, len = e->op_len;
    for (int i = NPFF_OP_OPCOUNT; i <= NPFF_OP_NCHANNELS; i++)
        if (l->f[i].offset >= 0 && l->f[i].offset < lo)
            lo = (uint32_t)l->f[i].offset;
    const uint8_t *op = e->op;
    r->op_count = (uint64_t)op_field(l, NPFF_OP_OPCOUNT, op, lo, len, false, 0);
    r->nsteps = op_field(l, NPFF_OP_NSTEPS, op, lo, len, true, 0);
    r->nbytes = op_field(l, NPFF_OP_NBYTES, op, lo, len, true, 0);
    r->chunk_size = op_field(l, NPFF_OP_CHUNKSIZE, op, lo, len, true, 0);
    r->slice_steps = op_field(l, NPFF_OP_SLICESTEPS, op, lo, len, false, 0);
    r->chunk_steps = op_field(l, NPFF_OP_CHUNKSTEPS, op, lo, len, false, 0);
    r->root = op_field(l, NPFF_OP_ROOT, op, lo, len, true, -1);
    r->nchannels = op_field(l, NPFF_OP_NCHANNELS, op, lo, len, true, -1);
    r->channel = (int)op_field(l, NPFF_OP_CHANNEL, op, lo, len, false, -1);
    int64_t pattern = op_field(l, NPFF_OP_PATTERN, op, lo, len, false, -1);
    r->pattern_id = (int)pattern;
    r->pattern = pattern >= 0 && pattern < NP_FLOW_PATTERNS && l->pattern[pattern][0]
                     ? l->pattern[pattern]
                     : "?";
    r->protocol = name_of(protocols, 3, op_field(l, NPFF_OP_PROTOCOL, op, lo, len, false, -1));
    r->algorithm =
        l->f[NPFF_OP_ALGORITHM].offset < 0
            ? NULL
            : name_of(algorithms, 7, op_field(l, NPFF_OP_ALGORITHM, op, lo, len, false, -1));
    int64_t coll = op_field(l, NPFF_OP_COLL, op, lo, len, false, -1);
    r->coll = coll < 0 ? NULL : np_nccl_name(&lib->nccl->names, NP_NCCL_FUNC, coll);
}

int np_flow_decode(const struct np_flow_attacher *fa, const void *data, size_t size,
                   struct np_flow_rec *out) {
    const struct np_flow_event *e = data;
    memset(out, 0, sizeof(*out));
    if (size < sizeof(*e) || (e->kind != NP_FLOW_EV_OP && e->kind != NP_FLOW_EV_PEER) ||
        e->op_len > NP_FLOW_OP_BYTES || e->comm_len > NP_FLOW_COMM_BYTES)
        return -EINVAL;
    const struct np_flow_lib *lib = np_flow_lib_of(fa, e->slot);
    if (!lib || lib->err || e->op_len == 0)
        return -EINVAL;
    out->kind = (enum np_flow_kind)e->kind;
    out->slot = e->slot;
    out->pid = e->pid;
    out->tid = e->tid;
    out->ts_ns = e->ts_ns;
    out->launch_id = e->launch_id;
    out->comm = e->comm;
    struct np_nccl_comm_id id;
    np_nccl_comm_id_decode(lib->nccl, e->comm_bytes, e->comm_len, &id);
    out->comm_known = id.known;
    out->comm_hash = id.hash;
    out->rank = id.known ? id.rank : -1;
    out->nranks = id.known ? id.nranks : -1;
    decode_op(lib, e, out);
    out->send = e->type == 1;
    out->peer = e->peer;
    out->conn_index = e->conn_index;
    out->tree_up = e->tree_up;
    if (e->kind == NP_FLOW_EV_PEER && e->channel >= 0)
        out->channel = e->channel;
    return 0;
}

const char *np_flow_stage(const struct np_flow_rec *r, int64_t step) {
    const char *p = r->pattern;
    if (strcmp(p, "RING_TWICE") == 0)
        return step < r->nsteps / 2 ? "reduce-scatter" : "all-gather";
    if (strcmp(p, "RING") == 0 && r->coll)
        return strcmp(r->coll, "ReduceScatter") == 0 ? "reduce-scatter"
               : strcmp(r->coll, "AllGather") == 0   ? "all-gather"
                                                     : NULL;
    if (strcmp(p, "PIPELINE_FROM") == 0 || strcmp(p, "TREE_DOWN") == 0)
        return "broadcast";
    if (strcmp(p, "PIPELINE_TO") == 0 || strcmp(p, "TREE_UP") == 0)
        return "reduce";
    if (strcmp(p, "TREE_UP_DOWN") == 0)
        return r->send == (r->peer == r->tree_up) ? "reduce" : "broadcast";
    return NULL;
}

/* ---- topology: the channels BPF copied at a communicator's first op ---- */

static int span_int(const struct np_flow_layout *l, enum np_flow_field f, const uint8_t *span,
                    uint32_t lo, uint32_t len, int index) {
    int64_t at = l->f[f].offset + 4 * index - (int64_t)lo;
    int v = -1;
    if (l->f[f].offset >= 0 && at >= 0 && at + 4 <= (int64_t)len)
        memcpy(&v, span + at, sizeof(v));
    return v;
}

static void decode_channel(const struct np_flow_layout *l, const struct np_flow_topo_channel *c,
                           int index, struct np_flow_channel_topo *t) {
    uint32_t lo = (uint32_t)l->f[NPFF_CH_RING_PREV].offset, len = NP_FLOW_CH_SPAN;
    enum np_flow_field span[] = {NPFF_CH_RING_NEXT, NPFF_CH_TREE_UP, NPFF_CH_TREE_DOWN};
    for (size_t i = 0; i < sizeof(span) / sizeof(span[0]); i++)
        if (l->f[span[i]].offset >= 0 && (uint32_t)l->f[span[i]].offset < lo)
            lo = (uint32_t)l->f[span[i]].offset;
    t->id = index;
    t->ring_prev = span_int(l, NPFF_CH_RING_PREV, c->span, lo, len, 0);
    t->ring_next = span_int(l, NPFF_CH_RING_NEXT, c->span, lo, len, 0);
    t->tree_up = span_int(l, NPFF_CH_TREE_UP, c->span, lo, len, 0);
    for (int i = 0; i < 3; i++)
        t->tree_down[i] = (uint32_t)(i + 1) * 4 <= l->f[NPFF_CH_TREE_DOWN].size
                              ? span_int(l, NPFF_CH_TREE_DOWN, c->span, lo, len, i)
                              : -1;
    t->has_nvls = l->f[NPFF_CH_NVLS_OUT].offset >= 0;
    t->has_collnet = l->f[NPFF_CH_COLLNET_CHAIN_UP].offset >= 0;
    t->nvls_out = c->nvls_out;
    t->collnet_chain_up = c->chain_up;
    t->collnet_direct_out = c->direct_out;
    t->nuser = c->nuser <= NP_FLOW_TOPO_RANKS ? (int)c->nuser : 0;
    memcpy(t->user_ranks, c->user_ranks, sizeof(int) * (size_t)t->nuser);
}

int np_flow_decode_topology(const struct np_flow_attacher *fa, const void *data, size_t size,
                            struct np_flow_rec *r, struct np_flow_topology *t) {
    const struct np_flow_topo_event *e = data;
    memset(r, 0, sizeof(*r));
    if (size < sizeof(*e) || e->kind != NP_FLOW_EV_TOPO || e->comm_len > NP_FLOW_COMM_BYTES)
        return -EINVAL;
    const struct np_flow_lib *lib = np_flow_lib_of(fa, e->slot);
    if (!lib || lib->err)
        return -EINVAL;
    struct np_nccl_comm_id id;
    np_nccl_comm_id_decode(lib->nccl, e->comm_bytes, e->comm_len, &id);
    r->kind = NP_FLOW_EV_TOPO;
    r->slot = e->slot;
    r->pid = e->pid;
    r->tid = e->tid;
    r->ts_ns = e->ts_ns;
    r->comm = e->comm;
    r->comm_known = id.known;
    r->comm_hash = id.hash;
    r->rank = id.known ? id.rank : -1;
    r->nranks = id.known ? id.nranks : -1;
    t->nchannels = e->nchannels < 0                      ? 0
                   : e->nchannels > NP_FLOW_MAX_CHANNELS ? NP_FLOW_MAX_CHANNELS
                                                         : e->nchannels;
    for (int c = 0; c < t->nchannels; c++)
        decode_channel(lib->flow, &e->ch[c], c, &t->ch[c]);
    return 0;
}
