/* nccl_plan.c - decoding NCCL plan records (see nccl_plan.h). */
#include "ingest/nccl_plan.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ingest/launch.h"

enum { FUNC_BROADCAST = 0, FUNC_REDUCE = 1, FUNC_REDUCE_SCATTER = 3, FUNC_ALL_REDUCE = 4 };
enum { FUNC_SCATTER = 9, FUNC_GATHER = 10 };

const char *np_nccl_func_name(int64_t func) {
    static const char *const names[] = {"Broadcast", "Reduce",   "AllGather", "ReduceScatter",
                                        "AllReduce", "SendRecv", "Send",      "Recv",
                                        "AlltoAll",  "Scatter",  "Gather"};
    if (func < 0 || func >= (int64_t)(sizeof(names) / sizeof(names[0])))
        return "?";
    return names[func];
}

const char *np_nccl_algorithm_name(int64_t algorithm) {
    static const char *const names[] = {
        "TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"};
    if (algorithm < 0)
        return "";
    if (algorithm >= (int64_t)(sizeof(names) / sizeof(names[0])))
        return "?";
    return names[algorithm];
}

const char *np_nccl_protocol_name(int64_t protocol) {
    static const char *const names[] = {"LL", "LL128", "SIMPLE"};
    if (protocol < 0)
        return "";
    if (protocol >= (int64_t)(sizeof(names) / sizeof(names[0])))
        return "?";
    return names[protocol];
}

static bool is_reduction(int64_t func) {
    return func == FUNC_REDUCE || func == FUNC_REDUCE_SCATTER || func == FUNC_ALL_REDUCE;
}

static bool has_root(int64_t func) {
    return func == FUNC_BROADCAST || func == FUNC_REDUCE || func == FUNC_SCATTER ||
           func == FUNC_GATHER;
}

static int64_t get_or(const struct np_nccl_layout *l, enum np_nccl_field f, const uint8_t *bytes,
                      uint32_t lo, uint32_t len, int64_t fallback) {
    int64_t v;
    return np_nccl_field_get(l, f, bytes, lo, len, &v) ? v : fallback;
}

static void set_bytes(struct np_nccl_op *op) {
    int size = np_nccl_datatype_size(op->datatype);
    op->bytes = size > 0 ? op->count * (uint64_t)size : 0;
}

static void decode_coll(const struct np_nccl_layout *l, const uint8_t *task,
                        const struct np_nccl_list_cfg *list, struct np_nccl_op *op) {
    uint32_t lo = list->lo, len = list->len;
    op->func = (int32_t)get_or(l, NPF_COLL_FUNC, task, lo, len, -1);
    op->count = (uint64_t)get_or(l, NPF_COLL_COUNT, task, lo, len, 0);
    op->datatype = (int32_t)get_or(l, NPF_COLL_DATATYPE, task, lo, len, -1);
    op->redop = is_reduction(op->func) ? (int32_t)get_or(l, NPF_COLL_OP, task, lo, len, -1) : -1;
    op->root = has_root(op->func) ? (int32_t)get_or(l, NPF_COLL_ROOT, task, lo, len, -1) : -1;
    op->peer = -1;
    op->algorithm = (int32_t)get_or(l, NPF_COLL_ALGO, task, lo, len, -1);
    op->protocol = (int32_t)get_or(l, NPF_COLL_PROTO, task, lo, len, -1);
    op->nchannels = (int32_t)get_or(l, NPF_COLL_NCHANNELS, task, lo, len, -1);
    set_bytes(op);
}

static void decode_p2p(const struct np_nccl_layout *l, const uint8_t *task,
                       const struct np_nccl_list_cfg *list, struct np_nccl_op *op) {
    uint32_t lo = list->lo, len = list->len;
    op->func = (int32_t)get_or(l, NPF_P2P_FUNC, task, lo, len, -1);
    op->count = (uint64_t)get_or(l, NPF_P2P_COUNT, task, lo, len, 0);
    op->datatype = (int32_t)get_or(l, NPF_P2P_DATATYPE, task, lo, len, -1);
    op->redop = op->root = -1;
    op->peer = (int32_t)get_or(l, NPF_P2P_PEER, task, lo, len, -1);
    op->algorithm = op->protocol = -1;
    op->nchannels = (int32_t)get_or(l, NPF_P2P_NCHANNELS, task, lo, len, -1);
    set_bytes(op);
}

/* A copy-engine collective: its one operation is in ncclCeCollArgs. */
static void decode_ce(const struct np_nccl_layout *l, const uint8_t *args, uint32_t len,
                      struct np_nccl_op *op) {
    op->func = (int32_t)get_or(l, NPF_CE_FUNC, args, 0, len, -1);
    op->count = (uint64_t)get_or(l, NPF_CE_NELTS, args, 0, len, 0);
    op->bytes = op->count * (uint64_t)get_or(l, NPF_CE_ELTSIZE, args, 0, len, 0);
    op->datatype = op->redop = op->peer = -1;
    op->root = has_root(op->func) ? (int32_t)get_or(l, NPF_CE_ROOT, args, 0, len, -1) : -1;
    op->algorithm = op->protocol = op->nchannels = -1;
}

static void decode_plan_fields(const struct np_nccl_layout *l, const struct np_nccl_plan_event *e,
                               struct np_nccl_plan *p) {
    const uint8_t *b = e->plan_bytes;
    uint32_t lo = l->cfg.plan_lo, len = l->cfg.plan_len;
    int64_t v;
    if (np_nccl_field_get(l, NPF_KERNEL_FN, b, lo, len, &v))
        p->kernel_fn = (uint64_t)v, p->has_kernel_fn = true;
    if (np_nccl_field_get(l, NPF_CHANNEL_MASK, b, lo, len, &v))
        p->grid = (uint32_t)__builtin_popcountll((uint64_t)v);
    if (np_nccl_field_get(l, NPF_THREADS, b, lo, len, &v) && v > 0)
        p->block = (uint32_t)v;
    p->symmetric = get_or(l, NPF_IS_SYM, b, lo, len, 0) != 0;
    p->copy_engine = get_or(l, NPF_IS_CE, b, lo, len, 0) != 0;
}

int np_nccl_plan_decode(const struct np_nccl_layout *l, const struct np_nccl_plan_event *e,
                        size_t size, struct np_nccl_plan *p) {
    if (size < NP_NCCL_PLAN_FIXED_SIZE)
        return -EINVAL;
    uint32_t ntasks = (uint32_t)e->n_tasks[0] + e->n_tasks[1];
    if (ntasks > NP_NCCL_MAX_TASKS || size < NP_NCCL_PLAN_FIXED_SIZE + ntasks * NP_NCCL_TASK_BYTES)
        return -EINVAL;
    memset(p, 0, sizeof(*p));
    p->ts_ns = e->hdr.ts_ns;
    p->tid = e->hdr.tid;
    p->probe_id = e->probe_id;
    p->flags = e->flags;
    p->comm = e->comm;
    if (!(e->flags & NP_NF_COMM_ERR) && e->comm)
        np_nccl_comm_id_decode(l, e->comm_bytes, l->cfg.comm_len, &p->id);
    p->stream = e->stream;
    p->has_stream = l->cfg.comm_streams != NP_NCCL_NO_FIELD && !(e->flags & NP_NF_STREAM_ERR);
    if (!(e->flags & NP_NF_PLAN_ERR) && e->plan && l->plan_ok)
        decode_plan_fields(l, e, p);

    uint32_t slot = 0;
    for (int list = 0; list < NP_NCCL_LISTS; list++) {
        for (uint32_t i = 0; i < e->n_tasks[list]; i++, slot++) {
            struct np_nccl_op *op = &p->ops[p->nops++];
            if (list == 0)
                decode_coll(l, e->tasks[slot], &l->cfg.lists[0], op);
            else
                decode_p2p(l, e->tasks[slot], &l->cfg.lists[1], op);
        }
        p->total_ops += e->total[list];
    }
    if (p->copy_engine && p->nops == 0 && l->cfg.aux_len && !(e->flags & NP_NF_AUX_ERR)) {
        decode_ce(l, e->aux_bytes, l->cfg.aux_len, &p->ops[0]);
        p->nops = p->total_ops = 1;
    }
    return 0;
}

/* "AllReduce" from "ncclDevKernel_AllReduce_Sum_f32_RING_LL" or
 * "ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_bf16"; "" otherwise. */
static void op_from_kernel(const char *kernel, char *out, size_t size) {
    static const char *const prefixes[] = {"ncclDevKernel_", "ncclSymkDevKernel_", "ncclKernel_"};
    out[0] = '\0';
    for (size_t i = 0; kernel && i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        size_t n = strlen(prefixes[i]);
        if (strncmp(kernel, prefixes[i], n) != 0)
            continue;
        const char *op = kernel + n;
        size_t len = strcspn(op, "_(<");
        if (len && !(len == 7 && strncmp(op, "Generic", 7) == 0))
            snprintf(out, size, "%.*s", (int)len, op);
        return;
    }
}

void np_nccl_plan_op_types(const struct np_nccl_plan *p, const char *kernel, char *out,
                           size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (uint32_t i = 0; i < p->nops; i++) {
        const char *name = np_nccl_func_name(p->ops[i].func);
        bool seen = false;
        for (uint32_t j = 0; j < i && !seen; j++)
            seen = p->ops[j].func == p->ops[i].func;
        if (seen)
            continue;
        int n = snprintf(out + used, size - used, "%s%s", used ? "+" : "", name);
        if (n < 0 || (size_t)n >= size - used) {
            out[used] = '\0'; /* whole names only */
            break;
        }
        used += (size_t)n;
    }
    if (!used)
        op_from_kernel(kernel, out, size);
}
