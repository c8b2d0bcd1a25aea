"""Bad input gets a clear error and the documented exit code: 2 for usage,
1 for failures. Each case runs the real binary."""

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from lib.bpf import bpf_objects_of
from lib.paths import PROGS
from lib.processes import Workload
from lib.run import attach_and_go, FAILURE, run_ncclprobe, USAGE
from lib.skip import needs_bpf
from lib.synthetic import launch_row, write_recording


def dead_pid():
    """A pid that certainly has no process: one that just exited."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("args,message", [
    ([], "usage"),
    (["record"], "nothing to record"),
    (["frobnicate"], "unknown command 'frobnicate'"),
    (["record", "--pid", "12x"], "invalid pid '12x'"),
    (["record", "--pid", "0"], "invalid pid '0'"),
    (["record", "--pid", "1", "--duration", "abc"], "invalid --duration 'abc'"),
    (["record", "--pid", "1", "--duration", "-3"], "invalid --duration '-3'"),
    (["record", "--pid", "1", "--duration", "0"], "invalid --duration '0'"),
    (["record", "--pid", "1", "--ring-buffer-mb", "3"], "power of two"),
    (["record", "--pid", "1", "--bogus"], "usage"),
    (["record", "--pid", "1", "--", "true"], "either --pid or -- CMD"),
    (["record", "--pid", "1", "--unwind", "lbr"], "invalid --unwind 'lbr'"),
    (["record", "--pid", "1", "--stack-bytes", "100"], "invalid --stack-bytes '100'"),
    (["record", "--pid", "1", "--stack-bytes", "131072"], "invalid --stack-bytes '131072'"),
])
def test_usage_errors_exit_2(args, message):
    proc = run_ncclprobe(args)
    assert proc.returncode == USAGE, proc.stderr
    assert message in proc.stderr


def test_help_and_version_exit_0():
    assert run_ncclprobe(["--version"]).stdout.startswith("ncclprobe ")
    help_text = run_ncclprobe(["record", "--help"])
    assert help_text.returncode == 0 and "--pid PID" in help_text.stdout


@needs_bpf
@pytest.mark.parametrize("command", [["record"], []])  # "ncclprobe --pid" is record
def test_no_such_pid(tmp_path, command):
    pid = dead_pid()
    proc = run_ncclprobe([*command, "-o", tmp_path / "out", "--pid", pid])
    assert proc.returncode == FAILURE
    assert f"no such process: {pid}" in proc.stderr


@needs_bpf
def test_pid_without_cuda_fails_with_no_wait(tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        proc = run_ncclprobe(["record", "-o", tmp_path / "out", "--pid", sleeper.pid,
                              "--no-wait"])
        assert proc.returncode == FAILURE
        assert "has no CUDA or NCCL library loaded" in proc.stderr
    finally:
        sleeper.kill()


@needs_bpf
def test_pid_without_cuda_waits_by_default(tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        start = time.time()
        proc = run_ncclprobe(["record", "-o", tmp_path / "out", "--pid", sleeper.pid,
                              "--duration", "1"])
        assert proc.returncode == 0, proc.stderr
        assert "waiting for one" in proc.stderr
        assert time.time() - start >= 1.0
        assert (tmp_path / "out" / "summary.json").exists()
    finally:
        sleeper.kill()


@needs_bpf
def test_not_root_is_refused_with_a_hint(tmp_path):
    os.chmod(tmp_path, 0o777)
    proc = run_ncclprobe(["record", "-o", tmp_path / "out", "--pid", "1"], user=65534)
    assert proc.returncode == FAILURE
    assert "permission denied" in proc.stderr and "CAP_BPF" in proc.stderr


@needs_bpf
def test_kernel_without_btf(tmp_path):
    fake_sys = tmp_path / "sys"
    (fake_sys / "bus/event_source/devices/uprobe").mkdir(parents=True)
    (fake_sys / "bus/event_source/devices/uprobe/type").write_text("7\n")
    proc = run_ncclprobe(["record", "-o", tmp_path / "out", "--pid", "1"],
                         env={"NCCLPROBE_SYSFS": str(fake_sys)})
    assert proc.returncode == FAILURE
    assert "no BTF" in proc.stderr and "CONFIG_DEBUG_INFO_BTF" in proc.stderr


@needs_bpf
def test_kernel_without_uprobes(tmp_path):
    fake_sys = tmp_path / "sys"
    (fake_sys / "kernel/btf").mkdir(parents=True)
    (fake_sys / "kernel/btf/vmlinux").symlink_to("/sys/kernel/btf/vmlinux")
    proc = run_ncclprobe(["record", "-o", tmp_path / "out", "--pid", "1"],
                         env={"NCCLPROBE_SYSFS": str(fake_sys)})
    assert proc.returncode == FAILURE
    assert "no uprobe support" in proc.stderr


@needs_bpf
@pytest.mark.parametrize("where", ["under-a-file", "in-proc"])
def test_output_dir_not_writable(tmp_path, where):
    if where == "under-a-file":
        (tmp_path / "plain").write_text("x")
        out = tmp_path / "plain" / "rec"
    else:
        out = Path("/proc/ncclprobe-cannot-write-here")
    proc = run_ncclprobe(["record", "-o", out, "--pid", "1"])
    assert proc.returncode == FAILURE
    assert f"cannot write the output directory {out}" in proc.stderr


@needs_bpf
def test_command_not_found(tmp_path):
    proc = run_ncclprobe(["record", "-o", tmp_path / "out", "--", "/nonexistent/cmd"])
    assert proc.returncode == FAILURE
    assert "command not found: /nonexistent/cmd" in proc.stderr


def ncclprobe_programs_loaded(ids=None):
    """np_entry/np_return programs loaded; with ids, only those (the ones one
    tracer holds: other tracers may run on this machine meanwhile)."""
    progs = subprocess.run(["bpftool", "prog", "list"], capture_output=True, text=True).stdout
    found = [line for line in progs.splitlines() if re.search(r" name np_(entry|return)", line)]
    if ids is not None:
        found = [line for line in found if int(line.split(":", 1)[0]) in ids]
    return len(found)


@needs_bpf
def test_target_is_never_blocked_when_ncclprobe_is_killed(tmp_path, workloads):
    """kill -9 of the tracer: the workload runs on and finishes normally, and
    no uprobe of ours stays behind."""
    w = Workload([PROGS / "launcher", "--wait-signal", "--iters", "200", "--sleep-us", "2000",
                  "--variant", "rt"])
    workloads.append(w)
    probe, _ = attach_and_go(tmp_path, w)
    time.sleep(0.2)
    ours, _ = bpf_objects_of(probe.proc.pid)
    assert ncclprobe_programs_loaded(ours) > 0, "the probes should be attached by now"
    probe.proc.kill()
    probe.proc.wait()
    out, _ = w.finish(timeout=30)
    assert w.proc.returncode == 0
    assert "launches=200" in out
    # Links hold the programs: once every program of ours is gone, no uprobe is
    # left (bpftool 7.1 does not name uprobe_multi links, so ask for programs).
    deadline = time.time() + 10
    while ncclprobe_programs_loaded(ours) and time.time() < deadline:
        time.sleep(0.2)
    assert ncclprobe_programs_loaded(ours) == 0


@needs_bpf
def test_thread_id_is_refused_with_the_process_id(tmp_path, workloads):
    """A thread id reads like a pid in /proc, but the probes serve processes:
    say which process it belongs to instead of recording nothing."""
    w = Workload([PROGS / "launcher", "--wait-signal", "--threads", "2", "--variant", "rt"])
    workloads.append(w)
    tids = [int(t) for t in os.listdir(f"/proc/{w.pid}/task") if int(t) != w.pid]
    proc = run_ncclprobe(["record", "-o", tmp_path / "out", "--pid", tids[0]])
    assert proc.returncode == FAILURE
    assert f"{tids[0]} is a thread of process {w.pid}: give the process id" in proc.stderr


# ---- the rule: a command that prints "error:" exits non-zero -------------------------------

@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """Recording-like directories with damaged files (hand-made: no BPF needed)."""
    root = tmp_path_factory.mktemp("damaged")
    stack = {"stack_id": 1, "frames": [{"name": "main"}, {"name": "cudaLaunchKernel"}]}
    write_recording(root / "cut", launches=[launch_row(1, 1)], nccl=[], files={
        "stacks.jsonl": json.dumps(stack) + "\n" + json.dumps(stack)[:20],  # the last line cut
        "stacks.ext.folded": "1 app 7 7 0 main;cudaLaunchKernel;[GPU_Kernel]k\n",
        "launches.folded": "main;cudaLaunchKernel;[GPU_Kernel]k 1\n",
        "merged.folded": "main;cudaLaunchKernel;[GPU_Kernel]k 1\n"})
    (root / "bad.folded").write_text("no count here\n\xff\xfe;;; x\n")
    (root / "bad.conf").write_text("no_such_key = 1\n")
    (root / "not-a-socket").write_text("a regular file\n")
    return root


def error_cases(d):
    return {
        "record": ["record", "-o", d / "out", "--pid", dead_pid()],
        "convert-missing": ["convert", d / "missing"],
        "convert-cut": ["convert", d / "cut", "--format", "pprof,perfetto"],
        "report-missing": ["report", d / "missing"],
        "report-cut": ["report", d / "cut"],
        "merge": ["merge", "--cpu", d / "missing.folded", "--gpu", d / "missing.json",
                  "-o", d / "merged.out"],
        "flamegraph-missing": ["flamegraph", d / "missing.folded", "-o", d / "x.svg"],
        "flamegraph-bad": ["flamegraph", d / "bad.folded", "-o", d / "y.svg"],
        "daemon-config": ["daemon", "--config", d / "bad.conf"],
        "ctl-no-daemon": ["ctl", "--socket", d / "missing.sock", "status"],
        "ctl-not-a-socket": ["ctl", "--socket", d / "not-a-socket", "status"],
    }


CASES = ["record", "convert-missing", "convert-cut", "report-missing", "report-cut", "merge",
         "flamegraph-missing", "flamegraph-bad", "daemon-config", "ctl-no-daemon",
         "ctl-not-a-socket"]


@pytest.mark.parametrize("case", CASES)
def test_every_error_exits_non_zero(damaged, case):
    """The manual's rule, for every command: each of these inputs is bad, so each must
    say `error:` and exit non-zero (1 for failures, 2 for usage)."""
    proc = run_ncclprobe(error_cases(damaged)[case], timeout=60)
    assert "error:" in proc.stderr, (case, proc.stderr)
    assert proc.returncode in (FAILURE, USAGE), (case, proc.returncode, proc.stderr)
