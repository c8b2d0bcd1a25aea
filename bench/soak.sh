#!/usr/bin/env bash
# bench/soak.sh [BUILD] - the daemon always on over 100 million launches from processes that
# come and go (issue 24; bench/soak.py says what is measured and checked).
#
# Builds BUILD/bench/launch_loop (bench/lib.sh), then runs bench/soak.py and appends its
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

# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
BUILD_ABS=$(cd "$BUILD" && pwd)
LOOP=$(launch_loop_build "$BUILD_ABS")

# shellcheck disable=SC2086
exec /usr/bin/python3 "$HERE/soak.py" --build "$BUILD" --launch-loop "$LOOP" \
    --launches "${SOAK_LAUNCHES:-100000000}" --per-process "${SOAK_PER_PROCESS:-500000}" \
    --concurrent "${SOAK_CONCURRENT:-2}" --rate "${SOAK_RATE:-25000}" --interval "${SOAK_INTERVAL:-30s}" \
    --out "$HERE/results-soak.md" ${SOAK_ARGS:-}
