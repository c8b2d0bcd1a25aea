"""ncclprobe daemon, end to end: real BPF (process discovery and launch
uprobes), the toolkit's real libcudart.so.13, real processes, the real
control socket.

One daemon serves the module (tests that only add processes of their own and
look at those); tests that change the daemon's state in ways others would see
(reloads, SIGTERM, kill -9, retention, filters, 200 processes) start their own,
with an include_comm filter so that only their processes are traced. Other
CUDA processes on the machine may be traced by the shared daemon too: every
check looks at our own pids only.

Expected values come from the workloads (the counts they print) and from the
specification - never from ncclprobe itself."""

import json
import os
import re
import shutil
import signal
import socket
import stat
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from lib.bpf import bpf_objects_of, bpftool
from lib.daemon import (CUDART, LATE_CHAIN, LATE_LOADER, LAUNCHER, RT_CHAIN, SET_NAME, Daemon,
                        check_launches_with_chain, comm_link, has_chain, launcher, set_folded,
                        total_launches)
from lib.gdb import run_gdb_backtrace
from lib.paths import NCCLPROBE, PROGS
from lib.processes import Workload, wait_for
from lib.run import go_pprof
from lib.skip import needs_bpf, needs_real_cudart, needs_tools

pytestmark = [needs_bpf, needs_real_cudart]

# libraries the launcher maps next to itself (RUNPATH $ORIGIN)
LAUNCHER_LIBS = ["liblaunch_a.so", "liblaunch_b.so", "libkern.so", "libcuda.so.1"]
# CAP_BPF (39), CAP_PERFMON (38), CAP_SYS_PTRACE (19), CAP_DAC_READ_SEARCH (2)
KEPT_CAPS = (1 << 39) | (1 << 38) | (1 << 19) | (1 << 2)


# ---- helpers -------------------------------------------------------------------------------

def safe_name(text):
    """The set-name sanitising of the spec: bytes outside [A-Za-z0-9._-] -> '_', a leading
    '.' -> '_', at most 64 bytes."""
    out = []
    for i, b in enumerate(text.encode(errors="surrogateescape")[:64]):
        c = chr(b)
        ok = (c.isascii() and c.isalnum()) or c in "._-"
        out.append(c if ok and not (i == 0 and c == ".") else "_")
    return "".join(out) or "_"


HOST = safe_name(socket.gethostname())


def asan_build():
    try:
        return b"__asan_init" in NCCLPROBE.read_bytes()
    except OSError:
        return False


def proc_status_field(pid, field):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    raise KeyError(field)


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid):
    return int(proc_status_field(pid, "VmRSS").split()[0])


def check_set_names(sets, pid, comm):
    for name in sets:
        m = SET_NAME.match(name)
        assert m and m["host"] == HOST and int(m["pid"]) == pid and m["comm"] == safe_name(comm), \
            (name, HOST, pid, comm)
        assert re.fullmatch(r"[A-Za-z0-9._-]+", name), name


def window_sets(sets, window_id):
    return {n: w for n, w in sets.items()
            if w["window"]["kind"] == "window" and w["window"]["id"] == window_id}


# ---- the module's daemon -------------------------------------------------------------------

@pytest.fixture(scope="module")
def early():
    """A CUDA process running before the daemon starts."""
    p = Workload([LAUNCHER, "--variant", "rt", "--loop-until-signal", "--sleep-us", "5000"],
                 wait=False)
    wait_for(lambda: CUDART.name in Path(f"/proc/{p.pid}/maps").read_text(), 10,
             "libcudart mapped")
    yield p
    p.kill()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, early):
    d = Daemon(tmp_path_factory.mktemp("dmn"))
    yield d
    rc, took = d.terminate()
    assert rc == 0, d.stderr()[-5000:]
    d.assert_clean()


def test_pickup_process_running_before_start(daemon, early):
    t = daemon.wait_traced(early.pid)
    assert t["ns_pid"] == early.pid and t["comm"] == "launcher"
    assert t["exe"] == str(LAUNCHER)
    wait_for(lambda: daemon.target(early.pid)["launches"] >= 20, 20, "launches counted")
    total = early.launched(signal.SIGUSR2)
    sets = daemon.written_sets(early.pid)
    check_set_names(sets, early.pid, "launcher")
    recorded = total_launches(sets)
    # launches before the daemon attached are not seen; the rest all are
    assert 20 <= recorded <= total
    for name in sets:
        for frames in set_folded(daemon.out / name):
            assert has_chain(frames, RT_CHAIN), frames


def discovery(daemon):
    return daemon.status()["discovery"]


def check_delays(before, after):
    assert after["delays_measured"] > before["delays_measured"], (before, after)
    # The shared daemon traces every CUDA process on the machine (other test runs
    # too): a burst of them queues attaches, so the max is bounded loosely.
    assert 0 <= after["delay_ms_p50"] < 250, after
    assert after["delay_ms_p50"] <= after["delay_ms_max"] < 3000, after
    print(f"discovery delay: p50 {after['delay_ms_p50']:.2f} ms, "
          f"max {after['delay_ms_max']:.2f} ms, {after['delays_measured']} measured")


def test_pickup_process_started_after_start(daemon, workloads):
    before = discovery(daemon)
    p = launcher(workloads, "--iters", "50")
    t = daemon.wait_traced(p.pid)
    assert t["ns_pid"] == p.pid and t["libraries"] >= 1
    check_delays(before, discovery(daemon))
    # its first launch a second after the library was loaded: none may be missed
    time.sleep(max(0.0, 1.0 - (time.monotonic() - p.started)))
    p.go()
    assert p.launched() == 50
    sets = daemon.written_sets(p.pid)
    check_set_names(sets, p.pid, "launcher")
    check_launches_with_chain(daemon, sets, RT_CHAIN, 50)


def test_pickup_library_loaded_late(daemon, workloads):
    before = discovery(daemon)
    p = Workload([LATE_LOADER, "--no-wait", "--settle-ms", "1000", "--iters", "40", CUDART],
                 wait=False)
    workloads.append(p)
    t = daemon.wait_traced(p.pid)  # only once it dlopen()ed libcudart
    assert t["comm"] == "late_loader"
    check_delays(before, discovery(daemon))
    assert p.launched() == 40
    assert "loaded" in p.out
    sets = daemon.written_sets(p.pid)
    check_set_names(sets, p.pid, "late_loader")
    check_launches_with_chain(daemon, sets, LATE_CHAIN, 40)


def children(pid):
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def test_pickup_process_in_own_mount_and_pid_namespace(daemon, workloads, tmp_path):
    """The library exists only in the process's mount namespace (a tmpfs mounted there)."""
    private = Path(tempfile.mkdtemp(prefix="npd-ns-"))
    try:
        copies = " ".join(str(PROGS / n) for n in ["launcher", *LAUNCHER_LIBS]) + f" {CUDART}"
        script = (f"mount -t tmpfs npdns {private} && cp {copies} {private}/ && "
                  f"cd {private} && LD_LIBRARY_PATH={private} exec {private}/launcher "
                  f"--variant rt --iters 30 --wait-signal")
        p = Workload(["unshare", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc",
                      "sh", "-c", script])
        workloads.append(p)
        kids = wait_for(lambda: children(p.pid), 5, "the namespace's first process")
        pid = kids[0]
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "launcher"
        # the host does not see the files the process runs from
        assert not (private / "launcher").exists() and not (private / CUDART.name).exists()
        maps = Path(f"/proc/{pid}/maps").read_text()
        assert f"{private}/{CUDART.name}" in maps

        t = daemon.wait_traced(pid)
        assert t["ns_pid"] != pid and t["ns_pid"] in (1, 2), t
        assert t["exe"] == f"{private}/launcher"
        os.kill(pid, signal.SIGUSR1)
        assert p.launched() == 30
        sets = daemon.written_sets(pid)
        check_set_names(sets, pid, "launcher")
        check_launches_with_chain(daemon, sets, RT_CHAIN, 30)
        for w in sets.values():
            assert w["process"]["pid"] == pid and w["process"]["ns_pid"] == t["ns_pid"]
    finally:
        shutil.rmtree(private, ignore_errors=True)


def ctl_ok(daemon, *args):
    proc = daemon.ctl(*args)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    reply = json.loads(proc.stdout)
    assert reply["ok"] is True, reply
    return reply


def window_open(daemon):
    return daemon.status()["window"]["open"]


def test_windows_ctl_duration_and_flag_file(daemon, workloads):
    sleep_us = 2000
    procs = [launcher(workloads, "--loop-until-signal", "--sleep-us", sleep_us),
             launcher(workloads, "--loop-until-signal", "--sleep-us", sleep_us, "--threads", "2")]
    for p in procs:
        daemon.wait_traced(p.pid)
    assert not window_open(daemon)
    went = time.monotonic()
    for p in procs:
        p.go()
    time.sleep(0.5)
    windows = {}  # id -> (reason, expected duration or None)

    # ctl start / ctl stop
    reply = ctl_ok(daemon, "start")
    assert reply["window"]["open"] is True and reply["window"]["reason"] == "ctl"
    w1 = reply["window"]["id"]
    time.sleep(1.5)
    reply = ctl_ok(daemon, "stop")
    assert reply["window"]["open"] is False
    stopped_sets = set(Path(s).name for s in reply["sets"])
    windows[w1] = ("ctl", None)

    # ctl start --duration 2: closes by itself
    reply = ctl_ok(daemon, "start", "--duration", "2")
    w2 = reply["window"]["id"]
    assert w2 != w1 and 1.5 <= reply["window"]["ends_in_s"] <= 2.0
    wait_for(lambda: not window_open(daemon), 10, "the 2 s window to close")
    windows[w2] = ("ctl", 2.0)

    # the flag file: created opens a window, removed closes it
    daemon.flag.touch()
    st = wait_for(lambda: (s := daemon.status())["window"]["open"] and s, 5, "flag window")
    assert st["window"]["reason"] == "flag_file"
    w3 = st["window"]["id"]
    time.sleep(1.0)
    daemon.flag.unlink()
    wait_for(lambda: not window_open(daemon), 5, "the flag window to close")
    windows[w3] = ("flag_file", None)

    # errors: stop without a window, start twice
    proc = daemon.ctl("stop", json_out=False)
    assert proc.returncode == 1 and "no window is open" in proc.stderr, proc
    ctl_ok(daemon, "start")
    proc = daemon.ctl("start", json_out=False)
    assert proc.returncode == 1 and "already open" in proc.stderr, proc
    ctl_ok(daemon, "stop")
    assert not window_open(daemon)
    assert len({w1, w2, w3}) == 3

    totals = [p.launched(signal.SIGUSR2) for p in procs]
    elapsed = time.monotonic() - went
    for p, total in zip(procs, totals):
        rate = total / elapsed  # the program's own launch rate
        sets = daemon.written_sets(p.pid)
        check_set_names(sets, p.pid, "launcher")
        for wid, (reason, duration) in windows.items():
            ws = window_sets(sets, wid)
            assert len(ws) == 1, (p.pid, wid, sorted(sets))  # one set per process per window
            (name, w), = ws.items()
            assert w["window"]["reason"] == reason and w["process"]["pid"] == p.pid
            # named after the window's start
            assert SET_NAME.match(name)["when"] == re.sub(r"[-:]", "", w["window"]["start"])
            seconds = (w["window"]["end_unix_ns"] - w["window"]["start_unix_ns"]) / 1e9
            if duration:
                assert duration - 0.1 <= seconds <= duration + 1.0, seconds
            n = w["totals"]["launches"]
            assert 0.4 * rate * seconds <= n <= 1.6 * rate * seconds + 20, (n, rate, seconds)
            if wid == w1:
                assert name in stopped_sets, (name, stopped_sets)
        # aggregate and window sets together: every launch, once
        assert total_launches(sets) == total, (total, sets)
        kinds = {w["window"]["kind"] for w in sets.values()}
        assert kinds == {"aggregate", "window"}, kinds


def test_capabilities_kept_and_sufficient_for_another_user(daemon, workloads):
    cap_eff = int(proc_status_field(daemon.pid, "CapEff"), 16)
    assert cap_eff == KEPT_CAPS, f"CapEff {cap_eff:#018x}, want {KEPT_CAPS:#018x}"
    p = Workload(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--",
                  LAUNCHER, "--variant", "rt", "--iters", "25", "--wait-signal"])
    workloads.append(p)
    assert proc_status_field(p.pid, "Uid").split()[0] == "65534"
    daemon.wait_traced(p.pid)
    p.go()
    assert p.launched() == 25
    sets = daemon.written_sets(p.pid)
    check_launches_with_chain(daemon, sets, RT_CHAIN, 25)
    # still exactly the kept set after attaching to it
    assert int(proc_status_field(daemon.pid, "CapEff"), 16) == KEPT_CAPS


HOSTILE = ".a b;c'$x*\u00e9"  # 12 bytes: fits the 15 of a comm


def test_output_permissions_and_hostile_comm(daemon, workloads, tmp_path):
    assert stat.S_IMODE(os.lstat(daemon.sock).st_mode) == 0o600
    assert stat.S_ISSOCK(os.lstat(daemon.sock).st_mode)
    exe = comm_link(tmp_path / "bin", HOSTILE)
    p = launcher(workloads, "--iters", "15", exe=exe)
    assert Path(f"/proc/{p.pid}/comm").read_bytes().rstrip(b"\n") == HOSTILE.encode()
    daemon.wait_traced(p.pid)
    p.go()
    assert p.launched() == 15
    sets = daemon.written_sets(p.pid)
    assert len(sets) == 1, sets
    (name,) = sets
    assert safe_name(HOSTILE) == "_a_b_c__x___"
    assert name.startswith(f"{HOST}-{p.pid}-_a_b_c__x___-"), name
    assert re.fullmatch(r"[A-Za-z0-9._-]+", name), name
    assert sets[name]["process"]["comm"] == HOSTILE
    check_launches_with_chain(daemon, sets, RT_CHAIN, 15)
    # every set the daemon wrote: directory 0700, files 0600
    checked = 0
    for d in daemon.out.iterdir():
        st = os.lstat(d)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700, d
        for f in d.iterdir():
            st = os.lstat(f)
            assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, f
            checked += 1
    assert checked >= 5


# ---- daemons of their own ------------------------------------------------------------------

def own_daemon(tmp_path_factory, name, **conf):
    return Daemon(tmp_path_factory.mktemp(name), **conf)


def wait_log(daemon, pattern, timeout=10):
    return wait_for(lambda: re.search(pattern, daemon.stderr()), timeout, f"log /{pattern}/")


def launches_all_written(d, w, n):
    """Lets the waiting launcher w go once d traces it: it made n launches, all in d's sets."""
    d.wait_traced(w.pid)
    w.go()
    assert w.launched() == n
    assert total_launches(d.written_sets(w.pid)) == n


def terminate_clean(d):
    """SIGTERM: d exits 0 and leaves nothing behind."""
    rc, _ = d.terminate()
    assert rc == 0
    d.assert_clean()


def test_sigterm_flushes_every_set(tmp_path_factory, workloads, tmp_path):
    d = own_daemon(tmp_path_factory, "term", include_comm="npterm*")
    try:
        ended = launcher(workloads, "--loop-until-signal", "--sleep-us", "2000",
                         exe=comm_link(tmp_path, "npterm1"))
        running = launcher(workloads, "--loop-until-signal", "--sleep-us", "2000",
                           exe=comm_link(tmp_path, "npterm2"))
        for p in (ended, running):
            d.wait_traced(p.pid)
            p.go()
        time.sleep(0.5)
        wid = ctl_ok(d, "start")["window"]["id"]
        time.sleep(0.5)
        total = ended.launched(signal.SIGUSR2)
        # SIGTERM at once: the process that just ended is still being read
        rc, took = d.terminate()
        assert rc == 0, d.stderr()[-5000:]
        assert took < 10, took
        d.assert_clean()

        sets = d.sets(ended.pid)
        assert sets and all(w is not None for w in sets.values()), sets
        assert total_launches(sets) == total, (total, sets)
        assert len(window_sets(sets, wid)) == 1
        assert {w["window"]["kind"] for w in sets.values()} == {"aggregate", "window"}
        sets = d.sets(running.pid)
        assert sets and all(w is not None for w in sets.values()), sets
        ws = window_sets(sets, wid)
        assert len(ws) == 1 and total_launches(ws) > 0, sets
        # nothing half-written anywhere
        for s in d.out.iterdir():
            assert (s / "window.json").is_file(), s
    finally:
        d.kill()


def test_sighup_bad_config_kept_good_config_applied(tmp_path_factory, workloads, tmp_path):
    d = own_daemon(tmp_path_factory, "hup", include_comm="nphup*", exclude_comm="nphupx")
    try:
        a = launcher(workloads, "--loop-until-signal", "--sleep-us", "10000",
                     exe=comm_link(tmp_path, "nphupa"))
        x = launcher(workloads, "--loop-until-signal", "--sleep-us", "10000",
                     exe=comm_link(tmp_path, "nphupx"))
        d.wait_traced(a.pid)
        wait_log(d, rf"pid {x.pid} \(nphupx\): not selected")
        assert d.target(x.pid) is None

        # a bad file: refused as a whole, the old configuration stays
        lines = d.write_config(include_comm="nphup*", exclude_comm="nphupa",
                               extra_lines=["bogus_key = 1"])
        bad_line = len(lines)
        d.signal(signal.SIGHUP)
        wait_log(d, "not reloaded")
        assert re.search(rf"{re.escape(str(d.conf_path))}:{bad_line}: bogus_key", d.stderr()), \
            d.stderr()[-3000:]
        assert d.proc.poll() is None
        st = d.status()
        assert d.target(a.pid, st) and not d.target(a.pid, st)["exited"]
        assert d.target(x.pid, st) is None
        x2 = launcher(workloads, "--iters", "1", exe=comm_link(tmp_path, "nphupx"))
        wait_log(d, rf"pid {x2.pid} \(nphupx\): not selected")

        # a good change: exclude_comm now names the other one
        d.write_config(include_comm="nphup*", exclude_comm="nphupa")
        d.signal(signal.SIGHUP)
        wait_log(d, "configuration reloaded")
        d.wait_traced(x.pid)
        wait_for(lambda: (t := d.target(a.pid)) is None or t["exited"], 10, "a untraced")
        a2 = launcher(workloads, "--iters", "1", exe=comm_link(tmp_path, "nphupa"))
        wait_log(d, rf"pid {a2.pid} \(nphupa\): not selected")
        for p in (x2, a2):
            p.go()
            p.launched()
        rc, _ = d.terminate()
        assert rc == 0, d.stderr()[-5000:]
        d.assert_clean()
    finally:
        d.kill()


def test_filters_leave_unselected_processes_untraced(tmp_path_factory, workloads, tmp_path):
    d = own_daemon(tmp_path_factory, "filt", include_comm="npfi*", exclude_comm="npfix")
    try:
        inc = launcher(workloads, "--iters", "10", exe=comm_link(tmp_path, "npfia"))
        exc = launcher(workloads, "--iters", "10", exe=comm_link(tmp_path, "npfix"))
        other = launcher(workloads, "--iters", "10")  # comm "launcher": not included
        d.wait_traced(inc.pid)
        for p in (exc, other):
            wait_log(d, rf"pid {p.pid} \(\w+\): not selected")
        st = d.status()
        assert st["discovery"]["skipped_by_filter"] >= 2
        assert d.target(exc.pid, st) is None and d.target(other.pid, st) is None
        for p in (inc, exc, other):
            p.go()
            assert p.launched() == 10
        assert total_launches(d.written_sets(inc.pid)) == 10
        assert d.sets(exc.pid) == {} and d.sets(other.pid) == {}
        rc, _ = d.terminate()
        assert rc == 0
        assert d.sets(exc.pid) == {} and d.sets(other.pid) == {}
        d.assert_clean()
    finally:
        d.kill()


def test_reader_threads_follow_the_cpu_budget(tmp_path_factory, workloads, tmp_path, daemon):
    """reader_threads = auto: one thread per whole core of cpu_budget above the first, fewer
    than the CPUs (docs/daemon.md); the default budget (10%) gives none. A daemon with them
    writes every launch."""
    assert daemon.status()["rate_limit"]["reader_threads"] == 0
    d = own_daemon(tmp_path_factory, "rthr", include_comm="nprt*", cpu_budget="350%")
    try:
        st = d.status()
        assert st["rate_limit"]["budget_percent"] == 350
        assert st["rate_limit"]["reader_threads"] == min(2, (os.cpu_count() or 1) - 1)
        w = launcher(workloads, "--threads", "2", "--iters", "2000",
                     exe=comm_link(tmp_path, "nprtw"))
        launches_all_written(d, w, 4000)
        terminate_clean(d)
    finally:
        d.kill()


@needs_tools("gdb")
def test_a_process_under_a_debugger_is_left_to_it(tmp_path_factory, workloads, tmp_path):
    """The kernel hands a breakpoint that sits where a uprobe sits to the uprobe: traced, a
    program run under gdb would never stop in cudaLaunchKernel. A process under ptrace when
    the daemon finds it is left to its debugger; the same program without one is traced."""
    d = own_daemon(tmp_path_factory, "dbg", include_comm="npdbg*")
    try:
        exe = comm_link(tmp_path, "npdbg")
        frames, output = run_gdb_backtrace([exe, "--variant", "rt", "--iters", "3"],
                                           hardware=False)  # the int3 a user's `break` sets
        assert frames[0].name == "cudaLaunchKernel", output
        wait_log(d, r"pid \d+ \(npdbg\): not traced, it runs under ptrace \(pid \d+\)")
        st = d.status()
        assert st["discovery"]["skipped_ptraced"] >= 1
        assert st["discovery"]["attached"] == 0
        plain = launcher(workloads, "--iters", "3", exe=exe)
        launches_all_written(d, plain, 3)
        terminate_clean(d)
    finally:
        d.kill()


UPROBE_EVENTS = Path("/sys/kernel/tracing/uprobe_events")


def uprobe_events():
    try:
        return set(UPROBE_EVENTS.read_text().splitlines())
    except OSError:
        return set()


@needs_tools("bpftool")
def test_kill_9_leaves_no_bpf_behind(tmp_path_factory, workloads, tmp_path):
    events_before = uprobe_events()
    d = own_daemon(tmp_path_factory, "kill", include_comm="npkill")
    try:
        p = launcher(workloads, "--loop-until-signal", "--sleep-us", "5000",
                     exe=comm_link(tmp_path, "npkill"))
        d.wait_traced(p.pid)
        p.go()
        wait_for(lambda: d.target(p.pid)["launches"] > 0, 10, "launches")
        prog_ids, link_ids = bpf_objects_of(d.pid)
        names = {x["id"]: x.get("name", "") for x in bpftool("prog", "show")}
        ours = {i: names.get(i) for i in prog_ids}
        assert ours and all(n and n.startswith("np_") for n in ours.values()), ours
        discovery = ({"np_btf_sys_exit", "np_btf_exec"}
                     if d.status()["discovery"]["mode"] == "tp_btf"
                     else {"np_mmap_enter", "np_mmap_exit", "np_exec"})
        assert {"np_entry"} | discovery <= set(ours.values()), ours
        links = {x["id"]: x for x in bpftool("link", "show") if x["id"] in link_ids}
        # uprobe_multi links (bpftool older than the link type prints its number, 12), or
        # perf-event uprobes on kernels without them
        uprobe_link_types = {"uprobe_multi", 12, "perf_event"}
        assert any(x.get("type") in uprobe_link_types for x in links.values()), links
        # perf-event attachments of our programs (perf-event uprobes, when the kernel has
        # no uprobe_multi links)
        perf_ours = [x for x in bpftool("perf") if x.get("prog_id") in prog_ids]
        events_during = uprobe_events() - events_before
        ours_events = {e for e in events_during if f"_{d.pid}_" in e}

        d.signal(signal.SIGKILL)
        d.proc.wait(timeout=10)

        def gone():
            left_progs = {x["id"] for x in bpftool("prog", "show")} & set(prog_ids)
            left_links = {x["id"] for x in bpftool("link", "show")} & set(link_ids)
            left_perf = [x for x in bpftool("perf") if x.get("prog_id") in prog_ids]
            left_events = uprobe_events() & ours_events
            return not (left_progs or left_links or left_perf or left_events)
        wait_for(gone, 5, "the killed daemon's BPF programs, links and uprobes to go",
                 interval=0.2)
        print(f"kill -9: {len(prog_ids)} programs, {len(link_ids)} links, "
              f"{len(perf_ours)} perf events, {len(ours_events)} uprobe_events lines gone")
        # the traced program runs on, unaffected
        assert p.proc.poll() is None
        p.launched(signal.SIGUSR2)
    finally:
        d.kill()


def run_short_lived(d, exe, count, most=12):
    """count launcher processes of 5 launches each, one after another with at most `most`
    in the daemon's hands at any time (started and not yet traced, traced, or exited and
    not yet let go: the daemon's memory high-water mark follows that number). Each maps
    its libraries, waits until the daemon traces it, launches and exits. Returns pids."""
    pids, waiting, exiting, started = [], [], [], 0
    while started < count or waiting or exiting:
        targets = {t["pid"]: t for t in d.status()["targets"]}
        for p in list(waiting):
            t = targets.get(p.pid)
            if t and t["probes"] > 0:
                p.go()
                waiting.remove(p)
                exiting.append(p)
            else:
                assert time.monotonic() - p.started < 20, f"pid {p.pid} not traced"
        for p in list(exiting):
            if p.proc.poll() is not None:
                assert p.launched() == 5
                exiting.remove(p)
        busy = len(waiting) + len(set(targets) - {p.pid for p in waiting})
        while started < count and busy < most:
            p = Workload([exe, "--variant", "rt", "--iters", "5", "--wait-signal"])
            waiting.append(p)
            pids.append(p.pid)
            started += 1
            busy += 1
        time.sleep(0.01)
    return pids


def test_200_short_lived_processes_no_leak(tmp_path_factory, tmp_path):
    env = {}
    if asan_build():  # freed memory waits in ASan's quarantine: keep it small
        env["ASAN_OPTIONS"] = (os.environ.get("ASAN_OPTIONS", "") +
                               ":quarantine_size_mb=4").lstrip(":")
    # systemd's default soft limit on open files, as the service gets it
    d = own_daemon(tmp_path_factory, "short", include_comm="npshort", env=env, nofile=1024)
    try:
        exe = comm_link(tmp_path, "npshort")

        def settled():
            st = d.status()
            disc = st["discovery"]
            return st if disc["detached"] == disc["attached"] and not st["targets"] else None

        def fds_drained(limit):
            # released uprobe links are closed by a thread of their own, later
            last = [None]

            def check():
                n = fd_count(d.pid)
                done = n <= limit or n == last[0]
                last[0] = n
                return done
            return check

        t0 = time.monotonic()
        pids = run_short_lived(d, exe, 24)  # the caches are warm
        st = wait_for(settled, 20, "the first ones to be detached")
        wait_for(fds_drained(0), 30, "the fd count to settle", interval=1.0)
        fds0, rss0 = fd_count(d.pid), rss_kib(d.pid)
        att0 = st["discovery"]["attached"]
        t1 = time.monotonic()
        pids += run_short_lived(d, exe, 176)
        t2 = time.monotonic()
        assert len(set(pids)) == 200
        st = wait_for(settled, 30, "all 200 to be detached")
        fds_peak = fd_count(d.pid)
        t3 = time.monotonic()
        wait_for(fds_drained(fds0 + 5), 45, f"the fd count back to {fds0} + 5", interval=0.5)
        t4 = time.monotonic()
        fds1, rss1 = fd_count(d.pid), rss_kib(d.pid)
        disc = st["discovery"]
        print(f"200 processes: attached {disc['attached']} (after 24: {att0}), "
              f"detached {disc['detached']}; fds {fds0} -> {fds_peak} (all detached) -> {fds1} "
              f"({t4 - t3:.1f} s later); RSS {rss0 / 1024:.1f} -> {rss1 / 1024:.1f} MiB; "
              f"discovery p50 {disc['delay_ms_p50']:.2f} ms, max {disc['delay_ms_max']:.2f} ms "
              f"({disc['delays_measured']} measured); first 24 + settle {t1 - t0:.1f} s, "
              f"176 more {t2 - t1:.1f} s")
        assert d.proc.poll() is None
        assert disc["attached"] == 200, disc
        assert disc["detached"] == disc["attached"], disc
        assert abs(fds1 - fds0) <= 5, (fds0, fds1)
        assert rss1 - rss0 < 20 * 1024, (rss0, rss1)
        # every process's set, with its 5 launches
        for pid in pids:
            sets = d.sets(pid)
            assert sets and all(sets.values()) and total_launches(sets) == 5, (pid, sets)
        rc, _ = d.terminate()
        assert rc == 0, d.stderr()[-5000:]
        d.assert_clean()
    finally:
        d.kill()


def test_retention_deletes_oldest_sets_first(tmp_path_factory, workloads, tmp_path):
    d = own_daemon(tmp_path_factory, "ret", include_comm="npret", aggregate="no",
                   max_output_size="1M", formats="none")
    try:
        exe = comm_link(tmp_path, "npret")
        order = []  # set names, oldest first
        for i in range(5):
            ctl_ok(d, "start")
            p = launcher(workloads, "--iters", "900", exe=exe)
            d.wait_traced(p.pid)
            p.go()
            assert p.launched() == 900
            sets = wait_for(lambda: (s := d.sets(p.pid)) and all(s.values()) and s, 20,
                            "the window's set")
            assert len(sets) == 1
            order += list(sets)
            ctl_ok(d, "stop")
        def settled():
            # a deletion may still be on its way: take status and listing together, and
            # only once two readings 0.5 s apart agree
            first = d.status()["disk"]["deleted_sets"]
            time.sleep(0.5)
            s = d.status()
            return first > 0 and s["disk"]["deleted_sets"] == first and s
        st = wait_for(settled, 20, "retention")
        present = [n for n in order if (d.out / n).exists()]
        assert present, order
        assert order[-1] in present  # the newest stays
        assert order[0] not in present  # the oldest went
        # what is left is the newest ones: deleted oldest first
        assert present == order[len(order) - len(present):], (order, present)
        size = sum(f.stat().st_blocks * 512 for n in present for f in (d.out / n).iterdir())
        print(f"retention: {len(order)} sets, {len(present)} kept ({size >> 10} KiB), "
              f"deleted_sets {st['disk']['deleted_sets']}")
        assert size <= 1 << 20, size
        assert st["disk"]["deleted_sets"] == len(order) - len(present), st["disk"]
        rc, _ = d.terminate()
        assert rc == 0
        d.assert_clean()
    finally:
        d.kill()


def test_formats_of_window_and_aggregate_sets(tmp_path_factory, workloads, tmp_path):
    """formats = svg,pprof: a window set gets its flame graph and profile (no
    trace.json), an aggregate set too. They are made after window.json (they
    read it), in a child process: waited for here."""
    d = own_daemon(tmp_path_factory, "fmt", include_comm="npfmt", formats="svg,pprof")
    try:
        p = launcher(workloads, "--loop-until-signal", "--sleep-us", "2000",
                     exe=comm_link(tmp_path, "npfmt"))
        d.wait_traced(p.pid)
        p.go()
        time.sleep(0.5)
        ctl_ok(d, "start")
        time.sleep(0.5)
        ctl_ok(d, "stop")
        time.sleep(0.5)  # launches after the window: a new aggregate set
        p.launched(signal.SIGUSR2)
        sets = d.written_sets(p.pid)
        kinds = {name: info["window"]["kind"] for name, info in sets.items()}
        assert sorted(kinds.values()) == ["aggregate", "aggregate", "window"], kinds
        for name, info in sets.items():
            files = wait_for(lambda: (f := {p.name for p in (d.out / name).iterdir()}) >=
                             {"flamegraph.svg", "profile.pb.gz"} and f, 20, "the derived outputs")
            assert "trace.json" not in files, (name, files)
            # the flame graph's root holds every launch of the set (the folded files count
            # a launch with no GPU records once)
            svg = ET.parse(d.out / name / "flamegraph.svg").getroot()
            root = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}title")
                    if t.text and t.text.startswith("all (")]
            launches = info["totals"]["launches"]
            assert root and f"all ({launches:,} sample" in root[0], (root, launches)
            top = go_pprof(tmp_path, "-top", d.out / name / "profile.pb.gz")
            assert f"of {launches} total" in top, top
        rc, _ = d.terminate()
        assert rc == 0, d.stderr()[-5000:]
        d.assert_clean()
    finally:
        d.kill()


def zombie_children(pid):
    """{pid: comm} of pid's children that have exited and were not waited for."""
    out = {}
    for child in children(pid):
        try:
            stat = Path(f"/proc/{child}/stat").read_text()
        except OSError:
            continue
        comm, state = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2]
        if state == "Z":
            out[child] = comm
    return out


def test_converters_told_apart_from_other_children(tmp_path_factory, workloads, tmp_path):
    """A child the daemon did not start - here one inherited across exec, as `cmd & exec
    ncclprobe daemon` leaves it - is not one of its converters: taking its exit for a
    converter's left the real converter a zombie, uncounted."""
    inherit = ["sh", "-c", 'sleep 0.3 & exec "$@"', "inherit"]
    d = own_daemon(tmp_path_factory, "reap", include_comm="npreap", formats="svg",
                   prefix=inherit)
    try:
        wait_for(lambda: "sleep" in zombie_children(d.pid).values(), 10,
                 "the inherited child's exit")
        p = launcher(workloads, "--loop-until-signal", "--sleep-us", "2000",
                     exe=comm_link(tmp_path, "npreap"))
        d.wait_traced(p.pid)
        p.go()
        ctl_ok(d, "start")
        time.sleep(0.3)
        ctl_ok(d, "stop")
        p.launched(signal.SIGUSR2)
        sets = d.written_sets(p.pid)
        for name in sets:
            wait_for(lambda: (d.out / name / "flamegraph.svg").exists(), 20, "the flame graph")
        # every converter (exec'd as /proc/self/exe: comm "exe") has been waited for; the
        # inherited child is left alone
        wait_for(lambda: sorted(zombie_children(d.pid).values()) == ["sleep"], 5,
                 "no converter left a zombie")
        rc, _ = d.terminate()
        assert rc == 0, d.stderr()[-3000:]
        assert "converters still running" not in d.stderr()
    finally:
        d.kill()


# ---- the status reply and its schema -------------------------------------------------------

JSON_TYPES = {bool: "boolean", int: "number", float: "number", str: "string", dict: "object",
              list: "array", type(None): "null"}


def status_paths(obj, prefix="", found=None):
    """{path: {JSON types}} of every field of a reply; an array's elements as "targets[].pid"."""
    found = {} if found is None else found
    for key, value in obj.items():
        path = prefix + key
        found.setdefault(path, set()).add(JSON_TYPES[type(value)])
        if isinstance(value, dict):
            status_paths(value, path + ".", found)
        elif isinstance(value, list):
            for element in value:
                status_paths(element, path + "[].", found)
    return found


def test_status_reply_matches_its_schema(daemon):
    """`ctl --schema` (the one table the daemon fills and `ctl status` renders) and the reply
    agree: every field sent is in the schema, of its type, and every field of the schema is
    sent (a window's own fields while one is open)."""
    import subprocess  # this test's own: the file's helpers differ between versions
    proc = subprocess.run([str(NCCLPROBE), "ctl", "--schema"], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    schema = {f["path"]: f for f in json.loads(proc.stdout)["fields"]}
    target = subprocess.Popen([str(LAUNCHER), "--variant", "rt", "--loop-until-signal",
                               "--sleep-us", "5000"], stdout=subprocess.DEVNULL)
    try:
        daemon.wait_traced(target.pid)  # targets[] has an element
        closed = daemon.status()
        ctl_ok(daemon, "start", "--duration", "60")
        try:
            during = daemon.status()
        finally:
            ctl_ok(daemon, "stop")
    finally:
        target.kill()
        target.wait()
    for reply, window_open in ((closed, False), (during, True)):
        sent = status_paths(reply)
        for path, types in sent.items():
            assert path in schema, f"{path} is sent but not in the schema"
            allowed = {schema[path]["type"]} | ({"null"} if schema[path]["nullable"] else set())
            assert types <= allowed, (path, types, allowed)
        missing = [p for p, f in schema.items()
                   if p not in sent and (window_open or not f["window_open_only"])]
        assert not missing, f"in the schema, not sent (window open: {window_open}): {missing}"
