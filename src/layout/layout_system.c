/* --system: the system file of NCCL M2N's reshard_model_bench, read as refit layouts.
 *
 * The file names a trainer and a generation side, each with num_gpus and tp, cp, ep, pp, fsdp
 * and dp sizes (absent sizes are 1, as the benchmark takes them). The benchmark's trainer is
 * Megatron with parallel folding and expert tensor parallelism 1: num_gpus / pp ranks per
 * stage, the non-expert weights over tp x cp with the rest as data-parallel replicas, and the
 * experts over ep ranks folded onto those same ranks. It derives the replicas from num_gpus;
 * the files it ships write dp_size as either the data-parallel or the expert data-parallel
 * size, so refit accepts both and nothing else. Its generation side is a plain tp x dp grid. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"

enum { S_NUM_GPUS, S_TP, S_CP, S_EP, S_PP, S_FSDP, S_DP, S_COUNT };
static const char *const size_keys[S_COUNT] = {"num_gpus", "tp_size",   "cp_size", "ep_size",
                                               "pp_size",  "fsdp_size", "dp_size"};

/* Reads one side: num_gpus is required, the sizes default to 1, and a key the benchmark does
 * not read is refused so that a typo ("tp") does not silently leave its size at 1. */
static rf_status read_side(json_t *root, const char *path, const char *side, int v[S_COUNT]) {
  json_t *obj = json_object_get(root, side);
  if (!json_is_object(obj))
    return rf_fail(RF_ERR_USAGE,
                   "system %s: '%s' is missing or not an object; an NCCL M2N system file has "
                   "\"train\" and \"generation\" objects",
                   path, side);
  const char *key;
  json_t *value;
  json_object_foreach(obj, key, value) {
    int known = 0;
    for (int i = 0; i < S_COUNT; i++)
      known |= strcmp(key, size_keys[i]) == 0;
    if (!known && key[0] != '_')
      return rf_fail(RF_ERR_USAGE,
                     "system %s: %s.%s is not a key of an NCCL M2N system file; use num_gpus, "
                     "tp_size, cp_size, ep_size, pp_size, fsdp_size or dp_size",
                     path, side, key);
  }
  for (int i = 0; i < S_COUNT; i++) {
    json_t *x = json_object_get(obj, size_keys[i]);
    v[i] = 1;
    if (!x && i != S_NUM_GPUS)
      continue;
    if (!json_is_integer(x) || json_integer_value(x) < 1 ||
        json_integer_value(x) > RF_LAYOUT_MAX_RANKS)
      return rf_fail(RF_ERR_USAGE, "system %s: %s.%s is %s, not an integer from 1 to %d", path,
                     side, size_keys[i], x ? "invalid" : "missing", RF_LAYOUT_MAX_RANKS);
    v[i] = (int)json_integer_value(x);
  }
  return RF_OK;
}

static rf_status trainer_text(const char *path, const int v[S_COUNT], char *out, int len) {
  int gpus = v[S_NUM_GPUS], tp = v[S_TP], cp = v[S_CP], ep = v[S_EP], pp = v[S_PP];
  if (v[S_FSDP] != 1)
    return rf_fail(RF_ERR_USAGE,
                   "system %s: train.fsdp_size=%d, but a Megatron trainer with parallel folding "
                   "has no fsdp axis in refit; use fsdp_size 1",
                   path, v[S_FSDP]);
  if (gpus % pp)
    return rf_fail(RF_ERR_USAGE,
                   "system %s: train.num_gpus=%d does not divide into pp_size=%d pipeline stages; "
                   "choose a num_gpus that pp_size divides",
                   path, gpus, pp);
  int stage = gpus / pp;
  if (stage % (tp * cp))
    return rf_fail(RF_ERR_USAGE,
                   "system %s: train tp_size*cp_size = %d*%d does not divide the %d ranks of a "
                   "pipeline stage (num_gpus %d / pp_size %d)",
                   path, tp, cp, stage, gpus, pp);
  if (stage % ep)
    return rf_fail(RF_ERR_USAGE,
                   "system %s: train ep_size=%d does not divide the %d ranks of a pipeline stage "
                   "(num_gpus %d / pp_size %d) that its experts fold onto",
                   path, ep, stage, gpus, pp);
  int dp = stage / (tp * cp), edp = stage / ep;
  if (v[S_DP] != dp && v[S_DP] != edp)
    return rf_fail(RF_ERR_USAGE,
                   "system %s: train.dp_size=%d is neither the data-parallel size %d (num_gpus / "
                   "(pp*tp*cp)) nor the expert data-parallel size %d (num_gpus / (pp*ep))",
                   path, v[S_DP], dp, edp);
  snprintf(out, (size_t)len, "tp=%d,cp=%d,ep=%d,pp=%d,dp=%d", tp, cp, ep, pp, dp);
  return RF_OK;
}

static rf_status rollout_text(const char *path, const int v[S_COUNT], char *out, int len) {
  for (int i = S_CP; i <= S_FSDP; i++)
    if (v[i] != 1)
      return rf_fail(RF_ERR_USAGE,
                     "system %s: generation.%s=%d, but refit's rollout is vLLM tensor parallelism "
                     "with dp engine replicas; use %s 1",
                     path, size_keys[i], v[i], size_keys[i]);
  if (v[S_NUM_GPUS] != v[S_TP] * v[S_DP])
    return rf_fail(RF_ERR_USAGE,
                   "system %s: generation.num_gpus=%d is not tp_size*dp_size = %d*%d = %d", path,
                   v[S_NUM_GPUS], v[S_TP], v[S_DP], v[S_TP] * v[S_DP]);
  snprintf(out, (size_t)len, "tp=%d,dp=%d", v[S_TP], v[S_DP]);
  return RF_OK;
}

rf_status rf_layout_read_system(const char *path, char *trainer, int trainer_len, char *rollout,
                                int rollout_len) {
  char why[128];
  size_t len;
  char *text = rf_read_input(path, RF_INPUT_MAX, &len, why, sizeof why);
  if (!text)
    return rf_fail(RF_ERR_USAGE, "system %s: cannot read: %s; pass an NCCL M2N system file", path,
                   why);
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  free(text);
  if (!root)
    return rf_fail(RF_ERR_USAGE, "system %s:%d:%d: %s; fix the JSON in this file", path, err.line,
                   err.column, err.text);
  int t[S_COUNT], g[S_COUNT];
  rf_status st = json_is_object(root) ? RF_OK
                                      : rf_fail(RF_ERR_USAGE,
                                                "system %s: not a JSON object; an NCCL M2N system "
                                                "file has \"train\" and \"generation\" objects",
                                                path);
  const char *key;
  json_t *value;
  if (st == RF_OK)
    json_object_foreach(root, key, value) {
      if (st == RF_OK && strcmp(key, "train") != 0 && strcmp(key, "generation") != 0 &&
          key[0] != '_')
        st = rf_fail(RF_ERR_USAGE,
                     "system %s: key '%s' is not part of an NCCL M2N system file; use \"train\" "
                     "and \"generation\"",
                     path, key);
    }
  if (st == RF_OK)
    st = read_side(root, path, "train", t);
  if (st == RF_OK)
    st = read_side(root, path, "generation", g);
  json_decref(root);
  if (st == RF_OK)
    st = trainer_text(path, t, trainer, trainer_len);
  if (st == RF_OK)
    st = rollout_text(path, g, rollout, rollout_len);
  return st;
}
