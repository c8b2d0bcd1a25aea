/* nccl_flow_layout.c - libnccl's proxy-flow probe points (.symtab, IPA
 * clones included) and the ncclProxyOp / ncclChannel / connector layouts
 * from DWARF, plus ncclPattern_t's names and the check that a SaveProxy
 * clone takes its arguments where the probe reads them (see
 * nccl_flow_layout.h). */
#define _GNU_SOURCE
#include "attach/nccl_flow_layout.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "attach/elfscan.h"

struct flow_field_def {
    struct np_field_query query;
    bool optional; /* flows are still read without it */
};

static const struct flow_field_def fields[NPFF_COUNT] = {
    [NPFF_OP_OPCOUNT] = {{"ncclProxyOp", "opCount"}, false},
    [NPFF_OP_NSTEPS] = {{"ncclProxyOp", "nsteps"}, false},
    [NPFF_OP_NBYTES] = {{"ncclProxyOp", "nbytes"}, false},
    [NPFF_OP_CHUNKSIZE] = {{"ncclProxyOp", "chunkSize"}, false},
    [NPFF_OP_SLICESTEPS] = {{"ncclProxyOp", "sliceSteps"}, false},
    [NPFF_OP_CHUNKSTEPS] = {{"ncclProxyOp", "chunkSteps"}, false},
    [NPFF_OP_CHANNEL] = {{"ncclProxyOp", "channelId"}, false},
    [NPFF_OP_PATTERN] = {{"ncclProxyOp", "pattern"}, false},
    [NPFF_OP_PROTOCOL] = {{"ncclProxyOp", "protocol"}, false},
    [NPFF_OP_ALGORITHM] = {{"ncclProxyOp", "algorithm"}, true},
    [NPFF_OP_COLL] = {{"ncclProxyOp", "coll"}, true},
    [NPFF_OP_ROOT] = {{"ncclProxyOp", "root"}, false},
    [NPFF_OP_NCHANNELS] = {{"ncclProxyOp", "nChannels"}, true},
    [NPFF_CH_SIZE] = {{"ncclChannel", ""}, false},
    [NPFF_CH_PEERS] = {{"ncclChannel", "peers"}, false},
    [NPFF_CH_RING_PREV] = {{"ncclChannel", "ring.prev"}, false},
    [NPFF_CH_RING_NEXT] = {{"ncclChannel", "ring.next"}, false},
    [NPFF_CH_RING_USER_RANKS] = {{"ncclChannel", "ring.userRanks"}, false},
    [NPFF_CH_TREE_UP] = {{"ncclChannel", "tree.up"}, false},
    [NPFF_CH_TREE_DOWN] = {{"ncclChannel", "tree.down"}, false},
    [NPFF_CH_NVLS_OUT] = {{"ncclChannel", "nvls.out"}, true},
    [NPFF_CH_COLLNET_CHAIN_UP] = {{"ncclChannel", "collnetChain.up"}, true},
    [NPFF_CH_COLLNET_DIRECT_OUT] = {{"ncclChannel", "collnetDirect.out"}, true},
    [NPFF_CH_ID] = {{"ncclChannel", "id"}, false},
    [NPFF_PEER_SEND] = {{"ncclChannelPeer", "send"}, false},
    [NPFF_PEER_RECV] = {{"ncclChannelPeer", "recv"}, false},
    [NPFF_CONN_SIZE] = {{"ncclConnector", ""}, false},
    [NPFF_CONN_PROXY_PROGRESS] = {{"ncclConnector", "proxyConn.proxyProgress"}, false},
    [NPFF_COMM_CHANNELS] = {{"ncclComm", "channels"}, false},
    [NPFF_COMM_NCHANNELS] = {{"ncclComm", "nChannels"}, false},
};

static const char *const symbols[NP_FLOW_SYMS] = {
    [NP_FLOW_SYM_SAVE_OP] = "_Z15ncclProxySaveOpP8ncclCommP11ncclProxyOpPb",
    [NP_FLOW_SYM_SAVE_PROXY] = "_ZL9SaveProxyP8ncclCommP11ncclChanneliiP11ncclProxyOpiPb",
    /* not a clone: a clone's arguments may differ (2.23.4 inlines it into a .part clone) */
    [NP_FLOW_SYM_UPLOAD] = "_ZL14uploadProxyOpsP8ncclCommP14ncclKernelPlan",
    [NP_FLOW_SYM_LAUNCH] = "_Z16ncclLaunchKernelP8ncclCommP14ncclKernelPlan",
};

/* Probes the flows work without, each for one thing more. */
static bool optional_symbol(int i) {
    return i == NP_FLOW_SYM_UPLOAD || i == NP_FLOW_SYM_LAUNCH;
}

static const char *const arg_names[NP_FLOW_ARGS] = {
    [NP_FLOW_ARG_COMM] = "comm",
    [NP_FLOW_ARG_CHANNEL] = "channel",
    [NP_FLOW_ARG_TYPE] = "type",
    [NP_FLOW_ARG_PEER] = "peer",
    [NP_FLOW_ARG_OP] = "op",
    [NP_FLOW_ARG_CONN_INDEX] = "connIndex",
    [NP_FLOW_ARG_JUST_INQUIRE] = "justInquire",
};

#define ARG_REG(r)                                                                                 \
    { .kind = NP_PARAM_REG, .reg = NP_DWREG_##r }
#define ARG_CFA(o)                                                                                 \
    { .kind = NP_PARAM_CFA, .cfa_offset = (o) }
/* Where np_flow_save_proxy (bpf/nccl_flows.bpf.c) reads the clone's arguments
 * (NP_FLOW_PROBE_SAVE_PROXY_ISRA, 2.28.9's clone): the stack ones at [rsp+8]
 * and [rsp+16] on entry, CFA+0 and CFA+8. channel is not passed whole: IPA-SRA
 * splits it into &channel->peers (RSI) and &channel->id (RDX), pieces the
 * DWARF does not name. */
static const struct np_param_loc clone_args[NP_FLOW_ARGS] = {
    [NP_FLOW_ARG_COMM] = ARG_REG(RDI),       [NP_FLOW_ARG_CHANNEL] = {.kind = NP_PARAM_NONE},
    [NP_FLOW_ARG_TYPE] = ARG_REG(RCX),       [NP_FLOW_ARG_PEER] = ARG_REG(R8),
    [NP_FLOW_ARG_OP] = ARG_REG(R9),          [NP_FLOW_ARG_CONN_INDEX] = ARG_CFA(0),
    [NP_FLOW_ARG_JUST_INQUIRE] = ARG_CFA(8),
};

/* ncclPattern_t as in 2.23-2.29 (proxy.h), for a library whose DWARF lacks the enum. */
static const char *const builtin_patterns[] = {
    "RING",         "RING_TWICE",    "PIPELINE_FROM",  "PIPELINE_TO", "TREE_UP",   "TREE_DOWN",
    "TREE_UP_DOWN", "COLLNET_CHAIN", "COLLNET_DIRECT", "NVLS",        "NVLS_TREE", "PAT_UP",
    "PAT_DOWN",     "SEND",          "RECV",           "PROFILER"};

const char *np_flow_field_name(enum np_flow_field f) {
    static char names[NPFF_COUNT][64];
    if ((unsigned)f >= NPFF_COUNT)
        return "?";
    if (!names[f][0])
        snprintf(names[f], sizeof(names[f]), "%s%s%s", fields[f].query.type,
                 fields[f].query.path[0] ? "." : "", fields[f].query.path);
    return names[f];
}

const char *np_flow_symbol_name(enum np_flow_symbol s) {
    return (unsigned)s < NP_FLOW_SYMS ? symbols[s] : "?";
}

const char *np_flow_arg_name(enum np_flow_arg a) {
    return (unsigned)a < NP_FLOW_ARGS ? arg_names[a] : "?";
}

void np_flow_pattern_name(const char *enumerator, char *out, size_t size) {
    const char *p = strncmp(enumerator, "ncclPattern", 11) == 0 ? enumerator + 11 : enumerator;
    size_t n = 0;
    if (size == 0)
        return;
    for (size_t i = 0; p[i] && n + 2 < size; i++) {
        if (i > 0 && isupper((unsigned char)p[i]) && !isupper((unsigned char)p[i - 1]))
            out[n++] = '_';
        out[n++] = (char)toupper((unsigned char)p[i]);
    }
    out[n] = '\0';
}

static void on_enumerator(void *ctx, size_t index, const char *name, int64_t value) {
    struct np_flow_layout *l = ctx;
    (void)index;
    if (value < 0 || value >= NP_FLOW_PATTERNS || l->pattern[value][0])
        return;
    np_flow_pattern_name(name, l->pattern[value], sizeof(l->pattern[value]));
    l->patterns_from_dwarf = true;
}

static int read_dwarf(const char *path, struct np_flow_layout *out) {
    struct np_field_query queries[NPFF_COUNT];
    static const char *const enums[] = {"ncclPattern_t"};
    for (int i = 0; i < NPFF_COUNT; i++)
        queries[i] = fields[i].query;
    struct np_dwarf_request req = {.fields = queries,
                                   .nfields = NPFF_COUNT,
                                   .out = out->f,
                                   .enums = enums,
                                   .nenums = 1,
                                   .on_enumerator = on_enumerator,
                                   .ctx = out};
    return np_dwarf_read(path, &req);
}

static int read_symbols(const char *path, struct np_flow_layout *out) {
    struct np_elf_symbol_query q[NP_FLOW_SYMS];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    for (int i = 0; i < NP_FLOW_SYMS; i++)
        q[i] = (struct np_elf_symbol_query){.name = symbols[i], .clones = !optional_symbol(i)};
    int err = np_elf_read_symbols(fd, q, NP_FLOW_SYMS);
    for (int i = 0; i < NP_FLOW_SYMS && !err; i++)
        if (q[i].err == 0 && np_elf_file_offset(fd, q[i].vaddr, &out->sym_offset[i]) == 0)
            out->sym_vaddr[i] = q[i].vaddr;
    close(fd);
    if (err)
        return err;
    out->save_proxy_clone = q[NP_FLOW_SYM_SAVE_PROXY].err == 0 && q[NP_FLOW_SYM_SAVE_PROXY].clone;
    return 0;
}

/* Appends "; <what><name>" (without "; " when buf is empty); truncates. */
static void append(char *buf, size_t size, const char *what, const char *name) {
    size_t n = strlen(buf);
    if (n + 1 < size)
        snprintf(buf + n, size - n, "%s%s%.*s", n ? "; " : "", what, (int)(size - n - 1), name);
}

static void find_missing(struct np_flow_layout *l) {
    for (int i = 0; i < NPFF_COUNT; i++) {
        if (l->f[i].offset >= 0 || fields[i].optional)
            continue;
        append(l->missing, sizeof(l->missing), "no ", np_flow_field_name((enum np_flow_field)i));
        l->status = l->status ? l->status : -ENOENT;
    }
    for (int i = 0; i < NP_FLOW_SYMS; i++) {
        if (l->sym_vaddr[i] || optional_symbol(i))
            continue;
        append(l->missing, sizeof(l->missing), "no symbol ", symbols[i]);
        l->status = l->status ? l->status : -ENOENT;
    }
}

static bool same_place(const struct np_param_loc *got, const struct np_param_loc *want) {
    if (want->kind == NP_PARAM_NONE) /* not passed whole */
        return got->kind == NP_PARAM_NONE || got->kind == NP_PARAM_ABSENT;
    if (got->kind != want->kind)
        return false;
    return want->kind == NP_PARAM_REG ? got->reg == want->reg : got->cfa_offset == want->cfa_offset;
}

static void refuse(struct np_flow_layout *l, const char *why) {
    append(l->missing, sizeof(l->missing), "", why);
    l->status = l->status ? l->status : -EPROTO;
}

/* An IPA-SRA clone's signature is the compiler's: its DWARF must place every
 * argument where the probe reads it, or its flows are refused rather than
 * read from the wrong registers. A normal SaveProxy follows the psABI. */
static void check_clone_args(const char *path, struct np_flow_layout *l) {
    if (!l->save_proxy_clone)
        return;
    int err = np_dwarf_entry_params(path, l->sym_vaddr[NP_FLOW_SYM_SAVE_PROXY], arg_names,
                                    NP_FLOW_ARGS, l->save_proxy_args);
    if (err) {
        refuse(l, "no DWARF for the SaveProxy clone's parameters: its arguments are unknown");
        return;
    }
    for (int i = 0; i < NP_FLOW_ARGS; i++) {
        if (same_place(&l->save_proxy_args[i], &clone_args[i]))
            continue;
        char got[24], want[24], why[128];
        np_param_loc_name(&l->save_proxy_args[i], got, sizeof(got));
        np_param_loc_name(&clone_args[i], want, sizeof(want));
        snprintf(why, sizeof(why), "SaveProxy clone's %s in %s, not %s where the probe reads it",
                 arg_names[i], got,
                 clone_args[i].kind == NP_PARAM_NONE ? "split into rsi and rdx" : want);
        refuse(l, why);
    }
}

void np_flow_layout_load(const char *path, struct np_flow_layout *out) {
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < NPFF_COUNT; i++)
        out->f[i].offset = -1;
    int err = read_dwarf(path, out);
    if (err) {
        for (int i = 0; i < NPFF_COUNT; i++)
            out->f[i].offset = -1;
        out->status = err;
        snprintf(out->missing, sizeof(out->missing), "%s",
                 err == -ENODATA ? "no debug info: proxy flows and topology are not read"
                                 : "debug info unreadable: proxy flows and topology are not read");
        return;
    }
    if (!out->patterns_from_dwarf)
        for (size_t i = 0; i < sizeof(builtin_patterns) / sizeof(builtin_patterns[0]); i++)
            snprintf(out->pattern[i], sizeof(out->pattern[i]), "%s", builtin_patterns[i]);
    err = read_symbols(path, out);
    if (err) {
        out->status = err;
        snprintf(out->missing, sizeof(out->missing), "cannot read symbols: %s", strerror(-err));
        return;
    }
    find_missing(out);
    check_clone_args(path, out);
}
