#!/usr/bin/env bash
# The demo's pictures and output for the README: runs `allocmux demo` into
# scripts/results/demo/ and a comparison of a real program (python3 building
# and serialising a dict) with its chart, keeping each command's terminal
# output next to what it wrote.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p allocmux-cli
bin=target/release/allocmux
out=scripts/results/demo
mkdir -p "$out"
rm -f "$out"/allocmux-demo-* "$out"/python3-compare.*

echo "\$ allocmux demo -o $out" >"$out/demo-output.txt"
"$bin" demo -o "$out" | tee -a "$out/demo-output.txt"

py='import json; d = {i: str(i) * 10 for i in range(300000)}; print(len(json.dumps(d)))'
# Debian's python3, not a version manager's shim script in front of it.
cmd=(/usr/bin/python3 -c "$py")
echo "\$ allocmux compare --plot $out/python3-compare.svg -- /usr/bin/python3 -c '$py'" >"$out/python3-compare.txt"
"$bin" compare --plot "$out/python3-compare.svg" --json "$out/python3-compare.json" -- "${cmd[@]}" \
    | tee -a "$out/python3-compare.txt"
# The profile and JSON carry this machine's paths and every run: keep the
# pictures and the text.
rm -f "$out"/allocmux-demo-stacks.prof "$out"/*.json
