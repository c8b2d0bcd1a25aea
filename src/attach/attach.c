/* attach.c - probe registry and uprobe attachment (see attach.h). */
#define _GNU_SOURCE
#include "attach/attach.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attach/closer.h"
#include "attach/elfscan.h"
#include "attach/nccl_flows_attach.h"
#include "attach/procmaps.h"
#include "attach/uprobe_multi.h"
#include "lib/util.h"
#include "ncclprobe.skel.h"

void np_attacher_init(struct np_attacher *a, struct ncclprobe_bpf *skel, bool use_multi) {
    memset(a, 0, sizeof(*a));
    a->skel = skel;
    a->use_multi = use_multi;
    np_map_init(&a->scan_cache);
}

/* What the cache keeps per file: its probe points and, for a libnccl, its
 * struct layout (read from DWARF the first time a target maps it). */
struct np_scanned_file {
    struct np_elf_scan scan;
    struct np_nccl_layout *nccl;
    struct np_flow_layout *flow; /* --nccl-flows only */
};

static void free_scan(void *p) {
    struct np_scanned_file *file = p;
    if (!file)
        return;
    np_elf_scan_free(&file->scan);
    free(file->nccl);
    free(file->flow);
    free(file);
}

/* Removing a uprobe waits for an RCU grace period (tens to hundreds of ms
 * on a busy machine), one per link: destroy links from several threads so
 * the waits overlap instead of adding up. */
#define DETACH_THREADS 16

struct detach_work {
    struct np_attacher *a;
    size_t next; /* next site to detach, shared */
};

/* Work item i: a uprobe_multi link first, then the per-probe links. */
static void *detach_worker(void *arg) {
    struct detach_work *w = arg;
    for (;;) {
        size_t i = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED);
        if (i < w->a->nmulti) {
            close(w->a->multi_fds[i]);
            w->a->multi_fds[i] = -1;
            continue;
        }
        i -= w->a->nmulti;
        if (i >= w->a->nsites)
            return NULL;
        struct np_probe_site *s = &w->a->sites[i];
        bpf_link__destroy(s->link);
        bpf_link__destroy(s->ret_link);
        s->link = s->ret_link = NULL;
        if (s->fast_fd)
            close(s->fast_fd - 1);
        s->fast_fd = 0;
    }
}

void np_attacher_detach_all(struct np_attacher *a) {
    struct detach_work work = {a, 0};
    pthread_t threads[DETACH_THREADS];
    int started = 0;

    while (started < DETACH_THREADS && (size_t)started * 2 < a->nsites + a->nmulti &&
           pthread_create(&threads[started], NULL, detach_worker, &work) == 0)
        started++;
    detach_worker(&work); /* this thread helps, and does it all if none started */
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    a->nmulti = 0;
}

/* ---- releasing one process's probes (the daemon) ----------------------------
 * Its links go to the closer (closer.c) as one batch, closed off this thread. */

/* Zeroes a per-CPU counter of a probe id (before the id is reused). */
static void zero_percpu(struct bpf_map *map, uint32_t id) {
    int ncpus = libbpf_num_possible_cpus();
    if (ncpus <= 0)
        return;
    uint64_t zeros[ncpus];
    memset(zeros, 0, sizeof(zeros));
    bpf_map__update_elem(map, &id, sizeof(id), zeros, sizeof(zeros), BPF_ANY);
}

static void fast_forget(struct np_attacher *a, pid_t pid);

/* A link's fd into the close batch b (closed off this thread), or closed
 * here and now when there is no batch or no memory for it. */
static void close_later(void *b, int fd) {
    if (!b || !np_close_batch_add_fd(b, fd))
        close(fd);
}

int np_attacher_release_pid(struct np_attacher *a, pid_t pid) {
    fast_forget(a, pid);
    struct np_close_batch *b = np_close_batch_new();
    int released = 0;
    for (size_t i = 0; i < a->nsites; i++) {
        struct np_probe_site *s = &a->sites[i];
        if (s->pid != pid || s->released)
            continue;
        /* off in BPF first: a zero row serves no process */
        struct np_probe_cfg off = {0};
        bpf_map__update_elem(a->skel->maps.probe_cfg, &s->id, sizeof(s->id), &off, sizeof(off),
                             BPF_ANY);
        bpf_map__delete_elem(a->skel->maps.nccl_cfg, &s->id, sizeof(s->id), 0);
        if (s->fast_fd && (!b || !np_close_batch_add_fd(b, s->fast_fd - 1)))
            close(s->fast_fd - 1); /* no memory: closed here, at once */
        s->fast_fd = 0;
        if (!b || !np_close_batch_add_site(b, s)) { /* no memory: closed here, at once */
            bpf_link__destroy(s->link);
            bpf_link__destroy(s->ret_link);
            s->link = s->ret_link = NULL;
        }
        s->released = true;
        released++;
    }
    size_t kept = 0;
    for (size_t i = 0; i < a->nmulti; i++) {
        if (a->multi_pids[i] != pid) {
            a->multi_fds[kept] = a->multi_fds[i];
            a->multi_pids[kept++] = a->multi_pids[i];
        } else if (!b || !np_close_batch_add_fd(b, a->multi_fds[i])) {
            close(a->multi_fds[i]);
        }
    }
    a->nmulti = kept;
    if (a->flows)
        np_flow_attacher_release_pid(a->flows, pid, close_later, b);
    if (b)
        np_closer_submit(&a->closer, b);
    return released;
}

void np_attacher_destroy(struct np_attacher *a) {
    np_closer_free(a->closer);
    np_attacher_detach_all(a);
    for (size_t i = 0; i < a->nsites; i++)
        free(a->sites[i].binary);
    free(a->multi_fds);
    free(a->multi_pids);
    free(a->sites);
    np_map_free(&a->scan_cache, free_scan);
    memset(a, 0, sizeof(*a));
}

const struct np_probe_site *np_attacher_site(const struct np_attacher *a, uint32_t id) {
    if (id == 0 || id > a->nsites)
        return NULL;
    return &a->sites[id - 1];
}

static struct np_probe_site *new_site(struct np_attacher *a) {
    uint32_t id = np_closer_reusable_id(a->closer);
    if (id) { /* a released id: its counters start again from zero */
        struct np_probe_site *s = &a->sites[id - 1];
        free(s->binary);
        memset(s, 0, sizeof(*s));
        s->id = id;
        zero_percpu(a->skel->maps.probe_hits, id);
        zero_percpu(a->skel->maps.probe_drops, id);
        zero_percpu(a->skel->maps.probe_limited, id);
        struct np_rate_window fresh = {0};
        bpf_map__update_elem(a->skel->maps.probe_rate, &id, sizeof(id), &fresh, sizeof(fresh),
                             BPF_ANY);
        return s;
    }
    if (a->nsites + 1 >= NP_MAX_PROBES)
        return NULL;
    struct np_probe_site *sites = np_grow_array(a->sites, &a->cap, a->nsites + 1, sizeof(*sites));
    if (!sites)
        return NULL;
    a->sites = sites;
    struct np_probe_site *s = &a->sites[a->nsites++];
    memset(s, 0, sizeof(*s));
    s->id = (uint32_t)a->nsites;
    return s;
}

/* An NCCL kernel launch whose libnccl's DWARF says where its plan is. */
static bool nccl_plan_read(const struct np_probe_site *s) {
    return s->nccl && s->nccl->status == 0 && s->def->role == NP_ROLE_LAUNCH &&
           s->def->layout == NP_LAYOUT_NCCL_LAUNCH;
}

static struct np_probe_cfg site_cfg(const struct np_probe_site *s) {
    struct np_probe_cfg cfg = {
        .pid = (uint32_t)s->pid,
        .role = s->is_thunk ? NP_ROLE_THUNK : (uint8_t)s->def->role,
        .deref_arg = (int8_t)s->def->deref_arg,
        .out_arg = (uint8_t)s->def->out_arg,
        .src_arg = (uint8_t)s->def->src_arg,
        .src_kind = (uint8_t)s->def->src_kind,
        .graph_op = (uint8_t)s->def->graph_op,
        .hold = s->hold,
        .fast = s->fast,
        .deref_off = 0,
        .deref_len = (uint32_t)s->def->deref_len,
    };
    cfg.nccl_plan = nccl_plan_read(s);
    /* an NCCL API call: its communicator's identity rides in deref */
    int comm_arg = np_probe_comm_arg(s->def);
    if (s->nccl && s->nccl->comm_ok && s->def->role == NP_ROLE_API && comm_arg >= 0) {
        cfg.deref_arg = (int8_t)comm_arg;
        cfg.deref_off = s->nccl->cfg.comm_lo;
        cfg.deref_len = s->nccl->cfg.comm_len;
    }
    return cfg;
}

/* The probe's configuration must be in BPF before its uprobe exists: it
 * can fire the moment it is attached. */
static int write_site_cfg(struct np_attacher *a, const struct np_probe_site *s) {
    struct np_probe_cfg cfg = site_cfg(s);
    /* an NCCL kernel launch: what of its plan BPF reads (cfg.nccl_plan says look) */
    if (cfg.nccl_plan && bpf_map__update_elem(a->skel->maps.nccl_cfg, &s->id, sizeof(s->id),
                                              &s->nccl->cfg, sizeof(s->nccl->cfg), BPF_ANY) < 0)
        return -errno;
    if (bpf_map__update_elem(a->skel->maps.probe_cfg, &s->id, sizeof(s->id), &cfg, sizeof(cfg),
                             BPF_ANY) < 0)
        return -errno;
    return 0;
}

/* Probes whose work is done at the function's return too. */
static bool needs_return(const struct np_probe_site *s) {
    if (s->is_thunk)
        return false;
    if (s->def->role == NP_ROLE_GRAPH_CALL) /* event records and waits: entry only */
        return s->def->graph_op != NP_GOP_EVENT_RECORD && s->def->graph_op != NP_GOP_STREAM_WAIT;
    return s->def->role == NP_ROLE_HANDLE_ENTRY;
}

/* One perf-event uprobe per probe (and a uretprobe for handle producers and
 * graph calls). */
static int attach_site(struct np_attacher *a, struct np_probe_site *s, const char *binary) {
    LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = s->id);
    s->link =
        bpf_program__attach_uprobe_opts(a->skel->progs.np_entry, s->pid, binary, s->offset, &opts);
    if (!s->link)
        return -errno;
    if (needs_return(s)) {
        opts.retprobe = true;
        s->ret_link = bpf_program__attach_uprobe_opts(a->skel->progs.np_return, s->pid, binary,
                                                      s->offset, &opts);
        if (!s->ret_link) {
            int err = -errno;
            bpf_link__destroy(s->link); /* half a handle probe is no probe */
            s->link = NULL;
            return err;
        }
    }
    return 0;
}

/* A fast-path launch probe: a link of its own, to be detached and attached
 * again alone (a uprobe_multi link of one uprobe where those are used). */
static int attach_fast_site(struct np_attacher *a, struct np_probe_site *s, const char *binary) {
    if (!a->use_multi)
        return attach_site(a, s, binary);
    uint64_t cookie = s->id;
    int fd = np_uprobe_multi_attach(bpf_program__fd(a->skel->progs.np_entry_multi), s->pid, binary,
                                    &s->offset, &cookie, 1, false);
    if (fd < 0)
        return fd;
    s->fast_fd = fd + 1;
    return 0;
}

static bool site_attached(const struct np_probe_site *s) {
    return s->link || s->fast_fd;
}

static void detach_fast_site(struct np_probe_site *s) {
    if (s->fast_fd)
        close(s->fast_fd - 1);
    s->fast_fd = 0;
    bpf_link__destroy(s->link);
    s->link = NULL;
}

static void *detach_fast_worker(void *arg) {
    detach_fast_site(arg);
    return NULL;
}

static int remember_multi_link(struct np_attacher *a, int fd, pid_t pid) {
    if (a->nmulti == a->multi_cap) {
        size_t ncap = a->multi_cap ? a->multi_cap * 2 : 16;
        int *fds = realloc(a->multi_fds, ncap * sizeof(*fds));
        if (fds)
            a->multi_fds = fds;
        pid_t *pids = realloc(a->multi_pids, ncap * sizeof(*pids));
        if (pids)
            a->multi_pids = pids;
        if (!fds || !pids)
            return -ENOMEM;
        a->multi_cap = ncap;
    }
    a->multi_pids[a->nmulti] = pid;
    a->multi_fds[a->nmulti++] = fd;
    return 0;
}

/* Attaches sites[first..] (one library of one process) with one
 * uprobe_multi link for the entries and one for the handle producers'
 * returns. On failure nothing stays attached and the caller falls back to
 * one perf link per probe. */
static int attach_library_multi(struct np_attacher *a, pid_t pid, const char *binary,
                                const uint32_t *ids, size_t n) {
    size_t nret = 0, nentry = 0;
    uint64_t *offsets = calloc(2 * n + 2, sizeof(*offsets));
    uint64_t *cookies = calloc(2 * n + 2, sizeof(*cookies));
    uint64_t *ret_offsets = offsets + n + 1, *ret_cookies = cookies + n + 1;
    int entry_fd = -1, ret_fd = -1, err = (!offsets || !cookies) ? -ENOMEM : 0;

    for (size_t i = 0; !err && i < n; i++) {
        const struct np_probe_site *s = &a->sites[ids[i] - 1];
        if (s->err || s->fast) /* a fast-path probe has a link of its own */
            continue;
        offsets[nentry] = s->offset, cookies[nentry++] = s->id;
        if (needs_return(s))
            ret_offsets[nret] = s->offset, ret_cookies[nret++] = s->id;
    }
    if (!err && nentry) {
        entry_fd = np_uprobe_multi_attach(bpf_program__fd(a->skel->progs.np_entry_multi), pid,
                                          binary, offsets, cookies, (uint32_t)nentry, false);
        err = entry_fd < 0 ? entry_fd : 0;
    }
    if (!err && nret) {
        ret_fd = np_uprobe_multi_attach(bpf_program__fd(a->skel->progs.np_return_multi), pid,
                                        binary, ret_offsets, ret_cookies, (uint32_t)nret, true);
        err = ret_fd < 0 ? ret_fd : 0;
    }
    if (!err && entry_fd >= 0)
        err = remember_multi_link(a, entry_fd, pid);
    if (!err && ret_fd >= 0 && (err = remember_multi_link(a, ret_fd, pid)) < 0)
        a->nmulti--; /* the entry link was just remembered: undo, it is closed below */
    if (err) {
        if (entry_fd >= 0)
            close(entry_fd);
        if (ret_fd >= 0)
            close(ret_fd);
        np_debug("pid %d: uprobe_multi link on %s failed (%s), one link per probe instead", pid,
                 binary, strerror(-err));
    }
    free(offsets);
    free(cookies);
    return err;
}

static int scan_cached(struct np_attacher *a, int fd, const struct stat *st,
                       struct np_scanned_file **out) {
    char key[128];
    snprintf(key, sizeof(key), "%" PRIu64 ":%" PRIu64 ":%" PRId64 ":%" PRId64 ".%ld",
             (uint64_t)st->st_dev, (uint64_t)st->st_ino, (int64_t)st->st_size,
             (int64_t)st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
    struct np_scanned_file *file = np_map_get_str(&a->scan_cache, key);
    if (file) {
        *out = file;
        return 0;
    }
    file = calloc(1, sizeof(*file));
    if (!file)
        return -ENOMEM;
    int err = np_elf_scan_fd(fd, &file->scan);
    if (!err)
        err = np_map_put_str(&a->scan_cache, key, file);
    if (err) {
        free_scan(file);
        return err;
    }
    *out = file;
    return 0;
}

/* A libnccl's layout, read from its DWARF the first time it is needed. */
static const struct np_nccl_layout *nccl_layout_of(struct np_scanned_file *file, const char *binary,
                                                   const char *target_path) {
    bool is_nccl = false;
    for (size_t i = 0; i < file->scan.count && !is_nccl; i++)
        is_nccl = file->scan.matches[i].def->family == NP_FAMILY_NCCL;
    if (!is_nccl)
        return NULL;
    if (!file->nccl) {
        file->nccl = malloc(sizeof(*file->nccl));
        if (!file->nccl)
            return NULL;
        uint64_t start = np_monotonic_ns();
        np_nccl_layout_load(binary, file->nccl);
        /* once per file: the layout is cached with the scan */
        if (file->nccl->support != NP_NCCL_FULL)
            np_warn("%s: %s", target_path, file->nccl->note);
        np_debug("%s: NCCL %s layout read in %.1f ms%s%s", target_path,
                 file->nccl->version[0] ? file->nccl->version : "(version unknown)",
                 (double)(np_monotonic_ns() - start) / 1e6,
                 file->nccl->missing[0] ? "; missing: " : "", file->nccl->missing);
    }
    return file->nccl;
}

/* --nccl-flows: the library's proxy-flow probes (their layout read once per file). */
static void attach_flows(struct np_attacher *a, pid_t pid, const char *binary,
                         const char *target_path, struct np_scanned_file *file) {
    if (!file->flow) {
        file->flow = malloc(sizeof(*file->flow));
        if (!file->flow)
            return;
        np_flow_layout_load(binary, file->flow);
        if (file->flow->status)
            np_warn("%s: NCCL proxy flows are not recorded: %s", target_path, file->flow->missing);
    }
    int slot = np_flow_attach_library(a->flows, pid, binary, target_path, file->nccl, file->flow);
    if (slot < 0)
        np_warn("pid %d: NCCL proxy flows of %s not recorded: %s", pid, target_path,
                strerror(-slot));
}

/* Attaches every match of one scanned file; records the library on the
 * target when it has any probe point. */
static int attach_scan(struct np_attacher *a, struct np_process *p, const char *target_path,
                       const char *binary, const struct stat *st, struct np_scanned_file *file,
                       uint64_t seen_ns) {
    const struct np_elf_scan *scan = &file->scan;
    if (scan->count == 0)
        return 0;
    const struct np_nccl_layout *nccl = nccl_layout_of(file, binary, target_path);
    struct np_library *lib = np_process_add_library(p, target_path);
    if (!lib)
        return -ENOMEM;
    size_t lib_index = (size_t)(lib - p->libs);
    snprintf(lib->build_id, sizeof(lib->build_id), "%s", scan->build_id);
    lib->dev = st->st_dev;
    lib->inode = st->st_ino;
    lib->seen_ns = seen_ns ? seen_ns : np_monotonic_ns();
    lib->late = p->attached;
    lib->nccl = nccl;
    lib->cudart_major = np_cudart_major_of(target_path);

    /* the new sites' ids: contiguous, unless released ids are reused */
    uint32_t *ids = calloc(scan->count, sizeof(*ids));
    if (!ids)
        return -ENOMEM;
    size_t n = 0, unplaced = 0;
    for (size_t i = 0; i < scan->count; i++) {
        const struct np_elf_match *m = &scan->matches[i];
        struct np_probe_site *s = new_site(a);
        if (!s) { /* out of probe ids (or memory): probe what has one */
            unplaced = scan->count - i;
            break;
        }
        ids[n++] = s->id;
        s->pid = p->pid;
        s->def = m->def;
        s->lib_index = lib_index;
        s->offset = m->file_offset;
        s->is_thunk = m->thunk_target >= 0;
        s->hold = p->hold_loads && m->def->family == NP_FAMILY_LOADER;
        s->nccl = m->def->family == NP_FAMILY_NCCL ? nccl : NULL;
        if (m->def->family != NP_FAMILY_LOADER && m->def->family != NP_FAMILY_CUPTI)
            p->libs[lib_index].cuda = true;
        if (m->def->family == NP_FAMILY_CUPTI)
            p->gpu_marker = true;
        if (a->fast_path && m->def->role == NP_ROLE_LAUNCH && np_fast_def_by_symbol(m->def->symbol))
            s->binary = strdup(binary);
        s->fast = s->binary != NULL;
        s->err = write_site_cfg(a, s);
    }
    bool multi = a->use_multi && attach_library_multi(a, p->pid, binary, ids, n) == 0;
    for (size_t i = 0; i < n; i++) {
        struct np_probe_site *s = &a->sites[ids[i] - 1];
        if (!s->err && s->fast)
            s->err = attach_fast_site(a, s, binary);
        else if (!s->err && !multi)
            s->err = attach_site(a, s, binary);
    }

    int attached = 0;
    lib = &p->libs[lib_index];
    if (unplaced) {
        lib->probes_failed += (int)unplaced;
        lib->first_error = -ENOSPC;
        np_warn("pid %d: %zu probes of %s not attached: more than %d probes in all", p->pid,
                unplaced, target_path, NP_MAX_PROBES - 1);
    }
    for (size_t i = 0; i < n; i++) {
        const struct np_probe_site *s = &a->sites[ids[i] - 1];
        if (!s->err) {
            lib->probes_ok++;
            attached++;
            continue;
        }
        lib->probes_failed++;
        if (!lib->first_error)
            lib->first_error = s->err;
        np_warn("pid %d: cannot probe %s in %s: %s", p->pid, s->def->symbol, target_path,
                strerror(-s->err));
    }
    lib->attached_ns = np_monotonic_ns();
    free(ids);
    if (a->flows && nccl)
        attach_flows(a, p->pid, binary, target_path, file);
    return attached;
}

/* Opens a file the target maps, through its root (containers), falling
 * back to map_files for files that were replaced or deleted on disk. */
/* A mapping of a file that has no path (a memfd: the CUPTI library loaded
 * live) through a descriptor the process holds on it: /proc/PID/fd needs
 * only ptrace read access, where map_files needs CAP_SYS_ADMIN, which the
 * daemon does not keep. The descriptor must be the mapping's file. */
static int open_through_fds(const struct np_process *p, const struct np_mapping *m, char *binary,
                            size_t size) {
    char dir[64];
    snprintf(dir, sizeof(dir), "/proc/%d/fd", p->pid);
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    int fd = -ENOENT;
    for (struct dirent *e; fd < 0 && (e = readdir(d)) != NULL;) {
        struct stat st;
        snprintf(binary, size, "%s/%s", dir, e->d_name);
        if (e->d_name[0] == '.' || stat(binary, &st) < 0 || (uint64_t)st.st_ino != m->inode)
            continue;
        fd = open(binary, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            fd = -errno;
    }
    closedir(d);
    return fd;
}

static int open_target_file(const struct np_process *p, const struct np_mapping *m, char *binary,
                            size_t size) {
    snprintf(binary, size, "/proc/%d/root%s", p->pid, m->path);
    int fd = open(binary, O_RDONLY | O_CLOEXEC);
    if (fd >= 0)
        return fd;
    snprintf(binary, size, "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, p->pid, m->start, m->end);
    fd = open(binary, O_RDONLY | O_CLOEXEC);
    if (fd >= 0)
        return fd;
    fd = -errno;
    if (strncmp(m->path, "/memfd:", 7) == 0)
        fd = open_through_fds(p, m, binary, size);
    return fd;
}

/* Scans the file open on fd (closed here) and attaches its probes, unless
 * the target's probes for it are already in place. Files are keyed on what
 * fstat says: the identity in /proc/PID/maps can differ (overlay file
 * systems), and a file pre-attached by path is the same file once mapped. */
static int attach_fd(struct np_attacher *a, struct np_process *p, int fd, const char *target_path,
                     const char *binary, uint64_t seen_ns) {
    struct stat st;
    struct np_scanned_file *scan = NULL;
    int err = fstat(fd, &st) < 0 ? -errno : 0;
    if (!err && np_process_saw_file(p, st.st_dev, st.st_ino)) {
        close(fd);
        return 0;
    }
    if (!err)
        err = np_process_mark_file(p, st.st_dev, st.st_ino);
    if (!err)
        err = scan_cached(a, fd, &st, &scan);
    close(fd);
    if (err)
        return err;
    return attach_scan(a, p, target_path, binary, &st, scan, seen_ns);
}

static int attach_mapping(struct np_attacher *a, struct np_process *p, const struct np_mapping *m,
                          uint64_t seen_ns) {
    char binary[4200];
    int fd = open_target_file(p, m, binary, sizeof(binary));
    if (fd < 0) {
        np_debug("pid %d: cannot open %s: %s", p->pid, m->path, strerror(-fd));
        return 0;
    }
    return attach_fd(a, p, fd, m->path, binary, seen_ns);
}

int np_attach_from_maps(struct np_attacher *a, struct np_process *p, uint64_t seen_ns) {
    struct np_maps maps;
    int err = np_maps_read(p->pid, &maps);
    if (err)
        return err;

    int total = 0;
    for (size_t i = 0; i < maps.count; i++) {
        const struct np_mapping *m = &maps.items[i];
        if (!m->exec || np_process_saw_file(p, m->dev, m->inode))
            continue;
        err = attach_mapping(a, p, m, seen_ns);
        if (err >= 0) /* the maps identity too: the next scan skips it unopened */
            err = np_process_mark_file(p, m->dev, m->inode) < 0 ? -ENOMEM : err;
        if (err < 0)
            break;
        total += err;
        err = 0;
    }
    np_maps_free(&maps);
    return err < 0 ? err : total;
}

int np_attach_file(struct np_attacher *a, struct np_process *p, const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    return fd < 0 ? -errno : attach_fd(a, p, fd, path, path, 0);
}

/* ---- CPython's code objects ---------------------------------------------- */

/* PyTypeObject's tp_dealloc: after its PyObject_VAR_HEAD (3 words) and
 * tp_name, tp_basicsize, tp_itemsize - the same in every GIL build. */
#define PY_TYPE_TP_DEALLOC 48

/* The library record of the mapping's file (the runtime's file has one:
 * Py_FinalizeEx is probed there), added when the process has none. */
static int library_of(struct np_process *p, const struct np_mapping *m) {
    for (size_t i = 0; i < p->nlibs; i++)
        if (strcmp(p->libs[i].path, m->path) == 0)
            return (int)i;
    struct np_library *lib = np_process_add_library(p, m->path);
    if (!lib)
        return -ENOMEM;
    lib->dev = m->dev;
    lib->inode = m->inode;
    lib->seen_ns = np_monotonic_ns();
    lib->late = p->attached;
    return (int)(lib - p->libs);
}

static int attach_code_free_at(struct np_attacher *a, struct np_process *p,
                               const struct np_mapping *m, uint64_t fn) {
    char binary[4200];
    int fd = open_target_file(p, m, binary, sizeof(binary));
    if (fd < 0)
        return fd;
    close(fd);
    int lib_index = library_of(p, m);
    if (lib_index < 0)
        return lib_index;
    struct np_probe_site *s = new_site(a);
    if (!s)
        return -ENOSPC;
    s->pid = p->pid;
    s->def = &np_python_code_free_def;
    s->lib_index = (size_t)lib_index;
    s->offset = fn - m->start + m->offset;
    s->err = write_site_cfg(a, s);
    if (!s->err)
        s->err = attach_site(a, s, binary);
    struct np_library *lib = &p->libs[lib_index];
    if (s->err) {
        lib->probes_failed++;
        if (!lib->first_error)
            lib->first_error = s->err;
        return s->err;
    }
    lib->probes_ok++;
    lib->attached_ns = np_monotonic_ns();
    return 1;
}

int np_attach_python_code_free(struct np_attacher *a, struct np_process *p) {
    const struct np_python_layout *l = &p->python.layout;
    if (!p->python.found || !l->walkable || !l->code_type || p->python_code_free)
        return 0;
    p->python_code_free = true; /* tried once, whatever comes of it */
    uint64_t fn = 0;
    int err = np_read_process(p->pid, l->code_type + PY_TYPE_TP_DEALLOC, &fn, sizeof(fn));
    if (err)
        return err;
    struct np_maps maps;
    if ((err = np_maps_read(p->pid, &maps)) < 0)
        return err;
    err = -ENOENT; /* not in code a file maps: not probed */
    for (size_t i = 0; i < maps.count; i++) {
        const struct np_mapping *m = &maps.items[i];
        if (m->exec && m->path[0] == '/' && fn >= m->start && fn < m->end) {
            err = attach_code_free_at(a, p, m, fn);
            break;
        }
    }
    np_maps_free(&maps);
    return err;
}

void np_attacher_python_codes(struct np_attacher *a, pid_t pid, const uint64_t *codes, size_t n) {
    const __u8 one = 1;
    if (!a || !a->skel) /* records read without BPF (the fuzz harness) */
        return;
    for (size_t i = 0; i < n; i++) {
        struct np_py_code_key key = {.pid = (__u32)pid, .code = codes[i]};
        /* a full map evicts its oldest: a code object forgotten there is
         * at worst named by the one freed before it */
        bpf_map__update_elem(a->skel->maps.py_stack_codes, &key, sizeof(key), &one, sizeof(one),
                             BPF_ANY);
    }
}

/* ---- The agent's fast path ------------------------------------------------ */

/* A call that entered a launch function just before its int3 uprobe came
 * back reaches its CUPTI callback within microseconds; until its fast_cbids
 * entry is deleted its marker still takes it. */
#define FAST_OFF_GRACE_US 50000

static const struct np_probe_site *site_by_symbol(const struct np_attacher *a, pid_t pid,
                                                  size_t lib_index, const char *symbol) {
    for (size_t i = 0; i < a->nsites; i++) {
        const struct np_probe_site *s = &a->sites[i];
        if (s->pid == pid && !s->released && s->lib_index == lib_index &&
            strcmp(s->def->symbol, symbol) == 0)
            return s;
    }
    return NULL;
}

/* A thunk into this site, probed in its process. */
static bool has_thunk_into(const struct np_attacher *a, const struct np_probe_site *t) {
    for (size_t i = 0; i < a->nsites; i++) {
        const struct np_probe_site *s = &a->sites[i];
        const struct np_fast_def *f = s->pid == t->pid && !s->released && s->is_thunk
                                          ? np_fast_def_by_symbol(s->def->symbol)
                                          : NULL;
        if (f && f->thunk_target && strcmp(f->thunk_target, t->def->symbol) == 0)
            return true;
    }
    return false;
}

/* The address of a site's function in its process (0: not found). */
static uint64_t site_address(const struct np_process *p, const struct np_maps *maps,
                             const struct np_probe_site *s) {
    if (s->lib_index >= p->nlibs)
        return 0;
    const struct np_library *lib = &p->libs[s->lib_index];
    for (size_t i = 0; i < maps->count; i++) {
        const struct np_mapping *m = &maps->items[i];
        /* the path it was attached by may be a link to the one mapped */
        bool same = strcmp(m->path, lib->path) == 0 || (m->inode == lib->inode && lib->inode);
        if (m->exec && same && s->offset >= m->offset &&
            s->offset < m->offset + (m->end - m->start))
            return m->start + (s->offset - m->offset);
    }
    return 0;
}

int np_attacher_fast_on(struct np_attacher *a, const struct np_process *p, bool cupti13) {
    pid_t pid = p->pid;
    struct np_maps maps = {0};
    bool marker = false; /* the library's marker must be probed in the process */
    for (size_t i = 0; i < a->nsites; i++)
        marker |= a->sites[i].pid == pid && !a->sites[i].released && !a->sites[i].err &&
                  a->sites[i].def->role == NP_ROLE_MARKER;
    if (!a->fast_path || !marker || np_attacher_fast_is_on(a, pid) || np_maps_read(pid, &maps) < 0)
        return 0;
    size_t *take = calloc(a->nsites + 1, sizeof(*take)), ntake = 0;
    for (size_t i = 0; take && i < a->nsites; i++) {
        struct np_probe_site *s = &a->sites[i];
        if (s->pid != pid || s->released || !s->fast || !site_attached(s) || s->err)
            continue;
        const struct np_fast_def *f = np_fast_def_by_symbol(s->def->symbol);
        if (!f || (f->cupti13 && !cupti13))
            continue;
        const struct np_probe_site *target = s;
        if (s->is_thunk) {
            target = f->thunk_target ? site_by_symbol(a, pid, s->lib_index, f->thunk_target) : NULL;
            if (!target)
                continue;
        } else if (!cupti13 && has_thunk_into(a, s)) {
            continue;
        }
        s->addr = site_address(p, &maps, target);
        if (!s->addr)
            continue;
        struct np_fast_key key = {.pid = (uint32_t)pid, .domain = f->domain, .cbid = f->cbid};
        struct np_fast_cfg cfg = {.probe_id = target->id,
                                  .called_as = s->id,
                                  .params_len = f->params_len,
                                  .deref_at = f->deref_at,
                                  .deref_len = f->deref_len};
        if (bpf_map__update_elem(a->skel->maps.fast_cbids, &key, sizeof(key), &cfg, sizeof(cfg),
                                 BPF_ANY) == 0)
            take[ntake++] = i;
    }
    np_maps_free(&maps);
    uint32_t key = (uint32_t)pid, on = 1;
    if (ntake && bpf_map__update_elem(a->skel->maps.fast_procs, &key, sizeof(key), &on, sizeof(on),
                                      BPF_ANY) < 0)
        ntake = 0;
    /* from here the marker takes every call whose int3 hit did not send it;
     * each removal waits for an RCU grace period: on threads of their own,
     * the waits overlap */
    uint64_t start = np_monotonic_ns();
    pthread_t threads[ntake ? ntake : 1];
    size_t started = 0;
    for (size_t k = 0; k < ntake; k++) {
        struct np_probe_site *s = &a->sites[take[k]];
        s->fast_detached = true;
        if (pthread_create(&threads[started], NULL, detach_fast_worker, s) == 0)
            started++;
        else
            detach_fast_site(s);
    }
    for (size_t k = 0; k < started; k++)
        pthread_join(threads[k], NULL);
    np_debug("pid %d: %zu int3 uprobes removed in %.1f ms", pid, ntake,
             (double)(np_monotonic_ns() - start) / 1e6);
    free(take);
    if (!ntake)
        fast_forget(a, pid);
    return (int)ntake;
}

bool np_attacher_fast_is_on(const struct np_attacher *a, pid_t pid) {
    uint32_t key = (uint32_t)pid, on = 0;
    return a->skel &&
           bpf_map__lookup_elem(a->skel->maps.fast_procs, &key, sizeof(key), &on, sizeof(on), 0) ==
               0 &&
           on;
}

/* fast_procs[pid] and its fast_cbids, gone. */
static void fast_forget(struct np_attacher *a, pid_t pid) {
    if (!a->fast_path || !a->skel)
        return;
    uint32_t key = (uint32_t)pid;
    bpf_map__delete_elem(a->skel->maps.fast_procs, &key, sizeof(key), 0);
    for (size_t i = 0; i < a->nsites; i++) {
        struct np_probe_site *s = &a->sites[i];
        const struct np_fast_def *f =
            s->pid == pid && s->fast ? np_fast_def_by_symbol(s->def->symbol) : NULL;
        if (!f)
            continue;
        struct np_fast_key fk = {.pid = (uint32_t)pid, .domain = f->domain, .cbid = f->cbid};
        bpf_map__delete_elem(a->skel->maps.fast_cbids, &fk, sizeof(fk), 0);
    }
}

int np_attacher_fast_off(struct np_attacher *a, pid_t pid) {
    int back = 0;
    for (size_t i = 0; i < a->nsites; i++) {
        struct np_probe_site *s = &a->sites[i];
        if (s->pid != pid || s->released || !s->fast_detached)
            continue;
        int err = attach_fast_site(a, s, s->binary);
        if (err == -ESRCH || err == -ENOENT) { /* it is exiting: nothing left to take */
            np_debug("pid %d: %s not probed again: %s", pid, s->def->symbol, strerror(-err));
            return back;
        }
        if (err) {
            np_warn("pid %d: cannot probe %s again: %s", pid, s->def->symbol, strerror(-err));
            continue; /* its marker goes on taking it */
        }
        s->fast_detached = false;
        back++;
    }
    if (!np_attacher_fast_is_on(a, pid))
        return back;
    usleep(FAST_OFF_GRACE_US);
    bool left = false;
    for (size_t i = 0; i < a->nsites; i++)
        left |= a->sites[i].pid == pid && !a->sites[i].released && a->sites[i].fast_detached;
    if (!left)
        fast_forget(a, pid);
    return back;
}
