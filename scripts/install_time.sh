#!/usr/bin/env bash
# What `cargo install allocmux-cli` costs from the packaged crates on a
# clean target directory, for each git revision given (default: HEAD):
# wall time and CPU time (user + sys of every process of the build, the
# figure that load on the machine changes least). Each revision is checked
# out into a temporary worktree and measured through its own install test
# (flamegraph/tests/install.rs: package, vendor, `cargo install` offline
# from a directory source), whose test binary is built first, unmeasured.
# Usage: bash scripts/install_time.sh [OUT.md] [REV...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-/dev/stdout}
shift || true
revs=("$@")
[ ${#revs[@]} -gt 0 ] || revs=(HEAD)
tmp=$(mktemp -d)
trap 'for w in "$tmp"/wt-*; do git -C "$root" worktree remove --force "$w" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT
rows=()
for rev in "${revs[@]}"; do
    sha=$(git -C "$root" rev-parse --short "$rev")
    wt="$tmp/wt-$sha"
    git -C "$root" worktree add -q --detach "$wt" "$rev"
    # The install test is a module of the CLI's one test binary, or (in
    # revisions before it) a binary of its own.
    test=(--test install)
    [ -f "$wt/flamegraph/tests/main.rs" ] && test=(--test integration install::)
    (cd "$wt" && cargo test -q --locked -p allocmux-cli "${test[@]:0:2}" --no-run 2>/dev/null)
    rm -rf "$wt/target/install-test/build"
    (cd "$wt" && /usr/bin/time -f "%e %U %S" -o "$tmp/time-$sha" \
        cargo test -q --locked -p allocmux-cli "${test[@]}" >/dev/null 2>&1)
    read -r wall user sys < "$tmp/time-$sha"
    cpu=$(echo "$user + $sys" | bc)
    outer=no
    if ls "$wt/target/install-test/build/release/build" | grep -q -E "^(tikv-jemalloc-sys|libmimalloc-sys)-"; then outer=yes; fi
    rows+=("| \`$sha\` | ${wall} s | ${cpu} s | $outer |")
done
load=$(cut -d' ' -f1-3 /proc/loadavg)
{
    echo "# cargo install allocmux-cli, from the packaged crates"
    echo
    echo "\`bash scripts/install_time.sh scripts/results/install-time.md ${revs[*]}\` on $(nproc) CPUs; load average at the end $load."
    echo "A clean target directory each time; the crates.io sources are vendored beforehand."
    echo
    echo "| revision | wall | CPU (user + sys) | C allocators built outside the shim's own build |"
    echo "|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
} > "$out"
