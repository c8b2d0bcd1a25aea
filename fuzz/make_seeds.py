#!/usr/bin/env python3
"""make_seeds.py - writes the binary seed inputs of fuzz/corpus/ that are not
plain files: GPU-socket frame streams, a CPython code-object image,
recording directories packed as the recording harness reads them (the files'
contents separated by NUL bytes, see fuzz/recording_fuzz.c) and streams of
ring-buffer records (fuzz/ingest_fuzz.c). The text seeds
(configs, ctl lines, folded stacks, Chrome traces) are kept as they are.

    fuzz/make_seeds.py [FIXTURES_DIR]    (run from the repository root)
"""
import json
import os
import re
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


# ---- ingest: ring-buffer records (fuzz/ingest_fuzz.c) ----
# Input: mode, backlog budget, more; then records, each fix u8, length u16, bytes.
FIX_PATCH, FIX_TEMPLATE, FIX_RAW_SIZE, FIX_WORK, FIX_IMAGE = 1, 4, 8, 0x20, 0x40
LAUNCH, HANDLE, MAP, MARKER, NCCL_PLAN, GRAPH = 1, 2, 3, 4, 5, 6
LF_STACK_COPY, LF_PY, LF_PY_TRUNCATED, LF_PY_NEW, LF_AT_MARKER = 1 << 5, 1 << 6, 1 << 7, 1 << 10, 1 << 12
LF_NESTED, LF_VIA_THUNK = 1, 2


def probe_ids():
    """Probe ids as the harness numbers them: attach/probes.c's table, in order, from 1."""
    src = open(os.path.join(ROOT, "..", "src", "attach", "probes.c")).read()
    table = src[src.index("struct np_probe_def defs[] = {"):]
    table = table[:table.index("\n};")]
    names = re.findall(r'^\s*(?:[A-Z_]+\(|\{)"([^"]+)"', table, re.M)
    return {name: i + 1 for i, name in enumerate(names)}


def header(rtype, tid=1, ts=7):
    # struct np_event_header: type, version, size (the harness sets it), ts_ns, pid (ours), tid
    return struct.pack("<HHIQII", rtype, 3, 0, ts, 0, tid)


def launch(probe, called=None, flags=0, n_ips=0, stack_len=0, n_py=0, args=(), corr=0, outer=0,
           tail=b"", tid=1, ts=7):
    called = probe if called is None else called
    regs = list(args) + [0] * (12 - len(args))
    fixed = (header(LAUNCH, tid, ts) + struct.pack("<IIIIIi", 0, probe, called, outer, flags, 0) +
             b"fuzz".ljust(16, b"\0") + struct.pack("<QQQ", 0, 0, 0) + struct.pack("<12Q", *regs) +
             b"\0" * 128 + struct.pack("<IIIIQ", n_ips, stack_len, n_py, corr, 0))
    assert len(fixed) == 336
    return fixed + tail


def py_frames(frames):
    # struct np_py_frame: code (an offset in the harness's image), instr, flags (1: entry)
    return b"".join(struct.pack("<QiI", code, instr, fl) for code, instr, fl in frames)


def nccl_plan(probe, tasks, tid=1, ts=7):
    n_tasks = [len(t) for t in tasks] + [0] * (5 - len(tasks))
    body = struct.pack("<II", probe, 0) + struct.pack("<QQQ", 0x7f0000001000, 0x7f0000002000, 0xabc0)
    body += struct.pack("<5H", *n_tasks) + b"\0\0" + struct.pack("<5I", *n_tasks)
    comm = struct.pack("<QiiI", 0xfedcba9876543210, 3, 8, 5).ljust(128, b"\0")
    plan = bytearray(256)
    struct.pack_into("<Q", plan, 40 - 34, 0x7f00deadbeef)  # kernelFn
    struct.pack_into("<Q", plan, 64 - 34, 0xf0f)           # channelMask
    struct.pack_into("<I", plan, 76 - 34, 640)             # threadPerBlock
    rec = header(NCCL_PLAN, tid, ts) + body + comm + bytes(plan) + b"\0" * 64
    assert len(rec) == 536
    for lst in tasks:
        for func, count in lst:
            t = bytearray(256)
            struct.pack_into("<I", t, 0, func)
            struct.pack_into("<Q", t, 24, count)
            rec += bytes(t)
    return rec


def small(rtype, probe=0, body=b""):
    return header(rtype) + (struct.pack("<I", probe) if probe else b"") + body


def rec(fix, data):
    return struct.pack("<BH", fix, len(data)) + data


def ingest_seeds():
    ids = probe_ids()
    rt, drv = ids["cudaLaunchKernel"], ids["cuLaunchKernel"]
    nccl, allreduce = ids["_Z16ncclLaunchKernelP8ncclCommP14ncclKernelPlan"], ids["ncclAllReduce"]
    handle, graph = ids["cuModuleGetFunction"], ids["cudaStreamEndCapture"]
    P, T = FIX_PATCH, FIX_PATCH | FIX_TEMPLATE
    # mode 0x18: --python merge (3 % 3 = 0); 0x02 fp fallback; backlog budget 64 (1 MiB)
    put("ingest", "each_kind", bytes([0x02, 0, 0]) + b"".join([
        rec(P, small(MAP)),
        rec(P, small(HANDLE, handle, struct.pack("<iQQ", 0, 0x1000, 0x2000) + b"kernel_a".ljust(128, b"\0"))),
        rec(P, small(MARKER, body=struct.pack("<III", 5, 2, 211))),
        rec(P, small(GRAPH, graph, struct.pack("<I6QQq", 3, 1, 2, 0, 0, 0, 0, 0x55, 0))),
        rec(P, nccl_plan(nccl, [[(4, 1000)], [(7, 7)]])),
        rec(P, launch(nccl, args=(0x7f0000001000, 0x7f0000002000))),
        rec(P, launch(allreduce, args=(1, 2, 100, 7, 0, 0x7f0000001000), n_ips=3,
                      tail=struct.pack("<3Q", 1, 0x203, 0x305))),
        rec(P, launch(rt, n_ips=2, tail=struct.pack("<2Q", 0x104, 0x2005))),
    ]))
    # the harness's own stack, DWARF-unwound, with Python frames merged at its eval loop
    py = py_frames([(0, 4, 0), (0x1000, 2, 1), (0x8000, -1, 1), (0x777777777777, 0, 1)])
    put("ingest", "template_python", bytes([0x00, 0, 0]) + b"".join([
        rec(T, launch(rt, flags=LF_STACK_COPY | LF_PY | LF_PY_NEW, n_py=4, tail=py)),
        rec(T, launch(drv, flags=LF_STACK_COPY | LF_PY | LF_PY_TRUNCATED, n_py=2, tail=py[:32])),
        rec(T, launch(rt, flags=LF_STACK_COPY, stack_len=200)),
    ]))
    put("ingest", "template_raw_python_backlog", bytes([0x09, 64, 0]) + b"".join([
        rec(T, launch(rt, flags=LF_STACK_COPY | LF_PY | LF_PY_NEW, n_py=4, tail=py)),
        rec(P | FIX_WORK, small(MAP)),
        rec(T, launch(drv, called=rt, flags=LF_STACK_COPY | LF_VIA_THUNK | LF_NESTED, outer=nccl)),
    ]))
    # the agent's fast path: a launch taken at the CUPTI marker, then its double
    put("ingest", "at_marker", bytes([0x00, 0, 0]) + b"".join([
        rec(T, launch(rt, flags=LF_STACK_COPY, tid=2, ts=1)),
        rec(T, launch(rt, flags=LF_STACK_COPY | LF_AT_MARKER, corr=9, tid=2, ts=2)),
        rec(T, launch(drv, flags=LF_STACK_COPY | LF_AT_MARKER, corr=10, tid=3, ts=3)),
    ]))
    # a backlog too small for a launch: dropped and counted; raw, hostile sizes
    put("ingest", "backlog_small", bytes([0x01, 1, 0]) + b"".join([
        rec(P, launch(rt, n_ips=2)), rec(P, small(HANDLE, handle, b"\0" * 148)),
        rec(0, launch(rt)[:40]), rec(P | FIX_RAW_SIZE, small(MARKER, body=b"\0" * 16)),
    ]))
    # no symbols (the process left first), nothing recorded, stripped libnccl
    put("ingest", "nosym_stripped", bytes([0x80, 0, 0x05]) + b"".join([
        rec(P, nccl_plan(nccl, [[(4, 1000)]])),
        rec(P, launch(nccl, args=(0x7f0000001000,))),
        rec(P, launch(rt, flags=LF_STACK_COPY, n_ips=1, stack_len=64)),
        rec(P, launch(rt, n_ips=4)), rec(P, launch(rt, n_ips=4)), rec(P, launch(rt, n_ips=4)),
    ]))
    # Found by this harness. A launch record the backlog had no room for was
    # counted under its unvalidated called_as: a per-probe array grown to 4 GiB.
    put("ingest", "regress-backlog-drop-probe-id", bytes([0x01, 0, 0]) +
        rec(0, launch(0, called=0xfffffffd) + struct.pack("<Q", 0)))
    # A Python name cut to fit a frame ended inside a UTF-8 character (the
    # harness's code object at 0x1000 is named by 1000 x U+00E9).
    put("ingest", "regress-python-name-cut-utf8", bytes([0x00, 0, 0]) +
        rec(P, launch(rt, flags=LF_PY, n_ips=1, n_py=1, tail=py_frames([(0x1000, 2, 1)]) +
                      struct.pack("<Q", 0x104))))
    # A launch without any frame (no ips, no return address): its empty
    # text was hashed from a NULL buffer (undefined memcpy).
    put("ingest", "regress-empty-stack-hash", bytes([0x00, 0, 0]) + rec(P, launch(rt)))


if __name__ == "__main__":
    fixtures = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "tests", "fixtures",
                                                                   "report")
    gpu_wire_seeds()
    pycode_seed()
    recording_seeds(fixtures)
    trace_seed()
    ingest_seeds()
