"""The live library injector (src/inject, docs/inject.md), end to end: real
ptrace, real processes.

Every test runs targets (tests/progs/inject_target.c, inject_py_target.py)
whose threads check, around every blocking call, every register, errno, the
signal mask, wake-up times and their data; a target that saw anything wrong
exits non-zero. The injector is driven alone by its test driver
(BUILD/inject_check) with a test library (tests/progs/inject_testlib.c) that
answers each attach with one line on its socket, counting its loads and
calls. The timings of the successful injections are printed as a table at
the end of the module (and written to BUILD/inject_timings.txt)."""

import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from lib.inject import (INJECT_CHECK, LIB, LIB_NOSYM, MUSL_TARGET, PY_TARGET, STUB_BIN, TARGET,
                        TARGET_STATIC, TIMINGS_FILE, Target, inject, inject_retry, memfd_copies,
                        needs_injector, record_timings, said, snapshot, timing_table)
from lib.processes import interpreters
from lib.skip import needs_binary, needs_tools

pytestmark = needs_injector

BLOCKING_ROLES = ["futex", "futex_timed", "cond", "cond_timed", "epoll", "epoll_timed", "pipe",
                  "nanosleep", "clock_rel", "clock_abs", "poll_timed", "ppoll", "sig_intr",
                  "sig_restart", "main"]


@pytest.fixture(scope="module", autouse=True)
def timings_table(request):
    """Prints the timing table once the module's tests ran."""
    yield
    lines = timing_table()
    if len(lines) <= 6:
        return
    TIMINGS_FILE.write_text("\n".join(lines) + "\n")
    plugins = request.config.pluginmanager
    reporter, capture = plugins.getplugin("terminalreporter"), plugins.getplugin("capturemanager")
    if reporter and capture:
        with capture.global_and_fixture_disabled():
            reporter.write_sep("=", "injection timings")
            for line in lines:
                reporter.write_line(line)


@pytest.fixture
def targets():
    """Targets a test started; killed if the test left them running."""
    started = []
    yield started
    for t in started:
        t.kill()


def start(targets, *args, exe=TARGET):
    """Starts inject_target ARGS (or exe) and adds it to targets."""
    t = Target([exe, *args])
    targets.append(t)
    return t


def test_stub_fits_a_cave():
    size = STUB_BIN.stat().st_size
    assert size < 2560, size  # libc's text padding on Debian 12 is 3844 bytes, ld.so's 3823


def test_load_then_wake_50_times(targets):
    """One load, then 49 wakes of the same copy; 8 threads compute flat out."""
    t = start(targets, "--compute", "8")
    results = []
    for i in range(1, 51):
        r = inject(t.pid)
        assert r["ok"], r
        s = said(r)
        assert s["call"] == i and s["loads"] == 1 and s["pid"] == t.pid
        assert r["loaded"] == (i == 1)
        results.append(r)
    assert memfd_copies(t.pid) == 1
    t.assert_ok()
    record_timings("load + 49 wakes, 8 compute threads", results)


def test_load_then_wake_light_load(targets):
    """The same without the compute threads: the pause is the injector's own."""
    t = start(targets, "--compute", "0")
    results = [inject(t.pid) for _ in range(30)]
    assert all(r["ok"] for r in results), [r["msg"] for r in results if not r["ok"]]
    assert said(results[-1])["call"] == 30 and said(results[-1])["loads"] == 1
    t.assert_ok()
    record_timings("load + 29 wakes, no compute threads", results)


@pytest.mark.parametrize("role", BLOCKING_ROLES)
def test_each_blocking_call_resumes_right(targets, role):
    """The hijacked thread is the one blocked in this call, 8 times."""
    t = start(targets, "--compute", "2")
    results = []
    for _ in range(8):
        r = inject(t.pid, "--tid", t.tid(role), "--find-ms", "3000")
        assert r["ok"], r
        assert r["tid"] == t.tid(role)
        results.append(r)
    assert said(results[-1])["loads"] == 1
    t.assert_ok()
    record_timings(f"thread in {role}", results)


def test_never_at_mmap_inside_malloc(targets):
    """A thread that only mallocs (mmap, munmap) and frees is never taken."""
    t = start(targets, "--compute", "1")
    before = snapshot(t.pid)
    r = inject(t.pid, "--tid", t.tid("mmapper"), "--find-ms", "1500")
    assert not r["ok"] and "safe point" in r["msg"], r
    assert snapshot(t.pid) == before
    t.assert_ok()


def test_busy_threads_caught_entering_a_syscall(targets):
    """No thread rests in a system call: one is caught entering nanosleep. On a
    loaded machine a busy thread may be found resting in its nanosleep all the
    same (descheduled there): injections go on, up to 48, until one is caught."""
    t = start(targets, "--compute", "2", "--mode", "busy")
    results = []
    while len(results) < 12 or (len(results) < 48 and not any(r["caught"] for r in results)):
        results.append(inject(t.pid, "--find-ms", "3000"))
    assert all(r["ok"] for r in results), [r["msg"] for r in results if not r["ok"]]
    assert any(r["caught"] for r in results)
    t.assert_ok()
    record_timings("busy process (caught at syscall entry)", [r for r in results if r["caught"]])


def test_no_safe_point_refused_untouched(targets):
    """Only malloc loops and a spinning main thread: refused, untouched."""
    t = start(targets, "--compute", "0", "--mode", "mmap")
    before = snapshot(t.pid)
    r = inject(t.pid, "--find-ms", "1000")
    assert not r["ok"] and r["rc"] == 1
    assert "no thread" in r["msg"] and "safe point" in r["msg"], r
    assert snapshot(t.pid) == before
    t.assert_ok(sigterm=True)


# ---- kill -9 -------------------------------------------------------------------------

LOAD_FAULTS = ["seized", "stopped", "cave_written", "block_written", "regs_set", "sigmask_set",
               "detached", "ready", "fetched", "fetched_sent", "filling", "filled", "go_sent",
               "done"]
WAKE_FAULTS = ["seized", "stopped", "block_written", "regs_set", "sigmask_set", "detached",
               "ready", "fetched", "fetched_sent", "go_sent", "done"]
KILL_CASES = ([("load", "main", f) for f in LOAD_FAULTS] +
              [("wake", "main", f) for f in WAKE_FAULTS] +
              # epoll_wait returns EINTR on any stop: it must be re-issued even then
              [("load", "epoll", f) for f in ["stopped", "block_written", "regs_set", "detached",
                                              "go_sent"]])


@pytest.mark.parametrize("mode,role,fault", KILL_CASES)
def test_kill_at_each_step(targets, mode, role, fault):
    """kill -9 of the injector at this step (NP_INJECT_FAULT): the target runs
    on correctly, and the next injection works, loading one copy."""
    t = start(targets, "--compute", "2")
    if mode == "wake":
        assert inject(t.pid)["ok"]
    r = inject(t.pid, "--tid", t.tid(role), "--find-ms", "3000", env={"NP_INJECT_FAULT": fault},
               read=False)
    assert r["rc"] == -signal.SIGKILL, r  # the fault point was reached
    r = inject_retry(t.pid)
    assert r["ok"], r
    assert said(r)["loads"] == 1
    assert memfd_copies(t.pid) == 1
    t.assert_ok()


def test_kill_at_random_moments(targets):
    """50 injections killed at random moments, then one that completes."""
    t = start(targets, "--compute", "4")
    rng = random.Random(1234)
    for _ in range(50):
        argv = [str(INJECT_CHECK), "--lib", str(LIB), "--flags", str(rng.choice([0, 1])),
                str(t.pid)]
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0, 0.03))
        p.kill()
        p.wait()
        assert p.returncode in (-signal.SIGKILL, 0, 1)
    r = inject_retry(t.pid)
    assert r["ok"], r
    assert said(r)["loads"] == 1
    assert memfd_copies(t.pid) == 1
    t.assert_ok()


# ---- CPython --------------------------------------------------------------------------------

PYTHONS = interpreters()


def python_label(python):
    """pyenv's 3.12.1, or the file name of another interpreter."""
    return Path(python).parent.parent.name if ".pyenv" in python else Path(python).name


@pytest.mark.parametrize("python", PYTHONS, ids=[python_label(p) for p in PYTHONS])
def test_cpython(targets, python):
    """One thread holds the GIL in a checked loop, the others sleep, wait and
    read: 12 injections, every thread in turn (the GIL holder is caught
    entering a futex)."""
    t = start(targets, PY_TARGET, exe=python)
    tids = sorted(int(x) for x in os.listdir(f"/proc/{t.pid}/task"))
    results = []
    for i in range(12):
        tid = tids[i % len(tids)]
        r = inject(t.pid, "--tid", tid, "--find-ms", "3000")
        assert r["ok"], r
        assert said(r)["loads"] == 1
        results.append(r)
    assert memfd_copies(t.pid) == 1
    t.assert_ok()
    record_timings(f"CPython {python_label(python)}, every thread", results)


# ---- containers -------------------------------------------------------------------------------

def ns_target(targets, shell):
    """A target started by unshare in its own mount and PID namespace; returns
    (Target, its pid in our namespace)."""
    t = Target(["unshare", "-m", "-p", "-f", "--mount-proc", "--propagation", "private", "sh",
                "-c", shell])
    targets.append(t)
    with open(f"/proc/{t.p.pid}/task/{t.p.pid}/children") as f:
        host_pid = int(f.read().split()[0])
    return t, host_pid


@needs_tools("unshare")
def test_own_mount_and_pid_namespace(targets):
    """The library path does not exist where the target lives: the memfd
    carries it."""
    tmp = Path(tempfile.mkdtemp(prefix="npinj-ns."))
    try:
        shutil.copy(LIB, tmp / "libinject_test.so")
        t, pid = ns_target(targets, f"mount -t tmpfs none {tmp} && exec {TARGET} --compute 1")
        assert not os.path.exists(f"/proc/{pid}/root{tmp}/libinject_test.so")
        r = inject(pid, lib=tmp / "libinject_test.so")
        assert r["ok"], r
        assert said(r)["pid"] == 1  # the target's own pid namespace
        r = inject(pid, lib=tmp / "libinject_test.so")
        assert r["ok"] and not r["loaded"] and said(r)["call"] == 2, r
        t.assert_ok()
    finally:
        shutil.rmtree(tmp)


@needs_tools("unshare")
@pytest.mark.skipif(not Path("/proc/sys/vm/memfd_noexec").exists(),
                    reason="kernel without vm.memfd_noexec (Linux < 6.3)")
def test_memfd_noexec_namespace(targets):
    """vm.memfd_noexec = 1 (per pid namespace): the memfd asks for MFD_EXEC."""
    t, pid = ns_target(targets, f"echo 1 > /proc/sys/vm/memfd_noexec && exec {TARGET} --compute 1")
    r = inject(pid)
    assert r["ok"], r
    t.assert_ok()


@needs_tools("unshare")
def test_target_without_proc_says_so(targets):
    t, pid = ns_target(targets, f"mount -t tmpfs none /proc && exec {TARGET} --compute 1")
    r = inject(pid)
    assert not r["ok"] and "/proc mounted" in r["msg"], r
    assert memfd_copies(pid) == 0
    t.assert_ok()


# ---- refusals -----------------------------------------------------------------------------------

QUIET = ["--compute", "1", "--skip", "epoll,epoll_timed"]  # a tracer's stop makes these EINTR


@pytest.mark.parametrize("tracer", [pytest.param("strace", marks=needs_tools("strace")),
                                    pytest.param("gdb", marks=needs_tools("gdb"))])
def test_refuse_when_traced(targets, tracer):
    """Under strace -p or gdb -p: refused, the tracer named, the target untouched."""
    t = start(targets, *QUIET)
    before = snapshot(t.pid, skip_ldso=True)
    if tracer == "strace":
        tp = subprocess.Popen(["strace", "-f", "-o", "/dev/null", "-p", str(t.pid)],
                              stderr=subprocess.DEVNULL)
    else:
        tp = subprocess.Popen(["gdb", "-q", "-batch", "-p", str(t.pid), "-ex", "shell sleep 3"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        r = inject(t.pid)
    finally:
        if tracer == "strace":
            tp.terminate()
        tp.wait(timeout=20)
    assert not r["ok"] and "already traced by pid" in r["msg"] and f"({tracer})" in r["msg"], r
    time.sleep(0.3)
    assert snapshot(t.pid, skip_ldso=True) == before
    t.assert_ok()


@needs_binary(TARGET_STATIC)
def test_refuse_static_binary(targets):
    t = start(targets, "--compute", "1", exe=TARGET_STATIC)
    before = snapshot(t.pid)
    r = inject(t.pid)
    assert not r["ok"] and "statically linked" in r["msg"], r
    assert snapshot(t.pid) == before
    t.assert_ok()


@needs_binary(MUSL_TARGET, why="musl-gcc (musl-tools) not installed")
def test_refuse_musl(targets):
    t = start(targets, exe=MUSL_TARGET)
    before = snapshot(t.pid)
    r = inject(t.pid)
    assert not r["ok"] and "uses musl" in r["msg"], r
    assert snapshot(t.pid) == before
    t.assert_ok()


def test_refuse_seccomp(targets):
    t = start(targets, "--compute", "1", "--seccomp")
    before = snapshot(t.pid)
    r = inject(t.pid)
    assert not r["ok"] and "seccomp filter" in r["msg"], r
    assert snapshot(t.pid) == before
    t.assert_ok()


def test_cave_fallback_then_none(targets):
    """libc's cave taken (we put a byte there): another mapping's is used;
    none left: refused, and the target never noticed."""
    t = start(targets, "--compute", "1")
    seen = []
    for _ in range(20):
        r = inject(t.pid, "--dry-run", read=False)
        if not r["ok"]:
            break
        m = re.search(r"stub at 0x([0-9a-f]+) in (\S+);", r["msg"])
        seen.append(m.group(2))
        with open(f"/proc/{t.pid}/mem", "r+b", buffering=0) as f:
            f.seek(int(m.group(1), 16))
            f.write(b"\xcc")
    assert "no code cave" in r["msg"], r
    assert seen[0].endswith("/libc.so.6") and len(seen) >= 2, seen
    r = inject(t.pid)
    assert not r["ok"] and "no code cave" in r["msg"], r
    t.assert_ok()


@needs_tools("prlimit")
def test_stub_cannot_make_its_fds(targets):
    """No fd left in the target (RLIMIT_NOFILE): the stub says so at once,
    restores the thread; with the limit back, the injection works."""
    t = start(targets, "--compute", "1")
    nfds = max(int(fd) for fd in os.listdir(f"/proc/{t.pid}/fd")) + 1
    subprocess.run(["prlimit", f"--pid={t.pid}", f"--nofile={nfds}:"], check=True)
    r = inject(t.pid)
    assert not r["ok"] and "could not make its memfd and sockets" in r["msg"], r
    assert "Too many open files" in r["msg"], r
    subprocess.run(["prlimit", f"--pid={t.pid}", "--nofile=1024:"], check=True)
    r = inject(t.pid)
    assert r["ok"] and said(r)["loads"] == 1, r
    t.assert_ok()


def test_second_library_under_another_name(targets):
    """A second library (another memfd name) is loaded as a copy of its own,
    though its memfd gets the fd number the first one had: the loader must
    not hand back the first library by that name."""
    t = start(targets, "--compute", "1")
    other = Path(tempfile.mkdtemp(prefix="npinj-lib.")) / "libother.so"
    try:
        shutil.copy(LIB, other)
        assert said(inject(t.pid))["call"] == 1
        r = inject(t.pid, "--memfd", "np_other", lib=other)
        assert r["ok"] and r["loaded"], r
        assert said(r)["call"] == 1 and said(r)["loads"] == 1, r  # a fresh copy
        assert said(inject(t.pid))["call"] == 2
        assert said(inject(t.pid, "--memfd", "np_other", lib=other))["call"] == 2
        assert memfd_copies(t.pid) == 1 and memfd_copies(t.pid, "np_other") == 1
        t.assert_ok()
    finally:
        shutil.rmtree(other.parent)


def test_library_problems(targets):
    """No attach symbol, no such file, wake-only with nothing loaded: refused,
    untouched; a dry run changes nothing; attach failing is said; a slow
    attach and a wake reach the same copy."""
    t = start(targets, "--compute", "1")
    before = snapshot(t.pid)
    r = inject(t.pid, lib=LIB_NOSYM)
    assert not r["ok"] and "has no symbol ncclprobe_cupti_attach" in r["msg"], r
    r = inject(t.pid, lib="/nonexistent/lib.so")
    assert not r["ok"] and "No such file" in r["msg"], r
    r = inject(t.pid, lib=PY_TARGET)  # not an ELF
    assert not r["ok"] and "not an x86-64 ELF" in r["msg"], r
    assert snapshot(t.pid) == before
    r = inject(t.pid, lib=None)
    assert not r["ok"] and "not loaded" in r["msg"], r
    r = inject(t.pid, "--dry-run")
    assert r["ok"] and r["msg"].startswith("would load"), r
    assert snapshot(t.pid) == before
    r = inject(t.pid, "--flags", "2")  # attach returns -5
    assert not r["ok"] and "returned -5" in r["msg"], r
    r = inject(t.pid, "--flags", "1")  # slow attach (50 ms), same copy
    assert r["ok"] and said(r)["call"] == 2 and said(r)["loads"] == 1, r
    r = inject(t.pid, lib=None)  # wake only
    assert r["ok"] and said(r)["call"] == 3, r
    t.assert_ok()
