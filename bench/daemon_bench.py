#!/usr/bin/python3
"""daemon_bench.py - benchmarks of `ncclprobe daemon` (issue 7); run through bench/daemon.sh.

    daemon_bench.py --build BUILD --launch-loop PATH [--python PY] [--rounds N] [--iters N]
                    [--rss-launches N] [--stacks N] [--skip SECTIONS] [--out FILE]
    daemon_bench.py pyloop [--stacks N] [--launches N] [--rate R] [--libcuda PATH]
                    [--wait-signal]          (the many-stacks workload; run by the harness)

Sections (see bench/README.md, "The daemon"):
  overhead  added time per launch, back to back: no tracer, daemon (aggregate), daemon with a
            capture window open, `record --pid`, bpftrace; daemon/tracer CPU per launch
  cpu       tracer CPU in % of a core at a steady launch rate (cpu_budget = 100: no limit)
  budget    an unpaced loop under cpu_budget = 10: the rate limit, the daemon's CPU, the
            loop's own speed against no tracer and against the daemon without a budget
  rss       the daemon's RSS over millions of launches (aggregate / window; one stack /
            many distinct stacks)
  discovery processes started after the daemon: discovery delay, first launch captured

Standard library only; shares its process handling with bench.py. Every process it starts is
tracked by pid and stopped on every path.
"""
import argparse
import ctypes
import datetime
import glob
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CUDART = "/usr/local/cuda/lib64/libcudart.so.13"


# ---- the many-stacks workload (runs under the interpreter the daemon walks) ----------------


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def pyloop(argv):
    """N distinct call paths: N generated functions, each a code object of its own, each
    calling cudaLaunchKernel; launch i goes through function i % N. Paced in batches of ~1 ms
    against an absolute schedule. Prints `launches=N elapsed_s=S rate=R stacks=N`."""
    ap = argparse.ArgumentParser(prog="daemon_bench.py pyloop")
    ap.add_argument("--stacks", type=int, default=50000)
    ap.add_argument("--launches", type=int, default=1000000)
    ap.add_argument("--rate", type=float, default=0, help="launches/s; 0: as fast as possible")
    ap.add_argument("--cudart", default=CUDART)
    ap.add_argument("--libcuda", default=None)
    ap.add_argument("--comm", default="npd_py")
    ap.add_argument("--wait-signal", action="store_true")
    a = ap.parse_args(argv)
    libc = ctypes.CDLL(None)
    # The name first: the daemon reads the comm when the CUDA library is mapped (include_comm).
    libc.prctl(15, a.comm.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    src = "".join(f"def f{i}(L, fn, g, b):\n    return L(fn, g, b, None, 0, None)\n"
                  for i in range(a.stacks))
    ns = {}
    exec(compile(src, "npd_stacks.py", "exec"), ns)
    funcs = [ns[f"f{i}"] for i in range(a.stacks)]
    if a.wait_signal:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGTERM})
    if a.libcuda:
        ctypes.CDLL(a.libcuda, mode=ctypes.RTLD_GLOBAL)
    launch = ctypes.CDLL(a.cudart).cudaLaunchKernel
    launch.restype = ctypes.c_int
    launch.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t,
                       ctypes.c_void_p]
    fn, g, b = ctypes.c_void_p(0x1234), Dim3(1, 1, 1), Dim3(32, 1, 1)
    if a.wait_signal:
        print(f"ready {os.getpid()}", flush=True)
        if signal.sigwait({signal.SIGUSR1, signal.SIGTERM}) != signal.SIGUSR1:
            return 0
    batch = max(1, int(a.rate / 1000)) if a.rate > 0 else 1000
    period = batch / a.rate if a.rate > 0 else 0
    clock = time.monotonic
    t0 = clock()
    nxt = t0
    n, i, nstacks = 0, 0, a.stacks
    while n < a.launches:
        k = min(batch, a.launches - n)
        for _ in range(k):
            funcs[i](launch, fn, g, b)
            i += 1
            if i == nstacks:
                i = 0
        n += k
        if period:
            nxt += period
            d = nxt - clock()
            if d > 0:
                time.sleep(d)
    el = clock() - t0
    print(f"launches={n} elapsed_s={el:.4f} rate={n / el:.0f} stacks={nstacks}", flush=True)
    return 0


if len(sys.argv) > 1 and sys.argv[1] == "pyloop":
    sys.exit(pyloop(sys.argv[2:]))

sys.path.insert(0, HERE)
import bench  # noqa: E402  (bench.py: Proc, run_cmd, cpu_seconds, Bpftrace, ...)
from bench import Proc, log, run_cmd, cpu_seconds, parse_kv  # noqa: E402

NOTES = {}  # anything suspicious, for the report: kind -> [first message, times seen]


def note(msg, kind=None):
    log(f"  NOTE: {msg}")
    n = NOTES.setdefault(kind or msg, [msg, 0])
    n[1] += 1


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            m = re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M)
        return int(m.group(1)) * 1024 if m else None
    except OSError:
        return None


def settle_cpu(pid, quiet=0.4, limit=20.0):
    """Waits until the process's CPU time stops growing (its backlog is read); returns it
    and when it last grew (time.monotonic())."""
    last, same_since, end = cpu_seconds(pid), time.monotonic(), time.monotonic() + limit
    while time.monotonic() < end:
        time.sleep(0.1)
        c = cpu_seconds(pid)
        if c is None:
            break
        if c != last:
            last, same_since = c, time.monotonic()
        elif time.monotonic() - same_since >= quiet:
            break
    return last, same_since


def ctl_request(path, req, timeout=10.0):
    """One request on the daemon's control socket: a JSON line out, a JSON line back."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall((json.dumps(req) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    return json.loads(buf)


def foreign_tracers():
    """ncclprobe / bpftrace / perf processes on the machine that we did not start."""
    ours = {p.pid for p in bench.STARTED}
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in ours or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        name = os.path.basename(argv[0]).decode(errors="replace") if argv and argv[0] else ""
        if name in ("ncclprobe", "bpftrace", "perf") and (len(argv) < 2 or argv[1] != b"ctl"):
            found.append(f"{d}: " + " ".join(a.decode(errors="replace") for a in argv if a))
    return found


def wait_quiet(args):
    """Waits (at most --wait-quiet seconds) until no other tracer runs: another daemon traces
    our workloads too, and any tracer's uprobes on libcudart add noise. What is still there
    is named in the report."""
    end = time.monotonic() + args.wait_quiet
    found = foreign_tracers()
    if found:
        log(f"  waiting up to {args.wait_quiet} s for other tracers to end: {found[:3]}")
    while found and time.monotonic() < end:
        time.sleep(2)
        found = foreign_tracers()
    args.foreign += found


# ---- the daemon --------------------------------------------------------------------------


class Daemon:
    """`ncclprobe daemon` with its paths in a directory of its own. The configuration is the
    defaults plus the paths, `include_comm = npd_*` (only this benchmark's workloads are
    traced, not whatever else runs on the machine) and `extra` lines."""

    seq = 0

    def __init__(self, args, name, extra=""):
        Daemon.seq += 1
        self.binary = args.ncclprobe
        self.dir = os.path.join(args.tmp, f"d{Daemon.seq}-{name}")
        os.makedirs(self.dir)
        self.sock = os.path.join(self.dir, "ctl.sock")
        self.out = os.path.join(self.dir, "out")
        self.conf = os.path.join(self.dir, "ncclprobe.conf")
        with open(self.conf, "w") as f:
            f.write(f"output_dir = {self.out}\nctl_socket = {self.sock}\n"
                    f"cupti_socket = {self.dir}/cupti.sock\ninclude_comm = npd_*\n{extra}")
        self.proc = Proc([self.binary, "daemon", "--config", self.conf], f"daemon {name}")
        self.pid = self.proc.pid
        if not self.proc.wait_line(r"daemon ready", 30):
            self.proc.stop(signal.SIGKILL, 5)
            raise RuntimeError(f"daemon did not start:\n{self.proc.text()}")

    def status(self):
        r = ctl_request(self.sock, {"cmd": "status"})
        if not r.get("ok"):
            raise RuntimeError(f"status: {r}")
        return r

    def ctl(self, *words):
        """The real client: `ncclprobe ctl --socket S --json WORDS`."""
        r = run_cmd([self.binary, "ctl", "--socket", self.sock, "--json", *words])
        return json.loads(r.stdout)

    def target(self, pid, st=None):
        st = st or self.status()
        return next((t for t in st["targets"] if t["pid"] == pid), None)

    def wait_traced(self, pid, timeout=15.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            t = self.target(pid)
            if t and t["probes"] > 0:
                return t
            time.sleep(0.02)
        raise RuntimeError(f"daemon did not trace pid {pid}:\n{self.proc.text()[-3000:]}")

    def stop(self):
        rc = self.proc.stop(signal.SIGTERM, 120)
        if rc != 0:
            raise RuntimeError(f"daemon exited with {rc}:\n{self.proc.text()[-3000:]}")
        errs = [ln for ln in self.proc.text().splitlines()
                if re.search(r"error|warn|cannot", ln, re.I) and "CPU budget" not in ln]
        if errs:
            note(f"daemon {self.dir}: " + " | ".join(errs[:5]))

    def sets(self, pid):
        return sorted(glob.glob(os.path.join(self.out, f"*-{pid}-*")))

    def totals(self, pid):
        """window.json totals of pid's sets, summed; None when it has none."""
        tot = None
        for d in self.sets(pid):
            try:
                with open(os.path.join(d, "window.json")) as f:
                    t = json.load(f)["totals"]
            except (OSError, ValueError, KeyError):
                continue
            tot = tot or {}
            for k, v in t.items():
                tot[k] = tot.get(k, 0) + v
        return tot


def kill_all():
    for p in bench.STARTED:
        if p.alive():
            p.stop(signal.SIGKILL, 5)


def loop_proc(args, extra, wait=True, name="npd_loop"):
    argv = [args.loop] + (["--wait-signal"] if wait else []) + extra
    p = Proc(argv, name)
    if wait and not p.wait_line(r"^ready (\d+)$", 15, key="out"):
        raise RuntimeError(f"launch_loop did not start:\n{p.text()}")
    return p


def py_proc(args, extra, wait=True):
    argv = [args.python, os.path.abspath(__file__), "pyloop"] + extra
    if args.libcuda:
        argv += ["--libcuda", args.libcuda]
    p = Proc(argv + (["--wait-signal"] if wait else []), "npd_py")
    if wait and not p.wait_line(r"^ready (\d+)$", 60, key="out"):
        raise RuntimeError(f"pyloop did not start:\n{p.text()}")
    return p


def finish_loop(p, timeout=600):
    if p.wait(timeout) is None:
        raise RuntimeError(f"{p.name} did not finish")
    p.stop()
    m = p.wait_line(r"launches=", 5, key="out")
    if p.p.returncode != 0 or not m:
        raise RuntimeError(f"{p.name} failed ({p.p.returncode}):\n{p.text()}")
    return parse_kv(m.string)


# ---- 1. overhead per launch ----------------------------------------------------------------

OVH_CONFIGS = ["bare", "daemon", "window", "record", "bpftrace"]
OVH_LABEL = {
    "bare": "no tracer",
    "daemon": "**ncclprobe daemon**, always-on aggregate",
    "window": "ncclprobe daemon, capture window open",
    "record": "ncclprobe record --pid --format none",
    "bpftrace": "bpftrace `@[ustack] = count()`",
}


def tracer_up(args, cfg, pid, wd, extra_conf=""):
    """Starts cfg's tracer for a workload that is already waiting (daemon: started before)."""
    if cfg == "record":  # the recording's cost, not its derived outputs' (made at its end)
        return bench.Ncclprobe("record", "", args.ncclprobe, ["--format", "none"]).start(pid, wd)
    if cfg == "bpftrace":
        return bench.Bpftrace("bpftrace", "").start(pid, wd)
    return None


def overhead_run(args, cfg, rnd, ll_args, expected, extra_conf="", tag="ovh"):
    """One run: returns launch_loop's figures + tracer_cpu_s, captured, dropped, limited."""
    wd = os.path.join(args.tmp, f"{tag}-{cfg}-{rnd}")
    os.makedirs(wd)
    d = tp = wl = None
    try:
        if cfg in ("daemon", "window"):
            d = Daemon(args, f"{tag}-{cfg}-{rnd}", extra_conf)
            if cfg == "window":
                d.ctl("start")
        wl = loop_proc(args, ll_args)
        if d:
            d.wait_traced(wl.pid)
        else:
            tp = tracer_up(args, cfg, wl.pid, wd)
        time.sleep(0.3)
        tpid = d.pid if d else tp.pid if tp else None
        cpu0 = cpu_seconds(tpid) if tpid else None
        t0 = time.monotonic()
        wl.send(signal.SIGUSR1)
        out = finish_loop(wl)
        out["wall_s"] = time.monotonic() - t0
        out["tracer_cpu_s"] = out["tracer_wall_s"] = None
        if tpid:
            cpu1, t1 = settle_cpu(tpid)
            out["tracer_cpu_s"] = cpu1 - cpu0
            out["tracer_wall_s"] = max(t1 - t0, out["wall_s"])
        out["captured"] = out["dropped"] = out["limited"] = None
        if d:
            st = d.status()
            out["limit_activations"] = st["rate_limit"]["activations"]
            out["ring_drops"] = st["drops"]["ring_buffer"]
            out["limited"] = st["drops"]["rate_limited"]
            if cfg == "window":
                d.ctl("stop")
            d.stop()
            tot = d.totals(wl.pid) or {}
            out["captured"] = tot.get("launches")
            out["dropped"] = out["ring_drops"]
            out["set_dropped"] = tot.get("events_dropped")
            if out["ring_drops"] and out["set_dropped"] != out["ring_drops"]:
                note("the output set of a process that exited does not count its drops: "
                     f"window.json totals.events_dropped = {out['set_dropped']} while `ctl "
                     f"status` drops.ring_buffer = {out['ring_drops']} (one process, one set; "
                     f"{out['captured']} launches in the set + the ring drops = "
                     f"{out['captured'] + out['ring_drops']} of "
                     f"{expected or int(out['launches'])} made)", kind="set-drops")
        elif tp:
            tr = bench.Ncclprobe("r", "", "") if cfg == "record" else bench.Bpftrace("b", "")
            tr.stop(tp)
            if cfg == "record":
                s = bench.read_summary(os.path.join(wd, "rec"))["totals"]
                out["captured"], out["dropped"] = s["events_captured"], s["events_dropped"]
                out["hits"] = s["probe_hits"]
            else:
                out["captured"] = tr.events(tp, wd)
                out["dropped"] = 0
        if out["captured"] is not None and out["captured"] + (out["dropped"] or 0) < expected:
            note(f"{tag} {cfg} round {rnd}: {out['captured']} launches captured + "
                 f"{out['dropped']} dropped < {expected} made")
        return out
    finally:
        for p in (wl, tp):
            if p is not None and p.alive():
                p.stop(signal.SIGKILL, 10)
        if d and d.proc.alive():
            d.proc.stop(signal.SIGTERM, 60)
        shutil.rmtree(wd, ignore_errors=True)
        if d:
            shutil.rmtree(d.dir, ignore_errors=True)


def bench_overhead(args, L):
    log(f"== overhead: {args.rounds} rounds x {len(OVH_CONFIGS)} configurations, "
        f"{args.iters} launches back to back")
    ll = ["--iters", str(args.iters), "--warmup", str(args.warmup), "--depth", "10"]
    expected = args.iters + args.warmup
    runs = {c: [] for c in OVH_CONFIGS}
    for r in range(args.rounds):
        wait_quiet(args)
        order = OVH_CONFIGS[r % len(OVH_CONFIGS):] + OVH_CONFIGS[:r % len(OVH_CONFIGS)]
        for cfg in order:
            res = overhead_run(args, cfg, r, ll, expected)
            runs[cfg].append(res)
            log(f"  round {r} {cfg:9s} {res['ns_per_launch']:8.0f} ns/launch  tracer CPU "
                f"{res['tracer_cpu_s'] if res['tracer_cpu_s'] is not None else '-'} s  "
                f"captured {res['captured']} dropped {res['dropped']}")
    added = {c: [] for c in OVH_CONFIGS}
    for r in range(args.rounds):
        base = runs["bare"][r]["ns_per_launch"]
        for c in OVH_CONFIGS:
            added[c].append(runs[c][r]["ns_per_launch"] - base)
    ma = {c: med(added[c]) for c in OVH_CONFIGS}
    L += ["## 1. Added time per launch", "",
          f"`launch_loop --iters {args.iters} --warmup {args.warmup} --depth 10` (15 user "
          "frames, back to back, as bench/run.sh) under each tracer; "
          f"{args.rounds} interleaved rounds, order rotated; medians. *added* = traced − no "
          "tracer of the same round (median over rounds). The daemon is started (fresh, "
          "defaults + paths + `include_comm = npd_*`) before the workload and finds it by "
          "itself; the window rows open a capture window (`ncclprobe ctl start`) first. "
          "*tracer CPU* = the tracer's utime+stime from the start signal until it has read "
          "its backlog, per launch (BPF time is charged to the workload, not here). "
          "*captured* = launches in the output (`window.json` totals / summary.json / "
          "bpftrace's counts), of launches made (warm-up included), worst round; "
          "*dropped* = ring-buffer drops, worst round.", "",
          "| configuration | ns/launch | added µs/launch | added / bare | "
          "daemon-agg added / this added | added / bpftrace added | tracer CPU µs/launch | "
          "captured (worst) | dropped (worst) |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    base_ns = med([x["ns_per_launch"] for x in runs["bare"]])
    for c in OVH_CONFIGS:
        ns = med([x["ns_per_launch"] for x in runs[c]])
        cpu = med([x["tracer_cpu_s"] / expected * 1e6 for x in runs[c]
                   if x["tracer_cpu_s"] is not None])
        caps = [x["captured"] for x in runs[c] if x["captured"] is not None]
        drops = [x["dropped"] for x in runs[c] if x["dropped"] is not None]
        a = ma[c]
        L.append(f"| {OVH_LABEL[c]} | {ns:.0f} | "
                 + ("-" if c == "bare" else f"{a / 1000:.2f}") + " | "
                 + f"{ns / base_ns:.0f}x | "
                 + ("-" if c == "bare" else f"{ma['daemon'] / a:.2f}x") + " | "
                 + ("-" if c == "bare" else f"{a / ma['bpftrace']:.2f}x") + " | "
                 + (f"{cpu:.2f}" if cpu is not None else "-") + " | "
                 + (f"{min(caps)} / {expected}" if caps else "-") + " | "
                 + (f"{max(drops)}" if drops else "-") + " |")
    acts = [x.get("limit_activations") for c in ("daemon", "window") for x in runs[c]]
    L += ["", "Per round (ns/launch): " + "; ".join(
        f"{c} " + ", ".join(f"{x['ns_per_launch']:.0f}" for x in runs[c]) for c in OVH_CONFIGS),
        "", f"Rate-limit activations in the daemon runs: {sum(a or 0 for a in acts)} "
        "(each run is shorter than the 3 s over budget that activates it).", ""]
    args.results["overhead"] = {"added_ns": ma, "runs": runs}


# ---- 2a. tracer CPU at a steady rate -------------------------------------------------------


def bench_cpu(args, L):
    rate, dur = args.cpu_rate, args.cpu_seconds
    log(f"== tracer CPU at {rate} launches/s for {dur} s, {args.rounds} rounds")
    cfgs = ["daemon", "window", "record"]
    ll = ["--rate", str(rate), "--duration", str(dur), "--warmup", "0", "--depth", "10"]
    res = {c: [] for c in cfgs}
    for r in range(args.rounds):
        for c in cfgs[r % 3:] + cfgs[:r % 3]:
            x = overhead_run(args, c, r, ll, 0, extra_conf="cpu_budget = 100\n", tag="cpu")
            x["pct"] = 100 * x["tracer_cpu_s"] / x["tracer_wall_s"]
            x["us"] = x["tracer_cpu_s"] / x["launches"] * 1e6
            res[c].append(x)
            log(f"  round {r} {c:7s} {x['rate']:.0f}/s  tracer CPU {x['pct']:.1f} % "
                f"({x['us']:.2f} µs/launch) captured {x['captured']} dropped {x['dropped']}")
    L += ["## 2. Tracer CPU", "",
          f"### At a steady {rate // 1000}k launches/s", "",
          f"`launch_loop --rate {rate} --duration {dur}` under each tracer, {args.rounds} "
          "rounds, medians; daemon with `cpu_budget = 100` (no rate limit: what the load "
          "costs). *% of a core* = the tracer's utime+stime (/proc/PID/stat) from the start "
          "signal until its backlog is read, over that time (the loop's duration, or longer "
          "when the tracer fell behind).", "",
          "| configuration | achieved launches/s | tracer CPU, % of a core | µs per launch | "
          "per round (%) | captured / made (worst) |",
          "|---|---:|---:|---:|---|---:|"]
    for c in cfgs:
        xs = res[c]
        worst = min(xs, key=lambda x: (x["captured"] or 0) / x["launches"])
        L.append(f"| {OVH_LABEL[c]} | {med([x['rate'] for x in xs]):.0f} | "
                 f"{med([x['pct'] for x in xs]):.1f} | {med([x['us'] for x in xs]):.2f} | "
                 + ", ".join(f"{x['pct']:.1f}" for x in xs)
                 + f" | {worst['captured']} / {worst['launches']:.0f} |")
    L.append("")
    args.results["cpu"] = res


# ---- 2b. the CPU budget ----------------------------------------------------------------------


def bench_budget(args, L):
    log("== CPU budget: unpaced loop, cpu_budget = 10 (defaults)")
    dur = args.budget_seconds
    base = {"--warmup": "0", "--depth": "10"}
    ll = [x for kv in base.items() for x in kv]
    # no tracer, and the daemon without a budget: the loop's speed for reference
    bare = finish_loop(loop_proc(args, ["--duration", "3"] + ll, wait=False))
    log(f"  bare: {bare['rate']:.0f} launches/s, {bare['ns_per_launch']:.1f} ns/launch")
    unl = overhead_run(args, "daemon", 0, ["--duration", "4"] + ll, 0,
                       extra_conf="cpu_budget = 100\n", tag="unlimited")
    unl_pct = 100 * unl["tracer_cpu_s"] / unl["tracer_wall_s"]
    log(f"  daemon, no budget: {unl['rate']:.0f} launches/s, daemon CPU {unl_pct:.0f} %, "
        f"dropped {unl['dropped']}")
    d = Daemon(args, "budget")
    series = []
    try:
        wl = loop_proc(args, ["--duration", str(dur)] + ll)
        d.wait_traced(wl.pid)
        time.sleep(0.3)
        wl.send(signal.SIGUSR1)
        t0 = time.monotonic()
        prev = None
        while True:
            now = time.monotonic()
            cpu_now = cpu_seconds(d.pid)
            st = d.status()
            t = d.target(wl.pid, st)
            s = {"t": now - t0, "cpu": cpu_now, "active": st["rate_limit"]["active"],
                 "self_pct": st["rate_limit"]["cpu_percent"],
                 "limited": st["drops"]["rate_limited"], "ring": st["drops"]["ring_buffer"],
                 "kept": t["launches"] if t else None, "running": wl.alive(),
                 "acts": st["rate_limit"]["activations"]}
            if prev:
                dt = s["t"] - prev["t"]
                s["pct"] = 100 * (s["cpu"] - prev["cpu"]) / dt
                if s["kept"] is not None and prev["kept"] is not None:
                    s["kept_s"] = (s["kept"] - prev["kept"]) / dt
                    s["loop_s"] = (s["kept"] + s["limited"] + s["ring"] - prev["kept"]
                                   - prev["limited"] - prev["ring"]) / dt
            series.append(s)
            prev = s
            if not s["running"] and now - t0 > dur + args.budget_after:
                break
            time.sleep(max(0.0, t0 + len(series) - time.monotonic()))
        lim = finish_loop(wl)
        d.stop()
    finally:
        if d.proc.alive():
            d.proc.stop(signal.SIGTERM, 60)
    act_t = next((s["t"] for s in series if s["active"]), None)
    steady = [s for s in series if s["active"] and s["running"] and act_t is not None
              and s["t"] >= act_t + 1.5 and "pct" in s]
    lifted_t = next((s["t"] for s in series if act_t is not None and s["t"] > act_t
                     and not s["active"]), None)
    # /proc counts whole ticks (10 ms): the phase's CPU over the phase, not per second
    st_pct = None
    if steady:
        i0 = series.index(steady[0]) - 1
        st_pct = 100 * (steady[-1]["cpu"] - series[i0]["cpu"]) / (steady[-1]["t"] - series[i0]["t"])
    st_self = med([s["self_pct"] for s in steady])
    st_loop = med([s.get("loop_s") for s in steady])
    st_kept = med([s.get("kept_s") for s in steady])
    L += ["### The CPU budget (`cpu_budget = 10`, `rate_limit = 2000`: the defaults)", "",
          f"`launch_loop --duration {dur} --warmup 0` unpaced (as fast as it goes) under the "
          "daemon with the default budget; `ctl status` and the daemon's /proc CPU sampled "
          "every second. *loop launches/s* = growth of (kept + rate-limited + ring-dropped) "
          "launches per second, from the daemon's counters. The reference runs: no tracer "
          "(3 s) and the daemon with `cpu_budget = 100` (4 s, no limit).", "",
          "| t (s) | rate limit active | daemon CPU % (/proc) | daemon's own cpu_percent | "
          "loop launches/s | kept launches/s | rate_limited total | ring drops total | "
          "loop running |",
          "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for s in series[1:]:
        L.append(f"| {s['t']:.1f} | {'yes' if s['active'] else 'no'} | {s.get('pct', 0):.1f} | "
                 f"{s['self_pct']:.1f} | {s.get('loop_s', 0):,.0f} | {s.get('kept_s', 0):,.0f} | "
                 f"{s['limited']:,} | {s['ring']:,} | {'yes' if s['running'] else 'no'} |")
    ratio = lambda a, b: f"{a / b:.3f}x" if a and b else "n/a"  # noqa: E731
    L += ["", "| | loop launches/s | ns/launch (median batch) | vs no tracer | daemon CPU % |",
          "|---|---:|---:|---:|---:|",
          f"| no tracer | {bare['rate']:,.0f} | {bare['ns_per_launch']:.1f} | 1.000x | - |",
          f"| daemon, `cpu_budget = 100` (no limit) | {unl['rate']:,.0f} | "
          f"{unl['ns_per_launch']:.1f} | {ratio(unl['rate'], bare['rate'])} | {unl_pct:.1f} |",
          f"| daemon, `cpu_budget = 10`, whole run ({dur} s) | {lim['rate']:,.0f} | "
          f"{lim['ns_per_launch']:.1f} | {ratio(lim['rate'], bare['rate'])} | "
          f"{100 * (series[-1]['cpu'] - series[0]['cpu']) / series[-1]['t']:.1f} (incl. the "
          f"{args.budget_after} s after) |",
          f"| daemon, `cpu_budget = 10`, limited phase (loop rate: median per second; "
          f"CPU: /proc over the phase, the daemon's own cpu_percent median) | "
          f"{st_loop or 0:,.0f} | - | {ratio(st_loop, bare['rate'])} | "
          f"{st_pct if st_pct is not None else float('nan'):.1f} / "
          f"{st_self if st_self is not None else float('nan'):.1f} |", ""]
    L.append(f"Rate limit activated {act_t:.1f} s after the start (status `rate_limit.active`), "
             f"{series[-1]['acts']} activation(s); drops.rate_limited at the end "
             f"{series[-1]['limited']:,}; kept while limited {st_kept or 0:,.0f} launches/s "
             f"(rate_limit = 2000 per probe); lifted again "
             + (f"{lifted_t - dur:.1f} s after the loop ended." if lifted_t else
                f"— not within {args.budget_after} s after the loop ended.")
             if act_t is not None else "Rate limit never activated.")
    if unl_pct and unl["rate"]:
        us = unl_pct / 100 / unl["rate"] * 1e6
        L.append(f"The limit is a fixed rate (`rate_limit` launches/s per probe), not a CPU "
                 f"target: while it held, the daemon used {st_pct or 0:.1f} % of a core of its "
                 f"10 % budget. At this workload's cost ({us:.2f} µs of daemon CPU per launch: "
                 f"{unl_pct:.1f} % at {unl['rate']:,.0f}/s without a budget) the budget "
                 f"would have kept ~{0.10 / (us / 1e6):,.0f} launches/s.")
    L.append("")
    if act_t is None:
        note("budget: the rate limit never activated")
    elif not series[-1]["limited"]:
        note("budget: rate limit active but drops.rate_limited = 0")
    if st_pct is not None and st_pct > 2 * 10:
        note(f"budget: daemon CPU {st_pct:.1f} % while limited, over twice the 10 % budget")
    args.results["budget"] = {"series": series, "bare": bare, "unlimited": unl, "limited": lim,
                              "act_t": act_t, "steady_pct": st_pct or 0,
                              "steady_self": st_self or 0,
                              "steady_loop": st_loop or 0,
                              "limited_total": series[-1]["limited"]}


# ---- 3. RSS over millions of launches ---------------------------------------------------------


def rss_case(args, name, window, stacks, launches, rate, py):
    log(f"== RSS: {name}: {launches} launches at {rate}/s, window={window}, stacks={stacks}")
    d = Daemon(args, f"rss-{name}", "cpu_budget = 100\n")
    samples = []
    try:
        if window:
            d.ctl("start")
        if not py:
            wl = loop_proc(args, ["--rate", str(rate), "--iters", str(launches), "--warmup", "0",
                                  "--depth", "10"])
        else:
            wl = py_proc(args, ["--stacks", str(stacks), "--launches", str(launches),
                                "--rate", str(rate)])
        d.wait_traced(wl.pid)
        time.sleep(0.3)
        rss0 = rss_bytes(d.pid)
        wl.send(signal.SIGUSR1)
        t0 = time.monotonic()
        cpu0 = cpu_seconds(d.pid)
        done_at = None
        while True:
            st = d.status()
            t = d.target(wl.pid, st)
            samples.append({"t": time.monotonic() - t0, "rss": rss_bytes(d.pid),
                            "status_rss": st["memory"]["rss_bytes"],
                            "cache": st["memory"]["cache_bytes"] if t else None,
                            "resets": st["memory"].get("cache_resets"),
                            "kept": t["launches"] if t else None,
                            "ring": st["drops"]["ring_buffer"]})
            running = wl.alive()
            if not running and done_at is None:
                done_at = time.monotonic()
            if done_at and (time.monotonic() - done_at > 1.5 or t is None):
                break
            time.sleep(max(0.0, t0 + len(samples) - time.monotonic()))
        res = finish_loop(wl)
        cpu1, t1 = settle_cpu(d.pid)
        cpu, cpu_wall = cpu1 - cpu0, max(t1 - t0, res["elapsed_s"])
        final = d.status()
        rss_end = rss_bytes(d.pid)
        if window:
            d.ctl("stop")
        time.sleep(1.5)  # the set is written once its process's records are read
        rss_written = rss_bytes(d.pid)
        hwm = None
        with open(f"/proc/{d.pid}/status") as f:
            m = re.search(r"^VmHWM:\s+(\d+) kB", f.read(), re.M)
            hwm = int(m.group(1)) * 1024 if m else None
        d.stop()
        tot = d.totals(wl.pid) or {}
        distinct = None
        for sd in d.sets(wl.pid):
            try:
                with open(os.path.join(sd, "launches.folded")) as f:
                    distinct = (distinct or 0) + sum(1 for _ in f)
            except OSError:
                pass
        out_bytes = sum(os.path.getsize(p) for sd in d.sets(wl.pid)
                        for p in glob.glob(os.path.join(sd, "*")))
    finally:
        if d.proc.alive():
            d.proc.stop(signal.SIGTERM, 60)
        shutil.rmtree(d.dir, ignore_errors=True)
    samples = [s for s in samples if s["kept"] is not None]
    total = max(s["kept"] for s in samples)

    def at(frac):
        goal = frac * total
        return next(s for s in samples if s["kept"] >= goal)

    s10, s50, s100 = at(0.1), at(0.5), at(1.0)
    growth = lambda a, b: ((b["rss"] - a["rss"]) / 2**20 / ((b["kept"] - a["kept"]) / 1e6)  # noqa
                           if b["kept"] > a["kept"] else float("nan"))
    r = {"name": name, "window": window, "stacks": stacks, "launches": res["launches"],
         "rate": res["rate"], "captured": tot.get("launches"), "ring": final["drops"]["ring_buffer"],
         "rss0": rss0, "s10": s10, "s50": s50, "s100": s100, "rss_end": rss_end,
         "rss_written": rss_written, "hwm": hwm, "g10": growth(s10, s100),
         "g50": growth(s50, s100), "cpu_pct": 100 * cpu / cpu_wall,
         "distinct": distinct, "out_mib": out_bytes / 2**20, "samples": samples,
         "cache": max((s["cache"] or 0) for s in samples),
         "resets": final["memory"].get("cache_resets")}
    log(f"  RSS start {rss0 / 2**20:.1f} MiB, 10% {s10['rss'] / 2**20:.1f}, 50% "
        f"{s50['rss'] / 2**20:.1f}, 100% {s100['rss'] / 2**20:.1f}; growth {r['g10']:.3f} "
        f"MiB/M launches; captured {r['captured']} of {res['launches']:.0f}; ring drops "
        f"{r['ring']}; distinct stacks {distinct}")
    if r["g10"] > 1.0 and s100["rss"] - s10["rss"] > 2 * 2**20:
        note(f"rss {name}: RSS grows {r['g10']:.2f} MiB per million launches "
             "(10% -> 100% of the run)")
    return r


def bench_rss(args, L):
    n = args.rss_launches
    cases = [("C, aggregate, 1 stack", False, 1, n, args.rss_rate_agg, False),
             ("C, window, 1 stack", True, 1, n, args.rss_rate_win, False)]
    if args.python:
        pn = args.rss_py_launches
        cases += [("Python, aggregate, 1 stack (control)", False, 1, max(pn // 3, 100000),
                   args.rss_rate_py_agg, True),
                  (f"Python, aggregate, {args.stacks} stacks", False, args.stacks, pn,
                   args.rss_rate_py_agg, True),
                  (f"Python, window, {args.stacks} stacks", True, args.stacks, pn,
                   args.rss_rate_py_win, True)]
    rs = [rss_case(args, *c) for c in cases]
    mib = lambda b: f"{b / 2**20:.1f}" if b is not None else "-"  # noqa: E731
    L += ["## 3. Daemon RSS over millions of launches", "",
          "One daemon per case (`cpu_budget = 100`: no rate limit, every launch recorded), "
          "the workload paced so the daemon keeps up. *1 stack*: `launch_loop --rate R` "
          "(one call path). *Python*: `daemon_bench.py pyloop` under CPython "
          f"({args.python_version}): N generated functions, each a code object of its own, "
          "each calling `cudaLaunchKernel` through ctypes; launch i goes through function "
          "i mod N, so N distinct stacks (Python frames merged, the default), each seen "
          "again every N launches; the control runs it with N = 1 (what the Python process "
          "costs by itself: its interpreter's symbols and unwind tables). VmRSS from /proc/PID/status every second; the run's "
          "10 %/50 %/100 % points are where the daemon's count of the target's launches "
          "(`ctl status`) passed that fraction. *growth* = ΔRSS / Δlaunches between "
          "those points. *after write* = RSS once the set is written (window closed / "
          "process gone).", "",
          "| case | launches | achieved/s | daemon CPU % | RSS before (MiB) | at 10 % | "
          "at 50 % | at 100 % | after write | peak (VmHWM) | growth 10→100 % (MiB per M "
          "launches) | growth 50→100 % | captured | ring drops | distinct stacks in output | "
          "output MiB |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rs:
        L.append(f"| {r['name']} | {r['launches']:,.0f} | {r['rate']:,.0f} | "
                 f"{r['cpu_pct']:.0f} | {mib(r['rss0'])} | {mib(r['s10']['rss'])} | "
                 f"{mib(r['s50']['rss'])} | {mib(r['s100']['rss'])} | {mib(r['rss_written'])} | "
                 f"{mib(r['hwm'])} | {r['g10']:.3f} | {r['g50']:.3f} | "
                 f"{r['captured'] if r['captured'] is not None else '-':,} | {r['ring']:,} | "
                 f"{r['distinct'] if r['distinct'] is not None else '-'} | {r['out_mib']:.0f} |")
    ctrl = next((r for r in rs if "control" in r["name"]), None)
    many = next((r for r in rs if r["stacks"] > 1 and not r["window"]), None)
    if ctrl and many:
        per = (many["s100"]["rss"] - ctrl["s100"]["rss"]) / many["stacks"]
        L += ["", f"Distinct stacks cost {per / 1024:.2f} KiB of RSS each (Python, "
              f"{many['stacks']} stacks − the 1-stack control, at 100 %), of which "
              f"{many['cache'] / many['stacks'] / 1024:.2f} KiB are counted in "
              f"`memory.cache_bytes` (the figure `cache_size` caps)."]
    L += ["", "RSS every second (MiB), per case: "]
    for r in rs:
        L.append(f"- {r['name']}: " + " ".join(mib(s["rss"]) for s in r["samples"])
                 + f" (status memory.cache_bytes, largest: {mib(r['cache'])} MiB; cache resets "
                 f"{r['resets']})")
    L.append("")
    if not args.python:
        L += ["The many-stacks case was skipped: no CPython 3.10-3.12 interpreter "
              "(`launch_loop` and `launcher` cannot vary their stacks).", ""]
    args.results["rss"] = rs


# ---- 4. discovery -----------------------------------------------------------------------------


def discovery_batch(args, name, n, gap):
    d = Daemon(args, f"disc-{name}")
    rate = args.disc_rate
    procs = []
    try:
        d.ctl("start")  # a window: every launch in launches.jsonl, with its time
        time.sleep(0.5)
        for i in range(n):
            t = time.monotonic_ns()
            p = loop_proc(args, ["--rate", str(rate), "--duration", "1", "--warmup", "0",
                                 "--depth", "10"], wait=False)
            procs.append((p, t))
            if gap:
                time.sleep(gap)
        made = {p.pid: finish_loop(p)["launches"] for p, _ in procs}
        time.sleep(1.5)
        st = d.status()["discovery"]
        d.ctl("stop")
        time.sleep(1.5)
        d.stop()
        rows = []
        for p, t_spawn in procs:
            first, count = None, 0
            for sd in d.sets(p.pid):
                try:
                    with open(os.path.join(sd, "launches.jsonl")) as f:
                        for line in f:
                            count += 1
                            if first is None:
                                first = json.loads(line)["ts_ns"]
                except OSError:
                    pass
            rows.append({"pid": p.pid, "made": made[p.pid], "captured": count,
                         "first_ms": (first - t_spawn) / 1e6 if first else None})
    finally:
        for p, _ in procs:
            if p.alive():
                p.stop(signal.SIGKILL, 5)
        if d.proc.alive():
            d.proc.stop(signal.SIGTERM, 60)
        shutil.rmtree(d.dir, ignore_errors=True)
    missed = [r["made"] - r["captured"] for r in rows]
    firsts = [r["first_ms"] for r in rows if r["first_ms"] is not None]
    log(f"  {name}: status delay p50 {st['delay_ms_p50']:.1f} ms max {st['delay_ms_max']:.1f} "
        f"ms ({st.get('delays_measured')} measured, {st['attached']} attached); spawn -> first "
        f"captured median {med(firsts)} ms; missed {missed}")
    return {"name": name, "n": n, "gap": gap, "status": st, "rows": rows, "missed": missed,
            "firsts": firsts}


def bench_discovery(args, L):
    n = args.disc_procs
    log(f"== discovery: {n} processes started after the daemon")
    bs = [discovery_batch(args, "staggered", n, 0.25), discovery_batch(args, "burst", n, 0)]
    period_ms = 1000 / args.disc_rate
    L += ["## 4. Discovery", "",
          f"A daemon (defaults + paths, a capture window open so that every launch is in "
          f"`launches.jsonl` with its time), then {n} `launch_loop --rate {args.disc_rate} "
          f"--duration 1 --warmup 0` started one after the other: *staggered* 0.25 s apart, "
          f"*burst* all at once. *delay* = the daemon's `ctl status` discovery.delay_ms "
          "(library mmap notification → probes attached). *spawn → first captured* = "
          "the first captured launch's timestamp − CLOCK_MONOTONIC just before the fork "
          "(includes the workload's own start-up: exec, ld.so, libcudart's constructors). "
          f"*missed* = launches made − captured: the launches made before the probes were on "
          f"(one every {period_ms:.1f} ms from the first).", "",
          "| batch | delay p50 (ms) | delay max (ms) | delays measured | attached | "
          "spawn → first captured, median (ms) | max (ms) | processes with missed launches | "
          "missed launches, max |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for b in bs:
        st = b["status"]
        L.append(f"| {b['name']} ({b['n']}) | {st['delay_ms_p50']:.2f} | {st['delay_ms_max']:.2f}"
                 f" | {st.get('delays_measured', '-')} | {st['attached']} | "
                 f"{med(b['firsts']) or float('nan'):.1f} | "
                 f"{max(b['firsts']) if b['firsts'] else float('nan'):.1f} | "
                 f"{sum(1 for m in b['missed'] if m > 0)} of {b['n']} | {max(b['missed'])} |")
        if len(b["firsts"]) < b["n"]:
            note(f"discovery {b['name']}: {b['n'] - len(b['firsts'])} processes had no launch "
                 "captured")
    L += ["", "Per process, spawn → first captured (ms) / missed launches:"]
    for b in bs:
        L.append(f"- {b['name']}: " + ", ".join(
            f"{r['first_ms']:.1f}/{r['made'] - r['captured']:.0f}" if r["first_ms"] is not None
            else f"-/{r['made'] - r['captured']:.0f}" for r in b["rows"]))
    L.append("")
    args.results["discovery"] = bs


def summary(args):
    """The key figures, in a few lines at the top of the report."""
    R, L = args.results, ["## Summary", ""]
    if "overhead" in R:
        a = R["overhead"]["added_ns"]
        L.append(f"- Added per launch (back to back): daemon always-on {a['daemon'] / 1e3:.2f} µs "
                 f"({a['daemon'] / a['bpftrace']:.2f}x bpftrace's {a['bpftrace'] / 1e3:.2f} µs), "
                 f"window open {a['window'] / 1e3:.2f} µs ({a['window'] / a['bpftrace']:.2f}x), "
                 f"record --pid {a['record'] / 1e3:.2f} µs ({a['record'] / a['bpftrace']:.2f}x).")
    if "cpu" in R:
        c = {k: med([x["pct"] for x in v]) for k, v in R["cpu"].items()}
        L.append(f"- Tracer CPU at {args.cpu_rate // 1000}k launches/s: daemon {c['daemon']:.1f} % "
                 f"of a core, window {c['window']:.1f} %, record {c['record']:.1f} %.")
    if "budget" in R:
        b = R["budget"]
        L.append(f"- CPU budget 10 %: rate limit active after {b['act_t']:.0f} s of an unpaced "
                 f"loop, daemon CPU then {b['steady_pct']:.1f} % of a core (/proc; its own "
                 f"cpu_percent {b['steady_self']:.1f} %) against the 10 % budget, "
                 f"{b['limited_total']:,} launches rate-limited; the loop ran at "
                 f"{b['steady_loop']:,.0f}/s = {b['steady_loop'] / b['bare']['rate']:.3f}x "
                 f"no tracer, {b['steady_loop'] / b['unlimited']['rate']:.2f}x the daemon "
                 "without a budget." if b.get("act_t") is not None else
                 "- CPU budget 10 %: the rate limit never activated.")
    if "rss" in R:
        L.append("- RSS growth, 10 % → 100 % of the run (MiB per million launches): "
                 + "; ".join(f"{r['name']} {r['g10']:.3f}" for r in R["rss"])
                 + ". Levels: " + "; ".join(f"{r['name']} {r['s100']['rss'] / 2**20:.0f} MiB"
                                            for r in R["rss"]) + ".")
    if "discovery" in R:
        L.append("- Discovery delay (mmap → probes attached), p50 / max: " + "; ".join(
            f"{b['name']} {b['status']['delay_ms_p50']:.1f} / {b['status']['delay_ms_max']:.1f} ms"
            for b in R["discovery"]) + "; processes that lost their first launches: " + "; ".join(
            f"{b['name']} {sum(1 for m in b['missed'] if m > 0)} of {b['n']}"
            for b in R["discovery"]) + ".")
    return L + [""]


# ---- main ---------------------------------------------------------------------------------------


def header(args):
    bt = run_cmd(["bpftrace", "--version"], check=False).stdout.strip()
    return ["# ncclprobe daemon benchmarks (issue 7)", "",
            f"- {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"kernel {platform.release()}, {os.cpu_count()} CPUs, no GPU (the toolkit's stub "
            "libcuda.so.1: every launch fails at once, the uprobes still fire); "
            f"{bt or 'bpftrace'}",
            f"- ncclprobe: {args.build}/ncclprobe (checkout at "
            f"{bench.source_revision(os.path.dirname(HERE))}; a copy taken at the start ran)",
            f"- `bench/daemon.sh {args.build}`; total time {args.elapsed:.0f} s; load average "
            f"(1 min) at the start / end: {args.load0:.2f} / {os.getloadavg()[0]:.2f}",
            "- a 2-core VM shared with other work: compare ratios within this run, not "
            "absolute figures across runs",
            "- other tracers (ncclprobe / bpftrace / perf not started by this benchmark) seen "
            "during the run: " + ("; ".join(sorted(set(args.foreign))) or "none"), ""]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--launch-loop", required=True)
    ap.add_argument("--python", default="", help="CPython 3.10-3.12 for the many-stacks case")
    ap.add_argument("--libcuda", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=200000)
    ap.add_argument("--warmup", type=int, default=10000)
    ap.add_argument("--cpu-rate", type=int, default=50000)
    ap.add_argument("--cpu-seconds", type=float, default=4)
    ap.add_argument("--budget-seconds", type=int, default=14)
    ap.add_argument("--budget-after", type=int, default=7)
    ap.add_argument("--rss-launches", type=int, default=3000000)
    ap.add_argument("--rss-py-launches", type=int, default=2000000)
    ap.add_argument("--rss-rate-agg", type=int, default=200000)
    ap.add_argument("--rss-rate-win", type=int, default=120000)
    ap.add_argument("--rss-rate-py-agg", type=int, default=40000)
    ap.add_argument("--rss-rate-py-win", type=int, default=40000)
    ap.add_argument("--stacks", type=int, default=50000)
    ap.add_argument("--disc-procs", type=int, default=20)
    ap.add_argument("--disc-rate", type=int, default=2000)
    ap.add_argument("--wait-quiet", type=int, default=60,
                    help="seconds to wait for other tracers to end before each section")
    ap.add_argument("--skip", default="", help="comma-separated sections to leave out")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("daemon_bench.py: needs root")
    for tool in ("bpftrace", "bpftool"):
        if not shutil.which(tool):
            sys.exit(f"daemon_bench.py: {tool} not found")
    args.results = {}
    args.load0 = os.getloadavg()[0]
    t_start = time.monotonic()
    args.tmp = tempfile.mkdtemp(prefix="ncclprobe-daemon-bench-")
    # Copies: a rebuild of BUILD while this runs changes nothing here; the workload's name
    # (npd_*) is what the daemons' include_comm selects.
    args.ncclprobe = os.path.join(args.tmp, "ncclprobe")
    shutil.copy2(os.path.join(args.build, "ncclprobe"), args.ncclprobe)
    args.loop = os.path.join(args.tmp, "npd_loop")
    shutil.copy2(args.launch_loop, args.loop)
    args.python_version = ""
    if args.python:
        r = run_cmd([args.python, "-c", "import sys; print(sys.version.split()[0])"], check=False)
        v = r.stdout.strip()
        if r.returncode != 0 or not re.match(r"3\.1[012]\.", v):
            log(f"daemon_bench.py: {args.python} is not CPython 3.10-3.12: many-stacks case "
                "skipped")
            args.python = ""
        else:
            args.python_version = f"{args.python}, {v}"
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    args.foreign = []
    body = []
    try:
        for name, fn in (("overhead", bench_overhead), ("cpu", bench_cpu),
                         ("budget", bench_budget), ("rss", bench_rss),
                         ("discovery", bench_discovery)):
            if name in skip:
                continue
            wait_quiet(args)
            fn(args, body)
            args.foreign += foreign_tracers()
    except (RuntimeError, OSError, ValueError, KeyError) as e:
        log(f"daemon_bench.py: error: {e}")
        kill_all()
        shutil.rmtree(args.tmp, ignore_errors=True)
        return 1
    finally:
        kill_all()
    shutil.rmtree(args.tmp, ignore_errors=True)
    args.elapsed = time.monotonic() - t_start
    left = [f"{p.name} ({p.pid})" for p in bench.STARTED if p.alive()]
    if left:
        note("processes still running at the end: " + ", ".join(left))
    text = "\n".join(header(args) + summary(args) + body + (
        ["## Notes", ""] + [f"- {m}" + (f" (seen in {k} runs; the first shown)" if k > 1 else "")
                            for m, k in NOTES.values()] + [""] if NOTES else []))
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
