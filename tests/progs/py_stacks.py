#!/usr/bin/env python3
"""py_stacks: Python workload whose launches have known Python stacks, for
ncclprobe's Python-frame tests. Runs on CPython 3.10+.

Every launch goes through a real ctypes call into libcudart's cudaLaunchKernel
($CUDART_PATH, default the toolkit's); without a GPU it returns an error, which
is ignored. The launch line first asks the interpreter for its own view of the
stack (sys._getframe chain: code name, file, current line of every frame), so
the tests compare ncclprobe against CPython itself, not against a copy.

Scenarios (--scenario):
  chain      module level -> Model.forward (class method) -> inner (nested
             function) -> wrapper (decorator) -> step, then two launch paths:
             a generator (gen_launches) and an asyncio task (coro_launches).
             Runs on the main thread and on --threads worker threads at once.
  recursion  recurse(--depth) deep, then launch.
  unicode    a launch from a function with a non-ASCII name (käfer_λ_𠀀).
  lambda     a launch from a lambda.

Output, one JSON object per line on stdout:
  {"tid": T, "kind": K, "frames": [[name, file, line], ...outermost first]}
for the first launch of each (thread, kind), then per thread
  {"tid": T, "launches": N}
With --wait-signal it first prints "ready PID" and waits for SIGUSR1; with
--stay it prints "done" at the end and waits for SIGTERM (a server that goes on).
"""

import argparse
import asyncio
import ctypes
import json
import os
import signal
import sys
import threading

CUDART_PATH = os.environ.get("CUDART_PATH") or "/usr/local/cuda/lib64/libcudart.so.13"


class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


cudart = ctypes.CDLL(CUDART_PATH)
cudart.cudaLaunchKernel.argtypes = [ctypes.c_void_p, dim3, dim3,
                                    ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                                    ctypes.c_void_p]
cudart.cudaLaunchKernel.restype = ctypes.c_int

LOCK = threading.Lock()
SEEN = set()
COUNTS = {}


def code_name(code):
    return getattr(code, "co_qualname", code.co_name)  # 3.10 has no co_qualname


def note(kind, frame):
    """Counts the launch; prints the interpreter's stack the first time per
    (thread, kind). Returns None so `note(...) or launch()` launches."""
    tid = threading.get_native_id()
    with LOCK:
        COUNTS[tid] = COUNTS.get(tid, 0) + 1
        if (tid, kind) in SEEN:
            return None
        SEEN.add((tid, kind))
    frames = []
    while frame is not None:
        frames.append([code_name(frame.f_code), frame.f_code.co_filename, frame.f_lineno])
        frame = frame.f_back
    with LOCK:
        print(json.dumps({"tid": tid, "kind": kind, "frames": frames[::-1]}), flush=True)
    return None


def launch(kind):
    # one line: the interpreter's view and the launch share the line number
    return note(kind, sys._getframe()) or cudart.cudaLaunchKernel(ctypes.c_void_p(0x1234), dim3(4, 1, 1), dim3(128, 1, 1), None, 0, None)


def traced(fn):
    """Decorator: a `wrapper` frame between the caller and fn."""

    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


def gen_launches(n):
    for _ in range(n):
        yield launch("generator")


async def coro_launches(n):
    for _ in range(n):
        launch("asyncio")
        await asyncio.sleep(0)


async def run_task(n):
    await asyncio.get_running_loop().create_task(coro_launches(n))


@traced
def step(n):
    for _ in gen_launches(n):
        pass
    asyncio.run(run_task(n))


class Model:
    def forward(self, n):
        def inner():
            return step(n)

        return inner()


def recurse(depth):
    if depth <= 1:
        return launch("recursion")
    return recurse(depth - 1)


def käfer_λ_𠀀():
    return launch("unicode")


def worker(gate, n):
    gate.wait()
    Model().forward(n)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="chain",
                        choices=["chain", "recursion", "unicode", "lambda"])
    parser.add_argument("--iters", type=int, default=5, help="launches per path (default 5)")
    parser.add_argument("--threads", type=int, default=2, help="worker threads (chain)")
    parser.add_argument("--depth", type=int, default=500, help="recursion depth")
    parser.add_argument("--wait-signal", action="store_true")
    parser.add_argument("--stay", action="store_true",
                        help='after the launches print "done" and wait for SIGTERM, like a server')
    return parser.parse_args()


ARGS = parse_args()
if ARGS.wait_signal:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    print(f"ready {os.getpid()}", flush=True)
    signal.sigwait({signal.SIGUSR1})

if ARGS.scenario == "chain":
    GATE = threading.Barrier(ARGS.threads + 1)
    THREADS = [threading.Thread(target=worker, args=(GATE, ARGS.iters), name=f"worker-{i}")
               for i in range(ARGS.threads)]
    for t in THREADS:
        t.start()
    GATE.wait()
    Model().forward(ARGS.iters)
    for t in THREADS:
        t.join()
elif ARGS.scenario == "recursion":
    sys.setrecursionlimit(ARGS.depth + 100)
    for _ in range(ARGS.iters):
        recurse(ARGS.depth)
elif ARGS.scenario == "unicode":
    for _ in range(ARGS.iters):
        käfer_λ_𠀀()
else:
    LAUNCH = lambda: launch("lambda")  # noqa: E731
    for _ in range(ARGS.iters):
        LAUNCH()

for tid, n in sorted(COUNTS.items()):
    print(json.dumps({"tid": tid, "launches": n}), flush=True)
if ARGS.stay:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    print("done", flush=True)
    signal.sigwait({signal.SIGTERM})
