/* merge_unit.c - unit tests for the pure launch matcher of `ncclprobe merge`
 * (np_match_launches, merge/match.h): one-to-one pairing, closest
 * pair first, the strict tolerance bound, empty inputs, per-thread pairing.
 * Prints "N passed, N failed" and exits non-zero on any failure. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "check.h"
#include "merge/match.h"

#define MS 1000000LL
#define NONE NP_MATCH_NONE

/* Points at the given times, all on one thread. */
static void on_thread(struct np_match_point *points, const int64_t *ts, size_t n, uint64_t thread) {
    for (size_t i = 0; i < n; i++)
        points[i] = (struct np_match_point){.ts_ns = ts[i], .thread = thread};
}

/* Whether got[0..n) is want[0..n); prints both when not. */
static int same_pairs(const size_t *got, const size_t *want, size_t n) {
    if (memcmp(got, want, n * sizeof(*got)) == 0)
        return 1;
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "  cpu %zu: got %zd, want %zd\n", i, (ssize_t)got[i], (ssize_t)want[i]);
    return 0;
}

/* Every launch has its event, a little later: each takes its own. */
static void test_exact_one_to_one(void) {
    const uint64_t t = np_match_thread_key(100, 101);
    const int64_t cpu_ts[] = {100 * MS, 200 * MS, 300 * MS};
    const int64_t ev_ts[] = {100 * MS + 500, 200 * MS + 700, 300 * MS + 900};
    struct np_match_point cpu[3], ev[3];
    size_t got[3];
    const size_t want[] = {0, 1, 2};

    on_thread(cpu, cpu_ts, 3, t);
    on_thread(ev, ev_ts, 3, t);
    CHECK(np_match_launches(cpu, 3, ev, 3, 10 * MS, got) == 0);
    CHECK(same_pairs(got, want, 3));
}

/* The first launch of a burst has no event (the trace started late): the
 * others keep their own events instead of the whole burst shifting by one,
 * which a time-order greedy pairing would do (1000 ns is within tolerance). */
static void test_closest_first_missing_start(void) {
    const uint64_t t = np_match_thread_key(7, 7);
    const int64_t cpu_ts[] = {1000, 2000, 3000, 4000};
    const int64_t ev_ts[] = {2100, 3100, 4100};
    struct np_match_point cpu[4], ev[3];
    size_t got[4];
    const size_t want[] = {NONE, 0, 1, 2};

    on_thread(cpu, cpu_ts, 4, t);
    on_thread(ev, ev_ts, 3, t);
    CHECK(np_match_launches(cpu, 4, ev, 3, 10 * MS, got) == 0);
    CHECK(same_pairs(got, want, 4));
}

/* A pair is made only when its gap is strictly under the tolerance, the
 * event before or after the launch. */
static void test_tolerance_boundary(void) {
    const uint64_t t = np_match_thread_key(1, 2);
    struct np_match_point cpu[1], after[1], before[1];
    size_t got[1];

    on_thread(cpu, (const int64_t[]){1000}, 1, t);
    on_thread(after, (const int64_t[]){1500}, 1, t);
    on_thread(before, (const int64_t[]){500}, 1, t);

    CHECK(np_match_launches(cpu, 1, after, 1, 500, got) == 0);
    CHECK(got[0] == NONE); /* gap == tolerance */
    CHECK(np_match_launches(cpu, 1, after, 1, 501, got) == 0);
    CHECK(got[0] == 0);
    CHECK(np_match_launches(cpu, 1, before, 1, 500, got) == 0);
    CHECK(got[0] == NONE);
    CHECK(np_match_launches(cpu, 1, before, 1, 501, got) == 0);
    CHECK(got[0] == 0);
    CHECK(np_match_launches(cpu, 1, after, 1, 1, got) == 0);
    CHECK(got[0] == NONE);
}

/* No launches: nothing written. No events: every launch is unpaired. */
static void test_empty_inputs(void) {
    const uint64_t t = np_match_thread_key(3, 4);
    struct np_match_point cpu[2], ev[1];
    size_t got[2] = {12345, 12345};
    const size_t want[] = {NONE, NONE};

    on_thread(cpu, (const int64_t[]){10, 20}, 2, t);
    on_thread(ev, (const int64_t[]){15}, 1, t);

    CHECK(np_match_launches(cpu, 0, ev, 1, 10 * MS, got) == 0);
    CHECK(got[0] == 12345 && got[1] == 12345);
    CHECK(np_match_launches(cpu, 0, ev, 0, 10 * MS, got) == 0);
    CHECK(got[0] == 12345);
    CHECK(np_match_launches(cpu, 2, ev, 0, 10 * MS, got) == 0);
    CHECK(same_pairs(got, want, 2));
}

/* A launch only takes an event of its own thread when that thread has
 * events; events of threads no launch has form a pool for the others. */
static void test_per_thread(void) {
    const uint64_t a = np_match_thread_key(10, 11), b = np_match_thread_key(10, 12);
    const uint64_t other = np_match_thread_key(99, 99);
    struct np_match_point cpu[3] = {{1000, a}, {1010, b}, {5000, a}};
    /* b's event is far, a's near b's launch; the pool event is near a's second launch */
    struct np_match_point ev[3] = {{1011, a}, {9000, b}, {5001, other}};
    size_t got[3];
    const size_t want[] = {0, 1, NONE};

    CHECK(np_match_launches(cpu, 3, ev, 3, 10 * MS, got) == 0);
    CHECK(same_pairs(got, want, 3));
}

int main(void) {
    test_exact_one_to_one();
    test_closest_first_missing_start();
    test_tolerance_boundary();
    test_empty_inputs();
    test_per_thread();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
