"""Every libcudart a real server runs (12.4 ... 13.5, NVIDIA's own wheels, and
the toolkit's 13.0): the launch, thunk and handle probes attach, and a C
program and a CPython program launching through that library come out as
they do on 13.0 - the same per-API counts, stacks and kernel names.

The C program is tests/progs' launcher (executable -> liblaunch_a.so ->
liblaunch_b.so -> libcudart, and the nvcc-compiled <<<>>> launch in
libkern.so), linked here against each version's libcudart by RPATH; the
CPython program is tests/progs/py_launch.py, given the library by path
(ctypes). Without a GPU every launch fails at once, after entering the real
library, which is all the probes need.

Expected values: the counts the workloads print, the call chains of their
source, the symbols each library exports (read from the ELF file here), and
the same run on CUDA 13.0 - never ncclprobe's own tables."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lib import runtimes
from lib.paths import BUILD, REPO
from lib.processes import thread_lines
from lib.run import record
from lib.skip import needs_bpf

CUDA_HOME = Path("/usr/local/cuda")
NVCC = CUDA_HOME / "bin" / "nvcc"
PROGS_SRC = REPO / "tests" / "progs"
BASELINE = "cudart-13.0"

pytestmark = [
    needs_bpf,
    pytest.mark.skipif(not (CUDA_HOME / "include" / "cuda_runtime_api.h").exists()
                       or not NVCC.exists(), reason="needs the CUDA toolkit (headers, nvcc)"),
]

# launcher variant -> (the API the program calls, the kernel it names, frames
# between libb_launch and that API) - from tests/progs/libb.c and kern.cu.
VARIANTS = {
    "rt": ("cudaLaunchKernel", "vector_add_kernel", []),
    "rt_ptsz": ("cudaLaunchKernel_ptsz", "vector_add_kernel", []),
    "rt_exc": ("cudaLaunchKernelExC", "vector_add_kernel", []),
    "rt_coop": ("cudaLaunchCooperativeKernel", "vector_add_kernel", []),
    "graph": ("cudaGraphLaunch", "<graph cudaGraphLaunch>", []),
    "rt13": ("__cudaLaunchKernel", "scale_kernel",
             ["kern_launch_scale", "__device_stub__Z12scale_kernelPfi"]),
}
THREADS, ITERS = 2, 5
# py_launch.py's chain above cudaLaunchKernel (its docstring).
PY_CHAIN = ["Model.forward", "Model.forward.<locals>.inner", "traced.<locals>.wrapper",
            "launch_one"]


def run(cmd, **kw):
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert res.returncode == 0, f"{cmd}: {res.stderr}"
    return res


def launcher(entry):
    """tests/progs' launcher built against the entry's libcudart (RPATH to its
    folder), with the toolkit's driver stub beside it; built once per build."""
    lib = runtimes.library(entry)
    out = BUILD / "runtimes" / "progs" / entry
    if (out / "launcher").exists():
        return out / "launcher"
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cudart = [f"-L{lib.parent}", f"-l:{lib.name}", f"-Wl,-rpath,{lib.parent}"]
    rpath = ["-Wl,-rpath,$ORIGIN", f"-L{tmp}"]
    cflags = ["-std=c11", "-D_GNU_SOURCE", "-O2", "-g", "-fno-omit-frame-pointer",
              f"-I{PROGS_SRC}", f"-I{CUDA_HOME}/include"]
    shutil.copy(CUDA_HOME / "lib64" / "stubs" / "libcuda.so", tmp / "libcuda.so.1")
    run([NVCC, "-c", "-O2", "-g", "-Xcompiler", "-fPIC,-fno-omit-frame-pointer",
         f"-I{PROGS_SRC}", PROGS_SRC / "kern.cu", "-o", tmp / "kern.o"])
    run(["c++", "-shared", "-Wl,-soname,libkern.so", "-o", tmp / "libkern.so", tmp / "kern.o",
         *cudart])
    run(["cc", *cflags, "-DHAVE_LIBKERN", "-fPIC", "-shared", "-Wl,-soname,liblaunch_b.so",
         "-o", tmp / "liblaunch_b.so", PROGS_SRC / "libb.c", *rpath, "-lkern", *cudart,
         f"-L{tmp}", "-l:libcuda.so.1"])
    run(["cc", *cflags, "-fPIC", "-shared", "-Wl,-soname,liblaunch_a.so", "-o",
         tmp / "liblaunch_a.so", PROGS_SRC / "liba.c", *rpath, "-llaunch_b"])
    run(["cc", *cflags, "-o", tmp / "launcher", PROGS_SRC / "launcher.c", *rpath, "-llaunch_a",
         "-llaunch_b", "-pthread"])
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out / "launcher"


def exported(lib):
    """The function names lib exports (.dynsym), version suffixes dropped."""
    out = run(["nm", "-D", "--defined-only", lib]).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines()
            if line.split()[-2:-1] in (["T"], ["W"], ["i"])}


def probes_on(summary, lib):
    """{symbol: probe} of the probes placed in lib (resolved path)."""
    lib = str(Path(lib).resolve())
    return {p["symbol"]: p for p in summary["probes"]
            if str(Path(p.get("library", "")).resolve()) == lib}


def c_run(tmp_path, entry):
    """The launcher's recording on entry: what it printed and what came out."""
    variants = ",".join(VARIANTS)
    rec = record(tmp_path, ["--format", "none", "--", launcher(entry), "--threads", THREADS, "--iters", ITERS,
                            "--variant", variants], name=entry)
    assert rec.returncode == 0, rec.stderr
    return rec


def c_outcome(rec, lib):
    """What must be equal to 13.0's: (per-API count, stack tail) pairs, kernel
    names per API, each probe's role and launches."""
    api_of = {v: a for v, (a, _, _) in VARIANTS.items()}
    printed = thread_lines(rec.stdout)
    want = {}
    for (_, variant), n in printed.items():
        want[api_of[variant]] = want.get(api_of[variant], 0) + n
    assert len(printed) == THREADS * len(VARIANTS), rec.stdout
    got, tails = {}, set()
    for _, comm, _, _, _, frames in rec.ext_lines():
        api = frames[-2]
        variant = next(v for v in VARIANTS if api_of[v] == api)
        _, kernel, extra = VARIANTS[variant]
        tail = ["worker_thread", "run_worker", "liba_submit", "libb_launch", *extra, api,
                f"[GPU_Kernel]{kernel}"]
        assert frames[-len(tail):] == tail, frames
        assert not any(f in ("[unknown]", "[truncated]") for f in frames), frames
        got[api] = got.get(api, 0) + 1
        tails.add(tuple(tail))
    assert got == want, (got, want)
    kernels = {}
    for launch in rec.jsonl("launches.jsonl"):
        kernels.setdefault(launch["api"], set()).add(launch["kernel"])
        assert launch["nested"] is False, launch
    probes = {s: (p["role"], p["launches"]) for s, p in probes_on(rec.summary, lib).items()}
    return {"counts": got, "tails": tails, "kernels": kernels, "probes": probes}


_baselines = {}


def baseline(kind, factory):
    """13.0's outcome of the C ("c") or CPython ("py") run, recorded once."""
    if kind not in _baselines:
        tmp = factory.mktemp(f"baseline-{kind}")
        _baselines[kind] = (c_outcome(c_run(tmp, BASELINE), runtimes.library(BASELINE))
                            if kind == "c" else py_outcome(py_run(tmp, BASELINE)))
    return _baselines[kind]


@pytest.mark.parametrize("entry", runtimes.entries("cudart"))
def test_c_program_launches_like_on_13_0(tmp_path, tmp_path_factory, entry):
    """Every launch path of a real C program through this libcudart: exact
    per-API counts and stacks, kernel names, the thunk counted once."""
    lib = runtimes.library(entry)
    base = baseline("c", tmp_path_factory)
    rec = c_run(tmp_path, entry)
    got = c_outcome(rec, lib)
    try:
        assert got["counts"] == base["counts"]
        assert got["tails"] == base["tails"]
        assert got["kernels"] == base["kernels"]
        # <<<>>> goes through __cudaLaunchKernel, a thunk into cudaLaunchKernel:
        # one launch, counted at the thunk.
        assert got["probes"]["__cudaLaunchKernel"] == ("thunk", THREADS * ITERS)
        assert got["probes"]["cudaLaunchKernel"][1] == THREADS * ITERS
        assert rec.summary["totals"]["events_dropped"] == 0
    except AssertionError:
        runtimes.record_result(entry, "C launches", "fails", "see the test log")
        raise
    runtimes.record_result(
        entry, "C launches", "works",
        f"{sum(got['counts'].values())} launches over {len(got['counts'])} APIs"
        + (" (the reference)" if entry == BASELINE else ", as on 13.0"))


@pytest.mark.parametrize("entry", runtimes.entries("cudart"))
def test_every_probe_the_library_can_take_attaches(tmp_path, tmp_path_factory, entry):
    """The probes placed in this libcudart are exactly 13.0's, less the symbols
    this version does not export (read from its .dynsym here)."""
    lib = runtimes.library(entry)
    base = baseline("c", tmp_path_factory)
    exports = exported(lib)
    want = {s: role for s, (role, _) in base["probes"].items() if s in exports}
    rec = record(tmp_path, ["--format", "none", "--", launcher(entry), "--iters", 1, "--variant", "rt"], name=entry)
    assert rec.returncode == 0, rec.stderr
    placed = probes_on(rec.summary, lib)
    missing = sorted(set(base["probes"]) - exports)
    try:
        assert {s: p["role"] for s, p in placed.items()} == want
        assert all(p.get("error") in (None, "") for p in placed.values()), placed
    except AssertionError:
        runtimes.record_result(entry, "probes attach", "fails", "see the test log")
        raise
    detail = f"{len(placed)} probes (launch, thunk, handle, graph)"
    if missing:
        detail += "; not exported here: " + ", ".join(missing)
    runtimes.record_result(entry, "probes attach", "works" if not missing else "degrades", detail)


def py_outcome(rec):
    """(per-thread counts, Python chains above cudaLaunchKernel, kernel names)."""
    printed = {int(t): int(n) for t, n in re.findall(r"thread tid=(\d+) launches=(\d+)",
                                                     rec.stdout)}
    got, chains = {}, set()
    for _, _, _, tid, _, frames in rec.ext_lines():
        assert frames[-2] == "cudaLaunchKernel", frames
        assert not any(f in ("[unknown]", "[truncated]") for f in frames), frames
        names = [f.split(" (")[0] for f in frames if f.endswith(")") and ".py:" in f]
        chains.add(tuple(names))
        got[tid] = got.get(tid, 0) + 1
    assert got == printed and sum(printed.values()) == THREADS * ITERS, (got, printed)
    kernels = {launch["kernel"] for launch in rec.jsonl("launches.jsonl")}
    return chains, kernels


def py_run(tmp_path, entry):
    rec = record(tmp_path, ["--format", "none", "--", "/usr/bin/python3", PROGS_SRC / "py_launch.py", "--threads",
                            THREADS, "--iters", ITERS],
                 env={"CUDART_PATH": str(runtimes.library(entry))}, name=entry)
    assert rec.returncode == 0, rec.stderr
    return rec


@pytest.mark.parametrize("entry", runtimes.entries("cudart"))
def test_cpython_program_launches_like_on_13_0(tmp_path, tmp_path_factory, entry):
    """A CPython program that loads this libcudart with ctypes: its Python
    frames, per-thread counts and kernel names, as on 13.0."""
    base_chains, base_kernels = baseline("py", tmp_path_factory)
    try:
        chains, kernels = py_outcome(py_run(tmp_path, entry))
        assert all(c[-len(PY_CHAIN):] == tuple(PY_CHAIN) for c in chains), chains
        assert (chains, kernels) == (base_chains, base_kernels)
    except AssertionError:
        runtimes.record_result(entry, "CPython launches", "fails", "see the test log")
        raise
    runtimes.record_result(entry, "CPython launches", "works",
                           f"{THREADS * ITERS} launches"
                           + (" (the reference)" if entry == BASELINE else
                              ", Python frames as on 13.0"))


def test_an_untested_cuda_runtime_is_said_once_and_in_the_summary(tmp_path):
    """A libcudart.so.14 (13.5's file under a name no tested CUDA had): still
    traced, but stderr says once that its arguments are read as CUDA 13's,
    and summary.json marks it untested; a tested one is marked tested."""
    untested = tmp_path / "lib" / "libcudart.so.14"
    untested.parent.mkdir()
    shutil.copy(runtimes.library("cudart-13.5"), untested)
    tested = runtimes.library("cudart-12.4")
    script = ("import ctypes, sys\n"
              "for path in sys.argv[1:]:\n"
              "    lib = ctypes.CDLL(path)\n"
              "    for _ in range(3):\n"
              "        lib.cudaLaunchKernel(ctypes.c_void_p(0x1234), None, None, None, 0, None)\n")
    rec = record(tmp_path, ["--format", "none", "--", "/usr/bin/python3", "-c", script,
                            untested, tested, untested])
    assert rec.returncode == 0, rec.stderr
    said = [line for line in rec.stderr.splitlines() if "libcudart.so.14" in line]
    assert len(said) == 1 and "CUDA 14" in said[0] and "tested with CUDA 12-13" in said[0], \
        rec.stderr
    assert "libcudart.so.12" not in rec.stderr
    libs = {Path(lib["path"]).name: lib for lib in rec.summary["targets"][0]["libraries"]}
    assert libs["libcudart.so.14"]["cuda_runtime"] == {"major": 14, "tested": False}
    assert libs["libcudart.so.12"]["cuda_runtime"] == {"major": 12, "tested": True}
    assert rec.summary["totals"]["launches"] == 3 * 3
