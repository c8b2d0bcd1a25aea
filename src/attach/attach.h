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
};

struct np_closer;

struct np_attacher {
    struct ncclprobe_bpf *skel;
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

/* Scans the process's /proc/PID/maps and attaches to every file not seen
 * before. seen_ns is when the caller learned of new mappings (0: now).
 * Returns the number of probes attached, or -errno (-ESRCH: gone). */
int np_attach_from_maps(struct np_attacher *a, struct np_process *p, uint64_t seen_ns);
/* Attaches to a file by path before the process maps it (ncclprobe -- CMD). */
int np_attach_file(struct np_attacher *a, struct np_process *p, const char *path);

#endif
