// test double: same symbol names as NCCL, our own struct layouts.
//
// libfakenccl.so exports NCCL's collective / point-to-point / group API with NCCL's real
// signatures and enum values, but does no communication: each operation builds a
// struct ncclKernelPlan and hands it to the internal ncclLaunchKernel(ncclComm*, ncclKernelPlan*).
// Like in the real libnccl.so.2, that function is not exported: the library is compiled with
// -fvisibility=hidden, so it ends up as the LOCAL symbol
// _Z16ncclLaunchKernelP8ncclCommP14ncclKernelPlan in .symtab only (never in .dynsym), which is
// what ncclprobe has to find and uprobe. The struct layouts below are ours, not NCCL's; they are
// described by the library's DWARF (-g).
#include <cstdint>
#include <cstdlib>

#include "fake_nccl.h"

#define FAKE_NOINLINE __attribute__((noinline, noclone))
#define FAKE_KEEP_FRAME() __asm__ volatile("" ::: "memory")

static const uint64_t kCommMagic = 0x6e63636c66616b65ULL;    // "ncclfake"
static const uint64_t kCommHashBase = 0x5eedc0de00000000ULL; // commHash = base | nRanks
static const int kVersionCode = 22809;                       // NCCL_VERSION(2, 28, 9)

// Same values as NCCL's internal ncclFunc_t.
enum ncclFunc_t {
    ncclFuncBroadcast = 0,
    ncclFuncReduce = 1,
    ncclFuncAllGather = 2,
    ncclFuncReduceScatter = 3,
    ncclFuncAllReduce = 4,
    ncclFuncSendRecv = 5,
    ncclFuncSend = 6,
    ncclFuncRecv = 7,
};

struct ncclKernelPlan;

struct ncclComm {
    uint64_t magic;     // kCommMagic while the communicator is alive
    int cudaDev;        // == rank in the test double
    int nvmlDev;        // == rank in the test double
    int rank;           // this rank
    int nRanks;         // communicator size
    uint64_t commHash;  // kCommHashBase | nRanks (identical on all ranks of a communicator)
    uint64_t opCount;   // number of ncclLaunchKernel calls so far
    void *lastKernelFn; // kernelFn of the most recent launch
};

struct ncclKernelPlan {
    ncclKernelPlan *next;    // queue link while inside ncclGroupStart/ncclGroupEnd
    ncclComm *comm;          // communicator the plan belongs to
    void *kernelFn;          // host address of the "device kernel" (ncclDevKernel_*)
    int collType;            // ncclFunc_t
    ncclDataType_t datatype; // element type
    ncclRedOp_t redOp;       // reduction operator (ncclSum when not a reduction)
    int root;                // root (Broadcast/Reduce), peer (Send/Recv), else -1
    size_t count;            // element count as passed to the API
    const void *sendbuff;    // send buffer as passed to the API (NULL for Recv)
    void *recvbuff;          // receive buffer as passed to the API (NULL for Send)
    cudaStream_t stream;     // stream as passed to the API
    unsigned channelCount;   // fixed: 2
    unsigned threadPerBlock; // fixed: 512
    uint64_t opCount;        // comm->opCount at launch time
};

// The "device kernels": host functions whose addresses go into plan->kernelFn so that
// symbolizing kernelFn gives a kernel-like name. Their bodies differ so identical-code folding
// cannot merge them.
extern "C" {
static volatile int fake_kernel_sink;
#define FAKE_DEV_KERNEL(name, id)                                                                  \
    FAKE_NOINLINE void name(ncclKernelPlan *plan) {                                                \
        fake_kernel_sink = (id) + plan->collType;                                                  \
    }
FAKE_DEV_KERNEL(ncclDevKernel_Broadcast, 100)
FAKE_DEV_KERNEL(ncclDevKernel_Reduce, 200)
FAKE_DEV_KERNEL(ncclDevKernel_AllGather, 300)
FAKE_DEV_KERNEL(ncclDevKernel_ReduceScatter, 400)
FAKE_DEV_KERNEL(ncclDevKernel_AllReduce, 500)
FAKE_DEV_KERNEL(ncclDevKernel_SendRecv, 600)
#undef FAKE_DEV_KERNEL
}

// Per-thread group state, as in NCCL.
static thread_local int groupDepth;
static thread_local ncclKernelPlan *groupHead;
static thread_local ncclKernelPlan *groupTail;

// Internal, hidden (LOCAL in .symtab only): "launches" the plan on the communicator's stream.
FAKE_NOINLINE ncclResult_t ncclLaunchKernel(ncclComm *comm, ncclKernelPlan *plan) {
    if (comm == nullptr || plan == nullptr || plan->kernelFn == nullptr)
        return ncclInternalError;
    plan->opCount = comm->opCount++;
    comm->lastKernelFn = plan->kernelFn;
    FAKE_KEEP_FRAME();
    return ncclSuccess;
}

static bool commValid(const ncclComm *comm) {
    return comm != nullptr && comm->magic == kCommMagic;
}

// Validates the arguments and builds a plan; returns nullptr when they are invalid.
static ncclKernelPlan *makePlan(ncclComm *comm, ncclFunc_t coll, void (*kernel)(ncclKernelPlan *),
                                const void *sendbuff, void *recvbuff, size_t count,
                                ncclDataType_t datatype, ncclRedOp_t op, int root,
                                cudaStream_t stream) {
    if (!commValid(comm) || datatype < 0 || datatype >= ncclNumTypes || op < 0 ||
        op >= ncclNumOps || root < -1 || root >= comm->nRanks)
        return nullptr;
    ncclKernelPlan *plan = static_cast<ncclKernelPlan *>(calloc(1, sizeof(ncclKernelPlan)));
    if (plan == nullptr)
        return nullptr;
    plan->comm = comm;
    plan->kernelFn = reinterpret_cast<void *>(kernel);
    plan->collType = coll;
    plan->datatype = datatype;
    plan->redOp = op;
    plan->root = root;
    plan->count = count;
    plan->sendbuff = sendbuff;
    plan->recvbuff = recvbuff;
    plan->stream = stream;
    plan->channelCount = 2;
    plan->threadPerBlock = 512;
    return plan;
}

// Inside a group the plan is queued for ncclGroupEnd; otherwise it is launched right away, so the
// API function itself is the direct caller of ncclLaunchKernel.
__attribute__((always_inline)) static inline ncclResult_t submitPlan(ncclComm *comm,
                                                                     ncclKernelPlan *plan) {
    if (plan == nullptr)
        return ncclInvalidArgument;
    if (groupDepth > 0) {
        if (groupTail != nullptr)
            groupTail->next = plan;
        else
            groupHead = plan;
        groupTail = plan;
        return ncclSuccess;
    }
    ncclResult_t result = ncclLaunchKernel(comm, plan);
    FAKE_KEEP_FRAME();
    free(plan);
    return result;
}

extern "C" {

FAKE_NCCL_API ncclResult_t ncclCommInitRankFake(ncclComm_t *comm, int nranks, int rank) {
    if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    ncclComm *c = static_cast<ncclComm *>(calloc(1, sizeof(ncclComm)));
    if (c == nullptr)
        return ncclSystemError;
    c->magic = kCommMagic;
    c->cudaDev = rank;
    c->nvmlDev = rank;
    c->rank = rank;
    c->nRanks = nranks;
    c->commHash = kCommHashBase | static_cast<uint64_t>(nranks);
    *comm = c;
    return ncclSuccess;
}

FAKE_NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!commValid(comm))
        return ncclInvalidArgument;
    comm->magic = 0;
    free(comm);
    return ncclSuccess;
}

FAKE_NCCL_API ncclResult_t ncclGetVersion(int *version) {
    if (version == nullptr)
        return ncclInvalidArgument;
    *version = kVersionCode;
    return ncclSuccess;
}

FAKE_NCCL_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclRedOp_t op, int root,
                                      ncclComm_t comm, cudaStream_t stream) {
    if (root < 0)
        return ncclInvalidArgument;
    return submitPlan(comm, makePlan(comm, ncclFuncReduce, ncclDevKernel_Reduce, sendbuff, recvbuff,
                                     count, datatype, op, root, stream));
}

FAKE_NCCL_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                         ncclDataType_t datatype, int root, ncclComm_t comm,
                                         cudaStream_t stream) {
    if (root < 0)
        return ncclInvalidArgument;
    return submitPlan(comm, makePlan(comm, ncclFuncBroadcast, ncclDevKernel_Broadcast, sendbuff,
                                     recvbuff, count, datatype, ncclSum, root, stream));
}

FAKE_NCCL_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream) {
    return submitPlan(comm, makePlan(comm, ncclFuncAllReduce, ncclDevKernel_AllReduce, sendbuff,
                                     recvbuff, count, datatype, op, -1, stream));
}

FAKE_NCCL_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                             ncclDataType_t datatype, ncclRedOp_t op,
                                             ncclComm_t comm, cudaStream_t stream) {
    return submitPlan(comm, makePlan(comm, ncclFuncReduceScatter, ncclDevKernel_ReduceScatter,
                                     sendbuff, recvbuff, recvcount, datatype, op, -1, stream));
}

FAKE_NCCL_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                         ncclDataType_t datatype, ncclComm_t comm,
                                         cudaStream_t stream) {
    return submitPlan(comm, makePlan(comm, ncclFuncAllGather, ncclDevKernel_AllGather, sendbuff,
                                     recvbuff, sendcount, datatype, ncclSum, -1, stream));
}

FAKE_NCCL_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                    int peer, ncclComm_t comm, cudaStream_t stream) {
    if (peer < 0)
        return ncclInvalidArgument;
    return submitPlan(comm, makePlan(comm, ncclFuncSend, ncclDevKernel_SendRecv, sendbuff, nullptr,
                                     count, datatype, ncclSum, peer, stream));
}

FAKE_NCCL_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                    ncclComm_t comm, cudaStream_t stream) {
    if (peer < 0)
        return ncclInvalidArgument;
    return submitPlan(comm, makePlan(comm, ncclFuncRecv, ncclDevKernel_SendRecv, nullptr, recvbuff,
                                     count, datatype, ncclSum, peer, stream));
}

FAKE_NCCL_API ncclResult_t ncclGroupStart(void) {
    groupDepth++;
    return ncclSuccess;
}

// Leaving the outermost group launches every queued plan, in call order, one ncclLaunchKernel
// each, directly from this function.
FAKE_NCCL_API ncclResult_t ncclGroupEnd(void) {
    if (groupDepth == 0)
        return ncclInvalidUsage;
    if (--groupDepth > 0)
        return ncclSuccess;
    ncclResult_t first_error = ncclSuccess;
    ncclKernelPlan *plan = groupHead;
    groupHead = groupTail = nullptr;
    while (plan != nullptr) {
        ncclKernelPlan *next = plan->next;
        ncclResult_t result = ncclLaunchKernel(plan->comm, plan);
        FAKE_KEEP_FRAME();
        if (result != ncclSuccess && first_error == ncclSuccess)
            first_error = result;
        free(plan);
        plan = next;
    }
    return first_error;
}

} // extern "C"
