/* session.c - the tracing session shared by record and the daemon (see
 * session.h): signals, BPF loading, counters, draining and freeing. */
#define _GNU_SOURCE
#include "session/session.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "attach/uprobe_multi.h"
#include "correlate/gpu.h"
#include "ingest/drain.h"
#include "ingest/gpu_socket.h"
#include "lib/util.h"
#include "ncclprobe.skel.h"
#include "session/preflight.h"
#include "session/target.h"

static bool verbose; /* -v: libbpf's own messages too */

void np_session_set_verbose(bool v) {
    verbose = v;
}

int np_session_setup_signals(struct np_session *s, int extra) {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, extra);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    s->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (s->sigfd < 0)
        return -errno;
    return np_session_watch(s->epfd, s->sigfd, NP_TAG_SIGNAL);
}

int np_session_watch(int epfd, int fd, uint64_t tag) {
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tag};
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

/* ---- BPF -------------------------------------------------------------- */

/* libbpf's warnings (a whole verifier log on a load failure) only with -v:
 * our own error line says what failed. */
static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap) {
    if (level == LIBBPF_DEBUG || !verbose)
        return 0;
    return vfprintf(stderr, fmt, ap);
}

/* How full the ring gets before BPF wakes the reader: --wakeup-kb, or
 * (auto) an eighth of the ring. Each wake-up costs the launching thread an
 * interrupt and the reader two thread switches (the drain thread, then the
 * session's); in batches of 8 MiB the reader spent 1.8x less CPU per record
 * than in batches of 256 KiB (bench/results-reader.md), and seven eighths
 * of the ring are still free when it wakes. */
static uint64_t wakeup_bytes_of(const struct np_settings *opt, uint64_t ring_bytes) {
    if (opt->wakeup_kb >= 0)
        return (uint64_t)opt->wakeup_kb * 1024;
    return ring_bytes / 8;
}

/* Opens and loads the BPF object; with_multi loads the uprobe_multi copies
 * of the programs too (Linux 6.6+). */
static int load_bpf(struct np_session *s, bool with_multi) {
    char btf[4096];
    LIBBPF_OPTS(bpf_object_open_opts, open_opts);
    if (strcmp(np_btf_path(btf, sizeof(btf)), "/sys/kernel/btf/vmlinux") != 0)
        open_opts.btf_custom_path = btf;

    s->skel = ncclprobe_bpf__open_opts(&open_opts);
    if (!s->skel) {
        int err = -errno;
        np_err("cannot open the BPF object: %s", strerror(-err));
        return err;
    }
    struct bpf_program *multi[] = {s->skel->progs.np_entry_multi, s->skel->progs.np_return_multi};
    for (size_t i = 0; i < NP_ARRAY_SIZE(multi); i++) {
        if (with_multi)
            bpf_program__set_expected_attach_type(multi[i], NP_BPF_TRACE_UPROBE_MULTI);
        else
            bpf_program__set_autoload(multi[i], false);
    }
    uint64_t ring_bytes = (uint64_t)s->opt.ring_mb << 20;
    bpf_map__set_max_entries(s->skel->maps.events, (__u32)ring_bytes);
    s->wakeup_bytes = wakeup_bytes_of(&s->opt, ring_bytes);
    s->skel->rodata->wakeup_bytes = s->wakeup_bytes;
    s->skel->rodata->stack_bytes = s->opt.unwind == UNWIND_FP ? 0 : (__u32)s->opt.stack_bytes;
    int ncpus = libbpf_num_possible_cpus();
    if (ncpus > 0)
        bpf_map__set_max_entries(s->skel->maps.launch_scratch, (__u32)ncpus);
    int err = ncclprobe_bpf__load(s->skel);
    if (err) {
        ncclprobe_bpf__destroy(s->skel);
        s->skel = NULL;
    }
    return err;
}

int np_session_setup_bpf(struct np_session *s) {
    libbpf_set_print(libbpf_print);
    long max_stack = np_perf_event_max_stack();
    if (s->opt.unwind == UNWIND_FP && max_stack > 0 && max_stack < NP_MAX_STACK)
        np_warn("kernel.perf_event_max_stack is %ld: frame-pointer stacks deeper than that are "
                "cut (marked [truncated]); raise it to %d, or use --unwind dwarf",
                max_stack, NP_MAX_STACK);
    bool multi = true;
    int err = load_bpf(s, true);
    if (err) {
        np_debug("no uprobe_multi links on this kernel (%s): one link per probe", strerror(-err));
        multi = false;
        err = load_bpf(s, false);
    }
    if (err) {
        np_err("cannot load the BPF programs: %s (is this kernel 5.15 or newer, with BPF "
               "ring buffers and uprobe cookies?)",
               strerror(-err));
        return err;
    }
    s->rb = ring_buffer__new(bpf_map__fd(s->skel->maps.events), np_ingest_record, &s->ingest, NULL);
    if (!s->rb)
        return -errno;
    np_attacher_init(&s->attacher, s->skel, multi);
    /* the agent's fast path needs the stack copy (DWARF unwinding) */
    s->attacher.fast_path = s->opt.launch_probes == NP_LAUNCH_PROBES_AUTO &&
                            s->opt.unwind != UNWIND_FP && !s->opt.no_gpu;
    if (s->opt.nccl_flows && (err = np_session_setup_flows(s)) < 0)
        return err;
    if (s->flows_rb &&
        (err = np_session_watch(s->epfd, ring_buffer__epoll_fd(s->flows_rb), NP_TAG_RING)) < 0)
        return err;
    return np_session_watch(s->epfd, ring_buffer__epoll_fd(s->rb), NP_TAG_RING);
}

static int sum_percpu(int map_fd, __u32 key, int ncpus, uint64_t *out) {
    uint64_t vals[ncpus];
    if (bpf_map_lookup_elem(map_fd, &key, vals) < 0)
        return -errno;
    uint64_t sum = 0;
    for (int i = 0; i < ncpus; i++)
        sum += vals[i];
    *out = sum;
    return 0;
}

/* ---- results -------------------------------------------------------------- */

uint64_t np_session_counter(struct np_session *s, __u32 which) {
    return np_session_probe_counter(s->skel->maps.counters, which);
}

/* The ring's two position pages, mapped from the map itself: libbpf 1.1 has no
 * call for the fill level. Read-only; the consumer page may be mapped so. */
static int map_ring_positions(struct np_session *s) {
    long page = sysconf(_SC_PAGESIZE);
    int fd = bpf_map__fd(s->skel->maps.events);
    void *consumer = mmap(NULL, (size_t)page, PROT_READ, MAP_SHARED, fd, 0);
    if (consumer == MAP_FAILED)
        return -errno;
    void *producer = mmap(NULL, (size_t)page, PROT_READ, MAP_SHARED, fd, page);
    if (producer == MAP_FAILED) {
        int err = -errno;
        munmap(consumer, (size_t)page);
        return err;
    }
    s->ring_consumer = consumer;
    s->ring_producer = producer;
    return 0;
}

int np_session_ring_fill(struct np_session *s, uint64_t *used, uint64_t *size) {
    if (!s->skel)
        return -ENODEV;
    if (!s->ring_consumer) {
        int err = map_ring_positions(s);
        if (err < 0)
            return err;
    }
    uint64_t consumer = __atomic_load_n(s->ring_consumer, __ATOMIC_ACQUIRE);
    uint64_t producer = __atomic_load_n(s->ring_producer, __ATOMIC_ACQUIRE);
    *used = producer > consumer ? producer - consumer : 0;
    *size = bpf_map__max_entries(s->skel->maps.events);
    return 0;
}

static void unmap_ring_positions(struct np_session *s) {
    long page = sysconf(_SC_PAGESIZE);
    if (s->ring_consumer)
        munmap((void *)s->ring_consumer, (size_t)page);
    if (s->ring_producer)
        munmap((void *)s->ring_producer, (size_t)page);
    s->ring_consumer = s->ring_producer = NULL;
}

static uint64_t records_sent_by_bpf(struct np_session *s) {
    return np_session_counter(s, NP_CNT_LAUNCH_SENT) + np_session_counter(s, NP_CNT_HANDLE_SENT) +
           np_session_counter(s, NP_CNT_MAP_SENT) + np_session_counter(s, NP_CNT_MARKER_SENT) +
           np_session_counter(s, NP_CNT_NCCL_PLAN_SENT);
}

uint64_t np_session_records_received(const struct np_session *s) {
    const struct np_ingest_stats *st = &s->ingest.stats;
    return st->launch_events + st->not_recorded + st->handle_events + st->map_events +
           st->marker_events + st->nccl_plan_events + st->malformed + st->unknown_source;
}

/* Stop the probes (BPF's `stopped` switch: nothing is counted or sent
 * from then on), then read until everything BPF sent has arrived - a probe
 * that was mid-flight when the switch flipped still delivers. Then the
 * counts add up (hits = captured + dropped). Removing the uprobes, which
 * is slow, happens afterwards. */

/* Every launch hit has been sent or counted as dropped, and everything
 * sent has been read. A program that passed the `stopped` check before the
 * switch flipped may still be running (uprobe programs can be preempted). */
static bool drained(struct np_session *s) {
    uint64_t hits = np_session_counter(s, NP_CNT_LAUNCH_HITS);
    uint64_t done =
        np_session_counter(s, NP_CNT_LAUNCH_SENT) + np_session_counter(s, NP_CNT_LAUNCH_DROPPED);
    return hits == done && np_session_records_received(s) >= records_sent_by_bpf(s);
}

/* How long one turn of the loop works off the backlog: signals, timers and
 * the ring (drained at every turn) wait at most about that long. */
#define WORK_SLICE_NS 10000000ull

void np_session_read(struct np_session *s, long budget) {
    bool ring_left = false;
    np_session_read_flows(s);
    if (s->drain) {
        np_drain_ack(s->drain);
    } else {
        s->ingest.budget = budget;
        int err = ring_buffer__consume(s->rb);
        ring_left = err == NP_INGEST_YIELD;
        if (err < 0 && !ring_left && err != -EINTR)
            np_warn("reading the ring buffer: %s", strerror(-err));
    }
    uint64_t slice = budget > 0 ? WORK_SLICE_NS : 0;
    uint64_t waiting = np_ingest_work(&s->ingest, slice);
    if (s->drain && waiting == 0) {
        /* Caught up with the backlog: before the loop acts on "everything
         * is read" (a process that exited is let go, a GPU client's end is
         * taken), what is still in the ring is read too. */
        np_drain_flush(s->drain);
        waiting = np_ingest_work(&s->ingest, slice);
    }
    s->backlog = ring_left || waiting > 0;
}

void np_session_read_all(struct np_session *s) {
    if (s->drain)
        np_drain_flush(s->drain);
    np_session_read(s, 0);
}

int np_session_start_drain(struct np_session *s) {
    if (!s->ingest.queue || !s->rb || s->drain)
        return 0;
    int ring_fd = ring_buffer__epoll_fd(s->rb);
    int err = np_drain_start(s->rb, &s->drain);
    if (!err && epoll_ctl(s->epfd, EPOLL_CTL_DEL, ring_fd, NULL) < 0)
        err = -errno;
    if (!err)
        err = np_session_watch(s->epfd, np_drain_ready_fd(s->drain), NP_TAG_RING);
    if (err) {
        np_drain_stop(s->drain);
        s->drain = NULL;
        s->ingest.queue = false;
        np_warn("cannot start the ring buffer's drain thread (%s): records are read as they "
                "come",
                strerror(-err));
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, ring_fd, NULL);
        return np_session_watch(s->epfd, ring_fd, NP_TAG_RING);
    }
    return 0;
}

void np_session_stop_and_drain(struct np_session *s) {
    s->skel->bss->stopped = 1;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    bool done = false;
    for (int i = 0; i < 200 && !done; i++) {
        np_session_read_all(s);
        done = drained(s);
        if (!done)
            usleep(1000);
    }
    if (!done)
        np_warn("%llu records still in flight after stopping",
                (unsigned long long)(records_sent_by_bpf(s) - np_session_records_received(s)));
    np_drain_stop(s->drain); /* its counts are final */
    s->drain = NULL;
    np_ingest_work(&s->ingest, 0);
}

uint64_t np_session_probe_counter(struct bpf_map *map, uint32_t id) {
    int ncpus = libbpf_num_possible_cpus();
    uint64_t n = 0;
    if (ncpus > 0)
        sum_percpu(bpf_map__fd(map), id, ncpus, &n);
    return n;
}

void np_session_free(struct np_session *s) {
    if (s->skel)
        np_attacher_destroy(&s->attacher);
    np_drain_stop(s->drain); /* before the ring it reads */
    s->drain = NULL;
    unmap_ring_positions(s);
    ring_buffer__free(s->rb);
    s->rb = NULL;
    np_session_flows_free(s);
    ncclprobe_bpf__destroy(s->skel);
    s->skel = NULL;
    np_gpu_server_close(s->gpu_server);
    s->gpu_server = NULL;
    np_gpu_join_free(s->gpu_join);
    s->gpu_join = NULL;
    free(s->gpu_closed);
    s->gpu_closed = NULL;
    for (size_t i = 0; i < s->ntargets; i++)
        np_target_free(s->targets[i]);
    free(s->targets);
    s->targets = NULL;
    s->ntargets = 0;
    if (s->ingest.raw_dump)
        fclose(s->ingest.raw_dump);
    s->ingest.raw_dump = NULL;
    np_ingest_free(&s->ingest);
    np_nccl_comms_free(&s->nccl_comms);
    np_str_free(&s->held.json);
    np_str_free(&s->held.ext);
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->sigfd >= 0)
        close(s->sigfd);
    s->epfd = s->sigfd = -1;
}
