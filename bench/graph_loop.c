/* graph_loop.c - what CUDA-graph tracking costs the launching thread: ns
 * per plain kernel launch, per launch captured into a graph, and per graph
 * launch (a replay of NODES kernels), through a driver library's real entry
 * points (the CUDA driver test double, libfakecuda.so, here: no GPU).
 * Run bare, and under ncclprobe or a bare uprobe peer, in the same run.
 *
 *   graph_loop LIBCUDA plain|capture|replay N [NODES]
 *
 * Prints "<mode> <ns per call>". A replay's cost must not grow with NODES
 * (nothing per node happens at a replay). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef void *CUfunction, *CUstream, *CUgraph, *CUgraphExec, *CUmodule;

static CUresult (*get_function)(CUfunction *, CUmodule, const char *);
static CUresult (*stream_create)(CUstream *, unsigned);
static CUresult (*begin_capture)(CUstream, int);
static CUresult (*end_capture)(CUstream, CUgraph *);
static CUresult (*instantiate)(CUgraphExec *, CUgraph, unsigned long long);
static CUresult (*graph_launch)(CUgraphExec, CUstream);
static CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                 unsigned, unsigned, CUstream, void **, void **);

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int resolve(void *lib) {
    struct {
        const char *name;
        void **slot;
    } fns[] = {
        {"cuModuleGetFunction", (void **)&get_function},
        {"cuStreamCreate", (void **)&stream_create},
        {"cuStreamBeginCapture_v2", (void **)&begin_capture},
        {"cuStreamEndCapture", (void **)&end_capture},
        {"cuGraphInstantiateWithFlags", (void **)&instantiate},
        {"cuGraphLaunch", (void **)&graph_launch},
        {"cuLaunchKernel", (void **)&launch_kernel},
    };
    for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
        if (!(*fns[i].slot = dlsym(lib, fns[i].name))) {
            fprintf(stderr, "graph_loop: no %s\n", fns[i].name);
            return -1;
        }
    return 0;
}

static void launch_n(CUfunction f, CUstream s, long n) {
    for (long i = 0; i < n; i++)
        launch_kernel(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: graph_loop LIBCUDA plain|capture|replay N [NODES]\n");
        return 2;
    }
    const char *mode = argv[2];
    long n = atol(argv[3]), nodes = argc > 4 ? atol(argv[4]) : 100;
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib || resolve(lib) < 0) {
        fprintf(stderr, "graph_loop: %s\n", lib ? "missing functions" : dlerror());
        return 1;
    }
    CUfunction f;
    CUstream s;
    if (get_function(&f, NULL, "bench_kernel") || stream_create(&s, 0)) {
        fprintf(stderr, "graph_loop: no kernel handle or stream\n");
        return 1;
    }
    uint64_t t0, t1;
    if (strcmp(mode, "plain") == 0) {
        t0 = now_ns();
        launch_n(f, s, n);
        t1 = now_ns();
    } else if (strcmp(mode, "capture") == 0) {
        CUgraph g;
        begin_capture(s, 0);
        t0 = now_ns();
        launch_n(f, s, n);
        t1 = now_ns();
        end_capture(s, &g);
    } else if (strcmp(mode, "replay") == 0) {
        CUgraph g;
        CUgraphExec e;
        begin_capture(s, 0);
        launch_n(f, s, nodes);
        if (end_capture(s, &g) || instantiate(&e, g, 0)) {
            fprintf(stderr, "graph_loop: capture failed\n");
            return 1;
        }
        t0 = now_ns();
        for (long i = 0; i < n; i++)
            graph_launch(e, s);
        t1 = now_ns();
    } else {
        fprintf(stderr, "graph_loop: unknown mode %s\n", mode);
        return 2;
    }
    printf("%s %.1f\n", mode, n ? (double)(t1 - t0) / (double)n : 0.0);
    return 0;
}
