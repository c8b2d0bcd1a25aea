#!/usr/bin/env python3
"""py_cupti: a Python program whose launches get GPU kernels and times, without a GPU.

Like the CUDA driver would, it loads libncclprobe_cupti.so (argv[1]) and calls its
InitializeInjection, with CUPTI answered by the TEST DOUBLE libcupti_replay.so (argv[2]) and the
driver by the TEST DOUBLE libfakecuda.so beside it (the library asks the driver's version before
it calls CUPTI).
Then, along a fixed chain of Python functions,

    <module> -> train -> step -> matmul | softmax -> launch -> cudaLaunchKernel (real libcudart)

each launch is followed, on the same thread, by what the driver and GPU would report: the
launch callback (a fresh correlation id) and one kernel record "<op>_kernel" whose duration is
1000 ns for matmul, 300 ns for softmax. Prints "ready <pid>" and waits for SIGUSR1 first when
given --wait-signal; at the end prints "launches matmul=<n> softmax=<n>".
"""

import ctypes
import os
import signal
import sys

CUDART_PATH = os.environ.get("CUDART_PATH") or "/usr/local/cuda/lib64/libcudart.so.13"
RUNTIME_API = 2  # CUPTI_CB_DOMAIN_RUNTIME_API
CBID_LAUNCH = 211  # cudaLaunchKernel_v7000
DURATION_NS = {"matmul": 1000, "softmax": 300}


class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


injection, replay_path = sys.argv[1], sys.argv[2]
os.environ.setdefault("NCCLPROBE_CUPTI_LIBRARY", replay_path)
ctypes.CDLL(os.path.join(os.path.dirname(replay_path), "libfakecuda.so"), mode=ctypes.RTLD_GLOBAL)
replay = ctypes.CDLL(replay_path, mode=ctypes.RTLD_GLOBAL)
replay.cupti_replay_api.argtypes = [ctypes.c_int, ctypes.c_uint32, ctypes.c_char_p,
                                    ctypes.c_char_p]
replay.cupti_replay_api.restype = ctypes.c_uint32
replay.cupti_replay_kernel.argtypes = [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint64,
                                       ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32,
                                       ctypes.c_uint32, ctypes.c_uint64]
replay.cupti_replay_now.restype = ctypes.c_uint64
print("InitializeInjection", ctypes.CDLL(injection).InitializeInjection(), file=sys.stderr)

cudart = ctypes.CDLL(CUDART_PATH)
cudart.cudaLaunchKernel.argtypes = [ctypes.c_void_p, dim3, dim3, ctypes.POINTER(ctypes.c_void_p),
                                    ctypes.c_size_t, ctypes.c_void_p]
counts = {"matmul": 0, "softmax": 0}


def launch(op):
    cudart.cudaLaunchKernel(ctypes.c_void_p(0x1234), dim3(4, 1, 1), dim3(128, 1, 1), None, 0,
                            None)
    corr = replay.cupti_replay_api(RUNTIME_API, CBID_LAUNCH, b"cudaLaunchKernel",
                                   (op + "_kernel").encode())
    start = replay.cupti_replay_now() + 5000
    replay.cupti_replay_kernel(corr, (op + "_kernel").encode(), start, start + DURATION_NS[op],
                               0, 7, 0, 0)
    counts[op] += 1


def matmul():
    launch("matmul")


def softmax():
    launch("softmax")


def step():
    matmul()
    softmax()
    softmax()


def train(steps):
    for _ in range(steps):
        step()


if "--wait-signal" in sys.argv:
    signal.signal(signal.SIGUSR1, lambda *_: None)
    print("ready", os.getpid(), flush=True)
    signal.pause()
train(10)
print("launches matmul=%d softmax=%d" % (counts["matmul"], counts["softmax"]), flush=True)
