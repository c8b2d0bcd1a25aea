#!/usr/bin/env python3
"""make_seeds.py - writes the binary seed inputs of fuzz/corpus/ that are not
plain files: GPU-socket frame streams, a CPython code-object image and
recording directories packed as the recording harness reads them (the files'
contents separated by NUL bytes, see fuzz/recording_fuzz.c). The text seeds
(configs, ctl lines, folded stacks, Chrome traces) are kept as they are.

    fuzz/make_seeds.py [FIXTURES_DIR]    (run from the repository root)
"""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
MAGIC, VERSION = 0x5543504E, 1
HELLO, ACTIVITY, STATS, NAMES, CUPTI, GRAPH_NODES = 1, 2, 3, 4, 5, 6


def put(name, sub, data):
    d = os.path.join(ROOT, "corpus", name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, sub), "wb") as f:
        f.write(data)


def frame(ftype, body, pid=0):
    # struct np_wire_header: magic u32, version u16, type u16, size u32, pid u32
    return struct.pack("<IHHII", MAGIC, VERSION, ftype, 16 + len(body), pid) + body


def hello(origin=1, status=0):
    return frame(HELLO, struct.pack("<IIQ", status, origin, 123) + b"/usr/lib/libcupti.so".ljust(256, b"\0"))


def gpu_record(corr, kind=0, name=b"kernel_a"):
    pad = (-(len(name)) % 8)
    fixed = struct.pack("<HBBIQQIIIIQQ3I3IIIH3H", 0, kind, 1, corr, 1000, 2000, 0, 1, 7, 0, 0, 4096,
                        1, 1, 1, 128, 1, 1, 0, 0, len(name), 0, 0, 0)
    size = len(fixed) + len(name) + pad
    return struct.pack("<H", size) + fixed[2:] + name + b"\0" * pad


def activity(records):
    return frame(ACTIVITY, struct.pack("<II", len(records), 0) + b"".join(records))


def names(entries):
    body = b""
    for handle, name in entries:
        pad = (-(len(name)) % 8)
        body += struct.pack("<QHHI", handle, len(name), 0, 0) + name + b"\0" * pad
    return frame(NAMES, struct.pack("<II", len(entries), 0) + body)


def stats():
    return frame(STATS, struct.pack("<7Q", 10, 0, 0, 0, 0, 0, 0))


def graph_nodes():
    # struct np_wire_graph_node: node, original, correlation, graph, event, type
    entries = [struct.pack("<QQIIII", 5, 0, 7, 1, 1, 0), struct.pack("<QQIIII", 9, 5, 0, 2, 2, 0)]
    return frame(GRAPH_NODES, struct.pack("<II", len(entries), 0) + b"".join(entries))


def gpu_wire_seeds():
    # data[0]: bit 0 = the harness sends a HELLO first, bit 1 = pids patched
    put("gpu_wire", "hello_only", bytes([2]) + hello())
    put("gpu_wire", "records", bytes([3]) + activity([gpu_record(1), gpu_record(2, 1, b"")]))
    put("gpu_wire", "names_then_records",
        bytes([2 | 4]) + hello() + names([(0x1000, b"kernel_a"), (0x2000, b"_Z3fooPfi")]) +
        activity([gpu_record(7)]) + stats() + graph_nodes())
    put("gpu_wire", "no_hello", bytes([0]) + activity([gpu_record(1)]))


def pycode_seed():
    # A code object at IMAGE_BASE (0x5a0000000000) with the harness's 3.12-shaped
    # layout: filename/qualname str objects and a 3.11+ location table behind it.
    base = 0x5a0000000000
    img = bytearray(0x400)
    code_off, fname_off, qual_off, table_off = 0, 0x100, 0x180, 0x200
    struct.pack_into("<Q", img, 8, 0x1234)                 # ob_type
    struct.pack_into("<i", img, 0x44, 10)                  # co_firstlineno
    struct.pack_into("<Q", img, 0x70, base + fname_off)    # co_filename
    struct.pack_into("<Q", img, 0x78, base + qual_off)     # co_name
    struct.pack_into("<Q", img, 0x80, base + qual_off)     # co_qualname
    struct.pack_into("<Q", img, 0x88, base + table_off)    # co_linetable

    def ascii_str(off, text):
        struct.pack_into("<q", img, off + 0x10, len(text))
        # state: kind 1 (<<2), compact (<<5), ascii (<<6)
        struct.pack_into("<I", img, off + 0x20, (1 << 2) | (1 << 5) | (1 << 6))
        img[off + 0x28:off + 0x28 + len(text)] = text

    ascii_str(fname_off, b"/site-packages/torch/nn/x.py")
    ascii_str(qual_off, b"Model.forward")
    table = bytes([0x80 | (13 << 3) | 3, 0x02, 0x80 | (13 << 3) | 3, 0x04])  # short entries
    struct.pack_into("<q", img, table_off + 0x10, len(table))
    img[table_off + 0x20:table_off + 0x20 + len(table)] = table
    put("pycode", "py312_code", bytes([0]) + struct.pack("<i", 4) + bytes(img))
    put("pycode", "py310_code", bytes([1]) + struct.pack("<i", 2) + bytes(img))


def recording_seeds(fixtures):
    order = ["launches.jsonl", "stacks.jsonl", "gpu_unmatched.jsonl", "graph_replays.jsonl",
             "summary.json"]
    for name in sorted(os.listdir(fixtures)):
        d = os.path.join(fixtures, name)
        parts = []
        for f in order:
            p = os.path.join(d, f)
            parts.append(open(p, "rb").read() if os.path.exists(p) else b"")
        put("recording", name, b"\0".join(parts))


def trace_seed():
    ev = [{"ph": "X", "cat": "CUDA_Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2,
           "ts": 10.5, "dur": 3.25, "args": {"correlationId": 5}},
          {"ph": "X", "cat": "GPU_Kernel", "name": "Kernel: k", "pid": 1, "tid": 3, "ts": 20,
           "dur": 4, "args": {"correlationId": 5, "start_ns": 20000, "end_ns": 24000}},
          {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p"}},
          {"ph": "X", "cat": "GPU_Memcpy", "name": "HtoD", "pid": 1, "tid": 3, "ts": 30,
           "dur": 1, "args": {"correlationId": 6}}]
    put("trace", "small.json", json.dumps({"traceEvents": ev}, indent=1).encode())
    put("trace", "array.json", json.dumps(ev).encode())


if __name__ == "__main__":
    fixtures = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "tests", "fixtures",
                                                                   "report")
    gpu_wire_seeds()
    pycode_seed()
    recording_seeds(fixtures)
    trace_seed()
