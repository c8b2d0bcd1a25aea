"""gdb as an oracle: the backtrace of a program stopped at its first
cudaLaunchKernel, frame by frame, to compare ncclprobe's stacks with."""

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lib.processes import running_tracers

GDB = shutil.which("gdb")

# '#3  0x00007f... in ns::Launcher<float>::go (this=0x7ffe...) at x.cc:12'
# '#5  app_step (iter=0) at x.c:9'
# '#6  0x0000000000517fc3 in _PyObject_MakeTpCall ()'
# '#1  0x00007f... in ?? () from /lib/x86_64-linux-gnu/libffi.so.8'
GDB_FRAME = re.compile(r"^#(?P<level>\d+)\s+(?:0x(?P<pc>[0-9a-f]+) in )?(?P<name>.+?) "
                       r"\((?P<args>.*)\)(?: at (?P<src>\S+)| from (?P<lib>\S+))?\s*$")
# '      0x555555554000     0x555555555000     0x1000        0x0  r--p   /path/to/file'
GDB_MAPPING = re.compile(r"^\s*0x(?P<start>[0-9a-f]+)\s+0x[0-9a-f]+\s+0x[0-9a-f]+\s+0x[0-9a-f]+"
                         r"(?:\s+[rwxps-]{4})?\s+(?P<path>/\S.*?)\s*$")


@dataclass
class GdbFrame:
    """One frame of gdb's backtrace."""
    name: str | None  # None for gdb's '??' (no symbol covers the pc)
    pc: int | None
    modules: tuple = ()  # unnamed frames: the file's acceptable names (as opened, as resolved)
    offset: int | None = None  # unnamed frames: pc - the file's lowest mapped address

    def __str__(self):
        if self.name is not None:
            return self.name
        off = f"0x{self.offset:x}" if self.offset is not None else "?"
        return f"[{self.modules[0] if self.modules else '?'}+{off}]  (gdb: ??)"


def strip_parameters(name):
    """'f(int, char const*) const' -> 'f': drops one trailing balanced parameter list
    (with cv/ref qualifiers) and nothing else."""
    base = re.sub(r"(\s*(const|volatile|&|&&))*$", "", name)
    if not base.endswith(")"):
        return name
    depth = 0
    for i in range(len(base) - 1, -1, -1):
        if base[i] == ")":
            depth += 1
        elif base[i] == "(":
            depth -= 1
            if depth == 0:
                return base[:i] if i > 0 else name
    return name


# gdb breakpoints that any uprobe on the same instruction cannot take: where a uprobe sits (any
# tracer's on this machine, say a daemon tracing every CUDA process), the kernel hands an int3
# trap to the uprobe and gdb never stops. A hardware breakpoint (a debug register) traps before
# the instruction runs, int3 or not. Each goes on the function itself (not a PLT stub of the
# same name) once a library defining it is loaded, linked or dlopen'd, while the process is
# stopped. BACKTRACE_AT: names to "backtrace and go on" at (else: stop at the first).
HBREAK_SCRIPT = """
import gdb

FUNCTIONS = %(functions)r
BACKTRACE_AT = %(backtrace)r


class Backtrace(gdb.Breakpoint):
    def stop(self):
        gdb.write(gdb.execute("bt", to_string=True))
        return False


def place(event):
    if gdb.selected_inferior().pid == 0:
        return
    for name in list(FUNCTIONS):
        try:
            addr = int(gdb.parse_and_eval("(long)&" + name))
        except gdb.error:
            continue
        if not gdb.execute("info symbol %%#x" %% addr, to_string=True).startswith(name + " "):
            continue  # a PLT stub of a library loaded before the one that defines it
        kind = Backtrace if BACKTRACE_AT else gdb.Breakpoint
        kind("*%%#x" %% addr, type=gdb.BP_HARDWARE_BREAKPOINT)
        FUNCTIONS.remove(name)
    if not FUNCTIONS:
        gdb.events.new_objfile.disconnect(place)


gdb.events.new_objfile.connect(place)
"""


def hbreak_script(directory, functions, backtrace=False):
    """A gdb Python script (written in directory) that puts hardware breakpoints on
    functions as their libraries load (see HBREAK_SCRIPT); returns its path."""
    path = Path(directory) / "hbreak.py"
    path.write_text(HBREAK_SCRIPT % {"functions": list(functions), "backtrace": backtrace})
    return path


def run_gdb_backtrace(argv, env=None, timeout=120, hardware=True):
    """Runs argv under gdb, stops at the first cudaLaunchKernel and returns its backtrace as
    GdbFrames, leaf (#0) first, plus gdb's whole output (for error messages). hardware=False:
    the breakpoint a user sets (`break cudaLaunchKernel`, an int3), not a hardware one."""
    with tempfile.TemporaryDirectory() as tmp:
        breaks = ["-x", hbreak_script(tmp, ["cudaLaunchKernel"])] if hardware else \
            ["-ex", "set breakpoint pending on", "-ex", "break cudaLaunchKernel"]
        cmd = [GDB, "-batch", "-nx", *breaks, "-ex", "run", "-ex", "bt",
               "-ex", "info proc mappings", "-ex", "kill", "--args", *map(str, argv)]
        full_env = {**os.environ, "DEBUGINFOD_URLS": "", **(env or {})}
        proc = run_until_stopped(cmd, full_env, timeout)
    return parse_backtrace(argv, proc)


def run_until_stopped(cmd, env, timeout):
    # Now and then, on a loaded machine, gdb misses the library load or the thread's stop and
    # never reports a stop in cudaLaunchKernel: that says nothing about the program, so try
    # again.
    for _ in range(5):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=env, stdin=subprocess.DEVNULL)
        if re.search(r"^#0\s+(?:0x[0-9a-f]+ in )?cudaLaunchKernel ", proc.stdout, re.M):
            break
    return proc


def parse_backtrace(argv, proc):
    """gdb's backtrace in proc's output as GdbFrames, and the whole output."""
    output = proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()

    bases = {}
    for line in lines:
        m = GDB_MAPPING.match(line)
        if m:
            path = os.path.realpath(m.group("path"))
            bases[path] = min(bases.get(path, 1 << 64), int(m.group("start"), 16))

    exe = shutil.which(str(argv[0])) or str(argv[0])
    frames = []
    for line in lines:
        m = GDB_FRAME.match(line)
        if not m:
            if frames:
                break  # the backtrace is one contiguous block starting at #0
            continue
        level = int(m.group("level"))
        if level != len(frames):
            assert level == 0 and not frames, f"unexpected gdb frame line {line!r}\n{output}"
            continue
        name = m.group("name")
        pc = int(m.group("pc"), 16) if m.group("pc") else None
        if name == "??":
            path = m.group("lib") or exe
            real = os.path.realpath(path)
            base = bases.get(real)
            offset = pc - base if pc is not None and base is not None else None
            names = tuple(dict.fromkeys([Path(path).name, Path(real).name]))
            frames.append(GdbFrame(None, pc, names, offset))
        else:
            frames.append(GdbFrame(strip_parameters(name), pc))
    assert frames and frames[0].name == "cudaLaunchKernel", \
        f"gdb did not stop in cudaLaunchKernel:\n{output}\nncclprobe processes running (a " \
        f"uprobe where gdb puts a breakpoint takes its stop): {running_tracers()}"
    assert "Backtrace stopped" not in output, f"gdb could not unwind:\n{output}"
    return frames, output
