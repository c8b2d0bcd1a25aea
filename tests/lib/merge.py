"""`ncclprobe merge` (CPU launch stacks + a CUPTI Chrome trace -> folded
stacks) run on inputs a test writes, and the trace events those inputs are
made of."""

import json
import subprocess

from lib.paths import NCCLPROBE


class Merge:
    """What one `ncclprobe merge` run left: its exit status and messages, and the
    text of its outputs (None where one was not written)."""

    def __init__(self, proc, out, gpu_ns):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.out_path = out
        self.text = out.read_text() if out.exists() else None
        self.gpu_ns = gpu_ns.read_text() if gpu_ns and gpu_ns.exists() else None


def merge(tmp_path, cpu_text, trace_text, *args, name="m", gpu_ns=True):
    """Writes the inputs (str or bytes) to tmp_path/name and runs `ncclprobe merge`
    on them (with --gpu-ns-output when gpu_ns); returns its Merge."""
    d = tmp_path / name
    d.mkdir()
    cpu, trace = d / "stacks.ext.folded", d / "trace.json"
    out, ns = d / "out.folded", d / "ns.folded"
    cpu.write_bytes(cpu_text.encode() if isinstance(cpu_text, str) else cpu_text)
    trace.write_bytes(trace_text.encode() if isinstance(trace_text, str) else trace_text)
    argv = [NCCLPROBE, "merge", "--cpu", cpu, "--gpu", trace, "-o", out, *args]
    if gpu_ns:
        argv += ["--gpu-ns-output", ns]
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120)
    return Merge(proc, out, ns if gpu_ns else None)


def ev_launch(pid, tid, ts_us, corr, name="cudaLaunchKernel"):
    """A CUDA_Runtime launch event of a CUPTI trace (times in us)."""
    return {"name": name, "cat": "CUDA_Runtime", "ph": "X", "pid": pid, "tid": tid,
            "ts": ts_us, "dur": 3.0, "args": {"correlationId": corr, "cbid": 211}}


def ev_kernel(name, ts_us, dur_us, corr, **args):
    """A GPU_Kernel event of a CUPTI trace (times in us; args added to its args)."""
    return {"name": name, "cat": "GPU_Kernel", "ph": "X", "pid": 0, "tid": 7, "ts": ts_us,
            "dur": dur_us, "args": {"correlationId": corr, **args}}


def trace_of(*events):
    """The text of a trace.json holding events."""
    return json.dumps({"traceEvents": list(events)})
