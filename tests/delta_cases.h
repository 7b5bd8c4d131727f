/* Pieces for the delta tests (test_delta.c on the host, test_delta_gpu.c against the device):
 * a tensor held in a region of some layout, two versions of it that differ at chosen elements
 * of a box, and a destination that holds the previous version. */
#ifndef RF_DELTA_CASES_H
#define RF_DELTA_CASES_H

#include <stdlib.h>
#include <string.h>

#include "delta/delta.h"
#include "memory/memory.h"
#include "test.h"

static uint64_t dc_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static uint64_t dc_rng_state = 0x243f6a8885a308d3ULL;
static uint64_t dc_rng(void) { return dc_mix(dc_rng_state += 0x9e3779b97f4a7c15ULL); }

/* How a region holds the tensor: row-major, row-major with rows padded by 7 elements (a slot
 * of a wider fused tensor), or transposed (--trainer-order jax). */
enum { DC_ROW_MAJOR, DC_PADDED, DC_TRANSPOSED, DC_LAYOUTS };

typedef struct {
  char *base;
  size_t bytes;
  rf_region r;
} dc_buf;

/* A host buffer of random bytes holding `whole` in `layout`. */
static dc_buf dc_buf_new(int layout, const rf_box *whole, int es) {
  int64_t rows = whole->hi[0] - whole->lo[0], cols = whole->hi[1] - whole->lo[1];
  int64_t pitch = layout == DC_PADDED ? cols + 7 : cols;
  dc_buf b;
  b.bytes = (size_t)(rows * pitch * es);
  b.base = malloc(b.bytes ? b.bytes : 1);
  ASSERT_TRUE(b.base);
  for (size_t i = 0; i < b.bytes; i += 8) {
    uint64_t r = dc_rng();
    memcpy(b.base + i, &r, RF_MIN((size_t)8, b.bytes - i));
  }
  if (layout == DC_TRANSPOSED)
    b.r = rf_region_transposed(b.base, whole, es);
  else
    b.r = rf_region_in_fused(b.base, pitch, 0, 0, whole, es);
  return b;
}

static void dc_buf_free(dc_buf *b) {
  free(b->base);
  b->base = NULL;
}

/* The address of element e (row-major over box) of region r. */
static char *dc_at(const rf_region *r, const rf_box *box, int64_t e) {
  int64_t cols = box->hi[1] - box->lo[1];
  return rf_region_at(r, box->lo[0] + e / cols, box->lo[1] + e % cols);
}

/* k distinct element numbers of [0, n), ascending: the first k of a partial shuffle. */
static int32_t *dc_pick(int64_t n, int64_t k) {
  int32_t *perm = malloc((size_t)(n ? n : 1) * sizeof *perm);
  ASSERT_TRUE(perm);
  for (int64_t i = 0; i < n; i++)
    perm[i] = (int32_t)i;
  for (int64_t i = 0; i < k; i++) {
    int64_t j = i + (int64_t)(dc_rng() % (uint64_t)(n - i));
    int32_t t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  /* Ascending, by marking: k may be all of n. */
  char *hit = calloc((size_t)(n ? n : 1), 1);
  ASSERT_TRUE(hit);
  for (int64_t i = 0; i < k; i++)
    hit[perm[i]] = 1;
  int64_t m = 0;
  for (int64_t i = 0; i < n; i++)
    if (hit[i])
      perm[m++] = (int32_t)i;
  free(hit);
  return perm;
}

/* Changes element e of box in r to another bit pattern. */
static void dc_change(const rf_region *r, const rf_box *box, int64_t e) {
  char *p = dc_at(r, box, e);
  uint32_t lanes = r->esize == 4 ? 0xffffffffu : (1u << (8 * r->esize)) - 1, x = 0;
  while (x == 0)
    x = (uint32_t)dc_rng() & lanes;
  for (int i = 0; i < r->esize; i++)
    p[i] ^= (char)(x >> (8 * i));
}

/* Copies all of whole from src into dst (any layouts). */
static void dc_copy(const dc_buf *dst, const dc_buf *src, const rf_box *whole) {
  rf_region_copy(&dst->r, &src->r, whole);
}

/* Whether box of a and box of b hold the same elements. */
static int dc_same_box(const rf_region *a, const rf_region *b, const rf_box *box) {
  int64_t n = rf_box_numel(box);
  for (int64_t e = 0; e < n; e++)
    if (memcmp(dc_at(a, box, e), dc_at(b, box, e), (size_t)a->esize) != 0)
      return 0;
  return 1;
}

#endif
