/* join_bench.c - throughput of the launch <-> GPU record join
 * (src/correlate/gpu.c) alone: N launches on T threads, each with a
 * runtime and a driver marker and R kernel records (R > 1: a CUDA graph),
 * records arriving in batches after their launches, as they do from the
 * CUPTI library. Prints launches/s and records/s, and the peak number of
 * launches waiting. Usage: join_bench [N] [R] [T] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "correlate/gpu.h"

static uint64_t retired, records_out;

static void on_retire(void *ctx, const struct np_gpu_launch *l, enum np_gpu_status status) {
    (void)ctx, (void)status;
    retired++;
    records_out += l->nrecords;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
    uint32_t n = argc > 1 ? (uint32_t)atol(argv[1]) : 1000000;
    uint32_t per = argc > 2 ? (uint32_t)atol(argv[2]) : 1;
    uint32_t threads = argc > 3 ? (uint32_t)atol(argv[3]) : 8;
    const uint32_t batch = 4096; /* launches per CUPTI buffer delivery */
    struct np_gpu_ops ops = {.retire = on_retire};
    struct np_gpu_join *j = np_gpu_join_new(&ops, 300000000ull, 5000000000ull, 200000);
    if (!j)
        return 1;
    struct np_gpu_record r;
    memset(&r, 0, sizeof(r));
    r.size = (uint16_t)np_gpu_record_size(0);
    r.kind = NP_GPU_KERNEL;
    size_t peak = 0;
    uint64_t t0 = now_ns(), clock = 0;
    for (uint32_t base = 0; base < n; base += batch) {
        uint32_t end = base + batch < n ? base + batch : n;
        for (uint32_t i = base; i < end; i++) {
            uint32_t tid = 1000 + i % threads;
            struct np_gpu_held held = {
                .stack_id = i % 97 + 1, .json = "{\"ts_ns\":1,\"pid\":42", .cpu_kernel = "k"};
            np_gpu_join_launch(j, 42, tid, &held, true, clock);
            np_gpu_join_marker(j, 42, tid, 2 * i + 1, 2, clock);
            np_gpu_join_marker(j, 42, tid, 2 * i + 2, 1, clock);
        }
        if (np_gpu_join_waiting(j) > peak)
            peak = np_gpu_join_waiting(j);
        clock += 100000000ull; /* the library's flush period */
        for (uint32_t i = base; i < end; i++) {
            r.correlation_id = 2 * i + 2;
            for (uint32_t k = 0; k < per; k++)
                np_gpu_join_record(j, 42, &r, clock);
        }
        np_gpu_join_tick(j, clock);
    }
    np_gpu_join_finish_all(j);
    double s = (double)(now_ns() - t0) / 1e9;
    printf("launches %u, records per launch %u, threads %u: %.3f s, %.2f M launches/s, "
           "%.2f M records/s, %.0f ns per launch, peak waiting %zu, retired %llu, matched "
           "records %llu\n",
           n, per, threads, s, n / s / 1e6, (double)n * per / s / 1e6, s * 1e9 / n, peak,
           (unsigned long long)retired, (unsigned long long)records_out);
    np_gpu_join_free(j);
    return retired == n && records_out == (uint64_t)n * per ? 0 : 1;
}
