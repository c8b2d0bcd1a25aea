#!/usr/bin/env python3
"""py_launch_loop: Python workload for bench/python.sh (per-launch latency with Python frames).

    py_launch_loop.py [--depth D] [--iters N] [--warmup N] [--settle SEC] [--batch B]
                      [--cudart PATH] [--libcuda PATH] [--thread] [--wait-signal] [--pause]

Loads libcudart.so.13 with ctypes, recurses (plain Python function calls) until D Python
frames are on the stack, and there calls cudaLaunchKernel back to back:

    <module> -> main -> level (x D-3) -> run_loop -> cudaLaunchKernel   (D Python frames)

--thread: a threading.Thread launches instead of the main thread (which waits for it):

    Thread._bootstrap -> _bootstrap_inner -> run -> level (x D-4) -> run_loop -> ...

Every launch: func=0x1234, grid (1,1,1), block (32,1,1), args=NULL, sharedMem=0, stream=NULL.
Without a GPU each call returns an error at once (ignored); the uprobe on it still fires.

--warmup launches run first, untimed (the first call initialises the runtime), then more
untimed launches until --settle seconds have passed since the first. Then --iters
launches are timed with time.perf_counter_ns in batches of --batch. Prints one line:

    ns_per_launch=<mean over all timed launches> batch_median_ns=<median of per-batch means>
    launches=<timed launches> warmup=<untimed launches> depth=<D> elapsed_s=<timed part>
    python=<x.y.z>

--wait-signal prints "ready PID" and waits for SIGUSR1 before the warm-up, so a tracer can
attach with --pid first. --pause: after the warm-up print "warm" and wait for a SIGUSR1,
and after the result line wait for another before exiting, so that a harness can read the
tracer's counters exactly around the timed launches. Standard library only; CPython 3.8+.
"""

import argparse
import ctypes
import os
import signal
import statistics
import sys
import time

FIXED_FRAMES = 3  # <module>, main, run_loop
THREAD_FIXED_FRAMES = 4  # Thread._bootstrap, _bootstrap_inner, run, run_loop


class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def wait_go(msg):
    """--pause: SIGUSR1 is blocked in every thread; print msg, wait for the next one."""
    print(msg, flush=True)
    signal.sigwait({signal.SIGUSR1})


def run_loop(launch, warmup, settle_s, iters, batch, pause=False):
    fn, grid, block = ctypes.c_void_p(0x1234), dim3(1, 1, 1), dim3(32, 1, 1)
    clock = time.perf_counter_ns
    t_warm = clock()
    for _ in range(warmup):
        launch(fn, grid, block, None, 0, None)
    # Then untimed launches until settle_s have passed since the first one, so that a
    # tracer's start-up work (symbolization of the first stacks) is over before timing.
    settle_end = t_warm + int(settle_s * 1e9)
    while clock() < settle_end:
        for _ in range(100):
            launch(fn, grid, block, None, 0, None)
        warmup += 100
    if pause:
        wait_go("warm")
    batches = []
    left = iters
    t_start = clock()
    while left > 0:
        n = min(batch, left)
        t0 = clock()
        for _ in range(n):
            launch(fn, grid, block, None, 0, None)
        batches.append((clock() - t0) / n)
        left -= n
    total = clock() - t_start
    return total, batches, warmup


def level(remaining, launch, warmup, settle_s, iters, batch, pause=False):
    """`remaining` frames of level, then run_loop."""
    if remaining > 1:
        return level(remaining - 1, launch, warmup, settle_s, iters, batch, pause)
    return run_loop(launch, warmup, settle_s, iters, batch, pause)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=10,
                    help=f"Python frames on the stack at each launch (>= {FIXED_FRAMES})")
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=2000)
    ap.add_argument("--settle", type=float, default=0.0, metavar="SEC",
                    help="after --warmup, more untimed launches until SEC seconds have passed "
                         "since the first (in batches of 100; counted in warmup=)")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--cudart", default=os.environ.get("CUDART_PATH")
                    or "/usr/local/cuda/lib64/libcudart.so.13")
    ap.add_argument("--libcuda", default=None,
                    help="load this libcuda.so.1 first (RTLD_GLOBAL), e.g. the toolkit's stub, so "
                         "libcudart's dlopen of libcuda.so.1 finds it and launches fail fast "
                         "even where a driver and GPU exist")
    ap.add_argument("--thread", action="store_true",
                    help="launch from a threading.Thread, not the main thread")
    ap.add_argument("--wait-signal", action="store_true")
    ap.add_argument("--pause", action="store_true",
                    help='print "warm" after the warm-up and wait for SIGUSR1, and wait for '
                         "another after the result line")
    args = ap.parse_args()
    fixed = THREAD_FIXED_FRAMES if args.thread else FIXED_FRAMES
    if args.depth < fixed or args.iters <= 0 or args.warmup < 0 or args.batch <= 0:
        ap.error(f"--depth must be >= {fixed}, --iters and --batch > 0, --warmup >= 0")
    sys.setrecursionlimit(max(sys.getrecursionlimit(), args.depth + 100))

    if args.libcuda:
        ctypes.CDLL(args.libcuda, mode=ctypes.RTLD_GLOBAL)
    cudart = ctypes.CDLL(args.cudart)
    launch = cudart.cudaLaunchKernel
    launch.argtypes = [ctypes.c_void_p, dim3, dim3, ctypes.POINTER(ctypes.c_void_p),
                       ctypes.c_size_t, ctypes.c_void_p]
    launch.restype = ctypes.c_int

    if args.wait_signal or args.pause:
        # Blocked before any thread starts, so every thread inherits the mask.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    if args.wait_signal:
        print(f"ready {os.getpid()}", flush=True)
        signal.sigwait({signal.SIGUSR1})

    levels = args.depth - fixed
    loop_args = (launch, args.warmup, args.settle, args.iters, args.batch, args.pause)
    if args.thread:
        import threading

        class Launcher(threading.Thread):
            """run() keeps the target's result (same frames as Thread.run)."""
            result = None

            def run(self):
                self.result = self._target(*self._args)

        target, targs = (level, (levels,) + loop_args) if levels > 0 else (run_loop, loop_args)
        t = Launcher(target=target, args=targs, name="launcher")
        t.start()
        t.join()
        if t.result is None:
            sys.exit("py_launch_loop: the launching thread failed")
        total, batches, warmup = t.result
    elif levels > 0:
        total, batches, warmup = level(levels, *loop_args)
    else:
        total, batches, warmup = run_loop(*loop_args)
    v = sys.version_info
    print(f"ns_per_launch={total / args.iters:.1f} "
          f"batch_median_ns={statistics.median(batches):.1f} launches={args.iters} "
          f"warmup={warmup} depth={args.depth} elapsed_s={total / 1e9:.4f} "
          f"python={v[0]}.{v[1]}.{v[2]}", flush=True)
    if args.pause:
        wait_go("done")


if __name__ == "__main__":
    main()
