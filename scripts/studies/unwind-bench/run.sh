#!/bin/sh
# Frozen study: it decided the recorder's unwinder (RESULTS.md); kept as it
# was run, not maintained with the benchmark suite.
#
# Builds and runs the unwinder benchmark; prints markdown on stdout.
#
#   ./run.sh                 full run (wall time + callgrind), ~3-4 minutes
#   ITERS=20000 REPS=3 ./run.sh    quicker
#   CALLGRIND=0 ./run.sh     skip the callgrind pass
#
# Needs: gcc, cargo, libunwind8 (apt-get install -y libunwind-dev), valgrind,
# python3.  Nothing outside this directory is touched: C objects go to
# ./build, Rust to ./target, callgrind files to ./callgrind.
set -eu
cd "$(dirname "$0")"
ITERS=${ITERS:-200000}
REPS=${REPS:-5}
DEPTHS=${DEPTHS:-10,20,40}
CG_DEPTHS=${CG_DEPTHS:-10 40}
CG_LO=${CG_LO:-2000}
CG_HI=${CG_HI:-4000}
CALLGRIND=${CALLGRIND:-1}

if [ ! -e /usr/lib/x86_64-linux-gnu/libunwind.so.8 ]; then
    echo "libunwind.so.8 missing: apt-get install -y libunwind-dev" >&2
    exit 1
fi

./build_c.sh
# Its own workspace (Cargo.toml, Cargo.lock), built into ./target with the
# frame-pointer flags of .cargo/config.toml.
cargo build --release --quiet --target-dir target
BIN=./target/release/unwind-bench

echo "## Environment"
echo
echo '```'
uname -srm
grep -m1 'model name' /proc/cpuinfo || true
echo "cpus: $(nproc)"
ldd --version | head -1
gcc --version | head -1
dpkg-query -W -f='libunwind8 ${Version}\n' libunwind8 2>/dev/null || true
rustc --version
echo "framehop $(grep -A1 'name = "framehop"' Cargo.lock | sed -n 's/version = "\(.*\)"/\1/p')"
echo '```'
echo
echo "## Wall time (ITERS=$ITERS REPS=$REPS DEPTHS=$DEPTHS, LD_PRELOAD allocation counter)"
echo
# The counting malloc is preloaded for the whole run so cold and steady-state
# allocations of every unwinder are seen; no unwinder allocates on the hot
# path, so it does not affect the timings.
LD_PRELOAD="$PWD/build/liballoc_count.so" $BIN --lib-dir build --iters "$ITERS" --reps "$REPS" --depths "$DEPTHS"

[ "$CALLGRIND" = 1 ] || exit 0
echo
echo "## Callgrind: instructions and calls per captured stack"
echo
echo "Each unwinder runs alone under \`valgrind --tool=callgrind\` with $CG_LO and with $CG_HI captures;"
echo "the difference divided by $((CG_HI - CG_LO)) is one capture (set-up and warm-up cancel out)."
echo "Net = minus the empty capture through the same chain. Call columns count calls per stack."
echo
rm -rf callgrind && mkdir -p callgrind
cg() { # name method chain depth iters
    valgrind --tool=callgrind --compress-strings=no --compress-pos=no \
        --callgrind-out-file="callgrind/$1.$4.$5" \
        $BIN --lib-dir build --only "$2" --chain "$3" --depths "$4" --iters "$5" >/dev/null 2>&1
}
for d in $CG_DEPTHS; do
    for n in "$CG_LO" "$CG_HI"; do
        cg none none o2 "$d" "$n"
        cg none_fp none fp "$d" "$n"
        for m in gcc glibc libunwind framehop allocmux; do cg "$m" "$m" o2 "$d" "$n"; done
        cg fp fp fp "$d" "$n"
    done
done
python3 callgrind_report.py callgrind "$CG_LO" "$CG_HI" gcc glibc libunwind framehop allocmux fp
