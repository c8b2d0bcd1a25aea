"""The reader's worker threads (--reader-threads): once the reader alone
falls behind, stacks are unwound and symbolized beside it, each traced
process's launches on one worker, in order. Real BPF, the real libcudart,
real processes and CPython. To put the reader behind for sure, ncclprobe is
stopped (SIGSTOP) while the workloads launch - the records wait in a ring
big enough for all of them - and let go once they are done.

Expected stacks and counts come from the workloads' source and arguments
(tests/progs/README.md, tests/progs/py_launch.py) and from what the
workloads print - never from ncclprobe. With workers every stack must come
out exactly as without them."""

import os
import re
import signal

import pytest

from lib.paths import PROGS, PROGS_ENV, REPO
from lib.processes import interpreters, Workload
from lib.run import Attached, assert_consistent_totals, run_ncclprobe
from lib.skip import needs_bpf, needs_real_cudart

pytestmark = [needs_bpf, needs_real_cudart]

PY_LAUNCH = REPO / "tests/progs/py_launch.py"
# launcher's variants -> (the API libb_launch calls, the kernel it is named after)
C_VARIANTS = {"rt": ("cudaLaunchKernel", "vector_add_kernel"),
              "drv": ("cuLaunchKernel", "<unnamed 0x7000>"),
              "rt_exc": ("cudaLaunchKernelExC", "vector_add_kernel")}


def attach_all(tmp_path, workloads, threads, name):
    """record --pid of every workload with --reader-threads THREADS, once
    each is probed; then stops it and lets the workloads go."""
    probe = Attached(tmp_path, [w.pid for w in workloads],
                     extra=["--reader-threads", str(threads), "--ring-buffer-mb", "256"],
                     name=name)
    for w in workloads:
        probe.wait_attached(pattern=rf"recording process {w.pid}\b")
    os.kill(probe.proc.pid, signal.SIGSTOP)
    for w in workloads:
        w.go()
    return probe


def let_go(probe):
    """Lets the stopped ncclprobe read what waits in the ring."""
    os.kill(probe.proc.pid, signal.SIGCONT)


def assert_each_thread_in_order(rec):
    """Every thread's launches are written in the order they were made."""
    last = {}
    for ts, _, _, tid, _, _ in rec.ext_lines():
        assert ts >= last.get(tid, 0), f"thread {tid}: a launch at {ts} after one at {last[tid]}"
        last[tid] = ts


def assert_workers_took_the_burst(rec, pids, threads):
    """Workers built stacks of the burst (the reader built the others itself:
    those of its first slice, before it fell behind, and the last few); a
    process's all on one worker, processes given workers in turn
    (docs/design.md, the reader): as many busy as processes, up to threads."""
    reader, launches = rec.summary["reader"], rec.summary["totals"]["launches"]
    assert reader["threads"] == threads
    assert launches // 4 < sum(reader["thread_stacks"]) <= launches, reader
    busy = [n for n in reader["thread_stacks"] if n]
    assert len(busy) == min(len(pids), threads), reader


def record_launchers(tmp_path, workloads, threads, name):
    ws = [Workload([PROGS / "launcher", "--wait-signal", "--threads", "2", "--iters", "2000",
                    "--variant", ",".join(C_VARIANTS)]) for _ in range(3)]
    workloads.extend(ws)
    probe = attach_all(tmp_path, ws, threads, name)
    try:
        printed = sum(w.launched() for w in ws)
    finally:
        let_go(probe)
    rec = probe.finish()
    assert rec.returncode == 0, rec.stderr
    return rec, ws, printed


def test_c_processes_exact_stacks_and_counts_with_workers(tmp_path, workloads):
    """Three C processes of two launching threads each, traced at once with
    two reader threads: every launch is written with its exact stack, each
    thread's in order, the same stacks and counts as the reader alone."""
    rec, ws, printed = record_launchers(tmp_path, workloads, 2, "threads2")
    want = 3 * 2 * 2000 * len(C_VARIANTS)
    assert printed == want
    assert_consistent_totals(rec)
    assert rec.summary["totals"]["launches"] == want
    tail = ["worker_thread", "run_worker", "liba_submit", "libb_launch"]
    expected = {";".join(["__clone3", "start_thread", *tail, api, f"[GPU_Kernel]{kernel}"]): 12000
                for api, kernel in C_VARIANTS.values()}
    assert rec.folded() == expected
    assert_each_thread_in_order(rec)
    assert_workers_took_the_burst(rec, [w.pid for w in ws], 2)

    alone, _, _ = record_launchers(tmp_path, workloads, 0, "threads0")
    assert alone.folded() == rec.folded()
    assert alone.summary["reader"]["threads"] == 0 and alone.summary["reader"]["thread_stacks"] == []


def source_line(text, needle):
    """The 1-based line of py_launch.py that holds needle (once)."""
    lines = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    assert len(lines) == 1, (needle, lines)
    return lines[0]


@pytest.mark.parametrize("python", interpreters(fallback="none"))
def test_python_processes_exact_frames_with_workers(tmp_path, workloads, python):
    """Two CPython processes of two threads each, with three reader threads:
    every launch's Python frames are the script's chain, at the lines that
    made each call, and every thread's launches are all there, in order."""
    if python == "none":
        pytest.skip("no CPython 3.10+ installed")
    env = {"CUDART_PATH": PROGS_ENV["CUDART_PATH"]}
    # a process attached with --pid is not held: its code objects must still
    # be there when the reader comes to them, a moment after its last launch
    ws = [Workload([python, PY_LAUNCH, "--wait-signal", "--threads", "2", "--iters", "3000",
                    "--linger-ms", "2000"], env=env) for _ in range(2)]
    workloads.extend(ws)
    probe = attach_all(tmp_path, ws, 3, "py")
    printed = {}
    try:
        for w in ws:  # the counts, printed before they linger
            for _ in range(2):
                m = re.match(r"thread tid=(\d+) launches=(\d+)", w.proc.stdout.readline())
                assert m, "the workload did not print its launches"
                printed[int(m[1])] = int(m[2])
    finally:
        let_go(probe)
    for w in ws:
        w.finish()
        assert w.proc.returncode == 0, w.err
    rec = probe.finish()
    assert rec.returncode == 0, rec.stderr
    assert sum(printed.values()) == 2 * 2 * 3000
    assert_consistent_totals(rec)
    src = PY_LAUNCH.read_text()
    chain = [("worker", source_line(src, "launches = model.forward(iters)")),
             ("forward", source_line(src, "            inner()")),
             ("inner", source_line(src, "            launch_one()")),
             ("wrapper", source_line(src, "return fn(*args, **kwargs)")),
             ("launch_one", source_line(src, "return cudart.cudaLaunchKernel("))]
    got = {}
    for _, _, _, tid, _, frames in rec.ext_lines():
        py = [f for f in frames if "(py_launch.py:" in f]
        names = [(re.sub(r" \(.*", "", f).split(".")[-1], int(re.search(r":(\d+)\)$", f)[1]))
                 for f in py]
        assert names == chain, frames
        assert frames[-2] == "cudaLaunchKernel" and "[unknown]" not in frames, frames
        got[tid] = got.get(tid, 0) + 1
    assert got == printed
    assert_each_thread_in_order(rec)
    assert_workers_took_the_burst(rec, [w.pid for w in ws], 3)


@pytest.mark.parametrize("value,why", [("65", "out of range"), ("-1", "not a whole number"),
                                       ("many", "not a whole number")])
def test_a_bad_reader_thread_count_is_refused(tmp_path, value, why):
    """--reader-threads takes auto or 0 to 64: anything else is refused before
    anything is traced, naming the flag, the value and why."""
    r = run_ncclprobe(["record", "-o", tmp_path / "rec", "--reader-threads", value, "--",
                       PROGS / "launcher", "--iters", "1"])
    assert r.returncode == 2, r.stderr
    assert f"--reader-threads '{value}'" in r.stderr and why in r.stderr, r.stderr
    assert not (tmp_path / "rec" / "summary.json").exists()
