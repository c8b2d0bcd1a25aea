/* process.h - what the attacher keeps per traced process: its pid, the
 * libraries probed in it, the files already looked at, and its CPython
 * runtime once found. The session's target embeds one (session/target.h);
 * everything here is filled by attach/ and read by the stages after it. */
#ifndef NP_ATTACH_PROCESS_H
#define NP_ATTACH_PROCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "attach/nccl_layout.h"
#include "attach/python.h"
#include "lib/hashmap.h"

/* One ELF file with probe points, mapped by one process. */
struct np_library {
    char *path; /* as the process sees it */
    char build_id[41];
    uint64_t dev, inode;
    uint64_t seen_ns;     /* CLOCK_MONOTONIC: when the mapping was noticed */
    uint64_t attached_ns; /* CLOCK_MONOTONIC: when its probes were in place */
    bool late;            /* mapped after ncclprobe attached to the process */
    bool cuda;            /* a CUDA or NCCL library (not just the dynamic loader) */
    int probes_ok, probes_failed;
    int first_error;
    const struct np_nccl_layout *nccl; /* a libnccl: what its DWARF says (NULL: not NCCL) */
    int cudart_major; /* a libcudart.so.N: N (0: not one, or linked in statically) */
};

/* CUDA runtime majors the probes were checked against (docs/compatibility.md). */
#define NP_CUDART_TESTED_MIN 12
#define NP_CUDART_TESTED_MAX 13

/* N of a path whose file name is libcudart.so.N[.minor...]; 0 otherwise. */
int np_cudart_major_of(const char *path);

struct np_process {
    pid_t pid;
    bool attached;   /* initial attach done: later libraries are "late" */
    bool hold_loads; /* started by ncclprobe: stopped at each library load until probed */
    bool gpu_marker; /* maps libncclprobe_cupti.so: launches get CUPTI correlation ids */
    struct np_library *libs;
    size_t nlibs, libs_cap;
    struct np_map seen_files;     /* "dev:inode" of every executable file looked at */
    struct np_python_info python; /* the CPython runtime, when the process has one */
    struct np_map python_checked; /* "dev:inode" of files already looked at for it */
    bool python_code_free;        /* its code-object deallocator is probed (or tried) */
};

void np_process_init(struct np_process *p, pid_t pid);
void np_process_release(struct np_process *p);

/* The process (thread group) a pid belongs to: itself for a process id,
 * another for a thread id; -ESRCH if there is no such pid. */
int np_process_tgid(pid_t pid);

struct np_library *np_process_add_library(struct np_process *p, const char *path);
bool np_process_saw_file(const struct np_process *p, uint64_t dev, uint64_t inode);
int np_process_mark_file(struct np_process *p, uint64_t dev, uint64_t inode);

/* Probes attached in this process's CUDA and NCCL libraries, and how many
 * such libraries there are (the dynamic loader's hook does not count). */
int np_process_probe_count(const struct np_process *p);
int np_process_cuda_library_count(const struct np_process *p);

/* Looks for the CPython runtime in files not looked at before (once found,
 * it stays): a load costs nothing for a file already seen. */
void np_process_detect_python(struct np_process *p);

#endif
