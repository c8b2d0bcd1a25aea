/* flows.h - the one definition of what crosses between bpf/nccl_flows.bpf.c
 * and user space for --nccl-flows (docs/nccl.md, "Flows"): the per-library
 * configuration BPF reads (offsets from the library's DWARF, cookie-keyed)
 * and the record each probe hit sends through the flows' own ring buffer.
 * A separate BPF object: the default path loads none of it. The one map
 * both BPF objects share, plan_launches, is defined here too. */
#ifndef NCCLPROBE_FLOWS_H
#define NCCLPROBE_FLOWS_H

#ifdef __BPF__
/* vmlinux.h provides the __u* types */
#else
#include <linux/types.h>
#endif

#define NP_FLOW_MAX_LIBS 256   /* libnccl mappings probed at once (cookie 1..) */
#define NP_FLOW_OP_BYTES 256   /* span of ncclProxyOp copied (232 bytes in 2.28) */
#define NP_FLOW_COMM_BYTES 128 /* the communicator's identity span (commHash..cudaDev) */

#define NP_FLOW_MAX_CHANNELS 64 /* MAXCHANNELS from 2.25 (32 before) */
#define NP_FLOW_CH_SPAN 64      /* ncclChannel ring.prev .. tree.down (52 bytes in 2.28) */
#define NP_FLOW_TOPO_RANKS 64   /* ring user ranks copied per channel */
#define NP_FLOW_NO_FIELD 0xffffffffu

/* What the probe is (the high byte of the attach cookie; the low bytes: the library's slot). */
enum np_flow_probe {
    NP_FLOW_PROBE_SAVE_OP = 1,         /* ncclProxySaveOp(comm, op, justInquire) */
    NP_FLOW_PROBE_SAVE_PROXY = 2,      /* SaveProxy, as a normal function */
    NP_FLOW_PROBE_SAVE_PROXY_ISRA = 3, /* SaveProxy.isra.N, 2.28.9's clone: (comm,
                                          &channel->peers, &channel->id, type, peer, op,
                                          connIndex@s0, justInquire@s1); each clone's
                                          DWARF is checked against it first
                                          (nccl_flow_layout.c, clone_args) */
    NP_FLOW_PROBE_UPLOAD = 4,          /* uploadProxyOps(comm, plan): posts a plan's ops */
    NP_FLOW_PROBE_LAUNCH = 5,          /* ncclLaunchKernel(comm, plan): the communicator's
                                          topology at its first kernel, proxy ops or not */
};

/* plan_launches: which launch a kernel plan went out with. bpf/ncclprobe.bpf.c
 * adds {tgid, plan} -> launch_id at ncclLaunchKernel (while the flows are on,
 * plan_launch_ids); bpf/nccl_flows.bpf.c looks the plan up at uploadProxyOps,
 * which posts that plan's proxy ops just after the launch (or at each replay
 * of a captured graph: then the capturing launch's id). The flows object
 * reuses the main object's map. */
#define NP_PLAN_LAUNCHES 16384
struct np_plan_key {
    __u64 plan; /* the ncclKernelPlan's address */
    __u32 tgid;
    __u32 pad;
};

#ifdef __BPF__
/* The map, as both BPF objects declare it. */
#define NP_PLAN_LAUNCHES_MAP                                                                       \
    struct {                                                                                       \
        __uint(type, BPF_MAP_TYPE_LRU_HASH);                                                       \
        __uint(max_entries, NP_PLAN_LAUNCHES);                                                     \
        __type(key, struct np_plan_key);                                                           \
        __type(value, __u64);                                                                      \
    } plan_launches SEC(".maps")
#endif

#define NP_FLOW_COOKIE(probe, slot) (((__u64)(probe) << 32) | (__u32)(slot))

/* Per library (flow_cfg[slot]). Offsets in bytes. */
struct np_flow_cfg {
    __u32 op_lo, op_len;        /* ncclProxyOp span, op_len <= NP_FLOW_OP_BYTES */
    __u32 comm_lo, comm_len;    /* ncclComm identity span, comm_len <= NP_FLOW_COMM_BYTES */
    __u32 ch_peers;             /* ncclChannel.peers */
    __u32 ch_id;                /* ncclChannel.id */
    __u32 ch_tree_up;           /* ncclChannel.tree.up */
    __u32 peer_send, peer_recv; /* ncclChannelPeer.send / .recv */
    __u32 conn_size;            /* sizeof(ncclConnector) */
    __u32 conn_progress;        /* ncclConnector.proxyConn.proxyProgress */
    /* the topology, copied at a communicator's first posted op */
    __u32 comm_channels, comm_nchannels, comm_nranks; /* ncclComm.channels, .nChannels, .nRanks */
    __u32 ch_size;                                    /* sizeof(ncclChannel) */
    __u32 ch_span_lo, ch_span_len; /* ring.prev .. tree.down, len <= NP_FLOW_CH_SPAN */
    __u32 ch_user_ranks;           /* ring.userRanks (a pointer) */
    __u32 ch_nvls_out, ch_chain_up, ch_direct_out; /* NP_FLOW_NO_FIELD: none */
};

enum np_flow_kind {
    NP_FLOW_EV_OP = 1,   /* an op posted to the proxy (ncclProxySaveOp, justInquire NULL) */
    NP_FLOW_EV_PEER = 2, /* one direction and peer of it the proxy progresses (SaveProxy) */
    NP_FLOW_EV_TOPO = 3, /* a communicator's channels, at its first kernel or posted op */
};

struct np_flow_event {
    __u32 kind; /* enum np_flow_kind */
    __u32 slot; /* the library (flow_cfg index) */
    __u32 pid, tid;
    __u64 ts_ns;
    __u64 comm;      /* the ncclComm's address */
    __u64 launch_id; /* the launch whose plan posted the op (plan_launches); 0: unknown */
    __s32 type;      /* NP_FLOW_EV_PEER: 0 recv, 1 send */
    __s32 peer;
    __s32 conn_index;
    __s32 channel; /* ncclChannel.id, read at SaveProxy */
    __s32 tree_up; /* the channel's tree.up (the stage of TREE_UP_DOWN) */
    __u32 op_len, comm_len;
    __u32 pad;
    __u8 comm_bytes[NP_FLOW_COMM_BYTES];
    __u8 op[NP_FLOW_OP_BYTES];
};

struct np_flow_topo_channel {
    __u8 span[NP_FLOW_CH_SPAN]; /* from ch_span_lo */
    __s32 nvls_out, chain_up, direct_out;
    __u32 nuser; /* user_ranks copied */
    __s32 user_ranks[NP_FLOW_TOPO_RANKS];
};

/* NP_FLOW_EV_TOPO (kind first, like struct np_flow_event): a communicator and its channels,
 * once per (process, communicator) - at its first kernel launch, or its first op posted to the
 * proxy when ncclLaunchKernel is not probed. */
struct np_flow_topo_event {
    __u32 kind, slot, pid, tid;
    __u64 ts_ns, comm;
    __s32 nchannels; /* ncclComm.nChannels; channels copied: min(it, NP_FLOW_MAX_CHANNELS) */
    __s32 nranks;
    __u32 comm_len, pad;
    __u8 comm_bytes[NP_FLOW_COMM_BYTES];
    struct np_flow_topo_channel ch[NP_FLOW_MAX_CHANNELS];
};

#endif
