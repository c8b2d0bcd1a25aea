/* launch_loop.c - a tight cudaLaunchKernel loop for the ncclprobe benchmarks.
 *
 *   launch_loop [--iters N] [--warmup N] [--depth D] [--batch B] [--rate R]
 *               [--duration SEC] [--threads N] [--wait-signal] [--pause]
 *
 * Stack of every launch: main -> level (x D, noinline, real calls) -> run_loop
 * -> launch_one -> cudaLaunchKernel(bench_kernel, {1,1,1}, {32,1,1}, NULL, 0,
 * NULL). Without a GPU (or with the toolkit's stub driver) the launch fails at
 * once; a uprobe on cudaLaunchKernel still fires, which is what we measure.
 *
 * --threads N (default 0: the main thread launches): N worker threads
 * (pthreads) launch instead, each --warmup + --iters, concurrently, with the
 * stack clone3 -> start_thread -> worker -> level (x D) -> run_loop ->
 * launch_one; main only waits. ns_per_launch is then the median over every
 * thread's batch means, launches the sum over the threads.
 *
 * --pause: after the warm-up print "warm" and wait for a SIGUSR1, and after
 * the result line wait for another before exiting, so that a harness can read
 * the tracer's counters exactly around the timed launches (with --threads, the
 * threads start timing together, after the pause).
 *
 * The measured launches are timed in batches of B (default 1000); the result
 * is the median of the per-batch means, which ignores the odd batch that a
 * noisy neighbour or an interrupt spoiled. --warmup launches come first and
 * are not timed (the first call initialises the runtime).
 *
 * --rate R paces the launches at R per second against an absolute schedule
 * (busy wait for short gaps, clock_nanosleep for long ones); when it cannot
 * keep up it launches back to back. --rate 0 (default): as fast as possible.
 * In rate mode each launch call is timed on its own, so ns_per_launch is
 * still the time spent inside cudaLaunchKernel (plus ~20 ns of clock reads).
 * --duration SEC: stop after SEC seconds of measured launches instead of
 * after --iters (whichever comes first when both are given explicitly).
 *
 * --wait-signal: print "ready PID", then wait for SIGUSR1 before the warmup,
 * so a tracer can attach first (SIGTERM/SIGINT while waiting: exit at once).
 * SIGTERM/SIGINT during the loop stop it early; the results so far are
 * still printed.
 *
 * Output (stdout): ns_per_launch=<median of batch means> launches=<measured>
 * elapsed_s=<measured window> rate=<achieved launches/s> batches=<n>
 * Exit codes: 0 ok, 2 usage, 4 runtime failure.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noipa))

struct config {
    long iters, warmup, depth, batch, threads;
    double rate, duration_s;
    int wait_signal, pause;
};

/* What one launching thread measured. */
struct result {
    double *means; /* per-batch mean ns per launch */
    long nb, launches;
    uint64_t start, end; /* the timed window, CLOCK_MONOTONIC ns */
    int rc;
};

static volatile sig_atomic_t stop_flag;
static volatile sig_atomic_t go_count; /* SIGUSR1s received (--pause) */
static volatile int sink;              /* keeps the launch results alive */
static pthread_barrier_t gate;         /* --threads > 1: all start timing together */

static void on_stop(int sig) {
    (void)sig;
    stop_flag = 1;
}

static void on_go(int sig) {
    (void)sig;
    go_count++;
}

/* --pause: print msg, wait for the next SIGUSR1 (any thread may take it). */
static void pause_for_go(const char *msg) {
    static int wanted;
    wanted++;
    printf("%s\n", msg);
    fflush(stdout);
    struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000};
    while (go_count < wanted && !stop_flag)
        nanosleep(&ms, NULL);
}

/* The host-side "kernel": only its address matters. */
void bench_kernel(void) {}

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static NOINLINE int launch_one(void) {
    dim3 grid = {1, 1, 1}, block = {32, 1, 1};
    cudaError_t err = cudaLaunchKernel((const void *)bench_kernel, grid, block, NULL, 0, NULL);
    __asm__ volatile("" ::: "memory"); /* no tail call: launch_one stays on the stack */
    return (int)err;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Wait until the absolute time t (CLOCK_MONOTONIC ns). */
static void wait_until(uint64_t t) {
    uint64_t now = now_ns();
    if (now >= t)
        return;
    if (t - now > 200000) { /* long gap: sleep most of it */
        uint64_t wake = t - 100000;
        struct timespec ts = {.tv_sec = (time_t)(wake / 1000000000ull),
                              .tv_nsec = (long)(wake % 1000000000ull)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR && !stop_flag)
            ;
    }
    while (now_ns() < t && !stop_flag)
        ;
}

/* The warm-up, then (--pause / --threads > 1) the gate, then the timed batches. */
static NOINLINE int run_loop(const struct config *c, struct result *r, int idx) {
    for (long i = 0; i < c->warmup && !stop_flag; i++)
        sink += launch_one();
    if (c->threads > 1)
        pthread_barrier_wait(&gate);
    if (c->pause && idx == 0)
        pause_for_go("warm");
    if (c->threads > 1)
        pthread_barrier_wait(&gate);

    long max_batches = c->iters / c->batch;
    double *means = malloc(sizeof(double) * (size_t)(max_batches > 0 ? max_batches : 1));
    if (!means) {
        fprintf(stderr, "launch_loop: out of memory\n");
        return r->rc = 4;
    }
    uint64_t period = c->rate > 0 ? (uint64_t)(1e9 / c->rate) : 0;
    uint64_t end = c->duration_s > 0 ? 0 : UINT64_MAX;
    long nb = 0, launches = 0;
    uint64_t start = now_ns(), next = start;
    if (c->duration_s > 0)
        end = start + (uint64_t)(c->duration_s * 1e9);

    while (nb < max_batches && !stop_flag) {
        uint64_t t0 = now_ns();
        if (t0 >= end)
            break;
        uint64_t busy = 0;
        if (!period) {
            for (long i = 0; i < c->batch; i++)
                sink += launch_one();
            busy = now_ns() - t0;
        } else {
            for (long i = 0; i < c->batch; i++) {
                wait_until(next);
                next += period;
                uint64_t a = now_ns();
                sink += launch_one();
                busy += now_ns() - a;
            }
        }
        means[nb++] = (double)busy / (double)c->batch;
        launches += c->batch;
    }
    r->means = means;
    r->nb = nb;
    r->launches = launches;
    r->start = start;
    r->end = now_ns();
    return r->rc = nb > 0 ? 0 : 4;
}

/* The result line over every launching thread's batches. */
static int report(const struct result *rs, long n) {
    long nb = 0, launches = 0, k = 0;
    uint64_t start = UINT64_MAX, end = 0;
    int rc = 0;
    for (long t = 0; t < n; t++) {
        nb += rs[t].nb;
        launches += rs[t].launches;
        if (rs[t].nb && rs[t].start < start)
            start = rs[t].start;
        if (rs[t].nb && rs[t].end > end)
            end = rs[t].end;
        if (rs[t].rc)
            rc = rs[t].rc;
    }
    double *all = malloc(sizeof(double) * (size_t)(nb ? nb : 1));
    if (!all) {
        fprintf(stderr, "launch_loop: out of memory\n");
        return 4;
    }
    for (long t = 0; t < n; t++)
        for (long i = 0; i < rs[t].nb; i++)
            all[k++] = rs[t].means[i];
    double median = 0, elapsed = nb ? (double)(end - start) / 1e9 : 0;
    if (nb > 0) {
        qsort(all, (size_t)nb, sizeof(double), cmp_double);
        median = nb % 2 ? all[nb / 2] : (all[nb / 2 - 1] + all[nb / 2]) / 2;
    }
    printf("ns_per_launch=%.1f launches=%ld elapsed_s=%.4f rate=%.0f batches=%ld\n", median,
           launches, elapsed, elapsed > 0 ? (double)launches / elapsed : 0.0, nb);
    fflush(stdout);
    free(all);
    return nb > 0 ? rc : 4;
}

/* depth noinline frames between main and the loop, each a real call. */
static NOINLINE int level(const struct config *c, struct result *r, int idx, long d) {
    int rc = d > 0 ? level(c, r, idx, d - 1) : run_loop(c, r, idx);
    __asm__ volatile("" ::: "memory");
    return rc;
}

struct worker_arg {
    const struct config *c;
    struct result *r;
    int idx;
};

static void *worker(void *p) {
    struct worker_arg *a = p;
    level(a->c, a->r, a->idx, a->c->depth);
    __asm__ volatile("" ::: "memory");
    return NULL;
}

/* --threads N: N workers launch, main waits for them. */
static int run_threads(const struct config *c) {
    long n = c->threads;
    struct result *rs = calloc((size_t)n, sizeof(*rs));
    struct worker_arg *args = calloc((size_t)n, sizeof(*args));
    pthread_t *tids = calloc((size_t)n, sizeof(*tids));
    if (!rs || !args || !tids) {
        fprintf(stderr, "launch_loop: out of memory\n");
        return 4;
    }
    if (n > 1 && pthread_barrier_init(&gate, NULL, (unsigned)n) != 0) {
        fprintf(stderr, "launch_loop: pthread_barrier_init failed\n");
        return 4;
    }
    long started = 0;
    for (; started < n; started++) {
        args[started] = (struct worker_arg){.c = c, .r = &rs[started], .idx = (int)started};
        if (pthread_create(&tids[started], NULL, worker, &args[started]) != 0) {
            fprintf(stderr, "launch_loop: pthread_create failed\n");
            if (started == 0)
                return 4;
            _exit(4); /* the started ones would wait at the barrier forever */
        }
    }
    for (long t = 0; t < n; t++)
        pthread_join(tids[t], NULL);
    int rc = report(rs, n);
    for (long t = 0; t < n; t++)
        free(rs[t].means);
    free(rs);
    free(args);
    free(tids);
    return rc;
}

static int usage(void) {
    fprintf(stderr, "usage: launch_loop [--iters N] [--warmup N] [--depth D] [--batch B]\n"
                    "                   [--rate R] [--duration SEC] [--threads N]\n"
                    "                   [--wait-signal] [--pause]\n");
    return 2;
}

static int parse_num(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv) {
    struct config c = {.iters = 200000, .warmup = 10000, .depth = 10, .batch = 1000};
    int iters_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double v;
        if (!strcmp(a, "--wait-signal")) {
            c.wait_signal = 1;
            continue;
        }
        if (!strcmp(a, "--pause")) {
            c.pause = 1;
            continue;
        }
        if (i + 1 >= argc)
            return usage();
        const char *val = argv[++i];
        if (!strcmp(a, "--iters") && !parse_num(val, 1, 1e12, &v))
            c.iters = (long)v, iters_given = 1;
        else if (!strcmp(a, "--warmup") && !parse_num(val, 0, 1e12, &v))
            c.warmup = (long)v;
        else if (!strcmp(a, "--depth") && !parse_num(val, 0, 10000, &v))
            c.depth = (long)v;
        else if (!strcmp(a, "--batch") && !parse_num(val, 1, 1e9, &v))
            c.batch = (long)v;
        else if (!strcmp(a, "--rate") && !parse_num(val, 0, 1e10, &v))
            c.rate = v;
        else if (!strcmp(a, "--duration") && !parse_num(val, 1e-3, 1e6, &v))
            c.duration_s = v;
        else if (!strcmp(a, "--threads") && !parse_num(val, 0, 1024, &v))
            c.threads = (long)v;
        else
            return usage();
    }
    if (c.duration_s > 0 && !iters_given)
        c.iters = (long)1e12; /* bounded by time only */
    if (c.iters < c.batch)
        c.batch = c.iters;
    if (c.duration_s > 0 && c.batch * (c.rate > 0 ? 1.0 / c.rate : 0) > 0.01)
        c.batch = c.rate > 100 ? (long)(c.rate / 100) : 1; /* keep batches ~10 ms */
    if (c.duration_s > 0 && c.iters > 200000000L) {
        /* time-bounded: size the batch array for at most 2e8 launches/s */
        double cap = c.duration_s * (c.rate > 0 ? c.rate : 2e8) + c.batch;
        if (cap < (double)c.iters)
            c.iters = (long)cap;
    }

    struct sigaction sa = {.sa_handler = on_stop};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    struct sigaction go = {.sa_handler = on_go};
    sigemptyset(&go.sa_mask);
    sigaction(SIGUSR1, &go, NULL); /* --pause; --wait-signal blocks it until then */

    if (c.wait_signal) {
        /* SIGTERM/SIGINT while waiting: leave without launching. */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigprocmask(SIG_BLOCK, &set, NULL);
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        int sig = 0;
        if (sigwait(&set, &sig) != 0)
            return 4;
        if (sig != SIGUSR1)
            return 0;
        sigdelset(&set, SIGUSR1);
        if (c.pause) /* its handler counts the --pause signals */
            sigaddset(&set, SIGUSR1);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
    }
    int rc;
    if (c.threads > 0) {
        rc = run_threads(&c);
    } else {
        struct result r = {0};
        rc = level(&c, &r, 0, c.depth);
        if (r.means)
            rc = report(&r, 1);
        free(r.means);
    }
    if (c.pause)
        pause_for_go("done");
    return rc;
}
