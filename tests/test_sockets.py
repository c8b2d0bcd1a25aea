"""The socket paths ncclprobe listens on - `record --cupti-socket PATH`, the
daemon's `cupti_socket` and `ctl_socket` - end to end: whatever the user's
path names that is not a socket (here a regular file with known bytes, or a
symbolic link) is refused with an error that names the path and what is
there, the run exits non-zero, and the file is still there with its bytes.
A socket nobody listens on (left by a crash) is still replaced. The cases
one by one (directories, FIFOs, live and stale sockets, cleanup after a
failed bind) are tests/unit/ctl_unit.c's, against lib/unix_listener.c."""

import os
import signal
import socket
import subprocess
import time

import pytest

from conftest import NCCLPROBE, PROGS, needs_bpf

pytestmark = [needs_bpf]

LAUNCHER = PROGS / "launcher"
PRECIOUS = b"precious bytes: not a socket\n"


def precious_file(path):
    path.write_bytes(PRECIOUS)
    return path


def kept(path):
    """The file is there, as it was."""
    return path.is_file() and not path.is_symlink() and path.read_bytes() == PRECIOUS


def says_refused(stderr, path, kind):
    """One error line names the path and what is there - and the exit status
    is ncclprobe's, not a sanitizer's (which exits 1 too)."""
    if "Sanitizer" in stderr or "runtime error" in stderr:
        return False
    return any(line.startswith("ncclprobe: error:") and str(path) in line and kind in line
               and "not a socket" in line for line in stderr.splitlines())


def record(tmp_path, sock):
    return subprocess.run(
        [str(NCCLPROBE), "record", "--cupti-socket", str(sock), "-o", str(tmp_path / "rec"),
         "--", str(LAUNCHER), "--iters", "2"],
        capture_output=True, text=True, timeout=120)


def test_record_keeps_a_regular_file_given_as_cupti_socket(tmp_path):
    sock = precious_file(tmp_path / "cupti.sock")
    proc = record(tmp_path, sock)
    assert kept(sock), proc.stderr
    assert says_refused(proc.stderr, sock, "a regular file"), proc.stderr
    assert proc.returncode == 1, proc.stderr
    assert not (tmp_path / "rec").exists()  # refused before tracing started


def test_record_keeps_a_symlink_given_as_cupti_socket(tmp_path):
    target = precious_file(tmp_path / "target")
    sock = tmp_path / "cupti.sock"
    sock.symlink_to(target)
    proc = record(tmp_path, sock)
    assert sock.is_symlink() and os.readlink(sock) == str(target), proc.stderr
    assert kept(target)
    assert says_refused(proc.stderr, sock, "a symbolic link"), proc.stderr
    assert proc.returncode == 1, proc.stderr


def test_record_replaces_a_stale_cupti_socket(tmp_path):
    """What the path check must still allow: a socket left by a crash."""
    sock = tmp_path / "cupti.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(sock))
    s.close()  # bound, nobody listens: stale
    proc = record(tmp_path, sock)
    assert proc.returncode == 0, proc.stderr
    assert "error" not in proc.stderr and "cannot listen" not in proc.stderr, proc.stderr
    assert "Sanitizer" not in proc.stderr, proc.stderr
    assert not sock.exists()  # ours, removed at the end


# ---- the daemon ------------------------------------------------------------------------------

def start_daemon(root, **conf):
    """`ncclprobe daemon --config FILE` with everything under root (conf overrides)."""
    settings = {"output_dir": root / "out", "ctl_socket": root / "ctl.sock",
                "cupti_socket": root / "cupti.sock", "flag_file": root / "flag", **conf}
    config = root / "ncclprobe.conf"
    config.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
    err = open(root / "daemon.err", "w+")
    proc = subprocess.Popen([str(NCCLPROBE), "daemon", "--config", str(config)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    return proc, err, settings


def daemon_stderr(err):
    err.seek(0)
    return err.read()


def ctl_answers(sock):
    proc = subprocess.run([str(NCCLPROBE), "ctl", "--socket", str(sock), "status"],
                          capture_output=True, text=True, timeout=15)
    return proc.returncode == 0


def test_daemon_keeps_a_regular_file_given_as_cupti_socket(tmp_path):
    """A configured path that holds something else is a configuration error: the daemon
    says so and does not start."""
    sock = precious_file(tmp_path / "cupti.sock")
    proc, err, settings = start_daemon(tmp_path, cupti_socket=sock)
    try:
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = daemon_stderr(err)
    assert kept(sock), text
    assert says_refused(text, sock, "a regular file"), text
    assert rc == 1, text
    assert not settings["ctl_socket"].exists(), text


def test_daemon_keeps_a_regular_file_given_as_ctl_socket(tmp_path):
    sock = precious_file(tmp_path / "ctl.sock")
    proc, err, settings = start_daemon(tmp_path, ctl_socket=sock)
    try:
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = daemon_stderr(err)
    assert rc == 1, text
    assert kept(sock), text
    assert says_refused(text, sock, "a regular file"), text
    assert not (tmp_path / "cupti.sock").exists(), text  # the CUPTI socket went with it
