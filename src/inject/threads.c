/* threads.c - idle system calls and safe hijack points (see threads.h). */
#define _GNU_SOURCE
#include "inject/threads.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>

#include "lib/util.h"

#define SIGFRAME_SCAN (64 * 1024) /* stack bytes searched for a signal frame */
#define MAIN_STACK_GAP (1 << 20)  /* the kernel's stack guard gap below [stack] */

enum np_inj_idle np_inj_idle_class(long nr, const uint64_t args[6]) {
    switch (nr) {
    case SYS_read:
    case SYS_readv:
    case SYS_recvfrom: /* a socket with SO_RCVTIMEO returns EINTR: not visible here */
    case SYS_recvmsg:
    case SYS_accept:
    case SYS_accept4:
    case SYS_ppoll:    /* the remaining timeout is written back */
    case SYS_select:   /* the same */
    case SYS_pselect6: /* the same */
    case SYS_wait4:
    case SYS_waitid:
    case SYS_pause:
    case SYS_rt_sigsuspend:
        return NP_IDLE_RESTART;
    case SYS_poll:
        return (int)args[2] < 0 ? NP_IDLE_RESTART : NP_IDLE_RESTART_BLOCK;
    case SYS_nanosleep:
    case SYS_restart_syscall: /* a timed wait (nanosleep, poll, futex) restarted by the kernel */
        return NP_IDLE_RESTART_BLOCK;
    case SYS_clock_nanosleep:
        return args[1] & TIMER_ABSTIME ? NP_IDLE_RESTART : NP_IDLE_RESTART_BLOCK;
    case SYS_futex:
        switch (args[1] & FUTEX_CMD_MASK) {
        case FUTEX_WAIT:
            return args[3] ? NP_IDLE_RESTART_BLOCK : NP_IDLE_RESTART;
        case FUTEX_WAIT_BITSET: /* absolute timeout, or none */
            return NP_IDLE_RESTART;
        default:
            return NP_IDLE_NO;
        }
    case SYS_epoll_wait:
    case SYS_epoll_pwait:
        return (int)args[3] < 0 ? NP_IDLE_EINTR : NP_IDLE_EINTR_TIMED;
    case SYS_epoll_pwait2:
        return args[3] ? NP_IDLE_EINTR_TIMED : NP_IDLE_EINTR;
    case SYS_rt_sigtimedwait:
        return args[2] ? NP_IDLE_EINTR_TIMED : NP_IDLE_EINTR;
    case SYS_recvmmsg:
        return args[4] ? NP_IDLE_EINTR_TIMED : NP_IDLE_RESTART;
    default:
        return NP_IDLE_NO;
    }
}

const char *np_inj_syscall_name(long nr) {
    static const struct {
        long nr;
        const char *name;
    } names[] = {
        {SYS_read, "read"},
        {SYS_readv, "readv"},
        {SYS_recvfrom, "recvfrom"},
        {SYS_recvmsg, "recvmsg"},
        {SYS_recvmmsg, "recvmmsg"},
        {SYS_accept, "accept"},
        {SYS_accept4, "accept4"},
        {SYS_poll, "poll"},
        {SYS_ppoll, "ppoll"},
        {SYS_select, "select"},
        {SYS_pselect6, "pselect6"},
        {SYS_epoll_wait, "epoll_wait"},
        {SYS_epoll_pwait, "epoll_pwait"},
        {SYS_epoll_pwait2, "epoll_pwait2"},
        {SYS_nanosleep, "nanosleep"},
        {SYS_clock_nanosleep, "clock_nanosleep"},
        {SYS_futex, "futex"},
        {SYS_wait4, "wait4"},
        {SYS_waitid, "waitid"},
        {SYS_pause, "pause"},
        {SYS_rt_sigsuspend, "rt_sigsuspend"},
        {SYS_rt_sigtimedwait, "rt_sigtimedwait"},
        {SYS_restart_syscall, "restart_syscall"},
        {SYS_mmap, "mmap"},
        {SYS_munmap, "munmap"},
        {SYS_write, "write"},
        {SYS_sched_yield, "sched_yield"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (names[i].nr == nr)
            return names[i].name;
    return "syscall";
}

/* Room below sp on its stack: a pthread stack (an rw mapping right above
 * its PROT_NONE guard) or the main thread's [stack] (which may grow to
 * RLIMIT_STACK, short of the mapping below it). 0 when sp is on anything
 * else (an alternate signal stack, a coroutine stack in the heap...). */
static uint64_t stack_room(const struct np_inj_target *t, uint64_t sp) {
    const struct np_maps *maps = &t->maps;

    for (size_t i = 0; i < maps->count; i++) {
        const struct np_mapping *m = &maps->items[i];
        if (sp < m->start || sp >= m->end)
            continue;
        if (strcmp(m->perms, "rw-p") != 0)
            return 0;
        if (strcmp(m->path, "[stack]") == 0) {
            uint64_t limit = np_inj_stack_limit(t->pid), used = m->end - sp;
            uint64_t floor = i > 0 ? maps->items[i - 1].end + MAIN_STACK_GAP : 0;
            uint64_t by_limit = limit > used ? limit - used : 0;
            uint64_t by_gap = sp > floor ? sp - floor : 0;
            return by_limit < by_gap ? by_limit : by_gap;
        }
        bool guarded = i > 0 && maps->items[i - 1].end == m->start &&
                       strcmp(maps->items[i - 1].perms, "---p") == 0;
        return guarded && m->path[0] == '\0' ? sp - m->start : 0;
    }
    return 0;
}

/* A return address into __restore_rt above sp: the thread is running a
 * signal handler (its syscall may have interrupted code holding locks). */
static bool in_signal_handler(const struct np_inj_target *t, uint64_t sp) {
    const struct np_mapping *m = np_maps_find(&t->maps, sp);
    bool found = false;

    if (!t->restore_rt || !m)
        return false;
    size_t len = m->end - sp < SIGFRAME_SCAN ? m->end - sp : SIGFRAME_SCAN;
    len &= ~(size_t)7;
    uint64_t *words = malloc(len ? len : 8);
    if (!words)
        return true; /* cannot tell: not safe */
    if (np_read_process(t->pid, sp & ~7ULL, words, len) == 0)
        for (size_t i = 0; i < len / 8 && !found; i++)
            found = words[i] == t->restore_rt;
    free(words);
    return found;
}

int np_inj_spot_quick(const struct np_inj_target *t, const struct np_inj_spot *s,
                      const char **why) {
    unsigned char insn[2] = {0, 0};

    if (np_inj_idle_class(s->nr, s->args) == NP_IDLE_NO)
        *why = "not an idle system call";
    else if (s->pc >= t->ldso_start && s->pc < t->ldso_end)
        *why = "inside the dynamic loader";
    else if (s->pc >= t->cave && s->pc < t->cave + NP_STUB_SIZE)
        *why = "inside an injection stub";
    else if (np_read_process(t->pid, s->pc - 2, insn, 2) < 0 || insn[0] != 0x0f || insn[1] != 0x05)
        *why = "not after a syscall instruction";
    else
        return 0;
    return -EAGAIN;
}

int np_inj_spot_safe(const struct np_inj_target *t, const struct np_inj_spot *s, size_t block_size,
                     size_t min_room, const char **why) {
    if (np_inj_spot_quick(t, s, why) < 0)
        return -EAGAIN;
    if (stack_room(t, s->sp) < block_size + min_room)
        *why = "not enough stack, or not on a thread stack";
    else if (in_signal_handler(t, s->sp))
        *why = "inside a signal handler";
    else
        return 0;
    return -EAGAIN;
}

static int by_rank(const void *a, const void *b) {
    const struct np_inj_candidate *x = a, *y = b;
    int rx = x->idle == NP_IDLE_NO ? 9 : (int)x->idle,
        ry = y->idle == NP_IDLE_NO ? 9 : (int)y->idle;
    return rx != ry ? rx - ry : (int)x->tid - (int)y->tid;
}

int np_inj_candidates(const struct np_inj_target *t, struct np_inj_candidate **out, size_t *count,
                      size_t *idle_count) {
    pid_t *tids = NULL;
    size_t n = 0, kept = 0, idle = 0;
    int err = np_inj_threads(t->pid, &tids, &n);

    if (err)
        return err;
    struct np_inj_candidate *list = calloc(n ? n : 1, sizeof(*list));
    if (!list) {
        free(tids);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        struct np_inj_where w;
        const char *why = NULL;
        if (np_inj_thread_where(t->pid, tids[i], &w) < 0)
            continue; /* exited */
        struct np_inj_candidate *c = &list[kept];
        c->tid = tids[i];
        c->spot = (struct np_inj_spot){.nr = w.nr, .sp = w.sp, .pc = w.pc};
        memcpy(c->spot.args, w.args, sizeof(w.args));
        c->idle = w.in_syscall && w.state == 'S' ? np_inj_idle_class(w.nr, w.args) : NP_IDLE_NO;
        if (c->idle == NP_IDLE_NO && w.state != 'R')
            continue;
        struct np_inj_status st;
        if (np_inj_thread_status(t->pid, c->tid, &st) < 0 || st.tracer)
            continue; /* traced already (by us: record's exit hold) */
        if (c->idle != NP_IDLE_NO && np_inj_spot_quick(t, &c->spot, &why) < 0) {
            np_debug("inject: tid %d in %s: %s", (int)c->tid, np_inj_syscall_name(w.nr), why);
            continue;
        }
        idle += c->idle != NP_IDLE_NO;
        kept++;
    }
    free(tids);
    qsort(list, kept, sizeof(*list), by_rank);
    *out = list;
    *count = kept;
    *idle_count = idle;
    return 0;
}
