/* Verify: the generator gives finite normal numbers that depend on seed, tensor and index; the
 * checksum of a tensor is the same over any partition and any region layout; the check finds
 * exactly the elements that were changed; and pinned values guard the generator itself, since
 * changing it would silently invalidate every stored result. */
#include <math.h>

#include "layout/layout.h"
#include "test.h"
#include "verify/verify.h"

static uint64_t rng_state = 0x13198a2e03707344ULL;
static uint64_t rng(void) { return rf_mix64(rng_state += 0x9e3779b97f4a7c15ULL); }
/* A number in [lo, hi). */
static int64_t rng_range(int64_t lo, int64_t hi) {
  return lo + (int64_t)(rng() % (uint64_t)(hi - lo));
}

static const rf_dtype dtypes[] = {RF_DTYPE_BF16, RF_DTYPE_FP16, RF_DTYPE_FP32};

static rf_tensor make_tensor(int id, int64_t rows, int64_t cols) {
  rf_tensor t;
  memset(&t, 0, sizeof t);
  t.id = id;
  t.ndim = cols == 1 ? 1 : 2;
  t.shape[0] = rows, t.shape[1] = cols;
  t.numel = rows * cols;
  return t;
}

/* Checks one bit pattern: unused high bits clear, exponent field in the promised range, and
 * the value a finite normal number when read as the type. */
static void check_bits(uint32_t bits, rf_dtype dt, int *exp_seen, int *sign_seen) {
  float f;
  int e;
  switch (dt) {
  case RF_DTYPE_BF16:
    ASSERT_EQ(bits >> 16, 0);
    e = (int)(bits >> 7 & 0xff);
    ASSERT_TRUE(e >= 112 && e <= 127);
    bits <<= 16;
    memcpy(&f, &bits, 4);
    ASSERT_TRUE(isnormal(f));
    sign_seen[bits >> 31] = 1;
    break;
  case RF_DTYPE_FP16:
    ASSERT_EQ(bits >> 16, 0);
    e = (int)(bits >> 10 & 0x1f);
    ASSERT_TRUE(e >= 8 && e <= 15); /* normal: 1..30; 31 is inf/nan */
    sign_seen[bits >> 15] = 1;
    break;
  default:
    e = (int)(bits >> 23 & 0xff);
    ASSERT_TRUE(e >= 112 && e <= 127);
    memcpy(&f, &bits, 4);
    ASSERT_TRUE(isnormal(f));
    sign_seen[bits >> 31] = 1;
    break;
  }
  exp_seen[e] = 1;
}

static void test_value_bits(void) {
  for (int d = 0; d < 3; d++) {
    rf_dtype dt = dtypes[d];
    int exp_seen[256] = {0}, sign_seen[2] = {0};
    int64_t same_seed = 0, same_tensor = 0, same_next = 0, n = 0;
    static const uint64_t seeds[] = {0, 1, 0xdeadbeefULL};
    static const int32_t ids[] = {0, 1, 7, 123456};
    for (int s = 0; s < 3; s++)
      for (int k = 0; k < 4; k++)
        for (int64_t i = 0; i < 50000; i++) {
          /* Small indices and ones beyond 2^32, as in a 128k x 16k embedding. */
          int64_t index = i % 2 ? i : ((int64_t)1 << 35) + i;
          uint32_t b = rf_value_bits(seeds[s], ids[k], index, dt);
          check_bits(b, dt, exp_seen, sign_seen);
          ASSERT_EQ(b, rf_value_bits(seeds[s], ids[k], index, dt)); /* deterministic */
          same_seed += b == rf_value_bits(seeds[s] + 1, ids[k], index, dt);
          same_tensor += b == rf_value_bits(seeds[s], ids[k] + 1, index, dt);
          same_next += b == rf_value_bits(seeds[s], ids[k], index + 1, dt);
          n++;
        }
    /* Every exponent of the range and both signs occur. */
    int lo = dt == RF_DTYPE_FP16 ? 8 : 112, hi = dt == RF_DTYPE_FP16 ? 15 : 127;
    for (int e = lo; e <= hi; e++)
      ASSERT_TRUE(exp_seen[e]);
    ASSERT_TRUE(sign_seen[0] && sign_seen[1]);
    /* Changing any input changes the value, except for chance collisions: a 16-bit type has
     * about 2^12 equally likely patterns, so under 0.1% of pairs may agree. */
    ASSERT_LT(same_seed * 1000, n);
    ASSERT_LT(same_tensor * 1000, n);
    ASSERT_LT(same_next * 1000, n);
  }
}

/* A buffer holding `box` of t as a region of kind 0 (row-major), 1 (transposed) or 2 (a slot
 * with padding around it in a wider fused tensor). */
static rf_region region_new(int kind, const rf_box *box, int esize) {
  int64_t h = box->hi[0] - box->lo[0], w = box->hi[1] - box->lo[1];
  char *buf = calloc((size_t)((h + 3) * (w + 5)), (size_t)esize);
  ASSERT_TRUE(buf != NULL);
  if (kind == 0)
    return rf_region_row_major(buf, box, esize);
  if (kind == 1)
    return rf_region_transposed(buf, box, esize);
  return rf_region_in_fused(buf, w + 5, 2, 3, box, esize);
}

static void region_delete(rf_region *r, int kind) {
  /* A fused slot's base is inside its buffer, at (row 2, col 3). */
  free(kind == 2 ? r->base - (2 * r->stride[0] + 3) * r->esize : r->base);
}

/* Checksums of a tensor over random partitions: each piece is checksummed in place, copied to
 * a region of a random kind and checksummed there, and filled directly in a third region
 * and both checked and checksummed there. All sums equal the whole tensor's. */
static void test_checksum_invariance(const rf_tensor *t, rf_dtype dt) {
  int es = rf_dtype_size(dt);
  rf_box whole = rf_box_whole(t);
  rf_region w = region_new(0, &whole, es);
  rf_fill_region(&w, &whole, t, 99, NULL, dt);
  ASSERT_EQ(rf_check_region(&w, &whole, t, 99, NULL, dt, NULL, 0, NULL), 0);
  uint64_t total = rf_checksum_region(&w, &whole, t, dt);

  /* The whole tensor transposed, and filled directly in transposed and fused layouts. */
  for (int kind = 1; kind < 3; kind++) {
    rf_region x = region_new(kind, &whole, es);
    rf_region_copy(&x, &w, &whole);
    ASSERT_U64_EQ(rf_checksum_region(&x, &whole, t, dt), total);
    memset(x.base, 0, (size_t)es);
    rf_fill_region(&x, &whole, t, 99, NULL, dt);
    ASSERT_U64_EQ(rf_checksum_region(&x, &whole, t, dt), total);
    ASSERT_EQ(rf_check_region(&x, &whole, t, 99, NULL, dt, NULL, 0, NULL), 0);
    region_delete(&x, kind);
  }

  /* Column by column: lines with a stride, long enough for the chunked loops. */
  rf_region cols = region_new(0, &whole, es);
  uint64_t by_column = 0;
  for (int64_t j = 0; j < t->shape[1]; j++) {
    rf_box col = {{0, j}, {t->shape[0], j + 1}};
    by_column += rf_checksum_region(&w, &col, t, dt);
    rf_fill_region(&cols, &col, t, 99, NULL, dt);
    ASSERT_EQ(rf_check_region(&cols, &col, t, 99, NULL, dt, NULL, 0, NULL), 0);
  }
  ASSERT_U64_EQ(by_column, total);
  ASSERT_EQ(memcmp(cols.base, w.base, (size_t)(t->numel * es)), 0);
  region_delete(&cols, 0);

  for (int p = 0; p < 30; p++) {
    uint64_t in_place = 0, copied = 0, filled = 0;
    /* A partition into row bands, each cut into its own random columns. */
    for (int64_t r0 = 0; r0 < t->shape[0];) {
      int64_t band = rng_range(1, 12), r1 = RF_MIN(t->shape[0], r0 + band);
      for (int64_t c0 = 0; c0 < t->shape[1];) {
        int64_t cut = rng_range(1, 20), c1 = RF_MIN(t->shape[1], c0 + cut);
        rf_box piece = {{r0, c0}, {r1, c1}};
        in_place += rf_checksum_region(&w, &piece, t, dt);
        int k1 = (int)rng_range(0, 3), k2 = (int)rng_range(0, 3);
        rf_region a = region_new(k1, &piece, es), b = region_new(k2, &piece, es);
        rf_region_copy(&a, &w, &piece);
        copied += rf_checksum_region(&a, &piece, t, dt);
        rf_fill_region(&b, &piece, t, 99, NULL, dt);
        ASSERT_EQ(rf_check_region(&b, &piece, t, 99, NULL, dt, NULL, 0, NULL), 0);
        filled += rf_checksum_region(&b, &piece, t, dt);
        region_delete(&a, k1), region_delete(&b, k2);
        c0 = c1;
      }
      r0 = r1;
    }
    ASSERT_U64_EQ(in_place, total);
    ASSERT_U64_EQ(copied, total);
    ASSERT_U64_EQ(filled, total);
  }
  region_delete(&w, 0);
}

/* Changing one byte of one element is found with its index and both values, and changes the
 * checksum; several changes are all counted but only max_report are recorded. */
static void test_check_finds_flips(int kind, rf_dtype dt) {
  rf_tensor t = make_tensor(11, 37, 53);
  int es = rf_dtype_size(dt);
  rf_box whole = rf_box_whole(&t);
  rf_region r = region_new(kind, &whole, es);
  rf_fill_region(&r, &whole, &t, 7, NULL, dt);
  uint64_t clean = rf_checksum_region(&r, &whole, &t, dt);

  for (int n = 0; n < 20; n++) {
    int64_t i = rng_range(0, 37), j = rng_range(0, 53);
    unsigned char *byte = (unsigned char *)rf_region_at(&r, i, j) + rng_range(0, es);
    unsigned char old = *byte;
    *byte ^= (unsigned char)(1u << rng_range(0, 8));
    uint32_t got = 0;
    memcpy(&got, rf_region_at(&r, i, j), (size_t)es); /* little-endian */
    rf_mismatch m[4];
    int reported = -1;
    ASSERT_EQ(rf_check_region(&r, &whole, &t, 7, NULL, dt, m, 4, &reported), 1);
    ASSERT_EQ(reported, 1);
    ASSERT_EQ(m[0].tensor, 11);
    ASSERT_EQ(m[0].index, i * 53 + j);
    ASSERT_EQ(m[0].expected, rf_value_bits(7, 11, i * 53 + j, dt));
    ASSERT_EQ(m[0].got, got);
    ASSERT_NE(m[0].got, m[0].expected);
    ASSERT_TRUE(rf_checksum_region(&r, &whole, &t, dt) != clean);
    *byte = old;
  }
  ASSERT_EQ(rf_check_region(&r, &whole, &t, 7, NULL, dt, NULL, 0, NULL), 0);

  /* Five wrong elements in one row, three reported, in order along the row (a transposed
   * region is checked column by column, which meets them in the same order). */
  for (int64_t j = 10; j < 15; j++)
    *rf_region_at(&r, 20, j) ^= 0x01;
  rf_mismatch m[3];
  int reported = 0;
  ASSERT_EQ(rf_check_region(&r, &whole, &t, 7, NULL, dt, m, 3, &reported), 5);
  ASSERT_EQ(reported, 3);
  for (int k = 0; k < 3; k++)
    ASSERT_EQ(m[k].index, 20 * 53 + 10 + k);
  ASSERT_EQ(rf_check_region(&r, &whole, &t, 7, NULL, dt, NULL, 3, NULL), 5);
  /* A different seed is wrong almost everywhere. */
  ASSERT_GT(rf_check_region(&r, &whole, &t, 8, NULL, dt, NULL, 0, NULL), 37 * 53 * 99 / 100);
  region_delete(&r, kind);
}

/* The generator's exact output and the checksum terms of results format 2, cross-checked with
 * an independent Python implementation of values.h; and format 1's checksum term, with which
 * refit verify still reads older files. If one of these fails, stored results can no longer be
 * compared. */
static void test_pinned(void) {
  ASSERT_EQ(rf_value_bits(1, 0, 0, RF_DTYPE_BF16), 0xb8c4);
  ASSERT_EQ(rf_value_bits(1, 0, 0, RF_DTYPE_FP16), 0xb8c4);
  ASSERT_EQ(rf_value_bits(1, 0, 0, RF_DTYPE_FP32), 0x3dc098c4);
  ASSERT_EQ(rf_value_bits(42, 3, 1000000, RF_DTYPE_BF16), 0xbf39);
  ASSERT_EQ(rf_value_bits(42, 3, 1000000, RF_DTYPE_FP16), 0xaf39);
  ASSERT_EQ(rf_value_bits(42, 3, 1000000, RF_DTYPE_FP32), 0xb98e1156);
  ASSERT_EQ(rf_value_bits(42, 3, ((int64_t)1 << 35) + 7, RF_DTYPE_BF16), 0xb99b);
  ASSERT_EQ(rf_value_bits(42, 3, ((int64_t)1 << 35) + 7, RF_DTYPE_FP32), 0xbd88b3aa);
  uint64_t k5 = rf_checksum_key(5);
  ASSERT_U64_EQ(rf_checksum_term(k5, 123, 0x4065, 1), 0x5907fc8392050000ULL);
  ASSERT_U64_EQ(rf_checksum_term(k5, 124, 0x4065, 1), 0x0000676d6d8daebdULL);
  ASSERT_U64_EQ(rf_checksum_term(k5, 7, 0x42224e4b, 0), 0x121d2275f5e0ddb5ULL);
  ASSERT_U64_EQ(rf_checksum_term(k5, 6, 0x7e, 2), 0x00f49626f2460000ULL);
  ASSERT_U64_EQ(rf_checksum_term_v1(5, 123, 0x4065), 0xe42a566784a24fb6ULL);

  static const uint64_t sums[] = {0x6cc09a35989b6882ULL, 0x17565b54dcbd4082ULL,
                                  0xe371564085a61d91ULL};
  rf_tensor t = make_tensor(5, 37, 53);
  rf_box whole = rf_box_whole(&t);
  for (int d = 0; d < 3; d++) {
    rf_region r = region_new(0, &whole, rf_dtype_size(dtypes[d]));
    rf_fill_region(&r, &whole, &t, 1, NULL, dtypes[d]);
    ASSERT_U64_EQ(rf_checksum_region(&r, &whole, &t, dtypes[d]), sums[d]);
    region_delete(&r, 0);
  }
}

int main(void) {
  test_pinned();
  test_value_bits();
  rf_tensor mat = make_tensor(5, 37, 53), vec = make_tensor(9, 101, 1);
  for (int d = 0; d < 3; d++) {
    test_checksum_invariance(&mat, dtypes[d]);
    test_checksum_invariance(&vec, dtypes[d]);
    for (int kind = 0; kind < 3; kind++)
      test_check_finds_flips(kind, dtypes[d]);
  }
  printf("test_verify: ok\n");
  return 0;
}
