/* demo_server: the workload behind `make demo`. A pretend inference server whose worker threads
 * serve a fixed, deterministic list of requests through a toy model:
 *
 *   main -> serve_requests -> handle_request            (worker 0 runs on the main thread)
 *   worker_main -> serve_requests -> handle_request     (workers 1..N-1)
 *     -> model_forward -> attention_block / mlp_block   (libdemo_model.so)
 *     -> launch_attention / launch_matmul / ...         (libdemo_kernels.so)
 *     -> cudaLaunchKernel / cudaLaunchKernelExC / cudaGraphLaunch / cuLaunchKernel
 *
 * Request i is served by worker i % threads. Each worker's 1st, 5th, 9th, ... request is a
 * prefill (all layers launched eagerly); the others are decode steps (one CUDA graph replay). */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "demo_kernels.h"
#include "demo_model.h"

#define NOINLINE __attribute__((noinline))
#define KEEP_FRAME() __asm__ volatile("" ::: "memory") /* no tail calls: keep every frame */

struct server_options {
    unsigned long requests;
    unsigned threads;
    unsigned layers;
    long sleep_us;
    bool wait_signal;
};

struct worker {
    pthread_t thread;
    unsigned index;
    long tid;
    unsigned long requests;
    unsigned long launches;
};

static struct server_options opts = {.requests = 200, .threads = 4, .layers = 4};
static pthread_barrier_t start_gate;

static void sleep_us(long us) {
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
    while (us > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

NOINLINE unsigned handle_request(const struct demo_request *req) {
    unsigned launches = model_forward(req);
    KEEP_FRAME();
    return launches;
}

NOINLINE void serve_requests(struct worker *w) {
    w->tid = (long)syscall(SYS_gettid);
    void *stream = (void *)(uintptr_t)(0x7f5000 + 0x100 * w->index);
    for (unsigned long id = w->index; id < opts.requests; id += opts.threads) {
        bool prefill = w->requests % 4 == 0;
        struct demo_request req = {
            .id = (unsigned)id,
            .batch = 1 + (unsigned)(id % 8),
            .decode = !prefill,
            .seq_len = prefill ? 128u << (w->requests / 4 % 4) : 1,
            .stream = stream,
        };
        w->launches += handle_request(&req);
        KEEP_FRAME();
        w->requests++;
        sleep_us(opts.sleep_us);
    }
}

NOINLINE void *worker_main(void *arg) {
    pthread_barrier_wait(&start_gate);
    serve_requests(arg);
    KEEP_FRAME();
    return NULL;
}

static unsigned long parse_number(const char *opt, const char *text, unsigned long min,
                                  unsigned long max) {
    char *end = NULL;
    errno = 0;
    unsigned long value = strtoul(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || value < min || value > max) {
        fprintf(stderr, "demo_server: %s expects an integer in [%lu, %lu], got '%s'\n", opt, min,
                max, text);
        exit(2);
    }
    return value;
}

static void usage(FILE *out) {
    fprintf(out, "usage: demo_server [--requests N] [--threads N] [--layers N] [--sleep-us N]\n"
                 "                   [--wait-signal]\n");
}

static void parse_options(int argc, char **argv) {
    static const struct option long_opts[] = {
        {"requests", required_argument, NULL, 'r'},
        {"threads", required_argument, NULL, 't'},
        {"layers", required_argument, NULL, 'l'},
        {"sleep-us", required_argument, NULL, 's'},
        {"wait-signal", no_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        switch (opt) {
        case 'r':
            opts.requests = parse_number("--requests", optarg, 0, 1UL << 40);
            break;
        case 't':
            opts.threads = (unsigned)parse_number("--threads", optarg, 1, 256);
            break;
        case 'l':
            opts.layers = (unsigned)parse_number("--layers", optarg, 1, 1000);
            break;
        case 's':
            opts.sleep_us = (long)parse_number("--sleep-us", optarg, 0, 10000000);
            break;
        case 'w':
            opts.wait_signal = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            exit(2);
        }
    }
    if (optind != argc) {
        usage(stderr);
        exit(2);
    }
}

int main(int argc, char **argv) {
    parse_options(argc, argv);
    struct demo_model_config config = {
        .layers = opts.layers, .hidden = 4096, .heads = 32, .intermediate = 11008};
    model_configure(&config);

    sigset_t start_set;
    sigemptyset(&start_set);
    sigaddset(&start_set, SIGUSR1);
    if (opts.wait_signal)
        pthread_sigmask(SIG_BLOCK, &start_set, NULL);

    struct worker *workers = calloc(opts.threads, sizeof(*workers));
    if (!workers) {
        perror("demo_server: calloc");
        return 1;
    }
    pthread_barrier_init(&start_gate, NULL, opts.threads);
    for (unsigned i = 0; i < opts.threads; i++) {
        workers[i].index = i;
        if (i == 0)
            continue; /* worker 0 is the main thread */
        int err = pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]);
        if (err != 0) {
            fprintf(stderr, "demo_server: pthread_create: %s\n", strerror(err));
            return 1;
        }
    }
    if (opts.wait_signal) {
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        int sig = 0;
        while (sigwait(&start_set, &sig) != 0 || sig != SIGUSR1) {
        }
    }

    pthread_barrier_wait(&start_gate);
    serve_requests(&workers[0]);
    KEEP_FRAME();
    for (unsigned i = 1; i < opts.threads; i++)
        pthread_join(workers[i].thread, NULL);

    unsigned long requests = 0, launches = 0;
    for (unsigned i = 0; i < opts.threads; i++) {
        printf("thread tid=%ld requests=%lu launches=%lu\n", workers[i].tid, workers[i].requests,
               workers[i].launches);
        requests += workers[i].requests;
        launches += workers[i].launches;
    }
    struct demo_launch_stats stats;
    demo_kernels_stats(&stats);
    printf("demo requests=%lu launches=%lu cudaLaunchKernel=%lu cudaLaunchKernelExC=%lu "
           "cudaGraphLaunch=%lu cuLaunchKernel=%lu\n",
           requests, launches, stats.cuda_launch_kernel, stats.cuda_launch_kernel_exc,
           stats.cuda_graph_launch, stats.cu_launch_kernel);
    fflush(stdout);
    free(workers);
    return 0;
}
