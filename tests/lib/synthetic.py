"""Recording directories made by hand, for the tests of what reads them
(report, convert's writers: pprof, trace.json, the flame graphs): what no
workload can make (hostile names, cut lines, exact timestamps) in the
layout of docs/output-formats.md."""

import json
from pathlib import Path

from lib.jsonl import write_jsonl


def launch_row(ts_ns, stack_id, kernel="k", gpu=None, **fields):
    """A launches.jsonl line (a dict) with the keys every reader needs; fields
    add keys or replace these. gpu, a list of GPU records, makes it a launch
    joined to them (gpu_status "matched", the first record's correlation id)."""
    row = {"ts_ns": ts_ns, "pid": 7, "tid": 7, "comm": "app", "cpu": 0,
           "api": "cudaLaunchKernel", "kernel": kernel, "nested": False, "stack_id": stack_id,
           **fields}
    if gpu is not None:
        row.update({"correlation_ids": [r["correlation_id"] for r in gpu[:1]],
                    "gpu_status": "matched", "gpu": gpu})
    return row


def write_recording(path, stacks=None, launches=None, nccl=None, unmatched=None, summary=None,
                    files=None, substitute=None, graph_replays=None):
    """Makes the directory path (parents too) with the files given; a file
    given as None is left out, an empty one is written empty. Returns path.

    stacks: {stack_id: frames} or a list of stacks.jsonl rows; launches, nccl,
    unmatched, graph_replays: the rows of launches.jsonl, nccl.jsonl,
    gpu_unmatched.jsonl, graph_replays.jsonl (rows are dicts, or bytes
    written as they are: see write_jsonl, which also says what substitute
    does); summary: summary.json's object; files: {name: str or bytes}
    written as they are (folded files, window.json)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if isinstance(stacks, dict):
        stacks = [{"stack_id": k, "frames": v} for k, v in stacks.items()]
    for name, rows in (("stacks.jsonl", stacks), ("launches.jsonl", launches),
                       ("nccl.jsonl", nccl), ("gpu_unmatched.jsonl", unmatched),
                       ("graph_replays.jsonl", graph_replays)):
        if rows is not None:
            write_jsonl(path / name, rows, substitute)
    if summary is not None:
        (path / "summary.json").write_text(json.dumps(summary))
    for name, content in (files or {}).items():
        if isinstance(content, bytes):
            (path / name).write_bytes(content)
        else:
            (path / name).write_text(content)
    return path


def gpu_record(type_, start_ns, end_ns, name=None, **fields):
    """A GPU record as a launch's "gpu" list and gpu_unmatched.jsonl hold it
    (type_ kernel, memcpy or memset; name for a kernel); fields add keys or
    replace the defaults."""
    record = {"type": type_, "correlation_id": 1, "start_ns": start_ns, "end_ns": end_ns,
              "device": 0, "stream": 7, "graph_id": 0}
    if name is not None:
        record["name"] = name
    return {**record, **fields}


GRAPH_CAPTURE = "[graph capture]"


def composed(replay, capture):
    """The stack graph_replays.jsonl and a GPU record's capture_stack_id name:
    the replay stack, "[graph capture]", then the capture stack's frames from
    where it leaves the replay stack's common prefix (its launch frame at
    least), as the recorder composes it (docs/output-formats.md)."""
    shared = 0
    while shared < min(len(replay), len(capture)) and replay[shared] == capture[shared]:
        shared += 1
    shared = min(shared, len(capture) - 1)
    return [*replay, GRAPH_CAPTURE, *capture[shared:]]


def graph_replay_row(pid, stack_id, replay_stack_id, kernel, count):
    """A graph_replays.jsonl line: kernel ran count times in the replays made
    from replay_stack_id, under the composed stack stack_id."""
    return {"pid": pid, "stack_id": stack_id, "replay_stack_id": replay_stack_id,
            "kernel": kernel, "count": count}
