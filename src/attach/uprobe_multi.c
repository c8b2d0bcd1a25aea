/* uprobe_multi.c - raw BPF_LINK_CREATE for uprobe_multi (see uprobe_multi.h). */
#define _GNU_SOURCE
#include "attach/uprobe_multi.h"

#include <errno.h>
#include <linux/bpf.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NP_BPF_F_UPROBE_MULTI_RETURN 1u

/* The head of union bpf_attr's link_create member, uprobe_multi variant
 * (include/uapi/linux/bpf.h of Linux 6.6+). The kernel accepts a shorter
 * attr than its own and zero-fills the rest. */
struct link_create_uprobe_multi {
    uint32_t prog_fd;
    uint32_t target_fd;
    uint32_t attach_type;
    uint32_t flags;
    uint64_t path;
    uint64_t offsets;
    uint64_t ref_ctr_offsets;
    uint64_t cookies;
    uint32_t cnt;
    uint32_t multi_flags;
    uint32_t pid;
    uint32_t pad;
};

int np_uprobe_multi_attach(int prog_fd, pid_t pid, const char *path, const uint64_t *offsets,
                           const uint64_t *cookies, uint32_t count, bool retprobe) {
    struct link_create_uprobe_multi attr;

    memset(&attr, 0, sizeof(attr));
    attr.prog_fd = (uint32_t)prog_fd;
    attr.attach_type = NP_BPF_TRACE_UPROBE_MULTI;
    attr.path = (uint64_t)(uintptr_t)path;
    attr.offsets = (uint64_t)(uintptr_t)offsets;
    attr.cookies = (uint64_t)(uintptr_t)cookies;
    attr.cnt = count;
    attr.multi_flags = retprobe ? NP_BPF_F_UPROBE_MULTI_RETURN : 0;
    attr.pid = (uint32_t)pid;
    int fd = (int)syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr));
    return fd < 0 ? -errno : fd;
}
