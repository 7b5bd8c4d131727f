/* region_join: box copies that continue each other in memory on both sides become one.
 *
 * A refit of a mixture-of-experts model is thousands of whole tensors (DeepSeek-V2-Lite: 5,291,
 * of which 4,992 are 5.8 MB experts), and one launch of the mapping engine copies them all.
 * Each copy costs the GPU a ramp and the host a descriptor (a cudaMemcpyAsync call, a row of
 * the kernel's piece table), so a batch of many small copies runs well below a device copy of
 * the same bytes (results/h200/README.md, "MoE copies joined"). Yet the trainer stores a
 * layer's experts one after another in the order of the rollout's stacked w13_weight and
 * w2_weight (layout.h, the storage order), so most of those copies are one long run of bytes
 * on both sides, cut at tensor edges. Joining them leaves a few hundred copies.
 *
 * A copy qualifies when its box is one dense run of bytes on both sides (rf_copy_walk_of: one
 * line, or lines that follow each other with no gap on either side). Run b joins run a when b
 * starts where a ends on both sides, with the same element size, and the joined run allows an
 * access as wide as each of the two did (addresses and length aligned to it, up to 16 bytes),
 * so no byte moves through a narrower access than before. Runs are found by their destination's end
 * in a hash table, so a run joins whichever earlier run it continues, wherever it stands in
 * the batch: a schedule that interleaves sources still joins each source's runs. A run that
 * ends where an earlier one starts is not joined (schedules list a source's bytes in storage
 * order). The copies of one batch are independent (one launch runs them in any order), so
 * joining changes what moves nowhere. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory.h"
#include "memory/region_walk.h"

typedef struct {
  char *dst;
  const char *src;
  int64_t bytes;
  int esize;
  int index; /* the copy's place in the batch, -1 for one that is no run */
} join_run;

/* The widest access (1 to 16 bytes) that the run's addresses and length allow. */
static int run_width(const char *dst, const char *src, int64_t bytes) {
  uint64_t bits = (uint64_t)(uintptr_t)dst | (uint64_t)(uintptr_t)src | (uint64_t)bytes;
  int width = 16;
  while (width > 1 && bits % (uint64_t)width != 0)
    width /= 2;
  return width;
}

/* Whether copy c is one dense run of bytes on both sides; fills *r if so. */
static int as_run(const rf_box_copy *c, join_run *r) {
  if (c->dst.esize != c->src.esize)
    return 0;
  rf_copy_walk cw = rf_copy_walk_of(&c->dst, &c->src, &c->box);
  if (cw.n_out == 0 || cw.d_in != 1 || cw.s_in != 1)
    return 0;
  if (cw.n_out > 1 && (cw.d_out != cw.n_in || cw.s_out != cw.n_in))
    return 0;
  r->dst = cw.dst;
  r->src = cw.src;
  r->bytes = cw.n_out * cw.n_in * c->src.esize;
  r->esize = c->src.esize;
  return 1;
}

static size_t slot_of(const char *key, size_t mask) {
  uint64_t h = (uint64_t)(uintptr_t)key * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 20) & mask;
}

/* One flat row-major region of `n` elements at `base`: the joined run as a box copy. */
static rf_region flat(const char *base, int64_t n, int esize) {
  rf_box box = {{0, 0}, {1, n}};
  return rf_region_row_major((void *)base, &box, esize);
}

int rf_box_copies_join(rf_box_copy *copies, int count) {
  if (count < 2)
    return count;
  size_t cap = 4;
  while (cap < (size_t)count * 4)
    cap *= 2;
  join_run *runs = malloc((size_t)count * sizeof *runs);
  int *table = malloc(cap * sizeof *table); /* run indices by destination end; -1 empty */
  if (!runs || !table) {                    /* joining is an optimisation: go without */
    free(runs);
    free(table);
    return count;
  }
  memset(table, 0xff, cap * sizeof *table);
  size_t mask = cap - 1;
  int joined = 0;
  for (int i = 0; i < count; i++) {
    join_run *b = &runs[i];
    b->index = as_run(&copies[i], b) ? i : -1;
    if (b->index < 0)
      continue;
    /* An earlier run whose destination ends where b's starts. Entries whose run has grown
     * since hold a stale key: the check of the run's present end skips them. */
    size_t s = slot_of(b->dst, mask);
    int into = -1;
    for (; table[s] >= 0; s = (s + 1) & mask) {
      join_run *a = &runs[table[s]];
      if (a->dst + a->bytes == b->dst) {
        into = table[s];
        break;
      }
    }
    if (into >= 0) {
      join_run *a = &runs[into];
      int wa = run_width(a->dst, a->src, a->bytes), wb = run_width(b->dst, b->src, b->bytes);
      int width = run_width(a->dst, a->src, a->bytes + b->bytes);
      if (a->src + a->bytes == b->src && a->esize == b->esize && width >= (wa > wb ? wa : wb)) {
        a->bytes += b->bytes;
        b->index = -2; /* joined into `into` */
        joined++;
        b = a;
      }
    }
    /* Index b (the run that now ends after copy i's bytes) by its end. */
    for (s = slot_of(b->dst + b->bytes, mask); table[s] >= 0; s = (s + 1) & mask)
      ;
    table[s] = (int)(b - runs);
  }
  int n = count;
  if (joined) {
    n = 0;
    for (int i = 0; i < count; i++) {
      if (runs[i].index == -2)
        continue;
      if (runs[i].index >= 0 && runs[i].bytes != rf_box_numel(&copies[i].box) * runs[i].esize) {
        const join_run *r = &runs[i];
        copies[n].dst = flat(r->dst, r->bytes / r->esize, r->esize);
        copies[n].src = flat(r->src, r->bytes / r->esize, r->esize);
        copies[n].box = copies[n].dst.box;
      } else {
        copies[n] = copies[i];
      }
      n++;
    }
  }
  free(runs);
  free(table);
  return n;
}
