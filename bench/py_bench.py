#!/usr/bin/python3
"""ncclprobe Python-frame benchmark: added per-launch latency of walking CPython frames
in BPF, at several Python stack depths, against no tracer, native stacks only and bpftrace.

Run through bench/python.sh; see bench/README.md.

    py_bench.py --build BUILD [--pythons PY[,PY...]] [--depths 10,50,200] [--rounds N]
                [--iters N] [--warmup N] [--libcuda PATH] [--no-bpftrace] [--out FILE]

Per interpreter, every (condition, depth) runs once per round, all rounds interleaved, the
order rotated each round. Conditions:

    baseline   python3 py_launch_loop.py --depth D             (no tracer)
    off        ncclprobe record --python off -o DIR -- python3 py_launch_loop.py ...
    merge      ncclprobe record -o DIR -- ...                  (defaults: merge, depth 128)
    depth256   ncclprobe record --python-depth 256 -o DIR -- ...
    bpftrace   bpftrace -p PID -e 'uprobe:...:cudaLaunchKernel /pid == PID/
                                  { @[ustack] = count(); }'
               on py_launch_loop.py --wait-signal (attach confirmed through bpftool)

The workload times itself (time.perf_counter_ns) and prints ns_per_launch, the mean over
the timed launches after its warm-up. Every ncclprobe run's summary.json and
launches.folded are checked (hits, drops, Python walk counters, Python frames per stack).
Standard library only; shares its process handling with bench.py.
"""
import argparse
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (bench.py: Proc, run_cmd, read_summary, ...)
from bench import CUDART, Proc, log, median, read_summary, run_cmd  # noqa: E402

DEFAULT_PYTHONS = ("/root/.pyenv/versions/3.12.1/bin/python3.12,"
                   "/root/.pyenv/versions/3.10.13/bin/python3.10")
PY_FRAME = re.compile(r" \([^();]*:\d+\)$")  # "qualname (file.py:line)"
TRUNC_MARK = "[python truncated]"
DEFAULT_PY_DEPTH = 128  # ncclprobe's --python-depth default

CONDITIONS = {
    # name: (label, ncclprobe options or None)
    "baseline": ("no tracer (baseline)", None),
    "off": ("ncclprobe --python off (native stack only)", ["--python", "off"]),
    "merge": ("ncclprobe defaults (--python merge, depth 128)", []),
    "depth256": ("ncclprobe --python-depth 256", ["--python-depth", "256"]),
    "bpftrace": ("bpftrace -p PID `@[ustack] = count()` (native stack)", None),
}


def python_limit(cond):
    return {"merge": DEFAULT_PY_DEPTH, "depth256": 256}.get(cond)


# ---- one run -------------------------------------------------------------------------


def workload_argv(args, py, depth, wait_signal=False):
    argv = [py, args.loop, "--depth", str(depth), "--iters", str(args.iters),
            "--warmup", str(args.warmup), "--settle", str(args.settle)]
    if args.libcuda:
        argv += ["--libcuda", args.libcuda]
    if wait_signal:
        argv.append("--wait-signal")
    return argv


def workload_result(proc, what):
    m = proc.wait_line(r"ns_per_launch=", 5, key="out")
    if not m:
        raise RuntimeError(f"{what}: no result line (exit {proc.p.returncode}):\n{proc.text()}")
    out = {}
    for k, v in re.findall(r"(\w+)=(\S+)", m.string):
        try:
            out[k] = float(v)
        except ValueError:
            out[k] = v
    return out


def result(wl):
    """A run's figures from the workload's line: ns per timed launch, launches made."""
    return {"ns": wl["ns_per_launch"], "made": int(wl["launches"] + wl["warmup"])}


def folded_stats(rec):
    """Python frames per launch in launches.folded: {frames: launches}, the launches
    whose stack carries the truncation marker, and those where it is the root (first) frame."""
    frames, marked, at_root = {}, 0, 0
    with open(os.path.join(rec, "launches.folded"), errors="replace") as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            n = int(count)
            parts = stack.split(";")
            py = sum(1 for p in parts if PY_FRAME.search(p))
            frames[py] = frames.get(py, 0) + n
            if TRUNC_MARK in parts:
                marked += n
                at_root += n if parts[0] == TRUNC_MARK else 0
    return frames, marked, at_root


def run_baseline(args, py, depth):
    p = Proc(workload_argv(args, py, depth), "py_launch_loop")
    if p.wait(args.timeout) is None:
        raise RuntimeError("py_launch_loop did not finish")
    p.stop()
    if p.p.returncode != 0:
        raise RuntimeError(f"py_launch_loop failed ({p.p.returncode}):\n{p.text()}")
    return result(workload_result(p, "py_launch_loop"))


def run_ncclprobe(args, py, depth, opts):
    workdir = tempfile.mkdtemp(prefix="ncclprobe-pybench-")
    rec = os.path.join(workdir, "rec")
    p = None
    try:
        p = Proc([args.ncclprobe, "record"] + opts + ["-o", rec, "--"]
                 + workload_argv(args, py, depth), "ncclprobe")
        if p.wait(args.timeout) is None:
            raise RuntimeError(f"ncclprobe {' '.join(opts)} did not finish:\n{p.text()}")
        p.stop(signal.SIGINT, 60)
        if p.p.returncode != 0:
            raise RuntimeError(f"ncclprobe {' '.join(opts)} exited with "
                               f"{p.p.returncode}:\n{p.text()}")
        res = result(workload_result(p, "ncclprobe's workload"))
        s = read_summary(rec)
        res["totals"] = s["totals"]
        res["unwind"] = s.get("unwind", {})
        res["py_frames"], res["marked"], res["marked_root"] = folded_stats(rec)
        res["seen"] = s["totals"]["probe_hits"]
        return res
    finally:
        if p is not None and p.alive():
            p.stop(signal.SIGINT, 30)
        shutil.rmtree(workdir, ignore_errors=True)


def run_bpftrace(args, py, depth):
    """bpftrace -p on a waiting workload (bench.py's approach: 'Attaching 1 probe...' is
    printed just before attaching, so wait until bpftool lists bpftrace's uprobe)."""
    wl = bt = None
    try:
        wl = Proc(workload_argv(args, py, depth, wait_signal=True), "py_launch_loop")
        m = wl.wait_line(r"^ready (\d+)$", 30, key="out")
        if not m:
            raise RuntimeError(f"py_launch_loop did not start:\n{wl.text()}")
        # -p as asked, and bench.py's pid filter too: bpftrace 0.17's -p alone counted
        # launches of other processes using the same libcudart.
        prog = (f"uprobe:{CUDART}:cudaLaunchKernel /pid == {wl.pid}/ "
                "{ @[ustack] = count(); }")
        bt = Proc(["bpftrace", "-p", str(wl.pid), "-e", prog], "bpftrace")
        if not bt.wait_line(r"Attaching 1 probe", 30):
            raise RuntimeError(f"bpftrace did not start:\n{bt.text()}")
        deadline, attached = time.monotonic() + 20, False
        while time.monotonic() < deadline and bt.alive():
            r = run_cmd(["bpftool", "perf", "list"], check=False)
            if re.search(rf"^pid {bt.pid}\s.*uprobe", r.stdout, re.M):
                attached = True
                break
            time.sleep(0.05)
        if not attached:
            raise RuntimeError(f"bpftrace did not attach:\n{bt.text()}")
        time.sleep(0.3)  # as bench.py: let start-up work settle
        wl.send(signal.SIGUSR1)
        if wl.wait(args.timeout) is None:
            raise RuntimeError("py_launch_loop did not finish")
        wl.stop()
        if wl.p.returncode != 0:
            raise RuntimeError(f"py_launch_loop failed ({wl.p.returncode}):\n{wl.text()}")
        res = result(workload_result(wl, "py_launch_loop"))
        # bpftrace -p exits (printing its map) once its target has exited.
        if bt.wait(20) is None:
            bt.send(signal.SIGTERM)
        bt.stop(signal.SIGTERM, 60)
        res["seen"] = sum(int(n) for n in re.findall(r"^\]: (\d+)$", bt.text(), re.M))
        # Frames per ustack (weighted by count): how far bpftrace's frame-pointer walk got.
        res["bt_frames"] = {}
        for body, n in re.findall(r"^@\[\n(.*?)\n\]: (\d+)$", bt.text(), re.M | re.S):
            k = len([x for x in body.splitlines() if x.strip()])
            res["bt_frames"][k] = res["bt_frames"].get(k, 0) + int(n)
        return res
    finally:
        for p, sig in ((bt, signal.SIGTERM), (wl, signal.SIGKILL)):
            if p is not None and p.alive():
                p.stop(sig, 10)


def one_run(args, py, cond, depth):
    if cond == "baseline":
        return run_baseline(args, py, depth)
    if cond == "bpftrace":
        return run_bpftrace(args, py, depth)
    return run_ncclprobe(args, py, depth, CONDITIONS[cond][1])


def checked_run(args, py, cond, depth, attempts=3):
    """one_run, repeated while the tracer saw fewer launches than were made."""
    for attempt in range(1, attempts + 1):
        res = one_run(args, py, cond, depth)
        seen, expected = res.get("seen"), res["made"]
        if seen is None or seen >= expected:
            res["retries"] = attempt - 1
            return res
        log(f"  {cond} depth {depth}: saw {seen} of {expected} launches; "
            f"run {attempt}/{attempts} discarded")
    raise RuntimeError(f"{cond} at depth {depth} kept missing launches")


# ---- one interpreter ----------------------------------------------------------------


def bench_python(args, py):
    runs = {(c, d): [] for d in args.depths for c in args.conditions}
    for r in range(args.rounds):
        # Rotate both the depths and the conditions every round, so no configuration
        # always runs first or right after the same neighbour.
        ds = args.depths[r % len(args.depths):] + args.depths[:r % len(args.depths)]
        k = r % len(args.conditions)
        cs = args.conditions[k:] + args.conditions[:k]
        for cond, depth in [(c, d) for d in ds for c in cs]:
            res = checked_run(args, py, cond, depth)
            runs[(cond, depth)].append(res)
            extra = ""
            if "totals" in res:
                t = res["totals"]
                extra = (f"  dropped={t['events_dropped']} walks={t['python_walks']} "
                         f"truncated={t['python_truncated']}")
            elif res.get("seen") is not None:
                extra = f"  events={res['seen']}"
            log(f"  round {r + 1}/{args.rounds} depth {depth:>3} {cond:<9} "
                f"{res['ns']:9.0f} ns/launch{extra}")
    return runs


def slope(points):
    """Least-squares slope of [(x, y), ...]; None with fewer than two distinct x."""
    pts = [(x, y) for x, y in points if y is not None]
    if len({x for x, _ in pts}) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den


def analyse(args, runs):
    conds, depths = args.conditions, args.depths
    st = {"ns": {}, "range": {}, "added": {}, "walk": {}, "per_round": {}}
    for c in conds:
        for d in depths:
            ns = [x["ns"] for x in runs[(c, d)]]
            st["per_round"][(c, d)] = ns
            st["ns"][(c, d)] = median(ns)
            st["range"][(c, d)] = (min(ns), max(ns))
            if "baseline" in conds and c != "baseline":
                base = [x["ns"] for x in runs[("baseline", d)]]
                st["added"][(c, d)] = median([x - b for x, b in zip(ns, base)])
            if "off" in conds and c in ("merge", "depth256"):
                off = [x["ns"] for x in runs[("off", d)]]
                st["walk"][(c, d)] = median([x - o for x, o in zip(ns, off)])

    # Per-frame cost: per round, the slope of (condition - off) over the Python frames
    # actually walked (min(depth, limit)); the median over rounds.
    st["per_frame"] = {}
    if "off" in conds:
        for c in ("merge", "depth256"):
            if c not in conds:
                continue
            lim = python_limit(c)
            per_round = []
            for r in range(args.rounds):
                pts = [(min(d, lim), runs[(c, d)][r]["ns"] - runs[("off", d)][r]["ns"])
                       for d in depths]
                s = slope(pts)
                if s is not None:
                    per_round.append(s)
            st["per_frame"][c] = (median(per_round) if per_round else None, per_round)
    # Native-only cost against depth: slope of (off - baseline).
    if "off" in conds and "baseline" in conds:
        per_round = [slope([(d, runs[("off", d)][r]["ns"] - runs[("baseline", d)][r]["ns"])
                            for d in depths]) for r in range(args.rounds)]
        per_round = [s for s in per_round if s is not None]
        st["per_frame"]["off"] = (median(per_round) if per_round else None, per_round)

    # Checks, per (condition, depth), over all rounds.
    st["checks"] = {}
    for c in conds:
        if CONDITIONS[c][1] is None and c != "bpftrace":
            continue
        for d in depths:
            rs = runs[(c, d)]
            ck = {"made": [x["made"] for x in rs], "seen": [x.get("seen") for x in rs],
                  "retries": sum(x.get("retries", 0) for x in rs)}
            if c == "bpftrace":
                frames = {}
                for x in rs:
                    for n, k in x.get("bt_frames", {}).items():
                        frames[n] = frames.get(n, 0) + k
                ck["bt_frames"] = frames
            else:
                tot = [x["totals"] for x in rs]
                ck["dropped"] = [t["events_dropped"] for t in tot]
                ck["walks"] = [t.get("python_walks") for t in tot]
                ck["truncated"] = [t.get("python_truncated") for t in tot]
                ck["errors"] = [t.get("python_read_errors", 0) for t in tot]
                ck["no_thread"] = [t.get("python_threads_without_state", 0) for t in tot]
                ck["native_truncated"] = [x["unwind"].get("truncated", 0) for x in rs]
                frames = {}
                for x in rs:
                    for n, k in x["py_frames"].items():
                        frames[n] = frames.get(n, 0) + k
                ck["py_frames"] = frames
                ck["marked"] = [x["marked"] for x in rs]
                ck["marked_root"] = [x["marked_root"] for x in rs]
            st["checks"][(c, d)] = ck
    return st


# ---- report ---------------------------------------------------------------------------


def us(ns):
    return "-" if ns is None or ns != ns else f"{ns / 1000:.2f}"


def ratio(a, b):
    if a is None or b is None or a != a or b != b or b <= 0:
        return "n/a"
    return f"{a / b:.2f}x"


def fmt_frames(frames):
    """{frames: launches} -> '200 (all)' or '128: 30000, 0: 3000'."""
    if not frames:
        return "-"
    if len(frames) == 1:
        return f"{next(iter(frames))} (all)"
    return ", ".join(f"{n}: {k}" for n, k in sorted(frames.items(), reverse=True))


def verdicts(args, st):
    """Plain-language results of the frame checks."""
    out = []
    ck = st["checks"]
    for c in ("merge", "depth256"):
        lim = python_limit(c)
        for d in args.depths:
            k = ck.get((c, d))
            if not k:
                continue
            want = min(d, lim)
            total = sum(k["py_frames"].values())
            got = k["py_frames"].get(want, 0)
            marked = sum(k["marked"])
            trunc_ok = (marked == total) if d > lim else (marked == 0)
            counters = (all(w == s for w, s in zip(k["walks"], k["seen"]))
                        and all((t == s) if d > lim else (t == 0)
                                for t, s in zip(k["truncated"], k["seen"])))
            ok = got == total and trunc_ok and counters
            what = (f"{CONDITIONS[c][0]}, depth {d}: {got} of {total} recorded launches have "
                    f"{want} Python frames")
            at_root = sum(k["marked_root"])
            where = (" (as the root, i.e. first, frame of the folded stack)" if at_root == marked
                     else f" ({at_root} of them as the root frame)")
            what += (f", {marked} carry \"{TRUNC_MARK}\"{where}" if d > lim
                     else f", none carries \"{TRUNC_MARK}\"" if marked == 0
                     else f", {marked} carry \"{TRUNC_MARK}\" (unexpected)")
            what += ("; python_walks = probe hits and python_truncated = "
                     + ("probe hits" if d > lim else "0") if counters
                     else "; python_walks/python_truncated do NOT match the probe hits")
            out.append(("OK" if ok else "MISMATCH") + ": " + what)
    return out


def report_python(args, py, version, runs, st):
    L = []
    conds, depths = args.conditions, args.depths
    L.append(f"## CPython {version} (`{py}`)")
    L.append("")
    L.append(f"{args.rounds} interleaved rounds; each run: at least {args.warmup} untimed "
             f"warm-up launches and {args.settle:g} s, then {args.iters} timed launches; the "
             "mean ns per timed launch. Medians over rounds; "
             "*added* = median over rounds of (condition - baseline of the same round and depth).")
    L.append("")
    hdr = "| condition |" + "".join(f" D={d} ns/launch | D={d} added us |" for d in depths)
    L.append(hdr)
    L.append("|---|" + "---:|---:|" * len(depths))
    for c in conds:
        row = f"| {CONDITIONS[c][0]} |"
        for d in depths:
            add = "-" if c == "baseline" else us(st["added"].get((c, d)))
            row += f" {st['ns'][(c, d)]:.0f} | {add} |"
        L.append(row)
    L.append("")
    if "off" in conds and "baseline" in conds:
        L.append("Python walk cost and ratios (added = over the baseline; walk = over "
                 "`--python off`, same round):")
        L.append("")
        L.append("| depth D | Python frames walked (default / 256) | walk cost, default us "
                 "| walk cost, --python-depth 256 us | default added / off added "
                 "| depth256 added / off added | default added / bpftrace added "
                 "| off added / bpftrace added |")
        L.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for d in depths:
            a = st["added"]
            L.append(f"| {d} | {min(d, DEFAULT_PY_DEPTH)} / {min(d, 256)} "
                     f"| {us(st['walk'].get(('merge', d)))} "
                     f"| {us(st['walk'].get(('depth256', d)))} "
                     f"| {ratio(a.get(('merge', d)), a.get(('off', d)))} "
                     f"| {ratio(a.get(('depth256', d)), a.get(('off', d)))} "
                     f"| {ratio(a.get(('merge', d)), a.get(('bpftrace', d)))} "
                     f"| {ratio(a.get(('off', d)), a.get(('bpftrace', d)))} |")
        L.append("")
    pf = st["per_frame"]
    if pf:
        L.append("Per-frame cost (least-squares slope over the depths, per round, then the "
                 "median over rounds):")
        L.append("")
        if "depth256" in pf and pf["depth256"][0] is not None:
            L.append(f"- `--python-depth 256`, (condition - off) over frames walked "
                     f"({', '.join(str(min(d, 256)) for d in depths)}): "
                     f"**{pf['depth256'][0]:.0f} ns per Python frame** "
                     f"(rounds: {', '.join(f'{x:.0f}' for x in pf['depth256'][1])})")
        if "merge" in pf and pf["merge"][0] is not None:
            L.append(f"- defaults (depth 128), (condition - off) over frames walked "
                     f"({', '.join(str(min(d, DEFAULT_PY_DEPTH)) for d in depths)}): "
                     f"{pf['merge'][0]:.0f} ns per Python frame "
                     f"(rounds: {', '.join(f'{x:.0f}' for x in pf['merge'][1])})")
        if "off" in pf and pf["off"][0] is not None:
            L.append(f"- `--python off`, (off - baseline) over the Python depth: "
                     f"{pf['off'][0]:.1f} ns per Python frame (what deeper stacks cost without "
                     f"the walker: the native stack copy and DWARF unwinding) "
                     f"(rounds: {', '.join(f'{x:.1f}' for x in pf['off'][1])})")
        L.append("")
    L.append("Checks (all rounds; from summary.json `totals`/`unwind` and launches.folded):")
    L.append("")
    L.append("| condition | D | launches seen / made (per run) | events_dropped (per run) "
             "| python_walks | python_truncated | python_read_errors "
             "| native stacks truncated | Python frames per launch (launches.folded) "
             f"| launches with \"{TRUNC_MARK}\" |")
    L.append("|---|---:|---|---|---|---|---|---|---|---|")

    def lst(xs):
        xs = [x for x in xs if x is not None]
        if not xs:
            return "-"
        return str(xs[0]) + " (all)" if len(set(xs)) == 1 and len(xs) > 1 else \
            ", ".join(str(x) for x in xs)

    for (c, d), k in st["checks"].items():
        if all(a == b for a, b in zip(k["seen"], k["made"])):
            n = len(k["made"])
            seen = f"all = made ({n} run{'s' if n != 1 else ''})"
        else:
            seen = ", ".join(f"{a} / {b}" for a, b in zip(k["seen"], k["made"]))
        if k["retries"]:
            seen += f" ({k['retries']} runs repeated)"
        if c == "bpftrace":
            L.append(f"| {CONDITIONS[c][0]} | {d} | {seen} | - | - | - | - | - "
                     f"| 0 (native frames per ustack: {fmt_frames(k['bt_frames'])}) | - |")
            continue
        L.append(f"| {CONDITIONS[c][0]} | {d} | {seen} | {lst(k['dropped'])} "
                 f"| {lst(k['walks'])} | {lst(k['truncated'])} | {lst(k['errors'])} "
                 f"| {lst(k['native_truncated'])} | {fmt_frames(k['py_frames'])} "
                 f"| {lst(k['marked'])} |")
    L.append("")
    for v in verdicts(args, st):
        L.append(f"- {v}")
    L.append("")
    L.append("ns/launch per round (rounds 1..N):")
    L.append("")
    for c in conds:
        for d in depths:
            L.append(f"- {c} D={d}: " + ", ".join(f"{x:.0f}" for x in st["per_round"][(c, d)]))
    L.append("")
    return L


def report_head(args):
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
            cpu = m.group(1) if m else cpu
    except OSError:
        pass
    np_v = run_cmd([args.ncclprobe, "--version"], check=False).stdout.strip()
    bt_v = (run_cmd(["bpftrace", "--version"], check=False).stdout.strip()
            if "bpftrace" in args.conditions else "")
    L = ["# ncclprobe Python-frame benchmark results", ""]
    L.append(f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    L.append(f"- machine: {os.cpu_count()} CPUs ({cpu}), kernel {platform.release()}, no GPU "
             "(every launch fails at once; the uprobe still fires)")
    L.append(f"- tools: {np_v or 'ncclprobe'} ({args.ncclprobe_src}, checkout at "
             f"{args.revision}; a copy taken at the start ran)"
             + (f", {bt_v}" if bt_v else ""))
    L.append(f"- workload: bench/py_launch_loop.py --depth D: `<module> -> main -> level` "
             f"(x D-3) `-> run_loop ->` ctypes `cudaLaunchKernel` ({CUDART}), D Python frames "
             "at each launch" + (f"; libcuda.so.1 = {args.libcuda}" if args.libcuda else ""))
    L.append("- ncclprobe runs use `record [opts] -o DIR -- python3 py_launch_loop.py ...`; "
             "bpftrace attaches with `-p` to the waiting workload. bpftrace's `ustack` is a "
             "frame-pointer walk of native frames only (no Python frames): it is a peer of "
             "`--python off`, not of the Python walker.")
    if args.note:
        L.append(f"- note: {args.note}")
    L.append(f"- load average (1 min) at the start / end: {args.load[0]:.2f} / "
             f"{os.getloadavg()[0]:.2f} (other work on the machine adds noise)")
    L.append("")
    return L


def leftovers():
    ours = {str(p.pid) for p in bench.STARTED}
    found = []
    for argv in (["bpftool", "link", "list"], ["bpftool", "perf", "list"]):
        out = run_cmd(argv, check=False).stdout
        for pid in re.findall(r"\((\d+)\)|^pid (\d+)\s", out, re.M):
            pid = pid[0] or pid[1]
            if pid in ours:
                found.append(f"{argv[1]} held by pid {pid}")
    found += [f"process still running: {p.name} ({p.pid})" for p in bench.STARTED if p.alive()]
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--pythons", default=DEFAULT_PYTHONS,
                    help="comma-separated interpreters, each benchmarked in turn")
    ap.add_argument("--depths", default="10,50,200")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=3000)
    ap.add_argument("--settle", type=float, default=0.1,
                    help="untimed launches go on until this many seconds after the first")
    ap.add_argument("--libcuda", default=None,
                    help="libcuda.so.1 the workload loads first (the toolkit's stub)")
    ap.add_argument("--no-bpftrace", dest="bpftrace", action="store_false")
    ap.add_argument("--timeout", type=float, default=120.0, help="per run, seconds")
    ap.add_argument("--note", default=os.environ.get("BENCH_PY_NOTE"),
                    help="a line for the report's header (default $BENCH_PY_NOTE)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    args.loop = os.path.join(here, "py_launch_loop.py")
    args.depths = [int(x) for x in args.depths.split(",") if x.strip()]
    pythons = [p.strip() for p in args.pythons.split(",") if p.strip()]
    args.conditions = ["baseline", "off", "merge", "depth256"]
    if args.bpftrace:
        args.conditions.append("bpftrace")
    if args.rounds < 1 or args.iters < 1 or not args.depths or min(args.depths) < 3:
        sys.exit("py_bench.py: --rounds and --iters must be >= 1, depths >= 3")
    if os.geteuid() != 0:
        sys.exit("py_bench.py: needs root (BPF, uprobes)")
    tools = ["bpftool"] + (["bpftrace"] if args.bpftrace else [])
    for tool in tools:
        if not shutil.which(tool):
            sys.exit(f"py_bench.py: {tool} not found (--no-bpftrace leaves bpftrace out)")
    for py in pythons:
        if not os.access(py, os.X_OK):
            sys.exit(f"py_bench.py: no interpreter {py}")

    args.ncclprobe_src = os.path.abspath(os.path.join(args.build, "ncclprobe"))
    # The revision of the checkout BUILD is in (not necessarily this script's).
    src_dir = os.path.dirname(os.path.dirname(args.ncclprobe_src))
    args.revision = bench.source_revision(src_dir)
    if args.revision == "unknown revision":
        args.revision = f"{src_dir}, not a git checkout"
    snapdir = tempfile.mkdtemp(prefix="ncclprobe-pybench-bin-")
    args.ncclprobe = shutil.copy2(args.ncclprobe_src, os.path.join(snapdir, "ncclprobe"))

    def on_signal(sig, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    sections, failed = [], False
    t0 = time.monotonic()
    args.load = os.getloadavg()
    try:
        for py in pythons:
            version = run_cmd([py, "-c", "import platform; print(platform.python_version())"]
                              ).stdout.strip()
            log(f"CPython {version} ({py}): {args.rounds} rounds x {len(args.depths)} depths x "
                f"{len(args.conditions)} conditions")
            runs = bench_python(args, py)
            st = analyse(args, runs)
            sections.append(report_python(args, py, version, runs, st))
    except KeyboardInterrupt:
        log("interrupted")
        failed = True
    except RuntimeError as e:
        log(f"py_bench.py: error: {e}")
        failed = True
    finally:
        for p in bench.STARTED:
            if p.alive():
                p.stop(signal.SIGINT if p.name == "ncclprobe" else signal.SIGTERM, 30)
    clean = leftovers()
    try:
        lines = report_head(args)
    finally:
        shutil.rmtree(snapdir, ignore_errors=True)
    for s in sections:
        lines += s
    lines.append(f"Benchmark wall time: {time.monotonic() - t0:.0f} s.")
    lines.append("")
    lines.append("Clean-up: nothing left behind (no BPF links or perf events held by our "
                 "processes, no process still running)." if not clean else
                 "Clean-up: LEFT BEHIND: " + "; ".join(clean))
    lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out and sections:
        with open(args.out, "w") as f:
            f.write(text)
    if failed or clean:
        sys.exit(1)


if __name__ == "__main__":
    main()
