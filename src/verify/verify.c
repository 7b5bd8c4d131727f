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
#include "verify/verify_walk.h"

/* The generator and the checksum term live in values.h, compiled for CPU and GPU alike. */

RF_ENUM_DEFINE(rf_verify_level, "verify", RF_VERIFY_LEVEL_LIST, RF_VERIFY_LEVEL_COUNT)

uint32_t rf_value_bits(uint64_t seed, int32_t tensor_id, int64_t index, rf_dtype dtype) {
  return rf_value_of(rf_value_key(seed, tensor_id), index, dtype);
}

/* ---- the line loops (verify_walk.h: the walk, chunks and clones) ------------------------- */

/* Element i's bits: the generator's, or version vg's where vg is not NULL (a constant NULL
 * in version 0's inlined copies). */
RF_FORCE_INLINE uint32_t value_at(uint64_t key, const rf_version_gen *vg, int64_t i,
                                  rf_dtype dtype) {
  return vg ? rf_version_value(vg, i, dtype) : rf_value_of(key, i, dtype);
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
