#!/usr/bin/env bash
# Frozen study: it decided the CLI's symbolizer, blazesym over addr2line
# (results/symbolizer.md); kept as it was run, not maintained.
#
# Compares blazesym 0.2 (the CLI's symbolizer) with addr2line 0.25 on the
# same addresses: time for a cold symbolizer to resolve them (3 rounds),
# and how many each names, with how many inlined frames.
#
#   bash scripts/studies/symbolizer_eval.sh [ELF] [N]
#
# Default ELF: the debug allocmux binary (full DWARF); run it a second time
# with /lib/x86_64-linux-gnu/libc.so.6 (no DWARF of its own) to see the
# difference that decided the choice. The addresses are N defined function
# symbols + 3, taken in symbol-table order. The scratch crate lives in a
# temporary directory and is removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."
ELF=${1:-target/debug/allocmux}
N=${2:-5000}
[ -f "$ELF" ] || cargo build -q -p allocmux-cli
ELF=$(readlink -f "$ELF")
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
mkdir -p "$DIR/src"
cat > "$DIR/Cargo.toml" <<'TOML'
[package]
name = "symbolizer-eval"
version = "0.1.0"
edition = "2021"
[dependencies]
blazesym = { version = "=0.2.7", default-features = false, features = ["demangle", "dwarf", "zlib"] }
addr2line = { version = "0.25", features = ["loader"] }
TOML
cat > "$DIR/src/main.rs" <<'RS'
use std::time::Instant;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let addrs: Vec<u64> = std::fs::read_to_string(&args[2]).unwrap()
        .lines().map(|l| u64::from_str_radix(l, 16).unwrap()).collect();
    for round in 1..=3 {
        let t = Instant::now();
        let s = blazesym::symbolize::Symbolizer::builder()
            .enable_code_info(true).enable_inlined_fns(true).build();
        let src = blazesym::symbolize::source::Source::Elf(blazesym::symbolize::source::Elf::new(&args[1]));
        let r = s.symbolize(&src, blazesym::symbolize::Input::VirtOffset(&addrs)).unwrap();
        let named = r.iter().filter(|x| x.as_sym().is_some()).count();
        let inl: usize = r.iter().filter_map(|x| x.as_sym()).map(|s| s.inlined.len()).sum();
        let tb = t.elapsed();
        let t = Instant::now();
        let l = addr2line::Loader::new(&args[1]).unwrap();
        let (mut named2, mut inl2) = (0, 0);
        for &a in &addrs {
            let mut frames = l.find_frames(a).unwrap();
            let mut n = 0;
            while let Ok(Some(f)) = frames.next() {
                if f.function.is_some() { n += 1; }
            }
            if n > 0 { named2 += 1; inl2 += n - 1; }
        }
        let ta = t.elapsed();
        println!("round {round}, {} addresses: blazesym {:.0} ms, {named} named, {inl} inlined frames | \
                  addr2line {:.0} ms, {named2} named, {inl2} inlined frames",
                 addrs.len(), tb.as_secs_f64() * 1e3, ta.as_secs_f64() * 1e3);
    }
}
RS
nm --defined-only "$ELF" 2>/dev/null | awk '$2 ~ /^[tT]$/ {print $1}' > "$DIR/syms" || true
[ -s "$DIR/syms" ] || nm -D --defined-only "$ELF" | awk '$2 ~ /^[tT]$/ {print $1}' > "$DIR/syms"
head -n "$N" "$DIR/syms" | while read -r a; do printf '%x\n' $((16#$a + 3)); done > "$DIR/addrs"
echo "$ELF ($(du -h "$ELF" | cut -f1)):"
cargo run -q --release --manifest-path "$DIR/Cargo.toml" --target-dir "$DIR/target" -- "$ELF" "$DIR/addrs"
