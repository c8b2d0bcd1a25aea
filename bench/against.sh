# shellcheck shell=bash
# bench/against.sh - sourced by the benchmarks' entry points: BENCH_AGAINST=REV builds that
# git revision in build/bench-against (a detached worktree, rebuilt only when REV changes),
# as bench/run.sh does.
#
#   against_build REPO REV    prints the path of REV's ncclprobe binary (the short hash
#                             of REV is then in build/bench-against/.rev)
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
