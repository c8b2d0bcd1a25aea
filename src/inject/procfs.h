/* procfs.h - what the injector reads about a target from /proc besides its
 * mappings (attach/procmaps.c): its threads and where each one is (which
 * system call, with which arguments, stack and instruction pointers),
 * per-thread status (tracer, seccomp, shadow stack, pending signals), its
 * open memfds and its stack limit. Only reads: nothing here changes the
 * target. */
#ifndef NP_INJECT_PROCFS_H
#define NP_INJECT_PROCFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Every thread id of pid (a snapshot). */
int np_inj_threads(pid_t pid, pid_t **tids, size_t *count);

/* Where a thread is: /proc/PID/task/TID/syscall and stat. */
struct np_inj_where {
    char state;      /* 'R', 'S', 'D', 'T', 't', ... */
    bool in_syscall; /* false: running, or stopped outside a system call */
    long nr;
    uint64_t args[6];
    uint64_t sp, pc;
};
int np_inj_thread_where(pid_t pid, pid_t tid, struct np_inj_where *out);

/* Per-thread status lines. */
struct np_inj_status {
    pid_t tracer;      /* TracerPid */
    int seccomp;       /* Seccomp: 0 none, 1 strict, 2 filter */
    bool shadow_stack; /* x86_Thread_features contains shstk */
    uint64_t sig_pending, shared_pending, sig_blocked;
};
int np_inj_thread_status(pid_t pid, pid_t tid, struct np_inj_status *out);

/* The comm of a process, "?" when gone. */
void np_inj_comm(pid_t pid, char *out, size_t size);

/* The lowest fd of pid whose link is "/memfd:NAME (deleted)" and whose file
 * the process does not map (a stub at work; the loaded library's memfd stays
 * open and is mapped); -ENOENT. */
int np_inj_find_memfd(pid_t pid, const char *name);

/* Soft RLIMIT_STACK of pid in bytes (UINT64_MAX for unlimited). */
uint64_t np_inj_stack_limit(pid_t pid);

#endif
