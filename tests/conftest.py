"""The end-to-end tests' fixtures. What the tests import - where the build
is, how to run ncclprobe against the workloads in tests/progs, how to read
what it wrote, hand-made recordings, the daemon under test - is in tests/lib/
(see lib/__init__.py).

Every test here runs the real thing: real BPF programs, the real libcudart of
the CUDA toolkit, real processes. Tests that need root or the toolkit skip
with the reason shown by `pytest -rs`.
"""

import pytest


@pytest.fixture
def workloads():
    """Workloads (lib.processes.Workload) a test started; killed if the test
    left them running."""
    started = []
    yield started
    for w in started:
        w.kill()
