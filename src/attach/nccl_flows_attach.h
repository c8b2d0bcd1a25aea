/* nccl_flows_attach.h - the --nccl-flows probes of each libnccl a target
 * maps: ncclProxySaveOp and SaveProxy (or its .isra clone), and
 * uploadProxyOps and ncclLaunchKernel where the build has them, from the flow layout
 * (nccl_flow_layout.h), attached with bpf/nccl_flows.bpf.c's
 * programs, and the library's slot in BPF's flow_cfg (offsets). A slot per
 * (process, library): the ring records name their slot, which gives user
 * space the layouts to decode them with. */
#ifndef NP_NCCL_FLOWS_ATTACH_H
#define NP_NCCL_FLOWS_ATTACH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "attach/nccl_flow_layout.h"
#include "attach/nccl_layout.h"
#include "ncclprobe/flows.h"

struct nccl_flows_bpf;
struct bpf_link;

struct np_flow_lib {
    pid_t pid;
    char path[256];
    const struct np_nccl_layout *nccl;    /* owned by the attacher's file cache */
    const struct np_flow_layout *flow;    /* ditto */
    struct bpf_link *links[NP_FLOW_SYMS]; /* save op, save proxy, upload: perf links ... */
    int link_fds[NP_FLOW_SYMS];           /* ... or uprobe_multi links' fds + 1 (0: none) */
    int err;        /* negative errno: not attached (flow->missing says why) */
    int upload_err; /* uploadProxyOps not probed (-ENOENT: no such symbol): no launch_id */
    int launch_err; /* ncclLaunchKernel not probed: topology only at a first proxy op */
    bool released;  /* its process is no longer traced: the slot is free */
};

struct np_flow_attacher {
    struct nccl_flows_bpf *skel;
    /* uprobe_multi links, as the launch probes (attach.h): their programs are
     * loaded for them. These need CAP_BPF and CAP_PERFMON only; a perf link's
     * uprobe also needs CAP_SYS_ADMIN, which the daemon gives up. */
    bool use_multi;
    struct np_flow_lib libs[NP_FLOW_MAX_LIBS]; /* slot = index; [0] unused */
    uint32_t nlibs;                            /* slots used, 1.. */
};

void np_flow_attacher_init(struct np_flow_attacher *fa, struct nccl_flows_bpf *skel,
                           bool use_multi);
/* Probes one libnccl of process pid (binary: the path to open it by).
 * Returns the slot (> 0), or -errno; a library whose flows cannot be read
 * gets a slot too, with err set, so that summary.json can say why. */
int np_flow_attach_library(struct np_flow_attacher *fa, pid_t pid, const char *binary,
                           const char *target_path, const struct np_nccl_layout *nccl,
                           const struct np_flow_layout *flow);
const struct np_flow_lib *np_flow_lib_of(const struct np_flow_attacher *fa, uint32_t slot);
/* pid is no longer traced (the daemon): its flow probes go - each
 * uprobe_multi link's fd handed to close_fd, which may close it later off
 * this thread - and its slots are reused. */
void np_flow_attacher_release_pid(struct np_flow_attacher *fa, pid_t pid,
                                  void (*close_fd)(void *ctx, int fd), void *ctx);
/* Detaches everything. */
void np_flow_attacher_destroy(struct np_flow_attacher *fa);

#endif
