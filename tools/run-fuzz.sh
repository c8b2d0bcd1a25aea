#!/usr/bin/env bash
# run-fuzz.sh BUILD SECONDS NAME... - runs each fuzz harness (fuzz/fuzz.mk)
# for SECONDS on a scratch copy of its seed corpus, and writes what each did
# (executions, executions per second, corpus size, crashes) to BUILD/results.md.
# FUZZ_SEED=N: libFuzzer's random seed (default: a new one each run).
# Exit status 1 when any harness found a crash, a leak, a timeout or an
# out-of-memory; its reproducer is kept in BUILD/artifacts/NAME/.
set -uo pipefail
build=$1 seconds=$2
shift 2
results=$build/results.md
{
    echo "| harness | seconds | executions | exec/s | corpus | result |"
    echo "|---|---:|---:|---:|---:|---|"
} > "$results"
failed=0
for name in "$@"; do
    bin=$build/fuzz/${name}_fuzz
    work=$build/corpus/$name artifacts=$build/artifacts/$name
    mkdir -p "$work" "$artifacts"
    log=$build/$name.log
    # -close_fd_mask=1: the code under test may print; its stderr stays (reports).
    "$bin" ${FUZZ_SEED:+-seed=$FUZZ_SEED} -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -max_len=262144 \
        -print_final_stats=1 -close_fd_mask=1 -artifact_prefix="$artifacts/" \
        "$work" "fuzz/corpus/$name" > "$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    files=$(find "$work" -type f | wc -l)
    if [ $rc -eq 0 ]; then
        result=clean
    else
        result="FAILED (rc $rc; $log, $artifacts)"
        failed=1
        grep -E 'ERROR|SUMMARY|contract broken' "$log" | head -5 >&2
    fi
    echo "| $name | $seconds | ${execs:-?} | ${rate:-?} | $files | $result |" >> "$results"
    echo "fuzz $name: ${execs:-?} executions in ${seconds}s, $result"
done
cat "$results"
exit $failed
