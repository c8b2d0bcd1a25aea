#!/usr/bin/env bash
# bench/http.sh [BUILD] - what scraping the daemon's HTTP endpoints costs while it traces
# (issue 23): launch_loop at a fixed rate under `ncclprobe daemon --http-listen`, rounds
# without scrapes and rounds with a Prometheus-style GET /metrics plus a
# GET /pprof/launches?seconds=1 every second, interleaved in one run. Reports the daemon's
# CPU (% of a core, and per launch), launches counted and dropped, and the ratios. See
# bench/http_bench.py; writes bench/results-http.md.
#
# Environment: CUDA_HOME (/usr/local/cuda), CC (gcc), BENCH_HTTP_ROUNDS (3),
# BENCH_HTTP_SECONDS (10), BENCH_HTTP_RATE (50000), BENCH_HTTP_OUT (bench/results-http.md).
set -euo pipefail

BUILD=${1:-build}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CC=${CC:-gcc}
[ "$(id -u)" = 0 ] || { echo "bench/http.sh: needs root" >&2; exit 1; }
[ -x "$BUILD/ncclprobe" ] || { echo "bench/http.sh: $BUILD/ncclprobe not built" >&2; exit 1; }
BUILD_ABS=$(cd "$BUILD" && pwd)
# shellcheck disable=SC1091
. "$HERE/lib.sh"
LOOP=$(launch_loop_build "$BUILD_ABS")
exec /usr/bin/python3 "$HERE/http_bench.py" --build "$BUILD_ABS" --launch-loop "$LOOP" \
    --rounds "${BENCH_HTTP_ROUNDS:-3}" --seconds "${BENCH_HTTP_SECONDS:-10}" \
    --rate "${BENCH_HTTP_RATE:-50000}" --out "${BENCH_HTTP_OUT:-$HERE/results-http.md}"
