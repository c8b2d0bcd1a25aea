"""CPython line tables (issue 4): the decoders that turn a Python frame's
instruction offset into a line (np_py_line_310 for the 3.10 PEP 626 table,
np_py_line_311 for the 3.11+ location table, in src/symbolize/pycode.c)
give the line each real interpreter gives. Every interpreter here compiles
a good part of its own standard library and some source made to be hard
(loops whose lines go backwards, line jumps of hundreds and hundreds of
thousands of lines, long lines of non-ASCII text, instructions with no line,
offsets past 16 bits), and reports, for offsets from co_lines(), the line
it says; build/pyline_check runs the C decoders on the same tables. No BPF,
no root: this runs anywhere the build is."""

import json
import subprocess

import pytest

from lib.paths import BUILD
from lib.processes import interpreters
from lib.skip import needs_binary

PYLINE_CHECK = BUILD / "pyline_check"
pytestmark = needs_binary(PYLINE_CHECK)

# Run by each interpreter: prints "FORMAT FIRSTLINENO HEXTABLE ADDR LINE" lines
# for pyline_check on stdout, and what it covered as JSON on stderr.
ORACLE = r'''
import json, os, sys, sysconfig, types

FMT = "310" if sys.version_info < (3, 11) else "311"
PACKAGES = ("", "asyncio", "collections", "concurrent/futures", "email", "http",
            "importlib", "json", "logging", "multiprocessing", "unittest", "urllib",
            "xml/etree")

# Source made to be hard for a line table; compiled, never run.
LONG_GAP = 300000
TRICKY = """
def loop(n):
    total = 0
    for i in range(n):
        if i % 3:
            total += i
        else:
            total -= 1
    while total > 0:
        total -= 7
    return total

def nowhere(path):
    try:
        with open(path) as fh:
            return fh.read()
    except OSError as e:
        return str(e)
    finally:
        path = None

async def agen(src):
    async with src as s:
        async for item in s:
            yield item

class Widget:
    @property
    def size(self):
        return [c for c in self.parts if c] or (lambda: super().size)()

def gro\u00dfer_name(\u00e4="\u00fcn\u00efc\u00f6d\u00e9"):
    return \u00e4 + "\u20ac" * 3  # \u2713
""" + "\ndef long_function(x):\n" + "".join(
    # thousands of statements, gaps of 200 lines (deltas past 127), a call
    # whose arguments lie 300 lines below it (the call's line goes back),
    # lines with columns past 255 in UTF-8 bytes
    "    x = x + %d\n" % k
    + ("\n" * 200 if k % 50 == 0 else "")
    + ("    y = f(\n" + "\n" * 300 + "        x, %d)\n" % k if k % 400 == 0 else "")
    + ("    s = len('" + "\u00fc" * 200 + "') + g(x, '\u00e9')\n" if k % 300 == 0 else "")
    for k in range(3000)
) + "    big = [" + "x, " * 70000 + "]\n" + "\n" * LONG_GAP + "    return x, big\n"
# (big: one line of code past 64 KiB; LONG_GAP: a line delta that takes
# four bytes of varint in the 3.11+ table, thousands of entries in 3.10's)


def code_objects(co):
    yield co
    for const in co.co_consts:
        if isinstance(const, types.CodeType):
            yield from code_objects(const)


MAX_RANGES = 1000  # ranges checked per code object: evenly spread over bigger ones
out = []
stats = {"files": 0, "codes": 0, "offsets": 0, "none": 0}
tricky = {"none": 0, "max_forward": 0, "max_back": 0, "max_addr": 0}


def emit(co, notes=None):
    # the table once per code object, "=" (the same again) after that
    table = co.co_linetable.hex() or "-"
    out.append("%s %d %s -2 %d" % (FMT, co.co_firstlineno, table, co.co_firstlineno))
    head = "%s %d = " % (FMT, co.co_firstlineno)
    ranges = list(co.co_lines())
    stats["codes"] += 1
    stats["offsets"] += 1
    step = max(1, len(ranges) // MAX_RANGES)
    for i, (start, end, line) in enumerate(ranges):
        if i % step and i != len(ranges) - 1:
            continue
        want = -1 if line is None else line
        for addr in sorted({start, start + 2, end - 2}):
            if start <= addr < end:
                out.append(head + "%d %d" % (addr, want))
                stats["offsets"] += 1
                stats["none"] += line is None
    if notes is not None:
        prev = None
        for start, end, line in ranges:
            notes["none"] += line is None
            notes["max_addr"] = max(notes["max_addr"], end)
            if line is not None and prev is not None:
                notes["max_forward"] = max(notes["max_forward"], line - prev)
                notes["max_back"] = min(notes["max_back"], line - prev)
            if line is not None:
                prev = line


stdlib = sysconfig.get_paths()["stdlib"]
for package in PACKAGES:
    folder = os.path.join(stdlib, package)
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py"):
            continue
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as f:
                top = compile(f.read(), path, "exec")
        except (SyntaxError, ValueError, UnicodeDecodeError):
            continue
        stats["files"] += 1
        for co in code_objects(top):
            emit(co)

for co in code_objects(compile(TRICKY, "tricky.py", "exec")):
    emit(co, tricky)

sys.stdout.write("\n".join(out) + "\n")
stats["tricky"] = tricky
stats["version"] = "%d.%d.%d" % sys.version_info[:3]
sys.stderr.write(json.dumps(stats) + "\n")
'''


@pytest.mark.parametrize("python", interpreters())
def test_line_tables_match_the_interpreter(python):
    oracle = subprocess.run([python, "-c", ORACLE], capture_output=True, timeout=60)
    assert oracle.returncode == 0, oracle.stderr.decode(errors="replace")
    stats = json.loads(oracle.stderr.decode().splitlines()[-1])
    check = subprocess.run([str(PYLINE_CHECK)], input=oracle.stdout, capture_output=True,
                           timeout=60)
    report = check.stdout.decode(errors="replace")
    assert check.returncode == 0, f"{stats['version']}:\n{report}{check.stderr.decode()}"
    assert f"checked {stats['offsets']} mismatches 0" in report, report
    # a good part of the standard library, and the hard cases really made
    assert stats["files"] > 100 and stats["offsets"] > 50000, stats
    tricky = stats["tricky"]
    assert tricky["none"] > 0, stats  # instructions with no line
    assert tricky["max_forward"] >= 300000 and tricky["max_back"] <= -300, stats
    assert tricky["max_addr"] > 1 << 16, stats


def test_checker_reports_a_wrong_line():
    """The checker itself: right on a hand-made 3.10 table (4 bytes of code on
    firstlineno+1, 4 on the line 2 below that, then 128 bytes with no line),
    failing on a wrong answer, refusing bad input."""
    lines = "".join(f"310 10 {table} {addr} {line}\n" for table, addr, line in [
        ("040104028080", -2, 10), ("=", 0, 11), ("=", 2, 11), ("=", 4, 13), ("=", 6, 13),
        ("=", 8, -1), ("=", 134, -1)])
    ok = subprocess.run([str(PYLINE_CHECK)], input=lines, capture_output=True, text=True)
    assert ok.returncode == 0 and "checked 7 mismatches 0" in ok.stdout, ok.stdout
    bad = subprocess.run([str(PYLINE_CHECK)], input="310 10 0401 0 12\n", capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "checked 1 mismatches 1" in bad.stdout, bad.stdout
    assert "MISMATCH format=310 firstlineno=10 table=0401 addr=0 expected=12 got=11" in bad.stdout
    for junk in ("312 10 0401 0 11\n", "310 10 040 0 11\n", "310 10 = 0 11\n", "310 x\n"):
        run = subprocess.run([str(PYLINE_CHECK)], input=junk, capture_output=True, text=True)
        assert run.returncode == 2, junk
