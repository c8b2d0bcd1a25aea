/* hijack.c - the one tracer stop of an injection (see hijack.h).
 *
 * Kill points (the kernel detaches a dead tracer's tracees and resumes
 * them with the registers they have then):
 *   - before PTRACE_SETREGS nothing in the target differs except bytes
 *     below the thread's rsp (the block) and the cave (zero padding nobody
 *     executes): the thread resumes its system call, restarted by the
 *     kernel as after any ptrace stop;
 *   - from PTRACE_SETREGS on, the thread runs the stub, which restores it
 *     by itself. PTRACE_SETREGS comes before PTRACE_SETSIGMASK: a thread
 *     left with every signal blocked but not in the stub would be broken;
 *     the stub blocks signals again first thing anyway. */
#define _GNU_SOURCE
#include "inject/hijack.h"

#include <elf.h>
#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>

#include "inject/procfs.h"
#include "inject/steps.h"
#include "lib/util.h"

#define K_ERESTARTSYS 512
#define K_ERESTARTNOINTR 513
#define K_ERESTARTNOHAND 514
#define K_ERESTART_RESTARTBLOCK 516
#define USER_CS_64 0x33
#define STOP_WAIT_NS (500 * 1000000ULL) /* for the stop PTRACE_INTERRUPT asks */

size_t np_inj_block_size(const struct np_inj_plan *plan) {
    /* struct, alignment slack, xsave area, frame, and the gap above it */
    return sizeof(struct np_stub_block) + 128 + plan->xsave_size + 16 + NP_STUB_RET_GAP;
}

static int get_regs(pid_t tid, struct user_regs_struct *regs) {
    struct iovec iov = {regs, sizeof(*regs)};
    return ptrace(PTRACE_GETREGSET, tid, (void *)NT_PRSTATUS, &iov) < 0 ? -errno : 0;
}

static int set_regs(pid_t tid, const struct user_regs_struct *regs) {
    struct iovec iov = {(void *)regs, sizeof(*regs)};
    return ptrace(PTRACE_SETREGSET, tid, (void *)NT_PRSTATUS, &iov) < 0 ? -errno : 0;
}

static int detach(pid_t tid, int sig) {
    return ptrace(PTRACE_DETACH, tid, NULL, (void *)(long)sig) < 0 ? -errno : 0;
}

/* Is a signal waiting that the thread will take (pending for it or for the
 * process, and not blocked by it)? Unknown counts as yes. */
static bool signal_waiting(pid_t pid, pid_t tid) {
    struct np_inj_status st;
    uint64_t mask = 0;

    if (np_inj_thread_status(pid, tid, &st) < 0 ||
        ptrace(PTRACE_GETSIGMASK, tid, (void *)sizeof(mask), &mask) < 0)
        return true;
    return ((st.sig_pending | st.shared_pending) & ~mask) != 0;
}

/* A thread stopped by our PTRACE_INTERRUPT that we leave: a wait which
 * returns EINTR on any stop (epoll_wait, rt_sigtimedwait, semop...: see
 * signal(7)) is pointed back at its syscall instruction when no signal is
 * waiting for the thread, so that our look stays invisible. Every other
 * result is restarted (or kept) by the kernel itself. */
static void quiet_eintr(pid_t pid, pid_t tid) {
    struct user_regs_struct regs;
    unsigned char insn[2] = {0, 0};

    if (get_regs(tid, &regs) < 0 || (long)regs.orig_rax < 0 || (int64_t)regs.rax != -EINTR ||
        np_read_process(pid, regs.rip - 2, insn, 2) < 0 || insn[0] != 0x0f || insn[1] != 0x05 ||
        signal_waiting(pid, tid))
        return;
    regs.rip -= 2;
    regs.rax = regs.orig_rax;
    regs.orig_rax = (uint64_t)-1;
    if (set_regs(tid, &regs) == 0)
        np_debug("inject: tid %d: EINTR of syscall %ld re-issued", (int)tid, (long)regs.rax);
}

static int detach_quiet(pid_t pid, pid_t tid) {
    quiet_eintr(pid, tid);
    return detach(tid, 0);
}

/* Waits for the next stop of tid, until deadline. Spins briefly (a stop
 * usually comes within microseconds and the thread is paused meanwhile),
 * then sleeps with backoff. -ETIMEDOUT, -ESRCH (it exited). */
static int wait_stop(pid_t tid, uint64_t deadline, int *status) {
    uint64_t start = np_monotonic_ns();
    unsigned us = 0;

    for (;;) {
        pid_t r = waitpid(tid, status, __WALL | WNOHANG);
        if (r == tid)
            return WIFEXITED(*status) || WIFSIGNALED(*status) ? -ESRCH : 0;
        if (r < 0 && errno != EINTR)
            return errno == ECHILD ? -ESRCH : -errno;
        if (np_monotonic_ns() >= deadline)
            return -ETIMEDOUT;
        np_inj_backoff(start, &us);
    }
}

static bool is_event_stop(int status) {
    return WIFSTOPPED(status) && (status >> 16) == PTRACE_EVENT_STOP;
}

static bool is_syscall_stop(int status) {
    return WIFSTOPPED(status) && WSTOPSIG(status) == (SIGTRAP | 0x80);
}

/* Leaves a stopped thread as it is: a signal-delivery stop gets its signal
 * back; a group stop stays a group stop. */
static int let_go(pid_t tid, int status) {
    int sig = 0;

    if (WIFSTOPPED(status) && (status >> 16) == 0 && WSTOPSIG(status) != (SIGTRAP | 0x80))
        sig = WSTOPSIG(status);
    return detach(tid, sig);
}

/* Brings a thread we follow to a stop and detaches it untouched. */
static int give_up(pid_t pid, pid_t tid) {
    int status = 0, err;

    if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) < 0)
        return -errno;
    for (;;) {
        err = wait_stop(tid, np_monotonic_ns() + STOP_WAIT_NS, &status);
        if (err)
            return err;
        if (is_event_stop(status))
            return detach_quiet(pid, tid);
        if (is_syscall_stop(status))
            return detach(tid, 0);
        /* a signal-delivery stop: pass the signal on, wait for our stop */
        if (ptrace(PTRACE_CONT, tid, NULL, (void *)(long)WSTOPSIG(status)) < 0)
            return -errno;
    }
}

static void spot_from_regs(const struct user_regs_struct *r, struct np_inj_spot *s) {
    s->nr = (long)r->orig_rax;
    s->args[0] = r->rdi;
    s->args[1] = r->rsi;
    s->args[2] = r->rdx;
    s->args[3] = r->r10;
    s->args[4] = r->r8;
    s->args[5] = r->r9;
    s->sp = r->rsp;
    s->pc = r->rip;
}

/* How the interrupted call resumes, from its result at the stop. */
static uint32_t resume_kind(const struct np_inj_spot *s, int64_t ret) {
    switch (ret) {
    case -K_ERESTARTSYS:
    case -K_ERESTARTNOINTR:
    case -K_ERESTARTNOHAND:
    case -EINTR: /* epoll_wait & co: EINTR on a stop; the stub keeps a real one */
        return NP_RESUME_REISSUE;
    case -K_ERESTART_RESTARTBLOCK:
        /* futex WAIT_BITSET has an absolute timeout: the same call again is
         * exact and needs no restart block (which the stub's own work could
         * in theory replace). */
        if (s->nr == SYS_futex && (s->args[1] & FUTEX_CMD_MASK) == FUTEX_WAIT_BITSET)
            return NP_RESUME_REISSUE;
        return NP_RESUME_RESTART_BLOCK;
    default:
        return NP_RESUME_RETURN;
    }
}

/* The block as it goes on the stack, and the registers that enter the
 * stub. buf holds the bytes from the block's address to the frame's end. */
static int build(const struct np_inj_plan *plan, const struct user_regs_struct *regs,
                 uint32_t resume, int64_t ret, uint64_t sigmask, unsigned char **buf, size_t *len,
                 uint64_t *block_addr, struct user_regs_struct *entry) {
    uint64_t frame = regs->rsp - 16 - NP_STUB_RET_GAP;
    uint64_t d = (frame - (np_inj_block_size(plan) - 16 - NP_STUB_RET_GAP)) & ~63ULL;
    uint64_t xsave = (d + sizeof(struct np_stub_block) + 63) & ~63ULL;
    struct np_stub_block *b;

    if (xsave + plan->xsave_size > frame)
        return -EOVERFLOW;
    *len = frame + 16 - d;
    *buf = calloc(1, *len);
    if (!*buf)
        return -ENOMEM;
    b = (struct np_stub_block *)*buf;
    *b = plan->proto;
    b->r15 = regs->r15, b->r14 = regs->r14, b->r13 = regs->r13, b->r12 = regs->r12;
    b->rbp = regs->rbp, b->rbx = regs->rbx, b->r11 = regs->r11, b->r10 = regs->r10;
    b->r9 = regs->r9, b->r8 = regs->r8, b->rcx = regs->rcx, b->rdx = regs->rdx;
    b->rsi = regs->rsi, b->rdi = regs->rdi;
    b->frame_off = frame - d;
    b->xsave_ptr = xsave;
    b->resume = resume;
    b->sys_nr = (int64_t)regs->orig_rax;
    b->sys_ret = ret;
    b->sys_ip = regs->rip;
    b->sys_sigmask = sigmask;
    b->out.memfd = b->out.sock_lib = b->out.sock_np = b->out.ctl_stub = b->out.ctl_np = -1;
    uint64_t *f = (uint64_t *)(*buf + (frame - d));
    f[0] = regs->eflags;
    if (resume == NP_RESUME_RETURN) {
        f[1] = regs->rip;
        b->rax = (uint64_t)ret;
    } else {
        f[1] = regs->rip - 2;
        b->rax = resume == NP_RESUME_RESTART_BLOCK ? SYS_restart_syscall : regs->orig_rax;
    }
    *entry = *regs;
    entry->rip = plan->t->cave;
    entry->rsp = d;
    entry->rdi = d;
    entry->orig_rax = (uint64_t)-1; /* no restart fix-up by the kernel */
    *block_addr = d;
    return 0;
}

/* The thread is stopped at a safe spot: redirect it and detach. Before
 * PTRACE_SETREGS any failure detaches it untouched. */
static int redirect(const struct np_inj_plan *plan, pid_t tid, const struct user_regs_struct *regs,
                    uint32_t resume, int64_t ret, uint64_t t_stop, struct np_inj_hijacked *out) {
    const struct np_inj_target *t = plan->t;
    struct user_regs_struct entry;
    unsigned char *buf = NULL;
    uint64_t sigmask = 0, all = ~0ULL, block = 0;
    size_t len = 0;
    int err;

    np_debug("inject: stopped after %.1f us", (np_monotonic_ns() - t_stop) / 1e3);
    if (ptrace(PTRACE_GETSIGMASK, tid, (void *)sizeof(sigmask), &sigmask) < 0) {
        err = -errno;
        goto untouched;
    }
    err = build(plan, regs, resume, ret, sigmask, &buf, &len, &block, &entry);
    if (err)
        goto untouched;
    if (!t->cave_has_stub) {
        err = np_inj_code_write(t->pid, tid, t->cave, np_stub_blob, NP_STUB_SIZE);
        if (err)
            goto untouched;
        np_debug("inject: cave written after %.1f us", (np_monotonic_ns() - t_stop) / 1e3);
        np_inj_fault("cave_written");
    }
    err = np_inj_mem_write(t->pid, block, buf, len);
    if (err)
        goto untouched;
    np_inj_fault("block_written");
    err = set_regs(tid, &entry);
    if (err)
        goto untouched;
    np_inj_fault("regs_set");
    if (ptrace(PTRACE_SETSIGMASK, tid, (void *)sizeof(all), &all) < 0)
        np_debug("inject: PTRACE_SETSIGMASK: %s (the stub blocks signals itself)", strerror(errno));
    np_inj_fault("sigmask_set");
    err = detach(tid, 0);
    out->stop_ns = np_monotonic_ns() - t_stop;
    free(buf);
    if (err && err != -ESRCH)
        np_debug("inject: PTRACE_DETACH: %s", strerror(-err));
    out->tid = tid;
    out->nr = (long)regs->orig_rax;
    out->ret = ret;
    out->resume = resume;
    out->block = block;
    np_inj_fault("detached");
    return 0;

untouched:
    free(buf);
    detach_quiet(t->pid, tid);
    return err;
}

/* Follows tid's system calls until it enters a safe idle one (then
 * redirects it there) or until the deadline. */
static int catch_entry(const struct np_inj_plan *plan, const struct np_inj_candidate *c,
                       uint64_t until, struct np_inj_hijacked *out) {
    size_t block_size = np_inj_block_size(plan);
    int sig = 0, status = 0, err;

    for (;;) {
        if (ptrace(PTRACE_SYSCALL, c->tid, NULL, (void *)(long)sig) < 0)
            return -errno;
        sig = 0;
        err = wait_stop(c->tid, until, &status);
        if (err == -ETIMEDOUT) {
            give_up(plan->t->pid, c->tid);
            return -EAGAIN;
        }
        if (err)
            return err;
        uint64_t t_stop = np_monotonic_ns();
        if (is_event_stop(status)) {
            if (WSTOPSIG(status) != SIGTRAP) { /* group stop */
                detach(c->tid, 0);
                return -EAGAIN;
            }
            continue;
        }
        if (!is_syscall_stop(status)) {
            sig = WSTOPSIG(status); /* deliver it */
            continue;
        }
        struct __ptrace_syscall_info info;
        struct user_regs_struct regs;
        struct np_inj_spot spot;
        const char *why = NULL;
        if (ptrace(PTRACE_GET_SYSCALL_INFO, c->tid, (void *)sizeof(info), &info) < 0 ||
            info.op != PTRACE_SYSCALL_INFO_ENTRY || get_regs(c->tid, &regs) < 0)
            continue;
        spot_from_regs(&regs, &spot);
        if (regs.cs != USER_CS_64 ||
            np_inj_spot_safe(plan->t, &spot, block_size, plan->min_room, &why) < 0)
            continue;
        np_debug("inject: tid %d caught entering %s", (int)c->tid, np_inj_syscall_name(spot.nr));
        return redirect(plan, c->tid, &regs, NP_RESUME_ENTRY, -ENOSYS, t_stop, out);
    }
}

int np_inj_hijack(const struct np_inj_plan *plan, const struct np_inj_candidate *c,
                  uint64_t catch_until, struct np_inj_hijacked *out) {
    struct user_regs_struct regs;
    struct np_inj_spot spot;
    const char *why = NULL;
    int status = 0, err;

    if (ptrace(PTRACE_SEIZE, c->tid, NULL, (void *)PTRACE_O_TRACESYSGOOD) < 0)
        return errno == ESRCH ? -ESRCH : -errno;
    np_inj_fault("seized");
    uint64_t t_stop = np_monotonic_ns();
    if (ptrace(PTRACE_INTERRUPT, c->tid, NULL, NULL) < 0) {
        err = -errno;
        detach(c->tid, 0);
        return err;
    }
    err = wait_stop(c->tid, t_stop + STOP_WAIT_NS, &status);
    if (err == -ETIMEDOUT) /* uninterruptible for that long */
        return give_up(plan->t->pid, c->tid) == -ESRCH ? -ESRCH : -EAGAIN;
    if (err)
        return err;
    if (!is_event_stop(status) || WSTOPSIG(status) != SIGTRAP) {
        let_go(c->tid, status);
        return -EAGAIN;
    }
    err = get_regs(c->tid, &regs);
    if (err) {
        detach(c->tid, 0);
        return err;
    }
    /* Before anything else: should we die from here on, an EINTR-on-stop
     * wait (epoll_wait...) is re-issued instead of failing with EINTR. The
     * plan below still works from the registers as they were. */
    quiet_eintr(plan->t->pid, c->tid);
    np_inj_fault("stopped");
    if (regs.cs != USER_CS_64) {
        detach(c->tid, 0);
        return -ENOTSUP;
    }
    spot_from_regs(&regs, &spot);
    /* the spot the candidate scan already checked (stack, signal frame) */
    bool same = c->idle != NP_IDLE_NO && spot.nr == c->spot.nr && spot.sp == c->spot.sp &&
                spot.pc == c->spot.pc;
    if ((long)regs.orig_rax >= 0 &&
        (same ||
         np_inj_spot_safe(plan->t, &spot, np_inj_block_size(plan), plan->min_room, &why) == 0)) {
        int64_t ret = (int64_t)regs.rax;
        return redirect(plan, c->tid, &regs, resume_kind(&spot, ret), ret, t_stop, out);
    }
    np_debug("inject: tid %d not at a safe spot (%s): following its system calls", (int)c->tid,
             why ? why : "not in a system call");
    quiet_eintr(plan->t->pid, c->tid);
    if (np_monotonic_ns() >= catch_until) {
        detach(c->tid, 0);
        return -EAGAIN;
    }
    return catch_entry(plan, c, catch_until, out);
}
