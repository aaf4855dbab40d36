/* Misses and their overlap from a memory trace: the burst factors of a cpu_profile
 * (crates/vmio-core/src/workload/cpu/bzip2.rs, docs/cpu.md "bursts"), and what a streaming
 * co-runner takes from it in an inclusive or a victim last level (docs/cpu.md "victim L3").
 *
 *   cc -O2 -o miss-overlap scripts/miss-overlap.c
 *   valgrind --tool=lackey --trace-mem=yes --log-fd=9 bzip2 -9 -c input 9>&1 1>/dev/null \
 *       2>/dev/null | ./miss-overlap 200000000 [CO_LINES_PKI:L2_KIB ...]
 *
 * (input: the first 2 MiB of vmio.real.cpu.make_input(seed 1); the first argument:
 * instructions to read, a report every 25 M.)
 *
 * 1. Alone. A 48 KiB 12-way L1D and, behind it, last levels of 512 KiB to 16 MiB (16-way,
 *    LRU, 64-byte lines). For each last level: misses per kilo-instruction (loads, stores),
 *    and the misses' overlap as Karkhanis and Smith's first-order model counts it: a miss
 *    opens a window of ROB instructions; every miss issued within it (at most MB) is served
 *    under the same stall. Prints, per level and ROB, misses / groups (the measured MLP)
 *    next to the evenly spread model's 1 + mpki * rob / 1000.
 *
 * 2. Beside a stream (for each CO_LINES_PKI:L2_KIB given). The same L1D, a private L2 of
 *    L2_KIB (16-way) and a shared L3 of 4, 8 and 16 MiB (16-way, LRU), alone and while a
 *    co-runner inserts CO_LINES_PKI new lines per kilo-instruction of the traced program
 *    (a stream: never reused; the triad's rate against bzip2's instructions), under two
 *    inclusion policies:
 *      inclusive  every line of the L2 is in the L3; an L2 miss fills both; an L3 eviction
 *                 takes the line out of the L2 too (back-invalidation: Jaleel et al.'s
 *                 "inclusion victims", MICRO 2010); the L3's LRU order does not see L2 hits
 *      victim     the L3 is filled only by L2 evictions; an L3 hit moves the line to the L2
 *                 and out of the L3 (exclusive: AMD's Zen L3, "filled from L2 victims");
 *                 an L3 eviction touches no L2
 *    The co-runner's lines enter the L3 at its rate under both (inclusive: when it fills
 *    them; victim: when its own L2 evicts them, the same rate in steady state).
 *    Prints the traced program's L3 misses per kilo-instruction (loads, stores) and the
 *    loads' overlap (ROB 448, MB 22), alone and beside, per policy and L3 size. */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
typedef struct { int sets, ways; uint64_t *tag; uint64_t *age; uint64_t clk; } Cache;
#define EMPTY (~0ULL)
#define CO_BIT (1ULL << 62) /* the co-runner's lines */
static Cache mk(long bytes, int ways) { Cache c; c.ways = ways; c.sets = bytes / 64 / ways;
  c.tag = calloc((size_t)c.sets * ways, 8); c.age = calloc((size_t)c.sets * ways, 8); c.clk = 0;
  for (long i = 0; i < (long)c.sets * ways; i++)
    c.tag[i] = EMPTY;
  return c; }
static int access_(Cache *c, uint64_t line) { /* 1 = hit; a miss fills in place of the LRU */
  int s = line % c->sets; uint64_t *t = c->tag + (size_t)s * c->ways, *a = c->age + (size_t)s * c->ways;
  c->clk++; int lru = 0;
  for (int w = 0; w < c->ways; w++) { if (t[w] == line) { a[w] = c->clk; return 1; } if (a[w] < a[lru]) lru = w; }
  t[lru] = line; a[lru] = c->clk; return 0; }
/* The way holding `line`, or -1; no LRU update. */
static int find(Cache *c, uint64_t line) {
  int s = line % c->sets; uint64_t *t = c->tag + (size_t)s * c->ways;
  for (int w = 0; w < c->ways; w++) if (t[w] == line) return w;
  return -1; }
static void touch(Cache *c, uint64_t line, int w) { c->clk++; c->age[(size_t)(line % c->sets) * c->ways + w] = c->clk; }
static void drop(Cache *c, uint64_t line, int w) { size_t i = (size_t)(line % c->sets) * c->ways + w; c->tag[i] = EMPTY; c->age[i] = 0; }
/* Insert `line` (not present) as most recent; returns the line it evicted, or EMPTY. */
static uint64_t insert(Cache *c, uint64_t line) {
  int s = line % c->sets; uint64_t *t = c->tag + (size_t)s * c->ways, *a = c->age + (size_t)s * c->ways;
  c->clk++; int lru = 0;
  for (int w = 0; w < c->ways; w++) { if (t[w] == EMPTY) { lru = w; break; } if (a[w] < a[lru]) lru = w; }
  uint64_t old = t[lru]; t[lru] = line; a[lru] = c->clk; return old; }
#define NL 6
#define NR 3
static const long LL[NL] = {512L<<10, 1L<<20, 2L<<20, 4L<<20, 8L<<20, 16L<<20};
static const long ROB[NR] = {96, 224, 448};
static const int MBUF[NR] = {8, 10, 22};
typedef struct { long groups, in_group; uint64_t end; long misses; } Grp;
static void miss_at(Grp *g, uint64_t icount, long rob, int mb) {
  g->misses++;
  if (g->misses > 1 && icount < g->end && g->in_group < mb) { g->in_group++; return; }
  g->groups++; g->in_group = 1; g->end = icount + rob; }
/* Part 2: a private L2 and a shared L3 under one policy, with or without the stream. */
#define NS 3
static const long L3S[NS] = {4L<<20, 8L<<20, 16L<<20};
typedef struct { Cache l2, l3; int victim; double co_pki, co_due; uint64_t co_next; long lm, sm; Grp g; } Hier;
static void h_access(Hier *h, uint64_t line, int store, uint64_t icount) {
  int w = find(&h->l2, line);
  if (w >= 0) { touch(&h->l2, line, w); return; }
  int w3 = find(&h->l3, line);
  if (w3 >= 0) {
    if (h->victim) drop(&h->l3, line, w3); else touch(&h->l3, line, w3);
  } else {
    if (store) h->sm++; else { h->lm++; miss_at(&h->g, icount, 448, 22); }
    if (!h->victim) {
      uint64_t old = insert(&h->l3, line);
      if (old != EMPTY && !(old & CO_BIT)) { int v = find(&h->l2, old); if (v >= 0) drop(&h->l2, old, v); }
    }
  }
  uint64_t out = insert(&h->l2, line);
  if (h->victim && out != EMPTY) insert(&h->l3, out); }
/* The co-runner's lines due by instruction `icount`. */
static void h_stream(Hier *h, uint64_t icount) {
  if (h->co_pki <= 0) return;
  h->co_due += h->co_pki / 1000.0;
  while (h->co_due >= 1.0) {
    h->co_due -= 1.0;
    uint64_t line = CO_BIT | h->co_next++;
    uint64_t old = insert(&h->l3, line);
    if (!h->victim && old != EMPTY && !(old & CO_BIT)) { int v = find(&h->l2, old); if (v >= 0) drop(&h->l2, old, v); }
  }
  (void)icount; }
static void report(uint64_t icount, long loads, long stores, long *lm, long *sm, Grp gl[NL][NR], Grp ga[NL][NR], Hier *hs, int nh);
int main(int argc, char **argv) {
  uint64_t limit = argc > 1 ? strtoull(argv[1], 0, 10) : ~0ULL;
  Cache l1 = mk(48 << 10, 12), ll[NL]; for (int i = 0; i < NL; i++) ll[i] = mk(LL[i], 16);
  Grp gl[NL][NR], ga[NL][NR]; memset(gl, 0, sizeof gl); memset(ga, 0, sizeof ga);
  long lm[NL] = {0}, sm[NL] = {0}, loads = 0, stores = 0;
  /* hierarchies: for each L3 size, policy (inclusive, victim), alone / beside */
  int nspec = argc > 2 ? argc - 2 : 0, nh = nspec * NS * 4; Hier *hs = calloc(nh ? nh : 1, sizeof(Hier));
  for (int i = 0; i < nh; i++) {
    const char *spec = argv[2 + i / (NS * 4)]; const char *colon = strchr(spec, ':');
    double co = atof(spec); long l2kib = colon ? atol(colon + 1) : 1024; int j = i % (NS * 4);
    hs[i].l2 = mk(l2kib << 10, 16); hs[i].l3 = mk(L3S[j / 4], 16);
    hs[i].victim = (j / 2) % 2; hs[i].co_pki = (j % 2) ? co : 0.0; }
  uint64_t icount = 0; char buf[256];
  while (fgets(buf, sizeof buf, stdin)) {
    if (buf[0] == 'I') { if (++icount >= limit) break; for (int i = 0; i < nh; i++) h_stream(&hs[i], icount);
      if (icount % 25000000 == 0) report(icount, loads, stores, lm, sm, gl, ga, hs, nh); continue; }
    if (buf[0] != ' ') continue;
    char k = buf[1]; uint64_t addr = strtoull(buf + 3, 0, 16);
    int store = (k == 'S'); if (k == 'L' || k == 'M') loads++; if (k == 'S' || k == 'M') stores++;
    if (k != 'L' && k != 'S' && k != 'M') continue;
    uint64_t line = addr >> 6;
    if (access_(&l1, line)) continue;
    for (int i = 0; i < nh; i++) h_access(&hs[i], line, store, icount);
    for (int i = 0; i < NL; i++) {
      if (access_(&ll[i], line)) continue;
      if (store) sm[i]++; else lm[i]++;
      for (int r = 0; r < NR; r++) { if (!store) miss_at(&gl[i][r], icount, ROB[r], MBUF[r]); miss_at(&ga[i][r], icount, ROB[r], MBUF[r]); }
    }
  }
  report(icount, loads, stores, lm, sm, gl, ga, hs, nh);
  return 0; }
static void report(uint64_t icount, long loads, long stores, long *lm, long *sm, Grp gl[NL][NR], Grp ga[NL][NR], Hier *hs, int nh) {
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
  for (int i = 0; i < nh; i++) {
    Hier *h = &hs[i]; double lk = 1000.0 * h->lm / icount, sk = 1000.0 * h->sm / icount;
    double ml = h->g.groups ? (double)h->g.misses / h->g.groups : 0;
    printf("L2 %ld KiB + L3 %2ld MiB %-9s %-6s (%.1f lines/ki): load mpki %.3f store mpki %.3f loads mlp %.2f\n",
           (long)h->l2.sets * h->l2.ways * 64 >> 10, (long)h->l3.sets * h->l3.ways * 64 >> 20, h->victim ? "victim" : "inclusive",
           h->co_pki > 0 ? "beside" : "alone", h->co_pki, lk, sk, ml);
    (void)NS;
  }
  fflush(stdout); }
