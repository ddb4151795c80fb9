/* 2^BITS distinct call stacks, each allocating one 64-byte block that
 * stays live: a large profile for the /debug/pprof endpoint's scrape
 * cost (scripts/endpoint_cost.py). Prints "ready", then waits for stdin
 * to close. */
#include <stdio.h>
#include <stdlib.h>

enum { BITS = 14 };
static void *held[1 << BITS];

__attribute__((noinline)) static void *step(unsigned bits, int depth);

__attribute__((noinline)) static void *left(unsigned bits, int depth)
{
    void *p = step(bits >> 1, depth - 1);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

/* Not identical to `left`, or the compiler folds the two into one. */
__attribute__((noinline)) static void *right(unsigned bits, int depth)
{
    __asm__ volatile("nop");
    void *p = step(bits >> 1, depth - 1);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) static void *step(unsigned bits, int depth)
{
    if (depth == 0) return malloc(64);
    return (bits & 1) ? right(bits, depth) : left(bits, depth);
}

int main(void)
{
    for (unsigned i = 0; i < (1u << BITS); i++) held[i] = step(i, BITS);
    printf("ready\n");
    fflush(stdout);
    while (getchar() != EOF) {}
    for (unsigned i = 0; i < (1u << BITS); i++) free(held[i]);
    return 0;
}
