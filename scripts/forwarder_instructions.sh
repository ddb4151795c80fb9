#!/usr/bin/env bash
# forwarder_instructions.sh - what a compare timing run costs under each
# allocator's forwarder, against the same allocator built as its own
# preloadable library from the very sources the shim links.
#
# Usage: bash scripts/forwarder_instructions.sh [--quick]
#
# Instructions counted by callgrind, per unit of work: the difference
# between a run of 2N units and one of N, divided by N, so start-up and
# exit cancel out (valgrind counts the same instructions under load).
# Programs: scripts/churn.c on 1 thread (unit: one malloc/free pair) and
# the edit-distance workload (unit: one word pair). --quick runs a tenth
# of the work.
#
# The reference libraries, built once into target/forwarder-reference:
# - mimalloc: libmimalloc-sys's own c_src (the 2.x line the shim links)
#   compiled as mimalloc's override library (-DMI_MALLOC_OVERRIDE);
# - jemalloc: tikv-jemalloc-sys's jemalloc sources configured as the
#   crate configures them, but without the `_rjem_` prefix and as a shared
#   library, with jemalloc's own default compiler flags.
# The forwarders are the ones `allocmux preload -a B --record off` (and
# so compare's timing runs) preload.
#
# Then, in code: edit-distance built with each allocator as its
# #[global_allocator] (scripts/incode-allocators) against the same
# program built with allocmux's `Switchable`, the allocator picked by
# ALLOCMUX_ALLOCATOR: what `Switchable`'s dispatch costs.
#
# Output: two markdown tables, the last column of each the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."

scale=1
if [ "${1:-}" = "--quick" ]; then scale=10; fi
churn_n=$((200000 / scale))
edit_n=$((10000 / scale))

command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 2; }

out=target/forwarder-reference
mkdir -p "$out"
echo "building allocmux and the workloads (release)..." >&2
cargo build --release --locked -q -p allocmux-cli -p allocmux-workloads --bin allocmux --bin edit-distance
cargo build --release --locked -q -p incode-allocators
cc -O2 -g -o "$out/churn" scripts/churn.c -lpthread

# Where cargo unpacked a dependency's sources.
source_of() {
    cargo metadata --format-version 1 --locked | python3 -c '
import json, os, sys
name = sys.argv[1]
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == name:
        print(os.path.dirname(p["manifest_path"]))
        break
' "$1"
}

mi_ref="$out/libmimalloc-override.so"
if [ ! -e "$mi_ref" ]; then
    mi_src="$(source_of libmimalloc-sys)/c_src/mimalloc/v2"
    echo "building mimalloc's override library from $mi_src..." >&2
    cc -O3 -shared -fPIC -DMI_MALLOC_OVERRIDE -DMI_DEBUG=0 -DNDEBUG -ftls-model=initial-exec \
        -I"$mi_src/include" "$mi_src/src/static.c" -o "$mi_ref" -lpthread
fi

je_ref="$out/jemalloc/lib/libjemalloc.so.2"
if [ ! -e "$je_ref" ]; then
    je_crate="$(source_of tikv-jemalloc-sys)"
    # The version string tikv-jemalloc-sys passes: its crate version's build metadata.
    je_version="${je_crate##*+}"
    echo "building jemalloc $je_version from $je_crate (a few minutes)..." >&2
    rm -rf "$out/jemalloc"
    cp -r "$je_crate/jemalloc" "$out/jemalloc"
    cp "$je_crate/configure/configure" "$out/jemalloc/configure"
    (cd "$out/jemalloc" &&
        sh configure --with-version="$je_version" --disable-cxx --enable-doc=no \
            --with-private-namespace=_rjem_ --enable-stats >configure.log &&
        make -j"$(nproc)" lib/libjemalloc.so.2 >make.log 2>&1)
fi

forwarder() {
    target/release/allocmux preload -a "$1" --record off | sed -n 's/^LD_PRELOAD=//p'
}

# Instructions of `preload program args...` under callgrind.
instructions() {
    local preload="$1"
    shift
    LD_PRELOAD="$preload" valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out" \
        "$@" >/dev/null 2>"$out/valgrind.log"
    sed -n 's/^summary: //p' "$out/callgrind.out"
}

# Per-unit instructions: (2N run - N run) / N.
per_unit() {
    local preload="$1" n="$2"
    shift 2
    local one two
    one=$(instructions "$preload" "$@" "$n")
    two=$(instructions "$preload" "$@" $((2 * n)))
    python3 -c "print(f'{($two - $one) / $n:.2f}')"
}

echo "| program | allocator | own library | forwarder | forwarder / library |"
echo "|---|---|---|---|---|"
for allocator in mimalloc jemalloc; do
    case "$allocator" in
        mimalloc) library="$PWD/$mi_ref" ;;
        jemalloc) library="$PWD/$je_ref" ;;
    esac
    fw="$(forwarder "$allocator")"
    for program in churn edit-distance; do
        case "$program" in
            churn) run=("$out/churn" 1); n=$churn_n; unit="malloc/free pair" ;;
            edit-distance) run=(target/release/edit-distance); n=$edit_n; unit="word pair" ;;
        esac
        own=$(per_unit "$library" "$n" "${run[@]}")
        via=$(per_unit "$fw" "$n" "${run[@]}")
        ratio=$(python3 -c "print(f'{$via / $own:.4f}')")
        echo "| $program (per $unit) | $allocator | $own | $via | $ratio |"
    done
done

echo
echo "| program, in code | allocator | #[global_allocator] | Switchable | Switchable / plain |"
echo "|---|---|---|---|---|"
for allocator in system jemalloc mimalloc; do
    case "$allocator" in
        system) plain=target/release/workload-glibc ;;
        *) plain="target/release/workload-$allocator" ;;
    esac
    alone=$(per_unit "" "$edit_n" "$plain" edit-distance)
    switched=$(ALLOCMUX_ALLOCATOR="$allocator" per_unit "" "$edit_n" target/release/workload-switchable edit-distance)
    ratio=$(python3 -c "print(f'{$switched / $alone:.4f}')")
    echo "| edit-distance (per word pair) | $allocator | $alone | $switched | $ratio |"
done
