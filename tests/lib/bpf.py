"""The BPF objects on this machine, as bpftool and /proc show them: what a
tracer holds, and whether it let go."""

import json
import re
import subprocess
from pathlib import Path


def bpftool(*args):
    """`bpftool ARGS -j`'s JSON answer (a list for the `show` commands)."""
    proc = subprocess.run(["bpftool", *args, "-j"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout or "[]")


def bpf_objects_of(pid):
    """(prog ids, link ids) held by pid's file descriptors."""
    progs, links = set(), set()
    for info in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            text = info.read_text()
        except OSError:
            continue
        for m in re.finditer(r"^prog_id:\s*(\d+)", text, re.M):
            progs.add(int(m[1]))
        for m in re.finditer(r"^link_id:\s*(\d+)", text, re.M):
            links.add(int(m[1]))
    return progs, links
