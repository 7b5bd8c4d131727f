/* The CPU reference of every quantized format (format.h; docs/architecture.md, "Quantized
 * formats"). As in verify/fp8.c, each step is one correctly rounded fp32 operation (the build
 * is -std=c11 without fast-math, so nothing is contracted or reassociated) or integer code on
 * the bit patterns; powers of two are built from their exponents, never from log2 or pow,
 * whose last bit differs between libraries. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "format/format.h"
#include "verify/fp8.h"

_Static_assert(FLT_EVAL_METHOD == 0, "format_ref.c needs float arithmetic evaluated in float");

/* 2^e for -149 <= e <= 127, exactly (subnormal below 2^-126). */
static float pow2(int e) {
  return e >= -126 ? rf_bits_float((uint32_t)(e + 127) << 23) : rf_bits_float(1u << (e + 149));
}

/* floor(log2(a)) of a finite a > 0, from its bits (subnormals included). */
static int floor_log2(float a) {
  uint32_t b = rf_float_bits(a) & 0x7fffffffu;
  int ex = (int)(b >> 23);
  if (ex)
    return ex - 127;
  int top = 31;
  while (!(b >> top & 1))
    top--;
  return -149 + top;
}

/* The exponent of the smallest power of two at or above a finite a > 0. */
static int ceil_log2(float a) {
  int e = floor_log2(a);
  return pow2(e) == a ? e : e + 1;
}

static int clamp_exponent(int e) { return e < -127 ? -127 : e > 127 ? 127 : e; }

uint8_t rf_e2m1_from_float(float x) {
  uint8_t sign = rf_float_bits(x) >> 31 ? 0x8 : 0;
  float a = fabsf(x);
  /* The codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6. Between two of them the nearer wins; at a
   * midpoint the even code (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4,
   * 5 -> 4); at and above 6 (and for infinities) the largest, as cvt.rn.satfinite.e2m1x2. */
  uint8_t code = a <= 0.25f   ? 0
                 : a < 0.75f  ? 1
                 : a <= 1.25f ? 2
                 : a < 1.75f  ? 3
                 : a <= 2.5f  ? 4
                 : a < 3.5f   ? 5
                 : a <= 5.0f  ? 6
                              : 7;
  return sign | code;
}

float rf_e2m1_to_float(uint8_t code) {
  static const float values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float v = values[code & 7];
  return code & 8 ? -v : v;
}

float rf_e8m0_to_float(uint8_t b) { return b == 0xff ? NAN : pow2((int)b - 127); }

static void store_power(const rf_format *f, int e, rf_format_scale *s) {
  if (f->scale_store == RF_SCALE_STORE_E8M0) {
    s->stored[0] = (uint8_t)(e + 127);
    return;
  }
  uint32_t b = rf_float_bits(pow2(e));
  memcpy(s->stored, &b, 4); /* little endian, as the host and the GPU store fp32 */
}

rf_format_scale rf_format_scale_of(const rf_format *f, float amax, float global) {
  rf_format_scale s;
  memset(&s, 0, sizeof s);
  float a = amax < f->amax_min ? f->amax_min : amax;
  switch (f->rule) {
  case RF_SCALE_FP32_INVERSE: {
    rf_fp8_scale k = rf_fp8_scale_of(a);
    uint32_t b = rf_float_bits(k.scale_inv);
    memcpy(s.stored, &b, 4);
    s.mul = k.factor;
    break;
  }
  case RF_SCALE_UE8M0_CEIL: {
    /* fp32(1 / max) is rounded here as on the GPU (1 / 448.0f, 1 / 6.0f on the host). */
    float sf = a * (1.0f / f->elem_max);
    int e = sf > 0 ? clamp_exponent(ceil_log2(sf)) : -127;
    store_power(f, e, &s);
    s.mul = pow2(-e);
    break;
  }
  case RF_SCALE_UE8M0_FLOOR: {
    int e = a > 0 ? clamp_exponent(floor_log2(a) - f->elem_emax) : -127;
    store_power(f, e, &s);
    s.mul = pow2(-e);
    break;
  }
  case RF_SCALE_E4M3_GLOBAL: {
    /* A zero block gets ModelOpt's 1.0; a block whose scale rounds to zero in e4m3 gets the
     * smallest e4m3 value instead of a division by zero. */
    float sf = a / (6.0f * global);
    uint8_t code = a > 0 ? rf_fp8_e4m3_from_float(sf) : 0x38;
    if ((code & 0x7f) == 0)
      code = 0x01;
    s.stored[0] = code;
    s.div = rf_fp8_e4m3_to_float(code) * global;
    break;
  }
  default:
    break;
  }
  return s;
}

float rf_format_global_of(const rf_format *f, float amax) {
  if (!f->global_scale || !(amax > 0))
    return 1.0f;
  return amax / 2688.0f;
}

static uint8_t encode(const rf_format *f, float v, const rf_format_scale *s) {
  float p = s->div != 0 ? v / s->div : v * s->mul;
  return f->elem == RF_ELEM_E2M1 ? rf_e2m1_from_float(p) : rf_fp8_e4m3_from_float(p);
}

void rf_format_quantize_block(const rf_format *f, const void *x, rf_dtype dt, int64_t row_stride,
                              int64_t rows, int64_t cols, const rf_format_scale *s, uint8_t *q,
                              int64_t q_stride) {
  for (int64_t r = 0; r < rows; r++) {
    uint8_t *row = q + r * q_stride;
    for (int64_t c = 0; c < cols; c++) {
      uint8_t code = encode(f, rf_float_at(x, dt, r * row_stride + c), s);
      if (f->elem_bits == 4)
        row[c / 2] = (uint8_t)(c % 2 ? (row[c / 2] & 0x0f) | code << 4 : code);
      else
        row[c] = code;
    }
  }
}

float rf_format_tensor_global(const rf_format *f, const void *x, rf_dtype dt, int64_t rows,
                              int64_t cols, int64_t row_stride) {
  return f->global_scale ? rf_format_global_of(f, rf_fp8_block_amax(x, dt, row_stride, rows, cols))
                         : 1.0f;
}

rf_status rf_format_quantize_ref(const rf_format *f, const char *name, const void *x, rf_dtype dt,
                                 int64_t rows, int64_t cols, int64_t row_stride, float global,
                                 uint8_t *q, uint8_t *scales) {
  if (rows < 0 || cols < 0 || row_stride < cols)
    return rf_fail(RF_ERR_INTERNAL,
                   "%s: tensor %s [%lld, %lld] has row stride %lld; a row stride is at least "
                   "the number of columns, in elements",
                   f->name, name, (long long)rows, (long long)cols, (long long)row_stride);
  if (f->elem_bits == 4 && cols % 2)
    return rf_fail(RF_ERR_INTERNAL,
                   "%s: tensor %s has %lld columns; 4-bit elements pack two a byte, so the "
                   "columns must be even",
                   f->name, name, (long long)cols);
  size_t esize = (size_t)rf_dtype_size(dt);
  int64_t row_bytes = rf_format_row_bytes(f, cols), grid_cols = rf_format_block_grid(f, 1, cols);
  for (int64_t r0 = 0; r0 < rows; r0 += f->block_rows)
    for (int64_t c0 = 0; c0 < cols; c0 += f->block_cols) {
      /* An edge block holds what is left of the tensor: zeros would change no maximum. */
      int64_t nr = RF_MIN(f->block_rows, rows - r0), nc = RF_MIN(f->block_cols, cols - c0);
      const char *bx = (const char *)x + (size_t)(r0 * row_stride + c0) * esize;
      float amax = rf_fp8_block_amax(bx, dt, row_stride, nr, nc);
      if (!isfinite(amax))
        return rf_fail(RF_ERR_CHECKPOINT,
                       "%s: tensor %s holds %s in the block of rows %lld..%lld, columns "
                       "%lld..%lld; quantized weights need finite values, check where the "
                       "weights came from",
                       f->name, name, isnan(amax) ? "NaN" : "inf", (long long)r0,
                       (long long)(r0 + nr - 1), (long long)c0, (long long)(c0 + nc - 1));
      rf_format_scale s = rf_format_scale_of(f, amax, global);
      int64_t at = r0 / f->block_rows * grid_cols + c0 / f->block_cols;
      memcpy(scales + at * f->scale_bytes, s.stored, (size_t)f->scale_bytes);
      rf_format_quantize_block(f, bx, dt, row_stride, nr, nc, &s,
                               q + r0 * row_bytes + rf_format_row_bytes(f, c0), row_bytes);
    }
  return RF_OK;
}
