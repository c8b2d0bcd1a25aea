/* caps.h - this process's capabilities: what it has (preflight), and
 * dropping all but what the daemon needs once set up. */
#ifndef NP_LIB_CAPS_H
#define NP_LIB_CAPS_H

#include <stdint.h>

/* Newer than some libc headers: the kernel's numbers. */
#define NP_CAP_PERFMON 38
#define NP_CAP_BPF 39

/* What the daemon needs after start, as a capability bit mask:
 *   CAP_BPF             map reads/writes are by fd, but attaching programs is not
 *   CAP_PERFMON         uprobes (perf_event_open of the uprobe PMU, uprobe_multi links)
 *   CAP_SYS_PTRACE      /proc/PID/maps, /proc/PID/root, process_vm_readv of any user's process
 *   CAP_DAC_READ_SEARCH libraries and executables not readable by root's mode bits */
uint64_t np_caps_needed(void);

/* Drops every other capability from the effective, permitted, inheritable
 * and bounding sets; 0 or -errno. */
int np_caps_drop_to(uint64_t keep);

/* The effective set of this process (for status and tests). */
uint64_t np_caps_effective(void);

#endif
