"""Workload processes: starting them, letting them go, reading what they
print, the CPythons to run Python workloads on, and waiting for a
condition."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path


def thread_lines(text, key="variant", value="launches"):
    """Parses the workloads' 'thread tid=T variant=V launches=N' lines into
    {(tid, V): N}."""
    out = {}
    pattern = re.compile(rf"thread tid=(\d+) {key}=(\S+) {value}=(\d+)")
    for m in pattern.finditer(text):
        out[(int(m.group(1)), m.group(2))] = int(m.group(3))
    return out


def running_tracers():
    """{pid: command line} of the ncclprobe processes running on this machine (ours,
    a test's that outlived it, anyone's; not zombies, which hold nothing)."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if Path(f"/proc/{d}/comm").read_text().strip() != "ncclprobe":
                continue
            if Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmdline = Path(f"/proc/{d}/cmdline").read_bytes()
        except OSError:
            continue
        found[int(d)] = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
    return found


def interpreters(fallback=sys.executable):
    """Every CPython to test Python stacks on: pyenv's (shared libpython)
    and Debian's static python3.11; [fallback] if neither exists."""
    found = sorted(str(p) for p in Path("/root/.pyenv/versions").glob("3.1[0-9]*/bin/python3.1?")
                   if p.exists())
    if Path("/usr/bin/python3.11").exists():
        found.append("/usr/bin/python3.11")
    return found or [fallback]


def wait_for(cond, timeout, what="condition", interval=0.05):
    """Polls cond() until it returns something true (returned) or timeout s pass
    (AssertionError naming `what`)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class Workload:
    """A workload process, its output piped. With wait=True (the default) it was
    started with --wait-signal: it prints 'ready PID' and waits for SIGUSR1
    before its first launch (go())."""

    def __init__(self, argv, env=None, wait=True):
        self.argv = [str(a) for a in argv]
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, **(env or {})})
        self.pid = self.proc.pid
        self.started = time.monotonic()
        self.out = self.err = None
        if wait:
            line = self.proc.stdout.readline()
            assert line.startswith("ready "), f"{self.argv}: did not start: {line!r}"

    def go(self):
        """Lets a waiting workload start launching (SIGUSR1)."""
        os.kill(self.pid, signal.SIGUSR1)

    def finish(self, timeout=60):
        """Waits for the end; returns (stdout, stderr)."""
        self.out, self.err = self.proc.communicate(timeout=timeout)
        return self.out, self.err

    def launched(self, sig=None, timeout=60):
        """Sends sig (if any), waits for the end, which must be exit status 0;
        returns the number of launches the workload printed."""
        if sig and self.proc.poll() is None:
            os.kill(self.pid, sig)
        out, err = self.finish(timeout)
        assert self.proc.returncode == 0, (self.argv, self.proc.returncode, err)
        return sum(thread_lines(out).values())

    def kill(self):
        """Kills the workload if it still runs (and reaps it)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
