#!/usr/bin/env python3
"""Workload for bench/code_free.py: code objects made and freed in a loop, as exec/eval-heavy
programs do. Prints "ready PID", waits for SIGUSR1, then runs --iters iterations of: compile a
function with exec, (with --launch) call it once to launch through cudaLaunchKernel, drop it
(its module code and function code are freed). Prints ns_per_iter=N over the timed iterations
(after --warmup)."""
import argparse
import ctypes
import os
import signal
import time

ap = argparse.ArgumentParser()
ap.add_argument("--iters", type=int, default=20000)
ap.add_argument("--warmup", type=int, default=2000)
ap.add_argument("--launch", action="store_true")
ap.add_argument("--cudart", default=os.environ.get("CUDART_PATH")
                or "/usr/local/cuda/lib64/libcudart.so.13")
args = ap.parse_args()


class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


cudart = ctypes.CDLL(args.cudart)
cudart.cudaLaunchKernel.argtypes = [ctypes.c_void_p, dim3, dim3, ctypes.POINTER(ctypes.c_void_p),
                                    ctypes.c_size_t, ctypes.c_void_p]


def launch():
    cudart.cudaLaunchKernel(ctypes.c_void_p(0x1234), dim3(4, 1, 1), dim3(128, 1, 1), None, 0, None)


SOURCES = [f"def gen_{i}():\n    launch()\n" for i in range(16)]


def iterate(n):
    for i in range(n):
        ns = {"launch": launch}
        exec(compile(SOURCES[i % 16], "<generated>", "exec"), ns)
        if args.launch:
            ns[f"gen_{i % 16}"]()


signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
print(f"ready {os.getpid()}", flush=True)
signal.sigwait({signal.SIGUSR1})
iterate(args.warmup)
t0 = time.perf_counter_ns()
iterate(args.iters)
print(f"ns_per_iter={(time.perf_counter_ns() - t0) / args.iters:.1f}", flush=True)
