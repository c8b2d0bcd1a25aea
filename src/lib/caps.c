/* caps.c - dropping capabilities after start (see caps.h). Raw capset(2)
 * and prctl(2): two calls do not justify a libcap dependency. */
#define _GNU_SOURCE
#include "lib/caps.h"

#include <errno.h>
#include <linux/capability.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NP_CAP_LAST 63

uint64_t np_caps_needed(void) {
    return (1ull << NP_CAP_BPF) | (1ull << NP_CAP_PERFMON) | (1ull << CAP_SYS_PTRACE) |
           (1ull << CAP_DAC_READ_SEARCH);
}

static int get_caps(struct __user_cap_data_struct data[2]) {
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    return syscall(SYS_capget, &hdr, data) < 0 ? -errno : 0;
}

uint64_t np_caps_effective(void) {
    struct __user_cap_data_struct data[2] = {0};
    if (get_caps(data) < 0)
        return 0;
    return (uint64_t)data[0].effective | (uint64_t)data[1].effective << 32;
}

int np_caps_drop_to(uint64_t keep) {
    /* The bounding set first: dropping from it needs CAP_SETPCAP, which goes
     * next. Without it (systemd's CapabilityBoundingSet= already narrowed
     * the bounding set) only the process's own sets are narrowed. */
    bool setpcap = np_caps_effective() & (1ull << CAP_SETPCAP);
    for (int cap = 0; setpcap && cap <= NP_CAP_LAST; cap++) {
        if (keep & (1ull << cap))
            continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
            return -errno;
    }
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2] = {0};
    for (int i = 0; i < 2; i++) {
        uint32_t bits = (uint32_t)(keep >> (32 * i));
        data[i].effective = bits;
        data[i].permitted = bits;
        data[i].inheritable = 0;
    }
    if (syscall(SYS_capset, &hdr, data) < 0)
        return -errno;
    return 0;
}
