/* versions: parsing --update, and the host functions over the element rules of versions.h
 * (one element's bits, a box's changed count and its checksum, computed without memory).
 *
 * Compiled with -ffp-contract=off (src/CMakeLists.txt): adam's fp32 steps must round as the
 * CUDA kernels' _rn intrinsics do, one operation at a time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verify/verify.h"

RF_ENUM_DEFINE(rf_update_kind, "update", RF_UPDATE_LIST, RF_UPDATE_COUNT)

/* A plain decimal number, as the command line's other numbers: no hex, inf, nan or spaces. */
static int parse_number(const char *text, double *out) {
  if (!text[0] || text[strspn(text, "0123456789.eE+-")] != '\0' || !strpbrk(text, "0123456789"))
    return 0;
  char *end = NULL;
  double v = strtod(text, &end);
  if (!end || *end != '\0' || !isfinite(v))
    return 0;
  *out = v;
  return 1;
}

rf_status rf_update_parse(const char *text, rf_update *out, char *why, size_t why_len) {
  rf_update u;
  memset(&u, 0, sizeof u);
  const char *colon = strchr(text, ':');
  size_t n = colon ? (size_t)(colon - text) : strlen(text);
  char name[16] = "";
  int kind = -1;
  if (n < sizeof name) {
    memcpy(name, text, n);
    name[n] = '\0';
    kind = rf_enum_find(rf_update_kind_names, RF_UPDATE_COUNT, name);
  }
  int takes = kind == RF_UPDATE_SPARSE || kind == RF_UPDATE_ADAM;
  int ok = kind >= 0 && takes == (colon != NULL);
  if (ok && takes) {
    ok = parse_number(colon + 1, &u.param);
    ok = ok &&
         (kind == RF_UPDATE_SPARSE ? u.param >= 0 && u.param <= 1 : u.param > 0 && u.param <= 1);
  }
  if (!ok) {
    snprintf(why, why_len,
             "'%s' is not none, full, sparse:F with 0 <= F <= 1, or adam:LR with 0 < LR <= 1",
             text);
    return RF_ERR_USAGE;
  }
  u.kind = (rf_update_kind)kind;
  if (u.kind == RF_UPDATE_SPARSE)
    u.threshold = (uint64_t)llround(u.param * 4294967296.0);
  if (u.kind == RF_UPDATE_ADAM)
    u.lr = (float)u.param;
  *out = u;
  return RF_OK;
}

rf_version_gen rf_version_gen_of(uint64_t seed, int32_t tensor_id,
                                 const rf_weight_version *version) {
  rf_version_gen g;
  memset(&g, 0, sizeof g);
  g.key = rf_value_key(seed, tensor_id);
  /* "versions": the later versions' key, unrelated to version 0's. */
  g.vkey = rf_mix64(g.key ^ 0x76657273696f6e73ULL);
  if (version) {
    g.kind = (int32_t)version->update.kind;
    g.k = version->k;
    g.threshold = version->update.threshold;
    g.lr = version->update.lr;
  }
  return g;
}

uint32_t rf_version_bits(uint64_t seed, int32_t tensor_id, const rf_weight_version *version,
                         int64_t index, rf_dtype dtype) {
  rf_version_gen g = rf_version_gen_of(seed, tensor_id, version);
  return rf_version_value(&g, index, dtype);
}

uint64_t rf_version_checksum(const rf_box *box, const rf_tensor *t, uint64_t seed,
                             const rf_weight_version *version) {
  rf_version_gen g = rf_version_gen_of(seed, t->id, version);
  const uint64_t ckey = rf_checksum_key(t->id);
  const int ws = rf_word_shift(rf_dtype_size(t->dtype));
  uint64_t sum = 0;
  for (int64_t i = box->lo[0]; i < box->hi[0]; i++)
    for (int64_t j = box->lo[1]; j < box->hi[1]; j++) {
      int64_t index = i * t->shape[1] + j;
      sum += rf_checksum_term(ckey, index, rf_version_value(&g, index, t->dtype), ws);
    }
  return sum;
}
