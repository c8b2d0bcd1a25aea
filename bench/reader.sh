#!/usr/bin/env bash
# bench/reader.sh [BUILD] - how fast the reader reads Python-sized records: 4 CPython threads
# launching flat out (bench/py_threads_flat.py), attached with `ncclprobe record --pid`; drops,
# records read per second and per second of the tracer's CPU time, for BUILD and
# (BENCH_AGAINST=REV) another revision, in one run of interleaved rounds. See bench/reader.py.
#
# Environment: BENCH_AGAINST (a git revision: built in build/bench-against, measured beside
# BUILD), BENCH_READER_ROUNDS (3), BENCH_READER_SECONDS (5), BENCH_READER_THREADS (4),
# BENCH_READER_DEPTH (20), BENCH_READER_PYTHON (default: newest pyenv 3.12),
# BENCH_READER_NP_ARGS (more ncclprobe options), BENCH_READER_ARGS (more reader.py options,
# e.g. --pin 0,1: the workload on CPU 0, the tracer on CPU 1), BENCH_READER_OUT
# (bench/results-reader.md).
set -euo pipefail

BUILD=${1:-build}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "bench/reader.sh: needs root" >&2; exit 1; }
[ -x "$BUILD/ncclprobe" ] || { echo "bench/reader.sh: $BUILD/ncclprobe not built" >&2; exit 1; }
# shellcheck disable=SC1091
. "$HERE/lib.sh"
PREVIOUS=()
if [ -n "${BENCH_AGAINST:-}" ]; then
    prev=$(against_build "$REPO" "$BENCH_AGAINST") ||
        { echo "bench/reader.sh: could not build $BENCH_AGAINST" >&2; exit 1; }
    PREVIOUS=(--previous "$prev")
    export BENCH_PREVIOUS_LABEL="commit $(cat "$REPO/build/bench-against/.rev")"
fi
PYARG=()
[ -n "${BENCH_READER_PYTHON:-}" ] && PYARG=(--python "$BENCH_READER_PYTHON")
exec /usr/bin/python3 "$HERE/reader.py" --build "$BUILD" "${PREVIOUS[@]}" "${PYARG[@]}" \
    --rounds "${BENCH_READER_ROUNDS:-3}" --seconds "${BENCH_READER_SECONDS:-5}" \
    --threads "${BENCH_READER_THREADS:-4}" --depth "${BENCH_READER_DEPTH:-20}" \
    --np-args="${BENCH_READER_NP_ARGS:-}" \
    --out "${BENCH_READER_OUT:-$HERE/results-reader.md}" ${BENCH_READER_ARGS:-}
