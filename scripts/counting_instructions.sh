#!/bin/bash
# Instructions per allocation/free pair of 64 bytes through each allocator
# of profiler/benches/counting.rs, counted by callgrind: the difference
# between runs of 2N and N pairs, divided by N, so start-up cancels out.
# Usage: bash scripts/counting_instructions.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200000}
bin=$(cargo bench -p allocmux --bench counting --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "counting" and m["executable"]:
        print(m["executable"])')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ir() {
    valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$bin" --pairs "$1" "$2" >/dev/null 2>"$tmp/err"
    sed -n 's/^summary: //p' "$tmp/out"
}
printf '%-22s %s\n' allocator "instructions per pair"
for a in system 'counting<system>' 'naive<system>' jemalloc 'counting<jemalloc>' 'naive<jemalloc>'; do
    one=$(ir "$a" "$n")
    two=$(ir "$a" $((2 * n)))
    printf '%-22s %s\n' "$a" "$(python3 -c "print(f'{($two - $one) / $n:.1f}')")"
done
