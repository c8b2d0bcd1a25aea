"""Skip markers for what a test needs: root and BPF, a binary the build makes,
a tool on PATH, the CUDA toolkit, the CUPTI test double (the reason is shown
by `pytest -rs`)."""

import os
import shutil
from pathlib import Path

import pytest

from lib.paths import CUPTI_LIB, NCCLPROBE, PROGS_ENV


def needs_binary(*paths, why=""):
    """A skipif marker: skip unless every path in `paths` exists (a program or
    library the build makes); the reason names the first one missing."""
    missing = [Path(p) for p in paths if not Path(p).exists()]
    reason = f"{missing[0]} is not built (run make)" if missing else "built"
    if why:
        reason += f": {why}"
    return pytest.mark.skipif(bool(missing), reason=reason)


def needs_tools(*tools):
    """A skipif marker: skip unless every program in `tools` is on PATH; the
    reason names the missing ones."""
    missing = [t for t in tools if shutil.which(t) is None]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed")


def bpf_unavailable_reason():
    """Why real BPF tracing cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (BPF uprobes)"
    if not Path("/sys/kernel/btf/vmlinux").exists():
        return "kernel has no BTF"
    if not NCCLPROBE.exists():
        return f"{NCCLPROBE} is not built (run make)"
    return None


needs_bpf = pytest.mark.skipif(bpf_unavailable_reason() is not None,
                               reason=str(bpf_unavailable_reason()))
needs_real_cudart = pytest.mark.skipif(
    PROGS_ENV.get("CUDA_STANDIN", "1") != "0",
    reason="no CUDA toolkit: workloads use the stand-in libcudart")
# The CUPTI test double (libcupti_replay.so, cupti_app) and ncclprobe's CUPTI library.
needs_replay = pytest.mark.skipif(
    PROGS_ENV.get("HAVE_CUPTI_REPLAY") != "1" or not CUPTI_LIB.exists(),
    reason="needs the CUDA toolkit (cupti_app, libcupti_replay.so, libncclprobe_cupti.so)")
