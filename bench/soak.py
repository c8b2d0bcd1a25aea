#!/usr/bin/python3
"""soak.py - the daemon always on over many launches from processes that come and go
(issue 24); run through bench/soak.sh.

    soak.py --build BUILD --launch-loop PATH [--launches N] [--per-process N]
            [--concurrent K] [--threads T] [--interval S] [--out FILE]

One `ncclprobe daemon` (always-on aggregate sets, rotating every --interval) traces
launch_loop processes started one after another, K at a time, each waiting until the daemon
traces it before it launches --per-process times (warm-up 0) and exits, until --launches
have been made. Every second the daemon's RSS, open file descriptors and status counters
are sampled. At the end every process's launches, as it counted them itself, must equal the
launches its output sets count (window.json totals, summed over the rotations): exact, or the
run fails. Reports the RSS and fd slopes (least squares over the samples after the first
tenth of the run), highs and lows, drops, and the launch rate.

Standard library only; the daemon and workload handling are daemon_bench.py's.
"""
import argparse
import os
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import daemon_bench as db  # noqa: E402


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def slope(points):
    """Least-squares slope of [(t, y)] per second; 0.0 for fewer than two points."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (y - my) for t, y in points) / var if var else 0.0


def sample(d, t0):
    st = d.status()
    return {"t": time.monotonic() - t0, "rss": db.rss_bytes(d.pid), "fds": fd_count(d.pid),
            "targets": len(st["targets"]), "status": st}


def run(args):
    d = db.Daemon(args, "soak", f"aggregate_interval = {args.interval}\ncpu_budget = 100\n")
    t0 = time.monotonic()
    samples, running, finished = [sample(d, t0)], [], []
    started = made = 0
    next_sample = t0 + 1.0
    try:
        while made < args.launches or running:
            while len(running) < args.concurrent and started * args.per_process < args.launches:
                extra = ["--iters", str(args.per_process), "--warmup", "0", "--batch", "1000",
                         "--rate", str(args.rate)]
                if args.threads:
                    extra += ["--threads", str(args.threads)]
                p = db.loop_proc(args, extra)
                d.wait_traced(p.pid)
                p.send(signal.SIGUSR1)
                running.append(p)
                started += 1
            for p in list(running):
                if p.wait(0) is not None:
                    kv = db.finish_loop(p)
                    finished.append((p.pid, int(kv["launches"])))
                    made += int(kv["launches"])
                    running.remove(p)
            if time.monotonic() >= next_sample:
                samples.append(sample(d, t0))
                next_sample += 1.0
                s = samples[-1]
                if len(samples) % 30 == 0:
                    bench.log(f"  {s['t']:.0f} s: {made / 1e6:.2f} M launches, RSS "
                              f"{s['rss'] / 2**20:.1f} MiB, {s['fds']} fds, "
                              f"{s['targets']} targets")
            time.sleep(0.01)
        elapsed = time.monotonic() - t0
        # every process's sets are written once the daemon lets it go
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(d.target(pid) for pid, _ in finished[-5:]):
            time.sleep(0.2)
        samples.append(sample(d, t0))
        last_status = samples[-1]["status"]
        d.stop()
    finally:
        db.kill_all()
    # Exact accounting: each launch a process made is in its sets, or counted as dropped
    # (ring buffer full) or rate-limited (the CPU budget), by probe hits, never lost.
    mismatches, kept, dropped, limited = [], 0, 0, 0
    for pid, n in finished:
        tot = d.totals(pid) or {}
        got = (tot.get("launches", 0), tot.get("events_dropped", 0), tot.get("rate_limited", 0))
        kept, dropped, limited = kept + got[0], dropped + got[1], limited + got[2]
        if sum(got) != n:
            mismatches.append((pid, n, got))
    return {"elapsed": elapsed, "made": made, "processes": len(finished), "samples": samples,
            "mismatches": mismatches, "status": last_status, "kept": kept, "dropped": dropped,
            "limited": limited}


def report(args, r):
    steady = [s for s in r["samples"] if r["elapsed"] / 10 <= s["t"] <= r["elapsed"]]
    rss = [(s["t"], s["rss"] / 2**20) for s in steady if s["rss"]]
    fds = [(s["t"], s["fds"]) for s in steady if s["fds"] is not None]
    all_rss = [s["rss"] / 2**20 for s in r["samples"] if s["rss"]]
    all_fds = [s["fds"] for s in r["samples"] if s["fds"] is not None]
    lines = [
        f"## Soak: {r['made']:,} launches from {r['processes']} processes",
        "",
        f"Daemon always on (aggregate sets rotating every {args.interval}), launch_loop "
        f"processes {args.concurrent} at a time, {args.per_process:,} launches each at "
        f"{args.rate or 'unpaced'} launches/s"
        f"{f' on {args.threads} threads' if args.threads else ''}; {os.cpu_count()} CPUs, "
        f"ncclprobe {bench.source_revision(os.path.dirname(args.ncclprobe))}.",
        "",
        "| what | value |",
        "|---|---:|",
        f"| run time | {r['elapsed']:.0f} s ({r['made'] / r['elapsed']:,.0f} launches/s) |",
        f"| RSS start / min / max / end | {all_rss[0]:.1f} / {min(all_rss):.1f} / "
        f"{max(all_rss):.1f} / {all_rss[-1]:.1f} MiB |",
        f"| RSS slope (after the first tenth) | {slope(rss) * 3600:+.2f} MiB/hour |",
        f"| open fds start / min / max / end | {all_fds[0]} / {min(all_fds)} / {max(all_fds)} "
        f"/ {all_fds[-1]} |",
        f"| fd slope (after the first tenth) | {slope(fds) * 3600:+.2f} fds/hour |",
        f"| launches in the sets / dropped (ring full) / rate-limited | {r['kept']:,} / "
        f"{r['dropped']:,} ({100 * r['dropped'] / max(r['made'], 1):.2f}%) / {r['limited']:,} |",
        f"| processes whose launches all add up (sets + dropped + limited) | "
        f"{r['processes'] - len(r['mismatches'])} of {r['processes']} |",
        "",
    ]
    if r["mismatches"]:
        lines.append("Mismatches (pid, launched, (kept, dropped, limited)): " +
                     ", ".join(f"{p} {n} {s}" for p, n, s in r["mismatches"][:20]))
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--launch-loop", required=True)
    ap.add_argument("--launches", type=int, default=10_000_000)
    ap.add_argument("--per-process", type=int, default=250_000)
    ap.add_argument("--concurrent", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--rate", type=int, default=25000, help="launches/s per process; 0: flat out")
    ap.add_argument("--interval", default="30s", help="aggregate_interval (at least 10s)")
    ap.add_argument("--out")
    args = ap.parse_args()
    args.ncclprobe = os.path.abspath(os.path.join(args.build, "ncclprobe"))
    args.tmp = tempfile.mkdtemp(prefix="np-soak-")
    # a copy named npd_loop: its comm is what the daemon's include_comm (npd_*) selects
    args.loop = os.path.join(args.tmp, "npd_loop")
    shutil.copy2(args.launch_loop, args.loop)
    try:
        r = run(args)
        report(args, r)
    finally:
        if not os.environ.get("SOAK_KEEP"):
            shutil.rmtree(args.tmp, ignore_errors=True)
    sys.exit(1 if r["mismatches"] else 0)


if __name__ == "__main__":
    main()
