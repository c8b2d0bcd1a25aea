"""unwind_py: a fixed Python -> ctypes -> cudaLaunchKernel call chain for ncclprobe's
unwinding tests, run under Debian's /usr/bin/python3.11 (libpython linked statically into the
executable, no frame pointers). The tests compare ncclprobe's native stacks of these launches
with a gdb backtrace of the same script, so the call sites must stay as they are.

    python3.11 unwind_py.py [ITERS]     (default 3; $CUDART_PATH picks libcudart.so.13)

<module> -> main -> outer -> middle -> launch -> cudaLaunchKernel(0x1234, {4,1,1}, {128,1,1},
NULL, 0, NULL), ITERS times, after sleeping 0.5 s once libcudart is loaded (so a tracer that
sees the dlopen has time to attach its probes). Prints: thread tid=<tid> variant=rt launches=<n>
"""

import ctypes
import os
import sys
import threading
import time

CUDART_PATH = os.environ.get("CUDART_PATH") or "/usr/local/cuda/lib64/libcudart.so.13"


class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def load():
    lib = ctypes.CDLL(CUDART_PATH)
    lib.cudaLaunchKernel.argtypes = [ctypes.c_void_p, dim3, dim3,
                                     ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                                     ctypes.c_void_p]
    lib.cudaLaunchKernel.restype = ctypes.c_int
    return lib


def launch(lib):
    return lib.cudaLaunchKernel(ctypes.c_void_p(0x1234), dim3(4, 1, 1), dim3(128, 1, 1), None,
                                0, None)


def middle(lib):
    return launch(lib)


def outer(lib):
    return middle(lib)


def main(iters):
    lib = load()
    time.sleep(0.5)
    for _ in range(iters):
        outer(lib)
    print(f"thread tid={threading.get_native_id()} variant=rt launches={iters}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
