/* record.c - `ncclprobe record` (see record.h): options, BPF setup, the
 * processes attached to or started (child.c), the event loop, the final
 * flush, summary.json and the derived outputs. The tracing itself is the
 * session's (src/session/). Everything a run owns hangs off struct
 * recording and is released in recording_destroy on every path. */
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
#include "cli/child.h"
#include "cli/options.h"
#include "correlate/gpu.h"
#include "ingest/gpu_socket.h"
#include "ingest/ingest.h"
#include "lib/util.h"
#include "ncclprobe.skel.h"
#include "ncclprobe/recording.h"
#include "session/agent.h"
#include "session/preflight.h"
#include "session/session.h"
#include "session/target.h"
#include "writers/formats.h"
#include "writers/output.h"
#include "writers/summary.h"

#define EXIT_USAGE 2
#define POLL_MS 100
#define CONSUME_BUDGET 65536 /* records per slice of the event loop */

/* A recording: its session, and the command it started (-- CMD). */
struct recording {
    struct np_session s;
    struct np_child child;
    bool have_child;
};

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
    np_session_find_python(s, t); /* before the probes: see session.h */
    int n = np_attach_from_maps(&s->attacher, &t->proc, 0);
    if (n < 0) {
        np_err("cannot attach to process %d: %s", pid, strerror(-n));
        return n;
    }
    t->proc.attached = true;
    np_session_probes_placed(s, t);
    if (np_process_probe_count(&t->proc) == 0) {
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
            np_process_probe_count(&t->proc), np_process_cuda_library_count(&t->proc));
    return 0;
}

/* --cupti: the command runs with our library injected and told where we
 * listen. It is found beside the ncclprobe binary or in ../lib/ncclprobe. */
static int inject_cupti(struct np_session *s) {
    char lib[4200];
    if (np_agent_library_path(lib, sizeof(lib)) < 0) {
        np_err("--cupti: libncclprobe_cupti.so not found (%s)", lib);
        return -ENOENT;
    }
    setenv("CUDA_INJECTION64_PATH", lib, 1);
    setenv(NP_WIRE_SOCKET_ENV, s->opt.cupti_socket, 1);
    return 0;
}

/* Starts the command held before its exec and probes what it will map:
 * its first launch is captured once release_command lets it run. */
static int prepare_command(struct recording *r) {
    struct np_session *s = &r->s;
    int err = s->opt.inject_cupti ? inject_cupti(s) : 0;
    if (err)
        return err;
    if (s->gpu_server) /* a library injected some other way finds us too */
        setenv(NP_WIRE_SOCKET_ENV, s->opt.cupti_socket, 1);
    err = np_child_spawn(s->opt.command, &r->child);
    if (err)
        return err;
    r->have_child = true;
    struct np_target *t;
    err = np_session_add_target(s, r->child.pid, &t);
    if (err)
        return err;
    t->proc.hold_loads = true;
    /* Probe the executable and every library the loader will map before
     * the program runs: its first launch is captured. */
    err = np_attach_file(&s->attacher, &t->proc, r->child.path);
    if (err > 0) /* probes in the executable itself (static cudart, static CPython) */
        err = 0;
    char **libs = NULL;
    int n = np_child_needed_libraries(r->child.path, &libs);
    for (int i = 0; !err && i < n; i++) {
        int lerr = np_attach_file(&s->attacher, &t->proc, libs[i]);
        if (lerr < 0)
            np_debug("cannot pre-attach %s: %s", libs[i], strerror(-lerr));
    }
    np_free_string_list(libs, n > 0 ? n : 0);
    if (err < 0) {
        np_err("cannot attach to %s: %s", r->child.path, strerror(-err));
        return err;
    }
    t->proc.attached = true;
    int terr = np_child_trace_exit(&r->child);
    if (terr)
        np_debug("cannot hold %s at its exit (%s): a very short run may lose its symbols",
                 r->child.path, strerror(-terr));
    return 0;
}

static int release_command(struct recording *r) {
    int err = np_child_release(&r->child);
    if (err)
        return err;
    struct np_target *t = np_session_find_target(&r->s, r->child.pid);
    np_info("started %s (pid %d): %d probes attached before exec", r->child.path, r->child.pid,
            t ? np_process_probe_count(&t->proc) : 0);
    return 0;
}

/* ---- the loop ----------------------------------------------------------- */

static void on_target_exit(struct recording *r, struct np_target *t) {
    if (!t || t->exited)
        return;
    np_session_target_exited(&r->s, t);
    if (r->have_child && t->proc.pid == r->child.pid && !r->child.reaped) {
        waitpid(t->proc.pid, &r->child.status, 0);
        r->child.reaped = true;
    }
}

/* SIGCHLD from the command we started. Held at its exit, its memory is
 * still mapped: read everything it sent (creating its symbolizer if it
 * never got one) before letting it go. */
static void on_child_event(struct recording *r) {
    struct np_session *s = &r->s;
    if (!r->have_child || np_child_poll(&r->child) != NP_CHILD_AT_EXIT)
        return;
    struct np_target *t = np_session_find_target(s, r->child.pid);
    if (t && !t->in.sym)
        np_session_on_new_mapping(s, t, 0);
    np_session_read_all(s);
    np_child_let_exit(&r->child);
}

static int run_loop(struct recording *r) {
    struct np_session *s = &r->s;
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
        np_session_read(s, CONSUME_BUDGET);
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;
            if (tag == NP_TAG_SIGNAL) {
                /* All pending signals: a SIGCHLD queued behind a SIGINT still
                 * gets its child serviced. */
                struct signalfd_siginfo si;
                const char *stop = NULL;
                while (read(s->sigfd, &si, sizeof(si)) == sizeof(si)) {
                    if (si.ssi_signo == SIGCHLD)
                        on_child_event(r);
                    else
                        stop = si.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM";
                }
                if (stop) {
                    s->stop_reason = stop;
                    return 0;
                }
            } else if (tag == NP_TAG_GPU) {
                np_gpu_server_poll(s->gpu_server);
            } else if (tag == NP_TAG_AGENT) {
                np_session_agents_done(s);
            } else if (tag >= NP_TAG_TARGET) {
                on_target_exit(r, np_session_find_target(s, (pid_t)(tag - NP_TAG_TARGET)));
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
    char path[4200];
    snprintf(path, sizeof(path), "%s/" NP_REC_SUMMARY_JSON, np_output_dir(s->out));
    int err = np_session_write_summary(s, path);
    const struct np_output_totals *ot = np_output_totals(s->out);
    uint64_t in_ring = np_session_counter(s, NP_CNT_LAUNCH_DROPPED);
    uint64_t in_backlog = s->ingest.backlog.dropped_launches;
    uint64_t dropped = in_ring + in_backlog;
    np_info("%llu launches and %llu NCCL calls recorded, %llu events dropped, in %s",
            (unsigned long long)ot->launches, (unsigned long long)ot->nccl_ops,
            (unsigned long long)dropped, np_output_dir(s->out));
    if (in_ring)
        np_warn("the ring buffer overflowed: raise --ring-buffer-mb or lower --wakeup-kb");
    if (in_backlog)
        np_warn("the reader's backlog was full (%llu launches dropped): raise "
                "--reader-backlog-mb",
                (unsigned long long)in_backlog);
    return err;
}

static void recording_destroy(struct recording *r) {
    if (r->have_child && r->child.release_fd >= 0)
        np_child_abort(&r->child);
    np_child_free(&r->child);
    np_session_free(&r->s);
    free(r->s.opt.pids);
    free(r->s.opt.output_dir);
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
    if (s->opt.nccl_flows && (err = np_session_flows_open(s, s->opt.output_dir)) < 0) {
        np_err("cannot write the NCCL flows: %s", strerror(-err));
        return err;
    }
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
    np_session_flows_close(s);
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
    struct recording r = {.s = {.epfd = -1, .sigfd = -1}, .child = {.release_fd = -1}};
    struct np_session *s = &r.s;
    int err = np_record_parse_options(argc, argv, &s->opt);
    np_session_set_verbose(s->opt.verbose);
    if (err) {
        recording_destroy(&r);
        return EXIT_USAGE;
    }
    err = np_preflight();
    if (err)
        goto out;
    if (!s->opt.output_dir)
        s->opt.output_dir = np_default_output_dir();
    err = s->opt.output_dir ? check_output_dir(s->opt.output_dir) : -ENOMEM;
    if (err) {
        np_err("cannot write the output directory %s: %s",
               s->opt.output_dir ? s->opt.output_dir : "", strerror(-err));
        goto out;
    }
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    err = s->epfd < 0 ? -errno : np_session_setup_signals(s, SIGCHLD);
    if (!err)
        err = np_session_setup_bpf(s);
    if (err)
        goto out;
    np_session_setup_ingest(s);
    err = np_session_start_drain(s);
    if (!err)
        err = np_session_setup_gpu(s);
    if (err)
        goto out;
    s->start_ns = np_monotonic_ns();
    s->start_realtime_ns = np_realtime_ns();
    for (size_t i = 0; !err && i < s->opt.npids; i++)
        err = attach_pid(s, s->opt.pids[i]);
    if (!err && s->opt.command)
        err = prepare_command(&r);
    if (!err) /* tracing starts: from here on the recording exists */
        err = open_output(s);
    if (!err && s->opt.command)
        err = release_command(&r);
    for (size_t i = 0; !err && s->opt.inject_cupti && i < s->ntargets; i++)
        if (s->targets[i]->proc.pid != r.child.pid) /* a started command has it from its start */
            np_session_request_agent(s, s->targets[i]);
    if (!err)
        err = run_loop(&r);
    np_session_agents_stop(s);
    if (s->out) { /* what is queued goes into the recording */
        if (s->skel && s->rb)
            np_session_stop_and_drain(s);
        if (s->rb)
            on_child_event(&r); /* a child held at its exit meanwhile: read it, let it go */
        np_session_finish_gpu(s);
    }
    if (r.have_child && !r.child.reaped)
        kill(r.child.pid, SIGCONT); /* never leave it held at a library load */

out:
    if (s->out)
        err = finish_output(s, err);
    if (r.have_child && r.child.reaped && WIFEXITED(r.child.status) && WEXITSTATUS(r.child.status))
        np_info("%s exited with status %d", s->opt.command[0], WEXITSTATUS(r.child.status));
    recording_destroy(&r);
    return err ? 1 : 0;
}
