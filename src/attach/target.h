/* target.h - one traced process: its identity, the libraries we probe in
 * it, and the per-process state of the later stages (symbolizer, kernel
 * names, counters). Created by the record session, fed by every stage. */
#ifndef NP_TARGET_H
#define NP_TARGET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "attach/attach.h"
#include "attach/python.h"
#include "lib/hashmap.h"
#include "ncclprobe/events.h"
#include "ncclprobe/gpu_wire.h"

struct np_symbolizer;
struct np_unwinder;
struct np_kernel_names;
struct np_pycode;

struct np_target {
    pid_t pid;
    char comm[NP_COMM_LEN];
    char *exe;
    int pidfd;     /* readable once the process exits; -1 if unavailable */
    bool attached; /* initial attach done: later libraries are "late" */
    bool exited;
    bool hold_loads; /* started by ncclprobe: stopped at each library load until probed */
    struct np_library *libs;
    size_t nlibs, libs_cap;
    struct np_map seen_files;  /* "dev:inode" of every executable file looked at */
    struct np_map stack_texts; /* ingest's cache: hash of a PC sequence -> its folded text */
    uint64_t stack_text_bytes; /* ... and the bytes it holds */
    struct np_symbolizer *sym;
    struct np_unwinder *unwinder;
    struct np_kernel_names *kernels;
    uint64_t launches, nested, nccl_ops;
    struct np_python_info python;   /* the CPython runtime, when the process has one */
    struct np_map python_checked;   /* "dev:inode" of files already looked at for it */
    bool python_walked;             /* the BPF walker has this process's layout */
    bool python_refused;            /* its frames cannot be walked: said once */
    struct np_pycode *pycode;       /* reads its code objects (frames -> file:line) */
    bool gpu_marker;                /* maps libncclprobe_cupti.so: launches get CUPTI ids */
    bool gpu_off;                   /* its library stayed out or left: launches are not held */
    bool gpu_hello;                 /* its library said hello on the GPU socket */
    uint64_t gpu_first_held_ns;     /* when a launch first waited for its GPU records */
    int64_t gpu_clock_offset_ns;    /* its CLOCK_MONOTONIC minus ours, when over a second */
    uint32_t gpu_status;            /* enum np_hello_status */
    char gpu_message[256];          /* what the library said (why it stayed out) */
    struct np_wire_stats gpu_stats; /* the library's last counters */
};

/* The process (thread group) a pid belongs to: itself for a process id,
 * another for a thread id; -ESRCH if there is no such pid. */
int np_process_tgid(pid_t pid);

/* Reads comm and exe of a live pid; -ESRCH if it does not exist. */
int np_target_new(pid_t pid, struct np_target **out);
void np_target_free(struct np_target *t);
/* Re-reads comm and exe (they change when the process execs). */
void np_target_refresh_identity(struct np_target *t);
/* Probes attached in this process's CUDA and NCCL libraries, and how many
 * such libraries there are (the dynamic loader's hook does not count). */
int np_target_probe_count(const struct np_target *t);
int np_target_cuda_library_count(const struct np_target *t);

/* Looks for the CPython runtime in files not looked at before (once found,
 * it stays): a load costs nothing for a file already seen. */
void np_target_detect_python(struct np_target *t);

/* Drops the cached stack texts (a library was loaded: names may change). */
void np_target_forget_stacks(struct np_target *t);

struct np_library *np_target_add_library(struct np_target *t, const char *path);
bool np_target_saw_file(const struct np_target *t, uint64_t dev, uint64_t inode);
int np_target_mark_file(struct np_target *t, uint64_t dev, uint64_t inode);

#endif
