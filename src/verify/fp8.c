/* The CPU reference of block-FP8 quantization (fp8.h; docs/architecture.md, FP8 quantization).
 *
 * Bit-exactness with the GPU rests on each step being one correctly rounded fp32 operation.
 * C guarantees that only where float arithmetic is evaluated in float (FLT_EVAL_METHOD 0,
 * SSE on x86-64, not x87) and no multiply is fused with an add: the build is -std=c11, under
 * which GCC contracts nothing (-ffp-contract=off), and no step here is a multiply followed by
 * an add anyway. Fast-math would break both guarantees; the build never sets it. The e4m3
 * conversion and the 16-bit loads are integer code, so they cannot drift. */
#include "verify/fp8.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "verify/values.h"

_Static_assert(FLT_EVAL_METHOD == 0, "fp8.c needs float arithmetic evaluated in float (SSE)");

uint8_t rf_fp8_e4m3_from_float(float x) {
  uint32_t bits = rf_float_bits(x);
  uint8_t sign = (uint8_t)(bits >> 24 & 0x80);
  uint32_t a = bits & 0x7fffffffu;
  /* NaN keeps its sign, as in PyTorch's conversion; the GPU's cvt gives 0x7f for every NaN,
   * which the quantizer never meets (it refuses blocks that hold one). */
  if (a > 0x7f800000u)
    return sign | 0x7f;
  /* At or above 448 (0x43e00000) the nearest e4m3 value is 448 itself, or 480 for values above
   * 464, which e4m3fn spends on NaN: saturating clamps both (and infinities) to 448, as the
   * GPU's cvt.rn.satfinite does. PyTorch's .to(float8_e4m3fn) gives NaN above 464 instead; the
   * quantizer never gets there: for any fp32 amax its products stay within 4 ulps of 448. */
  if (a >= 0x43e00000u)
    return sign | 0x7e;
  /* x = sig · 2^(e-23) with sig the 24-bit significand (fp32 subnormals: e = -126, no hidden
   * bit). In units of e4m3's step at x, 2^(e-3) for a normal (e >= -6) and 2^-9 below, that is
   * sig >> shift, rounded to nearest even on the bits shifted out. */
  int e = (int)(a >> 23) - 127;
  uint32_t sig = a & 0x7fffffu;
  if (a >> 23)
    sig |= 0x800000u;
  else
    e = -126;
  int shift = e >= -6 ? 20 : 14 - e;
  if (shift > 25) /* below 2^-11, a quarter step: zero */
    return sign;
  uint32_t q = sig >> shift;
  uint32_t rem = sig & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1)))
    q++;
  /* A normal's q is 8..16 (hidden bit included): the code is (e + 7) << 3 | (q - 8), and a
   * rounding up to 16 carries into the next exponent by itself. A subnormal's q is the code,
   * 8 (rounded up to 2^-6) being the smallest normal's. Below 448 the code stays <= 0x7e. */
  return sign | (uint8_t)(e >= -6 ? (uint32_t)(e + 6) * 8 + q : q);
}

float rf_fp8_e4m3_to_float(uint8_t b) {
  int e = b >> 3 & 15, m = b & 7;
  float v;
  if (e == 15 && m == 7)
    v = NAN;
  else if (e == 0)
    v = ldexpf((float)m, -9);
  else
    v = ldexpf((float)(8 + m), e - 10);
  return b & 0x80 ? -v : v;
}

float rf_bf16_to_float(uint16_t b) { return rf_bits_float((uint32_t)b << 16); }

float rf_fp16_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t e = h >> 10 & 31, m = h & 0x3ff;
  if (e == 31) /* infinity or NaN, payload kept */
    return rf_bits_float(sign | 0x7f800000u | m << 13);
  if (e == 0) { /* zero or subnormal: m · 2^-24, exact in float */
    float v = ldexpf((float)m, -24);
    return sign ? -v : v;
  }
  return rf_bits_float(sign | (e - 15 + 127) << 23 | m << 13);
}

float rf_float_at(const void *x, rf_dtype dt, int64_t i) {
  uint16_t h;
  float f;
  switch (dt) {
  case RF_DTYPE_BF16:
    memcpy(&h, (const char *)x + i * 2, 2);
    return rf_bf16_to_float(h);
  case RF_DTYPE_FP16:
    memcpy(&h, (const char *)x + i * 2, 2);
    return rf_fp16_to_float(h);
  default:
    memcpy(&f, (const char *)x + i * 4, 4);
    return f;
  }
}

rf_fp8_scale rf_fp8_scale_of(float amax) {
  rf_fp8_scale s;
  /* torch.clamp(min): a NaN amax stays NaN. */
  s.amax = amax < RF_FP8_AMAX_MIN ? RF_FP8_AMAX_MIN : amax;
  /* `448.0 / amax` is Tensor.__rtruediv__, i.e. reciprocal() then a multiply by 448: two
   * roundings, which can differ from one division by an ulp. */
  float recip = 1.0f / s.amax;
  s.factor = recip * RF_FP8_E4M3_MAX;
  /* `amax / 448.0` on a CUDA tensor multiplies by the scalar's reciprocal, rounded to fp32
   * on the host (1 / 448.0f, folded here by the compiler with the same rounding). */
  s.scale_inv = s.amax * (1.0f / RF_FP8_E4M3_MAX);
  return s;
}

float rf_fp8_block_amax(const void *x, rf_dtype dt, int64_t row_stride, int64_t rows,
                        int64_t cols) {
  /* |x|'s bit patterns order like their values, with +inf above every finite value and NaNs
   * above +inf, so an integer maximum is exact and propagates NaN without a branch. */
  uint32_t m = 0;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      uint32_t a = rf_float_bits(rf_float_at(x, dt, r * row_stride + c)) & 0x7fffffffu;
      m = a > m ? a : m;
    }
  return rf_bits_float(m);
}

void rf_fp8_quantize_with_amax(const void *x, rf_dtype dt, int64_t row_stride, int64_t rows,
                               int64_t cols, float amax, uint8_t *q, int64_t q_stride) {
  rf_fp8_scale s = rf_fp8_scale_of(amax);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      /* Stored to a float first: the product is rounded to fp32 before the conversion sees it,
       * as PyTorch materialises x * factor as an fp32 tensor. */
      float p = rf_float_at(x, dt, r * row_stride + c) * s.factor;
      q[r * q_stride + c] = rf_fp8_e4m3_from_float(p);
    }
}

rf_status rf_fp8_quantize_ref(const char *name, const void *x, rf_dtype dt, int64_t rows,
                              int64_t cols, int64_t row_stride, uint8_t *q, float *scale_inv) {
  if (rows < 0 || cols < 0 || row_stride < cols)
    return rf_fail(RF_ERR_INTERNAL,
                   "fp8: tensor %s [%lld, %lld] has row stride %lld; a row stride is at least "
                   "the number of columns, in elements",
                   name, (long long)rows, (long long)cols, (long long)row_stride);
  size_t esize = (size_t)rf_dtype_size(dt);
  int64_t block_cols = (cols + RF_FP8_BLOCK - 1) / RF_FP8_BLOCK;
  for (int64_t r0 = 0; r0 < rows; r0 += RF_FP8_BLOCK)
    for (int64_t c0 = 0; c0 < cols; c0 += RF_FP8_BLOCK) {
      /* Edge blocks are DeepGEMM's zero padding left out: zeros change no maximum and their
       * bytes are cut off again. */
      int64_t nr = RF_MIN(RF_FP8_BLOCK, rows - r0), nc = RF_MIN(RF_FP8_BLOCK, cols - c0);
      const char *bx = (const char *)x + (size_t)(r0 * row_stride + c0) * esize;
      float amax = rf_fp8_block_amax(bx, dt, row_stride, nr, nc);
      if (!isfinite(amax))
        return rf_fail(RF_ERR_CHECKPOINT,
                       "fp8: tensor %s holds %s in the block of rows %lld..%lld, columns "
                       "%lld..%lld; block-FP8 weights need finite values, check where the "
                       "weights came from",
                       name, isnan(amax) ? "NaN" : "inf", (long long)r0, (long long)(r0 + nr - 1),
                       (long long)c0, (long long)(c0 + nc - 1));
      scale_inv[(r0 / RF_FP8_BLOCK) * block_cols + c0 / RF_FP8_BLOCK] =
          rf_fp8_scale_of(amax).scale_inv;
      rf_fp8_quantize_with_amax(bx, dt, row_stride, nr, nc, amax, q + r0 * cols + c0, cols);
    }
  return RF_OK;
}

/* The scales as a tensor of their own for the checksum walk: one per block of format f
 * (fp32, or a byte), indexed on f's block grid, under an id no tensor has (the top bit set),
 * so that a scale cannot stand in for a weight byte. */
static rf_tensor scale_tensor_of(const rf_format *f, const rf_tensor *t) {
  rf_tensor s;
  memset(&s, 0, sizeof s);
  s.id = (int32_t)((uint32_t)t->id | 0x80000000u);
  s.ndim = 2;
  s.shape[0] = rf_format_block_grid(f, 0, t->shape[0]);
  s.shape[1] = rf_format_block_grid(f, 1, t->shape[1]);
  s.numel = s.shape[0] * s.shape[1];
  s.dtype = rf_format_scale_dtype(f);
  s.bytes = s.numel * f->scale_bytes;
  return s;
}

/* The checksum walks fp32 scales as fp32 words and 1-byte scales (E8M0, e4m3) as the fp8
 * bytes are walked: only their bit patterns count. */
static rf_dtype scale_walk_dtype(const rf_format *f) {
  return f->scale_bytes == 4 ? RF_DTYPE_FP32 : RF_DTYPE_FP8;
}

/* The quantized bytes as a tensor of their own for the checksum walk: the tensor itself for
 * 8-bit elements, [rows, cols/2] bytes for 4-bit ones, whose bytes are summed at their
 * indices in the packed tensor (layout-invariant, since every part starts on an even column). */
static rf_tensor byte_tensor_of(const rf_format *f, const rf_tensor *t) {
  rf_tensor b = *t;
  b.shape[1] = rf_format_row_bytes(f, t->shape[1]);
  b.numel = b.shape[0] * b.shape[1];
  b.bytes = b.numel;
  return b;
}

uint64_t rf_format_checksum(const rf_format *f, rf_checksum_scheme scheme, const rf_tensor *t,
                            const rf_region *q, const rf_box *held, const rf_region *scale,
                            const rf_box *blocks) {
  rf_tensor st = scale_tensor_of(f, t), bt = byte_tensor_of(f, t);
  rf_box bytes = rf_format_byte_box(f, held);
  return rf_checksum_region_as(scheme, q, &bytes, &bt, RF_DTYPE_FP8) +
         rf_checksum_region_as(scheme, scale, blocks, &st, scale_walk_dtype(f));
}

uint64_t rf_fp8_checksum(rf_checksum_scheme scheme, const rf_tensor *t, const rf_region *q,
                         const rf_box *held, const rf_region *scale, const rf_box *blocks) {
  return rf_format_checksum(rf_format_of(RF_FORMAT_FP8), scheme, t, q, held, scale, blocks);
}

rf_status rf_format_checksum_on(const rf_format *f, rf_mem_kind kind, const rf_tensor *t,
                                const rf_region *q, const rf_box *held, const rf_region *scale,
                                const rf_box *blocks, uint64_t *sum) {
  rf_tensor st = scale_tensor_of(f, t), bt = byte_tensor_of(f, t);
  rf_box bytes = rf_format_byte_box(f, held);
  uint64_t sum_bytes = 0, scales = 0;
  RF_TRY(rf_checksum_region_on(kind, q, &bytes, &bt, RF_DTYPE_FP8, &sum_bytes));
  RF_TRY(rf_checksum_region_on(kind, scale, blocks, &st, scale_walk_dtype(f), &scales));
  *sum = sum_bytes + scales;
  return RF_OK;
}

rf_status rf_fp8_checksum_on(rf_mem_kind kind, const rf_tensor *t, const rf_region *q,
                             const rf_box *held, const rf_region *scale, const rf_box *blocks,
                             uint64_t *sum) {
  return rf_format_checksum_on(rf_format_of(RF_FORMAT_FP8), kind, t, q, held, scale, blocks, sum);
}

uint64_t rf_format_global_checksum(rf_checksum_scheme scheme, const rf_tensor *t, float global) {
  rf_tensor g;
  memset(&g, 0, sizeof g);
  g.id = (int32_t)(((uint32_t)t->id & 0x3fffffffu) | 0x40000000u);
  g.ndim = 1;
  g.shape[0] = g.shape[1] = g.numel = 1;
  g.dtype = RF_DTYPE_FP32;
  g.bytes = 4;
  rf_box one = {{0, 0}, {1, 1}};
  rf_region r = rf_region_row_major(&global, &one, 4);
  return rf_checksum_region_as(scheme, &r, &one, &g, RF_DTYPE_FP32);
}
