"""Running ncclprobe: a command, a recording (`record -- CMD`, or attached
to a running workload with --pid), `convert`; what a recording directory
holds; its exit statuses and sanitizer reports; `go tool pprof` to read the
profiles."""

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lib.folded import ext_rows, folded_totals
from lib.jsonl import read_jsonl, read_stacks
from lib.paths import NCCLPROBE

# ncclprobe's exit statuses besides 0
FAILURE, USAGE = 1, 2
GO = shutil.which("go")
# What an AddressSanitizer or UBSan report holds (a sanitizer build exits 1 too)
SAN_MARKERS = ("Sanitizer", "runtime error")


def sanitizer_said(text):
    """True when text (a program's stderr) holds a sanitizer's report."""
    return any(marker in text for marker in SAN_MARKERS)


def assert_consistent_totals(rec):
    """Every probe hit of a recording is either captured or counted as dropped,
    and no record was malformed."""
    totals = rec.summary["totals"]
    assert totals["events_captured"] + totals["events_dropped"] == totals["probe_hits"], totals
    assert totals["malformed_records"] == 0, totals


def run_ncclprobe(args, timeout=60, env=None, user=None, cwd=None):
    """Runs ncclprobe with exactly these arguments; returns the CompletedProcess (text)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([str(NCCLPROBE), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=full_env, user=user, cwd=cwd)


def convert(directory, formats, timeout=120):
    """Runs `ncclprobe convert DIRECTORY --format FORMATS` (the derived
    outputs of a recording or of a directory a test made by hand); returns
    the CompletedProcess (text)."""
    return run_ncclprobe(["convert", directory, "--format", formats], timeout=timeout)


def made_by_record(directory):
    """True for a directory `ncclprobe record` wrote (not one a test made by hand)."""
    return (Path(directory) / "stacks.ext.folded").exists()


class Recording:
    """The outputs of one ncclprobe recording directory."""

    def __init__(self, path, proc):
        self.path = Path(path)
        self.returncode = proc.returncode
        self.stderr = proc.stderr
        self.stdout = proc.stdout

    def text(self, name):
        """The file `name` of the recording, as text (bytes that are not UTF-8 kept)."""
        return (self.path / name).read_text(errors="surrogateescape")

    @property
    def summary(self):
        """summary.json's object."""
        return json.loads(self.text("summary.json"))

    def ext_lines(self):
        """stacks.ext.folded as (ts, comm, pid, tid, cpu, frames) tuples."""
        return ext_rows(self.path / "stacks.ext.folded")

    def folded(self):
        """launches.folded as {stack string: count}."""
        return folded_totals(self.path / "launches.folded")

    def jsonl(self, name):
        """The objects of the JSON-lines file `name`."""
        return read_jsonl(self.path / name)

    def stacks(self):
        """stacks.jsonl as {stack_id: frames}."""
        return read_stacks(self.path)


def record(tmp_path, args, timeout=60, env=None, name="rec"):
    """Runs `ncclprobe record -o tmp_path/name ARGS`; returns its Recording."""
    out = tmp_path / name
    proc = run_ncclprobe(["record", "-o", out, *args], timeout=timeout, env=env)
    return Recording(out, proc)


class Attached:
    """ncclprobe running in the background against --pid."""

    def __init__(self, tmp_path, pids, extra=(), name="rec"):
        self.out = tmp_path / name
        args = [str(NCCLPROBE), "record", "-o", str(self.out),
                "--pid", ",".join(str(p) for p in pids), *extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)

    def wait_attached(self, pattern=r"recording process|waiting for one", timeout=30):
        """Reads stderr until the attach message; returns what was read."""
        seen = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            if re.search(pattern, line):
                return "".join(seen)
        raise AssertionError("ncclprobe did not attach: " + "".join(seen))

    def finish(self, timeout=60):
        """Waits for ncclprobe's end; returns its Recording."""
        out, err = self.proc.communicate(timeout=timeout)
        return Recording(self.out, subprocess.CompletedProcess(self.proc.args,
                                                               self.proc.returncode, out, err))

    def stop(self, sig=signal.SIGINT, timeout=60):
        """Sends sig (while ncclprobe runs); returns its Recording."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.finish(timeout)


def attach_and_go(tmp_path, w, extra=()):
    """Attaches ncclprobe (record --pid, EXTRA) to the waiting workload w, then
    lets w go; returns (the Attached, ncclprobe's attach message)."""
    probe = Attached(tmp_path, [w.pid], extra=extra)
    attached = probe.wait_attached()
    w.go()
    return probe, attached


def record_attached(tmp_path, w, extra=()):
    """Attaches ncclprobe to the waiting workload w, starts it, waits for both
    to end: returns (recording, workload stdout, ncclprobe's attach message)."""
    probe, attached = attach_and_go(tmp_path, w, extra)
    out, _ = w.finish()
    return probe.finish(), out, attached


def go_pprof(tmp_path, *args):
    """`go tool pprof ARGS`'s output, offline, with its caches under tmp_path;
    skips when Go is missing (tools/install-deps.sh installs golang-go)."""
    if GO is None:
        pytest.skip("no `go` (go tool pprof reads the profiles)")
    home = tmp_path / "gohome"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home), "GOCACHE": str(tmp_path / "gocache"),
           "GOFLAGS": "", "GOTOOLCHAIN": "local", "PPROF_TMPDIR": str(home), "TZ": "UTC"}
    proc = subprocess.run([GO, "tool", "pprof", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
