"""Python frames in launch stacks (issue 4), on every CPython here: pyenv
3.10-3.13 (shared libpython) and Debian's static python3.11.

The workload (tests/progs/py_stacks.py) asks the interpreter itself, on the
launch line, for its stack (sys._getframe chain: name, file, current line);
ncclprobe's Python frames must be exactly those, in order, directly above the
native ctypes/libffi frames, with no interpreter frame left in between (merge
mode). The script runs from a directory with a space and a non-BMP character
in its name, so file names go through every string width.
"""

import json
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lib.folded import PY_FRAME
from lib.paths import PROGS_ENV, REPO
from lib.processes import interpreters, Workload
from lib.run import Attached, record, run_ncclprobe
from lib.skip import needs_bpf, needs_real_cudart

pytestmark = [needs_bpf, needs_real_cudart]

SCRIPT = REPO / "tests" / "progs" / "py_stacks.py"
EVAL_LOOP = "_PyEval_EvalFrameDefault"


def script_copy(tmp_path):
    """py_stacks.py in a directory named with a space and U+1F40D."""
    d = tmp_path / "py dir \U0001F40D"
    d.mkdir()
    return Path(shutil.copy(SCRIPT, d / "py_stacks.py"))


def workload_output(stdout):
    """(first stacks {(tid, kind): [frame text...]}, launches {tid: n})."""
    stacks, counts = {}, {}
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        o = json.loads(line)
        if "frames" in o:
            stacks[(o["tid"], o["kind"])] = [f"{n} ({f}:{ln})" for n, f, ln in o["frames"]]
        else:
            counts[o["tid"]] = o["launches"]
    return stacks, counts


def python_frames(frames):
    return [f for f in frames if PY_FRAME.match(f) and not f.endswith("[inlined]")]


def launches_by_tid(rec):
    """{tid: [stack frames of each launch, in time order]} from the detailed stacks."""
    stacks = rec.stacks()
    out = {}
    for launch in sorted(rec.jsonl("launches.jsonl"), key=lambda l: l["ts_ns"]):
        out.setdefault(launch["tid"], []).append(stacks[launch["stack_id"]])
    return out


def check_leaf_side(frames):
    """Below the innermost Python frame: native ctypes/libffi frames only,
    ending in the launch."""
    last_py = max(i for i, f in enumerate(frames) if f in python_frames(frames))
    below = frames[last_py + 1:]
    assert below[-1] == "cudaLaunchKernel", below
    assert "ffi_call" in below, below
    assert not python_frames(below) and EVAL_LOOP not in below, below


def record_script(tmp_path, python, args, extra=(), name="rec"):
    script = script_copy(tmp_path) if name == "rec" else SCRIPT
    rec = record(tmp_path, [*extra, "--", python, script, *args], timeout=120, name=name)
    assert rec.returncode == 0, rec.stderr
    return rec


@pytest.mark.parametrize("python", interpreters())
def test_chain_on_main_and_two_threads(tmp_path, python):
    iters = 3
    rec = record_script(tmp_path, python, ["--iters", iters, "--threads", 2])
    expected, counts = workload_output(rec.stdout)
    by_tid = launches_by_tid(rec)

    # per-thread counts: the main thread and both workers, all launches
    assert len(counts) == 3, rec.stdout
    assert {tid: len(stacks) for tid, stacks in by_tid.items()} == counts
    assert rec.summary["totals"]["python_walks"] == sum(counts.values())
    assert rec.summary["targets"][0]["python"]["frames"] == "walked"

    for tid, stacks in by_tid.items():
        # first `iters` through the generator, then `iters` in the asyncio task
        for kind, frames in (("generator", stacks[0]), ("asyncio", stacks[iters])):
            want = expected[(tid, kind)]
            assert python_frames(frames) == want, (tid, kind)
            assert EVAL_LOOP not in frames
            check_leaf_side(frames)
        # the chain the issue names, innermost last
        names = [PY_FRAME.match(f).group(1) for f in python_frames(stacks[0])]
        tail = ["forward", "inner", "wrapper", "step", "gen_launches", "launch"]
        assert [n.split(".")[-1] for n in names[-6:]] == tail, names
        assert names[0] == "<module>" or names[0].endswith("_bootstrap"), names

    # the folded file shows short file names and lines, stacks aggregated
    folded = rec.folded()
    assert sum(folded.values()) == sum(counts.values())
    assert any(";launch (py_stacks.py:" in s and "gen_launches (py_stacks.py:" in s for s in folded)


@pytest.mark.parametrize("python", interpreters())
def test_recursion_500_deep_is_truncated_at_the_depth_limit(tmp_path, python):
    args = ["--scenario", "recursion", "--depth", 500, "--iters", 2]
    rec = record_script(tmp_path, python, args)
    expected, _ = workload_output(rec.stdout)
    [want] = expected.values()
    assert len(want) == 502  # <module>, 500 x recurse, launch
    for stacks in launches_by_tid(rec).values():
        for frames in stacks:
            py = python_frames(frames)
            assert py == want[-128:]  # the innermost 128 (default --python-depth)
            assert frames.index("[python truncated]") < frames.index(py[0])
            check_leaf_side(frames)
    assert rec.summary["totals"]["python_truncated"] == 2

    full = record_script(tmp_path, python, [*args, "--iters", 1], extra=["--python-depth", 1024],
                         name="full")
    expected, _ = workload_output(full.stdout)
    [want] = expected.values()
    [[frames]] = launches_by_tid(full).values()
    assert python_frames(frames) == want
    assert "[python truncated]" not in frames


@pytest.mark.parametrize("python", interpreters())
@pytest.mark.parametrize("scenario,name", [("unicode", "käfer_λ_\U00020000"),
                                           ("lambda", "<lambda>")])
def test_non_ascii_and_lambda_frames(tmp_path, python, scenario, name):
    rec = record_script(tmp_path, python, ["--scenario", scenario, "--iters", 2])
    expected, counts = workload_output(rec.stdout)
    [want] = expected.values()
    assert PY_FRAME.match(want[-2]).group(1) == name  # the function that called launch()
    for stacks in launches_by_tid(rec).values():
        assert len(stacks) == 2
        for frames in stacks:
            assert python_frames(frames) == want
    assert any(f";{name} (py_stacks.py:" in s for s in rec.folded())


@pytest.mark.parametrize("python", interpreters())
def test_raw_keeps_interpreter_frames_and_off_walks_nothing(tmp_path, python):
    args = ["--threads", 0, "--iters", 1]
    raw = record_script(tmp_path, python, args, extra=["--python", "raw"])
    expected, _ = workload_output(raw.stdout)
    [[first, *_]] = launches_by_tid(raw).values()
    assert python_frames(first) == expected[next(k for k in expected if k[1] == "generator")]
    # each Python frame block sits right above (leaf side of) an eval-loop
    # frame (after the functions inlined at its call site, if any)
    assert EVAL_LOOP in first
    real = [f for f in first if not f.endswith("[inlined]")]
    for i, f in enumerate(real):
        if f in python_frames(real) and not PY_FRAME.match(real[i - 1]):
            assert real[i - 1].startswith(EVAL_LOOP), real[i - 1:i + 1]

    off = record_script(tmp_path, python, args, extra=["--python", "off"], name="off")
    assert off.summary["totals"]["python_walks"] == 0
    assert off.summary["targets"][0]["python"]["frames"] == "off"
    for stacks in launches_by_tid(off).values():
        for frames in stacks:
            assert not python_frames(frames)


@pytest.mark.parametrize("python", interpreters())
def test_attach_by_pid_to_a_running_interpreter(tmp_path, python):
    script = script_copy(tmp_path)
    w = subprocess.Popen([python, str(script), "--iters", "2", "--wait-signal", "--stay"],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert w.stdout.readline().startswith("ready ")
        probe = Attached(tmp_path, [w.pid])
        probe.wait_attached()
        w.send_signal(signal.SIGUSR1)
        lines = []
        for line in w.stdout:
            if line.strip() == "done":
                break
            lines.append(line)
        rec = probe.stop()
    finally:
        w.terminate()
        w.wait(timeout=30)
    assert rec.returncode == 0, rec.stderr
    expected, counts = workload_output("".join(lines))
    by_tid = launches_by_tid(rec)
    assert {tid: len(s) for tid, s in by_tid.items()} == counts
    for tid, stacks in by_tid.items():
        assert python_frames(stacks[0]) == expected[(tid, "generator")]
        assert python_frames(stacks[2]) == expected[(tid, "asyncio")]


def test_bad_python_options_are_refused():
    for args in (["--python", "nope"], ["--python-depth", "0"], ["--python-depth", "5000"]):
        proc = run_ncclprobe(["record", *args, "--", "true"], timeout=30)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "--python" in proc.stderr


def data_stack_interpreters():
    """3.11+: frames of ordinary calls lie in the thread's data stack."""
    return [p for p in interpreters() if not p.endswith("3.10")]


@pytest.mark.parametrize("python", data_stack_interpreters())
def test_frames_are_taken_from_bulk_copies_of_the_data_stack(tmp_path, python):
    """The walker copies the thread's data stack in bulk and takes frames from
    the copy; the frames are the interpreter's own, in deep recursion (across
    data-stack chunks too) and where generator and coroutine frames (which live
    in their objects, not in the data stack) sit between them."""
    # 60+ frames: all but the C-stack entry shim (3.12+, one per walk) from bulk copies
    rec = record_script(tmp_path, python, ["--scenario", "recursion", "--depth", 70, "--iters", 3])
    expected, _ = workload_output(rec.stdout)
    [want] = expected.values()
    assert len(want) == 72
    for stacks in launches_by_tid(rec).values():
        for frames in stacks:
            assert python_frames(frames) == want
    t = rec.summary["totals"]
    assert t["python_walks"] == 3 and t["python_read_errors"] == 0
    assert t["python_frames_read"] >= 3 * 72
    assert t["python_frames_read"] - t["python_frames_from_bulk_reads"] <= t["python_walks"], t

    # 600 frames cross several data-stack chunks: every one still there, in order
    deep = record_script(tmp_path, python, ["--scenario", "recursion", "--depth", 600, "--iters", 1],
                         extra=["--python-depth", 1024], name="deep")
    expected, _ = workload_output(deep.stdout)
    [want] = expected.values()
    [[frames]] = launches_by_tid(deep).values()
    assert python_frames(frames) == want
    t = deep.summary["totals"]
    assert t["python_frames_read"] - t["python_frames_from_bulk_reads"] <= 1, t

    # generator and coroutine frames: read on their own, the rest in bulk
    chain = record_script(tmp_path, python, ["--threads", 0, "--iters", 2], name="chain")
    expected, counts = workload_output(chain.stdout)
    [stacks] = launches_by_tid(chain).values()
    for kind, frames in (("generator", stacks[0]), ("asyncio", stacks[2])):
        assert python_frames(frames) == expected[(next(iter(counts)), kind)], kind
    t = chain.summary["totals"]
    assert t["python_read_errors"] == 0
    assert 0 < t["python_frames_from_bulk_reads"] < t["python_frames_read"], t


@pytest.mark.parametrize("python", interpreters())
def test_attach_to_an_interpreter_already_launching(tmp_path, python):
    """A server is attached while it launches flat out (the no-restart case):
    its very first recorded launch already carries its Python frames - no
    launch comes out with the eval loop's native frames alone, as when the
    probes fire before the frame walker knows the process."""
    w = Workload([python, REPO / "tests/progs/py_launch.py", "--wait-signal", "--threads", "2",
                  "--iters", "100000000"], env={"CUDART_PATH": PROGS_ENV["CUDART_PATH"]})
    try:
        w.go()
        time.sleep(0.3)  # its threads are launching now
        probe = Attached(tmp_path, [w.pid])
        probe.wait_attached(pattern=rf"recording process {w.pid}\b")
        time.sleep(0.5)
        rec = probe.stop()
        assert w.proc.poll() is None, "the workload ended before the attach: raise --iters"
    finally:
        w.kill()
    assert rec.returncode == 0, rec.stderr
    rows = rec.ext_lines()
    assert len(rows) > 100, rec.stderr
    chain = ["worker", "forward", "inner", "wrapper", "launch_one"]
    for _, _, _, _, _, frames in rows:
        names = [re.sub(r" \(.*", "", f).split(".")[-1] for f in frames if "(py_launch.py:" in f]
        assert names == chain, frames


@pytest.mark.parametrize("python", interpreters())
def test_code_made_and_freed_at_run_time_is_named_by_itself(tmp_path, python):
    """exec-generated functions, one generation after the other, each freed before the next is
    made: CPython gives the next one's code object the same address, in the same stack shape
    (its name, file and line table can even land where the freed one's were). Every launch is
    named by the function that made it, not by an earlier one at that address."""
    w = Workload([python, REPO / "tests/progs/py_code_reuse.py", "--wait-signal"],
                 env={"CUDART_PATH": PROGS_ENV["CUDART_PATH"]})
    try:
        probe = Attached(tmp_path, [w.pid])
        probe.wait_attached(pattern=rf"recording process {w.pid}\b")
        w.go()
        out, err = w.finish()
        assert w.proc.returncode == 0, err
        rec = probe.stop()
    finally:
        w.kill()
    assert rec.returncode == 0, rec.stderr
    gens = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    addresses = [g["code"] for g in gens]
    reused = [g for i, g in enumerate(gens) if g["code"] in addresses[:i]]
    assert reused, f"no code object at an address of an earlier one: {addresses}"
    named = {}
    for _, _, _, _, _, frames in rec.ext_lines():
        names = [re.sub(r" \(.*", "", f) for f in frames if "(<generated>:" in f]
        assert len(names) == 1, frames
        named[names[0]] = named.get(names[0], 0) + 1
    assert named == {g["name"]: g["launches"] for g in gens}
    assert rec.summary["totals"]["python_code_objects_freed"] >= len(reused), rec.summary["totals"]
    probes = [p for p in rec.summary["probes"] if p["role"] == "python"]
    assert len(probes) == 1 and probes[0]["attached"] and probes[0]["hits"] > 0, probes
