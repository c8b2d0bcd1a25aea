"""Stack unwinding without frame pointers (`record --unwind fp|dwarf|auto`,
`--stack-bytes N`), checked against an independent oracle: gdb's backtrace of
the same program stopped at the same launch.

Workloads (tests/progs/README.md): unwind_chain (an executable and two shared
libraries, only the middle one with frame pointers, C++ templates at the
leaf end), deep_recursion_nofp (300 frames without frame pointers) and Debian's
/usr/bin/python3.11 (libpython linked into a stripped executable without frame
pointers) running tests/progs/unwind_py.py.

Expected stacks come from gdb and from the workloads' source - never from
ncclprobe. The only normalisation is notation: gdb's `??` frame (no symbol)
is ncclprobe's `[module+0xOFFSET]`, and a trailing parameter list is dropped."""

import difflib
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from lib.gdb import GDB, run_gdb_backtrace
from lib.paths import PROGS, PROGS_ENV, REPO
from lib.processes import thread_lines
from lib.run import record
from lib.skip import needs_bpf, needs_real_cudart, needs_tools

pytestmark = [needs_bpf, needs_real_cudart]

PYTHON311 = Path("/usr/bin/python3.11")
PY_SCRIPT = REPO / "tests" / "progs" / "unwind_py.py"
UNWIND_CHAIN = PROGS / "unwind_chain"
DEEP_NOFP = PROGS / "deep_recursion_nofp"

needs_gdb = needs_tools("gdb")  # the oracle
needs_python311 = pytest.mark.skipif(
    not PYTHON311.exists(), reason="/usr/bin/python3.11 (Debian's static libpython build) missing")

# The C library's start-up frames above main (or above the first frame of a program whose
# main tail-jumps away, like python3.11's): gdb stops at main, ncclprobe does not.
LIBC_START = re.compile(r"^(_start|__libc_start_call_main|__libc_start_main\S*"
                        r"|\[libc\.so\.6\+0x[0-9a-f]+\])$")
UNNAMED = re.compile(r"^\[(?P<module>.+)\+0x(?P<offset>[0-9a-f]+)\]$")

def gdb_expected(frames):
    """gdb's frames from #0 up to and including main; without a main frame (a main that
    tail-jumps away), up to the C library's start-up frames."""
    names = [f.name for f in frames]
    if "main" in names:
        return frames[:names.index("main") + 1]
    while frames and frames[-1].name is not None and LIBC_START.match(frames[-1].name):
        frames = frames[:-1]
    return frames


def native_leaf_first(frames, kernel_prefix="[GPU_Kernel]"):
    """An ncclprobe stack (root first) -> its native frames leaf first, without the kernel leaf
    and without the C library's start-up frames above main (which must be nothing else)."""
    assert frames[-1].startswith(kernel_prefix), frames
    native = frames[:-1]
    if "main" in native:
        cut = native.index("main")
        above = native[:cut]
        native = native[cut:]
    else:
        cut = 0
        while cut < len(native) and LIBC_START.match(native[cut]):
            cut += 1
        above = native[:cut]
        native = native[cut:]
    assert all(LIBC_START.match(f) for f in above), f"unexpected frames above main: {above}"
    return list(reversed(native))


def frame_matches(got, want):
    if want.name is not None:
        return got == want.name
    m = UNNAMED.match(got)
    if not m or want.offset is None or m.group("module") not in want.modules:
        return False
    # gdb prints the return address; ncclprobe's offset may be of the address or of address-1
    return int(m.group("offset"), 16) in (want.offset, want.offset - 1)


def compare_stacks(got_leaf_first, want_frames):
    """Returns None when they agree frame by frame, else a readable diff."""
    if len(got_leaf_first) == len(want_frames) and all(
            frame_matches(g, w) for g, w in zip(got_leaf_first, want_frames)):
        return None
    want_text = [str(w) for w in want_frames]
    diff = "\n".join(difflib.unified_diff(want_text, got_leaf_first, "gdb (leaf first)",
                                          "ncclprobe (leaf first)", lineterm=""))
    side = "\n".join(f"  #{i:<3} {str(w) if w else '-':<60} {g or '-'}"
                     for i, (w, g) in enumerate(
                         zip(want_frames + [None] * len(got_leaf_first),
                             got_leaf_first + [None] * len(want_frames)))
                     if w is not None or g is not None)
    return f"stacks differ\n{diff}\n\nside by side (gdb | ncclprobe):\n{side}"


def ext_stacks(rec):
    return [row[5] for row in rec.ext_lines()]


# ---------------------------------------------------------------- unwind_chain vs gdb

@pytest.fixture(scope="module")
def chain_oracle():
    if GDB is None:
        pytest.skip("gdb is not installed: no oracle backtrace")
    frames, output = run_gdb_backtrace([UNWIND_CHAIN, "--iters", "1"])
    return gdb_expected(frames)


@needs_gdb
def test_gdb_oracle_sees_the_whole_unwind_chain(chain_oracle):
    """The oracle itself: gdb sees exactly the chain the source defines."""
    assert [f.name for f in chain_oracle] == [
        "cudaLaunchKernel", "ns::launch_impl<float>", "ns::Launcher<float>::go",
        "launcher_entry", "mid_forward", "mid_dispatch", "app_step", "app_run", "main"]


@needs_gdb
@pytest.mark.parametrize("mode", ["auto", "dwarf"])
def test_unwind_chain_matches_gdb(tmp_path, chain_oracle, mode):
    args = [] if mode == "auto" else ["--unwind", mode]
    rec = record(tmp_path, [*args, "--", UNWIND_CHAIN, "--iters", "3"])
    assert rec.returncode == 0, rec.stderr
    assert sum(thread_lines(rec.stdout).values()) == 3
    stacks = ext_stacks(rec)
    assert len(stacks) == 3, stacks
    for frames in stacks:
        assert frames[-1] == "[GPU_Kernel]unwind_kernel", frames
        assert "[unknown]" not in frames and "[truncated]" not in frames, frames
        problem = compare_stacks(native_leaf_first(frames), chain_oracle)
        assert problem is None, f"--unwind {mode}: {problem}\nfull stack: {';'.join(frames)}"


@needs_gdb
def test_unwind_chain_frame_pointer_walk_is_incomplete(tmp_path, chain_oracle):
    """Shows the oracle comparison can fail: the frame-pointer walk cannot get through the
    code built without frame pointers, so frames of the gdb backtrace are missing."""
    rec = record(tmp_path, ["--unwind", "fp", "--", UNWIND_CHAIN, "--iters", "3"])
    assert rec.returncode == 0, rec.stderr
    stacks = ext_stacks(rec)
    assert len(stacks) == 3, stacks
    want = {f.name for f in chain_oracle}
    for frames in stacks:
        assert frames[-2:] == ["cudaLaunchKernel", "[GPU_Kernel]unwind_kernel"], frames
        native = frames[:-1]
        leaf_first = list(reversed(native[native.index("main"):] if "main" in native else native))
        assert compare_stacks(leaf_first, chain_oracle) is not None, frames
        assert want - set(native), f"fp walk found every frame: {frames}"


@needs_gdb
def test_unwind_chain_worker_thread_matches_gdb(tmp_path):
    """A thread's stack: from the thread's start in libc to the launch, as gdb sees it."""
    frames, output = run_gdb_backtrace([UNWIND_CHAIN, "--threads", "1", "--iters", "1"])
    names = [f.name for f in frames]
    assert "worker_thread" in names, output
    rec = record(tmp_path, ["--", UNWIND_CHAIN, "--threads", "2", "--iters", "2"])
    assert rec.returncode == 0, rec.stderr
    stacks = ext_stacks(rec)
    assert len(stacks) == 4 == sum(thread_lines(rec.stdout).values())
    for stack in stacks:
        assert stack[-1] == "[GPU_Kernel]unwind_kernel"
        assert "[unknown]" not in stack and "[truncated]" not in stack, stack
        leaf_first = list(reversed(stack[:-1]))
        # exact down to the thread function; the libc frames above it (start_thread, clone3)
        # only by count, their names depend on libc's symbols
        cut = names.index("worker_thread") + 1
        problem = compare_stacks(leaf_first[:cut], frames[:cut])
        assert problem is None, f"{problem}\nfull stack: {';'.join(stack)}"
        assert len(leaf_first) == len(frames), (
            f"gdb: {[str(f) for f in frames]}\nncclprobe: {leaf_first}")


# ---------------------------------------------------------------- deep recursion

RECURSE_FRAME_BYTES = 48  # deep_recursion_nofp's recurse: sub $0x28,%rsp + return address


@needs_tools("objdump")
def test_deep_recursion_is_built_without_frame_pointers():
    """The premise of the deep tests: recurse does not maintain %rbp (x86-64 disassembly)."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", DEEP_NOFP], capture_output=True,
                         text=True, check=True).stdout
    body = out.split("<recurse>:", 1)[1].split("\n\n", 1)[0]
    assert "%rbp" not in body, body


@pytest.mark.parametrize("mode", ["auto", "dwarf"])
def test_deep_recursion_small_stack_copy_is_truncated_not_wrong(tmp_path, mode):
    args = [] if mode == "auto" else ["--unwind", mode]
    rec = record(tmp_path, [*args, "--stack-bytes", "4096", "--", DEEP_NOFP])
    assert rec.returncode == 0, rec.stderr
    stacks = ext_stacks(rec)
    assert len(stacks) == 1 == sum(thread_lines(rec.stdout).values())
    frames = stacks[0]
    assert frames[0] == "[truncated]", frames
    assert frames[-2:] == ["cudaLaunchKernel", "[GPU_Kernel]deep_kernel"], frames
    middle = frames[1:-2]
    assert set(middle) == {"recurse"}, frames
    # 4096 bytes hold at most 4096 / 48 recurse frames; a sound unwinder uses most of them
    assert 4096 * 3 // 4 // RECURSE_FRAME_BYTES <= len(middle) <= 4096 // RECURSE_FRAME_BYTES + 1, \
        len(middle)


@pytest.mark.parametrize("mode", ["auto", "dwarf"])
def test_deep_recursion_large_stack_copy_is_complete(tmp_path, mode):
    """300 frames x 48 bytes fit in 64 KiB: the whole stack, main to the launch."""
    args = [] if mode == "auto" else ["--unwind", mode]
    rec = record(tmp_path, [*args, "--stack-bytes", "65536", "--", DEEP_NOFP])
    assert rec.returncode == 0, rec.stderr
    stacks = ext_stacks(rec)
    assert len(stacks) == 1, stacks
    frames = stacks[0]
    assert "[truncated]" not in frames and "[unknown]" not in frames, frames
    leaf_first = native_leaf_first(frames)
    assert leaf_first == ["cudaLaunchKernel"] + ["recurse"] * 300 + ["run_plan", "main"], (
        len(leaf_first), frames[:5], frames[-5:])
    assert frames[-1] == "[GPU_Kernel]deep_kernel"


@pytest.mark.parametrize("where", ["main", "thread"])
def test_stack_copy_follows_the_depth_of_each_launch(tmp_path, where):
    """Once a thread has launched, BPF copies from sp only to just above its
    outermost frame (stack_hints): one call site launching alternately 5 and
    250 recurse frames deep gets every stack whole - the copy grows and
    shrinks with the stack. On a worker thread (whose stack top holds
    kilobytes of TLS no unwinding reads) nearly every copy is cut that way:
    the thread's first launch wakes the reader, which learns the hint from
    it, so the launches before the next poll (100 ms, ~30 here) do not copy
    in full. With --fixed-stack-copy none is cut."""
    depths, repeat = [5, 250, 5, 250], 15
    args = ["--depths", ",".join(map(str, depths)), "--repeat", str(repeat),
            "--sleep-us", "3000"] + (["--thread"] if where == "thread" else [])
    for fixed in (False, True):
        extra = ["--fixed-stack-copy"] if fixed else []
        rec = record(tmp_path, [*extra, "--", DEEP_NOFP, *args], name=f"rec{int(fixed)}")
        assert rec.returncode == 0, rec.stderr
        stacks = ext_stacks(rec)
        assert len(stacks) == len(depths) * repeat
        for frames in stacks:
            assert "[truncated]" not in frames and "[unknown]" not in frames, frames
        got = Counter(native_leaf_first(f).count("recurse") for f in stacks)
        assert got == {5: 2 * repeat, 250: 2 * repeat}
        unwind = rec.summary["unwind"]
        assert unwind["complete"] == len(stacks) and unwind["stack_copies_short"] == 0
        if fixed:
            assert unwind["stack_copies_hinted"] == 0
        elif where == "thread":
            assert unwind["stack_copies_hinted"] >= len(stacks) * 3 // 4, unwind


# ---------------------------------------------------------------- python3.11 vs gdb

@pytest.fixture(scope="module")
def python_oracle():
    if GDB is None or not PYTHON311.exists():
        pytest.skip("needs gdb and /usr/bin/python3.11")
    frames, output = run_gdb_backtrace([PYTHON311, PY_SCRIPT, "1"],
                                       env={"CUDART_PATH": PROGS_ENV["CUDART_PATH"]})
    return gdb_expected(frames), output


@needs_gdb
@needs_python311
def test_gdb_oracle_sees_the_python_interpreter(python_oracle):
    """The oracle itself: from the interpreter's entry down through ctypes and libffi."""
    frames, output = python_oracle
    names = [f.name for f in frames]
    assert names[0] == "cudaLaunchKernel"
    for expected in ("ffi_call", "_PyEval_EvalFrameDefault", "PyEval_EvalCode", "Py_RunMain",
                     "Py_BytesMain"):
        assert expected in names, output
    assert names[-1] == "Py_BytesMain", output  # python3.11's main is `jmp Py_BytesMain`


@needs_gdb
@needs_python311
@pytest.mark.parametrize("mode", ["auto", "dwarf"])
def test_python311_native_stack_matches_gdb(tmp_path, python_oracle, mode):
    want, _ = python_oracle
    # the native stack as gdb sees it: Python frames (tested in test_python_frames.py) off
    args = ["--python", "off"] + ([] if mode == "auto" else ["--unwind", mode])
    rec = record(tmp_path, [*args, "--", PYTHON311, PY_SCRIPT, "3"],
                 env={"CUDART_PATH": PROGS_ENV["CUDART_PATH"]})
    assert rec.returncode == 0, rec.stderr
    assert sum(thread_lines(rec.stdout).values()) == 3, rec.stdout
    stacks = ext_stacks(rec)
    assert len(stacks) == 3, (stacks, rec.stderr)
    for frames in stacks:
        assert "[unknown]" not in frames and "[truncated]" not in frames, ";".join(frames)
        problem = compare_stacks(native_leaf_first(frames), want)
        assert problem is None, f"--unwind {mode}: {problem}\nfull stack: {';'.join(frames)}"
