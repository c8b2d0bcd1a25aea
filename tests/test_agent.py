"""libncclprobe_cupti.so in a process that already runs, from ncclprobe's end of
its socket, without ptrace and without BPF. The GPU side is test doubles:
libcupti_replay.so plays CUPTI (the CUPTI test double), libfakecuda.so the CUDA
driver (handles, and cuFuncGetName / cuKernelGetName).

- cupti_attach_check (tests/progs) calls the live entry point,
  ncclprobe_cupti_attach(fd), on a thread with every signal blocked, with one
  end of a socketpair, and reads the other end: silent until START, HELLO
  with origin 1, names before records, exactly the scripted records, quiet
  once the peer goes, woken by the next attach; loaded at start then attached
  (a wake, origin 0); a busy CUPTI; refused descriptors.
- cupti_app --scenario live: handles made first, launches before and after the
  library reaches its socket (a late connection here: the injection itself is
  tests/test_inject.py's); every launch against the app's own --expect truth.
"""

import json
import os
import signal
import socket
import subprocess
from collections import defaultdict

import pytest

from lib.cupti_app import APP
from lib.gpu_wire import ORIGIN_START, Connection
from lib.jsonl import read_jsonl
from lib.paths import CUPTI_LIB, PROGS
from lib.processes import wait_for
from lib.skip import needs_binary, needs_replay

CHECK = PROGS / "cupti_attach_check"
ATTACH_FAST_US = 50000  # an attach is part of a hijacked thread's pause

pytestmark = [needs_replay, needs_binary(CHECK)]


def run_check(*args):
    proc = subprocess.run([str(CHECK), "--lib", str(CUPTI_LIB), *map(str, args)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert summary["failed"] == 0 and summary["passed"] > 0, summary
    assert all(us < ATTACH_FAST_US for us in summary["attach_us"]), summary
    return summary, proc.stderr


@pytest.mark.parametrize("mode", ["live", "start", "busy", "badfd"])
def test_attach_entry_point(mode):
    summary, stderr = run_check(mode)
    if mode == "busy":  # the one line a process gets when another profiler holds CUPTI
        assert "CUPTI is already used by 'nsys-test'" in stderr
    assert len(summary["attach_us"]) >= 2


def test_attach_refused_while_the_library_writes_a_trace_file(tmp_path):
    run_check("file", tmp_path / "trace.json")
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"] == []


# ---- cupti_app --scenario live -------------------------------------------------------------

def start_live_app(tmp_path, sock, env=None):
    expect = tmp_path / "expect.jsonl"
    app = subprocess.Popen(
        [str(APP), "--scenario", "live", "--injection", str(CUPTI_LIB), "--expect", str(expect),
         "--threads", "2", "--sleep-us", "2000"],
        env={**os.environ, "NCCLPROBE_CUPTI_SOCKET": str(sock), **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = app.stdout.readline()
    if not line.startswith("ready "):
        app.kill()
        raise AssertionError(line + app.stderr.read())
    return app, int(line.split()[1]), expect


def lines_in(path):
    return path.exists() and len(path.read_text().splitlines())


def gpu_view(records):
    return sorted((r["name"], r["start_ns"], r["end_ns"]) for r in records)


# Names before records also when CUPTI is slow to turn on (the real cuptiActivityEnable's first
# kernel enable can take long: launches are reported and recorded meanwhile), and when the thread
# naming a handle is held up in the driver's query longer than a flush period while the other
# thread launches the same handle.
@pytest.mark.parametrize("slow", [{}, {"CUPTI_REPLAY_ENABLE_DELAY_MS": "40"},
                                  {"FAKECUDA_NAME_DELAY_MS": "150"}],
                         ids=["prompt", "slow-enable", "slow-name-query"])
def test_live_app_launches_before_and_after_the_library_is_reached(tmp_path, slow):
    sock = tmp_path / "cupti.sock"
    app, pid, expect = start_live_app(tmp_path, sock, slow)
    try:
        wait_for(lambda: lines_in(expect) >= 30, 20, "launches before any listener")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(sock))
        listener.listen(1)
        listener.settimeout(10)  # the library tries once a second
        conn, _ = listener.accept()
        c = Connection(conn, pid)
        assert c.read(lambda c: c.of("hello"))
        hello = c.of("hello")[0]
        assert (hello["status"], hello["origin"]) == (0, ORIGIN_START), hello
        n = lines_in(expect)
        wait_for(lambda: lines_in(expect) >= n + 30, 20, "launches after the connection")
    finally:
        app.send_signal(signal.SIGTERM)
        out, err = app.communicate(timeout=60)
    assert app.returncode == 0, err
    c.read(timeout=15)
    assert c.eof  # the app exited after its last flush
    conn.close()
    listener.close()

    rows = read_jsonl(expect)
    before = [r for r in rows if not r["subscriber"]]
    traced = [r for r in rows if r["gpu"]]
    assert before and traced and all(not r["gpu"] for r in before)
    known = {r["correlation_id"] for r in rows}
    assert {e["correlation_id"] for e in c.of("record")} <= known
    for r in rows:
        assert gpu_view(c.records_of(r["correlation_id"])) == gpu_view(r["gpu"]), r

    # every handle launched once CUPTI listened is named before any record of its launches -
    # the driver's handles (no symbolName) by the driver's own query, made before it all; a
    # thread that launches it while another is naming it names it too (the same name)
    launches = defaultdict(set)
    for r in traced:
        launches[r["handle"]].add(r["correlation_id"])
    names = defaultdict(list)
    for i, e in enumerate(c.events):
        if e["type"] == "name":
            names[e["handle"]].append((i, e["name"]))
    assert set(names) == set(launches)
    assert sorted(n[0][1] for n in names.values()) == [
        "live_drv_kernel_a", "live_drv_kernel_b", "live_lib_kernel", "live_rt_kernel"]
    for handle, corrs in launches.items():
        (at, name), *repeats = names[handle]
        assert all(n == name for _, n in repeats), names[handle]
        assert {r["gpu"][0]["name"] for r in traced if r["handle"] == handle} == {name}
        rec = min(i for i, e in enumerate(c.events)
                  if e["type"] == "record" and e["correlation_id"] in corrs)
        assert at < rec, (name, at, rec)
