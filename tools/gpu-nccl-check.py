#!/usr/bin/env python3
"""gpu-nccl-check.py - validates the NCCL side of ncclprobe on a real GPU
machine (root, PyTorch with CUDA and NCCL): torch.distributed with the NCCL
backend, world size 1, recorded with `ncclprobe record --cupti`, and checks
what no CPU-only test can, on the real libnccl:

- ncclLaunchKernel fires and its plan is read: comm_hash, rank 0, nranks 1,
  kernel named from kernelFn, grid/block, and ops whose type/count/datatype
  equal the API calls (all_reduce of known sizes, all_gather, broadcast);
- the stacks go from the Python caller down to [NCCL]<op>;
- with CUPTI, NCCL kernels are joined to the launches (GPU time per
  communicator in summary.json);
- `ncclprobe report --op AllReduce` finds the Python call site.

    sudo tools/gpu-nccl-check.py [--build build] [--out DIR]

Prints what fired and what was read; exit 1 if a check fails."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

WORKLOAD = r'''
import os, torch, torch.distributed as dist
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29533")
dist.init_process_group("nccl", rank=0, world_size=1)
x = torch.ones(1 << 20, device="cuda")
def grads_all_reduce():
    dist.all_reduce(x)
def params_all_gather():
    out = [torch.empty_like(x)]
    dist.all_gather(out, x)
def weights_broadcast():
    dist.broadcast(x, src=0)
for _ in range(5):
    grads_all_reduce(); params_all_gather(); weights_broadcast()
torch.cuda.synchronize()
dist.destroy_process_group()
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    build = Path(args.build).resolve()
    out = Path(args.out or tempfile.mkdtemp(prefix="gpu-nccl-"))
    script = out / "workload.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(WORKLOAD)
    rec = out / "rec"
    proc = subprocess.run([str(build / "ncclprobe"), "record", "--cupti", "-o", str(rec), "--",
                           sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600)
    print(proc.stderr[-3000:])
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    check(proc.returncode == 0, "recording ran")
    launches = [json.loads(x) for x in (rec / "launches.jsonl").read_text().splitlines()]
    ops = [json.loads(x) for x in (rec / "nccl.jsonl").read_text().splitlines()]
    nccl = [x for x in launches if x["api"].startswith("ncclLaunch")]
    print(f"{len(ops)} API lines, {len(nccl)} NCCL launches")
    for x in nccl[:5]:
        print(json.dumps({k: x.get(k) for k in ("kernel", "grid", "block", "stream", "nccl",
                                                "gpu_status")})[:600])
    check(len(nccl) >= 15, "ncclLaunchKernel fired for every collective")
    check(all(x["nccl"].get("nranks") == 1 and x["nccl"].get("rank") == 0 for x in nccl),
          "communicator identity read (rank 0 of 1)")
    check(all(not x["kernel"].startswith("<") for x in nccl), "kernels named from kernelFn")
    got = sorted((o["op"], o["count"], o["datatype"]) for x in nccl for o in x["nccl"]["ops"])
    want = sorted((o["op"], o["count"], o["datatype"]) for o in ops
                  if o["op"] in ("AllReduce", "AllGather", "Broadcast"))
    check(got == want, "plan ops equal the API calls")
    check(any("grads_all_reduce" in json.dumps(x) for x in ops), "Python caller on API lines")
    summary = json.loads((rec / "summary.json").read_text())
    print(json.dumps(summary["nccl"], indent=1)[:2000])
    check(any(c["gpu_ns"] > 0 for c in summary["nccl"]["communicators"]),
          "GPU time per communicator")
    rep = subprocess.run([str(build / "ncclprobe"), "report", str(rec), "--op", "AllReduce"],
                         capture_output=True, text=True)
    print(rep.stdout[:2000])
    check("grads_all_reduce" in rep.stdout, "report finds the Python call site")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
