#!/usr/bin/env python3
"""gpu-check.py - validates ncclprobe on a real GPU machine (root, PyTorch with
CUDA). Records a PyTorch program under `ncclprobe record -- ...` and reports
what fired, to answer what no CPU-only test can:

- eager kernels: which launch APIs PyTorch uses, how kernels are named;
- a CUDA graph capture + replays: what cudaGraphLaunch looks like, and
  (issue 20) every replayed kernel under the line that captured it - the
  model line `eager_step`'s matmul and softmax, inside `with torch.cuda.graph`;
  and under `record --cupti`, every replayed kernel record tied to its node by
  CUPTI's node id, with its GPU time under that line;
- a torch.compile'd (Triton) function: Triton launches through cuLaunchKernel;
- torch.distributed with NCCL, world size 1: what the NCCL probes see;
- whether libcudart's launches reach libcuda's exported cuLaunchKernel*
  (then ncclprobe reports them as nested, not twice);
- the live path (issue 18): a PyTorch process already running eager, CUDA
  graph and Triton work, with no CUPTI library at its start, gets
  libncclprobe_cupti.so loaded by `ncclprobe record --pid P --cupti`: its
  kernels must come named, with GPU times, graph replays with every kernel,
  and the process must go on unharmed (it checks its own results);
- the agent's fast path (issue 21): the same workload under `record --cupti`
  with `--launch-probes int3` and with `--launch-probes auto` must record the
  same launches (by API, by kernel) with as many GPU records matched, the
  auto run taking launches at the library's marker (the real CUPTI callback,
  inside the launch call, which the CPU-only tests only have a test double of).

    sudo tools/gpu-check.py [--ncclprobe build/ncclprobe] [--out DIR] [--skip-live]

Prints a Markdown report and writes it to DIR/gpu-check.md."""

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOAD = r'''
import os, sys, time
import torch

dev = torch.device("cuda")
x = torch.randn(1024, 1024, device=dev)

def eager_step(a):
    return torch.softmax(a @ a + 1.0, dim=-1)

for _ in range(20):
    y = eager_step(x)
torch.cuda.synchronize()

static_in = torch.randn(1024, 1024, device=dev)
g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        eager_step(static_in)
torch.cuda.current_stream().wait_stream(s)
with torch.cuda.graph(g):
    static_out = eager_step(static_in)
for _ in range(10):
    g.replay()
torch.cuda.synchronize()

try:
    compiled = torch.compile(lambda a: (a * 2.0).relu() + a.sin())
    for _ in range(10):
        compiled(x)
    torch.cuda.synchronize()
    print("compiled: ok")
except Exception as exc:
    print(f"compiled: skipped ({exc.__class__.__name__}: {exc})")

try:
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1)
    t = torch.ones(1 << 20, device=dev)
    for _ in range(5):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print("nccl: ok")
except Exception as exc:
    print(f"nccl: skipped ({exc.__class__.__name__}: {exc})")
'''


LIVE_WORKLOAD = r'''
import signal, sys, time
import torch

dev = torch.device("cuda")
torch.manual_seed(0)
x = torch.randn(512, 512, device=dev)

def step(a):
    return torch.softmax(a @ a + 1.0, dim=-1)

expected = step(x).sum().item()
static_in = x.clone()
g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        step(static_in)
torch.cuda.current_stream().wait_stream(s)
with torch.cuda.graph(g):
    static_out = step(static_in)
try:
    compiled = torch.compile(lambda a: (a * 2.0).relu() + a.sin())
    compiled_expected = compiled(x).sum().item()
except Exception as exc:
    compiled = None
    print(f"compiled: skipped ({exc.__class__.__name__})", flush=True)
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
print(f"ready {__import__('os').getpid()}", flush=True)
bad = rounds = 0
while not stop:
    got = step(x).sum().item()
    g.replay()
    replayed = static_out.sum().item()
    if abs(got - expected) > 1e-3 * abs(expected) or abs(replayed - expected) > 1e-3 * abs(expected):
        bad += 1
    if compiled is not None and abs(compiled(x).sum().item() - compiled_expected) > 1e-3 * abs(compiled_expected):
        bad += 1
    rounds += 1
    time.sleep(0.002)
print(f"rounds={rounds} bad={bad}", flush=True)
sys.exit(1 if bad else 0)
'''


def live_check(args, out):
    """The live path: the CUPTI library loaded into a running PyTorch process."""
    script = out / "live_workload.py"
    script.write_text(LIVE_WORKLOAD)
    app = subprocess.Popen([args.python, str(script)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    line = app.stdout.readline()
    if not line.startswith("ready "):
        app.kill()
        return ["## Live injection", "", f"workload did not start: {line!r}",
                app.stderr.read()[-2000:]], False
    time.sleep(5)  # steady state, compiled and captured before we come
    rec = out / "live_rec"
    proc = subprocess.run([args.ncclprobe, "record", "--pid", str(app.pid), "--cupti", "-o",
                           str(rec), "--duration", "10"], capture_output=True, text=True,
                          timeout=300)
    time.sleep(2)
    app.send_signal(15)
    app_out, app_err = app.communicate(timeout=120)
    summary = json.loads((rec / "summary.json").read_text())
    launches = [json.loads(l) for l in (rec / "launches.jsonl").read_text().splitlines() if l]
    cupti = summary["targets"][0].get("cupti", {})
    matched = [l for l in launches if l.get("gpu_status") == "matched"]
    unnamed = collections.Counter(l["kernel"] for l in launches
                                  if l["kernel"].startswith("<unnamed"))
    graphs = [l for l in matched if l["api"].startswith(("cudaGraphLaunch", "cuGraphLaunch"))]
    gpu_ns = sum(r["end_ns"] - r["start_ns"] for l in matched for r in l["gpu"])
    ok = (proc.returncode == 0 and app.returncode == 0 and cupti.get("origin") == "injected"
          and cupti.get("status") == "active" and matched and not unnamed and gpu_ns > 0 and
          (not graphs or all(len(l["gpu"]) > 1 for l in graphs)))
    lines = ["## Live injection (`record --pid P --cupti` into a running PyTorch process)", "",
             f"- result: {'PASS' if ok else 'FAIL'}",
             f"- ncclprobe exit {proc.returncode}; workload exit {app.returncode} "
             f"({app_out.strip().splitlines()[-1] if app_out.strip() else ''})",
             f"- cupti: {json.dumps(cupti)}",
             f"- launches {len(launches)}, matched {len(matched)}, GPU time {gpu_ns / 1e6:.1f} ms",
             f"- graph launches matched {len(graphs)}, kernels per replay "
             f"{sorted(set(len(l['gpu']) for l in graphs))}",
             f"- unnamed kernels: {dict(unnamed)}",
             "- kernels: " + ", ".join(sorted({l['kernel'] for l in matched})[:15]),
             "", "stderr (last lines):", "```",
             "\n".join(proc.stderr.strip().splitlines()[-10:]), "```"]
    return lines, ok


def graph_check(rec):
    """Each kernel a graph replay ran is counted under the capture: the
    workload's `eager_step` (the model line) below `[graph capture]`, once per
    replay; nothing replayed stays an unattributed `<graph ...>` leaf."""
    replayed, unattributed = collections.Counter(), 0
    for line in (rec / "launches.folded").read_text().splitlines():
        stack, n = line.rsplit(" ", 1)
        frames = stack.split(";")
        if "[graph capture]" in frames:
            capture = frames[frames.index("[graph capture]") + 1:]
            site = next((f for f in capture if f.startswith("eager_step (")), None)
            replayed[(site, frames[-1])] += int(n)
        elif frames[-1].startswith("[GPU_Kernel]<graph"):
            unattributed += int(n)
    ok = bool(replayed) and all(site for site, _ in replayed) and not unattributed and all(
        n % 10 == 0 for n in replayed.values())  # 10 replays
    lines = ["## CUDA graph replays by capture line (issue 20)", "",
             f"- {'OK' if ok else 'FAILED'}: {sum(replayed.values())} replayed kernels, "
             f"{unattributed} graph launches unattributed"]
    lines += [f"- {n:5d}  {site}  {leaf}" for (site, leaf), n in replayed.most_common(20)]
    return lines, ok


def graph_gpu_check(args, out):
    """With the CUPTI library from the start (record --cupti): every kernel
    record of a graph replay is tied to its node by CUPTI's node id and sits,
    with its GPU time, under `eager_step`'s line below `[graph capture]`."""
    script = out / "workload.py"
    rec = out / "rec_cupti"
    proc = subprocess.run([args.ncclprobe, "record", "--cupti", "-o", str(rec), "--",
                           args.python, str(script)], capture_output=True, text=True,
                          timeout=900)
    launches = [json.loads(l) for l in (rec / "launches.jsonl").read_text().splitlines() if l]
    stacks = {s["stack_id"]: s["frames"]
              for s in map(json.loads, (rec / "stacks.jsonl").read_text().splitlines())}
    graphs = [l for l in launches if l["api"].startswith(("cudaGraphLaunch", "cuGraphLaunch"))]
    records = [r for l in graphs for r in l.get("gpu", []) if r.get("type") == "kernel"]
    by = collections.Counter(r.get("capture_by", "not tied") for r in records)
    sites = collections.Counter()
    for r in records:
        frames = stacks.get(r.get("capture_stack_id"), [])
        capture = frames[frames.index("[graph capture]") + 1:] if "[graph capture]" in frames else []
        sites[next((f for f in capture if f.startswith("eager_step (")), None)] += 1
    gpu_ns_lines = [l for l in (rec / "merged.gpu_ns.folded").read_text().splitlines()
                    if "[graph capture]" in l and "eager_step (" in l]
    ok = (proc.returncode == 0 and bool(records) and by.get("node") == len(records) and
          None not in sites and bool(gpu_ns_lines))
    return ["## CUDA graph replays with CUPTI node ids (issue 20, `record --cupti`)", "",
            f"- {'OK' if ok else 'FAILED'}: {len(graphs)} graph launches, {len(records)} "
            f"kernel records; tied {dict(by)}; capture sites {dict(sites)}; "
            f"{len(gpu_ns_lines)} merged.gpu_ns.folded lines under eager_step",
            "", "stderr (last lines):", "```", "\n".join(proc.stderr.strip().splitlines()[-8:]),
            "```"], ok


def fast_path_check(args, out):
    """The agent's fast path on a real CUPTI: the workload recorded with the
    launches taken at their int3 uprobes and at the library's marker must
    count the same launches and GPU records."""
    script = out / "workload.py"
    runs = {}
    for mode in ("int3", "auto"):
        rec = out / f"rec_fast_{mode}"
        proc = subprocess.run([args.ncclprobe, "record", "--cupti", "--launch-probes", mode,
                               "-o", str(rec), "--", args.python, str(script)],
                              capture_output=True, text=True, timeout=900)
        summary = json.loads((rec / "summary.json").read_text()) if (
            rec / "summary.json").exists() else {"totals": {}}
        launches = [json.loads(l) for l in (rec / "launches.jsonl").read_text().splitlines()
                    if l] if (rec / "launches.jsonl").exists() else []
        runs[mode] = {
            "rc": proc.returncode,
            "by_api": collections.Counter(l["api"] for l in launches if not l["nested"]),
            "by_kernel": collections.Counter(l["kernel"] for l in launches if not l["nested"]),
            "matched": sum(1 for l in launches if l.get("gpu_status") == "matched"),
            "at_marker": summary["totals"].get("launches_at_marker", 0),
            "dropped": summary["totals"].get("events_dropped", 0),
            "stderr": proc.stderr.strip().splitlines()[-6:],
        }
    a, b = runs["int3"], runs["auto"]
    ok = (a["rc"] == 0 and b["rc"] == 0 and not a["dropped"] and not b["dropped"] and
          a["by_api"] == b["by_api"] and a["by_kernel"] == b["by_kernel"] and
          a["matched"] == b["matched"] and b["at_marker"] > 0)
    diff = {k: (a["by_kernel"][k], b["by_kernel"][k])
            for k in set(a["by_kernel"]) | set(b["by_kernel"])
            if a["by_kernel"][k] != b["by_kernel"][k]}
    lines = ["## The agent's fast path (issue 21, `record --cupti --launch-probes int3|auto`)",
             "", f"- result: {'PASS' if ok else 'FAIL'}"]
    for mode, r in runs.items():
        lines.append(f"- {mode}: exit {r['rc']}, launches by API {dict(r['by_api'])}, "
                     f"GPU-matched {r['matched']}, taken at the marker {r['at_marker']}, "
                     f"events dropped {r['dropped']}")
    lines += [f"- kernels counted differently (int3, auto): {dict(list(diff.items())[:15])}",
              "", "auto's stderr (last lines):", "```", "\n".join(b["stderr"]), "```"]
    return lines, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ncclprobe", default=str(Path(__file__).resolve().parent.parent /
                                               "build" / "ncclprobe"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--skip-live", action="store_true", help="skip the live injection check")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="ncclprobe-gpu-check-"))
    script = out / "workload.py"
    out.mkdir(parents=True, exist_ok=True)
    script.write_text(WORKLOAD)
    rec = out / "rec"
    proc = subprocess.run([args.ncclprobe, "record", "-o", str(rec), "--", args.python,
                           str(script)], capture_output=True, text=True, timeout=900)
    summary = json.loads((rec / "summary.json").read_text())
    launches = [json.loads(l) for l in (rec / "launches.jsonl").read_text().splitlines() if l]
    stacks = {s["stack_id"]: s["frames"]
              for s in map(json.loads, (rec / "stacks.jsonl").read_text().splitlines())}
    nccl = [json.loads(l) for l in (rec / "nccl.jsonl").read_text().splitlines() if l]

    lines = ["# ncclprobe GPU check", "", f"ncclprobe exit code {proc.returncode}; workload:",
             "```", proc.stdout.strip(), "```", "stderr (last lines):", "```",
             "\n".join(proc.stderr.strip().splitlines()[-15:]), "```", "", "## Totals", "```",
             json.dumps(summary["totals"], indent=1), json.dumps(summary["unwind"], indent=1),
             "```", "", "## Launches by API (outermost)", ""]
    for api, n in sorted(summary["launches_by_api"].items(), key=lambda kv: -kv[1]):
        lines.append(f"- {api}: {n}")
    nested = collections.Counter(l["api"] for l in launches if l["nested"])
    lines += ["", f"## Nested launches (inside another probed launch): {dict(nested)}", "",
              "## Top kernels", ""]
    for kernel, n in sorted(summary["launches_by_kernel"].items(), key=lambda kv: -kv[1])[:25]:
        lines.append(f"- {n:6d}  {kernel}")
    lines += ["", "## One stack per API", ""]
    seen = set()
    for l in launches:
        if l["api"] in seen or l["nested"]:
            continue
        seen.add(l["api"])
        frames = stacks.get(l["stack_id"], [])
        lines += [f"### {l['api']} -> {l['kernel']}", "```", "\n".join(frames[-25:]), "```"]
    lines += ["", f"## NCCL calls: {collections.Counter(o['op'] for o in nccl)}"]
    if nccl:
        lines += ["```", json.dumps(nccl[0], indent=1), "```"]
    lines += ["", "## Libraries probed", ""]
    for t in summary["targets"]:
        for lib in t["libraries"]:
            lines.append(f"- {lib['path']}: {lib['probes_attached']} probes "
                         f"({lib['probes_failed']} failed)")
    graph_lines, graph_ok = graph_check(rec)
    lines += [""] + graph_lines
    cupti_graph_lines, cupti_graph_ok = graph_gpu_check(args, out)
    lines += [""] + cupti_graph_lines
    graph_ok = graph_ok and cupti_graph_ok
    fast_lines, fast_ok = fast_path_check(args, out)
    lines += [""] + fast_lines
    live_ok = True
    if not args.skip_live:
        live_lines, live_ok = live_check(args, out)
        lines += [""] + live_lines
    report = "\n".join(lines) + "\n"
    (out / "gpu-check.md").write_text(report)
    print(report)
    print(f"(recording in {rec})")
    return 0 if proc.returncode == 0 and live_ok and graph_ok and fast_ok else 1


if __name__ == "__main__":
    sys.exit(main())
