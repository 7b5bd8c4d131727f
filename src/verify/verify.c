/* verify: the walks over a region that fill it with the generator's values (or a later
 * version's), checksum it and check it element by element, on the CPU; and the dispatch that
 * sends device regions to the CUDA kernels (verify_gpu.h) along the same walk.
 *
 * The generator and the checksum term are results format 2's (values.h): stored results and
 * the GPU kernels depend on their exact bit patterns, and test_verify pins a few of them.
 * Version 0 keeps its own loops: a walk passes a NULL version to them, which the inlining
 * folds away, so --update none fills and checks at the speed it always had. Compiled with
 * -ffp-contract=off (src/CMakeLists.txt) for adam's fp32 steps (versions.h). */
#include <string.h>

#include "verify/verify.h"
#include "verify/verify_gpu.h"

/* The generator and the checksum term live in values.h, compiled for CPU and GPU alike. */

RF_ENUM_DEFINE(rf_verify_level, "verify", RF_VERIFY_LEVEL_LIST, RF_VERIFY_LEVEL_COUNT)

uint32_t rf_value_bits(uint64_t seed, int32_t tensor_id, int64_t index, rf_dtype dtype) {
  return rf_value_of(rf_value_key(seed, tensor_id), index, dtype);
}

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

static box_walk walk_of(const rf_region *r, const rf_box *box, const rf_tensor *t) {
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
static char *line_start(const rf_region *r, const box_walk *bw, const rf_tensor *t, int64_t o,
                        int64_t *g) {
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

/* Element i's bits: the generator's, or version vg's where vg is not NULL (a constant NULL
 * in version 0's inlined copies). */
RF_FORCE_INLINE uint32_t value_at(uint64_t key, const rf_version_gen *vg, int64_t i,
                                  rf_dtype dtype) {
  return vg ? rf_version_value(vg, i, dtype) : rf_value_of(key, i, dtype);
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

/* adam: how many of a chunk's elements differ between versions vg->k - 1 and vg->k, in one
 * pass of vg->k steps. */
RF_FORCE_INLINE int adam_chunk_changed(const rf_version_gen *vg, int64_t g, int64_t dg,
                                       rf_dtype dtype) {
  uint32_t e[RF_CHUNK], before[RF_CHUNK];
  rf_adam_state st[RF_CHUNK];
  for (int u = 0; u < RF_CHUNK; u++) {
    st[u] = rf_adam_start(rf_value_of(vg->key, g + u * dg, dtype), dtype);
    e[u] = rf_word_hash(vg->vkey, (uint64_t)(g + u * dg));
  }
  rf_adam_bias b = {1.0f, 1.0f};
  for (int64_t j = 1; j <= vg->k; j++) {
    if (j == vg->k)
      for (int u = 0; u < RF_CHUNK; u++)
        before[u] = rf_adam_bits(&st[u], dtype);
    b = rf_adam_bias_next(b);
    const uint32_t s = rf_version_salt(vg, j, 0);
    for (int u = 0; u < RF_CHUNK; u++)
      rf_adam_step(&st[u], rf_adam_grad(e[u], s), vg->lr, b);
  }
  int n = 0;
  for (int u = 0; u < RF_CHUNK; u++)
    n += rf_adam_bits(&st[u], dtype) != before[u];
  return n;
}

/* A chunk's values: the generator's, or version vg's. */
RF_FORCE_INLINE void chunk_values(uint64_t key, const rf_version_gen *vg, int64_t g, int64_t dg,
                                  rf_dtype dtype, uint32_t *out) {
  if (vg)
    version_chunk(vg, g, dg, dtype, out);
  else
    for (int u = 0; u < RF_CHUNK; u++)
      out[u] = rf_value_of(key, g + u * dg, dtype);
}

RF_FORCE_INLINE void fill_line(char *p, const box_walk *bw, int64_t g, uint64_t key,
                               const rf_version_gen *vg, rf_dtype dtype) {
  int64_t k = 0;
  for (; k + RF_CHUNK <= bw->n_in; k += RF_CHUNK) {
    uint32_t v[RF_CHUNK];
    chunk_values(key, vg, g + k * bw->dg, bw->dg, dtype, v);
    if (bw->step == 1)
      for (int u = 0; u < RF_CHUNK; u++)
        store_one(p, k + u, 1, v[u], dtype);
    else
      for (int u = 0; u < RF_CHUNK; u++)
        store_one(p, k + u, bw->step, v[u], dtype);
  }
  for (; k < bw->n_in; k++)
    store_one(p, k, bw->step, value_at(key, vg, g + k * bw->dg, dtype), dtype);
}

/* The same line at version vg->k from version vg->k - 1 under sparse: one hash per element
 * decides, and only a chunk that holds a change is written back. */
RF_FORCE_INLINE void advance_line(char *p, const box_walk *bw, int64_t g, const rf_version_gen *vg,
                                  rf_dtype dtype) {
  const uint32_t fb = rf_version_free_bits(dtype);
  const uint32_t s = rf_version_salt(vg, vg->k, 0), t = rf_version_salt(vg, vg->k, 1);
  int64_t k = 0;
  for (; k + RF_CHUNK <= bw->n_in; k += RF_CHUNK) {
    uint32_t flip[RF_CHUNK], any = 0;
    for (int u = 0; u < RF_CHUNK; u++) {
      uint32_t e = rf_word_hash(vg->vkey, (uint64_t)(g + (k + u) * bw->dg));
      flip[u] = rf_version_sparse_flip(e, s, t, vg->threshold, fb);
      any |= flip[u];
    }
    if (any)
      for (int u = 0; u < RF_CHUNK; u++)
        store_one(p, k + u, bw->step, load_one(p, k + u, bw->step, dtype) ^ flip[u], dtype);
  }
  for (; k < bw->n_in; k++) {
    uint32_t was = load_one(p, k, bw->step, dtype);
    uint32_t now = rf_version_advance(vg, g + k * bw->dg, was, dtype);
    if (now != was)
      store_one(p, k, bw->step, now, dtype);
  }
}

/* The checksum of one line under a scheme and element size that are constants in every
 * inlined copy. */
RF_FORCE_INLINE uint64_t checksum_line(const char *p, const box_walk *bw, int64_t g, int32_t id,
                                       rf_dtype dtype, rf_checksum_scheme scheme) {
  const uint64_t ckey = rf_checksum_key(id);
  const int ws = dtype == RF_DTYPE_FP32 ? 0 : dtype == RF_DTYPE_FP8 ? 2 : 1; /* a constant */
  uint64_t sum = 0;
  int64_t k = 0;
  for (; k + RF_CHUNK <= bw->n_in; k += RF_CHUNK) {
    if (bw->step == 1)
      for (int u = 0; u < RF_CHUNK; u++)
        sum += rf_checksum_term_as(scheme, id, ckey, g + (k + u) * bw->dg,
                                   load_one(p, k + u, 1, dtype), ws);
    else
      for (int u = 0; u < RF_CHUNK; u++)
        sum += rf_checksum_term_as(scheme, id, ckey, g + (k + u) * bw->dg,
                                   load_one(p, k + u, bw->step, dtype), ws);
  }
  for (; k < bw->n_in; k++)
    sum +=
        rf_checksum_term_as(scheme, id, ckey, g + k * bw->dg, load_one(p, k, bw->step, dtype), ws);
  return sum;
}

/* Counts the wrong elements of one line and records the first ones, up to max_report in all.
 * A clean chunk costs one comparison; only a chunk with a difference is walked again. */
RF_FORCE_INLINE int64_t check_line(const char *p, const box_walk *bw, int64_t g, const rf_tensor *t,
                                   uint64_t key, const rf_version_gen *vg, rf_dtype dtype,
                                   rf_mismatch *out, int max_report, int *nrep) {
  int64_t wrong = 0;
  for (int64_t k0 = 0; k0 < bw->n_in; k0 += RF_CHUNK) {
    int64_t k1 = k0 + RF_CHUNK;
    if (k1 <= bw->n_in) {
      uint32_t diff = 0, want[RF_CHUNK];
      chunk_values(key, vg, g + k0 * bw->dg, bw->dg, dtype, want);
      if (bw->step == 1)
        for (int u = 0; u < RF_CHUNK; u++)
          diff |= want[u] ^ load_one(p, k0 + u, 1, dtype);
      else
        for (int u = 0; u < RF_CHUNK; u++)
          diff |= want[u] ^ load_one(p, k0 + u, bw->step, dtype);
      if (!diff)
        continue;
    } else {
      k1 = bw->n_in;
    }
    for (int64_t k = k0; k < k1; k++) {
      uint32_t want = value_at(key, vg, g + k * bw->dg, dtype);
      uint32_t got = load_one(p, k, bw->step, dtype);
      if (want == got)
        continue;
      wrong++;
      if (out && *nrep < max_report) {
        rf_mismatch m = {t->id, g + k * bw->dg, want, got};
        out[(*nrep)++] = m;
      }
    }
  }
  return wrong;
}

/* ---- the public walks --------------------------------------------------------------------- */

/* One line of a fill, with version 0's loop where vg is NULL. */
RF_FORCE_INLINE void fill_line_as(char *p, const box_walk *bw, int64_t g, uint64_t key,
                                  const rf_version_gen *vg, rf_dtype dtype) {
  if (vg)
    fill_line(p, bw, g, key, vg, dtype);
  else
    fill_line(p, bw, g, key, NULL, dtype);
}

/* The version a walk computes: NULL where its values are version 0's. */
static const rf_version_gen *versioned(const rf_version_gen *g) {
  return rf_version_differs(g) ? g : NULL;
}

RF_SIMD_CLONES
void rf_fill_region(const rf_region *r, const rf_box *box, const rf_tensor *t, uint64_t seed,
                    const rf_weight_version *version, rf_dtype dtype) {
  box_walk bw = walk_of(r, box, t);
  rf_version_gen gen = rf_version_gen_of(seed, t->id, version);
  const rf_version_gen *vg = versioned(&gen);
  for (int64_t o = 0; o < bw.n_out; o++) {
    int64_t g;
    char *p = line_start(r, &bw, t, o, &g);
    switch (dtype) {
    case RF_DTYPE_BF16:
      fill_line_as(p, &bw, g, gen.key, vg, RF_DTYPE_BF16);
      break;
    case RF_DTYPE_FP16:
      fill_line_as(p, &bw, g, gen.key, vg, RF_DTYPE_FP16);
      break;
    case RF_DTYPE_FP32:
      fill_line_as(p, &bw, g, gen.key, vg, RF_DTYPE_FP32);
      break;
    case RF_DTYPE_FP8: /* a rollout dtype only: no logical tensor has it (model.h) */
    case RF_DTYPE_U8:  /* format bytes in a written checkpoint only */
      break;
    }
  }
}

RF_SIMD_CLONES
void rf_advance_region(const rf_region *r, const rf_box *box, const rf_tensor *t, uint64_t seed,
                       const rf_weight_version *version, rf_dtype dtype) {
  rf_version_gen gen = rf_version_gen_of(seed, t->id, version);
  if (!rf_version_differs(&gen))
    return; /* version 0, or none: every version holds the same values */
  if (gen.kind != RF_UPDATE_SPARSE) {
    /* full changes every element in O(1) and adam has no step from the bits alone: both are
     * filled, which for full is the faster way anyway. */
    rf_fill_region(r, box, t, seed, version, dtype);
    return;
  }
  box_walk bw = walk_of(r, box, t);
  for (int64_t o = 0; o < bw.n_out; o++) {
    int64_t g;
    char *p = line_start(r, &bw, t, o, &g);
    switch (dtype) {
    case RF_DTYPE_BF16:
      advance_line(p, &bw, g, &gen, RF_DTYPE_BF16);
      break;
    case RF_DTYPE_FP16:
      advance_line(p, &bw, g, &gen, RF_DTYPE_FP16);
      break;
    case RF_DTYPE_FP32:
      advance_line(p, &bw, g, &gen, RF_DTYPE_FP32);
      break;
    case RF_DTYPE_FP8:
    case RF_DTYPE_U8:
      break;
    }
  }
}

/* One line's checksum under a runtime scheme, with both scheme and element size constants
 * in each inlined copy. */
RF_FORCE_INLINE uint64_t checksum_line_as(const char *p, const box_walk *bw, int64_t g, int32_t id,
                                          rf_dtype dtype, rf_checksum_scheme scheme) {
  return scheme == RF_CHECKSUM_V1 ? checksum_line(p, bw, g, id, dtype, RF_CHECKSUM_V1)
                                  : checksum_line(p, bw, g, id, dtype, RF_CHECKSUM_V2);
}

/* The checksum sees only bit patterns, so bf16 and fp16 share one instance; fp8 is an fp8
 * rollout's bytes (rf_fp8_checksum). */
RF_SIMD_CLONES
uint64_t rf_checksum_region_as(rf_checksum_scheme scheme, const rf_region *r, const rf_box *box,
                               const rf_tensor *t, rf_dtype dtype) {
  box_walk bw = walk_of(r, box, t);
  uint64_t sum = 0;
  for (int64_t o = 0; o < bw.n_out; o++) {
    int64_t g;
    const char *p = line_start(r, &bw, t, o, &g);
    if (dtype == RF_DTYPE_FP32)
      sum += checksum_line_as(p, &bw, g, t->id, RF_DTYPE_FP32, scheme);
    else if (dtype == RF_DTYPE_FP8)
      sum += checksum_line_as(p, &bw, g, t->id, RF_DTYPE_FP8, scheme);
    else
      sum += checksum_line_as(p, &bw, g, t->id, RF_DTYPE_BF16, scheme);
  }
  return sum;
}

uint64_t rf_checksum_region(const rf_region *r, const rf_box *box, const rf_tensor *t,
                            rf_dtype dtype) {
  return rf_checksum_region_as(RF_CHECKSUM_CURRENT, r, box, t, dtype);
}

/* One line of a check, with version 0's loop where vg is NULL. */
RF_FORCE_INLINE int64_t check_line_as(const char *p, const box_walk *bw, int64_t g,
                                      const rf_tensor *t, uint64_t key, const rf_version_gen *vg,
                                      rf_dtype dtype, rf_mismatch *out, int max_report, int *nrep) {
  return vg ? check_line(p, bw, g, t, key, vg, dtype, out, max_report, nrep)
            : check_line(p, bw, g, t, key, NULL, dtype, out, max_report, nrep);
}

/* Mismatches are found in the region's memory order (see box_walk), which is row-major order
 * for everything but a transposed region. */
RF_SIMD_CLONES
int64_t rf_check_region(const rf_region *r, const rf_box *box, const rf_tensor *t, uint64_t seed,
                        const rf_weight_version *version, rf_dtype dtype, rf_mismatch *out,
                        int max_report, int *reported) {
  box_walk bw = walk_of(r, box, t);
  rf_version_gen gen = rf_version_gen_of(seed, t->id, version);
  const rf_version_gen *vg = versioned(&gen);
  int64_t wrong = 0;
  int nrep = 0;
  for (int64_t o = 0; o < bw.n_out; o++) {
    int64_t g;
    const char *p = line_start(r, &bw, t, o, &g);
    switch (dtype) {
    case RF_DTYPE_BF16:
      wrong += check_line_as(p, &bw, g, t, gen.key, vg, RF_DTYPE_BF16, out, max_report, &nrep);
      break;
    case RF_DTYPE_FP16:
      wrong += check_line_as(p, &bw, g, t, gen.key, vg, RF_DTYPE_FP16, out, max_report, &nrep);
      break;
    case RF_DTYPE_FP32:
      wrong += check_line_as(p, &bw, g, t, gen.key, vg, RF_DTYPE_FP32, out, max_report, &nrep);
      break;
    case RF_DTYPE_FP8: /* a rollout dtype only: no logical tensor has it (model.h) */
    case RF_DTYPE_U8:  /* format bytes in a written checkpoint only */
      break;
    }
  }
  if (reported)
    *reported = nrep;
  return wrong;
}

/* Counted from the rule, row by row of the box: full changes everything, sparse takes one hash
 * per element, adam its whole history, a chunk of elements at a time. */
RF_SIMD_CLONES
int64_t rf_version_changed_count(const rf_box *box, const rf_tensor *t, uint64_t seed,
                                 const rf_weight_version *version) {
  rf_version_gen gen = rf_version_gen_of(seed, t->id, version);
  if (!rf_version_differs(&gen) || rf_box_is_empty(box))
    return 0;
  if (gen.kind == RF_UPDATE_FULL)
    return rf_box_numel(box);
  int64_t n = 0;
  if (gen.kind == RF_UPDATE_SPARSE) {
    const uint32_t s = rf_version_salt(&gen, gen.k, 0);
    for (int64_t i = box->lo[0]; i < box->hi[0]; i++)
      for (int64_t j = box->lo[1], g = i * t->shape[1]; j < box->hi[1]; j++)
        n += (uint64_t)rf_hash32(rf_word_hash(gen.vkey, (uint64_t)(g + j)) ^ s) < gen.threshold;
    return n;
  }
  for (int64_t i = box->lo[0]; i < box->hi[0]; i++) {
    int64_t g = i * t->shape[1], j = box->lo[1];
    for (; j + RF_CHUNK <= box->hi[1]; j += RF_CHUNK)
      n += t->dtype == RF_DTYPE_BF16   ? adam_chunk_changed(&gen, g + j, 1, RF_DTYPE_BF16)
           : t->dtype == RF_DTYPE_FP16 ? adam_chunk_changed(&gen, g + j, 1, RF_DTYPE_FP16)
                                       : adam_chunk_changed(&gen, g + j, 1, RF_DTYPE_FP32);
    for (; j < box->hi[1]; j++)
      n += rf_version_changed(&gen, g + j, t->dtype);
  }
  return n;
}

/* ---- any kind of memory --------------------------------------------------------------------
 * Host and pinned regions run the walks above. A device region is described to the kernels
 * as the same lines (walk_of, line_start), so the GPU visits every element in the same order
 * and reports the same first mismatches. */

static rf_gpu_walk gpu_walk_of(const rf_region *r, const rf_box *box, const rf_tensor *t) {
  box_walk bw = walk_of(r, box, t);
  rf_gpu_walk w;
  memset(&w, 0, sizeof w);
  w.n_out = bw.n_out, w.n_in = bw.n_in;
  if (bw.n_out == 0)
    return w;
  w.base = line_start(r, &bw, t, 0, &w.g0);
  w.pitch = r->stride[1 - bw.inner];
  w.step = bw.step;
  w.dg_out = bw.inner ? t->shape[1] : 1;
  w.dg_in = bw.dg;
  return w;
}

static rf_status kind_check(rf_mem_kind kind) {
  if (kind == RF_MEM_HOST || kind == RF_MEM_PINNED || kind == RF_MEM_DEVICE ||
      kind == RF_MEM_SHARED)
    return RF_OK;
  return rf_fail(RF_ERR_INTERNAL, "unknown memory kind %d", (int)kind);
}

rf_status rf_fill_region_on(rf_mem_kind kind, const rf_region *r, const rf_box *box,
                            const rf_tensor *t, uint64_t seed, const rf_weight_version *version,
                            rf_dtype dtype) {
  RF_TRY(kind_check(kind));
  if (kind == RF_MEM_DEVICE) {
    rf_gpu_walk w = gpu_walk_of(r, box, t);
    rf_version_gen gen = rf_version_gen_of(seed, t->id, version);
    return rf_gpu_fill(&w, &gen, dtype);
  }
  rf_fill_region(r, box, t, seed, version, dtype);
  return RF_OK;
}

/* On the device an advance is a fill of the version: O(k) per element for sparse, which the
 * GPU affords, and one kernel less to keep bit-identical. */
rf_status rf_advance_region_on(rf_mem_kind kind, const rf_region *r, const rf_box *box,
                               const rf_tensor *t, uint64_t seed, const rf_weight_version *version,
                               rf_dtype dtype) {
  RF_TRY(kind_check(kind));
  rf_version_gen gen = rf_version_gen_of(seed, t->id, version);
  if (!rf_version_differs(&gen))
    return RF_OK;
  if (kind == RF_MEM_DEVICE)
    return rf_fill_region_on(kind, r, box, t, seed, version, dtype);
  rf_advance_region(r, box, t, seed, version, dtype);
  return RF_OK;
}

rf_status rf_checksum_region_on(rf_mem_kind kind, const rf_region *r, const rf_box *box,
                                const rf_tensor *t, rf_dtype dtype, uint64_t *sum) {
  RF_TRY(kind_check(kind));
  if (kind == RF_MEM_DEVICE) {
    rf_gpu_walk w = gpu_walk_of(r, box, t);
    return rf_gpu_checksum(&w, t->id, dtype, sum);
  }
  *sum = rf_checksum_region(r, box, t, dtype);
  return RF_OK;
}

rf_status rf_check_region_on(rf_mem_kind kind, const rf_region *r, const rf_box *box,
                             const rf_tensor *t, uint64_t seed, const rf_weight_version *version,
                             rf_dtype dtype, rf_mismatch *out, int max_report, int *reported,
                             int64_t *wrong) {
  RF_TRY(kind_check(kind));
  if (kind == RF_MEM_DEVICE) {
    rf_gpu_walk w = gpu_walk_of(r, box, t);
    rf_version_gen gen = rf_version_gen_of(seed, t->id, version);
    return rf_gpu_check(&w, &gen, t->id, dtype, out, max_report, reported, wrong);
  }
  *wrong = rf_check_region(r, box, t, seed, version, dtype, out, max_report, reported);
  return RF_OK;
}
