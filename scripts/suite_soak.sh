#!/usr/bin/env bash
# suite_soak.sh - the test suite run again and again, on an idle machine and
# with every core kept busy, to show that no verdict depends on the
# machine's speed or on scheduling.
#
# Usage:
#   bash scripts/suite_soak.sh [--runs N] [--idle-only | --loaded-only]
#   bash scripts/suite_soak.sh --runs 50 --binary allocmux-shim:integration [-- FILTER...]
#
# Without --binary: builds the suite once (`cargo test --workspace --locked
# --no-run`), then runs the README's test command, `cargo test --workspace
# --locked`, N times on the idle machine and N times while
# `stress-ng --cpu $(nproc)` keeps every core busy (default N: 5).
# With --binary PACKAGE:TEST: runs that one integration-test binary (and
# the libtest FILTER arguments after `--`) N times each way instead.
#
# Every run's output is kept in the log directory (default
# target/soak/DATE); each failing run's name is printed, then a last line
# `soak: N passed, N failed`. Exit status 0 when no run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=5
idle=1
loaded=1
binary=""
filter=()
logs="target/soak/$(date +%Y%m%d-%H%M%S)"
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs="$2"; shift 2 ;;
        --idle-only) loaded=0; shift ;;
        --loaded-only) idle=0; shift ;;
        --binary) binary="$2"; shift 2 ;;
        --logs) logs="$2"; shift 2 ;;
        --) shift; filter=("$@"); break ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "suite_soak.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$runs" in
    ''|*[!0-9]*) echo "suite_soak.sh: --runs takes a whole number, not '$runs'" >&2; exit 2 ;;
esac
if [ "$loaded" = 1 ] && ! command -v stress-ng >/dev/null; then
    echo "suite_soak.sh: the loaded runs need stress-ng (apt-get install stress-ng), or pass --idle-only" >&2
    exit 2
fi
mkdir -p "$logs"
export CI="${CI:-true}" # a missing tool fails a test rather than skipping it

command=(cargo test --workspace --locked)
if [ -n "$binary" ]; then
    package="${binary%%:*}"
    test="${binary#*:}"
    if [ "$package" = "$binary" ] || [ -z "$test" ]; then
        echo "suite_soak.sh: --binary takes PACKAGE:TEST, as allocmux-shim:integration" >&2
        exit 2
    fi
    command=(cargo test --locked -p "$package" --test "$test" -- "${filter[@]}")
fi
echo "soak: building: ${command[*]} --no-run"
if [ -n "$binary" ]; then
    cargo test --locked -p "$package" --test "$test" --no-run >"$logs/build.log" 2>&1
else
    cargo test --workspace --locked --no-run >"$logs/build.log" 2>&1
fi

passed=0
failed=0
stressor=""
stop_stress() {
    if [ -n "$stressor" ]; then
        kill "$stressor" 2>/dev/null || true
        wait "$stressor" 2>/dev/null || true
        stressor=""
    fi
}
trap stop_stress EXIT

# one_round KIND: N runs of the command, each logged as KIND-I.log.
one_round() {
    local kind="$1" i start status
    for i in $(seq 1 "$runs"); do
        start=$(date +%s)
        status=0
        "${command[@]}" >"$logs/$kind-$i.log" 2>&1 || status=$?
        if [ "$status" = 0 ]; then
            passed=$((passed + 1))
            echo "soak: $kind run $i passed in $(( $(date +%s) - start )) s"
        else
            failed=$((failed + 1))
            echo "soak: $kind run $i FAILED (status $status) in $(( $(date +%s) - start )) s: $logs/$kind-$i.log"
            grep -E '^test .* FAILED$|panicked at' "$logs/$kind-$i.log" | head -n 20 || true
        fi
    done
}

if [ "$idle" = 1 ]; then
    one_round idle
fi
if [ "$loaded" = 1 ]; then
    stress-ng --cpu "$(nproc)" --timeout 24h --quiet &
    stressor=$!
    one_round loaded
    stop_stress
fi
echo "soak: $passed passed, $failed failed"
[ "$failed" = 0 ]
