/*
 * The call chain the unwinders walk: a C library built the way distributions
 * build (gcc -O2 -g, no frame pointers, .eh_frame present).  build_c.sh
 * compiles this file twice:
 *   libchain_o2.so  gcc -O2 -g                          CHAIN_NAME=chain_o2_run
 *   libchain_fp.so  gcc -O2 -g -fno-omit-frame-pointer  CHAIN_NAME=chain_fp_run
 * (different exported names so both can be loaded into one process).
 *
 * CHAIN_NAME(depth, cb, arg) puts exactly `depth` frames of this library on
 * the stack (CHAIN_NAME itself plus depth-1 levels of f0..f3) and calls
 * cb(arg) from the innermost one, so a capture taken inside cb sees `depth`
 * return addresses inside this library.
 *
 * Four mutually recursive functions rather than one, so that the unwinders
 * see several FDEs with different CFI shapes, as in real code:
 *   f0  tiny frame, one callee-saved register
 *   f1  a 64-byte local array (sub rsp, CFA at rsp+N)
 *   f2  many values live across the call (pushes several callee-saved regs)
 *   f3  a variable-length array, which makes gcc use rbp as frame base
 *       even at -O2 (CFA = rbp+16), as some distro code does
 * All are noinline/noclone and do work after the recursive call, so gcc can
 * neither inline them nor turn the calls into tail calls (every level stays
 * on the stack).
 */
#include <stdint.h>

#ifndef CHAIN_NAME
#error "define CHAIN_NAME"
#endif

typedef void (*capture_fn)(void *arg);

/* Opaque sinks: the compiler must assume they are read elsewhere. */
volatile uint64_t chain_sink;

#define NOINL __attribute__((noinline, noclone))

static NOINL uint64_t f0(int n, capture_fn cb, void *arg);
static NOINL uint64_t f1(int n, capture_fn cb, void *arg);
static NOINL uint64_t f2(int n, capture_fn cb, void *arg);
static NOINL uint64_t f3(int n, capture_fn cb, void *arg);

/* n == 0: we are the innermost frame, call back into the capturer. */
#define LEAF_OR(next)                                                         \
    if (n == 0) {                                                             \
        cb(arg);                                                              \
        chain_sink = chain_sink + 1; /* not a tail call */                    \
        return 1;                                                             \
    }                                                                         \
    uint64_t r = next(n - 1, cb, arg)

static NOINL uint64_t f0(int n, capture_fn cb, void *arg)
{
    LEAF_OR(f1);
    return r + (uint64_t)n;
}

static NOINL uint64_t f1(int n, capture_fn cb, void *arg)
{
    volatile uint64_t local[8];
    for (int i = 0; i < 8; i++)
        local[i] = (uint64_t)(n * i);
    LEAF_OR(f2);
    return r ^ local[n & 7];
}

static NOINL uint64_t f2(int n, capture_fn cb, void *arg)
{
    /* Several values that must survive the call: forces callee-saved regs. */
    uint64_t a = chain_sink, b = a * 3 + (uint64_t)n, c = b ^ 0x5555, d = c + a;
    LEAF_OR(f3);
    return r + a + b * c + d;
}

static NOINL uint64_t f3(int n, capture_fn cb, void *arg)
{
    /* VLA: dynamic stack size, gcc sets up rbp as the CFA base. */
    volatile uint8_t vla[(n & 3) + 8];
    vla[0] = (uint8_t)n;
    LEAF_OR(f0);
    return r + vla[0];
}

/* Exported entry: frame 1 of `depth` (depth >= 2; f0(n) adds n+1 frames). */
uint64_t CHAIN_NAME(int depth, capture_fn cb, void *arg)
{
    if (depth < 2)
        depth = 2;
    uint64_t r = f0(depth - 2, cb, arg);
    chain_sink = chain_sink + r; /* not a tail call */
    return r;
}
