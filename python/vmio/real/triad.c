/* triad.c: vmio's memory-bound co-runner (vmio.real.hostcache compiles it with the system cc).
 *
 *   triad PASSES     a[i] = b[i] + s * c[i] over three arrays of N = 2^24 doubles (128 MiB
 *                    each, 384 MiB: each array four times a 32 MiB last-level cache, STREAM's
 *                    rule, McCalpin, "Memory Bandwidth and Machine Balance", 1995), PASSES
 *                    times: fixed work. Prints the passes' own CPU time and the bytes they
 *                    moved (32 per element: b, c, a, and the read of a's line a
 *                    write-allocate cache makes before the write).
 *   chase MIB LOADS  a pointer chase over one random cycle (Sattolo's shuffle) of MIB MiB of
 *                    8-byte slots, LOADS dependent loads: each one a last-level miss served by
 *                    memory, unloaded (transparent huge pages asked for, so that few of them
 *                    also miss the TLB). Prints CPU ns per load.
 *
 * Times are the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), not wall time: the machine's
 * cores may be shared with other processes while it runs.
 *
 * The workload's profile in the simulator is cpu_profile=triad
 * (crates/vmio-core/src/workload/cpu/triad.rs): keep N and the bytes per element in step.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define N (1L << 24)
#define BYTES_PER_ELEMENT 32

/* The thread's CPU time: the figures hold when other processes share the core. */
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Memory for the chase, in transparent huge pages where the kernel grants them (the
 * triad's arrays stay in small pages: a stream crosses a page every 512 elements, and the
 * huge pages' first touch costs more system time than the pass itself). */
static void *huge(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 2 << 20, bytes) != 0)
        return NULL;
    madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

static int triad(long passes)
{
    double *a = malloc(N * sizeof(double)), *b = malloc(N * sizeof(double)),
           *c = malloc(N * sizeof(double));
    if (!a || !b || !c) {
        fprintf(stderr, "triad: out of memory (3 x %ld bytes)\n", (long)(N * sizeof(double)));
        return 1;
    }
    for (long i = 0; i < N; i++) {
        a[i] = 1.0;
        b[i] = 2.0;
        c[i] = 0.5;
    }
    double t0 = now();
    for (long p = 0; p < passes; p++) {
        double s = 1.0 + (double)(p & 7) * 0.125;
        for (long i = 0; i < N; i++)
            a[i] = b[i] + s * c[i];
        __asm__ volatile("" ::: "memory"); /* every pass's stores happen */
    }
    double t1 = now();
    double check = 0.0;
    for (long i = 0; i < N; i += 4096)
        check += a[i];
    printf("triad elements=%ld passes=%ld seconds=%.6f bytes_per_element=%d check=%g\n", N,
           passes, t1 - t0, BYTES_PER_ELEMENT, check);
    return 0;
}

static int chase(long mib, long loads)
{
    size_t n = (size_t)mib << 17; /* 8-byte slots */
    uint64_t *next = huge(n * sizeof(uint64_t));
    if (!next) {
        fprintf(stderr, "chase: out of memory (%ld MiB)\n", mib);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        next[i] = i;
    uint64_t x = 88172645463325252ULL; /* xorshift64, Marsaglia 2003 */
    for (size_t i = n - 1; i > 0; i--) { /* Sattolo: one cycle through every slot */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t j = x % i;
        uint64_t t = next[i];
        next[i] = next[j];
        next[j] = t;
    }
    uint64_t p = 0;
    for (long i = 0; i < loads / 10; i++) /* warm the TLB and page tables */
        p = next[p];
    double t0 = now();
    for (long i = 0; i < loads; i++)
        p = next[p];
    double t1 = now();
    printf("chase mib=%ld loads=%ld ns_per_load=%.3f end=%llu\n", mib, loads,
           (t1 - t0) * 1e9 / (double)loads, (unsigned long long)p);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "triad") == 0 && atol(argv[2]) > 0)
        return triad(atol(argv[2]));
    if (argc == 4 && strcmp(argv[1], "chase") == 0 && atol(argv[2]) > 0 && atol(argv[3]) > 0)
        return chase(atol(argv[2]), atol(argv[3]));
    fprintf(stderr, "usage: triad triad PASSES | triad chase MIB LOADS\n");
    return 2;
}
