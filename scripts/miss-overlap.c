/* Misses and their overlap from a memory trace: the burst factors of a cpu_profile
 * (crates/vmio-core/src/workload/cpu/bzip2.rs, docs/cpu.md "bursts").
 *
 *   cc -O2 -o miss-overlap scripts/miss-overlap.c
 *   valgrind --tool=lackey --trace-mem=yes --log-fd=9 bzip2 -9 -c input 9>&1 1>/dev/null \
 *       2>/dev/null | ./miss-overlap 200000000
 *
 * (input: the first 2 MiB of vmio.real.cpu.make_input(seed 1); the argument: instructions
 * to read, a report every 25 M.)
 *
 * It simulates a 48 KiB 12-way L1D and, behind it, last levels of 512 KiB, 1, 2, 4 MiB (16-way, LRU, 64-byte lines). For each last
 * level: misses per kilo-instruction (loads, stores), and the misses' overlap as
 * Karkhanis and Smith's first-order model counts it: a miss opens a window of ROB
 * instructions; every miss issued within it (at most MB) is served under the same stall.
 * Prints, per level and ROB, misses / groups (the measured MLP) next to the evenly spread
 * model's 1 + mpki * rob / 1000. */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
typedef struct { int sets, ways; uint64_t *tag; uint64_t *age; uint64_t clk; } Cache;
static Cache mk(long bytes, int ways) { Cache c; c.ways = ways; c.sets = bytes / 64 / ways;
  c.tag = calloc((size_t)c.sets * ways, 8); c.age = calloc((size_t)c.sets * ways, 8); c.clk = 0;
  for (long i = 0; i < (long)c.sets * ways; i++)
    c.tag[i] = ~0ULL;
  return c; }
static int access_(Cache *c, uint64_t line) { /* 1 = hit */
  int s = line % c->sets; uint64_t *t = c->tag + (size_t)s * c->ways, *a = c->age + (size_t)s * c->ways;
  c->clk++; int lru = 0;
  for (int w = 0; w < c->ways; w++) { if (t[w] == line) { a[w] = c->clk; return 1; } if (a[w] < a[lru]) lru = w; }
  t[lru] = line; a[lru] = c->clk; return 0; }
#define NL 4
#define NR 3
static const long LL[NL] = {512L<<10, 1L<<20, 2L<<20, 4L<<20};
static const long ROB[NR] = {96, 224, 448};
static const int MBUF[NR] = {8, 10, 22};
typedef struct { long groups, in_group; uint64_t end; long misses; } Grp;
static void miss_at(Grp *g, uint64_t icount, long rob, int mb) {
  g->misses++;
  if (g->misses > 1 && icount < g->end && g->in_group < mb) { g->in_group++; return; }
  g->groups++; g->in_group = 1; g->end = icount + rob; }
static void report(uint64_t icount, long loads, long stores, long *lm, long *sm, Grp gl[NL][NR], Grp ga[NL][NR]);
int main(int argc, char **argv) {
  uint64_t limit = argc > 1 ? strtoull(argv[1], 0, 10) : ~0ULL;
  Cache l1 = mk(48 << 10, 12), ll[NL]; for (int i = 0; i < NL; i++) ll[i] = mk(LL[i], 16);
  Grp gl[NL][NR], ga[NL][NR]; memset(gl, 0, sizeof gl); memset(ga, 0, sizeof ga);
  long lm[NL] = {0}, sm[NL] = {0}, loads = 0, stores = 0;
  uint64_t icount = 0; char buf[256];
  while (fgets(buf, sizeof buf, stdin)) {
    if (buf[0] == 'I') { if (++icount >= limit) break; if (icount % 25000000 == 0) report(icount, loads, stores, lm, sm, gl, ga); continue; }
    if (buf[0] != ' ') continue;
    char k = buf[1]; uint64_t addr = strtoull(buf + 3, 0, 16);
    int store = (k == 'S'); if (k == 'L' || k == 'M') loads++; if (k == 'S' || k == 'M') stores++;
    if (k != 'L' && k != 'S' && k != 'M') continue;
    uint64_t line = addr >> 6;
    if (access_(&l1, line)) continue;
    for (int i = 0; i < NL; i++) {
      if (access_(&ll[i], line)) continue;
      if (store) sm[i]++; else lm[i]++;
      for (int r = 0; r < NR; r++) { if (!store) miss_at(&gl[i][r], icount, ROB[r], MBUF[r]); miss_at(&ga[i][r], icount, ROB[r], MBUF[r]); }
    }
  }
  report(icount, loads, stores, lm, sm, gl, ga);
  return 0; }
static void report(uint64_t icount, long loads, long stores, long *lm, long *sm, Grp gl[NL][NR], Grp ga[NL][NR]) {
  printf("instructions %llu loads/ki %.1f stores/ki %.1f\n", (unsigned long long)icount, 1000.0*loads/icount, 1000.0*stores/icount);
  for (int i = 0; i < NL; i++) {
    double lk = 1000.0 * lm[i] / icount, sk = 1000.0 * sm[i] / icount;
    printf("LL %5ld KiB: load mpki %.3f store mpki %.3f write share %.2f\n", LL[i] >> 10, lk, sk, sk / (lk + sk));
    for (int r = 0; r < NR; r++) {
      double ml = gl[i][r].groups ? (double)gl[i][r].misses / gl[i][r].groups : 0;
      double ma = ga[i][r].groups ? (double)ga[i][r].misses / ga[i][r].groups : 0;
      double el = 1 + lk * ROB[r] / 1000.0; if (el > MBUF[r]) el = MBUF[r];
      double ea = 1 + (lk + sk) * ROB[r] / 1000.0; if (ea > MBUF[r]) ea = MBUF[r];
      printf("   rob %3ld mb %2d: loads mlp %.2f (even %.2f)  all mlp %.2f (even %.2f)\n", ROB[r], MBUF[r], ml, el, ma, ea);
    }
  }
  fflush(stdout); }
