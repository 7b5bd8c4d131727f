/* Delta encodings on the host: round trips of every encoding over changed fractions 0, 1e-6,
 * 1e-3, 0.01, 0.5 and 1, for 1-, 2- and 4-byte elements, in row-major, padded (strided) and
 * transposed regions and sub-boxes of them; changes at the first and last element and at the
 * edges of every row; bitwise changes that compare equal as numbers (-0.0, NaN payloads); the
 * wire format and its sizes pinned; the hash's tree against its definition; auto's choice on
 * both sides of each break-even point; corrupted payloads and headers refused with their exact
 * messages, the destination untouched; and the pieces refused outright. */
#include <xxhash.h>

#include "delta_cases.h"

static const rf_delta_encoding wants[] = {RF_DELTA_DENSE, RF_DELTA_SPARSE, RF_DELTA_BITMASK,
                                          RF_DELTA_AUTO};

/* Marks of cur's region (rf_delta_marks) for the elements of box that differ from prev, and
 * with `extra` also about one in 16 of the others, padding included, which encode sends as if
 * they had changed. *marked counts the marks inside box. Freed by the caller. */
static uint64_t *marks_of(const rf_box *box, const dc_buf *prev, const dc_buf *cur, int extra,
                          int64_t *marked) {
  int es = cur->r.esize;
  int64_t bits = (int64_t)cur->bytes / es, words = bits / 64 + 2;
  uint64_t *marks = calloc((size_t)words, 8);
  ASSERT_TRUE(marks != NULL);
  if (extra)
    for (int64_t w = 0; w < words; w++)
      marks[w] = dc_rng() & dc_rng() & dc_rng() & dc_rng();
  *marked = 0;
  for (int64_t i = box->lo[0]; i < box->hi[0]; i++)
    for (int64_t j = box->lo[1]; j < box->hi[1]; j++) {
      int64_t m = (rf_region_at(&cur->r, i, j) - cur->r.base) / es;
      if (memcmp(rf_region_at(&prev->r, i, j), rf_region_at(&cur->r, i, j), (size_t)es) != 0)
        marks[m >> 6] |= (uint64_t)1 << (m & 63);
      *marked += (int64_t)(marks[m >> 6] >> (m & 63) & 1);
    }
  return marks;
}

/* Encodes box of prev -> cur in every encoding, checks what encode reports, and applies each
 * to a destination (layout ld) holding prev: box must then hold cur, and every other byte of
 * the destination, padding included, what it held. The bytes must also be those of the same
 * piece copied into row-major buffers first: the element order is the box's, whatever the
 * layout. */
static void check_piece(const rf_box *whole, const rf_box *box, const dc_buf *prev,
                        const dc_buf *cur, int ld, int64_t changed) {
  int es = prev->r.esize;
  int64_t n = rf_box_numel(box);
  int64_t got = -1;
  ASSERT_OK(rf_delta_count(RF_MEM_HOST, &prev->r, &cur->r, box, "piece", &got));
  ASSERT_EQ(got, changed);

  size_t cap = (size_t)rf_delta_capacity(RF_DELTA_SPARSE, n, es);
  ASSERT_EQ(cap, (size_t)RF_MAX(rf_delta_capacity(RF_DELTA_SPARSE, n, es),
                                rf_delta_capacity(RF_DELTA_AUTO, n, es)));
  char *enc = malloc(cap), *flat_enc = malloc(cap);
  char *flat_prev = malloc((size_t)(n * es) + 1), *flat_cur = malloc((size_t)(n * es) + 1);
  ASSERT_TRUE(enc && flat_enc && flat_prev && flat_cur);
  rf_region fp = rf_region_row_major(flat_prev, box, es),
            fc = rf_region_row_major(flat_cur, box, es);
  rf_region_copy(&fp, &prev->r, box);
  rf_region_copy(&fc, &cur->r, box);

  for (size_t w = 0; w < RF_ARRAY_LEN(wants); w++) {
    rf_delta_info info, flat_info, applied;
    ASSERT_OK(
        rf_delta_encode(RF_MEM_HOST, &prev->r, &cur->r, box, wants[w], enc, cap, "piece", &info));
    rf_delta_encoding expect =
        wants[w] == RF_DELTA_AUTO ? rf_delta_choose(n, changed, es) : wants[w];
    ASSERT_EQ(info.encoding, expect);
    ASSERT_EQ(info.changed, changed);
    ASSERT_EQ(info.elements, n);
    ASSERT_EQ(info.esize, es);
    ASSERT_EQ(info.bytes, rf_delta_size(wants[w], n, changed, es));

    ASSERT_OK(
        rf_delta_encode(RF_MEM_HOST, &fp, &fc, box, wants[w], flat_enc, cap, "flat", &flat_info));
    ASSERT_EQ(flat_info.bytes, info.bytes);
    ASSERT_EQ(memcmp(enc, flat_enc, (size_t)info.bytes), 0);
    /* In a buffer of exactly its size, where the mark has no room to copy values ahead. */
    ASSERT_OK(rf_delta_encode(RF_MEM_HOST, &prev->r, &cur->r, box, wants[w], flat_enc,
                              (size_t)info.bytes, "exact", &flat_info));
    ASSERT_EQ(memcmp(enc, flat_enc, (size_t)info.bytes), 0);
    /* From the trainer's marks: exactly the changes give the same bytes, in a roomy buffer and
     * in one of exactly the size; with unchanged elements marked too, those are sent as well
     * (the cur region's layout, not prev's, numbers the marks), and the apply still brings a
     * copy of prev to cur. */
    for (int extra = 0; extra < 2; extra++) {
      int64_t marked = 0;
      rf_delta_marks marks = {marks_of(box, prev, cur, extra, &marked)};
      ASSERT_TRUE(extra ? marked >= changed : marked == changed);
      int64_t bytes = rf_delta_size(wants[w], n, marked, es);
      for (int exact = 0; exact < 2; exact++) {
        memset(flat_enc, 0x5a, cap);
        ASSERT_OK(rf_delta_encode_marked(RF_MEM_HOST, &prev->r, &cur->r, box, &marks, wants[w],
                                         flat_enc, exact ? (size_t)bytes : cap, "marked",
                                         &flat_info));
        ASSERT_EQ(flat_info.bytes, bytes);
        ASSERT_EQ(flat_info.changed, marked);
        if (!extra)
          ASSERT_EQ(memcmp(enc, flat_enc, (size_t)info.bytes), 0);
      }
      dc_buf dst = dc_buf_new(ld, whole, es);
      dc_copy(&dst, prev, whole);
      ASSERT_OK(rf_delta_apply(RF_MEM_HOST, flat_enc, (size_t)bytes, &dst.r, box, "marked", NULL));
      ASSERT_TRUE(dc_same_box(&dst.r, &cur->r, box));
      dc_buf_free(&dst);
      free((void *)marks.words);
    }

    dc_buf dst = dc_buf_new(ld, whole, es), before = dc_buf_new(ld, whole, es);
    dc_copy(&dst, prev, whole);
    memcpy(before.base, dst.base, dst.bytes);
    ASSERT_OK(rf_delta_apply(RF_MEM_HOST, enc, (size_t)info.bytes, &dst.r, box, "piece", &applied));
    ASSERT_EQ(applied.encoding, expect);
    ASSERT_EQ(applied.changed, changed);
    ASSERT_U64_EQ(applied.hash, info.hash);
    ASSERT_TRUE(dc_same_box(&dst.r, &cur->r, box));
    rf_region_copy(&dst.r, &before.r, box); /* put box back: nothing else may differ */
    ASSERT_EQ(memcmp(dst.base, before.base, dst.bytes), 0);
    dc_buf_free(&dst);
    dc_buf_free(&before);
  }
  free(enc), free(flat_enc), free(flat_prev), free(flat_cur);
}

/* prev random in layout lp, cur (layout lc) the same but for `k` random elements of box. */
static void check_fraction(const rf_box *whole, const rf_box *box, int es, int lp, int lc, int ld,
                           int64_t k) {
  dc_buf prev = dc_buf_new(lp, whole, es), cur = dc_buf_new(lc, whole, es);
  dc_copy(&cur, &prev, whole);
  int32_t *pos = dc_pick(rf_box_numel(box), k);
  for (int64_t i = 0; i < k; i++)
    dc_change(&cur.r, box, pos[i]);
  free(pos);
  check_piece(whole, box, &prev, &cur, ld, k);
  dc_buf_free(&prev), dc_buf_free(&cur);
}

static void test_fractions(void) {
  static const double fractions[] = {0, 1e-3, 0.01, 0.5, 1};
  static const int layouts[][3] = {{DC_ROW_MAJOR, DC_ROW_MAJOR, DC_ROW_MAJOR},
                                   {DC_PADDED, DC_TRANSPOSED, DC_PADDED},
                                   {DC_TRANSPOSED, DC_TRANSPOSED, DC_ROW_MAJOR}};
  rf_box whole = {{0, 0}, {260, 530}}, box = {{3, 5}, {250, 517}}; /* 247 x 512 */
  int64_t n = rf_box_numel(&box);
  for (int es = 1; es <= 4; es *= 2)
    for (size_t f = 0; f < RF_ARRAY_LEN(fractions); f++)
      for (size_t l = 0; l < RF_ARRAY_LEN(layouts); l++)
        check_fraction(&whole, &box, es, layouts[l][0], layouts[l][1], layouts[l][2],
                       (int64_t)(fractions[f] * (double)n + 0.5));
  /* 1e-6 on a piece of 4 Mi elements: 4 changes, the whole tensor. */
  rf_box big = {{0, 0}, {2048, 2048}};
  check_fraction(&big, &big, 2, DC_ROW_MAJOR, DC_ROW_MAJOR, DC_ROW_MAJOR,
                 (int64_t)(1e-6 * 2048 * 2048 + 0.5));
  printf("test_delta: fractions 0, 1e-6, 1e-3, 0.01, 0.5, 1 round-trip\n");
}

/* Changes at the first and last element and at both ends of every row of a sub-box of a
 * padded region, at the ends of 64-element blocks, applied into other layouts. */
static void test_edges(void) {
  rf_box whole = {{0, 0}, {37, 53}}, box = {{3, 5}, {30, 48}}; /* 27 x 43 */
  int64_t rows = 27, cols = 43, n = rows * cols;
  for (int es = 1; es <= 4; es *= 2)
    for (int ld = 0; ld < DC_LAYOUTS; ld++) {
      dc_buf prev = dc_buf_new(DC_PADDED, &whole, es), cur = dc_buf_new(DC_PADDED, &whole, es);
      dc_copy(&cur, &prev, &whole);
      int64_t k = 0;
      for (int64_t r = 0; r < rows; r++, k += 2) {
        dc_change(&cur.r, &box, r * cols);
        dc_change(&cur.r, &box, r * cols + cols - 1);
      }
      static const int64_t more[] = {63, 64, 127, 130, 1000}; /* none at a row end */
      for (size_t i = 0; i < RF_ARRAY_LEN(more); i++, k++)
        dc_change(&cur.r, &box, more[i]);
      ASSERT_EQ(n - 1, (rows - 1) * cols + cols - 1); /* the last element is a row's end */
      check_piece(&whole, &box, &prev, &cur, ld, k);
      /* The whole padded region as the piece, and a one-row and a one-column piece. */
      rf_box row = {{7, 0}, {8, 53}}, col = {{0, 11}, {37, 12}};
      int64_t whole_changed = 0;
      ASSERT_OK(rf_delta_count(RF_MEM_HOST, &prev.r, &cur.r, &whole, "whole", &whole_changed));
      ASSERT_EQ(whole_changed, k);
      check_piece(&whole, &whole, &prev, &cur, ld, k);
      check_piece(&whole, &row, &prev, &cur, ld, 2);
      check_piece(&whole, &col, &prev, &cur, ld, 0);
      dc_buf_free(&prev), dc_buf_free(&cur);
    }
  printf("test_delta: first, last and row-edge changes in strided sub-boxes ok\n");
}

/* -0.0 against 0.0 and two NaN payloads differ in their bits, so they are changes. */
static void test_bitwise(void) {
  rf_box box = {{0, 0}, {1, 8}};
  uint16_t p16[8] = {0}, c16[8] = {0};
  c16[2] = 0x8000;                  /* bf16 -0.0 */
  p16[5] = 0x7fc0, c16[5] = 0x7fc1; /* two quiet NaNs */
  p16[6] = 0x7fc0, c16[6] = 0x7fc0; /* the same NaN: unchanged */
  uint32_t p32[8] = {0}, c32[8] = {0};
  c32[0] = 0x80000000u;
  p32[7] = 0x7fc00000u, c32[7] = 0xffc00000u;
  rf_region rp16 = rf_region_row_major(p16, &box, 2), rc16 = rf_region_row_major(c16, &box, 2);
  rf_region rp32 = rf_region_row_major(p32, &box, 4), rc32 = rf_region_row_major(c32, &box, 4);
  int64_t n16 = 0, n32 = 0;
  ASSERT_OK(rf_delta_count(RF_MEM_HOST, &rp16, &rc16, &box, "bf16", &n16));
  ASSERT_OK(rf_delta_count(RF_MEM_HOST, &rp32, &rc32, &box, "fp32", &n32));
  ASSERT_EQ(n16, 2);
  ASSERT_EQ(n32, 2);
  char enc[256];
  rf_delta_info info;
  ASSERT_OK(rf_delta_encode(RF_MEM_HOST, &rp16, &rc16, &box, RF_DELTA_SPARSE, enc, sizeof enc,
                            "bf16", &info));
  ASSERT_OK(rf_delta_apply(RF_MEM_HOST, enc, (size_t)info.bytes, &rp16, &box, "bf16", NULL));
  ASSERT_EQ(memcmp(p16, c16, sizeof p16), 0);
  printf("test_delta: -0.0 and NaN payloads are changes\n");
}

/* The wire format of a fixed piece, byte by byte, and the sizes of a fixed case. */
static void test_wire(void) {
  uint16_t prev[4] = {1, 2, 3, 4}, cur[4] = {1, 9, 3, 4};
  rf_box box = {{0, 0}, {2, 2}};
  rf_region rp = rf_region_row_major(prev, &box, 2), rc = rf_region_row_major(cur, &box, 2);
  unsigned char enc[64];
  rf_delta_info info;
  ASSERT_OK(rf_delta_encode(RF_MEM_HOST, &rp, &rc, &box, RF_DELTA_SPARSE, enc, sizeof enc, "wire",
                            &info));
  ASSERT_EQ(info.bytes, 38);
  static const unsigned char head[24] = {'R', 'F', 'D', '1', 2, 2, 0, 0, 4, 0, 0, 0,
                                         0,   0,   0,   0,   1, 0, 0, 0, 0, 0, 0, 0};
  static const unsigned char payload[6] = {1, 0, 0, 0, 9, 0}; /* offset 1, value 9 */
  ASSERT_EQ(memcmp(enc, head, 24), 0);
  ASSERT_EQ(memcmp(enc + 32, payload, 6), 0);
  uint64_t hash = XXH64(payload, 6, XXH64(head, 24, 0)), stored = 0;
  for (int i = 0; i < 8; i++)
    stored |= (uint64_t)enc[24 + i] << (8 * i);
  ASSERT_U64_EQ(stored, hash);
  ASSERT_U64_EQ(info.hash, hash);

  /* Bitmask is as small here (38 bytes), and wins the tie. */
  ASSERT_OK(
      rf_delta_encode(RF_MEM_HOST, &rp, &rc, &box, RF_DELTA_AUTO, enc, sizeof enc, "wire", &info));
  ASSERT_EQ(info.encoding, RF_DELTA_BITMASK);
  ASSERT_EQ(info.bytes, 32 + 4 + 2);
  ASSERT_EQ(enc[4], 3);
  static const unsigned char mask_payload[6] = {0x02, 0, 0, 0, 9, 0};
  ASSERT_EQ(memcmp(enc + 32, mask_payload, 6), 0);

  /* 10 x 100 bf16 elements, 7 changed. */
  ASSERT_EQ(rf_delta_size(RF_DELTA_DENSE, 1000, 7, 2), 2032);
  ASSERT_EQ(rf_delta_size(RF_DELTA_SPARSE, 1000, 7, 2), 74);
  ASSERT_EQ(rf_delta_size(RF_DELTA_BITMASK, 1000, 7, 2), 174);
  ASSERT_EQ(rf_delta_size(RF_DELTA_AUTO, 1000, 7, 2), 74);
  ASSERT_EQ(rf_delta_capacity(RF_DELTA_AUTO, 1000, 2), 2032);
  ASSERT_EQ(rf_delta_capacity(RF_DELTA_SPARSE, 1000, 2), 6032);
  ASSERT_EQ(rf_delta_capacity(RF_DELTA_BITMASK, 1000, 2), 2160);
  ASSERT_STR_EQ(rf_delta_at(RF_DELTA_BITMASK)->name, "bitmask");
  ASSERT_STR_EQ(rf_delta_encoding_name(RF_DELTA_SPARSE), "sparse");
  printf("test_delta: wire format and sizes ok\n");
}

/* The hash of the definition in delta.h, computed level by level with whole arrays. */
static uint64_t tree_hash(const unsigned char *p, size_t bytes, uint64_t seed) {
  if (bytes <= RF_DELTA_HASH_CHUNK)
    return XXH64(p, bytes, seed);
  size_t chunks = (bytes + RF_DELTA_HASH_CHUNK - 1) / RF_DELTA_HASH_CHUNK;
  unsigned char *level = malloc(chunks * 8);
  ASSERT_TRUE(level);
  for (size_t i = 0; i < chunks; i++) {
    size_t at = i * RF_DELTA_HASH_CHUNK, len = RF_MIN((size_t)RF_DELTA_HASH_CHUNK, bytes - at);
    uint64_t h = XXH64(p + at, len, seed);
    for (int b = 0; b < 8; b++)
      level[8 * i + b] = (unsigned char)(h >> (8 * b));
  }
  uint64_t h = tree_hash(level, chunks * 8, seed);
  free(level);
  return h;
}

static void test_hash(void) {
  /* One chunk; two; a level of exactly one chunk; one hash more; three levels. */
  static const size_t sizes[] = {0, 4096, 4097, 4096 * 512, 4096 * 512 + 1, 4096 * 1025};
  size_t most = 4096 * 1025;
  unsigned char *p = malloc(most);
  ASSERT_TRUE(p);
  for (size_t i = 0; i < most; i++)
    p[i] = (unsigned char)dc_rng();
  for (size_t i = 0; i < RF_ARRAY_LEN(sizes); i++)
    ASSERT_U64_EQ(rf_delta_hash(p, sizes[i], 77), tree_hash(p, sizes[i], 77));
  ASSERT_U64_EQ(rf_delta_hash(p, 100, 5), XXH64(p, 100, 5));
  free(p);
  printf("test_delta: hash tree ok\n");
}

/* auto at its break-even points, worked out from the size formulas: sparse until
 * 4 * changed reaches 4 * ceil(n / 32) (bitmask on the tie), dense from where
 * changed * esize reaches n * esize - 4 * ceil(n / 32) (dense on the tie). */
static void test_auto(void) {
  static const struct {
    int64_t n;
    int es;
    int64_t to_bitmask, to_dense; /* the first changed count of each */
  } cases[] = {
      {1024, 1, 32, 896}, {1024, 2, 32, 960}, {1024, 4, 32, 992},
      {1000, 2, 32, 936}, {100, 1, 4, 84},
  };
  for (size_t i = 0; i < RF_ARRAY_LEN(cases); i++) {
    int64_t n = cases[i].n, b = cases[i].to_bitmask, d = cases[i].to_dense;
    int es = cases[i].es;
    ASSERT_EQ(rf_delta_choose(n, 0, es), RF_DELTA_SPARSE);
    ASSERT_EQ(rf_delta_choose(n, b - 1, es), RF_DELTA_SPARSE);
    ASSERT_EQ(rf_delta_size(RF_DELTA_SPARSE, n, b, es), rf_delta_size(RF_DELTA_BITMASK, n, b, es));
    ASSERT_EQ(rf_delta_choose(n, b, es), RF_DELTA_BITMASK);
    ASSERT_EQ(rf_delta_choose(n, d - 1, es), RF_DELTA_BITMASK);
    ASSERT_EQ(rf_delta_size(RF_DELTA_BITMASK, n, d, es), rf_delta_size(RF_DELTA_DENSE, n, d, es));
    ASSERT_EQ(rf_delta_choose(n, d, es), RF_DELTA_DENSE);
    ASSERT_EQ(rf_delta_choose(n, n, es), RF_DELTA_DENSE);
  }
  /* And encode's own choice on real data on both sides of both points. */
  rf_box whole = {{0, 0}, {32, 32}};
  static const int64_t counts[] = {31, 32, 959, 960};
  static const rf_delta_encoding chosen[] = {RF_DELTA_SPARSE, RF_DELTA_BITMASK, RF_DELTA_BITMASK,
                                             RF_DELTA_DENSE};
  for (size_t i = 0; i < RF_ARRAY_LEN(counts); i++) {
    dc_buf prev = dc_buf_new(DC_ROW_MAJOR, &whole, 2), cur = dc_buf_new(DC_ROW_MAJOR, &whole, 2);
    dc_copy(&cur, &prev, &whole);
    int32_t *pos = dc_pick(1024, counts[i]);
    for (int64_t k = 0; k < counts[i]; k++)
      dc_change(&cur.r, &whole, pos[k]);
    free(pos);
    char enc[2100];
    rf_delta_info info;
    ASSERT_OK(rf_delta_encode(RF_MEM_HOST, &prev.r, &cur.r, &whole, RF_DELTA_AUTO, enc, sizeof enc,
                              "auto", &info));
    ASSERT_EQ(info.encoding, chosen[i]);
    dc_buf_free(&prev), dc_buf_free(&cur);
  }
  printf("test_delta: auto's break-even points ok\n");
}

/* Applies `bytes` of enc to a destination holding prev and expects RF_ERR_CORRUPT with `want`
 * as the message and not one byte of the destination written. */
static void expect_refused(const char *enc, size_t bytes, const rf_box *whole, const rf_box *box,
                           const dc_buf *prev, const char *want) {
  dc_buf dst = dc_buf_new(DC_PADDED, whole, prev->r.esize);
  memcpy(dst.base, prev->base, dst.bytes);
  char err[512] = "";
  rf_log_capture(err, sizeof err);
  rf_status st = rf_delta_apply(RF_MEM_HOST, enc, bytes, &dst.r, box, "layer.0 rows 3-30", NULL);
  rf_log_capture(NULL, 0);
  ASSERT_STATUS(st, RF_ERR_CORRUPT);
  ASSERT_STR_EQ(err, want);
  ASSERT_EQ(memcmp(dst.base, prev->base, dst.bytes), 0);
  dc_buf_free(&dst);
}

static uint64_t seed_of(const char *enc) { return XXH64(enc, 24, 0); }

static void test_corrupt(void) {
  rf_box whole = {{0, 0}, {37, 53}}, box = {{3, 5}, {30, 48}};
  dc_buf prev = dc_buf_new(DC_PADDED, &whole, 2), cur = dc_buf_new(DC_PADDED, &whole, 2);
  dc_copy(&cur, &prev, &whole);
  int32_t *pos = dc_pick(1161, 20);
  for (int k = 0; k < 20; k++)
    dc_change(&cur.r, &box, pos[k]);
  free(pos);
  static char enc[4096], bad[4096], want[512];
  rf_delta_info info;
  ASSERT_OK(rf_delta_encode(RF_MEM_HOST, &prev.r, &cur.r, &box, RF_DELTA_AUTO, enc, sizeof enc,
                            "layer.0 rows 3-30", &info));
  ASSERT_EQ(info.encoding, RF_DELTA_SPARSE);
  ASSERT_EQ(info.bytes, 32 + 20 * 6);
  size_t bytes = (size_t)info.bytes;
  const char *tail = "refusing it, the piece keeps its previous version";

  /* A payload byte: an offset, then a value. */
  static const size_t at[] = {32 + 5, 32 + 80 + 3};
  for (size_t i = 0; i < RF_ARRAY_LEN(at); i++) {
    memcpy(bad, enc, bytes);
    bad[at[i]] ^= 0x10;
    snprintf(want, sizeof want,
             "delta for layer.0 rows 3-30: the payload's hash %016llx does not match the "
             "header's %016llx; %s",
             (unsigned long long)rf_delta_hash(bad + 32, bytes - 32, seed_of(bad)),
             (unsigned long long)info.hash, tail);
    expect_refused(bad, bytes, &whole, &box, &prev, want);
  }
  /* The hash itself. */
  memcpy(bad, enc, bytes);
  bad[24] ^= 1;
  snprintf(want, sizeof want,
           "delta for layer.0 rows 3-30: the payload's hash %016llx does not match the header's "
           "%016llx; %s",
           (unsigned long long)info.hash, (unsigned long long)(info.hash ^ 1), tail);
  expect_refused(bad, bytes, &whole, &box, &prev, want);
  /* The changed count, which no longer fits the size; the magic; a byte short. */
  memcpy(bad, enc, bytes);
  bad[16] ^= 1;
  snprintf(want, sizeof want,
           "delta for layer.0 rows 3-30: corrupt header (encoding 2, 2-byte elements, 1161 "
           "elements, 21 changed, 152 bytes received) for a piece of 1161 2-byte elements; %s",
           tail);
  expect_refused(bad, bytes, &whole, &box, &prev, want);
  memcpy(bad, enc, bytes);
  bad[0] = 'X';
  snprintf(want, sizeof want,
           "delta for layer.0 rows 3-30: corrupt header (encoding 2, 2-byte elements, 1161 "
           "elements, 20 changed, 152 bytes received) for a piece of 1161 2-byte elements; %s",
           tail);
  expect_refused(bad, bytes, &whole, &box, &prev, want);
  snprintf(want, sizeof want,
           "delta for layer.0 rows 3-30: corrupt header (encoding 2, 2-byte elements, 1161 "
           "elements, 20 changed, 151 bytes received) for a piece of 1161 2-byte elements; %s",
           tail);
  expect_refused(enc, bytes - 1, &whole, &box, &prev, want);
  snprintf(want, sizeof want,
           "delta for layer.0 rows 3-30: 31 bytes cannot hold the 32-byte header; %s", tail);
  expect_refused(enc, 31, &whole, &box, &prev, want);

  /* Dense: its size does not depend on the changed count, so a changed count that was
   * tampered with is caught by the hash, whose seed is the header's fields. */
  static char dense[4096];
  ASSERT_OK(rf_delta_encode(RF_MEM_HOST, &prev.r, &cur.r, &box, RF_DELTA_DENSE, dense, sizeof dense,
                            "layer.0 rows 3-30", &info));
  memcpy(bad, dense, (size_t)info.bytes);
  bad[16] ^= 1;
  snprintf(want, sizeof want,
           "delta for layer.0 rows 3-30: the payload's hash %016llx does not match the header's "
           "%016llx; %s",
           (unsigned long long)rf_delta_hash(bad + 32, (size_t)info.bytes - 32, seed_of(bad)),
           (unsigned long long)info.hash, tail);
  expect_refused(bad, (size_t)info.bytes, &whole, &box, &prev, want);

  /* A buffer too small for the encoding asked for. */
  char err[512] = "";
  rf_log_capture(err, sizeof err);
  rf_status st = rf_delta_encode(RF_MEM_HOST, &prev.r, &cur.r, &box, RF_DELTA_SPARSE, enc, 100,
                                 "layer.0 rows 3-30", &info);
  rf_log_capture(NULL, 0);
  ASSERT_STATUS(st, RF_ERR_INTERNAL);
  ASSERT_STR_EQ(err, "delta for layer.0 rows 3-30: the sparse encoding of 20 changed of 1161 "
                     "elements takes 152 bytes, but the buffer holds 100 (reserve "
                     "rf_delta_capacity)");
  dc_buf_free(&prev), dc_buf_free(&cur);
  printf("test_delta: corrupted payloads and headers refused, nothing written\n");
}

/* Pieces refused before any byte is read: 2^31 elements, and element sizes the loops do not
 * take. */
static void test_refused(void) {
  static char dummy[64];
  rf_box huge = {{0, 0}, {65536, 32768}};
  rf_region r = rf_region_row_major(dummy, &huge, 1);
  char err[512] = "";
  int64_t changed = -1;
  rf_delta_info info;
  rf_log_capture(err, sizeof err);
  ASSERT_STATUS(rf_delta_count(RF_MEM_HOST, &r, &r, &huge, "huge", &changed), RF_ERR_UNSUPPORTED);
  rf_log_capture(NULL, 0);
  ASSERT_STR_EQ(err, "delta for huge: a piece of 2147483648 elements is more than the 2147483647 "
                     "that int32 offsets address; cut it into smaller pieces");
  rf_log_capture(err, sizeof err);
  ASSERT_STATUS(rf_delta_encode(RF_MEM_HOST, &r, &r, &huge, RF_DELTA_AUTO, dummy, sizeof dummy,
                                "huge", &info),
                RF_ERR_UNSUPPORTED);
  ASSERT_STATUS(rf_delta_apply(RF_MEM_HOST, dummy, sizeof dummy, &r, &huge, "huge", &info),
                RF_ERR_UNSUPPORTED);
  rf_log_capture(NULL, 0);

  rf_box box = {{0, 0}, {2, 2}};
  rf_region r2 = rf_region_row_major(dummy, &box, 2), r4 = rf_region_row_major(dummy, &box, 4);
  rf_region r8 = rf_region_row_major(dummy, &box, 8);
  rf_log_capture(err, sizeof err);
  ASSERT_STATUS(rf_delta_count(RF_MEM_HOST, &r2, &r4, &box, "mixed", &changed), RF_ERR_INTERNAL);
  rf_log_capture(NULL, 0);
  ASSERT_STR_EQ(err, "delta for mixed: elements of 2 bytes in the previous version and 4 bytes "
                     "in the current one");
  rf_log_capture(err, sizeof err);
  ASSERT_STATUS(rf_delta_count(RF_MEM_HOST, &r8, &r8, &box, "wide", &changed), RF_ERR_INTERNAL);
  rf_log_capture(NULL, 0);
  ASSERT_STR_EQ(err, "delta for wide: elements of 8 bytes; they must be 1, 2 or 4");
  rf_log_capture(err, sizeof err);
  ASSERT_STATUS(rf_delta_apply(RF_MEM_HOST, dummy, sizeof dummy, &r8, &box, "wide", &info),
                RF_ERR_INTERNAL);
  rf_log_capture(NULL, 0);
  ASSERT_STR_EQ(err, "delta for wide: elements of 8 bytes; they must be 1, 2 or 4");
  printf("test_delta: oversized pieces and odd element sizes refused\n");
}

int main(void) {
  double t0 = rf_now();
  test_wire();
  test_hash();
  test_auto();
  test_bitwise();
  test_edges();
  test_corrupt();
  test_refused();
  test_fractions();
  printf("test_delta: ok (%.2f s)\n", rf_now() - t0);
  return 0;
}
