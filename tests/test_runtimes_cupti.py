"""NVIDIA's real libcupti 12.4 ... 13.5 (their wheels, in the runtimes cache of
tools/fetch-runtimes.sh) with libncclprobe_cupti.so, on a machine without a GPU
or a CUDA driver. Per CUPTI of the matrix:

- agent loads: a process with that CUDA major's libcudart (and a libcupti of the
  other major earlier on its loader path) loads the library the way CUDA does;
  it must pick that major's libcupti, find every function it needs, say which
  optional ones are missing and what that costs, and stay out with "no CUDA
  driver" - without calling CUPTI, which crashes (13.2) or fails every call
  (13.5) without one.
- record layouts: the library's decoder (src/cupti/layouts.c and records.c,
  compiled into tests/progs/cupti_layout_check.c against THAT version's headers)
  on records built from the structs that version's cupti_activity.h documents
  for each kind, with distinctive values, walked by the real libcupti where it
  can do that without a driver (which proves the record sizes); every field of
  every record compared, a field beyond a record's size absent.
- launch cbids: the launch APIs' callback ids as the version's headers define
  them, and the callback side the library is compiled against (CUDA_HOME's
  headers) the same in that version.
- layout table: src/cupti/record_layouts.h is what tools/gen-cupti-layouts.py
  makes of the version's headers.

Each check writes its cell of docs/compatibility.md (runtimes.record_result).
Also here, without real CUPTIs: which layouts an unknown CUPTI version gets
(tests/progs/cupti_layout_policy.c), and what ncclprobe says of a CUPTI it
cannot read or reads by assumption (the CUPTI test double presenting itself as
another version)."""

import json
import os
import re
import resource
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lib import runtimes
from lib.cupti_app import record_cupti_app, truth
from lib.gpu_wire import Connection
from lib.paths import CUPTI_LIB, REPO
from lib.run import sanitizer_said
from lib.skip import needs_binary, needs_bpf, needs_replay

CUPTI = runtimes.entries("cupti")
CUDA_INCLUDE = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
PROGS_SRC = REPO / "tests" / "progs"
GENERATOR = REPO / "tools" / "gen-cupti-layouts.py"
TABLE = REPO / "src" / "cupti" / "record_layouts.h"
DECODER = [REPO / "src" / "cupti" / "layouts.c", REPO / "src" / "cupti" / "records.c"]
HELLO_NO_DRIVER = 3  # enum np_hello_status
# The launch APIs the library follows (docs/gpu.md), as CUPTI names their callback ids.
RUNTIME_LAUNCHES = [
    "cudaLaunchKernel_v7000", "cudaLaunchKernel_ptsz_v7000", "cudaLaunchKernelExC_v11060",
    "cudaLaunchKernelExC_ptsz_v11060", "cudaLaunchCooperativeKernel_v9000",
    "cudaLaunchCooperativeKernel_ptsz_v9000", "cudaGraphLaunch_v10000",
    "cudaGraphLaunch_ptsz_v10000", "__cudaLaunchKernel_v13000", "__cudaLaunchKernel_ptsz_v13000"]
DRIVER_LAUNCHES = [
    "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
    "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz", "cuGraphLaunch",
    "cuGraphLaunch_ptsz"]
# The CUPTI functions the library can do without, and what a CUPTI without them loses.
OPTIONAL = {"cuptiSubscribe_v2": "the profiler that holds CUPTI is not named",
            "cuptiActivityEnableRuntimeApi": "no CUDA_Runtime API events in trace files",
            "cuptiActivityEnableDriverApi": "no CUDA_Driver API events in trace files"}
CFLAGS = ["-std=c11", "-D_GNU_SOURCE", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
          "-fsanitize=undefined", "-fno-sanitize-recover=undefined"]

pytestmark = [needs_binary(CUPTI_LIB),
              pytest.mark.skipif(not (CUDA_INCLUDE / "cuda.h").exists(),
                                 reason=f"no CUDA headers in {CUDA_INCLUDE} (CUDA_HOME)")]


def cc(args, cwd):
    res = subprocess.run([os.environ.get("CC", "cc"), *map(str, args)], capture_output=True,
                         text=True, cwd=cwd)
    assert res.returncode == 0, res.stderr[-4000:]


def no_core_dumps():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run(args, env=None, timeout=30):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})},
                          preexec_fn=no_core_dumps)


def version(name):
    return runtimes.version_of(name)


def major(name):
    return int(version(name).split(".")[0])


def exported(lib):
    """The functions a shared library defines (its dynamic symbols)."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def documented_struct(header, kind):
    """The record struct cupti_activity.h names for CUPTI_ACTIVITY_KIND_<kind>
    ("The corresponding activity record structure is \\ref CUpti_Activity...")."""
    m = re.search(r"CUPTI_ACTIVITY_KIND_%s\s*=" % kind, header)
    assert m, kind
    doc = header[header.rfind("/**", 0, m.start()):m.start()]
    refs = re.findall(r"\\ref\s+(CUpti_Activity\w+)", re.sub(r"\n\s*\*", " ", doc))
    assert len(refs) == 1, (kind, refs)
    return refs[0]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The programs that need no CUPTI headers, compiled once."""
    out = tmp_path_factory.mktemp("cupti-progs")
    cc(["-o", out / "cupti_load_check", PROGS_SRC / "cupti_load_check.c", "-ldl"], out)
    cc([*CFLAGS, "-I", REPO / "src", "-I", REPO / "include", "-o", out / "cupti_layout_policy",
        PROGS_SRC / "cupti_layout_policy.c", DECODER[0]], out)
    return out


# ---- agent loads ------------------------------------------------------------------------------

def agent_says(tmp_path, program, args, env):
    """Runs PROGRAM ARGS (the library's InitializeInjection in a process with
    env) with ncclprobe's end of its socket here: (the HELLO, the CUPTI frame,
    the CompletedProcess-like (returncode, stderr))."""
    path = tmp_path / "c.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    listener.settimeout(20)
    proc = subprocess.Popen([str(program), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=no_core_dumps,
                            env={**os.environ, "NCCLPROBE_CUPTI_SOCKET": str(path), **env})
    try:
        conn, _ = listener.accept()
        c = Connection(conn, proc.pid)
        c.read(lambda c: c.of("cupti"), timeout=20)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        listener.close()
    assert proc.returncode == 0, f"exit {proc.returncode}: {err}"
    assert not sanitizer_said(err), err
    assert out.strip() == "InitializeInjection 1", out
    hellos, cuptis = c.of("hello"), c.of("cupti")
    assert len(hellos) == 1 and len(cuptis) == 1, c.events
    return hellos[0], cuptis[0], err


def check_no_driver(hello, info, err, lib):
    assert hello["status"] == HELLO_NO_DRIVER, hello
    assert "no CUDA driver" in hello["message"], hello
    assert err.count("ncclprobe-cupti: no CUDA driver") == 1, err
    assert os.path.samefile(info["path"], lib), info
    # CUPTI itself was not called: no version, no layouts
    assert info["support"] == "not_asked" and info["api_version"] == 0, info
    assert info["driver_version"] == 0, info


@pytest.mark.parametrize("name", CUPTI)
def test_agent_loads_that_cupti_without_a_driver(name, tmp_path, built):
    lib = runtimes.library(name)
    cudart = runtimes.library(f"cudart-{version(name)}")
    other = next(n for n in CUPTI if major(n) != major(name))
    # the process's libcudart picks the CUPTI, whatever comes first on the path
    path = [cudart.parent, runtimes.library(other).parent, lib.parent]
    hello, info, err = agent_says(tmp_path, built / "cupti_load_check",
                                  [CUPTI_LIB, cudart.name],
                                  {"LD_LIBRARY_PATH": ":".join(map(str, path))})
    check_no_driver(hello, info, err, lib)
    assert f"libcudart.so.{major(name)}" in info["chosen_by"], info

    lacks = sorted(set(OPTIONAL) - exported(lib))
    for fn in OPTIONAL:
        said = [line for line in info["degraded"] if fn + ":" in line]
        assert len(said) == (1 if fn in lacks else 0), (fn, info["degraded"])

    # named by NCCLPROBE_CUPTI_LIBRARY, in a process without a libcudart
    (tmp_path / "env").mkdir()
    hello, info, err = agent_says(tmp_path / "env", built / "cupti_load_check", [CUPTI_LIB],
                                  {"NCCLPROBE_CUPTI_LIBRARY": str(lib)})
    check_no_driver(hello, info, err, lib)
    assert info["chosen_by"] == "NCCLPROBE_CUPTI_LIBRARY", info

    detail = (f"libcupti.so.{major(name)} picked for libcudart.so.{major(name)}; no driver here: "
              "CUPTI not called")
    if lacks:
        detail += "; lacks " + "; ".join(f"{fn}: {OPTIONAL[fn]}" for fn in lacks)
    runtimes.record_result(name, "agent loads", "degrades" if lacks else "works", detail)


# ---- record layouts and launch callback ids ---------------------------------------------------

def launch_cbids_header(inc, path):
    """LAUNCH_CBIDS(X): X(runtime, "name", the cbid its headers define, or 0 when they do not)."""
    runtime = (inc / "cupti_runtime_cbid.h").read_text()
    driver = (inc / "cupti_driver_cbid.h").read_text()
    rows = []
    for is_rt, names, text, prefix in ((1, RUNTIME_LAUNCHES, runtime, "RUNTIME"),
                                       (0, DRIVER_LAUNCHES, driver, "DRIVER")):
        for n in names:
            const = f"CUPTI_{prefix}_TRACE_CBID_{n}"
            value = const if re.search(r"\b%s\b" % const, text) else "0"
            rows.append(f'X({is_rt}, "{n}", {value})')
    path.write_text("#define LAUNCH_CBIDS(X) " + " ".join(rows) + "\n")
    return [n for n in RUNTIME_LAUNCHES if f"CUPTI_RUNTIME_TRACE_CBID_{n}" not in runtime]


def build_layout_check(name, out):
    """cupti_layout_check compiled against the version's headers; (the program,
    the documented structs, the launch APIs its headers lack)."""
    inc = runtimes.include_dir(name)
    header = (inc / "cupti_activity.h").read_text()
    structs = {k: documented_struct(header, k)
               for k in ("CONCURRENT_KERNEL", "KERNEL", "MEMCPY", "MEMSET", "RUNTIME", "DRIVER")}
    assert structs["KERNEL"] == structs["CONCURRENT_KERNEL"], structs
    assert structs["RUNTIME"] == structs["DRIVER"], structs
    absent = launch_cbids_header(inc, out / "launch_cbids.h")
    defines = [f"-DKERNEL_T={structs['CONCURRENT_KERNEL']}", f"-DMEMCPY_T={structs['MEMCPY']}",
               f"-DMEMSET_T={structs['MEMSET']}", f"-DAPI_T={structs['RUNTIME']}"]
    if "cuptiActivityGetStructSize" in header:
        defines.append("-DHAVE_STRUCT_SIZE")
    exe = out / "cupti_layout_check"
    cc([*CFLAGS, *defines, "-isystem", inc, "-isystem", CUDA_INCLUDE, "-I", REPO / "src",
        "-I", REPO / "include", "-include", out / "launch_cbids.h", "-o", exe,
        PROGS_SRC / "cupti_layout_check.c", *DECODER, "-ldl"], out)
    return exe, structs, absent


def abi_of(exe):
    res = run([exe, "abi"])
    assert res.returncode == 0, res.stderr
    return dict(line.split(" ", 1) for line in res.stdout.splitlines())


@pytest.fixture(scope="module")
def agent_abi(tmp_path_factory):
    """The callback side as the headers the library is built with say it."""
    out = tmp_path_factory.mktemp("abi")
    (out / "launch_cbids.h").write_text("#define LAUNCH_CBIDS(X)\n")
    exe = out / "abi"
    cc([*CFLAGS, "-DKERNEL_T=CUpti_ActivityKernel10", "-DMEMCPY_T=CUpti_ActivityMemcpy6",
        "-DMEMSET_T=CUpti_ActivityMemset4", "-DAPI_T=CUpti_ActivityAPI", "-isystem", CUDA_INCLUDE,
        "-I", REPO / "src", "-I", REPO / "include", "-include", out / "launch_cbids.h", "-o", exe,
        PROGS_SRC / "cupti_layout_check.c", *DECODER, "-ldl"], out)
    return abi_of(exe)


def decode(exe, lib):
    """Walked by the real libcupti when it can do that without a driver, else
    fed one by one: (how, the run)."""
    walk = run([exe, "walk", lib])
    refused = walk.returncode == 3 or walk.returncode < 0  # an error code, or a crash in CUPTI
    if not refused:
        assert walk.returncode == 0, walk.stdout + walk.stderr
        assert not sanitizer_said(walk.stderr), walk.stderr
        return "walked by the real libcupti (its record sizes)", walk
    why = (f"signal {-walk.returncode}" if walk.returncode < 0
           else walk.stdout.strip().splitlines()[-1])
    feed = run([exe, "feed"])
    assert feed.returncode == 0 and not sanitizer_said(feed.stderr), feed.stdout + feed.stderr
    return f"fed one by one (libcupti without a driver: {why})", feed


@pytest.mark.parametrize("name", CUPTI)
def test_decoder_reads_that_versions_records(name, tmp_path, agent_abi):
    exe, structs, absent = build_layout_check(name, tmp_path)
    how, res = decode(exe, runtimes.library(name))
    assert re.search(r"^ok \d+", res.stdout, re.M), res.stdout
    picked = dict(kv.split("=", 1) for kv in
                  next(line for line in res.stdout.splitlines() if line.startswith("layouts "))
                  .split()[1:])
    # the decoder read that version's own structs: the ones its headers document
    assert picked["cuda"] == version(name), picked
    for key, kind in (("kernel", "CONCURRENT_KERNEL"), ("memcpy", "MEMCPY"), ("memset", "MEMSET"),
                      ("api", "RUNTIME")):
        assert picked[key].split("/")[0] == structs[kind], (key, picked, structs)
    sizes = "/".join(picked[k].split("/")[1] for k in ("kernel", "memcpy", "memset", "api"))
    runtimes.record_result(
        name, "record layouts", "works",
        f"{structs['CONCURRENT_KERNEL']}, {structs['MEMCPY']}, {structs['MEMSET']}, "
        f"{structs['RUNTIME']} ({sizes} bytes); {how}")

    theirs = abi_of(exe)
    differ = {k for k in theirs.keys() & agent_abi.keys() if theirs[k] != agent_abi[k]}
    assert not differ, {k: (theirs[k], agent_abi[k]) for k in differ}
    launches = len(RUNTIME_LAUNCHES) - len(absent) + len(DRIVER_LAUNCHES)
    detail = f"{launches} launch APIs followed"
    if absent:
        detail += (f"; no ids for {', '.join(n.rsplit('_v', 1)[0] for n in absent)} before 13.0 "
                   "(in libcudart 12 they jump into cudaLaunchKernel(_ptsz), which is followed)")
    runtimes.record_result(name, "launch cbids", "works", detail)


# ---- the committed table ----------------------------------------------------------------------

def generate(*args):
    res = subprocess.run([sys.executable, str(GENERATOR), "--runtimes", str(runtimes.cache()),
                          *map(str, args)], capture_output=True, text=True, timeout=60)
    return res


@pytest.mark.parametrize("name", CUPTI)
def test_layout_table_is_generated_from_that_versions_headers(name):
    res = generate("--entry", name)
    assert res.returncode == 0, res.stderr
    assert f'.cuda = "{version(name)}"' in res.stdout
    assert res.stdout in TABLE.read_text(), (
        f"src/cupti/record_layouts.h does not hold {name}'s block as its headers make it "
        "(tools/gen-cupti-layouts.py -o src/cupti/record_layouts.h):\n" + res.stdout)
    runtimes.record_result(name, "layout table", "works",
                           "src/cupti/record_layouts.h is what tools/gen-cupti-layouts.py "
                           "makes of its headers")


def test_layout_table_is_the_whole_generated_file():
    res = generate("--check", TABLE)
    assert res.returncode == 0, res.stderr


# ---- versions the table does not know ---------------------------------------------------------

def pick(built, api, sizes=None):
    res = run([built / "cupti_layout_policy", api, *(sizes or [])])
    assert res.returncode == 0, res.stderr
    w = res.stdout.split()
    return {"support": int(w[1]), "from": int(w[3]), "sizes": [int(x) for x in w[5:9]],
            "confirmed": int(w[10]), "note": res.stderr.strip()}


def test_layouts_of_known_and_unknown_versions(built):
    res = run([built / "cupti_layout_policy", "known"])
    known = [[int(x) for x in line.split()[1:]] for line in res.stdout.splitlines()]
    versions = [k[0] for k in known]
    # the table holds the versions of the cache's headers, oldest first
    headers = sorted(int(re.search(r"#define CUPTI_API_VERSION (\d+)",
                                   (runtimes.include_dir(n) / "cupti_version.h").read_text())[1])
                     for n in CUPTI)
    assert versions == headers
    KNOWN, ASSUMED, UNSUPPORTED = 0, 1, 2
    for api, *sizes in known:
        assert pick(built, api) == {"support": KNOWN, "from": api, "sizes": sizes,
                                    "confirmed": 0, "note": ""}
        assert pick(built, api, sizes)["confirmed"] == 15
        larger = pick(built, api, [sizes[0] + 8, *sizes[1:]])  # its headers are not its records
        assert larger["support"] == ASSUMED and larger["sizes"] == sizes, larger
    oldest, newest = known[0], known[-1]
    assert pick(built, oldest[0] - 1)["support"] == UNSUPPORTED
    assert pick(built, oldest[0] - 1, oldest[1:])["support"] == UNSUPPORTED
    # newer than known: read as the newest known only when its records are surely as large
    later = newest[0] + 100
    assert pick(built, later)["support"] == UNSUPPORTED
    bigger = [s + 16 for s in newest[1:]]
    got = pick(built, later, bigger)
    assert got["support"] == ASSUMED and got["from"] == newest[0] and got["sizes"] == bigger, got
    assert "newer than known" in got["note"]
    assert pick(built, later, [newest[1] - 8, *newest[2:]])["support"] == UNSUPPORTED
    # between two known ones: the older one's, read no further than both agree
    for (a, *sa), (b, *sb) in zip(known, known[1:]):
        if b - a < 2:
            continue
        got = pick(built, a + 1)
        assert got["support"] in (ASSUMED, UNSUPPORTED), got
        if got["support"] == ASSUMED:
            assert got["from"] == a and got["sizes"] == [min(x, y) for x, y in zip(sa, sb)], got
        got = pick(built, a + 1, sa)
        assert got["support"] == ASSUMED and got["from"] == a and got["sizes"] == sa, got


# ---- what ncclprobe says (the CUPTI test double playing other versions) ------------------------

@needs_bpf
@needs_replay
def test_an_unsupported_cupti_is_said_in_summary_and_once(tmp_path):
    out, expect, proc = record_cupti_app(tmp_path, ["--scenario", "eager"],
                                         env={"CUPTI_REPLAY_API_VERSION": "10"})
    assert not sanitizer_said(proc.stderr), proc.stderr
    cupti = json.loads((out / "summary.json").read_text())["targets"][0]["cupti"]
    assert cupti["status"] == "cupti_unsupported", cupti
    assert cupti["library"]["layouts"] == "unsupported" and cupti["library"]["api_version"] == 10
    assert "not supported" in cupti["message"], cupti
    said = [line for line in proc.stderr.splitlines() if "not supported" in line]
    assert len(said) == 2, proc.stderr  # the library's one line, and ncclprobe's one warning
    assert sum("warning" in line for line in said) == 1, said
    launches, _, _ = truth(expect)
    gpu = json.loads((out / "summary.json").read_text())["gpu"]
    assert gpu["launches_matched"] == 0 and gpu["launches_pending"] == 0, gpu


@needs_bpf
@needs_replay
def test_an_unknown_cupti_read_by_assumption_is_warned_once(tmp_path):
    # a CUPTI between 13.0 and 13.2 that states its record sizes (those of the structs the
    # double writes, 13.0's): read with 13.0's layouts, every launch gets its records
    out, expect, proc = record_cupti_app(
        tmp_path, ["--scenario", "mixed", "--iters", "3"],
        env={"CUPTI_REPLAY_API_VERSION": "130100", "CUPTI_REPLAY_STRUCT_SIZES": "1"})
    assert not sanitizer_said(proc.stderr), proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    lib = summary["targets"][0]["cupti"]["library"]
    assert lib["layouts"] == "assumed" and lib["layouts_from"] == "13.0", lib
    assert all(r["size_from_cupti"] for r in lib["records"].values()), lib
    warned = [line for line in proc.stderr.splitlines()
              if "warning" in line and "layouts assumed" in line]
    assert len(warned) == 1, proc.stderr
    launches, _, _ = truth(expect)
    assert summary["gpu"]["launches_matched"] == len(launches) > 0, summary["gpu"]
