#!/usr/bin/env python3
"""http_launcher: a workload driven over stdin, for the daemon's HTTP tests (tests/test_http.py).

Loads libcudart.so.13 with ctypes ($CUDART_PATH, default the toolkit's) and, for each line
`launch N` on stdin, calls cudaLaunchKernel N times along <module> -> serve -> burst -> launch_one,
then prints `launched N FIRST_NS LAST_NS`: CLOCK_MONOTONIC (the clock of BPF's event times) just
before the first call and just after the last. Prints `ready PID` first; `quit` (or EOF) ends it.
Without a GPU each call returns an error, which is ignored.
"""

import ctypes
import os
import sys
import time

CUDART_PATH = os.environ.get("CUDART_PATH") or "/usr/local/cuda/lib64/libcudart.so.13"


class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


cudart = ctypes.CDLL(CUDART_PATH)
cudart.cudaLaunchKernel.argtypes = [ctypes.c_void_p, dim3, dim3, ctypes.POINTER(ctypes.c_void_p),
                                    ctypes.c_size_t, ctypes.c_void_p]
cudart.cudaLaunchKernel.restype = ctypes.c_int


def launch_one():
    cudart.cudaLaunchKernel(ctypes.c_void_p(0x1234), dim3(4, 1, 1), dim3(128, 1, 1), None, 0, None)


def burst(n):
    first = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    for _ in range(n):
        launch_one()
    return first, time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def serve():
    print(f"ready {os.getpid()}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["launch"]:
            n = int(words[1])
            first, last = burst(n)
            print(f"launched {n} {first} {last}", flush=True)
        elif words[:1] == ["quit"]:
            break


serve()
