"""NCCL: every operation (API calls) and every kernel launch with its plan.

Two libraries: the toolkit's real libnccl.so.2 (attach, the local launch
symbols, static cudart inside it, API arguments - it cannot launch without a
GPU) and libfakenccl.so, a test double with NCCL's function, type and member
names but a layout of its own (tests/progs/fake_nccl.cc), built with debug
info. The double writes what it was called with and every plan it launched
to FAKE_NCCL_LOG, from its own structs: that log is the truth each recorded
field is compared with."""

import json
import subprocess
from pathlib import Path

import pytest

from lib.jsonl import read_jsonl
from lib.paths import PROGS, REPO
from lib.processes import interpreters, thread_lines, Workload
from lib.run import record, record_attached, run_ncclprobe
from lib.skip import needs_bpf

pytestmark = needs_bpf

REAL_NCCL = Path("/usr/local/cuda/lib64/libnccl.so.2")
PY_NCCL = REPO / "tests/progs/py_nccl.py"
FAKE = PROGS / "libfakenccl.so"

SCENARIOS = ["loop", "coalesced", "two-comms", "symmetric", "ce", "alltoall", "reduce-bcast",
             "mixed-group"]
API_OPS = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Bcast", "Reduce", "AlltoAll",
           "Gather", "Scatter", "Send", "Recv"}
# nccl.jsonl names ncclBcast like ncclBroadcast: the same operation
OP_NAME = {"Bcast": "Broadcast"}
SIZES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "float16": 2,
         "float32": 4, "float64": 8, "bfloat16": 2, "float8e4m3": 1, "float8e5m2": 1}


def truth(path):
    """The double's log: API calls, communicators by pointer, launches."""
    lines = read_jsonl(path)
    apis, last = [], {}
    for x in lines:
        if x.get("api") not in API_OPS | {"GroupStart", "GroupEnd"}:
            continue
        # ncclBcast calls the exported ncclBroadcast (as NCCL 2.28 does): one operation
        prev = last.get(x["tid"])
        last[x["tid"]] = x
        if x["api"] == "Broadcast" and prev and prev["api"] == "Bcast" and \
                (prev["comm"], prev["count"]) == (x["comm"], x["count"]):
            continue
        apis.append(x)
    comms = {x["comm"]: x for x in lines if x.get("api") == "CommInitRank"}
    launches = [x for x in lines if "launch" in x]
    return apis, comms, launches


def record_scenario(tmp_path, scenario, iters=2, extra=()):
    log = tmp_path / "fake.log"
    rec = record(tmp_path, ["--", PROGS / "nccl_user", "--scenario", scenario, "--iters", iters,
                            "--nranks", 4, "--rank", 1, *extra],
                 env={"FAKE_NCCL_LOG": str(log)})
    assert rec.returncode == 0, rec.stderr
    return rec, *truth(log)


def check_ops_against_api_calls(rec, apis, comms):
    """nccl.jsonl: one line per API call, every argument and the
    communicator's identity as the library has them."""
    ops = rec.jsonl("nccl.jsonl")
    by_tid = {}
    for op in ops:
        by_tid.setdefault(op["tid"], []).append(op)
    want_by_tid = {}
    for a in apis:
        want_by_tid.setdefault(a["tid"], []).append(a)
    assert {t: len(v) for t, v in by_tid.items()} == {t: len(v) for t, v in want_by_tid.items()}
    for tid, want_ops in want_by_tid.items():
        for got, want in zip(by_tid[tid], want_ops):
            assert got["op"] == OP_NAME.get(want["api"], want["api"]), (got, want)
            if want["api"] in ("GroupStart", "GroupEnd"):
                assert got["comm_hash"] is None and got["rank"] is None
                continue
            for key in ("count", "datatype", "redop", "root", "peer", "stream", "comm"):
                assert got[key] == want[key], (key, got, want)
            assert got["bytes"] == want["count"] * SIZES[want["datatype"]]
            # the buffer the call passes (Recv's is its receive buffer)
            buf = want["recvbuff"] if want["api"] == "Recv" else want["sendbuff"]
            assert got["sendbuff"] == buf, (got, want)
            if want["api"] not in ("Send", "Recv", "Bcast"):
                assert got["recvbuff"] == want["recvbuff"]
            comm = comms[want["comm"]]
            for key in ("comm_hash", "rank", "nranks", "cuda_dev"):
                assert got[key] == comm[key], (key, got, comm)
    return ops


def check_launches_against_plans(rec, launches):
    """launches.jsonl: every NCCL launch with its plan, field by field."""
    got = [x for x in rec.jsonl("launches.jsonl") if x["api"].startswith("ncclLaunch")]
    assert len(got) == len(launches)
    stacks = rec.stacks()
    for g, w in zip(sorted(got, key=lambda x: x["ts_ns"]), launches):
        n = g["nccl"]
        assert g["api"] == w["launch"]
        for key in ("comm", "comm_hash", "rank", "nranks", "cuda_dev", "symmetric",
                    "copy_engine", "kernel_fn"):
            assert n[key] == w[key], (key, g, w)
        assert g["stream"] == w["stream"]
        if w["copy_engine"]:
            assert g["kernel"] == "<nccl copy engine>"
            [op] = n["ops"]
            [wop] = w["ops"]
            assert (op["op"], op["count"], op["bytes"], op["root"]) == \
                   (wop["op"], wop["count"], wop["bytes"], wop["root"])
        else:
            assert g["kernel"] == w["kernel"]
            assert (g["grid"], g["block"]) == (w["grid"], w["block"])
        if w["symmetric"]:
            # NCCL frees a symmetric plan's tasks before launching: said, not guessed
            assert n["ops"] == [] and "symmetric" in n["missing"]
        elif not w["copy_engine"]:
            keys = ("op", "count", "datatype", "bytes", "redop", "root", "peer", "algorithm",
                    "protocol", "nchannels")
            assert [{k: op[k] for k in keys} for op in n["ops"]] == \
                   [{k: op[k] for k in keys} for op in w["ops"]], (g, w)
            assert n["ops_total"] == len(w["ops"]) and not n["ops_truncated"]
            assert "missing" not in n
        # [NCCL]<types> right above the kernel, in plan order
        types = []
        for op in w["ops"]:
            if op["op"] not in types:
                types.append(op["op"])
        frames = stacks[g["stack_id"]]
        assert frames[-2:] == [w["launch"], "[NCCL]" + "+".join(types)], frames
    return got


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_operation_and_plan_equals_what_the_library_did(tmp_path, scenario):
    rec, apis, comms, launches = record_scenario(tmp_path, scenario)
    assert launches and apis
    check_ops_against_api_calls(rec, apis, comms)
    check_launches_against_plans(rec, launches)
    s = rec.summary
    assert s["nccl"]["plans"] == len(launches)
    assert s["nccl"]["launches_without_plan"] == 0 and s["nccl"]["plans_unclaimed"] == 0
    # ncclBcast's inner ncclBroadcast is not an operation of its own
    assert s["nccl"]["internal_api_calls"] == sum(a["api"] == "Bcast" for a in apis)
    [lib] = s["nccl"]["libraries"]
    assert lib["debug_info"] and lib["kernel_plans"] and lib["missing"] == ""
    # the double's own enums (DWARF), its version from its banner
    assert set(lib["names_from"].values()) == {"dwarf"} and lib["support"] == "full"
    assert lib["names"]["ncclFunc_t"][4] == "AllReduce" and lib["version"] == "2.28.9"
    # folded stacks: the operation type above the kernel leaf
    folded = rec.folded()
    for w in launches:
        leaf = "[GPU_Kernel]" + (w["kernel"] or "<nccl copy engine>")
        assert any(s.endswith(";" + leaf) and ";[NCCL]" in s for s in folded), (leaf, folded)


def test_call_chains_and_group_launches(tmp_path):
    """The application's chain down to each API call; a collective outside a
    group launches from inside its call, the group's Send and Recv in one
    plan from ncclGroupEnd."""
    rec, apis, comms, launches = record_scenario(tmp_path, "loop", iters=3)
    printed = thread_lines(rec.stdout, key="op", value="calls")
    stacks = rec.stacks()
    callers = {"AllReduce": "allreduce_grads", "AllGather": "gather_params",
               "ReduceScatter": "scatter_grads", "Broadcast": "bcast_weights"}
    got = {}
    for op in rec.jsonl("nccl.jsonl"):
        caller = callers.get(op["op"], "exchange")
        assert stacks[op["stack_id"]][-4:] == ["main", "train_step", caller, "nccl" + op["op"]]
        got[(op["tid"], op["op"])] = got.get((op["tid"], op["op"]), 0) + 1
    assert got == printed
    folded = rec.folded()
    for op, caller in callers.items():
        tail = f"{caller};nccl{op};ncclEnqueueCheck;groupLaunch;ncclLaunchKernel;[NCCL]{op};"
        assert sum(c for s, c in folded.items() if tail in s) == 3, (tail, folded)
    tail = "exchange;ncclGroupEnd;groupLaunch;ncclLaunchKernel;[NCCL]Send+Recv;" \
           "[GPU_Kernel]ncclDevKernel_SendRecv"
    assert sum(c for s, c in folded.items() if s.endswith(tail)) == 3


def test_communicators_created_before_attach_and_their_totals(tmp_path, workloads):
    """Two communicators, created before ncclprobe attaches, used from two
    threads: each is named (hash, rank, size) from its own memory, and
    summary.json totals every communicator's calls, bytes and launches."""
    log = tmp_path / "fake.log"
    w = Workload([PROGS / "nccl_user", "--scenario", "two-comms", "--iters", 3, "--nranks", 3,
                  "--wait-signal"], env={"FAKE_NCCL_LOG": str(log)})
    workloads.append(w)
    rec, _, _ = record_attached(tmp_path, w)
    assert rec.returncode == 0, rec.stderr
    apis, comms, launches = truth(log)
    assert len(comms) == 2
    ops = check_ops_against_api_calls(rec, apis, comms)
    check_launches_against_plans(rec, launches)
    assert len({op["tid"] for op in ops}) == 2

    want = {}
    for a in apis:
        if a["api"] in API_OPS:
            c = want.setdefault(a["comm"], {"calls": 0, "bytes": 0, "ops": {}})
            name = OP_NAME.get(a["api"], a["api"])
            o = c["ops"].setdefault(name, {"calls": 0, "bytes": 0})
            nbytes = a["count"] * SIZES[a["datatype"]]
            for d in (c, o):
                d["calls"] += 1
                d["bytes"] += nbytes
    for x in launches:
        c = want[x["comm"]]
        c["kernel_launches"] = c.get("kernel_launches", 0) + 1
        c["planned_ops"] = c.get("planned_ops", 0) + len(x["ops"])
    got = {c["comm"]: c for c in rec.summary["nccl"]["communicators"]}
    assert set(got) == set(want)
    for comm, c in want.items():
        g = got[comm]
        for key in ("comm_hash", "rank", "nranks", "cuda_dev"):
            assert g[key] == comms[comm][key]
        for key, value in c.items():
            assert g[key] == value, (key, g, c)
    hashes = {c["comm_hash"] for c in got.values()}
    assert len(hashes) == 2


@pytest.mark.parametrize("python", interpreters())
def test_python_callers_of_nccl(tmp_path, python):
    """A Python program driving NCCL through ctypes, as a framework would:
    each operation's stack names the Python method that issued it, and the
    launch stacks carry the [NCCL] frame above the kernel."""
    log = tmp_path / "fake.log"
    rec = record(tmp_path, ["--", python, PY_NCCL, "--lib", FAKE, "--iters", 3],
                 env={"FAKE_NCCL_LOG": str(log)}, timeout=120)
    assert rec.returncode == 0, rec.stderr
    printed = {line.split()[1][3:] for line in rec.stdout.splitlines()
               if line.startswith("py fn=")}
    apis, comms, launches = truth(log)
    check_ops_against_api_calls(rec, apis, comms)
    check_launches_against_plans(rec, launches)
    stacks = rec.stacks()
    seen = {}
    for op in rec.jsonl("nccl.jsonl"):
        methods = [f.split(" (")[0] for f in stacks[op["stack_id"]] if ".py" in f]
        # 3.10 code objects have no qualified name: "all_reduce_grads"
        fn = next((p for m in methods for p in printed if m in (p, p.split(".")[-1])), None)
        assert fn, (op, stacks[op["stack_id"]])
        seen.setdefault(fn, set()).add(op["op"])
    assert set(seen) == printed
    assert any("[NCCL]AllReduce;" in s and "all_reduce_grads (py_nccl.py:" in s
               for s in rec.folded())


def test_stripped_library_keeps_the_api_data_and_says_what_is_missing(tmp_path):
    lib_dir = tmp_path / "lib"
    lib_dir.mkdir()
    subprocess.run(["objcopy", "--strip-debug", FAKE, lib_dir / "libfakenccl.so"], check=True)
    log = tmp_path / "fake.log"
    rec = record(tmp_path, ["--", PROGS / "nccl_user", "--iters", 2],
                 env={"FAKE_NCCL_LOG": str(log), "LD_LIBRARY_PATH": str(lib_dir)})
    assert rec.returncode == 0, rec.stderr
    assert "no debug info" in rec.stderr
    apis, comms, launches = truth(log)
    ops = rec.jsonl("nccl.jsonl")
    assert len(ops) == len(apis)
    for op, want in zip(ops, apis):
        assert op["op"] == want["api"] and op["comm_hash"] is None and op["rank"] is None
        if want["api"] in API_OPS:
            assert (op["count"], op["datatype"]) == (want["count"], want["datatype"])
    got = [x for x in rec.jsonl("launches.jsonl") if x["api"] == "ncclLaunchKernel"]
    assert len(got) == len(launches)
    for g in got:
        assert g["kernel"] == "<nccl kernel>" and "stripped" in g["nccl"]["missing"]
        assert "ops" not in g["nccl"]
    [lib] = rec.summary["nccl"]["libraries"]
    assert not lib["debug_info"] and "stripped" in lib["missing"]
    assert rec.summary["nccl"]["launches_without_plan"] == len(launches)
    # said once; its enum names from the built-in table, and said so
    assert lib["support"] == "degraded" and rec.stderr.count("no debug info") == 1
    assert set(lib["names_from"].values()) == {"built-in"}
    assert lib["version"] == "2.28.9"  # the banner is not debug info


def test_a_version_outside_the_tested_ones_is_said_once(tmp_path):
    """The double's version banner made 2.99.9: everything is still read by
    name from its DWARF, summary.json says "untested", one warning says why."""
    lib_dir = tmp_path / "lib"
    lib_dir.mkdir()
    data = FAKE.read_bytes()
    assert data.count(b"NCCL version 2.28.9+") == 1
    (lib_dir / "libfakenccl.so").write_bytes(data.replace(b"NCCL version 2.28.9+",
                                                          b"NCCL version 2.99.9+"))
    log = tmp_path / "fake.log"
    rec = record(tmp_path, ["--", PROGS / "nccl_user", "--iters", 2],
                 env={"FAKE_NCCL_LOG": str(log), "LD_LIBRARY_PATH": str(lib_dir)})
    assert rec.returncode == 0, rec.stderr
    [lib] = rec.summary["nccl"]["libraries"]
    assert (lib["version"], lib["support"], lib["missing"]) == ("2.99.9", "untested", "")
    warnings = [x for x in rec.stderr.splitlines() if "2.99.9" in x]
    assert len(warnings) == 1 and "warning" in warnings[0] and lib["support_note"] in warnings[0]
    apis, comms, launches = truth(log)
    check_ops_against_api_calls(rec, apis, comms)
    check_launches_against_plans(rec, launches)


@pytest.mark.skipif(not REAL_NCCL.exists(), reason=f"{REAL_NCCL} not installed")
def test_real_libnccl_attaches_and_reports_api_arguments(tmp_path, workloads):
    w = Workload([PROGS / "nccl_user", "--iters", "4", "--real-nccl", REAL_NCCL,
                  "--wait-signal"])
    workloads.append(w)
    rec, out, _ = record_attached(tmp_path, w)
    assert rec.returncode == 0, rec.stderr
    assert "rc=4" in out  # ncclInvalidArgument: comm is NULL, no GPU

    real = [p for p in rec.summary["probes"] if p["library"].endswith("libnccl.so.2")]
    by_symbol = {p["symbol"]: p for p in real}
    # the launch funnels, local .symtab-only C++ symbols
    assert by_symbol["_Z16ncclLaunchKernelP8ncclCommP14ncclKernelPlan"]["attached"]
    assert by_symbol["_Z16ncclLaunchCeCollP8ncclCommP14ncclKernelPlan"]["attached"]
    # cudart is linked statically into libnccl: probed there too
    for symbol in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaGetFuncBySymbol"):
        assert by_symbol[symbol]["attached"], symbol
    for symbol in ("ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast",
                   "ncclBcast", "ncclReduce", "ncclAlltoAll", "ncclGather", "ncclScatter",
                   "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd"):
        assert by_symbol[symbol]["attached"], symbol
    assert all(p["attached"] for p in real)
    # its DWARF gives everything ncclprobe reads
    [lib] = [x for x in rec.summary["nccl"]["libraries"] if x["path"].endswith("libnccl.so.2")]
    assert lib["debug_info"] and lib["communicator_identity"] and lib["kernel_plans"]
    assert lib["missing"] == "" and lib["support"] == "full" and lib["version"] == "2.28.9"

    ops = [op for op in rec.jsonl("nccl.jsonl") if op["op"] == "AllReduce"]
    assert len(ops) == 4 == thread_lines(out, key="op", value="calls")[(w.pid, "AllReduce")]
    for op in ops:
        assert (op["count"], op["datatype"], op["bytes"], op["redop"], op["stream"]) == \
               (1048576, "float32", 4194304, "sum", "0x5010")
        assert op["comm"] == "0x0" and op["comm_hash"] is None  # NULL: nothing to read
    assert by_symbol["ncclAllReduce"]["hits"] == 4


def test_report_on_a_recording(tmp_path):
    """`ncclprobe report` on a real recording: the stacks behind each NCCL
    kernel, counted as the library launched them."""
    rec, apis, comms, launches = record_scenario(tmp_path, "loop", iters=3)
    out = run_ncclprobe(["report", rec.path, "--json", "--depth", "0"])
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["total"] == len(launches)
    want = {}
    for x in launches:
        want[x["kernel"]] = want.get(x["kernel"], 0) + 1
    kernels = {}
    for s in got["stacks"]:
        for name, n in s["kernels"].items():
            kernels[name] = kernels.get(name, 0) + n
        assert s["frames"][-1].startswith("[NCCL]") and s["frames"][-2] == "ncclLaunchKernel"
    assert kernels == want
    out = run_ncclprobe(["report", rec.path, "--op", "AllReduce", "--json"])
    got = json.loads(out.stdout)
    n = sum(1 for x in launches if any(op["op"] == "AllReduce" for op in x["ops"]))
    assert got["total"] == n == 3
    [stack] = got["stacks"]
    assert stack["count"] == 3 and "allreduce_grads" in stack["frames"]
    text = run_ncclprobe(["report", rec.path, "--op", "AllReduce"]).stdout
    assert "Appeared 3 times" in text and "[NCCL]AllReduce" in text
