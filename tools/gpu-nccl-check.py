#!/usr/bin/env python3
"""gpu-nccl-check.py - validates the NCCL side of ncclprobe on a real GPU
machine (root, PyTorch with CUDA and NCCL).

One rank: torch.distributed with the NCCL backend, world size 1, recorded with
`ncclprobe record --cupti`, checks what no CPU-only test can, on the real libnccl:

- ncclLaunchKernel fires and its plan is read: comm_hash, rank 0, nranks 1,
  kernel named from kernelFn, grid/block, and ops whose type/count/datatype
  equal the API calls (all_reduce of known sizes, all_gather, broadcast);
- the stacks go from the Python caller down to [NCCL]<op>;
- with CUPTI, NCCL kernels are joined to the launches (GPU time per
  communicator in summary.json);
- `ncclprobe report --op AllReduce` finds the Python call site.

Two ranks, `--nccl-flows` (docs/nccl.md, "Flows"), when torch sees 2 GPUs or
more (else said as skipped, with the reason; the exit status does not depend on
it). One GPU makes no proxy ops (no peers). A 2-rank torch.distributed NCCL job
on this node, one process and one GPU per rank, each rank recorded by its own
`ncclprobe record --nccl-flows --cupti -- python3 flows_worker.py` (record follows
CMD, not the processes CMD forks - README, "record -- CMD follows CMD itself" - so
one record of a parent spawning both ranks would hold neither; two recordings run
at once, each with its own --cupti-socket). Proxy ops exist only for connectors
the proxy progresses (network, CollNet): on one node NCCL would use P2P/NVLink or
SHM, which have none, so the job forces NCCL's socket network transport with
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_IB_DISABLE=1, plus
NCCL_NET_DISABLE_INTRA=0 (an /etc/nccl.conf may set it), NCCL_SOCKET_IFNAME=lo
(unless set) and NCCL_ALGO=Ring (every all-reduce a ring: RING_TWICE). It runs
all_reduce of 1 MiB and 64 MiB of float32 (12 calls each, results checked) and
one 4 MiB send/recv (rank 0 -> rank 1), and checks:

- each rank's recording has flows/ with a file set per communicator
  (proxy_flow_rank<R>.jsonl, flow_steps_rank<R>.jsonl, flow_rank<R>.json,
  topology_<hash>_rank<R>.json), the same comm hashes on both ranks;
- every proxy_flow and flow_steps line has exactly the documented fields, with
  documented values; each step belongs to a recorded op, nsteps lines per (op,
  direction, peer); flow_rank<R>.json is the meta and steps of the jsonl files;
- RING / RING_TWICE steps: the peer is the ring neighbour of that rank's topology
  file (ring.prev for RECV, ring.next for SEND) and, with 2 ranks, the other rank;
- per rank and direction, the bytes of the ring all-reduce steps are at least
  2(n-1)/n of the all-reduce payload: a loose lower bound, a step's `bytes` being
  NCCL's nbytes, an upper bound for what the step moves;
- send/recv ops name the peer (`root` and every step's `peer`);
- every op's launch_id is an NCCL launch of launches.jsonl on its communicator;
- `ncclprobe report --flows DIR --json` parses and its totals equal the sums
  over the jsonl files;
- summary.json `nccl_flows`: both flow probes attached to libnccl (`probed`),
  its counts equal the files, nothing dropped or malformed.

It prints what it found (ops, steps, peers per channel) and, as information only,
the cost: the median time of one all_reduce (with its synchronize) per size with
no tracer, under `record` and under `record --nccl-flows` (one run each).

    sudo tools/gpu-nccl-check.py [--build build] [--out DIR] [--python PYTHON]

Prints what fired and what was read; exit 1 if a check fails, or when there is
nothing to check (no PyTorch in PYTHON, no CUDA GPU, no NCCL)."""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
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

# What PYTHON has: torch, CUDA, how many GPUs, NCCL. One JSON line.
PROBE = r'''
import json
try:
    import torch
except Exception as exc:
    print(json.dumps({"torch": None, "error": f"{exc.__class__.__name__}: {exc}"}))
    raise SystemExit(0)
cuda = torch.cuda.is_available()
try:
    import torch.distributed as dist
    nccl = dist.is_available() and dist.is_nccl_available()
except Exception:
    nccl = False
version = None
if cuda and nccl:
    try:
        v = torch.cuda.nccl.version()
        version = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        pass
print(json.dumps({"torch": torch.__version__, "cuda": cuda,
                  "gpus": torch.cuda.device_count() if cuda else 0, "nccl": bool(nccl),
                  "nccl_version": version}))
'''

# One rank of the 2-rank job (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the environment).
# Prints "NP_RESULT {json}": its all_reduce calls, their median times, whether results were right.
FLOWS_WORKER = r'''
import datetime, json, os, statistics, sys, time
import torch, torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
sizes = [int(s) for s in os.environ["NP_SIZES"].split(",")]
warmup, iters = int(os.environ["NP_WARMUP"]), int(os.environ["NP_ITERS"])
p2p_bytes = int(os.environ["NP_P2P_BYTES"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=180))
result = {"rank": rank, "all_reduce": [], "ok": True}

def flows_all_reduce(x):
    dist.all_reduce(x)

def flows_send_recv(y):
    if rank == 0:
        dist.send(y, dst=1)
    else:
        dist.recv(y, src=0)

for nbytes in sizes:
    x = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
    times = []
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        flows_all_reduce(x)
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    calls = warmup + iters
    want = float(world ** calls)  # ones, summed over the ranks at every call
    ok = bool((x == want).all().item())
    result["ok"] &= ok
    result["all_reduce"].append({"bytes": nbytes, "calls": calls, "ok": ok,
                                 "median_ms": statistics.median(times) * 1e3})
y = torch.full((p2p_bytes // 4,), float(rank + 1), device="cuda")
flows_send_recv(y)
torch.cuda.synchronize()
if rank == 1:
    result["ok"] &= bool((y == 1.0).all().item())
result["send_recv"] = {"bytes": p2p_bytes, "src": 0, "dst": 1}
dist.destroy_process_group()
print("NP_RESULT " + json.dumps(result), flush=True)
sys.exit(0 if result["ok"] else 1)
'''

MIB = 1 << 20
SIZES = [1 * MIB, 64 * MIB]  # all_reduce payloads, float32
WARMUP, ITERS = 2, 10
P2P_BYTES = 4 * MIB
# NCCL's socket network transport between two GPUs of one node (see the docstring).
NET_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NET": "Socket",
           "NCCL_IB_DISABLE": "1", "NCCL_NET_DISABLE_INTRA": "0", "NCCL_ALGO": "Ring"}

# docs/nccl.md, "Flows": the fields of each line
OP_FIELDS = {"opCount", "rank", "nranks", "comm", "pid", "tid", "ts_ns", "launch_id", "channel",
             "nsteps", "nbytes", "chunkSize", "sliceSteps", "chunkSteps", "pattern", "protocol",
             "algorithm", "coll", "root", "nchannels"}
STEP_FIELDS = {"step", "op", "peer", "bytes", "conn_index", "opCount", "rank", "channel", "comm",
               "nranks", "pid", "launch_id", "pattern", "protocol", "coll", "stage"}
OP_INTS = OP_FIELDS - {"comm", "launch_id", "pattern", "protocol", "algorithm", "coll"}
STEP_INTS = STEP_FIELDS - {"op", "comm", "launch_id", "pattern", "protocol", "coll", "stage"}
PATTERNS = {"RING", "RING_TWICE", "PIPELINE_FROM", "PIPELINE_TO", "TREE_UP", "TREE_DOWN",
            "TREE_UP_DOWN", "COLLNET_CHAIN", "COLLNET_DIRECT", "NVLS", "NVLS_TREE", "PAT_UP",
            "PAT_DOWN", "SEND", "RECV"}
PROTOCOLS = {"LL", "LL128", "SIMPLE"}
STAGES = {"reduce-scatter", "all-gather", "reduce", "broadcast", None}
RINGS = {"RING", "RING_TWICE"}
P2P = {"SEND", "RECV"}


class Checks:
    """check(ok, what[, detail]): prints "ok   what" or "FAIL what: detail"; the failures
    are kept in .failures."""

    def __init__(self, out=print):
        self.failures = []
        self.out = out

    def __call__(self, ok, what, detail=None):
        self.out(("ok   " if ok else "FAIL ") + what +
                 ("" if ok or detail is None else f": {str(detail)[:600]}"))
        if not ok:
            self.failures.append(what)
        return bool(ok)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


# ---- reading a recording's flows/ ----

def read_flow_sets(rec):
    """The file sets of rec/flows, {(comm, rank): set}, comm as in the lines ("0x%016x"). A set
    is {"comm", "rank", "files": names found, "ops", "steps": parsed lines, "whole",
    "topology": parsed objects or None, "errors": what did not parse}. None without flows/."""
    flows = Path(rec) / "flows"
    if not flows.is_dir():
        return None
    sets = {}

    def entry(comm, rank):
        return sets.setdefault((comm, rank), {"comm": comm, "rank": rank, "files": set(),
                                              "ops": [], "steps": [], "whole": None,
                                              "topology": None, "errors": []})

    def lines(path, s):
        out = []
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            try:
                out.append(json.loads(line))
            except ValueError as exc:
                s["errors"].append(f"{path.name}:{i}: {exc}")
        return out

    def whole(path, s):
        try:
            return json.loads(path.read_text(errors="replace"))
        except ValueError as exc:
            s["errors"].append(f"{path.name}: {exc}")
            return None

    for d in sorted(flows.glob("comm_*")):
        comm = "0x" + d.name[len("comm_"):]
        for f in sorted(d.iterdir()):
            m = re.fullmatch(r"(proxy_flow|flow_steps)_rank(\d+)\.jsonl|flow_rank(\d+)\.json",
                             f.name)
            if not m:
                continue
            s = entry(comm, int(m.group(2) or m.group(3)))
            s["files"].add(f.name)
            if m.group(1) == "proxy_flow":
                s["ops"] = lines(f, s)
            elif m.group(1) == "flow_steps":
                s["steps"] = lines(f, s)
            else:
                s["whole"] = whole(f, s)
    for f in sorted(flows.glob("topology_*_rank*.json")):
        m = re.fullmatch(r"topology_([0-9a-f]+)_rank(\d+)\.json", f.name)
        if m:
            s = entry("0x" + m.group(1), int(m.group(2)))
            s["files"].add("topology")
            s["topology"] = whole(f, s)
    return sets


def own_sets(by_rank):
    """[set] of every rank's own file sets (by_rank: {rank: read_flow_sets(its recording)})."""
    return [s for rank, sets in sorted(by_rank.items())
            for (_, r), s in sorted((sets or {}).items()) if r == rank]


# ---- checks of the files ----

def check_file_sets(checks, by_rank):
    """flows/ in each rank's recording, only that rank's sets there, each whole and parsed; the
    same communicators on every rank. Returns the comm hashes."""
    comms = {}
    for rank, sets in sorted(by_rank.items()):
        checks(sets is not None, f"rank {rank}: flows/ exists")
        sets = sets or {}
        mine = {c: s for (c, r), s in sets.items() if r == rank}
        others = sorted(k for k in sets if k[1] != rank)
        checks(not others, f"rank {rank}: only rank {rank}'s file sets in its recording", others)
        checks(bool(mine), f"rank {rank}: a file set for at least one communicator")
        for c, s in sorted(mine.items()):
            want = [f"proxy_flow_rank{rank}.jsonl", f"flow_steps_rank{rank}.jsonl",
                    f"flow_rank{rank}.json", "topology"]
            missing = [n if n != "topology" else f"topology_{c[2:]}_rank{rank}.json"
                       for n in want if n not in s["files"]]
            checks(not missing, f"rank {rank} comm {c}: the whole file set", missing)
            checks(not s["errors"], f"rank {rank} comm {c}: every file parses", s["errors"][:3])
        comms[rank] = set(mine)
    every = set().union(*comms.values()) if comms else set()
    checks(bool(every) and all(c == every for c in comms.values()),
           "the same communicators (comm hashes) on every rank",
           {r: sorted(c) for r, c in comms.items()})
    return every


def check_fields(checks, sets, nranks):
    """Each line has exactly the documented fields, values of the documented kinds; each step
    belongs to a recorded op, nsteps of them per (op, direction, peer); flow_rank<R>.json is
    the jsonl files' meta and steps; the topology is the communicator's."""
    for s in sets:
        rank, comm, who = s["rank"], s["comm"], f"rank {s['rank']} comm {s['comm']}"
        bad = []
        for x in s["ops"]:
            if set(x) != OP_FIELDS:
                bad.append(("fields", sorted(set(x) ^ OP_FIELDS)))
            elif (x["comm"], x["rank"]) != (comm, rank) or (nranks and x["nranks"] != nranks):
                bad.append(("comm/rank/nranks", x))
            elif not all(is_int(x[k]) for k in OP_INTS) or not (
                    x["launch_id"] is None or is_int(x["launch_id"])):
                bad.append(("types", x))
            elif x["pattern"] not in PATTERNS or x["protocol"] not in PROTOCOLS or \
                    x["nsteps"] <= 0 or x["nbytes"] <= 0:
                bad.append(("values", x))
        checks(not bad and bool(s["ops"]),
               f"{who}: {len(s['ops'])} proxy_flow lines, the documented fields and values",
               bad[:2] or "no op")
        ops = [x for x in s["ops"] if set(x) == OP_FIELDS]
        nsteps = Counter()
        for x in ops:
            nsteps[(x["opCount"], x["channel"], x["pattern"])] += x["nsteps"]
        bad, per = [], Counter()
        for x in s["steps"]:
            if set(x) != STEP_FIELDS:
                bad.append(("fields", sorted(set(x) ^ STEP_FIELDS)))
            elif (x["comm"], x["rank"]) != (comm, rank) or (nranks and x["nranks"] != nranks):
                bad.append(("comm/rank/nranks", x))
            elif not all(is_int(x[k]) for k in STEP_INTS) or not (
                    x["launch_id"] is None or is_int(x["launch_id"])):
                bad.append(("types", x))
            elif x["op"] not in P2P or x["pattern"] not in PATTERNS or \
                    x["protocol"] not in PROTOCOLS or x["stage"] not in STAGES or \
                    x["bytes"] <= 0 or x["peer"] == rank or \
                    not 0 <= x["peer"] < x["nranks"]:
                bad.append(("values", x))
            elif (x["opCount"], x["channel"], x["pattern"]) not in nsteps:
                bad.append(("no such op", x))
            else:
                per[(x["opCount"], x["channel"], x["pattern"], x["op"], x["peer"])] += 1
        checks(not bad, f"{who}: {len(s['steps'])} flow_steps lines, the documented fields "
               "and values, each of a recorded op", bad[:2])
        uneven = {k: n for k, n in per.items() if n != nsteps[k[:3]]}
        checks(not uneven, f"{who}: nsteps step lines per (op, direction, peer)",
               list(uneven.items())[:3])
        w = s["whole"]
        checks(isinstance(w, dict) and w.get("rank") == rank and w.get("comm") == comm and
               w.get("meta") == (s["ops"][0] if s["ops"] else None) and
               w.get("steps") == s["steps"],
               f"{who}: flow_rank{rank}.json is the first op and every step")
        check_topology_file(checks, s, nranks)


def check_topology_file(checks, s, nranks):
    """topology_<comm>_rank<R>.json is the communicator's: its channels, each with a ring
    (prev/next ranks of the communicator), a tree and nvls; nranks: the expected size, or 0."""
    rank, comm, who = s["rank"], s["comm"], f"rank {s['rank']} comm {s['comm']}"
    t = s["topology"]
    ok = isinstance(t, dict) and (t.get("comm"), t.get("rank")) == (comm, rank) and \
        (not nranks or t.get("nranks") == nranks) and \
        isinstance(t.get("channels"), list) and len(t["channels"]) == t.get("nchannels")
    if ok:
        n = t["nranks"]
        for ch in t["channels"]:
            ring = ch.get("ring") if isinstance(ch, dict) else None
            ok = ok and isinstance(ring, dict) and is_int(ch.get("channel")) and \
                all(is_int(ring.get(k)) and 0 <= ring[k] < n for k in ("prev", "next")) and \
                isinstance(ch.get("tree"), dict) and isinstance(ch.get("nvls"), dict)
    checks(ok, f"{who}: topology_{comm[2:]}_rank{rank}.json has the communicator's channels "
           "(ring prev/next, tree, nvls)", t if not ok else None)


def check_ring_peers(checks, sets, nranks):
    """RING / RING_TWICE steps: RECV from ring.prev, SEND to ring.next of the step's channel in
    the rank's topology file; with 2 ranks, the other rank. At least one such step per rank."""
    ring_steps = Counter()
    for s in sets:
        rank, who = s["rank"], f"rank {s['rank']} comm {s['comm']}"
        t = s["topology"] if isinstance(s["topology"], dict) else {}
        chans = {ch.get("channel"): ch.get("ring", {}) for ch in t.get("channels") or []
                 if isinstance(ch, dict)}
        wrong, n = [], 0
        for x in s["steps"]:
            if x.get("pattern") not in RINGS:
                continue
            n += 1
            ring = chans.get(x.get("channel"), {})
            want = ring.get("prev") if x.get("op") == "RECV" else ring.get("next")
            if x.get("peer") != want or (nranks == 2 and x.get("peer") != 1 - rank):
                wrong.append({**{k: x.get(k) for k in ("opCount", "channel", "step", "op", "peer")},
                              "ring": ring})
        ring_steps[rank] += n
        if n:
            checks(not wrong, f"{who}: each of {n} ring steps' peer is the ring neighbour "
                   "(ring.prev for RECV, ring.next for SEND)" +
                   (", the other rank" if nranks == 2 else ""), wrong[:3])
    ranks = sorted({s["rank"] for s in sets})
    checks(bool(ranks) and all(ring_steps[r] for r in ranks), "ring steps on every rank",
           dict(ring_steps))


def ring_allreduce_bytes(sets):
    """{rank: {"SEND": bytes, "RECV": bytes}}: the step bytes of RING / RING_TWICE all-reduce
    ops, every communicator of the rank."""
    got = defaultdict(lambda: {"SEND": 0, "RECV": 0})
    for s in sets:
        got[s["rank"]]
        for x in s["steps"]:
            if x.get("coll") == "AllReduce" and x.get("pattern") in RINGS and x.get("op") in P2P:
                got[s["rank"]][x["op"]] += x.get("bytes", 0)
    return {r: dict(v) for r, v in got.items()}


def check_allreduce_bytes(checks, sets, nranks, payload):
    """Each rank sends and receives, in a ring all-reduce of payload bytes, 2(n-1)/n of it: the
    steps' bytes (each NCCL's nbytes, an upper bound for that step) sum to at least that."""
    want = 2 * (nranks - 1) * payload / nranks
    for rank, got in sorted(ring_allreduce_bytes(sets).items()):
        checks(got["SEND"] >= want and got["RECV"] >= want,
               f"rank {rank}: ring all-reduce step bytes sent {got['SEND']}, received "
               f"{got['RECV']} >= 2(n-1)/n of the {payload}-byte payload ({want:.0f}; a loose "
               "lower bound: a step's bytes is an upper bound)")


def check_p2p(checks, sets, expect):
    """expect {rank: {"SEND" or "RECV": peer}}: every SEND/RECV op of a rank is one it expects,
    its root the peer, its steps in that direction to or from that peer; each one seen."""
    seen = set()
    for s in sets:
        rank, who = s["rank"], f"rank {s['rank']} comm {s['comm']}"
        mine = expect.get(rank, {})
        bad = [x for x in s["ops"] if x.get("pattern") in P2P and
               (x["pattern"] not in mine or x.get("root") != mine[x["pattern"]])]
        seen |= {(rank, x["pattern"]) for x in s["ops"] if x.get("pattern") in P2P}
        bad += [x for x in s["steps"] if x.get("pattern") in P2P and
                (x.get("op") != x["pattern"] or x.get("peer") != mine.get(x["pattern"]))]
        n = sum(1 for x in s["ops"] if x.get("pattern") in P2P)
        if n or bad:
            checks(not bad, f"{who}: {n} send/recv ops name the peer (root, step peers)",
                   bad[:3])
    want = {(r, d) for r, m in expect.items() for d in m}
    checks(want <= seen, "send/recv ops seen: " +
           ", ".join(f"rank {r} {d} {'to' if d == 'SEND' else 'from'} {expect[r][d]}"
                     for r, d in sorted(want)), sorted(want - seen))


def check_launch_ids(checks, rank, sets, launches, lib):
    """With launch ids (summary.json says the build has uploadProxyOps), each op's launch_id is
    an NCCL launch (launches.jsonl) on the op's communicator."""
    if not lib:
        return  # no libnccl probed: check_summary said so
    if not lib.get("launch_ids"):
        checks.out(f"rank {rank}: launch ids not carried ({lib.get('launch_ids_missing')})")
        return
    by_id = {x.get("launch_id"): x for x in launches}
    bad, n = [], 0
    for s in sets:
        for x in s["ops"]:
            n += 1
            launch = by_id.get(x.get("launch_id"))
            if launch is None or not str(launch.get("api", "")).startswith("ncclLaunch") or \
                    (launch.get("nccl") or {}).get("comm_hash") != x.get("comm"):
                bad.append({k: x.get(k) for k in ("opCount", "channel", "launch_id")})
    checks(not bad, f"rank {rank}: each of {n} ops' launch_id is an NCCL launch on its "
           "communicator", bad[:3])


def flows_totals(sets):
    """{comm: what `report --flows --json` says of it}, summed here from the jsonl files."""
    out = {}
    for s in sets:
        peers, channels, patterns = {}, {}, Counter()
        for x in s["ops"]:
            channels.setdefault(x["channel"], {"channel": x["channel"], "ops": 0, "steps": 0,
                                               "bytes": 0})["ops"] += 1
        for x in s["steps"]:
            p = peers.setdefault(x["peer"], {"peer": x["peer"], "send_steps": 0, "send_bytes": 0,
                                             "recv_steps": 0, "recv_bytes": 0})
            d = "send" if x["op"] == "SEND" else "recv"
            p[d + "_steps"] += 1
            p[d + "_bytes"] += x["bytes"]
            ch = channels.setdefault(x["channel"], {"channel": x["channel"], "ops": 0,
                                                    "steps": 0, "bytes": 0})
            ch["steps"] += 1
            ch["bytes"] += x["bytes"]
            patterns[(x["pattern"], x["protocol"])] += 1
        out[s["comm"]] = {"comm": s["comm"], "rank": s["rank"], "ops": len(s["ops"]),
                          "steps": len(s["steps"]),
                          "bytes": sum(x["bytes"] for x in s["steps"]),
                          "peers": [peers[k] for k in sorted(peers)],
                          "channels": [channels[k] for k in sorted(channels)],
                          "patterns": dict(patterns)}
    return out


def run_report(ncclprobe, rec):
    """`ncclprobe report --flows REC --json`: (parsed object or None, what went wrong)."""
    proc = subprocess.run([str(ncclprobe), "report", "--flows", str(rec), "--json"],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return None, f"exit {proc.returncode}: {proc.stderr[-500:]}"
    try:
        return json.loads(proc.stdout), None
    except ValueError as exc:
        return None, f"not JSON: {exc}"


def check_report(checks, rank, report, sets):
    """report's communicators: their totals equal the sums over the jsonl files."""
    if not checks(isinstance(report, dict) and isinstance(report.get("communicators"), list),
                  f"rank {rank}: report --flows --json parses", report):
        return
    got = {}
    for c in report["communicators"]:
        got[c.get("comm")] = {"comm": c.get("comm"), "rank": c.get("rank"), "ops": c.get("ops"),
                              "steps": c.get("steps"), "bytes": c.get("bytes"),
                              "peers": c.get("peers"), "channels": c.get("channels"),
                              "patterns": {(p.get("pattern"), p.get("protocol")): p.get("steps")
                                           for p in c.get("patterns") or []}}
    want = flows_totals(sets)
    diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
    checks(not diff, f"rank {rank}: report --flows totals (ops, steps, bytes per peer, channel, "
           "pattern) equal the sums over the jsonl files", diff)


def check_summary(checks, rank, summary, sets):
    """summary.json nccl_flows: both flow probes attached to every libnccl (probed), ops, steps
    and file sets equal the files; nothing dropped, malformed or unwritten."""
    fl = (summary or {}).get("nccl_flows")
    if not checks(isinstance(fl, dict), f"rank {rank}: summary.json has nccl_flows"):
        return None
    libs = [x for x in fl.get("libraries", []) if "nccl" in Path(x.get("path", "")).name]
    checks(bool(libs) and all(x.get("probed") for x in libs),
           f"rank {rank}: the flow probes (ncclProxySaveOp, SaveProxy) attached to libnccl",
           fl.get("libraries"))
    for x in libs:
        checks.out(f"rank {rank}: {json.dumps(x)}")
    got = {k: fl.get(k) for k in ("ops", "steps", "file_sets", "records_dropped", "malformed",
                                  "write_errors")}
    want = {"ops": sum(len(s["ops"]) for s in sets), "steps": sum(len(s["steps"]) for s in sets),
            "file_sets": len(sets), "records_dropped": 0, "malformed": 0, "write_errors": 0}
    checks(got == want, f"rank {rank}: summary.json nccl_flows counts equal the files, nothing "
           "dropped", {"summary": got, "files": want})
    return libs[0] if libs else None


def describe(sets):
    """Lines: per rank and communicator, ops and steps; per channel, ops, steps, peers."""
    lines = []
    for s in sets:
        pats = Counter(x.get("pattern") for x in s["ops"])
        lines.append(f"rank {s['rank']} comm {s['comm']}: {len(s['ops'])} ops "
                     f"({', '.join(f'{p} {n}' for p, n in sorted(pats.items()))}), "
                     f"{len(s['steps'])} steps, "
                     f"{sum(x.get('bytes', 0) for x in s['steps'])} step bytes")
        per = defaultdict(lambda: {"ops": 0, "steps": 0, "SEND": set(), "RECV": set(),
                                   "protocols": set()})
        for x in s["ops"]:
            per[x.get("channel")]["ops"] += 1
            per[x.get("channel")]["protocols"].add(x.get("protocol"))
        for x in s["steps"]:
            c = per[x.get("channel")]
            c["steps"] += 1
            c.setdefault(x.get("op"), set()).add(x.get("peer"))
        for ch, c in sorted(per.items(), key=lambda kv: (kv[0] is None, kv[0])):
            lines.append(f"  channel {ch}: {c['ops']} ops, {c['steps']} steps, "
                         f"SEND to {sorted(c['SEND'])}, RECV from {sorted(c['RECV'])}, "
                         f"{'/'.join(sorted(map(str, c['protocols'])))}")
    return lines


def check_flows(checks, recs, nranks, payload, p2p, ncclprobe, report=run_report):
    """Every check of the flows of recs ({rank: recording directory}, each rank recorded on its
    own): payload is the all-reduce bytes (all calls) each rank contributed; p2p as check_p2p's
    expect. Prints what was found."""
    by_rank = {r: read_flow_sets(rec) for r, rec in recs.items()}
    check_file_sets(checks, by_rank)
    every = own_sets(by_rank)
    # a communicator whose proxy had nothing to post (all P2P/NVLink/SHM) has its topology
    # (sent at its first kernel) and empty flow files; the flow checks are the others'
    sets = [s for s in every if s["ops"] or s["steps"]]
    for s in every:
        if s not in sets:
            checks.out(f"rank {s['rank']} comm {s['comm']}: no proxy op (P2P/NVLink/SHM only): "
                       "its topology only")
            check_topology_file(checks, s, 0)
    for line in describe(sets):
        checks.out(line)
    check_fields(checks, sets, nranks)
    check_ring_peers(checks, sets, nranks)
    check_allreduce_bytes(checks, sets, nranks, payload)
    check_p2p(checks, sets, p2p)
    for rank, rec in sorted(recs.items()):
        mine = [s for s in sets if s["rank"] == rank]
        rec = Path(rec)
        try:
            summary = json.loads((rec / "summary.json").read_text())
        except (OSError, ValueError) as exc:
            summary = None
            checks.out(f"rank {rank}: summary.json: {exc}")
        lib = check_summary(checks, rank, summary, [s for s in every if s["rank"] == rank])
        try:
            launches = [json.loads(x) for x in (rec / "launches.jsonl").read_text().splitlines()
                        if x]
        except (OSError, ValueError) as exc:
            launches = []
            checks.out(f"rank {rank}: launches.jsonl: {exc}")
        check_launch_ids(checks, rank, mine, launches, lib)
        rep, err = report(ncclprobe, rec)
        check_report(checks, rank, rep if rep is not None else err, mine)


# ---- running the 2-rank job ----

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(cmds, envs, timeout=600):
    """Runs one command per rank at once (each in its own process group); when one fails the
    others get 60 s before they are stopped. Returns [(returncode, stdout, stderr)]."""
    procs = [subprocess.Popen(c, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True) for c, e in zip(cmds, envs)]
    outs = [None] * len(procs)

    def collect(i):
        outs[i] = procs[i].communicate()

    threads = [threading.Thread(target=collect, args=(i,)) for i in range(len(procs))]
    for t in threads:
        t.start()
    deadline, failed_at = time.time() + timeout, None
    while any(p.poll() is None for p in procs):
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = time.time()
        if time.time() > deadline or (failed_at and time.time() > failed_at + 60):
            for p in procs:
                if p.poll() is None:
                    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
                        try:
                            os.killpg(p.pid, sig)
                        except ProcessLookupError:
                            break
                        try:
                            p.wait(wait)
                            break
                        except subprocess.TimeoutExpired:
                            pass
            break
        time.sleep(0.5)
    for t in threads:
        t.join()
    return [(p.returncode, o or "", e or "") for p, (o, e) in zip(procs, outs)]


def worker_result(stdout):
    for line in stdout.splitlines():
        if line.startswith("NP_RESULT "):
            try:
                return json.loads(line[len("NP_RESULT "):])
            except ValueError:
                return None
    return None


def flows_job(args, out, name, record_args, debug=False):
    """The 2-rank job, each rank under `ncclprobe record RECORD_ARGS` (None: no tracer).
    Returns ({rank: recording dir}, [(returncode, stdout, stderr)], [worker result])."""
    script = out / "flows_worker.py"
    script.write_text(FLOWS_WORKER)
    port = free_port()
    sockdir = Path(tempfile.mkdtemp(prefix="npnc", dir="/tmp"))  # a short path (108 bytes)
    recs, cmds, envs = {}, [], []
    for rank in range(2):
        env = {**os.environ, **NET_ENV, "RANK": str(rank), "WORLD_SIZE": "2",
               "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "NP_SIZES": ",".join(map(str, SIZES)), "NP_WARMUP": str(WARMUP),
               "NP_ITERS": str(ITERS), "NP_P2P_BYTES": str(P2P_BYTES)}
        env.setdefault("NCCL_SOCKET_IFNAME", "lo")
        if debug:
            env.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"})
        cmd = [args.python, str(script)]
        if record_args is not None:
            recs[rank] = out / f"{name}_rank{rank}"
            shutil.rmtree(recs[rank], ignore_errors=True)  # no flows/ of an earlier run
            cmd = [str(args.build / "ncclprobe"), "record", *record_args,
                   "--cupti-socket", str(sockdir / f"r{rank}.sock"), "-o", str(recs[rank]),
                   "--", *cmd]
        cmds.append(cmd)
        envs.append(env)
    try:
        runs = run_ranks(cmds, envs)
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)
    return recs, runs, [worker_result(o) for _, o, _ in runs]


def two_rank_check(args, out, checks):
    print("\n== two ranks: --nccl-flows, NCCL's socket transport "
          f"({' '.join(f'{k}={v}' for k, v in NET_ENV.items())}) ==")
    recs, runs, results = flows_job(args, out, "rec_flows", ["--nccl-flows", "--cupti"],
                                    debug=True)
    for rank, (rc, stdout, stderr) in enumerate(runs):
        print(f"-- rank {rank}: exit {rc}; stderr (last lines):")
        print("\n".join(stderr.strip().splitlines()[-8:]))
        via = Counter(m.group(1) for m in re.finditer(r" via (\S+)", stdout + stderr))
        print(f"rank {rank}: NCCL connections by transport (NCCL_DEBUG=INFO): {dict(via)}")
    ok = checks(all(rc == 0 for rc, _, _ in runs) and all(r and r["ok"] for r in results),
                "the 2-rank job ran under record --nccl-flows --cupti, results right",
                [(rc, r) for (rc, _, _), r in zip(runs, results)])
    if not all(rec.exists() for rec in recs.values()):
        return
    calls = {x["bytes"]: x["calls"] for x in (results[0] or {}).get("all_reduce", [])} or \
        {b: WARMUP + ITERS for b in SIZES}
    payload = sum(b * n for b, n in calls.items())
    print(f"all_reduce calls {calls}: payload {payload} bytes per rank")
    check_flows(checks, recs, 2, payload, {0: {"SEND": 1}, 1: {"RECV": 0}},
                args.build / "ncclprobe")
    if ok:
        cost(args, out, results)
    else:
        print("cost: not measured (the traced job failed)")


def cost(args, out, traced_results):
    """The same job with no tracer, under record, under record --nccl-flows: median ms of one
    all_reduce per size (rank 0), as information."""
    rows = {}
    for name, dirname, rec_args in (("no tracer", None, None), ("record", "rec_cost", []),
                                    ("record --nccl-flows", "rec_cost_flows", ["--nccl-flows"])):
        _, runs, results = flows_job(args, out, dirname, rec_args)
        rows[name] = results[0] if all(rc == 0 for rc, _, _ in runs) else None
    rows["record --nccl-flows --cupti (the checked run)"] = traced_results[0]
    print("\ncost (information only; one run each, median of "
          f"{ITERS} all_reduce calls with their synchronize, rank 0):")
    for name, r in rows.items():
        if not r:
            print(f"  {name:48s} did not run")
            continue
        print(f"  {name:48s} " + ", ".join(f"{x['bytes'] // MIB} MiB {x['median_ms']:.2f} ms"
                                           for x in r["all_reduce"]))


# ---- one rank ----

def one_rank_check(args, out, checks):
    script = out / "workload.py"
    script.write_text(WORKLOAD)
    rec = out / "rec"
    proc = subprocess.run([str(args.build / "ncclprobe"), "record", "--cupti", "-o", str(rec),
                           "--", args.python, str(script)], capture_output=True, text=True,
                          timeout=600)
    print(proc.stderr[-3000:])
    checks(proc.returncode == 0, "recording ran")
    try:
        launches = [json.loads(x) for x in (rec / "launches.jsonl").read_text().splitlines()]
        ops = [json.loads(x) for x in (rec / "nccl.jsonl").read_text().splitlines()]
        summary = json.loads((rec / "summary.json").read_text())
    except (OSError, ValueError) as exc:
        checks(False, "the recording's files read", exc)
        return
    nccl = [x for x in launches if x["api"].startswith("ncclLaunch")]
    print(f"{len(ops)} API lines, {len(nccl)} NCCL launches")
    for x in nccl[:5]:
        print(json.dumps({k: x.get(k) for k in ("kernel", "grid", "block", "stream", "nccl",
                                                "gpu_status")})[:600])
    checks(len(nccl) >= 15, "ncclLaunchKernel fired for every collective")
    checks(all(x["nccl"].get("nranks") == 1 and x["nccl"].get("rank") == 0 for x in nccl),
           "communicator identity read (rank 0 of 1)")
    checks(all(not x["kernel"].startswith("<") for x in nccl), "kernels named from kernelFn")
    got = sorted((o["op"], o["count"], o["datatype"]) for x in nccl for o in x["nccl"]["ops"])
    want = sorted((o["op"], o["count"], o["datatype"]) for o in ops
                  if o["op"] in ("AllReduce", "AllGather", "Broadcast"))
    checks(got == want, "plan ops equal the API calls")
    checks(any("grads_all_reduce" in json.dumps(x) for x in ops), "Python caller on API lines")
    print(json.dumps(summary["nccl"], indent=1)[:2000])
    checks(any(c["gpu_ns"] > 0 for c in summary["nccl"]["communicators"]),
           "GPU time per communicator")
    rep = subprocess.run([str(args.build / "ncclprobe"), "report", str(rec), "--op",
                          "AllReduce"], capture_output=True, text=True)
    print(rep.stdout[:2000])
    checks("grads_all_reduce" in rep.stdout, "report finds the Python call site")


def torch_info(python):
    """What python has (PROBE's object), or {"torch": None, "error": why}."""
    try:
        proc = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=300)
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as exc:
        return {"torch": None, "error": f"{python} did not answer: {exc}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default=None)
    ap.add_argument("--python", default=sys.executable,
                    help="the Python with PyTorch (default: this one)")
    args = ap.parse_args()
    args.build = Path(args.build).resolve()
    info = torch_info(args.python)
    why = (f"no PyTorch in {args.python} ({info.get('error')}); give --python PATH"
           if not info.get("torch") else
           f"PyTorch {info['torch']} sees no CUDA GPU" if not info.get("cuda") else
           f"PyTorch {info['torch']} has no NCCL backend" if not info.get("nccl") else None)
    if why:
        print(f"gpu-nccl-check: nothing checked: {why}. This check needs a GPU machine with "
              "PyTorch (CUDA, NCCL).")
        return 1
    print(f"PyTorch {info['torch']}, {info['gpus']} GPU(s), NCCL {info['nccl_version']}")
    out = Path(args.out or tempfile.mkdtemp(prefix="gpu-nccl-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    checks = Checks()
    one_rank_check(args, out, checks)
    if info["gpus"] >= 2:
        two_rank_check(args, out, checks)
    else:
        print(f"\nskipped: the 2-rank --nccl-flows check (peers against the ring) needs 2 GPUs, "
              f"PyTorch sees {info['gpus']}")
    print(f"\n{len(checks.failures)} check(s) failed" if checks.failures else "\nall checks passed")
    print(f"(recordings in {out})")
    return 1 if checks.failures else 0


if __name__ == "__main__":
    sys.exit(main())
