"""The checking logic of tools/gpu-nccl-check.py's 2-rank --nccl-flows check, which
runs only on a machine with 2 GPUs, fed real flows directories made here.

Ranks 0 and 1 of the NCCL test double (nccl_user --scenario flows --nranks 2: its
flows communicator has 4 ranks, two per "node"; peers on the other node go
through the proxy) are each recorded by `ncclprobe record --nccl-flows`, as the
script records each rank. Every check must pass on those directories, and fail
on copies with one thing wrong: a step's peer, the topology, a file missing, a
communicator on one rank only, an undocumented field, the send/recv peer, a
launch id, report totals, summary counts. The byte bound is checked against
numbers derived by hand from the double's model. The script's path without
PyTorch or a GPU is run too."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lib.paths import NCCLPROBE, PROGS, REPO
from lib.run import record
from lib.skip import bpf_unavailable_reason, needs_bpf

SCRIPT = REPO / "tools" / "gpu-nccl-check.py"
NRANKS = 4  # the double's flows communicator: --nranks 2, plus 2


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_nccl_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gnc = load_script()
# What each rank posts to the proxy for p2p (nccl_user sends to rank+1 and receives from
# rank-1 of 4; only the peers on the other "node" have proxy work).
P2P = {0: {"RECV": 3}, 1: {"SEND": 2}}
# The ring all-reduce bytes each rank sends and receives through the proxy, from the double's
# model: ncclAllReduce of 4096 float32 (16384 bytes) as RING_TWICE over 2 channels, LL:
# 8192 bytes a channel in 2*(4-1) steps of 8192 // 6 = 1365 bytes; a rank's ring neighbour on
# the other node is on one channel of the two (even channels run 0,1,2,3, odd ones reversed):
# 6 * 1365 = 8190 bytes each way per call, 2 iterations.
RING_BYTES = 2 * 6 * (8192 // 6)


@pytest.fixture(scope="module")
def recs(tmp_path_factory):
    """{rank: recording directory} of ranks 0 and 1, each recorded on its own."""
    if bpf_unavailable_reason():
        pytest.skip(bpf_unavailable_reason())
    base = tmp_path_factory.mktemp("gpunccl")
    out = {}
    for rank in (0, 1):
        rec = record(base, ["--nccl-flows", "--", PROGS / "nccl_user", "--scenario", "flows",
                            "--iters", 2, "--nranks", 2, "--rank", rank], name=f"rec{rank}")
        assert rec.returncode == 0, rec.stderr
        out[rank] = rec.path
    return out


@pytest.fixture
def copies(recs, tmp_path):
    """Copies of the recordings, for a test to break."""
    return {r: shutil.copytree(p, tmp_path / f"rec{r}") for r, p in recs.items()}


def run_checks(recs, nranks=NRANKS, payload=None, p2p=P2P, report=gnc.run_report):
    """check_flows on recs: the failures and every printed line."""
    said = []
    checks = gnc.Checks(out=said.append)
    payload = RING_BYTES * nranks // (2 * (nranks - 1)) if payload is None else payload
    gnc.check_flows(checks, recs, nranks, payload, p2p, NCCLPROBE, report=report)
    return checks.failures, said


def failed(failures, text):
    return [f for f in failures if text in f]


def the_sets(recs):
    return gnc.own_sets({r: gnc.read_flow_sets(p) for r, p in recs.items()})


def comm_dir(rec):
    """The flows communicator's file set: the one with proxy ops (the double's other two
    communicators are on one "node": file sets with their topology and no op)."""
    [d] = [d for d in (rec / "flows").glob("comm_*")
           if any(d.glob("proxy_flow_rank*.jsonl")) and
           next(d.glob("proxy_flow_rank*.jsonl")).stat().st_size]
    return d


def rewrite_jsonl(path, change):
    """change(index, obj) -> obj or None (the line dropped), over every line of path."""
    rows = [json.loads(x) for x in path.read_text().splitlines() if x]
    out = [change(i, x) for i, x in enumerate(rows)]
    path.write_text("".join(json.dumps(x) + "\n" for x in out if x is not None))


@needs_bpf
def test_real_flows_pass_every_check(recs):
    failures, said = run_checks(recs)
    assert failures == [], "\n".join(said)
    for what in ("the same communicators", "ring steps on every rank", "ring neighbour",
                 "send/recv ops seen: rank 0 RECV from 3, rank 1 SEND to 2",
                 "report --flows totals", "summary.json nccl_flows counts",
                 "launch_id is an NCCL launch", "flow probes (ncclProxySaveOp, SaveProxy)"):
        assert any(x.startswith("ok   ") and what in x for x in said), what
    # what was found, per channel
    assert any(x.startswith("  channel 0: ") and "SEND to" in x for x in said)


@needs_bpf
def test_ring_bytes_and_their_bound(recs):
    sets = the_sets(recs)
    assert gnc.ring_allreduce_bytes(sets) == {r: {"SEND": RING_BYTES, "RECV": RING_BYTES}
                                              for r in (0, 1)}
    for payload, ok in ((RING_BYTES * 4 // 6, True), (RING_BYTES * 4 // 6 + 1, False),
                        # the double's whole payload: half its ring is P2P (no proxy steps)
                        (2 * 16384, False)):
        checks = gnc.Checks(out=lambda _: None)
        gnc.check_allreduce_bytes(checks, sets, NRANKS, payload)
        assert (checks.failures == []) == ok, (payload, checks.failures)


@needs_bpf
def test_a_step_to_another_peer_fails(copies):
    d = comm_dir(copies[0])

    def change(i, x):
        if x["pattern"] == "RING_TWICE" and x["op"] == "SEND" and not change.done:
            change.done = True
            x["peer"] = 2 if x["peer"] != 2 else 1  # a rank of the comm, not ring.next
        return x
    change.done = False
    rewrite_jsonl(d / "flow_steps_rank0.jsonl", change)
    failures, said = run_checks(copies)
    assert failed(failures, "rank 0 comm") and failed(failures, "ring neighbour"), said
    assert not failed(failures, "rank 1 comm"), failures


@needs_bpf
def test_a_topology_that_disagrees_fails(copies):
    topo = next((copies[1] / "flows").glob("topology_*_rank1.json"))
    t = json.loads(topo.read_text())
    for ch in t["channels"]:
        ch["ring"]["prev"], ch["ring"]["next"] = ch["ring"]["next"], ch["ring"]["prev"]
    topo.write_text(json.dumps(t))
    failures, _ = run_checks(copies)
    assert failed(failures, "rank 1 comm") and failed(failures, "ring neighbour"), failures


@needs_bpf
def test_two_ranks_means_the_other_rank(recs):
    """nranks 2: a peer that is the ring neighbour but not the other rank fails (the double's
    4-rank flows fail it; a 2-rank set made from one of its rings passes)."""
    checks = gnc.Checks(out=lambda _: None)
    gnc.check_ring_peers(checks, the_sets(recs), 2)
    assert failed(checks.failures, "ring neighbour")
    two = []
    for rank in (0, 1):
        other = 1 - rank
        topo = {"channels": [{"channel": 0, "ring": {"prev": other, "next": other}}]}
        steps = [{"pattern": "RING_TWICE", "channel": 0, "op": op, "peer": other, "step": i,
                  "opCount": 0} for i in range(2) for op in ("SEND", "RECV")]
        two.append({"rank": rank, "comm": "0x1", "topology": topo, "steps": steps, "ops": []})
    checks = gnc.Checks(out=lambda _: None)
    gnc.check_ring_peers(checks, two, 2)
    assert checks.failures == []
    two[1]["topology"]["channels"][0]["ring"] = {"prev": 1, "next": 1}  # itself: a bad ring
    for x in two[1]["steps"]:
        x["peer"] = 1
    checks = gnc.Checks(out=lambda _: None)
    gnc.check_ring_peers(checks, two, 2)
    assert failed(checks.failures, "rank 1 comm 0x1")


@needs_bpf
def test_a_missing_file_fails(copies):
    (comm_dir(copies[1]) / "flow_rank1.json").unlink()
    failures, _ = run_checks(copies)
    assert failed(failures, "rank 1 comm") and failed(failures, "the whole file set")
    assert failed(failures, "flow_rank1.json is the first op")


@needs_bpf
def test_flows_of_one_rank_missing_fail(copies):
    shutil.rmtree(copies[1] / "flows")
    failures, _ = run_checks(copies)
    assert "rank 1: flows/ exists" in failures and failed(failures, "the same communicators")


@needs_bpf
def test_a_communicator_on_one_rank_only_fails(copies):
    d = comm_dir(copies[1])
    d.rename(d.parent / "comm_00000000000000ff")
    failures, _ = run_checks(copies)
    assert failed(failures, "the same communicators (comm hashes) on every rank"), failures


@needs_bpf
def test_undocumented_or_missing_fields_fail(copies):
    d = comm_dir(copies[0])
    rewrite_jsonl(d / "proxy_flow_rank0.jsonl",
                  lambda i, x: {**x, "extra": 1} if i == 3 else x)
    rewrite_jsonl(d / "flow_steps_rank0.jsonl",
                  lambda i, x: {k: v for k, v in x.items() if k != "stage"} if i == 5 else x)
    failures, _ = run_checks(copies)
    assert failed(failures, "proxy_flow lines, the documented fields")
    assert failed(failures, "flow_steps lines, the documented fields")
    assert failed(failures, "flow_rank0.json is the first op and every step")


@needs_bpf
def test_steps_not_matching_nsteps_fail(copies):
    d = comm_dir(copies[0])
    rewrite_jsonl(d / "flow_steps_rank0.jsonl", lambda i, x: None if i == 0 else x)
    failures, _ = run_checks(copies)
    assert failed(failures, "nsteps step lines per (op, direction, peer)"), failures


@needs_bpf
def test_send_recv_with_another_peer_fails(recs):
    failures, _ = run_checks(recs, p2p={0: {"RECV": 2}, 1: {"SEND": 2}})
    assert failed(failures, "rank 0 comm") and failed(failures, "send/recv ops name the peer")
    assert not failed(failures, "rank 1 comm"), failures
    failures, _ = run_checks(recs, p2p={0: {"RECV": 3, "SEND": 1}, 1: {"SEND": 2}})
    assert failed(failures, "send/recv ops seen"), failures


@needs_bpf
def test_a_wrong_launch_id_fails(copies):
    d = comm_dir(copies[1])
    rewrite_jsonl(d / "proxy_flow_rank1.jsonl",
                  lambda i, x: {**x, "launch_id": 999999} if i == 7 else x)
    failures, _ = run_checks(copies)
    assert failed(failures, "rank 1: each of") and failed(failures, "launch_id"), failures


@needs_bpf
def test_report_totals_that_differ_fail(recs):
    def off_by_one(ncclprobe, rec):
        rep, err = gnc.run_report(ncclprobe, rec)
        rep["communicators"][0]["peers"][0]["send_bytes"] += 1
        return rep, err

    failures, _ = run_checks(recs, report=off_by_one)
    assert failed(failures, "report --flows totals"), failures
    failures, _ = run_checks(recs, report=lambda *_: (None, "exit 1: no flows"))
    assert failed(failures, "report --flows --json parses"), failures


@needs_bpf
def test_summary_that_disagrees_fails(copies):
    d = comm_dir(copies[0])
    rewrite_jsonl(d / "proxy_flow_rank0.jsonl", lambda i, x: None if i == 50 else x)
    s1 = copies[1] / "summary.json"
    summary = json.loads(s1.read_text())
    summary["nccl_flows"]["libraries"][0]["probed"] = False
    s1.write_text(json.dumps(summary))
    failures, _ = run_checks(copies)
    assert "rank 0: summary.json nccl_flows counts equal the files, nothing dropped" in failures
    assert failed(failures, "rank 1: the flow probes")
    del summary["nccl_flows"]
    s1.write_text(json.dumps(summary))
    failures, _ = run_checks(copies)
    assert "rank 1: summary.json has nccl_flows" in failures


def fake_python(tmp_path, answer):
    """An executable standing for a Python: whatever it is asked, it prints answer (the
    script's PyTorch probe line) and exits 0."""
    path = tmp_path / "python"
    path.write_text(f"#!/bin/sh\necho '{json.dumps(answer)}'\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("answer, said", [
    ({"torch": None, "error": "ModuleNotFoundError: No module named 'torch'"},
     "no PyTorch in"),
    ({"torch": "2.5.0", "cuda": False, "gpus": 0, "nccl": False, "nccl_version": None},
     "sees no CUDA GPU"),
    ({"torch": "2.5.0", "cuda": True, "gpus": 1, "nccl": False, "nccl_version": None},
     "has no NCCL backend"),
])
def test_nothing_to_check_is_said(tmp_path, answer, said):
    proc = subprocess.run([sys.executable, SCRIPT, "--python",
                           fake_python(tmp_path, answer), "--out", tmp_path / "out"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "nothing checked" in proc.stdout and said in proc.stdout
    assert not (tmp_path / "out").exists()


def test_this_python_without_torch(tmp_path):
    """The script as run here: this machine's Python has no PyTorch (or no GPU)."""
    proc = subprocess.run([sys.executable, SCRIPT, "--out", tmp_path / "out"],
                          capture_output=True, text=True, timeout=300)
    if "nothing checked" not in proc.stdout:
        pytest.skip("PyTorch with a GPU here: the script checks for real")
    assert proc.returncode == 1 and proc.stderr == ""


@needs_bpf
def test_one_gpu_skips_the_two_rank_check(tmp_path):
    """With 1 GPU the 2-rank check is said as skipped, with the reason (the one-rank checks
    run, and fail on the stand-in Python, which does nothing)."""
    answer = {"torch": "2.5.0", "cuda": True, "gpus": 1, "nccl": True, "nccl_version": "2.28.9"}
    proc = subprocess.run([sys.executable, SCRIPT, "--build", NCCLPROBE.parent, "--python",
                           fake_python(tmp_path, answer), "--out", tmp_path / "out"],
                          capture_output=True, text=True, timeout=300)
    assert "skipped: the 2-rank --nccl-flows check" in proc.stdout, proc.stdout
    assert "needs 2 GPUs, PyTorch sees 1" in proc.stdout
    assert "== two ranks" not in proc.stdout and "rec_flows" not in os.listdir(tmp_path / "out")


FAKE_WORKER = r'''#!/bin/sh
# Stands for "python3 flows_worker.py" as one rank: meets the other rank (both must run at
# once), says what NCCL environment it got, and a result of the worker's shape.
touch "$MEET/rank$RANK"
i=0
while [ ! -e "$MEET/rank$((1 - RANK))" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
[ -e "$MEET/rank$((1 - RANK))" ] || exit 3
[ "$NCCL_P2P_DISABLE $NCCL_SHM_DISABLE $NCCL_NET $NCCL_IB_DISABLE $NCCL_ALGO $NCCL_SOCKET_IFNAME" \
  = "1 1 Socket 1 Ring lo" ] || exit 4
echo "NP_RESULT {\"rank\": $RANK, \"ok\": true, \"all_reduce\": [\
{\"bytes\": 1048576, \"calls\": 12, \"ok\": true, \"median_ms\": 1.25},\
{\"bytes\": 67108864, \"calls\": 12, \"ok\": true, \"median_ms\": 42.5}]}"
'''


@needs_bpf
def test_the_two_rank_job_runs_both_ranks_at_once_each_recorded(tmp_path, monkeypatch, capsys):
    """two_rank_check's plumbing with a stand-in for the PyTorch worker (no GPU here): both ranks
    at once, each under its own `record --nccl-flows --cupti` (its own recording and CUPTI
    socket), NCCL's socket transport in their environment; then the cost runs. The flows
    checks fail: the stand-in runs no NCCL."""
    fake = tmp_path / "python"
    fake.write_text(FAKE_WORKER)
    fake.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)  # the script's default: lo
    for meet in ("m0", "m1", "m2", "m3"):  # one meeting place per job
        (tmp_path / meet).mkdir()
    meets = iter(("m0", "m1", "m2", "m3"))
    real_run_ranks, real_mkdtemp, made = gnc.run_ranks, gnc.tempfile.mkdtemp, []

    def mkdtemp(*a, **k):
        made.append(Path(real_mkdtemp(*a, **k)))
        return str(made[-1])

    def run_ranks(cmds, envs, timeout=600):
        m = str(tmp_path / next(meets))
        return real_run_ranks(cmds, [{**e, "MEET": m} for e in envs], timeout=120)

    monkeypatch.setattr(gnc, "run_ranks", run_ranks)
    monkeypatch.setattr(gnc.tempfile, "mkdtemp", mkdtemp)
    args = type("Args", (), {"python": str(fake), "build": NCCLPROBE.parent})()
    checks = gnc.Checks()
    gnc.two_rank_check(args, out, checks)
    said = capsys.readouterr().out
    assert "ok   the 2-rank job ran under record --nccl-flows --cupti" in said, said
    for rank in (0, 1):
        summary = json.loads((out / f"rec_flows_rank{rank}" / "summary.json").read_text())
        assert "nccl_flows" in summary  # recorded with --nccl-flows, found no NCCL
    assert failed(checks.failures, "flows/ exists")
    assert "all_reduce calls {1048576: 12, 67108864: 12}: payload 817889280" in said
    # the cost runs: no tracer, record, record --nccl-flows, and the checked run
    rows = [x for x in said.splitlines() if "1 MiB 1.25 ms, 64 MiB 42.50 ms" in x]
    assert len(rows) == 4, said
    assert (out / "rec_cost_rank0").is_dir() and (out / "rec_cost_flows_rank1").is_dir()
    assert len(made) == 4 and not any(d.exists() for d in made)  # the sockets' folders
