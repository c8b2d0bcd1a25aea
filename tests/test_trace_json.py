"""trace.json, the Chrome Trace Event / Perfetto view of a recording
(src/writers/perfetto.c): CPU threads with a slice per launch, one process
per GPU with a track per stream, flow arrows from each launch to the GPU
work it made, NCCL calls on their threads.

Checked on a hand-built recording directory (exact tracks, slices, arrows,
args, hostile names), on a real recording of the launcher (CPU only) and on
recordings with GPU records from the CUPTI test double (see
test_gpu_join.py), and on hand-built CUDA graph replays whose records name
the stack that captured them. Every file is also checked against the rules Perfetto's
JSON importer enforces: valid JSON, a name for every track, slices of one
track nested or disjoint, every flow start matched by an end, each inside a
slice of its track.
"""

import json
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from lib.cupti_app import record_cupti_app
from lib.jsonl import outer_launches, read_jsonl, read_stacks
from lib.paths import NCCLPROBE, PROGS
from lib.run import convert, made_by_record, record
from lib.skip import needs_binary, needs_bpf, needs_replay
from lib.folded import PY_FRAME
from lib.synthetic import GRAPH_CAPTURE, gpu_record, launch_row, write_recording

GPU_PID = 1000000000  # "GPU N" is pid GPU_PID + N (perfetto.c)

pytestmark = needs_binary(NCCLPROBE)


def write_trace(rec_dir):
    """The one place trace.json gets written (`ncclprobe convert --format
    perfetto`); returns the CompletedProcess. A recording already has the one
    `record` wrote (its default --format): that is the one tested."""
    if made_by_record(rec_dir):
        assert (Path(rec_dir) / "trace.json").exists(), "record did not write trace.json"
        return subprocess.CompletedProcess([], 0, "", "")
    return convert(rec_dir, "perfetto")


def ns(us):
    """A trace time (microseconds, read as Decimal) in whole nanoseconds."""
    value = Decimal(us) * 1000
    assert value == value.to_integral_value(), us
    return int(value)


class Trace:
    """trace.json, read with exact decimals."""

    def __init__(self, path):
        raw = Path(path).read_bytes()
        raw.decode("utf-8")  # strict: the file is valid UTF-8
        self.doc = json.loads(raw, parse_float=Decimal)
        self.events = self.doc["traceEvents"]
        self.meta = self.doc["otherData"]

    def of(self, ph, **match):
        return [e for e in self.events if e["ph"] == ph and
                all(e.get(k) == v for k, v in match.items())]

    def names(self, what):
        key = (lambda e: e["pid"]) if what == "process_name" else \
            (lambda e: (e["pid"], e["tid"]))
        out = {}
        for e in self.of("M", name=what):
            assert key(e) not in out, ("named twice", e)
            out[key(e)] = e["args"]["name"]
        return out

    @property
    def processes(self):
        return self.names("process_name")

    @property
    def threads(self):
        return self.names("thread_name")

    def track_name(self, e):
        return self.threads.get((e["pid"], e["tid"]))


def check_structure(t):
    """What a viewer needs; returns {flow id: (its CPU slice, its GPU slice)}."""
    assert isinstance(t.events, list)
    assert t.doc["displayTimeUnit"] == "ns"
    threads, processes = t.threads, t.processes
    sort_index = {e["pid"] for e in t.of("M", name="process_sort_index")}
    tracks = {}
    for e in t.events:
        assert e["ph"] in "MXisf", e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        if e["ph"] == "M":
            continue
        ns(e["ts"])
        assert (e["pid"], e["tid"]) in threads, ("track without a name", e)
        assert e["pid"] in processes and e["pid"] in sort_index, ("process without a name", e)
        if e["ph"] == "X":
            assert ns(e["dur"]) >= 0
            tracks.setdefault((e["pid"], e["tid"]), []).append(e)
        if e["ph"] == "i":
            assert e["s"] == "t", e
    # slices of a track nest or follow one another (Perfetto drops the others)
    for key, slices in tracks.items():
        stack = []
        for e in sorted(slices, key=lambda e: (ns(e["ts"]), -ns(e["dur"]))):
            start, end = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], ("overlapping slices", key, e)
            stack.append(end)

    def enclosing(e):
        """The innermost slice of e's track open at e's time."""
        at = ns(e["ts"])
        found = [x for x in tracks.get((e["pid"], e["tid"]), [])
                 if ns(x["ts"]) <= at < ns(x["ts"]) + max(ns(x["dur"]), 1)]
        assert found, ("flow event outside every slice of its track", e)
        return max(found, key=lambda x: (ns(x["ts"]), -ns(x["dur"])))

    starts = {}
    for e in t.of("s"):
        assert e["id"] not in starts, ("flow id used twice", e)
        starts[e["id"]] = e
    ends = {e["id"]: e for e in t.of("f")}
    assert len(ends) == len(t.of("f"))
    assert set(starts) == set(ends), "every flow start has its end and no end is alone"
    flows = {}
    for fid, s in starts.items():
        f = ends[fid]
        assert f["bp"] == "e" and (f["cat"], f["name"]) == (s["cat"], s["name"])
        cpu, gpu = enclosing(s), enclosing(f)
        assert ns(s["ts"]) == ns(cpu["ts"]) and ns(f["ts"]) == ns(gpu["ts"])
        assert gpu["pid"] >= GPU_PID and cpu["pid"] < GPU_PID
        flows[fid] = (cpu, gpu)
    assert t.meta["flows"] == len(flows)
    return flows


# ---- a hand-built recording ---------------------------------------------------------

T0 = 5_000_000_000_000  # CLOCK_MONOTONIC ns: 5000 s after boot
PID, OTHER = 4242, 5151
BAD = "@BAD@"  # replaced by the bytes ff fe (invalid UTF-8) in the files
HOSTILE = 'k"<&>;\x01' + BAD
HOSTILE_COMM = 'c"o<m>&\x1f' + BAD
HOSTILE_FRAMES = ['we"ird', "<tag>&amp;", "semi;colon", "bad" + BAD + "utf8", "ctl\x01\x1f\x7f",
                  "ok ünïcødé"]


def clean(text):
    """What the writer makes of the invalid bytes: one U+FFFD each."""
    return text.replace(BAD, "\ufffd\ufffd")


def kernel(name, start, end, stream, corr, device=0, graph_id=0, node=0):
    """A kernel record start..end ns after T0 (the table below is written in these)."""
    return gpu_record("kernel", T0 + start, T0 + end, name, correlation_id=corr, device=device,
                      context=1, stream=stream, graph_id=graph_id, graph_node_id=node,
                      grid=[4, 1, 1], block=[256, 1, 1])


def launch(ts, tid, api, kern, stack, gpu=None, pid=PID, comm="worker", **extra):
    """A launch ts ns after T0 (the table below is written in these)."""
    return launch_row(T0 + ts, stack, kern, gpu=gpu, pid=pid, tid=tid, comm=comm, cpu=1,
                      api=api, grid=[4, 1, 1], block=[256, 1, 1], shmem=0, stream="0x10",
                      **extra)


NCCL_PLAN = {"comm": "0x55d1a7ea92a0", "comm_hash": "0x9b2f61c0d3a4e571", "rank": 0,
             "nranks": 8, "cuda_dev": 0, "kernel_fn": "0x7f3a12345670", "symmetric": False,
             "copy_engine": False,
             "ops": [{"op": "AllReduce", "count": 1048576, "datatype": "bfloat16",
                      "bytes": 2097152, "redop": "sum", "root": -1, "peer": -1,
                      "algorithm": "RING", "protocol": "SIMPLE", "nchannels": 16}],
             "ops_total": 1, "ops_truncated": False}

STACKS = {1: ["main", "train_step", "launch_add", "cudaLaunchKernel"],
          2: ["main", "train_step", "replay", "cudaGraphLaunch"],
          3: ["main", "allreduce_grads", "ncclAllReduce"],
          4: ["main", "allreduce_grads", "ncclGroupEnd", "ncclLaunchKernel", "[NCCL]AllReduce"],
          5: HOSTILE_FRAMES}

GRAPH = [kernel("graph_node_1", 30000, 31000, 7, 18, graph_id=3, node=1),
         kernel("graph_node_2", 30500, 32000, 8, 18, graph_id=3, node=2),
         kernel("graph_node_3", 31000, 33000, 7, 18, graph_id=3, node=123456789012345678)]

LAUNCHES = [
    launch(1000, 4243, "cudaLaunchKernel", "vec_add", 1,
           [kernel("vec_add", 20000, 25000, 7, 17)]),
    {**launch(1500, 4243, "cuLaunchKernel", "vec_add", 1), "nested": True},
    launch(3000, 4243, "cudaGraphLaunch", "<graph cudaGraphLaunch>", 2, GRAPH),
    launch(6000, 4244, "ncclLaunchKernel", "ncclDevKernel_Generic", 4,
           [kernel("ncclDevKernel_Generic", 40000, 90000, 9, 21)], comm="nccl_user",
           nccl=NCCL_PLAN),
    # overlaps graph_node_3 on stream 7: a second lane
    launch(10000, 4243, "cudaLaunchKernel", "overlap_kernel", 1,
           [kernel("overlap_kernel", 32500, 34000, 7, 22)]),
    launch(2000, OTHER, "cuLaunchKernel", "k2", 1,
           [kernel("k2", 50000, 51000, 3, 5, device=1)], pid=OTHER, comm="helper"),
    {**launch(9000, 4243, "cudaLaunchKernel", "scale", 1), "gpu_status": "pending"},
    # two launches 400 ns apart, the later one written first (retirement order)
    launch(12400, 4243, "cudaLaunchKernel", "late", 1),
    launch(12000, 4243, "cudaLaunchKernel", "early", 1),
    launch(8000, 4245, "cudaLaunchKernel", HOSTILE, 5,
           [kernel(HOSTILE, 95000, 96000, 7, 23)], comm=HOSTILE_COMM),
]

UNMATCHED = [{"type": "memcpy", "correlation_id": 99, "start_ns": T0 + 26000,
              "end_ns": T0 + 27000, "device": 0, "context": 1, "stream": 7, "graph_id": 0,
              "graph_node_id": 0, "copy_kind": "HtoD", "bytes": 4096}]


def nccl_op(ts, op, **fields):
    base = {"ts_ns": T0 + ts, "pid": PID, "tid": 4244, "thread": "nccl_user", "cpu": 2,
            "op": op, "count": 0, "datatype": "", "bytes": 0, "redop": "", "root": -1,
            "peer": -1, "comm": "0x55d1a7ea92a0", "comm_hash": None, "rank": None,
            "nranks": None, "cuda_dev": None, "stream": "0x0", "sendbuff": "0x0",
            "recvbuff": "0x0", "stack_id": 3}
    return {**base, **fields}


NCCL = [nccl_op(4000, "GroupStart"),
        nccl_op(5000, "AllReduce", count=1048576, datatype="bfloat16", bytes=2097152,
                redop="sum", comm_hash="0x9b2f61c0d3a4e571", rank=0, nranks=8, cuda_dev=0,
                stream="0x20", sendbuff="0x1000", recvbuff="0x2000"),
        nccl_op(5500, "Send", count=16, datatype="float32", bytes=64, peer=3,
                comm_hash="0x9b2f61c0d3a4e571", rank=0, nranks=8, cuda_dev=0),
        nccl_op(5800, "GroupEnd")]


def make_recording(path, launches=LAUNCHES, unmatched=UNMATCHED, nccl=NCCL):
    """The recording of the tables above at path (BAD as invalid bytes); returns path."""
    return write_recording(
        path, stacks=STACKS, launches=launches, nccl=nccl, unmatched=unmatched or None,
        summary={"format_version": 1,
                 "targets": [{"pid": PID, "comm": "trainer", "exe": "/bin/t"}]},
        substitute={BAD: b"\xff\xfe"})


@pytest.fixture
def fixture_trace(tmp_path):
    rec = make_recording(tmp_path / "rec")
    proc = write_trace(rec)
    assert proc.returncode == 0, proc.stderr
    return Trace(rec / "trace.json")


def by_name(slices):
    out = {}
    for e in slices:
        out.setdefault(e["name"], []).append(e)
    return out


def test_tracks_are_named_per_process_thread_gpu_and_stream(fixture_trace):
    t = fixture_trace
    check_structure(t)
    assert t.processes == {PID: "trainer", OTHER: "helper", GPU_PID: "GPU 0",
                           GPU_PID + 1: "GPU 1"}
    gpu0 = {tid: name for (pid, tid), name in t.threads.items() if pid == GPU_PID}
    assert sorted(gpu0.values()) == ["stream 7", "stream 7 (lane 2)", "stream 8", "stream 9"]
    assert t.threads == {
        (PID, 4243): "worker", (PID, 4244): "nccl_user", (PID, 4245): clean(HOSTILE_COMM),
        (OTHER, OTHER): "helper",
        **{(GPU_PID, tid): name for tid, name in gpu0.items()},
        **{(GPU_PID + 1, tid): name for (pid, tid), name in t.threads.items()
           if pid == GPU_PID + 1}}
    assert sorted(n for (p, _), n in t.threads.items() if p == GPU_PID + 1) == ["stream 3"]
    # GPU processes sort after the CPU ones
    order = {e["pid"]: e["args"]["sort_index"] for e in t.of("M", name="process_sort_index")}
    assert max(order[PID], order[OTHER]) < min(order[GPU_PID], order[GPU_PID + 1])


def test_cpu_launches_are_slices_with_their_arguments_and_stack(fixture_trace):
    t = fixture_trace
    cpu = [e for e in t.of("X") if e["pid"] < GPU_PID]
    assert len(cpu) == len([l for l in LAUNCHES if not l["nested"]]) == t.meta["launches"]
    for want in (l for l in LAUNCHES if not l["nested"]):
        got = [e for e in cpu if e["tid"] == want["tid"] and ns(e["ts"]) == want["ts_ns"]]
        assert len(got) == 1, want
        e = got[0]
        assert e["name"] == want["api"] and e["cat"] == "launch"
        args = e["args"]
        assert args["kernel"] == clean(want["kernel"])
        assert args["grid"] == want["grid"] and args["block"] == want["block"]
        assert args["stream"] == want["stream"] and args["nested"] is False
        assert args["stack_id"] == want["stack_id"]
        assert args["stack"] == [clean(f) for f in STACKS[want["stack_id"]]]
        assert args["gpu_records"] == len(want.get("gpu", []))
        assert "gpu" not in args and "ts_ns" not in args
    durs = {e["args"]["kernel"]: ns(e["dur"]) for e in cpu}
    assert durs["vec_add"] == 1000 and t.meta["cpu_launch_slice_ns"] == 1000
    # 400 ns apart: the later one (written first) keeps 1 us, the earlier ends where it starts
    assert durs["late"] == 1000 and durs["early"] == 400
    nested = t.of("i", cat="launch")
    assert len(nested) == 1 and nested[0]["name"] == "cuLaunchKernel"
    assert nested[0]["args"]["nested"] is True and ns(nested[0]["ts"]) == T0 + 1500
    assert t.meta["nested_launches"] == 1


def test_gpu_records_are_slices_on_their_stream_with_real_times(fixture_trace):
    t = fixture_trace
    gpu = [e for e in t.of("X") if e["pid"] >= GPU_PID]
    records = [(l, r) for l in LAUNCHES for r in l.get("gpu", [])]
    assert len(gpu) == len(records) + len(UNMATCHED)
    assert t.meta["gpu_records"] == len(records) and t.meta["gpu_unmatched"] == 1
    names = by_name(gpu)
    for launch_line, r in records:
        (e,) = names[clean(r["name"])] if r["name"] != "graph_node_3" else names["graph_node_3"]
        assert (ns(e["ts"]), ns(e["dur"])) == (r["start_ns"], r["end_ns"] - r["start_ns"])
        assert e["pid"] == GPU_PID + r["device"] and e["cat"] == "gpu_kernel"
        assert t.track_name(e).startswith("stream %d" % r["stream"])
        a = e["args"]
        assert (a["correlation_id"], a["grid"], a["block"], a["graph_id"], a["stream"]) == \
            (r["correlation_id"], r["grid"], r["block"], r["graph_id"], r["stream"])
        assert (a["launch_pid"], a["launch_tid"]) == (launch_line["pid"], launch_line["tid"])
        assert "unmatched" not in a
    # an integer beyond a double's 53 bits comes through exact
    assert names["graph_node_3"][0]["args"]["graph_node_id"] == 123456789012345678
    assert t.track_name(names["overlap_kernel"][0]) == "stream 7 (lane 2)"
    assert t.track_name(names["graph_node_3"][0]) == "stream 7"
    # the unmatched copy: on stream 7 between the launches' kernels, no arrow
    (copy,) = names["Memcpy HtoD"]
    assert copy["cat"] == "gpu_memcpy" and t.track_name(copy) == "stream 7"
    assert (ns(copy["ts"]), ns(copy["dur"])) == (T0 + 26000, 1000)
    assert copy["args"]["bytes"] == 4096 and copy["args"]["unmatched"] is True
    assert not [f for f in t.of("f") if ns(f["ts"]) == T0 + 26000]


def test_flows_join_each_launch_to_each_of_its_gpu_records(fixture_trace):
    t = fixture_trace
    flows = check_structure(t)
    pairs = sorted((cpu["args"]["kernel"], gpu["name"]) for cpu, gpu in flows.values())
    assert pairs == sorted([
        ("vec_add", "vec_add"),
        ("<graph cudaGraphLaunch>", "graph_node_1"),
        ("<graph cudaGraphLaunch>", "graph_node_2"),
        ("<graph cudaGraphLaunch>", "graph_node_3"),
        ("ncclDevKernel_Generic", "ncclDevKernel_Generic"),
        ("overlap_kernel", "overlap_kernel"),
        ("k2", "k2"),
        (clean(HOSTILE), clean(HOSTILE))])
    graph = [gpu for cpu, gpu in flows.values() if cpu["name"] == "cudaGraphLaunch"]
    assert len(graph) == 3 and len({(g["pid"], g["tid"]) for g in graph}) == 2
    for cpu, gpu in flows.values():
        assert cpu["pid"] == gpu["args"]["launch_pid"] and cpu["tid"] == gpu["args"]["launch_tid"]


def test_nccl_calls_and_nccl_kernel_launches_carry_their_operation(fixture_trace):
    t = fixture_trace
    calls = t.of("i", cat="nccl")
    assert [c["name"] for c in sorted(calls, key=lambda c: ns(c["ts"]))] == \
        ["ncclGroupStart", "ncclAllReduce", "ncclSend", "ncclGroupEnd"]
    assert t.meta["nccl_ops"] == 4
    for c in calls:
        assert (c["pid"], c["tid"]) == (PID, 4244) and c["s"] == "t"
        assert c["args"]["stack"] == STACKS[3]
    (ar,) = [c for c in calls if c["name"] == "ncclAllReduce"]
    want = NCCL[1]
    for key in ("op", "count", "datatype", "bytes", "redop", "comm_hash", "rank", "nranks",
                "peer", "root", "stream", "cuda_dev", "comm"):
        assert ar["args"][key] == want[key], key
    (start,) = [c for c in calls if c["name"] == "ncclGroupStart"]
    assert start["args"]["comm_hash"] is None and start["args"]["rank"] is None
    (send,) = [c for c in calls if c["name"] == "ncclSend"]
    assert send["args"]["peer"] == 3
    (launch_slice,) = t.of("X", name="ncclLaunchKernel")
    assert launch_slice["args"]["nccl"] == json.loads(json.dumps(NCCL_PLAN),
                                                      parse_float=Decimal)
    (kern,) = t.of("X", name="ncclDevKernel_Generic")
    assert kern["args"]["nccl_ops"] == ["AllReduce"]
    assert kern["args"]["comm_hash"] == "0x9b2f61c0d3a4e571"


def test_hostile_names_stay_valid_json_and_intact(fixture_trace, tmp_path):
    t = fixture_trace
    (e,) = [e for e in t.of("X") if e["pid"] < GPU_PID and e["tid"] == 4245]
    assert e["args"]["kernel"] == 'k"<&>;\x01\ufffd\ufffd'
    assert e["args"]["stack"] == ['we"ird', "<tag>&amp;", "semi;colon", "bad\ufffd\ufffdutf8",
                                  "ctl\x01\x1f\x7f", "ok ünïcødé"]
    assert t.threads[(PID, 4245)] == 'c"o<m>&\x1f\ufffd\ufffd'
    assert t.of("X", name=clean(HOSTILE))[0]["pid"] == GPU_PID
    # the raw file: control characters escaped, no raw invalid bytes
    raw = (tmp_path / "rec" / "trace.json").read_bytes()
    assert b"\xff" not in raw and b"\x01" not in raw and b"\x1f" not in raw


def test_times_are_clock_monotonic_microseconds_with_nanosecond_decimals(fixture_trace,
                                                                        tmp_path):
    t = fixture_trace
    text = (tmp_path / "rec" / "trace.json").read_text()
    assert '"ts":5000000001.000' in text  # the first launch, T0 + 1000 ns
    assert '"ts":5000000020.000,"dur":5.000' in text  # vec_add on the GPU
    assert "CLOCK_MONOTONIC" in t.meta["ts"]
    assert t.meta["skipped_lines"] == 0


def test_malformed_lines_are_skipped_and_counted(tmp_path):
    launches = LAUNCHES[:1] + [{"ts_ns": T0, "tid": 1, "kernel": "no_pid"}]
    rec = make_recording(tmp_path / "rec", launches=launches, unmatched=[], nccl=[])
    with open(rec / "launches.jsonl", "ab") as f:
        f.write(b'{"ts_ns": 12, "pid": 1, "tid": 1, "kern')  # a recording cut short
    proc = write_trace(rec)
    # the cut line is an "error:", so the command exits 1 (the CLI's rule), yet
    # trace.json is written from every other line
    assert proc.returncode == 1, proc.stderr
    t = Trace(rec / "trace.json")
    check_structure(t)
    assert t.meta["skipped_lines"] == 2 and t.meta["launches"] == 1
    assert "skipped" in proc.stderr


def test_empty_recording_gives_an_empty_valid_trace(tmp_path):
    rec = make_recording(tmp_path / "rec", launches=[], unmatched=[], nccl=[])
    proc = write_trace(rec)
    assert proc.returncode == 0, proc.stderr
    t = Trace(rec / "trace.json")
    assert t.events == [] and t.meta["launches"] == 0


def test_aggregate_set_without_times_is_skipped_and_missing_dir_fails(tmp_path):
    agg = tmp_path / "agg"
    agg.mkdir()
    (agg / "launches.folded").write_text("main;cudaLaunchKernel;[GPU_Kernel]k 3\n")
    proc = write_trace(agg)
    # expected of every daemon aggregate set: a debug line only, no warning
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    assert not (agg / "trace.json").exists()
    assert write_trace(tmp_path / "nowhere").returncode == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = write_trace(empty)
    assert proc.returncode == 1 and "launches.jsonl" in proc.stderr


# ---- CUDA graph replays: where each GPU record was captured ---------------------------------

REPLAY_STACK = ["main", "serve (/srv/srv.py:20)", "CUDAGraph.replay (/torch/cuda/graphs.py:88)",
                "cudaGraphLaunch"]
CAPTURES = {  # stacks.jsonl: a graph launch's (1) and its records' capture stacks
    1: REPLAY_STACK,
    # Python frames in the capture part: the innermost one is the capture site
    2: [*REPLAY_STACK, GRAPH_CAPTURE, "capture (/srv/srv.py:12)",
        "Model.forward (/srv/model.py:38)", "at::cuda::blas::gemm", "cudaLaunchKernel"],
    # native only: the caller of the launch API (the [NCCL] frame after it aside)
    3: ["main", "run", "cuGraphLaunch", GRAPH_CAPTURE, "capture_model", "capture_allreduce",
        "launch_named", "ncclLaunchKernel", "[NCCL]AllReduce"],
    # the launch API alone: its caller is one of the replay's frames, not said
    4: ["main", "run", "cuGraphLaunch", GRAPH_CAPTURE, "cuLaunchKernel"],
}


def capture_site(frames):
    """The line that captured a record, from its capture stack (docs/output-formats.md)."""
    part = frames[len(frames) - frames[::-1].index(GRAPH_CAPTURE):]
    python = [f for f in part if PY_FRAME.match(f)]
    if python:
        return python[-1]
    while part and part[-1].startswith("[NCCL]"):
        part = part[:-1]
    return part[-2] if len(part) >= 2 else None


def replay_kernel(name, start, capture=None, by="node"):
    extra = {"capture_stack_id": capture, "capture_by": by} if capture else {}
    return gpu_record("kernel", T0 + start, T0 + start + 500, name, correlation_id=30,
                      context=1, stream=7, graph_id=4, graph_node_id=start, **extra)


CAPTURE_LAUNCHES = [
    launch(1000, 4243, "cudaGraphLaunch", "<graph cudaGraphLaunch>", 1, [
        replay_kernel("gemm", 2000, 2), replay_kernel("allreduce", 3000, 3, "kernel_order"),
        replay_kernel("copy_out", 4000, 4), replay_kernel("softmax", 5000),
        replay_kernel("lost", 6000, 99)]),  # a capture stack stacks.jsonl does not have
]


def capture_recording(path, launches=CAPTURE_LAUNCHES):
    return write_recording(path, stacks=CAPTURES, launches=launches,
                           summary={"format_version": 1, "targets": [{"pid": PID, "comm": "t"}]})


def test_replayed_gpu_records_carry_their_capture_stack_and_site(tmp_path):
    rec = capture_recording(tmp_path / "rec")
    proc = write_trace(rec)
    assert proc.returncode == 0, proc.stderr
    # one record names a capture stack stacks.jsonl lacks: said, shown without it
    assert "capture_stack_id" in proc.stderr and "warning" in proc.stderr
    t = Trace(rec / "trace.json")
    check_structure(t)
    slices = by_name(e for e in t.of("X") if e["pid"] >= GPU_PID)
    for r in CAPTURE_LAUNCHES[0]["gpu"]:
        (e,) = slices[r["name"]]
        args, sid = e["args"], r.get("capture_stack_id")
        if sid in CAPTURES:
            site = capture_site(CAPTURES[sid])
            assert args["capture_stack"] == CAPTURES[sid] and args["capture_stack_id"] == sid
            assert args.get("capture_site") == site, r["name"]
        else:
            assert "capture_stack" not in args and "capture_site" not in args
        assert args.get("capture_by") == r.get("capture_by")
    sites = {r["name"]: capture_site(CAPTURES[r["capture_stack_id"]])
             for r in CAPTURE_LAUNCHES[0]["gpu"] if r.get("capture_stack_id") in CAPTURES}
    assert sites == {"gemm": "Model.forward (/srv/model.py:38)", "allreduce": "launch_named",
                     "copy_out": None}
    # the launch itself: its own stack, as any launch
    (cpu,) = t.of("X", name="cudaGraphLaunch")
    assert cpu["args"]["stack"] == CAPTURES[1] and "capture_stack" not in cpu["args"]


def test_malformed_capture_keys_skip_the_line(tmp_path):
    bad = json.loads(json.dumps(CAPTURE_LAUNCHES[0]))
    bad["gpu"][0]["capture_stack_id"] = "2"
    worse = json.loads(json.dumps(CAPTURE_LAUNCHES[0]))
    worse["ts_ns"] += 100
    worse["gpu"][1]["capture_by"] = 7
    rec = capture_recording(tmp_path / "rec", [bad, worse, CAPTURE_LAUNCHES[0]])
    proc = write_trace(rec)
    assert proc.returncode == 1
    assert 'launches.jsonl:1: gpu[0]: "capture_stack_id"' in proc.stderr, proc.stderr
    assert 'launches.jsonl:2: gpu[1]: "capture_by" is not a string' in proc.stderr
    t = Trace(rec / "trace.json")
    check_structure(t)
    assert t.meta["skipped_lines"] == 2 and t.meta["launches"] == 1


# ---- real recordings ------------------------------------------------------------------

@needs_bpf
def test_real_recording_without_gpu_records(tmp_path):
    rec = record(tmp_path, ["--", PROGS / "launcher", "--variant", "rt", "--iters", "20"])
    assert rec.returncode == 0, rec.stderr
    proc = write_trace(rec.path)
    assert proc.returncode == 0, proc.stderr
    t = Trace(rec.path / "trace.json")
    check_structure(t)
    lines = read_jsonl(rec.path / "launches.jsonl")
    outer = outer_launches(rec.path)
    assert len(outer) == 20
    cpu = t.of("X", cat="launch")
    assert sorted((e["pid"], e["tid"], ns(e["ts"])) for e in cpu) == \
        sorted((l["pid"], l["tid"], l["ts_ns"]) for l in outer)
    assert len(t.of("i", cat="launch")) == len(lines) - len(outer)
    assert not [e for e in t.events if e["pid"] >= GPU_PID] and not t.of("s")
    stacks = rec.stacks()
    for e in cpu:
        assert e["args"]["stack"] == stacks[e["args"]["stack_id"]]
        assert e["args"]["kernel"] and e["name"].startswith("cuda")
    pid = outer[0]["pid"]
    assert t.processes[pid] == "launcher"
    assert {t.threads[(e["pid"], e["tid"])] for e in cpu} == {l["comm"] for l in outer}


@needs_bpf
@needs_replay
@pytest.mark.parametrize("scenario", ["graph", "mixed"])
def test_real_recording_with_gpu_records_has_an_arrow_per_record(tmp_path, scenario):
    rec, _, _ = record_cupti_app(tmp_path, ["--scenario", scenario, "--iters", 4])
    proc = write_trace(rec)
    assert proc.returncode == 0, proc.stderr
    t = Trace(rec / "trace.json")
    flows = check_structure(t)
    outer = outer_launches(rec)
    want = sorted((l["pid"], l["tid"], l["ts_ns"], r["start_ns"], r["end_ns"])
                  for l in outer for r in l.get("gpu", []))
    assert want, "the test double sent no GPU records"
    got = sorted((cpu["pid"], cpu["tid"], ns(cpu["ts"]), ns(gpu["ts"]),
                  ns(gpu["ts"]) + ns(gpu["dur"])) for cpu, gpu in flows.values())
    assert got == want
    unmatched_path = rec / "gpu_unmatched.jsonl"
    unmatched = read_jsonl(unmatched_path) if unmatched_path.exists() else []
    gpu = [e for e in t.of("X") if e["pid"] >= GPU_PID]
    assert len(gpu) == len(want) + len(unmatched)
    assert len([e for e in gpu if e["args"].get("unmatched")]) == len(unmatched)
    if scenario == "graph":  # one graph launch, several kernels and a copy
        per_launch = {}
        for cpu, _ in flows.values():
            per_launch[(cpu["tid"], cpu["ts"])] = per_launch.get((cpu["tid"], cpu["ts"]), 0) + 1
        assert max(per_launch.values()) > 1
    assert t.meta["gpu_overlapping_records"] == 0


@needs_bpf
@needs_replay
def test_real_recording_of_graph_replays_names_each_record_capture(tmp_path):
    rec, _, _ = record_cupti_app(tmp_path, ["--scenario", "capture", "--iters", 3])
    proc = write_trace(rec)
    assert proc.returncode == 0, proc.stderr
    t = Trace(rec / "trace.json")
    check_structure(t)
    stacks = read_stacks(rec)
    records = {(r["graph_node_id"], r["start_ns"]): r for l in outer_launches(rec)
               for r in l.get("gpu", [])}
    tied = 0
    for e in t.of("X"):
        if e["pid"] < GPU_PID:
            continue
        r = records[(e["args"]["graph_node_id"], ns(e["ts"]))]
        sid = r.get("capture_stack_id")
        assert e["args"].get("capture_stack") == (stacks[sid] if sid else None)
        assert e["args"].get("capture_site") == (capture_site(stacks[sid]) if sid else None)
        assert e["args"].get("capture_by") == r.get("capture_by")
        tied += sid is not None
    assert tied == sum(1 for r in records.values() if r.get("capture_stack_id")) > 0
