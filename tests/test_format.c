/* The format table and its CPU references (format.h) against blocks worked out by hand: the
 * e2m1 codec at every value and midpoint, E8M0 bytes, each scale rule on an exact amax, every
 * element exponent and subnormal, zero and all-zero blocks, saturation, one huge value, NaN and
 * inf refused with their line, 4-bit packing, NVFP4's global scale and swizzled scales; and
 * the table's fp8 entry against the fp8 reference that matches PyTorch (verify/fp8.h). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "format/format_fast.h"
#include "test.h"
#include "verify/fp8.h"

static uint32_t bits_of(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}

static const rf_format *fmt(const char *name) {
  const rf_format *f = rf_format_find(name);
  ASSERT_TRUE(f != NULL);
  return f;
}

static void test_table(void) {
  char names[256];
  rf_format_names(names, sizeof names);
  ASSERT_STR_EQ(names, "fp8, fp8-ue8m0, mxfp8, mxfp8-floor, mxfp4, mxfp4-floor, nvfp4");
  ASSERT_TRUE(rf_format_find("int4") == NULL);
  ASSERT_TRUE(rf_format_of(RF_ROLLOUT_DTYPE_MODEL) == NULL);
  for (int i = 0; i < rf_format_count(); i++) {
    const rf_format *f = rf_format_at(i);
    ASSERT_STR_EQ(f->name, rf_rollout_dtype_names[i + 1]); /* the list and the table agree */
    ASSERT_TRUE(rf_format_of((rf_rollout_dtype)(i + 1)) == f);
    ASSERT_TRUE(f->block_rows >= 1 && f->block_cols >= 16);
    ASSERT_EQ(f->scale_bytes, f->scale_store == RF_SCALE_STORE_FP32 ? 4 : 1);
    ASSERT_EQ(f->global_scale, f->global_suffix != NULL);
  }
  const rf_format *nv = fmt("nvfp4");
  ASSERT_EQ(rf_format_row_bytes(nv, 64), 32);
  /* 300 x 64: 300 x 4 blocks, padded to 384 x 4 in 128x4 tiles. */
  ASSERT_EQ(rf_format_scale_bytes(nv, 300, 64), 384 * 4);
  ASSERT_EQ(rf_format_scale_bytes(fmt("mxfp8"), 300, 64), 300 * 2);
  ASSERT_EQ(rf_format_scale_bytes(fmt("fp8"), 300, 200), 3 * 2 * 4);
  /* Tile (row 0, col 0): block (r, c) at (r % 32) * 16 + (r / 32) * 4 + c. */
  ASSERT_EQ(rf_format_scale_offset(nv, 4, 0, 0), 0);
  ASSERT_EQ(rf_format_scale_offset(nv, 4, 1, 2), 18);
  ASSERT_EQ(rf_format_scale_offset(nv, 4, 33, 3), 16 + 4 + 3);
  ASSERT_EQ(rf_format_scale_offset(nv, 4, 127, 3), 31 * 16 + 3 * 4 + 3);
  /* Two tiles across 8 block columns: block (128, 5) is in tile row 1, tile column 1, the
   * fourth tile, at its row 0 and column 1. */
  ASSERT_EQ(rf_format_scale_offset(nv, 8, 128, 5), 3 * 512 + 1);
  ASSERT_EQ(rf_format_scale_offset(fmt("mxfp4"), 8, 3, 5), 29);
}

/* Which formats' checkpoints look alike (a file of one is a file of the other, and refit run
 * --checkpoint carries it into either): only those that differ in the scale rule alone. */
static void test_same_file(void) {
  const char *groups[][2] = {
      {"fp8", "fp8-ue8m0"}, {"mxfp8", "mxfp8-floor"}, {"mxfp4", "mxfp4-floor"}, {"nvfp4", NULL}};
  int n = (int)(sizeof groups / sizeof groups[0]);
  for (int i = 0; i < rf_format_count(); i++)
    for (int j = 0; j < rf_format_count(); j++) {
      const rf_format *a = rf_format_at(i), *b = rf_format_at(j);
      int gi = -1, gj = -1;
      for (int g = 0; g < n; g++)
        for (int k = 0; k < 2; k++) {
          gi = groups[g][k] && strcmp(groups[g][k], a->name) == 0 ? g : gi;
          gj = groups[g][k] && strcmp(groups[g][k], b->name) == 0 ? g : gj;
        }
      ASSERT_TRUE(gi >= 0 && gj >= 0);
      ASSERT_EQ(rf_format_same_file(a, b), gi == gj);
    }
  char names[64];
  rf_format_same_file_names(fmt("fp8-ue8m0"), names, sizeof names);
  ASSERT_STR_EQ(names, "fp8 or fp8-ue8m0");
  rf_format_same_file_names(fmt("nvfp4"), names, sizeof names);
  ASSERT_STR_EQ(names, "nvfp4");
  ASSERT_EQ(rf_format_weight_dtype(fmt("mxfp8")), RF_DTYPE_FP8);
  ASSERT_EQ(rf_format_weight_dtype(fmt("mxfp4")), RF_DTYPE_U8);
}

static void test_e2m1(void) {
  static const float values[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (uint8_t c = 0; c < 16; c++) {
    float v = rf_e2m1_to_float(c);
    ASSERT_TRUE(v == (c & 8 ? -values[c & 7] : values[c & 7]));
    ASSERT_EQ(rf_e2m1_from_float(v), c); /* -0 included: the sign of zero is kept */
  }
  static const struct {
    float x;
    uint8_t code;
  } cases[] = {{0.25f, 0x0},      {0.2500001f, 0x1}, {0.75f, 0x2},    {0.7499999f, 0x1},
               {1.25f, 0x2},      {1.2500001f, 0x3}, {1.75f, 0x4},    {2.5f, 0x4},
               {2.5000002f, 0x5}, {3.5f, 0x6},       {5.0f, 0x6},     {5.0000005f, 0x7},
               {6.5f, 0x7},       {1e30f, 0x7},      {INFINITY, 0x7}, {-0.1f, 0x8},
               {-5.5f, 0xf},      {1e-40f, 0x0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    ASSERT_EQ(rf_e2m1_from_float(cases[i].x), cases[i].code);
}

static void test_e8m0(void) {
  ASSERT_EQ(bits_of(rf_e8m0_to_float(127)), 0x3f800000);
  ASSERT_EQ(bits_of(rf_e8m0_to_float(0)), 0x00400000); /* 2^-127, subnormal */
  ASSERT_EQ(bits_of(rf_e8m0_to_float(254)), 0x7f000000);
  ASSERT_TRUE(isnan(rf_e8m0_to_float(0xff)));
}

/* Quantizes one row of fp32 values under `name` and checks codes (unpacked) and scale bytes. */
static void check_row(const char *name, const float *x, int n, const uint8_t *codes,
                      const uint8_t *scale, int scale_count) {
  const rf_format *f = fmt(name);
  uint8_t q[64] = {0}, s[64 * 4] = {0};
  ASSERT_OK(rf_format_quantize_ref(f, "t", x, RF_DTYPE_FP32, 1, n, n, 1.0f, q, s));
  for (int c = 0; c < n; c++) {
    uint8_t got = f->elem_bits == 4 ? (uint8_t)(q[c / 2] >> (c % 2 * 4) & 0xf) : q[c];
    if (got != codes[c])
      fprintf(stderr, "%s: element %d (%g): 0x%x, expected 0x%x\n", name, c, (double)x[c], got,
              codes[c]);
    ASSERT_EQ(got, codes[c]);
  }
  ASSERT_EQ(memcmp(s, scale, (size_t)(scale_count * f->scale_bytes)), 0);
}

static void test_mxfp8(void) {
  /* Block 0, amax 1: fp32(1 * fp32(1/448)) = 0.0022321... rounds up to 2^-8 (byte 119), so the
   * elements are x * 256: every e4m3 exponent from 2^-9 (subnormal) to 2^8, the subnormals'
   * ties going to the even code, and a signed zero.
   * Block 1, amax 448: 448 * fp32(1/448) is exactly 1, scale 2^0 (byte 127). */
  float x[64];
  uint8_t codes[64];
  memset(codes, 0, sizeof codes);
  for (int k = 0; k < 18; k++) {
    /* x * 256 = 2^(k-9): the subnormals m * 2^-9 are codes 1, 2, 4; a normal 2^e is
     * (e + 7) << 3, from 2^-6 (0x08) to 2^8 (0x78). */
    x[k] = ldexpf(1.0f, k - 17);
    codes[k] = k < 3 ? (uint8_t)(1 << k) : (uint8_t)((k - 2) << 3);
  }
  x[18] = ldexpf(1.0f, -18), codes[18] = 0x00;     /* half the smallest subnormal: tie to 0 */
  x[19] = 3 * ldexpf(1.0f, -18), codes[19] = 0x02; /* 1.5 subnormal steps: tie to even, 2 */
  x[20] = -0.0f, codes[20] = 0x80;
  x[21] = -1.0f, codes[21] = 0xf8; /* -256 */
  for (int c = 22; c < 32; c++)
    x[c] = 0.0f, codes[c] = 0;
  x[32] = 448.0f, codes[32] = 0x7e;
  x[33] = -448.0f, codes[33] = 0xfe;
  x[34] = 0.001953125f, codes[34] = 0x01; /* 2^-9 */
  for (int c = 35; c < 64; c++)
    x[c] = 1.0f, codes[c] = 0x38;
  check_row("mxfp8", x, 64, codes, (const uint8_t[]){119, 127}, 2);
}

static void test_mx_edges(void) {
  float x[32];
  uint8_t codes[32];
  /* All zero: scale byte 0 (2^-127) and zero elements. */
  memset(x, 0, sizeof x);
  memset(codes, 0, sizeof codes);
  check_row("mxfp8", x, 32, codes, (const uint8_t[]){0}, 1);
  check_row("mxfp4", x, 32, codes, (const uint8_t[]){0}, 1);
  /* One huge value: 2^100 * fp32(1/448) = 2^91.19, rounded up to 2^92 (byte 219); 2^100 becomes
   * 256 and the ones vanish. */
  for (int c = 0; c < 32; c++)
    x[c] = 1.0f, codes[c] = 0;
  x[5] = ldexpf(1.0f, 100), codes[5] = 0x78;
  check_row("mxfp8", x, 32, codes, (const uint8_t[]){219}, 1);
  /* Saturation: amax 480. Rounded up, 480 * fp32(1/448) = 1.07 -> 2^1 (byte 128) and 480 / 2 =
   * 240 = 1.875 * 2^7 (0x77). OCP's floor: floor(log2(480)) - 8 = 0 (byte 127), and 480
   * saturates to 448 (0x7e). */
  memset(x, 0, sizeof x);
  memset(codes, 0, sizeof codes);
  x[0] = 480.0f, codes[0] = 0x77;
  check_row("mxfp8", x, 32, codes, (const uint8_t[]){128}, 1);
  codes[0] = 0x7e;
  check_row("mxfp8-floor", x, 32, codes, (const uint8_t[]){127}, 1);
}

static void test_mxfp4(void) {
  /* amax 6: 6 * fp32(1/6) rounds to exactly 1, scale 2^0 (byte 127): the elements are
   * themselves. Then amax 1: fp32(1/6) rounds up to 2^-2 (byte 125), the elements times 4. */
  float x[64] = {6, 3, 0.75f, -0.25f, 1.25f, -1.75f, 2.5f, 5.0f, 0.5f, -6};
  uint8_t codes[64] = {0x7, 0x5, 0x2, 0x8, 0x2, 0xc, 0x4, 0x6, 0x1, 0xf};
  x[32] = 1.0f, codes[32] = 0x6;    /* 4 */
  x[33] = 0.5f, codes[33] = 0x4;    /* 2 */
  x[34] = -0.375f, codes[34] = 0xb; /* -1.5 */
  x[35] = 0.0625f, codes[35] = 0x0; /* 0.25: the tie goes to 0 */
  x[36] = 0.875f, codes[36] = 0x6;  /* 3.5: the tie goes to 4 */
  check_row("mxfp4", x, 64, codes, (const uint8_t[]){127, 125}, 2);
  /* Packing: the even column in the low nibble. */
  uint8_t q[2], s[1];
  const float pair[4] = {6, 3, -0.5f, 1};
  ASSERT_OK(rf_format_quantize_ref(fmt("mxfp4"), "t", pair, RF_DTYPE_FP32, 1, 4, 4, 1.0f, q, s));
  ASSERT_EQ(q[0], 0x57);
  ASSERT_EQ(q[1], 0x29);
  /* amax 7: rounded up, 7 * fp32(1/6) = 1.17 -> 2^1, and 3.5 ties to 4 (code 6); OCP's floor:
   * floor(log2(7)) - 2 = 0, and 7 saturates to 6 (code 7). */
  float y[32] = {7};
  uint8_t c7[32] = {0x6};
  check_row("mxfp4", y, 32, c7, (const uint8_t[]){128}, 1);
  c7[0] = 0x7;
  check_row("mxfp4-floor", y, 32, c7, (const uint8_t[]){127}, 1);
}

static void test_nvfp4(void) {
  /* Tensor amax 2688 gives the global scale 1 exactly. Block 0 (amax 6): scale 6 / 6 = 1
   * (e4m3 0x38), elements themselves. Block 1 (amax 2688): 2688 / 6 = 448 (0x7e), elements
   * x / 448. Block 2: zero, ModelOpt's 1.0. Block 3: amax 1e-30, whose scale rounds to zero in
   * e4m3: the smallest, 2^-9 (0x01), and its elements round to 0. */
  float x[64] = {6, -3, 1.5f, 0.2f};
  uint8_t codes[64] = {0x7, 0xd, 0x3, 0x0};
  x[16] = 2688, codes[16] = 0x7;
  x[17] = 448, codes[17] = 0x2;  /* 1 */
  x[18] = -896, codes[18] = 0xc; /* -2 */
  x[48] = 1e-30f, codes[48] = 0x0;
  const rf_format *f = fmt("nvfp4");
  uint8_t q[32], s[4];
  float g = rf_format_tensor_global(f, x, RF_DTYPE_FP32, 1, 64, 64);
  ASSERT_EQ(bits_of(g), 0x3f800000);
  ASSERT_OK(rf_format_quantize_ref(f, "t", x, RF_DTYPE_FP32, 1, 64, 64, g, q, s));
  for (int c = 0; c < 64; c++)
    ASSERT_EQ(q[c / 2] >> (c % 2 * 4) & 0xf, codes[c]);
  /* The reference writes scales row-major, as ModelOpt's checkpoints hold them. */
  ASSERT_EQ(s[0], 0x38);
  ASSERT_EQ(s[1], 0x7e);
  ASSERT_EQ(s[2], 0x38);
  ASSERT_EQ(s[3], 0x01);
  /* The global scale of a tensor whose amax is 1: fp32(1 / 2688). */
  ASSERT_EQ(bits_of(rf_format_global_of(f, 1.0f)), bits_of(1.0f / 2688.0f));
  ASSERT_EQ(bits_of(rf_format_global_of(f, 0.0f)), 0x3f800000);
}

static void test_fp8_ue8m0(void) {
  /* amax 1e-6, clamped to 1e-4 as DeepGEMM does: fp32(1e-4 * fp32(1/448)) = 2.23e-7, rounded up
   * to 2^-22, stored as fp32 (0x34800000); 1e-6 * 2^22 = 4.194 -> e4m3 4 (0x48). */
  float x[4] = {1e-6f, 0, -1e-6f, 0};
  uint8_t q[4], s[4];
  ASSERT_OK(rf_format_quantize_ref(fmt("fp8-ue8m0"), "t", x, RF_DTYPE_FP32, 2, 2, 2, 1.0f, q, s));
  ASSERT_EQ(q[0], 0x48);
  ASSERT_EQ(q[2], 0xc8);
  uint32_t sb;
  memcpy(&sb, s, 4);
  ASSERT_EQ(sb, 0x34800000);
}

/* NaN and inf are refused with one line that names the format, tensor and block. */
static void test_refused(void) {
  float x[64] = {0};
  x[40] = NAN;
  uint8_t q[64], s[512];
  char err[512] = "";
  rf_log_capture(err, sizeof err);
  ASSERT_STATUS(rf_format_quantize_ref(fmt("mxfp4"), "w", x, RF_DTYPE_FP32, 1, 64, 64, 1.0f, q, s),
                RF_ERR_CHECKPOINT);
  rf_log_capture(NULL, 0);
  ASSERT_STR_EQ(err, "mxfp4: tensor w holds NaN in the block of rows 0..0, columns 32..63; "
                     "quantized weights need finite values, check where the weights came from");
  x[40] = 0;
  x[3] = -INFINITY;
  rf_log_capture(err, sizeof err);
  ASSERT_STATUS(rf_format_quantize_ref(fmt("nvfp4"), "w", x, RF_DTYPE_FP32, 1, 64, 64, 1.0f, q, s),
                RF_ERR_CHECKPOINT);
  rf_log_capture(NULL, 0);
  ASSERT_STR_EQ(err, "nvfp4: tensor w holds inf in the block of rows 0..0, columns 0..15; "
                     "quantized weights need finite values, check where the weights came from");
  rf_log_capture(err, sizeof err);
  ASSERT_STATUS(rf_format_quantize_ref(fmt("mxfp4"), "w", x, RF_DTYPE_FP32, 1, 63, 63, 1.0f, q, s),
                RF_ERR_INTERNAL);
  rf_log_capture(NULL, 0);
  ASSERT_STR_EQ(err, "mxfp4: tensor w has 63 columns; 4-bit elements pack two a byte, so the "
                     "columns must be even");
}

/* The table's fp8 entry is the fp8 reference, byte for byte, on random bf16 with edge blocks. */
static void test_fp8_entry(void) {
  const int64_t rows = 200, cols = 300;
  uint16_t *x = malloc((size_t)(rows * cols) * 2);
  uint8_t *q1 = malloc((size_t)(rows * cols)), *q2 = malloc((size_t)(rows * cols));
  float s1[2 * 3], s2[2 * 3];
  ASSERT_TRUE(x && q1 && q2);
  uint64_t r = 0x1234;
  for (int64_t i = 0; i < rows * cols; i++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (uint16_t)((r >> 33 & 0x3fff) | (r >> 20 & 0x8000)); /* finite bf16, many exponents */
  }
  ASSERT_OK(rf_fp8_quantize_ref("t", x, RF_DTYPE_BF16, rows, cols, cols, q1, s1));
  ASSERT_OK(rf_format_quantize_ref(fmt("fp8"), "t", x, RF_DTYPE_BF16, rows, cols, cols, 1.0f, q2,
                                   (uint8_t *)s2));
  ASSERT_EQ(memcmp(q1, q2, (size_t)(rows * cols)), 0);
  ASSERT_EQ(memcmp(s1, s2, sizeof s1), 0);
  free(x);
  free(q1);
  free(q2);
}

/* The 4-bit kernels' forms (format_fast.h) against the reference: the magic-number e2m1 code
 * of every value an MX block can hand it (every bf16 and fp16 pattern under every power-of-two
 * scale, and the neighbours of each rounding point), and the division through the block's
 * reciprocal, bit for bit from 1/8 up (smaller quotients are code 0 either way), for every bf16
 * under every e4m3 block scale with a few globals. (The e2m1 code was also checked once on all
 * 2^32 floats; that takes seconds, too long for here.) */
#define FAST_FAIL(...)                                                                             \
  do {                                                                                             \
    fprintf(stderr, "test_format: " __VA_ARGS__);                                                  \
    fprintf(stderr, "\n");                                                                         \
    abort();                                                                                       \
  } while (0)

static void test_fast_forms(void) {
  int64_t n = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    const float xs[2] = {rf_fast_float(h << 16), rf_fp16_to_float((uint16_t)h)};
    for (int k = 0; k < 2; k++)
      for (int e = -127; e <= 127; e += (isnan(xs[k]) || isinf(xs[k])) ? 255 : 1) {
        const float p = xs[k] * ldexpf(1.0f, -e);
        if ((rf_e2m1_from_float(p) & 7) != rf_e2m1_magnitude_code(p))
          FAST_FAIL("e2m1 of %a: reference %u, fast %u", (double)p, rf_e2m1_from_float(p) & 7,
                    rf_e2m1_magnitude_code(p));
        n++;
      }
  }
  static const float points[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 8.0f};
  for (size_t i = 0; i < sizeof points / sizeof points[0]; i++)
    for (int d = -4; d <= 4; d++) {
      const float p = rf_fast_float(bits_of(points[i]) + (uint32_t)d);
      ASSERT_EQ(rf_e2m1_magnitude_code(p), rf_e2m1_from_float(p) & 7);
    }
  static const float globals[] = {1.0f, 1.0f / 2688.0f, 7.1e3f, 1.7e-20f};
  int64_t quotients = 0;
  for (size_t g = 0; g < sizeof globals / sizeof globals[0]; g++)
    for (uint8_t code = 0x01; code < 0x7f; code++) {
      const float d = rf_fp8_e4m3_to_float(code) * globals[g];
      ASSERT_TRUE(rf_div_fast_ok(d));
      const float r = 1.0f / d;
      for (uint32_t h = 0; h < 0x7f80; h++) {
        const float x = rf_fast_float(h << 16);
        if (bits_of(rf_div_by_reciprocal(x, d, r)) != bits_of(x / d) && x / d >= 0.125f &&
            !isinf(x / d))
          FAST_FAIL("%a / %a: %a, correctly rounded %a", (double)x, (double)d,
                    (double)rf_div_by_reciprocal(x, d, r), (double)(x / d));
        if (rf_e2m1_magnitude_code(rf_div_by_reciprocal(x, d, r)) !=
            (rf_e2m1_from_float(x / d) & 7))
          FAST_FAIL("e2m1 of %a / %a differs", (double)x, (double)d);
        quotients++;
      }
    }
  ASSERT_TRUE(!rf_div_fast_ok(0x1p-101f) && !rf_div_fast_ok(0x1p101f));
  printf("test_format: fast forms: %lld e2m1 codes and %lld quotients as the reference\n",
         (long long)n, (long long)quotients);
}

/* The thresholds of the GPU's 4-bit kernels (rf_e2m1_threshold, rf_bf16_bits_dir): the number
 * of a block's seven thresholds that a bf16 magnitude passes is the reference's e2m1 code of the
 * scaled element, for every finite bf16 under every power-of-two scale (mxfp4) and every e4m3
 * block scale under two globals (nvfp4's division); and rf_fast_fma_dir rounds as the GPU's
 * directed fused multiply-adds do, next to a few exact sums and overflow. */
static void test_thresholds(void) {
  ASSERT_TRUE(rf_fast_fma_dir(1.0f, 1.0f, 0x1p-30f, 0) == 1.0f);
  ASSERT_TRUE(rf_fast_fma_dir(1.0f, 1.0f, 0x1p-30f, 1) == 0x1.000002p0f);
  ASSERT_TRUE(rf_fast_fma_dir(1.0f, 1.0f, -0x1p-30f, 1) == 1.0f);
  ASSERT_TRUE(rf_fast_fma_dir(1.0f, 1.0f, -0x1p-30f, 0) == 0x1.fffffep-1f);
  ASSERT_TRUE(rf_fast_fma_dir(3.0f, 5.0f, 0.0f, 0) == 15.0f);
  ASSERT_TRUE(rf_fast_fma_dir(0x1p127f, 4.0f, 0.0f, 0) == FLT_MAX);
  ASSERT_TRUE(isinf(rf_fast_fma_dir(0x1p127f, 4.0f, 0.0f, 1)));
  static const float globals[] = {1.0f, 1.0f / 2688.0f};
  int64_t n = 0;
  for (int scale = -127; scale < 127 + 2 * 126; scale++) {
    int div = scale > 126;
    float d = div ? rf_fp8_e4m3_to_float((uint8_t)((scale - 127) % 126 + 1)) *
                        globals[(scale - 127) / 126]
                  : ldexpf(1.0f, scale);
    uint32_t t[7];
    for (int k = 0; k < 7; k++)
      t[k] = rf_bf16_bits_dir(rf_e2m1_threshold(k, d, div), k % 2);
    for (uint32_t h = 0; h < 0x7f80; h++) {
      float x = rf_fast_float(h << 16), p = div ? x / d : x * ldexpf(1.0f, -scale);
      uint32_t code = 0;
      for (int k = 0; k < 7; k++)
        code += k % 2 ? h >= t[k] : h > t[k];
      if (code != (rf_e2m1_from_float(p) & 7u))
        FAST_FAIL("e2m1 of %a %s %a by thresholds: %u, reference %u", (double)x, div ? "/" : "*",
                  div ? (double)d : (double)ldexpf(1.0f, -scale), code, rf_e2m1_from_float(p) & 7);
      n++;
    }
  }
  printf("test_format: thresholds: %lld e2m1 codes as the reference\n", (long long)n);
}

int main(void) {
  test_table();
  test_same_file();
  test_e2m1();
  test_e8m0();
  test_mxfp8();
  test_mx_edges();
  test_mxfp4();
  test_nvfp4();
  test_fp8_ue8m0();
  test_refused();
  test_fp8_entry();
  test_fast_forms();
  test_thresholds();
  printf("test_format: ok\n");
  return 0;
}
