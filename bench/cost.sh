#!/usr/bin/env bash
# bench/cost.sh [BUILD] - what the launching thread pays per CUDA launch: added latency and
# BPF program run time (kernel.bpf_stats_enabled), per workload, against no tracer, a bare
# bpftrace uprobe, ncclprobe record --pid of BUILD and (BENCH_AGAINST=REV) of another
# revision, in one run of interleaved rounds. See bench/README.md, "Per-launch cost".
#
# Builds BUILD/bench/launch_loop (as bench/run.sh does), then runs bench/cost.py, which
# prints the results and writes them to bench/results-cost.md. Needs root, bpftrace,
# bpftool, the CUDA toolkit's libcudart.so.13 and pyenv's CPython 3.12. About 4-5 minutes
# on a 2-core machine with the defaults.
#
# Environment overrides: CUDA_HOME (/usr/local/cuda), BENCH_AGAINST (a git revision, e.g.
# HEAD~1: built in build/bench-against and measured beside BUILD, as "previous"),
# BENCH_COST_ROUNDS (7), BENCH_COST_C_ITERS (50000 timed launches; BENCH_COST_C_WARMUP
# 5000 before), BENCH_COST_PY_ITERS (20000; BENCH_COST_PY_WARMUP 2000), BENCH_COST_CONFIGS
# (c-main,c-worker,py-10,py-60,py-200,py-worker-60), BENCH_COST_PYTHON (default: the
# newest /root/.pyenv/versions/3.12.*), BENCH_COST_RING_MB (256: --ring-buffer-mb of both
# ncclprobe builds, room for a whole run; 0: ncclprobe's default), BENCH_COST_NP_ARGS (more
# ncclprobe options, both builds), BENCH_COST_STATS (fd: BPF run-time statistics through
# bpf(BPF_ENABLE_STATS), off again when the harness exits, however it exits; sysctl:
# kernel.bpf_stats_enabled=1, the previous value restored at exit), BENCH_COST_NOTE (a
# line for the report's header), BENCH_COST_ARGS (more cost.py options, e.g. --pin 0,1:
# the workload on CPU 0, the tracer on CPU 1), BENCH_COST_OUT (bench/results-cost.md).
set -euo pipefail

BUILD=${1:-build}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CC=${CC:-gcc}
PYTHON=/usr/bin/python3

[ "$(id -u)" = 0 ] || { echo "bench/cost.sh: needs root (BPF, uprobes, bpf_stats)" >&2; exit 1; }
[ -x "$BUILD/ncclprobe" ] || { echo "bench/cost.sh: $BUILD/ncclprobe not built (run make)" >&2; exit 1; }
[ -e "$CUDA_HOME/lib64/libcudart.so.13" ] ||
    { echo "bench/cost.sh: no $CUDA_HOME/lib64/libcudart.so.13" >&2; exit 1; }

# shellcheck disable=SC1091
. "$HERE/lib.sh"
BUILD_ABS=$(cd "$BUILD" && pwd)
LOOP=$(launch_loop_build "$BUILD_ABS")
LIBCUDA=()
[ -e "$BUILD_ABS/progs/libcuda.so.1" ] && LIBCUDA=(--libcuda "$BUILD_ABS/progs/libcuda.so.1")

PREVIOUS=()
if [ -n "${BENCH_AGAINST:-}" ]; then
    echo "bench/cost.sh: building $BENCH_AGAINST in build/bench-against" >&2
    prev=$(against_build "$REPO" "$BENCH_AGAINST") ||
        { echo "bench/cost.sh: could not build $BENCH_AGAINST" >&2; exit 1; }
    AGAINST_REV=$(cat "$REPO/build/bench-against/.rev")
    PREVIOUS=(--previous "$prev")
    export BENCH_PREVIOUS_LABEL="commit $AGAINST_REV"
fi
PYARG=()
[ -n "${BENCH_COST_PYTHON:-}" ] && PYARG=(--python "$BENCH_COST_PYTHON")

# shellcheck disable=SC2086
exec "$PYTHON" "$HERE/cost.py" --build "$BUILD" --launch-loop "$LOOP" "${PREVIOUS[@]}" \
    "${PYARG[@]}" "${LIBCUDA[@]}" \
    --rounds "${BENCH_COST_ROUNDS:-7}" \
    --c-iters "${BENCH_COST_C_ITERS:-50000}" --c-warmup "${BENCH_COST_C_WARMUP:-5000}" \
    --py-iters "${BENCH_COST_PY_ITERS:-20000}" --py-warmup "${BENCH_COST_PY_WARMUP:-2000}" \
    --configs "${BENCH_COST_CONFIGS:-c-main,c-worker,py-10,py-60,py-200,py-worker-60}" \
    --stats "${BENCH_COST_STATS:-fd}" --ring-mb "${BENCH_COST_RING_MB:-256}" --np-args="${BENCH_COST_NP_ARGS:-}" \
    --out "${BENCH_COST_OUT:-$HERE/results-cost.md}" ${BENCH_COST_ARGS:-}
