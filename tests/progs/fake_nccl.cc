// libfakenccl.so: a test double of NCCL 2.28 with NCCL's type and member NAMES and its own layouts.
//
// It exports NCCL's collective / point-to-point / group API with NCCL's real signatures and enum
// values and does no communication, but it plans work the way NCCL 2.28 does: each API call
// validates its arguments (ncclEnqueueCheck) and appends a task to the communicator's planner;
// leaving the outermost group (an API call outside ncclGroupStart/End is its own group) runs
// groupLaunch, which turns each communicator's tasks into plans (struct ncclKernelPlan holding the
// tasks in collTaskQueue / p2pTaskQueue) and hands every plan to the internal
//   ncclLaunchKernel(ncclComm*, ncclKernelPlan*)   _Z16ncclLaunchKernelP8ncclCommP14ncclKernelPlan
//   ncclLaunchCeColl(ncclComm*, ncclKernelPlan*)   _Z16ncclLaunchCeCollP8ncclCommP14ncclKernelPlan
// then frees (and poisons) the tasks and the plan. The library is compiled with
// -fvisibility=hidden, so like in the real libnccl.so.2 these are LOCAL symbols in .symtab only.
//
// The struct and member names ncclprobe reads by name from DWARF are NCCL's (ncclComm.commHash,
// .rank, .nRanks, .cudaDev, .planner.streams, ncclCudaStreamList.stream, ncclKernelPlan.kernelFn,
// .channelMask, .threadPerBlock, .isSymColl, .isCeColl, .ceCollArgs, .collTaskQueue.head,
// .p2pTaskQueue.head, ncclTaskColl.*, ncclTaskP2p.*, ncclCeCollArgs.*), but every offset differs
// from NCCL's: members are in another order with others in between, ncclTaskColl.algorithm is a
// bit-field that does not start on a byte boundary, ncclComm's identity lies beyond 64 KiB.
//
// With FAKE_NCCL_LOG=/path set, the library appends one JSON line per API call (at entry) and one
// per launch (written from inside ncclLaunchKernel / ncclLaunchCeColl, from the plan it launches):
// the truth the ncclprobe tests compare against. See README.md for the format.
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fake_nccl.h"

// Internal functions that must keep their own symbol and signature (no inlining, no IPA clones,
// no identical-code folding): what real NCCL's -O3 build keeps out of line.
#if defined(__clang__)
#define FAKE_NOIPA __attribute__((noinline))
#else
#define FAKE_NOIPA __attribute__((noipa))
#endif
#define FAKE_KEEP_FRAME() __asm__ volatile("" ::: "memory")

static const uint64_t kCommMagic = 0x6e63636c66616b65ULL; // "ncclfake"
static const int kVersionCode = 22809;                    // NCCL_VERSION(2, 28, 9)
// NCCL's version banner (init.cc's VERSION_STRING), where ncclprobe reads the version from
__attribute__((used)) static const char kVersionBanner[] = "NCCL version 2.28.9+cuda13.0";
static const unsigned char kPoison = 0xdb; // freed tasks, plans and list nodes

// ---- NCCL's internal enums (same values as NCCL 2.28) ----

enum ncclFunc_t {
    ncclFuncBroadcast = 0,
    ncclFuncReduce = 1,
    ncclFuncAllGather = 2,
    ncclFuncReduceScatter = 3,
    ncclFuncAllReduce = 4,
    ncclFuncSendRecv = 5,
    ncclFuncSend = 6,
    ncclFuncRecv = 7,
    ncclFuncAlltoAll = 8,
    ncclFuncScatter = 9,
    ncclFuncGather = 10,
    ncclNumFuncs = 11
};

#define NCCL_ALGO_UNDEF -1
#define NCCL_ALGO_TREE 0
#define NCCL_ALGO_RING 1
#define NCCL_ALGO_COLLNET_DIRECT 2
#define NCCL_ALGO_COLLNET_CHAIN 3
#define NCCL_ALGO_NVLS 4
#define NCCL_ALGO_NVLS_TREE 5
#define NCCL_ALGO_PAT 6

#define NCCL_PROTO_UNDEF -1
#define NCCL_PROTO_LL 0
#define NCCL_PROTO_LL128 1
#define NCCL_PROTO_SIMPLE 2

#define MAXCHANNELS 64

// ---- NCCL's data structures: NCCL's names, our own layouts ----

// NCCL's intrusive queue (include/utils.h): `T *head, *tail;` linked through T::*next.
template <typename T, T *T::*next> struct ncclIntruQueue { T *head, *tail; };

template <typename T, T *T::*next> static void intruEnqueue(ncclIntruQueue<T, next> *q, T *x) {
    x->*next = nullptr;
    (q->head ? q->tail->*next : q->head) = x;
    q->tail = x;
}

template <typename T, T *T::*next> static T *intruDequeue(ncclIntruQueue<T, next> *q) {
    T *x = q->head;
    if (x != nullptr) {
        q->head = x->*next;
        if (q->head == nullptr)
            q->tail = nullptr;
    }
    return x;
}

struct ncclDevRedOpFull {
    int op; // ncclDevRedOp_t
    int proxyOp;
    bool scalarArgIsPtr;
    uint64_t scalarArg;
};

struct ncclTaskColl {
    uint32_t eActivationMask;
    int chunkSteps;
    size_t trafficBytes;
    struct ncclTaskColl *next;
    ncclDataType_t datatype;
    ncclRedOp_t opHost;
    // algorithm: bits 4..11 of this word (no byte boundary); protocol: bits 16..23 (byte 2).
    // Both signed: -1 = undefined.
    int32_t isCollnet : 1, isNvls : 1, isSymLast : 1, regBuf : 1, algorithm : 8, chunkStepsLog2 : 4,
        protocol : 8, nWarps : 8;
    ncclFunc_t func;
    const void *sendbuff;
    struct ncclDevRedOpFull opDev;
    void *recvbuff;
    uint8_t sliceSteps;
    uint8_t nChannels;
    uint8_t nMaxChannels;
    int root;
    size_t count;
    void *sendMhandle;
    void *recvMhandle;
};

struct ncclTaskP2p {
    size_t bytes;
    ncclDataType_t datatype;
    uint8_t nChannels;
    uint8_t chunkSizeLog2;
    int root; // the peer
    ncclFunc_t collAPI;
    struct ncclTaskP2p *next;
    void *buff;
    ncclFunc_t func; // ncclFuncSend or ncclFuncRecv
    uint32_t eActivationMask;
    size_t count;
    void *eventHandle;
};

struct ncclCeCollArgs {
    uint8_t *recvBuff;
    size_t eltSize;
    ncclDataType_t datatype;
    int rootRank;
    void *sendWin;
    uint8_t *sendBuff;
    ncclFunc_t func;
    uint32_t ceFlags;
    size_t nElts;
    void *recvWin;
};

// What the (pretend) kernels receive: NCCL's kernel argument header / symmetric work args.
struct ncclDevKernelArgs {
    struct ncclComm *comm;
    uint64_t channelMask;
    int workStorageType;
    uint32_t workMask;
    void *workBuf;
};

struct ncclSymkDevWorkArgs {
    uint32_t nMaxBlocks;
    ncclFunc_t func;
    ncclRedOp_t redOp;
    ncclDataType_t datatype;
    size_t nElts;
    const void *inputPtr;
    void *outputPtr;
};

// NCCL's ncclPattern_t (proxy.h), same values.
typedef enum : uint8_t {
    ncclPatternRing,
    ncclPatternRingTwice,
    ncclPatternPipelineFrom,
    ncclPatternPipelineTo,
    ncclPatternTreeUp,
    ncclPatternTreeDown,
    ncclPatternTreeUpDown,
    ncclPatternCollnetChain,
    ncclPatternCollnetDirect,
    ncclPatternNvls,
    ncclPatternNvlsTree,
    ncclPatternPatUp,
    ncclPatternPatDown,
    ncclPatternSend,
    ncclPatternRecv,
    ncclPatternProfiler,
} ncclPattern_t;

// One channel's share of one operation for the proxy thread (NCCL's ncclProxyOp; own order).
struct ncclProxyOp {
    struct ncclProxyConnection *connection;
    uint64_t opCount;
    uint8_t protocol;
    uint8_t channelId;
    ncclPattern_t pattern;
    uint8_t sliceSteps;
    int root;
    struct ncclProxyOp *next;
    int nsteps;
    ssize_t nbytes; // bytes per step
    size_t chunkSize;
    uint8_t chunkSteps;
    uint8_t dtype;
    uint8_t redOp;
    uint8_t coll;
    uint8_t collAPI;
    uint8_t algorithm;
    int nChannels;
    int nPeers;
    union {
        struct ncclTaskColl *coll;
        struct ncclTaskP2p *p2p;
    } task;
    int rank;
    int peer; // set by SaveProxy
    int pid;
    struct ncclProxyOp *enqNext;
};

struct ncclKernelPlan {
    size_t kernelArgsSize;
    int threadPerBlock;
    bool persistent;
    bool isCeColl;
    bool isHostCbEnq;
    uint8_t workStorageType;
    ncclIntruQueue<ncclTaskP2p, &ncclTaskP2p::next> p2pTaskQueue;
    void *kernelFn; // host address of the "device kernel" (ncclDevKernel_* / ncclSymkDevKernel_*)
    struct ncclKernelPlan *next;
    int collOpCount;
    int nWorkBatches;
    union {
        struct ncclDevKernelArgs *kernelArgs;
        struct ncclSymkDevWorkArgs *kernelSymArgs;
        struct ncclCeCollArgs *ceCollArgs;
    };
    size_t workBytes;
    bool kernelSpecialized;
    bool hasProxyOps;
    char reserved[30];
    uint64_t channelMask; // grid.x = popcount
    bool isSymColl;
    struct ncclComm *comm;
    ncclIntruQueue<ncclTaskColl, &ncclTaskColl::next> collTaskQueue;
    void *groupApiEventHandle;
    ncclIntruQueue<ncclProxyOp, &ncclProxyOp::enqNext> proxyOpQueue;
};

struct ncclCudaStreamList {
    struct ncclCudaStreamList *next;
    uint64_t serial;
    cudaStream_t stream;
};

struct ncclKernelPlanner {
    int nTasksColl;
    int nTasksP2p;
    ncclIntruQueue<ncclTaskColl, &ncclTaskColl::next> collTaskQueue;
    ncclIntruQueue<ncclTaskColl, &ncclTaskColl::next> collSymTaskQueue;
    ncclIntruQueue<ncclTaskColl, &ncclTaskColl::next> collCeTaskQueue;
    ncclIntruQueue<ncclTaskP2p, &ncclTaskP2p::next> p2pTaskQueue;
    uint64_t peerSchedule[24];
    bool persistent;
    bool isSymColl;
    uint16_t nStreams;
    struct ncclCudaStreamList *streams; // launch stream first
    ncclIntruQueue<ncclKernelPlan, &ncclKernelPlan::next> planQueue;
    uint64_t streamSerial;
};

struct ncclRing {
    int prev, next;
    int *userRanks;
    int index;
};

struct ncclTree {
    int depth;
    int up;
    int down[3];
};

// NVLS peers (2.28's ncclNvls, fewer members): `out` is the network peer of NVLS+net, -1 when none.
struct ncclNvls {
    int nHeads;
    int headRank;
    int treeUp;
    int treeDown[3];
    int out;
};

// A connection's proxy side (NCCL's ncclProxyConnector): proxyProgress is NULL for transports the
// proxy thread does not progress (P2P / NVLink / SHM), and SaveProxy then posts nothing.
struct ncclProxyConnector {
    int tpRank;
    int tpLocalRank;
    int sameProcess;
    struct ncclProxyConnection *connection;
    void *proxyProgress;
};

struct ncclConnector {
    int connected;
    int hasSeen;
    void *transportComm;
    char conn[40];
    struct ncclProxyConnector proxyConn;
};

#define NCCL_MAX_CONNS 2
#define NCCL_MAX_TREE_ARITY 3

// recv before send (NCCL has send first): ncclprobe must read the order from DWARF.
struct ncclChannelPeer {
    struct ncclConnector recv[NCCL_MAX_CONNS];
    struct ncclConnector send[NCCL_MAX_CONNS];
    int refCount;
};

struct ncclChannel {
    void *devPeers;
    struct ncclRing ring;
    struct ncclChannelPeer **peers; // nRanks + 1 (the last: NVLS / CollNet)
    int *devRingUserRanks;
    struct ncclTree tree;
    char transportState[1096];
    struct ncclNvls nvls;
    int id;
    uint32_t workFifoProduced;
};

struct ncclComm {
    uint64_t magic;             // kCommMagic while the communicator is alive
    struct ncclComm *groupNext; // next communicator with tasks in this thread's group
    unsigned fakeFlags;         // FAKE_NCCL_FLAG_*
    bool inGroup;               // on this thread's group list
    struct ncclChannel channels[MAXCHANNELS];
    int nChannels;        // channels with a topology (ring, tree, NVLS)
    uint64_t collOpCount; // proxy opCount: one per collective, one per plan's p2p work
    int rank;
    int cudaDev;
    int64_t busId;
    int nvmlDev;
    int compCap;
    uint64_t commHash; // same on every rank of a communicator
    char commIdText[40];
    int nRanks;
    int node;
    int nNodes;
    int localRank;
    uint64_t opCount;  // API operations enqueued
    uint64_t nLaunch;  // plans launched (the "seq" of the log)
    uint64_t apiCount; // API calls
    char peerInfo[4096];
    struct ncclKernelPlanner planner;
    uint64_t seqNumber[ncclNumFuncs];
};

// NCCL's enqueue descriptor. Unlike the structs above this keeps NCCL's layout for its first ten
// members (stable from 2.18 to 2.30): coll 0, opName 8, sendbuff 16, recvbuff 24, count 32,
// datatype 40, op 44, root 48, comm 56, stream 64.
struct ncclInfo {
    ncclFunc_t coll;
    const char *opName;
    const void *sendbuff;
    void *recvbuff;
    size_t count;
    ncclDataType_t datatype;
    ncclRedOp_t op;
    int root; // peer for p2p
    ncclComm_t comm;
    cudaStream_t stream;
    int chunkSteps;
    int sliceSteps;
};

// ---- the "device kernels" ----
//
// Host functions standing for the kernels' host stubs, with real NCCL's names and parameter types
// (so their mangled names are NCCL's, e.g.
// _Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE). Their
// addresses go into plan->kernelFn; they are never called. Each body differs so identical-code
// folding cannot merge them.
template <unsigned long N> struct ncclDevKernelArgsStorage { alignas(16) char storage[N]; };
struct ncclSymkDevWorkArgs4K {
    alignas(16) char storage[4096];
};

static volatile int fakeKernelSink;
#define FAKE_DEV_KERNEL(name, id)                                                                  \
    __attribute__((noinline, used)) void name(ncclDevKernelArgsStorage<4096> args) {               \
        fakeKernelSink = (id) + args.storage[(id) % 61];                                           \
    }
#define FAKE_SYMK_KERNEL(name, id)                                                                 \
    __attribute__((noinline, used)) void name(ncclSymkDevWorkArgs4K args) {                        \
        fakeKernelSink = (id)*3 + args.storage[(id) % 59];                                         \
    }
FAKE_DEV_KERNEL(ncclDevKernel_Generic, 1)
FAKE_DEV_KERNEL(ncclDevKernel_SendRecv, 2)
FAKE_DEV_KERNEL(ncclDevKernel_AllReduce_Sum_f32_RING_LL, 3)
FAKE_DEV_KERNEL(ncclDevKernel_AllReduce_Sum_bf16_RING_LL, 4)
FAKE_DEV_KERNEL(ncclDevKernel_AllGather_RING_LL, 5)
FAKE_DEV_KERNEL(ncclDevKernel_Broadcast_RING_LL, 6)
FAKE_DEV_KERNEL(ncclDevKernel_ReduceScatter_Sum_f32_RING_LL, 7)
FAKE_DEV_KERNEL(ncclDevKernel_Reduce_Sum_f32_RING_LL, 8)
FAKE_SYMK_KERNEL(ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_f32, 9)
FAKE_SYMK_KERNEL(ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_bf16, 10)
#undef FAKE_DEV_KERNEL
#undef FAKE_SYMK_KERNEL

#define KFN(f) reinterpret_cast<void *>(&f)

struct FakeKernel {
    void *fn;
    const char *name;
    bool symmetric;
    // what it is specialised for (-1: any)
    int func, op, type, algorithm, protocol;
};

static const FakeKernel kKernels[] = {
    {KFN(ncclDevKernel_Generic), "ncclDevKernel_Generic", false, -1, -1, -1, -1, -1},
    {KFN(ncclDevKernel_SendRecv), "ncclDevKernel_SendRecv", false, ncclFuncSendRecv, -1, -1, -1,
     -1},
    {KFN(ncclDevKernel_AllReduce_Sum_f32_RING_LL), "ncclDevKernel_AllReduce_Sum_f32_RING_LL", false,
     ncclFuncAllReduce, ncclSum, ncclFloat32, NCCL_ALGO_RING, NCCL_PROTO_LL},
    {KFN(ncclDevKernel_AllReduce_Sum_bf16_RING_LL), "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
     false, ncclFuncAllReduce, ncclSum, ncclBfloat16, NCCL_ALGO_RING, NCCL_PROTO_LL},
    {KFN(ncclDevKernel_AllGather_RING_LL), "ncclDevKernel_AllGather_RING_LL", false,
     ncclFuncAllGather, -1, -1, NCCL_ALGO_RING, NCCL_PROTO_LL},
    {KFN(ncclDevKernel_Broadcast_RING_LL), "ncclDevKernel_Broadcast_RING_LL", false,
     ncclFuncBroadcast, -1, -1, NCCL_ALGO_RING, NCCL_PROTO_LL},
    {KFN(ncclDevKernel_ReduceScatter_Sum_f32_RING_LL),
     "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", false, ncclFuncReduceScatter, ncclSum,
     ncclFloat32, NCCL_ALGO_RING, NCCL_PROTO_LL},
    {KFN(ncclDevKernel_Reduce_Sum_f32_RING_LL), "ncclDevKernel_Reduce_Sum_f32_RING_LL", false,
     ncclFuncReduce, ncclSum, ncclFloat32, NCCL_ALGO_RING, NCCL_PROTO_LL},
    {KFN(ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_f32),
     "ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_f32", true, ncclFuncAllReduce, ncclSum,
     ncclFloat32, -1, -1},
    {KFN(ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_bf16),
     "ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_bf16", true, ncclFuncAllReduce, ncclSum,
     ncclBfloat16, -1, -1},
};
static const int kGenericKernel = 0, kSendRecvKernel = 1;

static const FakeKernel *kernelByFn(const void *fn) {
    for (const FakeKernel &k : kKernels)
        if (k.fn == fn)
            return &k;
    return nullptr;
}

// ---- names and sizes ----

static const char *const kFuncNames[ncclNumFuncs] = {
    "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "SendRecv",
    "Send",      "Recv",   "AlltoAll",  "Scatter",       "Gather",
};
static const char *const kTypeNames[ncclNumTypes] = {
    "int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
    "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2",
};
static const size_t kTypeSizes[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
static const char *const kOpNames[ncclNumOps] = {"sum", "prod", "max", "min", "avg"};
static const char *const kAlgoNames[] = {
    "TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"};
static const char *const kProtoNames[] = {"LL", "LL128", "SIMPLE"};

static const char *funcName(int f) {
    return f >= 0 && f < ncclNumFuncs ? kFuncNames[f] : "?";
}
static const char *typeName(int t) {
    return t >= 0 && t < ncclNumTypes ? kTypeNames[t] : "?";
}
static size_t typeSize(int t) {
    return t >= 0 && t < ncclNumTypes ? kTypeSizes[t] : 0;
}
static const char *algoName(int a) {
    return a >= 0 && a <= NCCL_ALGO_PAT ? kAlgoNames[a] : "";
}
static const char *protoName(int p) {
    return p >= 0 && p <= NCCL_PROTO_SIMPLE ? kProtoNames[p] : "";
}
static bool isReduction(int f) {
    return f == ncclFuncReduce || f == ncclFuncReduceScatter || f == ncclFuncAllReduce;
}
static const char *redopName(int func, int op) {
    if (!isReduction(func))
        return "";
    return op >= 0 && op < ncclNumOps ? kOpNames[op] : "?";
}

// ---- the truth log (FAKE_NCCL_LOG) ----

static int logFd() {
    static const int fd = [] {
        const char *path = getenv("FAKE_NCCL_LOG");
        if (path == nullptr || *path == '\0')
            return -1;
        int f = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (f < 0)
            fprintf(stderr, "libfakenccl: cannot open FAKE_NCCL_LOG=%s: %s\n", path,
                    strerror(errno));
        return f;
    }();
    return fd;
}

__attribute__((format(printf, 2, 3))) static void appendf(std::string &s, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (static_cast<size_t>(n) < sizeof(buf)) {
        s.append(buf, static_cast<size_t>(n));
        return;
    }
    std::string big(static_cast<size_t>(n) + 1, '\0');
    va_start(ap, fmt);
    vsnprintf(&big[0], big.size(), fmt, ap);
    va_end(ap);
    s.append(big.data(), static_cast<size_t>(n));
}

// One write(2) of the whole line on an O_APPEND descriptor: lines from threads and processes
// sharing the file never interleave.
static void writeLine(std::string &line) {
    int fd = logFd();
    if (fd < 0)
        return;
    line.push_back('\n');
    const char *p = line.data();
    size_t left = line.size();
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        p += n, left -= static_cast<size_t>(n);
    }
}

static long fakeGettid() {
    return static_cast<long>(syscall(SYS_gettid));
}

static unsigned long ptrValue(const void *p) {
    return static_cast<unsigned long>(reinterpret_cast<uintptr_t>(p));
}

// API call at entry. redop is -1 for calls without one; buff is the p2p / Bcast buffer.
static void logApi(const char *api, const ncclComm *comm, size_t count, int datatype, int redop,
                   int root, int peer, cudaStream_t stream, const void *sendbuff,
                   const void *recvbuff) {
    if (logFd() < 0)
        return;
    std::string s;
    appendf(s,
            "{\"api\":\"%s\",\"tid\":%ld,\"comm\":\"0x%lx\",\"count\":%zu,\"datatype\":\"%s\","
            "\"redop\":\"%s\",\"root\":%d,\"peer\":%d,\"stream\":\"0x%lx\",\"sendbuff\":\"0x%lx\","
            "\"recvbuff\":\"0x%lx\"}",
            api, fakeGettid(), ptrValue(comm), count, typeName(datatype),
            redop >= 0 && redop < ncclNumOps ? kOpNames[redop] : (redop < 0 ? "" : "?"), root, peer,
            ptrValue(stream), ptrValue(sendbuff), ptrValue(recvbuff));
    writeLine(s);
}

static void logPlain(const char *api) {
    if (logFd() < 0)
        return;
    std::string s;
    appendf(s, "{\"api\":\"%s\",\"tid\":%ld}", api, fakeGettid());
    writeLine(s);
}

static void appendOp(std::string &s, bool first, int func, size_t count, int datatype, int redop,
                     int root, int peer, int algorithm, int protocol, int nChannels,
                     const void *sendbuff, const void *recvbuff, int collApi) {
    appendf(s,
            "%s{\"op\":\"%s\",\"count\":%zu,\"datatype\":\"%s\",\"bytes\":%zu,\"redop\":\"%s\","
            "\"root\":%d,\"peer\":%d,\"algorithm\":\"%s\",\"protocol\":\"%s\",\"nchannels\":%d,"
            "\"sendbuff\":\"0x%lx\",\"recvbuff\":\"0x%lx\",\"coll_api\":\"%s\"}",
            first ? "" : ",", funcName(func), count, typeName(datatype), count * typeSize(datatype),
            redopName(func, redop), root, peer, algoName(algorithm), protoName(protocol), nChannels,
            ptrValue(sendbuff), ptrValue(recvbuff), funcName(collApi));
}

// Launch, from inside ncclLaunchKernel / ncclLaunchCeColl: what they read, plus the plan's work.
FAKE_NOIPA static void logLaunch(const char *launch, const ncclComm *comm,
                                 const ncclKernelPlan *plan, unsigned grid, unsigned block,
                                 cudaStream_t stream, uint64_t seq) {
    if (logFd() < 0)
        return;
    const FakeKernel *k = kernelByFn(plan->kernelFn);
    std::string symbol;
    if (k != nullptr)
        appendf(symbol, "_Z%zu%s%s", strlen(k->name), k->name,
                k->symmetric ? "21ncclSymkDevWorkArgs4K" : "24ncclDevKernelArgsStorageILm4096EE");
    std::string s;
    appendf(s,
            "{\"launch\":\"%s\",\"tid\":%ld,\"seq\":%" PRIu64 ",\"comm\":\"0x%lx\","
            "\"comm_hash\":\"0x%" PRIx64 "\",\"rank\":%d,\"nranks\":%d,\"cuda_dev\":%d,"
            "\"kernel\":\"%s\",\"kernel_symbol\":\"%s\",\"kernel_fn\":\"0x%lx\","
            "\"grid\":[%u,1,1],\"block\":[%u,1,1],\"stream\":\"0x%lx\",\"symmetric\":%s,"
            "\"copy_engine\":%s,\"ops\":[",
            launch, fakeGettid(), seq, ptrValue(comm), comm->commHash, comm->rank, comm->nRanks,
            comm->cudaDev, k ? k->name : "", symbol.c_str(), ptrValue(plan->kernelFn), grid, block,
            ptrValue(stream), plan->isSymColl ? "true" : "false",
            plan->isCeColl ? "true" : "false");
    bool first = true;
    if (plan->isCeColl) {
        const ncclCeCollArgs *a = plan->ceCollArgs;
        appendOp(s, true, a->func, a->nElts, a->datatype, -1,
                 a->func == ncclFuncAllGather || a->func == ncclFuncAlltoAll ? -1 : a->rootRank, -1,
                 -1, -1, 0, a->sendBuff, a->recvBuff, a->func);
    } else if (plan->isSymColl) {
        const ncclSymkDevWorkArgs *a = plan->kernelSymArgs;
        appendOp(s, true, a->func, a->nElts, a->datatype, a->redOp, -1, -1, -1, -1,
                 static_cast<int>(a->nMaxBlocks), a->inputPtr, a->outputPtr, a->func);
    } else {
        for (const ncclTaskColl *t = plan->collTaskQueue.head; t != nullptr; t = t->next) {
            bool rooted = t->func == ncclFuncBroadcast || t->func == ncclFuncReduce;
            appendOp(s, first, t->func, t->count, t->datatype, t->opHost, rooted ? t->root : -1, -1,
                     t->algorithm, t->protocol, t->nChannels, t->sendbuff, t->recvbuff, t->func);
            first = false;
        }
        for (const ncclTaskP2p *t = plan->p2pTaskQueue.head; t != nullptr; t = t->next) {
            bool send = t->func == ncclFuncSend;
            appendOp(s, first, t->func, t->count, t->datatype, -1, -1, t->root, -1, -1,
                     t->nChannels, send ? t->buff : nullptr, send ? nullptr : t->buff, t->collAPI);
            first = false;
        }
    }
    s.append("]}");
    writeLine(s);
}

// ---- launch: what NCCL's enqueue.cc does with a plan ----

// Internal, hidden (LOCAL in .symtab only). Reads the plan the way NCCL 2.28 does:
// grid = {popcount(channelMask),1,1}, block = {threadPerBlock,1,1},
// stream = comm->planner.streams->stream, function = kernelFn. Launches nothing.
FAKE_NOIPA ncclResult_t ncclLaunchKernel(ncclComm *comm, ncclKernelPlan *plan) {
    unsigned nChannels = static_cast<unsigned>(__builtin_popcountll(plan->channelMask));
    unsigned nThreads = static_cast<unsigned>(plan->threadPerBlock);
    void *fn = plan->kernelFn;
    cudaStream_t launchStream = comm->planner.streams->stream;
    if (fn == nullptr || nChannels == 0 || nThreads == 0)
        return ncclInternalError;
    uint64_t seq = comm->nLaunch++;
    logLaunch("ncclLaunchKernel", comm, plan, nChannels, nThreads, launchStream, seq);
    FAKE_KEEP_FRAME();
    return ncclSuccess;
}

// Internal, hidden: the copy-engine path (NCCL 2.28 ce_coll.cc). Reads comm->planner.streams and
// plan->ceCollArgs; copies nothing.
FAKE_NOIPA ncclResult_t ncclLaunchCeColl(ncclComm *comm, ncclKernelPlan *plan) {
    cudaStream_t stream = comm->planner.streams->stream;
    ncclCeCollArgs *args = plan->ceCollArgs;
    switch (args->func) {
    case ncclFuncAllGather:
    case ncclFuncAlltoAll:
    case ncclFuncScatter:
    case ncclFuncGather:
        break;
    default:
        return ncclInvalidUsage;
    }
    uint64_t seq = comm->nLaunch++;
    logLaunch("ncclLaunchCeColl", comm, plan, 0, 0, stream, seq);
    FAKE_KEEP_FRAME();
    return ncclSuccess;
}

// ---- planning ----

static void *xcalloc(size_t n) {
    void *p = calloc(1, n);
    if (p == nullptr) {
        fprintf(stderr, "libfakenccl: out of memory\n");
        abort();
    }
    return p;
}

template <typename T> static void poisonFree(T *p) {
    if (p != nullptr) {
        memset(static_cast<void *>(p), kPoison, sizeof(T));
        free(p);
    }
}

static size_t collBytes(const ncclTaskColl *t) {
    return t->count * typeSize(t->datatype);
}

static int protoForBytes(size_t bytes) {
    if (bytes < (64u << 10))
        return NCCL_PROTO_LL;
    if (bytes < (4u << 20))
        return NCCL_PROTO_LL128;
    return NCCL_PROTO_SIMPLE;
}

static int warpsForProto(int proto) {
    return proto == NCCL_PROTO_LL ? 8 : proto == NCCL_PROTO_LL128 ? 20 : 16;
}

// Our (deterministic) tuning model, in place of NCCL's cost tables:
//   protocol: bytes < 64 KiB LL, < 4 MiB LL128, else SIMPLE
//   algorithm: AllReduce > 1 MiB TREE, else RING; AllGather / ReduceScatter on >= 4 ranks and
//              <= 64 KiB PAT (SIMPLE); everything else RING
//   nChannels: clamp(bytes / 64 KiB, 2, 16); p2p tasks: 2 up to 16 KiB, else 4
static void selectAlgoProto(const ncclComm *comm, ncclTaskColl *t) {
    size_t bytes = collBytes(t);
    int algo = NCCL_ALGO_RING;
    int proto = protoForBytes(bytes);
    if ((t->func == ncclFuncAllReduce || t->func == ncclFuncReduce ||
         t->func == ncclFuncBroadcast) &&
        bytes > (1u << 20))
        algo = NCCL_ALGO_TREE;
    if (t->func == ncclFuncAllReduce && (comm->fakeFlags & FAKE_NCCL_FLAG_NVLS))
        algo = NCCL_ALGO_NVLS;
    if ((t->func == ncclFuncAllGather || t->func == ncclFuncReduceScatter) && comm->nRanks >= 4 &&
        bytes <= (64u << 10)) {
        algo = NCCL_ALGO_PAT;
        proto = NCCL_PROTO_SIMPLE;
    }
    size_t ch = bytes >> 16;
    t->algorithm = algo;
    t->protocol = proto;
    t->nWarps = warpsForProto(proto);
    t->nChannels = static_cast<uint8_t>(ch < 2 ? 2 : ch > 16 ? 16 : ch);
    t->nMaxChannels = 16;
    t->chunkStepsLog2 = proto == NCCL_PROTO_SIMPLE ? 3 : 0;
}

static uint64_t channelMaskFor(const ncclComm *comm, int nChannels) {
    // contiguous channels, starting at rank % 4 (popcount is what counts)
    uint64_t mask = nChannels >= 64 ? ~0ull : ((1ull << nChannels) - 1);
    return nChannels >= 61 ? mask : mask << (comm->rank % 4);
}

static const FakeKernel *specialisedKernel(const ncclTaskColl *t) {
    for (const FakeKernel &k : kKernels) {
        if (k.symmetric || k.func != t->func || k.algorithm < 0)
            continue;
        if ((k.op < 0 || k.op == t->opHost) && (k.type < 0 || k.type == t->datatype) &&
            k.algorithm == t->algorithm && k.protocol == t->protocol)
            return &k;
    }
    return nullptr;
}

static ncclKernelPlan *newPlan(ncclComm *comm) {
    ncclKernelPlan *plan = static_cast<ncclKernelPlan *>(xcalloc(sizeof(ncclKernelPlan)));
    plan->comm = comm;
    plan->persistent = comm->planner.persistent;
    plan->workStorageType = 0; // ncclDevWorkStorageTypeArgs
    return plan;
}

// NCCL's scheduleCeCollTaskToPlan: the task is consumed (freed) here, before the launch.
static ncclKernelPlan *ceCollPlan(ncclComm *comm, ncclTaskColl *task) {
    ncclKernelPlan *plan = newPlan(comm);
    ncclCeCollArgs *a = static_cast<ncclCeCollArgs *>(xcalloc(sizeof(ncclCeCollArgs)));
    a->func = task->func;
    a->rootRank = task->root;
    a->datatype = task->datatype;
    a->nElts = task->count;
    a->eltSize = typeSize(task->datatype);
    a->sendBuff = static_cast<uint8_t *>(const_cast<void *>(task->sendbuff));
    a->recvBuff = static_cast<uint8_t *>(task->recvbuff);
    plan->isCeColl = true;
    plan->ceCollArgs = a;
    plan->kernelArgsSize = sizeof(*a);
    poisonFree(task);
    return plan;
}

// NCCL's ncclSymmetricTaskScheduler: frees the task before the launch.
static ncclKernelPlan *symCollPlan(ncclComm *comm, ncclTaskColl *task) {
    ncclKernelPlan *plan = newPlan(comm);
    ncclSymkDevWorkArgs *a =
        static_cast<ncclSymkDevWorkArgs *>(xcalloc(sizeof(ncclSymkDevWorkArgs)));
    size_t blocks = collBytes(task) >> 16;
    a->nMaxBlocks = static_cast<uint32_t>(blocks < 1 ? 1 : blocks > 32 ? 32 : blocks);
    a->func = task->func;
    a->redOp = task->opHost;
    a->datatype = task->datatype;
    a->nElts = task->count;
    a->inputPtr = task->sendbuff;
    a->outputPtr = task->recvbuff;
    for (const FakeKernel &k : kKernels)
        if (k.symmetric && k.func == task->func && k.op == task->opHost && k.type == task->datatype)
            plan->kernelFn = k.fn;
    plan->isSymColl = true;
    plan->kernelSymArgs = a;
    plan->kernelArgsSize = sizeof(ncclSymkDevWorkArgs4K);
    plan->channelMask = channelMaskFor(comm, static_cast<int>(a->nMaxBlocks));
    plan->threadPerBlock = 512;
    plan->kernelSpecialized = true;
    poisonFree(task);
    return plan;
}

// ---- the proxy path (NCCL 2.28's enqueue.cc addProxyOpIfNeeded / uploadProxyOps and proxy.cc
// ncclProxySaveOp / SaveProxy) ----
//
// Planning asks ncclProxySaveOp whether an op needs the proxy (justInquire != NULL; SaveProxy
// posts nothing then) and queues it on plan->proxyOpQueue; after the launch hostStreamPlanTask
// posts every queued op (ncclProxySaveOp(comm, op, NULL)), which calls SaveProxy once per
// direction and peer of the op's pattern. SaveProxy has the signature of 2.28.9's IPA-SRA clone
// (the channel passed as &channel->peers and &channel->id) and its .symtab name. The truth log
// gets one "flow":"op" line per posted op and, from SaveProxy, one "flow":"step" line per step
// of each direction and peer it posts; "flow":"topology" at communicator init.

enum { proxyRecv = 0, proxySend = 1 };

static const char *const kPatternNames[] = {
    "RING",         "RING_TWICE",    "PIPELINE_FROM",  "PIPELINE_TO", "TREE_UP",   "TREE_DOWN",
    "TREE_UP_DOWN", "COLLNET_CHAIN", "COLLNET_DIRECT", "NVLS",        "NVLS_TREE", "PAT_UP",
    "PAT_DOWN",     "SEND",          "RECV",           "PROFILER"};

static const char *patternName(int p) {
    return p >= 0 && p < static_cast<int>(sizeof(kPatternNames) / sizeof(kPatternNames[0]))
               ? kPatternNames[p]
               : "?";
}

// Which phase of its pattern a step belongs to ("" none): the first half of RING_TWICE is the
// reduce-scatter, going up a tree reduces and coming down broadcasts.
static const char *stageOf(const ncclProxyOp *op, const ncclChannel *ch, int type, int peer,
                           int step) {
    switch (op->pattern) {
    case ncclPatternRingTwice:
        return step < op->nsteps / 2 ? "reduce-scatter" : "all-gather";
    case ncclPatternRing:
        return op->coll == ncclFuncReduceScatter ? "reduce-scatter"
               : op->coll == ncclFuncAllGather   ? "all-gather"
                                                 : "";
    case ncclPatternPipelineFrom:
    case ncclPatternTreeDown:
        return "broadcast";
    case ncclPatternPipelineTo:
    case ncclPatternTreeUp:
        return "reduce";
    case ncclPatternTreeUpDown:
        return (type == proxySend) == (peer == ch->tree.up) ? "reduce" : "broadcast";
    default:
        return "";
    }
}

static void logSteps(const ncclComm *comm, const ncclChannel *ch, const ncclProxyOp *op, int type,
                     int peer, int connIndex) {
    if (logFd() < 0)
        return;
    for (int step = 0; step < op->nsteps; step++) {
        std::string s;
        const char *stage = stageOf(op, ch, type, peer, step);
        appendf(s,
                "{\"flow\":\"step\",\"comm_hash\":\"0x%" PRIx64
                "\",\"rank\":%d,\"opCount\":%" PRIu64
                ",\"channel\":%d,\"step\":%d,\"op\":\"%s\",\"peer\":%d,\"bytes\":%zd,"
                "\"pattern\":\"%s\",\"protocol\":\"%s\",\"conn_index\":%d,\"stage\":",
                comm->commHash, comm->rank, op->opCount, op->channelId, step,
                type == proxySend ? "SEND" : "RECV", peer, op->nbytes, patternName(op->pattern),
                protoName(op->protocol), connIndex);
        appendf(s, *stage ? "\"%s\"}" : "null}", stage);
        writeLine(s);
    }
}

static void logProxyOp(const ncclComm *comm, const ncclProxyOp *op, uint64_t launchSeq) {
    if (logFd() < 0)
        return;
    std::string s;
    appendf(s,
            "{\"flow\":\"op\",\"tid\":%ld,\"comm_hash\":\"0x%" PRIx64
            "\",\"rank\":%d,\"nranks\":%d,"
            "\"pid\":%d,\"opCount\":%" PRIu64 ",\"channel\":%d,\"nsteps\":%d,\"nbytes\":%zd,"
            "\"chunkSize\":%zu,\"sliceSteps\":%d,\"chunkSteps\":%d,\"pattern\":\"%s\","
            "\"protocol\":\"%s\",\"algorithm\":\"%s\",\"coll\":\"%s\",\"root\":%d,"
            "\"launch_seq\":%" PRIu64 "}",
            fakeGettid(), comm->commHash, comm->rank, comm->nRanks, op->pid, op->opCount,
            op->channelId, op->nsteps, op->nbytes, op->chunkSize, op->sliceSteps, op->chunkSteps,
            patternName(op->pattern), protoName(op->protocol), algoName(op->algorithm),
            funcName(op->coll), op->root, launchSeq);
    writeLine(s);
}

static void appendInts(std::string &s, const int *v, int n) {
    s.push_back('[');
    for (int i = 0; i < n; i++)
        appendf(s, "%s%d", i ? "," : "", v[i]);
    s.push_back(']');
}

static void logTopology(const ncclComm *c) {
    if (logFd() < 0)
        return;
    std::string s;
    appendf(s,
            "{\"flow\":\"topology\",\"comm_hash\":\"0x%" PRIx64 "\",\"rank\":%d,\"nranks\":%d,"
            "\"nchannels\":%d,\"channels\":[",
            c->commHash, c->rank, c->nRanks, c->nChannels);
    for (int i = 0; i < c->nChannels; i++) {
        const ncclChannel *ch = &c->channels[i];
        appendf(s,
                "%s{\"channel\":%d,\"ring\":{\"prev\":%d,\"next\":%d,\"userRanks\":", i ? "," : "",
                ch->id, ch->ring.prev, ch->ring.next);
        appendInts(s, ch->ring.userRanks, c->nRanks);
        appendf(s, "},\"tree\":{\"up\":%d,\"down\":", ch->tree.up);
        appendInts(s, ch->tree.down, NCCL_MAX_TREE_ARITY);
        appendf(s, "},\"nvls\":{\"out\":%d}}", ch->nvls.out);
    }
    s.append("]}");
    writeLine(s);
}

// Two ranks per "node": peers on another node are reached through the network (the proxy
// progresses them); the same node is P2P (no proxy).
static void *fakeNetProgress(const ncclComm *c, int peer) {
    static char netProgress; // stands for net.cc's sendProxyProgress / recvProxyProgress
    return peer >= c->nRanks || peer / 2 != c->rank / 2 ? &netProgress : nullptr;
}

// Channel c: even channels ring 0,1,..,n-1 and a binary tree by rank; odd channels reversed.
static int channelRank(const ncclComm *c, int channel, int pos) {
    return channel % 2 ? c->nRanks - 1 - pos : pos;
}

static void initChannel(ncclComm *c, int id) {
    ncclChannel *ch = &c->channels[id];
    int n = c->nRanks, me = channelRank(c, id, c->rank); // my position (the map is an involution)
    ch->id = id;
    ch->ring.prev = channelRank(c, id, (me + n - 1) % n);
    ch->ring.next = channelRank(c, id, (me + 1) % n);
    ch->ring.index = me;
    ch->ring.userRanks = static_cast<int *>(xcalloc(sizeof(int) * static_cast<size_t>(n)));
    for (int i = 0; i < n; i++)
        ch->ring.userRanks[i] = channelRank(c, id, (me + i) % n);
    ch->tree.up = me == 0 ? -1 : channelRank(c, id, (me - 1) / 2);
    for (int i = 0; i < NCCL_MAX_TREE_ARITY; i++) {
        int child = 2 * me + 1 + i;
        ch->tree.down[i] = i < 2 && child < n ? channelRank(c, id, child) : -1;
    }
    ch->nvls.out = (c->fakeFlags & FAKE_NCCL_FLAG_NVLS) ? (c->rank + n / 2) % n : -1;
    ch->nvls.treeUp = -1;
    for (int &d : ch->nvls.treeDown)
        d = -1;
    ch->peers = static_cast<ncclChannelPeer **>(
        xcalloc(sizeof(ncclChannelPeer *) * static_cast<size_t>(n + 1)));
    for (int p = 0; p <= n; p++) {
        ncclChannelPeer *peer = static_cast<ncclChannelPeer *>(xcalloc(sizeof(ncclChannelPeer)));
        for (int k = 0; k < NCCL_MAX_CONNS; k++) {
            peer->send[k].proxyConn.proxyProgress = fakeNetProgress(c, p);
            peer->recv[k].proxyConn.proxyProgress = fakeNetProgress(c, p);
            peer->send[k].connected = peer->recv[k].connected = 1;
        }
        ch->peers[p] = peer;
    }
}

static void initTopology(ncclComm *c) {
    c->nChannels = 20; // channelMaskFor: up to 16 channels from rank % 4
    for (int i = 0; i < c->nChannels; i++)
        initChannel(c, i);
}

static void freeTopology(ncclComm *c) {
    for (int i = 0; i < c->nChannels; i++) {
        ncclChannel *ch = &c->channels[i];
        for (int p = 0; p <= c->nRanks; p++)
            free(ch->peers[p]);
        free(ch->peers);
        free(ch->ring.userRanks);
    }
}

// The IPA-SRA clone of SaveProxy, as in 2.28.9: (comm, &channel->peers, &channel->id, type, peer,
// op, connIndex, justInquire). Local, under the clone's name.
static FAKE_NOIPA ncclResult_t SaveProxy(
    ncclComm *comm, ncclChannelPeer ***peers, int *channelId, int type, int peer, ncclProxyOp *op,
    int connIndex,
    bool *justInquire) __asm__("_ZL9SaveProxyP8ncclCommP11ncclChanneliiP11ncclProxyOpiPb.isra.0");

static ncclResult_t SaveProxy(ncclComm *comm, ncclChannelPeer ***peers, int *channelId, int type,
                              int peer, ncclProxyOp *op, int connIndex, bool *justInquire) {
    if (peer < 0)
        return ncclSuccess;
    if (*channelId != op->channelId)
        return ncclInternalError;
    ncclChannelPeer *peerComm = (*peers)[peer];
    ncclConnector *connector =
        type == proxyRecv ? peerComm->recv + connIndex : peerComm->send + connIndex;
    if (connector->proxyConn.proxyProgress == nullptr)
        return ncclSuccess; // P2P / NVLink: nothing for the proxy
    if (justInquire != nullptr) {
        *justInquire = true;
        return ncclSuccess;
    }
    op->peer = peer;
    const ncclChannel *ch = reinterpret_cast<const ncclChannel *>(
        reinterpret_cast<const char *>(peers) - offsetof(ncclChannel, peers));
    logSteps(comm, ch, op, type, peer, connIndex);
    FAKE_KEEP_FRAME();
    return ncclSuccess;
}

// NCCL's NeedProxy: in a pipeline (chain) one end does not receive and the other does not send.
static bool needProxy(int type, int pattern, int root, const ncclRing *ring, int nranks) {
    if (pattern == ncclPatternRing || pattern == ncclPatternRingTwice)
        return true;
    int index = pattern == ncclPatternPipelineFrom ? (type == proxyRecv ? 0 : 1)
                                                   : (type == proxyRecv ? nranks - 1 : 0);
    return ring->userRanks[index] != root;
}

// Internal, hidden, not a clone: _Z15ncclProxySaveOpP8ncclCommP11ncclProxyOpPb.
FAKE_NOIPA ncclResult_t ncclProxySaveOp(ncclComm *comm, ncclProxyOp *op, bool *justInquire) {
    ncclChannel *channel = &comm->channels[op->channelId];
    ncclChannelPeer ***peers = &channel->peers;
    int *id = &channel->id;
    ncclResult_t rc = ncclSuccess;
    if (justInquire != nullptr)
        *justInquire = false;
    switch (op->pattern) {
    case ncclPatternRing:
    case ncclPatternRingTwice:
    case ncclPatternPipelineFrom:
    case ncclPatternPipelineTo: {
        const ncclRing *ring = &channel->ring;
        if (needProxy(proxyRecv, op->pattern, op->root, ring, comm->nRanks))
            rc = SaveProxy(comm, peers, id, proxyRecv, ring->prev, op, 0, justInquire);
        if (rc == ncclSuccess && needProxy(proxySend, op->pattern, op->root, ring, comm->nRanks))
            rc = SaveProxy(comm, peers, id, proxySend, ring->next, op, 0, justInquire);
        break;
    }
    case ncclPatternTreeUp:
    case ncclPatternTreeDown:
    case ncclPatternTreeUpDown: {
        const ncclTree *tree = &channel->tree;
        if (op->pattern != ncclPatternTreeDown) {
            for (int i = 0; i < NCCL_MAX_TREE_ARITY && rc == ncclSuccess; i++)
                rc = SaveProxy(comm, peers, id, proxyRecv, tree->down[i], op, 0, justInquire);
            if (rc == ncclSuccess)
                rc = SaveProxy(comm, peers, id, proxySend, tree->up, op, 0, justInquire);
        }
        if (op->pattern != ncclPatternTreeUp) {
            for (int i = 0; i < NCCL_MAX_TREE_ARITY && rc == ncclSuccess; i++)
                rc = SaveProxy(comm, peers, id, proxySend, tree->down[i], op, 0, justInquire);
            if (rc == ncclSuccess)
                rc = SaveProxy(comm, peers, id, proxyRecv, tree->up, op, 0, justInquire);
        }
        break;
    }
    case ncclPatternNvls:
        rc = SaveProxy(comm, peers, id, proxyRecv, channel->nvls.out, op, 0, justInquire);
        if (rc == ncclSuccess)
            rc = SaveProxy(comm, peers, id, proxySend, channel->nvls.out, op, 0, justInquire);
        break;
    case ncclPatternSend:
    case ncclPatternRecv:
        if (op->root == comm->rank)
            return ncclSuccess;
        rc = SaveProxy(comm, peers, id, op->pattern == ncclPatternSend ? proxySend : proxyRecv,
                       op->root, op, 1, justInquire);
        break;
    default:
        break; // PAT, CollNet: not modelled
    }
    FAKE_KEEP_FRAME();
    return rc;
}

// NCCL's addProxyOpIfNeeded: queue a copy of the op when the proxy has work for it.
static void addProxyOpIfNeeded(ncclComm *comm, ncclKernelPlan *plan, const ncclProxyOp *op) {
    bool needed = true;
    ncclProxySaveOp(comm, const_cast<ncclProxyOp *>(op), &needed);
    if (!needed)
        return;
    ncclProxyOp *q = static_cast<ncclProxyOp *>(xcalloc(sizeof(ncclProxyOp)));
    *q = *op;
    intruEnqueue(&plan->proxyOpQueue, q);
    plan->hasProxyOps = true;
}

static int collPattern(const ncclTaskColl *t) {
    if (t->algorithm == NCCL_ALGO_NVLS)
        return ncclPatternNvls;
    if (t->algorithm == NCCL_ALGO_TREE)
        return t->func == ncclFuncReduce      ? ncclPatternTreeUp
               : t->func == ncclFuncBroadcast ? ncclPatternTreeDown
                                              : ncclPatternTreeUpDown;
    if (t->algorithm != NCCL_ALGO_RING)
        return -1; // PAT: not modelled
    switch (t->func) {
    case ncclFuncAllReduce:
        return ncclPatternRingTwice;
    case ncclFuncBroadcast:
        return ncclPatternPipelineFrom;
    case ncclFuncReduce:
        return ncclPatternPipelineTo;
    default:
        return ncclPatternRing;
    }
}

// Steps per channel for the pattern, the model's: a ring's n-1 hops (twice for all-reduce), one
// chunk for pipelines, trees and NVLS; chunkSteps steps per chunk.
static int patternSteps(int pattern, int nranks, int chunkSteps) {
    int hops = pattern == ncclPatternRing        ? nranks - 1
               : pattern == ncclPatternRingTwice ? 2 * (nranks - 1)
                                                 : 1;
    return (hops < 1 ? 1 : hops) * chunkSteps;
}

// The i-th set bit of mask (channel id), -1 past the last.
static int nthChannel(uint64_t mask, int i) {
    for (int c = 0; c < 64; c++)
        if ((mask >> c) & 1 && i-- == 0)
            return c;
    return -1;
}

static void fillOp(ncclProxyOp *op, const ncclComm *comm, int protocol, size_t perChannel) {
    op->protocol = static_cast<uint8_t>(protocol);
    op->chunkSteps = protocol == NCCL_PROTO_SIMPLE ? 4 : 1;
    op->sliceSteps = protocol == NCCL_PROTO_SIMPLE ? 2 : 1;
    op->rank = comm->rank;
    op->pid = static_cast<int>(getpid());
    op->peer = -1;
    if (op->pattern == ncclPatternSend || op->pattern == ncclPatternRecv)
        op->nsteps = op->chunkSteps;
    else
        op->nsteps = patternSteps(op->pattern, comm->nRanks, op->chunkSteps);
    size_t step = perChannel / static_cast<size_t>(op->nsteps);
    op->nbytes = static_cast<ssize_t>(step ? step : 1);
    op->chunkSize = static_cast<size_t>(op->nbytes) * op->chunkSteps;
}

static void addProxyOps(ncclComm *comm, ncclKernelPlan *plan) {
    for (ncclTaskColl *t = plan->collTaskQueue.head; t != nullptr; t = t->next) {
        int pattern = collPattern(t);
        uint64_t opCount = comm->collOpCount++;
        if (pattern < 0)
            continue;
        for (int i = 0; i < t->nChannels; i++) {
            ncclProxyOp op = {};
            op.pattern = static_cast<ncclPattern_t>(pattern);
            op.opCount = opCount;
            op.channelId = static_cast<uint8_t>(nthChannel(plan->channelMask, i));
            op.root = t->func == ncclFuncReduce || t->func == ncclFuncBroadcast ? t->root : 0;
            op.coll = static_cast<uint8_t>(t->func);
            op.collAPI = static_cast<uint8_t>(t->func);
            op.algorithm = static_cast<uint8_t>(t->algorithm);
            op.dtype = static_cast<uint8_t>(t->datatype);
            op.redOp = static_cast<uint8_t>(t->opHost);
            op.nChannels = t->nChannels;
            op.task.coll = t;
            fillOp(&op, comm, t->protocol, collBytes(t) / t->nChannels);
            addProxyOpIfNeeded(comm, plan, &op);
        }
    }
    if (plan->p2pTaskQueue.head == nullptr)
        return;
    uint64_t opCount = comm->collOpCount++;
    for (ncclTaskP2p *t = plan->p2pTaskQueue.head; t != nullptr; t = t->next) {
        for (int i = 0; i < t->nChannels; i++) {
            ncclProxyOp op = {};
            op.pattern = t->func == ncclFuncSend ? ncclPatternSend : ncclPatternRecv;
            op.opCount = opCount;
            op.channelId = static_cast<uint8_t>(nthChannel(plan->channelMask, i));
            op.root = t->root;
            op.coll = static_cast<uint8_t>(t->func);
            op.collAPI = static_cast<uint8_t>(t->collAPI);
            op.algorithm = NCCL_ALGO_RING;
            op.dtype = static_cast<uint8_t>(t->datatype);
            op.nChannels = t->nChannels;
            op.task.p2p = t;
            fillOp(&op, comm, NCCL_PROTO_SIMPLE, t->bytes / t->nChannels);
            addProxyOpIfNeeded(comm, plan, &op);
        }
    }
}

// NCCL's uploadProxyOps (static, not a clone, as in 2.21-2.32 but 2.23.4): post every op of the
// plan just launched (launchSeq: that launch's "seq" in the truth log).
static FAKE_NOIPA void uploadProxyOps(ncclComm *comm, ncclKernelPlan *plan) {
    uint64_t launchSeq = comm->nLaunch - 1;
    for (ncclProxyOp *op = plan->proxyOpQueue.head; op != nullptr; op = op->enqNext) {
        logProxyOp(comm, op, launchSeq);
        ncclProxySaveOp(comm, op, nullptr);
        FAKE_KEEP_FRAME();
    }
}

// NCCL's hostStreamPlanTask: after the launch, the plan's proxy ops.
static FAKE_NOIPA void hostStreamPlanTask(ncclComm *comm, ncclKernelPlan *plan) {
    uploadProxyOps(comm, plan);
    FAKE_KEEP_FRAME();
}

// Every remaining coll task (call order) and p2p task of the communicator in one plan.
static ncclKernelPlan *kernelPlan(ncclComm *comm) {
    ncclKernelPlanner *planner = &comm->planner;
    ncclKernelPlan *plan = newPlan(comm);
    int nChannels = 0, nThreads = 0, nColl = 0, nP2p = 0;
    size_t bytes = 0;
    while (ncclTaskColl *t = intruDequeue(&planner->collTaskQueue)) {
        intruEnqueue(&plan->collTaskQueue, t);
        nChannels = t->nChannels > nChannels ? t->nChannels : nChannels;
        nThreads = t->nWarps * 32 > nThreads ? t->nWarps * 32 : nThreads;
        bytes += collBytes(t);
        nColl++;
    }
    while (ncclTaskP2p *t = intruDequeue(&planner->p2pTaskQueue)) {
        intruEnqueue(&plan->p2pTaskQueue, t);
        nChannels = t->nChannels > nChannels ? t->nChannels : nChannels;
        nThreads = 512 > nThreads ? 512 : nThreads;
        bytes += t->bytes;
        nP2p++;
    }
    const FakeKernel *k = &kKernels[kGenericKernel];
    if (nColl == 0)
        k = &kKernels[kSendRecvKernel];
    else if (nColl == 1 && nP2p == 0 && specialisedKernel(plan->collTaskQueue.head) != nullptr)
        k = specialisedKernel(plan->collTaskQueue.head);
    ncclDevKernelArgs *args = static_cast<ncclDevKernelArgs *>(xcalloc(sizeof(ncclDevKernelArgs)));
    plan->kernelFn = k->fn;
    plan->kernelSpecialized = k != &kKernels[kGenericKernel] && k != &kKernels[kSendRecvKernel];
    plan->channelMask = channelMaskFor(comm, nChannels);
    plan->threadPerBlock = nThreads;
    plan->collOpCount = nColl;
    plan->nWorkBatches = nColl + nP2p;
    plan->workBytes = bytes;
    plan->kernelArgs = args;
    plan->kernelArgsSize = 4096;
    args->comm = comm;
    args->channelMask = plan->channelMask;
    addProxyOps(comm, plan);
    return plan;
}

// NCCL's ncclLaunchPrepare: CE plans first, then symmetric ones, then one kernel plan.
static void ncclLaunchPrepare(ncclComm *comm) {
    ncclKernelPlanner *planner = &comm->planner;
    while (ncclTaskColl *t = intruDequeue(&planner->collCeTaskQueue))
        intruEnqueue(&planner->planQueue, ceCollPlan(comm, t));
    while (ncclTaskColl *t = intruDequeue(&planner->collSymTaskQueue))
        intruEnqueue(&planner->planQueue, symCollPlan(comm, t));
    if (planner->collTaskQueue.head != nullptr || planner->p2pTaskQueue.head != nullptr)
        intruEnqueue(&planner->planQueue, kernelPlan(comm));
}

// NCCL's reclaimPlan: the tasks and the plan are gone after the launch.
static void reclaimPlan(ncclKernelPlan *plan) {
    while (ncclProxyOp *op = intruDequeue(&plan->proxyOpQueue))
        poisonFree(op);
    while (ncclTaskColl *t = intruDequeue(&plan->collTaskQueue))
        poisonFree(t);
    while (ncclTaskP2p *t = intruDequeue(&plan->p2pTaskQueue))
        poisonFree(t);
    if (plan->isCeColl)
        poisonFree(plan->ceCollArgs);
    else if (plan->isSymColl)
        poisonFree(plan->kernelSymArgs);
    else
        poisonFree(plan->kernelArgs);
    poisonFree(plan);
}

static void ncclLaunchFinish(ncclComm *comm) {
    ncclKernelPlanner *planner = &comm->planner;
    while (ncclCudaStreamList *l = planner->streams) {
        planner->streams = l->next;
        poisonFree(l);
    }
    planner->nTasksColl = planner->nTasksP2p = 0;
    planner->nStreams = 0;
}

// Per-thread group state, as in NCCL (group.cc).
static thread_local int ncclGroupDepth;
static thread_local ncclComm *ncclGroupCommHead;
static thread_local ncclComm *ncclGroupCommTail;

// Leaving the outermost group: plan and launch every communicator with tasks, in the order they
// joined the group. ncclLaunchKernel / ncclLaunchCeColl are called from here, as in NCCL.
static FAKE_NOIPA ncclResult_t groupLaunch(ncclComm *head) {
    ncclResult_t first = ncclSuccess;
    ncclComm *next;
    for (ncclComm *comm = head; comm != nullptr; comm = next) {
        next = comm->groupNext;
        comm->groupNext = nullptr;
        comm->inGroup = false;
        ncclLaunchPrepare(comm);
        while (ncclKernelPlan *plan = intruDequeue(&comm->planner.planQueue)) {
            ncclResult_t rc;
            if (plan->isCeColl)
                rc = ncclLaunchCeColl(comm, plan);
            else
                rc = ncclLaunchKernel(comm, plan);
            FAKE_KEEP_FRAME();
            if (rc == ncclSuccess)
                hostStreamPlanTask(comm, plan);
            if (rc != ncclSuccess && first == ncclSuccess)
                first = rc;
            reclaimPlan(plan);
        }
        ncclLaunchFinish(comm);
    }
    return first;
}

__attribute__((always_inline)) static inline void ncclGroupStartInternal() {
    ncclGroupDepth++;
}

__attribute__((always_inline)) static inline ncclResult_t ncclGroupEndInternal() {
    if (ncclGroupDepth == 0)
        return ncclInvalidUsage;
    if (--ncclGroupDepth > 0)
        return ncclSuccess;
    ncclComm *head = ncclGroupCommHead;
    ncclGroupCommHead = ncclGroupCommTail = nullptr;
    if (head == nullptr)
        return ncclSuccess;
    ncclResult_t rc = groupLaunch(head);
    FAKE_KEEP_FRAME();
    return rc;
}

// ---- enqueue ----

static bool commValid(const ncclComm *comm) {
    return comm != nullptr && comm->magic == kCommMagic;
}

static void groupAddComm(ncclComm *comm) {
    if (comm->inGroup)
        return;
    comm->inGroup = true;
    comm->groupNext = nullptr;
    if (ncclGroupCommTail != nullptr)
        ncclGroupCommTail->groupNext = comm;
    else
        ncclGroupCommHead = comm;
    ncclGroupCommTail = comm;
}

// The planner's stream list: distinct streams in first-use order (the first is the launch one).
static void plannerAddStream(ncclKernelPlanner *planner, cudaStream_t stream) {
    ncclCudaStreamList **link = &planner->streams;
    for (; *link != nullptr; link = &(*link)->next)
        if ((*link)->stream == stream)
            return;
    ncclCudaStreamList *l = static_cast<ncclCudaStreamList *>(xcalloc(sizeof(ncclCudaStreamList)));
    l->stream = stream;
    l->serial = ++planner->streamSerial;
    *link = l;
    planner->nStreams++;
}

static void p2pTaskAppend(ncclComm *comm, ncclFunc_t func, ncclFunc_t collAPI, void *buff,
                          size_t count, ncclDataType_t datatype, int peer) {
    ncclTaskP2p *t = static_cast<ncclTaskP2p *>(xcalloc(sizeof(ncclTaskP2p)));
    t->func = func;
    t->collAPI = collAPI;
    t->buff = buff;
    t->count = count;
    t->datatype = datatype;
    t->root = peer;
    t->bytes = count * typeSize(datatype);
    t->nChannels = t->bytes <= (16u << 10) ? 2 : 4;
    t->chunkSizeLog2 = 17;
    intruEnqueue(&comm->planner.p2pTaskQueue, t);
    comm->planner.nTasksP2p++;
}

static char *offsetPtr(const void *base, size_t index, size_t count, ncclDataType_t datatype) {
    return const_cast<char *>(static_cast<const char *>(base)) + index * count * typeSize(datatype);
}

// NCCL's taskAppend: AlltoAll / Gather / Scatter become p2p tasks, the rest one coll task.
static void taskAppend(ncclComm *comm, const ncclInfo *info) {
    ncclKernelPlanner *planner = &comm->planner;
    int nRanks = comm->nRanks, me = comm->rank;
    switch (info->coll) {
    case ncclFuncSend:
    case ncclFuncRecv:
        // as in NCCL, the buffer travels in info->recvbuff and the peer in info->root
        p2pTaskAppend(comm, info->coll, info->coll, info->recvbuff, info->count, info->datatype,
                      info->root);
        break;
    case ncclFuncAlltoAll:
        for (int r = 0; r < nRanks; r++) {
            p2pTaskAppend(comm, ncclFuncSend, ncclFuncAlltoAll,
                          offsetPtr(info->sendbuff, r, info->count, info->datatype), info->count,
                          info->datatype, r);
            p2pTaskAppend(comm, ncclFuncRecv, ncclFuncAlltoAll,
                          offsetPtr(info->recvbuff, r, info->count, info->datatype), info->count,
                          info->datatype, r);
        }
        break;
    case ncclFuncGather:
        p2pTaskAppend(comm, ncclFuncSend, ncclFuncGather, const_cast<void *>(info->sendbuff),
                      info->count, info->datatype, info->root);
        if (me == info->root)
            for (int r = 0; r < nRanks; r++)
                p2pTaskAppend(comm, ncclFuncRecv, ncclFuncGather,
                              offsetPtr(info->recvbuff, r, info->count, info->datatype),
                              info->count, info->datatype, r);
        break;
    case ncclFuncScatter:
        if (me == info->root)
            for (int r = 0; r < nRanks; r++)
                p2pTaskAppend(comm, ncclFuncSend, ncclFuncScatter,
                              offsetPtr(info->sendbuff, r, info->count, info->datatype),
                              info->count, info->datatype, r);
        p2pTaskAppend(comm, ncclFuncRecv, ncclFuncScatter, info->recvbuff, info->count,
                      info->datatype, info->root);
        break;
    default: {
        ncclTaskColl *t = static_cast<ncclTaskColl *>(xcalloc(sizeof(ncclTaskColl)));
        t->func = info->coll;
        t->sendbuff = info->sendbuff;
        t->recvbuff = info->recvbuff;
        t->count = info->count;
        t->root = info->root;
        t->datatype = info->datatype;
        t->opHost = info->op;
        t->opDev.op = info->op == ncclAvg ? 4 /* SumPostDiv */ : info->op;
        t->opDev.proxyOp = info->op;
        t->chunkSteps = info->chunkSteps;
        t->sliceSteps = static_cast<uint8_t>(info->sliceSteps);
        t->trafficBytes = collBytes(t) * (info->coll == ncclFuncAllReduce ? 2 : 1);
        t->algorithm = NCCL_ALGO_UNDEF;
        t->protocol = NCCL_PROTO_UNDEF;
        if ((comm->fakeFlags & FAKE_NCCL_FLAG_CE) && t->func == ncclFuncAllGather) {
            intruEnqueue(&planner->collCeTaskQueue, t);
        } else if ((comm->fakeFlags & FAKE_NCCL_FLAG_SYMMETRIC) && t->func == ncclFuncAllReduce &&
                   t->opHost == ncclSum &&
                   (t->datatype == ncclFloat32 || t->datatype == ncclBfloat16)) {
            t->isSymLast = 1;
            intruEnqueue(&planner->collSymTaskQueue, t);
        } else {
            selectAlgoProto(comm, t);
            intruEnqueue(&planner->collTaskQueue, t);
        }
        planner->nTasksColl++;
        break;
    }
    }
    comm->opCount++;
    comm->seqNumber[info->coll]++;
}

// NCCL's ArgsCheck.
static ncclResult_t argsCheck(const ncclInfo *info) {
    const ncclComm *comm = info->comm;
    if (!commValid(comm) || info->datatype < 0 || info->datatype >= ncclNumTypes)
        return ncclInvalidArgument;
    if (isReduction(info->coll) && (info->op < 0 || info->op >= ncclNumOps))
        return ncclInvalidArgument;
    bool rooted = info->coll == ncclFuncBroadcast || info->coll == ncclFuncReduce ||
                  info->coll == ncclFuncGather || info->coll == ncclFuncScatter ||
                  info->coll == ncclFuncSend || info->coll == ncclFuncRecv;
    if (rooted && (info->root < 0 || info->root >= comm->nRanks))
        return ncclInvalidArgument;
    return ncclSuccess;
}

// Internal, hidden: every API call goes through here (an implicit group around the task append).
FAKE_NOIPA ncclResult_t ncclEnqueueCheck(ncclInfo *info) {
    ncclResult_t rc = argsCheck(info);
    if (rc != ncclSuccess)
        return rc;
    ncclGroupStartInternal();
    taskAppend(info->comm, info);
    groupAddComm(info->comm);
    plannerAddStream(&info->comm->planner, info->stream);
    rc = ncclGroupEndInternal();
    FAKE_KEEP_FRAME();
    return rc;
}

// ---- communicators ----

static uint64_t mix64(uint64_t x) { // splitmix64's finaliser
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static void logCommInit(const ncclComm *c) {
    if (logFd() < 0)
        return;
    std::string s;
    appendf(s,
            "{\"api\":\"CommInitRank\",\"tid\":%ld,\"comm\":\"0x%lx\",\"comm_hash\":\"0x%" PRIx64
            "\",\"rank\":%d,\"nranks\":%d,\"cuda_dev\":%d,\"symmetric\":%s,\"copy_engine\":%s}",
            fakeGettid(), ptrValue(c), c->commHash, c->rank, c->nRanks, c->cudaDev,
            (c->fakeFlags & FAKE_NCCL_FLAG_SYMMETRIC) ? "true" : "false",
            (c->fakeFlags & FAKE_NCCL_FLAG_CE) ? "true" : "false");
    writeLine(s);
}

extern "C" {

FAKE_NCCL_API ncclResult_t ncclCommInitRankFakeEx(ncclComm_t *comm, int nranks, int rank,
                                                  unsigned flags, uint64_t id) {
    if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks ||
        (flags & ~static_cast<unsigned>(FAKE_NCCL_FLAG_SYMMETRIC | FAKE_NCCL_FLAG_CE |
                                        FAKE_NCCL_FLAG_NVLS)) != 0)
        return ncclInvalidArgument;
    ncclComm *c = static_cast<ncclComm *>(calloc(1, sizeof(ncclComm)));
    if (c == nullptr)
        return ncclSystemError;
    c->magic = kCommMagic;
    c->fakeFlags = flags;
    c->rank = rank;
    c->nRanks = nranks;
    c->cudaDev = 7 - rank % 8;
    c->nvmlDev = c->cudaDev;
    c->busId = 0x1b000 + 0x1000 * c->cudaDev;
    c->compCap = 90;
    c->commHash = mix64(mix64(id) ^ static_cast<uint64_t>(nranks));
    snprintf(c->commIdText, sizeof(c->commIdText), "fake-%" PRIu64 "-%d", id, nranks);
    c->nNodes = 1;
    c->localRank = rank;
    initTopology(c);
    *comm = c;
    logCommInit(c);
    logTopology(c);
    return ncclSuccess;
}

FAKE_NCCL_API ncclResult_t ncclCommInitRankFakeFlags(ncclComm_t *comm, int nranks, int rank,
                                                     unsigned flags) {
    return ncclCommInitRankFakeEx(comm, nranks, rank, flags, 0);
}

FAKE_NCCL_API ncclResult_t ncclCommInitRankFake(ncclComm_t *comm, int nranks, int rank) {
    return ncclCommInitRankFakeEx(comm, nranks, rank, 0, 0);
}

FAKE_NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!commValid(comm) || comm->inGroup)
        return ncclInvalidArgument;
    if (logFd() >= 0) {
        std::string s;
        appendf(s, "{\"api\":\"CommDestroy\",\"tid\":%ld,\"comm\":\"0x%lx\"}", fakeGettid(),
                ptrValue(comm));
        writeLine(s);
    }
    freeTopology(comm);
    memset(static_cast<void *>(comm), kPoison, sizeof(*comm));
    free(comm);
    return ncclSuccess;
}

FAKE_NCCL_API ncclResult_t ncclGetVersion(int *version) {
    if (version == nullptr)
        return ncclInvalidArgument;
    *version = kVersionCode;
    return ncclSuccess;
}

// ---- the collective / p2p API: log, fill an ncclInfo, ncclEnqueueCheck (as NCCL's collectives.cc)

// Always inlined: the API function itself calls ncclEnqueueCheck, as in NCCL.
__attribute__((always_inline)) static inline ncclResult_t
enqueue(ncclFunc_t coll, const char *opName, const void *sendbuff, void *recvbuff, size_t count,
        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
    ncclInfo info = {coll, opName, sendbuff, recvbuff, count, datatype,
                     op,   root,   comm,     stream,   4,     2};
    ncclResult_t rc = ncclEnqueueCheck(&info);
    FAKE_KEEP_FRAME();
    return rc;
}

FAKE_NCCL_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream) {
    logApi("AllReduce", comm, count, datatype, op, -1, -1, stream, sendbuff, recvbuff);
    return enqueue(ncclFuncAllReduce, "AllReduce", sendbuff, recvbuff, count, datatype, op, 0, comm,
                   stream);
}

FAKE_NCCL_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                         ncclDataType_t datatype, ncclComm_t comm,
                                         cudaStream_t stream) {
    logApi("AllGather", comm, sendcount, datatype, -1, -1, -1, stream, sendbuff, recvbuff);
    return enqueue(ncclFuncAllGather, "AllGather", sendbuff, recvbuff, sendcount, datatype, ncclSum,
                   0, comm, stream);
}

FAKE_NCCL_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                             ncclDataType_t datatype, ncclRedOp_t op,
                                             ncclComm_t comm, cudaStream_t stream) {
    logApi("ReduceScatter", comm, recvcount, datatype, op, -1, -1, stream, sendbuff, recvbuff);
    return enqueue(ncclFuncReduceScatter, "ReduceScatter", sendbuff, recvbuff, recvcount, datatype,
                   op, 0, comm, stream);
}

FAKE_NCCL_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                         ncclDataType_t datatype, int root, ncclComm_t comm,
                                         cudaStream_t stream) {
    logApi("Broadcast", comm, count, datatype, -1, root, -1, stream, sendbuff, recvbuff);
    return enqueue(ncclFuncBroadcast, "Broadcast", sendbuff, recvbuff, count, datatype, ncclSum,
                   root, comm, stream);
}

// As in NCCL: the deprecated in-place broadcast calls the exported ncclBroadcast (both API probes
// fire for one ncclBcast).
FAKE_NCCL_API ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                                     ncclComm_t comm, cudaStream_t stream) {
    logApi("Bcast", comm, count, datatype, -1, root, -1, stream, buff, buff);
    ncclResult_t rc = ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
    FAKE_KEEP_FRAME();
    return rc;
}

FAKE_NCCL_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclRedOp_t op, int root,
                                      ncclComm_t comm, cudaStream_t stream) {
    logApi("Reduce", comm, count, datatype, op, root, -1, stream, sendbuff, recvbuff);
    return enqueue(ncclFuncReduce, "Reduce", sendbuff, recvbuff, count, datatype, op, root, comm,
                   stream);
}

FAKE_NCCL_API ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                        ncclDataType_t datatype, ncclComm_t comm,
                                        cudaStream_t stream) {
    logApi("AlltoAll", comm, count, datatype, -1, -1, -1, stream, sendbuff, recvbuff);
    return enqueue(ncclFuncAlltoAll, "AlltoAll", sendbuff, recvbuff, count, datatype, ncclSum, 0,
                   comm, stream);
}

FAKE_NCCL_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, int root, ncclComm_t comm,
                                      cudaStream_t stream) {
    logApi("Gather", comm, count, datatype, -1, root, -1, stream, sendbuff, recvbuff);
    return enqueue(ncclFuncGather, "Gather", sendbuff, recvbuff, count, datatype, ncclSum, root,
                   comm, stream);
}

FAKE_NCCL_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       cudaStream_t stream) {
    logApi("Scatter", comm, count, datatype, -1, root, -1, stream, sendbuff, recvbuff);
    return enqueue(ncclFuncScatter, "Scatter", sendbuff, recvbuff, count, datatype, ncclSum, root,
                   comm, stream);
}

FAKE_NCCL_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                    int peer, ncclComm_t comm, cudaStream_t stream) {
    logApi("Send", comm, count, datatype, -1, -1, peer, stream, sendbuff, nullptr);
    return enqueue(ncclFuncSend, "Send", nullptr, const_cast<void *>(sendbuff), count, datatype,
                   ncclSum, peer, comm, stream);
}

FAKE_NCCL_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                    ncclComm_t comm, cudaStream_t stream) {
    logApi("Recv", comm, count, datatype, -1, -1, peer, stream, nullptr, recvbuff);
    return enqueue(ncclFuncRecv, "Recv", nullptr, recvbuff, count, datatype, ncclSum, peer, comm,
                   stream);
}

FAKE_NCCL_API ncclResult_t ncclGroupStart(void) {
    logPlain("GroupStart");
    ncclGroupStartInternal();
    return ncclSuccess;
}

FAKE_NCCL_API ncclResult_t ncclGroupEnd(void) {
    logPlain("GroupEnd");
    ncclResult_t rc = ncclGroupEndInternal();
    FAKE_KEEP_FRAME();
    return rc;
}

} // extern "C"
