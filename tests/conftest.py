"""The end-to-end tests' fixtures. What the tests import - where the build
is, how to run ncclprobe against the workloads in tests/progs, how to read
what it wrote, hand-made recordings, the daemon under test - is in tests/lib/
(see lib/__init__.py).

Every test here runs the real thing: real BPF programs, the real libcudart of
the CUDA toolkit, real processes. Tests that need root or the toolkit skip
with the reason shown by `pytest -rs`.
"""

import os
import signal
import warnings
from pathlib import Path

import pytest

from lib.processes import running_tracers


@pytest.fixture
def workloads():
    """Workloads (lib.processes.Workload) a test started; killed if the test
    left them running."""
    started = []
    yield started
    for w in started:
        w.kill()



def _parent(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def _ours(pid):
    """True when pid descends from this pytest."""
    me = os.getpid()
    while pid > 1:
        pid = _parent(pid)
        if pid == me:
            return True
    return False


_killed = set()


@pytest.fixture(autouse=True, scope="module")
def no_tracer_outlives_its_module(request):
    """An ncclprobe an earlier test module started and left running (a daemon traces every
    CUDA process on the machine) is killed before the next module starts, and said as a
    warning. Checked at the next module's start: pytest finalizes one module's fixtures in no
    fixed order among themselves, but all of them before the next module's."""
    leaked = {pid: cmd for pid, cmd in running_tracers().items()
              if _ours(pid) and pid not in _killed}
    _killed.update(leaked)  # a killed one may take a while to be gone
    for pid in leaked:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if leaked:
        warnings.warn(f"ncclprobe processes left running before {request.module.__name__}, "
                      f"killed: {leaked}")
    yield
