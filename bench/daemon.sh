#!/usr/bin/env bash
# bench/daemon.sh [BUILD] - benchmarks of `ncclprobe daemon` (issue 7; see bench/README.md).
#
# Builds BUILD/bench/launch_loop (as run.sh), then runs bench/daemon_bench.py:
#   1. added time per launch: no tracer, the daemon (always-on aggregate), the daemon with a
#      capture window open, `ncclprobe record --pid`, bpftrace `@[ustack] = count()`
#   2. tracer CPU at a steady launch rate; the CPU budget (cpu_budget = 10) against an
#      unpaced loop: rate limit, daemon CPU, the loop's own speed
#   3. the daemon's RSS over millions of launches (aggregate / window, one stack / many
#      distinct stacks through CPython)
#   4. discovery delay of processes started after the daemon
# Prints the results and writes them to bench/results-daemon.md. Needs root, bpftrace,
# bpftool, the CUDA toolkit's libcudart.so.13 and (for the many-stacks case) CPython
# 3.10-3.12. About 7 minutes on a 2-core machine.
#
# Environment overrides: CUDA_HOME (/usr/local/cuda), BENCH_DAEMON_PYTHON (pyenv's 3.12.1;
# empty: skip the many-stacks case), BENCH_DAEMON_ROUNDS (3), BENCH_DAEMON_ITERS (200000),
# BENCH_DAEMON_RSS_LAUNCHES (3000000, one-stack cases), BENCH_DAEMON_RSS_PY_LAUNCHES
# (2000000, many-stacks cases), BENCH_DAEMON_STACKS (50000), BENCH_DAEMON_ARGS (more
# daemon_bench.py options, e.g. --skip overhead,cpu,budget,rss,discovery).
set -euo pipefail

BUILD=${1:-build}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CC=${CC:-gcc}
PYTHON=/usr/bin/python3
PY312=/root/.pyenv/versions/3.12.1/bin/python3.12
[ -x "$PY312" ] || PY312=
BENCH_PY=${BENCH_DAEMON_PYTHON-$PY312}

[ "$(id -u)" = 0 ] || { echo "bench/daemon.sh: needs root (BPF, uprobes)" >&2; exit 1; }
[ -x "$BUILD/ncclprobe" ] || { echo "bench/daemon.sh: $BUILD/ncclprobe not built (run make)" >&2; exit 1; }
[ -e "$CUDA_HOME/lib64/libcudart.so.13" ] ||
    { echo "bench/daemon.sh: no $CUDA_HOME/lib64/libcudart.so.13" >&2; exit 1; }

# launch_loop, built as run.sh builds it (RUNPATH: BUILD/progs first for the toolkit's stub
# libcuda.so.1, so every launch fails fast even where a driver and GPU exist).
BUILD_ABS=$(cd "$BUILD" && pwd)
RPATH=()
LIBCUDA=()
if [ -e "$BUILD_ABS/progs/libcuda.so.1" ]; then
    RPATH+=("-Wl,-rpath,$BUILD_ABS/progs")
    LIBCUDA=(--libcuda "$BUILD_ABS/progs/libcuda.so.1")
fi
RPATH+=("-Wl,-rpath,$CUDA_HOME/lib64")
mkdir -p "$BUILD_ABS/bench"
LOOP="$BUILD_ABS/bench/launch_loop"
if [ ! -x "$LOOP" ] || [ "$HERE/launch_loop.c" -nt "$LOOP" ]; then
    "$CC" -std=c11 -O2 -g -fno-omit-frame-pointer -Wall -Wextra -Werror \
        -I"$CUDA_HOME/include" "$HERE/launch_loop.c" -o "$LOOP" \
        -L"$CUDA_HOME/lib64" -lcudart "${RPATH[@]}"
fi

# shellcheck disable=SC2086
exec "$PYTHON" "$HERE/daemon_bench.py" --build "$BUILD" --launch-loop "$LOOP" \
    --python "$BENCH_PY" "${LIBCUDA[@]}" \
    --rounds "${BENCH_DAEMON_ROUNDS:-3}" --iters "${BENCH_DAEMON_ITERS:-200000}" \
    --rss-launches "${BENCH_DAEMON_RSS_LAUNCHES:-3000000}" \
    --rss-py-launches "${BENCH_DAEMON_RSS_PY_LAUNCHES:-2000000}" \
    --stacks "${BENCH_DAEMON_STACKS:-50000}" \
    --out "$HERE/results-daemon.md" ${BENCH_DAEMON_ARGS:-}
