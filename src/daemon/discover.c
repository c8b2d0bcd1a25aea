/* discover.c - loads bpf/discover.bpf.c and reads its notifications (see
 * discover.h).
 *
 * The programs attach as BTF-enabled raw tracepoints, which need nothing but
 * the kernel's BTF. Where those cannot be loaded, the tracefs tracepoints
 * are the fallback; their ids live in tracefs, which most containers and
 * many hosts do not mount: then a short-lived child mounts it in a mount
 * namespace of its own, reads the ids and exits, so nothing is left mounted
 * on the host. NCCLPROBE_DISCOVERY=tracefs forces the fallback (tests). */
#define _GNU_SOURCE
#include "daemon/discover.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "discover.skel.h"
#include "lib/util.h"

const char *const np_discover_prefixes[] = {"libcuda", "libnccl", NULL};

struct np_discover {
    struct discover_bpf *skel;
    const char *mode; /* "tp_btf" or "tracefs" */
    struct bpf_link *links[3];
    struct ring_buffer *rb;
    np_discover_fn fn;
    void *ctx;
};

static int on_record(void *ctx, void *data, size_t size) {
    struct np_discover *d = ctx;
    if (size >= sizeof(struct np_disc_event))
        d->fn(d->ctx, data);
    return 0;
}

static int set_prefixes(struct np_discover *d) {
    for (__u32 i = 0; np_discover_prefixes[i] && i < NP_DISC_MAX_PREFIXES; i++) {
        struct np_disc_prefix p = {.len = (__u32)strlen(np_discover_prefixes[i])};
        if (p.len > NP_DISC_PREFIX_LEN)
            return -EINVAL;
        memcpy(p.text, np_discover_prefixes[i], p.len);
        if (bpf_map__update_elem(d->skel->maps.lib_prefixes, &i, sizeof(i), &p, sizeof(p),
                                 BPF_ANY) < 0)
            return -errno;
    }
    return 0;
}

/* Opens and loads the skeleton with one of its two sets of programs. */
static int load(struct np_discover *d, bool btf) {
    d->skel = discover_bpf__open();
    if (!d->skel)
        return -errno;
    struct bpf_program *btf_progs[] = {d->skel->progs.np_btf_sys_exit, d->skel->progs.np_btf_exec,
                                       NULL};
    struct bpf_program *tp_progs[] = {d->skel->progs.np_mmap_enter, d->skel->progs.np_mmap_exit,
                                      d->skel->progs.np_exec};
    for (size_t i = 0; i < 3; i++) {
        if (btf_progs[i])
            bpf_program__set_autoload(btf_progs[i], btf);
        bpf_program__set_autoload(tp_progs[i], !btf);
    }
    int err = discover_bpf__load(d->skel) < 0 ? -errno : 0;
    if (!err)
        err = set_prefixes(d);
    if (err) {
        discover_bpf__destroy(d->skel);
        d->skel = NULL;
    }
    return err;
}

static int attach_btf(struct np_discover *d) {
    struct bpf_program *progs[] = {d->skel->progs.np_btf_sys_exit, d->skel->progs.np_btf_exec};
    for (size_t i = 0; i < 2; i++) {
        d->links[i] = bpf_program__attach(progs[i]);
        if (!d->links[i])
            return -errno;
    }
    return 0;
}

static const char *const tracepoints[3] = {"syscalls/sys_enter_mmap", "syscalls/sys_exit_mmap",
                                           "sched/sched_process_exec"};

/* In a child of our own, in a mount namespace of its own: mounts tracefs
 * and reads the three tracepoints' ids. The mount goes with the child. */
static int read_ids_privately(long ids[3]) {
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        return -errno;
    pid_t child = fork();
    if (child < 0) {
        int err = -errno;
        close(pipefd[0]);
        close(pipefd[1]);
        return err;
    }
    if (child == 0) {
        long out[3] = {-1, -1, -1};
        if (unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
            mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, NULL) == 0) {
            for (int i = 0; i < 3; i++) {
                char path[128];
                snprintf(path, sizeof(path), "/sys/kernel/tracing/events/%s/id", tracepoints[i]);
                FILE *f = fopen(path, "re");
                if (f && fscanf(f, "%ld", &out[i]) != 1)
                    out[i] = -1;
                if (f)
                    fclose(f);
            }
        } else {
            out[0] = -(long)errno - 1000000; /* the reason, told apart from an id */
        }
        ssize_t n = write(pipefd[1], out, sizeof(out));
        _exit(n == (ssize_t)sizeof(out) ? 0 : 1);
    }
    close(pipefd[1]);
    ssize_t n = read(pipefd[0], ids, 3 * sizeof(long));
    close(pipefd[0]);
    while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
        ;
    if (n != 3 * (ssize_t)sizeof(long))
        return -EIO;
    if (ids[0] <= -1000000)
        return (int)(ids[0] + 1000000);
    for (int i = 0; i < 3; i++)
        if (ids[i] < 0)
            return -ENOENT;
    return 0;
}

static int attach_tracefs(struct np_discover *d) {
    struct bpf_program *progs[] = {d->skel->progs.np_mmap_enter, d->skel->progs.np_mmap_exit,
                                   d->skel->progs.np_exec};
    long ids[3];
    int err = read_ids_privately(ids);
    if (err)
        return err;
    for (size_t i = 0; i < 3; i++) {
        struct perf_event_attr attr = {
            .type = PERF_TYPE_TRACEPOINT,
            .size = sizeof(attr),
            .config = (__u64)ids[i],
            .sample_period = 1,
            .wakeup_events = 1,
        };
        int fd = (int)syscall(SYS_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC);
        if (fd < 0)
            return -errno;
        d->links[i] = bpf_program__attach_perf_event(progs[i], fd);
        if (!d->links[i]) {
            err = -errno;
            close(fd);
            return err;
        }
    }
    return 0;
}

static void detach(struct np_discover *d) {
    for (size_t i = 0; i < 3; i++) {
        bpf_link__destroy(d->links[i]);
        d->links[i] = NULL;
    }
}

int np_discover_open(np_discover_fn fn, void *ctx, struct np_discover **out) {
    struct np_discover *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    d->fn = fn;
    d->ctx = ctx;
    const char *force = getenv("NCCLPROBE_DISCOVERY");
    bool try_btf = !(force && strcmp(force, "tracefs") == 0);
    int err = try_btf ? load(d, true) : -EOPNOTSUPP;
    if (!err) {
        d->mode = "tp_btf";
        err = attach_btf(d);
    }
    if (err) {
        if (try_btf)
            np_warn("discovery: BTF tracepoints unavailable (%s); using tracefs tracepoints",
                    strerror(-err));
        detach(d);
        discover_bpf__destroy(d->skel);
        d->skel = NULL;
        err = load(d, false);
        if (!err) {
            d->mode = "tracefs";
            err = attach_tracefs(d);
        }
    }
    if (!err) {
        d->rb = ring_buffer__new(bpf_map__fd(d->skel->maps.disc_events), on_record, d, NULL);
        if (!d->rb)
            err = -errno;
    }
    if (err) {
        np_discover_close(d);
        return err;
    }
    *out = d;
    return 0;
}

const char *np_discover_mode(const struct np_discover *d) {
    return d->mode;
}

int np_discover_fd(const struct np_discover *d) {
    return ring_buffer__epoll_fd(d->rb);
}

int np_discover_poll(struct np_discover *d) {
    return ring_buffer__consume(d->rb);
}

uint64_t np_discover_lost(const struct np_discover *d) {
    return d->skel->bss->lost_records;
}

void np_discover_close(struct np_discover *d) {
    if (!d)
        return;
    ring_buffer__free(d->rb);
    detach(d);
    discover_bpf__destroy(d->skel);
    free(d);
}
