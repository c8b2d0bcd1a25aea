/* Public API of libfakenccl.so, the NCCL test double: the same function names and signatures as
 * NCCL 2.28 (prototypes copied from the real nccl.h), enum values identical to NCCL's, plus
 * ncclCommInitRankFake*() to create a communicator without any network or GPU.
 * Usable from C and C++; needs no CUDA headers. Also used by nccl_user to type the real
 * libnccl.so.2 entry points it resolves with dlsym (the ABI is the same). */
#ifndef NCCLPROBE_PROGS_FAKE_NCCL_H
#define NCCLPROBE_PROGS_FAKE_NCCL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAKE_NCCL_API __attribute__((visibility("default")))

/* Same as CUDA's driver_types.h. */
typedef struct CUstream_st *cudaStream_t;

/* Opaque handle to communicator (struct layout is private to the library). */
typedef struct ncclComm *ncclComm_t;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5,
    ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

/* Test-double only: flags of ncclCommInitRankFakeFlags/Ex. */
enum {
    /* AllReduce (sum; float32 or bfloat16) runs as a symmetric kernel: plan->isSymColl, kernel
     * ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_<type>, empty task queues at launch. */
    FAKE_NCCL_FLAG_SYMMETRIC = 1u << 0,
    /* AllGather runs on the copy engines: ncclLaunchCeColl instead of ncclLaunchKernel,
     * plan->isCeColl, plan->ceCollArgs filled, empty task queues. */
    FAKE_NCCL_FLAG_CE = 1u << 1,
    /* AllReduce runs as NVLS (pattern NVLS, peer nvls.out = (rank + nranks/2) % nranks). */
    FAKE_NCCL_FLAG_NVLS = 1u << 2,
};

/* Test-double only: creates communicator `rank` of `nranks` (no bootstrap, no GPU). commHash is
 * a 64-bit mix of (id, nranks): every rank of one communicator (same id and nranks) shares it.
 * cudaDev = 7 - rank % 8. ncclCommInitRankFake: flags 0, id 0. ncclCommInitRankFakeFlags: id 0. */
FAKE_NCCL_API ncclResult_t ncclCommInitRankFake(ncclComm_t *comm, int nranks, int rank);
FAKE_NCCL_API ncclResult_t ncclCommInitRankFakeFlags(ncclComm_t *comm, int nranks, int rank,
                                                     unsigned flags);
FAKE_NCCL_API ncclResult_t ncclCommInitRankFakeEx(ncclComm_t *comm, int nranks, int rank,
                                                  unsigned flags, uint64_t id);
FAKE_NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm);
FAKE_NCCL_API ncclResult_t ncclGetVersion(int *version);

FAKE_NCCL_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclRedOp_t op, int root,
                                      ncclComm_t comm, cudaStream_t stream);
FAKE_NCCL_API ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                                     ncclComm_t comm, cudaStream_t stream);
FAKE_NCCL_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                         ncclDataType_t datatype, int root, ncclComm_t comm,
                                         cudaStream_t stream);
FAKE_NCCL_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream);
FAKE_NCCL_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                             ncclDataType_t datatype, ncclRedOp_t op,
                                             ncclComm_t comm, cudaStream_t stream);
FAKE_NCCL_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                         ncclDataType_t datatype, ncclComm_t comm,
                                         cudaStream_t stream);
FAKE_NCCL_API ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                        ncclDataType_t datatype, ncclComm_t comm,
                                        cudaStream_t stream);
FAKE_NCCL_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, int root, ncclComm_t comm,
                                      cudaStream_t stream);
FAKE_NCCL_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       cudaStream_t stream);
FAKE_NCCL_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                    int peer, ncclComm_t comm, cudaStream_t stream);
FAKE_NCCL_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                    ncclComm_t comm, cudaStream_t stream);
FAKE_NCCL_API ncclResult_t ncclGroupStart(void);
FAKE_NCCL_API ncclResult_t ncclGroupEnd(void);

#ifdef __cplusplus
}
#endif

#endif
