/* fp8, the conversion: every e4m3fn code against a hand-written table, every midpoint of
 * neighbouring codes, the edges (saturation, subnormals, signed zeros, NaN), an independent
 * nearest-value search over a million fp32 patterns, and the bf16 and fp16 loads. The block
 * quantizer is test_fp8_blocks. */

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

int main(void) {
  test_codes();
  test_midpoints();
  test_edges();
  test_search();
  test_loads();
  printf("test_fp8: all passed\n");
  return 0;
}
