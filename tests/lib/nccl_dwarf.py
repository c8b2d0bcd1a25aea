"""gdb as the oracle for a libnccl's DWARF: where struct members are, how big
structs are, which values the enums have, where a function's parameters are
at its entry (`info scope`), and where the local symbols are (nm).
Independent of ncclprobe's own readers (src/attach/dwarf_layout.c,
dwarf_params.c): gdb reads the DWARF with its own code, through its Python
API and its commands."""

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

import pytest

from lib.gdb import GDB

# Runs inside gdb's Python: the request is a JSON file, the answer one JSON line.
_GDB_SIDE = r'''
import gdb, json

def _find(t, name):
    """(field, bit offset of its container) of member `name`, looking into anonymous members."""
    for f in t.fields():
        if f.name == name:
            return f, 0
        if not f.name and f.type.strip_typedefs().code in (gdb.TYPE_CODE_STRUCT,
                                                          gdb.TYPE_CODE_UNION):
            hit = _find(f.type.strip_typedefs(), name)
            if hit:
                return hit[0], f.bitpos + hit[1]
    return None

def _member(struct, path):
    try:
        t = gdb.lookup_type("struct " + struct)
    except gdb.error:
        return None
    bit = 0
    for part in path.split("."):
        hit = _find(t.strip_typedefs(), part)
        if not hit:
            return None
        f, base = hit
        bit += base + f.bitpos
        t = f.type
    return {"bitpos": bit, "bitsize": f.bitsize, "size": f.type.strip_typedefs().sizeof}

def _enum(name):
    try:
        t = gdb.lookup_type(name).strip_typedefs()
    except gdb.error:
        return None
    return [[f.name, int(f.enumval)] for f in t.fields()]

def _size(struct):
    try:
        return gdb.lookup_type("struct " + struct).sizeof
    except gdb.error:
        return None

req = json.load(open(REQUEST))
out = {"members": {f"{s}.{p}": _member(s, p) for s, p in req["members"]},
       "sizes": {s: _size(s) for s in req["structs"]},
       "enums": {e: _enum(e) for e in req["enums"]}}
print("ORACLE " + json.dumps(out))
'''


@dataclass
class Member:
    """A struct member as gdb sees it: byte offset, and the bit position and
    width of a bit-field (bitsize 0 for an ordinary member)."""
    bitpos: int
    bitsize: int
    size: int

    @property
    def offset(self):
        """The byte that holds the member's lowest bit."""
        return self.bitpos // 8

    @property
    def shift(self):
        return self.bitpos % 8


def dwarf_facts(lib, members, structs, enums, tmp_path, timeout=120):
    """gdb's answers for libnccl `lib`: {"members": {"T.path": Member|None},
    "sizes": {T: bytes|None}, "enums": {name: [(enumerator, value)]|None}}."""
    request = tmp_path / "gdb-request.json"
    request.write_text(json.dumps({"members": members, "structs": structs, "enums": enums}))
    script = tmp_path / "gdb-oracle.py"
    script.write_text(f"REQUEST = {str(request)!r}\n" + _GDB_SIDE)
    proc = subprocess.run([GDB, "-batch", "-nx", "-iex", "set auto-load off",
                           "-ex", f"source {script}", str(lib)],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "DEBUGINFOD_URLS": ""}, stdin=subprocess.DEVNULL)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("ORACLE ")), None)
    if not line and "Python scripting is not supported" in proc.stderr:
        pytest.skip("this gdb has no Python")
    assert line, f"gdb gave no answer for {lib}:\n{proc.stdout}\n{proc.stderr}"
    raw = json.loads(line[len("ORACLE "):])
    return {"members": {k: Member(**v) if v else None for k, v in raw["members"].items()},
            "sizes": raw["sizes"],
            "enums": {k: [tuple(x) for x in v] if v else None for k, v in raw["enums"].items()}}


def local_symbols(lib, names):
    """{name: st_value} of the .symtab symbols `names` (nm; absent names left out)."""
    out = subprocess.run(["nm", "--defined-only", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    want, found = set(names), {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] in want:
            found.setdefault(parts[2], int(parts[0], 16))
    return found


def has_section(lib, name):
    """True when the ELF file has a section `name` (readelf)."""
    out = subprocess.run(["readelf", "-SW", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    return any(f" {name} " in line for line in out.splitlines())


# 'Symbol comm is multi-location:' / 'Symbol peer is a variable in $r8, length 4.'
_SCOPE_SYMBOL = re.compile(r"^Symbol (\S+) is (.*)$")
_SCOPE_RANGE = re.compile(r"Range 0x([0-9a-f]+)-0x([0-9a-f]+): (.*?)(?=(?:Base address|Range 0x)|\Z)",
                          re.S)


def _where(text):
    """gdb's description of one location as "rdi", "cfa+8" (DW_OP_fbreg 8) or "other"."""
    reg = re.match(r"\s*a variable in \$(\w+)", text)
    if reg:
        return reg.group(1)
    ops = re.findall(r"\d+: (DW_OP_\w+)(?: (-?\d+))?", text)
    if len(ops) == 1 and ops[0][0] == "DW_OP_fbreg":
        return f"cfa{int(ops[0][1]):+d}"
    return "other"


def _where_at(addr, head, body):
    if "optimized out" in head:
        return "none"
    if "multi-location" not in head:
        return _where(head + "\n" + body)
    for lo, hi, text in _SCOPE_RANGE.findall(body):
        if int(lo, 16) <= addr < int(hi, 16):
            return _where(text)
    return "none"  # no location at the entry


def entry_params(lib, addr, timeout=120):
    """{name: where} of what gdb's `info scope *ADDR` lists at addr, a function's entry:
    "rdi" (a register), "cfa+8" (DW_OP_fbreg 8, relative to the frame base: GCC's is the
    CFA, see frame_base), "none" (optimized out, or no location at the entry) or "other".
    The first symbol of a name wins (the function's own parameters come first)."""
    proc = subprocess.run([GDB, "-batch", "-nx", "-iex", "set auto-load off",
                           "-ex", f"info scope *{addr:#x}", str(lib)],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "DEBUGINFOD_URLS": ""}, stdin=subprocess.DEVNULL)
    assert proc.stdout.startswith("Scope for"), f"gdb info scope {lib}:\n{proc.stderr}"
    found, name, head, body = {}, None, "", []

    def flush():
        if name and name not in found:
            found[name] = _where_at(addr, head, "\n".join(body))

    for line in proc.stdout.splitlines()[1:]:
        m = _SCOPE_SYMBOL.match(line)
        if m:
            flush()
            name, head, body = m.group(1), m.group(2), []
        else:
            body.append(line)
    flush()
    return found


def frame_base(lib, addr):
    """The DW_AT_frame_base of the subprogram at addr as llvm-dwarfdump prints it
    ("DW_OP_call_frame_cfa"); None when llvm-dwarfdump is not installed."""
    if not shutil.which("llvm-dwarfdump"):
        return None
    out = subprocess.run(["llvm-dwarfdump", f"--lookup={addr:#x}", str(lib)],
                         capture_output=True, text=True, check=True).stdout
    sub = out[out.rfind("DW_TAG_subprogram"):]
    m = re.search(r"DW_AT_frame_base\s+\((.*?)\)", sub)
    return m.group(1) if m else ""
