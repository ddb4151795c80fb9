#!/usr/bin/env bash
# allocmux's benchmarks: builds the release binaries, then runs
# scripts/bench.py, which measures every workload (compare against plain
# runs, the shim's overhead, heaptrack, callgrind, Counting) and writes
# BENCHMARKS.md and the charts in scripts/results/bench/.
#
#   bash scripts/bench.sh                   # the full run (about 6 min on the shared 2-core VM)
#   bash scripts/bench.sh --quick           # 2 rounds, 1/8 sizes: a few minutes
#   bash scripts/bench.sh --only overhead --rounds 15 --workloads larson,edit-distance
#   bash scripts/bench.sh --smoke --bin-dir DIR --out FILE --svg-dir DIR   # the test's: no build
#
# Needs Debian's libjemalloc2, heaptrack and valgrind; libmimalloc2.0 for the
# plain mimalloc runs (apt-get install libjemalloc2 libmimalloc2.0 heaptrack valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
build=1
for arg in "$@"; do
    case "$arg" in
        --smoke|--bin-dir|--bin-dir=*|-h|--help) build=0 ;;
    esac
done
if [ "$build" = 1 ]; then
    cargo build --release -q -p allocmux-shim -p allocmux-cli -p allocmux-workloads
    cargo build --release -q -p allocmux-cli --example direct_shims
fi
ALLOCMUX_BENCH_SH=1 exec python3 scripts/bench.py "$@"
