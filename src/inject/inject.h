/* inject.h - ncclprobe's live library injector: loads a shared library
 * into a running process and calls its attach function with one end of a
 * socketpair made inside the target, handing the other end to us. If the
 * library is already loaded (a mapping's name contains memfd_name, as the
 * memfd-backed copy of an earlier injection does, or CUDA's copy of
 * libncclprobe_cupti.so), it only calls attach again with a new socket
 * ("wake"), never loading a second copy.
 *
 * One thread of the target - one blocked in an idle system call - pauses,
 * for a bounded time; the others run on. Killing the injector at any point
 * leaves the target running correctly. x86-64, glibc targets. The design,
 * each step and why every kill point is safe: docs/inject.md. */
#ifndef NP_INJECT_H
#define NP_INJECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define NP_INJECT_DEFAULT_SYMBOL "ncclprobe_cupti_attach"
#define NP_INJECT_DEFAULT_MEMFD "ncclprobe_cupti"

struct np_inject_req {
    /* The library, a path in OUR mount namespace. NULL: wake only (-ENOENT
     * when it is not loaded). */
    const char *lib_path;
    const char *symbol;     /* int symbol(int sock_fd, unsigned flags); default above */
    const char *memfd_name; /* the memfd's name; also what "already loaded" matches */
    unsigned flags;         /* passed to attach */
    int find_ms;            /* to find (or catch) a thread at a safe point; default 1000 */
    int stub_timeout_ms;    /* the stub waits this long for us; default 2000 */
    int done_timeout_ms;    /* we wait this long for dlopen + attach; default 10000 */
    size_t min_stack;       /* stack the hijacked thread must have free; default 64 KiB */
    pid_t tid;              /* tests and debugging: only this thread (0: any) */
    bool dry_run;           /* every check, nothing done: res->msg says what would be */
    /* The calling thread's nice value during the injection (restored after):
     * the hijacked thread waits for us at each step, so on a busy machine
     * our own scheduling latency is its pause. 0: default -10; 100: leave. */
    int nice;
};

struct np_inject_timing {
    uint64_t stop_ns;   /* the tracer stop: PTRACE_INTERRUPT to PTRACE_DETACH */
    uint64_t stub_ns;   /* the stub, entry to exit */
    uint64_t wait_ns;   /* of which: waiting for us to take the fds and fill the memfd */
    uint64_t dlopen_ns; /* of which: dlopen + dlsym */
    uint64_t attach_ns; /* of which: the attach function */
    uint64_t pause_ns;  /* the hijacked thread's whole pause: stop + stub */
    uint64_t total_ns;  /* the whole call, preflight to results */
};

struct np_inject_result {
    int sock_fd;     /* our end (O_CLOEXEC, blocking), -1 on failure; the caller closes it */
    bool loaded;     /* this call loaded the library (false: woke the loaded copy) */
    pid_t tid;       /* the hijacked thread */
    long syscall_nr; /* the system call it was in */
    const char *syscall_name;
    int attach_ret; /* what attach returned */
    bool eintr;     /* a real signal arrived meanwhile: the call returned EINTR to its handler */
    bool caught;    /* caught entering its system call (PTRACE_SYSCALL), not interrupted */
    struct np_inject_timing t;
    char msg[320]; /* on failure: one clear line, why (the target is untouched when refused) */
};

/* Defaults for every field left 0/NULL. */
void np_inject_req_defaults(struct np_inject_req *req);

/* Injects (or wakes). 0, or -errno with res->msg:
 *   -EPERM     ptrace not allowed (Yama, seccomp filter in the target, LSM)
 *   -EBUSY     another tracer (named), or an injection is in progress
 *   -ENOTSUP   static binary, musl, no dlopen, shadow stacks, no xsave
 *   -ENOSPC    no code cave
 *   -EAGAIN    no thread at a safe point within find_ms
 *   -ENOENT    wake only, and the library is not loaded; or no such symbol
 *   -ELIBBAD   dlopen failed in the target (msg has dlerror)
 *   -ETIMEDOUT the stub did not finish in time (it still will, on its own)
 *   -ECANCELED attach returned < 0 (res->attach_ret)
 *   -ESRCH     the process is gone
 * Refusals (-EPERM, -EBUSY, -ENOTSUP, -ENOSPC, -EAGAIN) leave the target
 * untouched. */
int np_inject_agent(pid_t pid, const struct np_inject_req *req, struct np_inject_result *res);

/* Is the library already loaded in pid (a mapping name containing match)?
 * 1 yes, 0 no, -errno. */
int np_inject_is_loaded(pid_t pid, const char *match);

#endif
