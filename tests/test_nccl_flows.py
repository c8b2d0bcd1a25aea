"""NCCL proxy flows (--nccl-flows): ops, per-step SEND/RECV with their
peers, and each communicator's channel topology, read from an unpatched
library through .symtab probes (SaveProxy's .isra clone included) and
DWARF offsets.

The double (tests/progs/fake_nccl.cc) runs NCCL's proxy path with NCCL's
names and a layout of its own: ncclProxySaveOp -> SaveProxy per pattern,
and writes what it posted, step by step, to FAKE_NCCL_LOG ("flow" lines):
every flow record and topology entry must equal that log, field by field.
One GPU cannot produce proxy ops (no peers): this is the test there is."""

import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from lib.bpf import bpf_objects_of, bpftool
from lib.jsonl import read_jsonl
from lib.paths import PROGS
from lib.processes import wait_for, Workload
from lib.run import record, record_attached, run_ncclprobe
from lib.skip import needs_bpf, needs_tools

pytestmark = needs_bpf

REAL_NCCL = Path("/usr/local/cuda/lib64/libnccl.so.2")
FAKE = PROGS / "libfakenccl.so"
NRANKS, RANK = 4, 1

OP_KEYS = ["opCount", "rank", "nranks", "pid", "channel", "nsteps", "nbytes", "chunkSize",
           "sliceSteps", "chunkSteps", "pattern", "protocol", "algorithm", "coll", "root", "tid"]
STEP_KEYS = ["opCount", "rank", "channel", "step", "op", "peer", "bytes", "pattern", "protocol",
             "stage", "conn_index"]
# the patterns the double models; NVLS stands for collnet/nvls
PATTERNS = {"RING", "RING_TWICE", "PIPELINE_FROM", "PIPELINE_TO", "TREE_UP", "TREE_DOWN",
            "TREE_UP_DOWN", "SEND", "NVLS"}


def flow_truth(log):
    lines = [x for x in read_jsonl(log) if "flow" in x]
    by = {}
    for x in lines:
        by.setdefault((x["flow"], x["comm_hash"]), []).append(x)
    return by


def comm_dirs(rec):
    return {p.name[len("comm_"):]: p for p in (rec.path / "flows").glob("comm_*")}


def hex16(h):
    return "0x%016x" % int(h, 16)


def second_half(lines):
    return lines[len(lines) // 2:]


def launch_ids_by_seq(rec, log):
    """{(comm_hash, seq): launch_id}: the double's launches (its log's "launch" lines, "seq"
    per communicator) matched in order to rec's launches.jsonl NCCL launches of the same
    communicator. A window set holds the last ones: they are matched from the end."""
    launches = read_jsonl(rec.path / "launches.jsonl")
    ids = [x["launch_id"] for x in launches]
    assert all(isinstance(i, int) and i > 0 for i in ids) and len(set(ids)) == len(ids)
    got = {}
    for x in launches:
        if x.get("nccl") and x["nccl"].get("comm_hash"):
            got.setdefault(x["nccl"]["comm_hash"], []).append(x["launch_id"])
    want = {}
    for x in read_jsonl(log):
        if "launch" in x:
            want.setdefault(hex16(x["comm_hash"]), []).append(x["seq"])
    by_seq = {}
    for comm, seqs in want.items():
        mine = got.get(comm, [])
        assert 0 < len(mine) <= len(seqs), (comm, mine, seqs)
        for seq, launch_id in zip(seqs[len(seqs) - len(mine):], mine):
            by_seq[(comm, seq)] = launch_id
    return by_seq


def check_against_truth(rec, log, pid, part=None):
    """Every op and step of the log (or of part(its lines), per communicator) is in rec's
    flows/, field by field; each names the launch (launches.jsonl's launch_id) whose plan
    posted it."""
    launch_of = launch_ids_by_seq(rec, log)
    truth = flow_truth(log)
    if part:
        truth = {k: (part(v) if k[0] in ("op", "step") else v) for k, v in truth.items()}
    comms = {c for kind, c in truth if kind == "op"}
    dirs = comm_dirs(rec)
    # a file set per communicator: the ones with ops, and the ones whose proxy had nothing to
    # post (local_comm: P2P/NVLink/SHM only), which still have their topology (check_topology)
    topologies = {c for kind, c in truth if kind == "topology"}
    assert comms < topologies and {hex16(c) for c in topologies} == {"0x" + d for d in dirs}
    for comm in topologies - comms:
        d = dirs[hex16(comm)[2:]]
        assert read_jsonl(d / f"proxy_flow_rank{RANK}.jsonl") == []
        assert read_jsonl(d / f"flow_steps_rank{RANK}.jsonl") == []
    patterns = Counter()
    for comm in comms:
        d = dirs[hex16(comm)[2:]]
        ops = read_jsonl(d / f"proxy_flow_rank{RANK}.jsonl")
        want_ops = truth[("op", comm)]
        assert len(ops) == len(want_ops)
        for got, want in zip(ops, want_ops):
            assert got["comm"] == hex16(comm)
            assert got["pid"] == pid
            for key in OP_KEYS:
                assert got[key] == want[key], (key, got, want)
            assert got["launch_id"] == launch_of[(hex16(comm), want["launch_seq"])], (got, want)
            patterns[got["pattern"]] += 1
        op_launch = {(x["opCount"], x["channel"]): x["launch_id"] for x in ops}
        steps = read_jsonl(d / f"flow_steps_rank{RANK}.jsonl")
        want_steps = truth[("step", comm)]
        assert len(steps) == len(want_steps)
        for got, want in zip(steps, want_steps):
            assert got["comm"] == hex16(comm) and got["nranks"] == want_ops[0]["nranks"]
            for key in STEP_KEYS:
                assert got[key] == want[key], (key, got, want)
            assert got["launch_id"] == op_launch[(got["opCount"], got["channel"])], got
        whole = json.loads((d / f"flow_rank{RANK}.json").read_text())
        assert whole["rank"] == RANK and whole["meta"] == ops[0] and whole["steps"] == steps
    return truth, patterns


def check_topology(rec, truth):
    """Every communicator's topology (sent at its first kernel: also one whose proxy posts
    nothing) equals the library's, channel by channel."""
    for (kind, comm), [want] in ((k, v) for k, v in truth.items() if k[0] == "topology"):
        path = rec.path / "flows" / f"topology_{hex16(comm)[2:]}_rank{want['rank']}.json"
        got = json.loads(path.read_text())
        assert (got["rank"], got["nranks"], got["nchannels"]) == \
            (want["rank"], want["nranks"], want["nchannels"])
        assert len(got["channels"]) == want["nchannels"]
        for g, w in zip(got["channels"], want["channels"]):
            assert g["channel"] == w["channel"]
            assert g["ring"] == w["ring"]
            assert g["tree"] == w["tree"]
            assert g["nvls"] == w["nvls"]


def test_flows_equal_the_library_s_own_log(tmp_path):
    """Two communicators, every modelled pattern: each proxy op and each
    step (peer, direction, bytes, stage) as the library posted them."""
    log = tmp_path / "fake.log"
    rec = record(tmp_path, ["--nccl-flows", "--", PROGS / "nccl_user", "--scenario", "flows",
                            "--iters", 2, "--nranks", NRANKS, "--rank", RANK],
                 env={"FAKE_NCCL_LOG": str(log)})
    assert rec.returncode == 0, rec.stderr
    pid = next(x["pid"] for x in rec.jsonl("nccl.jsonl"))
    truth, patterns = check_against_truth(rec, log, pid)
    assert set(patterns) == PATTERNS  # the truth covers what the test claims
    check_topology(rec, truth)
    fl = rec.summary["nccl_flows"]
    [lib] = fl["libraries"]
    assert lib["probed"] and lib["save_proxy_clone"] and lib["patterns_from_dwarf"]
    assert lib["launch_ids"] and "launch_ids_missing" not in lib
    assert lib["topology_at_first_kernel"]
    n_ops = sum(len(v) for k, v in truth.items() if k[0] == "op")
    n_steps = sum(len(v) for k, v in truth.items() if k[0] == "step")
    assert (fl["ops"], fl["steps"], fl["records_dropped"], fl["malformed"]) == \
        (n_ops, n_steps, 0, 0)
    # the API-level records are all there too
    assert len(rec.jsonl("nccl.jsonl")) > 0
    check_report(rec, truth)


def check_report(rec, truth):
    """`report --flows --json`: per communicator, steps and bytes per peer
    and channel, ops per channel, steps per pattern and protocol, all
    totalled from the library's own log; the table names each communicator."""
    proc = run_ncclprobe(["report", "--flows", "--json", rec.path])
    assert proc.returncode == 0, proc.stderr
    got = {c["comm"]: c for c in json.loads(proc.stdout)["communicators"]}
    comms = {c for kind, c in truth if kind == "op"}
    assert set(got) == {hex16(c) for c in comms}
    for comm in comms:
        peers, channels, patterns = {}, {}, Counter()
        for x in truth[("step", comm)]:
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
        for x in truth[("op", comm)]:
            channels.setdefault(x["channel"], {"channel": x["channel"], "ops": 0, "steps": 0,
                                               "bytes": 0})["ops"] += 1
        g = got[hex16(comm)]
        assert g["ops"] == len(truth[("op", comm)]) and g["steps"] == len(truth[("step", comm)])
        assert g["peers"] == [peers[k] for k in sorted(peers)]
        assert g["channels"] == [channels[k] for k in sorted(channels)]
        assert {(x["pattern"], x["protocol"]): x["steps"] for x in g["patterns"]} == patterns
    table = run_ncclprobe(["report", "--flows", rec.path])
    assert table.returncode == 0 and all(hex16(c) in table.stdout for c in comms)
    empty = run_ncclprobe(["report", "--flows", rec.path / "flows"])  # not a recording
    assert empty.returncode == 1 and "--nccl-flows" in empty.stderr


def test_communicators_created_before_attach(tmp_path, workloads):
    """Attached to a running process whose communicators exist already: the
    same flows and topology, read from their memory."""
    log = tmp_path / "fake.log"
    w = Workload([PROGS / "nccl_user", "--scenario", "flows", "--iters", 2, "--nranks", NRANKS,
                  "--rank", RANK, "--wait-signal"], env={"FAKE_NCCL_LOG": str(log)})
    workloads.append(w)
    rec, _, _ = record_attached(tmp_path, w, extra=["--nccl-flows"])
    assert rec.returncode == 0, rec.stderr
    truth, patterns = check_against_truth(rec, log, w.proc.pid)
    assert set(patterns) == PATTERNS
    check_topology(rec, truth)


def flow_links(pid):
    """The links pid holds whose program is one of the flow probes."""
    names = {p["id"]: p.get("name", "") for p in bpftool("prog", "show")}
    _, held = bpf_objects_of(pid)
    return [x for x in bpftool("link", "show")
            if x["id"] in held and names.get(x.get("prog_id"), "").startswith("np_flow_")]


def flows_daemon(tmp_path, workloads, pause_after=None):
    """A daemon with nccl_flows = yes, tracing nccl_user --scenario flows (--iters 2) on the
    double under the name the daemon finds NCCL by (libnccl*: a copy, preloaded; its soname
    stands for the one linked). Returns (daemon, workload, truth log)."""
    from lib.daemon import Daemon
    log = tmp_path / "fake.log"
    named = tmp_path / "libnccl.so.2"
    shutil.copy(FAKE, named)
    d = Daemon(tmp_path / "d", include_comm="nccl_user", aggregate="no", nccl_flows="yes")
    pause = ["--pause-after", pause_after] if pause_after is not None else []
    w = Workload([PROGS / "nccl_user", "--scenario", "flows", "--iters", 2, "--nranks",
                  NRANKS, "--rank", RANK, "--wait-signal", *pause],
                 env={"FAKE_NCCL_LOG": str(log), "LD_PRELOAD": str(named)})
    workloads.append(w)
    d.wait_traced(w.proc.pid)
    return d, w, log


def check_window_set(d, w, log, part=None):
    """The process's one window set holds the flows of the log (or of part of it) and the
    topology of every communicator; window.json counts them."""
    from types import SimpleNamespace
    (name, window), = d.written_sets(w.proc.pid, timeout=60).items()
    rec = SimpleNamespace(path=d.out / name)
    truth, patterns = check_against_truth(rec, log, w.proc.pid, part)
    assert set(patterns) == PATTERNS
    check_topology(rec, truth)
    n_ops = sum(len(v) for k, v in truth.items() if k[0] == "op")
    n_steps = sum(len(v) for k, v in truth.items() if k[0] == "step")
    fl = window["nccl_flows"]
    assert (fl["ops"], fl["steps"], fl["malformed"], fl["write_errors"]) == (n_ops, n_steps, 0, 0)


@needs_tools("bpftool")
def test_daemon_writes_flows_into_capture_window_sets(tmp_path, workloads):
    """nccl_flows = yes in the daemon: the capture window's set of the traced NCCL process
    holds every op, step and topology entry of the library's log, as record's does, and its
    window.json counts them; the flow probes go when the process does."""
    d, w, log = flows_daemon(tmp_path, workloads)
    try:
        # ncclProxySaveOp, SaveProxy, uploadProxyOps, ncclLaunchKernel; uprobe_multi links
        # (the daemon has no SYS_ADMIN)
        assert len(flow_links(d.pid)) == 4
        assert d.ctl("start", "--duration", "120").returncode == 0
        w.go()
        w.finish()
        check_window_set(d, w, log)
        wait_for(lambda: not flow_links(d.pid), 30, "the exited process's flow links closed")
        rc, _ = d.terminate()
        assert rc == 0
        d.assert_clean()
    finally:
        d.kill()


def test_daemon_window_after_the_first_ops_still_gets_the_topology(tmp_path, workloads):
    """A window opened after the communicators' first ops (when BPF sent their topology,
    once): the set has the window's ops and steps only, and every communicator's topology,
    kept by the daemon since."""
    d, w, log = flows_daemon(tmp_path, workloads, pause_after=1)
    try:
        w.go()  # the first iteration, outside any window
        assert w.proc.stdout.readline().startswith("ready ")
        assert d.ctl("start", "--duration", "120").returncode == 0
        w.go()
        w.finish()
        check_window_set(d, w, log, part=second_half)
        rc, _ = d.terminate()
        assert rc == 0
        d.assert_clean()
    finally:
        d.kill()


def test_off_by_default(tmp_path):
    rec = record(tmp_path, ["--", PROGS / "nccl_user", "--scenario", "flows", "--iters", 1])
    assert rec.returncode == 0, rec.stderr
    assert not (rec.path / "flows").exists()
    assert "nccl_flows" not in rec.summary


def test_no_debug_info_no_flows_and_said_so(tmp_path):
    """Without DWARF the flows are absent, summary.json says why, and the
    API-level records stay."""
    lib_dir = tmp_path / "lib"
    lib_dir.mkdir()
    subprocess.run(["objcopy", "--strip-debug", FAKE, lib_dir / "libfakenccl.so"], check=True)
    rec = record(tmp_path, ["--nccl-flows", "--", PROGS / "nccl_user", "--scenario", "flows",
                            "--iters", 1, "--nranks", NRANKS, "--rank", RANK],
                 env={"LD_LIBRARY_PATH": str(lib_dir)})
    assert rec.returncode == 0, rec.stderr
    [lib] = rec.summary["nccl_flows"]["libraries"]
    assert not lib["probed"] and "no debug info" in lib["missing"]
    assert not (rec.path / "flows").exists()
    assert len(rec.jsonl("nccl.jsonl")) > 0


@pytest.mark.skipif(not REAL_NCCL.exists(), reason="no toolkit libnccl.so.2")
def test_real_libnccl_flow_probes_attach(tmp_path):
    """The toolkit's libnccl 2.28.9: both flow probes attach (SaveProxy's
    .isra.11 clone), every offset resolves. It cannot run a collective
    without a GPU, so no flow is expected."""
    rec = record(tmp_path, ["--nccl-flows", "--", PROGS / "nccl_user", "--real-nccl", REAL_NCCL,
                            "--iters", 1])
    assert rec.returncode == 0, rec.stderr
    libs = [x for x in rec.summary["nccl_flows"]["libraries"] if "libnccl.so" in x["path"]]
    assert libs and all(x["probed"] and x["save_proxy_clone"] and x["patterns_from_dwarf"]
                        and x["launch_ids"] and x["topology_at_first_kernel"] for x in libs), libs
