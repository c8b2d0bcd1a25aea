"""Folded stacks, read: `frame;frame;...;leaf WEIGHT` lines (launches.folded,
merged.folded, merged.gpu_ns.folded, what `merge` writes) and the
`ts comm pid tid cpu frame;...` lines of stacks.ext.folded
(docs/output-formats.md).

Every function takes a folded file as a Path (read with the bytes that are
not UTF-8 kept as surrogates: the folded files copy names byte for byte) or
its text as a str."""

import os
import re
from collections import Counter
from pathlib import Path

# A Python frame as ncclprobe writes it: "qualname (file)" or "qualname (file:line)".
PY_FRAME = re.compile(r"^(.+) \((.+?)(?::(-?\d+))?\)$")


def folded_text(source):
    """The text of source: a path's contents, or source itself when it is a str."""
    if isinstance(source, os.PathLike):
        return Path(source).read_text(errors="surrogateescape")
    return source


def folded_rows(source):
    """The lines of a folded file as [(stack, weight)], in file order; stack is
    the text before the last space (frames joined by ';')."""
    rows = []
    for line in folded_text(source).splitlines():
        stack, weight = line.rsplit(" ", 1)
        rows.append((stack, int(weight)))
    return rows


def folded_totals(source, key=None):
    """{stack: summed weight} of a folded file; with key, {key(stack): summed
    weight} (e.g. key=leaf, or key=frames for tuples of frames)."""
    out = {}
    for stack, weight in folded_rows(source):
        k = key(stack) if key else stack
        out[k] = out.get(k, 0) + weight
    return out


def frames(stack):
    """A folded stack's frames, root first, as a tuple."""
    return tuple(stack.split(";"))


def leaf(stack):
    """A folded stack's last (innermost) frame."""
    return stack.rsplit(";", 1)[-1]


def ext_rows(source):
    """stacks.ext.folded as [(ts, comm, pid, tid, cpu, [frames])], in file order."""
    rows = []
    for line in folded_text(source).splitlines():
        ts, comm, pid, tid, cpu, stack = line.split(" ", 5)
        rows.append((int(ts), comm, int(pid), int(tid), int(cpu), stack.split(";")))
    return rows


def gpu_leaf(record):
    """The leaf frame a GPU record (a launches.jsonl "gpu" entry, or one the CUPTI
    test double scripted) has in the merged folded files."""
    if record["type"] == "kernel":
        return "[GPU_Kernel]" + record["name"]
    if record["type"] == "memcpy":
        return "[GPU_Memcpy]" + record["copy_kind"]
    return "[GPU_Memset]" if record["type"] == "memset" else f"[GPU_{record['type']}]"


def totals_by_leaf(source):
    """{leaf frame: summed weight} of a folded file, as a Counter."""
    return Counter(folded_totals(source, key=leaf))
