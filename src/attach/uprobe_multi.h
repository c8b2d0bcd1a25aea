/* uprobe_multi.h - BPF_TRACE_UPROBE_MULTI links (Linux 6.6+): many uprobes
 * in one file, one cookie each, attached and removed as one link. Removing
 * a uprobe waits for an RCU grace period; a per-probe perf link pays that
 * once per probe, this link once per library. libbpf 1.1 predates these
 * links, so the link is created with the bpf syscall directly. */
#ifndef NP_UPROBE_MULTI_H
#define NP_UPROBE_MULTI_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The attach type to load programs with for these links. */
#define NP_BPF_TRACE_UPROBE_MULTI 48

/* Returns the link's fd (close it to detach), or -errno. */
int np_uprobe_multi_attach(int prog_fd, pid_t pid, const char *path, const uint64_t *offsets,
                           const uint64_t *cookies, uint32_t count, bool retprobe);

#endif
