#!/usr/bin/env bash
# bench/reader_threads.sh [BUILD] - records handled per second against the reader's worker
# threads (--reader-threads): P CPython processes launch flat out at Python depth D while the
# attached tracer is stopped, then the tracer works the burst off; its records handled per
# second and the cores its threads used, once per thread count in interleaved rounds. See
# bench/reader_threads.py.
#
# Environment: BENCH_RT_THREADS (0,1,2), BENCH_RT_PROCS (2), BENCH_RT_PY_THREADS (1),
# BENCH_RT_DEPTH (60), BENCH_RT_SECONDS (2), BENCH_RT_ROUNDS (3), BENCH_RT_PYTHON (default:
# newest pyenv 3.12), BENCH_RT_OUT (bench/results-reader-threads.md).
set -euo pipefail

BUILD=${1:-build}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ "$(id -u)" = 0 ] || { echo "bench/reader_threads.sh: needs root" >&2; exit 1; }
[ -x "$BUILD/ncclprobe" ] || { echo "bench/reader_threads.sh: $BUILD/ncclprobe not built" >&2; exit 1; }
PYARG=()
[ -n "${BENCH_RT_PYTHON:-}" ] && PYARG=(--python "$BENCH_RT_PYTHON")
exec /usr/bin/python3 "$HERE/reader_threads.py" --build "$BUILD" "${PYARG[@]}" \
    --threads-list "${BENCH_RT_THREADS:-0,1,2}" --procs "${BENCH_RT_PROCS:-2}" \
    --py-threads "${BENCH_RT_PY_THREADS:-1}" --depth "${BENCH_RT_DEPTH:-60}" \
    --seconds "${BENCH_RT_SECONDS:-2}" --rounds "${BENCH_RT_ROUNDS:-3}" \
    --out "${BENCH_RT_OUT:-$HERE/results-reader-threads.md}"
