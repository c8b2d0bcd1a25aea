"""The fault matrix (issue 24): real processes, real BPF, each fault once.

Whatever the fault, the expected result is the same: a clear message, nothing
already captured lost or corrupt, the target never blocked or crashed (its own
exit status and launch counts are what they are without ncclprobe), and the
counters adding up (every probe hit captured or counted as dropped).

Faults covered elsewhere, and where: disk full during record
(test_fresh_host.py), ring-buffer overflow (test_record.py), SIGKILL of
ncclprobe during injection (test_live_agent.py, test_inject.py) and of the
daemon (test_daemon.py), hostile CUPTI socket clients (test_sockets.py,
tests/unit/gpu_socket_unit.c and fuzz/gpu_wire_fuzz.c)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from lib.paths import NCCLPROBE, PROGS
from lib.processes import thread_lines, wait_for, Workload
from lib.run import (assert_consistent_totals, Attached, attach_and_go, record, record_attached,
                     run_ncclprobe, sanitizer_said)
from lib.skip import needs_bpf, needs_real_cudart, needs_replay

CUDART = "/usr/local/cuda/lib64/libcudart.so.13"
PY_LAUNCH = Path(__file__).parent / "progs" / "py_launch.py"

pytestmark = [needs_bpf, needs_real_cudart]


def launches_per_tid(rec):
    got = {}
    for _, _, _, tid, _, _ in rec.ext_lines():
        got[tid] = got.get(tid, 0) + 1
    return got


def truth_per_tid(stdout):
    want = {}
    for (tid, _), n in thread_lines(stdout).items():
        want[tid] = want.get(tid, 0) + n
    return want


def test_target_exits_during_attach(tmp_path):
    """Processes that launch and exit while ncclprobe attaches: ncclprobe ends on
    its own with a clear word on what happened, never hangs, and the target's exit
    status is untouched."""
    for i in range(4):
        target = subprocess.Popen([PROGS / "launcher", "--iters", "20", "--variant", "rt"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.002 * i)
        rec = record(tmp_path, ["--pid", target.pid], timeout=60, name=f"rec{i}")
        out, err = target.communicate(timeout=30)
        assert target.returncode == 0, err
        assert not sanitizer_said(rec.stderr), rec.stderr
        assert rec.returncode in (0, 1), rec.stderr
        if rec.returncode == 1:  # gone before the probes were in: said, nothing written
            assert "error:" in rec.stderr and str(target.pid) in rec.stderr, rec.stderr
        else:  # attached: what it saw adds up, and is no more than was launched
            assert_consistent_totals(rec)
            assert rec.summary["totals"]["launches"] <= sum(truth_per_tid(out).values())


def test_1000_threads_every_launch_on_its_thread(tmp_path, workloads):
    """1000 threads launching at once: every launch counted on the thread that made it."""
    w = Workload([PROGS / "launcher", "--wait-signal", "--threads", "1000", "--iters", "3",
                  "--variant", "rt"])
    workloads.append(w)
    rec, out, _ = record_attached(tmp_path, w)
    assert rec.returncode == 0, rec.stderr
    want = truth_per_tid(out)
    assert len(want) == 1000
    assert launches_per_tid(rec) == want
    assert_consistent_totals(rec)
    assert rec.summary["totals"]["events_dropped"] == 0


def test_two_ncclprobe_instances_on_one_process(tmp_path, workloads):
    """Two ncclprobe attached to the same process: each records every launch, with
    the same stacks; neither disturbs the other or the target."""
    w = Workload([PROGS / "launcher", "--wait-signal", "--threads", "2", "--iters", "200",
                  "--variant", "rt,drv"])
    workloads.append(w)
    first = Attached(tmp_path, [w.pid], name="first")
    first.wait_attached()
    second = Attached(tmp_path, [w.pid], name="second")
    second.wait_attached()
    w.go()
    out, _ = w.finish()
    recs = [first.finish(), second.finish()]
    want = truth_per_tid(out)
    for rec in recs:
        assert rec.returncode == 0, rec.stderr
        assert launches_per_tid(rec) == want
        assert_consistent_totals(rec)
    assert recs[0].folded() == recs[1].folded()


@pytest.mark.skipif(shutil.which("bpftrace") is None, reason="no bpftrace")
def test_with_bpftrace_on_the_same_function(tmp_path, workloads):
    """bpftrace counting cudaLaunchKernel of the same process while ncclprobe traces it:
    both see every launch."""
    w = Workload([PROGS / "launcher", "--wait-signal", "--threads", "2", "--iters", "300",
                  "--variant", "rt"])
    workloads.append(w)
    script = (f'uprobe:{CUDART}:cudaLaunchKernel /pid == {w.pid}/ {{ @c = count(); }} '
              'END { print(@c); clear(@c); }')
    bt = subprocess.Popen(["bpftrace", "-e", script], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: "Attaching" in (bt.stdout.readline() or "") or bt.poll() is not None,
                 60, "bpftrace to attach")
        assert bt.poll() is None, bt.stderr.read()
        probe, _ = attach_and_go(tmp_path, w)
        out, _ = w.finish()
        rec = probe.finish()
    finally:
        bt.send_signal(signal.SIGINT)
        bt_out, bt_err = bt.communicate(timeout=60)
    launched = sum(truth_per_tid(out).values())
    assert launched == 2 * 300
    assert rec.returncode == 0, rec.stderr
    assert rec.summary["totals"]["launches"] == launched
    assert_consistent_totals(rec)
    assert f"@c: {launched}" in bt_out, (bt_out, bt_err)


def test_read_only_output_directory(tmp_path):
    """An output directory on a read-only file system: a clear error naming it, exit 1,
    and the command is not started (nothing runs untraced by surprise)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    marker = tmp_path / "ran"
    script = (f'mount -t tmpfs -o size=64k,ro npro {ro} && '
              f'"$@" > {tmp_path}/stdout 2> {tmp_path}/stderr; echo $? > {tmp_path}/rc')
    subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "ro",
                    str(NCCLPROBE), "record", "-o", f"{ro}/rec", "--", "touch", str(marker)],
                   check=True, timeout=60)
    stderr = (tmp_path / "stderr").read_text()
    assert int((tmp_path / "rc").read_text()) == 1, stderr
    assert f"{ro}/rec" in stderr and "Read-only file system" in stderr, stderr
    assert not sanitizer_said(stderr), stderr
    assert not marker.exists()


def build_long_symbol_program(tmp_path, name_len):
    """A program whose launching function's name is name_len bytes long."""
    name = "f" + "".join("abcdefghij"[i % 10] for i in range(name_len - 1))
    src = tmp_path / "longname.c"
    src.write_text(f"""
#include <stddef.h>
struct dim3 {{ unsigned x, y, z; }};
int cudaLaunchKernel(const void *, struct dim3, struct dim3, void **, size_t, void *);
static char kernel;
__attribute__((noinline)) void {name}(int n) {{
    struct dim3 g = {{1, 1, 1}}, b = {{32, 1, 1}};
    for (int i = 0; i < n; i++)
        cudaLaunchKernel(&kernel, g, b, NULL, 0, NULL);
    __asm__ volatile("" ::: "memory");
}}
int main(void) {{ {name}(25); return 0; }}
""")
    exe = tmp_path / "longname"
    cudart_dir = os.path.dirname(CUDART)
    subprocess.run(["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-o", exe, src,
                    f"-L{cudart_dir}", f"-Wl,-rpath,{cudart_dir}", "-l:libcudart.so.13"],
                   check=True, timeout=120)
    return exe, name


def test_symbol_name_of_100_KiB(tmp_path):
    """A function whose name is 100 KiB long launches: every launch is recorded with
    the rest of its stack intact, and every output stays valid."""
    exe, name = build_long_symbol_program(tmp_path, 100 * 1024)
    rec = record(tmp_path, ["--", exe], timeout=120)
    assert rec.returncode == 0, rec.stderr[-2000:]
    rows = rec.ext_lines()
    assert len(rows) == 25
    # docs/output-formats.md: a name is cut to its first 1023 bytes
    want = ["main", name[:1023], "cudaLaunchKernel", "[GPU_Kernel]kernel"]
    for *_, frames in rows:
        assert frames[-4:] == want, [f[:80] for f in frames]
    for line in rec.text("launches.jsonl").splitlines():
        json.loads(line)
    for line in rec.text("stacks.jsonl").splitlines():
        json.loads(line)
    assert_consistent_totals(rec)


def test_comm_and_paths_with_newlines_and_invalid_utf8(tmp_path):
    """A Python script in a directory whose name holds a newline and bytes that are
    not UTF-8, run as a thread whose name holds them too: one line per launch in
    stacks.ext.folded, every JSON output valid, the frame names kept apart."""
    weird_dir = Path(os.fsdecode(bytes(tmp_path) + b"/we\nird \xff\xfe dir"))
    weird_dir.mkdir()
    script = weird_dir / "la\nunch\xe9.py"
    script.write_text(PY_LAUNCH.read_text().replace(
        "ARGS = parse_args()",
        "import ctypes as _c\n"
        "_c.CDLL(None).prctl(15, _c.c_char_p(b'c\\nm\\xff;d x'), 0, 0, 0)\n"
        "ARGS = parse_args()", 1))
    rec = record(tmp_path, ["--", sys.executable, script, "--iters", "12"], timeout=120)
    assert rec.returncode == 0, rec.stderr
    raw = (rec.path / "stacks.ext.folded").read_bytes()
    assert raw.count(b"\n") == 12 and raw.endswith(b"\n")
    rows = rec.ext_lines()
    assert len(rows) == 12
    for _, comm, pid, tid, cpu, frames in rows:
        assert comm.startswith("c_m") and " " not in comm and ";" not in comm, comm
        assert any("Model.forward" in f for f in frames), frames
    summary = json.loads((rec.path / "summary.json").read_bytes())
    assert summary["totals"]["launches"] == 12
    for name in ("launches.jsonl", "stacks.jsonl"):
        lines = (rec.path / name).read_bytes().splitlines()
        assert lines and all(json.loads(line) is not None for line in lines)
    assert_consistent_totals(rec)


# The head of the scripts below: libcudart (argv[1]) through ctypes, as rt.
CTYPES_CUDART = r"""
import ctypes, os, sys
class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]
rt = ctypes.CDLL(sys.argv[1])
rt.cudaLaunchKernel.argtypes = [ctypes.c_void_p, dim3, dim3, ctypes.c_void_p, ctypes.c_size_t,
                                ctypes.c_void_p]
"""

FORK_AND_LAUNCH = CTYPES_CUDART + r"""
def launch(n):
    for _ in range(n):
        rt.cudaLaunchKernel(0x1234, dim3(1, 1, 1), dim3(32, 1, 1), None, 0, None)
launch(10)
kids = []
for k in range(3):
    pid = os.fork()
    if pid == 0:
        launch(7)
        os._exit(42)
    kids.append(pid)
statuses = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in kids]
launch(5)
print("children", statuses, flush=True)
"""


def test_target_forks_and_the_children_launch(tmp_path):
    """`record -- CMD` follows CMD, not what it forks (README): the children, which
    inherit the probed code, run their launches unharmed and exit as they mean to;
    the parent's launches before and after the forks are all recorded."""
    script = tmp_path / "fork_launch.py"
    script.write_text(FORK_AND_LAUNCH)
    rec = record(tmp_path, ["--", sys.executable, script, CUDART], timeout=120)
    assert rec.returncode == 0, rec.stderr
    assert "children [42, 42, 42]" in rec.stdout
    pids = {pid for _, _, pid, _, _, _ in rec.ext_lines()}
    assert len(pids) == 1
    assert rec.summary["totals"]["launches"] == 15
    assert_consistent_totals(rec)


EXEC_AFTER_LAUNCHES = CTYPES_CUDART + r"""
def before_exec(n):
    for _ in range(n):
        rt.cudaLaunchKernel(0x1234, dim3(1, 1, 1), dim3(32, 1, 1), None, 0, None)
before_exec(9)
os.execv(sys.argv[2], sys.argv[2:])
"""


def test_target_execs_mid_trace(tmp_path):
    """A process that launches, then execs another program that launches: both
    images' launches are recorded under the one pid, each with its own stack."""
    script = tmp_path / "exec_launch.py"
    script.write_text(EXEC_AFTER_LAUNCHES)
    rec = record(tmp_path, ["--", sys.executable, script, CUDART, PROGS / "launcher",
                            "--iters", "11", "--variant", "rt"], timeout=120)
    assert rec.returncode == 0, rec.stderr
    rows = rec.ext_lines()
    before = [f for *_, f in rows if any("before_exec" in x for x in f)]
    after = [f for *_, f in rows if "run_worker" in f]
    assert len(before) == 9 and len(after) == 11, [r[-1][-4:] for r in rows]
    assert len(rows) == 20
    assert_consistent_totals(rec)


@needs_replay
def test_cupti_clients_flooding_and_disconnecting_mid_frame(tmp_path):
    """While the CUPTI TEST DOUBLE's app runs its scenario, 300 clients connect to the
    socket at once (past the 256 the server keeps), each stops in the middle of a frame,
    half of them hang up there, and one floods frames of random bytes: the real
    library's launches all join their GPU records, and each rogue is counted."""
    from test_gpu_join import check_launches, check_merged, hello, record_waiting_app
    proc, out, sock, expect, pid = record_waiting_app(tmp_path, ["--scenario", "mixed",
                                                                 "--iters", "5"])
    rogues = []
    try:
        for i in range(300):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            rogues.append(s)
            s.connect(str(sock))
            try:
                s.sendall(hello(os.getpid())[: 7 + i % 40])  # cut inside the HELLO frame
            except (BrokenPipeError, ConnectionResetError):
                pass  # one past the 256 kept may be closed before it sends: the server's to do
        flood = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        flood.settimeout(2)
        try:
            flood.connect(str(sock))
            for _ in range(64):
                flood.sendall(os.urandom(65536))
        except OSError:
            pass  # refused, or closed on the first bad frame: both are the server's to do
        for s in rogues[::2]:
            s.close()
        os.kill(pid, signal.SIGUSR1)  # the app runs its scenario
        _, err = proc.communicate(timeout=90)
    finally:
        for s in rogues:
            s.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert not sanitizer_said(err), err
    check_launches(out, expect)
    check_merged(out, expect)
    gpu = json.loads((out / "summary.json").read_text())["gpu"]
    assert gpu["clients_accepted"] == 1, gpu
    assert gpu["rejected"]["too_many_clients"] >= 300 - 256, gpu


DLCLOSE_AND_RELOAD = r"""
import _ctypes, ctypes, os, sys
class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
def base_of(path):
    path = os.path.realpath(path)
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith(path):
            return int(line.split("-")[0], 16)
    return None
def launch_from(n):
    rt = ctypes.CDLL(sys.argv[1])
    rt.cudaLaunchKernel.argtypes = [ctypes.c_void_p, dim3, dim3, ctypes.c_void_p,
                                    ctypes.c_size_t, ctypes.c_void_p]
    for _ in range(n):
        rt.cudaLaunchKernel(0x1234, dim3(1, 1, 1), dim3(32, 1, 1), None, 0, None)
    return rt
first = launch_from(6)
old = base_of(sys.argv[1])
_ctypes.dlclose(first._handle)
del first
gone = base_of(sys.argv[1]) is None
# Keep the old place taken (PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_FIXED_NOREPLACE), so the
# library comes back somewhere else.
libc.mmap(old, 4096, 0, 0x02 | 0x20 | 0x100000, -1, 0)
second = launch_from(8)
print("bases", hex(old), hex(base_of(sys.argv[1])), "unloaded", gone, flush=True)
"""


def test_library_dlclosed_and_loaded_again_elsewhere(tmp_path):
    """libcudart dlclose()d after launches, then dlopen()ed again at another address and
    launching: both placements' launches are recorded with whole, named stacks."""
    script = tmp_path / "reload.py"
    script.write_text(DLCLOSE_AND_RELOAD)
    rec = record(tmp_path, ["--", sys.executable, script, CUDART], timeout=120)
    assert rec.returncode == 0, rec.stderr
    words = rec.stdout.split()
    old, new, unloaded = words[1], words[2], words[4]
    if unloaded != "True":
        pytest.skip("libcudart stayed mapped after dlclose here")
    assert old != new
    rows = rec.ext_lines()
    assert len(rows) == 14
    for *_, frames in rows:
        assert frames[-2] == "cudaLaunchKernel", frames[-4:]
        assert any("launch_from" in f for f in frames), frames
    assert_consistent_totals(rec)


def test_sigkill_during_convert_loses_nothing(tmp_path):
    """`ncclprobe convert` killed with SIGKILL at several moments of its work: the
    recording it reads is untouched each time, and the next convert writes exactly
    what an undisturbed one writes, with nothing half-written left behind."""
    rec = record(tmp_path, ["--", PROGS / "launcher", "--threads", "2", "--iters", "6000",
                            "--variant", "rt,drv"], timeout=180)
    assert rec.returncode == 0, rec.stderr
    reference = tmp_path / "reference"
    shutil.copytree(rec.path, reference)
    done = run_ncclprobe(["convert", reference, "--format", "all"], timeout=180)
    assert done.returncode == 0, done.stderr
    sources = ("stacks.ext.folded", "launches.jsonl", "stacks.jsonl", "summary.json")
    before = {n: (rec.path / n).read_bytes() for n in sources}

    killed = 0
    for delay_ms in (5, 40, 120, 300, 600):
        p = subprocess.Popen([str(NCCLPROBE), "convert", str(rec.path), "--format", "all"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(delay_ms / 1000)
        if p.poll() is None:
            p.kill()
            killed += 1
        p.wait(timeout=60)
        assert {n: (rec.path / n).read_bytes() for n in sources} == before
    assert killed >= 2  # the convert is long enough to be caught in the middle
    final = run_ncclprobe(["convert", rec.path, "--format", "all"], timeout=180)
    assert final.returncode == 0, final.stderr
    assert sorted(os.listdir(rec.path)) == sorted(os.listdir(reference))
    for name in ("launches.folded", "merged.folded", "trace.json", "profile.pb.gz"):
        assert (rec.path / name).read_bytes() == (reference / name).read_bytes(), name


def test_daemon_sigkill_during_a_window_then_restart(tmp_path):
    """The daemon killed with SIGKILL while a window streams a traced process's launches:
    the process runs on untouched; the set on disk holds whole lines but for at most the
    last one, the launches up to about a second before the kill, each a valid stack; the
    recording tools read it with a clear word on what is missing; a new daemon on the same
    directories starts, traces the process again and leaves the old set as it was."""
    from lib.daemon import comm_link, Daemon, launcher, RT_CHAIN, has_chain
    workloads = []
    d = Daemon(tmp_path / "d1", include_comm="npk9w", aggregate="no")
    try:
        p = launcher(workloads, "--loop-until-signal", "--sleep-us", "1000",
                     exe=comm_link(tmp_path, "npk9w"))
        d.wait_traced(p.pid)
        p.go()
        assert d.ctl("start", "--duration", "60").returncode == 0
        time.sleep(3.0)
        d.signal(signal.SIGKILL)
        d.proc.wait(timeout=10)
        killed_at = time.monotonic()
        (name, window), = d.sets(p.pid).items()
        assert window is None  # killed before the window ended: no window.json
        set_dir = d.out / name
        raw = (set_dir / "stacks.ext.folded").read_bytes()
        lines = raw.split(b"\n")
        whole = lines[:-1]  # the last element: b"" or a line cut by the kill
        assert len(whole) > 1000  # ~1000 launches/s for 3 s, at most the last second lost
        for line in whole:
            ts, comm, pid, tid, cpu, stack = line.decode().split(" ", 5)
            assert comm == "npk9w" and int(pid) == p.pid
            assert has_chain(stack.split(";"), RT_CHAIN), stack
        conv = run_ncclprobe(["convert", set_dir, "--format", "folded"], timeout=120)
        assert not sanitizer_said(conv.stderr), conv.stderr
        if conv.returncode != 0:
            assert "error:" in conv.stderr and str(set_dir) in conv.stderr, conv.stderr

        d2 = Daemon(tmp_path / "d1", include_comm="npk9w", aggregate="no")
        try:
            d2.wait_traced(p.pid)
            assert (set_dir / "stacks.ext.folded").read_bytes()[:len(raw)] == raw
            assert p.proc.poll() is None  # never blocked, never killed
            assert time.monotonic() - killed_at < 60
        finally:
            d2.terminate()
            d2.assert_clean()
        assert p.launched(signal.SIGUSR2) > len(whole)
    finally:
        d.kill()
        for w in workloads:
            if w.proc.poll() is None:
                w.proc.kill()


def test_daemon_disk_full_during_a_window_then_space_again(tmp_path):
    """The daemon's output directory fills up (a 256 KiB tmpfs in its own mount
    namespace) while a window streams: the daemon says so, goes on tracing, the target
    runs on; once space is freed the next window's set is written whole."""
    from lib.daemon import comm_link, Daemon, launcher
    out = tmp_path / "full"
    out.mkdir()
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
              f'mount -t tmpfs -o size=256k npdfull {out} && exec "$@"', "full"]
    workloads = []
    d = Daemon(tmp_path / "d", prefix=prefix, include_comm="npdfull", aggregate="no",
               output_dir=out)
    try:
        seen = Path(f"/proc/{d.pid}/root") / str(out).lstrip("/")  # the daemon's view
        p = launcher(workloads, "--loop-until-signal", "--sleep-us", "200",
                     exe=comm_link(tmp_path, "npdfull"))
        d.wait_traced(p.pid)
        p.go()
        assert d.ctl("start", "--duration", "3").returncode == 0
        wait_for(lambda: "No space left on device" in d.stderr(), 30, "the disk-full message")
        wait_for(lambda: not d.status()["window"]["open"], 30, "the window to end")
        assert d.target(p.pid)["probes"] > 0  # still traced
        assert p.proc.poll() is None

        for child in seen.iterdir():
            shutil.rmtree(child)
        assert d.ctl("start").returncode == 0
        time.sleep(0.3)
        stop = d.ctl("stop")
        assert stop.returncode == 0, stop
        sets = json.loads(stop.stdout)["sets"]
        assert len(sets) == 1
        window = wait_for(lambda: (seen / Path(sets[0]).name / "window.json").exists()
                          and json.loads((seen / Path(sets[0]).name / "window.json")
                                         .read_text()), 30, "the second window's set")
        assert window["totals"]["launches"] > 0
        assert window.get("files", {}).get("per_launch_complete", True) is True, window
        assert d.proc.poll() is None
        assert p.launched(signal.SIGUSR2) > 0
    finally:
        rc, _ = d.terminate()
        d.assert_clean()
        for w in workloads:
            if w.proc.poll() is None:
                w.proc.kill()
    assert rc == 0


def aggregate_sets(out, pid):
    """{set dir: window.json or None} of pid's sets under out, oldest first."""
    found = {}
    for d in sorted(out.glob(f"*-{pid}-*")):
        w = d / "window.json"
        found[d] = json.loads(w.read_text()) if w.exists() else None
    return found


def check_whole_aggregate_set(set_dir, window, chain):
    """A finished aggregate set: every stack has chain, and its counts add up to the
    launches its window.json says."""
    from lib.daemon import has_chain, set_folded
    assert window["window"]["kind"] == "aggregate", window
    folded = set_folded(set_dir)
    assert folded, set_dir
    for stack in folded:
        assert has_chain(stack, chain), stack
    assert sum(folded.values()) == window["totals"]["launches"], (set_dir, window)
    return window["totals"]["launches"]


# Where the daemon is killed in a rotation: as it starts writing the period's set (nothing
# of it written yet), and as it writes window.json (its folded files written, the set not
# yet marked finished). bpftrace's signal() kills it at the probed instruction itself.
ROTATION_KILL_POINTS = ["np_outset_finish", "write_window_json"]


@pytest.mark.skipif(shutil.which("bpftrace") is None, reason="no bpftrace")
@pytest.mark.parametrize("kill_at", ROTATION_KILL_POINTS)
def test_daemon_sigkill_during_an_aggregate_rotation_then_restart(tmp_path, kill_at):
    """The daemon killed with SIGKILL in the middle of an aggregation period's rotation
    (aggregate_interval 10 s; at kill_at of the second rotation): the sets finished before
    are whole and stay as they were; the set cut by the kill has no window.json and only
    whole lines, each a valid stack; the recording tools read it or say clearly why not; a
    new daemon on the same directories traces the process again; the process never stops."""
    from lib.daemon import comm_link, Daemon, has_chain, launcher, RT_CHAIN
    workloads = []
    bt = None
    d = Daemon(tmp_path / "d", include_comm="npk9r", aggregate_interval="10s", formats="none")
    try:
        p = launcher(workloads, "--loop-until-signal", "--sleep-us", "1000",
                     exe=comm_link(tmp_path, "npk9r"))
        d.wait_traced(p.pid)
        p.go()
        first = wait_for(lambda: [s for s, w in aggregate_sets(d.out, p.pid).items() if w], 40,
                         "the first period's set")[0]
        script = f'uprobe:{NCCLPROBE}:{kill_at} /pid == {d.pid}/ {{ signal("SIGKILL"); }}'
        bt = subprocess.Popen(["bpftrace", "--unsafe", "-e", script], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        wait_for(lambda: "Attaching" in (bt.stdout.readline() or "") or bt.poll() is not None,
                 60, "bpftrace to attach")
        assert bt.poll() is None, bt.stderr.read()
        assert d.proc.wait(timeout=40) == -signal.SIGKILL
        sets = aggregate_sets(d.out, p.pid)
        finished = {s: w for s, w in sets.items() if w}
        assert list(finished) == [first], sets  # the second period's set was cut
        kept = {f.name: f.read_bytes() for f in first.iterdir()}
        total = check_whole_aggregate_set(first, finished[first], RT_CHAIN)
        (cut,) = [s for s, w in sets.items() if w is None]
        lines = 0
        for name in ("launches.folded", "merged.folded"):
            raw = (cut / name).read_bytes() if (cut / name).exists() else b""
            assert raw == b"" or raw.endswith(b"\n"), (name, raw[-200:])
            for line in raw.split(b"\n")[:-1]:
                stack, count = line.decode().rsplit(" ", 1)
                assert int(count) > 0
                assert has_chain(stack.split(";"), RT_CHAIN), stack
                lines += 1
        assert (lines > 0) == (kill_at == "write_window_json"), (kill_at, lines)
        conv = run_ncclprobe(["convert", cut, "--format", "all"], timeout=120)  # as the daemon
        assert not sanitizer_said(conv.stderr), conv.stderr
        assert conv.returncode == 0 or ("error:" in conv.stderr and str(cut) in conv.stderr), \
            conv.stderr

        d2 = Daemon(tmp_path / "d", include_comm="npk9r", aggregate_interval="10s",
                    formats="none")
        try:
            d2.wait_traced(p.pid)
            assert p.proc.poll() is None  # never blocked, never killed
        finally:
            d2.terminate()
            d2.assert_clean()
        assert {f.name: f.read_bytes() for f in first.iterdir()} == kept
        assert p.launched(signal.SIGUSR2) >= total
    finally:
        if bt is not None and bt.poll() is None:
            bt.send_signal(signal.SIGINT)
            bt.communicate(timeout=60)
        d.kill()
        for w in workloads:
            if w.proc.poll() is None:
                w.proc.kill()


def test_daemon_disk_full_during_an_aggregate_rotation_then_space_again(tmp_path):
    """The daemon's output directory (a 256 KiB tmpfs in its own mount namespace) is full
    when an aggregation period ends: the daemon says so and goes on tracing, the target runs
    on; once space is freed, a later period's set is written whole."""
    from lib.daemon import comm_link, Daemon, launcher, RT_CHAIN
    out = tmp_path / "full"
    out.mkdir()
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
              f'mount -t tmpfs -o size=256k nprfull {out} && exec "$@"', "full"]
    workloads = []
    d = Daemon(tmp_path / "d", prefix=prefix, include_comm="nprfull", output_dir=out,
               aggregate_interval="10s", formats="none")
    try:
        seen = Path(f"/proc/{d.pid}/root") / str(out).lstrip("/")  # the daemon's view
        p = launcher(workloads, "--loop-until-signal", "--sleep-us", "1000",
                     exe=comm_link(tmp_path, "nprfull"))
        d.wait_traced(p.pid)
        p.go()
        filler = seen / "filler"
        with open(filler, "wb", buffering=0) as f:  # every block the tmpfs has
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        wait_for(lambda: "No space left on device" in d.stderr(), 40, "the disk-full message")
        assert d.target(p.pid)["probes"] > 0  # still traced
        assert p.proc.poll() is None
        filler.unlink()
        done = wait_for(lambda: [(s, w) for s, w in aggregate_sets(seen, p.pid).items()
                                 if w and w["totals"]["launches"] > 0
                                 and w["totals"]["write_errors"] == 0], 40,
                        "a whole set after the space came back")
        for s, w in done:
            check_whole_aggregate_set(s, w, RT_CHAIN)
        assert d.proc.poll() is None
        assert p.launched(signal.SIGUSR2) > 0
    finally:
        rc, _ = d.terminate()
        d.assert_clean()
        for w in workloads:
            if w.proc.poll() is None:
                w.proc.kill()
    assert rc == 0


@pytest.mark.skipif(shutil.which("perf") is None, reason="no perf")
def test_with_perf_probe_on_the_same_function(tmp_path, workloads):
    """A perf uprobe event (perf probe, counted by perf stat) on cudaLaunchKernel of the
    process ncclprobe traces: perf counts every launch and so does ncclprobe. perf's event
    needs tracefs: it is mounted in a mount namespace of this test's own, and the event
    is deleted afterwards (uprobe_events is the kernel's, not the namespace's)."""
    w = Workload([PROGS / "launcher", "--wait-signal", "--threads", "2", "--iters", "250",
                  "--variant", "rt"])
    workloads.append(w)
    group = f"npfault{os.getpid()}"
    script = (f'mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null; '
              f'perf probe -q -x {CUDART} -a {group}:launch=cudaLaunchKernel && '
              f'{{ perf stat -x, -e {group}:launch -p {w.pid} -o {tmp_path}/perf.csv & '
              f'echo started; wait; }}; '
              f'perf probe -q -d "{group}:*"')
    perf = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                             script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = perf.stdout.readline()
        assert line.startswith("started"), line + perf.stderr.read()
        time.sleep(0.5)  # perf stat opens its event
        probe, _ = attach_and_go(tmp_path, w)
        out, _ = w.finish()
        rec = probe.finish()
        _, perf_err = perf.communicate(timeout=60)  # perf stat ends with its target
    finally:
        if perf.poll() is None:
            perf.kill()
            perf.wait()
    launched = sum(truth_per_tid(out).values())
    assert launched == 2 * 250
    assert rec.returncode == 0, rec.stderr
    assert rec.summary["totals"]["launches"] == launched
    assert_consistent_totals(rec)
    counts = [line.split(",") for line in (tmp_path / "perf.csv").read_text().splitlines()
              if f"{group}:launch" in line]
    assert counts and int(counts[0][0]) == launched, (counts, perf_err)
    events = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                             "mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null; "
                             "cat /sys/kernel/tracing/uprobe_events"],
                            capture_output=True, text=True, timeout=30)
    assert events.returncode == 0 and group not in events.stdout  # perf's event is gone
