/* daemon.c - `ncclprobe daemon`: one tracing session for the whole machine.
 * This file sets it up (command line, configuration, BPF, the discovery
 * programs, the control socket, the output directory, capabilities), runs
 * the main loop (records, signals, control requests, the once-a-tick and
 * once-a-second work), reloads the configuration on SIGHUP and writes every
 * set on SIGTERM. What the loop drives is in the other files: see
 * internal.h. */
#define _GNU_SOURCE
#include "daemon/daemon.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/internal.h"
#include "ingest/gpu_socket.h"
#include "lib/caps.h"
#include "session/agent.h"
#include "session/preflight.h"

#define EXIT_USAGE 2
#define TICK_MS 100
#define CONSUME_BUDGET 65536
#define RETAIN_EVERY_NS 10000000000ull
#define TAG_DISCOVER NP_TAG_EXTRA
#define TAG_CTL (NP_TAG_EXTRA + 1)

/* ---- the command line and the configuration -------------------------------- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: ncclprobe daemon [--config FILE] [--output-dir DIR] [--http-listen ADDR:PORT]"
            " [-v]\n"
            "Traces every process that maps a CUDA or NCCL library, system-wide.\n"
            "  --config FILE      configuration (default " NP_CONFIG_DEFAULT_PATH "; a missing\n"
            "                     default file means the built-in defaults)\n"
            "  --output-dir DIR   where output sets go (overrides output_dir)\n"
            "  --http-listen ADDR:PORT  serve /metrics, /pprof/... and /healthz there\n"
            "                     (overrides http_listen; docs/daemon.md, \"HTTP\")\n"
            "  -v, --verbose      debug messages\n"
            "Signals: SIGHUP reloads the configuration, SIGTERM/SIGINT write and exit.\n"
            "Control: ncclprobe ctl start|stop|status|snapshot. See man ncclprobe.\n"
            "\n"
            "The configuration's keys:\n");
    np_settings_usage(NP_SIDE_CONFIG, f);
}

/* --output-dir is output_dir given on the command line: the same check. */
static int check_output_dir_arg(const char *dir) {
    char msg[768];
    union np_value v;
    int rc = np_setting_parse(np_setting_by_key("output_dir", strlen("output_dir")), NP_SIDE_CONFIG,
                              dir, &v, msg, sizeof(msg));
    if (rc == -EINVAL)
        fprintf(stderr, "ncclprobe daemon: --output-dir: %s\n", msg);
    return rc;
}

static int parse_args(int argc, char **argv, struct daemon *d) {
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"output-dir", required_argument, NULL, 'o'},
                                         {"http-listen", required_argument, NULL, 'l'},
                                         {"verbose", no_argument, NULL, 'v'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int c, rc = 0;
    d->config_path = NP_CONFIG_DEFAULT_PATH;
    optind = 1;
    while (!rc && (c = getopt_long(argc, argv, "+c:o:vh", opts, NULL)) != -1) {
        if (c == 'c') {
            d->config_path = optarg;
            d->config_given = true;
        } else if (c == 'o') {
            d->output_dir_arg = optarg;
            rc = check_output_dir_arg(optarg);
        } else if (c == 'l') {
            d->http_listen_arg = optarg;
        } else if (c == 'v') {
            d->verbose = true;
        } else if (c == 'h') {
            usage(stdout);
            exit(0);
        } else {
            usage(stderr);
            rc = -EINVAL;
        }
    }
    if (!rc && optind < argc) {
        fprintf(stderr, "ncclprobe daemon: unexpected argument '%s'\n", argv[optind]);
        rc = -EINVAL;
    }
    return rc;
}

static void apply_log_level(const struct daemon *d) {
    np_log_set_level(d->verbose ? NP_LOG_DEBUG : d->cfg.log_level);
}

/* At start a bad file is fatal (an error); on reload the old configuration
 * stays in force, so the same message is a warning. */
static int load_config(struct daemon *d, struct np_daemon_config *cfg, bool at_start) {
    char err[1024];
    int rc = np_config_defaults(cfg);
    if (rc)
        return rc;
    rc = np_config_load(d->config_path, cfg, err, sizeof(err));
    if (rc == -ENOENT && !d->config_given)
        rc = 0; /* no configuration file: the defaults */
    else if (rc)
        np_log(at_start ? NP_LOG_ERROR : NP_LOG_WARN, "%s", err);
    if (!rc && d->output_dir_arg)
        rc = np_setting_set(np_setting_by_key("output_dir", strlen("output_dir")), NP_SIDE_CONFIG,
                            d->output_dir_arg, cfg, err, sizeof(err));
    if (!rc && d->http_listen_arg)
        rc = np_setting_set(np_setting_by_key("http_listen", strlen("http_listen")), NP_SIDE_CONFIG,
                            d->http_listen_arg, cfg, err, sizeof(err));
    return rc;
}

/* The settings that change at the next start only keep their running
 * values in next; the ones that changed are said. */
static void keep_restart_settings(struct daemon *d, struct np_daemon_config *next) {
    struct np_str changed;
    np_str_init(&changed);
    for (size_t i = 0; i < np_settings_count; i++) {
        const struct np_setting *row = &np_settings_table[i];
        if (!row->restart || !row->key)
            continue;
        if (!np_setting_same(row, &d->cfg, next))
            np_str_appendf(&changed, "%s%s", changed.len ? ", " : "", row->key);
        np_setting_swap(row, &d->cfg, next);
    }
    if (changed.len)
        np_warn("reload: %s %s until the daemon restarts", changed.buf,
                strchr(changed.buf, ',') ? "keep their values" : "keeps its value");
    np_str_free(&changed);
}

/* SIGHUP: a bad file keeps the old configuration. What was set up at start
 * (sockets, the output directory, BPF sizes) changes at the next restart. */
static void reload(struct daemon *d) {
    struct np_daemon_config next = {0};
    if (load_config(d, &next, false) < 0) {
        np_config_free(&next);
        np_warn("configuration not reloaded: the old one stays in force");
        return;
    }
    bool aggregate_was = d->cfg.aggregate;
    bool flag_moved =
        !np_setting_same(np_setting_by_key("flag_file", strlen("flag_file")), &d->cfg, &next);
    keep_restart_settings(d, &next);
    np_config_free(&d->cfg);
    d->cfg = next;
    apply_log_level(d);
    windows_reload(d, aggregate_was, flag_moved);
    budget_reload(d);
    procs_refilter(d);
    np_info("configuration reloaded from %s", d->config_path);
}

/* ---- set-up ----------------------------------------------------------------- */

static int on_ctl(void *ctx, const struct np_ctl_request *req, cJSON *reply) {
    struct daemon *d = ctx;
    if (req->cmd != NP_CTL_STATUS)
        return windows_ctl(d, req, reply);
    status_json(d, reply);
    return 0;
}

/* Every traced process holds a few link fds until they are closed. */
static void raise_fd_limit(void) {
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }
}

/* BPF, the ring buffer, the session's sink and the CUPTI socket. */
static int setup_session(struct daemon *d) {
    int err = np_settings_defaults(NP_SIDE_RECORD, &d->s.opt);
    if (err)
        return err;
    np_settings_from_config(&d->cfg, &d->s.opt);
    if (d->s.opt.reader_threads < 0)
        d->s.opt.reader_threads = (long)budget_reader_threads(d->cfg.cpu_budget_percent);
    d->s.epfd = epoll_create1(EPOLL_CLOEXEC);
    err = d->s.epfd < 0 ? -errno : np_session_setup_signals(&d->s, SIGHUP);
    if (!err)
        err = np_session_setup_bpf(&d->s);
    if (err)
        return err;
    np_session_setup_ingest(&d->s);
    d->s.sink = &sets_sink_ops;
    err = np_session_start_drain(&d->s);
    return err ? err : np_session_setup_gpu(&d->s);
}

static int setup_discovery(struct daemon *d) {
    int err = np_discover_open(procs_on_discovery, d, &d->disc);
    if (err) {
        np_err("cannot load the process discovery programs: %s", strerror(-err));
        return err;
    }
    return np_session_watch(d->s.epfd, np_discover_fd(d->disc), TAG_DISCOVER);
}

static int setup_ctl(struct daemon *d) {
    struct np_ctl_ops ops = {.ctx = d, .handle = on_ctl};
    int err = np_ctl_server_open(d->cfg.ctl_socket, &ops, &d->ctl);
    if (err) {
        np_err("cannot listen on %s: %s%s", d->cfg.ctl_socket, strerror(-err),
               err == -EADDRINUSE ? " (is another ncclprobe daemon running?)" : "");
        return err;
    }
    return np_session_watch(d->s.epfd, np_ctl_server_fd(d->ctl), TAG_CTL);
}

static int setup(struct daemon *d) {
    if (gethostname(d->host, sizeof(d->host) - 1) < 0)
        snprintf(d->host, sizeof(d->host), "localhost");
    umask(077); /* sets, their files and the control socket: root's only */
    raise_fd_limit();
    int err = metrics_check(d);
    if (!err)
        err = np_preflight();
    if (!err)
        err = setup_session(d);
    if (!err)
        err = setup_discovery(d);
    if (!err)
        err = setup_ctl(d);
    if (err)
        return err;
    if (mkdir(d->cfg.output_dir, 0700) < 0 && errno != EEXIST) {
        err = -errno;
        np_err("cannot create %s: %s", d->cfg.output_dir, strerror(-err));
        return err;
    }
    err = np_caps_drop_to(np_caps_needed());
    if (err)
        np_warn("cannot drop capabilities: %s (running with all of them)", strerror(-err));
    /* after the drop: capabilities are per thread, and its threads inherit ours */
    err = metrics_start(d);
    if (err)
        return err;
    d->start_mono = np_monotonic_ns();
    budget_start(d);
    windows_start(d);
    return 0;
}

/* ---- the loop --------------------------------------------------------------- */

static void on_signals(struct daemon *d) {
    struct signalfd_siginfo si;
    while (read(d->s.sigfd, &si, sizeof(si)) == sizeof(si)) {
        if (si.ssi_signo == SIGHUP)
            d->reload = true;
        else
            d->stop = true;
    }
}

static void every_second(struct daemon *d, uint64_t now) {
    d->last_second_ns = now;
    budget_check(d, now);
    budget_check_caches(d);
    status_update_rates(d);
    sets_flush(d, NULL);
    metrics_every_second(d);
}

static void tick(struct daemon *d) {
    uint64_t now = np_monotonic_ns();
    windows_tick(d, now);
    metrics_tick(d, now);
    np_session_gpu_tick(&d->s, !d->s.backlog);
    procs_reap_exited(d, !d->s.backlog);
    sets_finish_closing(d, false);
    converters_reap(d);
    np_ctl_server_tick(d->ctl, now);
    procs_rescan_after_losses(d);
    if (d->reload) {
        d->reload = false;
        reload(d);
    }
    if (now - d->last_second_ns >= 1000000000ull)
        every_second(d, now);
    if (now - d->last_retain_ns >= RETAIN_EVERY_NS) {
        d->last_retain_ns = now;
        sets_retain(d);
    }
}

static void on_event(struct daemon *d, uint64_t tag) {
    if (tag == NP_TAG_SIGNAL)
        on_signals(d);
    else if (tag == NP_TAG_GPU)
        np_gpu_server_poll(d->s.gpu_server);
    else if (tag == NP_TAG_AGENT)
        np_session_agents_done(&d->s);
    else if (tag == TAG_DISCOVER)
        np_discover_poll(d->disc);
    else if (tag == TAG_CTL)
        np_ctl_server_poll(d->ctl);
    else if (tag >= NP_TAG_TARGET)
        procs_on_exit(d, (pid_t)(tag - NP_TAG_TARGET));
}

static int run(struct daemon *d) {
    struct epoll_event evs[16];
    np_proc_each(procs_consider_existing, d);
    np_info("daemon ready: %zu processes traced, control socket %s, output in %s", d->s.ntargets,
            d->cfg.ctl_socket, d->cfg.output_dir);
    while (!d->stop) {
        int n = epoll_wait(d->s.epfd, evs, 16, d->s.backlog ? 0 : TICK_MS);
        if (n < 0 && errno != EINTR)
            return -errno;
        np_session_read(&d->s, CONSUME_BUDGET);
        for (int i = 0; i < n; i++)
            on_event(d, evs[i].data.u64);
        tick(d);
    }
    return 0;
}

/* SIGTERM: every record BPF sent is read, every set written. */
static void shut_down(struct daemon *d) {
    np_info("stopping: writing every open output set");
    np_session_agents_stop(&d->s);
    if (d->s.skel && d->s.rb)
        np_session_stop_and_drain(&d->s);
    np_session_finish_gpu(&d->s);
    sets_close_all(d);
    sets_finish_closing(d, true);
    converters_finish(d);
}

static void daemon_free(struct daemon *d) {
    metrics_free(d);
    np_ctl_server_close(d->ctl);
    np_discover_close(d->disc);
    np_session_free(&d->s);
    procs_free(d);
    free(d->to_convert);
    np_config_free(&d->cfg);
    free(d);
}

int np_cmd_daemon(int argc, char **argv) {
    struct daemon *d = calloc(1, sizeof(*d));
    if (!d)
        return 1;
    d->s.epfd = d->s.sigfd = -1;
    np_map_init(&d->procs);
    np_map_init(&d->exe_checked);
    np_map_init(&d->rejected);
    int err = parse_args(argc, argv, d);
    if (!err)
        err = load_config(d, &d->cfg, true);
    if (err) {
        daemon_free(d);
        return EXIT_USAGE;
    }
    apply_log_level(d);
    np_session_set_verbose(d->verbose);
    err = setup(d);
    if (!err)
        err = run(d);
    if (d->s.skel)
        shut_down(d);
    else
        sets_finish_closing(d, true);
    daemon_free(d);
    return err ? 1 : 0;
}
