/* verify_walk: how the CPU walks a box of a region, shared by verify.c (fill, checksum, check)
 * and versions.c (advance, changed counts), private to the verify module. Everything here is
 * inlined into the walks, whose element loops it lets the compiler vectorize. */
#ifndef RF_VERIFY_WALK_H
#define RF_VERIFY_WALK_H

#include "verify/verify.h"

/* ---- walking a box ---------------------------------------------------------------------- */

/* A box as lines of elements in the region's memory order: rows of a row-major or fused
 * region, columns of a transposed one. Fill and checksum do not care about the order, and
 * walking the dense dimension innermost keeps a transposed trainer shard as fast as a
 * row-major one. `step` is the element stride along a line, `dg` the global index step. */
typedef struct {
  int64_t n_out, n_in;
  int64_t out_lo, in_lo;
  int inner; /* the box dimension walked along a line */
  int64_t step, dg;
} box_walk;

static inline box_walk walk_of(const rf_region *r, const rf_box *box, const rf_tensor *t) {
  int64_t h = box->hi[0] - box->lo[0], w = box->hi[1] - box->lo[1];
  box_walk bw;
  bw.inner = (w == 1 || (h > 1 && r->stride[0] < r->stride[1])) ? 0 : 1;
  bw.n_out = bw.inner ? h : w;
  bw.n_in = bw.inner ? w : h;
  bw.out_lo = box->lo[1 - bw.inner];
  bw.in_lo = box->lo[bw.inner];
  bw.step = r->stride[bw.inner];
  bw.dg = bw.inner ? 1 : t->shape[1];
  if (h <= 0 || w <= 0)
    bw.n_out = bw.n_in = 0;
  return bw;
}

/* The start of line o: its address and the global index of its first element. */
static inline char *line_start(const rf_region *r, const box_walk *bw, const rf_tensor *t,
                               int64_t o, int64_t *g) {
  int64_t i = bw->inner ? bw->out_lo + o : bw->in_lo;
  int64_t j = bw->inner ? bw->in_lo : bw->out_lo + o;
  *g = i * t->shape[1] + j;
  return rf_region_at(r, i, j);
}

/* ---- the line loops ----------------------------------------------------------------------
 * Lines are processed in chunks of RF_CHUNK elements: a loop over a chunk has a fixed trip
 * count, which GCC vectorizes even at -O2, and unit stride in the common case (a line is
 * dense in every region kind the harness builds). On x86-64 the public walks are also
 * compiled for AVX-512 (format 1's checksum term needs its 64-bit multiply, and its wider
 * vectors help the 32-bit hashes too), and the loader picks that copy where the CPU has it.
 * Elsewhere the same code runs as scalar loops. The dtype is a constant in every inlined copy,
 * so rf_value_of has no switch per element. */
#define RF_CHUNK 16
#define RF_FORCE_INLINE static inline __attribute__((always_inline))

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__)
#define RF_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define RF_SIMD_CLONES
#endif

/* Element k of a line, as 8, 16 or 32 bits (fp8 for the checksum of an fp8 rollout). */
RF_FORCE_INLINE uint32_t load_one(const char *p, int64_t k, int64_t step, rf_dtype dtype) {
  if (dtype == RF_DTYPE_FP8)
    return ((const uint8_t *)p)[k * step];
  return dtype == RF_DTYPE_FP32 ? ((const uint32_t *)p)[k * step] : ((const uint16_t *)p)[k * step];
}

RF_FORCE_INLINE void store_one(char *p, int64_t k, int64_t step, uint32_t v, rf_dtype dtype) {
  if (dtype == RF_DTYPE_FP32)
    ((uint32_t *)p)[k * step] = v;
  else
    ((uint16_t *)p)[k * step] = (uint16_t)v;
}

/* A chunk of a later version: elements g, g + dg, ... at version vg, with the salts and adam's
 * bias terms hoisted out of the element loops (versions.h), so that each loop over the chunk
 * vectorizes as version 0's do. */
RF_FORCE_INLINE void version_chunk(const rf_version_gen *vg, int64_t g, int64_t dg, rf_dtype dtype,
                                   uint32_t *out) {
  const uint32_t fb = rf_version_free_bits(dtype);
  uint32_t e[RF_CHUNK];
  for (int u = 0; u < RF_CHUNK; u++) {
    out[u] = rf_value_of(vg->key, g + u * dg, dtype);
    e[u] = rf_word_hash(vg->vkey, (uint64_t)(g + u * dg));
  }
  if (vg->kind == RF_UPDATE_FULL) {
    const uint32_t t = rf_version_salt(vg, vg->k, 1);
    for (int u = 0; u < RF_CHUNK; u++)
      out[u] ^= rf_version_full_bits(e[u], t, vg->k, fb);
    return;
  }
  if (vg->kind == RF_UPDATE_SPARSE) {
    for (int64_t j = 1; j <= vg->k; j++) {
      const uint32_t s = rf_version_salt(vg, j, 0), t = rf_version_salt(vg, j, 1);
      for (int u = 0; u < RF_CHUNK; u++)
        out[u] ^= rf_version_sparse_flip(e[u], s, t, vg->threshold, fb);
    }
    return;
  }
  rf_adam_state st[RF_CHUNK];
  for (int u = 0; u < RF_CHUNK; u++)
    st[u] = rf_adam_start(out[u], dtype);
  rf_adam_bias b = {1.0f, 1.0f};
  for (int64_t j = 1; j <= vg->k; j++) {
    b = rf_adam_bias_next(b);
    const uint32_t s = rf_version_salt(vg, j, 0);
    for (int u = 0; u < RF_CHUNK; u++)
      rf_adam_step(&st[u], rf_adam_grad(e[u], s), vg->lr, b);
  }
  for (int u = 0; u < RF_CHUNK; u++)
    out[u] = rf_adam_bits(&st[u], dtype);
}

#endif
