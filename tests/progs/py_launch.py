#!/usr/bin/env python3
"""py_launch: Python workload for ncclprobe's Python-stack tests.

Loads libcudart.so.13 with ctypes ($CUDART_PATH, default the toolkit's) and calls
cudaLaunchKernel along a fixed chain of named Python functions:

    <module> -> Model.forward -> inner -> wrapper (@traced) -> launch_one -> cudaLaunchKernel
    worker   -> Model.forward -> ...                              (with --threads N)

Every launch: func=0x1234, grid (4,1,1), block (128,1,1), args=NULL, sharedMem=0, stream=NULL.
Without a GPU each call returns an error, which is ignored. Prints, per thread, after it is done:
    thread tid=<native id> launches=<n>
then, with --linger-ms N, stays N ms before exiting (its code objects stay readable meanwhile).
Runs on CPython 3.10-3.13.
"""

import argparse
import ctypes
import os
import signal
import sys
import threading

CUDART_PATH = os.environ.get("CUDART_PATH") or "/usr/local/cuda/lib64/libcudart.so.13"


class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


cudart = ctypes.CDLL(CUDART_PATH)
cudart.cudaLaunchKernel.argtypes = [
    ctypes.c_void_p,
    dim3,
    dim3,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.c_size_t,
    ctypes.c_void_p,
]
cudart.cudaLaunchKernel.restype = ctypes.c_int


def traced(fn):
    """Decorator: adds a `wrapper` frame between the caller and `fn`."""

    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


@traced
def launch_one():
    return cudart.cudaLaunchKernel(ctypes.c_void_p(0x1234), dim3(4, 1, 1), dim3(128, 1, 1), None, 0, None)


class Model:
    def forward(self, iters):
        def inner():
            launch_one()

        for _ in range(iters):
            inner()
        return iters


def worker(model, iters, gate, results):
    gate.wait()
    launches = model.forward(iters)
    results.append((threading.get_native_id(), launches))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=10, help="launches per thread (default 10)")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="0 (default): launch on the main thread from module level; N: N worker threads",
    )
    parser.add_argument(
        "--wait-signal",
        action="store_true",
        help='print "ready <pid>", then wait for SIGUSR1 before launching',
    )
    parser.add_argument("--linger-ms", type=int, default=0,
                        help="after printing, wait this long before exiting (default 0)")
    args = parser.parse_args()
    if args.iters < 0 or args.threads < 0 or args.linger_ms < 0:
        parser.error("--iters, --threads and --linger-ms must be >= 0")
    return args


ARGS = parse_args() if __name__ == "__main__" else None

if ARGS is not None:
    MODEL = Model()
    if ARGS.wait_signal:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    GATE = threading.Barrier(ARGS.threads + 1) if ARGS.threads > 0 else None
    RESULTS = []
    THREADS = [
        threading.Thread(target=worker, args=(MODEL, ARGS.iters, GATE, RESULTS), name=f"worker-{i}")
        for i in range(ARGS.threads)
    ]
    for t in THREADS:
        t.start()
    if ARGS.wait_signal:
        print(f"ready {os.getpid()}", flush=True)
        signal.sigwait({signal.SIGUSR1})

    if THREADS:
        GATE.wait()
        for t in THREADS:
            t.join()
    else:
        RESULTS.append((threading.get_native_id(), MODEL.forward(ARGS.iters)))

    for tid, launches in RESULTS:
        print(f"thread tid={tid} launches={launches}")
    sys.stdout.flush()
    if ARGS.linger_ms:
        threading.Event().wait(ARGS.linger_ms / 1000)
