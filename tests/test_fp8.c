/* fp8: the e4m3fn conversion against a hand-written table of all 256 codes and an independent
 * nearest-value search, rounding at every midpoint, the 16-bit loads, and the block quantizer
 * against blocks whose amax, factor, scale and bytes are derived by hand below (each rule step
 * rounded to fp32 with exact rational arithmetic, not by this code). The rule, per block:
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

static float float_of(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

/* Every finite positive e4m3fn value times 512 (2^9), by code: row e is exponent field e;
 * exponent 0 holds the subnormals m·2^-9, exponent e > 0 the values (8 + m)·2^(e-10). 0x7f is
 * NaN. Written out by hand, not computed. */
static const int32_t e4m3_x512[127] = {
    0,      1,      2,      3,      4,      5,      6,      7,      /* e 0 */
    8,      9,      10,     11,     12,     13,     14,     15,     /* e 1: 2^-6 */
    16,     18,     20,     22,     24,     26,     28,     30,     /* e 2 */
    32,     36,     40,     44,     48,     52,     56,     60,     /* e 3 */
    64,     72,     80,     88,     96,     104,    112,    120,    /* e 4 */
    128,    144,    160,    176,    192,    208,    224,    240,    /* e 5 */
    256,    288,    320,    352,    384,    416,    448,    480,    /* e 6 */
    512,    576,    640,    704,    768,    832,    896,    960,    /* e 7: 1.0 */
    1024,   1152,   1280,   1408,   1536,   1664,   1792,   1920,   /* e 8 */
    2048,   2304,   2560,   2816,   3072,   3328,   3584,   3840,   /* e 9 */
    4096,   4608,   5120,   5632,   6144,   6656,   7168,   7680,   /* e 10 */
    8192,   9216,   10240,  11264,  12288,  13312,  14336,  15360,  /* e 11 */
    16384,  18432,  20480,  22528,  24576,  26624,  28672,  30720,  /* e 12 */
    32768,  36864,  40960,  45056,  49152,  53248,  57344,  61440,  /* e 13 */
    65536,  73728,  81920,  90112,  98304,  106496, 114688, 122880, /* e 14 */
    131072, 147456, 163840, 180224, 196608, 212992, 229376,         /* e 15: 256 .. 448 */
};

static void test_codes(void) {
  for (int c = 0; c < 256; c++) {
    float v = rf_fp8_e4m3_to_float((uint8_t)c);
    ASSERT_EQ(!!signbit(v), c >> 7);
    if ((c & 0x7f) == 0x7f) {
      ASSERT_TRUE(isnan(v));
    } else {
      ASSERT_TRUE((double)fabsf(v) * 512 == (double)e4m3_x512[c & 0x7f]);
    }
    /* Every code comes back from its value, NaNs included (0x7f and 0xff keep their sign). */
    ASSERT_EQ(rf_fp8_e4m3_from_float(v), c);
  }
  ASSERT_TRUE(rf_fp8_e4m3_to_float(0x7e) == 448.0f);
  ASSERT_TRUE(rf_fp8_e4m3_to_float(0xfe) == -448.0f);
  ASSERT_TRUE(rf_fp8_e4m3_to_float(0x01) == ldexpf(1, -9));
  ASSERT_TRUE(rf_fp8_e4m3_to_float(0x08) == ldexpf(1, -6));
  ASSERT_TRUE(rf_fp8_e4m3_to_float(0x38) == 1.0f);
}

/* Between every two neighbouring codes: the midpoint goes to the even code (an even code has
 * an even mantissa), one fp32 ulp either side to the nearer one; both signs. */
static void test_midpoints(void) {
  int checked = 0;
  for (int c = 0; c < 0x7e; c++) {
    float lo = rf_fp8_e4m3_to_float((uint8_t)c), hi = rf_fp8_e4m3_to_float((uint8_t)(c + 1));
    float mid = (lo + hi) / 2; /* exact: four significant bits at most */
    ASSERT_TRUE((double)mid == ((double)lo + (double)hi) / 2);
    int even = c & 1 ? c + 1 : c;
    for (int s = 0; s < 2; s++) {
      float sg = s ? -1.0f : 1.0f;
      uint8_t sb = (uint8_t)(s << 7);
      ASSERT_EQ(rf_fp8_e4m3_from_float(sg * mid), sb | even);
      ASSERT_EQ(rf_fp8_e4m3_from_float(sg * nextafterf(mid, INFINITY)), sb | (c + 1));
      ASSERT_EQ(rf_fp8_e4m3_from_float(sg * nextafterf(mid, 0)), sb | c);
      checked++;
    }
  }
  ASSERT_EQ(checked, 252);
}

/* The edges, each derived by hand. */
static void test_edges(void) {
  static const struct {
    float x;
    uint8_t code;
  } cases[] = {
      {432.0f, 0x7e},          /* 416 | 448 midpoint: 448's mantissa 6 is even */
      {431.99997f, 0x7d},      /* just below: 416 */
      {448.00003f, 0x7e},      /* an ulp above 448, as the quantizer's products can be */
      {463.99997f, 0x7e},      /* nearest is 448 */
      {464.0f, 0x7e},          /* 448 | 480 midpoint: even 448 (and 480 does not exist) */
      {464.00003f, 0x7e},      /* nearest would be 480, which e4m3fn spends on NaN: saturate */
      {480.0f, 0x7e},          /* saturate */
      {1e9f, 0x7e},            /* saturate */
      {-1e9f, 0xfe},           /* saturate, negative */
      {INFINITY, 0x7e},        /* saturate, as cvt.rn.satfinite does */
      {-INFINITY, 0xfe},       /* likewise */
      {0.0f, 0x00},            /* zero */
      {-0.0f, 0x80},           /* negative zero keeps its sign */
      {0x1p-9f, 0x01},         /* the smallest subnormal */
      {0x1p-10f, 0x00},        /* half of it: a tie, to even (zero) */
      {0x1.000002p-10f, 0x01}, /* an ulp above the tie */
      {-0x1p-10f, 0x80},       /* the tie, negative: -0 */
      {0x1.8p-10f, 0x01},      /* 3·2^-11 = 0.75 steps */
      {0x1.8p-9f, 0x02},       /* 1.5 steps: tie, to even 2 */
      {0x1.4p-8f, 0x02},       /* 2.5 steps: tie, to even 2 */
      {0x1.ep-7f, 0x08},       /* 7.5 steps: tie, to even 8, the smallest normal 2^-6 */
      {0x1p-11f, 0x00},        /* a quarter step */
      {1e-30f, 0x00},          /* tiny */
      {-1e-30f, 0x80},         /* tiny, negative: -0 */
      {0x1p-149f, 0x00},       /* the smallest fp32 subnormal */
      {1.0f, 0x38},            /* exponent field 7 */
      {-1.0625f, 0xb8},        /* 1 + 1/16: tie between 1 and 1.125, to even 1 */
      {1.0625001f, 0x39},      /* above the tie */
      {NAN, 0x7f},             /* NaN */
      {-NAN, 0xff},            /* NaN, negative */
  };
  for (size_t i = 0; i < RF_ARRAY_LEN(cases); i++) {
    if (rf_fp8_e4m3_from_float(cases[i].x) != cases[i].code)
      fprintf(stderr, "case %zu: %a\n", i, (double)cases[i].x);
    ASSERT_EQ(rf_fp8_e4m3_from_float(cases[i].x), cases[i].code);
  }
}

/* An independent conversion: the nearest of the 127 values by search (ties to the even code),
 * 448 beyond it. Checked on every 4093rd fp32 bit pattern (1,049,345 of them, all exponents). */
static uint8_t e4m3_by_search(float x) {
  uint8_t sign = signbit(x) ? 0x80 : 0;
  double a = fabs((double)x);
  if (isnan(x))
    return sign | 0x7f;
  if (a >= 448)
    return sign | 0x7e;
  int best = 0;
  for (int c = 1; c < 127; c++) {
    double d = fabs(a - e4m3_x512[c] / 512.0), db = fabs(a - e4m3_x512[best] / 512.0);
    if (d < db || (d == db && !(c & 1)))
      best = c;
  }
  return sign | (uint8_t)best;
}

static void test_search(void) {
  int64_t n = 0;
  for (uint64_t b = 0; b <= 0xffffffffULL; b += 4093, n++)
    ASSERT_EQ(rf_fp8_e4m3_from_float(float_of((uint32_t)b)), e4m3_by_search(float_of((uint32_t)b)));
  ASSERT_EQ(n, 1049345);
}

/* The 16-bit loads: hand-picked patterns, and every finite fp16 against (-1)^s · m · 2^(e-25)
 * evaluated in double, with the hidden bit 1024 added to m for normals. */
static void test_loads(void) {
  ASSERT_EQ(bits_of(rf_bf16_to_float(0x3f80)), 0x3f800000); /* 1 */
  ASSERT_EQ(bits_of(rf_bf16_to_float(0xc040)), 0xc0400000); /* -3 */
  ASSERT_EQ(bits_of(rf_bf16_to_float(0x0001)), 0x00010000); /* a subnormal, 2^-133 */
  ASSERT_EQ(bits_of(rf_bf16_to_float(0xff81)), 0xff810000); /* a NaN keeps its payload */
  ASSERT_EQ(bits_of(rf_fp16_to_float(0x3c00)), 0x3f800000); /* 1 */
  ASSERT_EQ(bits_of(rf_fp16_to_float(0x0001)), 0x33800000); /* 2^-24 */
  ASSERT_EQ(bits_of(rf_fp16_to_float(0x8400)), 0xb8800000); /* -2^-14 */
  ASSERT_EQ(bits_of(rf_fp16_to_float(0x7bff)), 0x477fe000); /* 65504 */
  ASSERT_EQ(bits_of(rf_fp16_to_float(0x7c00)), 0x7f800000); /* inf */
  ASSERT_EQ(bits_of(rf_fp16_to_float(0xfc01)), 0xff802000); /* a NaN keeps its payload */
  ASSERT_EQ(bits_of(rf_fp16_to_float(0x8000)), 0x80000000); /* -0 */
  int finite = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    int e = (int)(h >> 10 & 31);
    if (e == 31)
      continue;
    double m = (double)(h & 0x3ff) + (e ? 1024 : 0);
    double want = ldexp(m, (e ? e : 1) - 25) * (h & 0x8000 ? -1 : 1);
    ASSERT_TRUE((double)rf_fp16_to_float((uint16_t)h) == want);
    ASSERT_EQ(!!signbit(rf_fp16_to_float((uint16_t)h)), h >> 15);
    finite++;
  }
  ASSERT_EQ(finite, 63488);
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
      /* 448: fp32(1/448) · 448 = 1 + 7·(fp32(1/7) - 1/7)·64 rounds to 1, and so does the
       * scale. 57344 = 448·128 scales both by powers of two: factor 2^-7, scale 128. */
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

int main(void) {
  test_codes();
  test_midpoints();
  test_edges();
  test_search();
  test_loads();
  test_scales();
  test_largest_element();
  test_zero_block();
  test_clamped_block();
  test_identity_block();
  test_huge_block();
  test_edge_tensor();
  test_errors();
  printf("test_fp8: all passed\n");
  return 0;
}
