"""CUDA graph replays under the line that captured each kernel: real BPF on
the CUDA driver TEST DOUBLE libfakecuda.so (tests/progs/fake_cuda_driver.c:
real names and signatures, capture, event fork/join, instantiate, exec
update, launch, destroy - no GPU here), driven by tests/progs/graph_app (C)
and tests/progs/py_graph.py (CPython, ctypes).

Expected values are the truth lines the workloads print themselves (what
they captured, replayed and launched, with exact counts) - never
ncclprobe's output."""

import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from lib.paths import PROGS, REPO
from lib.processes import Workload, interpreters
from lib.run import record, record_attached
from lib.skip import needs_binary, needs_bpf

pytestmark = [needs_bpf, needs_binary(PROGS / "graph_app", PROGS / "libfakecuda.so")]

GRAPH_APP = PROGS / "graph_app"
PY_GRAPH = REPO / "tests" / "progs" / "py_graph.py"
CAPTURE = "[graph capture]"


def truth(stdout):
    """The workload's truth lines: [(kind, {key: value})]."""
    out = []
    for line in stdout.splitlines():
        if line.startswith("truth kind="):
            fields = dict(f.split("=", 1) for f in line.split()[1:])
            out.append((fields.pop("kind"), fields))
    return out


def folded(path):
    """A .folded file as Counter {tuple of frames (leaf last): count}."""
    c = Counter()
    for line in Path(path).read_text().splitlines():
        stack, n = line.rsplit(" ", 1)
        c[tuple(stack.split(";"))] += int(n)
    return c


def ends_with(frames, chain):
    return len(frames) >= len(chain) and list(frames[-len(chain):]) == chain


def classify(frames):
    """(replay frames, capture frames, kernel) of a replayed line, or (None,
    frames without the API and leaf, kernel) of any other."""
    kernel = frames[-1].removeprefix("[GPU_Kernel]")
    if CAPTURE in frames:
        i = frames.index(CAPTURE)
        return list(frames[:i]), list(frames[i + 1:-1]), kernel
    return None, list(frames[:-1]), kernel


def expected_lines(rows, py=False):
    """The workload's truth as {(kind, replay chain, capture/stack chain, kernel): count}."""
    want = Counter()
    for kind, f in rows:
        if kind == "replayed":
            want[("replayed", f["replay"], f["capture"], f["kernel"])] += int(f["count"])
        elif kind == "eager":
            want[("eager", "", f["stack"], f["kernel"])] += int(f["count"])
        elif kind == "captured":
            want[("captured", "", f["capture"], f["kernel"])] += int(f["count"])
    return want


def same_function(frame, part, py):
    """A frame names a chain's function. Python frames are "qualname (file:line)";
    CPython 3.10 has no qualname (co_qualname is 3.11+): its frames name the
    function only."""
    if not py:
        return frame == part
    name = frame.split(" (")[0]
    return name == part or name == part.rsplit(".", 1)[-1]


def matches(frames, chain, py):
    """frames (root first, without the launch API frame) end with the chain's
    functions; in Python, with the chain's Python frames (the interpreter's and
    ctypes' native frames between them are not part of the chain)."""
    if py:
        frames = [f for f in frames if f.endswith(")") and ".py:" in f]
    parts = chain.split(";")
    return len(frames) >= len(parts) and all(
        same_function(f, p, py) for f, p in zip(frames[-len(parts):], parts))


def got_lines(rec_dir, want, py=False):
    """launches.folded regrouped by the truth's keys: every line must belong
    to exactly one truth entry."""
    got = Counter()
    for frames, n in folded(Path(rec_dir) / "launches.folded").items():
        replay, rest, kernel = classify(frames)
        api = rest[-1]
        assert api.startswith("cu") or api.startswith("cuda"), frames
        body = rest[:-1]
        if replay is not None:
            assert replay[-1].startswith("cuGraphLaunch") or replay[-1].startswith(
                "cudaGraphLaunch"), frames
            keys = [k for k in want if k[0] == "replayed" and k[3] == kernel
                    and matches(replay[:-1], k[1], py) and matches(body, k[2], py)]
        else:
            keys = [k for k in want if k[0] == "eager" and k[3] == kernel
                    and matches(body, k[2], py)]
        # the longest chain wins when one truth chain is a suffix of another
        keys.sort(key=lambda k: -len(k[1] + k[2]))
        assert keys, f"a line no truth entry explains: {';'.join(frames)} {n}"
        got[keys[0]] += n
    return got


def check_recording(rec, rows, py=False):
    assert {k for k, _ in rows} >= {"replayed", "captured"}, "the workload printed no truth"
    want = expected_lines(rows, py)
    got = got_lines(rec.path, want, py)
    assert got == Counter({k: v for k, v in want.items() if k[0] != "captured"}), \
        (sorted(got.items()), sorted(want.items()))
    # captured launches ran nothing: in launches.jsonl, marked, never counted
    captured = Counter(row["kernel"] for row in rec.jsonl("launches.jsonl") if row.get("captured"))
    want_captured = Counter()
    for k, v in want.items():
        if k[0] == "captured":
            want_captured[k[3]] += v
    assert captured == want_captured
    g = next(t["graphs"] for t in rec.summary["targets"] if "graphs" in t)
    replayed = sum(v for k, v in want.items() if k[0] == "replayed")
    assert g["replayed_kernels"] == replayed
    assert g["graph_launches_capture_unseen"] == 0
    assert g["captured_launches"] == sum(want_captured.values())
    # merged.folded (no GPU records here) counts the same kernels under the same stacks
    assert folded(rec.path / "merged.folded") == folded(rec.path / "launches.folded")
    return g


def test_every_replayed_kernel_is_counted_under_its_capture_line(tmp_path):
    """Three capture sites, a side stream joined through events, two graphs,
    relaxed and thread-local modes, another thread's eager work during a
    capture, an exec update that changes one kernel, a graph destroyed and
    another at the same handle value, 1000 replays: exact counts."""
    rec = record(tmp_path, ["--format", "pprof", "--", GRAPH_APP, "--replays", 1000],
                 timeout=180)
    assert rec.returncode == 0, rec.stderr
    rows = truth(rec.stdout)
    assert {k for k, _ in rows} >= {"replayed", "captured", "eager"}, rec.stdout
    g = check_recording(rec, rows)
    assert g["exec_updates"] >= 1 and g["graphs_destroyed"] >= 1
    assert not any(f[-1].startswith("[GPU_Kernel]<graph") for f in
                   folded(rec.path / "launches.folded")), "an unattributed graph launch"
    # the replayed kernels' stacks are in stacks.jsonl, and graph_replays.jsonl names them
    stacks = {s["stack_id"]: s["frames"] for s in rec.jsonl("stacks.jsonl")}
    replays = rec.jsonl("graph_replays.jsonl")
    assert replays and all(CAPTURE in stacks[r["stack_id"]] for r in replays)
    assert sum(r["count"] for r in replays) == g["replayed_kernels"]


def test_pprof_counts_replayed_kernels_under_their_capture_sites(tmp_path):
    from test_pprof import traces  # the -traces reader of the pprof tests

    rec = record(tmp_path, ["--format", "pprof", "--", GRAPH_APP, "--replays", 200],
                 timeout=180)
    assert rec.returncode == 0, rec.stderr
    want = Counter()
    for frames, n in folded(rec.path / "launches.folded").items():
        want[(CAPTURE in frames, frames[-1])] += n
    got = Counter()
    for (frames, _), n in traces(tmp_path, rec.path / "profile.pb.gz",
                                 "-sample_index=launches").items():
        got[(CAPTURE in frames, frames[0])] += n
    assert got == want


@pytest.mark.parametrize("scenarios", ["fork,prefill,thread", "fork,prefill,update,recycle"])
def test_per_thread_default_stream_captures(tmp_path, scenarios):
    """The same scenarios captured on the per-thread default stream (_ptsz)."""
    rec = record(tmp_path, ["--format", "none", "--", GRAPH_APP, "--ptsz", "--replays", 300,
                            "--scenarios", scenarios], timeout=180)
    assert rec.returncode == 0, rec.stderr
    check_recording(rec, truth(rec.stdout))


def test_graph_launches_whose_capture_was_not_seen_stay_one_launch_and_are_said(tmp_path):
    """Attached after the capture: each replay stays one launch, and stderr
    (once) and summary.json say how many and why."""
    w = Workload([GRAPH_APP, "--attach-after-capture", "--scenarios", "none", "--replays", 40])
    rec, stdout, _ = record_attached(tmp_path, w, extra=["--format", "none"])
    assert rec.returncode == 0, rec.stderr
    rows = [f for k, f in truth(stdout) if k == "replayed"]
    assert rows and len({f["count"] for f in rows}) == 1, stdout  # every node: once per replay
    replays = int(rows[0]["count"])
    lines = folded(rec.path / "launches.folded")
    unattributed = sum(n for f, n in lines.items() if f[-1].startswith("[GPU_Kernel]<graph"))
    assert unattributed == replays == 40
    assert not any(CAPTURE in f for f in lines)
    g = next(t["graphs"] for t in rec.summary["targets"] if "graphs" in t)
    assert g["graph_launches_capture_unseen"] == g["graph_launches"] == replays
    said = [line for line in rec.stderr.splitlines() if "capture was not seen" in line]
    assert len(said) == 1, rec.stderr


@pytest.mark.parametrize("python", interpreters(fallback="none"))
def test_python_capture_sites_name_the_model_lines(tmp_path, python):
    """CPython (ctypes on the driver double): replayed kernels under the
    Python functions that captured them."""
    if python == "none":
        pytest.skip("no CPython 3.10+ installed")
    rec = record(tmp_path, ["--format", "none", "--", python, PY_GRAPH, "--replays", 100],
                 env={"FAKECUDA_PATH": str(PROGS / "libfakecuda.so")}, timeout=180)
    assert rec.returncode == 0, rec.stderr
    check_recording(rec, truth(rec.stdout), py=True)


def test_capture_and_instantiate_probes_attach_on_the_real_libcudart(tmp_path):
    """On the toolkit's libcudart: every capture, event and graph entry point
    it exports gets a graph probe, attached."""
    rec = record(tmp_path, ["--format", "none", "--", PROGS / "launcher", "--iters", 1,
                            "--variant", "graph"])
    assert rec.returncode == 0, rec.stderr
    lib = next(lib["path"] for lib in rec.summary["targets"][0]["libraries"]
               if "libcudart" in lib["path"])
    nm = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True,
                        check=True).stdout
    exported = {line.split()[-1].split("@")[0] for line in nm.splitlines()}
    want = {s for s in exported if re.fullmatch(
        r"cuda(StreamBeginCapture(ToGraph)?|StreamEndCapture|EventRecord(WithFlags)?|"
        r"StreamWaitEvent|GraphInstantiate(WithFlags|WithParams)?|GraphExecUpdate|"
        r"GraphDestroy|GraphExecDestroy)(_ptsz)?", s)}
    graph_probes = {p["symbol"]: p for p in rec.summary["probes"] if p["role"] == "graph"
                    and "libcudart" in p["library"]}
    assert set(graph_probes) == want and len(want) >= 15
    assert all(p["attached"] for p in graph_probes.values())


def test_the_daemon_keeps_captures_made_while_it_records_nothing(tmp_path):
    """A server captures its graphs at start, before anyone opens a window:
    the daemon (tracing, recording nothing) keeps them, and a window opened
    later counts every replayed kernel under its capture line."""
    from lib.daemon import Daemon

    # the daemon finds processes by their libcuda* mapping: the driver double
    # under such a name, preloaded (its symbols win)
    double = tmp_path / "libcuda-double.so"
    shutil.copy(PROGS / "libfakecuda.so", double)
    daemon = Daemon(tmp_path / "d", aggregate="no")  # outside windows: nothing recorded
    try:
        w = Workload([GRAPH_APP, "--wait-signal", "--attach-after-capture", "--scenarios",
                      "fork", "--replays", 25], env={"LD_PRELOAD": str(double)})
        daemon.wait_traced(w.pid)
        w.go()  # it captures now: no window is open
        again = w.proc.stdout.readline()
        assert again.startswith("ready"), again
        assert not daemon.status()["window"]["open"]
        assert json.loads(daemon.ctl("start").stdout)["ok"]
        w.go()  # the replays, in the window
        out, _ = w.finish()
        assert json.loads(daemon.ctl("stop").stdout)["ok"]
        sets = daemon.written_sets(w.pid)
    finally:
        w.kill()
        daemon.terminate()
    rows = truth(again + out)
    want = Counter()
    for kind, f in rows:
        if kind == "replayed":
            want[(f["replay"].split(";")[-1], f["capture"].split(";")[-2], f["kernel"])] += \
                int(f["count"])
    assert want and sum(want.values()) > 0
    got = Counter()
    for name in sets:
        for frames, n in folded(daemon.out / name / "launches.folded").items():
            if CAPTURE in frames:
                _, rest, kernel = classify(frames)
                i = frames.index(CAPTURE)
                got[(frames[i - 2], rest[-3], kernel)] += n
    assert got == want


# ---- with the CUPTI library: every replayed GPU record under its capture line ----
#
# cupti_app --scenario capture (tests/progs/README.md) captures four kernel
# launches from three lines through the CUDA driver TEST DOUBLE, instantiates
# and replays the graph; the CUPTI TEST DOUBLE plays the node callbacks
# (created inside each captured launch, cloned at instantiate) and each
# replay's kernel records, with the clone's node id, queued last node first.
# Both gemm_kernel nodes (capture_mlp, capture_proj) run in the opposite
# order to their capture: only the node ids can tell them apart. Its
# --expect file is the truth.

from lib.cupti_app import record_cupti_app  # noqa: E402
from lib.jsonl import outer_launches, read_jsonl, read_stacks  # noqa: E402
from lib.skip import needs_replay  # noqa: E402

CAPTURE_TAIL = ["capture_launch", "cuLaunchKernel"]


def replay_truth(expect):
    """(captured launch lines, replayed records) of the --expect file."""
    rows = read_jsonl(expect)
    captured = [r for r in rows if r.get("captured")]
    replayed = [g for r in rows if r.get("api") == "cuGraphLaunch" for g in r["gpu"]]
    return captured, replayed


def capture_site(frames):
    """The capture-time line of a replayed stack: the frame that called
    capture_launch, below [graph capture] (None if it is no replay)."""
    if CAPTURE not in frames:
        return None
    capture = [f.split(" (")[0] for f in frames[frames.index(CAPTURE) + 1:]
               if not f.startswith("[GPU_")]
    assert capture[-2:] == CAPTURE_TAIL and capture[0] == "capture_model", frames
    return capture[-3]


def check_replayed_records(out, expect, by):
    """Each replayed record of the truth is in launches.jsonl once, tied
    `by` to the stack of its own capture site; merged.gpu_ns.folded,
    merged.folded and launches.folded count it there."""
    _, replayed = replay_truth(expect)
    stacks = read_stacks(out)
    got = {}
    for launch in outer_launches(out):
        if launch["api"] == "cuGraphLaunch":
            for r in launch["gpu"]:
                got[(r["graph_node_id"], r["start_ns"])] = r
    assert len(got) == len(replayed) > 0
    want_ns, want_count = Counter(), Counter()
    for want in replayed:
        mine = got[(want["graph_node_id"], want["start_ns"])]
        assert mine["end_ns"] == want["end_ns"] and mine["name"] == want["name"]
        assert mine["capture_by"] == by, mine
        frames = [f.split(" (")[0] for f in stacks[mine["capture_stack_id"]]]
        assert capture_site(frames) == want["capture_site"], frames
        assert frames[frames.index(CAPTURE) - 1] == "cuGraphLaunch"
        assert "replay_step" in frames[:frames.index(CAPTURE)]
        key = (want["capture_site"], "[GPU_Kernel]" + want["name"])
        want_ns[key] += want["end_ns"] - want["start_ns"]
        want_count[key] += 1
    for name, want in (("merged.gpu_ns.folded", want_ns), ("merged.folded", want_count),
                       ("launches.folded", want_count)):
        counted = Counter()
        for frames, n in folded(out / name).items():
            if "replay_step" in frames:
                assert CAPTURE in frames, (name, frames)  # nothing left under the replay
                counted[(capture_site(frames), frames[-1])] += n
        assert counted == want, name
    return replayed


@needs_replay
def test_cupti_replays_are_tied_to_their_capture_by_node_id(tmp_path):
    iters = 25
    out, expect, _ = record_cupti_app(tmp_path, ["--scenario", "capture", "--iters", str(iters)])
    replayed = check_replayed_records(out, expect, "node")
    captured, _ = replay_truth(expect)
    # the captured launches ran nothing: in launches.jsonl, never counted
    got_captured = [r for r in outer_launches(out) if r.get("captured")]
    assert [(r["kernel"], r["grid"]) for r in got_captured] == \
        [(c["kernel"], c["grid"]) for c in captured]
    g = json.loads((out / "summary.json").read_text())["targets"][0]["graphs"]
    assert g["replay_records_by_node"] == g["replayed_kernels"] == len(replayed) == 4 * iters
    assert g["replay_records_by_kernel_order"] == g["replay_records_not_tied"] == 0
    assert g["cupti_nodes"] == 2 * len(captured)  # created, then cloned
    gpu = json.loads((out / "summary.json").read_text())["gpu"]
    assert gpu["markers_unpaired"] == 0 and gpu["launches_pending"] == 0
    # the eager launch keeps its own stack
    eager = folded(out / "merged.folded")
    assert sum(n for f, n in eager.items() if "eager_after" in f) == 1


@needs_replay
def test_cupti_replays_without_node_ids_are_tied_by_kernel_order(tmp_path):
    """The library never saw the nodes made (no GRAPHNODE callbacks: a
    library injected after the capture, its node entries lost): the records
    are tied by kernel name in capture order, and said to be."""
    out, expect, _ = record_cupti_app(
        tmp_path, ["--scenario", "capture", "--iters", "10", "--no-graph-nodes"])
    replayed = check_replayed_records(out, expect, "kernel_order")
    g = json.loads((out / "summary.json").read_text())["targets"][0]["graphs"]
    assert g["replay_records_by_kernel_order"] == len(replayed) and g["cupti_nodes"] == 0


@needs_replay
def test_daemon_window_ties_replays_of_a_capture_it_saw_by_kernel_order(tmp_path_factory,
                                                                        tmp_path):
    """A server's case: the daemon traces the process from its start and keeps its capture
    while it records nothing; later a capture window brings the CUPTI library into it
    (`ctl start --cupti`), which never saw the nodes made. Every replayed kernel record of the
    window is tied by kernel order to the line that captured it, with its GPU time."""
    import os
    import signal
    import time

    from lib.cupti_app import APP
    from lib.daemon import Daemon, wait_for

    d = Daemon(tmp_path_factory.mktemp("graphs"), include_comm="cupti_app")
    expect = tmp_path / "expect.jsonl"
    app = subprocess.Popen([str(APP), "--scenario", "capture", "--no-graph-nodes",
                            "--replay-until-signal", "--sleep-us", "2000", "--expect",
                            str(expect), "--wait-signal"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def subscribed_replays():
        rows = read_jsonl(expect) if expect.exists() else []
        return [r for r in rows if r.get("api") == "cuGraphLaunch" and r.get("subscriber")]
    try:
        line = app.stdout.readline()
        assert line.startswith("ready "), line + app.stderr.read()
        pid = int(line.split()[1])
        d.wait_traced(pid)
        os.kill(pid, signal.SIGUSR1)  # the capture, then replays
        wait_for(lambda: expect.exists() and len(read_jsonl(expect)) >= 8, 20, "the capture")
        assert d.ctl("start", "--cupti").returncode == 0
        try:
            wait_for(lambda: len(subscribed_replays()) >= 30, 30, "replays with the library in")
        except AssertionError:
            raise AssertionError(f"{d.target(pid)}\n{read_jsonl(expect)[-2:]}\n"
                                 f"{d.stderr()[-3000:]}")
        time.sleep(0.5)
        assert d.ctl("stop").returncode == 0
        os.kill(pid, signal.SIGTERM)
        _, err = app.communicate(timeout=60)
        assert app.returncode == 0, err
        sets = d.written_sets(pid)
        windows = [name for name, w in sets.items() if w["window"]["kind"] == "window"]
        assert len(windows) == 1, sets
        out = d.out / windows[0]
        truth = {(g["graph_node_id"], g["start_ns"]): g for r in subscribed_replays()
                 for g in r["gpu"]}
        stacks = read_stacks(out)
        tied = 0
        for launch in outer_launches(out):
            if launch["api"] != "cuGraphLaunch":
                continue
            for rec in launch.get("gpu", []):
                want = truth.get((rec["graph_node_id"], rec["start_ns"]))
                if want is None:
                    continue  # a replay at the window's edges
                assert rec["capture_by"] == "kernel_order", rec
                frames = [f.split(" (")[0] for f in stacks[rec["capture_stack_id"]]]
                assert capture_site(frames) == want["capture_site"], frames
                tied += 1
        assert tied >= 4 * 20, tied
        # the window's GPU time of the replays sits under the capture lines, none under the replay
        replayed = [f for f in folded(out / "merged.gpu_ns.folded") if "replay_step" in f]
        assert replayed and all(CAPTURE in f for f in replayed), replayed
        assert {capture_site(f) for f in replayed} == \
            {"capture_attention", "capture_mlp", "capture_proj"}
        rc, _ = d.terminate()
        assert rc == 0, d.stderr()[-3000:]
    finally:
        if app.poll() is None:
            app.kill()
        d.kill()
