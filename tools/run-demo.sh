#!/usr/bin/env bash
# run-demo.sh - records the demo workload (tools/demo) with ncclprobe and
# shows where the outputs are. Called by `make demo`; needs root for BPF.
#   tools/run-demo.sh [BUILD_DIR]
set -euo pipefail

build=${1:-build}
out=${NCCLPROBE_DEMO_OUT:-$build/demo-recording}

if [ "$(id -u)" != 0 ]; then
    echo "make demo needs root (BPF uprobes): sudo make demo" >&2
    exit 1
fi
rm -rf "$out"
"$build/ncclprobe" record -o "$out" -- "$build/demo/demo_server" --requests 200 --threads 4

echo
echo "Recording: $out"
echo "  stacks.ext.folded   one line per launch (timestamp comm pid tid cpu stack)"
echo "  launches.folded     flamegraph input: flamegraph.pl $out/launches.folded > demo.svg"
echo "  launches.jsonl      every launch with its grid, block, stream and kernel"
echo "  summary.json        probes, counts, drops"
echo
echo "Top launch stacks:"
awk '{print $NF "\t" $0}' "$out/launches.folded" | sort -nr | cut -f2- | head -5 | sed 's/^/  /'
