#!/usr/bin/python3
"""How fast the reader reads Python-sized records: bench/reader.sh's harness.

    reader.py --build BUILD [--previous PATH] [--python PY] [--seconds S] [--rounds N]
              [--threads N] [--depth D] [--np-args ARGS] [--also NAME=ARGS] [--pin W,T]
              [--out FILE]

Workload: bench/py_threads_flat.py, N CPython threads (4) launching flat out at Python depth
D (20), attached with `ncclprobe record --pid`. Each run: the workload starts and waits, the
tracer attaches, the launches run for S seconds, the harness waits until the tracer's CPU time
stops growing (it has read everything), reads it, and lets the workload exit. Per run:

- made: launches the workload made; hits / dropped: the tracer's probe_hits and
  events_dropped (summary.json); read = hits - dropped.
- drop %: dropped / hits.
- read/s: records read per second of the run (capped by what the workload makes).
- read/cpu-s: records read per second of the tracer's CPU time (all its threads, from the
  launches' start until it was idle again): the reader's capacity, whether or not it kept up.

--previous PATH (another ncclprobe binary, e.g. the commit before) runs in the same rounds,
interleaved; so does each --also NAME=ARGS (BUILD with more options, e.g.
"no-backlog=--reader-backlog-mb 0"). --pin W,T puts the workload on CPU W and the tracer on CPU T. Standard library
only.
"""
import argparse
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time

import bench

HERE = os.path.dirname(os.path.abspath(__file__))




def settle(pid, quiet_ns=3_000_000, step=0.1, limit=20.0):
    """Waits until the process's CPU time grows by less than quiet_ns in a step; returns it."""
    last = bench.cpu_ns(pid)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        time.sleep(step)
        now = bench.cpu_ns(pid)
        if now is None or last is None or now - last < quiet_ns:
            return now
        last = now
    return last




def one_run(args, name, binary, extra):
    workdir = tempfile.mkdtemp(prefix="ncclprobe-reader-")
    wl = tp = None
    try:
        argv = [args.python, os.path.join(HERE, "py_threads_flat.py"), str(args.seconds),
                "--threads", str(args.threads), "--depth", str(args.depth), "--pause"]
        wl = bench.Proc(argv, "workload")
        m = wl.wait_line(r"^ready (\d+)$", 30, key="out")
        if not m:
            raise RuntimeError(f"the workload did not start:\n{wl.text()}")
        rec = os.path.join(workdir, "rec")
        tp = bench.Proc([binary, "record", "--pid", str(wl.pid), "-o", rec] + extra, name)
        if not tp.wait_line(rf"recording process {wl.pid}\b", 30, key="err"):
            raise RuntimeError(f"{name} did not attach:\n{tp.text()}")
        if args.pin:
            bench.pin(wl.pid, {args.pin[0]})
            bench.pin(tp.pid, {args.pin[1]})
        cpu0 = settle(tp.pid)
        wl.send(signal.SIGUSR1)
        m = wl.wait_line(r"^launches (\d+) seconds ([0-9.]+)$", args.seconds + 60, key="out")
        if not m:
            raise RuntimeError(f"the workload did not finish:\n{wl.text()}")
        made, secs = int(m.group(1)), float(m.group(2))
        cpu1 = settle(tp.pid)
        wl.send(signal.SIGUSR1)
        if wl.wait(30) is None:
            raise RuntimeError("the workload did not exit")
        if tp.wait(10) is None:
            tp.send(signal.SIGINT)
        if tp.stop(signal.SIGINT, 60) != 0:
            raise RuntimeError(f"{name} exited with {tp.p.returncode}:\n{tp.text()}")
        tot = bench.read_summary(rec)["totals"]
        hits, dropped = tot["probe_hits"], tot["events_dropped"]
        read = hits - dropped
        cpu_s = (cpu1 - cpu0) / 1e9 if cpu0 is not None and cpu1 is not None else float("nan")
        return {"made": made, "secs": secs, "hits": hits, "dropped": dropped, "read": read,
                "drop_pct": 100.0 * dropped / hits if hits else float("nan"),
                "read_per_s": read / secs, "cpu_s": cpu_s,
                "read_per_cpu_s": read / cpu_s if cpu_s > 0 else float("nan"),
                "made_per_s": made / secs}
    finally:
        for p, sig in ((tp, signal.SIGINT), (wl, signal.SIGKILL)):
            if p is not None and p.alive():
                p.stop(sig, 10)
        shutil.rmtree(workdir, ignore_errors=True)


def med(rs, key):
    return statistics.median(r[key] for r in rs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--previous", help="another ncclprobe binary, measured beside BUILD")
    ap.add_argument("--previous-label", default=os.environ.get("BENCH_PREVIOUS_LABEL", "previous"))
    ap.add_argument("--python", default=None)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--np-args", default="", help="more ncclprobe options, every build")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=ARGS",
                    help="BUILD once more with these ncclprobe options, as NAME (repeatable)")
    ap.add_argument("--pin", default="",
                    help="W,T: the workload on CPU W, the tracer on CPU T (a CPU of its own)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    args.pin = [int(x) for x in args.pin.split(",")] if args.pin else None
    if os.geteuid() != 0:
        sys.exit("reader.py: needs root (BPF, uprobes)")
    if not args.python:
        base = "/root/.pyenv/versions"
        vs = sorted((v for v in os.listdir(base) if v.startswith("3.12.")),
                    key=lambda v: [int(x) for x in v.split(".")]) if os.path.isdir(base) else []
        if not vs:
            sys.exit("reader.py: no /root/.pyenv/versions/3.12.*; pass --python")
        args.python = os.path.join(base, vs[-1], "bin", "python3")
    extra = args.np_args.split()
    this = os.path.join(args.build, "ncclprobe")
    configs = []
    if args.previous:
        configs.append((args.previous_label, args.previous, extra))
    configs.append(("this", this, extra))
    for spec in args.also:
        name, _, more = spec.partition("=")
        configs.append((name, this, extra + more.split()))

    results = {c[0]: [] for c in configs}
    for rnd in range(args.rounds):
        order = configs if rnd % 2 == 0 else list(reversed(configs))
        for name, binary, ex in order:
            r = one_run(args, name, binary, ex)
            results[name].append(r)
            bench.log(f"round {rnd + 1} {name}: made {r['made_per_s']:.0f}/s, read "
                      f"{r['read_per_s']:.0f}/s, {r['read_per_cpu_s']:.0f}/cpu-s, drops "
                      f"{r['drop_pct']:.2f}% ({r['dropped']} of {r['hits']})")

    L = ["# Reader throughput: Python-sized records", "",
         f"- {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {platform.node()}, {os.cpu_count()} CPUs, "
         f"Linux {platform.release()}",
         f"- workload: bench/py_threads_flat.py, {args.threads} threads, Python depth "
         f"{args.depth}, {args.seconds:g} s per run, {os.path.basename(os.path.dirname(os.path.dirname(args.python)))}; "
         f"`ncclprobe record --pid PID {args.np_args}`".rstrip(),
         f"- {args.rounds} interleaved rounds; medians (each run's numbers are above them in "
         "the log)" + (f"; workload pinned to CPU {args.pin[0]}, tracer to CPU {args.pin[1]}"
                       if args.pin else ""), "",
         "| build | made/s | read/s | read per CPU-second | drops | tracer CPU s |",
         "|---|---:|---:|---:|---:|---:|"]
    for name, _, _ in configs:
        rs = results[name]
        L.append(f"| {name} | {med(rs, 'made_per_s'):,.0f} | {med(rs, 'read_per_s'):,.0f} | "
                 f"{med(rs, 'read_per_cpu_s'):,.0f} | {med(rs, 'drop_pct'):.2f}% | "
                 f"{med(rs, 'cpu_s'):.2f} |")
    if args.previous:
        b = med(results[configs[0][0]], "read_per_cpu_s")
        for name, _, _ in configs[1:]:
            L.append(f"\n{name}: read per CPU-second {med(results[name], 'read_per_cpu_s') / b:.2f}x "
                     f"{configs[0][0]}'s")
    bench.emit("\n".join(L) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
