"""Symbolization quality: inlined frames (gdb as the oracle), separate debug
files found by build-id, symbol versions stripped. The programs are compiled
here, against the toolkit's real libcudart."""

import re
import subprocess
from pathlib import Path

from lib.gdb import run_gdb_backtrace
from lib.paths import PROGS_ENV
from lib.run import record
from lib.skip import needs_bpf, needs_real_cudart, needs_tools

pytestmark = [needs_bpf, needs_real_cudart]

CUDART_DIR = str(Path(PROGS_ENV.get("CUDART_PATH", "/usr/local/cuda/lib64/x")).parent)
# The programs stay alive 100 ms after their last launch: these tests are
# about symbolization, not about processes that exit within a millisecond of
# starting (whose launches are kept with raw addresses, see the design notes).
PROLOGUE = """
#include <stddef.h>
#include <unistd.h>
typedef struct { unsigned x, y, z; } dim3;
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **a, size_t sh, void *st);
"""

INLINE_PROGRAM = PROLOGUE + """
__attribute__((noinline)) void kernel_stub(void) { __asm__ volatile(""); }
static inline __attribute__((always_inline)) void launch_inner(int i) {
    dim3 g = {1, 1, 1};
    cudaLaunchKernel((void *)kernel_stub, g, g, NULL, (size_t)i, NULL);
}
static inline __attribute__((always_inline)) void launch_outer(int i) {
    launch_inner(i);
    __asm__ volatile("");
}
__attribute__((noinline)) void step(int i) {
    launch_outer(i);
    __asm__ volatile("");
}
int main(void) {
    for (int i = 0; i < 3; i++)
        step(i);
    usleep(100000);
    return 0;
}
"""


def compile_c(tmp_path, name, source, *flags):
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    out = tmp_path / name
    subprocess.run(["gcc", "-O2", "-g", *flags, "-o", out, src, f"-L{CUDART_DIR}", "-lcudart",
                    f"-Wl,-rpath,{CUDART_DIR}"], check=True)
    return out


@needs_tools("gdb")
def test_inlined_frames_match_gdb_in_detailed_stacks_and_folded_only_with_inline(tmp_path):
    program = compile_c(tmp_path, "inl", INLINE_PROGRAM)
    frames, _ = run_gdb_backtrace([program])
    expected = [f.name for f in frames]  # leaf first, to main
    assert expected == ["cudaLaunchKernel", "launch_inner", "launch_outer", "step", "main"]

    with_inline = record(tmp_path, ["--inline", "--", program], name="inline")
    assert with_inline.returncode == 0, with_inline.stderr
    for *_, frames in with_inline.ext_lines():
        native = frames[frames.index("main"):-1]
        names = [f.removesuffix(" [inlined]") for f in native]
        assert names[::-1] == expected
        assert native[-3:-1] == ["launch_outer [inlined]", "launch_inner [inlined]"]

    default = record(tmp_path, ["--", program], name="default")
    assert default.returncode == 0, default.stderr
    for *_, frames in default.ext_lines():  # folded outputs: no inlined frames by default
        assert frames[frames.index("main"):-1] == ["main", "step", "cudaLaunchKernel"]
    stacks = default.stacks()  # the detailed stacks always have them, marked
    for launch in default.jsonl("launches.jsonl"):
        frames = stacks[launch["stack_id"]]
        assert frames[frames.index("main"):] == [
            "main", "step", "launch_outer [inlined]", "launch_inner [inlined]",
            "cudaLaunchKernel"]


@needs_tools("objcopy")
def test_stripped_library_symbols_come_from_its_separate_debug_file(tmp_path):
    lib_src = PROLOGUE + """
__attribute__((noinline)) void stripped_kernel(void) { __asm__ volatile(""); }
__attribute__((noinline, visibility("hidden"))) void hidden_helper(int i) {
    dim3 g = {1, 1, 1};
    cudaLaunchKernel((void *)stripped_kernel, g, g, NULL, (size_t)i, NULL);
    __asm__ volatile("");
}
void lib_entry(int i) { hidden_helper(i); __asm__ volatile(""); }
"""
    (tmp_path / "lib.c").write_text(lib_src)
    lib = tmp_path / "libstrip.so"
    subprocess.run(["gcc", "-O2", "-g", "-fPIC", "-shared", "-o", lib, tmp_path / "lib.c",
                    f"-L{CUDART_DIR}", "-lcudart", f"-Wl,-rpath,{CUDART_DIR}"], check=True)
    (tmp_path / "main.c").write_text(
        "#include <unistd.h>\nvoid lib_entry(int);\n"
        "int main(void) { for (int i = 0; i < 2; i++) lib_entry(i); usleep(100000); }\n")
    program = tmp_path / "main"
    subprocess.run(["gcc", "-O2", "-o", program, tmp_path / "main.c", f"-L{tmp_path}",
                    "-lstrip", f"-Wl,-rpath,{tmp_path}"], check=True)
    notes = subprocess.run(["readelf", "-n", lib], capture_output=True, text=True).stdout
    build_id = re.search(r"Build ID: ([0-9a-f]+)", notes).group(1)
    debug_dir = tmp_path / "debug" / ".build-id" / build_id[:2]
    debug_dir.mkdir(parents=True)
    subprocess.run(["objcopy", "--only-keep-debug", lib, debug_dir / f"{build_id[2:]}.debug"],
                   check=True)
    subprocess.run(["strip", "--strip-all", lib], check=True)

    bare = record(tmp_path, ["--", program], name="bare")
    assert bare.returncode == 0, bare.stderr
    rows = bare.ext_lines()
    assert len(rows) == 2
    for *_, frames in rows:
        # the hidden function has no symbol left in the stripped file
        assert frames[-5:-3] == ["main", "lib_entry"]
        assert re.fullmatch(r"\[libstrip\.so\+0x[0-9a-f]+\]", frames[-3])

    found = record(tmp_path, ["--debuginfo-path", tmp_path / "debug", "--", program],
                   name="found")
    assert found.returncode == 0, found.stderr
    for *_, frames in found.ext_lines():
        assert frames[-5:] == ["main", "lib_entry", "hidden_helper", "cudaLaunchKernel",
                               "[GPU_Kernel]stripped_kernel"]
        assert not any("@" in f for f in frames)  # "__libc_start_main@@GLIBC_2.34" is unversioned
