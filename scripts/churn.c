/*
 * churn.c - malloc/free churn benchmark.
 *
 * Usage: churn [THREADS [ITERATIONS]]   (defaults 2 and 20000000;
 *                                       ITERATIONS is per thread)
 *
 * Each thread owns 4096 slots and a xorshift64 RNG seeded from its index.
 * Per iteration it picks a random slot, frees the block there (if any),
 * mallocs a new block of a random size (16..256 bytes; 1 in 16 blocks
 * 16..4096 bytes) and writes its first and last byte.  At the end every
 * remaining block is freed.
 *
 * Per thread: ITERATIONS malloc calls and ITERATIONS free calls (the frees
 * are the replaced blocks plus the final cleanup; free(NULL) is never
 * called).
 *
 * Output (deterministic): "churn: THREADS threads x ITERATIONS iterations,
 * checksum C", where C is computed from the bytes read back from each
 * block before it is freed.  Time it externally (e.g. `time`, hyperfine).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { SLOTS = 4096, MAX_THREADS = 256 };

static unsigned long iterations;

struct worker {
    pthread_t tid;
    unsigned index;
    uint64_t checksum;
    int failed;
};

static uint64_t xorshift64(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Fold a block's first and last byte (and its size) into the checksum. */
static uint64_t retire(unsigned char *p, size_t size, uint64_t sum)
{
    sum = sum * 31 + p[0] + ((uint64_t)p[size - 1] << 8) + size;
    free(p);
    return sum;
}

static void *run(void *arg)
{
    struct worker *w = arg;
    unsigned char *slot[SLOTS] = { 0 };
    size_t size[SLOTS] = { 0 };
    /* Non-zero seed derived from the thread index. */
    uint64_t rng = 0x9E3779B97F4A7C15ULL * (w->index + 1);
    uint64_t sum = 0;

    for (unsigned long i = 0; i < iterations; i++) {
        uint64_t r = xorshift64(&rng);
        unsigned s = (unsigned)(r & (SLOTS - 1));
        size_t n = ((r >> 12) & 15) == 0 ? 16 + (size_t)((r >> 16) % 4081)  /* 16..4096 */
                                         : 16 + (size_t)((r >> 16) % 241); /* 16..256 */
        if (slot[s]) sum = retire(slot[s], size[s], sum);
        unsigned char *p = malloc(n);
        if (!p) {
            w->failed = 1;
            slot[s] = NULL;
            continue;
        }
        p[0] = (unsigned char)r;
        p[n - 1] = (unsigned char)(r >> 8);
        slot[s] = p;
        size[s] = n;
    }
    for (unsigned s = 0; s < SLOTS; s++)
        if (slot[s]) sum = retire(slot[s], size[s], sum);
    w->checksum = sum;
    return NULL;
}

int main(int argc, char **argv)
{
    long threads = argc > 1 ? strtol(argv[1], NULL, 10) : 2;
    long long iters = argc > 2 ? strtoll(argv[2], NULL, 10) : 20000000;
    if (threads < 1 || threads > MAX_THREADS || iters < 0) {
        fprintf(stderr, "usage: churn [THREADS(1..%d) [ITERATIONS]]\n", MAX_THREADS);
        return 2;
    }
    iterations = (unsigned long)iters;

    static struct worker w[MAX_THREADS];
    for (long t = 0; t < threads; t++) {
        w[t].index = (unsigned)t;
        if (pthread_create(&w[t].tid, NULL, run, &w[t]) != 0) {
            fprintf(stderr, "churn: pthread_create failed\n");
            return 1;
        }
    }
    uint64_t checksum = 0;
    int failed = 0;
    for (long t = 0; t < threads; t++) {
        pthread_join(w[t].tid, NULL);
        checksum ^= w[t].checksum * (2 * (uint64_t)t + 1); /* order-independent combine */
        failed |= w[t].failed;
    }
    if (failed) {
        printf("FAIL churn: malloc returned NULL\n");
        return 1;
    }
    printf("churn: %ld threads x %llu iterations, checksum %016llx\n", threads,
           (unsigned long long)iterations, (unsigned long long)checksum);
    return 0;
}
