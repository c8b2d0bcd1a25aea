/* processes.c - which processes the daemon traces: those mapping a
 * CUDA/NCCL library at start (a /proc walk), then every exec and library
 * load BPF reports (discover.c), each filtered by the configuration; the
 * probes attached to them, their exits (the pidfd) and exec's, the target
 * dropped once its queued records are read, and the discovery delays `ctl
 * status` reports. See internal.h. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attach/elfscan.h"
#include "daemon/internal.h"
#include "session/target.h"

#define EXIT_LINGER_NS 1000000000ull /* an exited process's records are read by then */

/* Why a process is looked at. */
enum event { EV_SCAN, EV_MMAP, EV_EXEC };

static void note_delay(struct daemon *d, double ms) {
    d->delays_ms[d->ndelays++ % NDELAYS] = ms;
    if (ms > d->delay_max_ms)
        d->delay_max_ms = ms;
}

/* Libraries of t attached after the notification at seen_ns: how long after. */
static void note_delays(struct daemon *d, const struct np_target *t, uint64_t seen_ns) {
    for (size_t i = 0; seen_ns && i < t->proc.nlibs; i++) {
        const struct np_library *lib = &t->proc.libs[i];
        if (lib->cuda && lib->seen_ns == seen_ns && lib->attached_ns >= seen_ns)
            note_delay(d, (double)(lib->attached_ns - seen_ns) / 1e6);
    }
}

static bool selected(const struct daemon *d, const struct np_proc_labels *l) {
    struct np_process_labels pl = {l->comm, l->exe, l->cgroup, l->container};
    return np_config_selects(&d->cfg, &pl);
}

/* Whether the ELF file at fd has launch probe points of its own. */
static bool elf_has_launch_probes(int fd) {
    struct np_elf_scan scan;
    bool launches = false;
    if (np_elf_scan_fd(fd, &scan) < 0)
        return false;
    for (size_t i = 0; i < scan.count; i++)
        launches |= scan.matches[i].def->family != NP_FAMILY_LOADER &&
                    scan.matches[i].def->family != NP_FAMILY_CUPTI;
    np_elf_scan_free(&scan);
    return launches;
}

/* A static CUDA program: its executable has launch probe points itself.
 * Cached per file identity: a node execs the same few programs all day. */
static bool exe_has_probes(struct daemon *d, pid_t pid) {
    char path[64], key[96];
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    if (fstat(fd, &st) < 0) {
        close(fd);
        return false;
    }
    snprintf(key, sizeof(key), "%" PRIu64 ":%" PRIu64 ":%" PRId64 ":%" PRId64, (uint64_t)st.st_dev,
             (uint64_t)st.st_ino, (int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec);
    uintptr_t known = (uintptr_t)np_map_get_str(&d->exe_checked, key);
    if (!known) {
        known = elf_has_launch_probes(fd) ? 1 : 2;
        np_map_put_str(&d->exe_checked, key, (void *)known);
    }
    close(fd);
    return known == 1;
}

/* Stops tracing a process: its set closes, its probes go. The target
 * itself stays until its queued records are read (procs_reap_exited). */
static void untrace(struct daemon *d, struct dproc *p, const char *why) {
    if (!p->exited) {
        /* what it sent before it went - in the ring or the reader's backlog
         * - goes into its set before that closes */
        if (d->s.drain)
            np_session_read_all(&d->s);
        p->exited = true;
        p->exited_ns = np_monotonic_ns();
        struct np_target *t = np_session_find_target(&d->s, p->labels.pid);
        if (t)
            np_session_target_exited(&d->s, t);
        if (p->set)
            sets_count(d, p);
    }
    np_attacher_release_pid(&d->s.attacher, p->labels.pid);
    d->detached++;
    np_info("pid %d (%s): no longer traced (%s)", p->labels.pid, p->labels.comm, why);
}

void procs_on_exit(struct daemon *d, pid_t pid) {
    struct dproc *p = np_map_get_u64(&d->procs, (uint64_t)pid);
    if (p && !p->exited)
        untrace(d, p, "exited");
}

static void consider(struct daemon *d, pid_t pid, uint64_t seen_ns, enum event why);

/* The pids of exited processes whose records have all been read (ring_read,
 * or long ago) into gone[max]; how many. */
static size_t find_gone(struct daemon *d, bool ring_read, pid_t *gone, size_t max) {
    uint64_t now = np_monotonic_ns();
    size_t n = 0;
    for (size_t i = 0; i < d->procs.cap && n < max; i++) {
        const struct np_map_entry *e = &d->procs.slots[i];
        struct dproc *p = e->used ? e->value : NULL;
        if (p && p->exited && (ring_read || now - p->exited_ns > 10 * EXIT_LINGER_NS) &&
            now - p->exited_ns >= EXIT_LINGER_NS)
            gone[n++] = p->labels.pid;
    }
    return n;
}

void procs_reap_exited(struct daemon *d, bool ring_read) {
    pid_t gone[64];
    size_t n = find_gone(d, ring_read, gone, NP_ARRAY_SIZE(gone));
    for (size_t i = 0; i < n; i++) {
        struct dproc *p = np_map_del_u64(&d->procs, (uint64_t)gone[i]);
        bool reconsider = p->reconsider;
        metrics_forget(d, gone[i]);
        sets_close(d, p);
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

/* Probes on what pid has mapped, its symbolizer and Python runtime: 0 and
 * *out; 1: nothing to probe; -errno (-ESRCH: gone). */
static int attach_target(struct daemon *d, pid_t pid, uint64_t seen_ns, struct np_target **out) {
    struct np_target *t = NULL;
    int err = np_session_add_target(&d->s, pid, &t);
    /* its Python runtime, then probes, then symbols: its first launch may
     * come within milliseconds, and must come with its Python frames */
    if (!err)
        np_session_find_python(&d->s, t);
    int n = err ? err : np_attach_from_maps(&d->s.attacher, &t->proc, seen_ns);
    if (n >= 0 && (err = np_session_ensure_symbolizer(t)) < 0)
        n = err;
    if (n >= 0 && t) {
        t->proc.attached = true;
        np_session_probes_placed(&d->s, t);
    }
    int rc = n < 0 ? n : t && np_process_probe_count(&t->proc) == 0 ? 1 : 0;
    if (rc && t) {
        np_attacher_release_pid(&d->s.attacher, pid);
        np_session_remove_target(&d->s, t);
    }
    *out = rc ? NULL : t;
    return rc;
}

static void attach_failed(struct daemon *d, const struct np_proc_labels *labels, int err) {
    if (err == -ESRCH) {
        d->missed++;
        np_debug("pid %d (%s): gone before it could be attached", labels->pid, labels->comm);
    } else {
        np_warn("pid %d (%s): cannot attach: %s", labels->pid, labels->comm, strerror(-err));
    }
}

/* Starts tracing a process the filters selected. */
static int trace(struct daemon *d, const struct np_proc_labels *labels, uint64_t seen_ns) {
    struct np_target *t;
    int err = attach_target(d, labels->pid, seen_ns, &t);
    if (err < 0)
        attach_failed(d, labels, err);
    if (err)
        return err < 0 ? err : -ENOENT;
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
        sets_open(d, p);
    if (d->cfg.cupti_inject == NP_CUPTI_INJECT_ALWAYS || (d->window_open && d->window_cupti))
        np_session_request_agent(&d->s, t);
    np_info("tracing pid %d (%s%s%s, ns pid %d): %d probes in %d libraries", labels->pid,
            labels->comm, labels->container[0] ? ", container " : "",
            labels->container[0] ? labels->container : "", labels->ns_pid,
            np_process_probe_count(&t->proc), np_process_cuda_library_count(&t->proc));
    return 0;
}

/* A process not traced yet: traced when it has CUDA probe points and the
 * filters select it. */
static void consider_new(struct daemon *d, pid_t pid, uint64_t seen_ns, enum event why) {
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
    if (labels.tracer) {
        /* A debugger's breakpoint where we put a uprobe is taken by the
         * uprobe (the kernel runs the probe and steps over the instruction),
         * so gdb would never stop in cudaLaunchKernel or see dlopen: leave
         * the process to its debugger until it execs another program. */
        d->skipped_ptraced++;
        np_map_put_u64(&d->rejected, (uint64_t)pid, (void *)1);
        np_info("pid %d (%s): not traced, it runs under ptrace (pid %d)", pid, labels.comm,
                labels.tracer);
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
        p->reconsider = true; /* procs_reap_exited looks at it again */
        return;
    }
    if (p && why == EV_SCAN) /* traced: its own loads are reported as they happen */
        return;
    if (!p) {
        consider_new(d, pid, seen_ns, why);
        return;
    }
    struct np_target *t = np_session_find_target(&d->s, pid); /* it loaded a library */
    if (t) {
        np_session_on_new_mapping(&d->s, t, seen_ns);
        note_delays(d, t, seen_ns);
    }
}

int procs_consider_existing(void *ctx, pid_t pid) {
    consider(ctx, pid, 0, EV_SCAN);
    return 0;
}

void procs_rescan_after_losses(struct daemon *d) {
    uint64_t lost = np_discover_lost(d->disc);
    if (lost == d->lost_seen)
        return;
    np_warn("%" PRIu64 " process notifications lost: looking through /proc", lost - d->lost_seen);
    d->lost_seen = lost;
    np_proc_each(procs_consider_existing, d);
}

void procs_on_discovery(void *ctx, const struct np_disc_event *ev) {
    consider(ctx, (pid_t)ev->pid, ev->ts_ns, ev->kind == NP_DISC_EXEC ? EV_EXEC : EV_MMAP);
}

void procs_refilter(struct daemon *d) {
    for (size_t i = 0; i < d->procs.cap; i++) {
        struct dproc *p = d->procs.slots[i].used ? d->procs.slots[i].value : NULL;
        if (p && !p->exited && !selected(d, &p->labels)) {
            sets_close(d, p);
            untrace(d, p, "not selected by the reloaded filters");
        }
    }
    np_map_free(&d->rejected, NULL); /* the filters changed: every process anew */
    np_map_init(&d->rejected);
    np_proc_each(procs_consider_existing, d);
}

static void free_proc(void *p) {
    free(p);
}

void procs_free(struct daemon *d) {
    np_map_free(&d->procs, free_proc);
    np_map_free(&d->exe_checked, NULL);
    np_map_free(&d->rejected, NULL);
}
