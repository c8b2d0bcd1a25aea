"""The GPU side end to end: ncclprobe records cupti_app, which loads the real
libncclprobe_cupti.so the way the CUDA driver does and makes real libcudart
launch calls under real BPF; the CUPTI calls are answered by
libcupti_replay.so, a TEST DOUBLE of CUPTI (no GPU here), scripted by the
app. Every launch must carry exactly the GPU records the app scripted for
it (--expect is the truth), joined through the correlation marker, not by
time; merged.folded / merged.gpu_ns.folded must add up to the same truth.
Rogue clients of the socket are rejected and counted, and lose nothing else.
"""

import json
import os
import socket
import struct
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from lib.cupti_app import APP, record_cupti_app, record_py_cupti, truth
from lib.folded import ext_rows, folded_totals, gpu_leaf
from lib.jsonl import outer_launches
from lib.paths import CUPTI_LIB, NCCLPROBE
from lib.processes import interpreters
from lib.run import run_ncclprobe
from lib.skip import needs_bpf, needs_replay

pytestmark = [needs_bpf, needs_replay]


def gpu_view(records):
    """What the app scripted vs what ncclprobe wrote, on the fields both have."""
    keys = ("type", "name", "start_ns", "end_ns", "device", "stream", "graph_id",
            "graph_node_id", "copy_kind", "bytes")
    return sorted(tuple(r.get(k) for k in keys) for r in records)


def check_launches(out, expect):
    launches, _, _ = truth(expect)
    got = outer_launches(out)
    assert len(got) == len(launches)
    by_key = {(r["tid"], tuple(r["grid"])): r for r in got if "grid" in r}
    graph = [r for r in got if r["api"].startswith("cudaGraphLaunch")]
    for want in launches:
        if want["api"].startswith("cudaGraphLaunch"):
            # graph launches carry no grid on the CPU side: one per graph
            match = [g for g in graph if g["tid"] == want["tid"] and
                     g["correlation_ids"] == [want["correlation_id"]]]
            assert len(match) == 1, (want, graph)
            mine = match[0]
        else:
            mine = by_key[(want["tid"], tuple(want["grid"]))]
        assert mine["gpu_status"] == "matched"
        assert want["correlation_id"] in mine["correlation_ids"]
        assert gpu_view(mine["gpu"]) == gpu_view(want["gpu"]), mine
    return got


def check_merged(out, expect):
    """merged.* from the truth: each launch's CPU stack (stacks.jsonl, by
    the launch's stack_id) with one leaf per scripted record; records no
    launch made under [no launch stack]."""
    launches, orphans, _ = truth(expect)
    got_launches = outer_launches(out)
    # the CPU stack of each launch, as stacks.ext.folded wrote it (by tid and time)
    ext = {}
    for ts, _, _, tid, _, frames in ext_rows(out / "stacks.ext.folded"):
        ext[(tid, ts)] = ";".join(frames).rpartition(";[GPU_Kernel]")[0]
    stack_of_id = {}
    for r in got_launches:
        for cid in r["correlation_ids"]:
            stack_of_id[cid] = ext[(r["tid"], r["ts_ns"])]
    want_count, want_ns = Counter(), Counter()
    for want in launches:
        stack = stack_of_id[want["correlation_id"]]
        for rec in want["gpu"]:
            want_count[stack + ";" + gpu_leaf(rec)] += 1
            want_ns[stack + ";" + gpu_leaf(rec)] += rec["end_ns"] - rec["start_ns"]
    for o in orphans:
        for rec in o["gpu"]:
            want_count["[no launch stack];" + gpu_leaf(rec)] += 1
            want_ns["[no launch stack];" + gpu_leaf(rec)] += rec["end_ns"] - rec["start_ns"]
    assert folded_totals(out / "merged.folded") == dict(want_count)
    assert folded_totals(out / "merged.gpu_ns.folded") == dict(want_ns)


@pytest.mark.parametrize("scenario", ["eager", "graph", "memcpy", "mixed"])
def test_every_launch_gets_its_gpu_records(tmp_path, scenario):
    out, expect, _ = record_cupti_app(tmp_path, ["--scenario", scenario, "--iters", "6"])
    check_launches(out, expect)
    check_merged(out, expect)
    gpu = json.loads((out / "summary.json").read_text())["gpu"]
    launches, orphans, _ = truth(expect)
    assert gpu["launches_matched"] == len(launches)
    assert gpu["launches_pending"] == 0
    assert gpu["records_unmatched"] == sum(len(o["gpu"]) for o in orphans)


def test_graph_kernels_all_carry_the_graph_launch_stack(tmp_path):
    out, expect, _ = record_cupti_app(tmp_path, ["--scenario", "graph", "--iters", "3"])
    merged = folded_totals(out / "merged.folded")
    graph_lines = {s: n for s, n in merged.items() if "cudaGraphLaunch;" in s}
    leaves = sorted(s.rpartition(";")[2] for s in graph_lines)
    assert leaves == ["[GPU_Kernel]graph_node_%d" % i for i in range(1, 6)] + \
        ["[GPU_Memcpy]HtoD"]
    graph_launches = [r for r in truth(expect)[0] if r["api"] == "cudaGraphLaunch"]
    assert graph_launches and set(graph_lines.values()) == {len(graph_launches)}
    assert all("graph_launch" in s for s in graph_lines)


def test_out_of_order_buffers_and_dropped_records(tmp_path):
    out, expect, _ = record_cupti_app(tmp_path, ["--scenario", "mixed", "--iters", "5",
                                                 "--reverse-buffers", "--drop", "7"])
    check_launches(out, expect)
    check_merged(out, expect)
    summary = json.loads((out / "summary.json").read_text())
    cupti = summary["targets"][0]["cupti"]
    assert cupti["status"] == "active"
    assert cupti["dropped_by_cupti"] == 7


def test_pairing_under_eight_threads_launching_at_once(tmp_path):
    out, expect, _ = record_cupti_app(tmp_path, ["--scenario", "threads", "--threads", "8",
                                                 "--iters", "40"])
    got = check_launches(out, expect)
    assert len(got) == 8 * 40
    assert len({r["tid"] for r in got}) == 8
    for r in got:  # grid x = thread index + 1 names the kernel the thread's records carry
        assert [g["name"] for g in r["gpu"]] == ["thread_kernel_%d" % (r["grid"][0] - 1)]
    gpu = json.loads((out / "summary.json").read_text())["gpu"]
    assert gpu["markers"] == 8 * 40 and gpu["markers_unpaired"] == 0


def test_launches_wait_then_pending_without_records(tmp_path):
    """No daemon-side records for a launch (the replay drops them all):
    after --gpu-timeout-ms the launch is written as [GPU_Launch_Pending]."""
    out, expect, _ = record_cupti_app(tmp_path, ["--scenario", "eager", "--iters", "4",
                                                 "--no-records"],
                                      extra=["--gpu-timeout-ms", "200"])
    got = outer_launches(out)
    assert len(got) == 4 and all(r["gpu_status"] == "pending" for r in got)
    merged = folded_totals(out / "merged.folded")
    assert sum(n for s, n in merged.items() if s.endswith(";[GPU_Launch_Pending]")) == 4


def test_cupti_held_by_another_profiler(tmp_path):
    out, expect, proc = record_cupti_app(tmp_path, ["--scenario", "eager", "--iters", "3"],
                                         env={"CUPTI_REPLAY_BUSY": "Nsight Systems"})
    assert "Nsight Systems" in proc.stderr  # the library's one line and ours
    summary = json.loads((out / "summary.json").read_text())
    cupti = summary["targets"][0]["cupti"]
    assert cupti["status"] == "cupti_busy" and "Nsight Systems" in cupti["message"]
    launches = truth(expect)[0]
    got = outer_launches(out)
    assert len(got) == len(launches) > 0
    assert all(r.get("gpu_status", "none") == "none" and not r.get("gpu") for r in got)
    merged = folded_totals(out / "merged.folded")  # CPU-side kernel names, nothing pending
    assert sum(merged.values()) == len(launches)
    assert all(s.rpartition(";")[2] in ("[GPU_Kernel]eager_kernel_a", "[GPU_Kernel]eager_kernel_b")
               for s in merged)


# ---- rogue clients ---------------------------------------------------------

HDR = struct.Struct("<IHHII")  # magic, version, type, size, pid
MAGIC, VERSION, HELLO, ACTIVITY = 0x5543504E, 1, 1, 2
HELLO_SIZE = HDR.size + 4 + 4 + 8 + 256


def hello(pid, version=VERSION, magic=MAGIC):
    return HDR.pack(magic, version, HELLO, HELLO_SIZE, pid) + struct.pack("<IIQ", 0, 0, 0) + \
        b"rogue".ljust(256, b"\0")


def send(path, data, close_wait=0.05):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(path))
    try:
        s.sendall(data)
    except OSError:
        pass
    time.sleep(close_wait)
    s.close()


def record_waiting_app(tmp_path, app_args):
    """ncclprobe record -- cupti_app --wait-signal: returns the recording
    process, its paths and the app's pid once the app waits for SIGUSR1."""
    out, sock, expect = tmp_path / "rec", tmp_path / "cupti.sock", tmp_path / "expect.jsonl"
    proc = subprocess.Popen(
        [str(NCCLPROBE), "record", "-o", str(out), "--cupti-socket", str(sock), "--",
         str(APP), "--injection", str(CUPTI_LIB), "--expect", str(expect), *app_args,
         "--wait-signal"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("ready "):
        proc.kill()
        raise AssertionError(line + proc.stderr.read())
    return proc, out, sock, expect, int(line.split()[1])


def test_rogue_clients_are_rejected_and_nothing_else_is_lost(tmp_path):
    proc, out, sock, expect, pid = record_waiting_app(tmp_path, ["--scenario", "mixed",
                                                                 "--iters", "5"])
    try:
        me = os.getpid()
        send(sock, os.urandom(4096))                              # random bytes
        send(sock, hello(me)[:20])                                # truncated
        send(sock, HDR.pack(MAGIC, VERSION, HELLO, 64 << 20, me))  # oversized
        send(sock, hello(me, version=99))                         # wrong version
        send(sock, hello(pid))                                    # another process's pid
        send(sock, hello(me))                                     # not traced
        send(sock, HDR.pack(MAGIC, VERSION, ACTIVITY, HDR.size + 8, me) + bytes(8))  # no hello
        time.sleep(0.3)
        os.kill(pid, 10)  # SIGUSR1: the app runs its scenario
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    check_launches(out, expect)
    check_merged(out, expect)
    gpu = json.loads((out / "summary.json").read_text())["gpu"]
    assert gpu["rejected"] == {"bad_magic": 1, "truncated": 1, "oversized": 1,
                               "bad_version": 1, "pid_mismatch": 1, "not_traced": 1,
                               "no_hello": 1, "bad_record": 0, "bad_type": 0,
                               "too_many_clients": 0}
    assert gpu["clients_accepted"] == 1


def start_app(tmp_path, args, env):
    expect = tmp_path / "expect.jsonl"
    proc = subprocess.Popen([str(APP), "--injection", str(CUPTI_LIB), "--expect", str(expect),
                             "--wait-signal", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
    line = proc.stdout.readline()
    assert line.startswith("ready "), line
    return proc, expect


def attach(tmp_path, pid, sock):
    out = tmp_path / "rec"
    rec = subprocess.Popen([str(NCCLPROBE), "record", "-o", str(out), "--cupti-socket",
                            str(sock), "--pid", str(pid)], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 20
    while time.time() < deadline and not sock.exists():
        time.sleep(0.05)
    return rec, out


def run_attached(app, rec, settle_s):
    """Lets the waiting app run its scenario under the attached recording;
    returns the recording's stderr once both are done."""
    try:
        time.sleep(settle_s)
        os.kill(app.pid, 10)  # SIGUSR1
        assert app.wait(timeout=60) == 0
        _, err = rec.communicate(timeout=60)
    finally:
        for p in (app, rec):
            if p.poll() is None:
                p.kill()
    assert rec.returncode == 0, err
    return err


def test_attach_to_a_running_process_its_library_connects_late(tmp_path):
    """--pid: the process started before ncclprobe listened (its library
    found no daemon, CUPTI untouched); once ncclprobe listens the library
    connects within a second, turns CUPTI on, and launches from then on
    get their GPU records."""
    sock = tmp_path / "cupti.sock"
    app, expect = start_app(tmp_path, ["--scenario", "mixed", "--iters", "4"],
                            {"NCCLPROBE_CUPTI_SOCKET": str(sock)})
    rec, out = attach(tmp_path, app.pid, sock)
    run_attached(app, rec, settle_s=2.5)  # the library retries once a second
    check_launches(out, expect)
    check_merged(out, expect)
    cupti = json.loads((out / "summary.json").read_text())["targets"][0]["cupti"]
    assert cupti["status"] == "active"


def test_library_talking_to_another_socket(tmp_path):
    """The process's library sends elsewhere: its launches do not wait for
    GPU records that never come; the summary says why."""
    sock = tmp_path / "cupti.sock"
    app, expect = start_app(tmp_path, ["--scenario", "eager", "--iters", "4"],
                            {"NCCLPROBE_CUPTI_SOCKET": str(tmp_path / "elsewhere.sock")})
    rec, out = attach(tmp_path, app.pid, sock)
    err = run_attached(app, rec, settle_s=1.0)
    got = outer_launches(out)
    assert len(got) == len(truth(expect)[0]) > 0
    assert all(r.get("gpu_status", "none") == "none" for r in got)
    summary = json.loads((out / "summary.json").read_text())
    cupti = summary["targets"][0]["cupti"]
    assert cupti["status"] == "no_connection" and "did not connect" in cupti["message"]
    assert "did not connect" in err


def test_cupti_option_injects_the_library_into_the_command(tmp_path):
    sock = tmp_path / "c.sock"
    proc = run_ncclprobe(["record", "--cupti", "-o", tmp_path / "rec", "--cupti-socket", sock,
                          "--", "/bin/sh", "-c",
                          'echo "$CUDA_INJECTION64_PATH|$NCCLPROBE_CUPTI_SOCKET"'])
    assert proc.returncode == 0, proc.stderr
    lib, _, path = proc.stdout.strip().partition("|")
    assert Path(lib).resolve() == CUPTI_LIB.resolve() and path == str(sock)
    bad = run_ncclprobe(["record", "--cupti", "--no-gpu", "--", "true"])
    assert bad.returncode == 2 and "--cupti needs ncclprobe to listen" in bad.stderr


def test_idle_and_excess_connections_are_closed(tmp_path):
    """At most 256 connections at once (the app's library holds one); a
    connection that says nothing for 5 s is closed; the real client's
    records all arrive."""
    proc, out, sock, expect, pid = record_waiting_app(tmp_path, ["--scenario", "eager",
                                                                 "--iters", "4"])
    conns = []
    try:
        time.sleep(0.3)  # the app's own connection is in
        for _ in range(300):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(sock))
            conns.append(s)
        time.sleep(0.5)
        for s in conns[1:]:  # closed by their peer: not counted
            s.close()
        time.sleep(5.5)  # the one left says nothing: closed by ncclprobe
        os.kill(pid, 10)
        _, err = proc.communicate(timeout=60)
    finally:
        for s in conns:
            s.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    check_launches(out, expect)
    gpu = json.loads((out / "summary.json").read_text())["gpu"]
    assert gpu["rejected"]["too_many_clients"] == 300 - 255
    assert gpu["rejected"]["no_hello"] == 1


@pytest.mark.parametrize("python", interpreters())
def test_python_lines_weighted_by_gpu_time(tmp_path, python):
    """The whole story on each CPython: a Python line's launches, their
    kernels and GPU time. merged.gpu_ns.folded must give matmul 10 x 1000 ns
    and softmax 20 x 300 ns, each under its own Python frames."""
    out, proc = record_py_cupti(tmp_path, python)
    assert "launches matmul=10 softmax=20" in proc.stdout
    ns = folded_totals(out / "merged.gpu_ns.folded")
    count = folded_totals(out / "merged.folded")
    # matmul is called from one line of step(), softmax from two: one stack per line
    want = {"matmul": (1, 10, 10000), "softmax": (2, 10, 3000)}
    for op, (nlines, n, total) in want.items():
        lines = [s for s in ns if s.endswith(";cudaLaunchKernel;[GPU_Kernel]%s_kernel" % op)]
        assert len(lines) == nlines, ns
        step_lines = set()
        for line in lines:
            py = [f for f in line.split(";") if "(py_cupti.py:" in f]
            assert [f.split(" ")[0] for f in py] == ["<module>", "train", "step", op, "launch"]
            step_lines.add(py[2])
            assert ns[line] == total and count[line] == n
        assert len(step_lines) == nlines
