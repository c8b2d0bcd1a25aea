#!/usr/bin/python3
"""ncclprobe per-launch cost: what the launching thread pays, and how much of it is BPF.

Run through bench/cost.sh (which builds launch_loop and, with BENCH_AGAINST, the previous
revision); see bench/README.md, "Per-launch cost".

    cost.py --build BUILD --launch-loop PATH [--previous PATH] [--python PY]
            [--configs c-main,c-worker,py-10,py-60,py-200,py-worker-60] [--rounds N]
            [--c-iters N] [--c-warmup N] [--py-iters N] [--py-warmup N] [--depth D]
            [--ring-mb N] [--np-args ARGS] [--libcuda PATH] [--out FILE]

Per configuration (workload), every tracer runs once per round, all rounds interleaved, the
order of workloads and of tracers rotated each round:

    bare        no tracer
    bpftrace    bpftrace -p PID -e 'uprobe:LIBCUDART:cudaLaunchKernel /pid == PID/
                                    { @c = count(); }'   (a bare uprobe and a counter)
    ncclprobe   BUILD/ncclprobe record --pid PID --format none -o TMP ...
    previous    --previous PATH (BENCH_AGAINST's build), the same options

Each run: the workload starts with --wait-signal --pause; the tracer attaches; SIGUSR1 starts
the warm-up; the workload prints "warm" and waits: the tracer's BPF programs' run_time_ns and
run_cnt (/proc/TRACER/fdinfo of its prog fds; statistics on, see BpfStats) and ncclprobe's
ring-buffer producer position are read; SIGUSR1 starts the timed launches; the workload prints
its result and waits: read again; SIGUSR1 lets it exit. So the BPF figures cover exactly the
timed launches. The statistics are turned off again on every path (error, SIGINT, SIGTERM).

Checks, every run: ncclprobe's summary.json probe_hits = launches made (warm-up included;
else the run is repeated, up to 3 times), events_dropped reported, python_walks = hits in
Python workloads, frames per launch from launches.folded; bpftrace's count = launches made;
the BPF programs ran at least once per timed launch.
Standard library only; shares its process handling with bench.py.
"""
import argparse
import json
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (Proc, RingPos, run_cmd, read_summary, ...)
import privmount  # noqa: E402
import py_bench  # noqa: E402  (PY_FRAME, leftovers)
from bench import CUDART, Proc, log, median, read_summary, run_cmd  # noqa: E402

STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"
PY_DEPTHS = {"py-10": 10, "py-60": 60, "py-200": 200, "py-worker-60": 60}
ALL_CONFIGS = ["c-main", "c-worker", "py-10", "py-60", "py-200", "py-worker-60"]
NP_PY_DEPTH = 128  # ncclprobe's default --python-depth


# ---- kernel.bpf_stats_enabled ---------------------------------------------------------


class BpfStats:
    """Turns on BPF run-time statistics for the run, and off again on every path.

    fd (default): bpf(BPF_ENABLE_STATS, BPF_STATS_RUN_TIME) returns an fd; the kernel keeps
    the statistics on while it is open and turns them off by itself when it is closed, even
    when this process is killed. The sysctl is not touched, so another user of it on the same
    machine (a script that sets it and puts back what it read) is not disturbed, nor can it
    turn our statistics off: the kernel counts the fd and the sysctl separately.
    sysctl: kernel.bpf_stats_enabled=1, the previous value put back by restore() (at exit,
    on an error, SIGINT, SIGTERM or SIGHUP; not after SIGKILL). Used also where the fd
    cannot be had (kernels before 5.8)."""

    def __init__(self):
        self.prev = None  # sysctl: the value to put back
        self.fd = None
        self.how = None

    def enable(self, how):
        if how == "fd":
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            attr = ctypes.create_string_buffer(8)  # enable_stats.type = BPF_STATS_RUN_TIME (0)
            fd, err = -1, "not x86-64"
            if platform.machine() == "x86_64":
                fd = libc.syscall(321, 32, attr, 8)  # bpf(BPF_ENABLE_STATS); the fd is O_CLOEXEC
                err = os.strerror(ctypes.get_errno())
            if fd >= 0:
                self.fd, self.how = fd, "fd"
                return
            log(f"cost.py: BPF_ENABLE_STATS failed ({err}); using kernel.bpf_stats_enabled")
        with open(STATS_SYSCTL) as f:
            self.prev = f.read().strip()
        self.how = "sysctl"
        if self.prev != "1":
            with open(STATS_SYSCTL, "w") as f:
                f.write("1")

    def sysctl(self):
        try:
            with open(STATS_SYSCTL) as f:
                return f.read().strip()
        except OSError:
            return "?"

    def is_on(self):
        return self.fd is not None or self.sysctl() == "1"

    def describe(self):
        if self.how == "fd":
            return ("bpf(BPF_ENABLE_STATS) fd held for the run (kernel.bpf_stats_enabled "
                    "not touched)")
        return f"kernel.bpf_stats_enabled=1 for the run (it was {self.prev})"

    def restore(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.prev is not None and self.prev != "1":
            try:
                with open(STATS_SYSCTL, "w") as f:
                    f.write(self.prev)
            except OSError as e:
                log(f"cost.py: could not restore kernel.bpf_stats_enabled={self.prev}: {e}")
                return
        self.prev = None


def prog_stats(pid):
    """{prog_id: (run_time_ns, run_cnt, recursion_misses)} of the BPF programs a process
    holds fds of (bpf_link fds also name a prog_id: skipped, they carry no run_cnt)."""
    out = {}
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return out
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                info = f.read()
        except OSError:
            continue
        d = dict(re.findall(r"^(\w+):\s*(\S+)", info, re.M))
        if "prog_type" in d and "prog_id" in d and "run_cnt" in d and "link_type" not in d:
            out[int(d["prog_id"])] = (int(d["run_time_ns"]), int(d["run_cnt"]),
                                      int(d.get("recursion_misses", 0)))
    return out






def prog_names(ids):
    """{prog_id: name} from bpftool (fdinfo has no names)."""
    r = run_cmd(["bpftool", "prog", "show", "-j"], check=False)
    try:
        progs = json.loads(r.stdout or "[]")
    except ValueError:
        return {}
    return {p["id"]: p.get("name", "?") for p in progs if p.get("id") in ids}


def stats_delta(a, b):
    """Per program run in between: {prog_id: (ns, runs, recursion misses)}."""
    out = {}
    for pid_, (t1, c1, m1) in b.items():
        t0, c0, m0 = a.get(pid_, (0, 0, 0))
        if c1 - c0 or m1 - m0:
            out[pid_] = (t1 - t0, c1 - c0, m1 - m0)
    return out


# ---- workloads ---------------------------------------------------------------------------


def workload_argv(args, config):
    if config in ("c-main", "c-worker"):
        argv = [args.launch_loop, "--depth", str(args.depth), "--iters", str(args.c_iters),
                "--warmup", str(args.c_warmup)]
        if config == "c-worker":
            argv += ["--threads", "1"]
    else:
        argv = [args.python, args.py_loop, "--depth", str(PY_DEPTHS[config]),
                "--iters", str(args.py_iters), "--warmup", str(args.py_warmup)]
        if config.startswith("py-worker"):
            argv.append("--thread")
        if args.libcuda:
            argv += ["--libcuda", args.libcuda]
    return argv + ["--wait-signal", "--pause"]


def config_label(args, config):
    if config == "c-main":
        return f"C, main thread (launch_loop --depth {args.depth})"
    if config == "c-worker":
        return f"C, worker pthread (launch_loop --depth {args.depth} --threads 1)"
    d = PY_DEPTHS[config]
    where = "threading.Thread" if config.startswith("py-worker") else "main thread"
    return f"CPython {args.py_version}, {where}, {d} Python frames"


def parse_result(line):
    out = {}
    for k, v in re.findall(r"(\w+)=(\S+)", line):
        try:
            out[k] = float(v)
        except ValueError:
            out[k] = v
    return out


# ---- tracers ---------------------------------------------------------------------------


# the tracers' shape, and record --pid started and stopped, as bench.py has them
Tracer = bench.Tracer
Ncclprobe = bench.Ncclprobe


class Bpftrace(Tracer):
    def start(self, pid, workdir):
        # -p and the pid filter, as bench/py_bench.py: bpftrace 0.17's -p alone counted other
        # processes' launches of the same libcudart.
        prog = f"uprobe:{CUDART}:cudaLaunchKernel /pid == {pid}/ {{ @c = count(); }}"
        p = Proc(["bpftrace", "-p", str(pid), "-e", prog], self.name)
        # "Attaching 1 probe..." comes just before attaching: wait until the kernel lists it.
        if not p.wait_line(r"Attaching 1 probe", 30):
            raise RuntimeError(f"bpftrace did not start:\n{p.text()}")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and p.alive():
            r = run_cmd(["bpftool", "perf", "list"], check=False)
            if re.search(rf"^pid {p.pid}\s.*uprobe", r.stdout, re.M):
                return p
            time.sleep(0.05)
        raise RuntimeError(f"bpftrace did not attach:\n{p.text()}")

    def stop(self, proc):
        # bpftrace -p exits (printing @c) once its target has exited.
        if proc.wait(20) is None:
            proc.send(signal.SIGTERM)
        proc.stop(signal.SIGTERM, 60)

    @staticmethod
    def count(proc):
        m = re.search(r"^@c: (\d+)$", proc.text(), re.M)
        return int(m.group(1)) if m else None


def folded_frames(rec):
    """The commonest stack of launches.folded: (frames, Python frames, share of launches)."""
    best, total = None, 0
    try:
        with open(os.path.join(rec, "launches.folded"), errors="replace") as f:
            for line in f:
                stack, _, count = line.rstrip("\n").rpartition(" ")
                n = int(count)
                total += n
                parts = [p for p in stack.split(";") if not p.startswith("[GPU_")]
                py = sum(1 for p in parts if py_bench.PY_FRAME.search(p))
                if best is None or n > best[2]:
                    best = (len(parts), py, n)
    except (OSError, ValueError):
        return None
    return (best[0], best[1], best[2] / total) if best and total else None


# ---- one run ---------------------------------------------------------------------------


def one_run(args, config, tracer):
    """Workload (--wait-signal --pause) under the tracer; the BPF programs' counters and the
    ring's producer position around the timed launches. Returns a dict."""
    workdir = tempfile.mkdtemp(prefix="ncclprobe-cost-")
    wl = tp = ring = None
    py = config.startswith("py")
    try:
        wl = Proc(workload_argv(args, config), "workload")
        if not wl.wait_line(r"^ready (\d+)$", 30, key="out"):
            raise RuntimeError(f"{config}: the workload did not start:\n{wl.text()}")
        if args.pin:
            bench.pin(wl.pid, {args.pin[0]})
        tp = tracer.start(wl.pid, workdir)
        if tp and args.pin:
            bench.pin(tp.pid, {args.pin[1]})
        if tp:
            time.sleep(args.settle)  # the tracer's start-up work
        wl.send(signal.SIGUSR1)
        if not wl.wait_line(r"^warm$", args.timeout, key="out"):
            raise RuntimeError(f"{config}: no end of warm-up:\n{wl.text()}")
        if tp:
            time.sleep(args.settle_warm)  # the reader drains (and symbolizes) the warm-up
            if isinstance(tracer, Ncclprobe):
                ring = bench.RingPos(tp.pid)
            s0, prod0, on0 = prog_stats(tp.pid), ring.read() if ring else None, BPF.is_on()
            cpu0 = bench.cpu_ns(tp.pid)
        wl.send(signal.SIGUSR1)
        if not wl.wait_line(r"^done$", args.timeout, key="out"):
            raise RuntimeError(f"{config}: the timed launches did not finish:\n{wl.text()}")
        res = parse_result(wl.wait_line(r"ns_per_launch=", 5, key="out").string)
        out = {"timed": int(res["launches"]),
               "ns": res["batch_median_ns"] if py else res["ns_per_launch"],
               "made": int(res["launches"] + (res["warmup"] if py else args.c_warmup))}
        if tp:
            s1, prod1, on1 = prog_stats(tp.pid), ring.read() if ring else None, BPF.is_on()
            cpu1 = bench.cpu_ns(tp.pid)
            if cpu0 is not None and cpu1 is not None:
                out["tracer_cpu_us"] = (cpu1 - cpu0) / 1e3 / out["timed"]
            delta = stats_delta(s0, s1)
            names = prog_names(set(delta))
            out["progs"] = {names.get(k, f"id {k}"): v for k, v in delta.items()}
            out["bpf_ns"] = sum(v[0] for v in delta.values()) / out["timed"]
            out["bpf_runs"] = sum(v[1] for v in delta.values()) / out["timed"]
            out["recursion_misses"] = sum(v[2] for v in delta.values())
            out["stats_on"] = on0 and on1
            if prod0 is not None and prod1 is not None:
                out["ring_bytes"] = prod1 - prod0
        if ring:
            ring.close()
            ring = None
        wl.send(signal.SIGUSR1)
        if wl.wait(30) is None:
            raise RuntimeError(f"{config}: the workload did not exit")
        wl.stop()
        if wl.p.returncode != 0:
            raise RuntimeError(f"{config}: the workload failed ({wl.p.returncode}):\n{wl.text()}")
        if tp:
            tracer.stop(tp)
            done, tp = tp, None
            if isinstance(tracer, Ncclprobe):
                rec = os.path.join(workdir, "rec")
                s = read_summary(rec)
                out["totals"] = s["totals"]
                out["seen"] = s["totals"]["probe_hits"]
                out["frames"] = folded_frames(rec)
                sent = s["totals"].get("events_sent_by_bpf")
                if "ring_bytes" in out and out["timed"]:
                    # bytes per record sent (a dropped record adds none)
                    out["ring_per_launch"] = out["ring_bytes"] / out["timed"]
                out["sent"] = sent
            else:
                out["seen"] = Bpftrace.count(done)
        return out
    finally:
        if ring:
            ring.close()
        for p, sig in ((tp, signal.SIGINT), (wl, signal.SIGKILL)):
            if p is not None and p.alive():
                p.stop(sig, 10)
        shutil.rmtree(workdir, ignore_errors=True)


def checked_run(args, config, tracer, attempts=3):
    """one_run, repeated while the tracer saw fewer launches than were made (attached late)."""
    for attempt in range(1, attempts + 1):
        res = one_run(args, config, tracer)
        seen = res.get("seen")
        if seen is None and tracer.name == "bpftrace":
            raise RuntimeError(f"{config}: no count from bpftrace")
        if seen is None or seen >= res["made"]:
            res["retries"] = attempt - 1
            return res
        log(f"  {config} {tracer.name}: saw {seen} of {res['made']} launches; "
            f"run {attempt}/{attempts} discarded")
    raise RuntimeError(f"{config}: {tracer.name} kept missing launches")


BPF = BpfStats()


# ---- the benchmark ---------------------------------------------------------------------


def bench_all(args, tracers):
    runs = {(c, t.name): [] for c in args.configs for t in tracers}
    for r in range(args.rounds):
        k = r % len(args.configs)
        cs = args.configs[k:] + args.configs[:k]
        j = r % len(tracers)
        ts = tracers[j:] + tracers[:j]
        for c in cs:
            for t in ts:
                res = checked_run(args, c, t)
                runs[(c, t.name)].append(res)
                extra = ""
                if "bpf_ns" in res:
                    extra += f"  bpf={res['bpf_ns']:.0f} ns x{res['bpf_runs']:.2f}"
                if "totals" in res:
                    extra += f"  dropped={res['totals']['events_dropped']}"
                if res.get("seen") is not None:
                    extra += f"  seen={res['seen']}/{res['made']}"
                log(f"  round {r + 1}/{args.rounds} {c:<13} {t.name:<9} "
                    f"{res['ns']:9.0f} ns/launch{extra}")
    return runs


def analyse(args, runs, tracers):
    st = {}
    for c in args.configs:
        base = [x["ns"] for x in runs[(c, "bare")]]
        rows = {}
        for t in tracers:
            rs = runs[(c, t.name)]
            ns = [x["ns"] for x in rs]
            row = {"ns": ns, "median": median(ns), "min": min(ns), "max": max(ns)}
            if t.name != "bare":
                row["diffs"] = [x - b for x, b in zip(ns, base)]
                row["added"] = median(row["diffs"])
                bpf = [x["bpf_ns"] for x in rs if "bpf_ns" in x]
                row["bpf"] = median(bpf) if bpf else None
                row["bpf_rounds"] = bpf
                row["bpf_runs"] = median([x["bpf_runs"] for x in rs if "bpf_runs" in x])
                # what the trap, uprobe dispatch and return cost besides the program
                row["non_bpf"] = median([x["ns"] - b - x["bpf_ns"]
                                         for x, b in zip(rs, base) if "bpf_ns" in x])
                row["stats_off"] = sum(1 for x in rs if not x.get("stats_on", True))
                row["recursion_misses"] = sum(x.get("recursion_misses", 0) for x in rs)
                row["seen"] = [(x.get("seen"), x["made"]) for x in rs]
                row["retries"] = sum(x.get("retries", 0) for x in rs)
                progs = {}
                for x in rs:
                    for name, (tns, cnt, _) in x.get("progs", {}).items():
                        progs.setdefault(name, []).append((tns / x["timed"], cnt / x["timed"]))
                row["progs"] = {n: (median([a for a, _ in v]), median([b for _, b in v]))
                                for n, v in progs.items()}
                cpu = [x["tracer_cpu_us"] for x in rs if "tracer_cpu_us" in x]
                row["cpu"] = median(cpu) if cpu else None
            if "totals" in (rs[0] if rs else {}):
                row["dropped"] = [x["totals"]["events_dropped"] for x in rs]
                row["captured"] = [x["totals"]["events_captured"] for x in rs]
                row["walks"] = [x["totals"].get("python_walks") for x in rs]
                row["py_trunc"] = [x["totals"].get("python_truncated") for x in rs]
                row["foreign"] = [x["totals"].get("foreign_hits", 0) for x in rs]
                rpl = [x["ring_per_launch"] for x in rs if "ring_per_launch" in x]
                row["ring"] = median(rpl) if rpl else None
                fr = [x["frames"] for x in rs if x.get("frames")]
                row["frames"] = fr[0] if fr else None
                row["frames_same"] = all(f[:2] == fr[0][:2] for f in fr) if fr else True
            rows[t.name] = row
        st[c] = rows
    return st


# ---- report ----------------------------------------------------------------------------


def f0(x):
    return "-" if x is None or x != x else f"{x:.0f}"


ratio = py_bench.ratio


def report(args, st, tracers, runs, clean, wall):
    names = [t.name for t in tracers]
    has_prev = "previous" in names
    L = ["# ncclprobe per-launch cost (bench/cost.sh)", ""]
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
            cpu = m.group(1) if m else cpu
    except OSError:
        pass
    np_v, bt_v = args.np_version, args.bt_version
    L.append(f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    L.append(f"- machine: {os.cpu_count()} CPUs ({cpu}), kernel {platform.release()}, no GPU "
             "(every launch fails at once; the uprobe still fires)")
    L.append(f"- ncclprobe: {np_v or '?'} ({args.ncclprobe_src}, built {args.built}; checkout "
             f"at {args.revision}; a copy taken at the start ran)"
             + (f"; previous: {args.previous_label} ({args.previous_src})" if has_prev else ""))
    L.append(f"- tracers: bare = no tracer; bpftrace = {bt_v} `-p PID` "
             f"`uprobe:{CUDART}:cudaLaunchKernel /pid == PID/ {{ @c = count(); }}`; "
             f"ncclprobe = `record --pid PID -o TMP "
             f"{' '.join(args.np_opts).replace(args.snapdir, 'TMP')}`")
    L.append(f"- {args.rounds} interleaved rounds (workloads and tracers rotated each round); "
             f"C: {args.c_warmup} warm-up + {args.c_iters} timed launches, Python: "
             f"{args.py_warmup} + {args.py_iters}; ns/launch = median of the per-batch means "
             "(1000 launches a batch), then the median over rounds; *added* = median over "
             "rounds of (traced - bare of the same round)")
    L.append("- BPF ns/launch: BPF run-time statistics on during the whole run, every "
             "configuration (they add two clock reads per program run); the tracer's programs' "
             "run_time_ns delta over exactly the timed launches (workload paused around them) "
             "/ timed launches; median over rounds")
    L.append(f"- load average (1 min) at the start / end: {args.load:.2f} / "
             f"{os.getloadavg()[0]:.2f}; benchmark wall time {wall:.0f} s")
    if args.pin:
        L.append(f"- pinned: the workload to CPU {args.pin[0]}, the tracer to CPU {args.pin[1]}")
    if args.note:
        L.append(f"- note: {args.note}")
    L.append("")

    L.append("## Summary")
    L.append("")
    hdr = ("| configuration | frames (Python) | bare ns/launch | bpftrace added ns "
           "| ncclprobe added ns |" + (" previous added ns |" if has_prev else "")
           + " BPF ns/launch: bpftrace | ncclprobe |" + (" previous |" if has_prev else "")
           + " ncclprobe / bpftrace (added) |"
           + (" ncclprobe / previous (added) | ncclprobe / previous (BPF) |" if has_prev else "")
           + " ncclprobe ring bytes/launch |")
    L.append(hdr)
    L.append("|---|---:|" + "---:|" * (hdr.count("|") - 3))
    for c in args.configs:
        rows = st[c]
        bt, npr = rows["bpftrace"], rows["ncclprobe"]
        pv = rows.get("previous")
        fr = npr.get("frames")
        frames = f"{fr[0]} ({fr[1]})" if fr else "-"
        line = (f"| {config_label(args, c)} | {frames} | {f0(rows['bare']['median'])} "
                f"| {f0(bt['added'])} | **{f0(npr['added'])}** |")
        if has_prev:
            line += f" {f0(pv['added'])} |"
        line += f" {f0(bt['bpf'])} | **{f0(npr['bpf'])}** |"
        if has_prev:
            line += f" {f0(pv['bpf'])} |"
        line += f" {ratio(npr['added'], bt['added'])} |"
        if has_prev:
            line += f" {ratio(npr['added'], pv['added'])} | {ratio(npr['bpf'], pv['bpf'])} |"
        line += f" {f0(npr.get('ring'))} |"
        L.append(line)
    L.append("")
    L.append("*frames*: of the commonest stack in ncclprobe's launches.folded (every frame "
             "from `_start`/`__clone3` to `cudaLaunchKernel` included, the GPU leaf left out; "
             "in parentheses the Python frames among them; ncclprobe "
             f"keeps at most {NP_PY_DEPTH} Python frames by default, so 200 are walked as "
             f"{NP_PY_DEPTH}). Ratios above 1: ncclprobe costs more. *ring bytes/launch*: "
             "growth of the ring buffer's producer position over the timed launches / timed "
             "launches (the record: header, registers, the stack copy, Python frames).")
    L.append("")

    L.append("Per configuration below: *BPF runs/launch* = program runs / timed launches "
             "(above 1 for bpftrace: its uprobe also fires in other processes mapping the same "
             "libcudart, filtered out by its pid test); *added - BPF* = what the launching "
             "thread pays besides the program: the breakpoint trap and uprobe dispatch, and "
             "interference (the reader competing for the CPU, caches); *tracer CPU* = the "
             "tracer's CPU time (all threads, schedstat) during the timed launches / timed "
             "launches.")
    L.append("")
    notes = []
    for c in args.configs:
        L.append(f"## {config_label(args, c)}")
        L.append("")
        L.append("| tracer | ns/launch (min - max) | added ns | BPF ns/launch | BPF runs/launch "
                 "| added - BPF ns | ring bytes/launch | tracer CPU us/launch "
                 "| launches seen / made | dropped |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
        for t in tracers:
            r = st[c][t.name]
            if t.name == "bare":
                L.append(f"| {t.label} | {f0(r['median'])} ({f0(r['min'])} - {f0(r['max'])}) "
                         "| - | - | - | - | - | - | - | - |")
                continue
            seen = r["seen"]
            if all(s == m for s, m in seen):
                sm = f"all = made ({seen[0][1]})" if len({m for _, m in seen}) == 1 \
                    else "all = made"
            else:
                sm = ", ".join(f"{s}/{m}" for s, m in seen)
            if r["retries"]:
                sm += f" ({r['retries']} runs repeated)"
            drops = "-"
            if "dropped" in r:
                d = r["dropped"]
                drops = "0" if not any(d) else \
                    f"{sum(1 for x in d if x)} of {len(d)} runs, worst {max(d)}"
                if any(d):
                    notes.append(f"{config_label(args, c)}, {t.label}: events dropped in "
                                 f"{sum(1 for x in d if x)} of {len(d)} runs (worst {max(d)}); "
                                 "a dropped record skips its copy into the ring, so the cost "
                                 "there is, if anything, low")
            L.append(f"| {t.label} | {f0(r['median'])} ({f0(r['min'])} - {f0(r['max'])}) "
                     f"| {f0(r['added'])} | {f0(r['bpf'])} | {r['bpf_runs']:.2f} "
                     f"| {f0(r['non_bpf'])} | {f0(r.get('ring'))} "
                     f"| {'-' if r.get('cpu') is None else format(r['cpu'], '.2f')} "
                     f"| {sm} | {drops} |")
            if r["stats_off"]:
                notes.append(f"{c}, {t.name}: BPF statistics were off at a read in "
                             f"{r['stats_off']} runs (kernel.bpf_stats_enabled changed by "
                             "someone else): BPF figures there are low")
            if r["recursion_misses"]:
                notes.append(f"{c}, {t.name}: {r['recursion_misses']} BPF recursion misses "
                             "(program runs skipped by the kernel)")
            if r["bpf_runs"] < 0.999:
                notes.append(f"{c}, {t.name}: its BPF programs ran {r['bpf_runs']:.3f} times "
                             "per timed launch (< 1: not attached, or stats off?)")
            if "walks" in r and c.startswith("py"):
                bad = [(w, s) for w, (s, _) in zip(r["walks"], r["seen"]) if w != s]
                if bad:
                    notes.append(f"{c}, {t.name}: python_walks != probe hits in {len(bad)} "
                                 "runs")
            if r.get("frames") and not r["frames_same"]:
                notes.append(f"{c}, {t.name}: the commonest stack's frame count differed "
                             "between runs")
            if r.get("foreign") and any(r["foreign"]):
                notes.append(f"{c}, {t.name}: foreign_hits {r['foreign']}")
        L.append("")
        progs = []
        for t in tracers:
            r = st[c][t.name]
            if r.get("progs"):
                progs.append(f"{t.name}: " + ", ".join(
                    f"`{n}` {v[0]:.0f} ns x{v[1]:.2f}" for n, v in sorted(r["progs"].items())))
        if progs:
            L.append("BPF programs that ran during the timed launches (ns per timed launch, "
                     "runs per timed launch): " + "; ".join(progs) + ".")
            L.append("")
        L.append("ns/launch per round (rounds 1..N), then BPF ns/launch per round:")
        L.append("")
        for t in tracers:
            r = st[c][t.name]
            line = f"- {t.name}: " + ", ".join(f"{x:.0f}" for x in r["ns"])
            if r.get("bpf_rounds"):
                line += " | BPF: " + ", ".join(f"{x:.0f}" for x in r["bpf_rounds"])
            L.append(line)
        L.append("")
    L.append("## Checks")
    L.append("")
    if notes:
        for n in notes:
            L.append(f"- {n}")
    else:
        L.append("- Every run: the tracer saw every launch made (ncclprobe's probe_hits, "
                 "bpftrace's count), ncclprobe dropped nothing, its BPF programs ran once or "
                 "more per timed launch, bpf_stats stayed on; Python workloads: python_walks "
                 "= probe hits.")
    L.append(f"- BPF statistics: {args.stats_how}; kernel.bpf_stats_enabled was "
             f"{args.sysctl_before} before the run and is {args.sysctl_after} after it"
             + (" (changed by someone else meanwhile)"
                if args.sysctl_before != args.sysctl_after else "") + ".")
    L.append("- Clean-up: nothing left behind (no BPF links or perf events held by our "
             "processes, no process still running)." if not clean else
             "- Clean-up: LEFT BEHIND: " + "; ".join(clean))
    L.append("")
    return "\n".join(L)


def pick_python():
    """The newest pyenv CPython 3.12."""
    import glob
    found = []
    for p in glob.glob("/root/.pyenv/versions/3.12.*/bin/python3.12"):
        m = re.search(r"/3\.12\.(\d+)/", p)
        if m and os.access(p, os.X_OK):
            found.append((int(m.group(1)), p))
    return max(found)[1] if found else None


def help_has(binary, opt):
    r = run_cmd([binary, "record", "--help"], check=False)
    return opt in (r.stdout + r.stderr)


def np_options(args, binary, workdir):
    opts = []
    if help_has(binary, "--format"):
        opts += ["--format", "none"]
    # Our own GPU-record socket: never take /run/ncclprobe/cupti.sock from another ncclprobe.
    if help_has(binary, "--cupti-socket"):
        opts += ["--cupti-socket", os.path.join(workdir, os.path.basename(binary) + ".sock")]
    elif help_has(binary, "--no-gpu"):
        opts += ["--no-gpu"]
    if args.ring_mb:
        opts += ["--ring-buffer-mb", str(args.ring_mb)]
    return opts + args.np_args.split()


def main():
    privmount.enter()  # whatever a tracer might mount goes away with us
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--launch-loop", required=True)
    ap.add_argument("--previous", default=None,
                    help="another ncclprobe binary, measured beside this one in the same rounds")
    ap.add_argument("--python", default=None, help="CPython 3.12 (default: pyenv's newest)")
    ap.add_argument("--configs", default=",".join(ALL_CONFIGS))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--c-iters", type=int, default=50000)
    ap.add_argument("--c-warmup", type=int, default=5000)
    ap.add_argument("--py-iters", type=int, default=20000)
    ap.add_argument("--py-warmup", type=int, default=2000)
    ap.add_argument("--depth", type=int, default=10, help="launch_loop --depth")
    ap.add_argument("--ring-mb", type=int, default=256,
                    help="ncclprobe --ring-buffer-mb (0: its default), room for every record "
                         "of a run, so a slow reader drops none")
    ap.add_argument("--np-args", default="", help="more options for both ncclprobe builds")
    ap.add_argument("--libcuda", default=None, help="the stub libcuda.so.1 Python loads first")
    ap.add_argument("--settle", type=float, default=0.3,
                    help="seconds between the tracer's attach and the warm-up")
    ap.add_argument("--settle-warm", type=float, default=0.2,
                    help="seconds between the warm-up and the timed launches")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--stats", choices=("fd", "sysctl"), default="fd",
                    help="how BPF run-time statistics are turned on: fd (bpf(BPF_ENABLE_STATS), "
                         "default) or sysctl (kernel.bpf_stats_enabled=1, restored at exit)")
    ap.add_argument("--pin", default=None, metavar="W,T",
                    help="pin the workload to CPU W and the tracer to CPU T (default: no "
                         "pinning)")
    ap.add_argument("--note", default=os.environ.get("BENCH_COST_NOTE"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    if os.geteuid() != 0:
        sys.exit("cost.py: needs root (BPF, uprobes, kernel.bpf_stats_enabled)")
    for tool in ("bpftrace", "bpftool"):
        if not shutil.which(tool):
            sys.exit(f"cost.py: {tool} not found")
    args.configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    for c in args.configs:
        if c not in ALL_CONFIGS:
            sys.exit(f"cost.py: unknown configuration {c!r} ({', '.join(ALL_CONFIGS)})")
    if args.rounds < 1:
        sys.exit("cost.py: --rounds must be >= 1")
    if args.pin:
        try:
            args.pin = [int(x) for x in args.pin.split(",")]
            assert len(args.pin) == 2 and all(c in os.sched_getaffinity(0) for c in args.pin)
        except (ValueError, AssertionError):
            sys.exit(f"cost.py: --pin W,T: two CPUs of {sorted(os.sched_getaffinity(0))}")
    here = os.path.dirname(os.path.abspath(__file__))
    args.py_loop = os.path.join(here, "py_launch_loop.py")
    args.launch_loop = os.path.abspath(args.launch_loop)
    args.py_version = "-"
    if any(c.startswith("py") for c in args.configs):
        args.python = args.python or pick_python()
        if not args.python or not os.access(args.python, os.X_OK):
            sys.exit("cost.py: no CPython 3.12 (/root/.pyenv/versions/3.12.*; --python PY)")
        args.py_version = run_cmd([args.python, "-c", "import platform; "
                                   "print(platform.python_version())"]).stdout.strip()

    args.ncclprobe_src = os.path.abspath(os.path.join(args.build, "ncclprobe"))
    args.revision = bench.source_revision(here + "/..")
    try:
        args.built = time.strftime("%Y-%m-%d %H:%M:%S",
                                   time.localtime(os.stat(args.ncclprobe_src).st_mtime))
    except OSError:
        sys.exit(f"cost.py: no {args.ncclprobe_src}")
    snapdir = args.snapdir = tempfile.mkdtemp(prefix="ncclprobe-cost-bin-")
    # Snapshots: a rebuild during the run must not mix two builds into one table.
    args.ncclprobe = shutil.copy2(args.ncclprobe_src, os.path.join(snapdir, "ncclprobe"))
    args.np_opts = np_options(args, args.ncclprobe, snapdir)
    args.np_version = run_cmd([args.ncclprobe, "--version"], check=False).stdout.strip()
    args.bt_version = run_cmd(["bpftrace", "--version"], check=False).stdout.strip()
    tracers = [Tracer("bare", "no tracer"),
               Bpftrace("bpftrace", "bpftrace `@c = count()`"),
               Ncclprobe("ncclprobe", "ncclprobe record", args.ncclprobe, args.np_opts)]
    args.previous_label = os.environ.get("BENCH_PREVIOUS_LABEL", "previous build")
    if args.previous:
        args.previous_src = os.path.abspath(args.previous)
        prev = shutil.copy2(args.previous_src, os.path.join(snapdir, "ncclprobe-previous"))
        tracers.append(Ncclprobe("previous", f"ncclprobe record, {args.previous_label}", prev,
                                 np_options(args, prev, snapdir)))

    def on_signal(sig, _frame):
        raise KeyboardInterrupt

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    t0 = time.monotonic()
    args.load = os.getloadavg()[0]
    st = runs = None
    failed = False
    try:
        args.sysctl_before = BPF.sysctl()
        BPF.enable(args.stats)
        args.stats_how = BPF.describe()
        log(f"cost: {args.rounds} rounds x {len(args.configs)} configurations x "
            f"{len(tracers)} tracers; BPF statistics: {args.stats_how}")
        runs = bench_all(args, tracers)
        st = analyse(args, runs, tracers)
    except KeyboardInterrupt:
        log("interrupted")
        failed = True
    except (RuntimeError, OSError) as e:
        log(f"cost.py: error: {e}")
        failed = True
    finally:
        # ignore further signals while cleaning up
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        stop_sig = {"ncclprobe": signal.SIGINT, "previous": signal.SIGINT,
                    "bpftrace": signal.SIGTERM}
        for p in bench.STARTED:
            if p.alive():
                p.stop(stop_sig.get(p.name, signal.SIGKILL), 30)
        BPF.restore()
        shutil.rmtree(snapdir, ignore_errors=True)
    clean = py_bench.leftovers()
    args.sysctl_after = BPF.sysctl()
    if st is None:
        log(f"cost.py: no results (kernel.bpf_stats_enabled: {args.sysctl_before} before, "
            f"{args.sysctl_after} now)")
        sys.exit(1)
    text = report(args, st, tracers, runs, clean, time.monotonic() - t0)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if failed or clean:
        sys.exit(1)


if __name__ == "__main__":
    main()
