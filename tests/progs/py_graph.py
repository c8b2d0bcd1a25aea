#!/usr/bin/env python3
"""py_graph: CUDA graph capture and replay from CPython, for ncclprobe's graph tests.

Calls the CUDA driver test double libfakecuda.so (fake_cuda_driver.c) with ctypes
($FAKECUDA_PATH, else $NCCLPROBE_BUILD/progs/libfakecuda.so, else build/progs/ of this
checkout) along fixed chains of Python functions:

    main -> warmup -> launch -> cuLaunchKernel                               (eager)
    main -> build -> Model.capture -> Model.attention -> launch -> cuLaunchKernel   (captured)
                                   -> Model.mlp       -> launch -> cuLaunchKernel   (captured)
    main -> decode -> cuGraphLaunch                                           (replayed, N times)
                   -> Model.sample -> launch -> cuLaunchKernel                (eager, N times)

The graph (cuStreamBeginCapture_v2, GLOBAL mode, on a created stream) has four kernel nodes:
attn_qkv_kernel and attn_softmax_kernel (Model.attention), mlp_up_kernel and mlp_down_kernel
(Model.mlp); it is instantiated with cuGraphInstantiateWithFlags. Prints the same truth lines
as graph_app (tests/progs/README.md), the chains made of Python qualnames (co_qualname; co_name
before 3.11) from main's callee down to the function that made the call, read from the real
frames at each call; then the double's counters (`double ...`) and `selfcheck ok` (exit 0) or
`selfcheck FAIL ...` (exit 1).
"""

import argparse
import ctypes
import os
import signal
import sys
from pathlib import Path


def fakecuda_path():
    if os.environ.get("FAKECUDA_PATH"):
        return os.environ["FAKECUDA_PATH"]
    build = os.environ.get("NCCLPROBE_BUILD") or Path(__file__).resolve().parents[2] / "build"
    return str(Path(build) / "progs" / "libfakecuda.so")


CU_STREAM_CAPTURE_MODE_GLOBAL = 0
vp = ctypes.c_void_p
cu = ctypes.CDLL(fakecuda_path())
cu.cuLaunchKernel.argtypes = [vp] + [ctypes.c_uint] * 7 + [vp, vp, vp]
cu.cuModuleGetFunction.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_char_p]
cu.cuStreamCreate.argtypes = [ctypes.POINTER(vp), ctypes.c_uint]
cu.cuStreamBeginCapture_v2.argtypes = [vp, ctypes.c_int]
cu.cuStreamEndCapture.argtypes = [vp, ctypes.POINTER(vp)]
cu.cuGraphInstantiateWithFlags.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_ulonglong]
cu.cuGraphLaunch.argtypes = [vp, vp]
cu.fakecuda_exec_info.argtypes = [vp, ctypes.POINTER(ctypes.c_ulonglong),
                                  ctypes.POINTER(ctypes.c_size_t)]
cu.fakecuda_exec_node.argtypes = [vp, ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
                                  ctypes.POINTER(ctypes.c_ulonglong)]
cu.fakecuda_kernel_counts.argtypes = [ctypes.c_char_p] + [ctypes.POINTER(ctypes.c_ulonglong)] * 3

KERNELS = ["embed_kernel", "attn_qkv_kernel", "attn_softmax_kernel", "mlp_up_kernel",
           "mlp_down_kernel", "sample_kernel"]


def check(rc, what):
    if rc != 0:
        sys.exit(f"py_graph: {what} failed: CUresult {rc}")


def chain():
    """The Python frames from main's callee down to the caller of chain(), as qualnames."""
    names = []
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "main":
        code = frame.f_code
        names.append(getattr(code, "co_qualname", code.co_name))
        frame = frame.f_back
    return ";".join(reversed(names))


class Truth:
    def __init__(self):
        self.counts = {}  # (kind, stack, capture, kernel, before_attach) -> count
        self.attached = True

    def add(self, kind, stack, capture, kernel, before_attach, n=1):
        key = (kind, stack, capture, kernel, before_attach)
        self.counts[key] = self.counts.get(key, 0) + n

    def lines(self):
        order = {"eager": 0, "captured": 1, "replayed": 2}
        for key in sorted(self.counts, key=lambda k: (order[k[0]], k[1], k[2] or "", k[3], k[4])):
            kind, stack, capture, kernel, before = key
            where = {"eager": f"stack={stack}", "captured": f"capture={stack}",
                     "replayed": f"replay={stack} capture={capture}"}[kind]
            tail = " before_attach=1" if before else ""
            yield f"truth kind={kind} {where} kernel={kernel} count={self.counts[key]}{tail}"


TRUTH = Truth()


class Model:
    def __init__(self, stream, funcs):
        self.stream = stream
        self.funcs = funcs
        self.nodes = None  # while capturing: [(capture chain, kernel, before_attach)]

    def attention(self):
        launch(self, "attn_qkv_kernel")
        launch(self, "attn_softmax_kernel")

    def mlp(self):
        launch(self, "mlp_up_kernel")
        launch(self, "mlp_down_kernel")

    def sample(self):
        launch(self, "sample_kernel")

    def capture(self):
        check(cu.cuStreamBeginCapture_v2(self.stream, CU_STREAM_CAPTURE_MODE_GLOBAL),
              "cuStreamBeginCapture_v2")
        self.nodes = []
        self.attention()
        self.mlp()
        graph = vp()
        check(cu.cuStreamEndCapture(self.stream, ctypes.byref(graph)), "cuStreamEndCapture")
        nodes, self.nodes = self.nodes, None
        return graph, nodes


def launch(model, kernel):
    stack = chain()
    check(cu.cuLaunchKernel(model.funcs[kernel], 4, 1, 1, 256, 1, 1, 0, model.stream, None, None),
          kernel)
    before = not TRUTH.attached
    if model.nodes is not None:
        model.nodes.append((stack, kernel, before))
        TRUTH.add("captured", stack, None, kernel, before)
    else:
        TRUTH.add("eager", stack, None, kernel, before)


def warmup(model):
    launch(model, "embed_kernel")


def build(model):
    graph, nodes = model.capture()
    exec_ = vp()
    check(cu.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph, 0),
          "cuGraphInstantiateWithFlags")
    return graph, exec_, nodes


def decode(model, exec_, nodes, replays):
    stack = chain()
    for _ in range(replays):
        check(cu.cuGraphLaunch(exec_, model.stream), "cuGraphLaunch")
        for capture, kernel, before in nodes:
            TRUTH.add("replayed", stack, capture, kernel, before)
        model.sample()


def selfcheck(exec_, nodes, replays):
    """The double's counters against the truth; returns the failures."""
    failures = []
    got_replays, got_nodes = ctypes.c_ulonglong(), ctypes.c_size_t()
    check(cu.fakecuda_exec_info(exec_, ctypes.byref(got_replays), ctypes.byref(got_nodes)),
          "fakecuda_exec_info")
    names = []
    for i in range(got_nodes.value):
        name = ctypes.c_char_p()
        check(cu.fakecuda_exec_node(exec_, i, ctypes.byref(name), None), "fakecuda_exec_node")
        names.append(name.value.decode())
    print(f"double exec=decode handle=0x{exec_.value:x} replays={got_replays.value} "
          f"nodes={got_nodes.value} kernels={','.join(names)}")
    if got_replays.value != replays:
        failures.append(f"exec replays {got_replays.value} != {replays}")
    if names != [kernel for _, kernel, _ in nodes]:
        failures.append(f"exec nodes {names} != {[k for _, k, _ in nodes]}")
    for kernel in KERNELS:
        got = [ctypes.c_ulonglong() for _ in range(3)]
        cu.fakecuda_kernel_counts(kernel.encode(), *map(ctypes.byref, got))
        got = [g.value for g in got]
        want = [sum(n for key, n in TRUTH.counts.items() if key[0] == kind and key[3] == kernel)
                for kind in ("eager", "captured", "replayed")]
        print(f"double kernel={kernel} eager={got[0]} captured={got[1]} replayed={got[2]}")
        if got != want:
            failures.append(f"kernel {kernel}: the double counted {got}, the truth says {want}")
    return failures


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replays", type=int, default=1000, help="graph replays (default 1000)")
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--wait-signal", action="store_true",
                      help='print "ready <pid>", wait for SIGUSR1 before anything else')
    when.add_argument("--attach-after-capture", action="store_true",
                      help='capture, then print "ready <pid>" and wait for SIGUSR1 to replay')
    args = parser.parse_args()
    if args.replays < 0:
        parser.error("--replays must be >= 0")
    return args


def main():
    args = parse_args()
    if args.wait_signal or args.attach_after_capture:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    if args.wait_signal:
        print(f"ready {os.getpid()}", flush=True)
        signal.sigwait({signal.SIGUSR1})
    TRUTH.attached = not args.attach_after_capture

    check(cu.cuInit(0), "cuInit")
    funcs = {}
    for name in KERNELS:
        f = vp()
        check(cu.cuModuleGetFunction(ctypes.byref(f), vp(0x10), name.encode()),
              "cuModuleGetFunction")
        funcs[name] = f
    stream = vp()
    check(cu.cuStreamCreate(ctypes.byref(stream), 0), "cuStreamCreate")
    model = Model(stream, funcs)

    warmup(model)
    graph, exec_, nodes = build(model)
    if args.attach_after_capture:
        print(f"ready {os.getpid()}", flush=True)
        signal.sigwait({signal.SIGUSR1})
        TRUTH.attached = True
    decode(model, exec_, nodes, args.replays)

    for line in TRUTH.lines():
        print(line)
    print(f"truth graph name=decode mode=global graph=0x{graph.value:x} exec=0x{exec_.value:x} "
          f"nodes={len(nodes)}")
    failures = selfcheck(exec_, nodes, args.replays)
    for failure in failures:
        print(f"py_graph: selfcheck: {failure}", file=sys.stderr)
    print(f"selfcheck FAIL failures={len(failures)}" if failures else "selfcheck ok", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
