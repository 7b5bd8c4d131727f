/* Parsing and printing of layout strings ("fsdp=4,tp=2,ep=8,pp=4,dp=2", "tp=4,dp=2,ep") and the
 * names of the trainer's style and order and of the placement. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"

RF_ENUM_DEFINE(rf_trainer_style, "trainer-style", RF_TRAINER_STYLE_LIST, RF_TRAINER_STYLE_COUNT)
RF_ENUM_DEFINE(rf_trainer_order, "trainer-order", RF_TRAINER_ORDER_LIST, RF_TRAINER_ORDER_COUNT)
RF_ENUM_DEFINE(rf_placement, "placement", RF_PLACEMENT_LIST, RF_PLACEMENT_COUNT)

rf_box rf_box_whole(const rf_tensor *t) {
  rf_box b = {{0, 0}, {t->shape[0], t->shape[1]}};
  return b;
}

/* Parses "key=value,key=value" against a list of allowed axis names; values are positive
 * integers. Each axis may appear once; absent axes are 1. A name in `flags` may also stand
 * alone ("ep"), which sets it to 1 where it would otherwise be 0. */
static rf_status parse_axes(const char *what, const char *text, const char *const *names,
                            int *values, int count, const char *flag, const char *example) {
  int seen[8] = {0};
  for (int i = 0; i < count; i++)
    values[i] = flag && strcmp(names[i], flag) == 0 ? 0 : 1;
  if (!text || !*text)
    return rf_fail(RF_ERR_USAGE, "%s layout is empty; use e.g. %s", what, example);
  const char *p = text;
  while (*p) {
    const char *eq = strchr(p, '=');
    const char *end = strchr(p, ',');
    if (!end)
      end = p + strlen(p);
    if (flag && (size_t)(end - p) == strlen(flag) && strncmp(p, flag, strlen(flag)) == 0) {
      for (int i = 0; i < count; i++)
        if (strcmp(names[i], flag) == 0 && seen[i]++)
          return rf_fail(RF_ERR_USAGE, "%s layout '%s': axis '%s' given twice", what, text, flag);
      for (int i = 0; i < count; i++)
        if (strcmp(names[i], flag) == 0)
          values[i] = 1;
      p = *end ? end + 1 : end;
      if (*end && !*p)
        return rf_fail(RF_ERR_USAGE, "%s layout '%s' ends with ','", what, text);
      continue;
    }
    if (!eq || eq > end)
      return rf_fail(RF_ERR_USAGE, "%s layout '%s': '%.*s' is not axis=size; use e.g. %s", what,
                     text, (int)(end - p), p, example);
    int axis = -1;
    for (int i = 0; i < count; i++)
      if ((size_t)(eq - p) == strlen(names[i]) && strncmp(p, names[i], (size_t)(eq - p)) == 0)
        axis = i;
    if (axis < 0)
      return rf_fail(RF_ERR_USAGE, "%s layout '%s': unknown axis '%.*s'; use e.g. %s", what, text,
                     (int)(eq - p), p, example);
    if (seen[axis]++)
      return rf_fail(RF_ERR_USAGE, "%s layout '%s': axis '%s' given twice", what, text,
                     names[axis]);
    char *stop = NULL;
    errno = 0;
    long v = strtol(eq + 1, &stop, 10);
    if (stop != end || eq + 1 == end || errno || v < 1 || v > 65536)
      return rf_fail(RF_ERR_USAGE,
                     "%s layout '%s': %s must be an integer from 1 to 65536, not '%.*s'", what,
                     text, names[axis], (int)(end - eq - 1), eq + 1);
    values[axis] = (int)v;
    p = *end ? end + 1 : end;
    if (*end && !*p)
      return rf_fail(RF_ERR_USAGE, "%s layout '%s' ends with ','", what, text);
  }
  return RF_OK;
}

/* Each axis may be up to 65536, but their product is a rank count that every later step
 * (world sizes, rank arrays) holds in an int. */
static rf_status check_rank_count(const char *what, const char *text, int64_t ranks) {
  if (ranks > RF_LAYOUT_MAX_RANKS)
    return rf_fail(RF_ERR_USAGE,
                   "%s layout '%s': %lld ranks is more than the %d refit plans for one side; "
                   "choose smaller axes",
                   what, text, (long long)ranks, RF_LAYOUT_MAX_RANKS);
  return RF_OK;
}

int rf_layout_ranks_needed(const rf_trainer_layout *t, const rf_rollout_layout *r,
                           rf_placement placement) {
  int trainer = rf_trainer_layout_ranks(t), rollout = r->tp * r->dp;
  return placement == RF_PLACEMENT_COLOCATED ? RF_MAX(trainer, rollout) : trainer + rollout;
}

rf_status rf_layout_check_world(const rf_trainer_layout *t, const rf_rollout_layout *r,
                                rf_placement placement, int world_size) {
  int need = rf_layout_ranks_needed(t, r, placement);
  if (world_size == need)
    return RF_OK;
  char tt[64], rr[64];
  rf_trainer_layout_format(t, tt, sizeof tt);
  rf_rollout_layout_format(r, rr, sizeof rr);
  return rf_fail(RF_ERR_WORLD,
                 "world size is %d but trainer %s and rollout %s (%s) need %d ranks; "
                 "run mpirun -np %d",
                 world_size, tt, rr, rf_placement_name(placement), need, need);
}

rf_status rf_trainer_layout_parse(const char *text, rf_trainer_layout *out) {
  static const char *const names[] = {"fsdp", "tp", "dp", "ep", "pp", "cp"};
  int v[6];
  RF_TRY(parse_axes("trainer", text, names, v, 6, NULL, "fsdp=4,tp=2 or fsdp=2,tp=2,ep=8,pp=4"));
  out->fsdp = v[0];
  out->tp = v[1];
  out->dp = v[2];
  out->ep = v[3];
  out->pp = v[4];
  out->cp = v[5];
  /* --trainer-style and --trainer-order, set apart from the text: their defaults until then. */
  out->style = RF_STYLE_TUNIX;
  out->order = RF_ORDER_HF;
  /* Every axis multiplied: a bound for the megatron style too, whose ep folds onto the rest. */
  return check_rank_count("trainer", text, (int64_t)v[0] * v[1] * v[2] * v[3] * v[4] * v[5]);
}

rf_status rf_rollout_layout_parse(const char *text, rf_rollout_layout *out) {
  static const char *const names[] = {"tp", "dp", "ep"};
  int v[3];
  RF_TRY(parse_axes("rollout", text, names, v, 3, "ep", "tp=4 or tp=2,dp=2 or tp=8,ep"));
  if (v[2] != 0 && v[2] != 1)
    return rf_fail(RF_ERR_USAGE,
                   "rollout layout '%s': ep is a switch (vLLM's --enable-expert-parallel over "
                   "all tp*dp ranks), not a size; write ep",
                   text);
  out->tp = v[0];
  out->dp = v[1];
  out->ep = v[2];
  out->dtype = RF_ROLLOUT_DTYPE_MODEL; /* --rollout-dtype, set apart from the text */
  return check_rank_count("rollout", text, (int64_t)v[0] * v[1]);
}

/* Axes of size 1 beyond the first two are left out, so dense layouts print as they always
 * have. */
int rf_trainer_layout_ranks(const rf_trainer_layout *t) {
  int cp = t->cp > 0 ? t->cp : 1; /* 0 in a layout built by hand before cp existed */
  if (t->style == RF_STYLE_MEGATRON)
    return t->fsdp * t->tp * cp * t->dp * t->pp;
  return t->fsdp * t->tp * cp * t->ep * t->pp * t->dp;
}

void rf_trainer_layout_format(const rf_trainer_layout *t, char *buf, int len) {
  char ep[16] = "", pp[16] = "", dp[16] = "", cp[16] = "";
  if (t->cp > 1)
    snprintf(cp, sizeof cp, ",cp=%d", t->cp);
  if (t->ep > 1)
    snprintf(ep, sizeof ep, ",ep=%d", t->ep);
  if (t->pp > 1)
    snprintf(pp, sizeof pp, ",pp=%d", t->pp);
  if (t->dp > 1)
    snprintf(dp, sizeof dp, ",dp=%d", t->dp);
  if (t->style == RF_STYLE_MEGATRON && t->fsdp == 1) /* megatron has no fsdp axis to show */
    snprintf(buf, (size_t)len, "tp=%d%s%s%s%s", t->tp, cp, ep, pp, dp);
  else
    snprintf(buf, (size_t)len, "fsdp=%d,tp=%d%s%s%s%s", t->fsdp, t->tp, cp, ep, pp, dp);
}

void rf_rollout_layout_format(const rf_rollout_layout *r, char *buf, int len) {
  char dp[16] = "";
  if (r->dp > 1)
    snprintf(dp, sizeof dp, ",dp=%d", r->dp);
  snprintf(buf, (size_t)len, "tp=%d%s%s", r->tp, dp, r->ep ? ",ep" : "");
}
