/* fp8 on the GPU: the device quantizer (fp8_cuda.cu) against the CPU reference (fp8.c), byte
 * for byte and scale for scale.
 *
 * Cases: blocks made to reach every corner of the rule (all zeros, negative zeros, only bf16
 * subnormals so that the amax clamps, one huge value among small ones, every e4m3 value times
 * a power of two, values just below and above the saturation point); random tensors of bf16,
 * fp16 and fp32 bit patterns (every finite exponent, so products land on e4m3 subnormals,
 * zeros and saturation) and of values spread over 60 binades; random shapes with edge blocks,
 * row strides, and fp8 and scale buffers at odd offsets and pitches, so that both the 16-byte
 * path and the element path run; and the refusal of a block holding NaN or inf, which must
 * leave the block's bytes and scale untouched and name the block once. Buffers start as random
 * bytes, and the bytes around each job's output must come back unchanged. Also the fp8
 * checksum on the device (rf_fp8_checksum_on) against the CPU's, on the 16-byte and byte paths.
 * Exits 77 (skipped) in a build without CUDA or on a machine without a GPU. */
#include <math.h>

#include "format/format.h"
#include "memory/memory.h"
#include "test.h"
#include "verify/fp8.h"
#include "verify/values.h"

static uint64_t rng_state = 0xf8f8f8f8ULL;
static uint64_t rng(void) { return rf_mix64(rng_state += 0x9e3779b97f4a7c15ULL); }
static int64_t rng_range(int64_t lo, int64_t hi) {
  return lo + (int64_t)(rng() % (uint64_t)(hi - lo));
}

static uint32_t bits_of(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}

/* A finite random bit pattern of dtype dt. */
static uint32_t random_bits(rf_dtype dt) {
  uint32_t r = (uint32_t)rng();
  switch (dt) {
  case RF_DTYPE_BF16:
    r &= 0xffff;
    return (r & 0x7f80) == 0x7f80 ? r & ~0x4000u : r;
  case RF_DTYPE_FP16:
    r &= 0xffff;
    return (r & 0x7c00) == 0x7c00 ? r & ~0x4000u : r;
  default:
    return (r & 0x7f800000u) == 0x7f800000u ? r & ~0x40000000u : r;
  }
}

/* A value in ±[2^-30, 2^30) as dtype dt's bits (bf16 and fp16 truncated from fp32; fp16
 * flushes what it cannot hold to its largest finite value or zero, still finite). */
static uint32_t spread_bits(rf_dtype dt) {
  float v = ldexpf((float)(rng() >> 40) / (float)(1 << 24) + 0.5f, (int)rng_range(-30, 30));
  if (rng() & 1)
    v = -v;
  if (dt == RF_DTYPE_BF16)
    return bits_of(v) >> 16;
  if (dt == RF_DTYPE_FP16) {
    float a = fabsf(v);
    uint32_t sign = v < 0 ? 0x8000 : 0;
    if (a >= 65504.0f)
      return sign | 0x7bff;
    if (a < 0x1p-24f)
      return sign;
    int e;
    float m = frexpf(a, &e); /* a = m · 2^e, m in [0.5, 1) */
    if (e - 1 < -14)         /* subnormal: a / 2^-24, truncated */
      return sign | (uint32_t)(a * 0x1p24f);
    return sign | (uint32_t)(e - 1 + 15) << 10 | ((uint32_t)(m * 2048.0f) & 0x3ff);
  }
  return bits_of(v);
}

static void put(void *x, rf_dtype dt, int64_t i, uint32_t bits) {
  if (dt == RF_DTYPE_FP32)
    memcpy((char *)x + i * 4, &bits, 4);
  else {
    uint16_t h = (uint16_t)bits;
    memcpy((char *)x + i * 2, &h, 2);
  }
}

static void *device_copy_of(const void *host, size_t bytes) {
  void *d = NULL;
  ASSERT_OK(rf_mem_alloc(RF_MEM_DEVICE, bytes, "test device buffer", &d));
  ASSERT_OK(rf_mem_transfer(d, RF_MEM_DEVICE, host, RF_MEM_HOST, bytes));
  return d;
}

static char *random_host(size_t bytes) {
  char *h = malloc(bytes);
  ASSERT_TRUE(h != NULL);
  for (size_t i = 0; i < bytes; i++)
    h[i] = (char)rng();
  return h;
}

/* Where a job's output goes: fp8 rows q_stride bytes apart after q_off bytes, scale rows
 * s_stride floats apart after s_off bytes; x's rows x_stride elements apart after x_off. */
typedef struct {
  int64_t x_off, x_stride, q_off, q_stride, s_off, s_stride;
} geometry;

static int64_t blocks_of(int64_t n) { return (n + RF_FP8_BLOCK - 1) / RF_FP8_BLOCK; }

/* The format whose rule the kernels run: fp8, then fp8-ue8m0 (power-of-two scales). */
static const rf_format *fmt;

/* Quantizes x (host, rows x cols of dt at g's stride) on the device and on the CPU and
 * compares every byte of the fp8 and scale buffers, inside and around the output. */
static int64_t compare(rf_dtype dt, int64_t rows, int64_t cols, const void *x, const geometry *g) {
  size_t es = (size_t)rf_dtype_size(dt);
  int64_t br = blocks_of(rows), bc = blocks_of(cols);
  uint8_t *want_q = malloc((size_t)(rows * cols) + 1);
  float *want_s = malloc((size_t)(br * bc) * sizeof(float) + 1);
  ASSERT_OK(rf_format_quantize_ref(fmt, "case", (const char *)x + g->x_off * es, dt, rows, cols,
                                   g->x_stride, 1.0f, want_q, (uint8_t *)want_s));

  size_t x_bytes = (size_t)(g->x_off + rows * g->x_stride) * es;
  size_t q_bytes = (size_t)(g->q_off + rows * g->q_stride) + 64;
  size_t s_bytes = (size_t)g->s_off + (size_t)(br * g->s_stride) * 4 + 64;
  char *q0 = random_host(q_bytes), *s0 = random_host(s_bytes);
  char *dx = device_copy_of(x, x_bytes), *dq = device_copy_of(q0, q_bytes);
  char *ds = device_copy_of(s0, s_bytes);
  rf_fp8_job job = {.x = dx + g->x_off * (int64_t)es,
                    .dtype = dt,
                    .x_stride = g->x_stride,
                    .rows = rows,
                    .cols = cols,
                    .q = (uint8_t *)dq + g->q_off,
                    .q_stride = g->q_stride,
                    .scale = ds + g->s_off,
                    .scale_stride = g->s_stride,
                    .rule = fmt->rule,
                    .tag = 3};
  ASSERT_OK(rf_fp8_quantize_device(&job));
  rf_fp8_bad bad;
  ASSERT_OK(rf_fp8_device_bad(&bad));
  ASSERT_EQ(bad.found, 0);
  char *q1 = malloc(q_bytes), *s1 = malloc(s_bytes);
  ASSERT_OK(rf_mem_transfer(q1, RF_MEM_HOST, dq, RF_MEM_DEVICE, q_bytes));
  ASSERT_OK(rf_mem_transfer(s1, RF_MEM_HOST, ds, RF_MEM_DEVICE, s_bytes));

  /* Every byte: an output byte is the reference's, any other is what was there before. */
  for (size_t i = 0; i < q_bytes; i++) {
    int64_t at = (int64_t)i - g->q_off, r = at / g->q_stride, c = at % g->q_stride;
    int inside = at >= 0 && r < rows && c < cols;
    uint8_t want = inside ? want_q[r * cols + c] : (uint8_t)q0[i];
    if ((uint8_t)q1[i] != want) {
      fprintf(stderr, "%s %lldx%lld: fp8 byte %zu (row %lld, col %lld) is 0x%02x, want 0x%02x\n",
              rf_dtype_name(dt), (long long)rows, (long long)cols, i, (long long)r, (long long)c,
              (uint8_t)q1[i], want);
      ASSERT_EQ((uint8_t)q1[i], want);
    }
  }
  for (size_t i = 0; i < s_bytes; i++) {
    int64_t at = (int64_t)i - g->s_off, word = at / 4;
    int64_t r = word / g->s_stride, c = word % g->s_stride;
    int inside = at >= 0 && r < br && c < bc;
    uint8_t want = (uint8_t)s0[i];
    if (inside)
      want = (uint8_t)(bits_of(want_s[r * bc + c]) >> (8 * (at % 4)));
    ASSERT_EQ((uint8_t)s1[i], want);
  }
  rf_mem_free(RF_MEM_DEVICE, dx, x_bytes);
  rf_mem_free(RF_MEM_DEVICE, dq, q_bytes);
  rf_mem_free(RF_MEM_DEVICE, ds, s_bytes);
  free(want_q), free(want_s), free(q0), free(s0), free(q1), free(s1);
  return rows * cols;
}

static geometry dense(int64_t cols) { return (geometry){0, cols, 0, cols, 0, blocks_of(cols)}; }

/* Nine 128x128 bf16 blocks, one corner of the rule each. */
static void test_crafted_blocks(void) {
  const int64_t n = 3 * RF_FP8_BLOCK;
  uint16_t *x = calloc((size_t)(n * n), 2);
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < n; c++) {
      int blk = (int)(r / 128 * 3 + c / 128), k = (int)((r % 128) * 128 + c % 128);
      uint16_t v = 0;
      switch (blk) {
      case 0: /* all zeros */
        break;
      case 1: /* negative zeros and one tiny positive value */
        v = k == 77 ? 0x0001 : 0x8000;
        break;
      case 2: /* bf16 subnormals only: the amax clamps to 1e-4 */
        v = (uint16_t)((k & 0x7f) | (k & 0x80 ? 0x8000 : 0));
        break;
      case 3: /* one huge value (the largest finite bf16) among small ones */
        v = k == 5000 ? 0x7f7f : (uint16_t)(0x3c00 + (k % 256));
        break;
      case 4: { /* every e4m3 magnitude times 2^-3, both signs, so its products are e4m3 values
                   scaled by the block's factor */
        int code = k % 127;
        int e = code >> 3, m = code & 7;
        float v32 = e == 0 ? ldexpf((float)m, -12) : ldexpf((float)(8 + m), e - 13);
        v = (uint16_t)(bits_of(k & 128 ? -v32 : v32) >> 16);
        break;
      }
      case 5: /* around the saturation point: amax 448 and values near it */
        v = (uint16_t)(0x43d0 + k % 17);
        break;
      case 6: /* one value per binade from 2^-133 up: most products are e4m3 subnormals or 0 */
        v = (uint16_t)((k % 255) << 7 | (k * 37 & 0x7f));
        break;
      case 7: /* constant block */
        v = 0xbf80;
        break;
      default: /* random finite bits */
        v = (uint16_t)random_bits(RF_DTYPE_BF16);
      }
      x[r * n + c] = v;
    }
  geometry g = dense(n);
  compare(RF_DTYPE_BF16, n, n, x, &g);
  free(x);
  printf("test_fp8_gpu: %s: crafted blocks ok\n", fmt->name);
}

static void test_random(void) {
  static const rf_dtype dts[] = {RF_DTYPE_BF16, RF_DTYPE_FP16, RF_DTYPE_FP32};
  int64_t elems = 0;
  for (int n = 0; n < 72; n++) {
    rf_dtype dt = dts[n % 3];
    int wide = n % 4 != 3; /* three in four on the 16-byte path's geometry */
    int64_t rows = rng_range(1, 520), cols = wide ? 128 * rng_range(1, 5) : rng_range(1, 520);
    geometry g = {0, cols, 0, cols, 0, blocks_of(cols)};
    if (!wide || n % 2) {
      g.x_off = wide ? 8 * rng_range(0, 4) : rng_range(0, 9);
      g.x_stride = cols + (wide ? 8 * rng_range(0, 4) : rng_range(0, 9));
      g.q_off = wide ? 8 * rng_range(0, 4) : rng_range(0, 9);
      g.q_stride = cols + (wide ? 8 * rng_range(0, 4) : rng_range(0, 9));
      g.s_off = rng_range(0, 9);
      g.s_stride = blocks_of(cols) + rng_range(0, 4);
    }
    size_t es = (size_t)rf_dtype_size(dt);
    void *x = malloc((size_t)(g.x_off + rows * g.x_stride) * es);
    for (int64_t i = 0; i < g.x_off + rows * g.x_stride; i++)
      put(x, dt, i, n % 2 ? random_bits(dt) : spread_bits(dt));
    elems += compare(dt, rows, cols, x, &g);
    free(x);
  }
  /* One large bf16 weight, as refit packs it: 2048 x 4096. */
  int64_t rows = 2048, cols = 4096;
  uint16_t *x = malloc((size_t)(rows * cols) * 2);
  for (int64_t i = 0; i < rows * cols; i++)
    x[i] = (uint16_t)spread_bits(RF_DTYPE_BF16);
  geometry g = dense(cols);
  elems += compare(RF_DTYPE_BF16, rows, cols, x, &g);
  free(x);
  printf("test_fp8_gpu: %s: %" PRId64 " random elements ok\n", fmt->name, elems);
}

/* A NaN (bf16) or an inf (fp16) in block (1, 1) of a 256 x 384 tensor: that block keeps its
 * bytes and scale, the others are quantized, and rf_fp8_device_bad names it once. */
static void test_refused(rf_dtype dt, uint32_t bad_bits, int nan) {
  const int64_t rows = 256, cols = 384;
  uint16_t *x = malloc((size_t)(rows * cols) * 2);
  for (int64_t i = 0; i < rows * cols; i++)
    x[i] = (uint16_t)spread_bits(dt);
  x[200 * cols + 130] = (uint16_t)bad_bits;
  char *q0 = random_host((size_t)(rows * cols)), *s0 = random_host(6 * 4);
  char *dx = device_copy_of(x, (size_t)(rows * cols) * 2);
  char *dq = device_copy_of(q0, (size_t)(rows * cols)), *ds = device_copy_of(s0, 24);
  rf_fp8_job job = {.x = dx,
                    .dtype = dt,
                    .x_stride = cols,
                    .rows = rows,
                    .cols = cols,
                    .q = (uint8_t *)dq,
                    .q_stride = cols,
                    .scale = ds,
                    .scale_stride = 3,
                    .tag = 41,
                    .row0 = 1024,
                    .col0 = 512};
  ASSERT_OK(rf_fp8_quantize_device(&job));
  rf_fp8_bad bad;
  ASSERT_OK(rf_fp8_device_bad(&bad));
  ASSERT_EQ(bad.found, 1);
  ASSERT_EQ(bad.tag, 41);
  ASSERT_EQ(bad.nan, nan);
  ASSERT_EQ(bad.row, 1024 + 128);
  ASSERT_EQ(bad.col, 512 + 128);
  ASSERT_OK(rf_fp8_device_bad(&bad)); /* read once */
  ASSERT_EQ(bad.found, 0);
  char *q1 = malloc((size_t)(rows * cols)), s1[24];
  ASSERT_OK(rf_mem_transfer(q1, RF_MEM_HOST, dq, RF_MEM_DEVICE, (size_t)(rows * cols)));
  ASSERT_OK(rf_mem_transfer(s1, RF_MEM_HOST, ds, RF_MEM_DEVICE, 24));
  uint8_t want_q[128 * 128];
  float want_s;
  for (int64_t r = 128; r < 256; r++)
    for (int64_t c = 128; c < 256; c++)
      ASSERT_EQ((uint8_t)q1[r * cols + c], (uint8_t)q0[r * cols + c]);
  ASSERT_EQ(memcmp(s1 + 16, s0 + 16, 4), 0);
  /* A neighbouring block came out as the reference says. */
  ASSERT_OK(rf_fp8_quantize_ref("neighbour", x + 128 * cols, dt, 128, 128, cols, want_q, &want_s));
  for (int64_t r = 0; r < 128; r++)
    ASSERT_EQ(memcmp(q1 + (128 + r) * cols, want_q + r * 128, 128), 0);
  uint32_t got_s;
  memcpy(&got_s, s1 + 12, 4);
  ASSERT_EQ(got_s, bits_of(want_s));
  rf_mem_free(RF_MEM_DEVICE, dx, (size_t)(rows * cols) * 2);
  rf_mem_free(RF_MEM_DEVICE, dq, (size_t)(rows * cols));
  rf_mem_free(RF_MEM_DEVICE, ds, 24);
  free(x), free(q0), free(s0), free(q1);
  printf("test_fp8_gpu: a block holding %s is refused and named\n", nan ? "NaN" : "inf");
}

/* The fp8 checksum on the device (rf_fp8_checksum_on) against the CPU's over the same bytes:
 * a dense tensor (16-byte accesses of whole words), the same at an odd address (byte by byte),
 * and shards inside wider fused buffers whose lines start on a word or mid-word. */
static void checksum_case(const char *what, int64_t rows, int64_t cols, rf_box held, int64_t ld,
                          int64_t off) {
  rf_tensor t = {.id = 11, .ndim = 2, .shape = {rows, cols}, .dtype = RF_DTYPE_BF16};
  rf_box blocks = {{held.lo[0] / RF_FP8_BLOCK, held.lo[1] / RF_FP8_BLOCK},
                   {blocks_of(held.hi[0]), blocks_of(held.hi[1])}};
  int64_t hrows = held.hi[0] - held.lo[0], sld = blocks.hi[1] - blocks.lo[1] + 1;
  size_t q_bytes = (size_t)(off + hrows * ld), s_bytes = (size_t)(blocks_of(hrows) + 1) * sld * 4;
  char *hq = random_host(q_bytes), *hs = random_host(s_bytes);
  char *dq = device_copy_of(hq, q_bytes), *ds = device_copy_of(hs, s_bytes);
  rf_region q = rf_region_in_fused(hq + off, ld, 0, 0, &held, 1);
  rf_region sc = rf_region_in_fused(hs, sld, 0, 0, &blocks, 4);
  rf_region dqr = rf_region_in_fused(dq + off, ld, 0, 0, &held, 1);
  rf_region dsr = rf_region_in_fused(ds, sld, 0, 0, &blocks, 4);
  uint64_t want = rf_fp8_checksum(RF_CHECKSUM_CURRENT, &t, &q, &held, &sc, &blocks), got = 0;
  ASSERT_OK(rf_fp8_checksum_on(RF_MEM_DEVICE, &t, &dqr, &held, &dsr, &blocks, &got));
  if (got != want)
    fprintf(stderr, "fp8 checksum, %s: device %016llx, CPU %016llx\n", what,
            (unsigned long long)got, (unsigned long long)want);
  ASSERT_EQ(got, want);
  rf_mem_free(RF_MEM_DEVICE, dq, q_bytes);
  rf_mem_free(RF_MEM_DEVICE, ds, s_bytes);
  free(hq), free(hs);
  printf("test_fp8_gpu: fp8 checksum of %s matches the CPU's\n", what);
}

static void test_checksum(void) {
  checksum_case("a dense 384x1024 tensor", 384, 1024, (rf_box){{0, 0}, {384, 1024}}, 1024, 0);
  checksum_case("a dense tensor at an odd address", 384, 1024, (rf_box){{0, 0}, {384, 1024}}, 1024,
                3);
  checksum_case("a word-aligned shard in a fused buffer", 384, 1280,
                (rf_box){{128, 256}, {384, 1280}}, 1536, 512);
  checksum_case("a shard starting mid-word", 300, 333, (rf_box){{128, 131}, {300, 333}}, 341, 0);
}

/* The 1-D kernel (mxfp8, mxfp8-floor: 1x32 blocks, E8M0 bytes) against the CPU reference on
 * rows of spread and random values with edge blocks, plus a row of zeros, a row of bf16
 * subnormals, a row with one huge value and a row around 448. */
static void test_1d(const char *name, rf_dtype dt) {
  const rf_format *f = rf_format_find(name);
  const int64_t rows = 300, cols = 1000, grid = (cols + 31) / 32;
  size_t es = (size_t)rf_dtype_size(dt);
  char *x = malloc((size_t)(rows * cols) * es);
  ASSERT_TRUE(x != NULL);
  for (int64_t i = 0; i < rows * cols; i++) {
    int64_t r = i / cols, c = i % cols;
    uint32_t bits = r % 2 ? random_bits(dt) : spread_bits(dt);
    if (dt == RF_DTYPE_BF16 && r == 0)
      bits = 0;
    else if (dt == RF_DTYPE_BF16 && r == 1)
      bits = (uint32_t)(c & 0x807f); /* subnormals and signed zeros */
    else if (dt == RF_DTYPE_BF16 && r == 2)
      bits = c == 77 ? 0x7f7f : 0x3f80; /* the largest finite bf16 among ones */
    else if (dt == RF_DTYPE_BF16 && r == 3)
      bits = (uint32_t)(0x43d0 + c % 17);
    put(x, dt, i, bits);
  }
  uint8_t *want_q = malloc((size_t)(rows * cols)), *want_s = malloc((size_t)(rows * grid));
  ASSERT_OK(rf_format_quantize_ref(f, "case", x, dt, rows, cols, cols, 1.0f, want_q, want_s));
  char *dx = device_copy_of(x, (size_t)(rows * cols) * es);
  char *dq = device_copy_of(want_q, (size_t)(rows * cols)); /* overwritten */
  char *ds = device_copy_of(want_s, (size_t)(rows * grid));
  ASSERT_OK(rf_mem_zero(RF_MEM_DEVICE, dq, (size_t)(rows * cols)));
  ASSERT_OK(rf_mem_zero(RF_MEM_DEVICE, ds, (size_t)(rows * grid)));
  rf_fp8_job job = {.x = dx,
                    .dtype = dt,
                    .x_stride = cols,
                    .rows = rows,
                    .cols = cols,
                    .q = (uint8_t *)dq,
                    .q_stride = cols,
                    .scale = ds,
                    .scale_stride = grid,
                    .rule = f->rule,
                    .block_cols = f->block_cols,
                    .tag = 1};
  ASSERT_OK(rf_fp8_quantize_device(&job));
  rf_fp8_bad bad;
  ASSERT_OK(rf_fp8_device_bad(&bad));
  ASSERT_EQ(bad.found, 0);
  uint8_t *got_q = malloc((size_t)(rows * cols)), *got_s = malloc((size_t)(rows * grid));
  ASSERT_OK(rf_mem_transfer(got_q, RF_MEM_HOST, dq, RF_MEM_DEVICE, (size_t)(rows * cols)));
  ASSERT_OK(rf_mem_transfer(got_s, RF_MEM_HOST, ds, RF_MEM_DEVICE, (size_t)(rows * grid)));
  for (int64_t i = 0; i < rows * cols; i++)
    if (got_q[i] != want_q[i]) {
      fprintf(stderr, "%s %s: element %lld is 0x%02x, want 0x%02x\n", name, rf_dtype_name(dt),
              (long long)i, got_q[i], want_q[i]);
      ASSERT_EQ(got_q[i], want_q[i]);
    }
  ASSERT_EQ(memcmp(got_s, want_s, (size_t)(rows * grid)), 0);
  rf_mem_free(RF_MEM_DEVICE, dx, (size_t)(rows * cols) * es);
  rf_mem_free(RF_MEM_DEVICE, dq, (size_t)(rows * cols));
  rf_mem_free(RF_MEM_DEVICE, ds, (size_t)(rows * grid));
  free(x), free(want_q), free(want_s), free(got_q), free(got_s);
  printf("test_fp8_gpu: %s %s: %lld elements ok\n", name, rf_dtype_name(dt),
         (long long)(rows * cols));
}

/* One job of test_batch: a rows x cols tensor of dt in format f, its source stored row-major
 * or transposed (element (r, c) at c * ld + r, as a JAX-order shard holds it). */
typedef struct {
  const char *format;
  rf_dtype dt;
  int64_t rows, cols, ld;
  int transposed;
} batch_spec;
typedef struct {
  const char *format;
  rf_dtype dt;
  int64_t rows, cols, ld;
  int transposed;
  const rf_format *f;
  int64_t grid_cols, q_bytes, s_bytes;
  char *x, *dx, *dq, *ds;
  uint8_t *want_q, *want_s;
} batch_case;

static void batch_queue(batch_case *k, int tag) {
  k->f = rf_format_find(k->format);
  size_t es = (size_t)rf_dtype_size(k->dt);
  int64_t rows = k->rows, cols = k->cols;
  k->grid_cols = rf_format_block_grid(k->f, 1, cols);
  k->q_bytes = rows * rf_format_row_bytes(k->f, cols);
  /* Row-major scales, as the reference writes them (the tiles have their own test). */
  k->s_bytes = rf_format_block_grid(k->f, 0, rows) * k->grid_cols * k->f->scale_bytes;
  k->x = malloc((size_t)(rows * cols) * es);
  for (int64_t i = 0; i < rows * cols; i++)
    put(k->x, k->dt, i, i % 3 ? spread_bits(k->dt) : random_bits(k->dt));
  k->want_q = malloc((size_t)k->q_bytes);
  k->want_s = malloc((size_t)k->s_bytes);
  float global = rf_format_tensor_global(k->f, k->x, k->dt, rows, cols, cols);
  ASSERT_OK(rf_format_quantize_ref(k->f, "case", k->x, k->dt, rows, cols, cols, global, k->want_q,
                                   k->want_s));
  size_t x_bytes = (size_t)(k->transposed ? cols * k->ld : rows * cols) * es;
  char *stored = malloc(x_bytes);
  memset(stored, 0, x_bytes);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      memcpy(stored + (size_t)(k->transposed ? c * k->ld + r : r * cols + c) * es,
             k->x + (size_t)(r * cols + c) * es, es);
  k->dx = device_copy_of(stored, x_bytes);
  free(stored);
  k->dq = device_copy_of(k->want_q, (size_t)k->q_bytes); /* overwritten */
  k->ds = device_copy_of(k->want_s, (size_t)k->s_bytes);
  ASSERT_OK(rf_mem_zero(RF_MEM_DEVICE, k->dq, (size_t)k->q_bytes));
  ASSERT_OK(rf_mem_zero(RF_MEM_DEVICE, k->ds, (size_t)k->s_bytes));
  rf_fp8_job job = {.x = k->dx,
                    .dtype = k->dt,
                    .x_stride = k->transposed ? 1 : cols,
                    .x_col_stride = k->transposed ? k->ld : 1,
                    .rows = rows,
                    .cols = cols,
                    .q = (uint8_t *)k->dq,
                    .q_stride = rf_format_row_bytes(k->f, cols),
                    .scale = k->ds,
                    .scale_stride = k->grid_cols,
                    .tag = tag};
  rf_fp8_job_format(&job, k->f, global);
  ASSERT_OK(rf_fp8_quantize_device(&job));
}

static void batch_check(batch_case *k) {
  uint8_t *got_q = malloc((size_t)k->q_bytes), *got_s = malloc((size_t)k->s_bytes);
  ASSERT_OK(rf_mem_transfer(got_q, RF_MEM_HOST, k->dq, RF_MEM_DEVICE, (size_t)k->q_bytes));
  ASSERT_OK(rf_mem_transfer(got_s, RF_MEM_HOST, k->ds, RF_MEM_DEVICE, (size_t)k->s_bytes));
  for (int64_t i = 0; i < k->q_bytes; i++)
    if (got_q[i] != k->want_q[i]) {
      fprintf(stderr, "%s %s %lldx%lld%s: byte %lld is 0x%02x, want 0x%02x\n", k->format,
              rf_dtype_name(k->dt), (long long)k->rows, (long long)k->cols,
              k->transposed ? " transposed" : "", (long long)i, got_q[i], k->want_q[i]);
      ASSERT_EQ(got_q[i], k->want_q[i]);
    }
  for (int64_t i = 0; i < k->s_bytes; i++)
    if (got_s[i] != k->want_s[i]) {
      fprintf(stderr, "%s %s %lldx%lld%s: scale byte %lld is 0x%02x, want 0x%02x\n", k->format,
              rf_dtype_name(k->dt), (long long)k->rows, (long long)k->cols,
              k->transposed ? " transposed" : "", (long long)i, got_s[i], k->want_s[i]);
      ASSERT_EQ(got_s[i], k->want_s[i]);
    }
  size_t es = (size_t)rf_dtype_size(k->dt);
  rf_mem_free(RF_MEM_DEVICE, k->dx,
              (size_t)(k->transposed ? k->cols * k->ld : k->rows * k->cols) * es);
  rf_mem_free(RF_MEM_DEVICE, k->dq, (size_t)k->q_bytes);
  rf_mem_free(RF_MEM_DEVICE, k->ds, (size_t)k->s_bytes);
  free(k->x), free(k->want_q), free(k->want_s), free(got_q), free(got_s);
}

/* Many jobs queued before one flush, as the engine queues a MoE's experts: every format of
 * the table (nvfp4 under its tensor's own global), every source dtype, row-major and transposed
 * sources (the JAX-order fused transpose and quantize), whole 128-row bands on the 16-byte path,
 * whole transposed tiles (read across by ldmatrix, or two rows a thread for 1-D blocks) and
 * ragged edges. Each job's bytes and scales
 * are the CPU reference's of the same elements. */
static void test_batch(void) {
  static const batch_spec specs[] = {
      {"fp8", RF_DTYPE_BF16, 256, 384, 264, 1},
      {"fp8", RF_DTYPE_BF16, 300, 200, 301, 1},
      {"fp8", RF_DTYPE_FP16, 128, 256, 136, 1},
      {"fp8", RF_DTYPE_FP32, 130, 129, 130, 1},
      {"fp8-ue8m0", RF_DTYPE_BF16, 256, 256, 256, 1},
      {"fp8", RF_DTYPE_BF16, 200, 300, 0, 0},
      {"mxfp8", RF_DTYPE_BF16, 96, 256, 104, 1},
      {"mxfp8", RF_DTYPE_BF16, 70, 100, 73, 1},
      {"mxfp8-floor", RF_DTYPE_FP16, 64, 96, 64, 1},
      {"mxfp8", RF_DTYPE_FP32, 33, 64, 40, 1},
      {"mxfp8", RF_DTYPE_BF16, 64, 512, 0, 0},
      {"fp8-ue8m0", RF_DTYPE_FP16, 129, 500, 0, 0},
      {"mxfp4", RF_DTYPE_BF16, 96, 256, 104, 1},
      {"mxfp4", RF_DTYPE_BF16, 70, 100, 73, 1},
      {"mxfp4-floor", RF_DTYPE_FP16, 64, 96, 64, 1},
      {"mxfp4", RF_DTYPE_FP32, 33, 64, 40, 1},
      {"mxfp4", RF_DTYPE_BF16, 64, 512, 0, 0},
      {"nvfp4", RF_DTYPE_BF16, 130, 272, 0, 0},
      {"nvfp4", RF_DTYPE_BF16, 96, 256, 96, 1},
      {"nvfp4", RF_DTYPE_FP16, 65, 200, 70, 1},
      {"nvfp4", RF_DTYPE_FP32, 40, 48, 41, 1},
      {"mxfp4-floor", RF_DTYPE_FP32, 20, 70, 0, 0},
      {"mxfp8-floor", RF_DTYPE_FP16, 64, 128, 72, 1},
      {"nvfp4", RF_DTYPE_FP16, 128, 256, 136, 1},
      {"mxfp4-floor", RF_DTYPE_BF16, 192, 384, 200, 1},
      {"mxfp8", RF_DTYPE_BF16, 256, 256, 264, 1},
      {"mxfp8-floor", RF_DTYPE_FP16, 128, 128, 128, 1},
      {"mxfp4", RF_DTYPE_FP16, 130, 256, 136, 1},
  };
  enum { n = sizeof specs / sizeof specs[0] };
  batch_case cases[n];
  int64_t elems = 0;
  for (int i = 0; i < n; i++) {
    memset(&cases[i], 0, sizeof cases[i]);
    const batch_spec *b = &specs[i];
    cases[i].format = b->format, cases[i].dt = b->dt, cases[i].rows = b->rows;
    cases[i].cols = b->cols, cases[i].ld = b->ld, cases[i].transposed = b->transposed;
    batch_queue(&cases[i], i);
  }
  rf_fp8_bad bad;
  ASSERT_OK(rf_fp8_device_bad(&bad)); /* flushes the queue, then waits */
  ASSERT_EQ(bad.found, 0);
  for (int i = 0; i < n; i++) {
    elems += cases[i].rows * cases[i].cols;
    batch_check(&cases[i]);
  }
  printf("test_fp8_gpu: %d jobs in one batch, %" PRId64 " elements ok\n", n, elems);
}

/* The comparison behind the device check: rows of got (in a wider buffer) against want, with
 * differences planted at a row's first and last element, in every byte of a 4-byte element
 * and in none of some rows; the counts per row are exact. */
static void test_compare_rows(int esize) {
  const int64_t rows = 300, cols = 2049, pitch = 2100;
  size_t wb = (size_t)(rows * cols * esize), gb = (size_t)(rows * pitch * esize);
  char *want = random_host(wb), *got = malloc(gb);
  ASSERT_TRUE(got != NULL);
  int64_t expect[300] = {0};
  for (int64_t r = 0; r < rows; r++)
    memcpy(got + r * pitch * esize, want + r * cols * esize, (size_t)(cols * esize));
  for (int64_t r = 0; r < rows; r += 7) {
    int64_t c[3] = {0, cols - 1, rng_range(1, cols - 2)};
    for (int k = 0; k < 3; k++) {
      char *at = got + (r * pitch + c[k]) * esize + (k == 2 ? esize - 1 : 0);
      *at ^= 0x10; /* the last byte of an element, for 4-byte elements */
    }
    expect[r] = 3;
  }
  void *dg = device_copy_of(got, gb), *dw = device_copy_of(want, wb);
  int64_t counts[300];
  ASSERT_OK(rf_gpu_compare_rows(dg, pitch, dw, cols, rows, cols, esize, counts));
  for (int64_t r = 0; r < rows; r++)
    ASSERT_EQ(counts[r], expect[r]);
  rf_mem_free(RF_MEM_DEVICE, dg, gb);
  rf_mem_free(RF_MEM_DEVICE, dw, wb);
  free(got);
  free(want);
}

/* ---- 4-bit formats (mxfp4, mxfp4-floor, nvfp4) ------------------------------------------- */

/* One 4-bit job against the reference: the source (host, rows x cols of dt, row-major) stored
 * row-major or transposed (element (r, c) at c * ld + r) after x_off elements; the packed bytes
 * q_off bytes into a buffer, rows row_bytes + q_pad apart; the scale bytes row-major (s_off,
 * rows grid + s_pad apart) or, with tiles, in the 128x4 tiles of a grid of tile_rows x
 * tile_cols blocks whose block (tile_row0, tile_col0) is the job's first. Every byte of both
 * buffers, inside and around the output, is compared; `bad` (>= 0) is an element made NaN or
 * inf (bad_bits), whose block must keep its bytes and scale and be named once. */
typedef struct {
  const char *format;
  rf_dtype dt;
  int64_t rows, cols;
  int transposed;
  int64_t ld, x_off, q_off, q_pad, s_off, s_pad;
  int tiles;
  int64_t tile_rows, tile_cols, tile_row0, tile_col0;
  float global; /* 0: the tensor's own (rf_format_tensor_global) */
  int64_t bad;
  uint32_t bad_bits;
} fp4_spec;

static int64_t fp4_case(const fp4_spec *k, const void *x) {
  const rf_format *f = rf_format_find(k->format);
  size_t es = (size_t)rf_dtype_size(k->dt);
  int64_t rows = k->rows, cols = k->cols, grid = rf_format_block_grid(f, 1, cols);
  int64_t row_bytes = rf_format_row_bytes(f, cols), q_stride = row_bytes + k->q_pad;
  int64_t s_stride = grid + k->s_pad, bc = f->block_cols;
  float global = k->global > 0 ? k->global : rf_format_tensor_global(f, x, k->dt, rows, cols, cols);
  uint8_t *want_q = malloc((size_t)(rows * row_bytes) + 1),
          *want_s = malloc((size_t)(rows * grid) + 1);
  ASSERT_OK(rf_format_quantize_ref(f, "case", x, k->dt, rows, cols, cols, global, want_q, want_s));
  /* The stored source, with the bad element planted after the reference ran without it. */
  int64_t ld = k->transposed ? k->ld : cols;
  size_t x_bytes = (size_t)(k->x_off + (k->transposed ? cols : rows) * ld) * es;
  char *stored = random_host(x_bytes);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      memcpy(stored + (size_t)(k->x_off + (k->transposed ? c * ld + r : r * cols + c)) * es,
             (const char *)x + (size_t)(r * cols + c) * es, es);
  int64_t bad_r = k->bad >= 0 ? k->bad / cols : -1, bad_b = k->bad >= 0 ? k->bad % cols / bc : -1;
  if (k->bad >= 0) {
    int64_t c = k->bad % cols;
    put(stored, k->dt, k->x_off + (k->transposed ? c * ld + bad_r : bad_r * cols + c), k->bad_bits);
  }
  size_t q_bytes = (size_t)(k->q_off + rows * q_stride) + 48;
  size_t s_bytes =
      k->tiles ? (size_t)((k->tile_rows + 127) / 128 * 128 * ((k->tile_cols + 3) / 4 * 4)) + 48
               : (size_t)(k->s_off + rows * s_stride) + 48;
  char *q0 = random_host(q_bytes), *s0 = random_host(s_bytes);
  char *dx = device_copy_of(stored, x_bytes), *dq = device_copy_of(q0, q_bytes);
  char *ds = device_copy_of(s0, s_bytes);
  rf_fp8_job job = {.x = dx + k->x_off * (int64_t)es,
                    .dtype = k->dt,
                    .x_stride = k->transposed ? 1 : cols,
                    .x_col_stride = k->transposed ? ld : 1,
                    .rows = rows,
                    .cols = cols,
                    .q = (uint8_t *)dq + k->q_off,
                    .q_stride = q_stride,
                    .scale = ds + (k->tiles ? 0 : k->s_off),
                    .scale_stride = s_stride,
                    .tag = 7,
                    .row0 = 256,
                    .col0 = 64};
  if (k->tiles)
    job.tile_grid_cols = k->tile_cols, job.tile_row0 = k->tile_row0, job.tile_col0 = k->tile_col0;
  rf_fp8_job_format(&job, f, global);
  ASSERT_OK(rf_fp8_quantize_device(&job));
  rf_fp8_bad bad;
  ASSERT_OK(rf_fp8_device_bad(&bad));
  ASSERT_EQ(bad.found, k->bad >= 0);
  if (k->bad >= 0) {
    ASSERT_EQ(bad.tag, 7);
    ASSERT_EQ(bad.row, 256 + bad_r);
    ASSERT_EQ(bad.col, 64 + bad_b * bc);
    ASSERT_OK(rf_fp8_device_bad(&bad)); /* named once */
    ASSERT_EQ(bad.found, 0);
  }
  char *q1 = malloc(q_bytes), *s1 = malloc(s_bytes);
  ASSERT_OK(rf_mem_transfer(q1, RF_MEM_HOST, dq, RF_MEM_DEVICE, q_bytes));
  ASSERT_OK(rf_mem_transfer(s1, RF_MEM_HOST, ds, RF_MEM_DEVICE, s_bytes));
  const char *what = k->transposed ? " transposed" : "";
  for (size_t i = 0; i < q_bytes; i++) {
    int64_t at = (int64_t)i - k->q_off, r = at / q_stride, c = at % q_stride;
    int inside = at >= 0 && r < rows && c < row_bytes && !(r == bad_r && c * 2 / bc == bad_b);
    uint8_t want = inside ? want_q[r * row_bytes + c] : (uint8_t)q0[i];
    if ((uint8_t)q1[i] != want) {
      fprintf(stderr,
              "%s %s %lldx%lld%s: byte %zu (row %lld, columns %lld and %lld) is 0x%02x, want "
              "0x%02x (global %a)\n",
              f->name, rf_dtype_name(k->dt), (long long)rows, (long long)cols, what, i,
              (long long)r, (long long)(2 * c), (long long)(2 * c + 1), (uint8_t)q1[i], want,
              (double)global);
      ASSERT_EQ((uint8_t)q1[i], want);
    }
  }
  /* The scales: where each block's lies, then every byte. */
  uint8_t *want_s_all = malloc(s_bytes);
  memcpy(want_s_all, s0, s_bytes);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t b = 0; b < grid; b++) {
      if (r == bad_r && b == bad_b)
        continue;
      int64_t at = k->tiles ? rf_format_scale_offset(rf_format_find("nvfp4"), k->tile_cols,
                                                     k->tile_row0 + r, k->tile_col0 + b)
                            : k->s_off + r * s_stride + b;
      want_s_all[at] = want_s[r * grid + b];
    }
  for (size_t i = 0; i < s_bytes; i++)
    if ((uint8_t)s1[i] != want_s_all[i]) {
      fprintf(stderr, "%s %s %lldx%lld%s%s: scale byte %zu is 0x%02x, want 0x%02x\n", f->name,
              rf_dtype_name(k->dt), (long long)rows, (long long)cols, what,
              k->tiles ? " (tiles)" : "", i, (uint8_t)s1[i], want_s_all[i]);
      ASSERT_EQ((uint8_t)s1[i], want_s_all[i]);
    }
  rf_mem_free(RF_MEM_DEVICE, dx, x_bytes);
  rf_mem_free(RF_MEM_DEVICE, dq, q_bytes);
  rf_mem_free(RF_MEM_DEVICE, ds, s_bytes);
  free(want_q), free(want_s), free(want_s_all), free(stored), free(q0), free(s0), free(q1),
      free(s1);
  return rows * cols;
}

/* v (exact in dt: the crafted values are) as dt's bits. */
static uint32_t dt_bits(float v, rf_dtype dt) {
  uint32_t b = bits_of(v);
  if (dt == RF_DTYPE_FP32)
    return b;
  if (dt == RF_DTYPE_BF16)
    return b >> 16;
  uint32_t sign = b >> 16 & 0x8000, e = b >> 23 & 0xff;
  if (e == 0)
    return sign;
  return sign | (e - 112) << 10 | (b >> 13 & 0x3ff);
}

/* Rows that reach every corner of the 4-bit rules, each block led by an anchor that fixes its
 * scale: zeros; signed zeros and subnormals; one huge value among ones; values around 6; the
 * e2m1 midpoints (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5), both signs and their neighbours one ulp
 * either side, under the anchor 6 (scale 1 with mxfp4's ceil rule and with nvfp4 at global 1)
 * and under 6 * 2^k; then random and spread rows. */
static void *crafted_4bit(rf_dtype dt, int64_t rows, int64_t cols) {
  static const float mid[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 0.5f, 3.0f};
  size_t es = (size_t)rf_dtype_size(dt);
  char *x = malloc((size_t)(rows * cols) * es);
  for (int64_t i = 0; i < rows * cols; i++) {
    int64_t r = i / cols, c = i % cols;
    uint32_t bits;
    switch (r) {
    case 0:
      bits = 0;
      break;
    case 1: /* subnormals and signed zeros of dt */
      bits = dt == RF_DTYPE_FP32 ? (uint32_t)(c * 2654435761u) & 0x807fffffu
                                 : (uint32_t)(c & (dt == RF_DTYPE_BF16 ? 0x807f : 0x83ff));
      break;
    case 2: /* the largest finite value of dt among ones */
      bits = c == 5 ? (dt == RF_DTYPE_BF16   ? 0x7f7f
                       : dt == RF_DTYPE_FP16 ? 0x7bff
                                             : 0x7f7fffffu)
                    : dt_bits(1.0f, dt);
      break;
    case 3: /* around 6: 5.5 .. 6.5 in steps, their neighbours */
      bits =
          dt_bits(c % 16 == 0 ? 6.0f : 5.5f + (float)(c % 9) * 0.125f, dt) + (uint32_t)(c % 3) - 1;
      break;
    default:
      if (r < 10) { /* midpoints under the anchor 6 * 2^(r - 6) */
        float scale = ldexpf(1.0f, (int)r - 6);
        if (c % 16 == 0)
          bits = dt_bits(6.0f * scale, dt);
        else {
          int k = (int)(c % 30) / 3, d = (int)(c % 3) - 1;
          bits = dt_bits(mid[k % 10] * scale, dt) + (uint32_t)d;
          if (c & 32)
            bits |= dt == RF_DTYPE_FP32 ? 0x80000000u : 0x8000u;
        }
      } else {
        bits = r % 2 ? random_bits(dt) : spread_bits(dt);
      }
    }
    put(x, dt, i, bits);
  }
  return x;
}

/* The crafted rows through every 4-bit format, source dtype and order, at odd offsets and
 * pitches and at aligned ones (the 8- and 16-byte paths); nvfp4 under a few globals. */
static void test_4bit_crafted(void) {
  static const rf_dtype dts[] = {RF_DTYPE_BF16, RF_DTYPE_FP16, RF_DTYPE_FP32};
  static const char *const formats[] = {"mxfp4", "mxfp4-floor", "nvfp4"};
  static const float globals[] = {0, 1.0f, 0x1p-10f, 0.37f};
  int64_t elems = 0;
  for (int fi = 0; fi < 3; fi++)
    for (int di = 0; di < 3; di++)
      for (int order = 0; order < 2; order++)
        for (int gi = 0; gi < (fi == 2 ? 4 : 1); gi++)
          for (int odd = 0; odd < 2; odd++) {
            int64_t rows = 70, cols = odd ? 200 : 256;
            void *x = crafted_4bit(dts[di], rows, cols);
            fp4_spec k = {.format = formats[fi],
                          .dt = dts[di],
                          .rows = rows,
                          .cols = cols,
                          .transposed = order,
                          .ld = rows + (odd ? 3 : 8),
                          .x_off = odd ? 5 : 0,
                          .q_off = odd ? 3 : 16,
                          .q_pad = odd ? 5 : 16,
                          .s_off = odd ? 1 : 0,
                          .s_pad = odd,
                          .global = globals[gi],
                          .bad = -1};
            elems += fp4_case(&k, x);
            free(x);
          }
  printf("test_fp8_gpu: 4-bit crafted rows: %" PRId64 " elements ok\n", elems);
}

/* Every bf16 and every fp16 bit pattern but inf and NaN (made 0), in blocks led by an anchor
 * that sets the block's scale (6 * 2^k for a few k, and no anchor: the block's own maximum),
 * through every 4-bit format, so every pattern meets e2m1 under several scales. */
static void test_4bit_every_pattern(void) {
  static const rf_dtype dts[] = {RF_DTYPE_BF16, RF_DTYPE_FP16};
  static const int anchors[] = {-200, 0, 3, -5, 12};
  int64_t elems = 0;
  for (int di = 0; di < 2; di++)
    for (int fi = 0; fi < 3; fi++)
      for (int ai = 0; ai < 5; ai++) {
        const rf_format *f = rf_format_find(fi == 0 ? "mxfp4" : fi == 1 ? "mxfp4-floor" : "nvfp4");
        rf_dtype dt = dts[di];
        int64_t bc = f->block_cols, per = bc - 1, cols = 32 * bc;
        int64_t blocks = (65536 + per - 1) / per, rows = (blocks + 31) / 32;
        uint16_t *x = calloc((size_t)(rows * cols), 2);
        for (int64_t b = 0, p = 0; b < rows * 32; b++) {
          uint16_t *blk = x + b * bc;
          blk[0] = anchors[ai] == -200 ? 0 : (uint16_t)dt_bits(ldexpf(6.0f, anchors[ai]), dt);
          for (int64_t i = 1; i < bc; i++, p++) {
            uint16_t v = (uint16_t)(p & 0xffff);
            int finite = dt == RF_DTYPE_BF16 ? (v & 0x7f80) != 0x7f80 : (v & 0x7c00) != 0x7c00;
            blk[i] = p < 65536 && finite ? v : 0;
          }
        }
        fp4_spec k = {.format = f->name,
                      .dt = dt,
                      .rows = rows,
                      .cols = cols,
                      .ld = rows,
                      .global = fi == 2 && ai % 2 ? 1.0f : 0,
                      .bad = -1};
        elems += fp4_case(&k, x);
        k.transposed = 1;
        elems += fp4_case(&k, x);
        free(x);
      }
  printf("test_fp8_gpu: 4-bit, every bf16 and fp16 pattern: %" PRId64 " elements ok\n", elems);
}

/* nvfp4's scales written at their place in the 128x4 tiles: a job whose box starts inside a
 * larger grid (as a rollout rank's part of a fused tensor does), row-major and transposed
 * sources; and a refused block (NaN, inf) in every 4-bit format, which keeps its bytes and
 * scale, the other blocks written. */
static void test_4bit_tiles_and_refusal(void) {
  static const rf_dtype dts[] = {RF_DTYPE_BF16, RF_DTYPE_FP16, RF_DTYPE_FP32};
  for (int di = 0; di < 3; di++)
    for (int order = 0; order < 2; order++) {
      int64_t rows = 300, cols = 352; /* 22 block columns */
      void *x = crafted_4bit(dts[di], rows, cols);
      fp4_spec k = {.format = "nvfp4",
                    .dt = dts[di],
                    .rows = rows,
                    .cols = cols,
                    .transposed = order,
                    .ld = rows + 8,
                    .tiles = 1,
                    .tile_rows = 520,
                    .tile_cols = 30,
                    .tile_row0 = 131,
                    .tile_col0 = 5,
                    .bad = -1};
      fp4_case(&k, x);
      k.tile_row0 = 0, k.tile_col0 = 0, k.tile_rows = 300, k.tile_cols = 22;
      fp4_case(&k, x);
      free(x);
    }
  printf("test_fp8_gpu: nvfp4 scales in 128x4 tiles ok\n");
  static const char *const formats[] = {"mxfp4", "mxfp4-floor", "nvfp4"};
  for (int fi = 0; fi < 3; fi++)
    for (int di = 0; di < 3; di++)
      for (int order = 0; order < 2; order++) {
        /* 128 rows: a transposed source is one whole staged tile, two rows a thread, whose
         * refused row 40 must not keep row 41 from being written. */
        int64_t rows = 128, cols = 256;
        void *x = crafted_4bit(dts[di], rows, cols);
        int nan = (fi + di + order) % 2;
        uint32_t bits = dts[di] == RF_DTYPE_FP32   ? (nan ? 0x7fc00000u : 0xff800000u)
                        : dts[di] == RF_DTYPE_BF16 ? (nan ? 0x7fc0u : 0xff80u)
                                                   : (nan ? 0x7e00u : 0xfc00u);
        fp4_spec k = {.format = formats[fi],
                      .dt = dts[di],
                      .rows = rows,
                      .cols = cols,
                      .transposed = order,
                      .ld = rows,
                      .tiles = fi == 2,
                      .tile_rows = rows,
                      .tile_cols = 16,
                      .global = 1.0f,
                      .bad = 40 * cols + 77,
                      .bad_bits = bits};
        fp4_case(&k, x);
        free(x);
      }
  printf("test_fp8_gpu: 4-bit blocks holding NaN or inf are refused and named\n");
}

/* rf_gpu_copy_scales between row-major scales and 128x4 tiles, both ways, and the maximum of
 * device regions (rf_gpu_amax) against rf_fp8_block_amax. */
static void test_scale_copy_and_amax(void) {
  const rf_format *f = rf_format_find("nvfp4");
  int64_t rows = 200, cols = 13, tr = 384, tc = 20, r0 = 100, c0 = 6;
  size_t tb = (size_t)(tr * tc), rb = (size_t)(rows * cols);
  char *rm = random_host(rb), *t0 = random_host(tb);
  char *drm = device_copy_of(rm, rb), *dtiles = device_copy_of(t0, tb);
  rf_scale_side tiles = {.base = dtiles, .tile_grid_cols = tc, .row0 = r0, .col0 = c0};
  rf_scale_side flat = {.base = drm, .stride = cols};
  ASSERT_OK(rf_gpu_copy_scales(&tiles, &flat, rows, cols, 1));
  char *t1 = malloc(tb);
  ASSERT_OK(rf_mem_transfer(t1, RF_MEM_HOST, dtiles, RF_MEM_DEVICE, tb));
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++)
      t0[rf_format_scale_offset(f, tc, r0 + i, c0 + j)] = rm[i * cols + j];
  for (size_t i = 0; i < tb; i++)
    if (t1[i] != t0[i]) {
      fprintf(stderr, "scale copy into tiles: byte %zu is 0x%02x, want 0x%02x\n", i, (uint8_t)t1[i],
              (uint8_t)t0[i]);
      ASSERT_EQ(t1[i], t0[i]);
    }
  ASSERT_OK(rf_mem_zero(RF_MEM_DEVICE, drm, rb));
  ASSERT_OK(rf_gpu_copy_scales(&flat, &tiles, rows, cols, 1));
  char *back = malloc(rb);
  ASSERT_OK(rf_mem_transfer(back, RF_MEM_HOST, drm, RF_MEM_DEVICE, rb));
  ASSERT_EQ(memcmp(back, rm, rb), 0);
  rf_mem_free(RF_MEM_DEVICE, drm, rb);
  rf_mem_free(RF_MEM_DEVICE, dtiles, tb);
  free(rm), free(t0), free(t1), free(back);

  static const rf_dtype dts[] = {RF_DTYPE_BF16, RF_DTYPE_FP16, RF_DTYPE_FP32};
  rf_amax_region regions[6];
  void *dev[6], *host[6];
  size_t bytes[6];
  float want[3] = {0.5f, 0, 0}, got[3] = {0.5f, 0, 0};
  for (int i = 0; i < 6; i++) {
    rf_dtype dt = dts[i % 3];
    /* 3: several of the kernel's chunks; 1: read from its second element, off the 16-byte
     * alignment of the kernel's wide loads. */
    int64_t n = i == 5 ? 1 : i == 3 ? 40003 : 1000 + 37 * i * i * i;
    bytes[i] = (size_t)n * (size_t)rf_dtype_size(dt);
    host[i] = malloc(bytes[i]);
    for (int64_t e = 0; e < n; e++)
      put(host[i], dt, e,
          i == 4 ? (uint32_t)(e & 0x83ff) : spread_bits(dt)); /* 4: fp16 subnormals */
    dev[i] = device_copy_of(host[i], bytes[i]);
    int64_t skip = i == 1;
    regions[i] = (rf_amax_region){(char *)dev[i] + skip * rf_dtype_size(dt), n - skip, dt, i % 3};
    float a =
        rf_fp8_block_amax((char *)host[i] + skip * rf_dtype_size(dt), dt, n - skip, 1, n - skip);
    if (a > want[i % 3])
      want[i % 3] = a;
  }
  ASSERT_OK(rf_gpu_amax(regions, 6, got, 3));
  for (int s = 0; s < 3; s++) {
    if (bits_of(got[s]) != bits_of(want[s]))
      fprintf(stderr, "amax slot %d: device %a, CPU %a\n", s, (double)got[s], (double)want[s]);
    ASSERT_EQ(bits_of(got[s]), bits_of(want[s]));
  }
  for (int i = 0; i < 6; i++) {
    rf_mem_free(RF_MEM_DEVICE, dev[i], bytes[i]);
    free(host[i]);
  }
  printf("test_fp8_gpu: scale copies to and from 128x4 tiles, and region maxima, ok\n");
}

int main(void) {
  if (!rf_gpu_built()) {
    printf("test_fp8_gpu: skipped: this build has no CUDA\n");
    return RF_TEST_SKIP;
  }
  rf_gpu_info info;
  rf_status st = rf_gpu_select(0, -1, &info);
  if (st == RF_ERR_UNSUPPORTED) {
    printf("test_fp8_gpu: skipped: no GPU is visible to this process\n");
    return RF_TEST_SKIP;
  }
  ASSERT_OK(st);
  printf("test_fp8_gpu: GPU %d: %s\n", info.device, info.name);
  /* Both 128x128 rules the kernels run, on the same blocks. */
  for (const char *const *name = (const char *const[]){"fp8", "fp8-ue8m0", NULL}; *name; name++) {
    fmt = rf_format_find(*name);
    test_crafted_blocks();
    test_random();
  }
  fmt = rf_format_find("fp8");
  for (const char *const *name = (const char *const[]){"mxfp8", "mxfp8-floor", NULL}; *name;
       name++) {
    test_1d(*name, RF_DTYPE_BF16);
    test_1d(*name, RF_DTYPE_FP16);
    test_1d(*name, RF_DTYPE_FP32);
  }
  test_batch();
  test_4bit_crafted();
  test_4bit_every_pattern();
  test_4bit_tiles_and_refusal();
  test_scale_copy_and_amax();
  test_refused(RF_DTYPE_BF16, 0x7fc0, 1);
  test_refused(RF_DTYPE_FP16, 0xfc00, 0);
  test_checksum();
  test_compare_rows(1);
  test_compare_rows(4);
  printf("test_fp8_gpu: ok\n");
  return 0;
}
