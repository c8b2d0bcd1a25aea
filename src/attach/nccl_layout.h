/* nccl_layout.h - where libnccl keeps what ncclprobe reads at a kernel
 * launch: the communicator's identity (commHash, rank, nRanks, cudaDev),
 * the launch stream, the plan (kernelFn, channelMask, threadPerBlock, the
 * symmetric and copy-engine flags) and the tasks on its two task lists.
 * Offsets come from the DWARF of the very libnccl a target maps (read once
 * per file), never from a table for one version: they move in almost every
 * release. The layout also turns into the BPF configuration (struct
 * np_nccl_cfg) and decodes the raw bytes BPF copied. */
#ifndef NP_NCCL_LAYOUT_H
#define NP_NCCL_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attach/dwarf_layout.h"
#include "ncclprobe/events.h"

enum np_nccl_field {
    NPF_COMM_HASH,
    NPF_RANK,
    NPF_NRANKS,
    NPF_CUDA_DEV,
    NPF_COMM_STREAMS, /* ncclComm.planner.streams */
    NPF_STREAM,       /* ncclCudaStreamList.stream */
    NPF_KERNEL_FN,
    NPF_CHANNEL_MASK,
    NPF_THREADS, /* ncclKernelPlan.threadPerBlock */
    NPF_IS_SYM,
    NPF_IS_CE,
    NPF_CE_ARGS, /* ncclKernelPlan.ceCollArgs (a union with kernelArgs) */
    NPF_COLL_HEAD,
    NPF_P2P_HEAD,
    NPF_COLL_NEXT,
    NPF_COLL_FUNC,
    NPF_COLL_COUNT,
    NPF_COLL_ROOT,
    NPF_COLL_DATATYPE,
    NPF_COLL_OP,
    NPF_COLL_ALGO,
    NPF_COLL_PROTO,
    NPF_COLL_NCHANNELS,
    NPF_P2P_NEXT,
    NPF_P2P_FUNC,
    NPF_P2P_COUNT,
    NPF_P2P_DATATYPE,
    NPF_P2P_PEER, /* ncclTaskP2p.root */
    NPF_P2P_NCHANNELS,
    NPF_CE_FUNC,
    NPF_CE_ROOT,
    NPF_CE_NELTS,
    NPF_CE_ELTSIZE,
    NPF_COUNT
};

struct np_nccl_layout {
    int status; /* 0: read; -ENODATA: no debug info (stripped); other -errno */
    struct np_field f[NPF_COUNT];
    bool comm_ok;           /* the communicator's identity fits one copied span */
    bool plan_ok;           /* plan and task fields: kernel plans can be decoded */
    struct np_nccl_cfg cfg; /* BPF's view (comm_arg/plan_arg filled in per probe) */
    char missing[512];      /* what cannot be read, for the summary; "" when nothing */
};

/* Reads the layout of the libnccl at path (through the target's root). A
 * file without debug info is not an error: status says so and missing
 * tells what the recording will lack. */
void np_nccl_layout_load(const char *path, struct np_nccl_layout *out);

/* Reads field f from bytes copied from the struct starting at struct
 * offset lo (len bytes); false when the layout has no such field or it was
 * not copied. Bit-fields and signed members are sign-extended. */
bool np_nccl_field_get(const struct np_nccl_layout *l, enum np_nccl_field f, const uint8_t *bytes,
                       uint32_t lo, uint32_t len, int64_t *out);

/* The communicator identity as read from a span at cfg.comm_lo. */
struct np_nccl_comm_id {
    bool known;
    uint64_t hash;
    int32_t rank, nranks, cuda_dev;
};
void np_nccl_comm_id_decode(const struct np_nccl_layout *l, const uint8_t *bytes, uint32_t len,
                            struct np_nccl_comm_id *out);

#endif
