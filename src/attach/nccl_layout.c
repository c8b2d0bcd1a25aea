/* nccl_layout.c - libnccl struct layouts and enum names from DWARF, what
 * the file is (version, .symtab), how well it can be read, its BPF
 * configuration, and decoding of the bytes BPF copied (see nccl_layout.h). */
#define _GNU_SOURCE
#include "attach/nccl_layout.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "attach/elfscan.h"

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
    [NPF_COMM_TASK_STREAMS] = {{"ncclComm", "tasks.streams"}, false},
    [NPF_STREAM] = {{"ncclCudaStreamList", "stream"}, false},
    [NPF_KERNEL_FN] = {{"ncclKernelPlan", "kernelFn"}, false},
    [NPF_CHANNEL_MASK] = {{"ncclKernelPlan", "channelMask"}, false},
    [NPF_THREADS] = {{"ncclKernelPlan", "threadPerBlock"}, true},
    [NPF_IS_SYM] = {{"ncclKernelPlan", "isSymColl"}, false},
    [NPF_IS_CE] = {{"ncclKernelPlan", "isCeColl"}, false},
    [NPF_IS_RMA] = {{"ncclKernelPlan", "isRma"}, false},
    [NPF_CE_ARGS] = {{"ncclKernelPlan", "ceCollArgs"}, false},
    [NPF_RMA_ARGS] = {{"ncclKernelPlan", "rmaArgs"}, false},
    [NPF_COLL_HEAD] = {{"ncclKernelPlan", "collTaskQueue.head"}, false},
    [NPF_P2P_HEAD] = {{"ncclKernelPlan", "p2pTaskQueue.head"}, false},
    [NPF_BCAST_HEAD] = {{"ncclKernelPlan", "bcastTaskQueue.head"}, false},
    [NPF_RMA_PROXY_HEAD] = {{"ncclKernelPlan", "rmaTaskQueueProxy.head"}, false},
    [NPF_RMA_CE_HEAD] = {{"ncclKernelPlan", "rmaTaskQueueCe.head"}, false},
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
    [NPF_BCAST_NEXT] = {{"ncclTaskBcast", "next"}, false},
    [NPF_BCAST_FUNC] = {{"ncclTaskBcast", "func"}, true},
    [NPF_BCAST_COUNT] = {{"ncclTaskBcast", "count"}, false},
    [NPF_BCAST_DATATYPE] = {{"ncclTaskBcast", "datatype"}, true},
    [NPF_BCAST_ROOT] = {{"ncclTaskBcast", "root"}, true},
    [NPF_BCAST_ALGO] = {{"ncclTaskBcast", "algorithm"}, true},
    [NPF_BCAST_PROTO] = {{"ncclTaskBcast", "protocol"}, true},
    [NPF_BCAST_NCHANNELS] = {{"ncclTaskBcast", "nChannels"}, false},
    [NPF_RMA_NEXT] = {{"ncclTaskRma", "next"}, false},
    [NPF_RMA_FUNC] = {{"ncclTaskRma", "func"}, true},
    [NPF_RMA_COUNT] = {{"ncclTaskRma", "count"}, false},
    [NPF_RMA_DATATYPE] = {{"ncclTaskRma", "datatype"}, true},
    [NPF_RMA_BYTES] = {{"ncclTaskRma", "bytes"}, false},
    [NPF_RMA_PEER] = {{"ncclTaskRma", "peer"}, true},
    [NPF_RMA_NCHANNELS] = {{"ncclTaskRma", "nChannels"}, false},
    [NPF_CE_FUNC] = {{"ncclCeCollArgs", "func"}, true},
    [NPF_CE_ROOT] = {{"ncclCeCollArgs", "rootRank"}, true},
    [NPF_CE_NELTS] = {{"ncclCeCollArgs", "nElts"}, false},
    [NPF_CE_ELTSIZE] = {{"ncclCeCollArgs", "eltSize"}, false},
    [NPF_CE_DATATYPE] = {{"ncclCeCollArgs", "datatype"}, true},
    [NPF_RMA_ARGS_FUNC] = {{"ncclRmaArgs", "func"}, true},
};

/* Each task list: its head in the plan, and its task's fields (next first). */
static const struct {
    enum np_nccl_field head, first, last;
} lists[NP_NCCL_LISTS] = {
    [NP_NCCL_LIST_COLL] = {NPF_COLL_HEAD, NPF_COLL_NEXT, NPF_COLL_NCHANNELS},
    [NP_NCCL_LIST_P2P] = {NPF_P2P_HEAD, NPF_P2P_NEXT, NPF_P2P_NCHANNELS},
    [NP_NCCL_LIST_BCAST] = {NPF_BCAST_HEAD, NPF_BCAST_NEXT, NPF_BCAST_NCHANNELS},
    [NP_NCCL_LIST_RMA_PROXY] = {NPF_RMA_PROXY_HEAD, NPF_RMA_NEXT, NPF_RMA_NCHANNELS},
    [NP_NCCL_LIST_RMA_CE] = {NPF_RMA_CE_HEAD, NPF_RMA_NEXT, NPF_RMA_NCHANNELS},
};

const char *np_nccl_field_name(enum np_nccl_field f) {
    static char names[NPF_COUNT][64];
    if ((unsigned)f >= NPF_COUNT)
        return "?";
    if (!names[f][0])
        snprintf(names[f], sizeof(names[f]), "%s.%s", fields[f].query.type, fields[f].query.path);
    return names[f];
}

const char *np_nccl_support_name(enum np_nccl_support s) {
    return s == NP_NCCL_FULL ? "full" : s == NP_NCCL_UNTESTED ? "untested" : "degraded";
}

static bool have(const struct np_nccl_layout *l, enum np_nccl_field f) {
    return l->f[f].offset >= 0;
}

const char *np_nccl_stream_path(const struct np_nccl_layout *l) {
    if (have(l, NPF_COMM_STREAMS))
        return np_nccl_field_name(NPF_COMM_STREAMS);
    return have(l, NPF_COMM_TASK_STREAMS) ? np_nccl_field_name(NPF_COMM_TASK_STREAMS) : NULL;
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

/* Appends sep (unless buf is empty) and what; cut at size, whole names or not. */
static void append(char *buf, size_t size, const char *sep, const char *what) {
    size_t used = strlen(buf);
    if (used < size && snprintf(buf + used, size - used, "%s%s", used ? sep : "", what) < 0)
        buf[used] = '\0';
}

/* ---- what must be there -------------------------------------------------
 * The communicator, the launch stream and the plan always; the collective
 * and point-to-point task lists always (NCCL before 2.23 has none: said);
 * a list, the copy-engine or the RMA plan only when the library has the
 * thing they hang off (later versions added them), then all its fields. */

static void require(struct np_nccl_layout *l, enum np_nccl_field f) {
    if (!have(l, f))
        l->missing_field[f] = true;
}

static void require_range(struct np_nccl_layout *l, enum np_nccl_field from,
                          enum np_nccl_field to) {
    for (unsigned i = from; i <= to; i++)
        require(l, i);
}

/* A list the library has needs its task fields; a core list it lacks is
 * missing as a list (its tasks are moot). */
static void require_list(struct np_nccl_layout *l, enum np_nccl_list list, bool core) {
    if (have(l, lists[list].head))
        require_range(l, lists[list].first, lists[list].last);
    else if (core)
        require(l, lists[list].head);
}

static void find_missing(struct np_nccl_layout *l) {
    require_range(l, NPF_COMM_HASH, NPF_CUDA_DEV);
    if (!have(l, NPF_COMM_TASK_STREAMS))
        require(l, NPF_COMM_STREAMS);
    require(l, NPF_STREAM);
    require_range(l, NPF_KERNEL_FN, NPF_THREADS);
    require_list(l, NP_NCCL_LIST_COLL, true);
    require_list(l, NP_NCCL_LIST_P2P, true);
    require_list(l, NP_NCCL_LIST_BCAST, false);
    if (have(l, NPF_IS_CE)) {
        require(l, NPF_CE_ARGS);
        require_range(l, NPF_CE_FUNC, NPF_CE_ELTSIZE);
    }
    if (have(l, NPF_IS_RMA)) {
        require(l, NPF_RMA_ARGS);
        require(l, NPF_RMA_ARGS_FUNC);
        require_list(l, NP_NCCL_LIST_RMA_PROXY, true);
        require_list(l, NP_NCCL_LIST_RMA_CE, true);
    }
    /* before 2.27: a plan's only task gets the plan's channel count */
    l->nchannels_from_plan =
        l->missing_field[NPF_COLL_NCHANNELS] || l->missing_field[NPF_P2P_NCHANNELS];
}

/* What the missing fields cost, in words. */
static void describe_missing(struct np_nccl_layout *l) {
    char names[512] = "";
    for (int i = 0; i < NPF_COUNT; i++)
        if (l->missing_field[i])
            append(names, sizeof(names), ", ", np_nccl_field_name(i));
    if (!names[0])
        return;
    snprintf(l->missing, sizeof(l->missing), "not in its DWARF: %s", names);
    const bool *m = l->missing_field;
    if (!l->comm_ok)
        append(l->missing, sizeof(l->missing), "; ", "the communicator's identity is not read");
    if (m[NPF_COMM_STREAMS] || m[NPF_STREAM])
        append(l->missing, sizeof(l->missing), "; ", "the launch stream is not read");
    if (!l->plan_ok)
        append(l->missing, sizeof(l->missing), "; ", "kernel plans are not read");
    if (m[NPF_COLL_HEAD] || m[NPF_P2P_HEAD])
        append(l->missing, sizeof(l->missing), "; ",
               "plans carry no task lists (NCCL before 2.23): a launch's operations come from "
               "the API calls only");
    if (l->nchannels_from_plan)
        append(l->missing, sizeof(l->missing), "; ",
               "no per-operation channel count (before 2.27): a plan's only operation gets the "
               "plan's (channelMask), others -1");
}

/* ---- the BPF configuration ------------------------------------------------ */

static void list_cfg(const struct np_nccl_layout *l, enum np_nccl_list list,
                     struct np_nccl_list_cfg *out) {
    enum np_nccl_field head = lists[list].head, next = lists[list].first;
    *out = (struct np_nccl_list_cfg){.head = NP_NCCL_NO_FIELD};
    if (!have(l, head) || !have(l, next) ||
        !span_of(l, lists[list].first + 1, lists[list].last, &out->lo, &out->len))
        return;
    out->head = (uint32_t)l->f[head].offset;
    out->next = (uint32_t)l->f[next].offset;
    if (out->len > NP_NCCL_TASK_BYTES)
        out->len = NP_NCCL_TASK_BYTES; /* fields past the copy read as unknown */
}

/* The pointee of the plan's argument union: ncclCeCollArgs or ncclRmaArgs
 * (one pointer in a union), copied from its start. */
static void aux_cfg(const struct np_nccl_layout *l, struct np_nccl_cfg *c) {
    uint32_t lo, len, end = 0;
    int64_t at = -1;
    if (have(l, NPF_CE_ARGS) && span_of(l, NPF_CE_FUNC, NPF_CE_DATATYPE, &lo, &len))
        at = l->f[NPF_CE_ARGS].offset, end = lo + len;
    if (have(l, NPF_RMA_ARGS) && span_of(l, NPF_RMA_ARGS_FUNC, NPF_RMA_ARGS_FUNC, &lo, &len) &&
        (at < 0 || at == l->f[NPF_RMA_ARGS].offset)) {
        at = l->f[NPF_RMA_ARGS].offset;
        end = lo + len > end ? lo + len : end;
    }
    c->plan_aux = NP_NCCL_NO_FIELD;
    c->aux_len = 0;
    if (at >= 0 && end <= NP_NCCL_AUX_BYTES)
        c->plan_aux = (uint32_t)at, c->aux_len = end;
}

static void stream_cfg(const struct np_nccl_layout *l, struct np_nccl_cfg *c) {
    enum np_nccl_field streams =
        have(l, NPF_COMM_STREAMS) ? NPF_COMM_STREAMS : NPF_COMM_TASK_STREAMS;
    c->comm_streams = NP_NCCL_NO_FIELD;
    if (have(l, streams) && have(l, NPF_STREAM)) {
        c->comm_streams = (uint32_t)l->f[streams].offset;
        c->stream_off = (uint32_t)l->f[NPF_STREAM].offset;
    }
}

static void build_cfg(struct np_nccl_layout *l) {
    struct np_nccl_cfg *c = &l->cfg;
    memset(c, 0, sizeof(*c));
    c->comm_arg = 0;
    c->plan_arg = 1;
    if (span_of(l, NPF_COMM_HASH, NPF_CUDA_DEV, &c->comm_lo, &c->comm_len) &&
        c->comm_len <= NP_NCCL_COMM_BYTES && have(l, NPF_RANK) && have(l, NPF_NRANKS))
        l->comm_ok = true;
    else
        c->comm_len = 0;
    stream_cfg(l, c);
    if (span_of(l, NPF_KERNEL_FN, NPF_IS_RMA, &c->plan_lo, &c->plan_len) &&
        c->plan_len <= NP_NCCL_PLAN_BYTES && have(l, NPF_KERNEL_FN))
        l->plan_ok = true;
    else
        c->plan_len = 0;
    aux_cfg(l, c);
    for (int i = 0; i < NP_NCCL_LISTS; i++)
        list_cfg(l, (enum np_nccl_list)i, &c->lists[i]);
}

/* ---- the file: version banner, .symtab, DWARF ------------------------------ */

static void read_elf_facts(const char *path, struct np_nccl_layout *out) {
    char banner[96];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    int major, minor, patch;
    /* "NCCL version 2.29.7+cuda13.2" (NCCL 3 would need its own look) */
    if (np_elf_describe(fd, "NCCL version 2.", &out->has_symtab, banner, sizeof(banner)) == 0 &&
        sscanf(banner, "NCCL version %d.%d.%d", &major, &minor, &patch) == 3) {
        snprintf(out->version, sizeof(out->version), "%d.%d.%d", major, minor, patch);
        out->version_code = major * 10000 + minor * 100 + patch;
    }
    close(fd);
}

static void on_enumerator(void *ctx, size_t index, const char *name, int64_t value) {
    np_nccl_names_add(ctx, (enum np_nccl_enum)index, name, value);
}

static int read_dwarf(const char *path, struct np_nccl_layout *out) {
    struct np_field_query queries[NPF_COUNT];
    const char *enums[NP_NCCL_ENUMS];
    for (int i = 0; i < NPF_COUNT; i++)
        queries[i] = fields[i].query;
    for (int i = 0; i < NP_NCCL_ENUMS; i++)
        enums[i] = np_nccl_enum_type((enum np_nccl_enum)i);
    struct np_dwarf_request req = {.fields = queries,
                                   .nfields = NPF_COUNT,
                                   .out = out->f,
                                   .enums = enums,
                                   .nenums = NP_NCCL_ENUMS,
                                   .on_enumerator = on_enumerator,
                                   .ctx = &out->names};
    int err = np_dwarf_read(path, &req);
    out->dwarf_version = err == 0 ? req.dwarf_version : 0;
    return err;
}

/* ---- how well it is read ----------------------------------------------------- */

static bool untested(const struct np_nccl_layout *l) {
    return l->version_code &&
           (l->version_code < NP_NCCL_TESTED_MIN || l->version_code > NP_NCCL_TESTED_MAX);
}

static void judge(struct np_nccl_layout *l) {
    const char *v = l->version[0] ? l->version : "of unknown version";
    l->support = NP_NCCL_FULL;
    if (l->missing[0] || !l->has_symtab) {
        l->support = NP_NCCL_DEGRADED;
        snprintf(l->note, sizeof(l->note), "NCCL %s%s: %s%s%s", v,
                 untested(l) ? " (not one of the tested 2.21-2.32)" : "",
                 l->has_symtab ? ""
                               : "no .symtab: ncclLaunchKernel cannot be probed (API calls "
                                 "only)",
                 !l->has_symtab && l->missing[0] ? "; " : "", l->missing);
    } else if (untested(l)) {
        l->support = NP_NCCL_UNTESTED;
        snprintf(l->note, sizeof(l->note),
                 "NCCL %s is outside the versions ncclprobe was tested with (2.21-2.32): its "
                 "fields and names are read by name from its DWARF, check what is recorded",
                 v);
    }
}

void np_nccl_layout_load(const char *path, struct np_nccl_layout *out) {
    memset(out, 0, sizeof(*out));
    np_nccl_names_clear(&out->names);
    read_elf_facts(path, out);
    out->status = read_dwarf(path, out);
    np_nccl_names_fill_builtin(&out->names);
    if (out->status != 0) {
        for (int i = 0; i < NPF_COUNT; i++)
            out->f[i].offset = -1;
        build_cfg(out); /* every span empty: BPF reads nothing */
        snprintf(out->missing, sizeof(out->missing), "%s",
                 out->status == -ENODATA
                     ? "no debug info (stripped library): communicator identity, launch stream "
                       "and kernel plans are not read; operations come from the API calls only"
                     : "debug info unreadable: communicator identity, launch stream and kernel "
                       "plans are not read; operations come from the API calls only");
    } else {
        build_cfg(out);
        find_missing(out);
        describe_missing(out);
    }
    judge(out);
}

/* ---- decoding -------------------------------------------------------------- */

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
