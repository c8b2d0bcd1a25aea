/* discover.h - the records of the daemon's process discovery, shared by
 * bpf/discover.bpf.c and src/daemon/discover.c.
 *
 * BPF tells the daemon about two things, system-wide: a process exec'd (it
 * may be a static CUDA program, or a traced process that is now another
 * program), and a process mapped executable code from a file whose name
 * starts with one of the prefixes user space put in `lib_prefixes` (a CUDA
 * runtime, driver or NCCL library being loaded). Everything else is left to
 * user space, which reads /proc/PID/maps when told. */
#ifndef NCCLPROBE_DISCOVER_H
#define NCCLPROBE_DISCOVER_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define NP_DISC_NAME_LEN 32 /* file base name (or comm) carried in a record */
#define NP_DISC_PREFIX_LEN 16
#define NP_DISC_MAX_PREFIXES 8

enum np_disc_kind {
    NP_DISC_EXEC = 1, /* name: the new comm */
    NP_DISC_MMAP = 2, /* name: base name of the file mapped executable */
};

struct np_disc_event {
    __u32 kind;
    __u32 pid; /* thread group (process) id, in the initial PID namespace */
    __u32 tid;
    __u32 reserved;
    __u64 ts_ns; /* CLOCK_MONOTONIC */
    char name[NP_DISC_NAME_LEN];
};

/* A file name prefix that makes a mapping worth reporting; len 0 ends the list. */
struct np_disc_prefix {
    __u32 len;
    char text[NP_DISC_PREFIX_LEN];
};

#endif
