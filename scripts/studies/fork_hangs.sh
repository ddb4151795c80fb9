#!/usr/bin/env bash
# Frozen study: it checked, over thousands of runs under load, that the
# shim's fork handling does not hang where glibc alone does not
# (results/fork-hangs.md); CI runs the same fixtures a few times
# (alloc-shim/tests/fork_safety.rs). Kept as it was run, not maintained.
#
# fork from a signal handler that interrupted the program's own fork (the
# mallocfork fixture, in the spirit of glibc's tst-mallocfork), many times
# in a row while stress-ng keeps both cores busy: under the shim with each
# backend, stacks off, sampled and exact, with a profile written and with
# the /debug/pprof endpoint served; and with Debian's libjemalloc and
# libmimalloc preloaded alone, for reference. A run still going after 20 s
# is a hang; a configuration stops at its fifth. Usage:
# FORKS=N bash scripts/studies/fork_hangs.sh [RUNS] [BACKEND...]
# (defaults: 1000 runs of `mallocfork 100`; mimalloc jemalloc system).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
runs=${1:-1000}
forks=${FORKS:-100}
shift || true
backends=("$@")
[ $# -gt 0 ] || backends=(mimalloc jemalloc system)
tmp=$(mktemp -d)
stress_pid=""
trap '[ -n "$stress_pid" ] && kill "$stress_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/mallocfork" "$root/alloc-shim/tests/fixtures/mallocfork.c"
(cd "$root" && cargo build --release -q -p allocmux-shim)
shim="$root/target/release/liballocmux_shim.so"

stress-ng --cpu 2 --timeout 0 >/dev/null 2>&1 &
stress_pid=$!

# hangs LABEL COMMAND...: runs the command RUNS times (or until its fifth
# hang), prints the hangs.
hangs() {
    local label=$1 hung=0 failed=0 i
    shift
    for ((i = 0; i < runs && hung < 5; i++)); do
        rm -rf "$tmp/out" && mkdir "$tmp/out"
        set +e
        (timeout -s KILL 20 "$@" >/dev/null 2>&1) 2>/dev/null
        local rc=$?
        set -e
        if [ $rc = 137 ]; then
            hung=$((hung + 1))
        elif [ $rc != 0 ]; then
            failed=$((failed + 1))
        fi
    done
    printf '| %s | %d | %d hung, %d failed |\n' "$label" "$i" "$hung" "$failed"
}

echo "| configuration | runs of \`mallocfork $forks\` | result |"
echo "|---|---|---|"
hangs "glibc alone" "$tmp/mallocfork" "$forks"
for lib in /usr/lib/x86_64-linux-gnu/libmimalloc.so.2 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2; do
    [ -e "$lib" ] && hangs "$(basename "$lib") alone" env LD_PRELOAD="$lib" "$tmp/mallocfork" "$forks"
done
for backend in "${backends[@]}"; do
    for stacks in off sample exact; do
        hangs "shim, $backend, stacks $stacks, profile written" \
            env LD_PRELOAD="$shim" ALLOCMUX_ALLOCATOR="$backend" ALLOCMUX_STACKS="$stacks" \
            ALLOCMUX_OUTPUT="$tmp/out/%p.prof" "$tmp/mallocfork" "$forks"
        hangs "shim, $backend, stacks $stacks, endpoint served" \
            env LD_PRELOAD="$shim" ALLOCMUX_ALLOCATOR="$backend" ALLOCMUX_STACKS="$stacks" \
            ALLOCMUX_HTTP=127.0.0.1:0 "$tmp/mallocfork" "$forks"
    done
done
