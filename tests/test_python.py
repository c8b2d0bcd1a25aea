"""CPython runtime detection (the start of Python frames, issue 4): for every
interpreter here, shared (pyenv) and static (Debian), ncclprobe finds the
file holding `_PyRuntime`, its version, and its address in the process. The
interpreter reports the truth itself, through ctypes."""

from pathlib import Path

import pytest

from lib.processes import interpreters, Workload
from lib.run import Attached
from lib.skip import needs_bpf

pytestmark = needs_bpf

REPORT = r"""
import ctypes, os, signal, sys
addr = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
# shared: libpython is mapped (Debian's static python3.11 says Py_ENABLE_SHARED
# in sysconfig, because Debian also builds the library, but does not use it)
shared = any("libpython" in line for line in open("/proc/self/maps"))
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
print("ready", os.getpid(), flush=True)
print("runtime", hex(addr), "%d.%d.%d" % sys.version_info[:3], int(shared), flush=True)
signal.sigwait({signal.SIGUSR1})
"""


@pytest.mark.parametrize("python", interpreters())
def test_cpython_runtime_found_with_version_and_address(tmp_path, python, workloads):
    w = Workload([python, "-c", REPORT])
    workloads.append(w)
    _, addr, version, shared = w.proc.stdout.readline().split()
    probe = Attached(tmp_path, [w.pid], extra=["--duration", "1"])
    probe.wait_attached()
    rec = probe.finish()
    w.go()
    w.finish()
    assert rec.returncode == 0, rec.stderr
    py = rec.summary["targets"][0]["python"]
    assert py["runtime_address"] == addr
    assert py["shared"] is (shared == "1")
    assert py["free_threaded"] is False
    assert py["minor_version"] == ".".join(version.split(".")[:2])
    # 3.11+ carry their exact version (Py_Version); 3.10 only says it in its name
    assert py["version"] in (version, "") and (py["version"] == version or version < "3.11")
    runtime_file = Path(py["runtime_file"]).name
    assert ("libpython" in runtime_file) == py["shared"]
