/* nccl_layout.c - libnccl struct layouts from DWARF, their BPF
 * configuration, and decoding of the bytes BPF copied (see nccl_layout.h). */
#define _GNU_SOURCE
#include "attach/nccl_layout.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct field_def {
    struct np_field_query query;
    bool is_signed;
};

/* Indexed by enum np_nccl_field. */
static const struct field_def fields[NPF_COUNT] = {
    [NPF_COMM_HASH] = {{"ncclComm", "commHash"}, false},
    [NPF_RANK] = {{"ncclComm", "rank"}, true},
    [NPF_NRANKS] = {{"ncclComm", "nRanks"}, true},
    [NPF_CUDA_DEV] = {{"ncclComm", "cudaDev"}, true},
    [NPF_COMM_STREAMS] = {{"ncclComm", "planner.streams"}, false},
    [NPF_STREAM] = {{"ncclCudaStreamList", "stream"}, false},
    [NPF_KERNEL_FN] = {{"ncclKernelPlan", "kernelFn"}, false},
    [NPF_CHANNEL_MASK] = {{"ncclKernelPlan", "channelMask"}, false},
    [NPF_THREADS] = {{"ncclKernelPlan", "threadPerBlock"}, true},
    [NPF_IS_SYM] = {{"ncclKernelPlan", "isSymColl"}, false},
    [NPF_IS_CE] = {{"ncclKernelPlan", "isCeColl"}, false},
    [NPF_CE_ARGS] = {{"ncclKernelPlan", "ceCollArgs"}, false},
    [NPF_COLL_HEAD] = {{"ncclKernelPlan", "collTaskQueue.head"}, false},
    [NPF_P2P_HEAD] = {{"ncclKernelPlan", "p2pTaskQueue.head"}, false},
    [NPF_COLL_NEXT] = {{"ncclTaskColl", "next"}, false},
    [NPF_COLL_FUNC] = {{"ncclTaskColl", "func"}, true},
    [NPF_COLL_COUNT] = {{"ncclTaskColl", "count"}, false},
    [NPF_COLL_ROOT] = {{"ncclTaskColl", "root"}, true},
    [NPF_COLL_DATATYPE] = {{"ncclTaskColl", "datatype"}, true},
    [NPF_COLL_OP] = {{"ncclTaskColl", "opHost"}, true},
    [NPF_COLL_ALGO] = {{"ncclTaskColl", "algorithm"}, true},
    [NPF_COLL_PROTO] = {{"ncclTaskColl", "protocol"}, true},
    [NPF_COLL_NCHANNELS] = {{"ncclTaskColl", "nChannels"}, false},
    [NPF_P2P_NEXT] = {{"ncclTaskP2p", "next"}, false},
    [NPF_P2P_FUNC] = {{"ncclTaskP2p", "func"}, true},
    [NPF_P2P_COUNT] = {{"ncclTaskP2p", "count"}, false},
    [NPF_P2P_DATATYPE] = {{"ncclTaskP2p", "datatype"}, true},
    [NPF_P2P_PEER] = {{"ncclTaskP2p", "root"}, true},
    [NPF_P2P_NCHANNELS] = {{"ncclTaskP2p", "nChannels"}, false},
    [NPF_CE_FUNC] = {{"ncclCeCollArgs", "func"}, true},
    [NPF_CE_ROOT] = {{"ncclCeCollArgs", "rootRank"}, true},
    [NPF_CE_NELTS] = {{"ncclCeCollArgs", "nElts"}, false},
    [NPF_CE_ELTSIZE] = {{"ncclCeCollArgs", "eltSize"}, false},
};

static const char *np_nccl_field_name(enum np_nccl_field f) {
    static char names[NPF_COUNT][64];
    if ((unsigned)f >= NPF_COUNT)
        return "?";
    if (!names[f][0])
        snprintf(names[f], sizeof(names[f]), "%s.%s", fields[f].query.type, fields[f].query.path);
    return names[f];
}

static bool have(const struct np_nccl_layout *l, enum np_nccl_field f) {
    return l->f[f].offset >= 0;
}

static int64_t field_end(const struct np_field *f) {
    if (f->bit_size)
        return f->offset + (f->bit_shift + f->bit_size + 7) / 8;
    return f->offset + (f->size ? f->size : 1);
}

/* The byte span [*lo, *lo + *len) covering the fields from..to that the
 * layout has; false when it has none of them. */
static bool span_of(const struct np_nccl_layout *l, enum np_nccl_field from, enum np_nccl_field to,
                    uint32_t *lo, uint32_t *len) {
    int64_t start = -1, end = -1;
    for (unsigned i = from; i <= to; i++) {
        const struct np_field *f = &l->f[i];
        if (f->offset < 0)
            continue;
        if (start < 0 || f->offset < start)
            start = f->offset;
        if (field_end(f) > end)
            end = field_end(f);
    }
    if (start < 0 || start > UINT32_MAX || end - start > UINT32_MAX)
        return false;
    *lo = (uint32_t)start;
    *len = (uint32_t)(end - start);
    return true;
}

static void note_missing(struct np_nccl_layout *l, const char *what) {
    size_t used = strlen(l->missing);
    snprintf(l->missing + used, sizeof(l->missing) - used, "%s%s", used ? "; " : "", what);
}

/* Names the missing fields of from..to in l->missing. */
static void note_missing_fields(struct np_nccl_layout *l, enum np_nccl_field from,
                                enum np_nccl_field to) {
    for (unsigned i = from; i <= to; i++)
        if (!have(l, i))
            note_missing(l, np_nccl_field_name(i));
}

static void list_cfg(const struct np_nccl_layout *l, enum np_nccl_field head,
                     enum np_nccl_field next, enum np_nccl_field first, enum np_nccl_field last,
                     struct np_nccl_list_cfg *out) {
    *out = (struct np_nccl_list_cfg){.head = NP_NCCL_NO_FIELD};
    if (!have(l, head) || !have(l, next) || !span_of(l, first, last, &out->lo, &out->len))
        return;
    out->head = (uint32_t)l->f[head].offset;
    out->next = (uint32_t)l->f[next].offset;
    if (out->len > NP_NCCL_TASK_BYTES)
        out->len = NP_NCCL_TASK_BYTES; /* fields past the copy read as unknown */
}

static void build_cfg(struct np_nccl_layout *l) {
    struct np_nccl_cfg *c = &l->cfg;
    memset(c, 0, sizeof(*c));
    c->comm_arg = 0;
    c->plan_arg = 1;
    c->comm_streams = c->plan_aux = NP_NCCL_NO_FIELD;

    if (span_of(l, NPF_COMM_HASH, NPF_CUDA_DEV, &c->comm_lo, &c->comm_len) &&
        c->comm_len <= NP_NCCL_COMM_BYTES && have(l, NPF_RANK) && have(l, NPF_NRANKS))
        l->comm_ok = true;
    else
        c->comm_len = 0, note_missing(l, "communicator identity (commHash, rank, nRanks)");
    if (have(l, NPF_COMM_STREAMS) && have(l, NPF_STREAM)) {
        c->comm_streams = (uint32_t)l->f[NPF_COMM_STREAMS].offset;
        c->stream_off = (uint32_t)l->f[NPF_STREAM].offset;
    } else {
        note_missing(l, "launch stream (ncclComm.planner.streams->stream)");
    }
    /* the queue heads and ceCollArgs are read through the plan pointer */
    if (span_of(l, NPF_KERNEL_FN, NPF_IS_CE, &c->plan_lo, &c->plan_len) &&
        c->plan_len <= NP_NCCL_PLAN_BYTES && have(l, NPF_KERNEL_FN))
        l->plan_ok = true;
    else
        c->plan_len = 0, note_missing(l, "kernel plan (ncclKernelPlan.kernelFn)");
    uint32_t ce_lo;
    if (have(l, NPF_CE_ARGS) && span_of(l, NPF_CE_FUNC, NPF_CE_ELTSIZE, &ce_lo, &c->aux_len) &&
        ce_lo + c->aux_len <= NP_NCCL_AUX_BYTES) {
        c->plan_aux = (uint32_t)l->f[NPF_CE_ARGS].offset;
        c->aux_len += ce_lo; /* copied from the start of ncclCeCollArgs */
    } else {
        c->aux_len = 0;
    }
    list_cfg(l, NPF_COLL_HEAD, NPF_COLL_NEXT, NPF_COLL_FUNC, NPF_COLL_NCHANNELS, &c->lists[0]);
    list_cfg(l, NPF_P2P_HEAD, NPF_P2P_NEXT, NPF_P2P_FUNC, NPF_P2P_NCHANNELS, &c->lists[1]);
    if (c->lists[0].head == NP_NCCL_NO_FIELD || c->lists[1].head == NP_NCCL_NO_FIELD)
        note_missing(l, "plan task lists (NCCL before 2.23 has none): operations come from "
                        "the API calls only");
    note_missing_fields(l, NPF_COLL_FUNC, NPF_COLL_NCHANNELS);
    note_missing_fields(l, NPF_P2P_FUNC, NPF_P2P_NCHANNELS);
}

void np_nccl_layout_load(const char *path, struct np_nccl_layout *out) {
    struct np_field_query queries[NPF_COUNT];
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < NPF_COUNT; i++)
        queries[i] = fields[i].query;
    out->status = np_dwarf_fields(path, queries, NPF_COUNT, out->f);
    if (out->status == 0) {
        build_cfg(out);
        return;
    }
    for (int i = 0; i < NPF_COUNT; i++)
        out->f[i].offset = -1;
    build_cfg(out); /* every span empty: BPF reads nothing */
    snprintf(out->missing, sizeof(out->missing), "%s",
             out->status == -ENODATA
                 ? "no debug info (stripped library): communicator identity, launch stream and "
                   "kernel plans are not read; operations come from the API calls only"
                 : "debug info unreadable: communicator identity, launch stream and kernel "
                   "plans are not read; operations come from the API calls only");
}

bool np_nccl_field_get(const struct np_nccl_layout *l, enum np_nccl_field f, const uint8_t *bytes,
                       uint32_t lo, uint32_t len, int64_t *out) {
    if ((unsigned)f >= NPF_COUNT)
        return false;
    const struct np_field *fd = &l->f[f];
    if (fd->offset < 0 || fd->offset < lo)
        return false;
    uint64_t at = (uint64_t)fd->offset - lo;
    uint64_t end = (uint64_t)field_end(fd) - lo;
    if (end > len)
        return false;
    uint64_t raw = 0;
    size_t n = len - at < sizeof(raw) ? len - at : sizeof(raw);
    memcpy(&raw, bytes + at, n); /* little-endian */
    unsigned bits = fd->bit_size ? fd->bit_size : (fd->size && fd->size < 8 ? fd->size * 8 : 64);
    if (fd->bit_size)
        raw >>= fd->bit_shift;
    if (bits < 64) {
        raw &= (1ull << bits) - 1;
        if (fields[f].is_signed && (raw >> (bits - 1)) & 1)
            raw |= ~0ull << bits;
    }
    *out = (int64_t)raw;
    return true;
}

void np_nccl_comm_id_decode(const struct np_nccl_layout *l, const uint8_t *bytes, uint32_t len,
                            struct np_nccl_comm_id *out) {
    int64_t hash = 0, rank = -1, nranks = -1, dev = -1;
    uint32_t lo = l->cfg.comm_lo;
    memset(out, 0, sizeof(*out));
    if (!l->comm_ok || !np_nccl_field_get(l, NPF_RANK, bytes, lo, len, &rank) ||
        !np_nccl_field_get(l, NPF_NRANKS, bytes, lo, len, &nranks))
        return;
    np_nccl_field_get(l, NPF_COMM_HASH, bytes, lo, len, &hash);
    np_nccl_field_get(l, NPF_CUDA_DEV, bytes, lo, len, &dev);
    out->known = true;
    out->hash = (uint64_t)hash;
    out->rank = (int32_t)rank;
    out->nranks = (int32_t)nranks;
    out->cuda_dev = (int32_t)dev;
}
