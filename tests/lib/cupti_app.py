"""Recordings with GPU records, made without a GPU: workloads whose CUPTI is
answered by libcupti_replay.so, the CUPTI test double (tests/progs), with
ncclprobe's CUPTI library loaded the way the CUDA driver loads it."""

from lib.jsonl import read_jsonl
from lib.paths import CUPTI_LIB, PROGS, PROGS_ENV, REPO
from lib.run import run_ncclprobe

APP = PROGS / "cupti_app"


def record_cupti_app(tmp_path, app_args, extra=(), env=None, timeout=90):
    """`ncclprobe record [EXTRA] -- cupti_app APP_ARGS` (the app scripts the
    double, and writes what it scripted to its --expect file); the recording
    must succeed. Returns (recording dir, the --expect file, CompletedProcess)."""
    out = tmp_path / "rec"
    sock = tmp_path / "cupti.sock"
    expect = tmp_path / "expect.jsonl"
    proc = run_ncclprobe(["record", "-o", out, "--cupti-socket", sock, *extra, "--", APP,
                          "--injection", CUPTI_LIB, "--expect", expect, *app_args],
                         timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr
    return out, expect, proc


def record_py_cupti(tmp_path, python):
    """`ncclprobe record -- PYTHON tests/progs/py_cupti.py`: Python frames over
    real launches (ctypes, libcudart), 10 matmul launches of 1000 ns and 20
    softmax ones of 300 ns as the double scripts them; the recording must
    succeed. Returns (recording dir, CompletedProcess)."""
    out = tmp_path / "rec"
    proc = run_ncclprobe(["record", "-o", out, "--cupti-socket", tmp_path / "c.sock", "--",
                          python, REPO / "tests/progs/py_cupti.py", CUPTI_LIB,
                          PROGS / "libcupti_replay.so"],
                         timeout=120, env={"CUDART_PATH": PROGS_ENV.get("CUDART_PATH", "")})
    assert proc.returncode == 0, proc.stderr
    return out, proc


def truth(expect):
    """What cupti_app scripted (its --expect file): (launch calls, other API
    calls whose GPU records no launch made, records the double dropped)."""
    rows = read_jsonl(expect)

    def is_launch(r):
        return "Launch" in r.get("api", "")
    launches = [r for r in rows if is_launch(r)]
    orphans = [r for r in rows if "api" in r and not is_launch(r)]
    dropped = sum(r.get("dropped", 0) for r in rows)
    return launches, orphans, dropped
