/*
 * LD_PRELOAD allocation counter.  A Rust #[global_allocator] wrapper would
 * only see Rust allocations; the unwinders under test are C (libgcc,
 * libunwind, glibc) and call malloc directly, so we interpose the malloc
 * family for the whole process and forward to glibc's __libc_* entry points
 * (no dlsym(RTLD_NEXT) bootstrap problem).  The benchmark finds the counter
 * with dlsym(RTLD_DEFAULT, "unwind_bench_alloc_calls") and reads it around
 * each unwinder's calls; the capture path of the harness itself allocates
 * nothing, so any increase comes from the unwinder.
 * mmap-based allocation (libunwind's mempool) is not seen here; the
 * callgrind pass counts mmap calls separately.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

/* Allocating calls (malloc, calloc, realloc, the aligned variants). */
uint64_t unwind_bench_alloc_calls;

static inline void count(void)
{
    __atomic_fetch_add(&unwind_bench_alloc_calls, 1, __ATOMIC_RELAXED);
}

void *malloc(size_t n) { count(); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { count(); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { count(); return __libc_realloc(p, n); }
void free(void *p) { __libc_free(p); }
void *memalign(size_t al, size_t n) { count(); return __libc_memalign(al, n); }
void *aligned_alloc(size_t al, size_t n) { count(); return __libc_memalign(al, n); }
void *valloc(size_t n) { count(); return __libc_memalign((size_t)getpagesize(), n); }
void *pvalloc(size_t n)
{
    size_t pg = (size_t)getpagesize();
    count();
    return __libc_memalign(pg, (n + pg - 1) & ~(pg - 1));
}
int posix_memalign(void **out, size_t al, size_t n)
{
    if (al < sizeof(void *) || (al & (al - 1)) != 0)
        return EINVAL;
    count();
    void *p = __libc_memalign(al, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}
