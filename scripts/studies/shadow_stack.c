/*
 * shadow_stack.c - what a shadow stack costs a frame, against checking a
 * frame as allocmux's recorder does.
 *
 * Usage: shadow_stack [ITERATIONS [NEW [KEPT [ROUNDS]]]]
 *        (defaults 2000000, 18, 27, 9: python3's stacks under exact mode
 *        are about 45 frames, of which about 27 are the thread's last
 *        stack's)
 *
 * Build: gcc -O2 -fno-omit-frame-pointer scripts/studies/shadow_stack.c
 *
 * Not revisiting unchanged frames at all takes knowing which frames
 * returned since the last capture, which only the return path knows.
 * bytehound does that with a shadow stack: each frame it unwinds gets its
 * return address replaced by a trampoline's, the original pushed on a
 * per-thread stack, and the next capture stops at the first frame whose
 * return address is the trampoline. The frame's return then goes through
 * the trampoline, which pops the original and jumps there.
 *
 * allocmux's recorder instead checks the frames its thread's last capture
 * also had (profiler/src/recorder/last_stack.rs): for each, it compares
 * the return address the last capture read with the word on the stack
 * now, and copies it out.
 *
 * Each iteration here calls NEW nested frames on top of KEPT frames that
 * stay, and at the innermost calls a hook, as an allocation calls the
 * shim. The hook does one of:
 *
 *   plain   reads the NEW frames' return addresses: what unwinding the
 *           frames that are new does in both designs (the baseline);
 *   check   plain, then checks the KEPT frames against their saved
 *           (return address, stack pointer, link) states, as the recorder
 *           does, and copies their addresses out;
 *   shadow  plain, and also patches each NEW frame's return address to the
 *           trampoline and pushes the original on the shadow stack; the
 *           frames then return through the trampoline. The KEPT frames are
 *           not visited: a shadow stack patched them at an earlier capture.
 *
 * So (check - plain) / KEPT is what a checked frame costs, and
 * (shadow - plain) / NEW what a shadow stack adds to a new frame: the
 * patch and a return through the trampoline, which the CPU's
 * return-address predictor gets wrong. What the shadow stack saves per
 * allocation is KEPT checked frames; what it adds is NEW patched ones.
 *
 * The frames keep frame pointers so that the hook finds return addresses
 * without an unwinder: the unwinding is the same in all three, and only
 * the differences are reported. Single-threaded: the shadow stack is a
 * global (a real one is per thread, one %fs-relative load more).
 *
 * Output: one markdown table row per mode (median ns and TSC ticks per
 * iteration over ROUNDS interleaved rounds), then the per-frame figures.
 * It exits with an error instead if a round leaves the shadow stack not
 * empty (a return missed the trampoline) or a kept frame fails its check.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

enum { MAX_FRAMES = 1024, PLAIN = 0, CHECK = 1, SHADOW = 2, MODES = 3 };
static const char *const mode_names[MODES] = {"plain", "check", "shadow"};

/* The shadow stack: original return addresses, innermost last. */
uintptr_t shadow_stack[MAX_FRAMES];
size_t shadow_top;

/* Pops the innermost original return address and jumps there. r10 and
 * r11 are scratch in the SysV ABI and carry no return value. */
void trampoline(void);
__asm__(".text\n"
        ".globl trampoline\n"
        ".type trampoline, @function\n"
        "trampoline:\n"
        "  mov shadow_top(%rip), %r11\n"
        "  dec %r11\n"
        "  mov %r11, shadow_top(%rip)\n"
        "  lea shadow_stack(%rip), %r10\n"
        "  mov (%r10,%r11,8), %r11\n"
        "  jmp *%r11\n"
        ".size trampoline, .-trampoline\n");

/* A frame of the last stack, as last_stack.rs keeps it. */
struct state {
    uint64_t key, sp, bp, link;
};

static struct state kept_states[MAX_FRAMES];
static uint64_t out[2 * MAX_FRAMES];
static int mode, new_frames, kept_frames;
static volatile uint64_t sink;

/* Called at the innermost new frame, as an allocation calls the shim. */
__attribute__((noinline, noipa)) static uint64_t hook(uint64_t x)
{
    uintptr_t *bp = __builtin_frame_address(0);
    int n = 0;
    /* The new frames: the hook's caller and the NEW - 1 frames outside it.
     * Each frame's return address is the word above its saved frame
     * pointer. */
    size_t base = shadow_top;
    for (int i = 0; i < new_frames; i++) {
        bp = (uintptr_t *)bp[0];
        uintptr_t *slot = bp + 1;
        uintptr_t ret = *slot;
        out[n++] = ret;
        if (mode == SHADOW) {
            /* Outermost deepest in the shadow stack: it returns last. */
            shadow_stack[base + new_frames - 1 - i] = ret;
            *slot = (uintptr_t)trampoline;
        }
    }
    if (mode == SHADOW)
        shadow_top = base + new_frames;
    if (mode == CHECK) {
        for (int k = 0; k < kept_frames; k++) {
            const struct state *s = &kept_states[k];
            if (s->link & 1) /* a step that is not checked */
                break;
            uint64_t word = *(volatile uint64_t *)(s->sp - 8);
            if (word != s->key)
                break;
            out[n++] = s->key;
        }
    }
    sink = (uint64_t)n;
    return x ^ out[n - 1];
}

/* NEW frames: n, n - 1, ..., 1, the innermost calling the hook. The empty
 * asm after each call keeps the compiler from turning the recursion into
 * a loop, so each keeps its frame. */
__attribute__((noinline, noipa)) static uint64_t new_frame(int n, uint64_t x)
{
    uint64_t r = n == 1 ? hook(x) : new_frame(n - 1, x * 3 + 1);
    __asm__ volatile("" : "+r"(r));
    return r + (uint64_t)n;
}

static uint64_t run_iterations(unsigned long iterations)
{
    uint64_t acc = 0;
    for (unsigned long i = 0; i < iterations; i++)
        acc += new_frame(new_frames, i);
    return acc;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static unsigned long iterations;
static int rounds;
static double ns[MODES][64], ticks[MODES][64];

/* Saves the KEPT frames outside this one as the last stack's states. */
__attribute__((noinline, noipa)) static void note_kept_frames(void)
{
    uintptr_t *bp = __builtin_frame_address(0);
    bp = (uintptr_t *)bp[0]; /* the innermost kept frame */
    for (int k = 0; k < kept_frames; k++) {
        uintptr_t *next = (uintptr_t *)bp[0];
        /* The caller's state: its stack pointer is just above this
         * frame's return address. */
        kept_states[k] = (struct state){.key = bp[1], .sp = (uint64_t)(bp + 2), .bp = (uint64_t)next};
        bp = next;
    }
}

/* KEPT frames that stay for the whole run; the innermost runs the rounds. */
__attribute__((noinline, noipa)) static uint64_t kept_frame(int k)
{
    if (k > 1) {
        uint64_t r = kept_frame(k - 1);
        __asm__ volatile("" : "+r"(r));
        return r + 1;
    }
    note_kept_frames();
    uint64_t acc = 0;
    for (int r = 0; r < rounds; r++) {
        for (int j = 0; j < MODES; j++) {
            mode = (r + j) % MODES; /* rotate which mode goes first */
            double t0 = now_ns();
            uint64_t c0 = __rdtsc();
            acc += run_iterations(iterations);
            uint64_t c1 = __rdtsc();
            double t1 = now_ns();
            if (shadow_top != 0) {
                fprintf(stderr, "shadow stack not empty: %zu\n", shadow_top);
                exit(1);
            }
            int want = new_frames + (mode == CHECK ? kept_frames : 0);
            if (sink != (uint64_t)want) {
                fprintf(stderr, "%s: %llu frames, not %d\n", mode_names[mode], (unsigned long long)sink, want);
                exit(1);
            }
            ns[mode][r] = (t1 - t0) / iterations;
            ticks[mode][r] = (double)(c1 - c0) / iterations;
        }
    }
    return acc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    double s[64];
    for (int i = 0; i < n; i++)
        s[i] = v[i];
    qsort(s, n, sizeof s[0], cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static long parse(const char *s, long lo, long hi, const char *what)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "shadow_stack: %s must be an integer from %ld to %ld, not '%s'\n", what, lo, hi, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    iterations = argc > 1 ? (unsigned long)parse(argv[1], 1, 1L << 40, "ITERATIONS") : 2000000;
    new_frames = argc > 2 ? (int)parse(argv[2], 1, 500, "NEW") : 18;
    kept_frames = argc > 3 ? (int)parse(argv[3], 1, 500, "KEPT") : 27;
    rounds = argc > 4 ? (int)parse(argv[4], 1, 64, "ROUNDS") : 9;
    uint64_t acc = kept_frame(kept_frames + 1);

    printf("%lu iterations, %d new frame%s on %d kept, medians of %d rounds (checksum %llu)\n\n",
           iterations, new_frames, new_frames == 1 ? "" : "s", kept_frames, rounds,
           (unsigned long long)(acc & 0xffff));
    printf("| hook | ns an iteration | TSC ticks an iteration |\n|---|---|---|\n");
    double m_ns[MODES], m_ticks[MODES];
    for (int j = 0; j < MODES; j++) {
        m_ns[j] = median(ns[j], rounds);
        m_ticks[j] = median(ticks[j], rounds);
        printf("| %s | %.1f | %.1f |\n", mode_names[j], m_ns[j], m_ticks[j]);
    }
    printf("\n| per frame | ns | TSC ticks |\n|---|---|---|\n");
    printf("| a checked kept frame: (check - plain) / %d | %.2f | %.2f |\n", kept_frames,
           (m_ns[CHECK] - m_ns[PLAIN]) / kept_frames, (m_ticks[CHECK] - m_ticks[PLAIN]) / kept_frames);
    printf("| a new frame's patch and trampoline return: (shadow - plain) / %d | %.2f | %.2f |\n", new_frames,
           (m_ns[SHADOW] - m_ns[PLAIN]) / new_frames, (m_ticks[SHADOW] - m_ticks[PLAIN]) / new_frames);
    printf("\nPer iteration, the shadow stack saves the check of %d kept frames (%.1f ns) "
           "and adds the patch and trampoline of %d new %s (%.1f ns): net %+.1f ns.\n",
           kept_frames, m_ns[CHECK] - m_ns[PLAIN], new_frames, new_frames == 1 ? "one" : "ones",
           m_ns[SHADOW] - m_ns[PLAIN],
           (m_ns[SHADOW] - m_ns[PLAIN]) - (m_ns[CHECK] - m_ns[PLAIN]));
    return 0;
}
