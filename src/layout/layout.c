/* Where every element lives: the trainer's mesh splits (tunix or fsdp2 style) and the rollout
 * engine's vLLM tensor parallelism, with the fused qkv_proj and gate_up_proj tensors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"

static int is_kv(rf_tensor_kind k) {
  return k == RF_T_K || k == RF_T_V || k == RF_T_K_BIAS || k == RF_T_V_BIAS;
}

/* ---- trainer ----------------------------------------------------------------------------- */

static rf_dim_split split1(rf_mesh_axis a, int64_t g) {
  rf_dim_split s = {{a, RF_AXIS_NONE}, {g, 1}};
  return s;
}

static rf_dim_split split2(rf_mesh_axis a, int64_t ga, rf_mesh_axis b, int64_t gb) {
  rf_dim_split s = {{a, b}, {ga, gb}};
  return s;
}

/* The style tables of docs/architecture.md ("Layout rules"), written in HF orientation. "By heads"
 * axes carry the head size as granule so that a mesh axis never cuts a head in two. */
static void trainer_rules(rf_trainer_style style, const rf_tensor *t, int64_t head,
                          rf_dim_split out[2]) {
  const rf_mesh_axis F = RF_AXIS_FSDP, T = RF_AXIS_TP;
  out[0] = out[1] = split1(RF_AXIS_NONE, 1);
  if (style == RF_STYLE_TUNIX) {
    switch (t->kind) {
    case RF_T_EMBED:
    case RF_T_LM_HEAD:
    case RF_T_GATE:
    case RF_T_UP:
      out[0] = split1(T, 1), out[1] = split1(F, 1);
      break;
    case RF_T_Q:
    case RF_T_K:
    case RF_T_V:
      out[0] = split1(F, head), out[1] = split1(T, 1);
      break;
    case RF_T_Q_BIAS:
    case RF_T_K_BIAS:
    case RF_T_V_BIAS:
      out[0] = split1(F, head);
      break;
    case RF_T_O:
      out[0] = split1(F, 1), out[1] = split1(T, head);
      break;
    case RF_T_DOWN:
      out[0] = split1(F, 1), out[1] = split1(T, 1);
      break;
    case RF_T_NORM:
    case RF_T_HEAD_NORM:
      out[0] = split1(T, 1);
      break;
    default:
      break;
    }
    return;
  }
  /* fsdp2: Megatron TP first (column-parallel on dim 0, row-parallel on dim 1), then FSDP
   * shards dim 0 of whatever TP left. */
  switch (t->kind) {
  case RF_T_EMBED:
  case RF_T_LM_HEAD:
  case RF_T_GATE:
  case RF_T_UP:
    out[0] = split2(T, 1, F, 1);
    break;
  case RF_T_Q:
  case RF_T_K:
  case RF_T_V:
  case RF_T_Q_BIAS:
  case RF_T_K_BIAS:
  case RF_T_V_BIAS:
    out[0] = split2(T, head, F, 1);
    break;
  case RF_T_O:
    out[0] = split1(F, 1), out[1] = split1(T, head);
    break;
  case RF_T_DOWN:
    out[0] = split1(F, 1), out[1] = split1(T, 1);
    break;
  case RF_T_NORM:
  case RF_T_HEAD_NORM:
    out[0] = split1(F, 1);
    break;
  default:
    break;
  }
}

static int axis_size(const rf_trainer_layout *t, rf_mesh_axis a) {
  return a == RF_AXIS_FSDP ? t->fsdp : a == RF_AXIS_TP ? t->tp : 1;
}

static const char *axis_name(rf_mesh_axis a) { return a == RF_AXIS_FSDP ? "fsdp" : "tp"; }

/* Checks one dimension's split; `heads` selects the head-granular splits (checked first over
 * the whole model, so that "32 heads over fsdp=3" is what the user reads) or the others. */
static rf_status check_trainer_split(const rf_layout *lay, const rf_tensor *t, int dim, int heads) {
  const rf_dim_split *s = &lay->trainer_split[t->id][dim];
  int64_t extent = t->shape[dim];
  for (int k = 0; k < 2; k++) {
    if (s->axis[k] == RF_AXIS_NONE)
      continue;
    int parts = axis_size(&lay->trainer, s->axis[k]);
    int64_t units = extent / s->granule[k];
    if (units % parts != 0 && (s->granule[k] > 1) == heads) {
      const char *unit = s->granule[k] > 1 ? (is_kv(t->kind) ? "kv heads" : "heads")
                         : dim == 0        ? "rows"
                                           : "columns";
      return rf_fail(RF_ERR_LAYOUT,
                     "layout: %s dim %d has %lld %s%s, which do not divide over trainer %s=%d; "
                     "choose a trainer %s that divides %lld",
                     t->name, dim, (long long)units, unit, k ? " per tp shard" : "",
                     axis_name(s->axis[k]), parts, axis_name(s->axis[k]), (long long)units);
    }
    extent /= parts;
  }
  return RF_OK;
}

rf_box rf_layout_trainer_box(const rf_layout *lay, int tensor, int trainer_rank) {
  const rf_tensor *t = &lay->model->tensors[tensor];
  const rf_trainer_layout *tl = &lay->trainer;
  int mesh = trainer_rank % (tl->fsdp * tl->tp);
  int coord[3] = {0, mesh / tl->tp, mesh % tl->tp}; /* indexed by rf_mesh_axis */
  rf_box b = rf_box_whole(t);
  for (int d = 0; d < t->ndim; d++) {
    const rf_dim_split *s = &lay->trainer_split[tensor][d];
    int64_t extent = t->shape[d], lo = 0;
    for (int k = 0; k < 2; k++) {
      if (s->axis[k] == RF_AXIS_NONE)
        continue;
      extent /= axis_size(tl, s->axis[k]);
      lo += coord[s->axis[k]] * extent;
    }
    b.lo[d] = lo;
    b.hi[d] = lo + extent;
  }
  return b;
}

int rf_layout_trainer_transposed(const rf_layout *lay, int tensor) {
  if (lay->trainer.order != RF_ORDER_JAX)
    return 0;
  switch (lay->model->tensors[tensor].kind) {
  case RF_T_Q:
  case RF_T_K:
  case RF_T_V:
  case RF_T_O:
  case RF_T_GATE:
  case RF_T_UP:
  case RF_T_DOWN:
  case RF_T_LM_HEAD:
    return 1;
  default:
    return 0;
  }
}

/* ---- rollout ----------------------------------------------------------------------------- */

/* vLLM's rules: q heads split evenly; kv heads split when R <= K, replicated when R > K
 * (rank r holds head r / (R/K)); the vocabulary is padded to a multiple of 64 and cut in R
 * equal row ranges. */
static rf_status check_rollout(const rf_layout *lay, const rf_tensor *t) {
  const rf_model *m = lay->model;
  int R = lay->rollout.tp;
  switch (t->kind) {
  case RF_T_Q:
  case RF_T_Q_BIAS:
  case RF_T_O:
    if (m->heads % R)
      return rf_fail(RF_ERR_LAYOUT,
                     "layout: %s dim %d has %lld heads, which do not divide over rollout tp=%d; "
                     "choose a rollout tp that divides %lld",
                     t->name, t->kind == RF_T_O ? 1 : 0, (long long)m->heads, R,
                     (long long)m->heads);
    break;
  case RF_T_K:
  case RF_T_V:
  case RF_T_K_BIAS:
  case RF_T_V_BIAS:
    if ((R <= m->kv_heads && m->kv_heads % R) || (R > m->kv_heads && R % m->kv_heads))
      return rf_fail(RF_ERR_LAYOUT,
                     "layout: %s dim 0 has %lld kv heads, which neither divide over nor "
                     "replicate evenly across rollout tp=%d; choose a rollout tp that divides "
                     "or is a multiple of %lld",
                     t->name, (long long)m->kv_heads, R, (long long)m->kv_heads);
    break;
  case RF_T_GATE:
  case RF_T_UP:
  case RF_T_DOWN:
    if (m->intermediate % R)
      return rf_fail(RF_ERR_LAYOUT,
                     "layout: %s dim %d has size %lld, which does not divide over rollout "
                     "tp=%d; choose a rollout tp that divides %lld",
                     t->name, t->kind == RF_T_DOWN ? 1 : 0, (long long)m->intermediate, R,
                     (long long)m->intermediate);
    break;
  case RF_T_EMBED:
  case RF_T_LM_HEAD:
    if (lay->vocab_padded % R)
      return rf_fail(RF_ERR_LAYOUT,
                     "layout: %s dim 0 has %lld rows (padded to %lld), which do not divide over "
                     "rollout tp=%d; choose a rollout tp that divides %lld",
                     t->name, (long long)m->vocab, (long long)lay->vocab_padded, R,
                     (long long)lay->vocab_padded);
    break;
  default:
    break;
  }
  return RF_OK;
}

rf_box rf_layout_rollout_box(const rf_layout *lay, int tensor, int rollout_rank) {
  const rf_model *m = lay->model;
  const rf_tensor *t = &m->tensors[tensor];
  int R = lay->rollout.tp, r = rollout_rank % R;
  int64_t H = m->head_dim;
  rf_box b = rf_box_whole(t);
  switch (t->kind) {
  case RF_T_EMBED:
  case RF_T_LM_HEAD: {
    int64_t rows = lay->vocab_padded / R;
    b.lo[0] = RF_MIN(r * rows, m->vocab);
    b.hi[0] = RF_MIN((r + 1) * rows, m->vocab);
    break;
  }
  case RF_T_Q:
  case RF_T_Q_BIAS:
    b.lo[0] = r * (m->heads / R) * H;
    b.hi[0] = b.lo[0] + (m->heads / R) * H;
    break;
  case RF_T_K:
  case RF_T_V:
  case RF_T_K_BIAS:
  case RF_T_V_BIAS: {
    int64_t first = R <= m->kv_heads ? r * (m->kv_heads / R) : r / (R / m->kv_heads);
    int64_t count = R <= m->kv_heads ? m->kv_heads / R : 1;
    b.lo[0] = first * H;
    b.hi[0] = (first + count) * H;
    break;
  }
  case RF_T_O:
    b.lo[1] = r * (m->heads / R) * H;
    b.hi[1] = b.lo[1] + (m->heads / R) * H;
    break;
  case RF_T_GATE:
  case RF_T_UP:
    b.lo[0] = r * (m->intermediate / R);
    b.hi[0] = b.lo[0] + m->intermediate / R;
    break;
  case RF_T_DOWN:
    b.lo[1] = r * (m->intermediate / R);
    b.hi[1] = b.lo[1] + m->intermediate / R;
    break;
  default:
    break;
  }
  return b;
}

int rf_layout_rollout_split_dim(const rf_layout *lay, int tensor) {
  const rf_tensor *t = &lay->model->tensors[tensor];
  rf_box whole = rf_box_whole(t);
  rf_box b = rf_layout_rollout_box(lay, tensor, 0);
  for (int d = 0; d < 2; d++)
    if (b.hi[d] - b.lo[d] != whole.hi[d] - whole.lo[d])
      return d;
  return -1;
}

int rf_layout_rollout_sharded(const rf_layout *lay, int tensor) {
  return rf_layout_rollout_split_dim(lay, tensor) >= 0;
}

/* The vLLM name of the fused tensor a logical tensor lands in: q/k/v -> qkv_proj and
 * gate/up -> gate_up_proj; every other name is kept. */
static void rollout_name(const rf_tensor *t, char *out, size_t len) {
  const char *from = NULL, *to = NULL;
  if (t->kind == RF_T_Q || t->kind == RF_T_Q_BIAS || is_kv(t->kind)) {
    from = "self_attn.";
    to = "qkv_proj";
  } else if (t->kind == RF_T_GATE || t->kind == RF_T_UP) {
    from = "mlp.";
    to = "gate_up_proj";
  }
  const char *at = from ? strstr(t->name, from) : NULL;
  if (!at) {
    snprintf(out, len, "%s", t->name);
    return;
  }
  const char *suffix = strrchr(t->name, '.'); /* ".weight" or ".bias" */
  snprintf(out, len, "%.*s%s%s%s", (int)(at - t->name), t->name, from, to, suffix);
}

static rf_status build_rollout_tensors(rf_layout *lay) {
  const rf_model *m = lay->model;
  int R = lay->rollout.tp;
  int64_t H = m->head_dim, q_rows = m->heads / R * H;
  int64_t kv_rows = (R <= m->kv_heads ? m->kv_heads / R : 1) * H;
  lay->rollout_tensors =
      rf_calloc((size_t)m->tensor_count, sizeof *lay->rollout_tensors, "rollout tensors");
  lay->slots = rf_calloc((size_t)m->tensor_count, sizeof *lay->slots, "rollout slots");
  if (!lay->rollout_tensors || !lay->slots)
    return RF_ERR_NOMEM;
  for (int i = 0; i < m->tensor_count; i++) {
    const rf_tensor *t = &m->tensors[i];
    char name[RF_NAME_MAX];
    rollout_name(t, name, sizeof name);
    int local = -1;
    /* Fused members of one layer are near each other in checkpoint order. */
    for (int j = lay->rollout_tensor_count - 1; j >= 0 && j >= lay->rollout_tensor_count - 8; j--)
      if (strcmp(lay->rollout_tensors[j].name, name) == 0)
        local = j;
    if (local < 0) {
      rf_rollout_tensor *rt = &lay->rollout_tensors[local = lay->rollout_tensor_count++];
      snprintf(rt->name, sizeof rt->name, "%s", name);
      rt->ndim = t->ndim;
      rf_box b = rf_layout_rollout_box(lay, i, 0);
      rt->shape[0] = b.hi[0] - b.lo[0];
      rt->shape[1] = b.hi[1] - b.lo[1];
      if (t->kind == RF_T_EMBED || t->kind == RF_T_LM_HEAD)
        rt->shape[0] = lay->vocab_padded / R; /* vLLM allocates the padding rows too */
      if (strcmp(name, t->name) != 0)         /* fused: q + k + v or gate + up rows */
        rt->shape[0] = (t->kind == RF_T_GATE) ? 2 * (m->intermediate / R) : q_rows + 2 * kv_rows;
    }
    rf_rollout_slot *s = &lay->slots[i];
    s->local = local;
    if (t->kind == RF_T_K || t->kind == RF_T_K_BIAS)
      s->row = q_rows;
    else if (t->kind == RF_T_V || t->kind == RF_T_V_BIAS)
      s->row = q_rows + kv_rows;
    else if (t->kind == RF_T_UP)
      s->row = m->intermediate / R;
  }
  for (int j = 0; j < lay->rollout_tensor_count; j++) {
    rf_rollout_tensor *rt = &lay->rollout_tensors[j];
    rt->numel = rt->shape[0] * rt->shape[1];
    rt->bytes = rt->numel * rf_dtype_size(m->dtype);
  }
  return RF_OK;
}

/* ---- the whole layout -------------------------------------------------------------------- */

/* Routed experts (expert parallelism) and latent attention have layouts of their own that the
 * rules above, written for dense tensors, would get wrong; refuse them in one line instead. */
static rf_status refuse_unlaid_kinds(const rf_model *model) {
  int moe = 0, mla = 0;
  for (int i = 0; i < model->tensor_count; i++) {
    moe |= rf_tensor_kind_is_moe(model->tensors[i].kind);
    mla |= rf_tensor_kind_is_mla(model->tensors[i].kind);
  }
  if (moe || mla)
    return rf_fail(RF_ERR_LAYOUT,
                   "layout: model %s has %s tensors, which refit does not lay out yet; dense "
                   "models only for now",
                   model->name,
                   moe && mla ? "expert (MoE) and multi-head latent attention (MLA)"
                   : moe      ? "expert (MoE)"
                              : "multi-head latent attention (MLA)");
  return RF_OK;
}

rf_status rf_layout_init(rf_layout *lay, const rf_model *model, const rf_trainer_layout *trainer,
                         const rf_rollout_layout *rollout, rf_placement placement) {
  memset(lay, 0, sizeof *lay);
  lay->model = model;
  lay->trainer = *trainer;
  lay->rollout = *rollout;
  lay->placement = placement;
  RF_TRY(refuse_unlaid_kinds(model));
  lay->trainer_ranks = trainer->fsdp * trainer->tp * trainer->dp;
  lay->rollout_ranks = rollout->tp * rollout->dp;
  lay->world_size = rf_layout_ranks_needed(trainer, rollout, placement);
  lay->vocab_padded = (model->vocab + 63) / 64 * 64;
  lay->trainer_split =
      rf_calloc((size_t)model->tensor_count, sizeof *lay->trainer_split, "trainer splits");
  if (!lay->trainer_split)
    return RF_ERR_NOMEM;
  rf_status st = RF_OK;
  for (int i = 0; i < model->tensor_count; i++) {
    const rf_tensor *t = &model->tensors[i];
    trainer_rules(trainer->style, t, model->head_dim, lay->trainer_split[i]);
    /* Fewer kv heads than a mesh axis has ranks: the trainer replicates them over that axis,
     * as Megatron does when tp exceeds the kv heads (Gemma's single kv head, say). */
    for (int d = 0; is_kv(t->kind) && d < t->ndim; d++)
      for (int k = 0; k < 2; k++) {
        rf_dim_split *sp = &lay->trainer_split[i][d];
        if (sp->granule[k] > 1 && model->kv_heads < axis_size(trainer, sp->axis[k]))
          sp->axis[k] = RF_AXIS_NONE, sp->granule[k] = 1;
      }
  }
  for (int heads = 1; heads >= 0; heads--)
    for (int i = 0; i < model->tensor_count && st == RF_OK; i++)
      for (int d = 0; d < model->tensors[i].ndim && st == RF_OK; d++)
        st = check_trainer_split(lay, &model->tensors[i], d, heads);
  for (int heads = 1; heads >= 0; heads--)
    for (int i = 0; i < model->tensor_count && st == RF_OK; i++) {
      rf_tensor_kind k = model->tensors[i].kind;
      int by_heads = k == RF_T_Q || k == RF_T_Q_BIAS || k == RF_T_O || is_kv(k);
      if (by_heads == heads)
        st = check_rollout(lay, &model->tensors[i]);
    }
  if (st == RF_OK)
    st = build_rollout_tensors(lay);
  if (st != RF_OK)
    rf_layout_free(lay);
  return st;
}

void rf_layout_free(rf_layout *lay) {
  free(lay->trainer_split);
  free(lay->slots);
  free(lay->rollout_tensors);
  lay->trainer_split = NULL;
  lay->slots = NULL;
  lay->rollout_tensors = NULL;
  lay->rollout_tensor_count = 0;
}

int rf_layout_trainer_world_rank(const rf_layout *lay, int trainer_rank) { return trainer_rank; }

int rf_layout_rollout_world_rank(const rf_layout *lay, int rollout_rank) {
  return lay->placement == RF_PLACEMENT_COLOCATED ? rollout_rank
                                                  : lay->trainer_ranks + rollout_rank;
}

void rf_layout_roles(const rf_layout *lay, int world_rank, int *trainer_rank, int *rollout_rank) {
  int tr = -1, rr = -1;
  if (lay->placement == RF_PLACEMENT_COLOCATED) {
    tr = world_rank < lay->trainer_ranks ? world_rank : -1;
    rr = world_rank < lay->rollout_ranks ? world_rank : -1;
  } else if (world_rank < lay->trainer_ranks) {
    tr = world_rank;
  } else if (world_rank < lay->world_size) {
    rr = world_rank - lay->trainer_ranks;
  }
  if (trainer_rank)
    *trainer_rank = tr;
  if (rollout_rank)
    *rollout_rank = rr;
}
