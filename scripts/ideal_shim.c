/*
 * ideal_shim.c - the floor for an exact-counting malloc shim, for
 * scripts/shim_overhead.py --floors.
 *
 * The least code that records what allocmux's default recording records on
 * its fast path, written as a C compiler makes it best: per thread, in
 * initial-exec TLS, a countdown per function (exact call counts; the
 * countdown running out is where allocmux times a call, here it is only
 * reset), the bytes requested, and a check for large blocks; with
 * -DSIZES (the glibc case) also the usable sizes of the blocks handed out
 * and freed, read from the chunk headers as allocmux's system backend does.
 * It forwards to the next malloc in the search order: preload it before
 * Debian's libjemalloc.so.2, or alone for glibc.
 *
 * It is a measuring stick, not a shim to use: nothing is ever written out,
 * and it handles only malloc and free.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

struct thread_counts {
    int malloc_countdown, free_countdown;
    size_t requested, allocated, freed;
};
static __thread struct thread_counts t __attribute__((tls_model("initial-exec")));
static void *(*next_malloc)(size_t);
static void (*next_free)(void *);

enum { LARGE = 64 * 1024, GAP = 256 };

static void find_next(void)
{
    if (!next_malloc) {
        next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
        next_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    }
}

#ifdef SIZES
/* glibc's malloc_usable_size, from the chunk header. */
static inline size_t usable(void *p)
{
    size_t h = ((size_t *)p)[-1];
    return (h & ~(size_t)7) - ((h & 2) ? 16 : 8);
}
#endif

/* Out of line, as in allocmux: the countdown ran out (a thread's first
 * call, or where allocmux would time the call) or the block is large. */
__attribute__((noinline)) static void *malloc_slow(size_t n)
{
    find_next();
    if (t.malloc_countdown < 0)
        t.malloc_countdown = GAP;
    t.requested += n;
    void *p = next_malloc(n);
#ifdef SIZES
    if (p)
        t.allocated += usable(p);
#endif
    return p;
}

__attribute__((noinline)) static void free_slow(void *p)
{
    find_next();
    if (t.free_countdown < 0)
        t.free_countdown = GAP;
#ifdef SIZES
    if (p)
        t.freed += usable(p);
#endif
    next_free(p);
}

void *malloc(size_t n)
{
    if (__builtin_expect(--t.malloc_countdown < 0 || n >= LARGE, 0))
        return malloc_slow(n);
    t.requested += n;
#ifdef SIZES
    void *p = next_malloc(n);
    if (p)
        t.allocated += usable(p);
    return p;
#else
    return next_malloc(n);
#endif
}

void free(void *p)
{
    if (__builtin_expect(--t.free_countdown < 0, 0)) {
        free_slow(p);
        return;
    }
#ifdef SIZES
    if (p)
        t.freed += usable(p);
#endif
    next_free(p);
}
