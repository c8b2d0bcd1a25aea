/* launcher: the main ncclprobe test workload. Launches "kernels" through every CUDA runtime and
 * driver launch entry point along a fixed call chain spread over three objects:
 *
 *   main -> run_worker                        (this executable; inline mode)
 *   worker_thread -> run_worker               (this executable; --threads N)
 *     -> liba_submit                          (liblaunch_a.so)
 *     -> libb_launch                          (liblaunch_b.so)
 *     -> cudaLaunchKernel / cuLaunchKernel... (libcudart.so.13 / libcuda.so.1)
 *
 * and prints, per thread, exactly how many launches of each variant it made so the tests can
 * compare ncclprobe's per-thread counts and stacks with the truth. */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "launch_api.h"
#include "progs_common.h"

static const char *const variant_names[VARIANT_COUNT] = {
    [VARIANT_RT] = "rt",           [VARIANT_RT_PTSZ] = "rt_ptsz",     [VARIANT_RT_EXC] = "rt_exc",
    [VARIANT_RT_COOP] = "rt_coop", [VARIANT_GRAPH] = "graph",         [VARIANT_DRV] = "drv",
    [VARIANT_DRV_EX] = "drv_ex",   [VARIANT_DRV_GRAPH] = "drv_graph", [VARIANT_RT13] = "rt13",
};

struct options {
    int variants[VARIANT_COUNT]; /* in the order requested, without duplicates */
    int n_variants;
    long threads; /* 0: run on the main thread; N > 0: N worker threads */
    long iters;
    long sleep_us;
    bool wait_signal;
    bool loop_until_signal;
    bool verbose;
};

struct worker {
    pthread_t thread;
    long tid;
    unsigned long launches[VARIANT_COUNT]; /* indexed like options.variants */
};

static struct options opts = {.threads = 0, .iters = 10};
static atomic_int stop_requested;
static pthread_barrier_t start_gate;
static pthread_mutex_t output_lock = PTHREAD_MUTEX_INITIALIZER;

static void usage(FILE *out) {
    fprintf(out,
            "usage: launcher [--variant NAME[,NAME...]]... [--threads N] [--iters N]\n"
            "                [--sleep-us N] [--wait-signal] [--loop-until-signal] [--verbose]\n"
            "variants: rt rt_ptsz rt_exc rt_coop graph drv drv_ex drv_graph (default: all of\n"
            "          these) and rt13 (nvcc-built <<<>>> launch; only when requested)\n");
}

static int variant_from_name(const char *name) {
    for (int v = 0; v < VARIANT_COUNT; v++)
        if (strcmp(name, variant_names[v]) == 0)
            return v;
    return -1;
}

static void add_variant(int variant) {
    for (int i = 0; i < opts.n_variants; i++)
        if (opts.variants[i] == variant)
            return;
    opts.variants[opts.n_variants++] = variant;
}

/* Accepts "rt", "rt,drv" etc.; exits with a usage error on an unknown name. */
static void add_variant_list(const char *list) {
    char *copy = strdup(list);
    char *save = NULL;
    for (char *name = strtok_r(copy, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        int variant = variant_from_name(name);
        if (variant < 0) {
            fprintf(stderr, "launcher: unknown variant '%s'\n", name);
            usage(stderr);
            exit(PROGS_EXIT_USAGE);
        }
        add_variant(variant);
    }
    free(copy);
}

static void parse_options(int argc, char **argv) {
    enum { OPT_VARIANT = 256, OPT_THREADS, OPT_ITERS, OPT_SLEEP, OPT_WAIT, OPT_LOOP, OPT_VERBOSE };
    static const struct option long_opts[] = {
        {"variant", required_argument, NULL, OPT_VARIANT},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"iters", required_argument, NULL, OPT_ITERS},
        {"sleep-us", required_argument, NULL, OPT_SLEEP},
        {"wait-signal", no_argument, NULL, OPT_WAIT},
        {"loop-until-signal", no_argument, NULL, OPT_LOOP},
        {"verbose", no_argument, NULL, OPT_VERBOSE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        switch (opt) {
        case OPT_VARIANT:
            add_variant_list(optarg);
            break;
        case OPT_THREADS:
            opts.threads = progs_parse_long("--threads", optarg, 0);
            break;
        case OPT_ITERS:
            opts.iters = progs_parse_long("--iters", optarg, 0);
            break;
        case OPT_SLEEP:
            opts.sleep_us = progs_parse_long("--sleep-us", optarg, 0);
            break;
        case OPT_WAIT:
            opts.wait_signal = true;
            break;
        case OPT_LOOP:
            opts.loop_until_signal = true;
            break;
        case OPT_VERBOSE:
            opts.verbose = true;
            break;
        case 'h':
            usage(stdout);
            exit(PROGS_EXIT_OK);
        default:
            usage(stderr);
            exit(PROGS_EXIT_USAGE);
        }
    }
    if (optind != argc) {
        fprintf(stderr, "launcher: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        exit(PROGS_EXIT_USAGE);
    }
    if (opts.n_variants == 0)
        for (int v = 0; v < VARIANT_COUNT; v++)
            if (v != VARIANT_RT13)
                add_variant(v);
}

static bool keep_going(long iteration) {
    if (opts.loop_until_signal)
        return !atomic_load(&stop_requested);
    return iteration < opts.iters;
}

/* Prints this thread's per-variant totals as one uninterrupted block. */
static void report_worker(const struct worker *w) {
    pthread_mutex_lock(&output_lock);
    for (int i = 0; i < opts.n_variants; i++)
        printf("thread tid=%ld variant=%s launches=%lu\n", w->tid, variant_names[opts.variants[i]],
               w->launches[i]);
    fflush(stdout);
    pthread_mutex_unlock(&output_lock);
}

/* Does all iterations of all requested variants (iteration-major) on the calling thread. */
NOINLINE void run_worker(struct worker *w) {
    w->tid = progs_gettid();
    for (long iteration = 0; keep_going(iteration); iteration++) {
        for (int i = 0; i < opts.n_variants && keep_going(iteration); i++) {
            int status = liba_submit(opts.variants[i]);
            KEEP_FRAME();
            if (opts.verbose && w->launches[i] == 0)
                fprintf(stderr, "launcher: tid=%ld variant=%s status=%d\n", w->tid,
                        variant_names[opts.variants[i]], status);
            w->launches[i]++;
            progs_sleep_us(opts.sleep_us);
        }
    }
    report_worker(w);
}

NOINLINE void *worker_thread(void *arg) {
    pthread_barrier_wait(&start_gate);
    run_worker(arg);
    KEEP_FRAME();
    return NULL;
}

static void on_stop_signal(int sig) {
    (void)sig;
    atomic_store(&stop_requested, 1);
}

static void install_stop_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int main(int argc, char **argv) {
    parse_options(argc, argv);
    for (int i = 0; i < opts.n_variants; i++) {
        if (!libb_variant_available(opts.variants[i])) {
            fprintf(stderr,
                    "launcher: variant %s unavailable (libkern.so was built without nvcc)\n",
                    variant_names[opts.variants[i]]);
            return PROGS_EXIT_UNAVAILABLE;
        }
    }
    if (opts.loop_until_signal)
        install_stop_handlers();
    if (opts.wait_signal)
        progs_block_start_signal();

    long n_workers = opts.threads > 0 ? opts.threads : 1;
    struct worker *workers = calloc((size_t)n_workers, sizeof(*workers));
    if (!workers) {
        perror("launcher: calloc");
        return PROGS_EXIT_RUNTIME;
    }

    /* Worker threads exist (and wait at the gate) before "ready" is printed. */
    if (opts.threads > 0) {
        pthread_barrier_init(&start_gate, NULL, (unsigned)opts.threads + 1);
        for (long i = 0; i < opts.threads; i++) {
            int err = pthread_create(&workers[i].thread, NULL, worker_thread, &workers[i]);
            if (err != 0) {
                fprintf(stderr, "launcher: pthread_create: %s\n", strerror(err));
                return PROGS_EXIT_RUNTIME;
            }
        }
    }
    if (opts.wait_signal) {
        progs_announce_ready();
        progs_wait_start_signal();
    }

    if (opts.threads > 0) {
        pthread_barrier_wait(&start_gate);
        for (long i = 0; i < opts.threads; i++)
            pthread_join(workers[i].thread, NULL);
    } else {
        run_worker(&workers[0]);
        KEEP_FRAME();
    }

    if (opts.loop_until_signal) {
        unsigned long total = 0;
        for (long i = 0; i < n_workers; i++)
            for (int v = 0; v < opts.n_variants; v++)
                total += workers[i].launches[v];
        printf("total launches=%lu\n", total);
        fflush(stdout);
    }
    free(workers);
    return PROGS_EXIT_OK;
}
