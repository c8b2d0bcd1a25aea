#!/usr/bin/env bash
# bench/merge.sh [BUILD] - `ncclprobe merge` vs the established Python merge
# algorithm on generated inputs of 10k, 100k and 1M launches (see
# bench/merge_bench.py). Needs BUILD/ncclprobe (default build) and
# /usr/bin/time; no root, no GPU. Writes bench/results-merge.md.
# Generating the 1M inputs takes a few minutes the first time (they are kept
# in BUILD/bench/merge-data, about 1 GB); the reference is given 300 s per
# size (MERGE_BENCH_ARGS="--reference-timeout N" to change).
set -euo pipefail

BUILD=${1:-build}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

[ -x "$BUILD/ncclprobe" ] || { echo "bench/merge.sh: $BUILD/ncclprobe not built (run make)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench/merge.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }

# shellcheck disable=SC2086
exec /usr/bin/python3 "$HERE/merge_bench.py" --build "$BUILD" --out "$HERE/results-merge.md" \
    ${MERGE_BENCH_ARGS:-}
