"""`ncclprobe merge`: CPU launch stacks + a CUPTI Chrome trace -> folded stacks.

The established merge tool users already have is re-implemented here, in
plain Python, from its description (reference_merge below; it is not derived
from ncclprobe's C code), and run on generated inputs: ncclprobe must give
byte-identical output wherever that tool is right (no graph launches, clocks
that agree), and the documented, different answers where it is not (CUDA
graphs, two threads launching 1 us apart). No root, no GPU needed.

bench/merge_bench.py imports generate_inputs and reference_merge from here.
"""

import json
import random
from collections import Counter
from decimal import Decimal

import pytest

from lib.folded import folded_totals
from lib.merge import ev_kernel, ev_launch, merge, trace_of
from lib.paths import NCCLPROBE
from lib.run import FAILURE, run_ncclprobe, USAGE
from lib.skip import needs_binary

# ---- the established algorithm ---------------------------------------------------

DROPPED_FRAMES = {"<no-symbol>", "_start", "__libc_start_main"}


def reference_frames(stack):
    """The CPU stack's frames as the established tool keeps them."""
    frames, wrapper_seen = [], False
    for frame in stack.split(";"):
        frame = frame.strip()
        if not frame or frame in DROPPED_FRAMES:
            continue
        if "cudaLaunchKernel" in frame or "__device_stub__" in frame:
            if wrapper_seen:
                continue
            wrapper_seen = True
            frame = "cudaLaunchKernel"
        frames.append(frame)
    return frames


def reference_merge(cpu_text, trace_text, tolerance_ms=10.0, gpu_ns=None):
    """The established tool: nearest runtime launch anywhere (not one-to-one,
    not per thread), O(CPU x launches). Returns the folded output text; when
    gpu_ns is a dict it also receives the GPU-ns weights (our extension,
    computed the way docs/merge.md says, for checking --gpu-ns-output)."""
    stacks = []
    for line in cpu_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        frames = reference_frames(parts[5])
        if frames:
            stacks.append((int(parts[0]), frames))

    trace = json.loads(trace_text, parse_float=Decimal)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    launches, kernels = {}, {}
    for ev in events:
        cat, name = ev.get("cat", ""), ev.get("name", "")
        args = ev.get("args", {})
        ts, dur, corr = ev.get("ts", 0), ev.get("dur", 0), args.get("correlationId", 0)
        if not (ts > 0 and dur > 0 and corr > 0):
            continue
        if cat == "CUDA_Runtime" and "LaunchKernel" in name:
            launches[corr] = int(ts * 1000)
        elif (cat == "GPU_Kernel" or name.startswith("Kernel:")) and corr not in kernels:
            if name.startswith("Kernel: "):
                name = name[len("Kernel: "):]
            if "start_ns" in args and "end_ns" in args and args["end_ns"] >= args["start_ns"]:
                ns = args["end_ns"] - args["start_ns"]
            else:
                ns = int(dur * 1000)
            kernels[corr] = (name, ns)

    tolerance_ns = tolerance_ms * 1e6
    counts = Counter()
    for ts, frames in stacks:
        best, best_gap = None, None
        for corr, start in launches.items():
            gap = abs(ts - start)
            if gap < tolerance_ns and (best_gap is None or gap < best_gap):
                best, best_gap = corr, gap
        if best is not None and best in kernels:
            name, ns = kernels[best]
            stack = ";".join(frames + ["[GPU_Kernel]" + name])
            if gpu_ns is not None:
                gpu_ns[stack] = gpu_ns.get(stack, 0) + ns
        else:
            stack = ";".join(frames + ["[GPU_Launch_Pending]"])
        counts[stack] += 1
    return "".join(f"{stack} {count}\n" for stack, count in sorted(counts.items()))


def folded_text(weights):
    return "".join(f"{stack} {w}\n" for stack, w in sorted(weights.items()))


# ---- generated inputs ---------------------------------------------------------------

FRAMES = [
    "main", "run_worker", "Model.forward (model.py:40)", "<module> (serve.py:12)",
    "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >",
    "std::function<void (int)>::operator()() const", "torch::autograd::Engine::execute",
    "módulo_ñ (über.py:7)", "[libfoo.so+0x1f2]", "[unknown]", "operator new[]",
    "PyCFuncPtr_call", "_PyEval_EvalFrameDefault", "__libc_start_call_main",
    "c10::cuda::CUDAStream::stream() const", "Attention.forward (layers/attn.py:88)",
]
DROPPED = ["_start", "__libc_start_main", "<no-symbol>", "", "  "]
WRAPPERS = [
    "cudaLaunchKernel", "__cudaLaunchKernel", "cudaLaunchKernelExC",
    "__device_stub__Z10vector_addPfS_S_i", "void cudaLaunchKernel<float>(float*)",
    "cudaLaunchKernel_ptsz",
]
KERNELS = [
    "vector_add_kernel",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<"
    "at::native::FillFunctor<float> > >(int, float)",
    "ampere_sgemm_128x64_tn",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "triton_poi_fused_add_0", "kernel_ümlaut", "Kernel: nested_prefix",
]
RUNTIME_NAMES = ["cudaLaunchKernel", "cudaLaunchKernel_v7000", "__cudaLaunchKernel",
                 "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx"]
GRAPH_KERNELS = ["graph_gemm", "graph_bias_add", "graph_relu", "graph_softmax", "graph_copy"]


def random_stack(rng):
    if rng.random() < 0.02:
        return "_start;;__libc_start_main; <no-symbol> "  # nothing left: skipped
    frames = ["_start", "__libc_start_main"] if rng.random() < 0.5 else []
    for _ in range(rng.randint(1, 12)):
        r = rng.random()
        if r < 0.08:
            frames.append(rng.choice(DROPPED))
        elif r < 0.12:
            frames.append(" " + rng.choice(FRAMES) + "\t")
        else:
            frames.append(rng.choice(FRAMES))
    r = rng.random()
    if r < 0.9:
        frames.append(rng.choice(WRAPPERS))
    if r < 0.2:
        frames.insert(rng.randrange(len(frames)), rng.choice(WRAPPERS))
    if r < 0.3:
        frames.append("__cudaLaunchKernel")
    return ";".join(frames)


def us(ns):
    """Nanoseconds as the microseconds a Chrome trace holds (3 decimals)."""
    return Decimal(ns) / 1000


class Inputs:
    """A generated recording, kept in memory: CPU lines (with and without our
    [GPU_Kernel] leaf) and trace events. generate_inputs() feeds any object
    with these two methods (bench/merge_bench.py writes files instead)."""

    def __init__(self):
        self.cpu = []
        self.cpu_with_leaf = []
        self.events = []

    def add_cpu(self, line, line_with_leaf):
        self.cpu.append(line)
        self.cpu_with_leaf.append(line_with_leaf)

    def add_event(self, ev):
        self.events.append(ev)

    def cpu_text(self, leaf=False):
        return "".join(line + "\n" for line in (self.cpu_with_leaf if leaf else self.cpu))

    def trace_text(self, shape="object"):
        body = ",\n".join(dumps(ev) for ev in self.events)
        return trace_head(shape) + body + trace_tail(shape)


OTHER_DATA = '"otherData": {"version": "x", "odd": "]}\\" {[", "list": [1, {"a": []}]}'


def trace_head(shape="object"):
    if shape == "array":
        return "[\n"
    if shape == "object-other-first":
        return "{" + OTHER_DATA + ',\n"traceEvents": [\n'
    return '{"traceEvents": [\n'


def trace_tail(shape="object"):
    return {"array": "\n]\n", "object-other-first": "\n]}\n", "unterminated": ",\n"}.get(
        shape, "\n],\n" + OTHER_DATA + "}\n")


def dumps(ev):
    """JSON with Decimal numbers written exactly."""
    return json.dumps(ev, ensure_ascii=False, default=str).replace('"@', "").replace('@"', "")


def exact(value):
    """A number the JSON writer copies as is (dumps strips the markers)."""
    return f"@{value}@"


def runtime_event(name, pid, tid, start_ns, corr):
    return {"name": name, "cat": "CUDA_Runtime", "ph": "X", "pid": pid, "tid": tid,
            "ts": exact(us(start_ns)), "dur": exact(us(2500)),
            "args": {"correlationId": corr, "cbid": 211}}


def kernel_event(rng, name, start_ns, dur_ns, corr, style=None):
    style = style or rng.choice(["cat", "cat", "prefix"])
    ev = {"name": name, "cat": "GPU_Kernel", "ph": "X", "pid": 0, "tid": 7,
          "ts": exact(us(start_ns)), "dur": exact(us(dur_ns)),
          "args": {"correlationId": corr, "device": 0, "stream": 7}}
    if style == "prefix":
        ev = {"name": "Kernel: " + name, "ph": "X", "pid": 0, "tid": 7,
              "ts": ev["ts"], "dur": ev["dur"], "args": {"correlationId": corr}}
    if rng.random() < 0.7:
        ev["args"].update(start_ns=start_ns, end_ns=start_ns + dur_ns + rng.randint(0, 999))
    return ev


def noise_events(rng, t):
    return [
        {"name": "Memcpy HtoD", "cat": "GPU_Memcpy", "ph": "X", "pid": 0, "tid": 7,
         "ts": exact(us(t)), "dur": 1.5, "args": {"correlationId": 999999}},
        {"name": "Memset", "cat": "GPU_Memset", "ph": "X", "pid": 0, "tid": 7, "ts": exact(us(t)),
         "dur": 1, "args": {"correlationId": 999998}},
        {"name": "cudaMalloc", "cat": "CUDA_Runtime", "ph": "X", "pid": 1000, "tid": 1000,
         "ts": exact(us(t)), "dur": 3, "args": {"correlationId": 999997}},
        {"name": "cudaLaunchKernel", "cat": "CUDA_Runtime", "ph": "X", "pid": 1000,
         "tid": 1000, "ts": exact(us(t)), "dur": 0, "args": {"correlationId": 999996}},
        {"name": "stray", "cat": "GPU_Kernel", "ph": "X", "pid": 0, "tid": 7, "ts": exact(us(t)),
         "dur": 4, "args": {"correlationId": 0}},
        {"name": "thread_name", "ph": "M", "pid": 1000, "tid": 1000, "args": {"name": "main"}},
    ]


def cpu_line(rng, ts, pid, tid, stack):
    """One line, fields mostly split by one space, sometimes by more or a tab."""
    fields = [str(ts), "python3", str(pid), str(tid), str(rng.randint(0, 63))]
    line = " " if rng.random() < 0.02 else ""
    for field in fields:
        line += field + rng.choice([" ", " ", " ", "  ", "\t"])
    return line + stack


def generate_inputs(seed, n, tolerance_ms=10.0, namespace=False, graph_fraction=0.0,
                    with_noise=True, sink=None):
    """n CPU launches on 5 threads of 2 processes, at least 20 us apart, each
    with its runtime event within 3 us (clocks agree). Segments of launches
    the trace did not see (more than the tolerance away from any event),
    launches whose kernel is missing, runtime events with no CPU launch,
    kernels with no launch, second kernels on a correlation id, noise events.
    namespace: the trace knows process 2000 under other ids (a container).
    graph_fraction: launches that are cudaGraphLaunch with 5 kernels.
    Returns the sink (an Inputs unless one is given)."""
    rng = random.Random(seed)
    sink = sink if sink is not None else Inputs()
    threads = [(1000, 1000), (1000, 1001), (1000, 1002), (2000, 2000), (2000, 2003)]
    trace_ids = {t: t for t in threads}
    if namespace:
        trace_ids[(2000, 2000)], trace_ids[(2000, 2003)] = (7, 7), (7, 9)
    stacks = [random_stack(rng) for _ in range(max(20, min(n // 50, 5000)))]
    graph_stack = "main;run_graph (graphs.py:10);cudaGraphLaunch"
    gap_ns = int(3 * tolerance_ms * 1e6) + 1000
    t, corr = 5_000_000_000 + rng.randrange(10**9), 0
    traced, segment_left, held = True, rng.randint(50, 400), None
    for _ in range(n):
        if segment_left == 0:
            t += gap_ns
            traced, segment_left = rng.random() < 0.8, rng.randint(10, 400)
        segment_left -= 1
        t += rng.randint(20_000, 150_000)
        thread = rng.choice(threads)
        graph = rng.random() < graph_fraction
        stack = graph_stack if graph else rng.choice(stacks)
        kind = rng.random()
        if not (traced and kind < 0.04):  # else: the CPU side missed it
            leaf = "[GPU_Kernel]" + rng.choice(["vector_add_kernel", "<graph cudaGraphLaunch>"])
            line = cpu_line(rng, t, *thread, stack)
            if held is None and rng.random() < 0.01:
                held = (line, line + ";" + leaf)  # written after the next: arrival order
            else:
                sink.add_cpu(line, line + ";" + leaf)
                if held is not None:
                    sink.add_cpu(*held)
                    held = None
        if not traced:
            continue
        corr += 1
        start = t + rng.randint(-3000, 3000)
        name = "cudaGraphLaunch" if graph else rng.choice(RUNTIME_NAMES)
        sink.add_event(runtime_event(name, *trace_ids[thread], start, corr))
        if 0.04 <= kind < 0.08:
            continue  # its kernel was not recorded: pending
        kernel_start = start + rng.randint(5_000, 50_000)
        names = GRAPH_KERNELS if graph else [rng.choice(KERNELS)]
        if kind > 0.97 and not graph:
            names = names + ["second_kernel_same_id"]  # the established tool uses the first
        for name in names:
            dur = rng.randint(1_000, 900_000)
            sink.add_event(kernel_event(rng, name, kernel_start, dur, corr))
            kernel_start += dur
        if with_noise and rng.random() < 0.01:
            for ev in noise_events(rng, t):
                sink.add_event(ev)
    if held is not None:
        sink.add_cpu(*held)
    for k in range(max(1, n // 50)):  # kernels whose launch the trace lost
        sink.add_event(kernel_event(rng, "orphan_kernel", t + k * 1000, 2000, corr + 1 + k))
    return sink


pytestmark = needs_binary(NCCLPROBE)


# ---- same bytes as the established tool ------------------------------------------

@pytest.mark.parametrize("seed,n,tolerance_ms,namespace", [
    (1, 1500, None, False),
    (2, 1500, None, True),
    (3, 1200, 0.002, False),  # 2 us: launches whose event is 2-3 us off stay pending
    (4, 1200, 0.05, True),
    (5, 300, 1.0, False),
])
def test_output_is_byte_identical_to_the_established_tool(tmp_path, seed, n, tolerance_ms,
                                                          namespace):
    tol = 10.0 if tolerance_ms is None else tolerance_ms
    inputs = generate_inputs(seed, n, tolerance_ms=tol, namespace=namespace)
    trace = inputs.trace_text()
    args = [] if tolerance_ms is None else ["--tolerance-ms", str(tolerance_ms)]
    ns_weights = {}
    expected = reference_merge(inputs.cpu_text(), trace, tol, gpu_ns=ns_weights)

    theirs = merge(tmp_path, inputs.cpu_text(), trace, *args, name="plain")
    assert theirs.returncode == 0, theirs.stderr
    assert theirs.text == expected
    assert theirs.gpu_ns == folded_text(ns_weights)

    # our own recordings end every stack with a [GPU_Kernel] leaf: dropped first
    ours = merge(tmp_path, inputs.cpu_text(leaf=True), trace, *args, name="leaf")
    assert ours.returncode == 0, ours.stderr
    assert ours.text == expected

    counts = folded_totals(expected)
    assert any("[GPU_Launch_Pending]" in s for s in counts)
    assert sum(1 for s in counts if "[GPU_Kernel]" in s) > 5
    assert "malformed" not in theirs.stderr or " 0 malformed CPU lines and 0" in theirs.stderr


@pytest.mark.parametrize("shape", ["array", "object-other-first", "unterminated"])
def test_every_trace_shape_gives_the_same_output(tmp_path, shape):
    inputs = generate_inputs(11, 400)
    expected = reference_merge(inputs.cpu_text(), inputs.trace_text())
    m = merge(tmp_path, inputs.cpu_text(), inputs.trace_text(shape))
    assert m.returncode == 0, m.stderr
    assert m.text == expected


def test_frames_are_normalized_like_the_established_tool(tmp_path):
    cpu = ("100000000 p 1 1 0 _start; __libc_start_main ;main;;  <no-symbol>;a b<int, 2>;"
           "__device_stub__Z1kv;cudaLaunchKernel;__cudaLaunchKernel\n"
           "200000000 p 1 1 0 _start;__libc_start_main\n"
           "300000000 p 1 1 0 main;x;[GPU_Kernel]k\n")
    trace = json.dumps({"traceEvents": []})
    m = merge(tmp_path, cpu, trace)
    assert m.returncode == 0, m.stderr
    assert m.text == ("main;a b<int, 2>;cudaLaunchKernel;[GPU_Launch_Pending] 1\n"
                      "main;x;[GPU_Launch_Pending] 1\n")
    assert m.text == reference_merge(cpu.replace(";[GPU_Kernel]k", ""), trace)
    assert m.gpu_ns == ""


# ---- where ncclprobe differs on purpose ----------------------------------------------

def test_graph_launch_writes_the_stack_once_per_kernel(tmp_path):
    cpu = ("5000000000 p 1 1 0 main;step (train.py:3);cudaGraphLaunch;[GPU_Kernel]<graph x>\n"
           "5001000000 p 1 1 0 main;eager;cudaLaunchKernel\n")
    names = ["gemm", "bias", "relu", "softmax", "copy"]
    kernels = [ev_kernel(n, 5000010 + i * 10, 1 + i, 42, start_ns=5000010000 + i * 10000,
                         end_ns=5000010000 + i * 10000 + 1000 * (i + 1))
               for i, n in enumerate(names)]
    trace = trace_of(ev_launch(1, 1, 5000000.002, 42, "cudaGraphLaunch"), *kernels,
                     ev_launch(1, 1, 5001000.001, 43), ev_kernel("eager_k", 5001010, 2, 43))
    m = merge(tmp_path, cpu, trace, "--summary")
    assert m.returncode == 0, m.stderr
    graph = "main;step (train.py:3);cudaGraphLaunch;[GPU_Kernel]"
    assert m.text == "".join(sorted([f"{graph}{n} 1\n" for n in names] +
                                    ["main;eager;cudaLaunchKernel;[GPU_Kernel]eager_k 1\n"]))
    assert folded_totals(m.gpu_ns) == {**{graph + n: 1000 * (i + 1) for i, n in enumerate(names)},
                                "main;eager;cudaLaunchKernel;[GPU_Kernel]eager_k": 2000}
    assert "CPU launches: 2 (matched 2, pending 0" in m.stdout
    assert "kernels: 6 (used 6, unused 0)" in m.stdout
    # the established tool knows no graph launches: the graph launch takes the
    # nearest cudaLaunchKernel event, 1 ms later
    assert "cudaGraphLaunch;[GPU_Kernel]eager_k 1" in reference_merge(
        cpu.replace(";[GPU_Kernel]<graph x>", ""), trace)


def two_threads_1us_apart(trace_pids):
    """Thread 11 launches at t, thread 12 at t + 1 us. Each one's runtime event
    is 0.8-0.9 us after its launch, so thread 12's launch is nearer to thread
    11's event (0.2 us) than to its own (0.9 us)."""
    cpu = ("7000000000 w 10 11 0 main;worker_a;cudaLaunchKernel\n"
           "7000001000 w 10 12 1 main;worker_b;cudaLaunchKernel\n")
    pid, (tid_a, tid_b) = trace_pids
    trace = trace_of(ev_launch(pid, tid_a, 7000000.800, 1), ev_launch(pid, tid_b, 7000001.900, 2),
                     ev_kernel("kernel_a", 7000010, 5, 1), ev_kernel("kernel_b", 7000020, 7, 2))
    return cpu, trace


def test_one_to_one_per_thread_where_the_established_tool_misassigns(tmp_path):
    cpu, trace = two_threads_1us_apart((10, (11, 12)))
    m = merge(tmp_path, cpu, trace)
    assert m.returncode == 0, m.stderr
    assert m.text == ("main;worker_a;cudaLaunchKernel;[GPU_Kernel]kernel_a 1\n"
                      "main;worker_b;cudaLaunchKernel;[GPU_Kernel]kernel_b 1\n")
    # nearest-anywhere gives both launches thread 11's kernel, kernel_b to no one
    assert reference_merge(cpu, trace) == (
        "main;worker_a;cudaLaunchKernel;[GPU_Kernel]kernel_a 1\n"
        "main;worker_b;cudaLaunchKernel;[GPU_Kernel]kernel_a 1\n")


def test_pool_of_events_with_foreign_thread_ids_is_one_to_one(tmp_path):
    """The trace knows the threads under other ids (a container): its events
    form a pool. Without thread ids, launches 1 us apart with a 0.8-0.9 us
    clock gap cannot be told apart, but each event still goes to one launch."""
    cpu, trace = two_threads_1us_apart((4, (5, 6)))
    m = merge(tmp_path, cpu, trace)
    assert m.returncode == 0, m.stderr
    kernels = sorted(s.rsplit("]", 1)[1] for s in folded_totals(m.text))
    assert kernels == ["kernel_a", "kernel_b"]
    # 5 us apart they are told apart
    cpu5 = cpu.replace("7000001000 w", "7000005000 w")
    trace5 = trace.replace("7000001.9", "7000005.9")
    assert merge(tmp_path, cpu5, trace5, name="5us").text == (
        "main;worker_a;cudaLaunchKernel;[GPU_Kernel]kernel_a 1\n"
        "main;worker_b;cudaLaunchKernel;[GPU_Kernel]kernel_b 1\n")


def test_a_launch_event_is_used_once(tmp_path):
    """Two CPU launches, one runtime event: the nearer launch gets it."""
    cpu = ("1000000000 w 1 1 0 main;a;cudaLaunchKernel\n"
           "1000005000 w 1 1 0 main;b;cudaLaunchKernel\n")
    trace = trace_of(ev_launch(1, 1, 1000004.0, 9), ev_kernel("k", 1000010, 1, 9))
    m = merge(tmp_path, cpu, trace, "--summary")
    assert m.text == ("main;a;cudaLaunchKernel;[GPU_Launch_Pending] 1\n"
                      "main;b;cudaLaunchKernel;[GPU_Kernel]k 1\n")
    assert "runtime launch events: 1 (used 1, unused 0" in m.stdout


def test_duplicate_correlation_ids_last_launch_first_kernel(tmp_path):
    cpu = "2000000000 w 1 1 0 main;cudaLaunchKernel\n"
    trace = trace_of(ev_launch(1, 1, 1990000.0, 5), ev_launch(1, 1, 2000000.5, 5),
                     ev_kernel("first", 2000010, 1, 5), ev_kernel("second", 2000020, 1, 5))
    m = merge(tmp_path, cpu, trace, "--summary")
    assert m.text == "main;cudaLaunchKernel;[GPU_Kernel]first 1\n" == reference_merge(cpu, trace)
    assert "1 replaced by a later event with the same correlationId" in m.stdout


# ---- GPU nanoseconds ----------------------------------------------------------------

def test_gpu_ns_output_weights(tmp_path):
    big = 9_007_199_254_740_993  # > 2^53: a double cannot hold it
    cpu = ("3000000000 w 1 1 0 main;exact;cudaLaunchKernel\n"
           "3001000000 w 1 1 0 main;from_dur;cudaLaunchKernel\n"
           "3002000000 w 1 1 0 main;from_dur;cudaLaunchKernel\n"
           "3003000000 w 1 1 0 main;pending;cudaLaunchKernel\n")
    trace = trace_of(
        ev_launch(1, 1, 3000000.0, 1), ev_kernel("k_exact", 3000010, 9.0, 1, start_ns=big,
                                                 end_ns=big + 12345),
        ev_launch(1, 1, 3001000.0, 2), ev_kernel("k_dur", 3001010, 1.234, 2),
        ev_launch(1, 1, 3002000.0, 3), ev_kernel("k_dur", 3002010, 0.001, 3),
        ev_launch(1, 1, 3003000.0, 4))
    m = merge(tmp_path, cpu, trace, "--summary")
    assert m.returncode == 0, m.stderr
    assert m.gpu_ns == ("main;exact;cudaLaunchKernel;[GPU_Kernel]k_exact 12345\n"
                        "main;from_dur;cudaLaunchKernel;[GPU_Kernel]k_dur 1235\n")
    assert folded_totals(m.text)["main;from_dur;cudaLaunchKernel;[GPU_Kernel]k_dur"] == 2
    assert "main;pending;cudaLaunchKernel;[GPU_Launch_Pending] 1" in m.text


def test_timestamps_keep_every_nanosecond(tmp_path):
    """ts 9007199254.740993 us is 9007199254740993 ns (> 2^53): read from the
    text, it matches a CPU launch at that exact ns with a 1 ns tolerance; a
    double would be off by one."""
    cpu = "9007199254740993 w 1 1 0 main;cudaLaunchKernel\n"
    trace = ('{"traceEvents":[{"name":"cudaLaunchKernel","cat":"CUDA_Runtime","ph":"X",'
             '"pid":1,"tid":1,"ts":9007199254740.993,"dur":1.5,"args":{"correlationId":1}},'
             '{"name":"k","cat":"GPU_Kernel","ph":"X","pid":0,"tid":7,"ts":9007199254741.5,'
             '"dur":1,"args":{"correlationId":1}}]}')
    m = merge(tmp_path, cpu, trace, "--tolerance-ms", "0.000001")
    assert m.text == "main;cudaLaunchKernel;[GPU_Kernel]k 1\n", m.stderr
    m = merge(tmp_path, cpu.replace("993 w", "994 w"), trace, "--tolerance-ms", "0.000001",
              name="off")
    assert m.text == "main;cudaLaunchKernel;[GPU_Launch_Pending] 1\n"


def test_kernel_names_cannot_break_the_folded_format(tmp_path):
    cpu = "4000000000 w 1 1 0 main;cudaLaunchKernel\n"
    trace = trace_of(ev_launch(1, 1, 4000000.0, 1),
                     ev_kernel("odd;name\nwith\"quote", 4000010, 1, 1))
    m = merge(tmp_path, cpu, trace)
    assert m.text == 'main;cudaLaunchKernel;[GPU_Kernel]odd_name_with"quote 1\n'


# ---- malformed input -----------------------------------------------------------------

def test_malformed_lines_and_events_are_skipped_and_reported(tmp_path):
    cpu = ("1000000000 w 1 1 0 main;good;cudaLaunchKernel\n"
           "garbage\n"
           "\n"
           "12x w 1 1 0 main;cudaLaunchKernel\n"
           "1000 w pid 1 0 main;cudaLaunchKernel\n"
           "1000 w 1 1 cpu main;cudaLaunchKernel\n"
           "1000 w 1 1 0\n"
           "-5 w 1 1 0 main;cudaLaunchKernel\n"
           "1100000000 w 1 1 0 main;good2;cudaLaunchKernel\n")
    trace = "\n".join([
        '{"traceEvents": [',
        json.dumps(ev_launch(1, 1, 1000000.0, 1)) + ",",
        json.dumps(ev_kernel("good_k", 1000010, 1, 1)) + ",",
        '{"name": "cudaLaunchKernel", "cat": "CUDA_Runtime", "ts": "1", "dur": 1, '
        '"args": {"correlationId": 2}},',
        '{"name": "k", "cat": "GPU_Kernel", "ts": 1, "dur": 1, "args": [1]},',
        '{"name": "k", "cat": "GPU_Kernel", "ts": 1, "dur": 1, "args": {"correlationId": "3"}},',
        '17, "text", [1, 2],',
        '{"name": bad json},',
        '{"cat": "GPU_Kernel", "ts": 1, "dur": 1, "args": {"correlationId": 4}},',
        json.dumps(ev_launch(1, 1, 1100000.0, 5)) + ",",
        json.dumps(ev_kernel("good_k2", 1100010, 1, 5)) + ",",
        '{"name": "cut", "cat": "GPU_Kernel", "ts": 1100020, "dur": 1, "args": {"corr',
    ])
    m = merge(tmp_path, cpu, trace)
    assert m.returncode == 0, m.stderr
    assert m.text == ("main;good2;cudaLaunchKernel;[GPU_Kernel]good_k2 1\n"
                      "main;good;cudaLaunchKernel;[GPU_Kernel]good_k 1\n")
    err = m.stderr
    for where in [":2: skipped line: fewer than 6 fields",
                  ":4: skipped line: timestamp is not a non-negative integer",
                  ":5: skipped line: pid or tid is not a number",
                  ":6: skipped line: cpu is not a number",
                  ":7: skipped line: fewer than 6 fields"]:
        assert "stacks.ext.folded" + where in err
    assert ":8: skipped line" not in err  # only the first 5 are shown
    assert "stacks.ext.folded: 6 malformed lines skipped (the first 5 shown)" in err
    for where in [':4: skipped event: "ts" is missing or not a number',
                  ':5: skipped event: "args" is missing or not an object',
                  ':6: skipped event: "args.correlationId" is missing or not an integer',
                  ":7: skipped event: not a JSON object"]:
        assert "trace.json" + where in err
    assert "trace.json: 9 malformed events skipped (the first 5 shown)" in err
    assert "merged 2 CPU launches: 2 matched, 0 pending; 6 malformed CPU lines and 9 " \
           "malformed trace events skipped" in err


def test_malformed_counts_in_the_summary(tmp_path):
    trace = ('{"traceEvents": [\n{"name": "k", "cat": "GPU_Kernel", "ts": true}, 3,\n'
             '{"name": "cut", "cat": "GPU_Kernel", "ts": 1')
    m = merge(tmp_path, "1 w 1 1 0 main;cudaLaunchKernel\nx\n", trace, "--summary")
    assert m.returncode == 0
    assert "skipped: 1 malformed CPU lines, 0 CPU lines with no frames left, 3 malformed trace " \
           "events" in m.stdout
    assert "trace.json:3: skipped event: incomplete event at the end of the file" in m.stderr


@pytest.mark.parametrize("trace,message", [
    ("hello world\n", "trace.json: line 1: not JSON: expected '{' or '['"),
    ("", "trace.json: line 1: empty file"),
    ("\n\n  42", "trace.json: line 3: not JSON"),
    ('{"otherData": {}}', 'no "traceEvents" array'),
    ('{"traceEvents" 5}', "expected ':'"),
    ("{garbage}", "expected a member name"),
])
def test_a_trace_that_is_not_one_fails_cleanly(tmp_path, trace, message):
    m = merge(tmp_path, "1 w 1 1 0 main;cudaLaunchKernel\n", trace)
    assert m.returncode == FAILURE
    assert message in m.stderr
    assert len(m.stderr.strip().splitlines()) == 1, m.stderr
    assert m.text is None and not list(m.out_path.parent.glob("*.tmp"))


def test_missing_inputs_fail_with_one_line(tmp_path):
    for which in ["--cpu", "--gpu"]:
        paths = {"--cpu": tmp_path / "c", "--gpu": tmp_path / "g"}
        paths["--cpu"].write_text("1 w 1 1 0 main;cudaLaunchKernel\n")
        paths["--gpu"].write_text("[]")
        paths[which] = tmp_path / "does-not-exist"
        proc = run_ncclprobe(["merge", "--cpu", paths["--cpu"], "--gpu", paths["--gpu"],
                              "-o", tmp_path / "out"])
        assert proc.returncode == FAILURE
        assert proc.stderr.strip() == \
            f"ncclprobe: error: cannot open {tmp_path}/does-not-exist: No such file or directory"
        assert not (tmp_path / "out").exists()


def test_a_failed_merge_leaves_the_old_output_alone(tmp_path):
    d = tmp_path / "m"
    m = merge(tmp_path, "1 w 1 1 0 main;cudaLaunchKernel\n", "[]")
    assert m.returncode == 0 and m.text == "main;cudaLaunchKernel;[GPU_Launch_Pending] 1\n"
    (d / "trace.json").write_text("not json")
    proc = run_ncclprobe(["merge", "--cpu", d / "stacks.ext.folded", "--gpu", d / "trace.json",
                          "-o", d / "out.folded"])
    assert proc.returncode == FAILURE
    assert (d / "out.folded").read_text() == m.text
    assert sorted(p.name for p in d.iterdir()) == ["ns.folded", "out.folded",
                                                   "stacks.ext.folded", "trace.json"]


def test_unwritable_output_fails(tmp_path):
    m = merge(tmp_path, "1 w 1 1 0 main;cudaLaunchKernel\n", "[]", "-o",
              str(tmp_path / "no" / "such" / "dir" / "out"), gpu_ns=False)
    assert m.returncode == FAILURE
    assert "cannot write" in m.stderr and "No such file or directory" in m.stderr


@pytest.mark.parametrize("args,message", [
    ([], "merge needs --cpu, --gpu and -o"),
    (["--cpu", "a", "--gpu", "b"], "merge needs --cpu, --gpu and -o"),
    (["--cpu", "a", "--gpu", "b", "-o", "c", "--tolerance-ms", "abc"],
     "invalid --tolerance-ms 'abc'"),
    (["--cpu", "a", "--gpu", "b", "-o", "c", "--tolerance-ms", "0"], "invalid --tolerance-ms '0'"),
    (["--cpu", "a", "--gpu", "b", "-o", "c", "--frobnicate"], "unrecognized option"),
    (["--cpu", "a", "--gpu", "b", "-o", "c", "extra"], "unexpected argument 'extra'"),
    (["--cpu", "a", "--gpu", "b", "-o", "c", "--gpu-ns-output", "c"], "name the same file"),
])
def test_bad_options_are_usage_errors(tmp_path, args, message):
    proc = run_ncclprobe(["merge", *args], cwd=tmp_path)
    assert proc.returncode == USAGE
    assert message in proc.stderr
    assert "usage: ncclprobe merge" in proc.stderr
    assert not (tmp_path / "c").exists()


def test_help(tmp_path):
    proc = run_ncclprobe(["merge", "--help"])
    assert proc.returncode == 0 and "--tolerance-ms" in proc.stdout


# ---- --summary and --quiet -------------------------------------------------------------

def test_summary(tmp_path):
    cpu = "".join(f"{1_000_000_000 + i * 1_000_000} w 1 1 0 main;l{i % 2};cudaLaunchKernel\n"
                  for i in range(6))
    events = []
    for i in range(5):  # the 6th launch has no runtime event
        ts = 1_000_000 + i * 1000
        events += [ev_launch(1, 1, ts + 0.5, i + 1),
                   ev_kernel("small" if i < 3 else "big", ts + 10, 2.0 if i < 3 else 100.0, i + 1)]
    events += [ev_kernel("lost", 1, 1, 99), {"name": "Memcpy", "cat": "GPU_Memcpy", "ph": "X"},
               {"name": "process_name", "ph": "M", "pid": 1}]
    m = merge(tmp_path, cpu, trace_of(*events), "--summary", "--tolerance-ms", "0.5")
    assert m.returncode == 0, m.stderr
    lines = m.stdout.splitlines()
    assert lines[0].split() == ["count", "total_gpu_ms", "mean_us", "kernel"]
    assert lines[1].split() == ["2", "0.200", "100.000", "big"]
    assert lines[2].split() == ["3", "0.006", "2.000", "small"]
    assert "CPU launches: 6 (matched 5, pending 1: 1 without a runtime event, 0 without a " \
           "kernel)" in m.stdout
    assert "runtime launch events: 5 (used 5, unused 0;" in m.stdout
    assert "kernels: 6 (used 5, unused 1)" in m.stdout
    assert "other trace events: 1 GPU_Memcpy, 0 GPU_Memset, 1 metadata, 0 other" in m.stdout
    assert "merged 6 CPU launches: 5 matched, 1 pending" in m.stderr


def test_quiet(tmp_path):
    m = merge(tmp_path, "garbage\n1 w 1 1 0 main;cudaLaunchKernel\n", "[1]", "--quiet")
    assert m.returncode == 0 and m.stderr == ""
    assert m.text == "main;cudaLaunchKernel;[GPU_Launch_Pending] 1\n"


def launches_every_20us(n, traced):
    """n launches 20 us apart on one thread, stack f<i % 3> launching kernel
    k<i % 3>; the trace has the runtime event (0.5 us later) and kernel of
    those for which traced(i) is true."""
    cpu, events = "", []
    for i in range(n):
        t = 1_000_000_000 + i * 20_000
        cpu += f"{t} p 1 1 0 main;f{i % 3};cudaLaunchKernel\n"
        if traced(i):
            events += [ev_launch(1, 1, (t + 500) / 1000, i + 1),
                       ev_kernel(f"k{i % 3}", (t + 5000) / 1000, 2.0, i + 1)]
    return cpu, trace_of(*events)


@pytest.mark.parametrize("case,traced", [
    ("trace started 1 ms late", lambda i: i >= 50),
    ("trace stopped early", lambda i: i < 150),
    ("runtime records lost", lambda i: i % 17 != 5),
])
def test_launches_without_an_event_do_not_shift_their_neighbours(tmp_path, case, traced):
    """Launches without a runtime event stay pending; no launch takes its
    neighbour's event (taking launches in time order would shift every
    later pair by one)."""
    cpu, trace = launches_every_20us(200, traced)
    m = merge(tmp_path, cpu, trace)
    assert m.returncode == 0, m.stderr
    missing = sum(1 for i in range(200) if not traced(i))
    counts = folded_totals(m.text)
    for stack, count in counts.items():
        f, leaf = stack.split(";")[1], stack.split(";")[-1]
        assert leaf in (f"[GPU_Kernel]k{f[1:]}", "[GPU_Launch_Pending]"), (case, stack)
    assert sum(c for s, c in counts.items() if "Pending" in s) == missing
