/* nccl_user: a tiny "training loop" calling NCCL collectives along a fixed call chain, for the
 * ncclprobe NCCL tests. By default it uses the test double libfakenccl.so (linked):
 *
 *   main -> train_step -> allreduce_grads -> ncclAllReduce    -> ncclLaunchKernel
 *                      -> gather_params   -> ncclAllGather    -> ncclLaunchKernel
 *                      -> scatter_grads   -> ncclReduceScatter-> ncclLaunchKernel
 *                      -> bcast_weights   -> ncclBroadcast    -> ncclLaunchKernel
 *                      -> exchange        -> ncclGroupStart, ncclSend, ncclRecv,
 *                                            ncclGroupEnd     -> ncclLaunchKernel (x2)
 *
 * With --real-nccl PATH it instead dlopen()s the real libnccl.so.2 and calls its ncclGetVersion
 * once and its ncclAllReduce (comm = NULL, so it fails fast) once per iteration, along
 * main -> train_step -> allreduce_grads -> ncclAllReduce. */
#include <dlfcn.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "fake_nccl.h"
#include "progs_common.h"

#define BUF(value) ((void *)(uintptr_t)(value))
#define STREAM(value) ((cudaStream_t)(uintptr_t)(value))

enum op {
    OP_ALL_REDUCE,
    OP_ALL_GATHER,
    OP_REDUCE_SCATTER,
    OP_BROADCAST,
    OP_GROUP_START,
    OP_SEND,
    OP_RECV,
    OP_GROUP_END,
    OP_COUNT,
};

static const char *const op_names[OP_COUNT] = {
    [OP_ALL_REDUCE] = "AllReduce",
    [OP_ALL_GATHER] = "AllGather",
    [OP_REDUCE_SCATTER] = "ReduceScatter",
    [OP_BROADCAST] = "Broadcast",
    [OP_GROUP_START] = "GroupStart",
    [OP_SEND] = "Send",
    [OP_RECV] = "Recv",
    [OP_GROUP_END] = "GroupEnd",
};

/* The NCCL entry points in use: the fake's (linked) or the real library's (dlsym). */
static struct {
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t);
    ncclResult_t (*get_version)(int *);
} api = {ncclAllReduce, ncclGetVersion};

static bool real_nccl;
static int peer;
static unsigned long calls[OP_COUNT];
static ncclResult_t last_all_reduce_rc;

/* In fake mode every call must succeed; a failure means the double (or this program) is broken. */
static void check(enum op op, ncclResult_t rc) {
    calls[op]++;
    if (rc != ncclSuccess && !real_nccl) {
        fprintf(stderr, "nccl_user: nccl%s failed: %d\n", op_names[op], (int)rc);
        exit(PROGS_EXIT_RUNTIME);
    }
}

NOINLINE void allreduce_grads(ncclComm_t comm) {
    ncclResult_t rc = api.all_reduce(BUF(0x1000), BUF(0x2000), 1048576, ncclFloat32, ncclSum, comm,
                                     STREAM(0x5010));
    KEEP_FRAME();
    last_all_reduce_rc = rc;
    check(OP_ALL_REDUCE, rc);
}

NOINLINE void gather_params(ncclComm_t comm) {
    ncclResult_t rc =
        ncclAllGather(BUF(0x1000), BUF(0x2000), 4096, ncclBfloat16, comm, STREAM(0x5011));
    KEEP_FRAME();
    check(OP_ALL_GATHER, rc);
}

NOINLINE void scatter_grads(ncclComm_t comm) {
    ncclResult_t rc = ncclReduceScatter(BUF(0x1000), BUF(0x2000), 2048, ncclFloat16, ncclMax, comm,
                                        STREAM(0x5012));
    KEEP_FRAME();
    check(OP_REDUCE_SCATTER, rc);
}

NOINLINE void bcast_weights(ncclComm_t comm) {
    ncclResult_t rc =
        ncclBroadcast(BUF(0x1000), BUF(0x2000), 512, ncclInt32, 0, comm, STREAM(0x5013));
    KEEP_FRAME();
    check(OP_BROADCAST, rc);
}

NOINLINE void exchange(ncclComm_t comm) {
    check(OP_GROUP_START, ncclGroupStart());
    KEEP_FRAME();
    check(OP_SEND, ncclSend(BUF(0x1000), 100, ncclInt8, peer, comm, STREAM(0x5014)));
    KEEP_FRAME();
    check(OP_RECV, ncclRecv(BUF(0x2000), 100, ncclInt8, peer, comm, STREAM(0x5014)));
    KEEP_FRAME();
    check(OP_GROUP_END, ncclGroupEnd());
    KEEP_FRAME();
}

NOINLINE void train_step(ncclComm_t comm) {
    allreduce_grads(comm);
    KEEP_FRAME();
    if (real_nccl)
        return;
    gather_params(comm);
    KEEP_FRAME();
    scatter_grads(comm);
    KEEP_FRAME();
    bcast_weights(comm);
    KEEP_FRAME();
    exchange(comm);
    KEEP_FRAME();
}

/* Resolves the real library's entry points. RTLD_DEEPBIND keeps its internal references to its
 * own exported names (it calls e.g. ncclGetVersion through its PLT) away from the fake's
 * identically named, already loaded, global symbols. */
static void load_real_nccl(const char *path) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!lib) {
        fprintf(stderr, "nccl_user: dlopen %s: %s\n", path, dlerror());
        exit(PROGS_EXIT_RUNTIME);
    }
    *(void **)&api.all_reduce = dlsym(lib, "ncclAllReduce");
    *(void **)&api.get_version = dlsym(lib, "ncclGetVersion");
    if (!api.all_reduce || !api.get_version) {
        fprintf(stderr, "nccl_user: %s lacks ncclAllReduce/ncclGetVersion\n", path);
        exit(PROGS_EXIT_RUNTIME);
    }
}

static void usage(FILE *out) {
    fprintf(out, "usage: nccl_user [--iters N] [--rank R] [--nranks N] [--wait-signal]\n"
                 "                 [--real-nccl PATH]\n");
}

int main(int argc, char **argv) {
    static const struct option long_opts[] = {
        {"iters", required_argument, NULL, 'i'},
        {"rank", required_argument, NULL, 'r'},
        {"nranks", required_argument, NULL, 'n'},
        {"wait-signal", no_argument, NULL, 'w'},
        {"real-nccl", required_argument, NULL, 'R'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long iters = 10, rank = 0, nranks = 2;
    bool wait_signal = false;
    const char *real_path = NULL;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        switch (opt) {
        case 'i':
            iters = progs_parse_long("--iters", optarg, 0);
            break;
        case 'r':
            rank = progs_parse_long("--rank", optarg, 0);
            break;
        case 'n':
            nranks = progs_parse_long("--nranks", optarg, 1);
            break;
        case 'w':
            wait_signal = true;
            break;
        case 'R':
            real_path = optarg;
            break;
        case 'h':
            usage(stdout);
            return PROGS_EXIT_OK;
        default:
            usage(stderr);
            return PROGS_EXIT_USAGE;
        }
    }
    if (optind != argc || rank >= nranks || nranks > 1 << 20) {
        usage(stderr);
        return PROGS_EXIT_USAGE;
    }

    ncclComm_t comm = NULL;
    if (real_path) {
        real_nccl = true;
        load_real_nccl(real_path);
    } else {
        ncclResult_t rc = ncclCommInitRankFake(&comm, (int)nranks, (int)rank);
        if (rc != ncclSuccess) {
            fprintf(stderr, "nccl_user: ncclCommInitRankFake failed: %d\n", (int)rc);
            return PROGS_EXIT_RUNTIME;
        }
        peer = (int)((rank + 1) % nranks);
    }

    if (wait_signal) {
        progs_block_start_signal();
        progs_announce_ready();
        progs_wait_start_signal();
    }

    if (real_nccl) {
        int version = 0;
        ncclResult_t rc = api.get_version(&version);
        KEEP_FRAME();
        printf("real_nccl fn=ncclGetVersion rc=%d version=%d\n", (int)rc, version);
    }
    for (long i = 0; i < iters; i++) {
        train_step(comm);
        KEEP_FRAME();
    }
    if (real_nccl)
        printf("real_nccl fn=ncclAllReduce rc=%d\n", (int)last_all_reduce_rc);
    else
        ncclCommDestroy(comm);

    long tid = progs_gettid();
    for (int op = 0; op < OP_COUNT; op++)
        if (!real_nccl || op == OP_ALL_REDUCE)
            printf("thread tid=%ld op=%s calls=%lu\n", tid, op_names[op], calls[op]);
    fflush(stdout);
    return PROGS_EXIT_OK;
}
