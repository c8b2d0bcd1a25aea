/* inject.c - np_inject_agent: the whole injection, in order (see inject.h).
 *
 *  1. Refusals, before anything is changed: Yama scope 3, another tracer,
 *     a seccomp filter, shadow stacks, an injection already in progress
 *     (its memfd is open in the target), no glibc/dlopen, no code cave,
 *     a library without the attach symbol.
 *  2. hijack.c: one thread, blocked in an idle system call, is stopped for
 *     some microseconds, redirected into the stub and detached.
 *  3. The handshake: the stub publishes its memfd and socket fds in the
 *     block on its stack (we poll it with process_vm_readv); we take
 *     copies (pidfd_getfd), send 'F' on the control socket, fill and seal
 *     the memfd, send 'G'; the stub dlopens, calls attach and sends its
 *     results back on the control socket.
 * If we die anywhere in 3, the stub sees EOF or times out and restores the
 * thread by itself; see hijack.c for the kill points of 2, and
 * docs/inject.md for the whole design. */
#define _GNU_SOURCE
#include "inject/inject.h"

#include <cpuid.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "attach/elfscan.h"
#include "attach/procmaps.h"
#include "inject/hijack.h"
#include "inject/procfs.h"
#include "inject/steps.h"
#include "inject/stub_abi.h"
#include "inject/target.h"
#include "inject/threads.h"
#include "lib/util.h"

#define XFEATURE_AMX_TILES ((1ULL << 17) | (1ULL << 18))
#define READY_TIMEOUT_NS (1000 * 1000000ULL)
#define CATCH_SLICE_NS (200 * 1000000ULL)

static void say(struct np_inject_result *res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void say(struct np_inject_result *res, const char *fmt, ...) {
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(res->msg, sizeof(res->msg), fmt, ap);
    va_end(ap);
}

void np_inject_req_defaults(struct np_inject_req *req) {
    if (!req->symbol)
        req->symbol = NP_INJECT_DEFAULT_SYMBOL;
    if (!req->memfd_name)
        req->memfd_name = NP_INJECT_DEFAULT_MEMFD;
    if (req->find_ms <= 0)
        req->find_ms = 1000;
    if (req->stub_timeout_ms <= 0)
        req->stub_timeout_ms = 2000;
    if (req->done_timeout_ms <= 0)
        req->done_timeout_ms = 10000;
    if (!req->min_stack)
        req->min_stack = 64 * 1024;
    if (!req->nice)
        req->nice = -10;
}

/* Raises the calling thread's priority (nice) for the injection: returns
 * the value to restore, or 100 when unchanged. */
static int boost(int nice) {
    errno = 0;
    int old = getpriority(PRIO_PROCESS, (id_t)gettid());
    if (nice == 100 || (old == -1 && errno) || old <= nice)
        return 100;
    if (setpriority(PRIO_PROCESS, (id_t)gettid(), nice) < 0)
        return 100;
    return old;
}

static void unboost(int old) {
    if (old != 100)
        setpriority(PRIO_PROCESS, (id_t)gettid(), old);
}

/* ---- refusals --------------------------------------------------------------- */

static int check_yama(struct np_inject_result *res) {
    char *text = NULL;

    if (np_read_file("/proc/sys/kernel/yama/ptrace_scope", &text, NULL) < 0)
        return 0; /* no Yama */
    int scope = atoi(text);
    free(text);
    if (scope >= 3) {
        say(res, "ptrace is disabled on this machine (kernel.yama.ptrace_scope = 3)");
        return -EPERM;
    }
    return 0;
}

/* A tracer that is a thread of ours (record's PTRACE_O_TRACEEXIT hold). */
static bool is_our_thread(pid_t tid) {
    char path[64];

    snprintf(path, sizeof(path), "/proc/self/task/%d", (int)tid);
    return access(path, F_OK) == 0;
}

static int check_threads(pid_t pid, const char *comm, struct np_inject_result *res) {
    pid_t *tids = NULL;
    size_t n = 0;
    int err = np_inj_threads(pid, &tids, &n);

    if (err) {
        say(res, "pid %d: no such process", (int)pid);
        return -ESRCH;
    }
    for (size_t i = 0; i < n && !err; i++) {
        struct np_inj_status st;
        char tracer_comm[64];
        if (np_inj_thread_status(pid, tids[i], &st) < 0)
            continue;
        if (st.tracer && is_our_thread(st.tracer)) {
            continue; /* ncclprobe's own exit hold (record -- CMD): that thread is skipped */
        } else if (st.tracer) {
            np_inj_comm(st.tracer, tracer_comm, sizeof(tracer_comm));
            say(res, "pid %d (%s) is already traced by pid %d (%s) (thread %d): detach it first",
                (int)pid, comm, (int)st.tracer, tracer_comm, (int)tids[i]);
            err = -EBUSY;
        } else if (st.seccomp) {
            say(res,
                "pid %d (%s) runs under a seccomp %s (thread %d): the injection's system calls "
                "could be refused or kill it",
                (int)pid, comm, st.seccomp == 1 ? "strict mode" : "filter", (int)tids[i]);
            err = -EPERM;
        } else if (st.shadow_stack) {
            say(res, "pid %d (%s) uses x86 shadow stacks: not supported", (int)pid, comm);
            err = -ENOTSUP;
        }
    }
    free(tids);
    return err;
}

/* One injector per target at a time: an abstract socket name, released by
 * the kernel when we exit however we exit. */
static int take_lock(pid_t pid, struct np_inject_result *res) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -errno;
    int len = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "ncclprobe-inject.%d", (int)pid);
    if (bind(fd, (struct sockaddr *)&sa,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len)) < 0) {
        int err = -errno;
        close(fd);
        if (err == -EADDRINUSE)
            say(res, "another injection into pid %d is running", (int)pid);
        return err == -EADDRINUSE ? -EBUSY : err;
    }
    return fd;
}

static int preflight(pid_t pid, const struct np_inject_req *req, struct np_inject_result *res,
                     char *comm, size_t comm_size) {
    int err;

    if (pid <= 0 || pid == getpid()) {
        say(res, "pid %d: cannot inject into ourselves", (int)pid);
        return -EINVAL;
    }
    if (strlen(req->memfd_name) >= sizeof(((struct np_stub_block *)0)->memfd_name) ||
        strlen(req->symbol) >= sizeof(((struct np_stub_block *)0)->symbol)) {
        say(res, "memfd name or symbol too long");
        return -EINVAL;
    }
    np_inj_comm(pid, comm, comm_size);
    err = check_yama(res);
    if (!err)
        err = check_threads(pid, comm, res);
    if (err)
        return err;
    int fd = np_inj_find_memfd(pid, req->memfd_name);
    if (fd >= 0) {
        say(res,
            "pid %d (%s): an injection is still in progress (fd %d is /memfd:%s); retry in a "
            "moment",
            (int)pid, comm, fd, req->memfd_name);
        return -EBUSY;
    }
    return fd == -ENOENT ? 0 : fd;
}

/* ---- the plan ------------------------------------------------------------------ */

/* XCR0 without AMX tiles (the stub never touches them and they are 8 KiB),
 * and the standard-format area size for it (CPUID leaf 0xD). */
static int xsave_layout(uint64_t *mask, size_t *size) {
    unsigned a, b, c, d;

    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE))
        return -ENOTSUP;
    __asm__ volatile("xgetbv" : "=a"(a), "=d"(d) : "c"(0));
    *mask = (((uint64_t)d << 32) | a) & ~XFEATURE_AMX_TILES;
    *size = 576;
    for (unsigned i = 2; i < 64; i++) {
        if (!(*mask & (1ULL << i)))
            continue;
        __cpuid_count(0xd, i, a, b, c, d);
        if (b + a > *size)
            *size = b + a;
    }
    *size = (*size + 63) & ~(size_t)63;
    return 0;
}

static void copy_name(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src);
}

static int make_plan(const struct np_inj_target *t, const struct np_inject_req *req, bool load,
                     struct np_inj_plan *plan, struct np_inject_result *res) {
    struct np_stub_block *b = &plan->proto;
    uint64_t nonce = np_monotonic_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)random();

    memset(plan, 0, sizeof(*plan));
    plan->t = t;
    plan->min_room = req->min_stack;
    if (xsave_layout(&b->xsave_mask, &plan->xsave_size) < 0) {
        say(res, "this CPU or kernel has no XSAVE: not supported");
        return -ENOTSUP;
    }
    b->magic = NP_STUB_MAGIC;
    b->nonce = nonce | 1;
    b->version = NP_STUB_VERSION;
    b->mode = load ? NP_STUB_LOAD : NP_STUB_WAKE;
    b->attach_flags = req->flags;
    b->timeout_ms = req->stub_timeout_ms;
    b->fn_dlopen = t->fn_dlopen;
    b->fn_dlsym = t->fn_dlsym;
    b->fn_dlerror = t->fn_dlerror;
    b->fn_dlclose = t->fn_dlclose;
    b->fn_errno_location = t->fn_errno_location;
    b->fn_attach = load ? 0 : t->loaded_fn;
    b->dlopen_flags = 0x2 /* RTLD_NOW */ | t->dlopen_extra_flags; /* RTLD_LOCAL is 0 */
    copy_name(b->memfd_name, sizeof(b->memfd_name), req->memfd_name);
    copy_name(b->symbol, sizeof(b->symbol), req->symbol);
    return 0;
}

/* The library we would load: an x86-64 ELF with the attach symbol among
 * its dynamic symbols (what dlsym finds). */
static int check_library(const struct np_inject_req *req, struct np_inject_result *res,
                         int *fd_out) {
    struct np_elf_symbol_query q = {.name = req->symbol};
    int fd = open(req->lib_path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        int err = -errno;
        say(res, "cannot open %s: %s", req->lib_path, strerror(-err));
        return err;
    }
    int err = np_elf_read_dynsyms(fd, &q, 1);
    if (!err && q.err)
        err = -ENOENT;
    if (err) {
        if (err == -ENOENT)
            say(res, "%s has no symbol %s", req->lib_path, req->symbol);
        else
            say(res, "%s: %s", req->lib_path,
                err == -ENOEXEC || err == -EINVAL ? "not an x86-64 ELF shared library"
                                                  : strerror(-err));
        close(fd);
        return err;
    }
    *fd_out = fd;
    return 0;
}

/* ---- finding a thread ------------------------------------------------------------ */

/* Tries the idle threads, then follows the busy ones, until find_ms. */
static int hijack_some_thread(const struct np_inj_plan *plan, const struct np_inject_req *req,
                              struct np_inj_hijacked *out, struct np_inject_result *res) {
    uint64_t deadline = np_monotonic_ns() + (uint64_t)req->find_ms * 1000000ULL;
    size_t seen_idle = 0, seen = 0;
    int err = -EAGAIN;

    while (err == -EAGAIN && np_monotonic_ns() < deadline) {
        struct np_inj_candidate *list = NULL;
        size_t n = 0, idle = 0;
        err = np_inj_candidates(plan->t, &list, &n, &idle);
        if (err)
            break;
        seen = n, seen_idle = idle;
        err = -EAGAIN;
        for (size_t i = 0; i < n && err == -EAGAIN && np_monotonic_ns() < deadline; i++) {
            const char *why = NULL;
            if (req->tid && list[i].tid != req->tid)
                continue;
            if (list[i].idle != NP_IDLE_NO &&
                np_inj_spot_safe(plan->t, &list[i].spot, np_inj_block_size(plan), plan->min_room,
                                 &why) < 0) {
                np_debug("inject: tid %d in %s: %s", (int)list[i].tid,
                         np_inj_syscall_name(list[i].spot.nr), why);
                continue;
            }
            uint64_t slice = np_monotonic_ns() + CATCH_SLICE_NS;
            err = np_inj_hijack(plan, &list[i], slice < deadline ? slice : deadline, out);
            if (err == -ESRCH || err == -ENOTSUP)
                err = kill(plan->t->pid, 0) < 0 ? -ESRCH : -EAGAIN;
        }
        free(list);
        if (err == -EAGAIN && n == 0)
            np_inj_sleep_us(5000);
    }
    if (err == -EAGAIN)
        say(res,
            "no thread of pid %d reached a safe point (blocked in an idle system call, off the "
            "loader, with stack) within %d ms (%zu threads, %zu idle)",
            (int)plan->t->pid, req->find_ms, seen, seen_idle);
    else if (err == -EPERM)
        say(res, "ptrace of pid %d not permitted (Yama, LSM or missing CAP_SYS_PTRACE)",
            (int)plan->t->pid);
    else if (err == -ESRCH)
        say(res, "pid %d exited", (int)plan->t->pid);
    else if (err)
        say(res, "cannot hijack a thread of pid %d: %s", (int)plan->t->pid, strerror(-err));
    return err;
}

/* ---- the handshake ------------------------------------------------------------------ */

static int read_out(pid_t pid, uint64_t block, struct np_stub_out *o) {
    return np_read_process(pid, block + offsetof(struct np_stub_block, out), o, sizeof(*o));
}

/* Polls the block until the stub has published its fds, or the deadline:
 * the stub is a thread of its own now. */
static int wait_ready(pid_t pid, uint64_t block, uint64_t deadline, struct np_stub_out *o) {
    uint64_t start = np_monotonic_ns();
    unsigned us = 0;

    for (;;) {
        int err = read_out(pid, block, o);
        if (err)
            return err;
        if (o->ready == 1)
            return 0;
        if (o->ready == 2)
            return o->status < 0 ? o->status : -EIO;
        if (np_monotonic_ns() >= deadline)
            return -ETIMEDOUT;
        np_inj_backoff(start, &us);
    }
}

/* The stub's results on the control socket, until the deadline. */
static int read_results(int ctl, uint64_t deadline, uint64_t nonce, struct np_stub_out *o) {
    size_t got = 0;

    while (got < sizeof(*o)) {
        uint64_t now = np_monotonic_ns();
        if (now >= deadline)
            return -ETIMEDOUT;
        struct pollfd pfd = {ctl, POLLIN, 0};
        int n = poll(&pfd, 1, (int)((deadline - now) / 1000000) + 1);
        if (n < 0 && errno != EINTR)
            return -errno;
        if (n <= 0)
            continue;
        ssize_t r = read(ctl, (char *)o + got, sizeof(*o) - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : -EPIPE;
        got += (size_t)r;
    }
    return o->done == nonce && o->sum == np_stub_out_sum(o, nonce) ? 0 : -EBADMSG;
}

static int send_byte(int sock, char c) {
    return send(sock, &c, 1, MSG_NOSIGNAL) == 1 ? 0 : -errno;
}

static int pidfd_getfd_(int pidfd, int fd) {
    long r = syscall(SYS_pidfd_getfd, pidfd, fd, 0);
    return r < 0 ? -errno : (int)r;
}

/* Copies the library into the memfd (our copy of it) and seals it: what
 * is mapped can never change under the target. */
static int fill_memfd(int memfd, int lib_fd) {
    struct stat st;
    off_t off = 0;

    if (fstat(lib_fd, &st) < 0)
        return -errno;
    while (off < st.st_size) {
        size_t half = (size_t)st.st_size / 2,
               chunk = off == 0 && half ? half : (size_t)(st.st_size - off);
        ssize_t n = sendfile(memfd, lib_fd, &off, chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        np_inj_fault("filling");
    }
    if (fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
        np_debug("inject: sealing the memfd: %s", strerror(errno));
    return 0;
}

/* Copies of the stub's fds for us: the library socket's and the control
 * socket's far ends, and the memfd when loading. */
static int fetch_fds(int pidfd, const struct np_stub_out *o, bool load, int *sock, int *ctl,
                     int *memfd, struct np_inject_result *res) {
    *sock = pidfd_getfd_(pidfd, o->sock_np);
    *ctl = *sock < 0 ? *sock : pidfd_getfd_(pidfd, o->ctl_np);
    *memfd = *ctl < 0 || !load ? -1 : pidfd_getfd_(pidfd, o->memfd);
    int err = *sock < 0 ? *sock : *ctl < 0 ? *ctl : load && *memfd < 0 ? *memfd : 0;
    if (err)
        say(res, "pidfd_getfd of the stub's fds: %s", strerror(-err));
    return err;
}

/* Our side of the stub's handshake. *sock gets our end of the library's
 * socket. */
static int handshake(pid_t pid, int pidfd, const struct np_inj_plan *plan,
                     const struct np_inj_hijacked *h, int lib_fd, int *sock, struct np_stub_out *o,
                     const struct np_inject_req *req, struct np_inject_result *res) {
    int memfd = -1, ctl = -1, err;

    err = wait_ready(pid, h->block, np_monotonic_ns() + READY_TIMEOUT_NS, o);
    if (err == -ETIMEDOUT)
        say(res, "the stub in thread %d did not start in time; it restores the thread itself",
            (int)h->tid);
    else if (err)
        say(res, "the stub in thread %d could not make its memfd and sockets: %s (stage %d)",
            (int)h->tid, strerror(-err), o->stage);
    if (err)
        return err;
    np_inj_fault("ready");
    err = fetch_fds(pidfd, o, lib_fd >= 0, sock, &ctl, &memfd, res);
    if (err)
        goto out;
    np_inj_fault("fetched");
    err = send_byte(ctl, NP_STUB_MSG_FETCHED);
    np_inj_fault("fetched_sent");
    if (!err && lib_fd >= 0) {
        err = fill_memfd(memfd, lib_fd);
        if (err)
            say(res, "writing the library into the target's memfd: %s", strerror(-err));
        np_inj_fault("filled");
    }
    if (!err) {
        err = send_byte(ctl, NP_STUB_MSG_GO);
        if (err)
            say(res, "the stub's control socket: %s", strerror(-err));
        np_inj_fault("go_sent");
    }
    if (!err) {
        err = read_results(ctl, np_monotonic_ns() + (uint64_t)req->done_timeout_ms * 1000000ULL,
                           plan->proto.nonce, o);
        if (err == -ETIMEDOUT)
            say(res,
                "the stub in thread %d has not finished after %d ms; it will restore the thread "
                "itself",
                (int)h->tid, req->done_timeout_ms);
        else if (err)
            say(res, "no results from the stub in thread %d: %s", (int)h->tid, strerror(-err));
        np_inj_fault("done");
    }
out:
    if (err && ctl >= 0)
        send_byte(ctl, NP_STUB_MSG_ABORT);
    if (memfd >= 0)
        close(memfd);
    if (ctl >= 0)
        close(ctl);
    return err;
}

/* ---- results ---------------------------------------------------------------------------- */

static uint64_t span(const struct np_stub_out *o, int from, int to) {
    return o->t[to] && o->t[from] && o->t[to] > o->t[from] ? o->t[to] - o->t[from] : 0;
}

static int stub_outcome(const struct np_stub_out *o, const struct np_inject_req *req, bool load,
                        struct np_inject_result *res) {
    res->attach_ret = o->attach_ret;
    res->eintr = o->resumed == NP_RESUMED_EINTR;
    res->t.stub_ns = span(o, NP_T_ENTRY, NP_T_EXIT);
    res->t.wait_ns = span(o, NP_T_READY, NP_T_GO);
    res->t.dlopen_ns = load ? span(o, NP_T_DLOPEN, NP_T_DLOPEN_END) : 0;
    res->t.attach_ns = span(o, load ? NP_T_DLOPEN_END : NP_T_GO, NP_T_ATTACH_END);
    if (o->status == -80 /* ELIBBAD */) {
        say(res, "dlopen failed in the target: %s%s", o->error,
            strstr(o->error, "/proc/self/") ? " (is /proc mounted in the target's mount namespace?)"
                                            : "");
        return -ELIBBAD;
    }
    if (o->status == -ENOENT && o->stage == NP_STAGE_DLSYM) {
        say(res, "the library loaded but has no %s: %s", req->symbol, o->error);
        return -ENOENT;
    }
    if (o->status) {
        say(res, "the stub failed at stage %d: %s", o->stage, strerror(-o->status));
        return o->status;
    }
    if (o->attach_ret < 0) {
        say(res, "%s returned %d", req->symbol, o->attach_ret);
        return -ECANCELED;
    }
    res->loaded = load;
    return 0;
}

/* ---- the whole thing ------------------------------------------------------------------------ */

static int inject_locked(pid_t pid, const struct np_inject_req *req, const char *comm,
                         struct np_inject_result *res) {
    struct np_inj_target t;
    struct np_inj_plan plan;
    struct np_inj_hijacked h = {0};
    struct np_stub_out o;
    int lib_fd = -1, pidfd = -1, sock = -1, err;

    err = np_inj_target_open(pid, req->memfd_name, req->symbol, &t, res->msg, sizeof(res->msg));
    if (err)
        return err;
    bool load = !t.loaded;
    if (load && !req->lib_path) {
        say(res, "pid %d (%s): the library is not loaded", (int)pid, comm);
        err = -ENOENT;
    }
    if (!err && load)
        err = check_library(req, res, &lib_fd);
    if (!err)
        err = make_plan(&t, req, load, &plan, res);
    if (!err && req->dry_run) {
        say(res, "would %s %s; stub at 0x%llx in %s; dlopen at 0x%llx in %s",
            load ? "load" : "wake", load ? req->lib_path : t.loaded_path,
            (unsigned long long)t.cave, t.cave_path, (unsigned long long)t.fn_dlopen, t.libc_path);
        np_inj_target_close(&t);
        if (lib_fd >= 0)
            close(lib_fd);
        return 0;
    }
    if (!err) {
        pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pidfd < 0) {
            err = -errno;
            say(res, "pidfd_open(%d): %s", (int)pid, strerror(-err));
        }
    }
    if (!err)
        err = hijack_some_thread(&plan, req, &h, res);
    if (!err) {
        np_debug(
            "inject: thread %d hijacked in %s (ret %lld, resume %u), block 0x%lx, stop %.1f us",
            (int)h.tid, np_inj_syscall_name(h.nr), (long long)h.ret, h.resume,
            (unsigned long)h.block, (double)h.stop_ns / 1e3);
        res->tid = h.tid;
        res->syscall_nr = h.nr;
        res->syscall_name = np_inj_syscall_name(h.nr);
        res->caught = h.resume == NP_RESUME_ENTRY;
        res->t.stop_ns = h.stop_ns;
        err = handshake(pid, pidfd, &plan, &h, lib_fd, &sock, &o, req, res);
        if (!err)
            err = stub_outcome(&o, req, load, res);
        res->t.pause_ns = res->t.stop_ns + res->t.stub_ns;
    }
    if (!err) {
        res->sock_fd = sock;
        sock = -1;
    }
    if (sock >= 0)
        close(sock);
    if (pidfd >= 0)
        close(pidfd);
    if (lib_fd >= 0)
        close(lib_fd);
    np_inj_target_close(&t);
    return err;
}

int np_inject_agent(pid_t pid, const struct np_inject_req *req_in, struct np_inject_result *res) {
    struct np_inject_req req = *req_in;
    uint64_t t0 = np_monotonic_ns();
    char comm[64] = "?";
    int err, lock;

    memset(res, 0, sizeof(*res));
    res->sock_fd = -1;
    np_inject_req_defaults(&req);
    lock = take_lock(pid, res);
    if (lock < 0)
        return lock;
    int old_nice = boost(req.nice);
    err = preflight(pid, &req, res, comm, sizeof(comm));
    if (!err)
        err = inject_locked(pid, &req, comm, res);
    unboost(old_nice);
    close(lock);
    res->t.total_ns = np_monotonic_ns() - t0;
    return err;
}

int np_inject_is_loaded(pid_t pid, const char *match) {
    struct np_maps maps;
    int err = np_maps_read(pid, &maps), found = 0;

    if (err)
        return err;
    for (size_t i = 0; i < maps.count && !found; i++)
        found = strstr(maps.items[i].path, match) != NULL;
    np_maps_free(&maps);
    return found;
}
