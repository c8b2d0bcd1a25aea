"""`make demo`: the bundled demo workload recorded end to end. The demo
prints its own per-API totals; the recording must match them."""

import json
import os
import re
import subprocess

from lib.paths import BUILD, REPO
from lib.skip import needs_bpf

pytestmark = needs_bpf


def test_demo_records_every_launch_of_the_demo_server(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run([REPO / "tools/run-demo.sh", BUILD], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "NCCLPROBE_DEMO_OUT": str(out)})
    assert proc.returncode == 0, proc.stderr
    printed = re.search(r"demo requests=\d+ launches=(\d+) (.*)", proc.stdout)
    assert printed, proc.stdout
    per_api = dict(kv.split("=") for kv in printed.group(2).split())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["totals"]["launches"] == int(printed.group(1))
    assert summary["totals"]["events_dropped"] == 0
    assert {k: str(v) for k, v in summary["launches_by_api"].items()} == per_api
    assert "Top launch stacks" in proc.stdout
    folded = (out / "launches.folded").read_text()
    assert "handle_request;model_forward;attention_block;launch_attention;" \
           "cudaLaunchKernelExC;[GPU_Kernel]flash_attn_fwd_kernel" in folded
