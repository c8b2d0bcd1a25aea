"""A fresh host, and failures that leave nothing wrong behind.

ncclprobe must not depend on what an earlier run (a benchmark, a debugger) left on the
machine. The daemon and `record` run here inside a mount namespace of their own with
tracefs and debugfs unmounted - what a fresh Debian host, a Kubernetes DaemonSet or a
minimal VM has - and must find and trace processes exactly. Then the ways a run can fail
(no such process, no such command, a full disk) must leave no output directory behind,
or a valid one whose small aggregate files are complete.

Expected values come from the workloads (the counts they print) and the file system,
never from ncclprobe itself."""

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from lib.daemon import (CUDART, LATE_CHAIN, LATE_LOADER, LAUNCHER, RT_CHAIN, Daemon,
                        check_launches_with_chain, comm_link, launcher)
from lib.folded import folded_rows
from lib.jsonl import read_jsonl
from lib.paths import NCCLPROBE, PROGS
from lib.processes import Workload, thread_lines
from lib.run import run_ncclprobe
from lib.skip import needs_bpf, needs_real_cudart

pytestmark = [needs_bpf, needs_real_cudart]

# Runs "$@" in a mount namespace of its own where tracefs and debugfs are not mounted,
# whatever the host has; exec keeps the pid.
FRESH = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         'for m in /sys/kernel/debug/tracing /sys/kernel/tracing /sys/kernel/debug; do '
         'umount -l "$m" 2>/dev/null; done; exec "$@"', "fresh"]


def fstypes(pid="self"):
    """The file-system types mounted in pid's mount namespace."""
    types = set()
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        after = line.split(" - ", 1)[1]
        types.add(after.split()[0])
    return types


@pytest.mark.parametrize("discovery", ["tp_btf", "tracefs"])
def test_daemon_finds_and_traces_processes_without_tracefs(tmp_path_factory, workloads, tmp_path,
                                                           discovery):
    """tp_btf: the default, which needs no tracefs at all. tracefs: the fallback (forced
    here), which mounts tracefs in a child's private namespace for the tracepoint ids and
    must leave it mounted nowhere."""
    host_types = fstypes()
    env = {"NCCLPROBE_DISCOVERY": "tracefs"} if discovery == "tracefs" else {}
    late = tmp_path / "npfreshlate"
    late.symlink_to(LATE_LOADER)
    d = Daemon(tmp_path_factory.mktemp("fresh"), prefix=FRESH, env=env,
               include_comm="npfresh*")
    try:
        daemon_types = fstypes(d.pid)
        assert not daemon_types & {"tracefs", "debugfs"}, daemon_types
        assert d.status()["discovery"]["mode"] == discovery
        # a process started now (its libraries mapped at exec) ...
        p = launcher(workloads, "--iters", "25", exe=comm_link(tmp_path, "npfresh"))
        d.wait_traced(p.pid)
        p.go()
        assert p.launched() == 25
        check_launches_with_chain(d, d.written_sets(p.pid), RT_CHAIN, 25)
        # ... and one that dlopen()s libcudart later (seen at its mmap)
        q = Workload([late, "--no-wait", "--settle-ms", "1000", "--iters", "15", CUDART],
                     wait=False)
        workloads.append(q)
        d.wait_traced(q.pid)
        assert q.launched() == 15
        check_launches_with_chain(d, d.written_sets(q.pid), LATE_CHAIN, 15)
        assert not fstypes(d.pid) & {"tracefs", "debugfs"}
        rc, _ = d.terminate()
        assert rc == 0, d.stderr()[-3000:]
        d.assert_clean()
    finally:
        d.kill()
    assert fstypes() == host_types  # nothing was mounted (or unmounted) on the host


def test_record_without_tracefs(tmp_path):
    out = tmp_path / "rec"
    proc = subprocess.run([*FRESH, str(NCCLPROBE), "record", "-o", str(out), "--",
                           str(LAUNCHER), "--variant", "rt,drv", "--iters", "30"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    printed = thread_lines(proc.stdout)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["totals"]["launches"] == sum(printed.values()) == 60, (summary["totals"],
                                                                           printed)
    assert summary["totals"]["events_dropped"] == 0


# ---- failures leave nothing wrong behind ---------------------------------------------------

@pytest.mark.parametrize("args", [["--pid", "999999"], ["--", "/nonexistent/program"],
                                  ["--pid", "1", "--pid", "999999"]],
                         ids=["no-such-pid", "no-such-command", "one-pid-of-two-missing"])
def test_failed_start_makes_no_output_directory(tmp_path, args):
    out = tmp_path / "rec" / "nested"
    proc = run_ncclprobe(["record", "-o", out, "--duration", "1", *args])
    assert proc.returncode == 1, proc.stderr
    assert "error:" in proc.stderr
    assert not (tmp_path / "rec").exists(), list((tmp_path / "rec").rglob("*"))


def test_unwritable_output_refused_before_anything_starts(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory\n")
    marker = tmp_path / "ran"
    proc = run_ncclprobe(["record", "-o", blocker / "rec", "--", "/bin/sh", "-c",
                          f"touch {marker}"])
    assert proc.returncode == 1 and "error:" in proc.stderr, proc.stderr
    assert str(blocker / "rec") in proc.stderr
    assert not marker.exists()  # the command never ran
    assert blocker.read_text() == "not a directory\n"


def per_launch_lines(rec):
    return {n: (rec / n).read_bytes() for n in
            ("stacks.ext.folded", "launches.jsonl", "stacks.jsonl", "nccl.jsonl")}


def test_disk_full_keeps_aggregates_and_cuts_at_a_record_boundary(tmp_path):
    """A 256 KiB tmpfs as the output: the per-launch files fill it; launches.folded,
    merged.folded and summary.json must still be complete, and every per-launch file must
    end with a whole record."""
    mnt = Path(tempfile.mkdtemp(prefix="npfull-"))
    kept = tmp_path / "kept"
    try:
        script = (f'mount -t tmpfs -o size=256k npfull {mnt} && '
                  f'"$@" > {tmp_path}/stdout 2> {tmp_path}/stderr; echo $? > {tmp_path}/rc; '
                  f'cp -a {mnt}/rec {kept}')
        subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                        "full", str(NCCLPROBE), "record", "-o", f"{mnt}/rec", "--",
                        str(LAUNCHER), "--variant", "rt,drv", "--threads", "2",
                        "--iters", "3000"], check=True, timeout=300)
    finally:
        shutil.rmtree(mnt, ignore_errors=True)
    rc = int((tmp_path / "rc").read_text())
    stderr = (tmp_path / "stderr").read_text()
    launched = sum(thread_lines((tmp_path / "stdout").read_text()).values())
    assert launched == 2 * 2 * 3000
    assert rc == 1 and "error:" in stderr and "No space left on device" in stderr, stderr

    summary = json.loads((kept / "summary.json").read_text())
    assert summary["totals"]["launches"] == launched
    files = summary["files"]
    assert files["per_launch_complete"] is False and files["records_cut"] > 0, files
    assert files["cut_reason"] == os.strerror(28)  # ENOSPC
    # the aggregates count every launch
    for name in ("launches.folded", "merged.folded"):
        total = sum(weight for _, weight in folded_rows(kept / name))
        assert total == launched, name
    # the per-launch files: whole records only, each one valid
    written = 0
    for name, data in per_launch_lines(kept).items():
        assert not data or data.endswith(b"\n"), (name, data[-200:])
        for line in data.decode().splitlines():
            written += 1
            if name.endswith(".jsonl"):
                json.loads(line)
            else:
                assert len(line.split(" ", 5)) == 6, line
    assert written == files["records_written"]
    launches = read_jsonl(kept / "launches.jsonl")
    stack_ids = {s["stack_id"] for s in read_jsonl(kept / "stacks.jsonl")}
    assert launches and all(l["stack_id"] in stack_ids for l in launches)
    assert not (kept / ".ncclprobe-reserve").exists()
    # what was recorded still converts
    conv = run_ncclprobe(["convert", kept, "--format", "pprof,svg"], timeout=120)
    assert conv.returncode == 0, conv.stderr


# ---- host settings that change what can be captured ---------------------------------------

class Sysctl:
    """Sets a sysctl for the test and puts the old value back."""

    def __init__(self, name, value):
        self.path = Path("/proc/sys") / name.replace(".", "/")
        self.value = str(value)

    def __enter__(self):
        self.old = self.path.read_text().strip()
        try:
            self.path.write_text(self.value)
        except OSError as e:  # perf_event_max_stack: EBUSY while any tracer uses call chains
            pytest.skip(f"cannot set {self.path}: {e.strerror} (another tracer running?)")
        return self

    def __exit__(self, *exc):
        deadline = time.monotonic() + 60
        while True:  # EBUSY while another tracer holds call-chain buffers: it ends
            try:
                self.path.write_text(self.old)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def test_lowered_perf_event_max_stack_is_said_and_marked(tmp_path):
    """bpf_get_stack returns at most kernel.perf_event_max_stack frames: a host that
    lowered it cuts frame-pointer stacks. That must be said, and the cut stacks marked."""
    deep = PROGS / "deep_recursion"
    with Sysctl("kernel.perf_event_max_stack", 12):
        proc = run_ncclprobe(["record", "-o", tmp_path / "rec", "--unwind", "fp", "--",
                              deep, "--depth", "40"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "perf_event_max_stack is 12" in proc.stderr, proc.stderr
    stacks = [stack.split(";") for stack, _ in folded_rows(tmp_path / "rec" / "launches.folded")]
    assert stacks and all(s[0] == "[truncated]" and len(s) <= 14 for s in stacks), stacks


def test_most_restrictive_perf_event_paranoid(tmp_path):
    """Debian's perf_event_paranoid=3 refuses perf events to unprivileged users; root (and
    the daemon's CAP_PERFMON) still trace."""
    with Sysctl("kernel.perf_event_paranoid", 3):
        proc = run_ncclprobe(["record", "-o", tmp_path / "rec", "--", LAUNCHER,
                              "--variant", "rt", "--iters", "20"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "rec" / "summary.json").read_text())["totals"]["launches"] == 20
