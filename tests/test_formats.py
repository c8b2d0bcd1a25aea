"""--format: which of the derived outputs (pprof, Perfetto trace, SVG flame
graphs) record, merge and the daemon write, and that what they write opens
in the tools people use (go tool pprof; a JSON/XML parser here, Chromium and
the full checks in test_flamegraph.py, test_trace_json.py, test_pprof.py)."""
import json
import xml.etree.ElementTree as ET

import pytest

from lib.merge import ev_kernel, ev_launch, merge, trace_of
from lib.paths import PROGS
from lib.run import go_pprof, record, run_ncclprobe
from lib.skip import needs_bpf

DERIVED = {"pprof": ["profile.pb.gz"], "perfetto": ["trace.json"], "svg": ["flamegraph.svg"]}
LAUNCHER = [PROGS / "launcher", "--variant", "rt", "--iters", "7"]


@needs_bpf
@pytest.mark.parametrize("formats,expected", [
    (None, ["pprof", "perfetto", "svg"]),  # the default: all
    ("none", []),
    ("svg", ["svg"]),
    ("pprof,perfetto", ["pprof", "perfetto"]),
])
def test_record_writes_the_formats_asked_for(tmp_path, formats, expected):
    args = ([] if formats is None else ["--format", formats]) + ["--", *LAUNCHER]
    rec = record(tmp_path, args)
    assert rec.returncode == 0, rec.stderr
    for fmt, files in DERIVED.items():
        for name in files:
            assert (rec.path / name).exists() == (fmt in expected), (fmt, name)
    if "perfetto" in expected:
        events = json.loads((rec.path / "trace.json").read_text())["traceEvents"]
        assert sum(e.get("name") == "cudaLaunchKernel" and e["ph"] == "X" for e in events) == 7
    if "svg" in expected:
        svg = ET.parse(rec.path / "flamegraph.svg").getroot()
        titles = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}title")]
        assert any(t and t.startswith("run_worker") for t in titles), titles[:10]
    if "pprof" in expected:
        top = go_pprof(tmp_path, "-top", rec.path / "profile.pb.gz")
        assert "Total samples = 7" in top, top
        assert "libb_launch" in top and "[GPU_Kernel]vector_add_kernel" in top, top


def test_unknown_format_is_a_usage_error():
    proc = run_ncclprobe(["record", "--format", "svg,png", "--", "/bin/true"])
    assert proc.returncode == 2
    assert "--format: unknown format 'png'" in proc.stderr
    proc = run_ncclprobe(["merge", "--format", "gif", "--cpu", "a", "--gpu", "b", "-o", "c"])
    assert proc.returncode == 2
    assert "unknown format 'gif'" in proc.stderr


def test_merge_writes_a_flame_graph_and_a_profile_of_its_output(tmp_path):
    cpu = ("5000000000 p 1 1 0 main;step (train.py:3);cudaLaunchKernel\n"
           "5001000000 p 1 1 0 main;eager<T>;cudaLaunchKernel\n")
    trace = trace_of(ev_launch(1, 1, 5000000.002, 42), ev_kernel("gemm", 5000010, 3, 42),
                     ev_launch(1, 1, 5001000.001, 43), ev_kernel("relu&co", 5001010, 2, 43))
    m = merge(tmp_path, cpu, trace, "--format", "svg,pprof")
    assert m.returncode == 0, m.stderr
    for folded_file in (m.out_path, m.out_path.parent / "ns.folded"):
        svg = ET.parse(f"{folded_file}.svg").getroot()  # parses: names are escaped
        titles = [t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}title")]
        assert any(t.startswith("[GPU_Kernel]relu&co") for t in titles), titles
    top = go_pprof(tmp_path, "-top", f"{m.out_path}.pb.gz")
    assert "100% of 2 total" in top, top
    gpu = go_pprof(tmp_path, "-top", "-sample_index=gpu_time", f"{m.out_path}.pb.gz")
    assert "[GPU_Kernel]gemm" in gpu and "[GPU_Kernel]relu&co" in gpu, gpu


def test_merge_writes_nothing_more_by_default(tmp_path):
    cpu = "5000000000 p 1 1 0 main;cudaLaunchKernel\n"
    trace = trace_of(ev_launch(1, 1, 5000000.002, 42), ev_kernel("k", 5000010, 3, 42))
    m = merge(tmp_path, cpu, trace)
    assert m.returncode == 0, m.stderr
    assert sorted(p.name for p in m.out_path.parent.iterdir()) == [
        "ns.folded", "out.folded", "stacks.ext.folded", "trace.json"]


@needs_bpf
def test_convert_makes_the_outputs_of_a_recording_later(tmp_path):
    rec = record(tmp_path, ["--format", "none", "--", *LAUNCHER])
    assert rec.returncode == 0, rec.stderr
    assert not (rec.path / "profile.pb.gz").exists()
    proc = run_ncclprobe(["convert", "--format", "pprof,svg", rec.path])
    assert proc.returncode == 0, proc.stderr
    assert (rec.path / "flamegraph.svg").exists() and not (rec.path / "trace.json").exists()
    top = go_pprof(tmp_path, "-top", rec.path / "profile.pb.gz")
    assert "Total samples = 7" in top, top
    assert run_ncclprobe(["convert", tmp_path / "nowhere"]).returncode == 1
    assert run_ncclprobe(["convert", "--format", "png", rec.path]).returncode == 2
