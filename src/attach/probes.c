/* probes.c - the probe table (see probes.h). Signatures are from the CUDA 13
 * headers (cuda_runtime_api.h, crt/device_functions.h, cuda.h) and nccl.h. */
#include "attach/probes.h"

#include <string.h>

#define LAUNCH(sym, fam, layout)                                                                   \
    { sym, sym, fam, NP_ROLE_LAUNCH, layout, -1, 0, 0, 0, 0 }
#define LAUNCH_CFG(sym, fam, layout)                                                               \
    { sym, sym, fam, NP_ROLE_LAUNCH, layout, 0, 40, 0, 0, 0 }
#define NCCL_API(sym, api, layout)                                                                 \
    { sym, api, NP_FAMILY_NCCL, NP_ROLE_API, layout, -1, 0, 0, 0, 0 }
#define HANDLE(sym, fam, out, src, kind)                                                           \
    { sym, sym, fam, NP_ROLE_HANDLE_ENTRY, NP_LAYOUT_HANDLE, -1, 0, out, src, kind }

static const struct np_probe_def defs[] = {
    /* CUDA runtime */
    LAUNCH("cudaLaunchKernel", NP_FAMILY_RUNTIME, NP_LAYOUT_RT_LAUNCH),
    LAUNCH("cudaLaunchKernel_ptsz", NP_FAMILY_RUNTIME, NP_LAYOUT_RT_LAUNCH),
    LAUNCH("__cudaLaunchKernel", NP_FAMILY_RUNTIME, NP_LAYOUT_RT_LAUNCH_HANDLE),
    LAUNCH("__cudaLaunchKernel_ptsz", NP_FAMILY_RUNTIME, NP_LAYOUT_RT_LAUNCH_HANDLE),
    LAUNCH_CFG("cudaLaunchKernelExC", NP_FAMILY_RUNTIME, NP_LAYOUT_RT_LAUNCH_EXC),
    LAUNCH_CFG("cudaLaunchKernelExC_ptsz", NP_FAMILY_RUNTIME, NP_LAYOUT_RT_LAUNCH_EXC),
    LAUNCH("cudaLaunchCooperativeKernel", NP_FAMILY_RUNTIME, NP_LAYOUT_RT_LAUNCH),
    LAUNCH("cudaLaunchCooperativeKernel_ptsz", NP_FAMILY_RUNTIME, NP_LAYOUT_RT_LAUNCH),
    LAUNCH("cudaGraphLaunch", NP_FAMILY_RUNTIME, NP_LAYOUT_GRAPH),
    LAUNCH("cudaGraphLaunch_ptsz", NP_FAMILY_RUNTIME, NP_LAYOUT_GRAPH),
    /* CUDA driver */
    LAUNCH("cuLaunchKernel", NP_FAMILY_DRIVER, NP_LAYOUT_DRV_LAUNCH),
    LAUNCH("cuLaunchKernel_ptsz", NP_FAMILY_DRIVER, NP_LAYOUT_DRV_LAUNCH),
    LAUNCH_CFG("cuLaunchKernelEx", NP_FAMILY_DRIVER, NP_LAYOUT_DRV_LAUNCH_EX),
    LAUNCH_CFG("cuLaunchKernelEx_ptsz", NP_FAMILY_DRIVER, NP_LAYOUT_DRV_LAUNCH_EX),
    LAUNCH("cuLaunchCooperativeKernel", NP_FAMILY_DRIVER, NP_LAYOUT_DRV_LAUNCH),
    LAUNCH("cuLaunchCooperativeKernel_ptsz", NP_FAMILY_DRIVER, NP_LAYOUT_DRV_LAUNCH),
    LAUNCH("cuGraphLaunch", NP_FAMILY_DRIVER, NP_LAYOUT_GRAPH),
    LAUNCH("cuGraphLaunch_ptsz", NP_FAMILY_DRIVER, NP_LAYOUT_GRAPH),
    /* NCCL: the single kernel-launch funnel (a local .symtab symbol) and the API */
    {"_Z16ncclLaunchKernelP8ncclCommP14ncclKernelPlan", "ncclLaunchKernel", NP_FAMILY_NCCL,
     NP_ROLE_LAUNCH, NP_LAYOUT_NCCL_LAUNCH, -1, 0, 0, 0, 0},
    /* copy-engine collectives (2.28+) bypass ncclLaunchKernel: same arguments */
    {"_Z16ncclLaunchCeCollP8ncclCommP14ncclKernelPlan", "ncclLaunchCeColl", NP_FAMILY_NCCL,
     NP_ROLE_LAUNCH, NP_LAYOUT_NCCL_LAUNCH, -1, 0, 0, 0, 0},
    /* and so do RMA plans (2.29+: PutSignal, Signal, WaitSignal), through the
     * proxy or the copy engines, without a kernel */
    {"_Z13ncclLaunchRmaP8ncclCommP14ncclKernelPlan", "ncclLaunchRma", NP_FAMILY_NCCL,
     NP_ROLE_LAUNCH, NP_LAYOUT_NCCL_LAUNCH, -1, 0, 0, 0, 0},
    NCCL_API("ncclAllReduce", "AllReduce", NP_LAYOUT_NCCL_REDUCE_OP),
    NCCL_API("ncclReduceScatter", "ReduceScatter", NP_LAYOUT_NCCL_REDUCE_OP),
    NCCL_API("ncclReduce", "Reduce", NP_LAYOUT_NCCL_REDUCE_ROOT),
    NCCL_API("ncclBroadcast", "Broadcast", NP_LAYOUT_NCCL_ROOT),
    NCCL_API("ncclBcast", "Broadcast", NP_LAYOUT_NCCL_BCAST),
    NCCL_API("ncclGather", "Gather", NP_LAYOUT_NCCL_ROOT),
    NCCL_API("ncclScatter", "Scatter", NP_LAYOUT_NCCL_ROOT),
    NCCL_API("ncclAllGather", "AllGather", NP_LAYOUT_NCCL_PLAIN),
    NCCL_API("ncclAlltoAll", "AlltoAll", NP_LAYOUT_NCCL_PLAIN),
    NCCL_API("ncclSend", "Send", NP_LAYOUT_NCCL_P2P),
    NCCL_API("ncclRecv", "Recv", NP_LAYOUT_NCCL_P2P),
    /* 2.32's per-call-config variants: functions of their own (not wrappers of
     * the plain ones), the config an extra last argument - the same layouts */
    NCCL_API("ncclAllReduceConfig", "AllReduce", NP_LAYOUT_NCCL_REDUCE_OP),
    NCCL_API("ncclReduceScatterConfig", "ReduceScatter", NP_LAYOUT_NCCL_REDUCE_OP),
    NCCL_API("ncclReduceConfig", "Reduce", NP_LAYOUT_NCCL_REDUCE_ROOT),
    NCCL_API("ncclBroadcastConfig", "Broadcast", NP_LAYOUT_NCCL_ROOT),
    NCCL_API("ncclGatherConfig", "Gather", NP_LAYOUT_NCCL_ROOT),
    NCCL_API("ncclScatterConfig", "Scatter", NP_LAYOUT_NCCL_ROOT),
    NCCL_API("ncclAllGatherConfig", "AllGather", NP_LAYOUT_NCCL_PLAIN),
    NCCL_API("ncclAlltoAllConfig", "AlltoAll", NP_LAYOUT_NCCL_PLAIN),
    NCCL_API("ncclGroupStart", "GroupStart", NP_LAYOUT_NCCL_GROUP),
    NCCL_API("ncclGroupEnd", "GroupEnd", NP_LAYOUT_NCCL_GROUP),
    /* Calls that produce the handles later launches name */
    HANDLE("__cudaGetKernel", NP_FAMILY_RUNTIME, 0, 1, NP_SRC_POINTER),
    HANDLE("cudaGetKernel", NP_FAMILY_RUNTIME, 0, 1, NP_SRC_POINTER),
    HANDLE("cudaGetFuncBySymbol", NP_FAMILY_RUNTIME, 0, 1, NP_SRC_POINTER),
    HANDLE("cuModuleGetFunction", NP_FAMILY_DRIVER, 0, 2, NP_SRC_STRING),
    HANDLE("cuLibraryGetKernel", NP_FAMILY_DRIVER, 0, 2, NP_SRC_STRING),
    HANDLE("cuKernelGetFunction", NP_FAMILY_DRIVER, 0, 1, NP_SRC_HANDLE),
    /* glibc's r_brk: dlopen mapped new objects (libraries loaded late) */
    {"_dl_debug_state", "dlopen", NP_FAMILY_LOADER, NP_ROLE_LOADER, NP_LAYOUT_NONE, -1, 0, 0, 0, 0},
    /* CPython is about to free its modules (and their code objects): a
     * process ncclprobe started waits there, like at a load, until every
     * launch before it is read - Python frames name live code objects */
    {"Py_FinalizeEx", "python-finalize", NP_FAMILY_LOADER, NP_ROLE_LOADER, NP_LAYOUT_NONE, -1, 0, 0,
     0, 0},
    /* libncclprobe_cupti.so names each launch's CUPTI correlation id here */
    {"ncclprobe_cupti_marker", "cupti-marker", NP_FAMILY_CUPTI, NP_ROLE_MARKER, NP_LAYOUT_NONE, -1,
     0, 0, 0, 0},
};

const struct np_probe_def *np_probe_defs(size_t *count) {
    *count = sizeof(defs) / sizeof(defs[0]);
    return defs;
}

const struct np_probe_def *np_probe_def_by_symbol(const char *symbol) {
    for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++)
        if (strcmp(defs[i].symbol, symbol) == 0)
            return &defs[i];
    return NULL;
}

int np_probe_comm_arg(const struct np_probe_def *def) {
    switch (def->layout) {
    case NP_LAYOUT_NCCL_LAUNCH:
        return 0;
    case NP_LAYOUT_NCCL_PLAIN:
    case NP_LAYOUT_NCCL_P2P:
    case NP_LAYOUT_NCCL_BCAST:
        return 4;
    case NP_LAYOUT_NCCL_REDUCE_OP:
    case NP_LAYOUT_NCCL_ROOT:
        return 5;
    case NP_LAYOUT_NCCL_REDUCE_ROOT:
        return NP_REG_ARGS; /* the first stack word */
    default:
        return -1;
    }
}

bool np_probe_is_graph(const struct np_probe_def *def) {
    return def->layout == NP_LAYOUT_GRAPH;
}
