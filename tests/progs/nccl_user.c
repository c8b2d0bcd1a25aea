/* nccl_user: a tiny "training loop" calling NCCL collectives along a fixed call chain, for the
 * ncclprobe NCCL tests. By default it uses the test double libfakenccl.so (linked). The default
 * scenario ("loop"), per iteration:
 *
 *   main -> train_step -> allreduce_grads -> ncclAllReduce     -> ncclEnqueueCheck -> groupLaunch
 *                                                                 -> ncclLaunchKernel
 *                      -> gather_params   -> ncclAllGather     -> (same)
 *                      -> scatter_grads   -> ncclReduceScatter -> (same)
 *                      -> bcast_weights   -> ncclBroadcast     -> (same)
 *                      -> exchange        -> ncclGroupStart, ncclSend, ncclRecv,
 *                                            ncclGroupEnd -> groupLaunch -> ncclLaunchKernel (x1)
 *
 * --scenario NAME picks another workload (see README.md); every one runs --iters times, along
 * main -> train_step -> <named function> -> the API. The communicators are created before the
 * --wait-signal wait. --pause-after N (with --wait-signal) waits for the signal once more after N
 * iterations, saying "ready PID" again.
 *
 * With --real-nccl PATH it instead dlopen()s the real libnccl.so.2 and calls its ncclGetVersion
 * once and its ncclAllReduce (comm = NULL, so it fails fast) once per iteration, along
 * main -> train_step -> allreduce_grads -> ncclAllReduce. */
#include <dlfcn.h>
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "fake_nccl.h"
#include "progs_common.h"

#define BUF(value) ((void *)(uintptr_t)(value))
#define STREAM(value) ((cudaStream_t)(uintptr_t)(value))

enum op {
    /* the default loop's operations, printed in this order (all of them, even at 0 calls) */
    OP_ALL_REDUCE,
    OP_ALL_GATHER,
    OP_REDUCE_SCATTER,
    OP_BROADCAST,
    OP_GROUP_START,
    OP_SEND,
    OP_RECV,
    OP_GROUP_END,
    OP_LOOP_COUNT,
    /* the other scenarios' (printed only when called) */
    OP_REDUCE = OP_LOOP_COUNT,
    OP_BCAST,
    OP_ALLTOALL,
    OP_GATHER,
    OP_SCATTER,
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
    [OP_REDUCE] = "Reduce",
    [OP_BCAST] = "Bcast",
    [OP_ALLTOALL] = "AlltoAll",
    [OP_GATHER] = "Gather",
    [OP_SCATTER] = "Scatter",
};

enum scenario {
    SC_LOOP,
    SC_COALESCED,
    SC_TWO_COMMS,
    SC_SYMMETRIC,
    SC_CE,
    SC_ALLTOALL,
    SC_REDUCE_BCAST,
    SC_MIXED_GROUP,
    SC_FLOWS,
    SC_COUNT,
};

static const char *const scenario_names[SC_COUNT] = {
    [SC_LOOP] = "loop",
    [SC_COALESCED] = "coalesced",
    [SC_TWO_COMMS] = "two-comms",
    [SC_SYMMETRIC] = "symmetric",
    [SC_CE] = "ce",
    [SC_ALLTOALL] = "alltoall",
    [SC_REDUCE_BCAST] = "reduce-bcast",
    [SC_MIXED_GROUP] = "mixed-group",
    [SC_FLOWS] = "flows",
};

/* Communicator ids (commHash = mix(id, nranks)) and flags per scenario. */
enum {
    ID_DEFAULT = 0,
    ID_TWO_COMMS_A = 1,
    ID_TWO_COMMS_B = 2,
    ID_SYMMETRIC = 3,
    ID_CE = 4,
    ID_FLOWS_NVLS = 5,
    ID_FLOWS = 6,
    ID_FLOWS_LOCAL = 7,
};

/* The NCCL entry points in use: the fake's (linked) or the real library's (dlsym). */
static struct {
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t);
    ncclResult_t (*get_version)(int *);
} api = {ncclAllReduce, ncclGetVersion};

static bool real_nccl;
static enum scenario scenario = SC_LOOP;
static int peer;
static ncclResult_t last_all_reduce_rc;
static _Thread_local unsigned long calls[OP_COUNT];

/* In fake mode every call must succeed; a failure means the double (or this program) is broken. */
static void check(enum op op, ncclResult_t rc) {
    calls[op]++;
    if (rc != ncclSuccess && !real_nccl) {
        fprintf(stderr, "nccl_user: nccl%s failed: %d\n", op_names[op], (int)rc);
        exit(PROGS_EXIT_RUNTIME);
    }
}

/* ---- two-comms: the two threads take turns, one operation each ---- */

static pthread_mutex_t turn_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_cond = PTHREAD_COND_INITIALIZER;
static unsigned long turn; /* even: the main thread (comm A), odd: the second thread (comm B) */

static void wait_turn(unsigned parity) {
    pthread_mutex_lock(&turn_lock);
    while (turn % 2 != parity)
        pthread_cond_wait(&turn_cond, &turn_lock);
    pthread_mutex_unlock(&turn_lock);
}

static void pass_turn(void) {
    pthread_mutex_lock(&turn_lock);
    turn++;
    pthread_cond_broadcast(&turn_cond);
    pthread_mutex_unlock(&turn_lock);
}

/* Runs one step of the main thread's sequence, in turn with the second thread (two-comms only). */
#define TAKE_TURN(parity, body)                                                                    \
    do {                                                                                           \
        bool turns_ = scenario == SC_TWO_COMMS;                                                    \
        if (turns_)                                                                                \
            wait_turn(parity);                                                                     \
        body;                                                                                      \
        if (turns_)                                                                                \
            pass_turn();                                                                           \
    } while (0)

/* ---- the default loop (also comm A of two-comms: allreduce_grads, gather_params) ---- */

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

/* ---- coalesced: one (nested) group of three AllReduce -> one plan with three coll tasks ---- */

NOINLINE void allreduce_coalesced(ncclComm_t comm) {
    check(OP_GROUP_START, ncclGroupStart());
    KEEP_FRAME();
    check(OP_ALL_REDUCE, ncclAllReduce(BUF(0x11000), BUF(0x12000), 1024, ncclFloat32, ncclSum, comm,
                                       STREAM(0x5020)));
    KEEP_FRAME();
    check(OP_GROUP_START, ncclGroupStart());
    KEEP_FRAME();
    check(OP_ALL_REDUCE, ncclAllReduce(BUF(0x13000), BUF(0x14000), 262144, ncclBfloat16, ncclSum,
                                       comm, STREAM(0x5021)));
    KEEP_FRAME();
    check(OP_ALL_REDUCE, ncclAllReduce(BUF(0x15000), BUF(0x16000), 2097152, ncclFloat32, ncclMax,
                                       comm, STREAM(0x5021)));
    KEEP_FRAME();
    check(OP_GROUP_END, ncclGroupEnd());
    KEEP_FRAME();
    check(OP_GROUP_END, ncclGroupEnd());
    KEEP_FRAME();
}

/* ---- two-comms: comm B's operations, on the second thread ---- */

NOINLINE void tp_allreduce(ncclComm_t comm) {
    ncclResult_t rc = ncclAllReduce(BUF(0x31000), BUF(0x32000), 16384, ncclBfloat16, ncclAvg, comm,
                                    STREAM(0x5031));
    KEEP_FRAME();
    check(OP_ALL_REDUCE, rc);
}

NOINLINE void tp_reduce_scatter(ncclComm_t comm) {
    ncclResult_t rc = ncclReduceScatter(BUF(0x33000), BUF(0x34000), 8192, ncclFloat32, ncclSum,
                                        comm, STREAM(0x5031));
    KEEP_FRAME();
    check(OP_REDUCE_SCATTER, rc);
}

NOINLINE void tp_step(ncclComm_t comm) {
    wait_turn(1);
    tp_allreduce(comm);
    KEEP_FRAME();
    pass_turn();
    wait_turn(1);
    tp_reduce_scatter(comm);
    KEEP_FRAME();
    pass_turn();
}

/* ---- symmetric: two AllReduce as symmetric kernels, one (int32 max) as a regular kernel ---- */

NOINLINE void allreduce_sym_f32(ncclComm_t comm) {
    check(OP_ALL_REDUCE, ncclAllReduce(BUF(0x41000), BUF(0x42000), 262144, ncclFloat32, ncclSum,
                                       comm, STREAM(0x5040)));
    KEEP_FRAME();
}

NOINLINE void allreduce_sym_bf16(ncclComm_t comm) {
    check(OP_ALL_REDUCE, ncclAllReduce(BUF(0x43000), BUF(0x44000), 65536, ncclBfloat16, ncclSum,
                                       comm, STREAM(0x5040)));
    KEEP_FRAME();
}

NOINLINE void allreduce_regular(ncclComm_t comm) {
    check(OP_ALL_REDUCE, ncclAllReduce(BUF(0x45000), BUF(0x46000), 4096, ncclInt32, ncclMax, comm,
                                       STREAM(0x5041)));
    KEEP_FRAME();
}

/* ---- ce: AllGather on the copy engines (ncclLaunchCeColl) ---- */

NOINLINE void gather_params_ce(ncclComm_t comm) {
    check(OP_ALL_GATHER,
          ncclAllGather(BUF(0x51000), BUF(0x52000), 8192, ncclBfloat16, comm, STREAM(0x5050)));
    KEEP_FRAME();
}

NOINLINE void ce_group(ncclComm_t comm) {
    check(OP_GROUP_START, ncclGroupStart());
    KEEP_FRAME();
    check(OP_ALL_GATHER,
          ncclAllGather(BUF(0x53000), BUF(0x54000), 1024, ncclFloat32, comm, STREAM(0x5051)));
    KEEP_FRAME();
    check(OP_ALL_REDUCE, ncclAllReduce(BUF(0x55000), BUF(0x56000), 1024, ncclFloat32, ncclSum, comm,
                                       STREAM(0x5051)));
    KEEP_FRAME();
    check(OP_GROUP_END, ncclGroupEnd());
    KEEP_FRAME();
}

/* ---- alltoall: AlltoAll, Gather, Scatter (expanded into Send/Recv tasks) ---- */

NOINLINE void alltoall_tokens(ncclComm_t comm) {
    check(OP_ALLTOALL,
          ncclAlltoAll(BUF(0x100000), BUF(0x200000), 4096, ncclFloat16, comm, STREAM(0x5060)));
    KEEP_FRAME();
}

NOINLINE void gather_stats(ncclComm_t comm) {
    check(OP_GATHER,
          ncclGather(BUF(0x61000), BUF(0x300000), 256, ncclFloat32, 0, comm, STREAM(0x5060)));
    KEEP_FRAME();
}

NOINLINE void scatter_shards(ncclComm_t comm) {
    check(OP_SCATTER,
          ncclScatter(BUF(0x400000), BUF(0x62000), 512, ncclInt64, 0, comm, STREAM(0x5060)));
    KEEP_FRAME();
}

/* ---- reduce-bcast: Reduce to the last rank, in-place Bcast from rank 0 ---- */

static int last_rank;

NOINLINE void reduce_loss(ncclComm_t comm) {
    check(OP_REDUCE, ncclReduce(BUF(0x71000), BUF(0x72000), 2048, ncclFloat32, ncclSum, last_rank,
                                comm, STREAM(0x5070)));
    KEEP_FRAME();
}

NOINLINE void bcast_params(ncclComm_t comm) {
    check(OP_BCAST, ncclBcast(BUF(0x73000), 65536, ncclFloat64, 0, comm, STREAM(0x5071)));
    KEEP_FRAME();
}

/* ---- mixed-group: AllReduce + Send + Recv in one group -> one plan, coll and p2p tasks ---- */

NOINLINE void mixed_exchange(ncclComm_t comm) {
    check(OP_GROUP_START, ncclGroupStart());
    KEEP_FRAME();
    check(OP_ALL_REDUCE, ncclAllReduce(BUF(0x81000), BUF(0x82000), 32768, ncclFloat32, ncclSum,
                                       comm, STREAM(0x5080)));
    KEEP_FRAME();
    check(OP_SEND, ncclSend(BUF(0x83000), 4096, ncclFloat32, peer, comm, STREAM(0x5080)));
    KEEP_FRAME();
    check(OP_RECV, ncclRecv(BUF(0x84000), 4096, ncclFloat32, peer, comm, STREAM(0x5080)));
    KEEP_FRAME();
    check(OP_GROUP_END, ncclGroupEnd());
    KEEP_FRAME();
}

/* ---- flows: every proxy pattern the double models, on two communicators (comm: NVLS, flows_comm:
 * nranks + 2 ranks, ring / tree / pipeline / p2p), and a third, local_comm, whose two ranks are
 * on one node: the proxy has nothing to post for it (P2P/NVLink/SHM), it has a topology still ----
 */

static ncclComm_t flows_comm, local_comm;
static int my_rank, flows_nranks;

NOINLINE void flows_collectives(ncclComm_t comm) {
    /* RING_TWICE, TREE_UP_DOWN, RING (all-gather, reduce-scatter), PIPELINE_FROM, TREE_DOWN,
     * PIPELINE_TO, TREE_UP */
    check(OP_ALL_REDUCE, ncclAllReduce(BUF(0x91000), BUF(0x92000), 4096, ncclFloat32, ncclSum, comm,
                                       STREAM(0x5090)));
    check(OP_ALL_REDUCE, ncclAllReduce(BUF(0x91000), BUF(0x92000), 524288, ncclFloat32, ncclSum,
                                       comm, STREAM(0x5090)));
    check(OP_ALL_GATHER,
          ncclAllGather(BUF(0x93000), BUF(0x94000), 65536, ncclFloat32, comm, STREAM(0x5090)));
    check(OP_REDUCE_SCATTER, ncclReduceScatter(BUF(0x95000), BUF(0x96000), 32768, ncclFloat32,
                                               ncclSum, comm, STREAM(0x5090)));
    check(OP_BROADCAST,
          ncclBroadcast(BUF(0x97000), BUF(0x98000), 8192, ncclFloat32, 0, comm, STREAM(0x5090)));
    check(OP_BROADCAST,
          ncclBroadcast(BUF(0x97000), BUF(0x98000), 524288, ncclFloat32, 0, comm, STREAM(0x5090)));
    check(OP_REDUCE, ncclReduce(BUF(0x99000), BUF(0x9a000), 8192, ncclFloat32, ncclSum, last_rank,
                                comm, STREAM(0x5090)));
    check(OP_REDUCE, ncclReduce(BUF(0x99000), BUF(0x9a000), 524288, ncclFloat32, ncclSum, 0, comm,
                                STREAM(0x5090)));
    KEEP_FRAME();
}

NOINLINE void flows_p2p(ncclComm_t comm) {
    int nranks = flows_nranks, rank = my_rank;
    check(OP_GROUP_START, ncclGroupStart());
    check(OP_SEND,
          ncclSend(BUF(0x9b000), 65536, ncclFloat32, (rank + 1) % nranks, comm, STREAM(0x5091)));
    check(OP_RECV, ncclRecv(BUF(0x9c000), 65536, ncclFloat32, (rank + nranks - 1) % nranks, comm,
                            STREAM(0x5091)));
    check(OP_GROUP_END, ncclGroupEnd());
    KEEP_FRAME();
}

NOINLINE void flows_local(ncclComm_t comm) {
    check(OP_ALL_REDUCE, ncclAllReduce(BUF(0x9f000), BUF(0xa0000), 4096, ncclFloat32, ncclSum, comm,
                                       STREAM(0x5093)));
    KEEP_FRAME();
}

NOINLINE void flows_nvls(ncclComm_t comm) {
    check(OP_ALL_REDUCE, ncclAllReduce(BUF(0x9d000), BUF(0x9e000), 8192, ncclFloat32, ncclSum, comm,
                                       STREAM(0x5092)));
    KEEP_FRAME();
}

NOINLINE void train_step(ncclComm_t comm) {
    switch (scenario) {
    case SC_LOOP:
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
        break;
    case SC_COALESCED:
        allreduce_coalesced(comm);
        KEEP_FRAME();
        break;
    case SC_TWO_COMMS:
        TAKE_TURN(0, allreduce_grads(comm));
        KEEP_FRAME();
        TAKE_TURN(0, gather_params(comm));
        KEEP_FRAME();
        break;
    case SC_SYMMETRIC:
        allreduce_sym_f32(comm);
        KEEP_FRAME();
        allreduce_sym_bf16(comm);
        KEEP_FRAME();
        allreduce_regular(comm);
        KEEP_FRAME();
        break;
    case SC_CE:
        gather_params_ce(comm);
        KEEP_FRAME();
        ce_group(comm);
        KEEP_FRAME();
        break;
    case SC_ALLTOALL:
        alltoall_tokens(comm);
        KEEP_FRAME();
        gather_stats(comm);
        KEEP_FRAME();
        scatter_shards(comm);
        KEEP_FRAME();
        break;
    case SC_REDUCE_BCAST:
        reduce_loss(comm);
        KEEP_FRAME();
        bcast_params(comm);
        KEEP_FRAME();
        break;
    case SC_MIXED_GROUP:
        mixed_exchange(comm);
        KEEP_FRAME();
        break;
    case SC_FLOWS:
        flows_collectives(flows_comm);
        KEEP_FRAME();
        flows_p2p(flows_comm);
        KEEP_FRAME();
        flows_nvls(comm);
        KEEP_FRAME();
        flows_local(local_comm);
        KEEP_FRAME();
        break;
    case SC_COUNT:
        break;
    }
}

/* ---- output ---- */

struct thread_calls {
    long tid;
    unsigned long calls[OP_COUNT];
};

static void save_calls(struct thread_calls *out) {
    out->tid = progs_gettid();
    memcpy(out->calls, calls, sizeof(calls));
}

static void print_calls(const struct thread_calls *t) {
    for (int op = 0; op < OP_COUNT; op++) {
        bool print = real_nccl ? op == OP_ALL_REDUCE
                               : (scenario == SC_LOOP ? op < OP_LOOP_COUNT : t->calls[op] > 0);
        if (print)
            printf("thread tid=%ld op=%s calls=%lu\n", t->tid, op_names[op], t->calls[op]);
    }
}

/* ---- two-comms: the second thread ---- */

struct second_thread {
    pthread_t thread;
    ncclComm_t comm;
    long iters;
    pthread_barrier_t *gate;
    struct thread_calls result;
};

NOINLINE void *tp_worker(void *arg) {
    struct second_thread *t = arg;
    pthread_barrier_wait(t->gate);
    for (long i = 0; i < t->iters; i++) {
        tp_step(t->comm);
        KEEP_FRAME();
    }
    save_calls(&t->result);
    return NULL;
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

static ncclComm_t make_comm(int nranks, int rank, unsigned flags, uint64_t id) {
    ncclComm_t comm = NULL;
    ncclResult_t rc = ncclCommInitRankFakeEx(&comm, nranks, rank, flags, id);
    if (rc != ncclSuccess) {
        fprintf(stderr, "nccl_user: ncclCommInitRankFakeEx failed: %d\n", (int)rc);
        exit(PROGS_EXIT_RUNTIME);
    }
    return comm;
}

static void usage(FILE *out) {
    fprintf(out, "usage: nccl_user [--iters N] [--rank R] [--nranks N] [--wait-signal]\n"
                 "                 [--pause-after N] [--scenario NAME] [--real-nccl PATH]\n"
                 "scenarios:");
    for (int s = 0; s < SC_COUNT; s++)
        fprintf(out, " %s", scenario_names[s]);
    fprintf(out, " (default loop)\n");
}

int main(int argc, char **argv) {
    static const struct option long_opts[] = {
        {"iters", required_argument, NULL, 'i'},
        {"rank", required_argument, NULL, 'r'},
        {"nranks", required_argument, NULL, 'n'},
        {"wait-signal", no_argument, NULL, 'w'},
        {"pause-after", required_argument, NULL, 'p'},
        {"real-nccl", required_argument, NULL, 'R'},
        {"scenario", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long iters = 10, rank = 0, nranks = 2, pause_after = -1;
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
        case 'p':
            pause_after = progs_parse_long("--pause-after", optarg, 0);
            break;
        case 'R':
            real_path = optarg;
            break;
        case 's': {
            int s = 0;
            while (s < SC_COUNT && strcmp(optarg, scenario_names[s]) != 0)
                s++;
            if (s == SC_COUNT) {
                fprintf(stderr, "nccl_user: unknown scenario '%s'\n", optarg);
                usage(stderr);
                return PROGS_EXIT_USAGE;
            }
            scenario = (enum scenario)s;
            break;
        }
        case 'h':
            usage(stdout);
            return PROGS_EXIT_OK;
        default:
            usage(stderr);
            return PROGS_EXIT_USAGE;
        }
    }
    if (optind != argc || rank >= nranks || nranks > 1 << 20 ||
        (real_path && scenario != SC_LOOP) || (pause_after >= 0 && !wait_signal)) {
        usage(stderr);
        return PROGS_EXIT_USAGE;
    }

    ncclComm_t comm = NULL;
    struct second_thread second = {0};
    pthread_barrier_t gate;
    if (real_path) {
        real_nccl = true;
        load_real_nccl(real_path);
    } else {
        unsigned flags = scenario == SC_SYMMETRIC ? FAKE_NCCL_FLAG_SYMMETRIC
                         : scenario == SC_CE      ? FAKE_NCCL_FLAG_CE
                         : scenario == SC_FLOWS   ? FAKE_NCCL_FLAG_NVLS
                                                  : 0;
        uint64_t id = scenario == SC_TWO_COMMS   ? ID_TWO_COMMS_A
                      : scenario == SC_SYMMETRIC ? ID_SYMMETRIC
                      : scenario == SC_CE        ? ID_CE
                      : scenario == SC_FLOWS     ? ID_FLOWS_NVLS
                                                 : ID_DEFAULT;
        comm = make_comm((int)nranks, (int)rank, flags, id);
        peer = (int)((rank + 1) % nranks);
        last_rank = (int)nranks - 1;
        if (scenario == SC_TWO_COMMS)
            second.comm = make_comm((int)nranks + 2, (int)rank, 0, ID_TWO_COMMS_B);
        my_rank = (int)rank;
        flows_nranks = (int)nranks + 2;
        if (scenario == SC_FLOWS) {
            flows_comm = make_comm(flows_nranks, (int)rank, 0, ID_FLOWS);
            local_comm = make_comm(2, (int)rank % 2, 0, ID_FLOWS_LOCAL);
        }
    }

    if (wait_signal)
        progs_block_start_signal();
    if (second.comm) {
        pthread_barrier_init(&gate, NULL, 2);
        second.iters = iters;
        second.gate = &gate;
        int err = pthread_create(&second.thread, NULL, tp_worker, &second);
        if (err != 0) {
            fprintf(stderr, "nccl_user: pthread_create: %s\n", strerror(err));
            return PROGS_EXIT_RUNTIME;
        }
    }
    if (wait_signal) {
        progs_announce_ready();
        progs_wait_start_signal();
    }
    if (second.comm)
        pthread_barrier_wait(&gate);

    if (real_nccl) {
        int version = 0;
        ncclResult_t rc = api.get_version(&version);
        KEEP_FRAME();
        printf("real_nccl fn=ncclGetVersion rc=%d version=%d\n", (int)rc, version);
    }
    for (long i = 0; i < iters; i++) {
        if (i == pause_after) {
            progs_announce_ready();
            progs_wait_start_signal();
        }
        train_step(comm);
        KEEP_FRAME();
    }
    struct thread_calls mine;
    save_calls(&mine);
    if (second.comm) {
        pthread_join(second.thread, NULL);
        pthread_barrier_destroy(&gate);
    }
    if (real_nccl) {
        printf("real_nccl fn=ncclAllReduce rc=%d\n", (int)last_all_reduce_rc);
    } else {
        ncclCommDestroy(comm);
        if (flows_comm)
            ncclCommDestroy(flows_comm);
        if (local_comm)
            ncclCommDestroy(local_comm);
        if (second.comm)
            ncclCommDestroy(second.comm);
    }

    print_calls(&mine);
    if (second.comm)
        print_calls(&second.result);
    fflush(stdout);
    return PROGS_EXIT_OK;
}
