/* record.c - the record session: options, BPF setup, targets, the event
 * loop and the final flush. Everything a recording owns hangs off struct
 * session and is released in session_destroy on every path. */
#define _GNU_SOURCE
#include "cli/record.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attach/attach.h"
#include "attach/target.h"
#include "attach/uprobe_multi.h"
#include "cli/child.h"
#include "cli/options.h"
#include "cli/preflight.h"
#include "correlate/gpu.h"
#include "correlate/kernels.h"
#include "ingest/gpu_socket.h"
#include "ingest/ingest.h"
#include "lib/util.h"
#include "ncclprobe.skel.h"
#include "symbolize/pycode.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"
#include "writers/output.h"
#include "writers/summary.h"

#define EXIT_USAGE 2
#define POLL_MS 100
#define CONSUME_BUDGET 65536 /* records per slice of the event loop */

static bool verbose; /* -v: libbpf's own messages too */

struct session {
    struct options opt;
    struct ncclprobe_bpf *skel;
    struct ring_buffer *rb;
    struct np_attacher attacher;
    struct np_target **targets;
    size_t ntargets;
    struct np_output *out;
    struct np_ingest ingest;
    struct np_child child;
    bool have_child;
    int epfd, sigfd;
    uint64_t start_ns, start_realtime_ns;
    const char *stop_reason;
    bool backlog;                     /* the last slice stopped with records still queued */
    struct np_gpu_server *gpu_server; /* the CUPTI library's socket; NULL: none */
    struct np_gpu_join *gpu_join;
    pid_t *gpu_closed; /* processes whose library disconnected, not yet finished */
    size_t ngpu_closed;
};

/* ---- targets ---------------------------------------------------------- */

static struct np_target *find_target(void *ctx, pid_t pid) {
    struct session *s = ctx;
    for (size_t i = 0; i < s->ntargets; i++)
        if (s->targets[i]->pid == pid)
            return s->targets[i];
    return NULL;
}

static int add_epoll_fd(int epfd, int fd, uint64_t tag) {
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tag};
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

/* epoll tags: 0 ring buffer, 1 signals, 2 GPU socket, 3+i target i exited */
enum { TAG_RING = 0, TAG_SIGNAL = 1, TAG_GPU = 2, TAG_TARGET = 3 };

static int add_target(struct session *s, pid_t pid, struct np_target **out) {
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
    s->targets[s->ntargets++] = t;
    t->kernels = np_kernel_names_new();
    if (!t->kernels)
        return -ENOMEM;
    if (t->pidfd >= 0) {
        err = add_epoll_fd(s->epfd, t->pidfd, TAG_TARGET + s->ntargets - 1);
        if (err)
            return err;
    }
    *out = t;
    return 0;
}

/* The symbolizer (and the unwinder that uses its modules) of a target,
 * refreshed now - while the process surely lives - when it exists. */
static int ensure_symbolizer(struct np_target *t) {
    if (t->sym)
        return np_symbolizer_refresh(t->sym);
    int err = np_symbolizer_new(t->pid, &t->sym);
    if (!err && !(t->unwinder = np_unwinder_new(t->sym)))
        err = -ENOMEM;
    return err;
}

/* Hands a Python target's layout to the BPF frame walker and creates the
 * reader of its code objects; once per process, after the runtime is found. */
static void enable_python(struct session *s, struct np_target *t) {
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

static void detect_python(struct session *s, struct np_target *t) {
    np_target_detect_python(t);
    enable_python(s, t);
}

/* A target mapped new code: refresh its symbols and probe what is new. */
static void on_new_mapping(void *ctx, struct np_target *t, uint64_t ts_ns) {
    struct session *s = ctx;
    if (t->exited)
        return;
    /* Probes first: the program runs on while we work, and its first
     * launch may come within milliseconds of the dlopen. Symbols after:
     * records are read in order, so the refresh still comes before the
     * records that need it. */
    int n = np_attach_from_maps(&s->attacher, t, ts_ns);
    if (!t->sym) /* the first load of a -- CMD child: it has exec'd since we forked it */
        np_target_refresh_identity(t);
    detect_python(s, t);
    ensure_symbolizer(t);
    np_target_forget_stacks(t); /* addresses may name other functions now */
    if (t->hold_loads)
        np_continue_stopped(t->pid, 20); /* held at the load by BPF: probes are in place */
    if (n > 0)
        np_info("pid %d (%s): %d more probes attached after a library was loaded", t->pid, t->comm,
                n);
    else if (n < 0 && n != -ESRCH)
        np_warn("pid %d: cannot attach to new libraries: %s", t->pid, strerror(-n));
}

static int attach_pid(struct session *s, pid_t pid) {
    struct np_target *t;
    if (pid == getpid()) {
        np_err("cannot record ncclprobe itself (pid %d)", pid);
        return -EINVAL;
    }
    int tgid = np_process_tgid(pid);
    if (tgid > 0 && tgid != pid) {
        np_err("%d is a thread of process %d: give the process id (--pid %d)", pid, tgid, tgid);
        return -EINVAL;
    }
    int err = add_target(s, pid, &t);
    if (err == -ESRCH) {
        np_err("no such process: %d", pid);
        return err;
    }
    if (!err)
        err = ensure_symbolizer(t);
    if (err) {
        np_err("cannot read process %d: %s", pid, strerror(-err));
        return err;
    }
    int n = np_attach_from_maps(&s->attacher, t, 0);
    if (n < 0) {
        np_err("cannot attach to process %d: %s", pid, strerror(-n));
        return n;
    }
    t->attached = true;
    detect_python(s, t);
    if (np_target_probe_count(t) == 0) {
        if (s->opt.no_wait) {
            np_err("process %d (%s) has no CUDA or NCCL library loaded", pid, t->comm);
            return -ENOENT;
        }
        np_info("process %d (%s) has no CUDA or NCCL library loaded yet; waiting for one "
                "(--no-wait to fail instead)",
                pid, t->comm);
        return 0;
    }
    np_info("recording process %d (%s): %d probes in %d libraries", pid, t->comm,
            np_target_probe_count(t), np_target_cuda_library_count(t));
    return 0;
}

/* ---- GPU records ---------------------------------------------------------- */

#define GPU_LINGER_NS 300000000ull /* a launch's records stop coming: it retires */
#define GPU_MAX_WAITING 200000     /* launches waiting for GPU records, at most */
#define GPU_FINAL_WAIT_MS 500      /* at the end: the last flush of live targets */

static void gpu_retire(void *ctx, const struct np_gpu_launch *l, enum np_gpu_status status) {
    struct session *s = ctx;
    np_output_gpu_launch(s->out, l, status);
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
    struct session *s = ctx;
    (void)pid;
    np_output_gpu_unmatched(s->out, r);
}

static bool gpu_is_traced(void *ctx, pid_t pid) {
    struct np_target *t = find_target(ctx, pid);
    return t && !t->exited;
}

static void gpu_on_hello(void *ctx, pid_t pid, const struct np_wire_hello *h) {
    struct session *s = ctx;
    struct np_target *t = find_target(s, pid);
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
    struct session *s = ctx;
    np_gpu_join_record(s->gpu_join, (uint32_t)pid, r, np_monotonic_ns());
}

static void gpu_on_stats(void *ctx, pid_t pid, const struct np_wire_stats *st) {
    struct np_target *t = find_target(ctx, pid);
    if (t)
        t->gpu_stats = *st;
}

/* The library is gone, but launches it sent records for may still be in
 * the ring buffer: finished once that is read (finish_closed_gpu_clients). */
static void gpu_on_close(void *ctx, pid_t pid) {
    struct session *s = ctx;
    pid_t *p = realloc(s->gpu_closed, (s->ngpu_closed + 1) * sizeof(*p));
    if (!p) {
        np_gpu_join_finish_pid(s->gpu_join, (uint32_t)pid, NP_GPU_PENDING);
        return;
    }
    s->gpu_closed = p;
    s->gpu_closed[s->ngpu_closed++] = pid;
}

static void finish_closed_gpu_clients(struct session *s) {
    for (size_t i = 0; i < s->ngpu_closed; i++) {
        struct np_target *t = find_target(s, s->gpu_closed[i]);
        if (t)
            t->gpu_off = true;
        np_gpu_join_finish_pid(s->gpu_join, (uint32_t)s->gpu_closed[i], NP_GPU_PENDING);
    }
    s->ngpu_closed = 0;
}

/* A process maps our library but it never said hello (it sends to another
 * socket, or cannot connect): its launches stop waiting for GPU records. */
#define GPU_HELLO_WAIT_NS 3000000000ull

static void give_up_silent_gpu_clients(struct session *s, uint64_t now, bool at_end) {
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

static int setup_gpu(struct session *s) {
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
    if (err) {
        np_warn("cannot listen for GPU records on %s: %s%s", s->opt.cupti_socket, strerror(-err),
                err == -EADDRINUSE ? " (another ncclprobe listens there; use --cupti-socket)" : "");
        s->gpu_server = NULL;
        return 0; /* stacks are still recorded */
    }
    s->ingest.gpu = s->gpu_join;
    return add_epoll_fd(s->epfd, np_gpu_server_fd(s->gpu_server), TAG_GPU);
}

/* --cupti: the command runs with our library injected and told where we
 * listen. It is found beside the ncclprobe binary or in ../lib/ncclprobe. */
static int inject_cupti(struct session *s) {
    char exe[4096], lib[4200];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return -errno;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    static const char *const rel[] = {"", "/../lib/ncclprobe"};
    for (size_t i = 0; i < NP_ARRAY_SIZE(rel); i++) {
        snprintf(lib, sizeof(lib), "%s%s/libncclprobe_cupti.so", exe, rel[i]);
        if (access(lib, R_OK) == 0) {
            setenv("CUDA_INJECTION64_PATH", lib, 1);
            setenv(NP_WIRE_SOCKET_ENV, s->opt.cupti_socket, 1);
            return 0;
        }
    }
    np_err("--cupti: libncclprobe_cupti.so not found beside %s", exe);
    return -ENOENT;
}

static int start_command(struct session *s) {
    int err = s->opt.inject_cupti ? inject_cupti(s) : 0;
    if (err)
        return err;
    if (s->gpu_server) /* a library injected some other way finds us too */
        setenv(NP_WIRE_SOCKET_ENV, s->opt.cupti_socket, 1);
    err = np_child_spawn(s->opt.command, &s->child);
    if (err)
        return err;
    s->have_child = true;
    struct np_target *t;
    err = add_target(s, s->child.pid, &t);
    if (err)
        return err;
    t->hold_loads = true;
    /* Probe the executable and every library the loader will map before
     * the program runs: its first launch is captured. */
    err = np_attach_file(&s->attacher, t, s->child.path);
    if (err > 0) /* probes in the executable itself (static cudart, static CPython) */
        err = 0;
    char **libs = NULL;
    int n = np_child_needed_libraries(s->child.path, &libs);
    for (int i = 0; !err && i < n; i++) {
        int r = np_attach_file(&s->attacher, t, libs[i]);
        if (r < 0)
            np_debug("cannot pre-attach %s: %s", libs[i], strerror(-r));
    }
    np_free_string_list(libs, n > 0 ? n : 0);
    if (err < 0) {
        np_err("cannot attach to %s: %s", s->child.path, strerror(-err));
        return err;
    }
    t->attached = true;
    int terr = np_child_trace_exit(&s->child);
    if (terr)
        np_debug("cannot hold %s at its exit (%s): a very short run may lose its symbols",
                 s->child.path, strerror(-terr));
    err = np_child_release(&s->child);
    if (err)
        return err;
    np_info("started %s (pid %d): %d probes attached before exec", s->child.path, s->child.pid,
            np_target_probe_count(t));
    return 0;
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
static int load_bpf(struct session *s, bool with_multi) {
    char btf[4096];
    LIBBPF_OPTS(bpf_object_open_opts, open_opts);
    if (strcmp(np_btf_path(btf, sizeof(btf)), "/sys/kernel/btf/vmlinux") != 0)
        open_opts.btf_custom_path = btf;

    s->skel = ncclprobe_bpf__open_opts(&open_opts);
    if (!s->skel) {
        np_err("cannot open the BPF object: %s", strerror(errno));
        return -errno;
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

static int setup_bpf(struct session *s) {
    libbpf_set_print(libbpf_print);
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
    return add_epoll_fd(s->epfd, ring_buffer__epoll_fd(s->rb), TAG_RING);
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

/* ---- the loop ----------------------------------------------------------- */

static bool all_targets_gone(struct session *s) {
    for (size_t i = 0; i < s->ntargets; i++)
        if (!s->targets[i]->exited)
            return false;
    return s->ntargets > 0;
}

static void on_target_exit(struct session *s, size_t index) {
    struct np_target *t = s->targets[index];
    if (t->exited)
        return;
    t->exited = true;
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, t->pidfd, NULL);
    if (t->python_walked) { /* the pid may be reused by a process that is not this one */
        __u32 key = (__u32)t->pid;
        bpf_map__delete_elem(s->skel->maps.py_procs, &key, sizeof(key), 0);
    }
    if (s->have_child && t->pid == s->child.pid && !s->child.reaped) {
        waitpid(t->pid, &s->child.status, 0);
        s->child.reaped = true;
    }
    np_debug("process %d (%s) exited", t->pid, t->comm);
}

/* SIGCHLD from the command we started. Held at its exit, its memory is
 * still mapped: read everything it sent (creating its symbolizer if it
 * never got one) before letting it go. */
static void on_child_event(struct session *s) {
    if (!s->have_child || np_child_poll(&s->child) != NP_CHILD_AT_EXIT)
        return;
    struct np_target *t = find_target(s, s->child.pid);
    if (t && !t->sym)
        on_new_mapping(s, t, 0);
    s->ingest.budget = 0;
    ring_buffer__consume(s->rb);
    np_child_let_exit(&s->child);
}

static int run_loop(struct session *s) {
    uint64_t deadline =
        s->opt.duration_s > 0 ? s->start_ns + (uint64_t)(s->opt.duration_s * 1e9) : UINT64_MAX;
    struct epoll_event evs[16];
    uint64_t last_flush = np_monotonic_ns();

    for (;;) {
        int timeout = POLL_MS;
        uint64_t now = np_monotonic_ns();
        if (deadline != UINT64_MAX) {
            if (now >= deadline) {
                s->stop_reason = "duration";
                return 0;
            }
            if (deadline - now < (uint64_t)POLL_MS * 1000000)
                timeout = (int)((deadline - now) / 1000000) + 1;
        }
        int n = epoll_wait(s->epfd, evs, 16, s->backlog ? 0 : timeout);
        if (n < 0 && errno != EINTR)
            return -errno;
        /* Drain first (records of a process that just exited are still
         * queued), but in bounded slices so signals and timers stay live. */
        s->ingest.budget = CONSUME_BUDGET;
        int err = ring_buffer__consume(s->rb);
        s->backlog = err == NP_INGEST_YIELD;
        if (err < 0 && err != NP_INGEST_YIELD && err != -EINTR)
            np_warn("reading the ring buffer: %s", strerror(-err));
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;
            if (tag == TAG_SIGNAL) {
                /* All pending signals: a SIGCHLD queued behind a SIGINT still
                 * gets its child serviced. */
                struct signalfd_siginfo si;
                const char *stop = NULL;
                while (read(s->sigfd, &si, sizeof(si)) == sizeof(si)) {
                    if (si.ssi_signo == SIGCHLD)
                        on_child_event(s);
                    else
                        stop = si.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM";
                }
                if (stop) {
                    s->stop_reason = stop;
                    return 0;
                }
            } else if (tag == TAG_GPU) {
                np_gpu_server_poll(s->gpu_server);
            } else if (tag >= TAG_TARGET && tag - TAG_TARGET < s->ntargets) {
                on_target_exit(s, (size_t)(tag - TAG_TARGET));
            }
        }
        if (s->gpu_join) {
            if (!s->backlog) /* the ring is read: a closed library's launches are all in */
                finish_closed_gpu_clients(s);
            np_gpu_join_tick(s->gpu_join, np_monotonic_ns());
            give_up_silent_gpu_clients(s, np_monotonic_ns(), false);
            if (s->gpu_server)
                np_gpu_server_tick(s->gpu_server, np_monotonic_ns());
        }
        if (all_targets_gone(s)) {
            s->stop_reason = "targets exited";
            return 0;
        }
        /* Once a second the files get what was read: `tail -f` works, and
         * a kill -9 loses at most a second of output. */
        if (np_monotonic_ns() - last_flush >= 1000000000ull) {
            np_output_flush(s->out);
            last_flush = np_monotonic_ns();
        }
    }
}

/* ---- results -------------------------------------------------------------- */

static uint64_t counter(struct session *s, __u32 which) {
    int ncpus = libbpf_num_possible_cpus();
    uint64_t n = 0;
    if (ncpus > 0)
        sum_percpu(bpf_map__fd(s->skel->maps.counters), which, ncpus, &n);
    return n;
}

static uint64_t records_sent_by_bpf(struct session *s) {
    return counter(s, NP_CNT_LAUNCH_SENT) + counter(s, NP_CNT_HANDLE_SENT) +
           counter(s, NP_CNT_MAP_SENT) + counter(s, NP_CNT_MARKER_SENT) +
           counter(s, NP_CNT_NCCL_PLAN_SENT);
}

static uint64_t records_received(const struct session *s) {
    const struct np_ingest_stats *st = &s->ingest.stats;
    return st->launch_events + st->handle_events + st->map_events + st->marker_events +
           st->nccl_plan_events + st->malformed + st->unknown_source;
}

/* The last GPU records of targets still running (their libraries flush
 * every 100 ms), then every launch still waiting is written. */
static void finish_gpu(struct session *s) {
    if (!s->gpu_join)
        return;
    uint64_t until = np_monotonic_ns() + GPU_FINAL_WAIT_MS * 1000000ull;
    while (s->gpu_server && np_gpu_join_waiting(s->gpu_join) > 0 && np_monotonic_ns() < until &&
           !all_targets_gone(s)) {
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
static bool drained(struct session *s) {
    uint64_t hits = counter(s, NP_CNT_LAUNCH_HITS);
    uint64_t done = counter(s, NP_CNT_LAUNCH_SENT) + counter(s, NP_CNT_LAUNCH_DROPPED);
    return hits == done && records_received(s) >= records_sent_by_bpf(s);
}

static void stop_and_drain(struct session *s) {
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
            (unsigned long long)(records_sent_by_bpf(s) - records_received(s)));
}

static int write_summary(struct session *s) {
    int ncpus = libbpf_num_possible_cpus();
    size_t nprobes = s->attacher.nsites + 1;
    uint64_t *hits = calloc(nprobes, sizeof(*hits));
    uint64_t *drops = calloc(nprobes, sizeof(*drops));
    uint64_t counters[NP_CNT_MAX] = {0};
    int err = (!hits || !drops || ncpus <= 0) ? -ENOMEM : 0;

    for (size_t id = 1; !err && id < nprobes; id++) {
        sum_percpu(bpf_map__fd(s->skel->maps.probe_hits), (__u32)id, ncpus, &hits[id]);
        sum_percpu(bpf_map__fd(s->skel->maps.probe_drops), (__u32)id, ncpus, &drops[id]);
    }
    for (__u32 c = 0; !err && c < NP_CNT_MAX; c++)
        counters[c] = counter(s, c);

    np_ingest_settle(&s->ingest);
    if (!err) {
        struct np_summary sum = {
            .stop_reason = s->stop_reason ? s->stop_reason : "error",
            .start_realtime_ns = s->start_realtime_ns,
            .duration_s = (double)(np_monotonic_ns() - s->start_ns) / 1e9,
            .targets = s->targets,
            .ntargets = s->ntargets,
            .attacher = &s->attacher,
            .probe_hits = hits,
            .probe_drops = drops,
            .nprobes = nprobes,
            .counters = counters,
            .ingest = &s->ingest.stats,
            .unwind = s->opt.unwind == UNWIND_FP ? NULL : &s->ingest.unwind,
            .unwind_mode = s->opt.unwind == UNWIND_FP      ? "fp"
                           : s->opt.unwind == UNWIND_DWARF ? "dwarf"
                                                           : "auto",
            .stack_bytes = s->opt.unwind == UNWIND_FP ? 0 : (uint32_t)s->opt.stack_bytes,
            .out = s->out,
            .gpu_server = s->gpu_server ? np_gpu_server_stats(s->gpu_server) : NULL,
            .gpu_join = s->gpu_join ? np_gpu_join_counters(s->gpu_join) : NULL,
            .gpu_socket = s->gpu_server ? s->opt.cupti_socket : NULL,
            .nccl_comms = &s->ingest.nccl_comms,
        };
        char path[4200];
        snprintf(path, sizeof(path), "%s/summary.json", np_output_dir(s->out));
        err = np_summary_write(path, &sum);
        const struct np_output_totals *ot = np_output_totals(s->out);
        np_info("%llu launches and %llu NCCL calls recorded, %llu events dropped, in %s",
                (unsigned long long)ot->launches, (unsigned long long)ot->nccl_ops,
                (unsigned long long)counters[NP_CNT_LAUNCH_DROPPED], np_output_dir(s->out));
        if (counters[NP_CNT_LAUNCH_DROPPED])
            np_warn("the ring buffer overflowed: raise --ring-buffer-mb or lower --wakeup-kb");
    }
    free(hits);
    free(drops);
    return err;
}

static void session_destroy(struct session *s) {
    if (s->have_child && s->child.release_fd >= 0)
        np_child_abort(&s->child);
    np_child_free(&s->child);
    if (s->skel)
        np_attacher_destroy(&s->attacher);
    ring_buffer__free(s->rb);
    ncclprobe_bpf__destroy(s->skel);
    np_gpu_server_close(s->gpu_server);
    np_gpu_join_free(s->gpu_join);
    free(s->gpu_closed);
    for (size_t i = 0; i < s->ntargets; i++)
        np_target_free(s->targets[i]);
    free(s->targets);
    if (s->ingest.raw_dump)
        fclose(s->ingest.raw_dump);
    np_ingest_free(&s->ingest);
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->sigfd >= 0)
        close(s->sigfd);
    free(s->opt.pids);
    free(s->opt.output_dir);
}

static int setup_signals(struct session *s) {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    s->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (s->sigfd < 0)
        return -errno;
    return add_epoll_fd(s->epfd, s->sigfd, TAG_SIGNAL);
}

int np_cmd_record(int argc, char **argv) {
    struct session s = {.epfd = -1, .sigfd = -1, .child = {.release_fd = -1}};
    int err = np_record_parse_options(argc, argv, &s.opt);
    verbose = s.opt.verbose;
    if (err) {
        session_destroy(&s);
        return EXIT_USAGE;
    }
    err = np_preflight();
    if (err)
        goto out;
    if (!s.opt.output_dir)
        s.opt.output_dir = np_default_output_dir();
    err = s.opt.output_dir ? np_output_open(s.opt.output_dir, &s.out) : -ENOMEM;
    if (err) {
        np_err("cannot write the output directory %s: %s", s.opt.output_dir ? s.opt.output_dir : "",
               strerror(-err));
        goto out;
    }
    s.epfd = epoll_create1(EPOLL_CLOEXEC);
    err = s.epfd < 0 ? -errno : setup_signals(&s);
    if (!err)
        err = setup_bpf(&s);
    if (err)
        goto out;
    s.ingest = (struct np_ingest){
        .attacher = &s.attacher,
        .out = s.out,
        .find_target = find_target,
        .on_new_mapping = on_new_mapping,
        .ctx = &s,
        .fp_fallback = s.opt.unwind == UNWIND_AUTO,
        .inline_folded = s.opt.inline_frames,
        .python_mode = s.opt.python,
    };
    err = setup_gpu(&s);
    if (err)
        goto out;
    if (s.opt.raw_dump && !(s.ingest.raw_dump = fopen(s.opt.raw_dump, "we"))) {
        np_err("cannot write --raw-dump %s: %s", s.opt.raw_dump, strerror(errno));
        err = -errno;
        goto out;
    }
    s.start_ns = np_monotonic_ns();
    s.start_realtime_ns = np_realtime_ns();
    for (size_t i = 0; !err && i < s.opt.npids; i++)
        err = attach_pid(&s, s.opt.pids[i]);
    if (!err && s.opt.command)
        err = start_command(&s);
    if (!err)
        err = run_loop(&s);
    if (s.skel && s.rb)
        stop_and_drain(&s);
    if (s.rb)
        on_child_event(&s); /* a child held at its exit meanwhile: read it, let it go */
    if (s.out)
        finish_gpu(&s);
    if (s.have_child && !s.child.reaped)
        kill(s.child.pid, SIGCONT); /* never leave it held at a library load */

out:
    if (s.out) {
        if (s.skel && s.rb) {
            int serr = write_summary(&s);
            if (serr)
                np_err("cannot write summary.json: %s", strerror(-serr));
        }
        int cerr = np_output_close(s.out);
        if (cerr && !err) {
            np_err("writing the outputs failed: %s", strerror(-cerr));
            err = cerr;
        }
    }
    if (s.have_child && s.child.reaped && WIFEXITED(s.child.status) && WEXITSTATUS(s.child.status))
        np_info("%s exited with status %d", s.opt.command[0], WEXITSTATUS(s.child.status));
    session_destroy(&s);
    return err ? 1 : 0;
}
