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
  k->q_bytes = rows * cols;
  k->s_bytes = rf_format_scale_bytes(k->f, rows, cols);
  k->x = malloc((size_t)(rows * cols) * es);
  for (int64_t i = 0; i < rows * cols; i++)
    put(k->x, k->dt, i, i % 3 ? spread_bits(k->dt) : random_bits(k->dt));
  k->want_q = malloc((size_t)k->q_bytes);
  k->want_s = malloc((size_t)k->s_bytes);
  ASSERT_OK(rf_format_quantize_ref(k->f, "case", k->x, k->dt, rows, cols, cols, 1.0f, k->want_q,
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
                    .q_stride = cols,
                    .scale = k->ds,
                    .scale_stride = k->grid_cols,
                    .rule = k->f->rule,
                    .block_cols = k->f->block_rows == 1 ? k->f->block_cols : 0,
                    .tag = tag};
  ASSERT_OK(rf_fp8_quantize_device(&job));
}

static void batch_check(batch_case *k) {
  uint8_t *got_q = malloc((size_t)k->q_bytes), *got_s = malloc((size_t)k->s_bytes);
  ASSERT_OK(rf_mem_transfer(got_q, RF_MEM_HOST, k->dq, RF_MEM_DEVICE, (size_t)k->q_bytes));
  ASSERT_OK(rf_mem_transfer(got_s, RF_MEM_HOST, k->ds, RF_MEM_DEVICE, (size_t)k->s_bytes));
  for (int64_t i = 0; i < k->q_bytes; i++)
    if (got_q[i] != k->want_q[i]) {
      fprintf(stderr, "%s %s %lldx%lld%s: element %lld is 0x%02x, want 0x%02x\n", k->format,
              rf_dtype_name(k->dt), (long long)k->rows, (long long)k->cols,
              k->transposed ? " transposed" : "", (long long)i, got_q[i], k->want_q[i]);
      ASSERT_EQ(got_q[i], k->want_q[i]);
    }
  ASSERT_EQ(memcmp(got_s, k->want_s, (size_t)k->s_bytes), 0);
  size_t es = (size_t)rf_dtype_size(k->dt);
  rf_mem_free(RF_MEM_DEVICE, k->dx,
              (size_t)(k->transposed ? k->cols * k->ld : k->rows * k->cols) * es);
  rf_mem_free(RF_MEM_DEVICE, k->dq, (size_t)k->q_bytes);
  rf_mem_free(RF_MEM_DEVICE, k->ds, (size_t)k->s_bytes);
  free(k->x), free(k->want_q), free(k->want_s), free(got_q), free(got_s);
}

/* Many jobs queued before one flush, as the engine queues a MoE's experts: every format the
 * kernels run, every source dtype, row-major and transposed sources (the JAX-order fused
 * transpose and quantize), whole 128-row bands on the 16-byte path and ragged edges. Each
 * job's bytes and scales are the CPU reference's of the same elements. */
static void test_batch(void) {
  static const batch_spec specs[] = {
      {"fp8", RF_DTYPE_BF16, 256, 384, 264, 1},       {"fp8", RF_DTYPE_BF16, 300, 200, 301, 1},
      {"fp8", RF_DTYPE_FP16, 128, 256, 136, 1},       {"fp8", RF_DTYPE_FP32, 130, 129, 130, 1},
      {"fp8-ue8m0", RF_DTYPE_BF16, 256, 256, 256, 1}, {"fp8", RF_DTYPE_BF16, 200, 300, 0, 0},
      {"mxfp8", RF_DTYPE_BF16, 96, 256, 104, 1},      {"mxfp8", RF_DTYPE_BF16, 70, 100, 73, 1},
      {"mxfp8-floor", RF_DTYPE_FP16, 64, 96, 64, 1},  {"mxfp8", RF_DTYPE_FP32, 33, 64, 40, 1},
      {"mxfp8", RF_DTYPE_BF16, 64, 512, 0, 0},        {"fp8-ue8m0", RF_DTYPE_FP16, 129, 500, 0, 0},
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
  test_refused(RF_DTYPE_BF16, 0x7fc0, 1);
  test_refused(RF_DTYPE_FP16, 0xfc00, 0);
  test_checksum();
  test_compare_rows(1);
  test_compare_rows(4);
  printf("test_fp8_gpu: ok\n");
  return 0;
}
