"""The CUPTI library's socket as ncclprobe sees it (include/ncclprobe/gpu_wire.h),
for tests that stand where ncclprobe stands: the frames that come on one
connection, decoded in order (HELLO, NAMES entries, ACTIVITY records, STATS,
CUPTI), and the START byte ncclprobe sends on a connection it handed to the library."""

import select
import struct
import time

HDR = struct.Struct("<IHHII")  # magic, version, type, size, pid
MAGIC, VERSION = 0x5543504E, 1
HELLO, ACTIVITY, STATS, NAMES, CUPTI = 1, 2, 3, 4, 5
START = b"S"  # NP_WIRE_START
HELLO_BODY = struct.Struct("<IIQ256s")  # status, origin, clock_mono_ns, message
COUNTED = struct.Struct("<II")  # ACTIVITY and NAMES: count, pad
# size, kind, copy_kind, correlation_id, start, end, device, context, stream, graph_id,
# graph_node_id, bytes, grid[3], block[3], cbid, thread_id, name_len, pad[3]
RECORD = struct.Struct("<HBBIQQIIIIQQ3I3IIIH6x")
NAME = struct.Struct("<QH6x")  # handle, name_len, pad[3]
STATS_BODY = struct.Struct("<6Q")
STATS_KEYS = ("records_sent", "dropped_by_cupti", "dropped_queue_full", "dropped_no_daemon",
              "dropped_no_buffer", "records_unknown")
# support, api_version, layouts_version, driver_version, record_size[4], size_confirmed, pad,
# cuda[16], path[256], chosen_by[64], record_type[4][32], degraded[768]
CUPTI_BODY = struct.Struct("<IIIi4III16s256s64s128s768s")
CUPTI_SUPPORT = {0: "known", 1: "assumed", 2: "unsupported", 3: "not_asked", 4: "not_loaded"}
ORIGIN_START, ORIGIN_INJECTED = 0, 1
KINDS = {1: "kernel", 2: "memcpy", 3: "memset", 4: "api_runtime", 5: "api_driver"}


def _names(body):
    count, _ = COUNTED.unpack_from(body)
    off, out = COUNTED.size, []
    for _ in range(count):
        handle, length = NAME.unpack_from(body, off)
        name = body[off + NAME.size:off + NAME.size + length].decode()
        out.append({"type": "name", "handle": handle, "name": name})
        off += (NAME.size + length + 7) & ~7
    assert off == len(body), "a NAMES frame with bytes after its entries"
    return out


def _records(body):
    count, _ = COUNTED.unpack_from(body)
    off, out = COUNTED.size, []
    for _ in range(count):
        f = RECORD.unpack_from(body, off)
        size, kind, corr, start, end, name_len = f[0], f[1], f[3], f[4], f[5], f[-1]
        name = body[off + RECORD.size:off + RECORD.size + name_len].decode()
        out.append({"type": "record", "kind": KINDS.get(kind, kind), "correlation_id": corr,
                    "start_ns": start, "end_ns": end, "stream": f[8], "graph_id": f[9],
                    "graph_node_id": f[10], "name": name})
        off += size
    assert off == len(body), "an ACTIVITY frame with bytes after its records"
    return out


def _text(raw):
    return raw.split(b"\0", 1)[0].decode()


def _cupti(body):
    f = CUPTI_BODY.unpack(body)
    types = [_text(f[13][i * 32:(i + 1) * 32]) for i in range(4)]
    return {"type": "cupti", "support": CUPTI_SUPPORT.get(f[0], f[0]), "api_version": f[1],
            "layouts_version": f[2], "driver_version": f[3], "record_size": list(f[4:8]),
            "size_confirmed": f[8], "cuda": _text(f[10]), "path": _text(f[11]),
            "chosen_by": _text(f[12]), "record_type": types,
            "degraded": [x for x in _text(f[14]).split("\n") if x]}


def decode(ftype, body):
    """The events of one frame (its body: what follows the header)."""
    if ftype == HELLO:
        status, origin, clock, message = HELLO_BODY.unpack(body)
        return [{"type": "hello", "status": status, "origin": origin, "clock_mono_ns": clock,
                 "message": message.split(b"\0", 1)[0].decode()}]
    if ftype == STATS:
        return [dict(zip(STATS_KEYS, STATS_BODY.unpack(body)), type="stats")]
    if ftype == NAMES:
        return _names(body)
    if ftype == ACTIVITY:
        return _records(body)
    if ftype == CUPTI:
        return [_cupti(body)]
    raise AssertionError(f"a frame of unknown type {ftype}")


class Connection:
    """ncclprobe's end of one connection: read() decodes the frames that come
    into .events (in order) until a condition holds, the deadline passes or
    the library closes it (.eof)."""

    def __init__(self, sock, pid=None):
        self.sock, self.pid = sock, pid
        self.events, self.eof, self._buf = [], False, b""

    def start(self):
        self.sock.sendall(START)

    def _frames(self):
        while len(self._buf) >= HDR.size:
            magic, version, ftype, size, pid = HDR.unpack_from(self._buf)
            assert (magic, version) == (MAGIC, VERSION), (hex(magic), version)
            assert HDR.size <= size <= 1 << 20, size
            assert self.pid is None or pid == self.pid, (pid, self.pid)
            if len(self._buf) < size:
                return
            self.events += decode(ftype, self._buf[HDR.size:size])
            self._buf = self._buf[size:]

    def read(self, until=lambda c: False, timeout=5.0):
        """Reads until until(self) is true (returned True), EOF or timeout s
        (returned until(self))."""
        deadline = time.monotonic() + timeout
        while not until(self) and not self.eof:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                break
            data = self.sock.recv(1 << 16)
            if not data:
                self.eof = True
            self._buf += data
            self._frames()
        return until(self)

    def of(self, kind):
        return [e for e in self.events if e["type"] == kind]

    def records_of(self, corr):
        return [e for e in self.of("record") if e["correlation_id"] == corr]
