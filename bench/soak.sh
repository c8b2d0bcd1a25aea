#!/usr/bin/env bash
# bench/soak.sh [BUILD] - the daemon always on over 100 million launches from processes that
# come and go (issue 24; bench/soak.py says what is measured and checked).
#
# Builds BUILD/bench/launch_loop (as daemon.sh does), then runs bench/soak.py and appends its
# table to bench/results-soak.md. Exit 1 when any process's launches and the launches its
# output sets count differ. About 35 minutes per 100M launches at the default rates.
#
# Environment overrides: CUDA_HOME (/usr/local/cuda), SOAK_LAUNCHES (100000000),
# SOAK_PER_PROCESS (500000), SOAK_CONCURRENT (2), SOAK_RATE (25000 launches/s per process;
# 0: flat out), SOAK_INTERVAL (30s, the aggregate_interval), SOAK_ARGS (more soak.py options).
set -euo pipefail

BUILD=${1:-build}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CC=${CC:-gcc}

[ "$(id -u)" = 0 ] || { echo "bench/soak.sh: needs root (BPF, uprobes)" >&2; exit 1; }
[ -x "$BUILD/ncclprobe" ] || { echo "bench/soak.sh: $BUILD/ncclprobe not built (run make)" >&2; exit 1; }

BUILD_ABS=$(cd "$BUILD" && pwd)
RPATH=()
[ -e "$BUILD_ABS/progs/libcuda.so.1" ] && RPATH+=("-Wl,-rpath,$BUILD_ABS/progs")
RPATH+=("-Wl,-rpath,$CUDA_HOME/lib64")
mkdir -p "$BUILD_ABS/bench"
LOOP="$BUILD_ABS/bench/launch_loop"
if [ ! -x "$LOOP" ] || [ "$HERE/launch_loop.c" -nt "$LOOP" ]; then
    "$CC" -std=c11 -O2 -g -fno-omit-frame-pointer -Wall -Wextra -Werror \
        -I"$CUDA_HOME/include" "$HERE/launch_loop.c" -o "$LOOP" \
        -L"$CUDA_HOME/lib64" -lcudart "${RPATH[@]}"
fi

# shellcheck disable=SC2086
exec /usr/bin/python3 "$HERE/soak.py" --build "$BUILD" --launch-loop "$LOOP" \
    --launches "${SOAK_LAUNCHES:-100000000}" --per-process "${SOAK_PER_PROCESS:-500000}" \
    --concurrent "${SOAK_CONCURRENT:-2}" --rate "${SOAK_RATE:-25000}" --interval "${SOAK_INTERVAL:-30s}" \
    --out "$HERE/results-soak.md" ${SOAK_ARGS:-}
