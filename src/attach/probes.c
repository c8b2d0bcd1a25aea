/* probes.c - the probe table (see probes.h). Signatures are from the CUDA 13
 * headers (cuda_runtime_api.h, crt/device_functions.h, cuda.h) and nccl.h. */
#include "attach/probes.h"

#include <string.h>

#define LAUNCH(sym, fam, layout)                                                                   \
    { sym, sym, fam, NP_ROLE_LAUNCH, layout, -1, 0, 0, 0, 0, 0 }
#define LAUNCH_CFG(sym, fam, layout)                                                               \
    { sym, sym, fam, NP_ROLE_LAUNCH, layout, 0, 40, 0, 0, 0, 0 }
#define NCCL_API(sym, api, layout)                                                                 \
    { sym, api, NP_FAMILY_NCCL, NP_ROLE_API, layout, -1, 0, 0, 0, 0, 0 }
#define HANDLE(sym, fam, out, src, kind)                                                           \
    { sym, sym, fam, NP_ROLE_HANDLE_ENTRY, NP_LAYOUT_HANDLE, -1, 0, out, src, kind, 0 }
/* A capture, event or graph call: op, the out argument (-1: none), the
 * argument holding the capture mode (-1: none, global) */
#define GRAPH(sym, fam, op, out, mode)                                                             \
    { sym, sym, fam, NP_ROLE_GRAPH_CALL, NP_LAYOUT_NONE, -1, 0, out, mode, 0, op }
#define RT_GRAPH(sym, op, out, mode) GRAPH(sym, NP_FAMILY_RUNTIME, op, out, mode)
#define DRV_GRAPH(sym, op, out, mode) GRAPH(sym, NP_FAMILY_DRIVER, op, out, mode)

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
     NP_ROLE_LAUNCH, NP_LAYOUT_NCCL_LAUNCH, -1, 0, 0, 0, 0, 0},
    /* copy-engine collectives (2.28+) bypass ncclLaunchKernel: same arguments */
    {"_Z16ncclLaunchCeCollP8ncclCommP14ncclKernelPlan", "ncclLaunchCeColl", NP_FAMILY_NCCL,
     NP_ROLE_LAUNCH, NP_LAYOUT_NCCL_LAUNCH, -1, 0, 0, 0, 0, 0},
    /* and so do RMA plans (2.29+: PutSignal, Signal, WaitSignal), through the
     * proxy or the copy engines, without a kernel */
    {"_Z13ncclLaunchRmaP8ncclCommP14ncclKernelPlan", "ncclLaunchRma", NP_FAMILY_NCCL,
     NP_ROLE_LAUNCH, NP_LAYOUT_NCCL_LAUNCH, -1, 0, 0, 0, 0, 0},
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
    /* Stream capture and the graphs it makes (cuda_runtime_api.h, cuda.h):
     * a launch on a capturing stream runs nothing, it becomes a graph node */
    RT_GRAPH("cudaStreamBeginCapture", NP_GOP_BEGIN, -1, 1),
    RT_GRAPH("cudaStreamBeginCapture_ptsz", NP_GOP_BEGIN, -1, 1),
    RT_GRAPH("cudaStreamBeginCaptureToGraph", NP_GOP_BEGIN_TO_GRAPH, -1, 5),
    RT_GRAPH("cudaStreamBeginCaptureToGraph_ptsz", NP_GOP_BEGIN_TO_GRAPH, -1, 5),
    RT_GRAPH("cudaStreamEndCapture", NP_GOP_END, 1, -1),
    RT_GRAPH("cudaStreamEndCapture_ptsz", NP_GOP_END, 1, -1),
    RT_GRAPH("cudaEventRecord", NP_GOP_EVENT_RECORD, -1, -1),
    RT_GRAPH("cudaEventRecord_ptsz", NP_GOP_EVENT_RECORD, -1, -1),
    RT_GRAPH("cudaEventRecordWithFlags", NP_GOP_EVENT_RECORD, -1, -1),
    RT_GRAPH("cudaEventRecordWithFlags_ptsz", NP_GOP_EVENT_RECORD, -1, -1),
    RT_GRAPH("cudaStreamWaitEvent", NP_GOP_STREAM_WAIT, -1, -1),
    RT_GRAPH("cudaStreamWaitEvent_ptsz", NP_GOP_STREAM_WAIT, -1, -1),
    RT_GRAPH("cudaGraphInstantiate", NP_GOP_INSTANTIATE, 0, -1),
    RT_GRAPH("cudaGraphInstantiateWithFlags", NP_GOP_INSTANTIATE, 0, -1),
    RT_GRAPH("cudaGraphInstantiateWithParams", NP_GOP_INSTANTIATE, 0, -1),
    RT_GRAPH("cudaGraphInstantiateWithParams_ptsz", NP_GOP_INSTANTIATE, 0, -1),
    RT_GRAPH("cudaGraphExecUpdate", NP_GOP_EXEC_UPDATE, -1, -1),
    RT_GRAPH("cudaGraphDestroy", NP_GOP_GRAPH_DESTROY, -1, -1),
    RT_GRAPH("cudaGraphExecDestroy", NP_GOP_EXEC_DESTROY, -1, -1),
    DRV_GRAPH("cuStreamBeginCapture", NP_GOP_BEGIN, -1, -1), /* CUDA 10.0's: no mode */
    DRV_GRAPH("cuStreamBeginCapture_ptsz", NP_GOP_BEGIN, -1, -1),
    DRV_GRAPH("cuStreamBeginCapture_v2", NP_GOP_BEGIN, -1, 1),
    DRV_GRAPH("cuStreamBeginCapture_v2_ptsz", NP_GOP_BEGIN, -1, 1),
    DRV_GRAPH("cuStreamBeginCaptureToGraph", NP_GOP_BEGIN_TO_GRAPH, -1, 5),
    DRV_GRAPH("cuStreamBeginCaptureToGraph_ptsz", NP_GOP_BEGIN_TO_GRAPH, -1, 5),
    DRV_GRAPH("cuStreamEndCapture", NP_GOP_END, 1, -1),
    DRV_GRAPH("cuStreamEndCapture_ptsz", NP_GOP_END, 1, -1),
    DRV_GRAPH("cuEventRecord", NP_GOP_EVENT_RECORD, -1, -1),
    DRV_GRAPH("cuEventRecord_ptsz", NP_GOP_EVENT_RECORD, -1, -1),
    DRV_GRAPH("cuEventRecordWithFlags", NP_GOP_EVENT_RECORD, -1, -1),
    DRV_GRAPH("cuEventRecordWithFlags_ptsz", NP_GOP_EVENT_RECORD, -1, -1),
    DRV_GRAPH("cuStreamWaitEvent", NP_GOP_STREAM_WAIT, -1, -1),
    DRV_GRAPH("cuStreamWaitEvent_ptsz", NP_GOP_STREAM_WAIT, -1, -1),
    DRV_GRAPH("cuGraphInstantiate", NP_GOP_INSTANTIATE, 0, -1),
    DRV_GRAPH("cuGraphInstantiate_v2", NP_GOP_INSTANTIATE, 0, -1),
    DRV_GRAPH("cuGraphInstantiateWithFlags", NP_GOP_INSTANTIATE, 0, -1),
    DRV_GRAPH("cuGraphInstantiateWithParams", NP_GOP_INSTANTIATE, 0, -1),
    DRV_GRAPH("cuGraphInstantiateWithParams_ptsz", NP_GOP_INSTANTIATE, 0, -1),
    DRV_GRAPH("cuGraphExecUpdate", NP_GOP_EXEC_UPDATE, -1, -1),
    DRV_GRAPH("cuGraphExecUpdate_v2", NP_GOP_EXEC_UPDATE, -1, -1),
    DRV_GRAPH("cuGraphDestroy", NP_GOP_GRAPH_DESTROY, -1, -1),
    DRV_GRAPH("cuGraphExecDestroy", NP_GOP_EXEC_DESTROY, -1, -1),
    /* glibc's r_brk: dlopen mapped new objects (libraries loaded late) */
    {"_dl_debug_state", "dlopen", NP_FAMILY_LOADER, NP_ROLE_LOADER, NP_LAYOUT_NONE, -1, 0, 0, 0, 0,
     0},
    /* CPython is about to free its modules (and their code objects): a
     * process ncclprobe started waits there, like at a load, until every
     * launch before it is read - Python frames name live code objects */
    {"Py_FinalizeEx", "python-finalize", NP_FAMILY_LOADER, NP_ROLE_LOADER, NP_LAYOUT_NONE, -1, 0, 0,
     0, 0, 0},
    /* libncclprobe_cupti.so names each launch's CUPTI correlation id here */
    {"ncclprobe_cupti_marker", "cupti-marker", NP_FAMILY_CUPTI, NP_ROLE_MARKER, NP_LAYOUT_NONE, -1,
     0, 0, 0, 0, 0},
};

/* cudaLaunchKernel(func, dim3 grid, dim3 block, args, size_t smem, stream):
 * func@0 grid@8 block@20 args@32 smem@40 stream@48; a dim3 travels in two
 * registers (x|y, z). __cudaLaunchKernel's (a cudaKernel_t first) alike. */
#define RT_LAUNCH_SLOTS                                                                            \
    {                                                                                              \
        {0, 8}, {8, 8}, {16, 4}, {20, 8}, {28, 4}, {32, 8}, {40, 8}, {                             \
            48, 8                                                                                  \
        }                                                                                          \
    }
/* cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra) */
#define DRV_LAUNCH_SLOTS                                                                           \
    {                                                                                              \
        {0, 8}, {8, 4}, {12, 4}, {16, 4}, {20, 4}, {24, 4}, {28, 4}, {32, 4}, {40, 8}, {48, 8}, {  \
            56, 8                                                                                  \
        }                                                                                          \
    }
/* cudaLaunchKernelExC(config, func, args), cuLaunchKernelEx(config, f, params, extra) */
#define EX_SLOTS(n)                                                                                \
    {                                                                                              \
        {0, 8}, {8, 8}, {16, 8}, {                                                                 \
            24, (n) > 3 ? 8 : 0                                                                    \
        }                                                                                          \
    }

static const struct np_fast_def fast_defs[] = {
    {"cudaLaunchKernel", NULL, 2, 211, 56, -1, 0, false, RT_LAUNCH_SLOTS},
    {"cudaLaunchKernel_ptsz", NULL, 2, 214, 56, -1, 0, false, RT_LAUNCH_SLOTS},
    {"__cudaLaunchKernel", "cudaLaunchKernel", 2, 505, 56, -1, 0, true, RT_LAUNCH_SLOTS},
    {"__cudaLaunchKernel_ptsz", "cudaLaunchKernel_ptsz", 2, 506, 56, -1, 0, true, RT_LAUNCH_SLOTS},
    {"cudaLaunchKernelExC", NULL, 2, 430, 24, 0, 40, false, EX_SLOTS(3)},
    {"cudaLaunchKernelExC_ptsz", NULL, 2, 431, 24, 0, 40, false, EX_SLOTS(3)},
    {"cuLaunchKernel", NULL, 1, 307, 64, -1, 0, false, DRV_LAUNCH_SLOTS},
    {"cuLaunchKernel_ptsz", NULL, 1, 442, 64, -1, 0, false, DRV_LAUNCH_SLOTS},
    {"cuLaunchKernelEx", NULL, 1, 652, 32, 0, 40, false, EX_SLOTS(4)},
    {"cuLaunchKernelEx_ptsz", NULL, 1, 653, 32, 0, 40, false, EX_SLOTS(4)},
};

const struct np_fast_def *np_fast_def_by_symbol(const char *symbol) {
    for (size_t i = 0; i < sizeof(fast_defs) / sizeof(fast_defs[0]); i++)
        if (strcmp(fast_defs[i].symbol, symbol) == 0)
            return &fast_defs[i];
    return NULL;
}

void np_fast_regs_from_params(const struct np_fast_def *f, __u64 *args, __u64 *stack_args) {
    uint8_t raw[NP_FAST_PARAMS_MAX];
    memcpy(raw, args, NP_REG_ARGS * 8);
    memcpy(raw + NP_REG_ARGS * 8, stack_args, NP_STACK_ARGS * 8);
    for (int i = 0; i < NP_FAST_SLOTS; i++) {
        const struct np_fast_slot *s = &f->slots[i];
        uint64_t v = 0;
        if (s->width && s->at + s->width <= f->params_len)
            memcpy(&v, raw + s->at, s->width); /* little-endian: the low bytes */
        if (i < NP_REG_ARGS)
            args[i] = v;
        else
            stack_args[i - NP_REG_ARGS] = v;
    }
}

const struct np_probe_def np_python_code_free_def = {.symbol = "code_dealloc",
                                                     .api = "python-code-free",
                                                     .family = NP_FAMILY_PYTHON,
                                                     .role = NP_ROLE_PY_CODE_FREE,
                                                     .layout = NP_LAYOUT_NONE,
                                                     .deref_arg = -1};

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
