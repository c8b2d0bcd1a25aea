#!/usr/bin/python3
"""What probing CPython's code-object deallocator costs a program that makes and frees code
objects in a loop (bench/py_code_churn.py: exec of a small function, two code objects freed
per iteration), with `ncclprobe record --pid` of this build against another build (--previous)
and no tracer, in interleaved rounds.

    code_free.py --build BUILD --previous PATH [--python PY] [--rounds N] [--iters N]

Two workloads: "unlaunched" (the code never launches: its frees find nothing in
py_stack_codes) and "launched" (each generated function launches once before it is freed:
every free is of a launch stack's code object, so every launch after it is a new stack).
Reports ns per iteration (median over rounds) and the added ns against no tracer."""
import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run_one(args, tracer, launch, tmp):
    cmd = [args.python, os.path.join(HERE, "py_code_churn.py"), "--iters", str(args.iters)]
    if launch:
        cmd.append("--launch")
    w = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert w.stdout.readline().startswith("ready")
    t = None
    if tracer:
        out = tempfile.mkdtemp(dir=tmp)
        t = subprocess.Popen([tracer, "record", "--pid", str(w.pid), "-o", out, "--format",
                              "none", "--cupti-socket", os.path.join(out, "s.sock")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        line = ""
        while "recording process" not in line and time.monotonic() < deadline:
            line = t.stderr.readline()
        time.sleep(0.3)
    os.kill(w.pid, signal.SIGUSR1)
    out_text = w.communicate(timeout=300)[0]
    if t:
        t.send_signal(signal.SIGINT)
        t.communicate(timeout=120)
    return float(re.search(r"ns_per_iter=([\d.]+)", out_text).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default="build")
    ap.add_argument("--previous", required=True)
    ap.add_argument("--python", default="/root/.pyenv/versions/3.12.1/bin/python3.12")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20000)
    args = ap.parse_args()
    tracers = {"none": None, "this": os.path.join(args.build, "ncclprobe"),
               "previous": args.previous}
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for launch in (False, True):
                names = list(tracers)
                names = names[r % 3:] + names[:r % 3]
                for name in names:
                    ns = run_one(args, tracers[name], launch, tmp)
                    res.setdefault((launch, name), []).append(ns)
                    print(f"round {r + 1} {'launched' if launch else 'unlaunched'} {name}: "
                          f"{ns:.0f} ns/iter", file=sys.stderr, flush=True)
    med = {k: sorted(v)[len(v) // 2] for k, v in res.items()}
    print(f"| workload | no tracer ns/iter | previous: added | this: added | this / previous "
          f"(added) |\n|---|---:|---:|---:|---:|")
    for launch in (False, True):
        base = med[(launch, "none")]
        prev, this = med[(launch, "previous")] - base, med[(launch, "this")] - base
        print(f"| {'launched' if launch else 'unlaunched'} | {base:.0f} | {prev:.0f} | "
              f"{this:.0f} | {this / prev if prev > 0 else float('nan'):.2f}x |")


if __name__ == "__main__":
    main()
