/* nccl_layout.h - where libnccl keeps what ncclprobe reads at a kernel
 * launch: the communicator's identity (commHash, rank, nRanks, cudaDev),
 * the launch stream, the plan (kernelFn, channelMask, threadPerBlock, the
 * symmetric, copy-engine and RMA flags) and the tasks on its task lists;
 * and what its enums' values are called (nccl_names.h). Offsets and names
 * come from the DWARF of the very libnccl a target maps (read once per
 * file), never from a table for one version: they move in almost every
 * release. Also what the file is: its NCCL version (from the version banner
 * in .rodata), whether it has .symtab and DWARF, and how well ncclprobe can
 * read it. The layout turns into the BPF configuration (struct
 * np_nccl_cfg) and decodes the raw bytes BPF copied. */
#ifndef NP_NCCL_LAYOUT_H
#define NP_NCCL_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attach/dwarf_layout.h"
#include "attach/nccl_names.h"
#include "ncclprobe/events.h"

/* Grouped as read: each group's fields are contiguous (spans are built
 * over ranges of this enum). */
enum np_nccl_field {
    /* the communicator's identity: one copied span */
    NPF_COMM_HASH,
    NPF_RANK,
    NPF_NRANKS,
    NPF_CUDA_DEV,
    /* the launch stream: comm-><one of these>->stream */
    NPF_COMM_STREAMS,      /* ncclComm.planner.streams (2.23+) */
    NPF_COMM_TASK_STREAMS, /* ncclComm.tasks.streams (before 2.23) */
    NPF_STREAM,            /* ncclCudaStreamList.stream */
    /* the plan span */
    NPF_KERNEL_FN,
    NPF_CHANNEL_MASK,
    NPF_THREADS, /* ncclKernelPlan.threadPerBlock */
    NPF_IS_SYM,
    NPF_IS_CE,
    NPF_IS_RMA,
    /* pointers in the plan (a union: the copy-engine and RMA arguments) */
    NPF_CE_ARGS,
    NPF_RMA_ARGS,
    /* the task lists' heads, in list order (enum np_nccl_list) */
    NPF_COLL_HEAD,
    NPF_P2P_HEAD,
    NPF_BCAST_HEAD,     /* 2.29+ */
    NPF_RMA_PROXY_HEAD, /* 2.29+ */
    NPF_RMA_CE_HEAD,    /* 2.29+ */
    /* ncclTaskColl */
    NPF_COLL_NEXT,
    NPF_COLL_FUNC,
    NPF_COLL_COUNT,
    NPF_COLL_ROOT,
    NPF_COLL_DATATYPE,
    NPF_COLL_OP,
    NPF_COLL_ALGO,
    NPF_COLL_PROTO,
    NPF_COLL_NCHANNELS, /* 2.27+ */
    /* ncclTaskP2p */
    NPF_P2P_NEXT,
    NPF_P2P_FUNC,
    NPF_P2P_COUNT,
    NPF_P2P_DATATYPE,
    NPF_P2P_PEER, /* ncclTaskP2p.root */
    NPF_P2P_NCHANNELS,
    /* ncclTaskBcast */
    NPF_BCAST_NEXT,
    NPF_BCAST_FUNC,
    NPF_BCAST_COUNT,
    NPF_BCAST_DATATYPE,
    NPF_BCAST_ROOT,
    NPF_BCAST_ALGO,
    NPF_BCAST_PROTO,
    NPF_BCAST_NCHANNELS,
    /* ncclTaskRma */
    NPF_RMA_NEXT,
    NPF_RMA_FUNC,
    NPF_RMA_COUNT,
    NPF_RMA_DATATYPE,
    NPF_RMA_BYTES,
    NPF_RMA_PEER,
    NPF_RMA_NCHANNELS,
    /* ncclCeCollArgs (the aux copy of a copy-engine plan) */
    NPF_CE_FUNC,
    NPF_CE_ROOT,
    NPF_CE_NELTS,
    NPF_CE_ELTSIZE,
    NPF_CE_DATATYPE, /* 2.29+, optional */
    /* ncclRmaArgs (the aux copy of an RMA plan) */
    NPF_RMA_ARGS_FUNC,
    NPF_COUNT
};

/* The plan's task lists, in BPF's list order. */
enum np_nccl_list {
    NP_NCCL_LIST_COLL,
    NP_NCCL_LIST_P2P,
    NP_NCCL_LIST_BCAST,
    NP_NCCL_LIST_RMA_PROXY,
    NP_NCCL_LIST_RMA_CE,
};

/* How well ncclprobe reads this library. */
enum np_nccl_support {
    NP_NCCL_FULL,     /* everything it reads was found */
    NP_NCCL_DEGRADED, /* something is missing: `missing` says what, and what is not recorded */
    NP_NCCL_UNTESTED, /* all found, but a version outside the ones tested (read by name) */
};

#define NP_NCCL_TESTED_MIN 22100 /* 2.21.0: the oldest NCCL tested (NCCL_VERSION_CODE) */
#define NP_NCCL_TESTED_MAX 23299 /* 2.32.x: the newest */

struct np_nccl_layout {
    int status;        /* 0: read; -ENODATA: no debug info (stripped); other -errno */
    char version[16];  /* "2.29.7" from the library's version banner; "" unknown */
    int version_code;  /* 22907; 0 unknown */
    bool has_symtab;   /* .symtab: the local launch functions can be probed */
    int dwarf_version; /* of .debug_info's first unit; 0: none */
    struct np_field f[NPF_COUNT];
    bool missing_field[NPF_COUNT]; /* needed here, not found */
    bool comm_ok;                  /* the communicator's identity fits one copied span */
    bool plan_ok;                  /* plan and task fields: kernel plans can be decoded */
    bool nchannels_from_plan; /* no ncclTask*.nChannels: a plan's one op gets channelMask's count */
    struct np_nccl_names names; /* ncclFunc_t, ncclDataType_t, ncclRedOp_t */
    struct np_nccl_cfg cfg;     /* BPF's view (comm_arg/plan_arg filled in per probe) */
    enum np_nccl_support support;
    char missing[768]; /* what cannot be read, for the summary; "" when nothing */
    char note[1024];   /* one line on how well it is read (the warning); "" when fully */
};

/* Reads the layout of the libnccl at path (through the target's root). A
 * file without debug info is not an error: status says so and missing
 * tells what the recording will lack. */
void np_nccl_layout_load(const char *path, struct np_nccl_layout *out);

/* "T.path" of a field ("ncclComm.planner.streams"). */
const char *np_nccl_field_name(enum np_nccl_field f);
const char *np_nccl_support_name(enum np_nccl_support s); /* "full", "degraded", "untested" */
/* The path of the launch stream this library has ("ncclComm.planner.streams"), NULL: none. */
const char *np_nccl_stream_path(const struct np_nccl_layout *l);

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
