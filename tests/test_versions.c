/* Weight versions (verify/versions.h): version 0 is the generator bit for bit, whatever the
 * update; full changes every element at every version; sparse changes exactly the pinned
 * counts; a version filled directly equals the same version reached by advancing, in any
 * region layout; the checks follow the version; adam's counts and checksums are pinned, since
 * the CUDA kernels must reproduce them bit for bit; and --update's parser says what it accepts.
 */
#include <math.h>

#include "layout/layout.h"
#include "test.h"
#include "verify/verify.h"

static const rf_dtype dtypes[] = {RF_DTYPE_BF16, RF_DTYPE_FP16, RF_DTYPE_FP32};

static rf_tensor make_tensor(int id, int64_t rows, int64_t cols, rf_dtype dtype) {
  rf_tensor t;
  memset(&t, 0, sizeof t);
  t.id = id;
  t.ndim = 2;
  t.shape[0] = rows, t.shape[1] = cols;
  t.numel = rows * cols;
  t.dtype = dtype;
  return t;
}

static rf_update update_of(const char *text) {
  rf_update u;
  char why[256];
  ASSERT_OK(rf_update_parse(text, &u, why, sizeof why));
  return u;
}

static rf_weight_version version_of(const char *text, int64_t k) {
  rf_weight_version v = {update_of(text), k};
  return v;
}

/* A row-major buffer (kind 0) or a transposed one (kind 1) for `box`. */
static rf_region region_new(int kind, const rf_box *box, int esize) {
  void *buf = calloc((size_t)rf_box_numel(box), (size_t)esize);
  ASSERT_TRUE(buf != NULL);
  return kind ? rf_region_transposed(buf, box, esize) : rf_region_row_major(buf, box, esize);
}

static uint32_t bits_at(const rf_region *r, int64_t i, int64_t j) {
  uint32_t v = 0;
  memcpy(&v, rf_region_at(r, i, j), (size_t)r->esize);
  return v;
}

/* Every element of the box differs between a and b (returns the count that differ). */
static int64_t count_differ(const rf_region *a, const rf_region *b, const rf_box *box) {
  int64_t n = 0;
  for (int64_t i = box->lo[0]; i < box->hi[0]; i++)
    for (int64_t j = box->lo[1]; j < box->hi[1]; j++)
      n += bits_at(a, i, j) != bits_at(b, i, j);
  return n;
}

/* A generator value's exponent stays in the generator's range (a finite normal number). */
static void expect_in_range(uint32_t bits, rf_dtype dt) {
  int e = dt == RF_DTYPE_FP16   ? (int)(bits >> 10 & 0x1f)
          : dt == RF_DTYPE_BF16 ? (int)(bits >> 7 & 0xff)
                                : (int)(bits >> 23 & 0xff);
  if (dt == RF_DTYPE_FP16)
    ASSERT_TRUE(e >= 8 && e <= 15);
  else
    ASSERT_TRUE(e >= 112 && e <= 127);
}

/* Version 0 of every update, and every version of none, is the generator: values.h's pinned
 * values and rf_value_bits at indices below and above 2^32. */
static void test_version_zero(void) {
  static const char *const rules[] = {"none", "full", "sparse:0.5", "adam:0.001"};
  for (size_t u = 0; u < RF_ARRAY_LEN(rules); u++)
    for (int d = 0; d < 3; d++) {
      rf_weight_version v0 = version_of(rules[u], 0), none5 = version_of("none", 5);
      for (int64_t i = 0; i < 4000; i++) {
        int64_t index = i % 2 ? i : ((int64_t)1 << 35) + i;
        uint32_t want = rf_value_bits(42, 3, index, dtypes[d]);
        ASSERT_EQ(rf_version_bits(42, 3, &v0, index, dtypes[d]), want);
        ASSERT_EQ(rf_version_bits(42, 3, &none5, index, dtypes[d]), want);
        ASSERT_EQ(rf_version_bits(42, 3, NULL, index, dtypes[d]), want);
      }
    }
  rf_weight_version v0 = version_of("adam:0.001", 0);
  ASSERT_EQ(rf_version_bits(1, 0, &v0, 0, RF_DTYPE_BF16), 0xb8c4);
  ASSERT_EQ(rf_version_bits(42, 3, &v0, 1000000, RF_DTYPE_FP32), 0xb98e1156);
}

/* full: every element differs from the previous version, stays in range, and the counts say
 * so; sparse:1 too. */
static void test_full(void) {
  static const char *const rules[] = {"full", "sparse:1"};
  for (size_t u = 0; u < RF_ARRAY_LEN(rules); u++)
    for (int d = 0; d < 3; d++) {
      rf_tensor t = make_tensor(7, 37, 53, dtypes[d]);
      rf_box whole = rf_box_whole(&t);
      int es = rf_dtype_size(dtypes[d]);
      rf_region prev = region_new(0, &whole, es), cur = region_new(0, &whole, es);
      rf_fill_region(&prev, &whole, &t, 9, NULL, dtypes[d]);
      for (int64_t k = 1; k <= 4; k++) {
        rf_weight_version v = version_of(rules[u], k);
        rf_fill_region(&cur, &whole, &t, 9, &v, dtypes[d]);
        ASSERT_EQ(count_differ(&prev, &cur, &whole), t.numel);
        ASSERT_EQ(rf_version_changed_count(&whole, &t, 9, &v), t.numel);
        for (int64_t i = 0; i < t.numel; i++)
          expect_in_range(bits_at(&cur, i / 53, i % 53), dtypes[d]);
        memcpy(prev.base, cur.base, (size_t)(t.numel * es));
      }
      free(prev.base), free(cur.base);
    }
}

/* sparse:F over one 1000 x 1000 bf16 tensor: the changed count of versions 1, 2 and 3, pinned,
 * and equal to the elements that differ in memory. */
static void test_sparse_counts(void) {
  static const struct {
    const char *rule;
    int64_t changed[3];
  } cases[] = {
      {"sparse:0", {0, 0, 0}},
      {"sparse:0.001", {1016, 1047, 1031}},
      {"sparse:0.5", {499644, 499053, 499469}},
      {"sparse:1", {1000000, 1000000, 1000000}},
  };
  rf_tensor t = make_tensor(11, 1000, 1000, RF_DTYPE_BF16);
  rf_box whole = rf_box_whole(&t);
  rf_region prev = region_new(0, &whole, 2), cur = region_new(0, &whole, 2);
  for (size_t c = 0; c < RF_ARRAY_LEN(cases); c++) {
    rf_fill_region(&prev, &whole, &t, 1, NULL, RF_DTYPE_BF16);
    for (int64_t k = 1; k <= 3; k++) {
      rf_weight_version v = version_of(cases[c].rule, k);
      int64_t n = rf_version_changed_count(&whole, &t, 1, &v);
      ASSERT_EQ(n, cases[c].changed[k - 1]);
      rf_fill_region(&cur, &whole, &t, 1, &v, RF_DTYPE_BF16);
      ASSERT_EQ(count_differ(&prev, &cur, &whole), n);
      memcpy(prev.base, cur.base, (size_t)t.numel * 2);
    }
  }
  /* The threshold has 32 bits of resolution: F = 1e-6 is 4295 of 2^32. */
  ASSERT_U64_EQ(update_of("sparse:1e-6").threshold, 4295);
  ASSERT_U64_EQ(update_of("sparse:1").threshold, UINT64_C(1) << 32);
  free(prev.base), free(cur.base);
}

/* Version k filled directly equals version 0 advanced k times (rf_advance_region), for every
 * update, dtype and a row-major and a transposed region of an inner box; the check passes
 * against version k and finds exactly the changed elements against version k - 1. Advanced
 * with marks it holds the same values, and its marks name exactly the elements whose bits
 * changed, each at its offset from the region's base (what rf_delta_encode_marked reads). */
static void test_direct_equals_advanced(void) {
  static const char *const rules[] = {"none", "full", "sparse:0.01", "sparse:0.5", "adam:0.01"};
  for (size_t u = 0; u < RF_ARRAY_LEN(rules); u++)
    for (int d = 0; d < 3; d++)
      for (int kind = 0; kind < 2; kind++) {
        rf_tensor t = make_tensor(3, 41, 67, dtypes[d]);
        rf_box box = {{5, 3}, {40, 66}};
        int es = rf_dtype_size(dtypes[d]);
        rf_region walked = region_new(kind, &box, es), direct = region_new(1 - kind, &box, es);
        rf_region marked = region_new(kind, &box, es);
        int64_t n = rf_box_numel(&box), words = n / 64 + 2;
        uint64_t *marks = malloc((size_t)words * 8);
        rf_fill_region(&walked, &box, &t, 5, NULL, dtypes[d]);
        rf_fill_region(&marked, &box, &t, 5, NULL, dtypes[d]);
        for (int64_t k = 1; k <= 5; k++) {
          rf_weight_version v = version_of(rules[u], k), before = version_of(rules[u], k - 1);
          rf_advance_region(&walked, &box, &t, 5, &v, dtypes[d], NULL);
          memset(marks, 0, (size_t)words * 8);
          rf_advance_region(&marked, &box, &t, 5, &v, dtypes[d], marks);
          rf_fill_region(&direct, &box, &t, 5, &v, dtypes[d]);
          ASSERT_EQ(count_differ(&walked, &direct, &box), 0);
          ASSERT_EQ(count_differ(&marked, &direct, &box), 0);
          int64_t set = 0;
          for (int64_t w = 0; w < words; w++)
            set += __builtin_popcountll(marks[w]);
          ASSERT_EQ(set, rf_version_changed_count(&box, &t, 5, &v));
          for (int64_t i = box.lo[0]; i < box.hi[0]; i++)
            for (int64_t j = box.lo[1]; j < box.hi[1]; j++) {
              int64_t m = (rf_region_at(&marked, i, j) - marked.base) / es;
              int changed = rf_version_bits(5, 3, &v, i * 67 + j, dtypes[d]) !=
                            rf_version_bits(5, 3, &before, i * 67 + j, dtypes[d]);
              ASSERT_EQ((int)(marks[m >> 6] >> (m & 63) & 1), changed);
            }
          ASSERT_EQ(rf_check_region(&walked, &box, &t, 5, &v, dtypes[d], NULL, 0, NULL), 0);
          ASSERT_EQ(rf_check_region(&walked, &box, &t, 5, &before, dtypes[d], NULL, 0, NULL),
                    rf_version_changed_count(&box, &t, 5, &v));
          ASSERT_U64_EQ(rf_checksum_region(&walked, &box, &t, dtypes[d]),
                        rf_version_checksum(&box, &t, 5, &v));
          for (int64_t i = box.lo[0]; i < box.hi[0]; i++)
            for (int64_t j = box.lo[1]; j < box.hi[1]; j++)
              ASSERT_EQ(bits_at(&direct, i, j), rf_version_bits(5, 3, &v, i * 67 + j, dtypes[d]));
        }
        free(walked.base), free(direct.base), free(marked.base), free(marks);
      }
}

/* adam:1e-6 over a 300 x 400 tensor: the changed count of versions 1, 2 and 3 and the checksum
 * of version 3, pinned, since the CUDA kernels must reproduce them bit for bit. A step of about
 * 1e-6 moves a quarter of the bf16 elements (the smallest magnitudes of the generator's range)
 * at first, next to none of fp16's (2^-7 and up, whose step is at least 2^-17) and every fp32
 * element. */
static void test_adam_pinned(void) {
  static const struct {
    rf_dtype dtype;
    int64_t changed[3];
    uint64_t sum3;
  } cases[] = {
      {RF_DTYPE_BF16, {30216, 22050, 19267}, 0xd970fd33d99da81aULL},
      {RF_DTYPE_FP16, {0, 2, 2}, 0x2c52cab63250fb90ULL},
      {RF_DTYPE_FP32, {120000, 119161, 118987}, 0xe9bf894057f3b28fULL},
  };
  for (size_t c = 0; c < RF_ARRAY_LEN(cases); c++) {
    rf_tensor t = make_tensor(2, 300, 400, cases[c].dtype);
    rf_box whole = rf_box_whole(&t);
    for (int64_t k = 1; k <= 3; k++) {
      rf_weight_version v = version_of("adam:1e-6", k);
      ASSERT_EQ(rf_version_changed_count(&whole, &t, 1, &v), cases[c].changed[k - 1]);
      if (k == 3)
        ASSERT_U64_EQ(rf_version_checksum(&whole, &t, 1, &v), cases[c].sum3);
    }
  }
}

/* The fp32 -> fp16 rounding that adam's fp16 values take, against the compiler's own. */
static void test_fp16_rounding(void) {
#ifdef __FLT16_MAX__
  for (uint64_t b = 0; b < (UINT64_C(1) << 32); b += 65521) {
    uint32_t f = (uint32_t)b;
    if ((f & 0x7fffffffU) > 0x7f800000U)
      continue; /* NaN payloads are the compiler's to choose */
    float x;
    memcpy(&x, &f, 4);
    _Float16 h = (_Float16)x;
    uint16_t want;
    memcpy(&want, &h, 2);
    ASSERT_EQ(rf_version_f32_to_fp16(f), want);
    uint32_t back = rf_version_fp16_to_f32(want);
    float y = (float)h;
    uint32_t yb;
    memcpy(&yb, &y, 4);
    ASSERT_EQ(back, yb);
  }
#endif
  ASSERT_EQ(rf_version_f32_to_bf16(0x3f808000U), 0x3f80); /* a tie to even: down */
  ASSERT_EQ(rf_version_f32_to_bf16(0x3f818000U), 0x3f82); /* a tie to even: up */
  ASSERT_EQ(rf_version_f32_to_bf16(0x3f808001U), 0x3f81);
}

/* --update's parser: each rule, and the one line for anything else. */
static void test_parse(void) {
  rf_update u;
  char why[256];
  ASSERT_EQ(update_of("none").kind, RF_UPDATE_NONE);
  ASSERT_EQ(update_of("full").kind, RF_UPDATE_FULL);
  u = update_of("sparse:0.01");
  ASSERT_EQ(u.kind, RF_UPDATE_SPARSE);
  ASSERT_TRUE(u.param == 0.01);
  ASSERT_U64_EQ(u.threshold, 42949673);
  u = update_of("adam:1e-6");
  ASSERT_EQ(u.kind, RF_UPDATE_ADAM);
  ASSERT_TRUE(u.lr == 1e-6f);
  static const char *const bad[] = {"sparse:1.5", "sparse",     "sparse:",  "sparse:-0.1",
                                    "adam:0",     "adam:2",     "adam:nan", "full:1",
                                    "bogus",      "sparse:0x1", ""};
  for (size_t i = 0; i < RF_ARRAY_LEN(bad); i++) {
    ASSERT_STATUS(rf_update_parse(bad[i], &u, why, sizeof why), RF_ERR_USAGE);
    char want[160];
    snprintf(want, sizeof want,
             "'%s' is not none, full, sparse:F with 0 <= F <= 1, or adam:LR with 0 < LR <= 1",
             bad[i]);
    ASSERT_STR_EQ(why, want);
  }
}

int main(void) {
  test_parse();
  test_version_zero();
  test_full();
  test_sparse_counts();
  test_direct_equals_advanced();
  test_adam_pinned();
  test_fp16_rounding();
  printf("test_versions: ok\n");
  return 0;
}
