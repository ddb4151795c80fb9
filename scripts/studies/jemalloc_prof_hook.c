/*
 * jemalloc_prof_hook.c - a one-frame backtrace hook for jemalloc's own
 * sampler, for scripts/studies/jemalloc_sampling_cost.py.
 *
 * Preloaded after Debian's libjemalloc.so.2 (built with --enable-prof),
 * it replaces jemalloc's backtrace (libgcc's _Unwind_Backtrace) with one
 * that records a single frame, so what is left is the cost of jemalloc's
 * sampling itself: its byte countdown, the bookkeeping of each sampled
 * object, and telling sampled blocks apart at free. A recorder that let
 * jemalloc sample would plug its own unwinder in here.
 */
#include <stddef.h>
#include <stdio.h>

int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

static void one_frame(void **vec, unsigned *len, unsigned max_len)
{
    (void)max_len;
    vec[0] = (void *)one_frame;
    *len = 1;
}

__attribute__((constructor)) static void install(void)
{
    void (*hook)(void **, unsigned *, unsigned) = one_frame;
    int err = mallctl("experimental.hooks.prof_backtrace", NULL, NULL, &hook, sizeof(hook));
    if (err)
        fprintf(stderr, "jemalloc_prof_hook: mallctl failed (%d): is jemalloc run with prof:true?\n", err);
}
