/* preflight.h - checks done before loading anything, each with an error
 * that says what is wrong and what to do: privileges, kernel BTF, uprobe
 * support. NCCLPROBE_SYSFS (default /sys) relocates the sysfs lookups, for
 * kernels whose BTF lives elsewhere and for tests. */
#ifndef NP_PREFLIGHT_H
#define NP_PREFLIGHT_H

#include <stddef.h>

/* Returns 0, or -EPERM / -ENOENT / -EOPNOTSUPP after printing the reason. */
int np_preflight(void);
/* Where the kernel's BTF is; used as libbpf's btf_custom_path when it is
 * not the standard location. */
const char *np_btf_path(char *buf, size_t size);

#endif
