"""The CUDA graph test double (libfakecuda.so's streams, events, stream capture,
graphs) and its workloads, graph_app and py_graph.py, without ncclprobe: the
double's semantics called directly (ctypes), the workloads' truth lines against
what their documented scenarios must give, the double's own counters, and
gdb's backtraces at every launch against the chains the truth names.

Nothing here needs root, BPF or a GPU."""

import ctypes
import os
import re
import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from lib.gdb import hbreak_script
from lib.paths import PROGS, REPO
from lib.processes import Workload
from lib.skip import needs_binary, needs_tools

LIBFAKECUDA = PROGS / "libfakecuda.so"
GRAPH_APP = PROGS / "graph_app"
PY_GRAPH = REPO / "tests" / "progs" / "py_graph.py"
STUB_LIBCUDA = Path("/usr/local/cuda/lib64/stubs/libcuda.so")

pytestmark = needs_binary(LIBFAKECUDA, GRAPH_APP)

SUCCESS = 0
INVALID_VALUE, INVALID_HANDLE, ILLEGAL_STATE, NOT_SUPPORTED = 1, 400, 401, 801
CAPTURE_UNSUPPORTED, CAPTURE_INVALIDATED, CAPTURE_MERGE = 900, 901, 902
CAPTURE_UNMATCHED, CAPTURE_UNJOINED, CAPTURE_ISOLATION = 903, 904, 905
CAPTURE_IMPLICIT, CAPTURED_EVENT, CAPTURE_WRONG_THREAD = 906, 907, 908
GRAPH_EXEC_UPDATE_FAILURE = 910
GLOBAL, THREAD_LOCAL, RELAXED = 0, 1, 2
STATUS_NONE, STATUS_ACTIVE, STATUS_INVALIDATED = 0, 1, 2
NON_BLOCKING = 1
LEGACY = 1

# ---- the double, called directly ----


class UpdateInfo(ctypes.Structure):
    _fields_ = [("result", ctypes.c_int), ("errorNode", ctypes.c_void_p),
                ("errorFromNode", ctypes.c_void_p)]


class Driver:
    """libfakecuda.so through ctypes; handles are ints (0 for NULL)."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(str(path))
        vp, u = ctypes.c_void_p, ctypes.c_uint
        pvp = ctypes.POINTER(vp)
        sig = {
            "cuModuleGetFunction": [pvp, vp, ctypes.c_char_p],
            "cuLaunchKernel": [vp, u, u, u, u, u, u, u, vp, vp, vp],
            "cuLaunchKernel_ptsz": [vp, u, u, u, u, u, u, u, vp, vp, vp],
            "cuStreamCreate": [pvp, u],
            "cuStreamDestroy_v2": [vp],
            "cuStreamSynchronize": [vp],
            "cuEventCreate": [pvp, u],
            "cuEventRecord": [vp, vp],
            "cuStreamWaitEvent": [vp, vp, u],
            "cuStreamBeginCapture": [vp],
            "cuStreamBeginCapture_v2": [vp, ctypes.c_int],
            "cuStreamBeginCapture_v2_ptsz": [vp, ctypes.c_int],
            "cuStreamBeginCaptureToGraph": [vp, vp, pvp, vp, ctypes.c_size_t, ctypes.c_int],
            "cuStreamEndCapture": [vp, pvp],
            "cuStreamEndCapture_ptsz": [vp, pvp],
            "cuStreamIsCapturing": [vp, ctypes.POINTER(ctypes.c_int)],
            "cuStreamGetCaptureInfo_v3": [vp, ctypes.POINTER(ctypes.c_int),
                                          ctypes.POINTER(ctypes.c_uint64), pvp,
                                          ctypes.POINTER(pvp), ctypes.POINTER(vp),
                                          ctypes.POINTER(ctypes.c_size_t)],
            "cuThreadExchangeStreamCaptureMode": [ctypes.POINTER(ctypes.c_int)],
            "cuMemAlloc_v2": [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_size_t],
            "cuGraphCreate": [pvp, u],
            "cuGraphDestroy": [vp],
            "cuGraphGetNodes": [vp, pvp, ctypes.POINTER(ctypes.c_size_t)],
            "cuGraphInstantiateWithFlags": [pvp, vp, ctypes.c_ulonglong],
            "cuGraphInstantiate": [pvp, vp, pvp, ctypes.c_char_p, ctypes.c_size_t],
            "cuGraphExecUpdate_v2": [vp, vp, ctypes.POINTER(UpdateInfo)],
            "cuGraphLaunch": [vp, vp],
            "cuGraphExecDestroy": [vp],
            "fakecuda_exec_info": [vp, ctypes.POINTER(ctypes.c_ulonglong),
                                   ctypes.POINTER(ctypes.c_size_t)],
            "fakecuda_exec_node": [vp, ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
                                   ctypes.POINTER(ctypes.c_ulonglong)],
            "fakecuda_kernel_counts": [ctypes.c_char_p] + [ctypes.POINTER(ctypes.c_ulonglong)] * 3,
        }
        for name, argtypes in sig.items():
            getattr(self.lib, name).argtypes = argtypes
            getattr(self.lib, name).restype = ctypes.c_int
        self.funcs = {}

    def __getattr__(self, name):
        return getattr(self.lib, name)

    def _new(self, fn, *args):
        out = ctypes.c_void_p()
        assert fn(ctypes.byref(out), *args) == SUCCESS
        return out.value

    def stream(self, flags=0):
        return self._new(self.lib.cuStreamCreate, flags)

    def event(self):
        return self._new(self.lib.cuEventCreate, 0)

    def func(self, name):
        if name not in self.funcs:
            self.funcs[name] = self._new(self.lib.cuModuleGetFunction, None, name.encode())
        return self.funcs[name]

    def launch(self, name, stream, ptsz=False):
        fn = self.lib.cuLaunchKernel_ptsz if ptsz else self.lib.cuLaunchKernel
        return fn(self.func(name), 1, 1, 1, 32, 1, 1, 0, stream, None, None)

    def end(self, stream, ptsz=False):
        graph = ctypes.c_void_p()
        fn = self.lib.cuStreamEndCapture_ptsz if ptsz else self.lib.cuStreamEndCapture
        rc = fn(stream, ctypes.byref(graph))
        return rc, graph.value

    def status(self, stream):
        st = ctypes.c_int(-1)
        rc = self.lib.cuStreamIsCapturing(stream, ctypes.byref(st))
        return st.value if rc == SUCCESS else rc

    def capture(self, stream, kernels, mode=GLOBAL):
        """A graph of `kernels` launched in order on `stream`."""
        assert self.lib.cuStreamBeginCapture_v2(stream, mode) == SUCCESS
        for k in kernels:
            assert self.launch(k, stream) == SUCCESS
        rc, graph = self.end(stream)
        assert rc == SUCCESS
        return graph

    def instantiate(self, graph):
        return self._new(self.lib.cuGraphInstantiateWithFlags, graph, 0)

    def nodes(self, graph):
        n = ctypes.c_size_t(0)
        assert self.lib.cuGraphGetNodes(graph, None, ctypes.byref(n)) == SUCCESS
        return n.value

    def exec_kernels(self, exec_):
        replays, n = ctypes.c_ulonglong(), ctypes.c_size_t()
        assert self.lib.fakecuda_exec_info(exec_, ctypes.byref(replays), ctypes.byref(n)) == 0
        names = []
        for i in range(n.value):
            name = ctypes.c_char_p()
            assert self.lib.fakecuda_exec_node(exec_, i, ctypes.byref(name), None) == SUCCESS
            names.append(name.value.decode())
        return replays.value, names

    def counts(self, name):
        c = [ctypes.c_ulonglong() for _ in range(3)]
        self.lib.fakecuda_kernel_counts(name.encode(), *map(ctypes.byref, c))
        return tuple(x.value for x in c)  # eager, captured, replayed

    def alloc(self):
        ptr = ctypes.c_ulonglong()
        return self.lib.cuMemAlloc_v2(ctypes.byref(ptr), 4096)

    def set_thread_mode(self, mode):
        m = ctypes.c_int(mode)
        assert self.lib.cuThreadExchangeStreamCaptureMode(ctypes.byref(m)) == SUCCESS
        return m.value


@pytest.fixture(scope="module")
def cu():
    return Driver(LIBFAKECUDA)


def on_thread(fn):
    """fn() on a new thread (its own capture mode, GLOBAL at start); returns its result."""
    result = []
    t = threading.Thread(target=lambda: result.append(fn()))
    t.start()
    t.join()
    return result[0]


def test_exports_are_the_real_driver_names():
    """Every CUDA function the double exports is a name the real libcuda.so.1 exports
    (the toolkit's stub has them all), each at its own address."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm not installed")
    ours = {}
    for line in subprocess.run([nm, "-D", "--defined-only", LIBFAKECUDA], capture_output=True,
                               text=True, check=True).stdout.splitlines():
        addr, _, name = line.split()
        ours[name] = addr
    cuda_names = {n for n in ours if not n.startswith("fakecuda_")}
    assert {"cuStreamBeginCapture_v2", "cuStreamBeginCapture_ptsz", "cuStreamEndCapture_ptsz",
            "cuGraphInstantiateWithParams", "cuGraphExecUpdate_v2", "cuGraphLaunch_ptsz",
            "cuStreamBeginCaptureToGraph", "cuEventRecord_ptsz"} <= cuda_names
    assert len(set(ours.values())) == len(ours), "two exports share an address (folded)"
    if STUB_LIBCUDA.exists():
        real = {line.split()[-1] for line in subprocess.run(
            [nm, "-D", "--defined-only", STUB_LIBCUDA], capture_output=True, text=True,
            check=True).stdout.splitlines()}
        assert cuda_names - real == set()


def test_captured_launches_run_nothing_and_others_run(cu):
    s, other = cu.stream(), cu.stream(NON_BLOCKING)
    before_a, before_b = cu.counts("t1_captured"), cu.counts("t1_eager")
    assert cu.lib.cuStreamBeginCapture_v2(s, GLOBAL) == SUCCESS
    assert cu.status(s) == STATUS_ACTIVE and cu.status(other) == STATUS_NONE
    assert cu.launch("t1_captured", s) == SUCCESS
    assert cu.launch("t1_eager", other) == SUCCESS
    rc, graph = cu.end(s)
    assert rc == SUCCESS and graph and cu.nodes(graph) == 1
    assert cu.status(s) == STATUS_NONE
    assert cu.counts("t1_captured") == (before_a[0], before_a[1] + 1, before_a[2])
    assert cu.counts("t1_eager") == (before_b[0] + 1, before_b[1], before_b[2])
    exec_ = cu.instantiate(graph)
    for _ in range(5):
        assert cu.cuGraphLaunch(exec_, other) == SUCCESS
    assert cu.exec_kernels(exec_) == (5, ["t1_captured"])
    assert cu.counts("t1_captured")[2] == before_a[2] + 5
    # the exec is a copy: it outlives its graph
    assert cu.cuGraphDestroy(graph) == SUCCESS
    assert cu.cuGraphLaunch(exec_, other) == SUCCESS
    assert cu.exec_kernels(exec_) == (6, ["t1_captured"])
    assert cu.cuGraphExecDestroy(exec_) == SUCCESS
    assert cu.cuGraphLaunch(exec_, other) == INVALID_HANDLE
    # a stream handle the double never made is an ordinary stream to launches
    assert cu.launch("t1_eager", 0x5041) == SUCCESS


def test_fork_join_and_unjoined(cu):
    origin, side = cu.stream(), cu.stream(NON_BLOCKING)
    fork, join = cu.event(), cu.event()
    # joined: the side stream's kernel is a node of the same graph
    assert cu.cuStreamBeginCapture_v2(origin, GLOBAL) == SUCCESS
    assert cu.launch("fj_a", origin) == SUCCESS
    assert cu.cuEventRecord(fork, origin) == SUCCESS
    assert cu.cuStreamWaitEvent(side, fork, 0) == SUCCESS
    assert cu.status(side) == STATUS_ACTIVE
    assert cu.launch("fj_side", side) == SUCCESS
    assert cu.launch("fj_b", origin) == SUCCESS
    assert cu.cuEventRecord(join, side) == SUCCESS
    assert cu.cuStreamWaitEvent(origin, join, 0) == SUCCESS
    # EndCapture belongs to the origin stream
    rc, graph = cu.end(side)
    assert rc == CAPTURE_UNMATCHED and graph is None
    rc, graph = cu.end(origin)
    assert rc == CAPTURE_INVALIDATED and graph is None  # the unmatched end invalidated it
    assert cu.status(side) == STATUS_NONE and cu.status(origin) == STATUS_NONE

    assert cu.cuStreamBeginCapture_v2(origin, GLOBAL) == SUCCESS
    assert cu.launch("fj_a", origin) == SUCCESS
    assert cu.cuEventRecord(fork, origin) == SUCCESS
    assert cu.cuStreamWaitEvent(side, fork, 0) == SUCCESS
    assert cu.launch("fj_side", side) == SUCCESS
    assert cu.launch("fj_b", origin) == SUCCESS
    assert cu.cuEventRecord(join, side) == SUCCESS
    assert cu.cuStreamWaitEvent(origin, join, 0) == SUCCESS
    rc, graph = cu.end(origin)
    assert rc == SUCCESS and cu.nodes(graph) == 3
    assert cu.status(side) == STATUS_NONE  # every stream leaves at the end
    assert cu.exec_kernels(cu.instantiate(graph))[1] == ["fj_a", "fj_side", "fj_b"]
    # the event was recorded in a capture that has ended
    assert cu.cuStreamWaitEvent(side, join, 0) == CAPTURED_EVENT

    # not joined back: no graph, CUDA_ERROR_STREAM_CAPTURE_UNJOINED, both streams free again
    assert cu.cuStreamBeginCapture_v2(origin, GLOBAL) == SUCCESS
    assert cu.launch("fj_a", origin) == SUCCESS
    assert cu.cuEventRecord(fork, origin) == SUCCESS
    assert cu.cuStreamWaitEvent(side, fork, 0) == SUCCESS
    assert cu.launch("fj_side", side) == SUCCESS
    rc, graph = cu.end(origin)
    assert rc == CAPTURE_UNJOINED and graph is None
    assert cu.status(side) == STATUS_NONE and cu.status(origin) == STATUS_NONE
    assert cu.launch("fj_side", side) == SUCCESS  # runs now


def test_capture_rule_violations(cu):
    s, t = cu.stream(), cu.stream(NON_BLOCKING)
    ev = cu.event()
    # the legacy stream cannot capture; a stream captures once at a time
    assert cu.cuStreamBeginCapture_v2(None, GLOBAL) == CAPTURE_UNSUPPORTED
    assert cu.cuStreamBeginCapture_v2(ctypes.c_void_p(LEGACY), GLOBAL) == CAPTURE_UNSUPPORTED
    assert cu.cuStreamBeginCapture_v2(s, 7) == INVALID_VALUE
    assert cu.cuStreamBeginCapture_v2(s, GLOBAL) == SUCCESS
    assert cu.cuStreamBeginCapture_v2(s, GLOBAL) == ILLEGAL_STATE
    # a wait on an event recorded outside the capture: isolation, the capture is invalidated
    assert cu.cuEventRecord(ev, t) == SUCCESS
    assert cu.cuStreamWaitEvent(s, ev, 0) == CAPTURE_ISOLATION
    assert cu.status(s) == STATUS_INVALIDATED
    assert cu.launch("rv_k", s) == CAPTURE_INVALIDATED
    assert cu.end(s) == (CAPTURE_INVALIDATED, None)
    # synchronizing a capturing stream
    assert cu.cuStreamBeginCapture_v2(s, GLOBAL) == SUCCESS
    assert cu.cuStreamSynchronize(s) == CAPTURE_UNSUPPORTED
    assert cu.end(s) == (CAPTURE_INVALIDATED, None)
    # the legacy stream while a blocking stream captures (the capture is invalidated);
    # a non-blocking stream's capture does not care
    assert cu.cuStreamBeginCapture_v2(s, GLOBAL) == SUCCESS
    assert cu.launch("rv_k", None) == CAPTURE_IMPLICIT
    assert cu.end(s) == (CAPTURE_INVALIDATED, None)
    assert cu.cuStreamBeginCapture_v2(t, GLOBAL) == SUCCESS
    assert cu.launch("rv_k", None) == SUCCESS
    assert cu.end(t)[0] == SUCCESS
    # two captures cannot merge
    a, b, ea = cu.stream(), cu.stream(), cu.event()
    assert cu.cuStreamBeginCapture_v2(a, GLOBAL) == SUCCESS
    assert cu.cuStreamBeginCapture_v2(b, GLOBAL) == SUCCESS
    assert cu.cuEventRecord(ea, a) == SUCCESS
    assert cu.cuStreamWaitEvent(b, ea, 0) == CAPTURE_MERGE
    assert cu.end(a) == (CAPTURE_INVALIDATED, None)
    assert cu.end(b) == (CAPTURE_INVALIDATED, None)
    # a stream taking part in a capture is not destroyed; a graph captured into is not either
    assert cu.cuStreamBeginCapture_v2(a, GLOBAL) == SUCCESS
    assert cu.cuStreamDestroy_v2(a) == CAPTURE_UNSUPPORTED
    info_graph = ctypes.c_void_p()
    st = ctypes.c_int()
    assert cu.cuStreamGetCaptureInfo_v3(a, ctypes.byref(st), None, ctypes.byref(info_graph),
                                        None, None, None) == SUCCESS
    assert st.value == STATUS_ACTIVE and cu.cuGraphDestroy(info_graph) == ILLEGAL_STATE
    assert cu.end(a)[0] == SUCCESS
    assert cu.end(a) == (ILLEGAL_STATE, None)


def test_capture_info_dependencies(cu):
    s = cu.stream()
    assert cu.cuStreamBeginCapture_v2(s, GLOBAL) == SUCCESS
    assert cu.launch("ci_a", s) == SUCCESS
    st, cid, graph = ctypes.c_int(), ctypes.c_uint64(), ctypes.c_void_p()
    deps, edges, n = ctypes.POINTER(ctypes.c_void_p)(), ctypes.c_void_p(), ctypes.c_size_t()
    assert cu.cuStreamGetCaptureInfo_v3(s, ctypes.byref(st), ctypes.byref(cid),
                                        ctypes.byref(graph), ctypes.byref(deps),
                                        ctypes.byref(edges), ctypes.byref(n)) == SUCCESS
    assert st.value == STATUS_ACTIVE and cid.value > 0 and n.value == 1
    node = deps[0]
    assert cu.end(s)[0] == SUCCESS
    listed = (ctypes.c_void_p * 2)()
    count = ctypes.c_size_t(2)
    assert cu.cuGraphGetNodes(graph, listed, ctypes.byref(count)) == SUCCESS
    assert count.value == 1 and listed[0] == node and listed[1] is None
    # capture into that graph, after its node: cuStreamBeginCaptureToGraph
    dep = (ctypes.c_void_p * 1)(node)
    assert cu.cuStreamBeginCaptureToGraph(s, graph, dep, None, 1, RELAXED) == SUCCESS
    assert cu.launch("ci_b", s) == SUCCESS
    rc, same = cu.end(s)
    assert rc == SUCCESS and same == graph.value and cu.nodes(graph) == 2


def test_capture_modes_and_unsafe_calls(cu):
    s = cu.stream()
    # GLOBAL: an unsafe call on the capturing thread is refused and invalidates the capture
    assert cu.cuStreamBeginCapture_v2(s, GLOBAL) == SUCCESS
    assert cu.alloc() == CAPTURE_UNSUPPORTED
    assert cu.end(s) == (CAPTURE_INVALIDATED, None)
    # GLOBAL: another thread in GLOBAL mode is refused too; in THREAD_LOCAL or RELAXED mode not
    assert cu.cuStreamBeginCapture_v2(s, GLOBAL) == SUCCESS

    def relaxed_alloc(mode):
        cu.set_thread_mode(mode)
        return cu.alloc()

    assert on_thread(lambda: relaxed_alloc(THREAD_LOCAL)) == SUCCESS
    assert on_thread(lambda: relaxed_alloc(RELAXED)) == SUCCESS
    assert cu.status(s) == STATUS_ACTIVE
    assert on_thread(cu.alloc) == CAPTURE_UNSUPPORTED
    assert cu.end(s) == (CAPTURE_INVALIDATED, None)
    # THREAD_LOCAL: other threads are free, the capturing thread is not
    assert cu.cuStreamBeginCapture_v2(s, THREAD_LOCAL) == SUCCESS
    assert on_thread(cu.alloc) == SUCCESS
    assert cu.status(s) == STATUS_ACTIVE
    assert cu.alloc() == CAPTURE_UNSUPPORTED
    assert cu.end(s) == (CAPTURE_INVALIDATED, None)
    # RELAXED: nobody is refused; the capture may be ended from another thread
    assert cu.cuStreamBeginCapture_v2(s, RELAXED) == SUCCESS
    assert cu.alloc() == SUCCESS and on_thread(cu.alloc) == SUCCESS
    assert cu.launch("cm_k", s) == SUCCESS
    rc, graph = on_thread(lambda: cu.end(s))
    assert rc == SUCCESS and cu.nodes(graph) == 1
    # not RELAXED: another thread's end is refused, the capture goes on
    for mode in (GLOBAL, THREAD_LOCAL):
        assert cu.cuStreamBeginCapture_v2(s, mode) == SUCCESS
        assert on_thread(lambda: cu.end(s)) == (CAPTURE_WRONG_THREAD, None)
        assert cu.status(s) == STATUS_ACTIVE
        assert cu.end(s)[0] == SUCCESS
    # a thread's mode is its own, and swapped back
    assert cu.set_thread_mode(RELAXED) == GLOBAL
    assert cu.set_thread_mode(GLOBAL) == RELAXED


def test_per_thread_default_stream(cu):
    """The _ptsz names' NULL stream is the calling thread's default stream: it can capture."""
    assert cu.cuStreamBeginCapture_v2_ptsz(None, THREAD_LOCAL) == SUCCESS
    assert cu.launch("ptds_k", None, ptsz=True) == SUCCESS
    # another thread's default stream is another stream
    assert on_thread(lambda: (cu.cuStreamBeginCapture_v2_ptsz(None, THREAD_LOCAL),
                              cu.end(None, ptsz=True)[0])) == (SUCCESS, SUCCESS)
    rc, graph = cu.end(None, ptsz=True)
    assert rc == SUCCESS and cu.nodes(graph) == 1
    assert cu.counts("ptds_k")[:2] == (0, 1)


def test_exec_update(cu):
    s = cu.stream()
    exec_ = cu.instantiate(cu.capture(s, ["up_a", "up_b"]))
    assert cu.cuGraphLaunch(exec_, s) == SUCCESS
    info = UpdateInfo()
    assert cu.cuGraphExecUpdate_v2(exec_, cu.capture(s, ["up_a", "up_c"]),
                                   ctypes.byref(info)) == SUCCESS
    assert info.result == 0
    assert cu.cuGraphLaunch(exec_, s) == SUCCESS
    assert cu.exec_kernels(exec_) == (2, ["up_a", "up_c"])
    assert cu.counts("up_b")[2] == 1 and cu.counts("up_c")[2] == 1
    # another topology: refused, the exec unchanged
    other = cu.capture(s, ["up_a", "up_b", "up_c"])
    assert cu.cuGraphExecUpdate_v2(exec_, other, ctypes.byref(info)) == GRAPH_EXEC_UPDATE_FAILURE
    assert info.result == 2  # CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
    assert cu.exec_kernels(exec_) == (2, ["up_a", "up_c"])


def test_handle_reuse(cu):
    s = cu.stream()
    graph = cu.capture(s, ["hr_old_a", "hr_old_b"])
    exec_ = cu.instantiate(graph)
    assert cu.cuGraphLaunch(exec_, s) == SUCCESS
    assert cu.cuGraphExecDestroy(exec_) == SUCCESS
    assert cu.cuGraphDestroy(graph) == SUCCESS
    assert cu.cuGraphDestroy(graph) == INVALID_HANDLE
    graph2 = cu.capture(s, ["hr_new"])
    exec2 = cu.instantiate(graph2)
    assert (graph2, exec2) == (graph, exec_)
    for _ in range(3):
        assert cu.cuGraphLaunch(exec2, s) == SUCCESS
    assert cu.exec_kernels(exec2) == (3, ["hr_new"])
    assert cu.counts("hr_old_a")[2] == 1 and cu.counts("hr_new")[2] == 3
    # the legacy name with the legacy signature; streams and events are reused too
    exec3 = ctypes.c_void_p()
    assert cu.cuGraphInstantiate(ctypes.byref(exec3), graph2, None, None, 0) == SUCCESS
    assert exec3.value != exec2
    t = cu.stream()
    assert cu.cuStreamDestroy_v2(t) == SUCCESS
    assert cu.stream() == t


# ---- graph_app: the truth ----

TRUTH = re.compile(r"^truth kind=(\w+) (.*) kernel=(\S+) count=(\d+)( before_attach=1)?$")


def run_graph_app(*args, timeout=60):
    proc = subprocess.run([GRAPH_APP, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, (args, proc.returncode, proc.stderr)
    return proc.stdout


def parse_truth(out):
    """{(kind, stack, capture, kernel, before_attach): count}, the graph and handle lines and
    the double's lines as dicts."""
    truth, graphs, handles, double = {}, {}, {}, []
    for line in out.splitlines():
        m = TRUTH.match(line)
        if m:
            kind, where, kernel, count, before = m.groups()
            fields = dict(f.split("=", 1) for f in where.split())
            stack = fields.get("stack") or fields.get("replay") or fields.get("capture")
            capture = fields["capture"] if kind == "replayed" else None
            key = (kind, stack, capture, kernel, bool(before))
            assert key not in truth, f"duplicate truth line: {line}"
            truth[key] = int(count)
        elif line.startswith("truth graph "):
            fields = dict(f.split("=", 1) for f in line.split()[2:])
            graphs[fields["name"]] = fields
        elif line.startswith("truth handles "):
            handles = dict(f.split("=", 1) for f in line.split()[2:])
        elif line.startswith("double "):
            double.append(dict(f.split("=", 1) for f in line.split()[1:]))
    assert "selfcheck ok" in out.splitlines()
    return truth, graphs, handles, double


def expected_graph_app(scenarios, replays, prefill_replays, attach_after_capture=False):
    """The truth graph_app must print, from its documented scenarios (README.md)."""
    truth = Counter()
    before = attach_after_capture  # until SIGUSR1 in that mode

    def add(kind, stack, capture, kernel, n=1, flag=None):
        if n:
            truth[(kind, stack, capture, kernel, before if flag is None else flag)] += n

    def model(top, variant):
        c = f"{top};capture_model;capture_"
        down = "mlp_down_v2_kernel" if variant == 2 else "mlp_down_kernel"
        return [(c + "attention;launch_named", "attn_qkv_kernel", before),
                (c + "attention;launch_named", "attn_softmax_kernel", before),
                (c + "mlp;launch_named", "mlp_up_kernel", before),
                (c + "mlp;launch_named", down, before),
                (c + "allreduce;launch_named", "allreduce_kernel", before),
                (c + "allreduce;launch_named", "residual_kernel", before)]

    def prefill(top, chunked):
        c = f"{top};capture_prefill;capture_"
        nodes = [(c + "attention;launch_named", "attn_qkv_kernel", before),
                 (c + "attention;launch_named", "attn_softmax_kernel", before)]
        if not chunked:
            nodes += [(c + "mlp;launch_named", "mlp_up_kernel", before),
                      (c + "mlp;launch_named", "mlp_down_kernel", before)]
        return nodes

    def captured(nodes):
        for capture, kernel, _ in nodes:
            add("captured", capture, None, kernel)
        return nodes

    def serve():
        for capture, kernel, flag in pre or []:
            add("replayed", "serve;prefill_step", capture, kernel, prefill_replays, flag)
        for capture, kernel, flag in dec:
            add("replayed", "serve;decode_step", capture, kernel, replays, flag)
        add("eager", "serve;decode_step;sample_tokens;launch_named", None, "sample_kernel", replays)

    add("eager", "build_graphs;warmup;launch_named", None, "embed_kernel")
    dec = captured(model("build_graphs", 1))
    pre = captured(prefill("build_graphs", False)) if "prefill" in scenarios else None
    if "thread" in scenarios:
        add("eager", "eager_worker;eager_step;launch_named", None, "kv_copy_kernel", 16)
    before = False
    serve()
    if "update" in scenarios:
        dec = captured(model("update_graphs", 2))
        serve()
    if "recycle" in scenarios:
        pre = captured(prefill("recycle_graphs", True))
        serve()
    return dict(truth)


ALL = ("fork", "prefill", "thread", "update", "recycle")


@pytest.mark.parametrize("scenarios,extra", [
    (ALL, []),
    (ALL, ["--ptsz"]),
    ((), ["--scenarios", "none"]),
    (("prefill", "update"), ["--scenarios", "prefill,update"]),
    (("fork", "prefill", "recycle"), ["--scenarios", "recycle,prefill,fork"]),
])
def test_graph_app_truth(scenarios, extra):
    replays, prefill_replays = 37, 5
    out = run_graph_app("--replays", replays, "--prefill-replays", prefill_replays, *extra)
    truth, graphs, handles, double = parse_truth(out)
    assert truth == expected_graph_app(scenarios, replays, prefill_replays)

    rounds = 1 + ("update" in scenarios) + ("recycle" in scenarios)
    # replayed counts are replays x nodes: every node of an exec's content, once per replay
    decode_lines = {k: n for k, n in truth.items() if k[1] == "serve;decode_step"}
    assert sum(decode_lines.values()) == rounds * replays * 6
    # the double's own counters (graph_app checked them too: "selfcheck ok")
    execs = {d["exec"]: d for d in double if "exec" in d}
    assert int(execs["decode"]["replays"]) == rounds * replays
    assert execs["decode"]["kernels"].split(",") == [
        "attn_qkv_kernel", "attn_softmax_kernel", "mlp_up_kernel",
        "mlp_down_v2_kernel" if "update" in scenarios else "mlp_down_kernel",
        "allreduce_kernel", "residual_kernel"]
    kernels = {d["kernel"]: d for d in double if "kernel" in d}
    for name, d in kernels.items():
        for kind in ("eager", "captured", "replayed"):
            assert int(d[kind]) == sum(n for k, n in truth.items()
                                       if k[0] == kind and k[3] == name), (name, kind)
    assert graphs["decode"]["mode"] == "global" and graphs["decode"]["nodes"] == "6"
    if "prefill" in scenarios:
        assert graphs["prefill"]["mode"] == "thread_local"
    if "update" in scenarios:
        assert graphs["decode_v2"]["mode"] == "relaxed"
        assert graphs["decode_v2"]["exec"] == graphs["decode"]["exec"]
        assert graphs["decode_v2"]["graph"] != graphs["decode"]["graph"]
    if "recycle" in scenarios:
        old, new = graphs["prefill"], graphs["prefill_v2"]
        assert (new["graph"], new["exec"]) == (old["graph"], old["exec"])
        assert handles == {"graph_reused": old["graph"], "exec_reused": old["exec"]}
        assert int(execs["prefill"]["replays"]) == (rounds - 1) * prefill_replays
        assert int(execs["prefill_v2"]["replays"]) == prefill_replays
        assert execs["prefill_v2"]["kernels"] == "attn_qkv_kernel,attn_softmax_kernel"
    else:
        assert handles == {}


def test_graph_app_usage():
    for args in (["--scenarios", "thread"], ["--scenarios", "bogus"], ["--replays", "-1"],
                 ["--ptsz", "extra-argument"]):
        proc = subprocess.run([GRAPH_APP, *args], capture_output=True, text=True, timeout=10)
        assert proc.returncode == 2, args


def test_graph_app_wait_signal_and_attach_after_capture(workloads):
    w = Workload([GRAPH_APP, "--replays", "20", "--wait-signal"])
    workloads.append(w)
    w.go()
    out, err = w.finish()
    assert w.proc.returncode == 0, err
    assert parse_truth(out)[0] == expected_graph_app(ALL, 20, 10)

    w = Workload([GRAPH_APP, "--replays", "20", "--attach-after-capture"])
    workloads.append(w)
    w.go()
    out, err = w.finish()
    assert w.proc.returncode == 0, err
    truth = parse_truth(out)[0]
    assert truth == expected_graph_app(ALL, 20, 10, attach_after_capture=True)
    # before the attach: the build (eager, captured, the thread), and the replays of the nodes
    # captured then - the decode graph until its update, the prefill graph until recycled
    flagged = {k[:4] for k in truth if k[4]}
    assert ("replayed", "serve;decode_step",
            "build_graphs;capture_model;capture_attention;launch_named",
            "attn_qkv_kernel") in flagged
    assert not any(k[1].startswith(("serve;decode_step;", "update_graphs", "recycle_graphs"))
                   for k in flagged)


def gdb_chains(argv, tmp_path):
    """Runs argv under gdb, with a breakpoint on each launch entry point; returns
    Counter((api, chain)): the chain from main's callee (or the thread's entry function) down
    to the caller, as gdb's backtrace says."""
    breaks = hbreak_script(tmp_path, ["cuLaunchKernel", "cuLaunchKernelEx", "cuGraphLaunch"],
                           backtrace=True)
    proc = subprocess.run(["gdb", "-batch", "-nx", "-ex", "set pagination off", "-ex",
                           "set width 0", "-x", breaks, "-ex", "run", "-ex", "quit",
                           "--args", *map(str, argv)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DEBUGINFOD_URLS": ""}, stdin=subprocess.DEVNULL)
    frame = re.compile(r"^#(\d+)\s+(?:0x[0-9a-f]+ in )?(\S+) \(")
    stops, current = Counter(), None

    def close():
        if current:
            api, names = current[0], current[1:]
            stops[(api, ";".join(reversed(names)))] += 1

    done = False
    for line in proc.stdout.splitlines():
        m = frame.match(line)
        if not m:
            continue
        level, name = int(m.group(1)), m.group(2)
        if level == 0:
            close()
            current, done = [name], False
        elif not done:
            if name in ("main", "start_thread", "clone", "clone3"):
                done = True
            else:
                current.append(name)
    close()
    return stops, proc


@needs_tools("gdb")
def test_graph_app_chains_are_the_real_stacks(tmp_path):
    """gdb's backtrace at every launch and replay gives the chains the truth prints."""
    replays, prefill_replays = 2, 1
    argv = [GRAPH_APP, "--replays", replays, "--prefill-replays", prefill_replays]
    stops, proc = gdb_chains(argv, tmp_path)
    truth = parse_truth(proc.stdout)[0]
    launches = Counter()
    for (kind, stack, _, kernel, _), n in truth.items():
        if kind != "replayed":
            api = "cuLaunchKernelEx" if kernel == "mlp_up_kernel" else "cuLaunchKernel"
            launches[(api, stack)] += n
    graph_launches = Counter({("cuGraphLaunch", "serve;decode_step"): 3 * replays,
                              ("cuGraphLaunch", "serve;prefill_step"): 3 * prefill_replays})
    assert stops == launches + graph_launches, proc.stderr[-2000:]
    replay_chains = {k[1] for k in truth if k[0] == "replayed"}
    assert replay_chains == {"serve;decode_step", "serve;prefill_step"}


# ---- py_graph.py ----

@pytest.mark.skipif(sys.version_info < (3, 11), reason="co_qualname needs CPython 3.11+")
def test_py_graph_truth():
    replays = 25
    proc = subprocess.run([sys.executable, PY_GRAPH, "--replays", str(replays)],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "FAKECUDA_PATH": str(LIBFAKECUDA)})
    assert proc.returncode == 0, proc.stderr
    truth, graphs, _, double = parse_truth(proc.stdout)
    cap = "build;Model.capture;Model."
    nodes = [(cap + "attention;launch", "attn_qkv_kernel"),
             (cap + "attention;launch", "attn_softmax_kernel"),
             (cap + "mlp;launch", "mlp_up_kernel"), (cap + "mlp;launch", "mlp_down_kernel")]
    want = {("eager", "warmup;launch", None, "embed_kernel", False): 1,
            ("eager", "decode;Model.sample;launch", None, "sample_kernel", False): replays}
    for capture, kernel in nodes:
        want[("captured", capture, None, kernel, False)] = 1
        want[("replayed", "decode", capture, kernel, False)] = replays
    assert truth == want
    assert graphs["decode"]["nodes"] == "4"
    execs = [d for d in double if "exec" in d]
    assert execs[0]["replays"] == str(replays)
    assert execs[0]["kernels"].split(",") == [k for _, k in nodes]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="co_qualname needs CPython 3.11+")
def test_py_graph_attach_after_capture(workloads):
    w = Workload([sys.executable, PY_GRAPH, "--replays", "5", "--attach-after-capture"],
                 env={"FAKECUDA_PATH": str(LIBFAKECUDA)})
    workloads.append(w)
    w.go()
    out, err = w.finish()
    assert w.proc.returncode == 0, err
    truth = parse_truth(out)[0]
    # only the replay loop's eager launches come after the attach; the replays are of nodes
    # captured before it
    assert {k for k in truth if not k[4]} == {
        ("eager", "decode;Model.sample;launch", None, "sample_kernel", False)}
    assert sum(n for k, n in truth.items() if k[0] == "replayed") == 5 * 4
