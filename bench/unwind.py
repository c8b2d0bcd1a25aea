#!/usr/bin/env python3
"""Unwinding benchmarks (issue 3), run by bench/unwind.sh:

1. Per-launch added latency of a tight cudaLaunchKernel loop (launch_loop,
   15 frames deep): no tracer, ncclprobe --unwind fp, ncclprobe DWARF
   (--unwind auto) at several --stack-bytes, and perf record on the same
   uprobe with --call-graph dwarf (perf's default 8 KiB copy) and -g (frame
   pointers). Interleaved rounds, medians, ratios within the run.
2. User-space unwinding + symbolization throughput, one core, warm caches:
   records captured with --raw-dump replayed by unwind_bench against the
   live target, for a C chain and for CPython 3.12 running a 10-module deep
   call chain.
Writes bench/results-unwind.md and prints it."""

import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import privmount
from pathlib import Path

BENCH = Path(__file__).resolve().parent
BUILD = Path(sys.argv[1] if len(sys.argv) > 1 else "build").resolve()
NCCLPROBE = BUILD / "ncclprobe"
LOOP = BUILD / "bench" / "launch_loop"
REPLAY = BUILD / "unwind_bench"
CUDART = Path("/usr/local/cuda/lib64/libcudart.so.13")
ROUNDS = int(os.environ.get("ROUNDS", "5"))
ITERS = int(os.environ.get("ITERS", "100000"))
PY312 = Path("/root/.pyenv/versions/3.12.1/bin/python3.12")


def start_loop(extra=()):
    p = subprocess.Popen([LOOP, "--wait-signal", "--depth", "10", "--iters", str(ITERS),
                          "--warmup", "2000", *extra], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("ready"), line
    return p


def finish_loop(p):
    out = p.stdout.read()
    p.wait()
    m = re.search(r"ns_per_launch=([\d.]+)", out)
    return float(m.group(1))


def wait_stderr(proc, pattern, timeout=30):
    deadline = time.time() + timeout
    seen = ""
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
        if re.search(pattern, line):
            return
    raise RuntimeError(f"tracer did not attach: {seen}")


def with_ncclprobe(args):
    def run():
        loop = start_loop()
        with tempfile.TemporaryDirectory() as d:
            tr = subprocess.Popen([NCCLPROBE, "record", "-o", f"{d}/rec", "--pid", str(loop.pid),
                                   *args], stderr=subprocess.PIPE, text=True)
            wait_stderr(tr, "recording process")
            loop.send_signal(signal.SIGUSR1)
            ns = finish_loop(loop)
            tr.send_signal(signal.SIGINT)
            tr.communicate(timeout=60)
        return ns
    return run


def with_perf(callgraph):
    def run():
        loop = start_loop()
        with tempfile.TemporaryDirectory() as d:
            tr = subprocess.Popen(["perf", "record", "-q", "-o", f"{d}/perf.data", "-e",
                                   "probe_libcudart:cudaLaunchKernel", *callgraph, "-p",
                                   str(loop.pid)], stderr=subprocess.PIPE, text=True)
            time.sleep(1.0)
            loop.send_signal(signal.SIGUSR1)
            ns = finish_loop(loop)
            tr.send_signal(signal.SIGINT)
            tr.communicate(timeout=120)
        return ns
    return run


def baseline():
    loop = start_loop()
    loop.send_signal(signal.SIGUSR1)
    return finish_loop(loop)


def perf_setup():
    privmount.mount_tracefs()  # in our own mount namespace (main)
    subprocess.run(["perf", "probe", "-q", "-d", "probe_libcudart:*"], capture_output=True)
    r = subprocess.run(["perf", "probe", "-q", "-x", str(CUDART), "cudaLaunchKernel"],
                       capture_output=True, text=True)
    return r.returncode == 0


def perf_cleanup():
    subprocess.run(["perf", "probe", "-q", "-d", "probe_libcudart:*"], capture_output=True)


def latency_table():
    configs = [("no tracer", baseline),
               ("ncclprobe --unwind fp", with_ncclprobe(["--unwind", "fp"]))]
    for size in (4096, 8192, 16384, 32768, 65536):
        configs.append((f"ncclprobe DWARF --stack-bytes {size}",
                        with_ncclprobe(["--stack-bytes", str(size)])))
    have_perf = perf_setup()
    if have_perf:
        configs += [("perf record --call-graph dwarf (8192)", with_perf(["--call-graph",
                                                                          "dwarf"])),
                    ("perf record -g (frame pointers)", with_perf(["-g"]))]
    results = {name: [] for name, _ in configs}
    try:
        for r in range(ROUNDS):
            for name, fn in configs:
                results[name].append(fn())
                print(f"round {r + 1} {name}: {results[name][-1]:.0f} ns", flush=True)
    finally:
        if have_perf:
            perf_cleanup()
    med = {k: statistics.median(v) for k, v in results.items()}
    base = med["no tracer"]
    fp_added = med["ncclprobe --unwind fp"] - base
    rows = ["| configuration | ns/launch (median) | added ns | added vs ncclprobe fp |",
            "|---|---:|---:|---:|"]
    for name, _ in configs:
        added = med[name] - base
        rows.append(f"| {name} | {med[name]:.0f} | {added:.0f} | "
                    f"{added / fp_added:.2f}x |" if name != "no tracer"
                    else f"| {name} | {med[name]:.0f} | - | - |")
    return "\n".join(rows), med


def replay(label, argv, mode_args):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("ready"), line
    with tempfile.TemporaryDirectory() as d:
        dump = f"{d}/raw"
        tr = subprocess.Popen([NCCLPROBE, "record", "-o", f"{d}/rec", "--pid", str(p.pid),
                               "--raw-dump", dump, *mode_args], stderr=subprocess.PIPE,
                              text=True)
        wait_stderr(tr, "recording process")
        p.send_signal(signal.SIGUSR1)
        time.sleep(2.0)
        tr.send_signal(signal.SIGINT)
        tr.communicate(timeout=60)
        out = subprocess.run([REPLAY, dump, str(p.pid), "2"], capture_output=True,
                             text=True).stdout.strip()
    p.kill()
    p.wait()
    return f"| {label} | {' '.join(mode_args) or 'auto'} | {out} |"


PY_CHAIN = r'''
import ctypes, os, signal, sys, time
class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]
cudart = ctypes.CDLL(sys.argv[1])
class Module:
    def __init__(self, depth): self.child = Module(depth - 1) if depth else None
    def __call__(self, x): return self._call_impl(x)
    def _call_impl(self, x): return self.forward(x)
    def forward(self, x):
        if self.child: return self.child(x)
        return cudart.cudaLaunchKernel(ctypes.c_void_p(0x1234), dim3(1, 1, 1), dim3(1, 1, 1),
                                       None, ctypes.c_size_t(0), None)
model = Module(10)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
print("ready", os.getpid(), flush=True)
signal.sigwait({signal.SIGUSR1})
for _ in range(500): model(0)
time.sleep(60)
'''


def main():
    privmount.enter()
    table, _ = latency_table()
    rows = ["| workload | mode | replay result |", "|---|---|---|"]
    loop_argv = [LOOP, "--wait-signal", "--depth", "10", "--iters", "1000000", "--warmup", "10",
                 "--rate", "1000"]
    for mode in ([], ["--unwind", "fp"]):
        rows.append(replay("launch_loop (C, 15 frames)", loop_argv, mode))
    if PY312.exists():
        py_argv = [PY312, "-c", PY_CHAIN, str(CUDART)]
        for mode in ([], ["--unwind", "fp"]):
            rows.append(replay("CPython 3.12, 10 nested modules", py_argv, mode))
    text = ("# Unwinding benchmarks\n\n"
            f"machine: {os.cpu_count()} CPUs, {os.uname().release}; {ROUNDS} interleaved "
            f"rounds of {ITERS} launches, median of per-batch means\n\n"
            "## Per-launch added latency\n\n" + table +
            "\n\n## Unwinding + symbolization throughput (one core, warm caches)\n\n" +
            "\n".join(rows) + "\n")
    (BENCH / "results-unwind.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
