/* versions: the trainer's weights at every version of a job, a pure function of (seed, tensor,
 * index, version) that any rank computes for any element without the others, on the CPU
 * (verify.c, versions.c) and in the CUDA kernels (verify_cuda.cu) alike, bit for bit. Version 0
 * is the generator of values.h, unchanged.
 *
 * --update says how version j follows version j - 1 (docs/architecture.md, "Weight versions"):
 *   none       every version is version 0;
 *   full       every element changes at every version;
 *   sparse:F   each element changes at version j with probability F, independently;
 *   adam:LR    an fp32 master, starting at version 0's value, takes one Adam step per version
 *              from seeded pseudo-gradients; the element is the master rounded to its dtype.
 *
 * Per element, with x_0 its version-0 bits, e = rf_word_hash(vkey, index) its own hash (a
 * bijection of the index below 2^32, vkey the tensor's versions key), s_j and t_j the two salts
 * of version j (rf_version_salt) and `free` the bits the generator leaves random (sign and low
 * exponent and mantissa bits, rf_version_free_bits):
 *   full:    x_k = x_0 ^ ((hash32(e ^ t_k) & free & ~1) | (k & 1)); bit 0 alternates, so every
 *            version differs from the one before;
 *   sparse:  the element changes at j when hash32(e ^ s_j) < round(F * 2^32), a 32-bit hash
 *            against a threshold in [0, 2^32] (resolution 2^-32: F = 1e-6 means 4295 of 2^32);
 *            then x_j = x_{j-1} ^ ((hash32(e ^ t_j) & free) | 1), never equal to x_{j-1};
 *   adam:    g_j = (int(hash32(e ^ s_j) >> 8) - 2^23) * 2^-23, in [-1, 1) and exact in fp32;
 *            m = 0.9 m + 0.1 g, v = 0.999 v + 0.001 g g, p1 = 0.9^j, p2 = 0.999^j (running
 *            products), master -= LR * (m / (1 - p1)) / (sqrt(v / (1 - p2)) + 1e-8), every
 *            operation one correctly rounded fp32 operation in this order; x_k = the master
 *            rounded to nearest even in the tensor's dtype.
 * XOR within the free bits keeps full and sparse values in the generator's range: finite,
 * normal, far from overflow. Adam's values are whatever the steps make of them.
 *
 * Version k of sparse and adam takes O(k) hashes per element; full is O(1). The trainer moves
 * from version k - 1 to k in O(1) per element for full and sparse (rf_advance_region). */
#ifndef RF_VERSIONS_H
#define RF_VERSIONS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/box.h"
#include "verify/values.h"

#define RF_UPDATE_LIST(X)                                                                          \
  X(RF_UPDATE_NONE, "none")                                                                        \
  X(RF_UPDATE_FULL, "full")                                                                        \
  X(RF_UPDATE_SPARSE, "sparse")                                                                    \
  X(RF_UPDATE_ADAM, "adam")
typedef enum { RF_UPDATE_LIST(RF_ENUM_ID) RF_UPDATE_COUNT } rf_update_kind;
RF_ENUM_DECLARE(rf_update_kind);

/* --update parsed: the kind, its parameter as written (F or LR) and what the element functions
 * take of it. The all-zero value is `none`. */
typedef struct {
  rf_update_kind kind;
  double param;       /* sparse: F; adam: LR; 0 otherwise */
  uint64_t threshold; /* sparse: round(F * 2^32), which a 32-bit hash must stay below */
  float lr;           /* adam: LR rounded to fp32 */
} rf_update;

/* A version of the weights: version k under an update rule. The all-zero value is version 0,
 * the generator's values, which every version of `none` equals. */
typedef struct {
  rf_update update;
  int64_t k;
} rf_weight_version;

/* "none", "full", "sparse:F" (0 <= F <= 1) or "adam:LR" (0 < LR <= 1), F and LR plain decimal
 * numbers. On failure returns RF_ERR_USAGE, logs nothing and writes the reason, which quotes
 * the text and says what is accepted, to why. */
rf_status rf_update_parse(const char *text, rf_update *out, char *why, size_t why_len);

/* What the element functions need of one tensor at one version, computed once per tensor on
 * the host (rf_version_gen_of, versions.c) and passed to kernels by value. */
typedef struct {
  uint64_t key;       /* version 0's generator key, rf_value_key(seed, tensor) */
  uint64_t vkey;      /* the key of the tensor's later versions */
  int64_t k;          /* the version */
  uint64_t threshold; /* sparse */
  float lr;           /* adam */
  int32_t kind;       /* rf_update_kind */
} rf_version_gen;

/* Whether a version's values differ from the generator's at all: a walk that is not versioned
 * takes version 0's fast path. */
static inline RF_HD int rf_version_differs(const rf_version_gen *g) {
  return g->kind != RF_UPDATE_NONE && g->k > 0;
}

/* The bits of an element that the generator leaves random (values.h, rf_value_word): XOR
 * within them keeps the value a normal number of the generator's range. */
static inline RF_HD uint32_t rf_version_free_bits(rf_dtype dtype) {
  return dtype == RF_DTYPE_FP32 ? 0x87ffffffU : dtype == RF_DTYPE_FP16 ? 0x9fffU : 0x87ffU;
}

/* The salts of version j: s_j (which = 0) decides a sparse change and seeds adam's gradient,
 * t_j (which = 1) draws the bits that change. */
static inline RF_HD uint32_t rf_version_salt(const rf_version_gen *g, int64_t j, int which) {
  return rf_hash32(((uint32_t)j * 0x9e3779b9U) ^ (uint32_t)(g->vkey >> 32) ^
                   (which ? 0x85ebca6bU : 0U));
}

/* ---- fp32 arithmetic that the C compiler and nvcc round alike ----------------------------
 * One correctly rounded operation each: on the device the _rn intrinsics, which nvcc never
 * fuses into an FMA; on the host plain operators, in files compiled without contraction
 * (-ffp-contract=off in src/CMakeLists.txt) and with SSE arithmetic, whose sqrtf is correctly
 * rounded. */
static inline RF_HD float rf_fadd(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
static inline RF_HD float rf_fsub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
static inline RF_HD float rf_fmul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
static inline RF_HD float rf_fdiv(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
static inline RF_HD float rf_fsqrt(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#else
  return __builtin_sqrtf(a);
#endif
}

static inline RF_HD uint32_t rf_version_f32_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}
static inline RF_HD float rf_version_f32_of(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

/* fp16 bits -> fp32 bits, exact (the generator's and adam's values are finite). */
static inline RF_HD uint32_t rf_version_fp16_to_f32(uint32_t h) {
  uint32_t sign = (h & 0x8000U) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0x1f)
    return sign | 0x7f800000U | (m << 13);
  if (e != 0)
    return sign | ((e + 112) << 23) | (m << 13);
  if (m == 0)
    return sign;
  int shift = 0; /* a subnormal: normalise its mantissa */
  while (!(m & 0x400)) {
    m <<= 1;
    shift++;
  }
  return sign | ((uint32_t)(113 - shift) << 23) | ((m & 0x3ff) << 13);
}

/* fp32 bits -> fp16 bits, rounded to nearest even, overflowing to infinity. */
static inline RF_HD uint32_t rf_version_f32_to_fp16(uint32_t f) {
  uint32_t sign = (f >> 16) & 0x8000U, a = f & 0x7fffffffU;
  if (a > 0x7f800000U)
    return sign | 0x7e00U; /* NaN */
  if (a >= 0x477ff000U)
    return sign | 0x7c00U; /* 65520 and above round to infinity */
  if (a >= 0x38800000U) {  /* a normal fp16: rebias the exponent, round off 13 bits */
    uint32_t r = a - 0x38000000U;
    return sign | ((r + 0xfffU + ((r >> 13) & 1)) >> 13);
  }
  if (a <= 0x33000000U) /* at most 2^-25: rounds to zero */
    return sign;
  uint32_t m = (a & 0x7fffffU) | 0x800000U, shift = 126 - (a >> 23); /* 14 .. 24 */
  uint32_t r = m >> shift, rest = m & ((1U << shift) - 1), tie = 1U << (shift - 1);
  if (rest > tie || (rest == tie && (r & 1)))
    r++;
  return sign | r;
}

/* fp32 bits -> bf16 bits, rounded to nearest even (finite values). */
static inline RF_HD uint32_t rf_version_f32_to_bf16(uint32_t f) {
  return (f + 0x7fffU + ((f >> 16) & 1)) >> 16;
}

/* ---- the steps, each a function of the element's hash e and the version's salts -------------
 * The walks over many elements (verify.c) hoist the salts and adam's bias terms out of their
 * element loops; the per-element functions below compute them in place. Both call these, so
 * both give the same bits. */

/* full: the bits that version k (>= 1) XORs into version 0's, t = the salt t_k. */
static inline RF_HD uint32_t rf_version_full_bits(uint32_t e, uint32_t t, int64_t k,
                                                  uint32_t free_bits) {
  return (rf_hash32(e ^ t) & free_bits & ~1U) | (uint32_t)(k & 1);
}

/* sparse: the bits the element flips at version j (s = s_j, t = t_j), 0 where it keeps them. */
static inline RF_HD uint32_t rf_version_sparse_flip(uint32_t e, uint32_t s, uint32_t t,
                                                    uint64_t threshold, uint32_t free_bits) {
  return (uint64_t)rf_hash32(e ^ s) < threshold ? (rf_hash32(e ^ t) & free_bits) | 1U : 0U;
}

/* adam: the master and the moments of one element, and the bias terms every element shares. */
typedef struct {
  float master, m, v;
} rf_adam_state;
typedef struct {
  float p1, p2; /* 0.9^j and 0.999^j after j steps, as running fp32 products */
} rf_adam_bias;

static inline RF_HD rf_adam_state rf_adam_start(uint32_t x0, rf_dtype dtype) {
  uint32_t bits = dtype == RF_DTYPE_FP32   ? x0
                  : dtype == RF_DTYPE_FP16 ? rf_version_fp16_to_f32(x0)
                                           : x0 << 16;
  rf_adam_state st = {rf_version_f32_of(bits), 0.0f, 0.0f};
  return st;
}

static inline RF_HD rf_adam_bias rf_adam_bias_next(rf_adam_bias b) {
  rf_adam_bias n = {rf_fmul(b.p1, 0.9f), rf_fmul(b.p2, 0.999f)};
  return n;
}

/* Step j's pseudo-gradient of the element with hash e (s = s_j): 24 bits of a hash, in [-1, 1). */
static inline RF_HD float rf_adam_grad(uint32_t e, uint32_t s) {
  int32_t q = (int32_t)(rf_hash32(e ^ s) >> 8) - 8388608;
  return rf_fmul((float)q, 1.0f / 8388608.0f); /* |q| <= 2^23: exact, and so is the product */
}

/* One step with gradient g, b the bias terms after this step. */
static inline RF_HD void rf_adam_step(rf_adam_state *st, float g, float lr, rf_adam_bias b) {
  st->m = rf_fadd(rf_fmul(0.9f, st->m), rf_fmul(0.1f, g));
  st->v = rf_fadd(rf_fmul(0.999f, st->v), rf_fmul(0.001f, rf_fmul(g, g)));
  float mhat = rf_fdiv(st->m, rf_fsub(1.0f, b.p1));
  float vhat = rf_fdiv(st->v, rf_fsub(1.0f, b.p2));
  st->master = rf_fsub(st->master, rf_fdiv(rf_fmul(lr, mhat), rf_fadd(rf_fsqrt(vhat), 1e-8f)));
}

/* The master rounded to the element's dtype. */
static inline RF_HD uint32_t rf_adam_bits(const rf_adam_state *st, rf_dtype dtype) {
  uint32_t f = rf_version_f32_bits(st->master);
  return dtype == RF_DTYPE_FP32   ? f
         : dtype == RF_DTYPE_FP16 ? rf_version_f32_to_fp16(f)
                                  : rf_version_f32_to_bf16(f);
}

/* ---- one element ------------------------------------------------------------------------------
 */

/* adam's state of the element with hash e and version-0 bits x after `steps` steps. */
static inline RF_HD rf_adam_state rf_adam_after(const rf_version_gen *g, uint32_t e, uint32_t x,
                                                int64_t steps, rf_dtype dtype) {
  rf_adam_state st = rf_adam_start(x, dtype);
  rf_adam_bias b = {1.0f, 1.0f};
  for (int64_t j = 1; j <= steps; j++) {
    b = rf_adam_bias_next(b);
    rf_adam_step(&st, rf_adam_grad(e, rf_version_salt(g, j, 0)), g->lr, b);
  }
  return st;
}

/* The bits of element `index` at version g->k (16 used for bf16 and fp16, 32 for fp32). */
static inline RF_HD uint32_t rf_version_value(const rf_version_gen *g, int64_t index,
                                              rf_dtype dtype) {
  uint32_t x = rf_value_of(g->key, index, dtype);
  if (!rf_version_differs(g))
    return x;
  uint32_t e = rf_word_hash(g->vkey, (uint64_t)index), free_bits = rf_version_free_bits(dtype);
  if (g->kind == RF_UPDATE_FULL)
    return x ^ rf_version_full_bits(e, rf_version_salt(g, g->k, 1), g->k, free_bits);
  if (g->kind == RF_UPDATE_SPARSE) {
    for (int64_t j = 1; j <= g->k; j++)
      x ^= rf_version_sparse_flip(e, rf_version_salt(g, j, 0), rf_version_salt(g, j, 1),
                                  g->threshold, free_bits);
    return x;
  }
  rf_adam_state st = rf_adam_after(g, e, x, g->k, dtype);
  return rf_adam_bits(&st, dtype);
}

/* Element `index` at version g->k from its bits `prev` at version g->k - 1, in O(1) for full
 * and sparse; adam has no O(1) step from the bits alone and takes rf_version_value. */
static inline RF_HD uint32_t rf_version_advance(const rf_version_gen *g, int64_t index,
                                                uint32_t prev, rf_dtype dtype) {
  if (!rf_version_differs(g))
    return prev;
  uint32_t e = rf_word_hash(g->vkey, (uint64_t)index), free_bits = rf_version_free_bits(dtype);
  if (g->kind == RF_UPDATE_FULL)
    return prev ^ rf_version_full_bits(e, rf_version_salt(g, g->k, 1), g->k, free_bits) ^
           (g->k > 1 ? rf_version_full_bits(e, rf_version_salt(g, g->k - 1, 1), g->k - 1, free_bits)
                     : 0U);
  if (g->kind == RF_UPDATE_SPARSE)
    return prev ^ rf_version_sparse_flip(e, rf_version_salt(g, g->k, 0),
                                         rf_version_salt(g, g->k, 1), g->threshold, free_bits);
  return rf_version_value(g, index, dtype);
}

/* Whether element `index` differs, bit for bit, between versions g->k - 1 and g->k. */
static inline RF_HD int rf_version_changed(const rf_version_gen *g, int64_t index, rf_dtype dtype) {
  if (!rf_version_differs(g))
    return 0;
  if (g->kind == RF_UPDATE_FULL)
    return 1;
  uint32_t e = rf_word_hash(g->vkey, (uint64_t)index);
  if (g->kind == RF_UPDATE_SPARSE)
    return (uint64_t)rf_hash32(e ^ rf_version_salt(g, g->k, 0)) < g->threshold;
  rf_adam_state st = rf_adam_after(g, e, rf_value_of(g->key, index, dtype), g->k - 1, dtype);
  uint32_t before = rf_adam_bits(&st, dtype);
  rf_adam_bias b = {1.0f, 1.0f};
  for (int64_t j = 1; j <= g->k; j++)
    b = rf_adam_bias_next(b);
  rf_adam_step(&st, rf_adam_grad(e, rf_version_salt(g, g->k, 0)), g->lr, b);
  return rf_adam_bits(&st, dtype) != before;
}

/* ---- on the host (versions.c; the count walks in verify.c)
 * ------------------------------------------------------------ */

/* The element functions' view of tensor `tensor_id` at `version` (NULL: version 0). */
rf_version_gen rf_version_gen_of(uint64_t seed, int32_t tensor_id,
                                 const rf_weight_version *version);

/* The bits of element `index` of tensor `tensor_id` at `version` (NULL: version 0, which is
 * rf_value_bits). */
uint32_t rf_version_bits(uint64_t seed, int32_t tensor_id, const rf_weight_version *version,
                         int64_t index, rf_dtype dtype);

/* How many elements of `box` of tensor t differ, bit for bit, between version->k - 1 and
 * version->k (0 for version 0 and for none): the changed fraction's numerator, counted
 * without memory. */
int64_t rf_version_changed_count(const rf_box *box, const rf_tensor *t, uint64_t seed,
                                 const rf_weight_version *version);

/* A 64-bit name of `version` of the weights generated from `seed`: XXH3 over the seed, the
 * rule (its kind, sparse's threshold, adam's fp32 LR) and k. A rollout rank's version receipt
 * (engine.h, rf_receipt) carries it, so that a peer can tell which version the rank holds
 * without reading its weights: every version a job moves has a name of its own, and the same
 * k under another rule or seed is another name. It names the version, not the bytes: that the
 * bytes are the version's is what --verify checks. */
uint64_t rf_version_id(uint64_t seed, const rf_weight_version *version);

/* The layout-invariant checksum (values.h, rf_checksum_term) of `box` of tensor t at
 * `version`, as rf_checksum_region gives it of memory that holds that version. */
uint64_t rf_version_checksum(const rf_box *box, const rf_tensor *t, uint64_t seed,
                             const rf_weight_version *version);

#endif
