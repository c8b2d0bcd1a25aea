#!/usr/bin/env bash
# unwind.sh - the unwinding benchmarks (see bench/unwind.py); needs root.
#   bench/unwind.sh [BUILD_DIR]
set -euo pipefail
build=$(realpath "${1:-build}")
cd "$(dirname "$0")/.."
if [ ! -x "$build/bench/launch_loop" ]; then
    mkdir -p "$build/bench"
    gcc -O2 -g -fno-omit-frame-pointer -o "$build/bench/launch_loop" bench/launch_loop.c \
        -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart -Wl,-rpath,/usr/local/cuda/lib64
fi
make -s "$build/unwind_bench" BUILD="$build" >/dev/null
exec /usr/bin/python3 bench/unwind.py "$build"
