#!/usr/bin/env python3
"""py_code_reuse: code made and freed at run time, as exec/eval-generated code is (FX graph
modules recompiled, templates, code generators).

Generation by generation, compiles a function gen_<i> with exec, launches through it
(cudaLaunchKernel via ctypes, as py_launch.py loads it), then drops it and collects: its code object
is freed, and CPython's allocator tends to give the next generation's code object the same
address, in the same stack shape (<module> -> gen_<i> -> launch). With --wait-signal it
prints "ready PID" and waits for SIGUSR1 first. Prints one JSON line a generation:
    {"name": "gen_<i>", "code": <address of its code object>, "launches": <n>}
Runs on CPython 3.10-3.13.
"""

import argparse
import ctypes
import gc
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from py_launch import cudart, dim3  # noqa: E402  (libcudart through ctypes, $CUDART_PATH)


def launch():
    cudart.cudaLaunchKernel(ctypes.c_void_p(0x1234), dim3(4, 1, 1), dim3(128, 1, 1), None, 0, None)


def one_generation(i, seconds):
    namespace = {"launch": launch}
    source = f"def gen_{i}(n):\n    for _ in range(n):\n        launch()\n"
    exec(compile(source, "<generated>", "exec"), namespace)
    fn = namespace[f"gen_{i}"]
    code, n = id(fn.__code__), 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        fn(20)
        n += 20
        time.sleep(0.005)
    print(json.dumps({"name": f"gen_{i}", "code": code, "launches": n}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--generations", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=0.3, help="of launches, per generation")
    ap.add_argument("--wait-signal", action="store_true")
    args = ap.parse_args()
    if args.wait_signal:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        print(f"ready {os.getpid()}", flush=True)
        signal.sigwait({signal.SIGUSR1})
    for i in range(args.generations):
        one_generation(i, args.seconds)
        gc.collect()  # the generation's function and code object are freed


if __name__ == "__main__":
    main()
