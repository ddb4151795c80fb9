#!/usr/bin/env bash
# What a shadow stack (bytehound's way of not revisiting frames) costs a
# frame, against checking a frame as the recorder does: builds
# scripts/studies/shadow_stack.c (which says what it measures) and runs it on three
# shapes of stack, each as NEW frames over KEPT ones:
#   18 over 27   python3's stacks under exact mode (about 45 frames, 60% of
#                them the thread's last stack's);
#   4 over 40    a deep stack whose leaf moves a little;
#   1 over 44    a loop allocating from one place under a deep stack.
# Usage: bash scripts/studies/shadow_stack.sh [OUT.md] [ITERATIONS] [ROUNDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-/dev/stdout}
iterations=${2:-2000000}
rounds=${3:-9}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -fno-omit-frame-pointer "$root/scripts/studies/shadow_stack.c" -o "$tmp/shadow_stack"
load=$(cut -d' ' -f1 /proc/loadavg)
{
    echo "# A shadow stack against checking frames"
    echo
    echo "\`bash scripts/studies/shadow_stack.sh scripts/studies/results/shadow-stack.md $iterations $rounds\` on $(nproc) CPUs; load average at start $load."
    echo "\`scripts/studies/shadow_stack.c\` says what each hook does."
    for shape in "18 27" "4 40" "1 44"; do
        set -- $shape
        echo
        plural=s; [ "$1" = 1 ] && plural=
        echo "### $1 new frame$plural over $2 kept"
        echo
        "$tmp/shadow_stack" "$iterations" "$1" "$2" "$rounds"
    done
} > "$out"
