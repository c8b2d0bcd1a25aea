"""--nccl-flows on every real NCCL of the runtime matrix (2.21-2.32 from NVIDIA's
wheels, tools/fetch-runtimes.sh; lib/runtimes.py fetches them or skips): what
ncclprobe reads from each library against what the library says, read by
other tools than ncclprobe.

- The flow layout, as np_flow_layout_load finds it (BUILD/flow_layout_check
  prints it): every field's offset and size against gdb's (lib/nccl_dwarf.py),
  the probe symbols against nm and readelf's segments, the pattern names
  against gdb's ncclPattern_t. What a library lacks must be named in
  `missing` (docs/nccl.md, "Flows").
- SaveProxy's IPA-SRA clone: where each argument is on entry, from gdb's
  `info scope` for the parameters its DWARF names and from its callers'
  machine code (lib/callsites.py) for the two pieces IPA-SRA splits `channel`
  into, both against where bpf/nccl_flows.bpf.c reads them (BPF_READS); and
  ncclprobe's own reading of the clone's DWARF against gdb's.
- The probes attach: `record --nccl-flows` of nccl_user --real-nccl (no GPU:
  no flow), summary.json's nccl_flows.libraries[] entry of the library.

Each version's verdict goes into docs/compatibility.md (runtimes.record_result)."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from lib import runtimes
from lib.callsites import call_sites
from lib.nccl_dwarf import dwarf_facts, entry_params, frame_base, has_section
from lib.paths import BUILD, PROGS
from lib.run import record
from lib.skip import needs_binary, needs_bpf, needs_tools

VERSIONS = runtimes.entries("nccl")
FLOW_LAYOUT_CHECK = BUILD / "flow_layout_check"

pytestmark = [needs_tools("gdb", "nm", "readelf"),
              needs_binary(FLOW_LAYOUT_CHECK, why="the flow layout printer")]

# What the flow layout reads: (struct, member path or "" for the struct's size, needed).
# Flows are refused without a needed one; the others are read when the library has them.
FIELDS = [
    ("ncclProxyOp", "opCount", True), ("ncclProxyOp", "nsteps", True),
    ("ncclProxyOp", "nbytes", True), ("ncclProxyOp", "chunkSize", True),
    ("ncclProxyOp", "sliceSteps", True), ("ncclProxyOp", "chunkSteps", True),
    ("ncclProxyOp", "channelId", True), ("ncclProxyOp", "pattern", True),
    ("ncclProxyOp", "protocol", True), ("ncclProxyOp", "algorithm", False),
    ("ncclProxyOp", "coll", False), ("ncclProxyOp", "root", True),
    ("ncclProxyOp", "nChannels", False),
    ("ncclChannel", "", True), ("ncclChannel", "peers", True),
    ("ncclChannel", "ring.prev", True), ("ncclChannel", "ring.next", True),
    ("ncclChannel", "ring.userRanks", True), ("ncclChannel", "tree.up", True),
    ("ncclChannel", "tree.down", True), ("ncclChannel", "nvls.out", False),
    ("ncclChannel", "collnetChain.up", False), ("ncclChannel", "collnetDirect.out", False),
    ("ncclChannel", "id", True),
    ("ncclChannelPeer", "send", True), ("ncclChannelPeer", "recv", True),
    ("ncclConnector", "", True), ("ncclConnector", "proxyConn.proxyProgress", True),
    ("ncclComm", "channels", True), ("ncclComm", "nChannels", True),
]
SAVE_OP = "_Z15ncclProxySaveOpP8ncclCommP11ncclProxyOpPb"
SAVE_PROXY = "_ZL9SaveProxyP8ncclCommP11ncclChanneliiP11ncclProxyOpiPb"
UPLOAD = "_ZL14uploadProxyOpsP8ncclCommP14ncclKernelPlan"  # optional: the flows' launch_id
LAUNCH = "_Z16ncclLaunchKernelP8ncclCommP14ncclKernelPlan"  # optional: topology at the 1st kernel
CLONE_SUFFIX = re.compile(r"^(\.(isra|constprop)\.\d+)+$")  # not .cold / .part pieces
# Where np_flow_save_proxy (bpf/nccl_flows.bpf.c, NP_FLOW_PROBE_SAVE_PROXY_ISRA) reads
# the clone's arguments on entry: [rsp+8] is CFA+0, [rsp+16] CFA+8. channel comes as
# &channel->peers in RSI (the channel itself: peers is at 0) and &channel->id in RDX.
BPF_READS = {"comm": "rdi", "type": "rcx", "peer": "r8", "op": "r9", "connIndex": "cfa+0",
             "justInquire": "cfa+8"}
ENODATA, ENOENT, EPROTO = 61, 2, 71


def field_name(struct, path):
    return f"{struct}.{path}" if path else struct


def pattern_name(enumerator):
    """"ncclPatternRingTwice" -> "RING_TWICE", as the flow files name patterns."""
    short = enumerator[len("ncclPattern"):] if enumerator.startswith("ncclPattern") else enumerator
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", short).upper()


def nm_symbols(lib):
    """{name: (value, size)} of lib's defined symbols (nm -S)."""
    out = subprocess.run(["nm", "-S", "--defined-only", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4:
            found.setdefault(parts[3], (int(parts[0], 16), int(parts[1], 16)))
    return found


def file_offset(lib, vaddr):
    """vaddr's offset in lib's file, from the LOAD segment that maps it (readelf -l)."""
    out = subprocess.run(["readelf", "-lW", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        p = line.split()
        if p and p[0] == "LOAD":
            offset, start, size = int(p[1], 16), int(p[2], 16), int(p[5], 16)
            if start <= vaddr < start + size:
                return vaddr - start + offset
    raise AssertionError(f"{lib}: no LOAD segment maps {vaddr:#x}")


class Lib:
    """One version's library: ncclprobe's flow layout, and gdb's, nm's and readelf's view."""

    def __init__(self, name, tmp):
        self.name = name
        self.lib = runtimes.library(name)
        out = subprocess.run([str(FLOW_LAYOUT_CHECK), str(self.lib)], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        self.layout = json.loads(out.stdout)
        self.debug_info = has_section(self.lib, ".debug_info")
        members = [[s, p] for s, p, _ in FIELDS if p]
        structs = sorted({s for s, p, _ in FIELDS if not p})
        self.gdb = dwarf_facts(self.lib, members, structs, ["ncclPattern_t"], tmp) \
            if self.debug_info else None
        self.syms = nm_symbols(self.lib)
        clones = [n for n in self.syms if n.startswith(SAVE_PROXY) and
                  (n == SAVE_PROXY or CLONE_SUFFIX.match(n[len(SAVE_PROXY):]))]
        assert len(clones) <= 1, clones
        self.save_proxy = clones[0] if clones else None

    def member(self, struct, path):
        """gdb's (offset, size, bit size, bit shift) of a field, None when absent."""
        if not path:
            size = self.gdb["sizes"][struct]
            return None if size is None else (0, size, 0, 0)
        m = self.gdb["members"][field_name(struct, path)]
        return None if m is None else (m.offset, m.size, m.bitsize, m.shift if m.bitsize else 0)

    def clone_args(self):
        """gdb's view of the SaveProxy clone's parameters on entry ({} for no clone)."""
        if not self.save_proxy or self.save_proxy == SAVE_PROXY or not self.debug_info:
            return {}
        return entry_params(self.lib, self.syms[self.save_proxy][0])

    def expected_missing(self):
        """What `missing` must name, from gdb's and nm's view of the library."""
        if not self.debug_info:
            return ["no debug info"]
        parts = [f"no {field_name(s, p)}" for s, p, needed in FIELDS
                 if needed and self.member(s, p) is None]
        parts += [f"no symbol {sym}" for sym, there in
                  ((SAVE_OP, SAVE_OP in self.syms), (SAVE_PROXY, self.save_proxy)) if not there]
        args = self.clone_args()
        parts += [f"SaveProxy clone's {a} in" for a, want in BPF_READS.items()
                  if args and args.get(a) != want]
        return parts


_libs = {}


@pytest.fixture
def lib(request, tmp_path_factory):
    """The version's Lib, read once for every test of it."""
    name = request.param
    runtimes.cache()
    if name not in _libs:
        _libs[name] = Lib(name, tmp_path_factory.mktemp(name))
    return _libs[name]


@pytest.mark.parametrize("lib", VERSIONS, indirect=True)
def test_flow_fields_are_where_gdb_says(lib):
    """Every field the flows read is at gdb's offset with gdb's size, or absent for both;
    a needed one that is absent is named in `missing` and refuses the flows."""
    got = lib.layout["fields"]
    assert set(got) == {field_name(s, p) for s, p, _ in FIELDS}
    if not lib.debug_info:
        assert lib.layout["status"] == -ENODATA and "no debug info" in lib.layout["missing"]
        return
    for struct, path, _ in FIELDS:
        want, mine = lib.member(struct, path), got[field_name(struct, path)]
        if want is None:
            assert mine is None, (struct, path, mine)
            continue
        assert mine is not None, (struct, path, want)
        assert (mine["offset"], mine["size"], mine["bit_size"], mine["bit_shift"]) == want, \
            (struct, path, mine, want)
    missing = lib.expected_missing()
    for part in missing:
        assert part in lib.layout["missing"], (part, lib.layout["missing"])
    if not missing:
        assert (lib.layout["status"], lib.layout["missing"]) == (0, "")
    else:
        assert lib.layout["status"] in (-ENOENT, -EPROTO), lib.layout


@pytest.mark.parametrize("lib", VERSIONS, indirect=True)
def test_probe_symbols_are_nm_s(lib):
    """ncclProxySaveOp, the SaveProxy clone and uploadProxyOps (when not inlined) at
    nm's addresses, at the file offsets readelf's LOAD segments give."""
    want = {SAVE_OP: SAVE_OP if SAVE_OP in lib.syms else None, SAVE_PROXY: lib.save_proxy,
            UPLOAD: UPLOAD if UPLOAD in lib.syms else None,
            LAUNCH: LAUNCH if LAUNCH in lib.syms else None}
    got = lib.layout["symbols"]
    assert set(got) == set(want)
    for sym, real in want.items():
        if real is None:
            assert got[sym] is None, sym
            continue
        vaddr = lib.syms[real][0]
        assert (got[sym]["vaddr"], got[sym]["file_offset"]) == \
               (vaddr, file_offset(lib.lib, vaddr)), real
    assert lib.layout["save_proxy_clone"] == (lib.save_proxy not in (None, SAVE_PROXY))


@pytest.mark.parametrize("lib", VERSIONS, indirect=True)
def test_pattern_names_are_the_library_s(lib):
    """ncclPattern_t as this library's DWARF (gdb) has it: 2.21 has 13 patterns, later
    ones add PAT and Profiler."""
    enum = lib.gdb and lib.gdb["enums"]["ncclPattern_t"]
    if not enum:
        assert not lib.layout["patterns_from_dwarf"]
        return
    names = {}
    for enumerator, value in enum:
        names.setdefault(value, pattern_name(enumerator))
    assert lib.layout["patterns_from_dwarf"]
    assert lib.layout["patterns"] == [names.get(v, "") for v in range(max(names) + 1)]


def channel_pieces(lib):
    """The call sites of the SaveProxy clone in ncclProxySaveOp whose code shows what RSI
    and RDX hold: [(rsi, rdx)] where RDX = RSI + k, as ("add", base, k) pairs."""
    start, size = lib.syms[SAVE_OP]
    sites = call_sites(lib.lib, start, size, lib.syms[lib.save_proxy][0])
    assert sites, f"{lib.name}: ncclProxySaveOp never calls {lib.save_proxy}"
    shown = [s for s in sites if s.regs["rdx"][0] == "add"]
    return sites, shown


@pytest.mark.parametrize("lib", VERSIONS, indirect=True)
def test_save_proxy_clone_arguments_are_where_bpf_reads_them(lib):
    """The clone's parameters on entry, by gdb's `info scope`, are where the BPF probe reads
    them, and ncclprobe's own reading of its DWARF says the same; `channel` has no location
    (split by IPA-SRA), and its callers pass &channel->peers (the channel) in RSI and
    &channel->id in RDX, connIndex as the last push ([rsp+8]), justInquire before it."""
    if lib.save_proxy in (None, SAVE_PROXY):
        pytest.skip(f"{lib.name}: SaveProxy is no clone (the psABI places its arguments)")
    args = lib.clone_args()
    mine = lib.layout["save_proxy_args"]
    for name in list(BPF_READS) + ["channel"]:
        assert mine[name] == args.get(name, "absent"), (name, mine, args)
    for name, where in BPF_READS.items():
        assert args[name] == where, (lib.name, name, args)
    assert args["channel"] == "none", args
    base = frame_base(lib.lib, lib.syms[lib.save_proxy][0])
    assert base in (None, "DW_OP_call_frame_cfa"), base  # fbreg is CFA-relative

    peers, ch_id = lib.member("ncclChannel", "peers"), lib.member("ncclChannel", "id")
    assert peers[0] == 0  # &channel->peers is the channel
    sites, shown = channel_pieces(lib)
    assert shown, f"{lib.name}: no call site shows what RDX holds"
    for s in shown:
        assert s.regs["rdx"] == ("add", s.regs["rsi"], ch_id[0]), (hex(s.addr), s.regs)
    for s in sites:
        assert len(s.pushed) >= 2, (hex(s.addr), s.pushed)
        assert s.pushed[-1] in (("const", 0), ("const", 1)), (hex(s.addr), s.pushed)  # connIndex
        assert s.pushed[-2][0] != "const", (hex(s.addr), s.pushed)  # justInquire


@needs_bpf
@pytest.mark.parametrize("lib", VERSIONS, indirect=True)
def test_flow_probes_attach(lib, tmp_path):
    """record --nccl-flows with the version's libnccl loaded (nccl_user --real-nccl):
    where its layout resolves, both flow probes attach to the clone, the pattern names come
    from its DWARF, and launch_id is there unless uploadProxyOps was inlined (2.23);
    otherwise the library is named with what is missing."""
    rec = record(tmp_path, ["--nccl-flows", "--", PROGS / "nccl_user", "--real-nccl", lib.lib,
                            "--iters", 1], timeout=120)
    assert rec.returncode == 0, rec.stderr
    [got] = [x for x in rec.summary["nccl_flows"]["libraries"]
             if Path(x["path"]).resolve() == lib.lib.resolve()]
    missing = lib.expected_missing()
    if missing:
        assert not got["probed"] and all(p in got["missing"] for p in missing), got
        runtimes.record_result(lib.name, "proxy flows", "degrades", got["missing"])
        return
    assert got["probed"] and "missing" not in got, got
    assert got["save_proxy_clone"] == (lib.save_proxy != SAVE_PROXY)
    assert got["patterns_from_dwarf"]
    inlined = UPLOAD not in lib.syms
    assert got["launch_ids"] == (not inlined), got
    assert got["topology_at_first_kernel"] == (LAUNCH in lib.syms), got
    if inlined:
        assert "no uploadProxyOps symbol" in got["launch_ids_missing"], got
    fields = sum(1 for v in lib.layout["fields"].values() if v)
    clone = lib.save_proxy[len(SAVE_PROXY):]
    runtimes.record_result(
        lib.name, "proxy flows", "degrades" if inlined else "works",
        f"probes attach (SaveProxy{clone}); {fields}/{len(FIELDS)} fields from DWARF" +
        ("; no launch_id: uploadProxyOps inlined" if inlined else ""))


# A library with every struct the flows read, and a SaveProxy clone that takes its
# arguments in other places than 2.28.9's: (op, comm, type, peer, channel, ...).
OTHER_CLONE = r"""
struct ncclConnector { struct { void *proxyProgress; } proxyConn; long pad; };
struct ncclChannelPeer { struct ncclConnector send[2], recv[2]; };
struct ncclChannel {
    struct ncclChannelPeer **peers;
    struct { int prev, next; int *userRanks; } ring;
    struct { int depth, up, down[3]; } tree;
    int id;
};
struct ncclProxyOp {
    unsigned long opCount; long nbytes; long chunkSize; int nsteps, root;
    unsigned char sliceSteps, chunkSteps, channelId, pattern, protocol;
};
struct ncclComm { struct ncclChannel channels[2]; int nChannels; };
typedef enum { ncclPatternRing, ncclPatternSend } ncclPattern_t;
ncclPattern_t pattern_kept;

__attribute__((noipa)) int clone(struct ncclProxyOp *op, struct ncclComm *comm, int type,
                                 int peer, struct ncclChannel *channel, int connIndex,
                                 _Bool *justInquire)
    __asm__("_ZL9SaveProxyP8ncclCommP11ncclChanneliiP11ncclProxyOpiPb.isra.0");
__attribute__((noipa)) int clone(struct ncclProxyOp *op, struct ncclComm *comm, int type,
                                 int peer, struct ncclChannel *channel, int connIndex,
                                 _Bool *justInquire) {
    return op->nsteps + comm->nChannels + type + peer + channel->id + connIndex + !justInquire;
}
__attribute__((noipa)) int save_op(struct ncclComm *comm, struct ncclProxyOp *op, _Bool *j)
    __asm__("_Z15ncclProxySaveOpP8ncclCommP11ncclProxyOpPb");
__attribute__((noipa)) int save_op(struct ncclComm *comm, struct ncclProxyOp *op, _Bool *j) {
    return clone(op, comm, 1, 2, &comm->channels[0], 0, j);
}
"""


@needs_tools("cc")
def test_a_clone_with_other_arguments_is_refused(tmp_path):
    """Every field is there, but the SaveProxy clone's DWARF puts its arguments elsewhere
    than where the probe reads them: the layout refuses the flows (-EPROTO) and `missing`
    says which argument is where, rather than the probe reading wrong registers."""
    src, lib = tmp_path / "other_clone.c", tmp_path / "libnccl.so.2"
    src.write_text(OTHER_CLONE)
    subprocess.run(["cc", "-O1", "-g", "-fPIC", "-shared", "-o", str(lib), str(src)],
                   check=True)
    out = subprocess.run([str(FLOW_LAYOUT_CHECK), str(lib)], capture_output=True, text=True,
                         check=True)
    layout = json.loads(out.stdout)
    args = entry_params(lib, nm_symbols(lib)[SAVE_PROXY + ".isra.0"][0])
    assert (args["op"], args["comm"], args["channel"]) == ("rdi", "rsi", "r8"), args
    assert layout["save_proxy_args"]["op"] == "rdi" and layout["save_proxy_clone"]
    assert layout["status"] == -EPROTO, layout
    assert "SaveProxy clone's comm in rsi, not rdi" in layout["missing"], layout["missing"]
    assert "SaveProxy clone's op in rdi, not r9" in layout["missing"]
    assert "SaveProxy clone's channel in r8, not split into rsi and rdx" in layout["missing"]
    assert "no ncclProxyOp" not in layout["missing"]  # only the clone is wrong
