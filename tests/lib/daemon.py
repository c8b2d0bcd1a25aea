"""`ncclprobe daemon` under test: a daemon with everything under one
directory (its configuration, sockets, output sets, stderr), the launcher
workloads it traces, and what its output sets must hold."""

import json
import os
import re
import resource
import signal
import subprocess
import time
from pathlib import Path

from lib.folded import folded_totals, frames
from lib.paths import NCCLPROBE, PROGS, PROGS_ENV
from lib.processes import Workload, wait_for
from lib.run import sanitizer_said

LAUNCHER = PROGS / "launcher"
LATE_LOADER = PROGS / "late_loader"
CUDART = Path(PROGS_ENV.get("CUDART_PATH", "/usr/local/cuda/lib64/libcudart.so.13"))
RT_CHAIN = ["run_worker", "liba_submit", "libb_launch", "cudaLaunchKernel"]
LATE_CHAIN = ["main", "late_launch", "cudaLaunchKernel"]
# An output set's directory name: HOST-PID-COMM-WHEN[-N] (docs/daemon.md)
SET_NAME = re.compile(r"^(?P<host>.+)-(?P<pid>\d+)-(?P<comm>.+)-(?P<when>\d{8}T\d{6}Z)(-\d+)?$")


def comm_link(directory, name):
    """A symlink to the launcher named `name` (made once): the process's comm is that
    name. Returns the link."""
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / name
    if not link.is_symlink():
        link.symlink_to(LAUNCHER)
    return link


def launcher(workloads, *args, exe=LAUNCHER, wait=True, env=None):
    """Starts the launcher (--variant rt ARGS, and --wait-signal with wait) as exe,
    adds it to workloads; returns its Workload."""
    p = Workload([exe, "--variant", "rt", *args, *(["--wait-signal"] if wait else [])],
                 wait=wait, env=env)
    workloads.append(p)
    return p


class Daemon:
    """`ncclprobe daemon --config FILE -v` with everything under root; prefix: a command
    that execs the daemon (so its pid is the daemon's), e.g. into a mount namespace.
    With wait=True, the daemon must start and answer on its control socket."""

    def __init__(self, root, env=None, nofile=None, prefix=(), wait=True, **conf):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.out = self.root / "out"
        self.sock = self.root / "ctl.sock"
        self.flag = self.root / "flag"
        self.conf_path = self.root / "ncclprobe.conf"
        self.base = {"output_dir": self.out, "ctl_socket": self.sock,
                     "cupti_socket": self.root / "cupti.sock", "flag_file": self.flag}
        self.write_config(**conf)
        self.err_path = self.root / "daemon.err"
        with open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(
                [*map(str, prefix), str(NCCLPROBE), "daemon", "--config", str(self.conf_path),
                 "-v"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                env={**os.environ, **(env or {})},
                preexec_fn=(lambda: resource.setrlimit(
                    resource.RLIMIT_NOFILE,
                    (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))) if nofile else None)
        self.pid = self.proc.pid
        if not wait:
            return
        try:
            wait_for(lambda: self.proc.poll() is not None or self.try_status(), 60,
                     "the daemon's control socket")
        except AssertionError:
            self.kill()
            raise
        assert self.proc.poll() is None, f"daemon exited {self.proc.returncode}: {self.stderr()}"

    def write_config(self, extra_lines=(), **conf):
        """Writes the configuration file (the base paths, then conf, then extra_lines);
        returns its lines."""
        settings = {**self.base, **conf}
        lines = ["# written by tests/lib/daemon.py"]
        lines += [f"{k} = {v}" for k, v in settings.items() if v is not None]
        lines += list(extra_lines)
        self.conf_path.write_text("\n".join(lines) + "\n")
        return lines

    def stderr(self):
        """Everything the daemon wrote to stderr so far."""
        return self.err_path.read_text(errors="replace")

    def ctl(self, *args, json_out=True, timeout=15):
        """Runs `ncclprobe ctl` against this daemon; returns the CompletedProcess."""
        argv = [str(NCCLPROBE), "ctl", "--socket", str(self.sock)]
        argv += ["--json"] if json_out else []
        return subprocess.run(argv + [str(a) for a in args], capture_output=True, text=True,
                              timeout=timeout)

    def try_status(self):
        """The status reply, or None while the daemon does not answer."""
        proc = self.ctl("status")
        if proc.returncode != 0:
            return None
        return json.loads(proc.stdout)

    def status(self):
        """The status reply, which must be there and ok."""
        proc = self.ctl("status")
        assert proc.returncode == 0, (proc.stdout, proc.stderr, self.stderr()[-3000:])
        reply = json.loads(proc.stdout)
        assert reply["ok"] is True
        return reply

    def target(self, pid, status=None):
        """pid's entry in the status's targets, or None."""
        for t in (status or self.status())["targets"]:
            if t["pid"] == pid:
                return t
        return None

    def wait_traced(self, pid, timeout=20):
        """pid's target entry once it has probes attached (and has not exited)."""
        return wait_for(lambda: (t := self.target(pid)) and t["probes"] > 0 and not t["exited"]
                        and t, timeout, f"pid {pid} traced")

    def sets(self, pid):
        """{dir name: window.json or None (not written yet)} for pid's output sets."""
        found = {}
        if not self.out.exists():
            return found
        for d in self.out.iterdir():
            m = SET_NAME.match(d.name)
            if not m or int(m["pid"]) != pid:
                continue
            try:
                found[d.name] = json.loads((d / "window.json").read_text())
            except (OSError, ValueError):
                found[d.name] = None
        return found

    def written_sets(self, pid, timeout=20):
        """pid's sets once it is no longer traced and every one of them is written."""
        def done():
            if self.target(pid) is not None:
                return None
            sets = self.sets(pid)
            return sets if sets and all(v is not None for v in sets.values()) else None
        return wait_for(done, timeout, f"the output sets of pid {pid}")

    def signal(self, sig):
        """Sends sig to the daemon."""
        os.kill(self.pid, sig)

    def terminate(self, timeout=30):
        """SIGTERM; returns (exit status, seconds it took)."""
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=timeout)
        return rc, time.monotonic() - t0

    def exit_status(self, timeout=60):
        """Waits for the daemon to exit by itself (killed after timeout s, which
        fails); returns its exit status."""
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.kill()

    def kill(self):
        """Kills the daemon if it still runs (and reaps it)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def assert_clean(self):
        """The daemon's stderr holds no sanitizer report."""
        text = self.stderr()
        assert not sanitizer_said(text), text[-5000:]


def has_chain(stack, chain):
    """True when chain appears as consecutive frames of stack."""
    n = len(chain)
    return any(list(stack[i:i + n]) == chain for i in range(len(stack) - n + 1))


def total_launches(sets):
    """The launches the sets' window.json files count, summed."""
    return sum(w["totals"]["launches"] for w in sets.values())


def set_folded(set_dir):
    """launches.folded of an output set as {tuple(frames): count}."""
    return folded_totals(Path(set_dir) / "launches.folded", key=frames)


def check_launches_with_chain(daemon, sets, chain, want):
    """Every launch of the sets has the call chain; their count is want."""
    got = 0
    for name in sets:
        for stack, n in set_folded(daemon.out / name).items():
            assert has_chain(stack, chain), (name, stack)
            got += n
    assert got == want, (got, want, sets)
    assert total_launches(sets) == want, sets
