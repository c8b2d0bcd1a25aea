#!/usr/bin/python3
"""Records handled per second against the reader's threads: bench/reader_threads.sh's harness.

    reader_threads.py --build BUILD [--threads-list 0,1,2] [--procs P] [--py-threads N]
                      [--depth D] [--seconds S] [--rounds R] [--python PY] [--out FILE]

Workload: P processes of bench/py_threads_flat.py (N CPython threads each, Python depth D),
all attached by one `ncclprobe record --pid P1,P2,... --reader-threads T --ring-buffer-mb
1024`, launching flat out for S seconds while the tracer is stopped (SIGSTOP): the records
wait in the BPF ring, none is read yet. Then the workloads wait, the tracer is let go
(SIGCONT) and works the whole burst off with every CPU to itself; the harness waits until
its CPU time stops growing. Per run:

- read: records handled (probe_hits - events_dropped, summary.json; a burst bigger than the
  ring drops, and is counted);
- wall: seconds from SIGCONT until the tracer was idle again;
- handled/s: read / wall - the reader's throughput: draining, unwinding, symbolizing,
  writing;
- cores: the tracer's CPU time / wall, all its threads (the cores it used);
- per thread: summary.json's reader.thread_stacks (stacks each worker built).

Each --threads-list value runs once per round, interleaved, so that a slower moment of a
shared host hits every configuration. Standard library only.
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
from reader import settle

HERE = os.path.dirname(os.path.abspath(__file__))


def thread_cpu(pid):
    """{thread name: CPU ns} of the tracer, its workers (np-unwind-N) as one."""
    out = {}
    for name, ns in (bench.cpu_ns_by_thread(pid) or {}).items():
        name = "worker" if name.startswith("np-unwind-") else name
        out[name] = out.get(name, 0) + ns
    return out


def start_workloads(args):
    procs = []
    for i in range(args.procs):
        argv = [args.python, os.path.join(HERE, "py_threads_flat.py"), str(args.seconds),
                "--threads", str(args.py_threads), "--depth", str(args.depth), "--pause"]
        if args.new_stacks:
            argv.append("--new-stacks")
        wl = bench.Proc(argv, f"workload{i}")
        procs.append(wl)
        if not wl.wait_line(r"^ready (\d+)$", 30, key="out"):
            raise RuntimeError(f"workload {i} did not start:\n{wl.text()}")
    return procs


def one_run(args, threads):
    workdir = tempfile.mkdtemp(prefix="ncclprobe-reader-threads-")
    wls, tp = [], None
    try:
        wls = start_workloads(args)
        rec = os.path.join(workdir, "rec")
        pids = ",".join(str(w.pid) for w in wls)
        tp = bench.Proc([os.path.join(args.build, "ncclprobe"), "record", "--pid", pids, "-o", rec,
                         "--reader-threads", str(threads), "--ring-buffer-mb", "1024"],
                        f"threads={threads}")
        for w in wls:
            if not tp.wait_line(rf"recording process {w.pid}\b", 30, key="err"):
                raise RuntimeError(f"the tracer did not attach to {w.pid}:\n{tp.text()}")
        settle(tp.pid)
        os.kill(tp.pid, signal.SIGSTOP)
        try:
            for w in wls:
                w.send(signal.SIGUSR1)
            made = 0
            for w in wls:
                m = w.wait_line(r"^launches (\d+) seconds ([0-9.]+)$", args.seconds + 60,
                                key="out")
                if not m:
                    raise RuntimeError(f"a workload did not finish:\n{w.text()}")
                made += int(m.group(1))
            cpu0 = bench.cpu_ns(tp.pid)
            by_thread0 = thread_cpu(tp.pid)
            t0 = time.monotonic()
        finally:
            os.kill(tp.pid, signal.SIGCONT)
        cpu1 = settle(tp.pid, step=0.05)
        t1 = time.monotonic() - 0.05  # settle saw no growth over its last step
        by_thread = {k: (v - by_thread0.get(k, 0)) / 1e9 for k, v in thread_cpu(tp.pid).items()}
        for w in wls:
            w.send(signal.SIGUSR1)
            w.wait(30)
        if tp.stop(signal.SIGINT, 120) != 0:
            raise RuntimeError(f"the tracer exited with {tp.p.returncode}:\n{tp.text()}")
        s = bench.read_summary(rec)
        tot, reader = s["totals"], s["reader"]
        read = tot["probe_hits"] - tot["events_dropped"]
        wall = t1 - t0
        cpu_s = (cpu1 - cpu0) / 1e9
        return {"made": made, "read": read, "dropped": tot["events_dropped"], "wall": wall,
                "per_s": read / wall, "cores": cpu_s / wall, "by_thread": by_thread,
                "per_thread": reader.get("thread_stacks", [])}
    finally:
        if tp is not None and tp.alive():
            tp.stop(signal.SIGINT, 30)
        for w in wls:
            if w.alive():
                w.stop(signal.SIGKILL, 10)
        shutil.rmtree(workdir, ignore_errors=True)


def newest_python312():
    base = "/root/.pyenv/versions"
    vs = sorted((v for v in os.listdir(base) if v.startswith("3.12.")),
                key=lambda v: [int(x) for x in v.split(".")]) if os.path.isdir(base) else []
    return os.path.join(base, vs[-1], "bin", "python3") if vs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--threads-list", default="0,1,2")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--py-threads", type=int, default=1)
    ap.add_argument("--depth", type=int, default=60)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--python", default=None)
    ap.add_argument("--new-stacks", action="store_true",
                    help="about a new stack per launch (py_threads_flat.py --new-stacks)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("reader_threads.py: needs root (BPF, uprobes)")
    args.python = args.python or newest_python312()
    if not args.python:
        sys.exit("reader_threads.py: no /root/.pyenv/versions/3.12.*; pass --python")
    counts = [int(x) for x in args.threads_list.split(",")]
    results = {t: [] for t in counts}
    for rnd in range(args.rounds):
        for t in (counts if rnd % 2 == 0 else list(reversed(counts))):
            r = one_run(args, t)
            results[t].append(r)
            bench.log(f"round {rnd + 1} threads={t}: {r['read']} read in {r['wall']:.2f} s "
                      f"({r['per_s']:.0f}/s), "
                      f"{r['cores']:.2f} cores, dropped {r['dropped']}, stacks per worker "
                      f"{r['per_thread']}, CPU s by thread "
                      + ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["by_thread"].items())))

    def med(t, key):
        return statistics.median(r[key] for r in results[t])

    base = med(counts[0], "per_s")
    L = ["# Reader threads: records handled per second against the cores used", "",
         f"- {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {platform.node()}, {os.cpu_count()} CPUs, "
         f"Linux {platform.release()}",
         f"- workload: {args.procs} processes of bench/py_threads_flat.py, {args.py_threads} "
         f"threads each, Python depth {args.depth}, {args.seconds:g} s flat out while the "
         "tracer is stopped; `ncclprobe record --pid P1,P2 --reader-threads T "
         "--ring-buffer-mb 1024`, then let go",
         f"- {args.rounds} interleaved rounds; medians", "",
         "| --reader-threads | handled/s | vs first | cores used | wall s | dropped | read |",
         "|---:|---:|---:|---:|---:|---:|---:|"]
    for t in counts:
        L.append(f"| {t} | {med(t, 'per_s'):,.0f} | {med(t, 'per_s') / base:.2f}x | "
                 f"{med(t, 'cores'):.2f} | {med(t, 'wall'):.2f} | "
                 f"{med(t, 'dropped'):,.0f} | {med(t, 'read'):,.0f} |")
    bench.emit("\n".join(L) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
