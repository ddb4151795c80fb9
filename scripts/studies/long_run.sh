#!/usr/bin/env bash
# Frozen study: it showed that exact mode's memory and profile grow with
# distinct stacks, not with calls, up to a billion allocations
# (results/long-run.md); CI keeps the bound at smaller sizes
# (alloc-shim/tests/long_runs.rs). Kept as it was run, not maintained.
#
# Long runs in exact-stack mode: the shim's memory and the profile must grow
# with distinct call stacks and live blocks, not with calls. Runs
# alloc-shim/tests/fixtures/long_run.c (8 call sites, at most 64 blocks
# live) for N/1000, N/100, N/10 and N allocations under the shim with
# ALLOCMUX_STACKS=exact, and once bare, and prints per run the wall time,
# the process's peak RSS (VmHWM, read by the program itself at its end),
# the profile's size, its size without the memory timeline (the `tl`
# lines, at most 2,048 of them) and its number of stacks.
#
# Usage: bash scripts/studies/long_run.sh [N [BACKEND]]   (default 1000000000 system)
#        SHIM=/path/to/liballocmux_shim.so bash scripts/studies/long_run.sh ...
# (without SHIM, the release shim is built). The CI test with the same
# fixture is alloc-shim/tests/long_runs.rs.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
n=${1:-1000000000}
backend=${2:-system}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -fno-optimize-sibling-calls "$root/alloc-shim/tests/fixtures/long_run.c" -o "$tmp/long_run"
if [ -z "${SHIM:-}" ]; then
    (cd "$root" && cargo build --release -q -p allocmux-shim)
    SHIM="$root/target/release/liballocmux_shim.so"
fi

figure() { sed -n "s/.*$1 \([0-9]*\) kB.*/\1/p"; }

echo "long_run under the shim ($backend, ALLOCMUX_STACKS=exact), $(nproc) CPUs, $(date -u +%F)"
printf '%14s %10s %12s %12s %14s %12s %8s\n' allocations wall_s VmHWM_kB VmRSS_kB profile_bytes without_tl stacks
bare=$("$tmp/long_run" $((n / 1000)))
printf '%14s %10s %12s %12s %14s %12s %8s\n' "$((n / 1000)) bare" - \
    "$(echo "$bare" | figure VmHWM)" "$(echo "$bare" | figure VmRSS)" - - -
for count in $((n / 1000)) $((n / 100)) $((n / 10)) "$n"; do
    prof="$tmp/run-$count.prof"
    start=$(date +%s.%N)
    line=$(LD_PRELOAD="$SHIM" ALLOCMUX_ALLOCATOR="$backend" ALLOCMUX_STACKS=exact \
        ALLOCMUX_OUTPUT="$prof" "$tmp/long_run" "$count")
    end=$(date +%s.%N)
    printf '%14s %10.1f %12s %12s %14s %12s %8s\n' "$count" "$(awk "BEGIN { print $end - $start }")" \
        "$(echo "$line" | figure VmHWM)" "$(echo "$line" | figure VmRSS)" \
        "$(stat -c %s "$prof")" "$(grep -v '^tl ' "$prof" | wc -c)" "$(grep -c '^stack ' "$prof")"
done
