#!/usr/bin/env bash
# bench/python.sh [BUILD] - added per-launch latency of ncclprobe's CPython frame walker
# (see bench/README.md).
#
# Runs bench/py_bench.py: bench/py_launch_loop.py (ctypes cudaLaunchKernel in a loop, D
# Python frames deep) with no tracer, under `ncclprobe record --python off`, the defaults
# (merge, --python-depth 128), `--python-depth 256`, and under bpftrace -p
# `@[ustack] = count()`, at depths 10, 50 and 200, interleaved rounds, per interpreter.
# Prints the results and writes them to bench/results-python.md. Needs root, bpftool,
# bpftrace (BENCH_PY_ARGS=--no-bpftrace leaves it out), the CUDA toolkit's
# /usr/local/cuda/lib64/libcudart.so.13 and the interpreters. About 3-5 minutes on a
# 2-core machine with the defaults.
#
# Environment overrides: BENCH_PYTHONS (comma-separated interpreters, each benchmarked in
# turn; default pyenv's 3.12.1, then 3.10.13), BENCH_PY_ROUNDS (7), BENCH_PY_ITERS (20000
# timed launches per run), BENCH_PY_WARMUP (3000 untimed launches), BENCH_PY_SETTLE (0.1:
# untimed launches go on until this many seconds after the first), BENCH_PY_DEPTHS
# (10,50,200), BENCH_PY_NOTE (a line for the report header), BENCH_PY_ARGS (more
# py_bench.py options, e.g. --no-bpftrace).
set -euo pipefail

BUILD=${1:-build}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=/usr/bin/python3
PY312=/root/.pyenv/versions/3.12.1/bin/python3.12
PY310=/root/.pyenv/versions/3.10.13/bin/python3.10
PYTHONS=${BENCH_PYTHONS:-$PY312,$PY310}
CUDART=/usr/local/cuda/lib64/libcudart.so.13

[ "$(id -u)" = 0 ] || { echo "bench/python.sh: needs root (BPF, uprobes)" >&2; exit 1; }
[ -x "$BUILD/ncclprobe" ] ||
    { echo "bench/python.sh: $BUILD/ncclprobe not built (run make)" >&2; exit 1; }
[ -e "$CUDART" ] || { echo "bench/python.sh: no $CUDART" >&2; exit 1; }

# The toolkit's stub libcuda.so.1, as the test workloads use (BUILD/progs, built by make):
# the workload loads it first, so every launch fails fast even where a driver and GPU exist.
LIBCUDA=()
[ -e "$BUILD/progs/libcuda.so.1" ] &&
    LIBCUDA=(--libcuda "$(cd "$BUILD/progs" && pwd)/libcuda.so.1")

# shellcheck disable=SC2086
exec "$PYTHON" "$HERE/py_bench.py" --build "$BUILD" --pythons "$PYTHONS" \
    --rounds "${BENCH_PY_ROUNDS:-7}" --iters "${BENCH_PY_ITERS:-20000}" \
    --warmup "${BENCH_PY_WARMUP:-3000}" --settle "${BENCH_PY_SETTLE:-0.1}" \
    --depths "${BENCH_PY_DEPTHS:-10,50,200}" \
    "${LIBCUDA[@]}" --out "$HERE/results-python.md" ${BENCH_PY_ARGS:-}
