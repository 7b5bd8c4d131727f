/* versions: parsing --update, and the host functions over the element rules of versions.h:
 * one element's bits, a box's changed count and its checksum, computed without memory, the
 * advance of a region from one version to the next, and a version's name for receipts.
 *
 * Compiled with -ffp-contract=off (src/CMakeLists.txt): adam's fp32 steps must round as the
 * CUDA kernels' _rn intrinsics do, one operation at a time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "verify/verify.h"
#include "verify/verify_walk.h"

RF_ENUM_DEFINE(rf_update_kind, "update", RF_UPDATE_LIST, RF_UPDATE_COUNT)

/* A plain decimal number, as the command line's other numbers: no hex, inf, nan or spaces. */
static int parse_number(const char *text, double *out) {
  if (!text[0] || text[strspn(text, "0123456789.eE+-")] != '\0' || !strpbrk(text, "0123456789"))
    return 0;
  char *end = NULL;
  double v = strtod(text, &end);
  if (!end || *end != '\0' || !isfinite(v))
    return 0;
  *out = v;
  return 1;
}

rf_status rf_update_parse(const char *text, rf_update *out, char *why, size_t why_len) {
  rf_update u;
  memset(&u, 0, sizeof u);
  const char *colon = strchr(text, ':');
  size_t n = colon ? (size_t)(colon - text) : strlen(text);
  char name[16] = "";
  int kind = -1;
  if (n < sizeof name) {
    memcpy(name, text, n);
    name[n] = '\0';
    kind = rf_enum_find(rf_update_kind_names, RF_UPDATE_COUNT, name);
  }
  int takes = kind == RF_UPDATE_SPARSE || kind == RF_UPDATE_ADAM;
  int ok = kind >= 0 && takes == (colon != NULL);
  if (ok && takes) {
    ok = parse_number(colon + 1, &u.param);
    ok = ok &&
         (kind == RF_UPDATE_SPARSE ? u.param >= 0 && u.param <= 1 : u.param > 0 && u.param <= 1);
  }
  if (!ok) {
    snprintf(why, why_len,
             "'%s' is not none, full, sparse:F with 0 <= F <= 1, or adam:LR with 0 < LR <= 1",
             text);
    return RF_ERR_USAGE;
  }
  u.kind = (rf_update_kind)kind;
  if (u.kind == RF_UPDATE_SPARSE)
    u.threshold = (uint64_t)llround(u.param * 4294967296.0);
  if (u.kind == RF_UPDATE_ADAM)
    u.lr = (float)u.param;
  *out = u;
  return RF_OK;
}

rf_version_gen rf_version_gen_of(uint64_t seed, int32_t tensor_id,
                                 const rf_weight_version *version) {
  rf_version_gen g;
  memset(&g, 0, sizeof g);
  g.key = rf_value_key(seed, tensor_id);
  /* "versions": the later versions' key, unrelated to version 0's. */
  g.vkey = rf_mix64(g.key ^ 0x76657273696f6e73ULL);
  if (version) {
    g.kind = (int32_t)version->update.kind;
    g.k = version->k;
    g.threshold = version->update.threshold;
    g.lr = version->update.lr;
  }
  return g;
}

uint32_t rf_version_bits(uint64_t seed, int32_t tensor_id, const rf_weight_version *version,
                         int64_t index, rf_dtype dtype) {
  rf_version_gen g = rf_version_gen_of(seed, tensor_id, version);
  return rf_version_value(&g, index, dtype);
}

uint64_t rf_version_checksum(const rf_box *box, const rf_tensor *t, uint64_t seed,
                             const rf_weight_version *version) {
  rf_version_gen g = rf_version_gen_of(seed, t->id, version);
  const uint64_t ckey = rf_checksum_key(t->id);
  const int ws = rf_word_shift(rf_dtype_size(t->dtype));
  uint64_t sum = 0;
  for (int64_t i = box->lo[0]; i < box->hi[0]; i++)
    for (int64_t j = box->lo[1]; j < box->hi[1]; j++) {
      int64_t index = i * t->shape[1] + j;
      sum += rf_checksum_term(ckey, index, rf_version_value(&g, index, t->dtype), ws);
    }
  return sum;
}

uint64_t rf_version_id(uint64_t seed, const rf_weight_version *version) {
  /* The fields one by one, little-endian, never the struct's bytes (padding, and param, the
   * text's double, which threshold and lr already hold as the element functions use them). */
  uint32_t lr_bits;
  memcpy(&lr_bits, &version->update.lr, sizeof lr_bits);
  const uint64_t fields[] = {seed, (uint64_t)version->update.kind, version->update.threshold,
                             lr_bits, (uint64_t)version->k};
  unsigned char bytes[sizeof fields];
  for (size_t f = 0; f < RF_ARRAY_LEN(fields); f++)
    for (int i = 0; i < 8; i++)
      bytes[f * 8 + (size_t)i] = (unsigned char)(fields[f] >> (8 * i));
  return XXH3_64bits(bytes, sizeof bytes);
}

/* ---- walks ------------------------------------------------------------------------------ */

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

/* Sets the mark of element offset m (rf_advance_region). */
RF_FORCE_INLINE void set_mark(uint64_t *marks, int64_t m) {
  marks[m >> 6] |= (uint64_t)1 << (m & 63);
}

/* The same line at version vg->k from version vg->k - 1 under sparse: one hash per element
 * decides, and only a chunk that holds a change is written back (and marked, from m0 on in
 * steps of the line's stride, when marks is not NULL). */
RF_FORCE_INLINE void advance_line(char *p, const box_walk *bw, int64_t g, const rf_version_gen *vg,
                                  rf_dtype dtype, uint64_t *marks, int64_t m0) {
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
      for (int u = 0; u < RF_CHUNK; u++) {
        store_one(p, k + u, bw->step, load_one(p, k + u, bw->step, dtype) ^ flip[u], dtype);
        if (marks && flip[u])
          set_mark(marks, m0 + (k + u) * bw->step);
      }
  }
  for (; k < bw->n_in; k++) {
    uint32_t was = load_one(p, k, bw->step, dtype);
    uint32_t now = rf_version_advance(vg, g + k * bw->dg, was, dtype);
    if (now != was) {
      store_one(p, k, bw->step, now, dtype);
      if (marks)
        set_mark(marks, m0 + k * bw->step);
    }
  }
}

/* The same line under full or adam, marked: each chunk of the version is computed as the fill
 * does, compared with what the line holds, and written and marked where it differs. */
RF_FORCE_INLINE void refill_line(char *p, const box_walk *bw, int64_t g, const rf_version_gen *vg,
                                 rf_dtype dtype, uint64_t *marks, int64_t m0) {
  int64_t k = 0;
  for (; k + RF_CHUNK <= bw->n_in; k += RF_CHUNK) {
    uint32_t now[RF_CHUNK];
    version_chunk(vg, g + k * bw->dg, bw->dg, dtype, now);
    for (int u = 0; u < RF_CHUNK; u++)
      if (load_one(p, k + u, bw->step, dtype) != now[u]) {
        store_one(p, k + u, bw->step, now[u], dtype);
        set_mark(marks, m0 + (k + u) * bw->step);
      }
  }
  for (; k < bw->n_in; k++) {
    uint32_t now = rf_version_value(vg, g + k * bw->dg, dtype);
    if (load_one(p, k, bw->step, dtype) != now) {
      store_one(p, k, bw->step, now, dtype);
      set_mark(marks, m0 + k * bw->step);
    }
  }
}

/* One line of an advance, the dtype a constant in each copy. */
RF_FORCE_INLINE void advance_any(char *p, const box_walk *bw, int64_t g, const rf_version_gen *vg,
                                 rf_dtype dtype, uint64_t *marks, int64_t m0) {
  if (vg->kind == RF_UPDATE_SPARSE)
    advance_line(p, bw, g, vg, dtype, marks, m0);
  else
    refill_line(p, bw, g, vg, dtype, marks, m0);
}

RF_SIMD_CLONES
void rf_advance_region(const rf_region *r, const rf_box *box, const rf_tensor *t, uint64_t seed,
                       const rf_weight_version *version, rf_dtype dtype, uint64_t *marks) {
  rf_version_gen gen = rf_version_gen_of(seed, t->id, version);
  if (!rf_version_differs(&gen))
    return; /* version 0, or none: every version holds the same values */
  if (gen.kind != RF_UPDATE_SPARSE && !marks) {
    /* full changes every element in O(1) and adam has no step from the bits alone: both are
     * filled, which for full is the faster way anyway. */
    rf_fill_region(r, box, t, seed, version, dtype);
    return;
  }
  box_walk bw = walk_of(r, box, t);
  const int64_t es = r->esize;
  for (int64_t o = 0; o < bw.n_out; o++) {
    int64_t g;
    char *p = line_start(r, &bw, t, o, &g);
    const int64_t m0 = (p - r->base) / es; /* the line's first element's mark */
    switch (dtype) {
    case RF_DTYPE_BF16:
      advance_any(p, &bw, g, &gen, RF_DTYPE_BF16, marks, m0);
      break;
    case RF_DTYPE_FP16:
      advance_any(p, &bw, g, &gen, RF_DTYPE_FP16, marks, m0);
      break;
    case RF_DTYPE_FP32:
      advance_any(p, &bw, g, &gen, RF_DTYPE_FP32, marks, m0);
      break;
    case RF_DTYPE_FP8:
    case RF_DTYPE_U8:
      break;
    }
  }
}

/* On the device an advance is a fill of the version: O(k) per element for sparse, which the
 * GPU affords, and one kernel less to keep bit-identical. rf_fill_region_on also refuses a
 * kind of memory that does not exist. */
rf_status rf_advance_region_on(rf_mem_kind kind, const rf_region *r, const rf_box *box,
                               const rf_tensor *t, uint64_t seed, const rf_weight_version *version,
                               rf_dtype dtype, uint64_t *marks) {
  rf_version_gen gen = rf_version_gen_of(seed, t->id, version);
  if (!rf_version_differs(&gen))
    return RF_OK;
  if (kind != RF_MEM_HOST && kind != RF_MEM_PINNED && kind != RF_MEM_SHARED) {
    if (marks)
      return rf_fail(RF_ERR_INTERNAL,
                     "marks of changed elements are host memory; tensor %s "
                     "is in device memory",
                     t->name);
    return rf_fill_region_on(kind, r, box, t, seed, version, dtype);
  }
  rf_advance_region(r, box, t, seed, version, dtype, marks);
  return RF_OK;
}
