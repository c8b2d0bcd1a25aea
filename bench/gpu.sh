#!/bin/sh
# gpu.sh - benchmarks of the GPU side (no GPU needed), results in bench/results-gpu.md:
#   1. the correlation hand-off per launch: ncclprobe_cupti_marker() bare (no
#      tracer), under ncclprobe, and under bpftrace with the same uprobe (peer);
#   2. the launch <-> GPU join alone (bench/join_bench.c): launches/s, records/s;
#   3. end to end: cupti_app (real libcudart calls, real BPF, the CUPTI test
#      double feeding the real libncclprobe_cupti.so) recorded with GPU joining:
#      daemon CPU per launch, and every launch matched.
# Usage: bench/gpu.sh [BUILD_DIR]   (root)
set -eu
B=${1:-build}
B=$(cd "$B" && pwd)
LIB=$B/libncclprobe_cupti.so
OUT=bench/results-gpu.md
N=2000000
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

marker() { "$B/marker_loop" "$LIB" "$1" | sed 's/.*: \([0-9.]*\) ns.*/\1/'; }

bare=$(marker 20000000)
probed=$("$B/ncclprobe" record --no-gpu -o "$TMP/m" -- "$B/marker_loop" "$LIB" $N 2>/dev/null |
         sed 's/.*: \([0-9.]*\) ns.*/\1/')
bpftrace -e "uprobe:$LIB:ncclprobe_cupti_marker { @n = count(); }" >"$TMP/bt" 2>&1 &
BT=$!
sleep 5
peer=$(marker $N)
kill -INT $BT; wait $BT 2>/dev/null || true

join1=$("$B/join_bench" 1000000 1 8)
join5=$("$B/join_bench" 400000 5 8)

# The same workload recorded with and without the GPU side: the difference
# is what markers, the socket and the join cost the daemon.
e2e_run() { # name, extra options
    /usr/bin/time -f "%U %S %e" -o "$TMP/time-$1" "$B/ncclprobe" record -o "$TMP/$1" $2 \
        --cupti-socket "$TMP/s.sock" -- "$B/progs/cupti_app" --injection "$LIB" \
        --scenario threads --threads 8 --iters 500 >/dev/null 2>&1
}
e2e_run gpu ""
e2e_run nogpu "--no-gpu"
e2e=$(python3 - "$TMP" <<'PY'
import json, sys
tmp = sys.argv[1]
def load(name):
    s = json.load(open(f"{tmp}/{name}/summary.json"))
    usr, sys_, wall = map(float, open(f"{tmp}/time-{name}").read().split())
    return s, usr + sys_
s, cpu = load("gpu")
s0, cpu0 = load("nogpu")
g, n = s["gpu"], s["totals"]["launches"]
n0 = s0["totals"]["launches"]
print(f"- with the GPU side: {n} launches, {g['launches_matched']} matched, "
      f"{g['launches_pending']} pending, {g['records']} GPU records, "
      f"{s['totals']['events_dropped']} events dropped; ncclprobe CPU {cpu:.2f} s")
print(f"- without (--no-gpu): {n0} launches; ncclprobe CPU {cpu0:.2f} s")
print(f"- the GPU side costs the daemon {(cpu - cpu0) / max(n, 1) * 1e6:.1f} us per launch "
      f"({cpu / max(cpu0, 1e-9):.2f}x the CPU of a recording without it; fixed start-up "
      f"costs - symbol tables - are in both)")
PY
)

{
  echo "# GPU side benchmarks"
  echo
  echo "$(date -u +%Y-%m-%d) on $(nproc) cores, $(uname -r); one run, ratios within it."
  echo
  echo "## Correlation hand-off per launch (ncclprobe_cupti_marker)"
  echo
  echo "| | ns per call | vs bare |"
  echo "|---|---|---|"
  echo "| bare (no tracer: the cost when no ncclprobe listens) | $bare | 1.0 |"
  echo "| under ncclprobe (uprobe + 32-byte ring record) | $probed | $(echo "$probed / $bare" | bc -l | xargs printf %.0f) |"
  echo "| under bpftrace (same uprobe, count only) | $peer | $(echo "$peer / $bare" | bc -l | xargs printf %.0f) |"
  echo
  echo "ncclprobe / bpftrace: $(echo "$probed / $peer" | bc -l | xargs printf %.2f)"
  echo
  echo "## The join alone (bench/join_bench.c, 8 threads)"
  echo
  echo "- $join1"
  echo "- $join5"
  echo
  echo "## End to end (cupti_app --scenario threads, 8 threads x 500 launches)"
  echo
  echo "$e2e"
} >"$OUT"
cat "$OUT"
