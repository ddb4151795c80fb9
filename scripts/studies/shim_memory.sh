#!/usr/bin/env bash
# Frozen study: it decided to ship one shim library with all three
# allocators rather than one per backend (results/shim-memory.md); kept as
# it was run, not maintained.
#
# What the shim costs a process in memory, per backend: RSS and private dirty
# memory (/proc/self/smaps_rollup) of a program that allocates once, without
# the shim and under each backend. Usage: bash scripts/studies/shim_memory.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/probe.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
    free(malloc(100));
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "Rss:", 4) || !strncmp(line, "Private_Dirty:", 14)) {
            line[strcspn(line, "\n")] = 0;
            printf("  %s", line);
        }
    puts("");
    return 0;
}
C
cc -O2 "$tmp/probe.c" -o "$tmp/probe"
(cd "$root" && cargo build --release -q -p allocmux-shim)
shim="$root/target/release/liballocmux_shim.so"
# A freshly linked file's pages are dirty in the page cache until written
# back, and would count as the process's private dirty memory.
sync
printf '%-14s' "no shim"; "$tmp/probe"
for a in system jemalloc mimalloc; do
    printf '%-14s' "$a"
    LD_PRELOAD="$shim" ALLOCMUX_ALLOCATOR=$a ALLOCMUX_OUTPUT="$tmp/%p.prof" "$tmp/probe"
done
