"""privmount.py - runs a benchmark in a mount namespace of its own.

perf probe needs tracefs mounted. A benchmark that mounted it on the host once hid a daemon
that could not start on a fresh host (CI ran after it). So the benchmarks that use perf
re-exec themselves under `unshare --mount --propagation private` first: what they mount goes
away with them, and the host keeps the mounts it had."""

import os
import shutil
import sys

_FLAG = "NCCLPROBE_BENCH_PRIVATE_MOUNTS"


def enter():
    """Re-execs this script in a private mount namespace (once); returns in it."""
    if os.environ.get(_FLAG) == "1" or os.geteuid() != 0 or not shutil.which("unshare"):
        return
    os.environ[_FLAG] = "1"
    os.execvp("unshare", ["unshare", "--mount", "--propagation", "private", sys.executable,
                          *sys.argv])


def mount_tracefs():
    """Mounts tracefs at /sys/kernel/tracing if it is not there (in our namespace only)."""
    import subprocess
    if not os.path.exists("/sys/kernel/tracing/uprobe_events"):
        subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], check=False)
