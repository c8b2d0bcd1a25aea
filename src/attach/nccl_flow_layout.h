/* nccl_flow_layout.h - what ncclprobe needs from a libnccl to see its proxy
 * flows (--nccl-flows, docs/nccl.md "Flows"): the two probe points by
 * .symtab name (ncclProxySaveOp, and SaveProxy or its IPA-SRA clone
 * "SaveProxy...isra.N"), and where ncclProxyOp's fields, a channel's
 * topology (ring, tree, NVLS, CollNet peers), its peers' connectors and
 * the communicator's channel array are, all from the library's own DWARF
 * (once per file, like nccl_layout.h: every release moves them). Also
 * ncclPattern_t's names ("ncclPatternRingTwice" -> "RING_TWICE"), and where
 * a SaveProxy clone takes its arguments (its DWARF), checked against where
 * the probe reads them. */
#ifndef NP_NCCL_FLOW_LAYOUT_H
#define NP_NCCL_FLOW_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attach/dwarf_layout.h"
#include "attach/dwarf_params.h"

enum np_flow_field {
    /* ncclProxyOp */
    NPFF_OP_OPCOUNT,
    NPFF_OP_NSTEPS,
    NPFF_OP_NBYTES,
    NPFF_OP_CHUNKSIZE,
    NPFF_OP_SLICESTEPS,
    NPFF_OP_CHUNKSTEPS,
    NPFF_OP_CHANNEL,
    NPFF_OP_PATTERN,
    NPFF_OP_PROTOCOL,
    NPFF_OP_ALGORITHM,
    NPFF_OP_COLL,
    NPFF_OP_ROOT,
    NPFF_OP_NCHANNELS,
    /* ncclChannel */
    NPFF_CH_SIZE, /* sizeof: the stride of ncclComm.channels[] */
    NPFF_CH_PEERS,
    NPFF_CH_RING_PREV,
    NPFF_CH_RING_NEXT,
    NPFF_CH_RING_USER_RANKS,
    NPFF_CH_TREE_UP,
    NPFF_CH_TREE_DOWN,
    NPFF_CH_NVLS_OUT,           /* optional (2.17+) */
    NPFF_CH_COLLNET_CHAIN_UP,   /* optional */
    NPFF_CH_COLLNET_DIRECT_OUT, /* optional */
    NPFF_CH_ID,
    /* ncclChannelPeer, ncclConnector */
    NPFF_PEER_SEND,
    NPFF_PEER_RECV,
    NPFF_CONN_SIZE, /* sizeof(ncclConnector): the stride of send[] / recv[] */
    NPFF_CONN_PROXY_PROGRESS,
    /* ncclComm */
    NPFF_COMM_CHANNELS,
    NPFF_COMM_NCHANNELS,
    NPFF_COUNT
};

enum np_flow_symbol {
    NP_FLOW_SYM_SAVE_OP,    /* ncclProxySaveOp(comm, op, justInquire): one op */
    NP_FLOW_SYM_SAVE_PROXY, /* SaveProxy(...) or SaveProxy...isra.N: one direction and peer */
    NP_FLOW_SYM_UPLOAD,     /* uploadProxyOps(comm, plan), optional: the ops' launch_id */
    NP_FLOW_SYM_LAUNCH, /* ncclLaunchKernel(comm, plan), optional: topology at the first kernel */
    NP_FLOW_SYMS
};

/* SaveProxy(comm, channel, type, peer, op, connIndex, justInquire)'s parameters. */
enum np_flow_arg {
    NP_FLOW_ARG_COMM,
    NP_FLOW_ARG_CHANNEL,
    NP_FLOW_ARG_TYPE,
    NP_FLOW_ARG_PEER,
    NP_FLOW_ARG_OP,
    NP_FLOW_ARG_CONN_INDEX,
    NP_FLOW_ARG_JUST_INQUIRE,
    NP_FLOW_ARGS
};

#define NP_FLOW_PATTERNS 32 /* ncclPattern_t values kept (16 in 2.28) */

struct np_flow_layout {
    int status; /* 0: flows can be read; -ENODATA: no DWARF; -ENOENT: a field or .symtab
                   symbol missing; -EPROTO: the SaveProxy clone's arguments are not where
                   the probe reads them (2.28.9's: include/ncclprobe/flows.h) */
    struct np_field f[NPFF_COUNT];
    uint64_t sym_vaddr[NP_FLOW_SYMS];  /* 0: not found */
    uint64_t sym_offset[NP_FLOW_SYMS]; /* their file offsets (uprobes) */
    bool save_proxy_clone;             /* SaveProxy is an IPA-SRA clone (2.28.9's signature) */
    /* the clone's parameters at its entry, from its DWARF (all NP_PARAM_ABSENT when
     * SaveProxy is no clone: the psABI places them) */
    struct np_param_loc save_proxy_args[NP_FLOW_ARGS];
    char pattern[NP_FLOW_PATTERNS][24]; /* "RING_TWICE"; "" unknown */
    bool patterns_from_dwarf;
    char missing[512]; /* why flows are absent or partial, for summary.json; "" none */
};

/* Reads the flow layout of the libnccl at path. Never fails: status and
 * missing say what cannot be read. */
void np_flow_layout_load(const char *path, struct np_flow_layout *out);

/* "ncclProxyOp.nsteps", "ncclChannel" (a size) */
const char *np_flow_field_name(enum np_flow_field f);
const char *np_flow_symbol_name(enum np_flow_symbol s);
/* "connIndex": the parameter's name in NCCL's source */
const char *np_flow_arg_name(enum np_flow_arg a);
/* NCCL's enumerator "ncclPatternRingTwice" as the flow files name it: "RING_TWICE". */
void np_flow_pattern_name(const char *enumerator, char *out, size_t size);

#endif
