"""Shared fixtures for the end-to-end tests: where the build is, how to run
ncclprobe against the workloads in tests/progs, and how to read what it wrote.

Every test here runs the real thing: real BPF programs, the real libcudart of
the CUDA toolkit, real processes. Tests that need root or the toolkit skip
with the reason shown by `pytest -rs`.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("NCCLPROBE_BUILD", REPO / "build"))
NCCLPROBE = BUILD / "ncclprobe"
PROGS = BUILD / "progs"


def read_env_file(path):
    env = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if "=" in line:
                key, value = line.split("=", 1)
                env[key.strip()] = value.strip()
    return env


PROGS_ENV = read_env_file(PROGS / "progs.env")


def bpf_unavailable_reason():
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


def interpreters():
    """Every CPython to test Python stacks on: pyenv's (shared libpython)
    and Debian's static python3.11; the running one if neither exists."""
    found = sorted(str(p) for p in Path("/root/.pyenv/versions").glob("3.1[0-9]*/bin/python3.1?"))
    if Path("/usr/bin/python3.11").exists():
        found.append("/usr/bin/python3.11")
    return found or [sys.executable]


GO = shutil.which("go")


def go_pprof(tmp_path, *args):
    """`go tool pprof ARGS`'s output, offline, with its caches under tmp_path;
    skips when Go is missing (tools/install-deps.sh installs golang-go)."""
    if GO is None:
        pytest.skip("no `go` (go tool pprof reads the profiles)")
    home = tmp_path / "gohome"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home), "GOCACHE": str(tmp_path / "gocache"),
           "GOFLAGS": "", "GOTOOLCHAIN": "local", "PPROF_TMPDIR": str(home), "TZ": "UTC"}
    proc = subprocess.run([GO, "tool", "pprof", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def made_by_record(directory):
    """A directory `ncclprobe record` wrote (not one a test made by hand)."""
    return (Path(directory) / "stacks.ext.folded").exists()


class Recording:
    """The outputs of one ncclprobe recording directory."""

    def __init__(self, path, proc):
        self.path = Path(path)
        self.returncode = proc.returncode
        self.stderr = proc.stderr
        self.stdout = proc.stdout

    def text(self, name):
        return (self.path / name).read_text(errors="surrogateescape")

    @property
    def summary(self):
        return json.loads(self.text("summary.json"))

    def ext_lines(self):
        """stacks.ext.folded as (ts, comm, pid, tid, cpu, frames) tuples."""
        rows = []
        for line in self.text("stacks.ext.folded").splitlines():
            ts, comm, pid, tid, cpu, stack = line.split(" ", 5)
            rows.append((int(ts), comm, int(pid), int(tid), int(cpu), stack.split(";")))
        return rows

    def folded(self):
        """launches.folded as {stack string: count}."""
        out = {}
        for line in self.text("launches.folded").splitlines():
            stack, count = line.rsplit(" ", 1)
            out[stack] = out.get(stack, 0) + int(count)
        return out

    def jsonl(self, name):
        return [json.loads(line) for line in self.text(name).splitlines() if line]

    def stacks(self):
        return {s["stack_id"]: s["frames"] for s in self.jsonl("stacks.jsonl")}


def thread_lines(text, key="variant", value="launches"):
    """Parses the workloads' 'thread tid=T variant=V launches=N' lines into
    {(tid, V): N}."""
    out = {}
    pattern = re.compile(rf"thread tid=(\d+) {key}=(\S+) {value}=(\d+)")
    for m in pattern.finditer(text):
        out[(int(m.group(1)), m.group(2))] = int(m.group(3))
    return out


def run_ncclprobe(args, timeout=60, env=None, user=None):
    """Runs ncclprobe with exactly these arguments."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([str(NCCLPROBE), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=full_env, user=user)


def record(tmp_path, args, timeout=60, env=None, name="rec"):
    """Runs `ncclprobe record -o DIR ARGS` and returns its Recording."""
    out = tmp_path / name
    proc = run_ncclprobe(["record", "-o", out, *args], timeout=timeout, env=env)
    return Recording(out, proc)


class Workload:
    """A workload started with --wait-signal: it prints 'ready PID' and waits
    for SIGUSR1 before its first launch."""

    def __init__(self, argv, env=None):
        self.proc = subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        line = self.proc.stdout.readline()
        assert line.startswith("ready "), f"workload did not start: {line!r}"
        self.pid = self.proc.pid

    def go(self):
        os.kill(self.pid, signal.SIGUSR1)

    def finish(self, timeout=60):
        out, err = self.proc.communicate(timeout=timeout)
        return out, err

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Attached:
    """ncclprobe running in the background against --pid."""

    def __init__(self, tmp_path, pids, extra=(), name="rec"):
        self.out = tmp_path / name
        args = [str(NCCLPROBE), "record", "-o", str(self.out),
                "--pid", ",".join(str(p) for p in pids), *extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)

    def wait_attached(self, pattern=r"recording process|waiting for one", timeout=30):
        """Reads stderr until the attach message; returns what was read."""
        seen = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            if re.search(pattern, line):
                return "".join(seen)
        raise AssertionError("ncclprobe did not attach: " + "".join(seen))

    def finish(self, timeout=60):
        out, err = self.proc.communicate(timeout=timeout)
        return Recording(self.out, subprocess.CompletedProcess(self.proc.args,
                                                               self.proc.returncode, out, err))

    def stop(self, sig=signal.SIGINT, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.finish(timeout)


def record_attached(tmp_path, w, extra=()):
    """Attaches ncclprobe to the waiting workload w, starts it, waits for both
    to end: returns (recording, workload stdout, ncclprobe's attach message)."""
    probe = Attached(tmp_path, [w.pid], extra=extra)
    attached = probe.wait_attached()
    w.go()
    out, _ = w.finish()
    return probe.finish(), out, attached


@pytest.fixture
def workloads():
    """Workloads started by a test; killed if the test left them running."""
    started = []
    yield started
    for w in started:
        w.kill()
