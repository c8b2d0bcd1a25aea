"""profile.pb.gz, the pprof writer (src/writers/pprof.c), read back by the
real consumer: `go tool pprof` (Go's own profile decoder, which rejects
invalid UTF-8 and dangling ids).

Real recordings (native, Python, NCCL, CUPTI GPU records through the test
double) are turned into profiles and every sample pprof shows is compared
with what launches.jsonl + stacks.jsonl say: the stack leaf first with its
GPU leaf, the launch counts, the labels, the GPU time. Hand-made directories
cover what the workloads cannot produce: hostile frame names, "locations"
with modules and build ids, graph launches (and their replays' GPU records
tied to the stacks that captured them), pending and unmatched GPU work,
nested and malformed lines, and a daemon aggregate set with only the folded
files.

Recordings are checked through the profile.pb.gz `record` wrote (its
default --format); hand-made directories through `ncclprobe convert DIR
--format pprof`."""

import gzip
import json
import re
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

from lib.cupti_app import record_cupti_app, truth
from lib.folded import PY_FRAME, gpu_leaf, totals_by_leaf
from lib.jsonl import outer_launches, read_stacks
from lib.paths import NCCLPROBE, PROGS, REPO
from lib.processes import interpreters
from lib.run import convert, GO, go_pprof, made_by_record, record
from lib.skip import needs_binary, needs_bpf, needs_real_cudart, needs_replay
from lib.synthetic import GRAPH_CAPTURE, gpu_record, launch_row, write_recording

FAKE_NCCL = PROGS / "libfakenccl.so"

pytestmark = [pytest.mark.skipif(GO is None, reason="no `go` (go tool pprof reads the profiles)"),
              needs_binary(NCCLPROBE)]


def profile_of(rec_dir):
    """rec_dir/profile.pb.gz: in a recording, the one `record` wrote (its
    default --format); in a directory a test made by hand, written by
    `ncclprobe convert --format pprof`."""
    if made_by_record(rec_dir):
        path = Path(rec_dir) / "profile.pb.gz"
        assert path.exists(), "record did not write profile.pb.gz"
        return path
    proc = convert(rec_dir, "pprof")
    assert proc.returncode == 0, proc.stderr
    path = Path(rec_dir) / "profile.pb.gz"
    assert path.exists()
    return path


# ---- what pprof shows ------------------------------------------------------------------------

UNITS_NS = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}


def as_number(text):
    """A -traces value: a count, or a time ("4.10us") in ns."""
    m = re.match(r"^(-?[\d.]+)([a-z]*)$", text)
    return int(m.group(1)) if not m.group(2) else round(float(m.group(1)) * UNITS_NS[m.group(2)])


def traces(tmp_path, profile, *extra):
    """`pprof -traces` as Counter {(frames leaf first, frozenset of (label, value)): value}."""
    out = Counter()
    for block in go_pprof(tmp_path, "-traces", *extra, profile).split("-----------+")[1:]:
        labels, frames, value = set(), [], None
        for line in block.splitlines()[1:]:
            if not line.strip() or line.startswith("---"):
                continue
            if line.startswith(" " * 13):
                frames.append(line.strip())
            elif value is None and re.match(r"^ *[\w]+:  ", line):
                key, text = line.split(":  ", 1)
                labels.add((key.strip(), text.strip()))
            else:
                value, first = re.match(r"^ *(\S+)   (.*)$", line).groups()
                frames.append(first)
        if value is not None:
            out[(tuple(frames), frozenset(labels))] += as_number(value)
    return out


LOC = re.compile(r"^ *(\d+): (0x[0-9a-f]+) (?:M=(\d+) )?(.*) (\S*):(-?\d+) s=(-?\d+)(?:\(.*\))?$")
LOC_MORE = re.compile(r"^ {13}(.*) (\S*):(-?\d+) s=(-?\d+)(?:\(.*\))?$")


def raw(tmp_path, profile):
    """`pprof -raw`: {"types": [...], "samples": [(values, [location ids]), ...],
    "locations": {id: (address, mapping, [(function, file, line)...])},
    "mappings": [text lines], "text": the whole output}."""
    text = go_pprof(tmp_path, "-raw", profile)
    lines = text.splitlines()
    out = {"types": [], "samples": [], "locations": {}, "mappings": [], "text": text}
    section, last = None, None
    for line in lines:
        if line in ("Samples:", "Locations", "Mappings"):
            section = line
            continue
        if section == "Samples:":
            if not out["types"]:
                out["types"] = [t.replace("[dflt]", "") for t in line.split()]
            elif re.match(r"^ *-?\d+( +-?\d+)*:", line):
                values, ids = line.split(":")
                out["samples"].append(([int(v) for v in values.split()],
                                       [int(i) for i in ids.split()]))
        elif section == "Locations":
            m = LOC.match(line)
            if m:
                last = int(m.group(1))
                out["locations"][last] = (int(m.group(2), 16), int(m.group(3) or 0),
                                          [(m.group(4), m.group(5), int(m.group(6)))])
            elif LOC_MORE.match(line):
                m = LOC_MORE.match(line)
                out["locations"][last][2].append((m.group(1), m.group(2), int(m.group(3))))
        elif section == "Mappings" and line.strip():
            out["mappings"].append(line.strip())
    return out


def leaf_totals(r, index):
    """{innermost function of the leaf location: summed value `index`}."""
    out = Counter()
    for values, ids in r["samples"]:
        out[r["locations"][ids[0]][2][0][0]] += values[index]
    return +out


# ---- what the recording says -------------------------------------------------------------------

def trace_name(frame, lines=False):
    """A stacks.jsonl frame as `pprof -traces` prints it."""
    if frame.endswith(" [inlined]"):
        return frame[:-len(" [inlined]")] + " (inline)"
    m = PY_FRAME.match(frame)
    if m and not frame.startswith("["):
        if lines and m.group(3):
            return f"{m.group(1)} {m.group(2)}:{m.group(3)}"
        return m.group(1) if not lines else f"{m.group(1)} {m.group(2)}"
    return frame


def launch_leaf(launch):
    """Where a launch counts: its one GPU record, else the CPU side's kernel."""
    if launch.get("gpu_status") == "pending":
        return "[GPU_Launch_Pending]"
    gpu = launch.get("gpu") or []
    return gpu_leaf(gpu[0]) if len(gpu) == 1 else "[GPU_Kernel]" + launch["kernel"]


def launch_labels(launch, frames):
    labels = {("pid", str(launch["pid"])), ("tid", str(launch["tid"])),
              ("comm", launch["comm"]), ("kernel", launch["kernel"])}
    nccl = launch.get("nccl")
    if nccl:
        op = next((f[len("[NCCL]"):] for f in reversed(frames) if f.startswith("[NCCL]")), None)
        if op is None:
            op = "+".join(dict.fromkeys(o["op"] for o in nccl["ops"]))
        if op:
            labels.add(("nccl_op", op))
        labels.add(("comm_hash", nccl["comm_hash"]))
    return frozenset(labels)


def expected_traces(rec_dir, lines=False):
    """What `pprof -traces` must show for a recording, from its JSON files."""
    stacks = read_stacks(rec_dir)
    out = Counter()
    for launch in outer_launches(rec_dir):
        frames = stacks[launch["stack_id"]]
        names = [launch_leaf(launch)] + [trace_name(f, lines) for f in reversed(frames)]
        out[(tuple(names), launch_labels(launch, frames))] += 1
    return out


# ---- real recordings ------------------------------------------------------------------------------

@needs_bpf
def test_native_launches_every_sample_its_stack_count_and_labels(tmp_path):
    rec = record(tmp_path, ["--", PROGS / "launcher", "--variant", "rt,drv", "--threads", "2",
                            "--iters", "25"])
    assert rec.returncode == 0, rec.stderr
    profile = profile_of(rec.path)
    with gzip.open(profile) as f:  # gzip on disk, as pprof's spec asks
        assert len(f.read()) > 0

    got = traces(tmp_path, profile)
    assert got == expected_traces(rec.path)
    assert sum(got.values()) == len(outer_launches(rec.path)) == 100
    some = next(frames for frames, _ in got if "run_worker" in frames)
    assert some[0].startswith("[GPU_Kernel]")
    assert [f for f in some if f in ("run_worker", "liba_submit", "libb_launch")] == \
           ["libb_launch", "liba_submit", "run_worker"]

    top = go_pprof(tmp_path, "-top", profile)
    assert "Type: launches" in top and "Total samples = 100" in top
    for name in ("run_worker", "liba_submit", "libb_launch", "cudaLaunchKernel"):
        assert re.search(rf"\s{name}$", top, re.M), top
    r = raw(tmp_path, profile)
    assert r["types"] == ["launches/count"]  # no GPU records: no gpu_time
    # one label value per thread, and pprof filters on them
    tids = Counter(str(x["tid"]) for x in outer_launches(rec.path))
    assert len(tids) == 2
    tags = go_pprof(tmp_path, "-tags", profile)
    assert "comm:" in tags and "kernel:" in tags and "pid:" in tags
    for tid, n in tids.items():
        focused = traces(tmp_path, profile, f"-tagfocus=tid={tid}")
        assert sum(focused.values()) == n


@needs_bpf
@needs_real_cudart
def test_python_frames_with_files_and_lines(tmp_path):
    python = interpreters()[0]
    rec = record(tmp_path, ["--", python, REPO / "tests/progs/py_stacks.py", "--iters", "3",
                            "--threads", "1"], timeout=120)
    assert rec.returncode == 0, rec.stderr
    profile = profile_of(rec.path)
    assert traces(tmp_path, profile) == expected_traces(rec.path)
    with_lines = traces(tmp_path, profile, "-lines")
    want = Counter()
    for (frames, labels), n in expected_traces(rec.path, lines=True).items():
        want[(tuple(f for f in frames if re.search(r"\.py:\d+$", f)), labels)] += n
    got = Counter()
    for (frames, labels), n in with_lines.items():
        got[(tuple(f for f in frames if re.search(r"\.py:\d+$", f)), labels)] += n
    assert got == want
    assert any("launch " + str(REPO / "tests/progs/py_stacks.py") + ":" in f
               for frames, _ in got for f in frames)


@needs_bpf
@needs_binary(FAKE_NCCL)
@pytest.mark.parametrize("scenario", ["loop", "two-comms", "symmetric", "ce"])
def test_nccl_launches_labelled_with_op_and_communicator(tmp_path, scenario):
    rec = record(tmp_path, ["--", PROGS / "nccl_user", "--scenario", scenario, "--iters", 2,
                            "--nranks", 4, "--rank", 1],
                 env={"FAKE_NCCL_LOG": str(tmp_path / "fake.log")})
    assert rec.returncode == 0, rec.stderr
    profile = profile_of(rec.path)
    got = traces(tmp_path, profile)
    assert got == expected_traces(rec.path)
    ops = Counter(dict(labels).get("nccl_op") for _, labels in got.elements())
    assert None not in ops and sum(ops.values()) == len(outer_launches(rec.path))
    for frames, _ in got:
        assert frames[1].startswith("[NCCL]") and frames[2].startswith("ncclLaunch"), frames
    hashes = Counter(x["nccl"]["comm_hash"] for x in outer_launches(rec.path))
    assert len(hashes) == (2 if scenario == "two-comms" else 1)
    for h, n in hashes.items():
        assert sum(traces(tmp_path, profile, f"-tagfocus=comm_hash={h}").values()) == n
    tags = go_pprof(tmp_path, "-tags", profile)
    assert "nccl_op:" in tags and "comm_hash:" in tags


@needs_bpf
@needs_replay
@pytest.mark.parametrize("scenario", ["mixed", "eager"])
def test_gpu_time_from_cupti_records(tmp_path, scenario):
    """GPU records through the CUPTI test double: gpu_time per GPU leaf equals
    merged.gpu_ns.folded's (record's own GPU flame graph), launches stay launches."""
    out, expect, _ = record_cupti_app(tmp_path, ["--scenario", scenario, "--iters", "3"])
    profile = profile_of(out)
    r = raw(tmp_path, profile)
    assert r["types"] == ["launches/count", "gpu_time/nanoseconds"]
    assert leaf_totals(r, 1) == totals_by_leaf(out / "merged.gpu_ns.folded")
    # and from the truth: the GPU records the app scripted, by leaf
    launches, orphans, _ = truth(expect)
    scripted = Counter()
    for row in launches + orphans:
        for g in row.get("gpu", []):
            scripted[gpu_leaf(g)] += g["end_ns"] - g["start_ns"]
    assert leaf_totals(r, 1) == dict(scripted)
    assert sum(v[0] for v, _ in r["samples"]) == len(outer_launches(out))
    assert traces(tmp_path, profile) == expected_traces(out)
    top = go_pprof(tmp_path, "-top", "-sample_index=gpu_time", "-unit=ns", profile)
    total = sum(totals_by_leaf(out / "merged.gpu_ns.folded").values())
    assert f"Total samples = {total}ns" in top, top


# ---- hand-made directories -----------------------------------------------------------------------

# the launches of the hand-made directories: pid 42, thread 43 named "trainer"
launch = partial(launch_row, pid=42, tid=43, comm="trainer")


HOSTILE = [b'quote"d', b"a<b>&amp;c", b"semi;colon", b"bad\xffbyte\xfe", b"tab\\tand\\\\slash",
           b"\xe2\x82\xac euro", b"<module> (/srv/we\xffird dir/m.py:7)"]


def test_hostile_frame_names_stay_decodable(tmp_path):
    frames = b"[" + b",".join(b'"' + f.replace(b'"', b'\\"') + b'"' for f in HOSTILE) + b"]"
    d = write_recording(tmp_path / "hostile",
                        stacks=[b'{"stack_id":1,"frames":' + frames + b"}"],
                        launches=[json.dumps(launch(100, 1)).encode()
                                  .replace(b'"trainer"', b'"tr\xffainer"')
                                  .replace(b'"k"', b'"ker<&>\\"nel\xfe"')] * 3)
    profile = profile_of(d)
    got = traces(tmp_path, profile)
    [(frames, labels)] = got
    assert got[(frames, labels)] == 3
    # invalid bytes each became U+FFFD; everything else is as it was
    want = [f.decode("utf-8", "replace").replace("\\t", "\t").replace("\\\\", "\\")
            for f in reversed(HOSTILE)]
    want[0] = "<module>"  # a Python frame: its qualname
    assert list(frames) == ["[GPU_Kernel]ker<&>\"nel\ufffd", *want]
    assert dict(labels)["comm"] == "tr\ufffdainer"
    lines = traces(tmp_path, profile, "-lines")
    assert any("<module> /srv/we\ufffdird dir/m.py:7" in f for fr, _ in lines for f in fr)
    go_pprof(tmp_path, "-top", profile)
    go_pprof(tmp_path, "-raw", profile)


def test_locations_give_mappings_lines_and_inlined_frames(tmp_path):
    lib = {"module": "/opt/app/libtrain.so", "build_id": "0123456789abcdef"}
    exe = {"module": "/opt/app/trainer", "build_id": "feedface"}
    d = write_recording(tmp_path / "locs", stacks=[{
        "stack_id": 5,
        "frames": ["main", "train", "step [inlined]", "launch", "[libtrain.so+0x99]",
                   "cudaLaunchKernel"],
        "locations": [{**exe, "offset": "0x1100", "file": "/src/main.c", "line": 10},
                      {**lib, "offset": "0x2200", "file": "/src/train.c", "line": 20},
                      {**lib, "offset": "0x2200", "file": "/src/step.h", "line": 3},
                      {**lib, "offset": "0x2300", "file": "/src/train.c", "line": 44},
                      {**lib, "offset": "0x99"},
                      {}]}],
        launches=[launch(100 + i, 5) for i in range(4)])
    profile = profile_of(d)
    r = raw(tmp_path, profile)
    by_name = {}
    for address, mapping, lines in r["locations"].values():
        by_name[lines[-1][0]] = (address, mapping, lines)
    # `step` was inlined into `train`: one location, innermost line first
    assert by_name["train"][2] == [("step", "/src/step.h", 3), ("train", "/src/train.c", 20)]
    assert by_name["train"][0] == 0x2200
    assert by_name["launch"][:2] == (0x2300, by_name["train"][1])
    assert by_name["main"][0] == 0x1100 and by_name["main"][1] != by_name["train"][1]
    assert by_name["[libtrain.so+0x99]"][:2] == (0x99, by_name["train"][1])
    assert by_name["cudaLaunchKernel"][1:] == (0, [("cudaLaunchKernel", "", 0)])
    mappings = "\n".join(r["mappings"])
    assert re.search(r"/opt/app/libtrain\.so 0123456789abcdef \[FN\]\[FL\]\[LN\]\[IN\]", mappings)
    assert re.search(r"/opt/app/trainer feedface \[FN\]\[FL\]\[LN\]", mappings)
    with_lines = traces(tmp_path, profile, "-lines")
    [frames] = [f for f, _ in with_lines]
    assert frames[:4] == ("[GPU_Kernel]k", "cudaLaunchKernel", "[libtrain.so+0x99]",
                          "launch /src/train.c:44")
    assert frames[4:] == ("step /src/step.h:3 (inline)", "train /src/train.c:20",
                          "main /src/main.c:10")


def test_graph_pending_unmatched_nested_and_malformed_lines(tmp_path):
    graph = [gpu_record("kernel", 1000, 1600, "node_a"),
             gpu_record("kernel", 1700, 1900, "node_b"),
             gpu_record("memcpy", 2000, 2500, copy_kind="HtoD")]
    d = write_recording(
        tmp_path / "gpu", stacks={1: ["main", "cudaGraphLaunch"], 2: ["main", "cudaLaunchKernel"]},
        launches=[
            launch(100, 1, "<graph cudaGraphLaunch>", gpu=graph),
            launch(200, 2, "k1", gpu=[gpu_record("kernel", 3000, 3100, "k1")]),
            launch(210, 2, "k1", gpu=[gpu_record("kernel", 3200, 3400, "k1")]),
            launch(220, 2, "k1", api="cuLaunchKernel", nested=True),  # inside the one before
            launch(300, 2, "k1", gpu_status="pending"),
            launch(310, 2, "k1", gpu_status="none"),
            b'{"ts_ns": 1, "this line is": broken',
            launch(400, 99, "k2"),  # a stack stacks.jsonl does not have
        ],
        unmatched=[gpu_record("memset", 5000, 5800)],
        summary={"start_time_unix_ns": 1.7e18, "duration_s": 2})
    proc = convert(d, "pprof")
    # the broken line is an "error:", so the command exits 1 (the CLI's rule), yet the
    # profile is written from every other line
    assert proc.returncode == 1 and "1 malformed line" in proc.stderr, proc.stderr
    assert "stack_id" in proc.stderr  # the unknown stack is said too
    profile = d / "profile.pb.gz"
    assert profile.exists()
    r = raw(tmp_path, profile)
    assert r["types"] == ["launches/count", "gpu_time/nanoseconds"]
    assert leaf_totals(r, 0) == {"[GPU_Kernel]<graph cudaGraphLaunch>": 1, "[GPU_Kernel]k1": 3,
                                 "[GPU_Launch_Pending]": 1, "[GPU_Kernel]k2": 1}
    assert leaf_totals(r, 1) == {"[GPU_Kernel]node_a": 600, "[GPU_Kernel]node_b": 200,
                                 "[GPU_Memcpy]HtoD": 500, "[GPU_Kernel]k1": 300,
                                 "[GPU_Memset]": 800}
    got = traces(tmp_path, profile)
    unmatched = traces(tmp_path, profile, "-sample_index=gpu_time", "-focus=no launch stack")
    assert [f for f, _ in unmatched] == [("[GPU_Memset]", "[no launch stack]")]
    assert (("[GPU_Kernel]k2",), frozenset({("pid", "42"), ("tid", "43"), ("comm", "trainer"),
                                            ("kernel", "k2")})) in got
    assert "Duration: 5.70us" in go_pprof(tmp_path, "-top", profile)  # 100 ns .. 5800 ns


# ---- CUDA graph replays tied to the launches that captured them ------------------------------

REPLAY_STACK = ["main", "serve (/srv/srv.py:20)", "CUDAGraph.replay (/torch/cuda/graphs.py:88)",
                "cudaGraphLaunch"]
CAPTURE_STACKS = {
    1: REPLAY_STACK,
    2: [*REPLAY_STACK, GRAPH_CAPTURE, "capture (/srv/srv.py:12)",
        "Model.forward (/srv/model.py:38)", "at::cuda::blas::gemm", "cudaLaunchKernel"],
    3: [*REPLAY_STACK, GRAPH_CAPTURE, "capture (/srv/srv.py:12)",
        "Model.forward (/srv/model.py:40)", "ncclLaunchKernel", "[NCCL]AllReduce"]}


def replay_kernel(name, start, end, capture=None, by="node"):
    extra = {"capture_stack_id": capture, "capture_by": by} if capture else {}
    return gpu_record("kernel", start, end, name, graph_id=3, **extra)


CAPTURE_LAUNCHES = [
    # tied but for softmax: the launch counts once for it, under its own stack
    launch(100, 1, "<graph cudaGraphLaunch>", api="cudaGraphLaunch", gpu=[
        replay_kernel("gemm", 1000, 1600, 2), replay_kernel("allreduce", 1700, 1900, 3),
        replay_kernel("softmax", 2000, 2100)]),
    # every record tied (the all-reduce by kernel order)
    launch(200, 1, "<graph cudaGraphLaunch>", api="cudaGraphLaunch", gpu=[
        replay_kernel("gemm", 3000, 3500, 2),
        replay_kernel("allreduce", 3600, 3700, 3, "kernel_order")]),
    # one record names a capture stack stacks.jsonl lacks: under its launch
    launch(300, 1, "<graph cudaGraphLaunch>", api="cudaGraphLaunch", gpu=[
        replay_kernel("gemm", 4000, 4100, 99), replay_kernel("softmax", 4200, 4300)]),
]


def expected_capture_samples(rows, stacks):
    """({(frames leaf first, labels): launches}, {...: GPU ns}) that pprof must
    show: a record tied to a capture stack stacks.jsonl has counts as one
    launch of that stack, labelled with its kernel, the stack's [NCCL] op and
    capture_by; the others as before (the launch once under its CPU-side
    kernel when it has several records, each record's time under its leaf)."""
    counts, ns = Counter(), Counter()
    for row in rows:
        gpu = row["gpu"]
        tied = [g for g in gpu if g.get("capture_stack_id") in stacks]
        base = {("pid", str(row["pid"])), ("tid", str(row["tid"])), ("comm", row["comm"])}
        own = tuple(trace_name(f) for f in reversed(stacks[row["stack_id"]]))
        own_labels = frozenset(base | {("kernel", row["kernel"])})
        if len(gpu) > 1 and len(tied) < len(gpu):
            counts[(("[GPU_Kernel]" + row["kernel"], *own), own_labels)] += 1
        for g in gpu:
            if g in tied:
                frames = stacks[g["capture_stack_id"]]
                labels = base | {("kernel", g["name"]), ("capture_by", g["capture_by"])}
                ops = [f[len("[NCCL]"):] for f in frames if f.startswith("[NCCL]")]
                labels |= {("nccl_op", ops[-1])} if ops else set()
                key = ((gpu_leaf(g), *(trace_name(f) for f in reversed(frames))),
                       frozenset(labels))
                counts[key] += 1
            else:
                key = ((gpu_leaf(g), *own), own_labels)
                counts[key] += len(gpu) == 1
            ns[key] += g["end_ns"] - g["start_ns"]
    return +counts, +ns


def test_replayed_records_count_under_their_capture_stack(tmp_path):
    d = write_recording(tmp_path / "graph", stacks=CAPTURE_STACKS, launches=CAPTURE_LAUNCHES)
    proc = convert(d, "pprof")
    assert proc.returncode == 0, proc.stderr
    assert "capture_stack_id" in proc.stderr and "warning" in proc.stderr  # the one it lacks
    counts, ns = expected_capture_samples(CAPTURE_LAUNCHES, CAPTURE_STACKS)
    profile = d / "profile.pb.gz"
    assert +traces(tmp_path, profile) == counts
    assert +traces(tmp_path, profile, "-sample_index=gpu_time") == ns
    # the capture-time line is in the profile, and pprof filters on capture_by
    with_lines = traces(tmp_path, profile, "-lines")
    assert any("Model.forward /srv/model.py:38" in f for fr, _ in with_lines for f in fr)
    by_order = sum(1 for row in CAPTURE_LAUNCHES for g in row["gpu"]
                   if g.get("capture_by") == "kernel_order")
    assert sum(traces(tmp_path, profile, "-tagfocus=capture_by=kernel_order").values()) == \
        by_order
    assert "capture_by:" in go_pprof(tmp_path, "-tags", profile)


@needs_bpf
@needs_replay
def test_real_recording_of_graph_replays(tmp_path):
    """cupti_app --scenario capture: each replayed record under the line that captured it."""
    out, _, _ = record_cupti_app(tmp_path, ["--scenario", "capture", "--iters", "3"])
    rows = [x for x in outer_launches(out) if not x.get("captured")]
    counts, ns = expected_capture_samples(rows, read_stacks(out))
    assert any("[graph capture]" in frames for frames, _ in counts)
    profile = profile_of(out)
    assert +traces(tmp_path, profile) == counts
    assert +traces(tmp_path, profile, "-sample_index=gpu_time") == ns


def test_malformed_capture_key_skips_the_launch(tmp_path):
    bad = json.loads(json.dumps(CAPTURE_LAUNCHES[1]))
    bad["gpu"][0]["capture_stack_id"] = -2
    d = write_recording(tmp_path / "graph", stacks=CAPTURE_STACKS,
                        launches=[CAPTURE_LAUNCHES[0], bad])
    proc = convert(d, "pprof")
    assert proc.returncode == 1 and "1 malformed line" in proc.stderr
    assert 'launches.jsonl:2: gpu[0]: "capture_stack_id"' in proc.stderr, proc.stderr
    counts, _ = expected_capture_samples(CAPTURE_LAUNCHES[:1], CAPTURE_STACKS)
    assert +traces(tmp_path, d / "profile.pb.gz") == counts


def test_daemon_aggregate_set_from_folded_files(tmp_path):
    d = write_recording(tmp_path / "gpu17-4242-python3-20261122T161107Z", files={
        "merged.folded":
            "main;train (train.py:40);step (model.py:7);cudaLaunchKernel;[GPU_Kernel]gemm 30\n"
            "main;train (train.py:41);std::function<void ()>::operator();"
            "(anonymous namespace)::run;cudaLaunchKernel;[GPU_Kernel]softmax<float> 12\n"
            "main;nccl_step;ncclLaunchKernel;[NCCL]AllReduce;[GPU_Kernel]ncclDevKernel_Generic 5\n"
            "[no launch stack];[GPU_Memcpy]HtoD 2\n"
            "this line has no count\n",
        "merged.gpu_ns.folded":
            "main;train (train.py:40);step (model.py:7);cudaLaunchKernel;[GPU_Kernel]gemm 90000\n"
            "[no launch stack];[GPU_Memcpy]HtoD 700\n",
        "launches.folded": "main;cudaLaunchKernel;[GPU_Kernel]gemm 30\n",
        "window.json": json.dumps({
            "format_version": 1,
            "process": {"pid": 4242, "ns_pid": 7, "comm": "python3", "exe": "/usr/bin/python3"},
            "window": {"kind": "aggregate", "start_unix_ns": 1795000000000000000,
                       "end_unix_ns": 1795000060000000000}})})
    profile = profile_of(d)
    r = raw(tmp_path, profile)
    assert r["types"] == ["launches/count", "gpu_time/nanoseconds"]
    assert leaf_totals(r, 0) == {"[GPU_Kernel]gemm": 30, "[GPU_Kernel]softmax<float>": 12,
                                 "[GPU_Kernel]ncclDevKernel_Generic": 5, "[GPU_Memcpy]HtoD": 2}
    assert leaf_totals(r, 1) == {"[GPU_Kernel]gemm": 90000, "[GPU_Memcpy]HtoD": 700}
    got = traces(tmp_path, profile, "-lines")
    labels = frozenset({("pid", "4242"), ("comm", "python3")})
    assert got[(("[GPU_Kernel]gemm", "cudaLaunchKernel", "step model.py:7", "train train.py:40",
                 "main"), labels)] == 30
    # C++ names are not taken for Python frames; pprof keeps their <...>
    assert got[(("[GPU_Kernel]softmax<float>", "cudaLaunchKernel", "(anonymous namespace)::run",
                 "std::function<void ()>::operator()", "train train.py:41", "main"),
                labels)] == 12
    top = go_pprof(tmp_path, "-top", profile)
    assert "Time: Nov 18, 2026 at 11:06am (UTC)" in top and "Duration: 60s," in top, top


def test_a_directory_without_launches_is_refused(tmp_path):
    proc = convert(tmp_path, "pprof")
    assert proc.returncode == 1
    assert "neither launches.jsonl nor merged.folded" in proc.stderr
    assert not (tmp_path / "profile.pb.gz").exists()
    assert not list(tmp_path.glob(".profile*"))
    assert not list(tmp_path.glob("*.tmp"))
