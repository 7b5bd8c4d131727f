/* fp8, the block quantizer: scales, blocks and a tensor whose amax, factor, scale and bytes are
 * derived by hand below (each step of the rule rounded to fp32 with exact rational arithmetic,
 * not by this code), the largest element of every bf16 block, a sharded block, and the exact
 * error lines. The rule, per 128×128 block:
 *   amax      = max(max |x|, fp32(1e-4) = 0x38d1b717)
 *   factor    = fp32(fp32(1 / amax) * 448)
 *   q         = e4m3(fp32(x * factor)), nearest even, saturating at ±448
 *   scale_inv = fp32(amax * fp32(1 / 448)),  fp32(1 / 448) = 0x3b124925 */
#include <math.h>

#include "test.h"
#include "verify/fp8.h"

static uint32_t bits_of(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}

/* The scales of the amax values the blocks below use, derived by hand. */
static void test_scales(void) {
  static const struct {
    float amax;
    uint32_t clamped, factor, scale_inv;
  } cases[] = {
      /* 0 and 2^-14 clamp to fp32(1e-4); fp32(1 / 0x38d1b717) = 10000 exactly, so the factor
       * is 4480000 and the scale fp32(0x38d1b717 · 0x3b124925). */
      {0.0f, 0x38d1b717, 0x4a88b800, 0x346facad},
      {0x1p-14f, 0x38d1b717, 0x4a88b800, 0x346facad},
      /* 448: fp32(1/448) · 448 = 7 · fp32(1/7) = 1 + 7·(fp32(1/7) - 1/7), under half an ulp
       * above 1 (fp32(1/7) is at most 2^-27 off), rounds to 1, and so does the scale.
       * 57344 = 448·128 scales both by powers of two: factor 2^-7, scale 128. */
      {448.0f, 0x43e00000, 0x3f800000, 0x3f800000},
      {57344.0f, 0x47600000, 0x3c000000, 0x43000000},
      /* 3: fp32(1/3) = 0x3eaaaaab, factor 149.33334 = 0x43155556, scale 0x3bdb6db8. */
      {3.0f, 0x40400000, 0x43155556, 0x3bdb6db8},
      /* 29952 (the bf16 nearest 30000): fp32(1/29952) = 0x380c08c1, factor 0x3c750f52. */
      {29952.0f, 0x46ea0000, 0x3c750f52, 0x4285b6dc},
  };
  for (size_t i = 0; i < RF_ARRAY_LEN(cases); i++) {
    rf_fp8_scale s = rf_fp8_scale_of(cases[i].amax);
    ASSERT_EQ(bits_of(s.amax), cases[i].clamped);
    ASSERT_EQ(bits_of(s.factor), cases[i].factor);
    ASSERT_EQ(bits_of(s.scale_inv), cases[i].scale_inv);
  }
  ASSERT_TRUE(isnan(rf_fp8_scale_of(NAN).amax)); /* the clamp keeps NaN, as torch.clamp does */
}

/* Over every positive finite bf16 amax of at least 1e-4 (18,094 values) the largest element's
 * product stays between 0x43dffffd and 0x43e00003 (448 ± 3 ulps, found with exact rational
 * arithmetic over the same values) and becomes 448: the saturation, and PyTorch's NaN above
 * 464, are never reached by the quantizer. */
static void test_largest_element(void) {
  uint32_t lo = 0xffffffff, hi = 0;
  int n = 0;
  for (uint32_t h = 0x0001; h < 0x7f80; h++) {
    float a = rf_bf16_to_float((uint16_t)h);
    if (a < RF_FP8_AMAX_MIN)
      continue;
    float p = a * rf_fp8_scale_of(a).factor;
    lo = RF_MIN(lo, bits_of(p)), hi = RF_MAX(hi, bits_of(p));
    ASSERT_EQ(rf_fp8_e4m3_from_float(p), 0x7e);
    n++;
  }
  ASSERT_EQ(n, 18094);
  ASSERT_EQ(lo, 0x43dffffd);
  ASSERT_EQ(hi, 0x43e00003);
}

/* Test inputs are written as floats that each 16-bit type holds exactly. */
static uint16_t bf16_of(float f) {
  uint32_t b = bits_of(f);
  ASSERT_EQ(b & 0xffff, 0);
  return (uint16_t)(b >> 16);
}

static uint16_t fp16_of(float f) {
  uint32_t b = bits_of(f), sign = b >> 16 & 0x8000;
  float a = fabsf(f);
  if (a == 0)
    return (uint16_t)sign;
  if (a < 0x1p-14f) { /* subnormal: a multiple of 2^-24 */
    float m = a * 0x1p24f;
    ASSERT_TRUE(m == floorf(m));
    return (uint16_t)(sign | (uint32_t)m);
  }
  int e = (int)(b >> 23 & 0xff) - 127;
  ASSERT_TRUE(e <= 15 && (b & 0x1fff) == 0);
  return (uint16_t)(sign | (uint32_t)(e + 15) << 10 | (b >> 13 & 0x3ff));
}

#define B RF_FP8_BLOCK

/* Quantizes one 128×128 bf16 block and checks its scale. */
static void quantize_block(const uint16_t *x, uint8_t *q, uint32_t scale_bits) {
  float scale = -1;
  ASSERT_OK(rf_fp8_quantize_ref("block", x, RF_DTYPE_BF16, B, B, B, q, &scale));
  ASSERT_EQ(bits_of(scale), scale_bits);
}

/* All zeros, two of them negative: amax 0 clamps to 1e-4; every byte is a zero of x's sign. */
static void test_zero_block(void) {
  static uint16_t x[B * B];
  static uint8_t q[B * B];
  memset(x, 0, sizeof x);
  x[3 * B + 5] = x[B * B - 1] = 0x8000;
  quantize_block(x, q, 0x346facad);
  for (int i = 0; i < B * B; i++)
    ASSERT_EQ(q[i], i == 3 * B + 5 || i == B * B - 1 ? 0x80 : 0x00);
}

/* Every element 2^-14 (below 1e-4), one -2^-15: the clamped amax decides the factor 4480000.
 * 2^-14 · 4480000 = 273.4375 lies between 256 and 288, 17.4375 above 256: 288 = 0x79.
 * -2^-15 · 4480000 = -136.71875 lies between 128 and 144, 8.72 above 128: -144 = 0xf1. */
static void test_clamped_block(void) {
  static uint16_t x[B * B];
  static uint8_t q[B * B];
  for (int i = 0; i < B * B; i++)
    x[i] = 0x3880;
  x[64 * B + 1] = 0xb800;
  quantize_block(x, q, 0x346facad);
  for (int i = 0; i < B * B; i++)
    ASSERT_EQ(q[i], i == 64 * B + 1 ? 0xf1 : 0x79);
}

/* amax 448 makes factor and scale exactly 1 (test_scales): the block holds every finite code's
 * value, which comes back as that code (every exponent, the subnormals, ±448), then every
 * midpoint of neighbours, which goes to the even one; the rest is zero. */
static void test_identity_block(void) {
  static uint16_t x[B * B];
  static uint8_t q[B * B], want[B * B];
  memset(x, 0, sizeof x);
  memset(want, 0, sizeof want);
  int k = 0;
  for (int c = 0; c < 256; c++)
    if ((c & 0x7f) != 0x7f) {
      x[k] = bf16_of(rf_fp8_e4m3_to_float((uint8_t)c));
      want[k++] = (uint8_t)c;
    }
  for (int c = 0; c < 0x7e; c++)
    for (int s = 0; s < 2; s++) {
      float mid = (rf_fp8_e4m3_to_float((uint8_t)c) + rf_fp8_e4m3_to_float((uint8_t)(c + 1))) / 2;
      x[k] = bf16_of(s ? -mid : mid);
      want[k++] = (uint8_t)(s << 7 | (c & 1 ? c + 1 : c));
    }
  ASSERT_EQ(k, 254 + 252);
  quantize_block(x, q, 0x3f800000);
  ASSERT_EQ(memcmp(q, want, sizeof q), 0);
}

/* One huge value, 57344 = 448·128, at [5][7] and its negative at [100][100]: factor 2^-7, so
 * x becomes x/128 and most elements land among the subnormals (steps of 2^-9). */
static const struct {
  float x;
  uint8_t code;
} huge_fill[] = {
    {1.0f, 0x04},    /* 2^-7 = 4 steps */
    {3.0f, 0x0c},    /* 1.5·2^-6: exponent field 1, mantissa 4 */
    {0.125f, 0x00},  /* 2^-10, half a step: a tie, to even 0 */
    {0.1875f, 0x01}, /* 0.75 steps */
    {0.375f, 0x02},  /* 1.5 steps: a tie, to even 2 */
    {-0.625f, 0x82}, /* -2.5 steps: a tie, to even -2 */
    {0.0625f, 0x00}, /* a quarter step */
    {-0.0625f, 0x80},
    {1000.0f, 0x50}, /* 7.8125 = 1.953125·2^2: the mantissa rounds up to 2, carrying into 8 */
};

static void fill_huge(uint16_t *x, uint8_t *want) {
  for (int i = 0; i < B * B; i++) {
    x[i] = bf16_of(huge_fill[i % 9].x);
    want[i] = huge_fill[i % 9].code;
  }
  x[5 * B + 7] = bf16_of(57344.0f), want[5 * B + 7] = 0x7e;
  x[100 * B + 100] = bf16_of(-57344.0f), want[100 * B + 100] = 0xfe;
}

static void test_huge_block(void) {
  static uint16_t x[B * B];
  static uint8_t q[B * B], want[B * B], parts[B * B];
  fill_huge(x, want);
  quantize_block(x, q, 0x43000000);
  ASSERT_EQ(memcmp(q, want, sizeof q), 0);

  /* The same block as four 64×64 parts (a sharded weight): the parts' amax are 57344, 1000,
   * 1000 and 57344, their maximum is the block's, and each part quantized with it gives the
   * whole block's bytes. Quantized with its own amax, a part would not: its 1000 becomes 448. */
  static const uint32_t part_amax[4] = {0x47600000, 0x447a0000, 0x447a0000, 0x47600000};
  float amax = 0;
  for (int p = 0; p < 4; p++) {
    float a = rf_fp8_block_amax(x + (p / 2) * 64 * B + (p % 2) * 64, RF_DTYPE_BF16, B, 64, 64);
    ASSERT_EQ(bits_of(a), part_amax[p]);
    amax = RF_MAX(amax, a);
  }
  for (int p = 0; p < 4; p++) {
    int off = (p / 2) * 64 * B + (p % 2) * 64;
    rf_fp8_quantize_with_amax(x + off, RF_DTYPE_BF16, B, 64, 64, amax, parts + off, B);
  }
  ASSERT_EQ(memcmp(parts, want, sizeof parts), 0);
  rf_fp8_quantize_with_amax(x + 64, RF_DTYPE_BF16, B, 64, 64, 1000.0f, parts, B);
  ASSERT_EQ(parts[7], 0x7e); /* the block's element 71, and 71 % 9 = 8 is 1000 */
  ASSERT_EQ(bits_of(rf_fp8_block_amax(x, RF_DTYPE_BF16, B, 0, 0)), 0); /* no elements */
}

/* A 130×200 tensor in rows 256 elements apart, whose 56 columns past the end hold NaN (never
 * read): scales [2, 2], edge blocks of 72 columns and 2 rows quantized on their own.
 *   (0,0) rows 0..127, cols 0..127: 1.0, [0][0] = 448: factor 1; 1.0 = 0x38, scale 1.0
 *   (0,1) cols 128..199: 1.0, [127][199] = 29952, [0][128] = -0.5, [1][130] = 100: factor
 *         0x3c750f52 (0.014957266); 1.0 -> 7.66 steps of 2^-9 -> 0x08, -0.5 -> -3.83 steps
 *         -> 0x84, 100 -> 1.4957266 -> 1.5 = 0x3c, 29952 -> 448.00003 -> 0x7e
 *   (1,0) rows 128..129: 2^-14, [129][0] = -2^-15: clamped, as test_clamped_block
 *   (1,1) rows 128..129, cols 128..199: -3.0: factor 0x43155556, -3·factor = -448.00003 ->
 *         0xfe, scale 0x3bdb6db8 */
enum { ROWS = 130, COLS = 200, STRIDE = 256 };
static const uint32_t edge_scales[4] = {0x3f800000, 0x4285b6dc, 0x346facad, 0x3bdb6db8};

static float edge_value(int r, int c, uint8_t *code) {
  static const struct {
    int r, c;
    float x;
    uint8_t code;
  } special[] = {{0, 0, 448.0f, 0x7e},
                 {127, 199, 29952.0f, 0x7e},
                 {0, 128, -0.5f, 0x84},
                 {1, 130, 100.0f, 0x3c},
                 {129, 0, -0x1p-15f, 0xf1}};
  for (size_t i = 0; i < RF_ARRAY_LEN(special); i++)
    if (special[i].r == r && special[i].c == c) {
      *code = special[i].code;
      return special[i].x;
    }
  if (r < B) {
    *code = c < B ? 0x38 : 0x08;
    return 1.0f;
  }
  *code = c < B ? 0x79 : 0xfe;
  return c < B ? 0x1p-14f : -3.0f;
}

/* The edge tensor in dtype dt: every type holds its values exactly, so all three must give
 * the same bytes and scales. */
static void check_edge_tensor(rf_dtype dt) {
  static uint32_t x32[ROWS * STRIDE];
  static uint16_t x16[ROWS * STRIDE];
  static uint8_t q[ROWS * COLS + 1];
  float scales[5];
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < STRIDE; c++) {
      uint8_t code;
      float v = c < COLS ? edge_value(r, c, &code) : NAN;
      x32[r * STRIDE + c] = bits_of(v);
      if (dt == RF_DTYPE_FP16)
        x16[r * STRIDE + c] = c < COLS ? fp16_of(v) : 0x7e00;
      else
        x16[r * STRIDE + c] = c < COLS ? bf16_of(v) : 0x7fc0;
    }
  q[ROWS * COLS] = 0xa5;
  scales[4] = -1;
  const void *x = dt == RF_DTYPE_FP32 ? (const void *)x32 : (const void *)x16;
  ASSERT_OK(rf_fp8_quantize_ref("w", x, dt, ROWS, COLS, STRIDE, q, scales));
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS; c++) {
      uint8_t code;
      edge_value(r, c, &code);
      ASSERT_EQ(q[r * COLS + c], code);
    }
  ASSERT_EQ(q[ROWS * COLS], 0xa5); /* nothing written past [rows, cols] */
  for (int i = 0; i < 4; i++)
    ASSERT_EQ(bits_of(scales[i]), edge_scales[i]);
  ASSERT_TRUE(scales[4] == -1.0f);
}

static void test_edge_tensor(void) {
  check_edge_tensor(RF_DTYPE_BF16);
  check_edge_tensor(RF_DTYPE_FP16);
  check_edge_tensor(RF_DTYPE_FP32);
}

/* Each refusal is one line naming the tensor, the block and what to do. */
static void test_errors(void) {
  static uint16_t x[ROWS * COLS];
  static uint8_t q[ROWS * COLS];
  float scales[4];
  char msg[512];
  for (int i = 0; i < ROWS * COLS; i++)
    x[i] = 0x3f80;
  x[129 * COLS + 150] = 0x7fc0;
  rf_log_capture(msg, sizeof msg);
  ASSERT_STATUS(rf_fp8_quantize_ref("model.layers.0.mlp.down_proj.weight", x, RF_DTYPE_BF16, ROWS,
                                    COLS, COLS, q, scales),
                RF_ERR_CHECKPOINT);
  ASSERT_STR_EQ(msg, "fp8: tensor model.layers.0.mlp.down_proj.weight holds NaN in the block of "
                     "rows 128..129, columns 128..199; block-FP8 weights need finite values, "
                     "check where the weights came from");
  x[129 * COLS + 150] = 0x3f80;
  x[3 * COLS + 3] = 0xff80; /* -inf */
  ASSERT_STATUS(rf_fp8_quantize_ref("w", x, RF_DTYPE_BF16, ROWS, COLS, COLS, q, scales),
                RF_ERR_CHECKPOINT);
  ASSERT_STR_EQ(msg, "fp8: tensor w holds inf in the block of rows 0..127, columns 0..127; "
                     "block-FP8 weights need finite values, check where the weights came from");
  ASSERT_STATUS(rf_fp8_quantize_ref("w", x, RF_DTYPE_BF16, ROWS, COLS, 100, q, scales),
                RF_ERR_INTERNAL);
  ASSERT_STR_EQ(msg, "fp8: tensor w [130, 200] has row stride 100; a row stride is at least the "
                     "number of columns, in elements");
  rf_log_capture(NULL, 0);
  q[0] = 0xa5, scales[0] = -1;
  ASSERT_OK(rf_fp8_quantize_ref("empty", x, RF_DTYPE_BF16, 0, 0, 0, q, scales));
  ASSERT_EQ(q[0], 0xa5);
  ASSERT_TRUE(scales[0] == -1.0f);
}

/* rf_fp8_checksum against its definition, term by term (fp8.h): the fp8 bytes at their global
 * row-major indices under the tensor's id, the scales at their block indices under id | 2^31,
 * under either results format's term. The box is a shard that starts mid-word and mid-block
 * and sits in a wider buffer, so the walk's line starts and the byte positions in a word are
 * all exercised. */
static uint64_t fp8_sum_by_definition(rf_checksum_scheme scheme, const rf_tensor *t,
                                      const rf_region *q, const rf_box *held, const rf_region *sc,
                                      const rf_box *blocks) {
  int32_t sid = (int32_t)((uint32_t)t->id | 0x80000000u);
  int64_t grid = (t->shape[1] + RF_FP8_BLOCK - 1) / RF_FP8_BLOCK;
  uint64_t sum = 0;
  for (int64_t i = held->lo[0]; i < held->hi[0]; i++)
    for (int64_t j = held->lo[1]; j < held->hi[1]; j++) {
      uint32_t b = *(const uint8_t *)rf_region_at(q, i, j);
      int64_t at = i * t->shape[1] + j;
      sum += scheme == RF_CHECKSUM_V1 ? rf_checksum_term_v1(t->id, at, b)
                                      : rf_checksum_term(rf_checksum_key(t->id), at, b, 2);
    }
  for (int64_t i = blocks->lo[0]; i < blocks->hi[0]; i++)
    for (int64_t j = blocks->lo[1]; j < blocks->hi[1]; j++) {
      uint32_t b;
      memcpy(&b, rf_region_at(sc, i, j), 4);
      int64_t at = i * grid + j;
      sum += scheme == RF_CHECKSUM_V1 ? rf_checksum_term_v1(sid, at, b)
                                      : rf_checksum_term(rf_checksum_key(sid), at, b, 0);
    }
  return sum;
}

static void test_checksum(void) {
  rf_tensor t = {.id = 37, .ndim = 2, .shape = {300, 333}, .dtype = RF_DTYPE_BF16};
  rf_box held = {{128, 131}, {300, 333}}, blocks = {{1, 1}, {3, 3}};
  int64_t ld = 341, sld = 5; /* wider buffers than the box */
  uint8_t *qbuf = malloc((size_t)(172 * ld));
  uint32_t *sbuf = malloc((size_t)(2 * sld) * 4);
  ASSERT_TRUE(qbuf && sbuf);
  uint64_t x = 0x5eed;
  for (int64_t i = 0; i < 172 * ld; i++)
    qbuf[i] = (uint8_t)((x = rf_mix64(x)) >> 56);
  for (int64_t i = 0; i < 2 * sld; i++)
    sbuf[i] = (uint32_t)(x = rf_mix64(x));
  rf_region q = rf_region_in_fused(qbuf, ld, 0, 0, &held, 1);
  rf_region sc = rf_region_in_fused(sbuf, sld, 0, 0, &blocks, 4);
  for (int scheme = RF_CHECKSUM_V1; scheme <= RF_CHECKSUM_V2; scheme++) {
    uint64_t want = fp8_sum_by_definition(scheme, &t, &q, &held, &sc, &blocks);
    ASSERT_EQ(rf_fp8_checksum(scheme, &t, &q, &held, &sc, &blocks), want);
  }
  uint64_t host = 0;
  ASSERT_OK(rf_fp8_checksum_on(RF_MEM_HOST, &t, &q, &held, &sc, &blocks, &host));
  ASSERT_EQ(host, fp8_sum_by_definition(RF_CHECKSUM_CURRENT, &t, &q, &held, &sc, &blocks));
  /* One byte more or less changes the sum. */
  qbuf[5 * ld + 7]++;
  ASSERT_TRUE(rf_fp8_checksum(RF_CHECKSUM_CURRENT, &t, &q, &held, &sc, &blocks) != host);
  free(qbuf), free(sbuf);
}

int main(void) {
  test_scales();
  test_largest_element();
  test_zero_block();
  test_clamped_block();
  test_identity_block();
  test_huge_block();
  test_edge_tensor();
  test_errors();
  test_checksum();
  printf("test_fp8_blocks: all passed\n");
  return 0;
}
