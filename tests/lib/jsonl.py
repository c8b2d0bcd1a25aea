"""JSON-lines files (launches.jsonl, stacks.jsonl, nccl.jsonl,
gpu_unmatched.jsonl, and the workloads' own logs), read and written."""

import json
from pathlib import Path


def read_jsonl(path, errors="strict"):
    """The objects of a JSON-lines file, in file order; empty lines are skipped.
    ncclprobe's .jsonl files are valid UTF-8 (strict decoding checks that);
    errors="surrogateescape" reads files that need not be."""
    text = Path(path).read_text(errors=errors)
    return [json.loads(line) for line in text.splitlines() if line]


def write_jsonl(path, rows, substitute=None):
    """Writes rows, one a line: a dict is written as JSON, bytes as they are
    (for what JSON cannot say: invalid UTF-8, a cut line). substitute
    {placeholder str: bytes} replaces each placeholder in the written bytes.
    Returns path."""
    data = b"".join((row if isinstance(row, bytes) else json.dumps(row).encode()) + b"\n"
                    for row in rows)
    for placeholder, raw in (substitute or {}).items():
        data = data.replace(placeholder.encode(), raw)
    Path(path).write_bytes(data)
    return path


def outer_launches(rec_dir):
    """The launches of rec_dir/launches.jsonl that are not nested in another
    (a driver call inside a runtime call): the ones the outputs count."""
    return [x for x in read_jsonl(Path(rec_dir) / "launches.jsonl") if not x["nested"]]


def read_stacks(rec_dir):
    """rec_dir/stacks.jsonl as {stack_id: frames}."""
    return {s["stack_id"]: s["frames"] for s in read_jsonl(Path(rec_dir) / "stacks.jsonl")}
