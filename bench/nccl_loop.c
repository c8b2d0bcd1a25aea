/* nccl_loop.c - cost of NCCL tracing per call: drives an NCCL library
 * (the test double libfakenccl.so: NCCL's API and internal launch path,
 * no GPU) the way a training step does and prints ns per iteration.
 *   single: one ncclAllReduce outside a group = 1 API call + 1 launch
 *   group8: ncclGroupStart, 8 ncclAllReduce, ncclGroupEnd = 10 API calls
 *           + 1 launch whose plan holds 8 tasks
 * Run bare, under ncclprobe and under bpftrace (bench/nccl.sh).
 * WORK_NS: CPU work per iteration (a busy wait), as a real step has between
 * its collectives; the tracer's cost is the time added to it.
 * Usage: nccl_loop LIB single|group8 [N [WORK_NS]] */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int (*init_fn)(void **comm, int nranks, int rank);
typedef int (*all_reduce_fn)(const void *, void *, size_t, int, int, void *, void *);
typedef int (*group_fn)(void);

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 3 || (strcmp(argv[2], "single") != 0 && strcmp(argv[2], "group8") != 0)) {
        fprintf(stderr, "usage: nccl_loop LIB single|group8 [N [WORK_NS]]\n");
        return 2;
    }
    long n = argc > 3 ? atol(argv[3]) : 200000;
    uint64_t work_ns = argc > 4 ? strtoull(argv[4], NULL, 10) : 0;
    void *lib = dlopen(argv[1], RTLD_NOW);
    init_fn init = lib ? (init_fn)dlsym(lib, "ncclCommInitRankFake") : NULL;
    all_reduce_fn all_reduce = lib ? (all_reduce_fn)dlsym(lib, "ncclAllReduce") : NULL;
    group_fn start = lib ? (group_fn)dlsym(lib, "ncclGroupStart") : NULL;
    group_fn end = lib ? (group_fn)dlsym(lib, "ncclGroupEnd") : NULL;
    void *comm = NULL;
    if (!init || !all_reduce || !start || !end || init(&comm, 8, 0) != 0) {
        fprintf(stderr, "nccl_loop: %s: not an NCCL test double\n", argv[1]);
        return 1;
    }
    usleep(300000); /* a tracer attaching at the dlopen settles */
    bool group = strcmp(argv[2], "group8") == 0;
    void *buf = (void *)(uintptr_t)0x1000, *stream = (void *)(uintptr_t)0x5000;
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++) {
        for (uint64_t until = work_ns ? now_ns() + work_ns : 0; now_ns() < until;)
            ;
        if (!group) {
            all_reduce(buf, buf, 1 << 20, 7 /* float32 */, 0 /* sum */, comm, stream);
            continue;
        }
        start();
        for (int k = 0; k < 8; k++)
            all_reduce(buf, buf, 4096u << k, 9 /* bfloat16 */, 0, comm, stream);
        end();
    }
    uint64_t dt = now_ns() - t0;
    printf("nccl %s iterations %ld: %.1f ns per iteration\n", argv[2], n, (double)dt / (double)n);
    return 0;
}
