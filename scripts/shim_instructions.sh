#!/bin/bash
# Instructions per malloc/free pair of the churn (scripts/churn.c, one
# thread, 64-byte blocks) under the shim's universal library, per stack
# mode, counted by callgrind: the difference between runs of 2N and N
# pairs, divided by N, so start-up cancels out. Every pair is a temporary
# allocation, so exact stacks count one per pair.
# Usage: bash scripts/shim_instructions.sh [N] [SHIM.so]
# (SHIM.so defaults to this tree's release build, built first; give another
# build's library to compare two versions side by side.)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000}
shim=${2:-}
if [ -z "$shim" ]; then
    cargo build --release -q -p allocmux-shim
    shim=$PWD/target/release/liballocmux_shim.so
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -g -pthread scripts/churn.c -o "$tmp/churn"
ir() {
    ALLOCMUX_STACKS=$1 ALLOCMUX_OUTPUT="$tmp/p.%p" LD_PRELOAD="$shim" \
        valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$tmp/churn" 1 "$2" >/dev/null 2>"$tmp/err"
    sed -n 's/^summary: //p' "$tmp/out"
}
printf '%-8s %s\n' stacks "instructions per pair"
for mode in off sample exact; do
    one=$(ir "$mode" "$n")
    two=$(ir "$mode" $((2 * n)))
    printf '%-8s %s\n' "$mode" "$(python3 -c "print(f'{($two - $one) / $n:.1f}')")"
done
