"""The agent's fast path (docs/gpu.md, "The agent's fast path"): while libncclprobe_cupti.so
serves a process, its launches are taken at the library's marker, from CUPTI's params struct,
and the int3 uprobes of those launch functions are removed; when the library goes, they come
back. What must hold:

- the same program traced with the fast path on (`--launch-probes auto`, opt-in) and
  off (`--launch-probes int3`, the default) gives the same folded stacks, launch arguments
  and GPU join;
- at each switch (on: the library said hello; off: its connection ended) no launch is lost
  and none is counted twice, with launches in flight on several threads.

The CUPTI side is played by libcupti_replay.so, the CUPTI TEST DOUBLE (no GPU here); cupti_app
makes real launch calls (libcudart, the driver double libfakecuda.so) and writes what it
scripted to its --expect file."""

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter

import pytest

from lib.cupti_app import record_cupti_app, truth
from lib.daemon import wait_for
from lib.jsonl import read_jsonl
from lib.paths import CUPTI_LIB, NCCLPROBE, PROGS
from lib.skip import needs_bpf, needs_replay
from test_gpu_join import check_launches, check_merged
from test_live_agent import LiveApp

pytestmark = [needs_bpf, needs_replay]

APP = PROGS / "cupti_app"


def record_switched(tmp_path, app_args, extra=()):
    """`ncclprobe record [EXTRA] -- cupti_app --wait-signal APP_ARGS`: the app is started
    once the library said hello and, on the fast path, once ncclprobe switched to it (so a
    loaded machine cannot make the whole run happen before). Returns (recording, --expect
    file, ncclprobe's stderr)."""
    out, expect = tmp_path / "rec", tmp_path / "expect.jsonl"
    proc = subprocess.Popen([str(NCCLPROBE), "record", "-o", str(out), "--cupti-socket",
                             str(tmp_path / "c.sock"), *extra, "--", str(APP), "--injection",
                             str(CUPTI_LIB), "--expect", str(expect), "--wait-signal",
                             *app_args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    err = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        line = proc.stdout.readline()
        assert line.startswith("ready "), line + "".join(err)
        want = "libncclprobe_cupti.so's marker (" if "auto" in extra else "GPU records from"
        wait_for(lambda: any(want in e for e in err), 30, want)
        os.kill(int(line.split()[1]), signal.SIGUSR1)
        proc.stdout.read()
        assert proc.wait(timeout=120) == 0, "".join(err)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    return out, expect, "".join(err)


def summary(out):
    return json.loads((out / "summary.json").read_text())


def stacks(folded):
    """The stacks of a folded file without their leaf (the kernel), with their counts."""
    got = Counter()
    for line in folded.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        got[stack.rpartition(";")[0]] += int(n)
    return got


def launch_args(out):
    """Each launch's decoded arguments, by thread and order (the tids differ between runs)."""
    rows = [r for r in read_jsonl(out / "launches.jsonl") if not r["nested"]]
    rows.sort(key=lambda r: r["ts_ns"])
    by_tid = {}
    for r in rows:
        by_tid.setdefault(r["tid"], []).append(
            tuple(json.dumps(r.get(k)) for k in ("api", "grid", "block", "shmem",
                                                  "stream")))
    return sorted(by_tid.values())


@pytest.mark.parametrize("scenario,args", [
    ("eager", ["--iters", "100"]),
    ("mixed", ["--iters", "30"]),
    ("threads", ["--threads", "4", "--iters", "100"]),
])
def test_same_stacks_with_the_fast_path_on_and_off(tmp_path, scenario, args):
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    on, expect_on, err_on = record_switched(tmp_path / "on", ["--scenario", scenario, *args],
                                            extra=["--launch-probes", "auto"])
    off, expect_off, _ = record_switched(tmp_path / "off", ["--scenario", scenario, *args],
                                         extra=["--launch-probes", "int3"])
    s_on, s_off = summary(on)["totals"], summary(off)["totals"]
    # on: the launches were taken at the marker (the app starts once ncclprobe switched);
    # off: none
    launches = len(truth(expect_on)[0])
    # graph launches stay on int3 (not on the fast path)
    fast_apis = [r for r in truth(expect_on)[0] if "Graph" not in r["api"]]
    assert s_on["launches_at_marker"] == len(fast_apis), s_on
    assert s_off["launches_at_marker"] == 0 and s_off["launches_at_marker_sent"] == 0
    assert "launches taken at libncclprobe_cupti.so's marker" in err_on
    assert stacks(on / "launches.folded") == stacks(off / "launches.folded")
    assert (on / "merged.folded").read_text() == (off / "merged.folded").read_text()
    # on several threads the app's kernel names and GPU durations depend on the threads'
    # interleaving (a launch's CPU-side name is its first kernel record's): one thread only
    names = ("launches.folded", "merged.gpu_ns.folded") if scenario != "threads" else ()
    for name in names:
        assert (on / name).read_text() == (off / name).read_text(), name
    assert launch_args(on) == launch_args(off)
    for out, expect in ((on, expect_on), (off, expect_off)):
        check_launches(out, expect)
        check_merged(out, expect)
        gpu = summary(out)["gpu"]
        assert gpu["launches_matched"] == launches and gpu["markers_unpaired"] == 0, gpu


def rounds_by_series(rows):
    """(tid, api, grid z) -> the rounds (grid y) launched, in order: cupti_app --scenario live
    gives every launch of a thread and kind its own round number."""
    series = {}
    for r in sorted(rows, key=lambda r: r["ts_ns"] if "ts_ns" in r else 0):
        series.setdefault((r["tid"], r["api"], r["grid"][2]), []).append(r["grid"][1])
    return series


def check_each_once(rows, truth_rows):
    """Every series of launches is a run of consecutive rounds, each once, each scripted."""
    truth_keys = Counter((r["tid"], r["api"], tuple(r["grid"])) for r in truth_rows)
    keys = Counter((r["tid"], r["api"], tuple(r["grid"])) for r in rows)
    assert not [k for k, n in keys.items() if n > 1], "launches counted twice"
    assert not [k for k in keys if k not in truth_keys], "launches never made"
    for key, rounds in rounds_by_series(rows).items():
        assert sorted(rounds) == list(range(min(rounds), max(rounds) + 1)), (key, rounds)


def test_switching_on_and_back_to_int3_loses_and_doubles_nothing(tmp_path):
    """A recording of a running process (`record --pid --cupti`) switches to the fast path
    once the library is in; a second recording then takes the library's connection (a wake
    hands it a new one), so the first one's library is gone: it goes back to int3 and records
    on. Two threads launch every 3 ms throughout: in the first recording every launch from its
    first to its last is there exactly once."""
    app = LiveApp(tmp_path)
    try:
        wait_for(lambda: app.launched() >= 10, 20, "launches before ncclprobe")
        a_out = tmp_path / "a"
        a = subprocess.Popen([str(NCCLPROBE), "record", "--pid", str(app.pid), "--cupti",
                              "--launch-probes", "auto", "-o", str(a_out), "--cupti-socket",
                              str(tmp_path / "a.sock"), "--duration", "7"],
                             stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        b = subprocess.run([str(NCCLPROBE), "record", "--pid", str(app.pid), "--cupti",
                            "--launch-probes", "auto", "-o", str(tmp_path / "b"),
                            "--cupti-socket", str(tmp_path / "b.sock"), "--duration", "1"],
                           capture_output=True, text=True, timeout=60)
        assert b.returncode == 0, b.stderr
        _, a_err = a.communicate(timeout=60)
        assert a.returncode == 0, a_err
        truth_rows = app.finish()
    finally:
        app.kill()
    assert "launches taken at libncclprobe_cupti.so's marker" in a_err, a_err
    assert "launches taken at their int3 uprobes again" in a_err, a_err
    rows = [r for r in read_jsonl(a_out / "launches.jsonl") if not r["nested"]]
    check_each_once(rows, truth_rows)
    events = summary(a_out)["totals"]
    assert events["launches_at_marker"] > 50, events
    # launches after the switch back came from int3: more than a second of them
    last_fast = max(r["ts_ns"] for r in rows if r.get("correlation_ids"))
    assert len([r for r in rows if r["ts_ns"] > last_fast]) > 100
    # the second recording joined its launches too
    b_rows = [r for r in read_jsonl(tmp_path / "b" / "launches.jsonl") if not r["nested"]]
    check_each_once(b_rows, truth_rows)


@pytest.mark.parametrize("extra", [[], ["--launch-probes", "int3"]], ids=["default", "int3"])
def test_int3_setting_keeps_every_int3_probe(tmp_path, extra):
    """`--launch-probes int3`, the default: no fast path."""
    out, expect, proc = record_cupti_app(tmp_path, ["--scenario", "eager", "--iters", "100",
                                                    "--pace-us", "2000"], extra=extra)
    assert "marker (" not in proc.stderr
    check_launches(out, expect)
