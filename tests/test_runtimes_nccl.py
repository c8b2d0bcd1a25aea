"""NCCL 2.21-2.32 from NVIDIA's wheels (tools/fetch-runtimes.sh): the real
libnccl.so.2 of each version, run without a GPU.

Per version a small program (tests/progs/nccl_versions.c) is compiled against
that version's nccl.h and linked with its library, and recorded with
`ncclprobe record`. It calls the NCCL API (which NCCL refuses: no GPU, a
communicator that is a zeroed block with only the fields ncclprobe reads
filled in) and then calls the library's own local ncclLaunchKernel,
ncclLaunchCeColl and ncclLaunchRma with kernel plans built by hand, so the
launch probes fire on real code with plans whose tasks the test chose.

Every expectation comes from the library itself, read by other tools than
ncclprobe: struct offsets, struct sizes and enumerators from gdb (its own
DWARF reader, lib/nccl_dwarf.py), local symbols from nm, sections from
readelf. Each check also writes its cell of docs/compatibility.md
(runtimes.record_result)."""

import re
import subprocess
from pathlib import Path

import pytest

from lib import runtimes
from lib.nccl_dwarf import dwarf_facts, has_section, local_symbols
from lib.paths import REPO
from lib.run import record
from lib.skip import needs_bpf, needs_tools

VERSIONS = runtimes.entries("nccl")
PROGRAM = REPO / "tests/progs/nccl_versions.c"
CUDA_INCLUDE = Path("/usr/local/cuda/include")  # nccl.h includes cuda_runtime.h

pytestmark = [needs_bpf, needs_tools("gdb", "nm", "readelf", "cc"),
              pytest.mark.skipif(not (CUDA_INCLUDE / "cuda_runtime.h").exists(),
                                 reason=f"no CUDA headers in {CUDA_INCLUDE}")]

LAUNCH_KERNEL = "_Z16ncclLaunchKernelP8ncclCommP14ncclKernelPlan"
LAUNCH_CE = "_Z16ncclLaunchCeCollP8ncclCommP14ncclKernelPlan"
LAUNCH_RMA = "_Z13ncclLaunchRmaP8ncclCommP14ncclKernelPlan"
LAUNCHES = {LAUNCH_KERNEL: "ncclLaunchKernel", LAUNCH_CE: "ncclLaunchCeColl",
            LAUNCH_RMA: "ncclLaunchRma"}
API = ["ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast", "ncclBcast",
       "ncclReduce", "ncclAlltoAll", "ncclGather", "ncclScatter", "ncclSend", "ncclRecv",
       "ncclGroupStart", "ncclGroupEnd", "ncclAllReduceConfig", "ncclAllGatherConfig",
       "ncclReduceScatterConfig", "ncclBroadcastConfig", "ncclReduceConfig",
       "ncclAlltoAllConfig", "ncclGatherConfig", "ncclScatterConfig"]

# What ncclprobe reads, by group (docs/nccl.md, "Offsets"). A group is there when
# its first member is: the task lists and the copy-engine and RMA launches came
# in later versions. Inside a group that is there, every member must be found
# or named missing; "comm", "stream" and "plan" must always be there.
FIELDS = {
    "comm": [("ncclComm", "commHash"), ("ncclComm", "rank"), ("ncclComm", "nRanks"),
             ("ncclComm", "cudaDev")],
    "stream": [("ncclCudaStreamList", "stream")],  # + planner.streams or tasks.streams
    "plan": [("ncclKernelPlan", "kernelFn"), ("ncclKernelPlan", "channelMask"),
             ("ncclKernelPlan", "threadPerBlock")],
    "coll": [("ncclKernelPlan", "collTaskQueue.head"), ("ncclTaskColl", "next"),
             ("ncclTaskColl", "func"), ("ncclTaskColl", "count"), ("ncclTaskColl", "root"),
             ("ncclTaskColl", "datatype"), ("ncclTaskColl", "opHost"),
             ("ncclTaskColl", "algorithm"), ("ncclTaskColl", "protocol"),
             ("ncclTaskColl", "nChannels")],
    "p2p": [("ncclKernelPlan", "p2pTaskQueue.head"), ("ncclTaskP2p", "next"),
            ("ncclTaskP2p", "func"), ("ncclTaskP2p", "count"), ("ncclTaskP2p", "datatype"),
            ("ncclTaskP2p", "root"), ("ncclTaskP2p", "nChannels")],
    "bcast": [("ncclKernelPlan", "bcastTaskQueue.head"), ("ncclTaskBcast", "next"),
              ("ncclTaskBcast", "func"), ("ncclTaskBcast", "count"),
              ("ncclTaskBcast", "datatype"), ("ncclTaskBcast", "root"),
              ("ncclTaskBcast", "algorithm"), ("ncclTaskBcast", "protocol"),
              ("ncclTaskBcast", "nChannels")],
    "ce": [("ncclKernelPlan", "isCeColl"), ("ncclKernelPlan", "ceCollArgs"),
           ("ncclCeCollArgs", "func"), ("ncclCeCollArgs", "rootRank"),
           ("ncclCeCollArgs", "nElts"), ("ncclCeCollArgs", "eltSize")],
    "rma": [("ncclKernelPlan", "isRma"), ("ncclKernelPlan", "rmaArgs"),
            ("ncclKernelPlan", "rmaTaskQueueProxy.head"),
            ("ncclKernelPlan", "rmaTaskQueueCe.head"), ("ncclRmaArgs", "func"),
            ("ncclTaskRma", "next"), ("ncclTaskRma", "func"), ("ncclTaskRma", "count"),
            ("ncclTaskRma", "datatype"), ("ncclTaskRma", "bytes"), ("ncclTaskRma", "peer"),
            ("ncclTaskRma", "nChannels")],
    "sym": [("ncclKernelPlan", "isSymColl")],
}
STREAMS = [("ncclComm", "planner.streams"), ("ncclComm", "tasks.streams")]
OPTIONAL_GROUPS = {"bcast", "ce", "rma", "sym"}
# read when the library has them, never required
EXTRA = [("ncclCeCollArgs", "datatype"), ("ncclComm", "config.blocking"),
         ("ncclRmaArgs", "nRmaTasks")]
STRUCTS = ["ncclComm", "ncclCudaStreamList", "ncclKernelPlan", "ncclTaskColl", "ncclTaskP2p",
           "ncclTaskBcast", "ncclCeCollArgs", "ncclRmaArgs", "ncclTaskRma"]
# enum -> the prefix its enumerators carry
ENUMS = {"ncclFunc_t": "ncclFunc", "ncclDataType_t": "nccl", "ncclRedOp_t": "nccl"}
SIZES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "float16": 2,
         "float32": 4, "float64": 8, "bfloat16": 2, "float8e4m3": 1, "float8e5m2": 1}

COMM_ID = {"comm_hash": 0x1234ABCD5678EF01, "rank": 1, "nranks": 4, "cuda_dev": 2}
LAUNCH_STREAM = 0x5020


def key(struct, path):
    return f"{struct}.{path}"


def hexs(value):
    return f"0x{value:x}"


def all_members():
    members = [m for group in FIELDS.values() for m in group] + STREAMS + EXTRA
    return [list(m) for m in dict.fromkeys(members)]


# ---- what the library is (gdb, nm, readelf) -------------------------------------------

def facts(name, tmp):
    """gdb's, nm's and readelf's view of the version's library."""
    lib = runtimes.library(name)
    f = dwarf_facts(lib, all_members(), STRUCTS, list(ENUMS), tmp)
    f["symbols"] = local_symbols(lib, [LAUNCH_KERNEL, LAUNCH_CE, LAUNCH_RMA])
    f["stub"] = generic_kernel_stub(lib)
    f["symtab"] = has_section(lib, ".symtab")
    f["debug_info"] = has_section(lib, ".debug_info")
    f["dwarf_version"] = dwarf_version(lib) if f["debug_info"] else None
    return f


def generic_kernel_stub(lib):
    """(st_value, name) of the host stub of ncclDevKernel_Generic (nm -C)."""
    out = subprocess.run(["nm", "-C", "--defined-only", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    for line in out.splitlines():
        addr, _, name = line.split(None, 2)
        if name.startswith("ncclDevKernel_Generic(") and "[clone" not in name:
            return int(addr, 16), "ncclDevKernel_Generic"
    raise AssertionError(f"{lib}: no ncclDevKernel_Generic")


def dwarf_version(lib):
    """The version in the first compile unit's header of .debug_info (readelf for
    where the section is, then its bytes)."""
    out = subprocess.run(["readelf", "-SW", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"\]\s+\.debug_info\s+\S+\s+\S+\s+([0-9a-f]+)", out)
    with open(lib, "rb") as f:
        f.seek(int(m.group(1), 16))
        header = f.read(6)
    return int.from_bytes(header[4:6], "little")


def member(f, struct, path):
    return f["members"][key(struct, path)]


def enum_value(f, enum, enumerator):
    return dict(f["enums"][enum])[enumerator]


def enum_names(f, enum):
    """{value: output name}: the first enumerator of each value, its prefix
    dropped (datatypes and reduction ops lower-case), the ncclNum* counts left
    out - what NCCL's own headers call them."""
    prefix = ENUMS[enum]
    out = {}
    for name, value in f["enums"][enum]:
        if name.startswith("ncclNum") or value in out or value > 1000:
            continue
        short = name[len(prefix):] if name.startswith(prefix) else name
        out[value] = short if enum == "ncclFunc_t" else short.lower()
    return out


def group_there(f, group):
    struct, path = FIELDS[group][0]
    return member(f, struct, path) is not None


def expected_missing(f):
    """The members ncclprobe must name missing, from gdb's view of the library."""
    missing = []
    for group, members in FIELDS.items():
        if group in OPTIONAL_GROUPS and not group_there(f, group):
            continue
        if group in ("coll", "p2p") and not group_there(f, group):
            missing.append(key(*members[0]))  # the list itself: its tasks are moot
            continue
        missing += [key(s, p) for s, p in members if member(f, s, p) is None]
    if not any(member(f, s, p) for s, p in STREAMS):
        missing.append(key(*STREAMS[0]))
    return missing


# ---- the program: objects, members poked at gdb's offsets, the plans -----------------

class Spec:
    """Blocks the program allocates and the members it writes in them."""

    def __init__(self, f):
        self.f = f
        self.sizes, self.pokes, self.pointers, self.calls = [], [], [], []

    def new(self, struct, minimum=8):
        self.sizes.append(max(self.f["sizes"].get(struct) or 0, minimum))
        return len(self.sizes) - 1

    def put(self, obj, struct, path, value=0, to=-1):
        m = member(self.f, struct, path)
        if m is None:
            return False
        bits = m.bitsize or m.size * 8
        self.pokes.append((obj, m.bitpos, bits, value & ((1 << bits) - 1), to))
        return True

    def header(self):
        def rows(items):
            return ", ".join("{" + ", ".join(str(x) for x in row) + "}" for row in items)
        return (f"#define SPEC_OBJECTS {', '.join(map(str, self.sizes))}\n"
                f"#define SPEC_POKES {rows(self.pokes) or '{-1, 0, 0, 0, -1}'}\n"
                f"#define SPEC_CALLS {rows(self.calls) or '{0, 0, 0}'}\n"
                f"#define SPEC_POINTERS {rows(self.pointers) or '{-1, 0, 0}'}\n")


def func(f, name):
    return enum_value(f, "ncclFunc_t", "ncclFunc" + name)


def dtype(f, name):
    return enum_value(f, "ncclDataType_t", "nccl" + name)


def build_spec(f):
    """The program's blocks, and what each launch should show: [(api, plan facts)]."""
    s = Spec(f)
    comm = s.new("ncclComm")
    s.put(comm, "ncclComm", "commHash", COMM_ID["comm_hash"])
    s.put(comm, "ncclComm", "rank", COMM_ID["rank"])
    s.put(comm, "ncclComm", "nRanks", COMM_ID["nranks"])
    s.put(comm, "ncclComm", "cudaDev", COMM_ID["cuda_dev"])
    s.put(comm, "ncclComm", "config.blocking", 1)  # NCCL then asks nothing more of it
    streams = s.new("ncclCudaStreamList")
    s.put(streams, "ncclCudaStreamList", "stream", LAUNCH_STREAM)
    for struct, path in STREAMS:
        s.put(comm, struct, path, to=streams)
    launches = [kernel_plan(s, comm, f)]
    if group_there(f, "coll"):
        launches.append(single_op_plan(s, comm, f))
    if LAUNCH_CE in f["symbols"] and group_there(f, "ce"):
        launches.append(ce_plan(s, comm, f))
    if LAUNCH_RMA in f["symbols"] and group_there(f, "rma"):
        launches.append(rma_plan(s, comm, f))
    return s, launches


def task(s, f, struct, list_path, plan, prev, fields):
    """A task block on the plan's list (after prev), its members written."""
    t = s.new(struct)
    if prev is None:
        s.put(plan, "ncclKernelPlan", list_path, to=t)
    else:
        s.put(prev, struct, "next", to=t)
    for path, value in fields.items():
        s.put(t, struct, path, value)
    return t


def op(name, count, datatype, redop="", root=-1, peer=-1, algorithm="", protocol="",
       nchannels=-1, nbytes=None):
    return {"op": name, "count": count, "datatype": datatype, "redop": redop, "root": root,
            "peer": peer, "algorithm": algorithm, "protocol": protocol, "nchannels": nchannels,
            "bytes": count * SIZES[datatype] if nbytes is None else nbytes}


def kernel_plan(s, comm, f):
    plan = s.new("ncclKernelPlan")
    s.pointers.append((plan, member(f, "ncclKernelPlan", "kernelFn").bitpos, f["stub"][0]))
    s.put(plan, "ncclKernelPlan", "channelMask", 0xF0F)
    s.put(plan, "ncclKernelPlan", "threadPerBlock", 640)
    s.calls.append((f["symbols"][LAUNCH_KERNEL], comm, plan))
    ops = []
    has_nch = member(f, "ncclTaskColl", "nChannels") is not None
    if group_there(f, "coll"):
        t = task(s, f, "ncclTaskColl", "collTaskQueue.head", plan, None, {
            "func": func(f, "AllReduce"), "count": 1000, "datatype": dtype(f, "Bfloat16"),
            "opHost": enum_value(f, "ncclRedOp_t", "ncclMax"), "root": 0, "algorithm": 1,
            "protocol": 2, "nChannels": 4})
        ops.append(op("AllReduce", 1000, "bfloat16", "max", algorithm="RING",
                      protocol="SIMPLE", nchannels=4 if has_nch else -1))
        # 2.29+: an AllGatherV (ncclFunc_t 11); before, a Broadcast from rank 2
        name = "AllGatherV" if "ncclFuncAllGatherV" in dict(f["enums"]["ncclFunc_t"]) \
            else "Broadcast"
        task(s, f, "ncclTaskColl", "collTaskQueue.head", plan, t, {
            "func": func(f, name), "count": 10, "datatype": dtype(f, "Int8"), "root": 2,
            "algorithm": -1, "protocol": 0, "nChannels": 1})
        ops.append(op(name, 10, "int8", root=2 if name == "Broadcast" else -1,
                      protocol="LL", nchannels=1 if has_nch else -1))
    if group_there(f, "p2p"):
        task(s, f, "ncclTaskP2p", "p2pTaskQueue.head", plan, None, {
            "func": func(f, "Recv"), "count": 7, "datatype": dtype(f, "Float64"), "root": 6,
            "nChannels": 2})
        ops.append(op("Recv", 7, "float64", peer=6, nchannels=2 if has_nch else -1))
    if group_there(f, "bcast"):
        task(s, f, "ncclTaskBcast", "bcastTaskQueue.head", plan, None, {
            "func": func(f, "Broadcast"), "count": 33, "datatype": dtype(f, "Float16"),
            "root": 1, "algorithm": 1, "protocol": 2, "nChannels": 3})
        ops.append(op("Broadcast", 33, "float16", root=1, algorithm="RING", protocol="SIMPLE",
                      nchannels=3))
    return "ncclLaunchKernel", {"kernel": f["stub"][1], "grid": [8, 1, 1],
                                "block": [640, 1, 1], "ops": ops}


def single_op_plan(s, comm, f):
    """A plan with one ReduceScatter on 2 channels: its nChannels says 5 where
    the library has the field, else ncclprobe takes the plan's count (2)."""
    plan = s.new("ncclKernelPlan")
    s.pointers.append((plan, member(f, "ncclKernelPlan", "kernelFn").bitpos, f["stub"][0]))
    s.put(plan, "ncclKernelPlan", "channelMask", 0x3)
    s.put(plan, "ncclKernelPlan", "threadPerBlock", 256)
    task(s, f, "ncclTaskColl", "collTaskQueue.head", plan, None, {
        "func": func(f, "ReduceScatter"), "count": 48, "datatype": dtype(f, "Float32"),
        "opHost": enum_value(f, "ncclRedOp_t", "ncclSum"), "algorithm": 1, "protocol": 0,
        "nChannels": 5})
    s.calls.append((f["symbols"][LAUNCH_KERNEL], comm, plan))
    has_nch = member(f, "ncclTaskColl", "nChannels") is not None
    return "ncclLaunchKernel", {"kernel": f["stub"][1], "grid": [2, 1, 1], "block": [256, 1, 1],
                                "ops": [op("ReduceScatter", 48, "float32", "sum",
                                           algorithm="RING", protocol="LL",
                                           nchannels=5 if has_nch else 2)]}


def ce_plan(s, comm, f):
    plan, args = s.new("ncclKernelPlan"), s.new("ncclCeCollArgs", 64)
    s.put(plan, "ncclKernelPlan", "isCeColl", 1)
    s.put(plan, "ncclKernelPlan", "ceCollArgs", to=args)
    for path, value in {"func": func(f, "AllGather"), "rootRank": 0, "nElts": 4096,
                        "eltSize": 2, "datatype": dtype(f, "Float16")}.items():
        s.put(args, "ncclCeCollArgs", path, value)
    s.calls.append((f["symbols"][LAUNCH_CE], comm, plan))
    # the datatype is there from 2.29 on; bytes are nElts * eltSize either way
    datatype = "float16" if member(f, "ncclCeCollArgs", "datatype") else ""
    return "ncclLaunchCeColl", {"kernel": "<nccl copy engine>",
                                "ops": [op("AllGather", 4096, datatype, nbytes=8192)]}


def rma_plan(s, comm, f):
    plan, args = s.new("ncclKernelPlan"), s.new("ncclRmaArgs", 32)
    s.put(plan, "ncclKernelPlan", "isRma", 1)
    s.put(plan, "ncclKernelPlan", "rmaArgs", to=args)
    s.put(args, "ncclRmaArgs", "func", func(f, "PutSignal"))
    s.put(args, "ncclRmaArgs", "nRmaTasks", 1)
    task(s, f, "ncclTaskRma", "rmaTaskQueueProxy.head", plan, None, {
        "func": func(f, "PutSignal"), "count": 64, "datatype": dtype(f, "Float32"),
        "bytes": 256, "peer": 3, "nChannels": 1})
    s.calls.append((f["symbols"][LAUNCH_RMA], comm, plan))
    return "ncclLaunchRma", {"kernel": "<nccl rma>",
                             "ops": [op("PutSignal", 64, "float32", peer=3, nchannels=1)]}


def api_calls(version):
    """The program's API calls in order (tests/progs/nccl_versions.c): (symbol,
    op, fields); fields["comm"] False for the NULL communicator, True for the
    block. Stream 0x5010 + n, send buffer S, receive buffer S + 0x1000."""
    calls = [("ncclGroupStart", "GroupStart", {})]

    def coll(symbol, op_name, n, send, count, datatype, redop="", root=-1, peer=-1, comm=True,
             recv=True):
        calls.append((symbol, op_name, {
            "count": count, "datatype": datatype, "redop": redop, "root": root, "peer": peer,
            "stream": hexs(0x5010 + n), "sendbuff": hexs(send),
            "recvbuff": hexs(send + 0x1000) if recv else "0x0", "comm": comm,
            "bytes": count * SIZES[datatype]}))

    coll("ncclAllReduce", "AllReduce", 0, 0x1000, 1024, "float32", "sum", comm=False)
    coll("ncclAllReduce", "AllReduce", 1, 0x1100, 1000, "int64", "max")
    coll("ncclAllGather", "AllGather", 2, 0x1200, 77, "int32")
    coll("ncclReduceScatter", "ReduceScatter", 3, 0x1300, 64, "float64", "prod")
    coll("ncclBroadcast", "Broadcast", 4, 0x1400, 10, "uint8", root=2)
    coll("ncclReduce", "Reduce", 5, 0x1500, 5, "int64", "min", root=3)
    coll("ncclSend", "Send", 6, 0x1600, 7, "float16", peer=1, recv=False)
    coll("ncclRecv", "Recv", 7, 0x2700, 9, "uint32", peer=3, recv=False)
    if version >= (2, 28):
        coll("ncclAlltoAll", "AlltoAll", 8, 0x1800, 11, "uint64")
        coll("ncclGather", "Gather", 9, 0x1900, 12, "int8", root=1)
        coll("ncclScatter", "Scatter", 10, 0x1A00, 13, "float32", root=2)
    if version >= (2, 32):
        coll("ncclAllReduceConfig", "AllReduce", 11, 0x1B00, 14, "float32", "avg")
        coll("ncclAllGatherConfig", "AllGather", 12, 0x1C00, 15, "int32")
        coll("ncclBroadcastConfig", "Broadcast", 13, 0x1D00, 16, "uint8", root=1)
    calls.append(("ncclGroupEnd", "GroupEnd", {}))
    return calls


class Run:
    """One version's recording and what to compare it with."""

    def __init__(self, name, tmp):
        self.name = name
        self.version = tuple(int(x) for x in runtimes.version_of(name).split("."))
        self.lib = runtimes.library(name)
        self.f = facts(name, tmp)
        spec, self.launches = build_spec(self.f)
        exe = build_program(name, spec, tmp)
        self.rec = record(tmp, ["--", exe], timeout=120)
        assert self.rec.returncode == 0, self.rec.stderr
        out = dict(line.split("=", 1) for line in self.rec.stdout.splitlines() if "=" in line)
        self.version_code = int(out["version"])  # ncclGetVersion: the library says it
        self.comm = f"0x{int(out['comm'], 16):x}"
        self.calls = int(out["calls"])
        self.summary = self.rec.summary
        [self.info] = [x for x in self.summary["nccl"]["libraries"]
                       if Path(x["path"]).resolve() == self.lib.resolve()]


def build_program(name, spec, tmp):
    work = tmp / "build"
    work.mkdir(exist_ok=True)
    (work / "nccl_versions_spec.h").write_text(spec.header())
    lib = runtimes.library(name)
    exe = work / "nccl_versions"
    cc = subprocess.run(["cc", "-std=c11", "-O1", "-g", "-fno-omit-frame-pointer", "-Wall",
                         "-Werror", f"-I{work}", f"-I{runtimes.include_dir(name)}",
                         f"-I{CUDA_INCLUDE}", str(PROGRAM), "-o", str(exe), f"-L{lib.parent}",
                         "-l:libnccl.so.2", f"-Wl,-rpath,{lib.parent}", "-ldl"],
                        capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    return exe


_runs = {}


@pytest.fixture
def run(request, tmp_path_factory):
    """The version's Run, recorded once for every test of it."""
    name = request.param
    runtimes.cache()
    if name not in _runs:
        _runs[name] = Run(name, tmp_path_factory.mktemp(name))
    return _runs[name]


def aliases(lib, symbol):
    """Every name nm gives the address of `symbol` (ncclAllReduce is pncclAllReduce)."""
    out = subprocess.run(["nm", "--defined-only", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    rows = [line.split() for line in out.splitlines()]
    addr = {r[2]: r[0] for r in rows if len(r) == 3}
    return {r[2] for r in rows if len(r) == 3 and r[0] == addr.get(symbol)}


# ---- the checks -------------------------------------------------------------------------

@pytest.mark.parametrize("run", VERSIONS, indirect=True)
def test_symtab_dwarf_and_version_are_recorded(run):
    """summary.json says what the file is: .symtab, DWARF and its version, the
    NCCL version; and how well ncclprobe reads it, warned once when not fully."""
    info, f = run.info, run.f
    assert (info["symtab"], info["debug_info"], info["dwarf_version"]) == \
           (f["symtab"], f["debug_info"], f["dwarf_version"])
    v = run.version_code
    assert info["version"] == f"{v // 10000}.{v // 100 % 100}.{v % 100}"
    assert info["version"] == runtimes.version_of(run.name)
    missing = expected_missing(f)
    assert info["support"] == ("degraded" if missing else "full"), info
    warnings = [x for x in run.rec.stderr.splitlines()
                if "warning" in x and str(run.lib) in x]
    assert len(warnings) == (1 if missing else 0), run.rec.stderr
    if missing:
        assert info["support_note"] in warnings[0]
    runtimes.record_result(run.name, "symtab/DWARF", "works" if f["symtab"] and f["debug_info"]
                           else "degrades",
                           f".symtab, DWARF {f['dwarf_version']}; version {info['version']} "
                           "from the library's banner")


@pytest.mark.parametrize("run", VERSIONS, indirect=True)
def test_launch_and_api_probes_attach(run):
    """Every entry point ncclprobe probes that this libnccl has (nm) is probed
    in it and attached: the local launch functions and the API."""
    present = local_symbols(run.lib, list(LAUNCHES) + API)
    probes = [p for p in run.summary["probes"]
              if Path(p["library"]).resolve() == run.lib.resolve()]
    got = {p["symbol"]: p for p in probes}
    assert set(present) <= set(got), set(present) - set(got)
    assert all(p["attached"] for p in probes), [p for p in probes if not p["attached"]]
    assert LAUNCH_KERNEL in got
    # each fired at every call the program made, and at the calls NCCL makes
    # to its own API (ncclGroupStart inside a collective): those are counted,
    # not recorded as operations
    calls = {}
    for symbol, _, _ in api_calls(run.version):
        calls[symbol] = calls.get(symbol, 0) + 1
    for symbol, n in calls.items():
        assert got[symbol]["hits"] >= n, (symbol, got[symbol])
    hits = sum(p["hits"] for p in probes if p["role"] == "api")
    assert hits == sum(calls.values()) + run.summary["nccl"]["internal_api_calls"]
    for symbol in LAUNCHES:
        n = sum(1 for api, _ in run.launches if api == LAUNCHES[symbol])
        if symbol in got:
            assert got[symbol]["hits"] == n, (symbol, got[symbol])
    launch = [LAUNCHES[s] for s in LAUNCHES if s in got]
    runtimes.record_result(run.name, "probes attach", "works",
                           f"{len(probes)} probes: {', '.join(launch)}, "
                           f"{sum(1 for s in got if s in API)} API functions")


@pytest.mark.parametrize("run", VERSIONS, indirect=True)
def test_api_calls_are_recorded_with_names_and_stacks(run):
    """nccl.jsonl: every API call the program made, in order, with its
    arguments, the communicator's identity read at gdb's offsets, and the
    program's own call chain."""
    ops = run.rec.jsonl("nccl.jsonl")
    want = api_calls(run.version)
    assert len(ops) == len(want) == run.calls
    stacks = run.rec.stacks()
    for got, (symbol, name, fields) in zip(ops, want):
        assert got["op"] == name, (got, symbol)
        assert stacks[got["stack_id"]][-3:-1] == ["main", "issue_ops"], stacks[got["stack_id"]]
        assert stacks[got["stack_id"]][-1] in aliases(run.lib, symbol)
        if not fields:
            continue
        for k in ("count", "datatype", "redop", "root", "peer", "stream", "sendbuff",
                  "recvbuff", "bytes"):
            assert got[k] == fields[k], (k, got, fields)
        if fields["comm"]:
            assert got["comm"] == run.comm
            assert {k: got[k] for k in COMM_ID} == {**COMM_ID,
                                                    "comm_hash": hexs(COMM_ID["comm_hash"])}
        else:
            assert got["comm"] == "0x0" and got["comm_hash"] is None
    # the communicator's totals, by API operation (the Config variants included)
    [comm] = [c for c in run.summary["nccl"]["communicators"] if c["comm"] == run.comm]
    totals = {}
    for _, name, fields in want:
        if fields and fields["comm"]:
            t = totals.setdefault(name, {"calls": 0, "bytes": 0})
            t["calls"] += 1
            t["bytes"] += fields["bytes"]
    assert comm["ops"] == totals
    runtimes.record_result(run.name, "API calls recorded", "works",
                           f"{len(ops)} calls with arguments, communicator and stack")


@pytest.mark.parametrize("run", VERSIONS, indirect=True)
def test_plan_and_task_fields_resolve_or_are_named_missing(run):
    """Every field the plan and task readers use is where gdb says, or
    summary.json names it missing; launches decode the plans the program
    built at gdb's offsets."""
    info, f = run.info, run.f
    reported = info["fields"]
    checked = [m for group in FIELDS.values() for m in group] + STREAMS + \
        [("ncclCeCollArgs", "datatype")]
    assert set(reported) == {key(*m) for m in checked}
    for struct, path in checked:
        want, got = member(f, struct, path), reported[key(struct, path)]
        if want is None:
            assert got is None, (struct, path, got)
            continue
        assert got is not None, (struct, path, want)
        assert (got["offset"], got.get("bit_size", 0), got.get("bit_shift", 0)) == \
               (want.offset, want.bitsize, want.shift if want.bitsize else 0), (struct, path)
        assert got["size"] == want.size, (struct, path)
    missing = expected_missing(f)
    assert sorted(info["missing_fields"]) == sorted(missing)
    assert info["communicator_identity"] and info["kernel_plans"]
    stream = next(key(*m) for m in STREAMS if member(f, *m))
    assert info["launch_stream"] == stream

    launches = run.rec.jsonl("launches.jsonl")
    nccl = [x for x in launches if x["api"] in LAUNCHES.values()]
    assert len(nccl) == len(run.launches)
    stacks = run.rec.stacks()
    for got, (api, want) in zip(nccl, run.launches):
        n = got["nccl"]
        assert (got["api"], got["kernel"], got["stream"], got["nested"]) == \
               (api, want["kernel"], hexs(LAUNCH_STREAM), False)
        assert n["comm"] == run.comm and n["comm_hash"] == hexs(COMM_ID["comm_hash"])
        assert (n["rank"], n["nranks"], n["cuda_dev"]) == \
               (COMM_ID["rank"], COMM_ID["nranks"], COMM_ID["cuda_dev"])
        if "grid" in want:
            assert (got["grid"], got["block"]) == (want["grid"], want["block"])
        keys = list(want["ops"][0]) if want["ops"] else []
        assert [{k: o[k] for k in keys} for o in n["ops"]] == want["ops"], (api, n["ops"])
        assert n["ops_total"] == len(want["ops"])
        assert ("missing" in n) == bool(missing)
        frames = stacks[got["stack_id"]]
        types = list(dict.fromkeys(o["op"] for o in want["ops"]))
        tail = [api, "[NCCL]" + "+".join(types)] if types else [api]
        assert frames[-len(tail):] == tail and "run_plans" in frames, frames
    # what libnccl launched itself from inside (2.21: its static cudart) is nested
    for x in launches:
        if x["api"] not in LAUNCHES.values():
            assert x["nested"] and "ncclLaunchKernel" in stacks[x["stack_id"]], x
    if missing:
        runtimes.record_result(run.name, "plan/task fields", "degrades",
                               info["missing"].replace("not in its DWARF: ", "absent: "))
    else:
        runtimes.record_result(run.name, "plan/task fields", "works",
                               f"{sum(1 for v in reported.values() if v)} fields from DWARF; "
                               f"launches: {', '.join(dict.fromkeys(a for a, _ in run.launches))}")


@pytest.mark.parametrize("run", VERSIONS, indirect=True)
def test_enum_names_come_from_the_library(run):
    """ncclFunc_t, ncclDataType_t and ncclRedOp_t named as this library's
    DWARF (gdb) names them: 2.29's func 11 is AllGatherV."""
    info, f = run.info, run.f
    for enum in ENUMS:
        names = enum_names(f, enum)
        want = [names.get(v, "") for v in range(max(names) + 1)]
        assert info["names"][enum] == want, enum
        assert info["names_from"][enum] == "dwarf"
    funcs = dict(f["enums"]["ncclFunc_t"])
    if "ncclFuncAllGatherV" in funcs:
        assert info["names"]["ncclFunc_t"][funcs["ncclFuncAllGatherV"]] == "AllGatherV"
        launch = next(x for x in run.rec.jsonl("launches.jsonl")
                      if x["api"] == "ncclLaunchKernel")
        assert "AllGatherV" in [o["op"] for o in launch["nccl"]["ops"]]
    n = len(info["names"]["ncclFunc_t"])
    runtimes.record_result(run.name, "names from DWARF", "works",
                           f"ncclFunc_t 0-{n - 1} ({info['names']['ncclFunc_t'][-1]} last), "
                           f"{len(info['names']['ncclDataType_t'])} datatypes")
