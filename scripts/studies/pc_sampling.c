/*
 * Frozen study (results/pc-sampling.md): it decided that allocator time
 * stays a TSC sample of calls; kept as it was run, not maintained.
 *
 * Time in the allocator from program-counter samples, for comparison with
 * the shim's TSC sample of calls (scripts/studies/pc_sampling.py runs it).
 *
 *   pc_sampling MODE RATE ITERATIONS
 *
 * Runs one thread of scripts/churn.c (its own loop, included below) against
 * glibc, with:
 *   none   nothing else (the baseline);
 *   timer  a per-thread CPU-time timer (timer_create on
 *          CLOCK_THREAD_CPUTIME_ID, SIGEV_THREAD_ID) raising SIGPROF RATE
 *          times a second of the thread's CPU time;
 *   perf   a software task-clock perf event on the thread, sampling every
 *          1/RATE s of its CPU time, signalling each sample with SIGPROF.
 * Each SIGPROF looks at the interrupted program counter: a sample is the
 * allocator's if it lies in libc's code, which the churn calls for nothing
 * else. Prints one line of key=value pairs.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <link.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

/* The churn itself: its `run` loop, `main` renamed out of the way. */
#define main churn_main
#include "churn.c"
#undef main

static uintptr_t libc_lo, libc_hi;
static volatile uint64_t samples, in_alloc;

static int find_libc(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    if (!strstr(info->dlpi_name, "libc.so"))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            libc_lo = info->dlpi_addr + ph->p_vaddr;
            libc_hi = libc_lo + ph->p_memsz;
            return 1;
        }
    }
    return 0;
}

static void on_sample(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)si;
    uintptr_t pc = (uintptr_t)((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RIP];
    samples++;
    if (pc >= libc_lo && pc < libc_hi)
        in_alloc++;
}

static uint64_t cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void start_timer(long rate)
{
    struct sigevent sev = { 0 };
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    timer_t timer;
    if (timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &timer) != 0) {
        perror("timer_create");
        exit(1);
    }
    long ns = 1000000000L / rate;
    struct itimerspec its = { { ns / 1000000000L, ns % 1000000000L },
                              { ns / 1000000000L, ns % 1000000000L } };
    timer_settime(timer, 0, &its, NULL);
}

static void start_perf(long rate)
{
    struct perf_event_attr a = { 0 };
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.sample_period = (uint64_t)(1000000000L / rate);
    a.sample_type = PERF_SAMPLE_IP;
    a.wakeup_events = 1;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
    if (fd < 0) {
        perror("perf_event_open");
        exit(3);
    }
    /* A ring for the sample records the signals announce (unread). */
    if (mmap(NULL, 9 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED) {
        perror("mmap");
        exit(3);
    }
    struct f_owner_ex owner = { F_OWNER_TID, (pid_t)syscall(SYS_gettid) };
    fcntl(fd, F_SETOWN_EX, &owner);
    fcntl(fd, F_SETSIG, SIGPROF);
    fcntl(fd, F_SETFL, O_ASYNC);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: pc_sampling none|timer|perf RATE ITERATIONS\n");
        return 2;
    }
    const char *mode = argv[1];
    long rate = strtol(argv[2], NULL, 10);
    iterations = strtoul(argv[3], NULL, 10);
    if (strcmp(mode, "none") && (rate < 1 || rate > 1000000000L)) {
        fprintf(stderr, "pc_sampling: RATE must be 1 to 1000000000 samples a second\n");
        return 2;
    }
    dl_iterate_phdr(find_libc, NULL);
    if (!libc_hi) {
        fprintf(stderr, "pc_sampling: libc's code not found\n");
        return 1;
    }
    struct sigaction sa = { 0 };
    sa.sa_sigaction = on_sample;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, NULL);

    if (!strcmp(mode, "timer"))
        start_timer(rate);
    else if (!strcmp(mode, "perf"))
        start_perf(rate);
    else if (strcmp(mode, "none")) {
        fprintf(stderr, "pc_sampling: unknown mode %s\n", mode);
        return 2;
    }

    struct worker w = { 0 };
    uint64_t c0 = cpu_ns();
    run(&w);
    uint64_t c1 = cpu_ns();
    printf("mode=%s rate=%ld cpu_ns=%llu samples=%llu in_alloc=%llu checksum=%llx\n", mode, rate,
           (unsigned long long)(c1 - c0), (unsigned long long)samples,
           (unsigned long long)in_alloc, (unsigned long long)w.checksum);
    return w.failed;
}
