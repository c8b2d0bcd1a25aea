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
#include "cli/session.h"
#include "correlate/gpu.h"
#include "correlate/kernels.h"
#include "ingest/gpu_socket.h"
#include "ingest/ingest.h"
#include "lib/util.h"
#include "ncclprobe.skel.h"
#include "symbolize/pycode.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"
#include "writers/formats.h"
#include "writers/output.h"
#include "writers/summary.h"

#define EXIT_USAGE 2
#define POLL_MS 100
#define CONSUME_BUDGET 65536 /* records per slice of the event loop */

static int attach_pid(struct np_session *s, pid_t pid) {
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
    int err = np_session_add_target(s, pid, &t);
    if (err == -ESRCH) {
        np_err("no such process: %d", pid);
        return err;
    }
    if (!err)
        err = np_session_ensure_symbolizer(t);
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
    np_session_detect_python(s, t);
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

/* --cupti: the command runs with our library injected and told where we
 * listen. It is found beside the ncclprobe binary or in ../lib/ncclprobe. */
static int inject_cupti(struct np_session *s) {
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

/* Starts the command held before its exec and probes what it will map:
 * its first launch is captured once release_command lets it run. */
static int prepare_command(struct np_session *s) {
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
    err = np_session_add_target(s, s->child.pid, &t);
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
    return 0;
}

static int release_command(struct np_session *s) {
    int err = np_child_release(&s->child);
    if (err)
        return err;
    struct np_target *t = np_session_find_target(s, s->child.pid);
    np_info("started %s (pid %d): %d probes attached before exec", s->child.path, s->child.pid,
            t ? np_target_probe_count(t) : 0);
    return 0;
}

/* ---- the loop ----------------------------------------------------------- */

static void on_target_exit(struct np_session *s, struct np_target *t) {
    if (!t || t->exited)
        return;
    np_session_target_exited(s, t);
    if (s->have_child && t->pid == s->child.pid && !s->child.reaped) {
        waitpid(t->pid, &s->child.status, 0);
        s->child.reaped = true;
    }
}

/* SIGCHLD from the command we started. Held at its exit, its memory is
 * still mapped: read everything it sent (creating its symbolizer if it
 * never got one) before letting it go. */
static void on_child_event(struct np_session *s) {
    if (!s->have_child || np_child_poll(&s->child) != NP_CHILD_AT_EXIT)
        return;
    struct np_target *t = np_session_find_target(s, s->child.pid);
    if (t && !t->sym)
        np_session_on_new_mapping(s, t, 0);
    s->ingest.budget = 0;
    ring_buffer__consume(s->rb);
    np_child_let_exit(&s->child);
}

static int run_loop(struct np_session *s) {
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
            if (tag == NP_TAG_SIGNAL) {
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
            } else if (tag == NP_TAG_GPU) {
                np_gpu_server_poll(s->gpu_server);
            } else if (tag >= NP_TAG_TARGET) {
                on_target_exit(s, np_session_find_target(s, (pid_t)(tag - NP_TAG_TARGET)));
            }
        }
        np_session_gpu_tick(s, !s->backlog);
        if (np_session_all_targets_gone(s)) {
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

static int write_summary(struct np_session *s) {
    int ncpus = libbpf_num_possible_cpus();
    size_t nprobes = s->attacher.nsites + 1;
    uint64_t *hits = calloc(nprobes, sizeof(*hits));
    uint64_t *drops = calloc(nprobes, sizeof(*drops));
    uint64_t counters[NP_CNT_MAX] = {0};
    int err = (!hits || !drops || ncpus <= 0) ? -ENOMEM : 0;

    for (size_t id = 1; !err && id < nprobes; id++) {
        hits[id] = np_session_probe_counter(s->skel->maps.probe_hits, (uint32_t)id);
        drops[id] = np_session_probe_counter(s->skel->maps.probe_drops, (uint32_t)id);
    }
    for (__u32 c = 0; !err && c < NP_CNT_MAX; c++)
        counters[c] = np_session_counter(s, c);

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

static void session_destroy(struct np_session *s) {
    if (s->have_child && s->child.release_fd >= 0)
        np_child_abort(&s->child);
    np_child_free(&s->child);
    np_session_free(s);
    free(s->opt.pids);
    free(s->opt.output_dir);
}

/* The output directory is made once the targets are in hand, so a run that
 * fails before tracing starts leaves none behind. This says early whether it
 * can be made at all, before anything is attached or started: the missing
 * directories are made, then removed again (what the file system refuses,
 * /proc or a read-only mount, is only known by trying). */
static int check_output_dir(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    size_t made[512], nmade = 0; /* ends of the path prefixes we created */
    int err = 0;
    size_t len = strlen(path);
    for (size_t end = 1; end <= len && !err; end++) {
        if (end < len && path[end] != '/')
            continue;
        char saved = path[end];
        path[end] = '\0';
        struct stat st;
        if (stat(path, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                err = -ENOTDIR;
            else if (end == len && access(path, W_OK | X_OK) < 0)
                err = -errno;
        } else if (errno != ENOENT) {
            err = -errno;
        } else if (nmade == NP_ARRAY_SIZE(made)) {
            err = -ENAMETOOLONG;
        } else if (mkdir(path, 0755) < 0) {
            err = -errno;
        } else {
            made[nmade++] = end;
        }
        path[end] = saved;
    }
    while (nmade > 0) { /* innermost first */
        path[made[--nmade]] = '\0';
        rmdir(path);
    }
    return err;
}

static int open_output(struct np_session *s) {
    int err = np_output_open(s->opt.output_dir, &s->out);
    if (err) {
        np_err("cannot write the output directory %s: %s", s->opt.output_dir, strerror(-err));
        return err;
    }
    s->ingest.out = s->out;
    if (s->opt.raw_dump && !(s->ingest.raw_dump = fopen(s->opt.raw_dump, "we"))) {
        err = -errno;
        np_err("cannot write --raw-dump %s: %s", s->opt.raw_dump, strerror(-err));
    }
    return err;
}

/* Ends the recording's files: the per-launch streams, the aggregates, then
 * summary.json (which reports how the streams ended). */
static int finish_output(struct np_session *s, int err) {
    int ferr = np_output_finish(s->out);
    if (s->skel && s->rb) {
        int serr = write_summary(s);
        if (serr)
            np_err("cannot write summary.json: %s", strerror(-serr));
    }
    const struct np_output_totals *ot = np_output_totals(s->out);
    if (ot->cut_error)
        np_err("%s: the per-launch files were cut after %llu records (%llu not written): %s; "
               "launches.folded, merged*.folded and summary.json are complete",
               np_output_dir(s->out), (unsigned long long)ot->records_written,
               (unsigned long long)ot->records_cut, strerror(-ot->cut_error));
    else if (ferr && !err)
        np_err("writing the outputs failed: %s", strerror(-ferr));
    int cerr = np_output_close(s->out);
    s->out = NULL;
    if (!ferr && !cerr) /* made from the files just closed; a failure is said */
        np_formats_write(s->opt.output_dir, s->opt.formats);
    return err ? err : ferr ? ferr : cerr;
}

int np_cmd_record(int argc, char **argv) {
    struct np_session s = {.epfd = -1, .sigfd = -1, .child = {.release_fd = -1}};
    int err = np_record_parse_options(argc, argv, &s.opt);
    np_session_set_verbose(s.opt.verbose);
    if (err) {
        session_destroy(&s);
        return EXIT_USAGE;
    }
    err = np_preflight();
    if (err)
        goto out;
    if (!s.opt.output_dir)
        s.opt.output_dir = np_default_output_dir();
    err = s.opt.output_dir ? check_output_dir(s.opt.output_dir) : -ENOMEM;
    if (err) {
        np_err("cannot write the output directory %s: %s", s.opt.output_dir ? s.opt.output_dir : "",
               strerror(-err));
        goto out;
    }
    s.epfd = epoll_create1(EPOLL_CLOEXEC);
    err = s.epfd < 0 ? -errno : np_session_setup_signals(&s, SIGCHLD);
    if (!err)
        err = np_session_setup_bpf(&s);
    if (err)
        goto out;
    s.ingest = (struct np_ingest){
        .attacher = &s.attacher,
        .find_target = np_session_find_target,
        .on_new_mapping = np_session_on_new_mapping,
        .ctx = &s,
        .fp_fallback = s.opt.unwind == UNWIND_AUTO,
        .inline_folded = s.opt.inline_frames,
        .python_mode = s.opt.python,
    };
    err = np_session_setup_gpu(&s);
    if (err)
        goto out;
    s.start_ns = np_monotonic_ns();
    s.start_realtime_ns = np_realtime_ns();
    for (size_t i = 0; !err && i < s.opt.npids; i++)
        err = attach_pid(&s, s.opt.pids[i]);
    if (!err && s.opt.command)
        err = prepare_command(&s);
    if (!err) /* tracing starts: from here on the recording exists */
        err = open_output(&s);
    if (!err && s.opt.command)
        err = release_command(&s);
    if (!err)
        err = run_loop(&s);
    if (s.out) { /* what is queued goes into the recording */
        if (s.skel && s.rb)
            np_session_stop_and_drain(&s);
        if (s.rb)
            on_child_event(&s); /* a child held at its exit meanwhile: read it, let it go */
        np_session_finish_gpu(&s);
    }
    if (s.have_child && !s.child.reaped)
        kill(s.child.pid, SIGCONT); /* never leave it held at a library load */

out:
    if (s.out)
        err = finish_output(&s, err);
    if (s.have_child && s.child.reaped && WIFEXITED(s.child.status) && WEXITSTATUS(s.child.status))
        np_info("%s exited with status %d", s.opt.command[0], WEXITSTATUS(s.child.status));
    session_destroy(&s);
    return err ? 1 : 0;
}
