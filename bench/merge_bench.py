#!/usr/bin/env python3
"""bench/merge_bench.py - `ncclprobe merge` against the established Python
merge algorithm (tests/test_merge.py's reference_merge) on generated inputs of
10k, 100k and 1M CPU launches (2% of them CUDA graph launches of 5 kernels).

For each size: generates stacks.ext.folded + trace.json (tests/test_merge.py's
generate_inputs, written straight to files), times `ncclprobe merge` (median
of --reps runs, wall clock), measures its peak RSS with /usr/bin/time -v, and
times the reference in its own Python process, killed after --reference-timeout
seconds. Also checks, on a graph-free input, that both give the same bytes.
Writes a Markdown report (--out). Standard library only.
"""

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("NCCLPROBE_BUILD", str(REPO / "build"))

import test_merge  # noqa: E402  (generate_inputs, reference_merge, trace shapes)


class FileSink:
    """Receives generate_inputs' output and writes it to the two files."""

    def __init__(self, cpu_path, trace_path):
        self.cpu = open(cpu_path, "w", encoding="utf-8", buffering=1 << 20)
        self.trace = open(trace_path, "w", encoding="utf-8", buffering=1 << 20)
        self.trace.write(test_merge.trace_head())
        self.first = True
        self.ncpu = self.nevents = 0

    def add_cpu(self, line, line_with_leaf):
        # as other tools write them (no [GPU_Kernel] leaf): the reference reads them too
        self.cpu.write(line + "\n")
        self.ncpu += 1

    def add_event(self, ev):
        self.trace.write(("" if self.first else ",\n") + test_merge.dumps(ev))
        self.first = False
        self.nevents += 1

    def close(self):
        self.trace.write(test_merge.trace_tail())
        self.cpu.close()
        self.trace.close()


def generate(data_dir, n, graph_fraction, seed=7):
    """Writes (or reuses) the inputs for n launches; returns their paths."""
    tag = f"{n}-g{graph_fraction}-s{seed}"
    cpu, trace = data_dir / f"stacks-{tag}.ext.folded", data_dir / f"trace-{tag}.json"
    if not (cpu.exists() and trace.exists()):
        t0 = time.perf_counter()
        sink = FileSink(cpu.with_suffix(".tmp"), trace.with_suffix(".tmp"))
        test_merge.generate_inputs(seed, n, graph_fraction=graph_fraction, sink=sink)
        sink.close()
        cpu.with_suffix(".tmp").rename(cpu)
        trace.with_suffix(".tmp").rename(trace)
        print(f"  generated {n} launches in {time.perf_counter() - t0:.0f} s: "
              f"{sink.ncpu} CPU lines, {sink.nevents} trace events", flush=True)
    return cpu, trace


def run_ncclprobe(ncclprobe, cpu, trace, out, wrap=()):
    argv = [*wrap, str(ncclprobe), "merge", "--cpu", str(cpu), "--gpu", str(trace), "-o", str(out),
            "--gpu-ns-output", str(out) + ".ns"]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"ncclprobe merge failed: {proc.stderr}")
    return wall, proc.stderr


def peak_rss_mib(ncclprobe, cpu, trace, out):
    _, err = run_ncclprobe(ncclprobe, cpu, trace, out, wrap=("/usr/bin/time", "-v"))
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    return int(m.group(1)) / 1024 if m else float("nan")


def run_reference(cpu, trace, out, timeout):
    """Wall seconds of the reference in its own process, or None on timeout."""
    argv = [sys.executable, __file__, "--reference", str(cpu), str(trace), str(out)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        raise SystemExit(f"reference failed: {proc.stderr}")
    return time.perf_counter() - t0


def reference_main(cpu, trace, out):
    cpu_text = Path(cpu).read_text(encoding="utf-8")
    trace_text = Path(trace).read_text(encoding="utf-8")
    Path(out).write_text(test_merge.reference_merge(cpu_text, trace_text), encoding="utf-8")


def machine_info(ncclprobe):
    cpu_model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
    mem_kib = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip() or "unknown"
    return (f"{os.cpu_count()} CPUs ({cpu_model}), {mem_kib / 1048576:.0f} GiB RAM, "
            f"kernel {platform.release()}, Python {platform.python_version()}; "
            f"ncclprobe {ncclprobe} (checkout at {rev}, uncommitted changes included)")


def check_identical(ncclprobe, data_dir, n):
    cpu, trace = generate(data_dir, n, 0.0, seed=11)
    ours, ref = data_dir / "identity.ours", data_dir / "identity.ref"
    run_ncclprobe(ncclprobe, cpu, trace, ours)
    run_reference(cpu, trace, ref, timeout=None)
    return ours.read_bytes() == ref.read_bytes()


def fmt_s(seconds):
    return f"{seconds:.2f}" if seconds < 10 else f"{seconds:.0f}"


def bench_size(args, n):
    print(f"{n} launches:", flush=True)
    cpu, trace = generate(args.data_dir, n, args.graph_fraction)
    out = args.data_dir / f"out-{n}.folded"
    walls = [run_ncclprobe(args.ncclprobe, cpu, trace, out)[0] for _ in range(args.reps)]
    row = {"n": n, "cpu_mb": cpu.stat().st_size / 1e6, "trace_mb": trace.stat().st_size / 1e6,
           "ours": statistics.median(walls), "ours_all": walls,
           "rss": peak_rss_mib(args.ncclprobe, cpu, trace, out), "ref": None, "ref_note": ""}
    print(f"  ncclprobe merge: {fmt_s(row['ours'])} s (runs: "
          f"{', '.join(fmt_s(w) for w in walls)}), peak RSS {row['rss']:.0f} MiB", flush=True)
    if n <= args.reference_max:
        row["ref"] = run_reference(cpu, trace, args.data_dir / f"ref-{n}.folded",
                                   args.reference_timeout)
        row["ref_note"] = (f"did not finish in {args.reference_timeout} s" if row["ref"] is None
                           else f"{fmt_s(row['ref'])} s")
    else:
        row["ref_note"] = "not run (O(n^2))"
    print(f"  reference: {row['ref_note']}", flush=True)
    return row


def report(args, rows, identical, info):
    base = next((r for r in rows if r["ref"] is not None), None)
    lines = [
        "# `ncclprobe merge` benchmark results", "",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} UTC",
        f"- machine: {info}",
        "- inputs: tests/test_merge.py generate_inputs(seed 7): 5 threads in 2 processes, "
        f"launches 20-150 us apart, {args.graph_fraction:.0%} of them cudaGraphLaunch with "
        "5 kernels, stacks with C++ templates and Python frames, pending launches, lost events, "
        "noise",
        f"- ncclprobe: median of {args.reps} runs (wall clock, files in the page cache); "
        "peak RSS from `/usr/bin/time -v`, one more run",
        f"- reference: the established algorithm in Python (tests/test_merge.py reference_merge), "
        f"one run in its own process, killed after {args.reference_timeout} s",
        f"- same bytes as the reference on a graph-free {args.identity_size} input: "
        f"{'yes' if identical else 'NO'}", "",
        "| CPU launches | stacks.ext.folded MB | trace.json MB | ncclprobe merge s | "
        "peak RSS MiB | reference s | reference / ncclprobe |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r["ref"] is not None:
            ratio = f"{r['ref'] / r['ours']:.0f}x"
        elif r["n"] <= args.reference_max:  # timed out: a lower bound
            ratio = f"> {args.reference_timeout / r['ours']:.0f}x"
        else:
            ratio = "-"
        lines.append(f"| {r['n']:,} | {r['cpu_mb']:.0f} | {r['trace_mb']:.0f} | "
                     f"{fmt_s(r['ours'])} | {r['rss']:.0f} | {r['ref_note']} | {ratio} |")
    if base:
        lines += ["", f"Extrapolation (stated as such, not measured): the reference is "
                  f"O(CPU launches x runtime events); from {base['n']:,} launches in "
                  f"{fmt_s(base['ref'])} s it would need about "
                  f"{fmt_s(base['ref'] * 100)} s at {base['n'] * 10:,} and "
                  f"{base['ref'] * 10000 / 3600:.0f} h at {base['n'] * 100:,}."]
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print("\n" + text)


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--reference":
        reference_main(*sys.argv[2:])
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--graph-fraction", type=float, default=0.02)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--reference-timeout", type=int, default=300)
    p.add_argument("--reference-max", type=int, default=100000,
                   help="largest size the reference is run on")
    p.add_argument("--identity-size", type=int, default=10000)
    p.add_argument("--data-dir", type=Path)
    p.add_argument("--out", type=Path, default=HERE / "results-merge.md")
    args = p.parse_args()
    args.ncclprobe = Path(args.build).resolve() / "ncclprobe"
    if not args.ncclprobe.exists():
        raise SystemExit(f"{args.ncclprobe} not built")
    args.data_dir = args.data_dir or Path(args.build).resolve() / "bench" / "merge-data"
    args.data_dir.mkdir(parents=True, exist_ok=True)

    info = machine_info(args.ncclprobe)
    identical = check_identical(args.ncclprobe, args.data_dir, args.identity_size)
    print(f"graph-free {args.identity_size}: same bytes as the reference: {identical}")
    rows = [bench_size(args, int(n)) for n in args.sizes.split(",")]
    report(args, rows, identical, info)
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
