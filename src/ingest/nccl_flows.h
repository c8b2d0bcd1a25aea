/* nccl_flows.h - decodes the --nccl-flows ring records
 * (include/ncclprobe/flows.h) with the layouts of the library that sent
 * them: the communicator's identity, the ncclProxyOp's fields by name
 * (opCount, nsteps, nbytes, pattern, protocol...) and, for a peer record,
 * its direction, peer, channel and the stage of the pattern it belongs to. */
#ifndef NP_INGEST_NCCL_FLOWS_H
#define NP_INGEST_NCCL_FLOWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attach/nccl_flows_attach.h"

struct np_flow_rec {
    enum np_flow_kind kind;
    uint32_t slot; /* the library's (np_flow_lib_of) */
    uint32_t pid, tid;
    uint64_t ts_ns;
    uint64_t launch_id; /* launches.jsonl's launch_id of the plan's launch; 0: unknown */
    uint64_t comm;      /* address */
    bool comm_known;    /* hash/rank/nranks read */
    uint64_t comm_hash;
    int32_t rank, nranks;
    /* ncclProxyOp */
    uint64_t op_count;
    int64_t nsteps, nbytes, chunk_size, slice_steps, chunk_steps, root, nchannels;
    int channel;           /* the op's channelId (peer records: also read from the channel) */
    const char *pattern;   /* "RING_TWICE"; "?" unknown */
    const char *protocol;  /* "LL", "LL128", "SIMPLE" */
    const char *algorithm; /* "RING", ...; NULL when the library has no such field */
    const char *coll;      /* "AllReduce"; NULL: unknown */
    int pattern_id;
    /* NP_FLOW_EV_PEER */
    bool send;
    int peer, conn_index, tree_up;
};

/* A communicator's channels (NP_FLOW_EV_TOPO), as BPF copied them at its first op. */
struct np_flow_channel_topo {
    int id, ring_prev, ring_next, nuser; /* nuser: user ranks copied (nranks, at most 64) */
    int tree_up, tree_down[3];
    bool has_nvls, has_collnet;
    int nvls_out, collnet_chain_up, collnet_direct_out;
    int user_ranks[NP_FLOW_TOPO_RANKS];
};
struct np_flow_topology {
    int nchannels;
    struct np_flow_channel_topo ch[NP_FLOW_MAX_CHANNELS];
};
/* Decodes a topology record: the communicator into r, its channels into t. */
int np_flow_decode_topology(const struct np_flow_attacher *fa, const void *data, size_t size,
                            struct np_flow_rec *r, struct np_flow_topology *t);

/* 0, or -EINVAL for a record that does not fit its kind or its slot. */
int np_flow_decode(const struct np_flow_attacher *fa, const void *data, size_t size,
                   struct np_flow_rec *out);
/* The stage of step `step` of a peer record ("reduce-scatter", "all-gather", "reduce",
 * "broadcast"), NULL when the pattern has none (docs/nccl.md, "Flows"). */
const char *np_flow_stage(const struct np_flow_rec *r, int64_t step);

#endif
