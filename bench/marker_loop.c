/* marker_loop.c - cost per launch of the correlation hand-off: calls
 * libncclprobe_cupti.so's ncclprobe_cupti_marker() the way its CUPTI launch
 * callback does, N times, and prints ns per call. Run bare (the hand-off
 * when no ncclprobe listens) and under ncclprobe / bpftrace (the uprobe).
 * Usage: marker_loop LIB [N] */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: marker_loop LIB [N]\n");
        return 2;
    }
    long n = argc > 2 ? atol(argv[2]) : 1000000;
    void *lib = dlopen(argv[1], RTLD_NOW);
    void (*marker)(uint32_t, uint32_t, uint32_t, const void *) =
        lib ? (void (*)(uint32_t, uint32_t, uint32_t, const void *))dlsym(lib,
                                                                          "ncclprobe_cupti_marker")
            : NULL;
    if (!marker) {
        fprintf(stderr, "marker_loop: %s\n", dlerror());
        return 1;
    }
    usleep(300000); /* a tracer attaching at the dlopen settles */
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++)
        marker((uint32_t)i, 2, 211, NULL); /* no params: the marker names an id only */
    uint64_t dt = now_ns() - t0;
    printf("marker calls %ld: %.1f ns per call\n", n, (double)dt / (double)n);
    return 0;
}
