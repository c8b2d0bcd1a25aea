/* preflight.c - privilege and kernel-feature checks (see preflight.h). */
#define _GNU_SOURCE
#include "session/preflight.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "lib/caps.h"
#include "lib/util.h"

static const char *sysfs_root(void) {
    const char *root = getenv("NCCLPROBE_SYSFS");
    return root && *root ? root : "/sys";
}

const char *np_btf_path(char *buf, size_t size) {
    snprintf(buf, size, "%s/kernel/btf/vmlinux", sysfs_root());
    return buf;
}

/* Yama's ptrace_scope 3 refuses every attach-mode access, to root too:
 * process_vm_readv (Python code objects), and holding a started command at
 * its exit. Tracing still works; what needs those is said here, once. */
static void warn_ptrace_scope(void) {
    char *text = NULL;
    size_t len = 0;
    if (np_read_file("/proc/sys/kernel/yama/ptrace_scope", &text, &len) < 0)
        return; /* no Yama */
    long scope = strtol(text, NULL, 10);
    free(text);
    if (scope >= 3)
        np_warn("kernel.yama.ptrace_scope is %ld: processes cannot be read, so Python frames "
                "show as [python code 0x...] and a short-lived command may lose its symbols",
                scope);
}

int np_preflight(void) {
    char path[4096];

    uint64_t need = (1ull << NP_CAP_BPF) | (1ull << NP_CAP_PERFMON);
    if (geteuid() != 0 && (np_caps_effective() & need) != need) {
        np_err("permission denied: ncclprobe needs root, or the CAP_BPF and CAP_PERFMON "
               "capabilities (and CAP_SYS_PTRACE to trace other users' processes); "
               "try: sudo ncclprobe ...");
        return -EPERM;
    }
    if (access(np_btf_path(path, sizeof(path)), R_OK) != 0) {
        np_err("this kernel exposes no BTF type information (%s is missing): ncclprobe needs "
               "a kernel built with CONFIG_DEBUG_INFO_BTF=y (Linux 5.8 or newer)",
               path);
        return -ENOENT;
    }
    snprintf(path, sizeof(path), "%s/bus/event_source/devices/uprobe/type", sysfs_root());
    if (access(path, R_OK) != 0) {
        np_err("this kernel has no uprobe support (%s is missing): ncclprobe needs "
               "CONFIG_UPROBE_EVENTS=y",
               path);
        return -EOPNOTSUPP;
    }
    warn_ptrace_scope();
    return 0;
}
