"""GPU truth for a process that is already running: `ncclprobe record --pid P --cupti` and the
daemon's `ctl start --cupti` load libncclprobe_cupti.so into it (src/inject: ptrace, one
thread paused), or wake the copy that is there, and from then on every launch is joined to
its GPU records by correlation id, and every kernel is named - also the handles the process
made before ncclprobe came.

The target is cupti_app --scenario live: real launches through libcudart and the driver test
double, whose CUPTI side is played by libcupti_replay.so, the CUPTI TEST DOUBLE (no GPU here).
It writes what it scripted to its --expect file; that is the truth every check compares with.
The real CUPTI path is checked by tools/gpu-check.py on a GPU machine."""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lib.daemon import Daemon, wait_for
from lib.jsonl import read_jsonl
from lib.paths import CUPTI_LIB, NCCLPROBE, PROGS
from lib.skip import needs_bpf, needs_replay

pytestmark = [needs_bpf, needs_replay]

APP = PROGS / "cupti_app"


class LiveApp:
    """cupti_app --scenario live: makes its kernel handles, prints `ready PID`, then launches
    on two threads until SIGTERM. No CUPTI library is loaded at its start."""

    def __init__(self, tmp_path, prefix=()):
        self.expect = tmp_path / "expect.jsonl"
        self.proc = subprocess.Popen(
            [*map(str, prefix), str(APP), "--scenario", "live", "--expect", str(self.expect),
             "--threads", "2", "--sleep-us", "3000"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("ready "):
            self.proc.kill()
            raise AssertionError(line + self.proc.stderr.read())
        self.pid = int(line.split()[1])

    def launched(self):
        return len(self.expect.read_text().splitlines()) if self.expect.exists() else 0

    def finish(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return read_jsonl(self.expect)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def app(tmp_path):
    a = LiveApp(tmp_path)
    yield a
    a.kill()


def agent_mappings(pid):
    """The distinct files of pid's mappings whose name says ncclprobe_cupti."""
    files = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and "ncclprobe_cupti" in parts[5]:
            files.add((parts[3], parts[4]))  # device, inode
    return files


def record_live(tmp_path, pid, name, seconds=3, extra=()):
    out = tmp_path / name
    proc = subprocess.run([str(NCCLPROBE), "record", "--pid", str(pid), "--cupti", "-o", str(out),
                           "--cupti-socket", str(tmp_path / f"{name}.sock"), "--duration",
                           str(seconds), *extra], capture_output=True, text=True, timeout=120)
    return out, proc


def gpu_view(records):
    return sorted((r["name"], r["start_ns"], r["end_ns"]) for r in records
                  if r["type"] == "kernel")


def check_joined(out, truth):
    """Every launch written with GPU records has exactly the ones scripted for its correlation
    ids; none waited in vain ("pending": the library started, and sent what it had); the ones
    from before the library started are "none". Returns the matched launches."""
    by_corr = {r["correlation_id"]: r for r in truth}
    rows = [r for r in read_jsonl(out / "launches.jsonl") if not r["nested"]]
    matched = [r for r in rows if r["gpu_status"] == "matched"]
    assert len(matched) >= 10, [r["gpu_status"] for r in rows][:40]
    for r in matched:
        want = [g for c in r["correlation_ids"] for g in by_corr[c]["gpu"]]
        assert gpu_view(r["gpu"]) == gpu_view(want), r
    assert not [r for r in rows if r["gpu_status"] not in ("matched", "none")]
    # after the first matched launch, every launch is matched (the library was on)
    first = min(r["ts_ns"] for r in matched)
    assert all(r["gpu_status"] == "matched" for r in rows if r["ts_ns"] > first)
    return matched


def test_record_pid_cupti_loads_the_library_live_and_joins_every_launch(tmp_path, app):
    wait_for(lambda: app.launched() >= 20, 20, "launches before ncclprobe")
    assert not agent_mappings(app.pid)
    out, proc = record_live(tmp_path, app.pid, "rec1")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"libncclprobe_cupti\.so loaded \(thread \d+ paused [\d.]+ ms", proc.stderr)
    maps = agent_mappings(app.pid)
    assert len(maps) == 1, maps  # one copy, from a memfd
    assert "/memfd:ncclprobe_cupti" in Path(f"/proc/{app.pid}/maps").read_text()
    truth = app.finish()

    summary = json.loads((out / "summary.json").read_text())
    cupti = summary["targets"][0]["cupti"]
    assert cupti["origin"] == "injected" and cupti["status"] == "active", cupti
    assert 0 < cupti["pause_ms"] < 1000 and cupti["injection_ms"] >= cupti["pause_ms"], cupti
    assert cupti["injected_at_unix_ns"] > summary["start_time_unix_ns"]
    matched = check_joined(out, truth)
    # launches before the injection had no subscriber and no GPU records, the recording's
    # later ones did; and the app never noticed anything (its own checks passed: exit 0)
    assert any(not r["subscriber"] for r in truth) and any(r["subscriber"] for r in truth)

    # every kernel is named - the driver's handles were made before ncclprobe came, so only
    # the library could name them (cuFuncGetName / cuKernelGetName in the driver double)
    rows = [r for r in read_jsonl(out / "launches.jsonl") if not r["nested"]]
    assert not [r["kernel"] for r in rows if r["kernel"].startswith("<unnamed")]
    named = {r["kernel"] for r in matched}
    assert {"live_drv_kernel_a", "live_drv_kernel_b", "live_lib_kernel"} <= named, named
    folded = (out / "launches.folded").read_text()
    assert "<unnamed" not in folded and "live_drv_kernel_a" in folded
    ext = (out / "stacks.ext.folded").read_text()
    assert "<unnamed" not in ext
    assert len(ext.splitlines()) == summary["totals"]["launches"]


def test_second_attach_wakes_the_loaded_library(tmp_path, app):
    wait_for(lambda: app.launched() >= 10, 20, "launches")
    out1, proc1 = record_live(tmp_path, app.pid, "rec1", seconds=2)
    assert proc1.returncode == 0, proc1.stderr
    time.sleep(1)  # the library is quiet now: no peer
    out2, proc2 = record_live(tmp_path, app.pid, "rec2", seconds=2)
    assert proc2.returncode == 0, proc2.stderr
    assert len(agent_mappings(app.pid)) == 1  # woken, not loaded again
    truth = app.finish()
    cupti1 = json.loads((out1 / "summary.json").read_text())["targets"][0]["cupti"]
    cupti2 = json.loads((out2 / "summary.json").read_text())["targets"][0]["cupti"]
    assert cupti1["origin"] == "injected" and cupti2["origin"] == "woken", (cupti1, cupti2)
    assert cupti2["status"] == "active"
    # while nobody listened the library sent nothing: what CUPTI completed then was dropped
    assert cupti2["dropped_no_daemon"] > 0, cupti2
    check_joined(out2, truth)


def test_refused_under_another_tracer_and_the_recording_goes_on(tmp_path, app):
    strace = subprocess.Popen(["strace", "-f", "-o", "/dev/null", "-p", str(app.pid)],
                              stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: Path(f"/proc/{app.pid}/status").read_text().count("TracerPid:\t0") == 0,
                 10, "strace attached")
        out, proc = record_live(tmp_path, app.pid, "rec", seconds=2)
    finally:
        strace.terminate()
        strace.wait()
    assert proc.returncode == 0, proc.stderr
    assert "warning:" in proc.stderr and "already traced" in proc.stderr, proc.stderr
    assert not agent_mappings(app.pid)  # untouched
    summary = json.loads((out / "summary.json").read_text())
    cupti = summary["targets"][0]["cupti"]
    assert cupti["status"] == "not_loaded" and "traced" in cupti["message"], cupti
    assert summary["totals"]["launches"] > 0  # stacks are still recorded
    app.finish()


def test_library_path_absent_in_the_targets_mount_namespace(tmp_path):
    """The target sees /dev/null where ncclprobe's library file is: the injector maps it from
    a memfd it fills, so the path is never opened in the target."""
    hide = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount --bind /dev/null {CUPTI_LIB} && exec "$@"', "hide"]
    a = LiveApp(tmp_path, prefix=hide)
    try:
        wait_for(lambda: a.launched() >= 10, 20, "launches")
        out, proc = record_live(tmp_path, a.pid, "rec", seconds=2)
        assert proc.returncode == 0, proc.stderr
        truth = a.finish()
    finally:
        a.kill()
    cupti = json.loads((out / "summary.json").read_text())["targets"][0]["cupti"]
    assert cupti["origin"] == "injected" and cupti["status"] == "active", cupti
    check_joined(out, truth)


def test_daemon_ctl_start_cupti_brings_the_library_for_the_window(tmp_path_factory, tmp_path):
    d = Daemon(tmp_path_factory.mktemp("live"), include_comm="cupti_app")
    a = LiveApp(tmp_path)
    try:
        d.wait_traced(a.pid)
        t = d.target(a.pid)
        assert t["cupti_origin"] == "" and t["gpu"] == "no CUPTI library", t
        reply = d.ctl("start", "--cupti")
        assert reply.returncode == 0, reply.stderr
        t = wait_for(lambda: (x := d.target(a.pid)) and x["gpu"] == "active" and x, 20,
                     "the library injected and active")
        assert t["cupti_origin"] == "injected" and t["cupti_why"] == "", t
        n = a.launched()
        wait_for(lambda: a.launched() >= n + 40, 20, "launches in the window")
        assert d.ctl("stop").returncode == 0
        truth = a.finish()
        sets = d.written_sets(a.pid)
        windows = [name for name, w in sets.items() if w["window"]["kind"] == "window"]
        assert len(windows) == 1, sets
        matched = check_joined(d.out / windows[0], truth)
        assert len(matched) >= 20
        rc, _ = d.terminate()
        assert rc == 0, d.stderr()[-3000:]
    finally:
        a.kill()
        d.kill()


def test_kill_9_of_ncclprobe_during_injections_leaves_the_target_right(tmp_path, app):
    """ncclprobe itself killed at random moments around its injection, 20 times: the target
    runs on (its own checks hold: exit 0), keeps one copy of the library, and a recording
    after all that still gets its GPU records."""
    import random
    rng = random.Random(18)
    wait_for(lambda: app.launched() >= 10, 20, "launches")
    for i in range(20):
        p = subprocess.Popen([str(NCCLPROBE), "record", "--pid", str(app.pid), "--cupti", "-o",
                              str(tmp_path / f"k{i}"), "--cupti-socket",
                              str(tmp_path / f"k{i}.sock"), "--duration", "5"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.05, 1.5))
        p.kill()
        p.wait()
        assert app.proc.poll() is None, f"the target died after kill {i}"
    assert len(agent_mappings(app.pid)) <= 1
    time.sleep(3)  # a stub whose injector died gives up within 2 s
    out, proc = record_live(tmp_path, app.pid, "last", seconds=2)
    assert proc.returncode == 0, proc.stderr
    assert len(agent_mappings(app.pid)) == 1
    truth = app.finish()
    cupti = json.loads((out / "summary.json").read_text())["targets"][0]["cupti"]
    assert cupti["status"] == "active" and cupti["origin"] in ("injected", "woken"), cupti
    check_joined(out, truth)
