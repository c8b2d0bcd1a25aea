#!/usr/bin/env python3
"""inject.py - the live path's costs (issue 18), from one run: `ncclprobe record --pid P --cupti`
loading libncclprobe_cupti.so into a process that runs flat out.

For each of --runs fresh target processes (cupti_app --scenario live: real launches through
libcudart, its CUPTI side played by the CUPTI TEST DOUBLE libcupti_replay.so - no GPU here):

- the hijacked thread's pause (summary.json targets[].cupti.pause_ms) and the whole injection
  (injection_ms);
- the time from ncclprobe's start to the first launch written with GPU records (attach, BPF
  load, injection, the library's start, its first flush);
- the target's throughput (launches/s, from its own --expect lines) before ncclprobe, during
  the first second of the recording, while recorded, and after the recording ended (the
  library quiet, CUPTI still on);

then one more recording of the same process: a wake (the library is already there).

    bench/inject.py [--build build] [--runs 7] [--out bench/results-inject.md]"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def launches(expect):
    try:
        with open(expect, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def rate(expect, seconds):
    a = launches(expect)
    time.sleep(seconds)
    return (launches(expect) - a) / seconds


def start_app(build, expect):
    app = subprocess.Popen([str(build / "progs" / "cupti_app"), "--scenario", "live", "--expect",
                            str(expect), "--threads", "2", "--sleep-us", "200"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = app.stdout.readline()
    if not line.startswith("ready "):
        app.kill()
        raise RuntimeError(line + app.stderr.read())
    return app


def record(build, pid, out, seconds):
    t0_mono, t0_real = time.clock_gettime(time.CLOCK_MONOTONIC), time.time()
    p = subprocess.Popen([str(build / "ncclprobe"), "record", "--pid", str(pid), "--cupti", "-o",
                          str(out), "--cupti-socket", str(out) + ".sock", "--duration",
                          str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    return p, t0_mono


def first_matched_ms(out, t0_mono):
    first = None
    with open(out / "launches.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r.get("gpu_status") == "matched":
                first = r["ts_ns"] if first is None else min(first, r["ts_ns"])
    return (first / 1e9 - t0_mono) * 1e3 if first else None


def one_run(build, work, i):
    expect = work / f"expect{i}.jsonl"
    app = start_app(build, expect)
    try:
        time.sleep(1)
        before = rate(expect, 2)
        out = work / f"rec{i}"
        p, t0 = record(build, app.pid, out, 5)
        during = rate(expect, 1)
        recorded = rate(expect, 2)
        _, err = p.communicate(timeout=120)
        if p.returncode != 0:
            raise RuntimeError(err)
        quiet = rate(expect, 2)
        cupti = json.loads((out / "summary.json").read_text())["targets"][0]["cupti"]
        woke = None
        if i == 0:  # a second recording of the same process: a wake
            p2, _ = record(build, app.pid, work / "wake", 2)
            p2.communicate(timeout=120)
            woke = json.loads((work / "wake" / "summary.json").read_text())["targets"][0]["cupti"]
        return {"pause_ms": cupti["pause_ms"], "injection_ms": cupti["injection_ms"],
                "origin": cupti["origin"], "first_gpu_ms": first_matched_ms(out, t0),
                "before": before, "during": during, "recorded": recorded, "quiet": quiet,
                "wake": woke}
    finally:
        if app.poll() is None:
            app.send_signal(signal.SIGTERM)
        app.communicate(timeout=60)


def stats(values):
    v = sorted(x for x in values if x is not None)
    if not v:
        return "-"
    return (f"{statistics.median(v):.2f} / {v[min(len(v) - 1, int(len(v) * 0.9))]:.2f} / "
            f"{v[-1]:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--out", default=str(HERE / "results-inject.md"))
    args = ap.parse_args()
    build = Path(args.build).resolve()
    work = Path(tempfile.mkdtemp(prefix="ncclprobe-bench-inject-"))
    runs = []
    for i in range(args.runs):
        runs.append(one_run(build, work, i))
        print(f"run {i + 1}/{args.runs}: {runs[-1]}", file=sys.stderr)
    r = runs
    ratio = [x["during"] / x["before"] for x in r if x["before"]]
    ratio_rec = [x["recorded"] / x["before"] for x in r if x["before"]]
    ratio_quiet = [x["quiet"] / x["before"] for x in r if x["before"]]
    wake = r[0]["wake"]
    lines = [
        "# The live path: the CUPTI library loaded into a running process",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}",
        f"- machine: {os.cpu_count()} CPUs, kernel {os.uname().release}; no GPU (the CUPTI "
        "side is the test double libcupti_replay.so)",
        f"- target: cupti_app --scenario live, 2 threads launching (200 us apart), "
        f"{args.runs} fresh processes, one `ncclprobe record --pid P --cupti --duration 5` each",
        "",
        "Milliseconds, median / p90 / max:",
        "",
        "| what | value |",
        "|---|---|",
        f"| hijacked thread's pause (stop + stub, dlopen included) | {stats(x['pause_ms'] for x in r)} |",
        f"| the whole injection (finding the thread, handshake, dlopen, attach) | {stats(x['injection_ms'] for x in r)} |",
        f"| ncclprobe start to the first launch with GPU records | {stats(x['first_gpu_ms'] for x in r)} |",
        f"| a wake (the library already there): pause / whole | "
        f"{wake['pause_ms']:.2f} / {wake['injection_ms']:.2f} ({wake['origin']}) |" if wake else
        "| a wake | - |",
        "",
        "The target's throughput (its launches/s), as a ratio to before ncclprobe, median / p90 / max:",
        "",
        "| phase | ratio |",
        "|---|---|",
        f"| the recording's first second (BPF load, attach, injection) | {stats(ratio)} |",
        f"| recorded, the library on | {stats(ratio_rec)} |",
        f"| after the recording (the library quiet, CUPTI on) | {stats(ratio_quiet)} |",
        "",
        "Per run (launches/s before, first second, recorded, after):",
        "",
    ]
    for i, x in enumerate(r):
        lines.append(f"- run {i + 1}: {x['before']:.0f}, {x['during']:.0f}, {x['recorded']:.0f}, "
                     f"{x['quiet']:.0f}; pause {x['pause_ms']:.2f} ms, injection "
                     f"{x['injection_ms']:.1f} ms, first GPU record "
                     f"{x['first_gpu_ms'] or float('nan'):.0f} ms")
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
