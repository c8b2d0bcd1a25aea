/* nccl_plan.c - decoding NCCL plan records (see nccl_plan.h). */
#include "ingest/nccl_plan.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "attach/nccl_names.h"

/* Which operations carry a reduction op and a root: by name, whatever
 * values the library gives them. */
static const char *const reductions[] = {"AllReduce", "Reduce", "ReduceScatter", NULL};
static const char *const rooted[] = {"Broadcast", "Reduce", "Scatter", "Gather", NULL};

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

#define NONE NPF_COUNT /* a field this task kind does not have */

/* Where each list's task keeps an operation's fields. */
static const struct task_fields {
    enum np_nccl_field func, count, datatype, redop, root, peer, algo, proto, nchannels, bytes;
} task_fields[NP_NCCL_LISTS] = {
    [NP_NCCL_LIST_COLL] = {NPF_COLL_FUNC, NPF_COLL_COUNT, NPF_COLL_DATATYPE, NPF_COLL_OP,
                           NPF_COLL_ROOT, NONE, NPF_COLL_ALGO, NPF_COLL_PROTO, NPF_COLL_NCHANNELS,
                           NONE},
    [NP_NCCL_LIST_P2P] = {NPF_P2P_FUNC, NPF_P2P_COUNT, NPF_P2P_DATATYPE, NONE, NONE, NPF_P2P_PEER,
                          NONE, NONE, NPF_P2P_NCHANNELS, NONE},
    [NP_NCCL_LIST_BCAST] = {NPF_BCAST_FUNC, NPF_BCAST_COUNT, NPF_BCAST_DATATYPE, NONE,
                            NPF_BCAST_ROOT, NONE, NPF_BCAST_ALGO, NPF_BCAST_PROTO,
                            NPF_BCAST_NCHANNELS, NONE},
    [NP_NCCL_LIST_RMA_PROXY] = {NPF_RMA_FUNC, NPF_RMA_COUNT, NPF_RMA_DATATYPE, NONE, NONE,
                                NPF_RMA_PEER, NONE, NONE, NPF_RMA_NCHANNELS, NPF_RMA_BYTES},
    [NP_NCCL_LIST_RMA_CE] = {NPF_RMA_FUNC, NPF_RMA_COUNT, NPF_RMA_DATATYPE, NONE, NONE,
                             NPF_RMA_PEER, NONE, NONE, NPF_RMA_NCHANNELS, NPF_RMA_BYTES},
};

static int64_t get_or(const struct np_nccl_layout *l, enum np_nccl_field f, const uint8_t *bytes,
                      uint32_t lo, uint32_t len, int64_t fallback) {
    int64_t v;
    return np_nccl_field_get(l, f, bytes, lo, len, &v) ? v : fallback;
}

static void set_bytes(const struct np_nccl_layout *l, struct np_nccl_op *op) {
    int size = np_nccl_datatype_bytes(&l->names, op->datatype);
    op->bytes = size > 0 ? op->count * (uint64_t)size : 0;
}

static void decode_task(const struct np_nccl_layout *l, const uint8_t *task, int list,
                        struct np_nccl_op *op) {
    const struct task_fields *tf = &task_fields[list];
    uint32_t lo = l->cfg.lists[list].lo, len = l->cfg.lists[list].len;
    op->func = (int32_t)get_or(l, tf->func, task, lo, len, -1);
    op->count = (uint64_t)get_or(l, tf->count, task, lo, len, 0);
    op->datatype = (int32_t)get_or(l, tf->datatype, task, lo, len, -1);
    bool reduces = np_nccl_func_is(&l->names, op->func, reductions);
    op->redop = reduces ? (int32_t)get_or(l, tf->redop, task, lo, len, -1) : -1;
    bool has_root = np_nccl_func_is(&l->names, op->func, rooted);
    op->root = has_root ? (int32_t)get_or(l, tf->root, task, lo, len, -1) : -1;
    op->peer = (int32_t)get_or(l, tf->peer, task, lo, len, -1);
    op->algorithm = (int32_t)get_or(l, tf->algo, task, lo, len, -1);
    op->protocol = (int32_t)get_or(l, tf->proto, task, lo, len, -1);
    op->nchannels = (int32_t)get_or(l, tf->nchannels, task, lo, len, -1);
    set_bytes(l, op);
    int64_t bytes;
    if (np_nccl_field_get(l, tf->bytes, task, lo, len, &bytes))
        op->bytes = (uint64_t)bytes;
}

static void no_op(struct np_nccl_op *op) {
    memset(op, 0, sizeof(*op));
    op->func = op->datatype = op->redop = op->root = op->peer = -1;
    op->algorithm = op->protocol = op->nchannels = -1;
}

/* A copy-engine collective: its one operation is in ncclCeCollArgs. */
static void decode_ce(const struct np_nccl_layout *l, const uint8_t *args, uint32_t len,
                      struct np_nccl_op *op) {
    no_op(op);
    op->func = (int32_t)get_or(l, NPF_CE_FUNC, args, 0, len, -1);
    op->count = (uint64_t)get_or(l, NPF_CE_NELTS, args, 0, len, 0);
    op->bytes = op->count * (uint64_t)get_or(l, NPF_CE_ELTSIZE, args, 0, len, 0);
    op->datatype = (int32_t)get_or(l, NPF_CE_DATATYPE, args, 0, len, -1); /* 2.29+ */
    if (np_nccl_func_is(&l->names, op->func, rooted))
        op->root = (int32_t)get_or(l, NPF_CE_ROOT, args, 0, len, -1);
}

/* An RMA plan without tasks on its lists: its operation from ncclRmaArgs. */
static void decode_rma_args(const struct np_nccl_layout *l, const uint8_t *args, uint32_t len,
                            struct np_nccl_op *op) {
    no_op(op);
    op->func = (int32_t)get_or(l, NPF_RMA_ARGS_FUNC, args, 0, len, -1);
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
    p->rma = get_or(l, NPF_IS_RMA, b, lo, len, 0) != 0;
}

static void decode_lists(const struct np_nccl_layout *l, const struct np_nccl_plan_event *e,
                         struct np_nccl_plan *p) {
    uint32_t slot = 0;
    for (int list = 0; list < NP_NCCL_LISTS; list++) {
        for (uint32_t i = 0; i < e->n_tasks[list]; i++, slot++)
            decode_task(l, e->tasks[slot], list, &p->ops[p->nops++]);
        p->total_ops += e->total[list];
    }
}

/* A plan whose one operation is in the argument union, not on a list. */
static void decode_aux(const struct np_nccl_layout *l, const struct np_nccl_plan_event *e,
                       struct np_nccl_plan *p) {
    if (p->nops || !l->cfg.aux_len || (e->flags & NP_NF_AUX_ERR) || (!p->copy_engine && !p->rma))
        return;
    if (p->copy_engine)
        decode_ce(l, e->aux_bytes, l->cfg.aux_len, &p->ops[0]);
    else
        decode_rma_args(l, e->aux_bytes, l->cfg.aux_len, &p->ops[0]);
    p->nops = p->total_ops = 1;
}

int np_nccl_plan_decode(const struct np_nccl_layout *l, const struct np_nccl_plan_event *e,
                        size_t size, struct np_nccl_plan *p) {
    if (size < NP_NCCL_PLAN_FIXED_SIZE)
        return -EINVAL;
    uint32_t ntasks = 0;
    for (int list = 0; list < NP_NCCL_LISTS; list++)
        ntasks += e->n_tasks[list];
    if (ntasks > NP_NCCL_MAX_TASKS || size < NP_NCCL_PLAN_FIXED_SIZE + ntasks * NP_NCCL_TASK_BYTES)
        return -EINVAL;
    memset(p, 0, sizeof(*p));
    p->ts_ns = e->hdr.ts_ns;
    p->tid = e->hdr.tid;
    p->probe_id = e->probe_id;
    p->flags = e->flags;
    p->comm = e->comm;
    p->names = &l->names;
    if (!(e->flags & NP_NF_COMM_ERR) && e->comm)
        np_nccl_comm_id_decode(l, e->comm_bytes, l->cfg.comm_len, &p->id);
    p->stream = e->stream;
    p->has_stream = l->cfg.comm_streams != NP_NCCL_NO_FIELD && !(e->flags & NP_NF_STREAM_ERR);
    if (!(e->flags & NP_NF_PLAN_ERR) && e->plan && l->plan_ok)
        decode_plan_fields(l, e, p);
    decode_lists(l, e, p);
    decode_aux(l, e, p);
    /* no per-task channel count (before 2.27): a plan's only operation ran
     * on all of the plan's channels */
    if (l->nchannels_from_plan && p->nops == 1 && p->total_ops == 1 && p->grid &&
        p->ops[0].nchannels < 0 && !p->copy_engine && !p->rma)
        p->ops[0].nchannels = (int32_t)p->grid;
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
        const char *name = np_nccl_name(p->names, NP_NCCL_FUNC, p->ops[i].func);
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
