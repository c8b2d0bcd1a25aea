#!/usr/bin/env python3
"""py_threads_flat: N Python threads launching flat out, for bench/reader.sh.

    py_threads_flat.py SECONDS [--threads N] [--depth D] [--cudart PATH] [--pause] [--new-stacks]

Each threading.Thread recurses D plain Python calls deep, then calls libcudart's
cudaLaunchKernel through ctypes back to back (func=0x1234, grid (1,1,1), block (32,1,1)):
without a GPU every call fails at once, and the uprobe on it still fires. Records are
Python-sized: ~D+5 Python frames and a few KiB of copied native stack each.

--new-stacks: every launch recurses anew, and at each of the first 16 levels takes one of two
call lines by a bit of the launch's number - 65536 different stacks, about a new one per
launch (a tracer's stack cache does not help: what a burst of cold stacks costs it).

Prints "ready PID" and waits for SIGUSR1 (a tracer attaches with --pid first), runs for
SECONDS, then prints "launches N seconds S" (N: launches made by all threads, S: how long
they ran). --pause: then waits for another SIGUSR1 before exiting, so that a harness can read
the tracer's CPU time once it has drained everything. Standard library only.
"""
import argparse
import ctypes
import os
import signal
import sys
import threading
import time


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("seconds", type=float)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--cudart", default="/usr/local/cuda/lib64/libcudart.so.13")
    ap.add_argument("--pause", action="store_true")
    ap.add_argument("--new-stacks", action="store_true")
    args = ap.parse_args()

    lib = ctypes.CDLL(args.cudart)
    f = lib.cudaLaunchKernel
    f.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    g, b = Dim3(1, 1, 1), Dim3(32, 1, 1)
    stop = threading.Event()
    counts = [0] * args.threads

    def branchy(d, k):
        if d == 0:
            return f(0x1234, g, b, None, 0, None)
        if (k >> (d % 16)) & 1:
            return branchy(d - 1, k)
        return branchy(d - 1, k)  # another line: another stack

    def new_stacks(i):
        n = 0
        while not stop.is_set():
            for _ in range(100):
                branchy(args.depth, n * args.threads + i)
                n += 1
        counts[i] = n

    def level(d, i):
        if args.new_stacks:
            return new_stacks(i)
        if d > 0:
            return level(d - 1, i)
        n = 0
        while not stop.is_set():
            for _ in range(100):
                f(0x1234, g, b, None, 0, None)
            n += 100
        counts[i] = n

    threads = [threading.Thread(target=level, args=(args.depth, i)) for i in range(args.threads)]
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    print(f"ready {os.getpid()}", flush=True)
    signal.sigwait([signal.SIGUSR1])
    t0 = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(args.seconds)
    stop.set()
    for t in threads:
        t.join()
    print(f"launches {sum(counts)} seconds {time.monotonic() - t0:.3f}", flush=True)
    if args.pause:
        signal.sigwait([signal.SIGUSR1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
