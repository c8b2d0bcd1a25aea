/* attach.h - turns "process P maps file F" into attached uprobes.
 *
 * The attacher owns the probe registry: every uprobe it attaches gets a probe
 * id (the BPF attach cookie) and a row in BPF's probe_cfg map saying which
 * process it serves and what it does. ELF scans are cached per file
 * identity (device, inode, size, mtime), so the hundredth process mapping
 * libcudart costs a map lookup, not a symbol walk. */
#ifndef NP_ATTACH_H
#define NP_ATTACH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "attach/nccl_layout.h"
#include "attach/probes.h"
#include "attach/process.h"
#include "lib/hashmap.h"

struct ncclprobe_bpf;
struct bpf_link;
struct np_flow_attacher;

struct np_probe_site {
    uint32_t id;
    pid_t pid;
    const struct np_probe_def *def;
    size_t lib_index; /* into its process's libs[] */
    uint64_t offset;  /* file offset of the probed instruction */
    bool is_thunk;
    bool hold; /* loader hook that stops the process until probes are in place */
    /* NCCL probes: the layout of their libnccl (owned by the attacher's
     * file cache), NULL for other probes */
    const struct np_nccl_layout *nccl;
    struct bpf_link *link, *ret_link;
    int err;       /* negative errno when attaching failed */
    bool released; /* its process is gone: the id waits for reuse (daemon) */
    /* The agent's fast path: a launch probe the CUPTI marker can take
     * (np_fast_def), attached on a link of its own so that it can be
     * detached while the marker serves its process, and attached again. */
    bool fast;
    bool fast_detached; /* detached now: the marker takes its launches */
    char *binary;       /* fast: the file attached, to attach again */
    int fast_fd;        /* fast: its own uprobe_multi link's fd + 1 (0: none; else `link`) */
    uint64_t addr;      /* fast_detached: the function's address in the process */
};

struct np_closer;

struct np_attacher {
    struct ncclprobe_bpf *skel;
    bool fast_path;    /* launch probes the CUPTI marker can take get links of their own */
    bool use_multi;    /* attach with uprobe_multi links (one per library) */
    int *multi_fds;    /* those links */
    pid_t *multi_pids; /* ... and the process each serves */
    size_t nmulti, multi_cap;
    struct np_probe_site *sites; /* sites[id - 1] */
    size_t nsites, cap;
    struct np_closer *closer; /* closes released links off the caller's thread, then
                                 hands their ids back for reuse */
    struct np_map scan_cache; /* file identity -> struct np_scanned_file * */
    /* --nccl-flows: each libnccl's proxy-flow probes too; NULL: off */
    struct np_flow_attacher *flows;
};

void np_attacher_init(struct np_attacher *a, struct ncclprobe_bpf *skel, bool use_multi);
/* Detaches every probe; the registry stays readable (for the summary). */
void np_attacher_detach_all(struct np_attacher *a);
/* Detaches what is left and frees the registry. */
void np_attacher_destroy(struct np_attacher *a);
/* A process is gone (or no longer traced): its probes are switched off in
 * BPF now, their links closed by a background thread (removing a uprobe
 * waits for an RCU grace period), and their ids reused by later probes once
 * those links are closed. Returns how many probes were released. */
int np_attacher_release_pid(struct np_attacher *a, pid_t pid);
const struct np_probe_site *np_attacher_site(const struct np_attacher *a, uint32_t id);
/* The agent's fast path (events.h). On: the fast-path launch probes of pid
 * that the CUPTI in use names by callback id are handed to the marker -
 * fast_cbids written, fast_procs[pid] set, then their int3 uprobes
 * detached. cupti13: the CUPTI has __cudaLaunchKernel's callback ids
 * (before 13.0 a launch through that thunk is named cudaLaunchKernel by
 * CUPTI, so a cudaLaunchKernel with a thunk into it stays on int3). Returns
 * how many probes were detached. Off: attaches them again, waits for calls
 * in flight, then deletes its fast_cbids (and fast_procs[pid]). */
int np_attacher_fast_on(struct np_attacher *a, const struct np_process *p, bool cupti13);
int np_attacher_fast_off(struct np_attacher *a, pid_t pid);
/* Whether pid is on the fast path now. */
bool np_attacher_fast_is_on(const struct np_attacher *a, pid_t pid);

/* Scans the process's /proc/PID/maps and attaches to every file not seen
 * before. seen_ns is when the caller learned of new mappings (0: now).
 * Returns the number of probes attached, or -errno (-ESRCH: gone). */
int np_attach_from_maps(struct np_attacher *a, struct np_process *p, uint64_t seen_ns);
/* Attaches to a file by path before the process maps it (ncclprobe -- CMD). */
int np_attach_file(struct np_attacher *a, struct np_process *p, const char *path);
/* Probes the code-object deallocator of the process's CPython (found
 * already: p->python) at the address its PyCode_Type holds, once: 1 when
 * attached, 0 when there is nothing to do, or -errno. */
int np_attach_python_code_free(struct np_attacher *a, struct np_process *p);
/* Code objects of pid that a stack BPF reported new held (read by then):
 * their frees make Python stacks new again (events.h, np_py_code_key). */
void np_attacher_python_codes(struct np_attacher *a, pid_t pid, const uint64_t *codes, size_t n);

#endif
