#!/usr/bin/env python3
"""gpu-check.py - validates ncclprobe on a real GPU machine (root, PyTorch with
CUDA). Records a PyTorch program under `ncclprobe record -- ...` and reports
what fired, to answer what no CPU-only test can:

- eager kernels: which launch APIs PyTorch uses, how kernels are named;
- a CUDA graph capture + replays: what cudaGraphLaunch looks like;
- a torch.compile'd (Triton) function: Triton launches through cuLaunchKernel;
- torch.distributed with NCCL, world size 1: what the NCCL probes see;
- whether libcudart's launches reach libcuda's exported cuLaunchKernel*
  (then ncclprobe reports them as nested, not twice).

    sudo tools/gpu-check.py [--ncclprobe build/ncclprobe] [--out DIR]

Prints a Markdown report and writes it to DIR/gpu-check.md."""

import argparse
import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path

WORKLOAD = r'''
import os, sys, time
import torch

dev = torch.device("cuda")
x = torch.randn(1024, 1024, device=dev)

def eager_step(a):
    return torch.softmax(a @ a + 1.0, dim=-1)

for _ in range(20):
    y = eager_step(x)
torch.cuda.synchronize()

static_in = torch.randn(1024, 1024, device=dev)
g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        eager_step(static_in)
torch.cuda.current_stream().wait_stream(s)
with torch.cuda.graph(g):
    static_out = eager_step(static_in)
for _ in range(10):
    g.replay()
torch.cuda.synchronize()

try:
    compiled = torch.compile(lambda a: (a * 2.0).relu() + a.sin())
    for _ in range(10):
        compiled(x)
    torch.cuda.synchronize()
    print("compiled: ok")
except Exception as exc:
    print(f"compiled: skipped ({exc.__class__.__name__}: {exc})")

try:
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1)
    t = torch.ones(1 << 20, device=dev)
    for _ in range(5):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print("nccl: ok")
except Exception as exc:
    print(f"nccl: skipped ({exc.__class__.__name__}: {exc})")
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ncclprobe", default=str(Path(__file__).resolve().parent.parent /
                                               "build" / "ncclprobe"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="ncclprobe-gpu-check-"))
    script = out / "workload.py"
    out.mkdir(parents=True, exist_ok=True)
    script.write_text(WORKLOAD)
    rec = out / "rec"
    proc = subprocess.run([args.ncclprobe, "record", "-o", str(rec), "--", args.python,
                           str(script)], capture_output=True, text=True, timeout=900)
    summary = json.loads((rec / "summary.json").read_text())
    launches = [json.loads(l) for l in (rec / "launches.jsonl").read_text().splitlines() if l]
    stacks = {s["stack_id"]: s["frames"]
              for s in map(json.loads, (rec / "stacks.jsonl").read_text().splitlines())}
    nccl = [json.loads(l) for l in (rec / "nccl.jsonl").read_text().splitlines() if l]

    lines = ["# ncclprobe GPU check", "", f"ncclprobe exit code {proc.returncode}; workload:",
             "```", proc.stdout.strip(), "```", "stderr (last lines):", "```",
             "\n".join(proc.stderr.strip().splitlines()[-15:]), "```", "", "## Totals", "```",
             json.dumps(summary["totals"], indent=1), json.dumps(summary["unwind"], indent=1),
             "```", "", "## Launches by API (outermost)", ""]
    for api, n in sorted(summary["launches_by_api"].items(), key=lambda kv: -kv[1]):
        lines.append(f"- {api}: {n}")
    nested = collections.Counter(l["api"] for l in launches if l["nested"])
    lines += ["", f"## Nested launches (inside another probed launch): {dict(nested)}", "",
              "## Top kernels", ""]
    for kernel, n in sorted(summary["launches_by_kernel"].items(), key=lambda kv: -kv[1])[:25]:
        lines.append(f"- {n:6d}  {kernel}")
    lines += ["", "## One stack per API", ""]
    seen = set()
    for l in launches:
        if l["api"] in seen or l["nested"]:
            continue
        seen.add(l["api"])
        frames = stacks.get(l["stack_id"], [])
        lines += [f"### {l['api']} -> {l['kernel']}", "```", "\n".join(frames[-25:]), "```"]
    lines += ["", f"## NCCL calls: {collections.Counter(o['op'] for o in nccl)}"]
    if nccl:
        lines += ["```", json.dumps(nccl[0], indent=1), "```"]
    lines += ["", "## Libraries probed", ""]
    for t in summary["targets"]:
        for lib in t["libraries"]:
            lines.append(f"- {lib['path']}: {lib['probes_attached']} probes "
                         f"({lib['probes_failed']} failed)")
    report = "\n".join(lines) + "\n"
    (out / "gpu-check.md").write_text(report)
    print(report)
    print(f"(recording in {rec})")
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
