#!/usr/bin/env python3
"""gpu-cupti-check.py - validates the GPU side of ncclprobe on a real GPU
machine (root, PyTorch with CUDA): runs a PyTorch program with
libncclprobe_cupti.so injected (`ncclprobe record --cupti -- ...`) and checks
what no CPU-only test can, against the real CUPTI and driver:

- eager ops: every launch of the eager phase is matched to >= 1 kernel whose
  duration is positive, and the kernel names are real CUDA kernel names;
- a CUDA graph replay: every cudaGraphLaunch carries all kernels of the graph
  (as many as the eager step launches), all with that launch's stack;
- a torch.compile'd function: Triton kernels launched with cuLaunchKernel
  are matched (names starting with "triton");
- GPU times are on the launch clock: 0 <= kernel start - launch ts < 10 s;
- the same program in file mode (NCCLPROBE_CUPTI_OUTPUT) merges with
  `ncclprobe merge` into the same kernels.

    sudo tools/gpu-cupti-check.py [--build build] [--out DIR]

Prints a Markdown report (also DIR/gpu-cupti-check.md); exit 1 if a check fails."""

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

WORKLOAD = r'''
import sys, torch
dev = torch.device("cuda")
x = torch.randn(1024, 1024, device=dev)

def eager_step(a):
    return torch.softmax(a @ a + 1.0, dim=-1)

def eager_phase():
    for _ in range(20):
        eager_step(x)
    torch.cuda.synchronize()

def graph_phase():
    static_in = torch.randn(1024, 1024, device=dev)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            eager_step(static_in)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        eager_step(static_in)
    for _ in range(10):
        g.replay()
    torch.cuda.synchronize()

def compiled_phase():
    try:
        f = torch.compile(lambda a: (a * 2.0).relu() + a.sin())
        for _ in range(10):
            f(x)
        torch.cuda.synchronize()
        print("compiled: ok")
    except Exception as exc:
        print(f"compiled: skipped ({exc.__class__.__name__}: {exc})")

eager_phase()
graph_phase()
compiled_phase()
'''


def jsonl(path):
    return [json.loads(l) for l in Path(path).read_text().splitlines() if l.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(Path(__file__).resolve().parent.parent / "build"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    build = Path(args.build)
    out = Path(args.out or tempfile.mkdtemp(prefix="ncclprobe-cupti-check-"))
    out.mkdir(parents=True, exist_ok=True)
    script = out / "workload.py"
    script.write_text(WORKLOAD)
    rec = out / "rec"
    proc = subprocess.run([str(build / "ncclprobe"), "record", "--cupti", "-o", str(rec),
                           "--cupti-socket", str(out / "cupti.sock"), "--", args.python,
                           str(script)], capture_output=True, text=True, timeout=900)
    summary = json.loads((rec / "summary.json").read_text())
    launches = [l for l in jsonl(rec / "launches.jsonl") if not l["nested"]]
    stacks = {s["stack_id"]: s["frames"] for s in jsonl(rec / "stacks.jsonl")}
    checks = []

    def check(name, ok, detail=""):
        checks.append((name, bool(ok), detail))

    def phase(l):
        frames = stacks.get(l["stack_id"], [])
        for p in ("eager_phase", "graph_phase", "compiled_phase"):
            if any(f.startswith(p + " ") for f in frames):
                return p
        return "other"

    by_phase = collections.defaultdict(list)
    for l in launches:
        by_phase[phase(l)].append(l)
    eager = [l for l in by_phase["eager_phase"] if "gpu" in l]
    check("eager launches held for GPU records", eager, f"{len(eager)} launches")
    check("eager launches all matched", eager and all(l["gpu_status"] == "matched" for l in eager),
          collections.Counter(l["gpu_status"] for l in eager))
    durations = [g["end_ns"] - g["start_ns"] for l in eager for g in l["gpu"]]
    check("kernel durations positive", durations and min(durations) > 0,
          f"min {min(durations, default=0)} ns, max {max(durations, default=0)} ns")
    lat = [g["start_ns"] - l["ts_ns"] for l in eager for g in l["gpu"]]
    check("GPU start after CPU launch, same clock", lat and 0 <= min(lat) and max(lat) < 10e9,
          f"launch->start min {min(lat, default=0)} ns, max {max(lat, default=0)} ns")
    graph = [l for l in by_phase["graph_phase"] if l["api"].startswith("cudaGraphLaunch")]
    per_step = collections.Counter(len(l["gpu"]) for l in graph)
    check("graph replays: one launch per replay", len(graph) == 10, f"{len(graph)} launches")
    check("graph replays: every replay carries all its kernels",
          graph and len(per_step) == 1 and min(per_step) >= 2, dict(per_step))
    triton = [g["name"] for l in by_phase["compiled_phase"] for g in l.get("gpu", [])
              if g["name"].startswith("triton")]
    check("Triton kernels matched (torch.compile)",
          triton or "compiled: skipped" in proc.stdout, collections.Counter(triton))
    gpu = summary["gpu"]
    check("nothing unpaired or rejected", gpu["clients_rejected"] == 0, json.dumps(gpu))

    # file mode + offline merge of the same program
    trace = out / "cupti.json"
    rec2 = out / "rec-file"
    env = {**os.environ, "NCCLPROBE_CUPTI_OUTPUT": str(trace),
           "CUDA_INJECTION64_PATH": str(build / "libncclprobe_cupti.so")}
    subprocess.run([str(build / "ncclprobe"), "record", "--no-gpu", "-o", str(rec2), "--",
                    args.python, str(script)], capture_output=True, text=True, timeout=900,
                   env=env)
    merged = out / "merged.folded"
    m = subprocess.run([str(build / "ncclprobe"), "merge", "--cpu",
                        str(rec2 / "stacks.ext.folded"), "--gpu", str(trace), "-o", str(merged),
                        "--summary"], capture_output=True, text=True, timeout=300)
    kernels = [l for l in merged.read_text().splitlines() if "[GPU_Kernel]" in l] \
        if merged.exists() else []
    check("file mode + ncclprobe merge", m.returncode == 0 and kernels, m.stderr.strip())

    lines = ["# ncclprobe GPU (CUPTI) check", "", f"record exit {proc.returncode}", "```",
             proc.stdout.strip(), "\n".join(proc.stderr.strip().splitlines()[-10:]), "```", "",
             "| check | ok | detail |", "|---|---|---|"]
    for name, ok, detail in checks:
        lines.append(f"| {name} | {'yes' if ok else 'NO'} | {str(detail)[:300]} |")
    lines += ["", "## summary.json gpu", "```", json.dumps(gpu, indent=1), "```",
              "## targets[].cupti", "```",
              json.dumps([t.get("cupti") for t in summary["targets"]], indent=1), "```",
              "## merge --summary", "```", m.stdout[-3000:], "```"]
    report = "\n".join(lines) + "\n"
    (out / "gpu-cupti-check.md").write_text(report)
    print(report)
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
