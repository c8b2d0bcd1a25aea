"""The socket paths ncclprobe listens on - `record --cupti-socket PATH`, the
daemon's `cupti_socket` and `ctl_socket` - end to end: whatever the user's
path names that is not a socket (here a regular file with known bytes, or a
symbolic link) is refused with an error that names the path and what is
there, the run exits non-zero, and the file is still there with its bytes.
A socket nobody listens on (left by a crash) is still replaced. The cases
one by one (directories, FIFOs, live and stale sockets, cleanup after a
failed bind) are tests/unit/ctl_unit.c's, against lib/unix_listener.c."""

import os
import socket

from lib.daemon import LAUNCHER, Daemon
from lib.run import record, sanitizer_said
from lib.skip import needs_bpf

pytestmark = [needs_bpf]

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
    if sanitizer_said(stderr):
        return False
    return any(line.startswith("ncclprobe: error:") and str(path) in line and kind in line
               and "not a socket" in line for line in stderr.splitlines())


def record_with_socket(tmp_path, sock):
    """`ncclprobe record --cupti-socket SOCK -- launcher`; returns its Recording."""
    return record(tmp_path, ["--cupti-socket", sock, "--", LAUNCHER, "--iters", "2"],
                  timeout=120)


def test_record_keeps_a_regular_file_given_as_cupti_socket(tmp_path):
    sock = precious_file(tmp_path / "cupti.sock")
    proc = record_with_socket(tmp_path, sock)
    assert kept(sock), proc.stderr
    assert says_refused(proc.stderr, sock, "a regular file"), proc.stderr
    assert proc.returncode == 1, proc.stderr
    assert not (tmp_path / "rec").exists()  # refused before tracing started


def test_record_keeps_a_symlink_given_as_cupti_socket(tmp_path):
    target = precious_file(tmp_path / "target")
    sock = tmp_path / "cupti.sock"
    sock.symlink_to(target)
    proc = record_with_socket(tmp_path, sock)
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
    proc = record_with_socket(tmp_path, sock)
    assert proc.returncode == 0, proc.stderr
    assert "error" not in proc.stderr and "cannot listen" not in proc.stderr, proc.stderr
    assert "Sanitizer" not in proc.stderr, proc.stderr
    assert not sock.exists()  # ours, removed at the end


# ---- the daemon ------------------------------------------------------------------------------

def test_daemon_keeps_a_regular_file_given_as_cupti_socket(tmp_path):
    """A configured path that holds something else is a configuration error: the daemon
    says so and does not start."""
    sock = precious_file(tmp_path / "cupti.sock")
    d = Daemon(tmp_path, wait=False, cupti_socket=sock)
    rc = d.exit_status(timeout=60)
    text = d.stderr()
    assert kept(sock), text
    assert says_refused(text, sock, "a regular file"), text
    assert rc == 1, text
    assert not d.sock.exists(), text


def test_daemon_keeps_a_regular_file_given_as_ctl_socket(tmp_path):
    sock = precious_file(tmp_path / "ctl.sock")
    d = Daemon(tmp_path, wait=False, ctl_socket=sock)
    rc = d.exit_status(timeout=60)
    text = d.stderr()
    assert rc == 1, text
    assert kept(sock), text
    assert says_refused(text, sock, "a regular file"), text
    assert not (tmp_path / "cupti.sock").exists(), text  # the CUPTI socket went with it
