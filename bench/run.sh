#!/usr/bin/env bash
# bench/run.sh [BUILD] - ncclprobe benchmarks (see bench/README.md).
#
# Builds BUILD/bench/launch_loop, then runs bench/bench.py: per-launch added
# latency (no tracer, ncclprobe, ncclprobe --unwind fp, ncclprobe --wakeup-kb
# 0, bpftrace, perf) and the highest launch rate ncclprobe holds without
# drops. Prints the results table and writes it to bench/results-latest.md.
# Needs root, bpftrace, perf, bpftool and the CUDA toolkit's libcudart.so.13.
# About 3-4 minutes.
#
# Environment overrides: CUDA_HOME (/usr/local/cuda), BENCH_ROUNDS (7),
# BENCH_ITERS (200000), BENCH_DEPTH (10), BENCH_RATES
# (50000,100000,200000,400000,800000,0; 0 = as fast as possible),
# BENCH_RATE_SECONDS (2), BENCH_RATE_REPS (2), BENCH_ARGS (more bench.py
# options, e.g. --no-diagnostic, --skip-rates), BENCH_AGAINST (a git revision,
# e.g. HEAD~1: built in build/bench-against and measured beside this build in the
# same rounds, as "previous").
set -euo pipefail

BUILD=${1:-build}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CC=${CC:-gcc}
PYTHON=/usr/bin/python3

[ "$(id -u)" = 0 ] || { echo "bench/run.sh: needs root (BPF, uprobes, perf probe)" >&2; exit 1; }
[ -x "$BUILD/ncclprobe" ] || { echo "bench/run.sh: $BUILD/ncclprobe not built (run make)" >&2; exit 1; }
[ -e "$CUDA_HOME/lib64/libcudart.so.13" ] ||
    { echo "bench/run.sh: no $CUDA_HOME/lib64/libcudart.so.13" >&2; exit 1; }

# shellcheck disable=SC1091
. "$HERE/lib.sh"
BUILD_ABS=$(cd "$BUILD" && pwd)
LOOP=$(launch_loop_build "$BUILD_ABS")

PREVIOUS=()
if [ -n "${BENCH_AGAINST:-}" ]; then
    REPO=$(cd "$HERE/.." && pwd)
    prev=$(against_build "$REPO" "$BENCH_AGAINST") ||
        { echo "bench/run.sh: could not build $BENCH_AGAINST" >&2; exit 1; }
    PREVIOUS=(--previous "$prev")
    export BENCH_PREVIOUS_LABEL="commit $(cat "$REPO/build/bench-against/.rev")"
fi

# shellcheck disable=SC2086
exec "$PYTHON" "$HERE/bench.py" --build "$BUILD" --launch-loop "$LOOP" "${PREVIOUS[@]}" \
    --rounds "${BENCH_ROUNDS:-7}" --iters "${BENCH_ITERS:-200000}" \
    --depth "${BENCH_DEPTH:-10}" \
    --rates "${BENCH_RATES:-50000,100000,200000,400000,800000,0}" \
    --rate-seconds "${BENCH_RATE_SECONDS:-2}" --rate-reps "${BENCH_RATE_REPS:-2}" \
    --out "$HERE/results-latest.md" ${BENCH_ARGS:-}
