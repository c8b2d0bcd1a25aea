#!/bin/sh
# nccl.sh - cost of NCCL tracing, results in bench/results-nccl.md.
# bench/nccl_loop drives libfakenccl.so (NCCL's API and internal launch
# path with a layout of its own, no GPU), with 20 us of CPU work per
# iteration as a real step has between collectives:
#   single  1 ncclAllReduce = 1 API call + 1 ncclLaunchKernel (1 task)
#   group8  ncclGroupStart, 8 ncclAllReduce, ncclGroupEnd = 10 API calls +
#           1 launch whose plan holds 8 tasks
# Runs, each 3 times (median):
#   bare                      no tracer
#   ncclprobe                 API + launch probes, stacks, plans read (DWARF layout)
#   ncclprobe, stripped lib   the same library without DWARF: no plans, no comm reads
#   ncclprobe --nccl-flows    the same plus the flow probes (ncclProxySaveOp, SaveProxy
#                             .isra, uploadProxyOps, ncclLaunchKernel: the double posts 16
#                             ops per 1 MiB AllReduce, each with its proxied peers, as NCCL
#                             does for network peers)
#   bpftrace                  uprobes on the same functions, user stacks counted
# Reported: time added per iteration, and (kernel.bpf_stats_enabled) the
# BPF program's own time per iteration.
# Usage: bench/nccl.sh [BUILD_DIR]   (root)
set -eu
B=${1:-build}
B=$(cd "$B" && pwd)
LIB=$B/progs/libfakenccl.so
OUT=bench/results-nccl.md
N=${NCCL_BENCH_N:-40000}
WORK=20000
TMP=$(mktemp -d)
STATS_WAS=$(sysctl -n kernel.bpf_stats_enabled)
trap 'rm -rf "$TMP"; sysctl -qw kernel.bpf_stats_enabled=$STATS_WAS' EXIT
mkdir -p "$TMP/stripped"
objcopy --strip-debug "$LIB" "$TMP/stripped/libfakenccl.so"
sysctl -qw kernel.bpf_stats_enabled=1

ns() { sed -n 's/.*: \([0-9.]*\) ns.*/\1/p'; }
median() { sort -n | sed -n 2p; }

# The last run_time_ns of ncclprobe's entry program while it runs (plus the
# flow programs' run time, all np_flow_* together, when loaded).
prog_ns() { bpftool prog show name "$1" 2>/dev/null | sed -n 's/.*run_time_ns \([0-9]*\).*/\1/p'; }
flow_ns() {
    bpftool prog show 2>/dev/null | awk '/ name np_flow_/ {
        for (i = 1; i < NF; i++) if ($i == "run_time_ns") s += $(i + 1) } END { print s + 0 }'
}
watch_bpf() {
    while sleep 0.2; do
        e=$(prog_ns np_entry_multi)
        [ -n "$e" ] || e=$(prog_ns np_entry)
        [ -n "$e" ] && echo "$e $(flow_ns)"
    done >>"$TMP/bpf" 2>/dev/null
}

bare() { "$B/nccl_loop" "$LIB" "$1" "$N" $WORK | ns; }
probed() { # mode, lib [flags]: prints "ns_per_iteration bpf_ns_per_iteration flow_bpf_ns"
    : >"$TMP/bpf"
    watch_bpf &
    W=$!
    rm -rf "$TMP/rec"
    t=$("$B/ncclprobe" record --no-gpu ${3:-} -o "$TMP/rec" -- "$B/nccl_loop" "$2" "$1" "$N" \
        $WORK 2>/dev/null | ns)
    kill $W 2>/dev/null || true
    wait $W 2>/dev/null || true
    bpf=$(tail -n 1 "$TMP/bpf" | awk -v n="$N" '{ printf "%.0f %.0f", $1 / n, $2 / n }')
    echo "$t $bpf"
}
peer() { # mode
    bpftrace -e "uprobe:$LIB:ncclAllReduce,uprobe:$LIB:ncclGroupStart,uprobe:$LIB:ncclGroupEnd,
                 uprobe:$LIB:_Z16ncclLaunchKernelP8ncclCommP14ncclKernelPlan
                 { @[ustack] = count(); }" >"$TMP/bt" 2>&1 &
    BT=$!
    sleep 5
    "$B/nccl_loop" "$LIB" "$1" "$N" $WORK | ns
    kill -INT $BT
    wait $BT 2>/dev/null || true
}
three() { for i in 1 2 3; do "$@"; done; }

{
    echo "# NCCL tracing benchmarks"
    echo
    echo "$(date -u +%Y-%m-%d) on $(nproc) cores, $(uname -r); $N iterations with $WORK ns of"
    echo "CPU work each; medians of 3 runs; ratios within this run."
    for mode in single group8; do
        b=$(three bare $mode | median)
        three probed $mode "$LIB" >"$TMP/p"
        three probed $mode "$TMP/stripped/libfakenccl.so" >"$TMP/s"
        three probed $mode "$LIB" --nccl-flows >"$TMP/f"
        f=$(cut -d' ' -f1 "$TMP/f" | median); fb=$(cut -d' ' -f3 "$TMP/f" | median)
        p=$(cut -d' ' -f1 "$TMP/p" | median); pb=$(cut -d' ' -f2 "$TMP/p" | median)
        s=$(cut -d' ' -f1 "$TMP/s" | median); sb=$(cut -d' ' -f2 "$TMP/s" | median)
        t=$(three peer $mode | median)
        echo
        echo "## $mode"
        echo
        echo "| | ns per iteration | added vs bare | BPF program ns per iteration |"
        echo "|---|---|---|---|"
        echo "| bare | $b | 0 | |"
        echo "| ncclprobe (plans read) | $p | $(echo "$p - $b" | bc | xargs printf %.0f) | $pb |"
        echo "| ncclprobe, stripped library (no plans) | $s | $(echo "$s - $b" | bc | xargs printf %.0f) | $sb |"
        echo "| ncclprobe --nccl-flows | $f | $(echo "$f - $b" | bc | xargs printf %.0f) | $pb + flows $fb |"
        echo "| bpftrace (same uprobes, ustack count) | $t | $(echo "$t - $b" | bc | xargs printf %.0f) | |"
        echo
        echo "Added time, ncclprobe / bpftrace: $(echo "($p - $b) / ($t - $b)" | bc -l | xargs printf %.2f);"
        echo "reading the plan costs the BPF program $(echo "$pb - $sb" | bc | xargs printf %.0f) ns per launch."
        echo "--nccl-flows adds $(echo "$f - $p" | bc | xargs printf %.0f) ns per iteration to ncclprobe's"
        echo "$(echo "$p - $b" | bc | xargs printf %.0f) ns ($(echo "100 * ($f - $p) / ($p - $b)" | bc -l | xargs printf %.0f)%); its BPF programs $fb ns per iteration."
    done
} >"$OUT"
cat "$OUT"
