#!/usr/bin/python3
"""ncclprobe benchmarks: per-launch added latency and the highest drop-free rate.

Run through bench/run.sh (which builds launch_loop); see bench/README.md.

    bench.py --build BUILD --launch-loop PATH [--rounds N] [--iters N] [--warmup N]
             [--depth N] [--rates LIST] [--rate-seconds S] [--rate-reps N]
             [--rate-variants default,fp] [--no-diagnostic] [--out FILE]
             [--previous PATH] [--skip-latency] [--skip-rates]

--previous PATH measures another ncclprobe binary (e.g. the previous commit's, see
BENCH_AGAINST in run.sh) beside this one in the same rounds.

Standard library only. Every process this script starts is tracked by pid and
stopped on every path; the perf probe it creates is deleted again.
"""
import argparse
import ctypes
import json
import mmap
import os
import platform
import re
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

import privmount

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

    exact = True  # events() must equal the launches when attached in time

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
        return read_summary(os.path.join(workdir, "rec"))["totals"]["events_captured"]



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
    exact = False  # perf may lose samples itself ("lost N chunks") and rounds its count

    def start(self, pid, workdir):
        # Start with the event disabled and enable it through perf's control
        # fifo: perf acks once the event is on, so we know it is attached.
        ctl, ack = os.path.join(workdir, "ctl"), os.path.join(workdir, "ack")
        os.mkfifo(ctl)
        os.mkfifo(ack)
        ack_fd = os.open(ack, os.O_RDONLY | os.O_NONBLOCK)
        ctl_fd = os.open(ctl, os.O_RDWR)
        try:
            p = Proc(["perf", "record", "-D", "-1", "--control", f"fifo:{ctl},{ack}",
                      "-e", PERF_EVENT, "-g", "-p", str(pid),
                      "-o", os.path.join(workdir, "perf.data")], self.name)
            os.write(ctl_fd, b"enable\n")
            got, deadline = b"", time.monotonic() + 30
            while b"ack" not in got and time.monotonic() < deadline and p.alive():
                r, _, _ = select.select([ack_fd], [], [], 0.1)
                data = os.read(ack_fd, 64) if r else b""
                if data:
                    got += data
                else:
                    time.sleep(0.02)  # no writer yet: the read end reports EOF
            if b"ack" not in got:
                p.stop(signal.SIGTERM, 10)
                raise RuntimeError(f"perf record did not enable its event:\n{p.text()}")
            return p
        finally:
            os.close(ack_fd)
            os.close(ctl_fd)

    def stop(self, proc):
        # perf record -p stops by itself when the target exits.
        if proc.wait(20) is None:
            proc.stop(signal.SIGTERM, 60)
        proc.stop(signal.SIGTERM, 5)

    def events(self, proc, workdir):
        m = re.search(r"\((\d+) samples\)", proc.text())
        return int(m.group(1)) if m else None

    def lost(self, proc):
        m = re.search(r"lost (\d+) chunks", proc.text())
        return int(m.group(1)) if m else 0


def read_summary(outdir):
    with open(os.path.join(outdir, "summary.json")) as f:
        return json.load(f)


# ---- perf probe / tracefs -----------------------------------------------------


class PerfProbe:
    def __init__(self):
        self.created = False

    def setup(self):
        privmount.mount_tracefs()  # in our own mount namespace (main)
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


def irq_work_count():
    """IRQ-work interrupts so far, all CPUs (a forced ring-buffer wake-up raises one)."""
    try:
        with open("/proc/interrupts") as f:
            for line in f:
                if line.split(":")[0].strip() == "IWI":
                    return sum(int(x) for x in line.split(":", 1)[1].split() if x.isdigit())
    except OSError:
        pass
    return None


def cpu_ns_by_thread(pid):
    """{thread name: CPU ns so far} of a process (/proc/PID/task/*/schedstat; threads of one
    name summed), or None when it is gone."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[name] = out.get(name, 0) + int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return out


def cpu_ns(pid):
    """CPU time of every thread of a process so far (ns), or None."""
    by_thread = cpu_ns_by_thread(pid)
    return None if by_thread is None else sum(by_thread.values())


def emit(text, out):
    """Prints a report and, given a path, writes it there too."""
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)


def pin(pid, cpus):
    """Every thread of a process (and so the threads it makes later) onto cpus."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass


def cpu_seconds(pid):
    """utime + stime of a (possibly zombie, not yet reaped) process, in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class RingPos:
    """Reads the producer position (total bytes ever written) of a process's
    BPF ring buffer, through a read-only mapping of the map. x86-64 only;
    .read() returns None where that is not possible."""

    def __init__(self, pid):
        self.m = None
        if platform.machine() != "x86_64":
            return
        map_id = None
        try:
            for fd in os.listdir(f"/proc/{pid}/fdinfo"):
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    info = f.read()
                if re.search(r"^map_type:\s*27$", info, re.M):  # BPF_MAP_TYPE_RINGBUF
                    map_id = int(re.search(r"^map_id:\s*(\d+)$", info, re.M).group(1))
                    break
        except (OSError, AttributeError):
            return
        if map_id is None:
            return
        libc = ctypes.CDLL(None, use_errno=True)
        attr = ctypes.create_string_buffer(struct.pack("III", map_id, 0, 0), 128)
        fd = libc.syscall(321, 14, attr, 128)  # bpf(BPF_MAP_GET_FD_BY_ID)
        if fd < 0:
            return
        try:
            self.m = mmap.mmap(fd, 2 * mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ)
        except OSError:
            self.m = None
        finally:
            os.close(fd)

    def read(self):
        return struct.unpack_from("Q", self.m, mmap.PAGESIZE)[0] if self.m else None

    def close(self):
        if self.m:
            self.m.close()
            self.m = None


def one_run(launch_loop, tracer, ll_args, settle_s=0.3):
    """Start launch_loop --wait-signal, attach the tracer, run, stop everything.
    Returns a dict: launch_loop's figures (ns_per_launch, launches, elapsed_s,
    rate), events (what the tracer saw, or None), summary (ncclprobe's
    summary.json), iwi (IRQ-work interrupts during the run) and tracer_cpu_s
    (the tracer's CPU time from the start signal to the workload's exit)."""
    workdir = tempfile.mkdtemp(prefix="ncclprobe-bench-")
    wl = tp = None
    try:
        wl = Proc([launch_loop, "--wait-signal"] + ll_args, "launch_loop")
        m = wl.wait_line(r"^ready (\d+)$", 10, key="out")
        if not m:
            raise RuntimeError(f"launch_loop did not start:\n{wl.text()}")
        tp = tracer.start(wl.pid, workdir)
        time.sleep(settle_s)  # let the tracer's start-up work finish
        ring = RingPos(tp.pid) if isinstance(tracer, Ncclprobe) else None
        prod0 = ring.read() if ring else None
        cpu0 = cpu_seconds(tp.pid) if tp else None
        iwi0 = irq_work_count()
        wl.send(signal.SIGUSR1)
        if wl.wait(300) is None:
            raise RuntimeError("launch_loop did not finish")
        iwi1 = irq_work_count()
        cpu1 = cpu_seconds(tp.pid) if tp else None
        prod1 = ring.read() if ring else None
        if ring:
            ring.close()
        wl.stop()
        res = wl.wait_line(r"ns_per_launch=", 5, key="out")
        if wl.p.returncode != 0 or not res:
            raise RuntimeError(f"launch_loop failed ({wl.p.returncode}):\n{wl.text()}")
        out = parse_kv(res.string)
        out["iwi"] = iwi1 - iwi0 if iwi0 is not None and iwi1 is not None else None
        out["tracer_cpu_s"] = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
        out["events"] = out["summary"] = None
        out["lost_chunks"] = 0
        out["ring_bytes_per_event"] = None
        if tp:
            tracer.stop(tp)
            tp_done, tp = tp, None
            out["events"] = tracer.events(tp_done, workdir)
            out["lost_chunks"] = tracer.lost(tp_done) if isinstance(tracer, Perf) else 0
            if isinstance(tracer, Ncclprobe):
                out["summary"] = read_summary(os.path.join(workdir, "rec"))
                sent = out["summary"]["totals"].get("events_sent_by_bpf")
                if prod0 is not None and prod1 is not None and sent:
                    out["ring_bytes_per_event"] = (prod1 - prod0) / sent
        return out
    finally:
        for p in (tp, wl):
            if p is not None and p.alive():
                p.stop(signal.SIGKILL if p is wl else signal.SIGTERM, 10)
        shutil.rmtree(workdir, ignore_errors=True)


# ---- benchmarks -------------------------------------------------------------------


def checked_run(args, tracer, ll_args, warmup, attempts=3):
    """one_run, repeated (up to `attempts` times) while the tracer missed
    launches - it was not attached yet when they started, so the timing
    would mix traced and untraced launches."""
    for attempt in range(1, attempts + 1):
        res = one_run(args.launch_loop, tracer, ll_args)
        expected = int(res["launches"]) + warmup
        seen = res["events"]
        if res["summary"] is not None:
            seen = res["summary"]["totals"]["probe_hits"]
        if seen is None or seen >= expected or not tracer.exact:
            res["retries"] = attempt - 1
            return res
        log(f"  {tracer.name}: saw {seen} of {expected} launches (attached late); "
            f"run {attempt}/{attempts} discarded")
    raise RuntimeError(f"{tracer.name} kept missing launches")



def bench_latency(args, tracers):
    ll_args = ["--iters", str(args.iters), "--warmup", str(args.warmup),
               "--depth", str(args.depth)]
    expected = args.iters + args.warmup
    runs = {t.name: [] for t in tracers}
    for r in range(args.rounds):
        # Interleave, rotating the order every round so no configuration
        # always runs first or right after the same neighbour.
        order = tracers[r % len(tracers):] + tracers[:r % len(tracers)]
        for t in order:
            res = checked_run(args, t, ll_args, args.warmup)
            runs[t.name].append(res)
            ev = res["events"]
            log(f"  round {r + 1}/{args.rounds} {t.name:<18} {res['ns_per_launch']:9.1f} ns/launch"
                + (f"  events={ev}" if ev is not None else "")
                + (f"  irq_work={res['iwi']}" if res["iwi"] is not None else ""))
    base = [x["ns_per_launch"] for x in runs["baseline"]]
    rows = []
    for t in tracers:
        ns = [x["ns_per_launch"] for x in runs[t.name]]
        # Added latency: median over rounds of (traced - baseline) in the same round.
        diffs = [x - b for x, b in zip(ns, base)]
        launches = [x["launches"] + args.warmup for x in runs[t.name]]
        iwi = [x["iwi"] / n * 1000 for x, n in zip(runs[t.name], launches)
               if x["iwi"] is not None]
        cpu = [x["tracer_cpu_s"] / n * 1e6 for x, n in zip(runs[t.name], launches)
               if x["tracer_cpu_s"] is not None]
        ev = [x["events"] for x in runs[t.name] if x["events"] is not None]
        drops = [x["summary"]["totals"]["events_dropped"] for x in runs[t.name] if x["summary"]]
        lost = [x["lost_chunks"] for x in runs[t.name]]
        rbpe = [x["ring_bytes_per_event"] for x in runs[t.name]
                if x["ring_bytes_per_event"] is not None]
        rows.append({
            "name": t.name, "label": t.label, "ns": ns, "median": median(ns),
            "min": min(ns), "max": max(ns), "added": median(diffs), "diffs": diffs,
            "events": ev, "expected": expected, "drops": drops, "lost": lost,
            "ring_bpe": median(rbpe) if rbpe else None,
            "ring_bpe_range": (min(rbpe), max(rbpe)) if rbpe else None,
            "iwi_per_k": median(iwi) if iwi else None,
            "cpu_us": median(cpu) if cpu else None,
        })
    return rows


RATE_VARIANTS = {"default": [], "fp": ["--unwind", "fp"]}


def bench_rates(args, np_bin):
    """Each (options, target rate) args.rate_reps times (the whole sweep
    repeated, so the repetitions of one rate are spread out); per rate the
    medians, and the worst repetition's drops."""
    tracers = {v: Ncclprobe("ncclprobe", "ncclprobe", np_bin, RATE_VARIANTS[v])
               for v in args.rate_variants}
    runs = {(v, rate): [] for v in args.rate_variants for rate in args.rates}
    for rep in range(args.rate_reps):
        for v, rate in runs:
            t = tracers[v]
            ll_args = ["--rate", str(rate), "--duration", str(args.rate_seconds),
                       "--warmup", "0", "--depth", str(args.depth)]
            res = checked_run(args, t, ll_args, 0)
            tot = res["summary"]["totals"]
            win = res["elapsed_s"]
            hits = tot["probe_hits"]
            run = {
                "achieved": res["rate"], "hits": hits, "captured": tot["events_captured"],
                "dropped": tot["events_dropped"],
                "drop_pct": 100.0 * tot["events_dropped"] / hits if hits else 0.0,
                "consumer_eps": tot["events_captured"] / win if win else 0.0,
                "ns_per_launch": res["ns_per_launch"],
                "iwi_per_k": res["iwi"] / hits * 1000 if hits and res["iwi"] is not None
                else None,
                "cpu_pct": 100.0 * res["tracer_cpu_s"] / win
                if win and res["tracer_cpu_s"] is not None else None,
                "ring_bpe": res["ring_bytes_per_event"],
            }
            runs[(v, rate)].append(run)
            log(f"  rep {rep + 1}/{args.rate_reps} {v:<7} rate {rate_label(rate):>5}: achieved "
                f"{run['achieved']:>7.0f}/s captured={run['captured']} "
                f"dropped={run['dropped']} ({run['drop_pct']:.2f}%) "
                f"{run['ns_per_launch']:.0f} ns/launch call")
    rows = []
    for (v, rate), rs in runs.items():
        worst = max(rs, key=lambda r: r["dropped"])

        def med(key):
            xs = [r[key] for r in rs if r[key] is not None]
            return median(xs) if xs else None

        rows.append({
            "variant": v, "rate": rate, "reps": len(rs), "achieved": med("achieved"), "hits": worst["hits"],
            "captured": worst["captured"], "dropped": worst["dropped"],
            "drop_pct": worst["drop_pct"], "consumer_eps": med("consumer_eps"),
            "ns_per_launch": med("ns_per_launch"), "iwi_per_k": med("iwi_per_k"),
            "cpu_pct": med("cpu_pct"), "ring_bpe": med("ring_bpe"),
        })
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


def binary_stamp(path):
    try:
        st = os.stat(path)
        return (st.st_mtime_ns, st.st_size)
    except OSError:
        return None


def source_revision(repo):
    """The checkout's commit, "+dirty" when src/, bpf/ or include/ differ from it."""
    head = run_cmd(["git", "-C", repo, "rev-parse", "--short", "HEAD"], check=False)
    if head.returncode != 0:
        return "unknown revision"
    dirty = run_cmd(["git", "-C", repo, "status", "--porcelain", "--", "src", "bpf", "include"],
                    check=False).stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")


def fmt_ratio(a, b):
    if a is None or b is None or b != b or a != a or b <= 0:
        return "n/a"
    return f"{a / b:.2f}x"


def fmt_bytes(r):
    if r["ring_bpe"] is None:
        return "-"
    lo, hi = r["ring_bpe_range"]
    if hi - lo < 8:
        return f"{r['ring_bpe']:.0f}"
    return f"{r['ring_bpe']:.0f} ({lo:.0f} - {hi:.0f})"


def fmt_opt(x, fmt):
    return "-" if x is None else format(x, fmt)


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
    lines.append(f"- tools: {np_v or 'ncclprobe'} ({args.ncclprobe_src}, checkout at "
                 f"{args.revision}; a copy taken at the start ran), {bpftrace_v}, {perf_v}")
    if args.binary_changed:
        lines.append("- WARNING: the ncclprobe binary changed while it was being copied.")
    lines.append(f"- workload: launch_loop --depth {args.depth}: cudaLaunchKernel in {CUDART}, "
                 f"{args.depth + 5} user frames from _start")
    lines.append("")
    if lat:
        by = {r["name"]: r for r in lat}
        added = {k: v["added"] for k, v in by.items()}
        lines.append(f"## Per-launch latency ({args.rounds} interleaved rounds x "
                     f"{args.iters} timed launches, median of per-batch means)")
        lines.append("")
        lines.append("| configuration | ns/launch (median) | min - max | added ns/launch "
                     "| ncclprobe added / this added | events seen / launches "
                     "| IRQ-work interrupts per 1k launches | tracer CPU us per launch "
                     "| ring-buffer bytes per launch |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in lat:
            base = r["name"] == "baseline"
            ev = "-" if not r["events"] else f"{median(r['events']):.0f} / {r['expected']}"
            if r["drops"] and max(r["drops"]):
                n = sum(1 for d in r["drops"] if d)
                ev += f" (drops in {n} of {len(r['drops'])} runs, worst {max(r['drops'])})"
            if r["lost"] and max(r["lost"]):
                n = sum(1 for d in r["lost"] if d)
                ev += f" (perf lost chunks in {n} of {len(r['lost'])} runs)"
            ratio = "-" if base else fmt_ratio(added["ncclprobe"], r["added"])
            add = "-" if base else f"{r['added']:.0f}"
            lines.append(f"| {r['label']} | {r['median']:.0f} | {r['min']:.0f} - {r['max']:.0f} "
                         f"| {add} | {ratio} | {ev} | {fmt_opt(r['iwi_per_k'], '.0f')} "
                         f"| {'-' if base else fmt_opt(r['cpu_us'], '.2f')} "
                         f"| {fmt_bytes(r)} |")
        lines.append("")
        a = added
        lines.append("Added-latency ratios (ncclprobe default options; below 1 means ncclprobe "
                     "adds less): "
                     f"ncclprobe / bpftrace = {fmt_ratio(a.get('ncclprobe'), a.get('bpftrace'))}, "
                     f"ncclprobe / perf = {fmt_ratio(a.get('ncclprobe'), a.get('perf'))}; "
                     f"--wakeup-kb 0 / default = "
                     f"{fmt_ratio(a.get('ncclprobe-wakeup0'), a.get('ncclprobe'))}.")
        lines.append("")
        lines.append("ns/launch per round (rounds 1..N; each round runs every configuration once):")
        lines.append("")
        for r in lat:
            lines.append(f"- {r['name']}: " + ", ".join(f"{x:.0f}" for x in r["ns"]))
        lines.append("")
    if rates:
        lines.append(f"## Launch rate vs drops (ncclprobe record, ~{args.rate_seconds:g} s "
                     f"per rate, {args.rate_reps} sweeps)")
        lines.append("")
        lines.append("Medians over the sweeps; probe hits, captured and dropped are from the "
                     "sweep that dropped the most. Consumer events/s = events_captured / "
                     "launch window.")
        for v in args.rate_variants:
            vr = [r for r in rates if r["variant"] == v]
            opts = " ".join(RATE_VARIANTS[v]) or "default options"
            lines.append("")
            lines.append(f"### ncclprobe record, {opts}")
            lines.append("")
            lines.append("| target rate/s | achieved rate/s | probe hits | captured | dropped "
                         "| drop % | consumer events/s | ns per launch call "
                         "| IRQ-work per 1k launches | ncclprobe CPU % |")
            lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for r in vr:
                lines.append(f"| {rate_label(r['rate'])} | {r['achieved']:.0f} | {r['hits']} "
                             f"| {r['captured']} | {r['dropped']} | {r['drop_pct']:.2f} "
                             f"| {r['consumer_eps']:.0f} | {r['ns_per_launch']:.0f} "
                             f"| {fmt_opt(r['iwi_per_k'], '.0f')} "
                             f"| {fmt_opt(r['cpu_pct'], '.0f')} |")
            lines.append("")
            first = next((i for i, r in enumerate(vr) if r["dropped"] > 0), None)
            below = vr if first is None else vr[:first]
            if below:
                best = max(below, key=lambda r: r["achieved"])
                lines.append(f"- Highest rate held with zero drops: {best['achieved']:.0f} "
                             f"launches/s (target {rate_label(best['rate'])}"
                             + (", the fastest the traced loop went"
                                if first is None and (best["rate"] == 0 or
                                                      best["achieved"] < 0.95 * best["rate"])
                                else "")
                             + ").")
            else:
                lines.append("- Even the lowest rate dropped events.")
            if first is not None:
                fd = vr[first]
                lines.append(f"- First rate with drops: target {rate_label(fd['rate'])} "
                             f"(achieved {fd['achieved']:.0f}/s), {fd['drop_pct']:.2f}% dropped.")
                later_clean = [rate_label(r["rate"]) for r in vr[first + 1:] if not r["dropped"]]
                if later_clean:
                    lines.append(f"  (Higher targets {', '.join(later_clean)} had no drops in "
                                 f"any sweep: drops here depend on when the reader gets "
                                 f"scheduled, not on the rate alone.)")
            bpe = [r["ring_bpe"] for r in vr if r["ring_bpe"]]
            if bpe and args.ring_mb:
                per = median(bpe)
                lines.append(f"- Ring-buffer record: {per:.0f} bytes per launch, so the "
                             f"{args.ring_mb} MiB ring holds about "
                             f"{args.ring_mb * 2**20 / per:.0f} launches of backlog.")
            peak = max(vr, key=lambda r: r["consumer_eps"])
            lines.append(f"- Consumer throughput: {peak['consumer_eps']:.0f} events/s at target "
                         f"{rate_label(peak['rate'])}"
                         + (" with nothing dropped (a lower bound on what the reader sustains)."
                            if peak["dropped"] == 0 else
                            f" ({peak['drop_pct']:.2f}% dropped there)."))
        lines.append("")
    lines.append("## Clean-up")
    lines.append("")
    lines.append("Nothing left behind (no BPF links or perf events held by our processes, no "
                 "perf probe, no process still running)." if not clean else
                 "LEFT BEHIND: " + "; ".join(clean))
    lines.append("")
    return "\n".join(lines)


def main():
    privmount.enter()
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--launch-loop", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=200000)
    ap.add_argument("--warmup", type=int, default=10000)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--rates", default="50000,100000,200000,400000,800000,0",
                    help="comma-separated target rates, 0 = as fast as possible")
    ap.add_argument("--rate-seconds", type=float, default=2.0)
    ap.add_argument("--rate-reps", type=int, default=2)
    ap.add_argument("--rate-variants", default="default,fp",
                    help="ncclprobe options for the rate sweep: default (no options), "
                         "fp (--unwind fp); comma-separated")
    ap.add_argument("--out", default=None)
    ap.add_argument("--previous", default=None,
                    help="another ncclprobe binary (e.g. the previous commit's) measured "
                         "beside this one in the same rounds")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-rates", action="store_true")
    ap.add_argument("--no-diagnostic", dest="diagnostic", action="store_false",
                    help="leave out the diagnostic configuration (fp, no wake-ups)")
    args = ap.parse_args()
    args.ncclprobe = os.path.abspath(os.path.join(args.build, "ncclprobe"))
    args.launch_loop = os.path.abspath(args.launch_loop)
    args.rates = [int(float(x)) for x in args.rates.split(",") if x.strip()]
    args.ring_mb = 16  # ncclprobe's default --ring-buffer-mb
    args.rate_variants = [v.strip() for v in args.rate_variants.split(",") if v.strip()]
    for v in args.rate_variants:
        if v not in RATE_VARIANTS:
            sys.exit(f"bench.py: unknown rate variant {v!r} (default, fp)")

    if os.geteuid() != 0:
        sys.exit("bench.py: needs root (BPF, uprobes, perf probe)")
    for tool in ("bpftrace", "perf", "bpftool"):
        if not shutil.which(tool):
            sys.exit(f"bench.py: {tool} not found")

    args.revision = source_revision(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # Run a snapshot of the binary: a rebuild during the benchmark must not
    # mix two builds into one table.
    stamp = binary_stamp(args.ncclprobe)
    snapdir = tempfile.mkdtemp(prefix="ncclprobe-bench-bin-")
    args.ncclprobe_src = args.ncclprobe
    args.ncclprobe = shutil.copy2(args.ncclprobe, os.path.join(snapdir, "ncclprobe"))
    args.binary_changed = binary_stamp(args.ncclprobe_src) != stamp
    args.previous_label = os.environ.get("BENCH_PREVIOUS_LABEL", "previous build")
    if args.previous:
        args.previous = shutil.copy2(args.previous, os.path.join(snapdir, "ncclprobe-previous"))
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
            Ncclprobe("ncclprobe", "ncclprobe record (defaults)", args.ncclprobe),
            Ncclprobe("ncclprobe-fp", "ncclprobe record --unwind fp", args.ncclprobe,
                      ["--unwind", "fp"]),
            *([Ncclprobe("ncclprobe-previous",
                         f"ncclprobe record (defaults), {args.previous_label}", args.previous)]
              if args.previous else []),
            Ncclprobe("ncclprobe-wakeup0", "ncclprobe record --wakeup-kb 0", args.ncclprobe,
                      ["--wakeup-kb", "0"]),
            Bpftrace("bpftrace", "bpftrace @[ustack] = count()"),
            Perf("perf", "perf record -g (perf probe)"),
        ]
        if args.diagnostic:
            tracers.append(Ncclprobe(
                "ncclprobe-fp-nowake",
                "diagnostic: ncclprobe --unwind fp --ring-buffer-mb 256 --wakeup-kb 1048576",
                args.ncclprobe, ["--unwind", "fp", "--ring-buffer-mb", "256",
                                 "--wakeup-kb", "1048576"]))
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
    except RuntimeError as e:
        log(f"bench.py: error: {e}")
        stop["sig"] = "error"
    finally:
        for p in STARTED:
            if p.alive():
                p.stop(signal.SIGINT if p.name.startswith("ncclprobe") else signal.SIGTERM, 30)
        perf_probe.teardown()
    clean = leftovers(perf_probe)
    try:
        text = report(args, lat, rates, clean)
    finally:
        shutil.rmtree(snapdir, ignore_errors=True)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if stop["sig"] or clean:
        sys.exit(1)


if __name__ == "__main__":
    main()
