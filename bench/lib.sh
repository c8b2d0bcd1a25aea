# shellcheck shell=bash
# bench/lib.sh - what the benchmarks' entry points (run.sh, cost.sh) share, sourced:
#
#   launch_loop_build BUILD_ABS   builds BUILD_ABS/bench/launch_loop when missing or older than
#                                 its source, and prints its path. RUNPATH: BUILD_ABS/progs first
#                                 when it holds the toolkit's stub libcuda.so.1 (as the test
#                                 workloads do), so every launch fails fast even where a driver
#                                 and GPU exist; then the toolkit's lib64 for the real
#                                 libcudart.so.13. Uses CUDA_HOME and CC.
#   against_build REPO REV        BENCH_AGAINST: builds git revision REV in build/bench-against
#                                 (a detached worktree, rebuilt only when REV changes) and
#                                 prints the path of its ncclprobe binary (the short hash of REV
#                                 is then in build/bench-against/.rev).
launch_loop_build() {
    local build=$1 here loop rpath=()
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    [ -e "$build/progs/libcuda.so.1" ] && rpath+=("-Wl,-rpath,$build/progs")
    rpath+=("-Wl,-rpath,$CUDA_HOME/lib64")
    mkdir -p "$build/bench"
    loop="$build/bench/launch_loop"
    if [ ! -x "$loop" ] || [ "$here/launch_loop.c" -nt "$loop" ]; then
        "$CC" -std=c11 -O2 -g -fno-omit-frame-pointer -Wall -Wextra -Werror -pthread \
            -I"$CUDA_HOME/include" "$here/launch_loop.c" -o "$loop" \
            -L"$CUDA_HOME/lib64" -lcudart "${rpath[@]}" || return 1
    fi
    echo "$loop"
}

against_build() {
    local repo=$1 rev against
    against="$repo/build/bench-against"
    rev=$(git -C "$repo" rev-parse --short "$2^{commit}") || return 1
    if [ "$(cat "$against/.rev" 2>/dev/null)" != "$rev" ] || [ ! -x "$against/build/ncclprobe" ]; then
        rm -rf "$against" && git -C "$repo" worktree prune
        git -C "$repo" worktree add --detach "$against" "$rev" >/dev/null 2>&1 || return 1
        make -C "$against" -j"$(nproc)" BUILD=build build/ncclprobe >/dev/null || return 1
        echo "$rev" > "$against/.rev"
    fi
    echo "$against/build/ncclprobe"
}
