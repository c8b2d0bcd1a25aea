#!/usr/bin/env python3
"""graphs.py - what following CUDA graphs costs (issue 20), from one run, as ratios to the same
calls untraced: ns per plain kernel launch, per launch captured into a graph, and per graph launch
(replays of 10 and of 1000 kernels: a replay must cost the same whatever its size - nothing per
node happens at a replay), through the CUDA driver TEST DOUBLE libfakecuda.so (no GPU here).

Columns, each the median of --runs runs of bench/graph_loop.c:
  bare        no tracer
  ncclprobe   `ncclprobe record --format none -- graph_loop ...`
  uprobe      a bare bpftrace uprobe on the same function (the peer: a uprobe's floor)
and the memory a captured node takes (summary.json targets[].graphs after 10000 nodes).

    bench/graphs.py [--build build] [--runs 5] [--n 200000] [--out bench/results-graphs.md]"""

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import privmount  # noqa: E402  (bpftrace must not leave tracefs mounted on the host)
CASES = [  # (label, graph_loop mode, nodes, function the peer probes)
    ("plain launch", "plain", 0, "cuLaunchKernel"),
    ("captured launch", "capture", 0, "cuLaunchKernel"),
    ("graph launch, 10 nodes", "replay", 10, "cuGraphLaunch"),
    ("graph launch, 1000 nodes", "replay", 1000, "cuGraphLaunch"),
]


def ns_per_call(out):
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("plain", "capture", "replay"):
            return float(parts[1])
    raise RuntimeError(f"no timing in: {out!r}")


def run(argv):
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"{argv}: {res.stderr[-2000:]}")
    return res.stdout


def main():
    privmount.enter()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--n", type=int, default=200000)
    ap.add_argument("--out", default=str(HERE / "results-graphs.md"))
    args = ap.parse_args()
    build = Path(args.build).resolve()
    loop, lib = build / "graph_loop", build / "progs" / "libfakecuda.so"
    ncclprobe = build / "ncclprobe"
    for p in (loop, lib, ncclprobe):
        if not p.exists():
            sys.exit(f"graphs.py: {p} is not built (make bench)")
    have_bpftrace = shutil.which("bpftrace") is not None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, mode, nodes, fn in CASES:
            cmd = [loop, lib, mode, args.n] + ([nodes] if nodes else [])
            got = {"bare": [], "ncclprobe": [], "uprobe": []}
            for i in range(args.runs):  # interleaved: the machine's noise hits all alike
                got["bare"].append(ns_per_call(run(cmd)))
                out = run([ncclprobe, "record", "--format", "none", "-o", f"{tmp}/r{i}{mode}{nodes}",
                           "--", *cmd])
                got["ncclprobe"].append(ns_per_call(out))
                if have_bpftrace:
                    prog = f"uprobe:{lib}:{fn} {{ @n = count(); }}"
                    out = run(["bpftrace", "-q", "-e", prog, "-c", " ".join(map(str, cmd))])
                    got["uprobe"].append(ns_per_call(out))
            med = {k: statistics.median(v) if v else None for k, v in got.items()}
            rows.append((label, med))
            print(f"{label}: " + ", ".join(f"{k} {v:.0f} ns" for k, v in med.items() if v),
                  file=sys.stderr)
        out = run([ncclprobe, "record", "--format", "none", "-o", f"{tmp}/mem", "--", loop, lib,
                   "replay", 1, 10000])
        summary = json.loads(Path(f"{tmp}/mem/summary.json").read_text())
        g = next(t["graphs"] for t in summary["targets"] if "graphs" in t)
    lines = ["# CUDA graph tracking: cost per call (bench/graphs.py)", "",
             f"{args.runs} runs of {args.n} calls each, medians; the CUDA driver TEST DOUBLE "
             "(libfakecuda.so) stands in for libcuda. Ratios are to the bare call in the same run.",
             "", "| call | bare ns | ncclprobe ns | ratio | bare uprobe ns | ratio |",
             "|---|---:|---:|---:|---:|---:|"]
    for label, med in rows:
        bare = med["bare"]
        up = med["uprobe"]
        lines.append(f"| {label} | {bare:.0f} | {med['ncclprobe']:.0f} | "
                     f"{med['ncclprobe'] / bare:.1f} | "
                     + (f"{up:.0f} | {up / bare:.1f} |" if up else "- | - |"))
    nodes = g["nodes_live"]
    lines += ["", f"Memory after capturing {nodes} nodes from one line: "
              f"{g['node_bytes'] / nodes:.0f} bytes per node (the node and its kernel name), "
              f"plus the capture stack, interned: {g['capture_stack_bytes']} bytes for the one "
              "distinct stack here (a server's 30-60 graphs share their capture sites).", ""]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
