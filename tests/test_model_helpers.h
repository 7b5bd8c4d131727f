/* Helpers shared by the model tests: temporary config files, loading a model that must fail
 * with exactly one error line, and the checks every tensor list must pass. Each test program
 * includes this once. */
#ifndef RF_TEST_MODEL_HELPERS_H
#define RF_TEST_MODEL_HELPERS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model.h"
#include "test.h"

static char tmpdir[256];

/* Writes text to tmpdir/rel (creating one level of directory if rel has one) and returns the
 * full path in a static buffer that the next call reuses. */
static const char *write_tmp(const char *rel, const char *text) {
  static char path[512];
  const char *slash = strchr(rel, '/');
  if (slash) {
    snprintf(path, sizeof path, "%s/%.*s", tmpdir, (int)(slash - rel), rel);
    if (access(path, F_OK) != 0)
      ASSERT_EQ(mkdir(path, 0700), 0);
  }
  snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
  FILE *f = fopen(path, "w");
  ASSERT_TRUE(f != NULL);
  fputs(text, f);
  fclose(f);
  return path;
}

/* Loads a model that must fail with RF_ERR_MODEL, capturing stderr so the test can check that
 * exactly one line was logged and that it says `want`. */
static void expect_error(const char *name_or_path, const char *want) {
  char log_path[512];
  snprintf(log_path, sizeof log_path, "%s/stderr.txt", tmpdir);
  fflush(stderr);
  int saved = dup(2);
  FILE *cap = fopen(log_path, "w+");
  ASSERT_TRUE(cap != NULL);
  dup2(fileno(cap), 2);

  rf_model m;
  rf_status st = rf_model_load(name_or_path, &m);

  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char text[4096] = "";
  rewind(cap);
  size_t n = fread(text, 1, sizeof text - 1, cap);
  text[n] = '\0';
  fclose(cap);
  unlink(log_path);

  fprintf(stderr, "expected error: %s", text);
  ASSERT_STATUS(st, RF_ERR_MODEL);
  ASSERT_EQ(m.tensor_count, 0);
  ASSERT_TRUE(m.tensors == NULL);
  ASSERT_TRUE(strstr(text, want) != NULL);
  ASSERT_TRUE(n > 0 && text[n - 1] == '\n');
  ASSERT_TRUE(strchr(text, '\n') == text + n - 1); /* one line */
}

static void expect_tensor(const rf_model *m, const char *name, rf_tensor_kind kind, int layer,
                          int64_t rows, int64_t cols) {
  int i = rf_model_find(m, name);
  if (i < 0)
    fprintf(stderr, "missing tensor %s in %s\n", name, m->name);
  ASSERT_GE(i, 0);
  const rf_tensor *t = &m->tensors[i];
  ASSERT_EQ(t->id, i);
  ASSERT_STR_EQ(t->name, name);
  ASSERT_EQ(t->kind, kind);
  ASSERT_EQ(t->layer, layer);
  ASSERT_EQ(t->ndim, cols ? 2 : 1);
  ASSERT_EQ(t->shape[0], rows);
  ASSERT_EQ(t->shape[1], cols ? cols : 1);
  ASSERT_EQ(t->numel, rows * (cols ? cols : 1));
  ASSERT_EQ(t->bytes, t->numel * rf_dtype_size(t->dtype));
}

/* Checks the invariants every model shares: ids, totals, the first and last names. */
static void check_model(const rf_model *m, const char *name, int64_t params, int tensors) {
  ASSERT_STR_EQ(m->name, name);
  ASSERT_EQ(m->total_params, params);
  ASSERT_EQ(m->tensor_count, tensors);
  int64_t sum = 0, bytes = 0;
  for (int i = 0; i < m->tensor_count; i++) {
    const rf_tensor *t = &m->tensors[i];
    ASSERT_EQ(t->id, i);
    ASSERT_EQ(t->numel, t->shape[0] * t->shape[1]);
    /* Only the router's bias keeps a dtype of its own (fp32); the rest follow the model's. */
    ASSERT_EQ(t->own_dtype, t->kind == RF_T_ROUTER_BIAS);
    ASSERT_EQ(t->dtype, t->own_dtype ? RF_DTYPE_FP32 : m->dtype);
    ASSERT_EQ(t->bytes, t->numel * rf_dtype_size(t->dtype));
    sum += t->numel;
    bytes += t->bytes;
  }
  ASSERT_EQ(sum, params);
  ASSERT_EQ(bytes, m->total_bytes);
  ASSERT_STR_EQ(m->tensors[0].name, "model.embed_tokens.weight");
  ASSERT_EQ(m->tensors[0].kind, RF_T_EMBED);
  ASSERT_EQ(m->tensors[0].layer, -1);
  const rf_tensor *last = &m->tensors[m->tensor_count - 1];
  ASSERT_STR_EQ(last->name, m->tied_embeddings ? "model.norm.weight" : "lm_head.weight");
  ASSERT_EQ(last->layer, -1);
}

static void load_check(const char *arg, const char *name, int64_t params, int tensors,
                       rf_model *m) {
  ASSERT_OK(rf_model_load(arg, m));
  check_model(m, name, params, tensors);
}

#endif
