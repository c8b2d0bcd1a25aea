"""The live library injector under test (src/inject, docs/inject.md): its test
driver (BUILD/inject_check, which runs np_inject_agent alone with a test
library), the targets that check themselves around every call
(tests/progs/inject_target.c, inject_py_target.py), what an injection may
change in a target, and the table of injection timings."""

import json
import os
import queue
import re
import statistics
import subprocess
import threading
import time

import pytest

from lib.paths import BUILD, PROGS, REPO
from lib.run import sanitizer_said

INJECT_CHECK = BUILD / "inject_check"
STUB_BIN = BUILD / "stub" / "stub.bin"
TARGET = PROGS / "inject_target"
TARGET_STATIC = PROGS / "inject_target_static"
MUSL_TARGET = PROGS / "inject_musl"  # built only where musl-gcc is installed
LIB = PROGS / "libinject_test.so"
LIB_NOSYM = PROGS / "libinject_test_nosym.so"
PY_TARGET = REPO / "tests" / "progs" / "inject_py_target.py"
TIMINGS_FILE = BUILD / "inject_timings.txt"

# What the test library writes on its socket at each attach call.
ATTACH_LINE = re.compile(r"attach pid=(\d+) tid=(\d+) call=(\d+) loads=(\d+) flags=(\d+)")


def unavailable_reason():
    """Why the injector tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (ptrace of any process, namespaces)"
    for path in (INJECT_CHECK, TARGET, LIB):
        if not path.exists():
            return f"{path} is not built (make {BUILD}/inject_check {BUILD}/progs/.built)"
    return None


needs_injector = pytest.mark.skipif(unavailable_reason() is not None,
                                    reason=str(unavailable_reason()))


class Target:
    """A target (argv) whose stdout and stderr are collected by threads. It
    prints "READY pid" and "ROLE name tid" lines at its start, and stops when its
    stdin closes (inject_target --mode mmap: on SIGTERM); at the end it prints
    "RESULT OK" (exit 0) or "RESULT FAIL ..." (exit 1)."""

    def __init__(self, argv, ready_timeout=10):
        self.p = subprocess.Popen([str(a) for a in argv], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        self.out = []
        self.err = []
        threading.Thread(target=self._pump, args=(self.p.stdout, self.out, True),
                         daemon=True).start()
        threading.Thread(target=self._pump, args=(self.p.stderr, self.err, False),
                         daemon=True).start()
        deadline = time.monotonic() + ready_timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise AssertionError(f"{argv}: no READY line: {self.out} {self.err}") from None
            if line.startswith("READY"):
                break
        self.pid = self.p.pid
        time.sleep(0.05)
        self.roles = {}
        for line in list(self.out):
            m = re.match(r"ROLE (\S+) (\d+)", line)
            if m:
                self.roles.setdefault(m.group(1), []).append(int(m.group(2)))

    def _pump(self, stream, sink, notify):
        for line in stream:
            sink.append(line.rstrip("\n"))
            if notify:
                self.lines.put(line)

    def tid(self, role):
        """The thread id of the (first) thread doing role."""
        return self.roles[role][0]

    def finish(self, timeout=60, sigterm=False):
        """Closes its stdin (or sends SIGTERM); returns its exit status."""
        if sigterm:
            self.p.terminate()
        else:
            self.p.stdin.close()
        rc = self.p.wait(timeout=timeout)
        time.sleep(0.1)  # the pump threads read the last lines
        return rc

    def assert_ok(self, **kw):
        """Ends the target, which must have found everything right."""
        rc = self.finish(**kw)
        report = "\n".join(line for line in self.out if not line.startswith("ROLE ")) + "\n" + \
            "\n".join(self.err)
        assert rc == 0 and any(line.startswith("RESULT OK") for line in self.out), report
        return report

    def kill(self):
        """Kills the target if it still runs (and reaps it)."""
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def inject(pid, *args, lib=LIB, env=None, timeout=60, read=True):
    """Runs `inject_check --json [--read] [--lib LIB] ARGS PID`; returns its JSON
    answer (ok, err, msg, loaded, tid, syscall, said, the times in us...) plus
    rc, its exit status. Its stderr must hold no sanitizer report."""
    argv = [str(INJECT_CHECK), "--json"] + (["--read"] if read else [])
    if lib is not None:
        argv += ["--lib", str(lib)]
    argv += [str(a) for a in args] + [str(pid)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **(env or {})})
    assert not sanitizer_said(p.stderr), p.stderr
    r = json.loads(p.stdout) if p.stdout.strip() else {"ok": False, "msg": p.stderr}
    r["rc"] = p.returncode
    return r


def inject_retry(pid, *args, seconds=8, **kw):
    """Injects, retrying while an earlier (killed) injection's stub still runs
    (it gives up by itself within its 2 s timeout)."""
    deadline = time.monotonic() + seconds
    while True:
        r = inject(pid, *args, **kw)
        if r["ok"] or time.monotonic() > deadline or "in progress" not in r["msg"]:
            return r
        time.sleep(0.1)


def said(r):
    """The test library's attach line of an inject() answer, as a dict of ints
    (pid, tid, call, loads, flags); it must be there."""
    m = ATTACH_LINE.search(r.get("said", ""))
    assert m, r
    return {k: int(v) for k, v in zip(("pid", "tid", "call", "loads", "flags"), m.groups())}


def memfd_copies(pid, name="ncclprobe_cupti"):
    """How many distinct files pid maps under the library's name: copies loaded."""
    inodes = set()
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            if name in line:
                inodes.add(line.split()[4])
    return len(inodes)


def snapshot(pid, skip_ldso=False):
    """What an injection changes in pid: its mappings, the private (COW'd)
    pages of its executable file mappings (the cave) and its fds. skip_ldso:
    gdb puts its own breakpoint into the loader."""
    with open(f"/proc/{pid}/maps") as f:
        maps = f.read()
    anon = []
    with open(f"/proc/{pid}/smaps") as f:
        cur = None
        for line in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                cur = line.split()
            elif line.startswith("Anonymous:") and cur and cur[1] == "r-xp" and not (
                    skip_ldso and "ld-linux" in cur[-1]):
                anon.append((cur[-1], line.split()[1]))
    fds = sorted(os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd"))
    return maps, anon, fds


# ---- the timing table ------------------------------------------------------------------

TIMINGS = []  # (scenario, [successful inject() answers])


def record_timings(scenario, results):
    """Adds a scenario's successful injections to the timing table."""
    TIMINGS.append((scenario, [r for r in results if r.get("ok")]))


def _spread(values):
    v = sorted(values)
    return v[len(v) // 2], v[min(len(v) - 1, int(len(v) * 0.9))], v[-1]


def _row(scenario, rs):
    def ms(values):
        return "/".join(f"{x / 1000:.2f}" for x in _spread(values))

    dl = [r["dlopen_us"] for r in rs if r["dlopen_us"] > 0]
    dlopen = f"{statistics.median(dl) / 1000:.2f}" if dl else "-"
    return (f"| {scenario} | {len(rs)} | {ms(r['stop_us'] for r in rs)} | "
            f"{ms(r['pause_us'] - r['dlopen_us'] for r in rs)} | {dlopen} | "
            f"{ms(r['pause_us'] for r in rs)} | {ms(r['total_us'] for r in rs)} |")


def timing_table():
    """The lines of the timing table of the injections recorded so far."""
    return [
        "Injection timings in ms (median/p90/max). stop: the tracer stop; pause: the hijacked",
        "thread's whole detour (stop + stub); excl. dlopen: pause minus dlopen+dlsym;",
        "wall: the whole np_inject_agent call.",
        "",
        "| scenario | n | stop | pause excl. dlopen | dlopen | pause | wall |",
        "|---|---|---|---|---|---|---|",
    ] + [_row(s, rs) for s, rs in TIMINGS if rs]
