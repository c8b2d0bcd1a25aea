/* threads.h - which thread of a target may be hijacked, and where. A thread
 * is a candidate only while it is blocked in an "idle" system call (futex
 * wait, epoll/poll/select, sleeps, reads, accept, wait4, pause, sigwait...):
 * at that boundary it holds no lock of libc or of the loader, unlike e.g.
 * an mmap inside malloc (arena lock) or a read inside dlopen. Also
 * required: its instruction pointer is not in the dynamic loader nor in a
 * stub, its stack is a real thread stack with room for the stub, dlopen
 * and signal handlers, and it is not inside a signal handler (whatever
 * the handler interrupted may hold malloc's lock). */
#ifndef NP_INJECT_THREADS_H
#define NP_INJECT_THREADS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "inject/procfs.h"
#include "inject/target.h"

/* The idle system calls, by how cleanly they resume after the hijack
 * (lower is better; the best available thread is taken). */
enum np_inj_idle {
    NP_IDLE_NO = 0,
    NP_IDLE_RESTART = 1,       /* the kernel restarts it as it was (ERESTARTSYS/NOHAND) */
    NP_IDLE_RESTART_BLOCK = 2, /* relative timeout: restarted through the restart block */
    NP_IDLE_EINTR = 3,         /* EINTR on any stop (epoll_wait...): re-issued by us */
    NP_IDLE_EINTR_TIMED = 4,   /* the same with a relative timeout: re-issued in full */
};

enum np_inj_idle np_inj_idle_class(long nr, const uint64_t args[6]);
const char *np_inj_syscall_name(long nr);

struct np_inj_spot {
    long nr;
    uint64_t args[6];
    uint64_t sp, pc;
};

/* The cheap part of np_inj_spot_safe: an idle call, right after a syscall
 * instruction, outside the loader and the stub. 0, or -EAGAIN with *why. */
int np_inj_spot_quick(const struct np_inj_target *t, const struct np_inj_spot *s, const char **why);

/* Is this spot safe for the stub, which needs block_size bytes below sp
 * plus min_room of stack? Adds the stack checks (room, a real thread
 * stack, no signal frame above). 0, or -EAGAIN with *why set. */
int np_inj_spot_safe(const struct np_inj_target *t, const struct np_inj_spot *s, size_t block_size,
                     size_t min_room, const char **why);

struct np_inj_candidate {
    pid_t tid;
    enum np_inj_idle idle; /* NP_IDLE_NO: busy (only for the catch phase) */
    struct np_inj_spot spot;
};

/* Every thread of the target worth a try: the idle ones passing
 * np_inj_spot_quick first (best first), then the running ones (for the
 * catch phase). Threads asleep in other calls (write, connect, semop...)
 * are left alone: interrupting them is not free for every call. */
int np_inj_candidates(const struct np_inj_target *t, struct np_inj_candidate **out, size_t *count,
                      size_t *idle_count);

#endif
