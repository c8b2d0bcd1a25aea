/* nccl_versions: drives one real libnccl (any version, tests/test_runtimes_nccl.py) without a
 * GPU. Not built by this folder's Makefile: the test compiles it against the version's own
 * nccl.h, links it with that libnccl.so.2, and writes nccl_versions_spec.h next to it from
 * that library's DWARF (read by gdb, never by ncclprobe):
 *
 *   SPEC_OBJECTS   sizes of the blocks the program allocates (zeroed), object 0 the
 *                  communicator ncclprobe reads at the API calls
 *   SPEC_POKES     {object, bit position, bit width, value, pointer-to object (-1: none)}:
 *                  struct members written into those blocks at the DWARF's offsets
 *   SPEC_CALLS     {.symtab value of ncclLaunchKernel / ncclLaunchCeColl / ncclLaunchRma,
 *                  comm object, plan object}: local functions called through their address
 *   SPEC_POINTERS  {object, bit position, .symtab value}: a code address (a kernel's host
 *                  stub) written into an object
 *
 * Stacks: main -> issue_ops -> the API (each in order, once):
 *   ncclGroupStart, ncclAllReduce(comm = NULL), ncclAllReduce, ncclAllGather,
 *   ncclReduceScatter, ncclBroadcast, ncclReduce, ncclSend, ncclRecv,
 *   [2.28+] ncclAlltoAll, ncclGather, ncclScatter,
 *   [2.32+] ncclAllReduceConfig, ncclAllGatherConfig, ncclBroadcastConfig, ncclGroupEnd
 * on the communicator block (NCCL refuses it: its magic numbers are zero), then
 * main -> run_plans -> each SPEC_CALLS function, which fails or faults inside NCCL without a
 * GPU (a fault is caught and skipped: the probe has fired at the entry by then).
 * Prints "version=V" (ncclGetVersion), "comm=0x..." (the block) and "calls=N" (the API calls
 * made). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "nccl_versions_spec.h"

#define NOINLINE __attribute__((noinline, noipa))
#define BUF(v) ((void *)(uintptr_t)(v))
#define STREAM(v) ((cudaStream_t)(uintptr_t)(v))

struct poke {
    int object;
    long bitpos;
    int bits;
    unsigned long long value;
    int pointer_to;
};
struct call {
    unsigned long symbol;
    int comm, plan;
};
struct pointer {
    int object;
    long bitpos;
    unsigned long symbol;
};

static const unsigned long object_sizes[] = {SPEC_OBJECTS};
#define NOBJECTS (sizeof(object_sizes) / sizeof(object_sizes[0]))
static const struct poke pokes[] = {SPEC_POKES};
static const struct call calls[] = {SPEC_CALLS};
static const struct pointer pointers[] = {SPEC_POINTERS};
static unsigned char *objects[NOBJECTS];

/* Writes the low `bits` bits of value at bit `bitpos` of the object (little-endian). */
static void put_bits(unsigned char *base, long bitpos, int bits, unsigned long long value) {
    for (int i = 0; i < bits; i++, bitpos++) {
        unsigned char mask = (unsigned char)(1u << (bitpos % 8));
        if ((value >> i) & 1)
            base[bitpos / 8] |= mask;
        else
            base[bitpos / 8] &= (unsigned char)~mask;
    }
}

static int calls_made;

NOINLINE static void issue_ops(ncclComm_t comm) {
    ncclGroupStart();
    ncclAllReduce(BUF(0x1000), BUF(0x2000), 1024, ncclFloat32, ncclSum, NULL, STREAM(0x5010));
    ncclAllReduce(BUF(0x1100), BUF(0x2100), 1000, ncclInt64, ncclMax, comm, STREAM(0x5011));
    ncclAllGather(BUF(0x1200), BUF(0x2200), 77, ncclInt32, comm, STREAM(0x5012));
    ncclReduceScatter(BUF(0x1300), BUF(0x2300), 64, ncclFloat64, ncclProd, comm, STREAM(0x5013));
    ncclBroadcast(BUF(0x1400), BUF(0x2400), 10, ncclUint8, 2, comm, STREAM(0x5014));
    ncclReduce(BUF(0x1500), BUF(0x2500), 5, ncclInt64, ncclMin, 3, comm, STREAM(0x5015));
    ncclSend(BUF(0x1600), 7, ncclFloat16, 1, comm, STREAM(0x5016));
    ncclRecv(BUF(0x2700), 9, ncclUint32, 3, comm, STREAM(0x5017));
    calls_made += 9;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
    ncclAlltoAll(BUF(0x1800), BUF(0x2800), 11, ncclUint64, comm, STREAM(0x5018));
    ncclGather(BUF(0x1900), BUF(0x2900), 12, ncclInt8, 1, comm, STREAM(0x5019));
    ncclScatter(BUF(0x1a00), BUF(0x2a00), 13, ncclFloat32, 2, comm, STREAM(0x501a));
    calls_made += 3;
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 32, 0)
    ncclAllReduceConfig(BUF(0x1b00), BUF(0x2b00), 14, ncclFloat32, ncclAvg, comm, STREAM(0x501b),
                        NULL);
    ncclAllGatherConfig(BUF(0x1c00), BUF(0x2c00), 15, ncclInt32, comm, STREAM(0x501c), NULL);
    ncclBroadcastConfig(BUF(0x1d00), BUF(0x2d00), 16, ncclUint8, 1, comm, STREAM(0x501d), NULL);
    calls_made += 3;
#endif
    ncclGroupEnd();
    calls_made++;
}

static sigjmp_buf fault_jump;

static void on_fault(int sig) {
    siglongjmp(fault_jump, sig);
}

typedef ncclResult_t (*launch_fn)(void *comm, void *plan);

NOINLINE static void run_plans(uintptr_t base) {
    struct sigaction sa = {.sa_handler = on_fault, .sa_flags = SA_NODEFER};
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
        if (!calls[i].symbol)
            continue;
        launch_fn fn = (launch_fn)(base + calls[i].symbol);
        int sig = sigsetjmp(fault_jump, 1);
        if (sig == 0)
            fn(objects[calls[i].comm], objects[calls[i].plan]);
        __asm__ volatile("" ::: "memory");
    }
}

int main(void) {
    Dl_info info;
    int version = 0;
    if (!dladdr((void *)ncclGetVersion, &info) || !info.dli_fbase) {
        fprintf(stderr, "dladdr failed\n");
        return 4;
    }
    uintptr_t base = (uintptr_t)info.dli_fbase;
    for (size_t i = 0; i < NOBJECTS; i++)
        if (!(objects[i] = calloc(1, object_sizes[i] ? object_sizes[i] : 8)))
            return 4;
    for (size_t i = 0; i < sizeof(pokes) / sizeof(pokes[0]); i++) {
        const struct poke *p = &pokes[i];
        if (p->object < 0)
            continue;
        unsigned long long v =
            p->pointer_to >= 0 ? (unsigned long long)(uintptr_t)objects[p->pointer_to] : p->value;
        put_bits(objects[p->object], p->bitpos, p->bits, v);
    }
    for (size_t i = 0; i < sizeof(pointers) / sizeof(pointers[0]); i++)
        if (pointers[i].object >= 0)
            put_bits(objects[pointers[i].object], pointers[i].bitpos, 64,
                     base + pointers[i].symbol);
    ncclGetVersion(&version);
    issue_ops((ncclComm_t)objects[0]);
    run_plans(base);
    printf("version=%d\ncomm=%p\ncalls=%d\n", version, (void *)objects[0], calls_made);
    return 0;
}
