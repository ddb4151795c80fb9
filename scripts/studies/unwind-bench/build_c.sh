#!/bin/sh
# Builds the C part into ./build: the two copies of the call chain and the
# LD_PRELOAD allocation counter.  Flags are the distribution defaults (-O2 -g,
# which on x86_64 means no frame pointers and .eh_frame, asynchronous unwind
# tables) except the frame-pointer copy.
set -eu
cd "$(dirname "$0")"
mkdir -p build
CC=${CC:-gcc}
$CC -O2 -g -fPIC -shared -DCHAIN_NAME=chain_o2_run c/chain.c -o build/libchain_o2.so
$CC -O2 -g -fPIC -shared -fno-omit-frame-pointer -DCHAIN_NAME=chain_fp_run c/chain.c -o build/libchain_fp.so
$CC -O2 -g -fPIC -shared c/alloc_count.c -o build/liballoc_count.so
