/* proc.h - what the daemon reads about a process from /proc: the labels
 * its filters and output sets use (comm, exe, namespace pid, cgroup,
 * container id), its ptrace tracer, and whether it maps a CUDA or NCCL
 * library. */
#ifndef NP_DAEMON_PROC_H
#define NP_DAEMON_PROC_H

#include <stdbool.h>
#include <sys/types.h>

#define NP_CONTAINER_ID_LEN 64

struct np_proc_labels {
    pid_t pid;                               /* in our (the initial) PID namespace */
    pid_t ns_pid;                            /* in the process's own PID namespace */
    pid_t tracer;                            /* TracerPid: its debugger or tracer, 0 if none */
    char comm[16 + 1];                       /* /proc/PID/comm */
    char exe[4096];                          /* /proc/PID/exe as it sees it; "" when unreadable */
    char cgroup[1024];                       /* cgroup v2 path; "" without one */
    char container[NP_CONTAINER_ID_LEN + 1]; /* 64-hex id found in the cgroup path, or "" */
};

/* 0, or -ESRCH when the process is gone. */
int np_proc_read_labels(pid_t pid, struct np_proc_labels *out);

/* The container id in a cgroup path: the last run of exactly 64 hex digits
 * (docker-<id>.scope, /docker/<id>, cri-containerd-<id>.scope, crio-<id>,
 * kubepods ...); "" when there is none. Exposed for tests. */
void np_proc_container_id(const char *cgroup, char *out, size_t size);

/* True when the process maps executable code from a file whose base name
 * starts with one of prefixes (NULL-terminated). */
bool np_proc_maps_library(pid_t pid, const char *const *prefixes);

/* Calls fn for every process in /proc (not threads); stops at a non-zero
 * return and returns it. */
int np_proc_each(int (*fn)(void *ctx, pid_t pid), void *ctx);

#endif
