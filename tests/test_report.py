"""`ncclprobe report [DIR]`: the call stacks that launched the matching kernels
of a recording, most frequent first (docs/report.md).

The recordings are hand-made (tests/fixtures/report/*, or written by a test
below): every expected count, order and window here follows from how the
fixture was built, described next to it. No root, no BPF, no GPU needed,
but for one real recording of CUDA graph replays (the CUPTI test double).

Fixtures:
- nccl_eager (pid 4242, one thread, no CUPTI): two broadcasts from init_model
  (stack 4, ts 1000100 and 1000200); then three iterations at 2000000,
  3000000, 4000000, each: +100 a cuBLAS gemm (stack 2, under Model.forward
  line 38), +200 an all-reduce (stack 1, Model.forward line 40) with a nested
  cuLaunchKernelEx line (stack 6) right after it, +300 a send/recv (stack 3,
  [NCCL]Send+Recv) in iterations 1 and 2, an all-reduce from a DDP hook
  (stack 5) in iteration 3; a last gemm at 4000400. Stacks 1 and 5 share
  their 9 innermost frames.
- cupti_graph (pid 5151, CUPTI records): eager all-reduces (stack 1) at
  10000000 and 50000000, one GPU kernel each; CUDA graph replays (stack 2) at
  20000000, 30000000, 40000000, each running a memcpy, two gemms and one
  ncclDevKernel_AllReduce_Sum_bf16_RING_LL (graph_id 7, GPU start ts+3000);
  top-k launches (stack 3) at ts+100000 of those, the last one pending (so
  named from the CPU side). gpu_unmatched.jsonl: two AllGather kernels
  (5000000, 5200000) and a memcpy.
- functions (pid 100): thread 100: 1000 stack 1 (run:10 > A.forward a.py:5,
  NCCL), 1100 stack 2 (run:10 > A.forward a.py:7, not NCCL), 1200 stack 1,
  2000 and 2100 stack 3 (run:12 > A.forward, NCCL), 3000 stack 4 (no forward),
  4000 stack 1. Thread 101: 1500, 1600 stack 5 (B.forward, NCCL; the second
  with a GPU kernel ending at 1900). Thread 102: 1800, 1950 stack 6
  (AllGather, no forward).
- no_nccl: a CUDA program: vector_add_kernel (stack 1) twice, scale_kernel
  (stack 2), an <unnamed 0x...> kernel (stack 3).

The CUDA graph recordings (replays under the lines that captured them) are
written by the tests below from the tables next to them: TIED (GPU records
tied to their capture stacks) and REPLAYED (graph_replays.jsonl, no GPU
records).
"""

import json
import re
import shutil
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

from lib.jsonl import read_stacks
from lib.paths import NCCLPROBE
from lib.run import FAILURE, run_ncclprobe, sanitizer_said, USAGE
from lib.cupti_app import record_cupti_app
from lib.jsonl import outer_launches
from lib.skip import needs_binary, needs_bpf, needs_replay
from lib.synthetic import composed, gpu_record, graph_replay_row, launch_row, write_recording

pytestmark = needs_binary(NCCLPROBE)
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "report"
EAGER, GRAPH, FUNCS, PLAIN = (FIXTURES / n for n in ("nccl_eager", "cupti_graph", "functions",
                                                     "no_nccl"))
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
ARB = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
AG = "ncclDevKernel_AllGather_RING_LL"
BCAST = "ncclDevKernel_Broadcast_RING_LL"
SENDRECV = "ncclDevKernel_SendRecv"
GENERIC = "ncclDevKernel_Generic"
TOPK_CPU = "at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>"


def run(*args, cwd=None):
    proc = run_ncclprobe(["report", *args], cwd=cwd)
    # a sanitizer build's findings must not pass for an expected exit status 1
    assert not sanitizer_said(proc.stderr), proc.stderr
    return proc


def ok(*args, cwd=None):
    proc = run(*args, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def kept(frames, depth=12):
    return frames[-depth:] if depth else frames


def parse(text):
    """The text output as (header, [(frames, {kernel: count}, count, cut)])."""
    header, _, body = text.partition("\n\n")
    blocks = []
    for block in body.split("\n\n"):
        lines = block.splitlines()
        if not lines or not lines[-1].startswith("Appeared "):
            continue
        count = int(re.fullmatch(r"Appeared (\d+) times", lines[-1]).group(1))
        frames = [ln[2:] for ln in lines[:-1] if not ln.startswith("  [GPU_Kernel]")]
        leaves = [ln[len("  [GPU_Kernel]"):] for ln in lines[:-1]
                  if ln.startswith("  [GPU_Kernel]")]
        if len(leaves) == 1:
            kernels = {leaves[0]: count}
        else:
            kernels = {m.group(1): int(m.group(2))
                       for m in (re.fullmatch(r"(.*) \((\d+)\)", leaf) for leaf in leaves)}
        cut = bool(frames) and frames[0] == "..."
        blocks.append((frames[1:] if cut else frames, kernels, count, cut))
    return header, blocks


def report_json(*args):
    return json.loads(ok(*args, "--json"))


# ---- counts, order, nesting -------------------------------------------------------


def test_default_nccl_stacks_counts_and_order():
    s = read_stacks(EAGER)
    header, blocks = parse(ok(EAGER))
    assert "NCCL kernels" in header and "8 kernels in 4 stacks" in header
    # stack 4 and stack 3 both appear twice: the broadcasts came first
    assert blocks == [
        (kept(s[1]), {AR: 3}, 3, True),
        (kept(s[4]), {BCAST: 2}, 2, True),
        (kept(s[3]), {SENDRECV: 2}, 2, True),
        (kept(s[5]), {AR: 1}, 1, True),
    ]


def test_nested_launches_are_not_counted():
    _, blocks = parse(ok(EAGER, "--depth", 0))
    assert all(frames[-1] != "cuLaunchKernelEx" for frames, *_ in blocks)
    assert sum(b[2] for b in blocks) == 8  # 11 if the 3 nested lines counted


# the launches of the recordings written below: pid 7's thread 7 ("w")
launch = partial(launch_row, pid=7, tid=7, comm="w", api="ncclLaunchKernel", probe_id=1,
                 func="0x1", stream="0x0")


def test_ties_broken_by_first_appearance_time_not_file_order(tmp_path):
    # Lines are written in retirement order: stack 2's launch (ts 50) is on the
    # first line but stack 1's (ts 10) came first.
    rec = write_recording(tmp_path / "r", {1: ["main", "a", "ncclLaunchKernel"],
                                           2: ["main", "b", "ncclLaunchKernel"]},
                          [launch(50, 2, GENERIC), launch(10, 1, GENERIC), launch(60, 2, GENERIC),
                           launch(20, 1, GENERIC), launch(5, 1, "scale_kernel")])
    _, blocks = parse(ok(rec))
    assert [b[0][1] for b in blocks] == ["a", "b"]
    assert [b[2] for b in blocks] == [2, 2]


def test_start_only_window_tie():
    s = read_stacks(EAGER)
    _, blocks = parse(ok(EAGER, "--start-ts", 4000000))
    assert [(b[0], b[2]) for b in blocks] == [(kept(s[1]), 1), (kept(s[5]), 1)]


# ---- filters -----------------------------------------------------------------------


def test_kernel_substring_case_sensitive():
    s = read_stacks(EAGER)
    _, blocks = parse(ok(EAGER, "--kernel", "sgemm"))
    assert blocks == [(s[2], {"ampere_sgemm_128x64_nn": 4}, 4, False)]
    _, blocks = parse(ok(EAGER, "--kernel", "Broadcast"))
    assert [(b[1], b[2]) for b in blocks] == [({BCAST: 2}, 2)]
    header, blocks = parse(ok(EAGER, "--kernel", "broadcast"))
    assert blocks == [] and "0 kernels" in header


@pytest.mark.parametrize("op,expected", [
    ("AllReduce", [(1, 3), (5, 1)]),
    ("allreduce", [(1, 3), (5, 1)]),
    ("send", [(3, 2)]),
    ("RECV", [(3, 2)]),
    ("Broadcast", [(4, 2)]),
])
def test_op_filter(op, expected):
    s = read_stacks(EAGER)
    _, blocks = parse(ok(EAGER, "--op", op))
    assert [(b[0], b[2]) for b in blocks] == [(kept(s[k]), n) for k, n in expected]


def test_op_filter_no_such_op():
    out = ok(EAGER, "--op", "AllGather")
    assert "No launch ran NCCL kernels with op AllGather in the recording." in out


def test_op_from_nccl_frame_of_the_stack(tmp_path):
    # no "nccl" object (its ops could not be read): the [NCCL] frame names them
    rec = write_recording(tmp_path / "r", {1: ["main", "ncclLaunchKernel", "[NCCL]Send+Recv"],
                                           2: ["main", "ncclLaunchKernel", "[NCCL]AllReduce"]},
                          [launch(1, 1, "<nccl kernel>"), launch(2, 2, "<nccl kernel>"),
                           launch(3, 2, "<nccl kernel>")])
    _, blocks = parse(ok(rec, "--op", "recv"))
    assert [(b[0][-1], b[2]) for b in blocks] == [("[NCCL]Send+Recv", 1)]
    _, blocks = parse(ok(rec, "--op", "AllReduce"))
    assert [(b[0][-1], b[1]) for b in blocks] == [("[NCCL]AllReduce", {"<nccl kernel>": 2})]
    assert parse(ok(rec, "--op", "Send+Recv"))[1] == []


def test_window_start_and_duration():
    s = read_stacks(EAGER)
    header, blocks = parse(ok(EAGER, "--start-ts", 2000000, "--duration", 2000000))
    assert "window [2000000, 4000000) ns" in header
    assert [(b[0], b[2]) for b in blocks] == [(kept(s[1]), 2), (kept(s[3]), 2)]


def test_window_is_half_open():
    _, blocks = parse(ok(EAGER, "--start-ts", 2000200, "--duration", 100))
    assert [(b[1], b[2]) for b in blocks] == [({AR: 1}, 1)]  # 2000300 is out


def test_duration_alone_starts_at_first_launch():
    s = read_stacks(EAGER)
    header, blocks = parse(ok(EAGER, "--duration", 1000101))
    assert "window [1000100, 2000201) ns" in header
    assert [(b[0], b[2]) for b in blocks] == [(kept(s[4]), 2), (kept(s[1]), 1)]


# ---- --depth, --top, --output, --json -------------------------------------------------


def test_depth_cuts_then_groups():
    s = read_stacks(EAGER)
    assert s[1][-9:] == s[5][-9:] and s[1][-10:] != s[5][-10:]
    _, blocks = parse(ok(EAGER, "--depth", 9))
    assert blocks == [(s[1][-9:], {AR: 4}, 4, True), (s[4][-9:], {BCAST: 2}, 2, True),
                      (s[3][-9:], {SENDRECV: 2}, 2, True)]
    _, blocks = parse(ok(EAGER, "--depth", 10))
    assert len(blocks) == 4


def test_depth_zero_and_short_stacks_are_not_marked():
    s = read_stacks(EAGER)
    text = ok(EAGER, "--depth", 0)
    assert "  ..." not in text
    assert parse(text)[1][0] == (s[1], {AR: 3}, 3, False)
    assert "  ..." not in ok(EAGER, "--kernel", "sgemm")  # 10 frames: under the default 12
    assert ok(EAGER, "--depth", 3).split("\n\n")[1].splitlines()[:4] == [
        "  ...", "  doLaunches", "  ncclLaunchKernel", "  [NCCL]AllReduce"]


def test_top():
    header, blocks = parse(ok(EAGER, "--top", 2))
    assert "8 kernels in 4 stacks (top 2 shown)" in header
    assert [b[2] for b in blocks] == [3, 2]
    doc = report_json(EAGER, "--top", 1)
    assert (doc["total"], doc["stack_count"], len(doc["stacks"])) == (8, 4, 1)


def test_output_file(tmp_path):
    out = tmp_path / "report.txt"
    proc = run(EAGER, "--output", out)
    assert proc.returncode == 0 and proc.stdout == ""
    assert out.read_text() == ok(EAGER)
    proc = run(EAGER, "-o", tmp_path / "r.json", "--json")
    assert json.loads((tmp_path / "r.json").read_text())["total"] == 8


def test_output_file_unwritable(tmp_path):
    proc = run(EAGER, "--output", tmp_path / "no" / "such" / "file")
    assert proc.returncode == FAILURE and "cannot write" in proc.stderr


def test_json_output():
    s = read_stacks(EAGER)
    doc = report_json(EAGER)
    assert doc["window"] is None and doc["diagnostics"] == []
    assert doc["filters"] == {"kernel": None, "nccl": True, "op": None, "function": None,
                              "index": None, "start_ts": None, "duration": None, "depth": 12,
                              "top": None}
    assert doc["total"] == 8 and doc["stack_count"] == 4
    assert doc["stacks"][0] == {"count": 3, "truncated": True, "frames": kept(s[1]),
                                "kernels": {AR: 3}}
    assert [x["count"] for x in doc["stacks"]] == [3, 2, 2, 1]
    doc = report_json(EAGER, "--kernel", "sgemm", "--op", "x", "--start-ts", 5, "--duration", 9)
    assert doc["filters"]["kernel"] == "sgemm" and doc["filters"]["nccl"] is False
    assert doc["window"] == {"start_ns": 5, "end_ns": 14, "occurrence": None}
    assert report_json(EAGER, "--start-ts", 5)["window"]["end_ns"] is None


def test_default_directory_is_the_current_one():
    assert ok(cwd=EAGER) == ok(EAGER)


# ---- GPU records ------------------------------------------------------------------------


def test_gpu_kernel_records_are_counted():
    s = read_stacks(GRAPH)
    _, blocks = parse(ok(GRAPH, "--depth", 0))
    # 3 replays x 1 NCCL kernel each, under the graph launch; 2 eager all-reduces
    assert blocks == [(s[2], {ARB: 3}, 3, False), (s[1], {ARB: 2}, 2, False)]
    _, blocks = parse(ok(GRAPH, "--kernel", "sm90_xmma"))
    assert [(b[0], b[2]) for b in blocks] == [(s[2], 6)]


def test_several_kernel_names_under_one_stack():
    # 3 top-k launches named by CUPTI, the pending one by its CPU-side name
    text = ok(GRAPH, "--kernel", "gatherTopK")
    _, blocks = parse(text)
    assert len(blocks) == 1 and blocks[0][2] == 4
    gpu_name = next(k for k in blocks[0][1] if k.startswith("void "))
    assert blocks[0][1] == {gpu_name: 3, TOPK_CPU: 1}
    assert f"  [GPU_Kernel]{TOPK_CPU} (1)\nAppeared 4 times\n" in text


def test_op_filter_leaves_graph_replays_out():
    s = read_stacks(GRAPH)
    _, blocks = parse(ok(GRAPH, "--op", "AllReduce", "--depth", 0))
    assert blocks == [(s[1], {ARB: 2}, 2, False)]


# ---- empty results: diagnostics -------------------------------------------------------------


def test_graph_replay_diagnostic():
    s = read_stacks(GRAPH)
    text = ok(GRAPH, "--op", "AllReduce", "--start-ts", 20000000, "--duration", 25000000,
              "--depth", 0)
    assert "No launch ran NCCL kernels with op AllReduce in the window." in text
    assert re.search(r"3 NCCL kernels ran in the window from CUDA graph replays.*their launch "
                     r"stacks are the graph launches:", text)
    body = text.split("graph launches:\n\n", 1)[1]
    assert parse("header\n\n" + body)[1] == [(s[2], {ARB: 3}, 3, False)]
    doc = report_json(GRAPH, "--op", "AllReduce", "--start-ts", 20000000, "--duration", 25000000)
    assert doc["total"] == 0 and doc["stacks"] == []
    kinds = [d["kind"] for d in doc["diagnostics"]]
    assert kinds == ["no_match", "graph_replays"]
    replay = doc["diagnostics"][1]
    assert replay["count"] == 3 and replay["stacks"][0]["frames"] == s[2]


def test_graph_replay_diagnostic_uses_gpu_start_times():
    # the replay launched at 20000000 ran its NCCL kernel at 20003000: in the window,
    # though the launch itself is not
    doc = report_json(GRAPH, "--start-ts", 20001500, "--duration", 10000)
    assert doc["total"] == 0
    assert [(d["kind"], d.get("count")) for d in doc["diagnostics"]] == [
        ("no_match", None), ("graph_replays", 1)]


def test_unmatched_diagnostic():
    text = ok(GRAPH, "--kernel", "AllGather")
    assert "2 kernels containing \"AllGather\" ran in the recording without any probed launch" \
        in text
    assert f"  {AG} (2)" in text
    doc = report_json(GRAPH, "--kernel", "AllGather")
    unmatched = doc["diagnostics"][1]
    assert (unmatched["kind"], unmatched["count"], unmatched["kernels"]) == ("unmatched", 2, {AG: 2})
    assert "without any probed launch" in unmatched["message"]
    # outside the window they do not count: the NCCL-like kernels are listed instead
    doc = report_json(GRAPH, "--kernel", "AllGather", "--start-ts", 6000000)
    assert [d["kind"] for d in doc["diagnostics"]] == ["no_match", "nccl_kernels_seen"]


def test_nccl_kernels_seen_listing():
    text = ok(GRAPH, "--kernel", "Broadcast")
    assert "No launch ran kernels containing \"Broadcast\" in the recording." in text
    # 2 eager + 3 replays; 2 unmatched
    assert text.endswith(f"with any op):\n  {ARB} (5)\n  {AG} (2)\n\n")
    doc = report_json(GRAPH, "--kernel", "Broadcast")
    assert doc["diagnostics"][1]["kernels"] == {ARB: 5, AG: 2}


def test_no_nccl_kernels_seen():
    proc = run(PLAIN)
    assert proc.returncode == 0
    assert "No NCCL-like kernel" in proc.stdout and "--kernel" in proc.stdout
    doc = report_json(PLAIN)
    assert [d["kind"] for d in doc["diagnostics"]] == ["no_match", "no_nccl_kernels"]


def test_plain_cuda_kernels_and_placeholders():
    s = read_stacks(PLAIN)
    _, blocks = parse(ok(PLAIN, "--kernel", "_kernel"))
    assert blocks == [(s[1], {"vector_add_kernel": 2}, 2, False),
                      (s[2], {"scale_kernel": 1}, 1, False)]
    _, blocks = parse(ok(PLAIN, "--kernel", "<unnamed"))
    assert blocks == [(s[3], {"<unnamed 0x7f3a2c004000>": 1}, 1, False)]


def test_empty_recording(tmp_path):
    rec = write_recording(tmp_path / "r", {}, [])
    assert "No NCCL-like kernel" in ok(rec)


# ---- --function / --index -------------------------------------------------------------------


FORWARD_OCCURRENCES = [  # index, pid, tid, start, launches, frame
    (0, 100, 100, 1000, 3, "A.forward (/srv/a.py:5)"),
    (1, 100, 101, 1500, 2, "B.forward (/srv/b.py:9)"),
    (2, 100, 100, 2000, 2, "A.forward (/srv/a.py:5)"),
    (3, 100, 100, 4000, 1, "A.forward (/srv/a.py:5)"),
]


def listed(stdout):
    rows = []
    for line in stdout.splitlines()[2:]:
        index, pid, tid, start, _, launches, frame = line.split(None, 6)
        rows.append((int(index), int(pid), int(tid), int(start), int(launches), frame))
    return rows


def test_function_ambiguous_lists_occurrences():
    proc = run(FUNCS, "--function", "forward")
    assert proc.returncode == FAILURE
    assert listed(proc.stdout) == FORWARD_OCCURRENCES
    assert "--index" in proc.stderr and "A.forward" in proc.stderr and "B.forward" in proc.stderr
    proc = run(FUNCS, "--function", "forward", "--json")
    assert proc.returncode == FAILURE
    occ = json.loads(proc.stdout)["occurrences"]
    assert [(o["index"], o["pid"], o["tid"], o["start_ns"], o["launches"], o["frame"])
            for o in occ] == FORWARD_OCCURRENCES
    assert [o["end_ns"] for o in occ] == [1201, 1901, 2101, 4001]


def test_function_first_occurrence_by_default():
    s = read_stacks(FUNCS)
    header, blocks = parse(ok(FUNCS, "--function", "A.forward"))
    assert "window [1000, 1201) ns" in header
    assert [(b[0], b[1]) for b in blocks] == [(kept(s[1]), {GENERIC: 2})]


def test_function_index():
    s = read_stacks(FUNCS)
    _, blocks = parse(ok(FUNCS, "--function", "A.forward", "--index", 1))
    assert [(b[0], b[2]) for b in blocks] == [(kept(s[3]), 2)]
    _, blocks = parse(ok(FUNCS, "--function", "forward", "--index", 3))
    assert [(b[0], b[2]) for b in blocks] == [(kept(s[1]), 1)]


def test_function_window_ends_with_the_gpu_work():
    # B.forward's last launch (1600) ran GPU work until 1900: thread 102's
    # all-gather at 1800 is inside, the one at 1950 is not
    s = read_stacks(FUNCS)
    doc = report_json(FUNCS, "--function", "forward", "--index", 1)
    assert doc["window"]["start_ns"] == 1500 and doc["window"]["end_ns"] == 1901
    assert doc["window"]["occurrence"]["frame"] == "B.forward (/srv/b.py:9)"
    assert doc["window"]["occurrence"]["tid"] == 101
    assert [(x["frames"], x["kernels"]) for x in doc["stacks"]] == [
        (kept(s[5]), {GENERIC: 2}), (kept(s[6]), {AG: 1})]


def test_function_same_call_site_is_one_occurrence():
    # run() is called once from <module> line 90; its own line moves (10, 12, 14):
    # one occurrence from 1000 to 4000, which holds every NCCL launch of all threads
    doc = report_json(FUNCS, "--function", "run")
    assert doc["window"]["occurrence"]["launches"] == 7
    assert doc["total"] == 9
    # train_step is called once per iteration from the same line with no launch
    # between the calls: the three calls are one occurrence (documented)
    doc = report_json(EAGER, "--function", "train_step")
    assert (doc["window"]["start_ns"], doc["window"]["end_ns"]) == (2000100, 4000401)
    assert doc["total"] == 6


def test_function_caller_line_change_starts_a_new_occurrence():
    # Model.forward in nccl_eager: each iteration's gemm (line 38) and all-reduce
    # (line 40) are one call; the send/recv or the hook in between ends it
    proc = run(EAGER, "--function", "Model.forward", "--index", 9)
    assert proc.returncode == FAILURE
    assert [(r[3], r[4]) for r in listed(proc.stdout)] == [(2000100, 2), (3000100, 2),
                                                          (4000100, 2), (4000400, 1)]
    _, blocks = parse(ok(EAGER, "--function", "forward", "--index", 1))
    assert [(b[1], b[2]) for b in blocks] == [({AR: 1}, 1)]


def test_function_index_out_of_range():
    proc = run(FUNCS, "--function", "A.forward", "--index", 3)
    assert proc.returncode == FAILURE
    assert [r[0] for r in listed(proc.stdout)] == [0, 1, 2]
    assert "out of range" in proc.stderr and "3 occurrences" in proc.stderr


def test_function_intersects_start_and_duration():
    _, blocks = parse(ok(FUNCS, "--function", "forward", "--index", 0, "--start-ts", 1100))
    assert [b[2] for b in blocks] == [1]  # 1200 only
    doc = report_json(FUNCS, "--function", "A.forward", "--duration", 150)
    assert (doc["window"]["start_ns"], doc["window"]["end_ns"]) == (1000, 1150)
    assert doc["total"] == 1


def test_function_not_found():
    proc = run(FUNCS, "--function", "nosuch")
    assert proc.returncode == FAILURE and "nosuch" in proc.stderr


def test_function_matches_native_and_inlined_frames(tmp_path):
    rec = write_recording(tmp_path / "r", {1: ["main", "step [inlined]", "ncclLaunchKernel"],
                                           2: ["main", "ns::Comm::step", "ncclLaunchKernel"]},
                          [launch(1, 1, GENERIC), launch(2, 2, GENERIC)])
    assert report_json(rec, "--function", "step")["total"] == 1
    assert report_json(rec, "--function", "ns::Comm::step")["total"] == 1
    assert run(rec, "--function", "Comm::step").returncode == FAILURE


# ---- exact timestamps ----------------------------------------------------------------------


def test_timestamps_beyond_double_precision(tmp_path):
    big = 2**53 + 1  # a double cannot hold it
    rec = write_recording(tmp_path / "r", {1: ["main", "ncclLaunchKernel"]},
                          [launch(big, 1, GENERIC), launch(big + 2, 1, GENERIC)])
    assert report_json(rec, "--start-ts", big)["total"] == 2
    assert report_json(rec, "--start-ts", big + 1)["total"] == 1
    doc = report_json(rec, "--start-ts", big, "--duration", 1)
    assert doc["total"] == 1 and doc["window"]["end_ns"] == big + 1
    assert report_json(rec, "--start-ts", 2**64 - 1)["total"] == 0


# ---- malformed input -------------------------------------------------------------------------


def broken(tmp_path, name, line_no, text):
    rec = tmp_path / "rec"
    shutil.copytree(EAGER, rec)
    lines = (rec / name).read_text().splitlines()
    lines[line_no - 1] = text
    (rec / name).write_text("\n".join(lines) + "\n")
    return rec


def edited(name, line_no, change):
    line = json.loads((EAGER / name).read_text().splitlines()[line_no - 1])
    change(line)
    return json.dumps(line)


@pytest.mark.parametrize("name,line_no,text,message", [
    ("launches.jsonl", 3, '{"ts_ns": 5,', "not valid JSON"),
    ("launches.jsonl", 3, "[1, 2]", "not a JSON object"),
    ("launches.jsonl", 4, edited("launches.jsonl", 4, lambda x: x.update(stack_id=77)),
     "stack_id 77 is not in stacks.jsonl"),
    ("launches.jsonl", 2, edited("launches.jsonl", 2, lambda x: x.update(ts_ns="1000200")),
     '"ts_ns"'),
    ("launches.jsonl", 2, edited("launches.jsonl", 2, lambda x: x.update(ts_ns=1.5)), '"ts_ns"'),
    ("launches.jsonl", 2, edited("launches.jsonl", 2, lambda x: x.update(pid=-1)), '"pid"'),
    ("launches.jsonl", 2, edited("launches.jsonl", 2, lambda x: x.pop("kernel")),
     '"kernel" is missing'),
    ("launches.jsonl", 2, edited("launches.jsonl", 2, lambda x: x.update(nested="no")),
     '"nested"'),
    ("launches.jsonl", 2, edited("launches.jsonl", 2, lambda x: x.update(gpu={})),
     '"gpu" is not an array'),
    ("launches.jsonl", 2, edited("launches.jsonl", 2,
                                 lambda x: x.update(gpu=[{"type": "kernel", "name": "k"}])),
     'gpu[0]: "start_ns" is missing'),
    ("launches.jsonl", 2, edited("launches.jsonl", 2,
                                 lambda x: x.update(gpu=[{"type": "kernel", "start_ns": 1}])),
     'gpu[0]: "name" is missing'),
    ("launches.jsonl", 2, edited("launches.jsonl", 2, lambda x: x["nccl"].update(ops=[{"op": 3}])),
     '"op" is not a string'),
    ("launches.jsonl", 2, edited("launches.jsonl", 2, lambda x: x.update(nccl=[])),
     '"nccl" is not an object'),
    ("stacks.jsonl", 2, '{"stack_id": 2, "frames": "main;foo"}', '"frames" is not an array'),
    ("stacks.jsonl", 2, '{"stack_id": 2, "frames": ["main", 5]}', '"frames"[1] is not a string'),
    ("stacks.jsonl", 2, '{"stack_id": 1, "frames": []}', "stack_id 1 appears a second time"),
    ("stacks.jsonl", 2, '{"frames": []}', '"stack_id" is missing'),
])
def test_malformed_input(tmp_path, name, line_no, text, message):
    proc = run(broken(tmp_path, name, line_no, text))
    assert proc.returncode == FAILURE, proc.stdout
    assert f"{name}:{line_no}: " in proc.stderr and message in proc.stderr
    assert proc.stdout == ""


def test_malformed_gpu_unmatched(tmp_path):
    rec = tmp_path / "rec"
    shutil.copytree(GRAPH, rec)
    (rec / "gpu_unmatched.jsonl").write_text('{"type":"kernel","name":"k","start_ns":1}\n'
                                              '{"type":"kernel","start_ns":"x"}\n')
    proc = run(rec)
    assert proc.returncode == FAILURE and "gpu_unmatched.jsonl:2: " in proc.stderr


@pytest.mark.parametrize("missing", ["launches.jsonl", "stacks.jsonl"])
def test_missing_file(tmp_path, missing):
    rec = tmp_path / "rec"
    shutil.copytree(EAGER, rec)
    (rec / missing).unlink()
    proc = run(rec)
    assert proc.returncode == FAILURE and missing in proc.stderr


def test_empty_directory(tmp_path):
    proc = run(tmp_path)
    assert proc.returncode == FAILURE and "launches.jsonl" in proc.stderr


def test_unknown_keys_blank_lines_and_missing_optional_keys(tmp_path):
    rec = tmp_path / "r"
    rec.mkdir()
    (rec / "stacks.jsonl").write_text('{"stack_id":3,"frames":["main","x"],"extra":{"a":[1]}}\n\n')
    (rec / "launches.jsonl").write_text(
        '\n{"ts_ns":1,"pid":2,"tid":2,"kernel":"ncclDevKernel_Generic","stack_id":3,"new":1}\n'
        '{"ts_ns":2,"pid":2,"tid":2,"kernel":"k","stack_id":3,"gpu":null,"nccl":null}\n')
    assert report_json(rec)["total"] == 1


# ---- CUDA graphs: replayed kernels under the lines that captured them ------------------------

REPLAY = ["main", "serve (/srv/srv.py:20)", "CUDAGraph.replay (/torch/cuda/graphs.py:88)",
          "cudaGraphLaunch"]
WARMUP = ["main", "serve (/srv/srv.py:30)", "CUDAGraph.replay (/torch/cuda/graphs.py:88)",
          "cudaGraphLaunch"]
CAP_GEMM = ["main", "capture (/srv/srv.py:12)", "Model.forward (/srv/model.py:38)",
            "at::cuda::blas::gemm", "cudaLaunchKernel"]
CAP_AR = ["main", "capture (/srv/srv.py:12)", "Model.forward (/srv/model.py:40)",
          "all_reduce (/srv/dist.py:7)", "ncclLaunchKernel", "[NCCL]AllReduce"]
CAP_BCAST = ["main", "warm (/srv/srv.py:28)", "ncclLaunchKernel", "[NCCL]Broadcast"]
CAP_AG = ["main", "warm (/srv/srv.py:29)", "ncclLaunchKernel", "[NCCL]AllGather"]
GRAPH_STACKS = {1: REPLAY, 2: composed(REPLAY, CAP_GEMM), 3: composed(REPLAY, CAP_AR),
                4: ["main", "serve (/srv/srv.py:22)", "ncclLaunchKernel", "[NCCL]AllReduce"],
                5: WARMUP, 6: composed(WARMUP, CAP_BCAST), 7: composed(WARMUP, CAP_AG)}
GEMM, SOFTMAX = "sm90_xmma_gemm_bf16", "softmax_kernel"
AR_PLAN = {"comm_hash": "0x1", "ops": [{"op": "AllReduce"}]}
graph_launch = partial(launch, kernel="<graph cudaGraphLaunch>", api="cudaGraphLaunch")


def replayed(ts, by="node"):
    """A replay's GPU records: gemm and all-reduce tied to the launches that
    captured them (stacks 2 and 3), softmax not (it stays under the launch)."""
    return [gpu_record("kernel", ts + 300, ts + 350, GEMM, graph_id=5, capture_stack_id=2,
                       capture_by=by),
            gpu_record("kernel", ts + 400, ts + 480, ARB, graph_id=5, capture_stack_id=3,
                       capture_by=by),
            gpu_record("kernel", ts + 500, ts + 520, SOFTMAX, graph_id=5)]


# TIED (CUPTI records): eager all-reduces at 1000 and 3500 (stack 4), graph
# replays from stack 1 at 2000, 3000 and 4000 (the last tied by kernel order).
TIED = [launch(1000, 4, ARB, gpu=[gpu_record("kernel", 1100, 1150, ARB)], nccl=AR_PLAN),
        graph_launch(2000, 1, gpu=replayed(2000)),
        graph_launch(3000, 1, gpu=replayed(3000)),
        launch(3500, 4, ARB, gpu=[gpu_record("kernel", 3600, 3650, ARB)], nccl=AR_PLAN),
        graph_launch(4000, 1, gpu=replayed(4000, "kernel_order"))]

WHY_EARLY = "the graph was instantiated before ncclprobe attached"
WHY_NODES = "its graph was not captured while traced (or was built node by node)"
# REPLAYED (no GPU records): from stack 5 at 1000 and 5000 two different graphs
# (a broadcast, then an all-gather); from stack 1 at 2000, 3000, 4000 one graph
# of a gemm and an all-reduce each time; at 4500-4700 three replays of graphs
# whose capture was not seen.
REPLAYED = [graph_launch(1000, 5, graph_nodes=1),
            graph_launch(2000, 1, graph_nodes=2),
            graph_launch(3000, 1, graph_nodes=2),
            graph_launch(4000, 1, graph_nodes=2),
            graph_launch(4500, 1, graph_unknown=WHY_EARLY),
            graph_launch(4600, 1, graph_unknown=WHY_NODES),
            graph_launch(4700, 1, graph_unknown=WHY_EARLY),
            graph_launch(5000, 5, graph_nodes=1)]
REPLAY_LINES = [graph_replay_row(7, 2, 1, GEMM, 3), graph_replay_row(7, 3, 1, ARB, 3),
                graph_replay_row(7, 6, 5, BCAST, 1), graph_replay_row(7, 7, 5, AG, 1)]


def tied_recording(tmp_path, launches=TIED):
    return write_recording(tmp_path / "tied", GRAPH_STACKS, launches)


def replayed_recording(tmp_path, replays=REPLAY_LINES):
    return write_recording(tmp_path / "replayed", GRAPH_STACKS, REPLAYED, graph_replays=replays)


def is_nccl(name, row=None):
    return bool(row and row.get("nccl")) or "nccl" in name.lower()


def nccl_frame_has(frames, op):
    """Whether the last [NCCL] frame of frames names op (docs/report.md, --op)."""
    ncclf = [f for f in frames if f.startswith("[NCCL]")]
    return bool(ncclf) and op.lower() in ncclf[-1][len("[NCCL]"):].lower().split("+")


def tied_expected(match, op=None, start=0, end=2**64):
    """{frames: {kernel: count}} of TIED: each matching GPU kernel under its
    capture stack when it has one, else its launch's."""
    out = {}
    for row in TIED:
        if not start <= row["ts_ns"] < end:
            continue
        for g in row["gpu"]:
            sid = g.get("capture_stack_id") or row["stack_id"]
            if op and not (nccl_frame_has(GRAPH_STACKS[sid], op) or
                           (sid == row["stack_id"] and
                            op in [o["op"] for o in row.get("nccl", {}).get("ops", [])])):
                continue
            if match(g["name"], row):
                out.setdefault(tuple(GRAPH_STACKS[sid]), Counter())[g["name"]] += 1
    return out


def replayed_expected(match, in_window=lambda row: True):
    """{frames: {kernel: count}} of REPLAYED: each graph_replays.jsonl line's
    count under its stack, its share when only some of its replays' launches
    are in the window (every replay from stack 1 ran the same graph)."""
    out = {}
    for r in REPLAY_LINES:
        group = [x for x in REPLAYED if x["stack_id"] == r["replay_stack_id"]
                 and x.get("graph_nodes")]
        n = r["count"] * sum(map(in_window, group)) // len(group)
        if match(r["kernel"]) and n:
            out.setdefault(tuple(GRAPH_STACKS[r["stack_id"]]), Counter())[r["kernel"]] += n
    return out


def as_groups(blocks):
    return {tuple(frames): Counter(kernels) for frames, kernels, _, _ in blocks}


@pytest.mark.parametrize("kernel", [None, GEMM, "_"])  # "_": softmax too, not tied
def test_replayed_gpu_records_count_under_their_capture_stack(tmp_path, kernel):
    rec = tied_recording(tmp_path)
    args = ("--kernel", kernel) if kernel else ()
    _, blocks = parse(ok(rec, "--depth", 0, *args))
    match = (lambda name, row: kernel in name) if kernel else is_nccl
    assert as_groups(blocks) == tied_expected(match)
    # the capture-time line is the one shown
    if kernel == GEMM:
        assert blocks[0][0][-3:] == ["Model.forward (/srv/model.py:38)", "at::cuda::blas::gemm",
                                     "cudaLaunchKernel"]


def test_op_selects_replayed_kernels_by_their_capture_stack(tmp_path):
    rec = tied_recording(tmp_path)
    _, blocks = parse(ok(rec, "--op", "AllReduce", "--depth", 0))
    assert as_groups(blocks) == tied_expected(is_nccl, op="AllReduce")
    assert tuple(GRAPH_STACKS[3]) in as_groups(blocks)
    assert parse(ok(rec, "--op", "Broadcast"))[1] == []


def test_function_window_sees_the_capture_frames(tmp_path):
    # Model.forward is only in the capture stacks: each replay is "during" it;
    # the eager all-reduce at 3500 ends the first occurrence
    rec = tied_recording(tmp_path)
    proc = run(rec, "--function", "Model.forward", "--index", 5)
    assert proc.returncode == FAILURE
    replays = [row for row in TIED if row["stack_id"] == 1]
    ends = {row["ts_ns"]: max(g["end_ns"] for g in row["gpu"]) + 1 for row in replays}
    assert [(r[3], r[4], r[5]) for r in listed(proc.stdout)] == [
        (2000, 2, "Model.forward (/srv/model.py:38)"),
        (4000, 1, "Model.forward (/srv/model.py:38)")]
    doc = report_json(rec, "--function", "Model.forward", "--index", 1, "--depth", 0)
    assert (doc["window"]["start_ns"], doc["window"]["end_ns"]) == (4000, ends[4000])
    want = tied_expected(is_nccl, start=4000, end=ends[4000])
    assert {tuple(x["frames"]): Counter(x["kernels"]) for x in doc["stacks"]} == want
    doc = report_json(rec, "--function", "forward")
    assert (doc["window"]["start_ns"], doc["window"]["end_ns"]) == (2000, ends[3000])


def test_graph_replay_diagnostic_names_the_capture_lines(tmp_path):
    rec = tied_recording(tmp_path)
    # the replay launched at 2000 ran its all-reduce at 2400: in the window, the launch is not
    text = ok(rec, "--start-ts", 2350, "--duration", 100, "--depth", 0)
    assert re.search(r"1 NCCL kernel ran in the window from CUDA graph replays; their stacks "
                     r"are the lines that captured them \(below \[graph capture\]\):", text)
    body = text.split("[graph capture]):\n\n", 1)[1]
    assert parse("header\n\n" + body)[1] == [(GRAPH_STACKS[3], {ARB: 1}, 1, False)]
    # softmax was not tied: under the graph launch, as before
    text = ok(rec, "--kernel", SOFTMAX, "--start-ts", 2450, "--duration", 100)
    assert "their launch stacks are the graph launches:" in text
    text = ok(rec, "--kernel", "_", "--start-ts", 2250, "--duration", 300)
    assert "their stacks are the lines that captured them (below [graph capture]) or, where " \
           "the capture was not seen, the graph launches:" in text
    doc = report_json(rec, "--kernel", "_", "--start-ts", 2250, "--duration", 300, "--depth", 0)
    replay = doc["diagnostics"][1]
    assert (replay["kind"], replay["count"]) == ("graph_replays", 3)
    assert {tuple(x["frames"]) for x in replay["stacks"]} == \
        {tuple(GRAPH_STACKS[k]) for k in (1, 2, 3)}


def test_graph_replays_without_gpu_records_count_under_their_capture_stack(tmp_path):
    rec = replayed_recording(tmp_path)
    for kernel in (None, GEMM, "Broadcast"):
        args = ("--kernel", kernel) if kernel else ()
        _, blocks = parse(ok(rec, "--depth", 0, *args))
        want = replayed_expected((lambda k: kernel in k) if kernel else is_nccl)
        assert as_groups(blocks) == want and want, kernel
    # the graph launches themselves are not kernels of their own
    assert parse(ok(rec, "--kernel", "<graph"))[1] == [
        (GRAPH_STACKS[1], {"<graph cudaGraphLaunch>": 3}, 3, False)]
    # --op by the [NCCL] frame of the stack that captured it
    _, blocks = parse(ok(rec, "--op", "AllGather", "--depth", 0))
    assert as_groups(blocks) == {tuple(GRAPH_STACKS[7]): Counter({AG: 1})}


def test_graph_replays_in_a_window_count_their_share(tmp_path):
    rec = replayed_recording(tmp_path)
    _, blocks = parse(ok(rec, "--start-ts", 2500, "--duration", 1000, "--depth", 0))
    want = replayed_expected(is_nccl, lambda row: 2500 <= row["ts_ns"] < 3500)
    assert as_groups(blocks) == want and sum(sum(c.values()) for c in want.values()) == 1
    doc = report_json(rec, "--start-ts", 2500, "--duration", 1000)
    assert "graph_replays_unplaced" not in [d["kind"] for d in doc["diagnostics"]]


def test_graph_replays_that_cannot_be_placed_are_said(tmp_path):
    # stack 5 replayed a broadcast graph at 1000 and an all-gather graph at 5000:
    # graph_replays.jsonl cannot say which ran in [500, 1500)
    rec = replayed_recording(tmp_path)
    doc = report_json(rec, "--start-ts", 500, "--duration", 1000)
    assert doc["total"] == 0
    unplaced = doc["diagnostics"][-1]
    in_window = [x for x in REPLAYED if 500 <= x["ts_ns"] < 1500]
    assert unplaced["kind"] == "graph_replays_unplaced" and unplaced["count"] == len(in_window)
    assert unplaced["kernels"] == {r["kernel"]: r["count"] for r in REPLAY_LINES
                                  if r["replay_stack_id"] == 5}
    text = ok(rec, "--start-ts", 500, "--duration", 1000)
    assert "1 CUDA graph launch in the window replayed graphs whose kernels " \
           "graph_replays.jsonl counts only over the whole recording" in text
    assert f"  {BCAST} (1)\n" in text
    # with the whole group in the window they are placed
    doc = report_json(rec, "--start-ts", 500)
    assert doc["total"] == sum(r["count"] for r in REPLAY_LINES if is_nccl(r["kernel"]))


def test_graph_launches_whose_capture_was_not_seen_are_said(tmp_path):
    rec = replayed_recording(tmp_path)
    reasons = Counter(x["graph_unknown"] for x in REPLAYED if "graph_unknown" in x)
    text = ok(rec)
    assert parse(text)[1]  # something matched: said all the same
    n = sum(reasons.values())
    assert f"{n} CUDA graph launches in the recording replayed graphs whose capture " \
           "ncclprobe did not see" in text
    for why, count in reasons.items():
        assert f"\n  {why} ({count})\n" in text
    doc = report_json(rec)
    assert doc["total"] > 0
    unseen = [d for d in doc["diagnostics"] if d["kind"] == "graph_capture_unseen"]
    assert len(unseen) == 1 and unseen[0]["count"] == n and unseen[0]["reasons"] == reasons
    doc = report_json(rec, "--start-ts", 4550, "--duration", 200)
    reasons = Counter(x["graph_unknown"] for x in REPLAYED
                      if "graph_unknown" in x and 4550 <= x["ts_ns"] < 4750)
    assert doc["diagnostics"][-1]["reasons"] == reasons and len(reasons) == 2
    assert "graph_capture_unseen" not in [
        d["kind"] for d in report_json(rec, "--start-ts", 4800)["diagnostics"]]


def test_function_window_sees_the_capture_frames_of_graph_replays(tmp_path):
    rec = replayed_recording(tmp_path)
    doc = report_json(rec, "--function", "Model.forward", "--kernel", GEMM, "--depth", 0)
    group = [x["ts_ns"] for x in REPLAYED if x["stack_id"] == 1 and x.get("graph_nodes")]
    assert (doc["window"]["start_ns"], doc["window"]["end_ns"]) == (min(group), max(group) + 1)
    assert doc["window"]["occurrence"]["launches"] == len(group)
    assert [(x["frames"], x["kernels"]) for x in doc["stacks"]] == [
        (GRAPH_STACKS[2], {GEMM: sum(r["count"] for r in REPLAY_LINES if r["kernel"] == GEMM)})]


@needs_bpf
@needs_replay
def test_report_on_a_recording_of_graph_replays(tmp_path):
    """cupti_app --scenario capture: a graph captured from three lines, replayed;
    each replayed kernel is reported under the line that captured it."""
    out, _, _ = record_cupti_app(tmp_path, ["--scenario", "capture", "--iters", "4"])
    stacks = read_stacks(out)
    want = {}
    for row in outer_launches(out):
        for g in row.get("gpu", []):
            sid = g.get("capture_stack_id") or row["stack_id"]
            if g["type"] == "kernel" and "_kernel" in g["name"]:
                want.setdefault(tuple(stacks[sid]), Counter())[g["name"]] += 1
    assert any("[graph capture]" in k for k in want)
    _, blocks = parse(ok(out, "--kernel", "_kernel", "--depth", 0))
    assert as_groups(blocks) == want
    # the replays are during capture_mlp: its frame is in their capture stacks only
    doc = report_json(out, "--function", "capture_mlp", "--kernel", "_kernel")
    replays = [row for row in outer_launches(out) if row["api"] == "cuGraphLaunch"]
    assert doc["window"]["occurrence"]["launches"] == len(replays)
    assert doc["total"] == sum(len(row["gpu"]) for row in replays)


def edit_gpu(index, **fields):
    """TIED with the first record of its second line changed."""
    rows = json.loads(json.dumps(TIED))
    rows[index]["gpu"][0].update(fields)
    return rows


@pytest.mark.parametrize("change,line,message", [
    (dict(capture_stack_id="2"), 2, 'gpu[0]: "capture_stack_id" is not a non-negative integer'),
    (dict(capture_stack_id=99), 2, "gpu[0]: capture_stack_id 99 is not in stacks.jsonl"),
    (dict(capture_by=1), 2, 'gpu[0]: "capture_by" is not a string'),
])
def test_malformed_capture_keys(tmp_path, change, line, message):
    rec = tied_recording(tmp_path, edit_gpu(line - 1, **change))
    proc = run(rec)
    assert proc.returncode == FAILURE and proc.stdout == ""
    assert f"launches.jsonl:{line}: {message}" in proc.stderr, proc.stderr


@pytest.mark.parametrize("name,row,message", [
    ("launches.jsonl", dict(graph_unknown=5), '"graph_unknown" is not a string'),
    ("graph_replays.jsonl", dict(stack_id=99), "stack_id 99 is not in stacks.jsonl"),
    ("graph_replays.jsonl", dict(replay_stack_id=98), "replay_stack_id 98 is not in stacks.jsonl"),
    ("graph_replays.jsonl", dict(count="x"), '"count" is not an integer'),
    ("graph_replays.jsonl", dict(kernel=None), '"kernel" is missing'),
])
def test_malformed_graph_lines(tmp_path, name, row, message):
    rec = replayed_recording(tmp_path)
    path = rec / name
    lines = path.read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), **row})
    path.write_text("\n".join(lines) + "\n")
    proc = run(rec)
    assert proc.returncode == FAILURE and proc.stdout == ""
    assert f"{name}:1: {message}" in proc.stderr, proc.stderr


# ---- usage ------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["--bogus"], ["--depth", "x"], ["--depth", "-1"], ["--top", "0"], ["--top", "2x"],
    ["--index", "1"], ["--duration", "0"], ["--start-ts", "-5"], ["--start-ts", "1e9"],
    ["--start-ts", "18446744073709551616"], ["--kernel", ""], ["--function", "f", "--index", "x"],
    ["--json", "extra"],
])
def test_usage_errors(args):
    proc = run(EAGER, *args)
    assert proc.returncode == USAGE, proc.stderr
    assert proc.stderr.strip()


def test_directory_argument_errors(tmp_path):
    for target in (EAGER / "launches.jsonl", tmp_path / "nothing"):
        proc = run(target)
        assert proc.returncode == USAGE and str(target) in proc.stderr


def test_help():
    proc = run("--help")
    assert proc.returncode == 0 and "--function NAME" in proc.stdout
    main = run_ncclprobe(["--help"])
    assert "ncclprobe report [DIR]" in main.stdout
