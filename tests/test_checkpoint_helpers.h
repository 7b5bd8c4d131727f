/* Helpers shared by the checkpoint tests: a temporary directory, whole files in and out, a
 * safetensors header rewritten by an edit, one-line error capture, and the round-trip check
 * that reads every element of every tensor back in three region shapes and compares
 * checksums with the generator's, each tensor in its own dtype. Each test program includes
 * this once, and calls mkdtemp on tmp first. */
#ifndef RF_TEST_CHECKPOINT_HELPERS_H
#define RF_TEST_CHECKPOINT_HELPERS_H

#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/io.h"
#include "layout/layout.h"
#include "test.h"
#include "verify/verify.h"

static const uint64_t seed = 20250601;
static char tmp[256];

/* A deterministic generator, so a failure reproduces. */
static uint64_t rng_state = 0x243f6a8885a308d3ULL;
static int64_t rng_range(int64_t lo, int64_t hi) {
  return lo + (int64_t)(rf_mix64(rng_state += 0x9e3779b97f4a7c15ULL) % (uint64_t)(hi - lo));
}

static const char *at_tmp(const char *name) {
  static char bufs[8][512];
  static int next;
  char *b = bufs[next++ % 8];
  snprintf(b, sizeof bufs[0], "%s/%s", tmp, name);
  return b;
}

/* ---- files ------------------------------------------------------------------------------- */

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ASSERT_TRUE(f != NULL);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc(*len + 1);
  ASSERT_EQ(fread(buf, 1, *len, f), *len);
  buf[*len] = '\0';
  fclose(f);
  return buf;
}

static void spit(const char *path, const void *buf, size_t len) {
  FILE *f = fopen(path, "wb");
  ASSERT_TRUE(f != NULL);
  ASSERT_EQ(fwrite(buf, 1, len, f), len);
  fclose(f);
}

static uint64_t header_len(const char *buf) {
  uint64_t n = 0;
  for (int k = 7; k >= 0; k--)
    n = n << 8 | (unsigned char)buf[k];
  return n;
}

/* Copies a safetensors file with its header changed by `edit`. */
static void rewrite_header(const char *from, const char *to, void (*edit)(json_t *h)) {
  size_t len;
  char *buf = slurp(from, &len);
  uint64_t n = header_len(buf);
  json_t *h = json_loadb(buf + 8, n, 0, NULL);
  ASSERT_TRUE(h != NULL);
  edit(h);
  char *text = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(h);
  size_t tl = strlen(text), padded = (tl + 7) / 8 * 8;
  char *out = malloc(8 + padded + len - 8 - n);
  for (int k = 0; k < 8; k++)
    out[k] = (char)(padded >> (8 * k));
  memcpy(out + 8, text, tl);
  memset(out + 8 + tl, ' ', padded - tl);
  memcpy(out + 8 + padded, buf + 8 + n, len - 8 - n);
  spit(to, out, 8 + padded + len - 8 - n);
  free(out), free(text), free(buf);
}

/* ---- stderr capture ---------------------------------------------------------------------- */

static int saved_stderr = -1;

static void capture_begin(void) {
  fflush(stderr);
  saved_stderr = dup(2);
  int fd = open(at_tmp("stderr.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  dup2(fd, 2);
  close(fd);
}

static char *capture_end(void) {
  static char text[8192];
  fflush(stderr);
  dup2(saved_stderr, 2);
  close(saved_stderr);
  size_t len;
  char *buf = slurp(at_tmp("stderr.txt"), &len);
  snprintf(text, sizeof text, "%s", buf);
  free(buf);
  return text;
}

/* Opening `path` fails with RF_ERR_CHECKPOINT and exactly the one line given. */
static void expect_open_error(const char *path, const rf_model *m, const char *line) {
  rf_checkpoint *c = (rf_checkpoint *)&c;
  capture_begin();
  rf_status st = rf_checkpoint_open(path, m, &c);
  char *err = capture_end();
  ASSERT_STATUS(st, RF_ERR_CHECKPOINT);
  ASSERT_TRUE(c == NULL);
  char want[2048];
  snprintf(want, sizeof want, "refit: error: %s\n", line);
  ASSERT_STR_EQ(err, want);
}

/* ---- round trips ------------------------------------------------------------------------- */

/* Through memcpy: nothing promises that an element's address suits a uint32_t load. */
static uint32_t bits_at(const rf_region *r, int64_t i, int64_t j) {
  const char *p = rf_region_at(r, i, j);
  if (r->esize == 2) {
    uint16_t half;
    memcpy(&half, p, 2);
    return half;
  }
  uint32_t word;
  memcpy(&word, p, 4);
  return word;
}

/* Reads box b of tensor ti in three region shapes and checks every element. */
static void check_box(rf_checkpoint *c, const rf_model *m, int ti, const rf_box *b) {
  const rf_tensor *t = &m->tensors[ti];
  int es = rf_dtype_size(t->dtype);
  int64_t h = b->hi[0] - b->lo[0], w = b->hi[1] - b->lo[1];
  int64_t ld = w + 3; /* a fused tensor wider than the slot, the slot at column 2 */
  char *buf = calloc((size_t)((h + 1) * ld), (size_t)es);
  rf_region regs[3] = {rf_region_row_major(buf, b, es), rf_region_transposed(buf, b, es),
                       rf_region_in_fused(buf, ld, 1, 2, b, es)};
  for (int k = 0; k < 3; k++) {
    memset(buf, 0, (size_t)((h + 1) * ld * es));
    ASSERT_OK(rf_checkpoint_read(c, ti, b, &regs[k]));
    for (int64_t i = b->lo[0]; i < b->hi[0]; i++)
      for (int64_t j = b->lo[1]; j < b->hi[1]; j++)
        ASSERT_EQ(bits_at(&regs[k], i, j),
                  rf_value_bits(seed, t->id, i * t->shape[1] + j, t->dtype));
  }
  free(buf);
}

/* Every element of every tensor, whole and in random boxes, and each tensor's checksum against
 * the generator's. */
static void check_checkpoint(const char *path, const rf_model *m) {
  rf_checkpoint *c;
  ASSERT_OK(rf_checkpoint_open(path, m, &c));
  for (int ti = 0; ti < m->tensor_count; ti++) {
    const rf_tensor *t = &m->tensors[ti];
    int es = rf_dtype_size(t->dtype);
    rf_box whole = rf_box_whole(t);
    check_box(c, m, ti, &whole);
    for (int k = 0; k < 6; k++) {
      rf_box b;
      for (int d = 0; d < 2; d++) {
        b.lo[d] = rng_range(0, t->shape[d]);
        b.hi[d] = rng_range(b.lo[d] + 1, t->shape[d] + 1);
      }
      if (k == 0) /* whole rows: one pread for the batch */
        b.lo[1] = 0, b.hi[1] = t->shape[1];
      if (k == 1) /* one column */
        b.hi[1] = b.lo[1] + 1;
      check_box(c, m, ti, &b);
    }
    char *buf = malloc((size_t)(t->numel * es));
    rf_region r = rf_region_row_major(buf, &whole, es);
    rf_fill_region(&r, &whole, t, seed, NULL, t->dtype);
    uint64_t sum;
    ASSERT_OK(rf_checkpoint_checksum(c, ti, &sum));
    ASSERT_U64_EQ(sum, rf_checksum_region(&r, &whole, t, t->dtype));
    free(buf);
  }
  rf_checkpoint_close(c);
}

/* The header a reader outside refit sees: standard JSON, padded to 8 bytes, with metadata. */
static void check_header(const char *path, const rf_model *m) {
  size_t len;
  char *buf = slurp(path, &len);
  uint64_t n = header_len(buf);
  ASSERT_EQ(n % 8, 0);
  json_t *h = json_loadb(buf + 8, n, 0, NULL);
  ASSERT_TRUE(h != NULL);
  json_t *meta = json_object_get(h, "__metadata__");
  ASSERT_STR_EQ(json_string_value(json_object_get(meta, "generator")), "refit");
  ASSERT_STR_EQ(json_string_value(json_object_get(meta, "format")), "pt");
  ASSERT_STR_EQ(json_string_value(json_object_get(meta, "model")), "tiny");
  ASSERT_STR_EQ(json_string_value(json_object_get(meta, "seed")), "20250601");
  ASSERT_EQ(json_object_size(h), m->tensor_count + 1);
  ASSERT_EQ(len, 8 + n + (size_t)m->total_bytes);
  json_decref(h);
  free(buf);
}

#endif
