"""ncclprobe record, end to end: real BPF uprobes on the CUDA toolkit's real
libcudart.so.13 (and its driver stub libcuda), real processes.

Expected values come from the workloads' source (tests/progs/README.md) and
from the counts the workloads print themselves - never from ncclprobe."""

import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lib.paths import PROGS, PROGS_ENV, REPO
from lib.processes import interpreters, thread_lines, Workload
from lib.run import assert_consistent_totals, attach_and_go, record, record_attached
from lib.skip import needs_bpf, needs_real_cudart, needs_tools

pytestmark = needs_bpf

# variant -> (API the caller calls, kernel name, extra frames under libb_launch, arguments)
VARIANTS = {
    "rt": ("cudaLaunchKernel", "vector_add_kernel", [],
           dict(grid=[2, 3, 4], block=[32, 1, 1], shmem=128, stream="0x5000")),
    "rt_ptsz": ("cudaLaunchKernel_ptsz", "vector_add_kernel", [],
                dict(grid=[2, 3, 4], block=[32, 1, 1], shmem=128, stream="0x5000")),
    "rt_exc": ("cudaLaunchKernelExC", "vector_add_kernel", [],
               dict(grid=[5, 6, 7], block=[64, 1, 1], shmem=256, stream="0x5001")),
    "rt_coop": ("cudaLaunchCooperativeKernel", "vector_add_kernel", [],
                dict(grid=[8, 1, 1], block=[128, 1, 1], shmem=0, stream="0x5002")),
    "graph": ("cudaGraphLaunch", "<graph cudaGraphLaunch>", [],
              dict(func="0x6000", stream="0x5003")),
    "drv": ("cuLaunchKernel", "<unnamed 0x7000>", [],
            dict(grid=[9, 1, 1], block=[256, 1, 1], shmem=512, stream="0x5004", func="0x7000")),
    "drv_ex": ("cuLaunchKernelEx", "<unnamed 0x7001>", [],
               dict(grid=[10, 1, 1], block=[32, 2, 1], shmem=64, stream="0x5005",
                    func="0x7001")),
    "drv_graph": ("cuGraphLaunch", "<graph cuGraphLaunch>", [],
                  dict(func="0x6001", stream="0x5006")),
    "rt13": ("__cudaLaunchKernel", "scale_kernel",
             ["kern_launch_scale", "__device_stub__Z12scale_kernelPfi"],
             dict(grid=[3, 1, 1], block=[64, 1, 1], shmem=0, stream="0x5007")),
}


def variants_here():
    names = [v for v in VARIANTS if v != "rt13"]
    if PROGS_ENV.get("HAVE_RT13") == "1":
        names.append("rt13")
    return names


def expected_tail(variant):
    api, kernel, extra, _ = VARIANTS[variant]
    return ["run_worker", "liba_submit", "libb_launch", *extra, api, f"[GPU_Kernel]{kernel}"]


@needs_real_cudart
def test_every_launch_variant_exact_stacks_counts_and_arguments(tmp_path):
    variants = variants_here()
    rec = record(tmp_path, ["--", PROGS / "launcher", "--threads", "3", "--iters", "7",
                            "--variant", ",".join(variants)])
    assert rec.returncode == 0, rec.stderr
    expected = thread_lines(rec.stdout)  # {(tid, variant): launches}
    assert len(expected) == 3 * len(variants)

    # Per thread and per API, the counts the program printed.
    api_of = {v: VARIANTS[v][0] for v in variants}
    want = {}
    for (tid, variant), n in expected.items():
        want[(tid, api_of[variant])] = want.get((tid, api_of[variant]), 0) + n
    got = {}
    for ts, comm, pid, tid, cpu, frames in rec.ext_lines():
        assert comm == "launcher"
        api = frames[-2]
        variant = next(v for v in variants if api_of[v] == api)
        # The whole chain from the thread entry down to the launch, exactly.
        assert frames[-len(expected_tail(variant)) - 1:] == ["worker_thread"] + expected_tail(
            variant), frames
        got[(tid, api)] = got.get((tid, api), 0) + 1
    assert got == want

    # Decoded arguments, per API.
    for launch in rec.jsonl("launches.jsonl"):
        variant = next(v for v in variants if api_of[v] == launch["api"])
        for key, value in VARIANTS[variant][3].items():
            assert launch[key] == value, (variant, key, launch)
        assert launch["kernel"] == VARIANTS[variant][1]
        assert launch["nested"] is False

    # The aggregated flamegraph input carries the same totals.
    folded = rec.folded()
    for variant in variants:
        key_tail = ";".join(expected_tail(variant))
        n = sum(c for stack, c in folded.items() if stack.endswith(key_tail))
        assert n == 3 * 7, (variant, folded)
    assert_consistent_totals(rec)
    s = rec.summary
    assert s["totals"]["launches"] == 3 * 7 * len(variants)
    assert s["totals"]["events_dropped"] == 0
    assert s["stop_reason"] == "targets exited"
    assert s["launches_by_kernel"]["vector_add_kernel"] == 4 * 3 * 7


@needs_real_cudart
@pytest.mark.skipif(PROGS_ENV.get("HAVE_RT13") != "1", reason="nvcc not found: no rt13 kernel")
def test_cuda13_triple_chevron_is_one_launch_named_after_its_kernel(tmp_path):
    """__cudaLaunchKernel tail-jumps into cudaLaunchKernel in libcudart 13: one
    launch, reported as the function the caller called."""
    rec = record(tmp_path, ["--", PROGS / "launcher", "--iters", "4", "--variant", "rt13"])
    assert rec.returncode == 0, rec.stderr
    rows = rec.ext_lines()
    assert len(rows) == 4
    assert all(r[5][-2:] == ["__cudaLaunchKernel", "[GPU_Kernel]scale_kernel"] for r in rows)
    probes = {p["symbol"]: p for p in rec.summary["probes"] if p["pid"] == rows[0][2]}
    assert probes["__cudaLaunchKernel"]["role"] == "thunk"
    assert probes["__cudaLaunchKernel"]["hits"] == 4
    assert probes["__cudaLaunchKernel"]["launches"] == 4
    assert probes["cudaLaunchKernel"]["launches"] == 0


@needs_real_cudart
def test_attach_to_running_process_by_pid(tmp_path, workloads):
    w = Workload([PROGS / "launcher", "--wait-signal", "--threads", "2", "--iters", "25",
                  "--variant", "rt,drv_ex"])
    workloads.append(w)
    rec, out, _ = record_attached(tmp_path, w)
    assert rec.returncode == 0, rec.stderr
    expected = thread_lines(out)
    got = {}
    for _, _, pid, tid, _, frames in rec.ext_lines():
        assert pid == w.pid
        variant = "rt" if frames[-2] == "cudaLaunchKernel" else "drv_ex"
        assert frames[-6:] == ["worker_thread"] + expected_tail(variant)
        got[(tid, variant)] = got.get((tid, variant), 0) + 1
    assert got == expected
    assert rec.summary["stop_reason"] == "targets exited"
    assert_consistent_totals(rec)


@needs_real_cudart
def test_library_dlopened_after_attach_is_probed(tmp_path, workloads):
    w = Workload([PROGS / "late_loader", "--iters", "5", "--settle-ms", "300",
                  PROGS_ENV["CUDART_PATH"]])
    workloads.append(w)
    rec, out, attached = record_attached(tmp_path, w)
    assert "waiting for one" in attached
    assert rec.returncode == 0, rec.stderr
    stacks = [r[5] for r in rec.ext_lines()]
    assert len(stacks) == 5 == sum(thread_lines(out).values())
    for frames in stacks:
        assert frames[-4:] == ["main", "late_launch", "cudaLaunchKernel",
                               "[GPU_Kernel]late_kernel"]
    libs = {l["path"]: l for t in rec.summary["targets"] for l in t["libraries"]}
    cudart = next(l for p, l in libs.items() if "libcudart" in p)
    assert cudart["loaded_after_attach"] is True
    # Probes were in place well within the 300 ms the program waits.
    assert 0 <= cudart["attach_latency_ms"] < 300


@needs_real_cudart
def test_duration_stops_the_recording_and_flushes(tmp_path, workloads):
    w = Workload([PROGS / "launcher", "--wait-signal", "--loop-until-signal", "--sleep-us",
                  "2000", "--variant", "rt"])
    workloads.append(w)
    w.go()
    start = time.time()
    rec = record(tmp_path, ["--pid", str(w.pid), "--duration", "1.5"])
    elapsed = time.time() - start
    assert rec.returncode == 0, rec.stderr
    assert 1.4 < elapsed < 10
    s = rec.summary
    assert s["stop_reason"] == "duration"
    assert s["totals"]["launches"] == len(rec.ext_lines()) > 10
    assert sum(rec.folded().values()) == s["totals"]["launches"]
    assert_consistent_totals(rec)
    w.proc.send_signal(signal.SIGTERM)


@needs_real_cudart
@pytest.mark.parametrize("sig,reason", [(signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")])
def test_signal_stops_the_recording_and_flushes(tmp_path, workloads, sig, reason):
    w = Workload([PROGS / "launcher", "--wait-signal", "--loop-until-signal", "--sleep-us",
                  "1000", "--variant", "rt"])
    workloads.append(w)
    probe, _ = attach_and_go(tmp_path, w)
    time.sleep(1.0)
    rec = probe.stop(sig)
    assert rec.returncode == 0, rec.stderr
    s = rec.summary
    assert s["stop_reason"] == reason
    assert s["totals"]["launches"] == len(rec.ext_lines()) > 10
    assert_consistent_totals(rec)
    w.proc.send_signal(signal.SIGTERM)


@needs_real_cudart
def test_overflow_is_counted_never_silent(tmp_path, workloads):
    """A tiny ring buffer that is read only every 100 ms overflows under a
    launch storm: every lost event is counted, per probe and in total."""
    w = Workload([PROGS / "launcher", "--wait-signal", "--loop-until-signal", "--threads", "2",
                  "--variant", "rt"])
    workloads.append(w)
    probe, _ = attach_and_go(tmp_path, w, extra=["--ring-buffer-mb", "1", "--wakeup-kb",
                                                 "1048576"])
    time.sleep(1.0)
    rec = probe.stop()
    w.proc.send_signal(signal.SIGTERM)
    assert rec.returncode == 0, rec.stderr
    totals = rec.summary["totals"]
    assert totals["events_dropped"] > 0
    assert_consistent_totals(rec)
    per_probe = [p for p in rec.summary["probes"] if p["symbol"] == "cudaLaunchKernel"]
    assert sum(p["dropped"] for p in per_probe) == totals["events_dropped"]
    assert len(rec.ext_lines()) == totals["launches"] == totals["events_captured"]
    assert "ring buffer overflowed" in rec.stderr


@needs_real_cudart
def test_a_small_reader_backlog_counts_what_did_not_fit(tmp_path, workloads):
    """Records wait between the ring and unwinding in a backlog of bounded
    memory (here 4 MiB, two launcher threads flat out): every launch is
    written, or counted as dropped - by BPF (a full ring) or by the reader
    (a full backlog) - in total and per probe, and nothing else is lost."""
    w = Workload([PROGS / "launcher", "--wait-signal", "--loop-until-signal", "--threads", "2",
                  "--variant", "rt"])
    workloads.append(w)
    probe, _ = attach_and_go(tmp_path, w, extra=["--reader-backlog-mb", "4"])
    time.sleep(1.5)
    rec = probe.stop()
    w.proc.send_signal(signal.SIGTERM)
    assert rec.returncode == 0, rec.stderr
    totals, reader = rec.summary["totals"], rec.summary["reader"]
    assert_consistent_totals(rec)
    assert reader["backlog_budget_bytes"] == 4 << 20
    assert reader["backlog_peak_bytes"] <= 4 << 20
    # chunks of an eighth of the budget, emptied ones reused: never more than fit it at once
    assert 1 <= reader["backlog_chunks_mapped"] <= 8
    # every record captured went through the backlog
    assert reader["records_queued"] >= totals["events_captured"] > 1000
    per_probe = [p for p in rec.summary["probes"] if p["symbol"] == "cudaLaunchKernel"]
    assert sum(p["dropped"] for p in per_probe) == totals["events_dropped"]
    assert len(rec.ext_lines()) == totals["launches"] == totals["events_captured"]
    assert reader["other_records_dropped"] == 0
    assert ("backlog was full" in rec.stderr) == (reader["launches_dropped"] > 0)


@needs_real_cudart
@pytest.mark.parametrize("ring_mb,wakeup,expect_bytes", [
    (None, None, (64 << 20) // 8),  # auto: an eighth of the default 64 MiB ring
    ("4", "auto", (4 << 20) // 8),
    ("4", "300", 300 * 1024),
    (None, "0", 0),  # a wake-up at every record
])
def test_the_reader_is_woken_at_an_eighth_of_the_ring_unless_told(tmp_path, ring_mb, wakeup,
                                                                  expect_bytes):
    """BPF wakes the reader when the ring is an eighth full (--wakeup-kb
    auto, the default) or at --wakeup-kb; whatever the threshold, every
    launch is read - the last ones never reach it: the reader polls, and
    drains at the end - or counted as dropped, and summary.json says what
    was used."""
    args = []
    if ring_mb:
        args += ["--ring-buffer-mb", ring_mb]
    if wakeup:
        args += ["--wakeup-kb", wakeup]
    rec = record(tmp_path, [*args, "--", PROGS / "launcher", "--threads", "2", "--iters", "3000",
                            "--variant", "rt"])
    assert rec.returncode == 0, rec.stderr
    made = sum(thread_lines(rec.stdout).values())
    assert made == 6000
    reader = rec.summary["reader"]
    assert reader["ring_buffer_bytes"] == int(ring_mb or 64) << 20
    assert reader["wakeup_bytes"] == expect_bytes
    totals = rec.summary["totals"]
    assert_consistent_totals(rec)
    assert len(rec.ext_lines()) == totals["launches"] == made - totals["events_dropped"]
    if not ring_mb:  # 64 MiB holds the whole burst; a 4 MiB ring may overflow in it
        assert totals["events_dropped"] == 0


@pytest.mark.parametrize("value,why", [("-1", "not a whole number"),
                                       ("bogus", "not a whole number"),
                                       ("1048577", "out of range"),
                                       ("", "empty value")])
def test_a_bad_wakeup_threshold_is_refused(tmp_path, value, why):
    rec = record(tmp_path, ["--wakeup-kb", value, "--", "true"])
    assert rec.returncode == 2, rec.stderr
    assert "--wakeup-kb" in rec.stderr and why in rec.stderr, rec.stderr
    assert not (tmp_path / "rec").exists()


def test_driver_launches_are_named_from_the_calls_that_made_their_handles(tmp_path,
                                                                          workloads):
    """libfakecuda.so is a test double (the real driver needs a GPU): it hands
    out handles from cuModuleGetFunction / cuLibraryGetKernel +
    cuKernelGetFunction. A handle made before ncclprobe attached stays
    unnamed, and says so."""
    w = Workload([PROGS / "driver_user", "--iters", "4", "--wait-signal"])
    workloads.append(w)
    rec, out, _ = record_attached(tmp_path, w)
    assert rec.returncode == 0, rec.stderr
    kernels = {}
    for *_, frames in rec.ext_lines():
        assert frames[-4:-2] == ["main", "run_step"]
        kernels[(frames[-2], frames[-1])] = kernels.get((frames[-2], frames[-1]), 0) + 1
    unnamed = [k for k in kernels if k[1].startswith("[GPU_Kernel]<unnamed 0x")]
    assert kernels.pop(("cuLaunchKernel", "[GPU_Kernel]matmul_tile")) == 4
    assert kernels.pop(("cuLaunchKernelEx", "[GPU_Kernel]softmax_kernel")) == 4
    assert len(unnamed) == 1 and unnamed[0][0] == "cuLaunchKernel"
    assert kernels == {unnamed[0]: 4}
    assert "early_kernel launches=4" in out


@pytest.mark.parametrize("mode", ["command", "pid"])
def test_first_driver_kernel_named_from_a_page_not_yet_mapped_is_named(tmp_path, workloads,
                                                                         mode):
    """driver_names passes four kernel names, from one page of .rodata the
    process has not mapped yet, to cuModuleGetFunction right after cuInit:
    the driver's look-up of the first name maps that page. Every kernel -
    the first one too - is named after the name it was looked up by."""
    args = ["--iters", "3"]
    if mode == "command":
        rec = record(tmp_path, ["--", PROGS / "driver_names", *args])
        out = rec.stdout
    else:
        w = Workload([PROGS / "driver_names", *args, "--wait-signal"])
        workloads.append(w)
        rec, out, _ = record_attached(tmp_path, w)
    assert rec.returncode == 0, rec.stderr
    order = ["alpha_kernel", "beta_kernel", "gamma_kernel", "delta_kernel"]
    for name in order:
        assert f"kernel={name} launches=3" in out
    launched = []
    for *_, frames in rec.ext_lines():
        assert frames[-4:-2] == ["main", "launch_all"]
        assert frames[-2] == "cuLaunchKernel"
        launched.append(frames[-1])
    assert launched == [f"[GPU_Kernel]{name}" for name in order] * 3
    assert rec.summary["totals"]["handle_events"] == 4


@needs_real_cudart
def test_each_copy_of_a_library_in_one_process_is_probed(tmp_path, workloads):
    """Two virtualenvs, two copies of libcudart in one process: both probed,
    launches attributed to the copy that ran them."""
    copies = []
    for name in ("venv_a", "venv_b"):
        d = tmp_path / name
        d.mkdir()
        copy = d / "libcudart.so.13"
        copy.write_bytes(open(PROGS_ENV["CUDART_PATH"], "rb").read())
        copies.append(copy)
    script = r"""
import ctypes, os, signal, sys
class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]
libs = [ctypes.CDLL(p) for p in sys.argv[1:3]]
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
print("ready", os.getpid(), flush=True)
signal.sigwait({signal.SIGUSR1})
for lib, n in zip(libs, (3, 5)):
    for _ in range(n):
        lib.cudaLaunchKernel(ctypes.c_void_p(0x1234), dim3(1, 1, 1), dim3(1, 1, 1), None,
                             ctypes.c_size_t(0), None)
"""
    w = Workload(["/usr/bin/python3", "-c", script, *copies])
    workloads.append(w)
    rec, _, _ = record_attached(tmp_path, w)
    assert rec.returncode == 0, rec.stderr
    launches = {p["library"]: p["launches"] for p in rec.summary["probes"]
                if p["symbol"] == "cudaLaunchKernel"}
    assert launches == {str(copies[0]): 3, str(copies[1]): 5}


STATIC_APP = r"""
#include <cstdio>
#include <unistd.h>
__global__ void static_scale(float *x, int n) {
    if (threadIdx.x < n)
        x[threadIdx.x] *= 2.0f;
}
__attribute__((noinline)) void run_static(int i) {
    static_scale<<<dim3(2, 1, 1), dim3(32, 1, 1)>>>(nullptr, i);
    __asm__ volatile("");
}
int main() {
    for (int i = 0; i < 3; i++)
        run_static(i);
    usleep(100000);
    std::printf("done\n");
}
"""


@pytest.mark.skipif(not shutil.which("nvcc") and not Path("/usr/local/cuda/bin/nvcc").exists(),
                    reason="nvcc not installed")
def test_cudart_linked_statically_into_the_executable(tmp_path):
    """nvcc links cudart statically by default: the launch functions are local
    symbols of the executable itself, and are probed there."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    (tmp_path / "app.cu").write_text(STATIC_APP)
    app = tmp_path / "static_app"
    subprocess.run([nvcc, "-O2", "-cudart", "static", "-o", app, tmp_path / "app.cu"],
                   check=True, capture_output=True)
    nm = subprocess.run(["nm", "-D", app], capture_output=True, text=True).stdout
    assert "cudaLaunchKernel" not in nm  # not exported: only in .symtab
    rec = record(tmp_path, ["--", app])
    assert rec.returncode == 0, rec.stderr
    rows = rec.ext_lines()
    assert len(rows) == 3
    for *_, frames in rows:
        assert frames[-2:] == ["__cudaLaunchKernel", "[GPU_Kernel]static_scale"], frames
        assert "run_static" in frames and "main" in frames
    libs = [l["path"] for t in rec.summary["targets"] for l in t["libraries"] if l["cuda"]]
    assert libs == [str(app)]


@needs_real_cudart
@needs_tools("unshare")
def test_library_visible_only_in_the_targets_mount_namespace(tmp_path, workloads):
    """A containerised process maps a libcudart that exists only in its own
    mount namespace: probes and symbols go through /proc/PID/root."""
    private = "/mnt/ncclprobe-private-test"
    script = (f"mkdir -p {private} && mount -t tmpfs none {private} && "
              f"cp {PROGS_ENV['CUDART_PATH']} {private}/ && exec /usr/bin/python3 -c '"
              "import ctypes, os, signal, sys\n"
              "class dim3(ctypes.Structure):\n"
              "    _fields_ = [(\"x\", ctypes.c_uint), (\"y\", ctypes.c_uint), "
              "(\"z\", ctypes.c_uint)]\n"
              f"lib = ctypes.CDLL(\"{private}/libcudart.so.13\")\n"
              "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n"
              "print(\"ready\", os.getpid(), flush=True)\n"
              "signal.sigwait({signal.SIGUSR1})\n"
              "for _ in range(4):\n"
              "    lib.cudaLaunchKernel(ctypes.c_void_p(1), dim3(1, 1, 1), dim3(1, 1, 1), None, "
              "ctypes.c_size_t(0), None)\n'")
    w = Workload(["unshare", "--mount", "--propagation", "private", "sh", "-c", script])
    workloads.append(w)
    assert not Path(f"{private}/libcudart.so.13").exists()  # not in our namespace
    rec, _, _ = record_attached(tmp_path, w)
    assert rec.returncode == 0, rec.stderr
    rows = rec.ext_lines()
    assert len(rows) == 4
    assert all(frames[-2] == "cudaLaunchKernel" for *_, frames in rows)
    libs = [l for t in rec.summary["targets"] for l in t["libraries"] if l["cuda"]]
    assert [l["path"] for l in libs] == [f"{private}/libcudart.so.13"]
    assert libs[0]["probes_attached"] > 0


@needs_real_cudart
def test_outputs_are_written_while_recording(tmp_path, workloads):
    """A live recording's files fill as it goes (tail -f), not only at exit."""
    w = Workload([PROGS / "launcher", "--wait-signal", "--loop-until-signal", "--sleep-us",
                  "1000", "--variant", "rt"])
    workloads.append(w)
    probe, _ = attach_and_go(tmp_path, w)
    time.sleep(2.5)
    live = (probe.out / "stacks.ext.folded").read_text().splitlines()
    rec = probe.stop()
    w.proc.send_signal(signal.SIGTERM)
    assert rec.returncode == 0, rec.stderr
    assert len(live) > 100
    assert all(line.endswith("[GPU_Kernel]vector_add_kernel") for line in live[:-1])


@needs_real_cudart
@pytest.mark.parametrize("python", interpreters(fallback="none"))
def test_python_command_captured_from_its_first_launch_after_dlopen(tmp_path, python):
    """`record -- python3 script.py`: the script dlopens libcudart (ctypes) and
    launches at once from two threads. ncclprobe holds the process it started
    at each library load until the probes are in place, so nothing is missed,
    and the native stacks are complete through the interpreter."""
    if python == "none":
        pytest.skip("no CPython 3.10+ installed")
    rec = record(tmp_path, ["--", python, REPO / "tests/progs/py_launch.py", "--threads", "2",
                            "--iters", "5"], env={"CUDART_PATH": PROGS_ENV["CUDART_PATH"]})
    assert rec.returncode == 0, rec.stderr
    printed = {int(tid): int(n)
               for tid, n in re.findall(r"thread tid=(\d+) launches=(\d+)", rec.stdout)}
    assert sum(printed.values()) == 10
    got = {}
    for _, _, _, tid, _, frames in rec.ext_lines():
        assert frames[0] == "__clone3" and frames[-2] == "cudaLaunchKernel", frames
        assert not any(f in ("[unknown]", "[truncated]") for f in frames)
        got[tid] = got.get(tid, 0) + 1
    assert got == printed
