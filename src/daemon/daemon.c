/* daemon.c - `ncclprobe daemon`: one tracing session for the whole machine.
 *
 * Processes come and go: the ones mapping a CUDA/NCCL library at start
 * (a /proc walk), then every exec and library load BPF reports
 * (src/daemon/discover.c), each filtered by the configuration. Each traced
 * process writes to its current output set (src/daemon/outset.c): the
 * always-on aggregation, rotated every aggregate_interval, or a capture
 * window opened by `ncclprobe ctl`, by the flag file, or ended by its
 * duration. A set closes when its window ends or its process exits, once
 * the GPU records of its held launches are in.
 *
 * Around that: the control socket (src/daemon/ctl.c), SIGHUP reloads,
 * SIGTERM flushes, retention of output_dir, the memory cap on caches, the
 * CPU budget (BPF's per-probe rate limit, only while over it), and the
 * capabilities dropped after start (src/daemon/caps.c). */
#define _GNU_SOURCE
#include "daemon/daemon.h"

#include <bpf/libbpf.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attach/elfscan.h"
#include "attach/target.h"
#include "cli/preflight.h"
#include "cli/session.h"
#include "correlate/gpu.h"
#include "daemon/config.h"
#include "daemon/ctl.h"
#include "daemon/discover.h"
#include "daemon/outset.h"
#include "daemon/proc.h"
#include "ingest/gpu_socket.h"
#include "lib/caps.h"
#include "lib/util.h"
#include "ncclprobe.skel.h"
#include "writers/formats.h"
#include "writers/json.h"
#include "writers/output.h"

#define NCCLPROBE_VERSION "0.1.0"
#define EXIT_USAGE 2
#define TICK_MS 100
#define CONSUME_BUDGET 65536
#define EXIT_LINGER_NS 1000000000ull /* an exited process's records are read by then */
#define RETAIN_EVERY_NS 10000000000ull
#define TAG_DISCOVER NP_TAG_EXTRA
#define TAG_CTL (NP_TAG_EXTRA + 1)
#define NDELAYS 256

/* A traced process, as the daemon sees it. */
struct dproc {
    struct np_proc_labels labels;
    struct np_outset *set; /* where its records go now; NULL: opened on the next record */
    bool exited;
    bool reconsider; /* exec'd (or its pid was reused): looked at again once reaped */
    uint64_t exited_ns;
    uint64_t set_retry_ns;  /* its output set could not be made: not before then */
    uint64_t launches_prev; /* for its launch rate */
    double launches_per_s;
};

struct daemon {
    struct np_session s; /* first: the session's callbacks get &d->s */
    struct np_daemon_config cfg;
    const char *config_path;
    bool config_given;          /* --config: a missing file is an error */
    const char *output_dir_arg; /* --output-dir overrides the configuration */
    char host[256];
    struct np_discover *disc;
    struct np_ctl_server *ctl;
    struct np_map procs;       /* pid -> struct dproc * */
    struct np_map exe_checked; /* executable identity -> 1 has launch probes, 2 has none */
    struct np_map rejected;    /* pid -> 1: not selected by the filters (until it execs) */
    uint64_t lost_seen;        /* discovery notifications lost, as last handled */
    struct np_outset *sets;    /* open and closing, newest first */
    /* the capture window */
    bool window_open;
    uint64_t window_id; /* the open (or last) window's: 1, 2, ... */
    char window_reason[32];
    uint64_t window_start_rt, window_start_mono, window_end_mono; /* end: duration or max_window */
    bool flag_present;
    /* the always-on aggregation's current period */
    uint64_t period_start_rt, period_start_mono;
    /* the CPU budget */
    uint64_t cpu_prev_ns, wall_prev_ns, limited_prev, received_prev;
    double cpu_percent;
    bool limit_active;
    uint64_t limit_activations;
    int over_seconds; /* seconds in a row over the budget */
    int calm_seconds; /* seconds the unlimited load would have fit the budget */
    /* what status reports */
    uint64_t start_mono, attached, detached, skipped_by_filter, cache_resets, sets_written;
    uint64_t missed;     /* processes gone before they could be attached */
    pid_t converters[2]; /* child processes making sets' derived outputs (MAX_CONVERTERS) */
    unsigned nconverters;
    char **to_convert; /* written sets waiting for a converter */
    size_t nto_convert;
    double delays_ms[NDELAYS];
    size_t ndelays;
    double delay_max_ms;
    struct np_retention retention;
    uint64_t deleted_sets;
    uint64_t last_retain_ns, last_second_ns;
    uint64_t launches_prev_total, records_prev_total;
    double launches_per_s, records_per_s;
    bool reload, stop;
};

static uint64_t ms_to_ns(uint64_t ms) {
    return ms * 1000000ull;
}

/* ---- output sets -------------------------------------------------------- */

/* The process's drops and rate-limited launches so far (its probes' counters). */
static void proc_counters(struct daemon *d, pid_t pid, uint64_t *drops, uint64_t *limited) {
    *drops = *limited = 0;
    const struct np_attacher *a = &d->s.attacher;
    for (size_t i = 0; i < a->nsites; i++) {
        const struct np_probe_site *site = &a->sites[i];
        if (site->pid != pid || site->released)
            continue;
        *drops += np_session_probe_counter(d->s.skel->maps.probe_drops, site->id);
        *limited += np_session_probe_counter(d->s.skel->maps.probe_limited, site->id);
    }
}

static struct np_outset *open_set(struct daemon *d, struct dproc *p) {
    bool window = d->window_open;
    struct np_outset *set = NULL;
    int err = np_outset_open(d->cfg.output_dir, d->host,
                             window ? NP_OUTSET_WINDOW : NP_OUTSET_AGGREGATE, &p->labels,
                             window ? d->window_id : 0, window ? d->window_reason : "aggregate",
                             window ? d->window_start_rt : d->period_start_rt, &set);
    if (err) { /* said once, tried again in 10 s (a full disk, no fds) */
        np_warn("pid %d (%s): cannot create its output set in %s: %s (its records are "
                "dropped for 10 s)",
                p->labels.pid, p->labels.comm, d->cfg.output_dir, strerror(-err));
        p->set_retry_ns = np_monotonic_ns() + 10000000000ull;
        return NULL;
    }
    proc_counters(d, p->labels.pid, &set->drops_at_open, &set->limited_at_open);
    set->next = d->sets;
    d->sets = set;
    np_debug("pid %d (%s): output set %s", p->labels.pid, p->labels.comm, set->dir);
    return set;
}

/* What the process's probes dropped and rate-limited since its set opened;
 * read before its probes are released (their counters go with them). */
static void count_set(struct daemon *d, struct dproc *p) {
    struct np_outset *set = p->set;
    uint64_t drops, limited;
    proc_counters(d, p->labels.pid, &drops, &limited);
    set->drops = drops > set->drops_at_open ? drops - set->drops_at_open : 0;
    set->rate_limited = limited > set->limited_at_open ? limited - set->limited_at_open : 0;
}

/* No more records go to the process's set; it is written once its held
 * GPU launches are in (finish_closing_sets). */
static void close_set(struct daemon *d, struct dproc *p) {
    struct np_outset *set = p->set;
    if (!set)
        return;
    if (!p->exited) /* an exited process's counts were taken before its probes went */
        count_set(d, p);
    p->set = NULL;
    set->closing = true;
    set->end_realtime_ns = np_realtime_ns();
}

/* The derived outputs of a written set (pprof, trace.json, flame graphs)
 * read its whole JSONL files: a large window takes seconds. They are made
 * in child processes at low priority (MAX_CONVERTERS at once, the others
 * queued), so the reader never stalls and the work does not count against
 * our CPU budget; inline if fork fails. */
#define MAX_CONVERTERS NP_ARRAY_SIZE(((struct daemon *)0)->converters)

/* The converter is `ncclprobe convert`, exec'd: a fresh process, so none of
 * our descriptors (probe links, sockets), locks or threads come along. */
static void run_converter(struct daemon *d, const char *dir) {
    char formats[64];
    np_formats_name(d->cfg.formats, formats, sizeof(formats));
    pid_t pid = d->nconverters < MAX_CONVERTERS ? fork() : -1;
    if (pid == 0) {
        sigset_t all;
        sigfillset(&all);
        sigprocmask(SIG_UNBLOCK, &all, NULL);
        close_range(3, ~0u, 0);
        if (nice(10) < 0)
            np_debug("nice: %s", strerror(errno));
        execl("/proc/self/exe", "ncclprobe", "convert", "--format", formats, dir, (char *)NULL);
        _exit(127);
    }
    if (pid > 0) {
        d->converters[d->nconverters++] = pid;
        return;
    }
    np_debug("no converter process (%s): converting %s here",
             d->nconverters < MAX_CONVERTERS ? strerror(errno) : "as many as allowed run", dir);
    np_formats_write(dir, d->cfg.formats);
}

static void convert_set(struct daemon *d, const char *dir) {
    if (!d->cfg.formats)
        return;
    if (d->nconverters < MAX_CONVERTERS) {
        run_converter(d, dir);
        return;
    }
    char *copy = strdup(dir);
    char **queue = copy ? realloc(d->to_convert, (d->nto_convert + 1) * sizeof(*queue)) : NULL;
    if (!queue) {
        free(copy);
        run_converter(d, dir); /* no memory to queue it: one more at once */
        return;
    }
    d->to_convert = queue;
    d->to_convert[d->nto_convert++] = copy;
}

static void start_queued_converter(struct daemon *d) {
    char *dir = d->to_convert[0];
    memmove(d->to_convert, d->to_convert + 1, --d->nto_convert * sizeof(*d->to_convert));
    run_converter(d, dir);
    free(dir);
}

/* Waits for our converters only, by pid: a child the daemon did not start
 * (one inherited across exec, the discovery helper) is not counted as one. */
static unsigned reap_finished_converters(struct daemon *d) {
    unsigned reaped = 0;
    for (unsigned i = 0; i < d->nconverters;) {
        pid_t r = waitpid(d->converters[i], NULL, WNOHANG);
        if (r == 0 || (r < 0 && errno == EINTR)) {
            i++;
            continue;
        }
        d->converters[i] = d->converters[--d->nconverters]; /* exited, or not ours (ECHILD) */
        reaped++;
    }
    return reaped;
}

/* Converters that finished, and queued sets started in their place. */
static void reap_converters(struct daemon *d) {
    if (reap_finished_converters(d))
        d->last_retain_ns = 0; /* the sets grew: retention runs on the next tick */
    while (d->nto_convert && d->nconverters < MAX_CONVERTERS)
        start_queued_converter(d);
}

/* At exit: every queued set gets its converter, and they are given 20 s;
 * any still running then finishes on its own. */
#define CONVERTERS_EXIT_WAIT_NS 20000000000ull
static void finish_converters(struct daemon *d) {
    while (d->nto_convert)
        start_queued_converter(d);
    uint64_t until = np_monotonic_ns() + CONVERTERS_EXIT_WAIT_NS;
    while (d->nconverters > 0 && np_monotonic_ns() < until)
        if (!reap_finished_converters(d))
            usleep(20000);
    if (d->nconverters)
        np_warn("%u converters still running: they finish on their own", d->nconverters);
}

static void finish_set(struct daemon *d, struct np_outset *set) {
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", set->dir);
    uint64_t launches = 0;
    int err = np_outset_finish(set, &launches);
    d->sets_written++;
    if (err) {
        np_warn("output set %s: %s", dir, strerror(-err));
        return;
    }
    np_info("wrote %s (%" PRIu64 " launches)", dir, launches);
    convert_set(d, dir);
}

/* Closing sets whose launches no longer wait for GPU records are written;
 * all of them when `all`. */
static void finish_closing_sets(struct daemon *d, bool all) {
    struct np_outset **link = &d->sets;
    bool wrote = false;
    while (*link) {
        struct np_outset *set = *link;
        if (!set->closing || (set->held && !all)) {
            link = &set->next;
            continue;
        }
        *link = set->next;
        finish_set(d, set);
        wrote = true;
    }
    if (wrote)
        d->last_retain_ns = 0; /* retention runs on the next tick */
}

/* The set writing to out (open or closing). */
static struct np_outset *set_of_output(struct daemon *d, const void *out) {
    for (struct np_outset *s = d->sets; s; s = s->next)
        if (s->out == out)
            return s;
    return NULL;
}

/* ingest's callback: a launch of out waits for its GPU records. */
static void on_held(void *ctx, struct np_output *out) {
    struct np_outset *set = set_of_output((struct daemon *)ctx, out);
    if (set)
        set->held++;
}

/* The session's: a held launch was written (its GPU records came, or not). */
static void on_gpu_retired(struct np_session *s, void *owner) {
    struct np_outset *set = set_of_output((struct daemon *)s, owner);
    if (set && set->held)
        set->held--;
}

/* ingest's callback: where a process's records go now. */
static struct np_output *output_for(void *ctx, struct np_target *t) {
    struct daemon *d = ctx;
    struct dproc *p = np_map_get_u64(&d->procs, (uint64_t)t->pid);
    if (!p)
        return NULL;
    if (!p->set && (d->window_open || d->cfg.aggregate) && !p->exited &&
        np_monotonic_ns() >= p->set_retry_ns)
        p->set = open_set(d, p);
    return p->set ? p->set->out : NULL;
}

/* ---- processes -------------------------------------------------------- */

static void note_delay(struct daemon *d, double ms) {
    d->delays_ms[d->ndelays++ % NDELAYS] = ms;
    if (ms > d->delay_max_ms)
        d->delay_max_ms = ms;
}

/* Libraries of t attached after the notification at seen_ns: how long after. */
static void note_delays(struct daemon *d, const struct np_target *t, uint64_t seen_ns) {
    for (size_t i = 0; seen_ns && i < t->nlibs; i++) {
        const struct np_library *lib = &t->libs[i];
        if (lib->cuda && lib->seen_ns == seen_ns && lib->attached_ns >= seen_ns)
            note_delay(d, (double)(lib->attached_ns - seen_ns) / 1e6);
    }
}

static bool selected(const struct daemon *d, const struct np_proc_labels *l) {
    struct np_process_labels pl = {l->comm, l->exe, l->cgroup, l->container};
    return np_config_selects(&d->cfg, &pl);
}

/* A static CUDA program: its executable has launch probe points itself.
 * Cached per file identity: a node execs the same few programs all day. */
static bool exe_has_probes(struct daemon *d, pid_t pid) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat st;
    char key[96];
    if (fstat(fd, &st) < 0) {
        close(fd);
        return false;
    }
    snprintf(key, sizeof(key), "%" PRIu64 ":%" PRIu64 ":%" PRId64 ":%" PRId64, (uint64_t)st.st_dev,
             (uint64_t)st.st_ino, (int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec);
    uintptr_t known = (uintptr_t)np_map_get_str(&d->exe_checked, key);
    if (!known) {
        struct np_elf_scan scan;
        bool launches = false;
        if (np_elf_scan_fd(fd, &scan) == 0) {
            for (size_t i = 0; i < scan.count; i++)
                launches |= scan.matches[i].def->family != NP_FAMILY_LOADER &&
                            scan.matches[i].def->family != NP_FAMILY_CUPTI;
            np_elf_scan_free(&scan);
        }
        known = launches ? 1 : 2;
        np_map_put_str(&d->exe_checked, key, (void *)known);
    }
    close(fd);
    return known == 1;
}

static void free_proc(void *p) {
    free(p);
}

/* Stops tracing a process: its set closes, its probes go. The target
 * itself stays until its queued records are read (reap_exited). */
static void untrace(struct daemon *d, struct dproc *p, const char *why) {
    if (!p->exited) {
        p->exited = true;
        p->exited_ns = np_monotonic_ns();
        struct np_target *t = np_session_find_target(&d->s, p->labels.pid);
        if (t)
            np_session_target_exited(&d->s, t);
        if (p->set)
            count_set(d, p);
    }
    np_attacher_release_pid(&d->s.attacher, p->labels.pid);
    d->detached++;
    np_info("pid %d (%s): no longer traced (%s)", p->labels.pid, p->labels.comm, why);
}

/* Why a process is looked at. */
enum event { EV_SCAN, EV_MMAP, EV_EXEC };
static void consider(struct daemon *d, pid_t pid, uint64_t seen_ns, enum event why);

/* Exited processes whose records have all been read: sets closed, gone. */
static void reap_exited(struct daemon *d, bool ring_read) {
    uint64_t now = np_monotonic_ns();
    pid_t gone[64];
    size_t n = 0;
    for (size_t i = 0; i < d->procs.cap && n < NP_ARRAY_SIZE(gone); i++) {
        const struct np_map_entry *e = &d->procs.slots[i];
        struct dproc *p = e->used ? e->value : NULL;
        if (p && p->exited && (ring_read || now - p->exited_ns > 10 * EXIT_LINGER_NS) &&
            now - p->exited_ns >= EXIT_LINGER_NS)
            gone[n++] = p->labels.pid;
    }
    for (size_t i = 0; i < n; i++) {
        struct dproc *p = np_map_del_u64(&d->procs, (uint64_t)gone[i]);
        bool reconsider = p->reconsider;
        close_set(d, p);
        struct np_target *t = np_session_find_target(&d->s, gone[i]);
        if (t)
            np_session_remove_target(&d->s, t);
        free(p);
        if (reconsider) /* the program it exec'd, with what it has mapped by now */
            consider(d, gone[i], 0, EV_SCAN);
    }
    if (n) /* a process's symbols are megabytes: give them back, not just to malloc */
        malloc_trim(0);
}

/* Starts tracing a process the filters selected. */
static int trace(struct daemon *d, const struct np_proc_labels *labels, uint64_t seen_ns) {
    struct np_target *t = NULL;
    int err = np_session_add_target(&d->s, labels->pid, &t);
    /* probes first: its first launch may come within milliseconds */
    int n = err ? err : np_attach_from_maps(&d->s.attacher, t, seen_ns);
    if (n >= 0 && (err = np_session_ensure_symbolizer(t)) < 0)
        n = err;
    if (n >= 0 && t) {
        t->attached = true;
        np_session_detect_python(&d->s, t);
    }
    if (n < 0 || (t && np_target_probe_count(t) == 0)) {
        if (t) {
            np_attacher_release_pid(&d->s.attacher, labels->pid);
            np_session_remove_target(&d->s, t);
        }
        if (n == -ESRCH) {
            d->missed++;
            np_debug("pid %d (%s): gone before it could be attached", labels->pid, labels->comm);
        }
        if (n < 0 && n != -ESRCH)
            np_warn("pid %d (%s): cannot attach: %s", labels->pid, labels->comm, strerror(-n));
        return n < 0 ? n : -ENOENT;
    }
    struct dproc *p = calloc(1, sizeof(*p));
    if (!p || np_map_put_u64(&d->procs, (uint64_t)labels->pid, p) < 0) {
        free(p);
        np_attacher_release_pid(&d->s.attacher, labels->pid);
        np_session_remove_target(&d->s, t);
        return -ENOMEM;
    }
    p->labels = *labels;
    d->attached++;
    note_delays(d, t, seen_ns);
    if (d->window_open) /* a window's set exists from the moment we trace it */
        p->set = open_set(d, p);
    np_info("tracing pid %d (%s%s%s, ns pid %d): %d probes in %d libraries", labels->pid,
            labels->comm, labels->container[0] ? ", container " : "",
            labels->container[0] ? labels->container : "", labels->ns_pid, np_target_probe_count(t),
            np_target_cuda_library_count(t));
    return 0;
}

/* Something happened to pid: trace it if it now qualifies, or attach to
 * what it newly mapped. A library load was already matched by name in
 * BPF; an exec only maps the executable (its libraries come as loads); a
 * /proc walk reads the maps. */
static void consider(struct daemon *d, pid_t pid, uint64_t seen_ns, enum event why) {
    bool exec = why == EV_EXEC;
    if (pid == getpid())
        return;
    struct dproc *p = np_map_get_u64(&d->procs, (uint64_t)pid);
    if (exec)
        np_map_del_u64(&d->rejected, (uint64_t)pid); /* another program: filtered anew */
    else if (np_map_get_u64(&d->rejected, (uint64_t)pid))
        return;
    if (p && exec && !p->exited) /* a new program in that process: start over */
        untrace(d, p, "exec");
    if (p && p->exited) {     /* old records still being read (exec, or a reused pid) */
        p->reconsider = true; /* reap_exited looks at it again */
        return;
    }
    if (p && why == EV_SCAN) /* traced: its own loads are reported as they happen */
        return;
    if (p) { /* a traced process loaded a library */
        struct np_target *t = np_session_find_target(&d->s, pid);
        if (t) {
            np_session_on_new_mapping(&d->s, t, seen_ns);
            note_delays(d, t, seen_ns);
        }
        return;
    }
    if (why == EV_SCAN && !np_proc_maps_library(pid, np_discover_prefixes) &&
        !exe_has_probes(d, pid))
        return;
    if (why == EV_EXEC && !exe_has_probes(d, pid))
        return;
    struct np_proc_labels labels;
    if (np_proc_read_labels(pid, &labels) < 0) {
        d->missed += why != EV_SCAN; /* it loaded a CUDA library and is already gone */
        return;
    }
    if (!selected(d, &labels)) {
        d->skipped_by_filter++;
        np_map_put_u64(&d->rejected, (uint64_t)pid, (void *)1);
        np_debug("pid %d (%s): not selected by the filters", pid, labels.comm);
        return;
    }
    trace(d, &labels, seen_ns);
}

static int consider_existing(void *ctx, pid_t pid) {
    consider(ctx, pid, 0, EV_SCAN);
    return 0;
}

/* Notifications lost to a full discovery ring (an exec storm): the
 * processes they were about are found by walking /proc instead. */
static void rescan_after_losses(struct daemon *d) {
    uint64_t lost = np_discover_lost(d->disc);
    if (lost == d->lost_seen)
        return;
    np_warn("%" PRIu64 " process notifications lost: looking through /proc", lost - d->lost_seen);
    d->lost_seen = lost;
    np_proc_each(consider_existing, d);
}

static void on_discovery(void *ctx, const struct np_disc_event *ev) {
    struct daemon *d = ctx;
    consider(d, (pid_t)ev->pid, ev->ts_ns, ev->kind == NP_DISC_EXEC ? EV_EXEC : EV_MMAP);
}

/* ---- windows ---------------------------------------------------------- */

static void set_bpf_switch(struct daemon *d) {
    d->s.skel->bss->paused = !(d->window_open || d->cfg.aggregate);
}

static void each_proc(struct daemon *d, void (*fn)(struct daemon *, struct dproc *)) {
    for (size_t i = 0; i < d->procs.cap; i++)
        if (d->procs.slots[i].used)
            fn(d, d->procs.slots[i].value);
}

static void reopen_set(struct daemon *d, struct dproc *p) {
    close_set(d, p);
    if (!p->exited && d->window_open)
        p->set = open_set(d, p);
}

static void new_period(struct daemon *d) {
    d->period_start_rt = np_realtime_ns();
    d->period_start_mono = np_monotonic_ns();
}

static int open_window(struct daemon *d, const char *reason, double duration_s, char *msg,
                       size_t msg_size) {
    if (d->window_open) {
        snprintf(msg, msg_size, "window %" PRIu64 " is already open (%s)", d->window_id,
                 d->window_reason);
        return -EBUSY;
    }
    d->window_open = true;
    d->window_id++;
    snprintf(d->window_reason, sizeof(d->window_reason), "%s", reason);
    d->window_start_rt = np_realtime_ns();
    d->window_start_mono = np_monotonic_ns();
    uint64_t max_ns = ms_to_ns(d->cfg.max_window_ms);
    uint64_t want_ns = duration_s > 0 ? (uint64_t)(duration_s * 1e9) : max_ns;
    d->window_end_mono = d->window_start_mono + (want_ns < max_ns ? want_ns : max_ns);
    each_proc(d, reopen_set);
    set_bpf_switch(d);
    snprintf(msg, msg_size, "window %" PRIu64 " opened (%s) for %.0f s at most", d->window_id,
             reason, (double)(d->window_end_mono - d->window_start_mono) / 1e9);
    np_info("%s", msg);
    return 0;
}

static void close_window(struct daemon *d, const char *why, char *msg, size_t msg_size) {
    if (!d->window_open) {
        snprintf(msg, msg_size, "no window is open");
        return;
    }
    d->window_open = false;
    new_period(d);
    each_proc(d, reopen_set);
    set_bpf_switch(d);
    snprintf(msg, msg_size, "window %" PRIu64 " closed (%s)", d->window_id, why);
    np_info("%s", msg);
}

/* The flag file: its appearance opens a window, its removal closes the
 * window it opened. Looked at every tick (a stat); edges only, so `ctl
 * stop` is not undone by a flag file still present. */
static void check_flag_file(struct daemon *d) {
    if (!d->cfg.flag_file)
        return;
    struct stat st;
    bool present = stat(d->cfg.flag_file, &st) == 0;
    if (present == d->flag_present)
        return;
    d->flag_present = present;
    char msg[256];
    if (present)
        open_window(d, "flag_file", 0, msg, sizeof(msg));
    else if (d->window_open && strcmp(d->window_reason, "flag_file") == 0)
        close_window(d, "flag file removed", msg, sizeof(msg));
}

/* ---- status and control ------------------------------------------------ */

static void window_json(struct daemon *d, cJSON *reply) {
    cJSON *w = cJSON_AddObjectToObject(reply, "window");
    cJSON_AddBoolToObject(w, "open", d->window_open);
    if (!d->window_open)
        return;
    char when[32];
    uint64_t now = np_monotonic_ns();
    cJSON_AddNumberToObject(w, "id", (double)d->window_id);
    cJSON_AddStringToObject(w, "reason", d->window_reason);
    np_format_utc(when, sizeof(when), d->window_start_rt, false);
    cJSON_AddStringToObject(w, "started", when);
    cJSON_AddNumberToObject(w, "elapsed_s", (double)(now - d->window_start_mono) / 1e9);
    cJSON_AddNumberToObject(
        w, "ends_in_s", d->window_end_mono > now ? (double)(d->window_end_mono - now) / 1e9 : 0);
}

static long rss_bytes(void) {
    char *text = NULL;
    size_t len;
    long pages = 0;
    if (np_read_file("/proc/self/statm", &text, &len) == 0) {
        sscanf(text, "%*s %ld", &pages);
        free(text);
    }
    return pages * sysconf(_SC_PAGESIZE);
}

/* An estimate of the caches that grow with distinct stacks: each target's
 * stack texts (the symbolizers' own caches follow the libraries mapped). */
static uint64_t cache_bytes(const struct daemon *d) {
    uint64_t n = 0;
    for (size_t i = 0; i < d->s.ntargets; i++)
        n += d->s.targets[i]->stack_text_bytes;
    return n;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void status_json(struct daemon *d, cJSON *r) {
    char when[32];
    cJSON_AddStringToObject(r, "version", NCCLPROBE_VERSION);
    cJSON_AddNumberToObject(r, "pid", getpid());
    cJSON_AddNumberToObject(r, "uptime_s", (double)(np_monotonic_ns() - d->start_mono) / 1e9);
    cJSON_AddStringToObject(r, "config", d->config_path);
    cJSON_AddStringToObject(r, "output_dir", d->cfg.output_dir);
    window_json(d, r);
    cJSON *agg = cJSON_AddObjectToObject(r, "aggregate");
    cJSON_AddBoolToObject(agg, "on", d->cfg.aggregate);
    cJSON_AddNumberToObject(agg, "interval_s", (double)d->cfg.aggregate_interval_ms / 1e3);
    np_format_utc(when, sizeof(when), d->period_start_rt, false);
    cJSON_AddStringToObject(agg, "period_started", when);

    cJSON *targets = cJSON_AddArrayToObject(r, "targets");
    uint64_t attached = 0, failed = 0;
    for (size_t i = 0; i < d->s.ntargets; i++) {
        struct np_target *t = d->s.targets[i];
        struct dproc *p = np_map_get_u64(&d->procs, (uint64_t)t->pid);
        if (!p)
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "pid", t->pid);
        cJSON_AddNumberToObject(o, "ns_pid", p->labels.ns_pid);
        np_json_add_text(o, "comm", p->labels.comm);
        np_json_add_text(o, "exe", p->labels.exe);
        np_json_add_text(o, "container", p->labels.container);
        np_json_add_text(o, "cgroup", p->labels.cgroup);
        cJSON_AddNumberToObject(o, "probes", np_target_probe_count(t));
        cJSON_AddNumberToObject(o, "libraries", np_target_cuda_library_count(t));
        cJSON_AddNumberToObject(o, "launches", (double)t->launches);
        cJSON_AddNumberToObject(o, "launches_per_s", p->launches_per_s);
        uint64_t drops, limited;
        proc_counters(d, t->pid, &drops, &limited);
        cJSON_AddNumberToObject(o, "drops", (double)drops);
        cJSON_AddNumberToObject(o, "rate_limited", (double)limited);
        cJSON_AddStringToObject(o, "gpu",
                                t->gpu_hello    ? (t->gpu_off ? "off" : "active")
                                : t->gpu_marker ? "waiting for hello"
                                                : "no CUPTI library");
        if (p->set)
            cJSON_AddStringToObject(o, "output", p->set->dir);
        else
            cJSON_AddNullToObject(o, "output");
        cJSON_AddBoolToObject(o, "exited", p->exited);
        cJSON_AddItemToArray(targets, o);
        for (size_t j = 0; j < t->nlibs; j++)
            attached += (uint64_t)t->libs[j].probes_ok,
                failed += (uint64_t)t->libs[j].probes_failed;
    }
    cJSON *probes = cJSON_AddObjectToObject(r, "probes");
    cJSON_AddNumberToObject(probes, "attached", (double)attached);
    cJSON_AddNumberToObject(probes, "failed", (double)failed);
    cJSON *rates = cJSON_AddObjectToObject(r, "rates");
    cJSON_AddNumberToObject(rates, "launches_per_s", d->launches_per_s);
    cJSON_AddNumberToObject(rates, "records_per_s", d->records_per_s);
    cJSON *drops = cJSON_AddObjectToObject(r, "drops");
    cJSON_AddNumberToObject(drops, "ring_buffer",
                            (double)np_session_counter(&d->s, NP_CNT_LAUNCH_DROPPED));
    cJSON_AddNumberToObject(drops, "rate_limited",
                            (double)np_session_counter(&d->s, NP_CNT_RATE_LIMITED));
    cJSON *rl = cJSON_AddObjectToObject(r, "rate_limit");
    cJSON_AddBoolToObject(rl, "active", d->limit_active);
    cJSON_AddNumberToObject(rl, "per_probe_per_s", (double)d->cfg.rate_limit);
    cJSON_AddNumberToObject(rl, "cpu_percent", d->cpu_percent);
    cJSON_AddNumberToObject(rl, "budget_percent", d->cfg.cpu_budget_percent);
    cJSON_AddNumberToObject(rl, "activations", (double)d->limit_activations);
    cJSON *cupti = cJSON_AddObjectToObject(r, "cupti");
    if (d->s.gpu_server)
        cJSON_AddStringToObject(cupti, "socket", d->cfg.cupti_socket);
    else
        cJSON_AddNullToObject(cupti, "socket");
    size_t peers = 0;
    for (size_t i = 0; i < d->s.ntargets; i++)
        peers += d->s.targets[i]->gpu_hello && !d->s.targets[i]->gpu_off;
    cJSON_AddNumberToObject(cupti, "peers", (double)peers);
    cJSON *disk = cJSON_AddObjectToObject(r, "disk");
    cJSON_AddNumberToObject(disk, "bytes", (double)d->retention.bytes);
    cJSON_AddNumberToObject(disk, "sets", (double)d->retention.sets);
    cJSON_AddNumberToObject(disk, "max_bytes", (double)d->cfg.max_output_bytes);
    cJSON_AddNumberToObject(disk, "deleted_sets", (double)d->deleted_sets);
    cJSON_AddNumberToObject(disk, "sets_written", (double)d->sets_written);
    cJSON *mem = cJSON_AddObjectToObject(r, "memory");
    cJSON_AddNumberToObject(mem, "rss_bytes", (double)rss_bytes());
    cJSON_AddNumberToObject(mem, "cache_bytes", (double)cache_bytes(d));
    cJSON_AddNumberToObject(mem, "cache_max_bytes", (double)d->cfg.cache_bytes);
    cJSON_AddNumberToObject(mem, "cache_resets", (double)d->cache_resets);
    cJSON *disc = cJSON_AddObjectToObject(r, "discovery");
    size_t n = d->ndelays < NDELAYS ? d->ndelays : NDELAYS;
    double sorted[NDELAYS];
    memcpy(sorted, d->delays_ms, n * sizeof(double));
    qsort(sorted, n, sizeof(double), cmp_double);
    cJSON_AddNumberToObject(disc, "delay_ms_p50", n ? sorted[n / 2] : 0);
    cJSON_AddNumberToObject(disc, "delay_ms_max", d->delay_max_ms);
    cJSON_AddNumberToObject(disc, "delays_measured", (double)d->ndelays);
    cJSON_AddNumberToObject(disc, "attached", (double)d->attached);
    cJSON_AddNumberToObject(disc, "detached", (double)d->detached);
    cJSON_AddNumberToObject(disc, "skipped_by_filter", (double)d->skipped_by_filter);
    cJSON_AddNumberToObject(disc, "missed_exited", (double)d->missed);
    cJSON_AddNumberToObject(disc, "lost_notifications", (double)np_discover_lost(d->disc));
    cJSON_AddStringToObject(disc, "mode", np_discover_mode(d->disc));
}

/* The directories of the sets now closing (what stop/snapshot produced). */
static void closing_dirs_json(struct daemon *d, cJSON *reply) {
    cJSON *sets = cJSON_AddArrayToObject(reply, "sets");
    for (struct np_outset *s = d->sets; s; s = s->next)
        if (s->closing)
            cJSON_AddItemToArray(sets, cJSON_CreateString(s->dir));
}

static void flush_open_sets(struct daemon *d) {
    for (struct np_outset *s = d->sets; s; s = s->next)
        if (!s->closing)
            np_output_flush(s->out);
}

static int on_ctl(void *ctx, const struct np_ctl_request *req, cJSON *reply) {
    struct daemon *d = ctx;
    char msg[256];
    switch (req->cmd) {
    case NP_CTL_START:
        if (open_window(d, "ctl", req->duration_s, msg, sizeof(msg)) < 0) {
            np_ctl_reply_error(reply, "%s", msg);
            return -EBUSY;
        }
        break;
    case NP_CTL_STOP:
        if (!d->window_open) {
            np_ctl_reply_error(reply, "no window is open");
            return -ENOENT;
        }
        close_window(d, "ctl stop", msg, sizeof(msg));
        closing_dirs_json(d, reply);
        break;
    case NP_CTL_SNAPSHOT:
        if (d->window_open) { /* the window's files, readable now */
            flush_open_sets(d);
            snprintf(msg, sizeof(msg), "window %" PRIu64 " flushed (it stays open)", d->window_id);
            cJSON *sets = cJSON_AddArrayToObject(reply, "sets");
            for (struct np_outset *s = d->sets; s; s = s->next)
                if (!s->closing)
                    cJSON_AddItemToArray(sets, cJSON_CreateString(s->dir));
        } else { /* the always-on aggregation so far, written now */
            new_period(d);
            each_proc(d, reopen_set);
            snprintf(msg, sizeof(msg), "aggregation written; a new period began");
            closing_dirs_json(d, reply);
        }
        break;
    case NP_CTL_STATUS:
        status_json(d, reply);
        return 0;
    }
    cJSON_AddStringToObject(reply, "message", msg);
    window_json(d, reply);
    return 0;
}

/* ---- budgets ------------------------------------------------------------ */

static uint64_t cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Once a second: our CPU use against the budget. Over it for 3 s in a row
 * (a new process's first symbol loads are a burst, not a load), BPF keeps
 * at most rate_limit launches per probe per second; the limit is lifted
 * when the load it holds back would fit the budget again (5 s in a row). */
static void check_cpu_budget(struct daemon *d, uint64_t now) {
    uint64_t cpu = cpu_ns();
    if (d->wall_prev_ns && now > d->wall_prev_ns)
        d->cpu_percent = 100.0 * (double)(cpu - d->cpu_prev_ns) / (double)(now - d->wall_prev_ns);
    d->cpu_prev_ns = cpu;
    d->wall_prev_ns = now;
    uint64_t limited = np_session_counter(&d->s, NP_CNT_RATE_LIMITED);
    uint64_t received = d->s.ingest.stats.launch_events;
    double kept = (double)(received - d->received_prev);
    double held = (double)(limited - d->limited_prev);
    d->limited_prev = limited;
    d->received_prev = received;
    double budget = d->cfg.cpu_budget_percent;
    if (!d->limit_active) {
        d->over_seconds = d->cpu_percent > budget ? d->over_seconds + 1 : 0;
        if (d->over_seconds < 3)
            return;
        d->limit_active = true;
        d->limit_activations++;
        d->calm_seconds = 0;
        d->s.skel->bss->rate_limit = (__u32)d->cfg.rate_limit;
        np_warn("CPU budget exceeded (%.1f%% of a core > %.0f%%): keeping at most %" PRIu64
                " launches per second per probe until the load drops",
                d->cpu_percent, budget, d->cfg.rate_limit);
        return;
    }
    double demand = kept > 0 ? d->cpu_percent * (kept + held) / kept : (held > 0 ? 1e9 : 0);
    d->calm_seconds = demand < 0.8 * budget ? d->calm_seconds + 1 : 0;
    if (d->calm_seconds >= 5) {
        d->limit_active = false;
        d->s.skel->bss->rate_limit = 0;
        np_info("CPU budget met again: rate limit lifted (%" PRIu64
                " launches not recorded since the daemon started)",
                limited);
    }
}

/* Over the cache cap: every stack text cache starts again (they refill
 * from the symbolizers at the cost of some CPU). */
static void check_caches(struct daemon *d) {
    if (cache_bytes(d) <= d->cfg.cache_bytes)
        return;
    for (size_t i = 0; i < d->s.ntargets; i++)
        np_target_forget_stacks(d->s.targets[i]);
    d->cache_resets++;
    np_debug("stack caches over %" PRIu64 " bytes: cleared", d->cfg.cache_bytes);
}

static void update_rates(struct daemon *d) {
    uint64_t launches = 0;
    for (size_t i = 0; i < d->s.ntargets; i++) {
        struct np_target *t = d->s.targets[i];
        struct dproc *p = np_map_get_u64(&d->procs, (uint64_t)t->pid);
        launches += t->launches;
        if (p) {
            p->launches_per_s = (double)(t->launches - p->launches_prev);
            p->launches_prev = t->launches;
        }
    }
    uint64_t records = np_session_records_received(&d->s);
    d->launches_per_s =
        launches >= d->launches_prev_total ? (double)(launches - d->launches_prev_total) : 0;
    d->records_per_s = (double)(records - d->records_prev_total);
    d->launches_prev_total = launches;
    d->records_prev_total = records;
}

static void retain(struct daemon *d) {
    struct np_retention r;
    int err = np_outset_retain(d->cfg.output_dir, d->cfg.max_output_bytes,
                               ms_to_ns(d->cfg.max_output_age_ms), d->sets, &r);
    if (err) {
        np_warn("retention of %s: %s", d->cfg.output_dir, strerror(-err));
        return;
    }
    d->retention = r;
    d->deleted_sets += r.deleted_sets;
    if (r.deleted_sets)
        np_info("retention: deleted the %" PRIu64 " oldest output sets (%" PRIu64 " MiB kept)",
                r.deleted_sets, r.bytes >> 20);
}

/* ---- configuration --------------------------------------------------- */

static void apply_log_level(const struct daemon *d, bool verbose) {
    np_log_set_level(verbose ? NP_LOG_DEBUG : d->cfg.log_level);
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
    if (!rc && d->output_dir_arg) {
        char *dir = strdup(d->output_dir_arg);
        if (!dir)
            return -ENOMEM;
        free(cfg->output_dir);
        cfg->output_dir = dir;
    }
    return rc;
}

static bool same_text(const char *a, const char *b) {
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* SIGHUP: a bad file keeps the old configuration. What was set up at start
 * (sockets, the output directory, BPF sizes) changes at the next restart. */
static void reload(struct daemon *d, bool verbose) {
    struct np_daemon_config next = {0};
    if (load_config(d, &next, false) < 0) {
        np_config_free(&next);
        np_warn("configuration not reloaded: the old one stays in force");
        return;
    }
    struct np_daemon_config *old = &d->cfg;
    if (!same_text(old->output_dir, next.output_dir) ||
        !same_text(old->ctl_socket, next.ctl_socket) ||
        !same_text(old->cupti_socket, next.cupti_socket) || old->gpu != next.gpu ||
        old->ring_buffer_bytes != next.ring_buffer_bytes || old->stack_bytes != next.stack_bytes ||
        old->unwind != next.unwind || old->python != next.python ||
        old->python_depth != next.python_depth || old->gpu_timeout_ms != next.gpu_timeout_ms)
        np_warn("reload: output_dir, sockets, gpu, gpu_timeout, ring_buffer, unwind, stack_bytes "
                "and python* keep their values until the daemon restarts");
    bool aggregate_was = old->aggregate;
    bool flag_moved = !same_text(old->flag_file, next.flag_file);
    /* start-time settings: the running values move into `next`, which replaces `old` */
    free(next.output_dir);
    free(next.ctl_socket);
    free(next.cupti_socket);
    next.output_dir = old->output_dir;
    next.ctl_socket = old->ctl_socket;
    next.cupti_socket = old->cupti_socket;
    old->output_dir = old->ctl_socket = old->cupti_socket = NULL;
    next.gpu = old->gpu;
    next.ring_buffer_bytes = old->ring_buffer_bytes;
    next.stack_bytes = old->stack_bytes;
    next.unwind = old->unwind;
    next.python = old->python;
    next.python_depth = old->python_depth;
    next.gpu_timeout_ms = old->gpu_timeout_ms;
    np_config_free(old);
    *old = next;
    apply_log_level(d, verbose);
    if (d->window_open) {
        uint64_t max_end = d->window_start_mono + ms_to_ns(d->cfg.max_window_ms);
        if (d->window_end_mono > max_end)
            d->window_end_mono = max_end;
    }
    set_bpf_switch(d);
    if (d->limit_active) /* a new rate_limit applies at once */
        d->s.skel->bss->rate_limit = (__u32)d->cfg.rate_limit;
    if (aggregate_was && !d->cfg.aggregate && !d->window_open)
        each_proc(d, reopen_set); /* the always-on sets end now */
    if (flag_moved) {             /* another flag file: its presence counts from now */
        char msg[256];
        if (d->window_open && strcmp(d->window_reason, "flag_file") == 0)
            close_window(d, "flag file changed", msg, sizeof(msg));
        d->flag_present = false;
    }
    /* filters: processes no longer selected go, newly selected ones come */
    for (size_t i = 0; i < d->procs.cap; i++) {
        struct dproc *p = d->procs.slots[i].used ? d->procs.slots[i].value : NULL;
        if (p && !p->exited && !selected(d, &p->labels)) {
            close_set(d, p);
            untrace(d, p, "not selected by the reloaded filters");
        }
    }
    np_map_free(&d->rejected, NULL); /* the filters changed: every process anew */
    np_map_init(&d->rejected);
    np_proc_each(consider_existing, d);
    np_info("configuration reloaded from %s", d->config_path);
}

/* ---- set-up and the loop ------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f, "usage: ncclprobe daemon [--config FILE] [--output-dir DIR] [-v]\n"
               "Traces every process that maps a CUDA or NCCL library, system-wide.\n"
               "  --config FILE      configuration (default " NP_CONFIG_DEFAULT_PATH "; a missing\n"
               "                     default file means the built-in defaults)\n"
               "  --output-dir DIR   where output sets go (overrides output_dir)\n"
               "  -v, --verbose      debug messages\n"
               "Signals: SIGHUP reloads the configuration, SIGTERM/SIGINT write and exit.\n"
               "Control: ncclprobe ctl start|stop|status|snapshot. See man ncclprobe.\n");
}

static int parse_args(int argc, char **argv, struct daemon *d, bool *verbose) {
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"output-dir", required_argument, NULL, 'o'},
                                         {"verbose", no_argument, NULL, 'v'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    d->config_path = NP_CONFIG_DEFAULT_PATH;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "+c:o:vh", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            d->config_path = optarg;
            d->config_given = true;
            break;
        case 'o':
            if (optarg[0] != '/') {
                fprintf(stderr, "ncclprobe daemon: --output-dir must be an absolute path\n");
                return -EINVAL;
            }
            d->output_dir_arg = optarg;
            break;
        case 'v':
            *verbose = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -EINVAL;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ncclprobe daemon: unexpected argument '%s'\n", argv[optind]);
        return -EINVAL;
    }
    return 0;
}

static void options_from_config(struct daemon *d) {
    struct options *o = &d->s.opt;
    const struct np_daemon_config *c = &d->cfg;
    o->ring_mb = (long)(c->ring_buffer_bytes >> 20);
    o->wakeup_kb = 256;
    o->unwind = c->unwind == NP_CFG_UNWIND_FP      ? UNWIND_FP
                : c->unwind == NP_CFG_UNWIND_DWARF ? UNWIND_DWARF
                                                   : UNWIND_AUTO;
    o->stack_bytes = c->stack_bytes;
    o->python = c->python;
    o->python_depth = c->python_depth;
    o->cupti_socket = c->cupti_socket;
    o->no_gpu = !c->gpu;
    o->gpu_timeout_ms = (long)c->gpu_timeout_ms;
}

static int setup(struct daemon *d) {
    if (gethostname(d->host, sizeof(d->host) - 1) < 0)
        snprintf(d->host, sizeof(d->host), "localhost");
    umask(077); /* sets, their files and the control socket: root's only */
    /* every traced process holds a few link fds until they are closed */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }
    int err = np_preflight();
    if (err)
        return err;
    options_from_config(d);
    d->s.epfd = epoll_create1(EPOLL_CLOEXEC);
    err = d->s.epfd < 0 ? -errno : np_session_setup_signals(&d->s, SIGHUP);
    if (!err)
        err = np_session_setup_bpf(&d->s);
    if (err)
        return err;
    d->s.ingest = (struct np_ingest){
        .attacher = &d->s.attacher,
        .find_target = np_session_find_target,
        .on_new_mapping = np_session_on_new_mapping,
        .output_for = output_for,
        .on_held = on_held,
        .ctx = &d->s,
        .fp_fallback = d->s.opt.unwind == UNWIND_AUTO,
        .python_mode = d->s.opt.python,
    };
    d->s.on_gpu_retired = on_gpu_retired;
    err = np_session_setup_gpu(&d->s);
    if (err)
        return err;
    err = np_discover_open(on_discovery, d, &d->disc);
    if (err) {
        np_err("cannot load the process discovery programs: %s", strerror(-err));
        return err;
    }
    err = np_session_watch(d->s.epfd, np_discover_fd(d->disc), TAG_DISCOVER);
    if (err)
        return err;
    struct np_ctl_ops ops = {.ctx = d, .handle = on_ctl};
    err = np_ctl_server_open(d->cfg.ctl_socket, &ops, &d->ctl);
    if (err) {
        np_err("cannot listen on %s: %s%s", d->cfg.ctl_socket, strerror(-err),
               err == -EADDRINUSE ? " (is another ncclprobe daemon running?)" : "");
        return err;
    }
    err = np_session_watch(d->s.epfd, np_ctl_server_fd(d->ctl), TAG_CTL);
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
    d->start_mono = np_monotonic_ns();
    d->cpu_prev_ns = cpu_ns(); /* the budget counts from here, not the set-up */
    d->wall_prev_ns = d->start_mono;
    new_period(d);
    set_bpf_switch(d);
    return 0;
}

static void on_signals(struct daemon *d) {
    struct signalfd_siginfo si;
    while (read(d->s.sigfd, &si, sizeof(si)) == sizeof(si)) {
        if (si.ssi_signo == SIGHUP)
            d->reload = true;
        else
            d->stop = true;
    }
}

static void tick(struct daemon *d, bool verbose) {
    uint64_t now = np_monotonic_ns();
    char msg[256];
    check_flag_file(d);
    if (d->window_open && now >= d->window_end_mono)
        close_window(d, "duration", msg, sizeof(msg));
    if (!d->window_open && d->cfg.aggregate &&
        now - d->period_start_mono >= ms_to_ns(d->cfg.aggregate_interval_ms)) {
        new_period(d);
        each_proc(d, reopen_set);
    }
    np_session_gpu_tick(&d->s, !d->s.backlog);
    reap_exited(d, !d->s.backlog);
    finish_closing_sets(d, false);
    reap_converters(d);
    np_ctl_server_tick(d->ctl, now);
    rescan_after_losses(d);
    if (d->reload) {
        d->reload = false;
        reload(d, verbose);
    }
    if (now - d->last_second_ns >= 1000000000ull) {
        d->last_second_ns = now;
        check_cpu_budget(d, now);
        check_caches(d);
        update_rates(d);
        flush_open_sets(d);
    }
    if (now - d->last_retain_ns >= RETAIN_EVERY_NS) {
        d->last_retain_ns = now;
        retain(d);
    }
}

static int run(struct daemon *d, bool verbose) {
    struct epoll_event evs[16];
    np_proc_each(consider_existing, d);
    np_info("daemon ready: %zu processes traced, control socket %s, output in %s", d->s.ntargets,
            d->cfg.ctl_socket, d->cfg.output_dir);
    while (!d->stop) {
        int n = epoll_wait(d->s.epfd, evs, 16, d->s.backlog ? 0 : TICK_MS);
        if (n < 0 && errno != EINTR)
            return -errno;
        d->s.ingest.budget = CONSUME_BUDGET;
        int err = ring_buffer__consume(d->s.rb);
        d->s.backlog = err == NP_INGEST_YIELD;
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;
            if (tag == NP_TAG_SIGNAL)
                on_signals(d);
            else if (tag == NP_TAG_GPU)
                np_gpu_server_poll(d->s.gpu_server);
            else if (tag == TAG_DISCOVER)
                np_discover_poll(d->disc);
            else if (tag == TAG_CTL)
                np_ctl_server_poll(d->ctl);
            else if (tag >= NP_TAG_TARGET) {
                struct dproc *p = np_map_get_u64(&d->procs, tag - NP_TAG_TARGET);
                if (p && !p->exited)
                    untrace(d, p, "exited");
            }
        }
        tick(d, verbose);
    }
    return 0;
}

/* SIGTERM: every record BPF sent is read, every set written. */
static void shut_down(struct daemon *d) {
    np_info("stopping: writing every open output set");
    if (d->s.skel && d->s.rb)
        np_session_stop_and_drain(&d->s);
    np_session_finish_gpu(&d->s);
    each_proc(d, close_set);
    finish_closing_sets(d, true);
    finish_converters(d);
}

int np_cmd_daemon(int argc, char **argv) {
    struct daemon *d = calloc(1, sizeof(*d));
    if (!d)
        return 1;
    d->s.epfd = d->s.sigfd = -1;
    d->s.child.release_fd = -1;
    np_map_init(&d->procs);
    np_map_init(&d->exe_checked);
    np_map_init(&d->rejected);
    bool verbose = false;
    int err = parse_args(argc, argv, d, &verbose);
    if (!err)
        err = load_config(d, &d->cfg, true);
    if (err) {
        np_config_free(&d->cfg);
        free(d);
        return EXIT_USAGE;
    }
    apply_log_level(d, verbose);
    np_session_set_verbose(verbose);
    err = setup(d);
    if (!err)
        err = run(d, verbose);
    if (d->s.skel)
        shut_down(d);
    else
        finish_closing_sets(d, true);
    np_ctl_server_close(d->ctl);
    np_discover_close(d->disc);
    np_session_free(&d->s);
    np_map_free(&d->procs, free_proc);
    np_map_free(&d->exe_checked, NULL);
    np_map_free(&d->rejected, NULL);
    free(d->to_convert);
    np_config_free(&d->cfg);
    free(d);
    return err ? 1 : 0;
}
