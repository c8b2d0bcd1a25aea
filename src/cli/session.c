/* session.c - the tracing session shared by record and the daemon (see
 * session.h): targets, BPF loading, the GPU side, counters and draining. */
#define _GNU_SOURCE
#include "cli/session.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "attach/target.h"
#include "attach/uprobe_multi.h"
#include "cli/preflight.h"
#include "correlate/gpu.h"
#include "correlate/kernels.h"
#include "ingest/gpu_socket.h"
#include "lib/util.h"
#include "ncclprobe.skel.h"
#include "symbolize/pycode.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"
#include "writers/output.h"

static bool verbose; /* -v: libbpf's own messages too */

void np_session_set_verbose(bool v) {
    verbose = v;
}

/* ---- targets ---------------------------------------------------------- */

struct np_target *np_session_find_target(void *ctx, pid_t pid) {
    struct np_session *s = ctx;
    for (size_t i = 0; i < s->ntargets; i++)
        if (s->targets[i]->pid == pid)
            return s->targets[i];
    return NULL;
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

int np_session_add_target(struct np_session *s, pid_t pid, struct np_target **out) {
    struct np_target *t = NULL;
    int err = np_target_new(pid, &t);
    if (err)
        return err;
    struct np_target **targets = realloc(s->targets, (s->ntargets + 1) * sizeof(*targets));
    if (!targets) {
        np_target_free(t);
        return -ENOMEM;
    }
    s->targets = targets;
    t->kernels = np_kernel_names_new();
    err = t->kernels ? 0 : -ENOMEM;
    if (!err && t->pidfd >= 0)
        err = np_session_watch(s->epfd, t->pidfd, NP_TAG_TARGET + (uint64_t)pid);
    if (err) {
        np_target_free(t);
        return err;
    }
    s->targets[s->ntargets++] = t;
    *out = t;
    return 0;
}

/* The symbolizer (and the unwinder that uses its modules) of a target,
 * refreshed now - while the process surely lives - when it exists. */
int np_session_ensure_symbolizer(struct np_target *t) {
    if (t->sym)
        return np_symbolizer_refresh(t->sym);
    int err = np_symbolizer_new(t->pid, &t->sym);
    if (!err && !(t->unwinder = np_unwinder_new(t->sym)))
        err = -ENOMEM;
    return err;
}

/* Hands a Python target's layout to the BPF frame walker and creates the
 * reader of its code objects; once per process, after the runtime is found. */
static void enable_python(struct np_session *s, struct np_target *t) {
    if (!t->python.found || t->python_walked || s->opt.python == NP_PYTHON_OFF)
        return;
    const struct np_python_layout *l = &t->python.layout;
    if (!l->walkable) {
        if (!t->python_refused)
            np_warn("pid %d (%s): %s", t->pid, t->comm, l->why_not);
        t->python_refused = true;
        return;
    }
    struct np_py_cfg cfg = l->bpf;
    cfg.max_frames = (__u32)s->opt.python_depth;
    cfg.hold = t->hold_loads;
    __u32 key = (__u32)t->pid;
    int err =
        bpf_map__update_elem(s->skel->maps.py_procs, &key, sizeof(key), &cfg, sizeof(cfg), BPF_ANY);
    if (!err && !(t->pycode = np_pycode_new(t->pid, l)))
        err = -ENOMEM;
    if (err) {
        np_warn("pid %d (%s): no Python frames: %s", t->pid, t->comm, strerror(-err));
        return;
    }
    t->python_walked = true;
    np_info("pid %d (%s): Python %u.%u frames (offsets from %s)", t->pid, t->comm, t->python.major,
            t->python.minor, l->from_debug_offsets ? "its _Py_DebugOffsets" : "the built-in table");
}

void np_session_detect_python(struct np_session *s, struct np_target *t) {
    np_target_detect_python(t);
    enable_python(s, t);
}

/* A target mapped new code: refresh its symbols and probe what is new. */
void np_session_on_new_mapping(void *ctx, struct np_target *t, uint64_t ts_ns) {
    struct np_session *s = ctx;
    if (t->exited)
        return;
    /* Probes first: the program runs on while we work, and its first
     * launch may come within milliseconds of the dlopen. Symbols after:
     * records are read in order, so the refresh still comes before the
     * records that need it. */
    int n = np_attach_from_maps(&s->attacher, t, ts_ns);
    if (!t->sym) /* the first load of a -- CMD child: it has exec'd since we forked it */
        np_target_refresh_identity(t);
    np_session_detect_python(s, t);
    np_session_ensure_symbolizer(t);
    np_target_forget_stacks(t); /* addresses may name other functions now */
    if (t->hold_loads)
        np_continue_stopped(t->pid, 20); /* held at the load by BPF: probes are in place */
    if (n > 0)
        np_info("pid %d (%s): %d more probes attached after a library was loaded", t->pid, t->comm,
                n);
    else if (n < 0 && n != -ESRCH)
        np_warn("pid %d: cannot attach to new libraries: %s", t->pid, strerror(-n));
}

/* ---- GPU records ---------------------------------------------------------- */

#define GPU_LINGER_NS 300000000ull /* a launch's records stop coming: it retires */
#define GPU_MAX_WAITING 200000     /* launches waiting for GPU records, at most */
#define GPU_FINAL_WAIT_MS 500      /* at the end: the last flush of live targets */

static void gpu_retire(void *ctx, const struct np_gpu_launch *l, enum np_gpu_status status) {
    struct np_session *s = ctx;
    struct np_output *out = l->owner ? l->owner : s->out;
    if (out)
        np_output_gpu_launch(out, l, status);
    if (s->on_gpu_retired)
        s->on_gpu_retired(s, l->owner);
    if (!l->tag || !l->nrecords)
        return;
    struct np_nccl_comm_stats *c = np_nccl_comms_get(&s->ingest.nccl_comms, l->pid, l->tag, NULL);
    for (uint32_t i = 0; c && i < l->nrecords; i++) {
        const struct np_gpu_record *r = l->records[i];
        if (r->end_ns > r->start_ns)
            c->gpu_ns += r->end_ns - r->start_ns;
        c->gpu_records++;
    }
}

static void gpu_unmatched(void *ctx, uint32_t pid, const struct np_gpu_record *r) {
    struct np_session *s = ctx;
    struct np_output *out = s->out;
    if (!out && s->ingest.output_for) { /* the daemon: the process's current output set */
        struct np_target *t = np_session_find_target(s, (pid_t)pid);
        out = t ? s->ingest.output_for(s->ingest.ctx, t) : NULL;
    }
    if (out)
        np_output_gpu_unmatched(out, r);
}

static bool gpu_is_traced(void *ctx, pid_t pid) {
    struct np_target *t = np_session_find_target(ctx, pid);
    return t && !t->exited;
}

static void gpu_on_hello(void *ctx, pid_t pid, const struct np_wire_hello *h) {
    struct np_session *s = ctx;
    struct np_target *t = np_session_find_target(s, pid);
    if (!t)
        return;
    t->gpu_hello = true;
    t->gpu_status = h->status;
    /* A time namespace shifts the target's CLOCK_MONOTONIC: its GPU times
     * are then not on the clock of its launches. Said, not corrected. */
    int64_t offset = (int64_t)(h->clock_mono_ns - np_monotonic_ns());
    if (offset > 1000000000ll || offset < -1000000000ll) {
        t->gpu_clock_offset_ns = offset;
        np_warn("pid %d (%s): its CLOCK_MONOTONIC is %.3f s off ours (a time namespace?): its "
                "GPU start/end times are shifted by that much",
                t->pid, t->comm, (double)offset / 1e9);
    }
    snprintf(t->gpu_message, sizeof(t->gpu_message), "%s", h->message);
    if (h->status == NP_HELLO_ACTIVE) {
        t->gpu_off = false;
        np_info("pid %d (%s): GPU records from %s", t->pid, t->comm, h->message);
        return;
    }
    np_warn("pid %d (%s): no GPU records: %s", t->pid, t->comm, h->message);
    t->gpu_off = true;
    np_gpu_join_finish_pid(s->gpu_join, (uint32_t)pid, NP_GPU_NONE);
}

static void gpu_on_record(void *ctx, pid_t pid, const struct np_gpu_record *r) {
    struct np_session *s = ctx;
    np_gpu_join_record(s->gpu_join, (uint32_t)pid, r, np_monotonic_ns());
}

static void gpu_on_stats(void *ctx, pid_t pid, const struct np_wire_stats *st) {
    struct np_target *t = np_session_find_target(ctx, pid);
    if (t)
        t->gpu_stats = *st;
}

/* The library is gone, but launches it sent records for may still be in
 * the ring buffer: finished once that is read (finish_closed_gpu_clients). */
static void gpu_on_close(void *ctx, pid_t pid) {
    struct np_session *s = ctx;
    pid_t *p = realloc(s->gpu_closed, (s->ngpu_closed + 1) * sizeof(*p));
    if (!p) {
        np_gpu_join_finish_pid(s->gpu_join, (uint32_t)pid, NP_GPU_PENDING);
        return;
    }
    s->gpu_closed = p;
    s->gpu_closed[s->ngpu_closed++] = pid;
}

static void finish_closed_gpu_clients(struct np_session *s) {
    for (size_t i = 0; i < s->ngpu_closed; i++) {
        struct np_target *t = np_session_find_target(s, s->gpu_closed[i]);
        if (t)
            t->gpu_off = true;
        np_gpu_join_finish_pid(s->gpu_join, (uint32_t)s->gpu_closed[i], NP_GPU_PENDING);
    }
    s->ngpu_closed = 0;
}

/* A process maps our library but it never said hello (it sends to another
 * socket, or cannot connect): its launches stop waiting for GPU records. */
#define GPU_HELLO_WAIT_NS 3000000000ull

static void give_up_silent_gpu_clients(struct np_session *s, uint64_t now, bool at_end) {
    for (size_t i = 0; i < s->ntargets; i++) {
        struct np_target *t = s->targets[i];
        if (!t->gpu_marker || t->gpu_hello || t->gpu_off || !t->gpu_first_held_ns ||
            (!at_end && now - t->gpu_first_held_ns < GPU_HELLO_WAIT_NS))
            continue;
        np_warn("pid %d (%s) maps libncclprobe_cupti.so, but it did not connect to %s (is its "
                "NCCLPROBE_CUPTI_SOCKET the same?): launches are written without GPU records",
                t->pid, t->comm, s->opt.cupti_socket);
        t->gpu_off = true;
        snprintf(t->gpu_message, sizeof(t->gpu_message), "did not connect to %s",
                 s->opt.cupti_socket);
        np_gpu_join_finish_pid(s->gpu_join, (uint32_t)t->pid, NP_GPU_NONE);
    }
}

int np_session_setup_gpu(struct np_session *s) {
    if (s->opt.no_gpu)
        return 0;
    struct np_gpu_ops jops = {.ctx = s, .retire = gpu_retire, .unmatched = gpu_unmatched};
    s->gpu_join = np_gpu_join_new(&jops, GPU_LINGER_NS,
                                  (uint64_t)s->opt.gpu_timeout_ms * 1000000ull, GPU_MAX_WAITING);
    if (!s->gpu_join)
        return -ENOMEM;
    struct np_gpu_server_ops sops = {.ctx = s,
                                     .is_traced = gpu_is_traced,
                                     .on_hello = gpu_on_hello,
                                     .on_record = gpu_on_record,
                                     .on_stats = gpu_on_stats,
                                     .on_close = gpu_on_close};
    int err = np_gpu_server_open(s->opt.cupti_socket, &sops, &s->gpu_server);
    if (err == -EEXIST) /* something that is not a socket is there: said, and left alone */
        return err;
    if (err) {
        np_warn("cannot listen for GPU records on %s: %s%s", s->opt.cupti_socket, strerror(-err),
                err == -EADDRINUSE ? " (another ncclprobe listens there; use --cupti-socket)" : "");
        s->gpu_server = NULL;
        return 0; /* stacks are still recorded */
    }
    s->ingest.gpu = s->gpu_join;
    return np_session_watch(s->epfd, np_gpu_server_fd(s->gpu_server), NP_TAG_GPU);
}

/* ---- BPF -------------------------------------------------------------- */

/* libbpf's warnings (a whole verifier log on a load failure) only with -v:
 * our own error line says what failed. */
static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap) {
    if (level == LIBBPF_DEBUG || !verbose)
        return 0;
    return vfprintf(stderr, fmt, ap);
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
    s->skel->rodata->wakeup_bytes = (__u64)s->opt.wakeup_kb * 1024;
    s->skel->rodata->stack_bytes = s->opt.unwind == UNWIND_FP ? 0 : (__u32)s->opt.stack_bytes;
    int ncpus = libbpf_num_possible_cpus();
    if (ncpus > 0)
        bpf_map__set_max_entries(s->skel->maps.launch_scratch, (__u32)ncpus);
    bpf_map__set_max_entries(s->skel->maps.events, (__u32)(s->opt.ring_mb << 20));
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

/* The last GPU records of targets still running (their libraries flush
 * every 100 ms), then every launch still waiting is written. */
void np_session_finish_gpu(struct np_session *s) {
    if (!s->gpu_join)
        return;
    uint64_t until = np_monotonic_ns() + GPU_FINAL_WAIT_MS * 1000000ull;
    while (s->gpu_server && np_gpu_join_waiting(s->gpu_join) > 0 && np_monotonic_ns() < until &&
           !np_session_all_targets_gone(s)) {
        usleep(20000);
        np_gpu_server_poll(s->gpu_server);
        finish_closed_gpu_clients(s);
        np_gpu_join_tick(s->gpu_join, np_monotonic_ns());
    }
    if (s->gpu_server)
        np_gpu_server_poll(s->gpu_server);
    finish_closed_gpu_clients(s);
    give_up_silent_gpu_clients(s, np_monotonic_ns(), true);
    np_gpu_join_finish_all(s->gpu_join);
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

void np_session_stop_and_drain(struct np_session *s) {
    s->skel->bss->stopped = 1;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    s->ingest.budget = 0;
    for (int i = 0; i < 200; i++) {
        ring_buffer__consume(s->rb);
        if (drained(s))
            return;
        usleep(1000);
    }
    np_warn("%llu records still in flight after stopping",
            (unsigned long long)(records_sent_by_bpf(s) - np_session_records_received(s)));
}

uint64_t np_session_probe_counter(struct bpf_map *map, uint32_t id) {
    int ncpus = libbpf_num_possible_cpus();
    uint64_t n = 0;
    if (ncpus > 0)
        sum_percpu(bpf_map__fd(map), id, ncpus, &n);
    return n;
}

void np_session_gpu_tick(struct np_session *s, bool ring_read) {
    if (!s->gpu_join)
        return;
    if (ring_read) /* the ring is read: a closed library's launches are all in */
        finish_closed_gpu_clients(s);
    np_gpu_join_tick(s->gpu_join, np_monotonic_ns());
    give_up_silent_gpu_clients(s, np_monotonic_ns(), false);
    if (s->gpu_server)
        np_gpu_server_tick(s->gpu_server, np_monotonic_ns());
}

bool np_session_all_targets_gone(const struct np_session *s) {
    for (size_t i = 0; i < s->ntargets; i++)
        if (!s->targets[i]->exited)
            return false;
    return s->ntargets > 0;
}

void np_session_target_exited(struct np_session *s, struct np_target *t) {
    if (t->exited)
        return;
    t->exited = true;
    if (t->pidfd >= 0)
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, t->pidfd, NULL);
    if (t->python_walked) { /* the pid may be reused by a process that is not this one */
        __u32 key = (__u32)t->pid;
        bpf_map__delete_elem(s->skel->maps.py_procs, &key, sizeof(key), 0);
    }
    np_debug("process %d (%s) exited", t->pid, t->comm);
}

void np_session_remove_target(struct np_session *s, struct np_target *t) {
    for (size_t i = 0; i < s->ntargets; i++) {
        if (s->targets[i] != t)
            continue;
        np_session_target_exited(s, t);
        np_target_free(t);
        s->targets[i] = s->targets[--s->ntargets];
        return;
    }
}

void np_session_free(struct np_session *s) {
    if (s->skel)
        np_attacher_destroy(&s->attacher);
    ring_buffer__free(s->rb);
    s->rb = NULL;
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
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->sigfd >= 0)
        close(s->sigfd);
    s->epfd = s->sigfd = -1;
}
