#!/usr/bin/python3
"""ncclprobe benchmarks: per-launch added latency and the highest drop-free rate.

Run through bench/run.sh (which builds launch_loop); see bench/README.md.

    bench.py --build BUILD --launch-loop PATH [--rounds N] [--iters N] [--depth N]
             [--rates LIST] [--rate-seconds S] [--out FILE] [--skip-latency] [--skip-rates]

Standard library only. Every process this script starts is tracked by pid and
stopped on every path; the perf probe it creates is deleted again.
"""
import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

CUDART = "/usr/local/cuda/lib64/libcudart.so.13"
PERF_EVENT = "probe_libcudart:cudaLaunchKernel"

STARTED = []  # every Proc we started, for the final clean-up


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Proc:
    """A child process whose stdout and stderr are collected line by line."""

    def __init__(self, argv, name):
        self.name = name
        self.argv = argv
        self.lines = {"out": [], "err": []}
        self.cond = threading.Condition()
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, errors="replace")
        self.pid = self.p.pid
        STARTED.append(self)
        self.threads = [threading.Thread(target=self._read, args=(s, k), daemon=True)
                        for s, k in ((self.p.stdout, "out"), (self.p.stderr, "err"))]
        for t in self.threads:
            t.start()

    def _read(self, stream, key):
        for line in stream:
            with self.cond:
                self.lines[key].append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_line(self, regex, timeout, key=None):
        """First line (stdout or stderr, or only `key`) matching regex, else None."""
        rx = re.compile(regex)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for k in ([key] if key else ["out", "err"]):
                    for line in self.lines[k]:
                        m = rx.search(line)
                        if m:
                            return m
                left = deadline - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and
                                 not any(t.is_alive() for t in self.threads)):
                    return None
                self.cond.wait(min(left, 0.05))

    def text(self):
        with self.cond:
            return "\n".join(self.lines["out"] + self.lines["err"])

    def alive(self):
        return self.p.poll() is None

    def send(self, sig):
        if self.alive():
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def wait(self, timeout):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, sig=signal.SIGTERM, timeout=30.0):
        """Signal (if still running), wait, then SIGKILL as a last resort."""
        if self.alive():
            self.send(sig)
            if self.wait(timeout) is None:
                log(f"  {self.name} (pid {self.pid}) ignored {sig.name}; killing it")
                self.send(signal.SIGKILL)
                self.wait(10)
        for t in self.threads:
            t.join(5)
        return self.p.returncode


def run_cmd(argv, check=True):
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def parse_kv(line):
    return {k: float(v) for k, v in re.findall(r"(\w+)=([-0-9.eE+]+)", line)}


def median(xs):
    return statistics.median(xs) if xs else float("nan")


# ---- tracers ----------------------------------------------------------------


class Tracer:
    """name, start(pid, workdir) -> Proc or None, ready check, stop, events seen."""

    def __init__(self, name, label):
        self.name = name
        self.label = label

    def start(self, pid, workdir):
        return None

    def stop(self, proc):
        pass

    def events(self, proc, workdir):
        return None


class Baseline(Tracer):
    pass


class Ncclprobe(Tracer):
    def __init__(self, name, label, binary, extra=()):
        super().__init__(name, label)
        self.binary = binary
        self.extra = list(extra)

    def start(self, pid, workdir):
        out = os.path.join(workdir, "rec")
        p = Proc([self.binary, "record", "--pid", str(pid), "-o", out] + self.extra, self.name)
        if not p.wait_line(rf"recording process {pid}\b", 30, key="err"):
            raise RuntimeError(f"{self.name} did not attach:\n{p.text()}")
        return p

    def stop(self, proc):
        # It stops by itself once the target exits; SIGINT if it has not.
        if proc.wait(3) is None:
            proc.send(signal.SIGINT)
        if proc.stop(signal.SIGINT, 60) != 0:
            raise RuntimeError(f"{self.name} exited with {proc.p.returncode}:\n{proc.text()}")

    def events(self, proc, workdir):
        return read_summary(os.path.join(workdir, "rec"))["totals"]["probe_hits"]


class Bpftrace(Tracer):
    def start(self, pid, workdir):
        prog = (f"uprobe:{CUDART}:cudaLaunchKernel /pid == {pid}/ "
                "{ @[ustack] = count(); }")
        p = Proc(["bpftrace", "-e", prog], self.name)
        # "Attaching 1 probe..." is printed just before attaching: also wait
        # until the kernel lists bpftrace's uprobe.
        if not p.wait_line(r"Attaching 1 probe", 30):
            raise RuntimeError(f"bpftrace did not start:\n{p.text()}")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = run_cmd(["bpftool", "perf", "list"], check=False)
            if re.search(rf"^pid {p.pid}\s.*uprobe", r.stdout, re.M):
                return p
            if not p.alive():
                break
            time.sleep(0.05)
        raise RuntimeError(f"bpftrace did not attach:\n{p.text()}")

    def stop(self, proc):
        proc.stop(signal.SIGTERM, 60)

    def events(self, proc, workdir):
        return sum(int(n) for n in re.findall(r"^\]: (\d+)$", proc.text(), re.M))


class Perf(Tracer):
    def start(self, pid, workdir):
        p = Proc(["perf", "record", "-e", PERF_EVENT, "-g", "-p", str(pid),
                  "-o", os.path.join(workdir, "perf.data")], self.name)
        time.sleep(1.0)  # perf says nothing when it is attached
        if not p.alive():
            raise RuntimeError(f"perf record failed:\n{p.text()}")
        return p

    def stop(self, proc):
        # perf record -p stops by itself when the target exits.
        if proc.wait(20) is None:
            proc.stop(signal.SIGTERM, 60)
        proc.stop(signal.SIGTERM, 5)

    def events(self, proc, workdir):
        m = re.search(r"\((\d+) samples\)", proc.text())
        return int(m.group(1)) if m else None


def read_summary(outdir):
    with open(os.path.join(outdir, "summary.json")) as f:
        return json.load(f)


# ---- perf probe / tracefs -----------------------------------------------------


class PerfProbe:
    def __init__(self):
        self.created = False

    def setup(self):
        if not os.listdir("/sys/kernel/tracing"):
            run_cmd(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"])
        if PERF_EVENT in run_cmd(["perf", "probe", "-l"], check=False).stdout:
            log(f"  note: {PERF_EVENT} already exists; using it and leaving it in place")
            return
        run_cmd(["perf", "probe", "-q", "-x", CUDART, "cudaLaunchKernel"])
        self.created = True

    def teardown(self):
        if self.created:
            run_cmd(["perf", "probe", "-q", "-d", PERF_EVENT], check=False)
            self.created = False


# ---- one run ---------------------------------------------------------------------


def one_run(launch_loop, tracer, ll_args, settle_s=0.3):
    """Start launch_loop --wait-signal, attach the tracer, run, stop everything.
    Returns (launch_loop's result dict, events the tracer saw or None)."""
    workdir = tempfile.mkdtemp(prefix="ncclprobe-bench-")
    wl = tp = None
    try:
        wl = Proc([launch_loop, "--wait-signal"] + ll_args, "launch_loop")
        m = wl.wait_line(r"^ready (\d+)$", 10, key="out")
        if not m:
            raise RuntimeError(f"launch_loop did not start:\n{wl.text()}")
        tp = tracer.start(wl.pid, workdir)
        time.sleep(settle_s)  # let the tracer's start-up work finish
        wl.send(signal.SIGUSR1)
        if wl.wait(300) is None:
            raise RuntimeError("launch_loop did not finish")
        wl.stop()
        res = wl.wait_line(r"ns_per_launch=", 5, key="out")
        if wl.p.returncode != 0 or not res:
            raise RuntimeError(f"launch_loop failed ({wl.p.returncode}):\n{wl.text()}")
        result = parse_kv(res.string)
        events = None
        if tp:
            tracer.stop(tp)
            tp_done, tp = tp, None
            events = tracer.events(tp_done, workdir)
        summary = None
        if isinstance(tracer, Ncclprobe):
            summary = read_summary(os.path.join(workdir, "rec"))
        return result, events, summary
    finally:
        for p in (tp, wl):
            if p is not None and p.alive():
                p.stop(signal.SIGKILL if p is wl else signal.SIGTERM, 10)
        shutil.rmtree(workdir, ignore_errors=True)


# ---- benchmarks -------------------------------------------------------------------


def bench_latency(args, tracers):
    ll_args = ["--iters", str(args.iters), "--warmup", str(args.warmup),
               "--depth", str(args.depth)]
    expected = args.iters + args.warmup
    ns = {t.name: [] for t in tracers}
    seen = {t.name: [] for t in tracers}
    for r in range(args.rounds):
        # Interleave, rotating the order every round so no configuration
        # always runs first or right after the same neighbour.
        order = tracers[r % len(tracers):] + tracers[:r % len(tracers)]
        for t in order:
            res, ev, _ = one_run(args.launch_loop, t, ll_args)
            ns[t.name].append(res["ns_per_launch"])
            if ev is not None:
                seen[t.name].append(ev)
            log(f"  round {r + 1}/{args.rounds} {t.name:<18} {res['ns_per_launch']:9.1f} ns/launch"
                + (f"  events={ev}" if ev is not None else ""))
    rows = []
    base = ns["baseline"]
    added = {}
    for t in tracers:
        # Added latency: median over rounds of (traced - baseline) in the same round.
        diffs = [x - b for x, b in zip(ns[t.name], base)]
        added[t.name] = median(diffs)
        rows.append({
            "name": t.name, "label": t.label, "median": median(ns[t.name]),
            "min": min(ns[t.name]), "max": max(ns[t.name]), "added": median(diffs),
            "events": seen[t.name], "expected": expected,
        })
    return rows, added, ns


def bench_rates(args, np_bin):
    rows = []
    t = Ncclprobe("ncclprobe", "ncclprobe", np_bin)
    for rate in args.rates:
        ll_args = ["--rate", str(rate), "--duration", str(args.rate_seconds), "--warmup", "0",
                   "--depth", str(args.depth)]
        res, _, summary = one_run(args.launch_loop, t, ll_args)
        tot = summary["totals"]
        hits, dropped, captured = tot["probe_hits"], tot["events_dropped"], tot["events_captured"]
        row = {
            "rate": rate, "achieved": res["rate"], "launches": int(res["launches"]),
            "window_s": res["elapsed_s"], "hits": hits, "captured": captured,
            "dropped": dropped, "drop_pct": 100.0 * dropped / hits if hits else 0.0,
            "consumer_eps": captured / res["elapsed_s"] if res["elapsed_s"] else 0.0,
            "summary_duration_s": summary["duration_s"], "ns_per_launch": res["ns_per_launch"],
        }
        rows.append(row)
        log(f"  rate {rate_label(rate):>6}: achieved {row['achieved']:>9.0f}/s  hits={hits} "
            f"captured={captured} dropped={dropped} ({row['drop_pct']:.2f}%)")
    return rows


def rate_label(rate):
    if rate == 0:
        return "max"
    return f"{rate // 1000}k" if rate % 1000 == 0 else str(rate)


# ---- clean-up check ---------------------------------------------------------------


def leftovers(perf_probe):
    """What of ours is still attached: links/perf events held by pids we started,
    and our perf probe."""
    ours = {str(p.pid) for p in STARTED}
    found = []
    for argv in (["bpftool", "link", "list"], ["bpftool", "perf", "list"]):
        out = run_cmd(argv, check=False).stdout
        for pid in re.findall(r"\((\d+)\)|^pid (\d+)\s", out, re.M):
            pid = pid[0] or pid[1]
            if pid in ours:
                found.append(f"{argv[1]} held by pid {pid}")
    still = [p.name for p in STARTED if p.alive()]
    found += [f"process still running: {n}" for n in still]
    if perf_probe.created or PERF_EVENT in run_cmd(["perf", "probe", "-l"], check=False).stdout:
        found.append(f"perf probe {PERF_EVENT} still defined")
    return found


# ---- report -------------------------------------------------------------------


def fmt_ratio(a, b):
    if b is None or b != b or b <= 0 or a != a:
        return "n/a"
    return f"{a / b:.2f}x"


def report(args, lat, rates, clean):
    lines = []
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
            cpu = m.group(1) if m else cpu
    except OSError:
        pass
    bpftrace_v = run_cmd(["bpftrace", "--version"], check=False).stdout.strip()
    perf_v = run_cmd(["perf", "--version"], check=False).stdout.strip()
    np_v = run_cmd([args.ncclprobe, "--version"], check=False).stdout.strip()
    lines.append("# ncclprobe benchmark results")
    lines.append("")
    lines.append(f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    lines.append(f"- machine: {os.cpu_count()} CPUs ({cpu}), kernel {platform.release()}, "
                 "no GPU (every launch fails at once; the uprobe still fires)")
    lines.append(f"- tools: {np_v or 'ncclprobe'}, {bpftrace_v}, {perf_v}")
    lines.append(f"- workload: launch_loop --depth {args.depth} (stack of {args.depth + 5} frames "
                 f"from _start), cudaLaunchKernel in {CUDART}")
    lines.append("")
    if lat:
        rows, added, ns = lat
        lines.append(f"## Per-launch latency ({args.rounds} interleaved rounds, "
                     f"{args.iters} timed launches each, median of per-batch means)")
        lines.append("")
        lines.append("| configuration | ns/launch (median) | min - max | added ns/launch "
                     "| ncclprobe added / this added | events seen / launches |")
        lines.append("|---|---:|---:|---:|---:|---:|")
        for r in rows:
            ev = r["events"]
            evs = "-" if not ev else f"{median(ev):.0f} / {r['expected']}"
            ratio = "-" if r["name"] in ("baseline",) else fmt_ratio(added["ncclprobe"],
                                                                     r["added"])
            add = "-" if r["name"] == "baseline" else f"{r['added']:.0f}"
            lines.append(f"| {r['label']} | {r['median']:.0f} | {r['min']:.0f} - {r['max']:.0f} "
                         f"| {add} | {ratio} |  {evs} |")
        lines.append("")
        a = added
        lines.append("Added-latency ratios (lower is better for ncclprobe): "
                     f"ncclprobe / bpftrace = {fmt_ratio(a.get('ncclprobe'), a.get('bpftrace'))}, "
                     f"ncclprobe / perf = {fmt_ratio(a.get('ncclprobe'), a.get('perf'))}, "
                     f"ncclprobe --wakeup-kb 0 / ncclprobe = "
                     f"{fmt_ratio(a.get('ncclprobe-wakeup0'), a.get('ncclprobe'))}.")
        lines.append("")
        lines.append("Per-round ns/launch: " + "; ".join(
            f"{k}: " + ", ".join(f"{x:.0f}" for x in v) for k, v in ns.items()))
        lines.append("")
    if rates:
        lines.append(f"## Launch rate vs drops (ncclprobe record, default options, "
                     f"~{args.rate_seconds:g} s per rate)")
        lines.append("")
        lines.append("| target rate/s | achieved rate/s | probe hits | captured | dropped "
                     "| drop % | consumer events/s (captured / launch window) |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|")
        for r in rates:
            lines.append(f"| {rate_label(r['rate'])} | {r['achieved']:.0f} | {r['hits']} "
                         f"| {r['captured']} | {r['dropped']} | {r['drop_pct']:.2f} "
                         f"| {r['consumer_eps']:.0f} |")
        lines.append("")
        clean_rows = [r for r in rates if r["dropped"] == 0]
        first_drop = next((r for r in rates if r["dropped"] > 0), None)
        if clean_rows:
            best = max(clean_rows, key=lambda r: r["achieved"])
            lines.append(f"Highest rate held with zero drops: {best['achieved']:.0f} launches/s "
                         f"(target {rate_label(best['rate'])}).")
        else:
            lines.append("Every rate dropped events.")
        if first_drop:
            lines.append(f"First rate with drops: target {rate_label(first_drop['rate'])} "
                         f"(achieved {first_drop['achieved']:.0f}/s), "
                         f"{first_drop['drop_pct']:.2f}% dropped.")
        else:
            lines.append("No rate dropped events (\"max\" is as fast as the traced loop "
                         "can launch).")
        peak = max(rates, key=lambda r: r["consumer_eps"])
        lines.append(f"Consumer throughput: {peak['consumer_eps']:.0f} events/s captured "
                     f"(best run; events_captured / launch window; a lower bound on what the "
                     f"reader can sustain when nothing was dropped).")
        lines.append("")
    lines.append("## Clean-up")
    lines.append("")
    lines.append("Nothing left behind (no links or perf events held by our processes, no perf "
                 "probe, no process still running)." if not clean else
                 "LEFT BEHIND: " + "; ".join(clean))
    lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--launch-loop", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=200000)
    ap.add_argument("--warmup", type=int, default=10000)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--rates", default="50000,100000,200000,400000,800000,0",
                    help="comma-separated target rates, 0 = as fast as possible")
    ap.add_argument("--rate-seconds", type=float, default=2.0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-rates", action="store_true")
    args = ap.parse_args()
    args.ncclprobe = os.path.abspath(os.path.join(args.build, "ncclprobe"))
    args.launch_loop = os.path.abspath(args.launch_loop)
    args.rates = [int(float(x)) for x in args.rates.split(",") if x.strip()]

    if os.geteuid() != 0:
        sys.exit("bench.py: needs root (BPF, uprobes, perf probe)")
    for tool in ("bpftrace", "perf", "bpftool"):
        if not shutil.which(tool):
            sys.exit(f"bench.py: {tool} not found")

    perf_probe = PerfProbe()
    stop = {"sig": None}

    def on_signal(sig, _frame):
        stop["sig"] = sig
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    lat = rates = None
    try:
        tracers = [
            Baseline("baseline", "no tracer (baseline)"),
            Ncclprobe("ncclprobe", "ncclprobe record", args.ncclprobe),
            Ncclprobe("ncclprobe-wakeup0", "ncclprobe record --wakeup-kb 0", args.ncclprobe,
                      ["--wakeup-kb", "0"]),
            Bpftrace("bpftrace", "bpftrace @[ustack] = count()"),
            Perf("perf", "perf record -g (perf probe)"),
        ]
        if not args.skip_latency:
            perf_probe.setup()
            log(f"latency: {args.rounds} rounds x {len(tracers)} configurations")
            lat = bench_latency(args, tracers)
            perf_probe.teardown()
        if not args.skip_rates:
            log("rates: " + ", ".join(rate_label(r) for r in args.rates))
            rates = bench_rates(args, args.ncclprobe)
    except KeyboardInterrupt:
        log("interrupted")
    finally:
        for p in STARTED:
            if p.alive():
                p.stop(signal.SIGINT if p.name.startswith("ncclprobe") else signal.SIGTERM, 30)
        perf_probe.teardown()
    clean = leftovers(perf_probe)
    text = report(args, lat, rates, clean)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if stop["sig"] or clean:
        sys.exit(1)


if __name__ == "__main__":
    main()
