/* The rollout engine's side of the layout, following vLLM's model code (docs/architecture.md,
 * "Layout rules" names the files): tensor-parallel linear layers, the fused qkv_proj,
 * gate_up_proj and fused_qkv_a_proj tensors, the vocabulary padded to 64 rows, and the stacked
 * FusedMoE expert tensors w13_weight and w2_weight, split by tp or, with ep, whole experts on
 * one rank each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout_internal.h"

static int expert_parallel(const rf_layout *lay, const rf_tensor *t) {
  return lay->rollout.ep && t->expert >= 0;
}

/* Heads of attention tensors split by heads on the rollout, and their width; 0 otherwise. */
static int64_t rollout_head_width(const rf_model *m, rf_tensor_kind k) {
  switch (k) {
  case RF_T_Q:
  case RF_T_Q_BIAS:
  case RF_T_O:
    return m->head_dim;
  case RF_T_Q_B:
  case RF_T_MLA_Q:
    return m->qk_nope_head_dim + m->qk_rope_head_dim;
  case RF_T_KV_B:
    return m->qk_nope_head_dim + m->v_head_dim;
  case RF_T_SINKS: /* one per head */
    return 1;
  default:
    return 0;
  }
}

/* The width an MLP-like tensor's tp splits: the dense MLP's, the shared experts' or one
 * routed expert's; 0 for other kinds. */
static int64_t mlp_width(const rf_model *m, rf_tensor_kind k) {
  switch (k) {
  case RF_T_GATE:
  case RF_T_UP:
  case RF_T_DOWN:
    return m->intermediate;
  case RF_T_SHARED_GATE:
  case RF_T_SHARED_UP:
  case RF_T_SHARED_DOWN:
    return m->shared_intermediate;
  case RF_T_EXPERT_GATE:
  case RF_T_EXPERT_UP:
  case RF_T_EXPERT_DOWN:
  case RF_T_EXPERT_GATE_UP: /* Fe interleaved pairs of rows: tp takes a contiguous range */
  case RF_T_EXPERT_GATE_UP_BIAS:
    return m->expert_intermediate;
  default:
    return 0;
  }
}

static int row_parallel(rf_tensor_kind k) {
  return k == RF_T_O || k == RF_T_DOWN || k == RF_T_SHARED_DOWN || k == RF_T_EXPERT_DOWN;
}

int rf_layout_rollout_split_dim(const rf_layout *lay, int tensor) {
  const rf_model *m = lay->model;
  const rf_tensor *t = &m->tensors[tensor];
  if (lay->rollout.tp == 1)
    return -1;
  if (t->kind == RF_T_EMBED || t->kind == RF_T_LM_HEAD)
    return 0;
  if (layout_is_kv(t->kind)) /* a single kv head is replicated whole */
    return m->kv_heads > 1 ? 0 : -1;
  if (expert_parallel(lay, t) || (!rollout_head_width(m, t->kind) && !mlp_width(m, t->kind)))
    return -1;
  return row_parallel(t->kind) ? 1 : 0;
}

/* vLLM's gpt_oss.py loads an expert's down bias (w2_bias) whole on every tp rank but zeroes it
 * on all but tp rank 0, since the experts' outputs are summed over tp and the bias must count
 * once: so without ep only a replica's tp rank 0 receives it. */
static int bias_on_rank0_only(const rf_layout *lay, const rf_tensor *t) {
  return t->kind == RF_T_EXPERT_DOWN_BIAS && !expert_parallel(lay, t);
}

int rf_layout_rollout_shared(const rf_layout *lay, int tensor) {
  return expert_parallel(lay, &lay->model->tensors[tensor]);
}

int rf_layout_rollout_owner(const rf_layout *lay, int tensor) {
  const rf_tensor *t = &lay->model->tensors[tensor];
  return expert_parallel(lay, t) ? (int)(t->expert / lay->expert_group) : -1;
}

rf_box rf_layout_rollout_box(const rf_layout *lay, int tensor, int rollout_rank) {
  const rf_model *m = lay->model;
  const rf_tensor *t = &m->tensors[tensor];
  int R = lay->rollout.tp, r = rollout_rank % R;
  rf_box b = rf_box_whole(t);
  if (expert_parallel(lay, t)) {
    if (t->expert / lay->expert_group != rollout_rank)
      b.hi[0] = b.lo[0], b.hi[1] = b.lo[1];
    return b;
  }
  if (bias_on_rank0_only(lay, t)) {
    if (r != 0)
      b.hi[0] = b.lo[0], b.hi[1] = b.lo[1];
  } else if (t->kind == RF_T_EMBED || t->kind == RF_T_LM_HEAD) {
    int64_t rows = lay->vocab_padded / R;
    b.lo[0] = RF_MIN(r * rows, m->vocab);
    b.hi[0] = RF_MIN((r + 1) * rows, m->vocab);
  } else if (layout_is_kv(t->kind)) {
    /* kv heads split when R <= K, replicated when R > K (rank r holds head r / (R/K)). */
    int64_t first = R <= m->kv_heads ? r * (m->kv_heads / R) : r / (R / m->kv_heads);
    int64_t count = R <= m->kv_heads ? m->kv_heads / R : 1;
    b.lo[0] = first * m->head_dim;
    b.hi[0] = (first + count) * m->head_dim;
  } else {
    int dim = rf_layout_rollout_split_dim(lay, tensor);
    if (dim >= 0) {
      int64_t part = t->shape[dim] / R;
      b.lo[dim] = r * part;
      b.hi[dim] = b.lo[dim] + part;
    }
  }
  return b;
}

/* vLLM's rules as one-line errors: heads, kv heads, MLP widths and the padded vocabulary must
 * divide over the rollout tp; `heads` selects the head checks (run first over the model). */
static rf_status check_rollout(const rf_layout *lay, const rf_tensor *t, int heads) {
  const rf_model *m = lay->model;
  int R = lay->rollout.tp;
  int64_t width = mlp_width(m, t->kind);
  if (heads && rollout_head_width(m, t->kind) && m->heads % R)
    return rf_fail(RF_ERR_LAYOUT,
                   "layout: %s dim %d has %lld heads, which do not divide over rollout tp=%d; "
                   "choose a rollout tp that divides %lld",
                   t->name, row_parallel(t->kind) ? 1 : 0, (long long)m->heads, R,
                   (long long)m->heads);
  if (heads && layout_is_kv(t->kind) &&
      ((R <= m->kv_heads && m->kv_heads % R) || (R > m->kv_heads && R % m->kv_heads)))
    return rf_fail(RF_ERR_LAYOUT,
                   "layout: %s dim 0 has %lld kv heads, which neither divide over nor "
                   "replicate evenly across rollout tp=%d; choose a rollout tp that divides "
                   "or is a multiple of %lld",
                   t->name, (long long)m->kv_heads, R, (long long)m->kv_heads);
  if (!heads && width && !expert_parallel(lay, t) && width % R &&
      (t->kind == RF_T_EXPERT_GATE_UP || t->kind == RF_T_EXPERT_GATE_UP_BIAS))
    return rf_fail(RF_ERR_LAYOUT,
                   "layout: %s dim 0 has %lld interleaved gate/up row pairs, which do not divide "
                   "over rollout tp=%d; choose a rollout tp that divides %lld or add ep to the "
                   "rollout",
                   t->name, (long long)width, R, (long long)width);
  if (!heads && width && !expert_parallel(lay, t) && width % R)
    return rf_fail(RF_ERR_LAYOUT,
                   "layout: %s dim %d has size %lld, which does not divide over rollout "
                   "tp=%d; choose a rollout tp that divides %lld%s",
                   t->name, row_parallel(t->kind) ? 1 : 0, (long long)width, R, (long long)width,
                   t->expert >= 0 ? " or add ep to the rollout" : "");
  if (!heads && (t->kind == RF_T_EMBED || t->kind == RF_T_LM_HEAD) && lay->vocab_padded % R)
    return rf_fail(RF_ERR_LAYOUT,
                   "layout: %s dim 0 has %lld rows (padded to %lld), which do not divide over "
                   "rollout tp=%d; choose a rollout tp that divides %lld",
                   t->name, (long long)m->vocab, (long long)lay->vocab_padded, R,
                   (long long)lay->vocab_padded);
  return RF_OK;
}

/* With ep, vLLM gives each of the tp*dp ranks E/(tp*dp) consecutive experts (its default
 * linear placement); refit asks that they divide evenly, so every rank's tensors agree. */
static rf_status init_expert_group(rf_layout *lay) {
  const rf_model *m = lay->model;
  int ranks = lay->rollout_ranks;
  if (!lay->rollout.ep)
    return RF_OK;
  if (m->experts == 0)
    return rf_fail(RF_ERR_USAGE, "rollout ep needs experts, and model %s has none; drop ep",
                   m->name);
  if (m->experts % ranks)
    return rf_fail(RF_ERR_USAGE,
                   "rollout ep puts the %lld experts of model %s over tp*dp = %d ranks, which "
                   "do not divide them; choose tp*dp that divides %lld",
                   (long long)m->experts, m->name, ranks, (long long)m->experts);
  lay->expert_group = m->experts / ranks;
  return RF_OK;
}

/* vLLM's gpt_oss.py calls the attention module attn (self_attn in HF) and the embedding
 * model.embedding (HF's model.embed_tokens). */
static void oai_rename(const rf_model *m, char *name, size_t len) {
  if (strcmp(m->model_type, "gpt_oss") != 0)
    return;
  char was[RF_NAME_MAX];
  snprintf(was, sizeof was, "%s", name);
  const char *at = strstr(was, ".self_attn.");
  if (at)
    snprintf(name, len, "%.*s.attn.%s", (int)(at - was), was, at + strlen(".self_attn."));
  else if (strcmp(was, "model.embed_tokens.weight") == 0)
    snprintf(name, len, "model.embedding.weight");
}

/* The fused vLLM tensors: q/k/v -> qkv_proj, gate/up -> gate_up_proj (also the shared
 * experts'), q_a/kv_a -> fused_qkv_a_proj, routed experts -> experts.w13_weight (gate, up;
 * gpt-oss's gate_up) and experts.w2_weight (down), gpt-oss's expert biases ->
 * experts.w13_bias and experts.w2_bias; FUSED_NONE keeps its own name. */
enum {
  FUSED_NONE,
  FUSED_QKV,
  FUSED_GATE_UP,
  FUSED_SHARED,
  FUSED_QKV_A,
  FUSED_W13,
  FUSED_W2,
  FUSED_W13_BIAS,
  FUSED_W2_BIAS,
  FUSED_N
};

static int fused_into(const rf_model *m, const rf_tensor *t) {
  rf_tensor_kind k = t->kind;
  if (k == RF_T_Q || k == RF_T_Q_BIAS || layout_is_kv(k))
    return FUSED_QKV;
  if (k == RF_T_GATE || k == RF_T_UP)
    return FUSED_GATE_UP;
  if (k == RF_T_SHARED_GATE || k == RF_T_SHARED_UP)
    return FUSED_SHARED;
  if ((k == RF_T_Q_A || k == RF_T_KV_A) && m->q_lora_rank)
    return FUSED_QKV_A;
  if (t->expert < 0)
    return FUSED_NONE;
  int down = k == RF_T_EXPERT_DOWN || k == RF_T_EXPERT_DOWN_BIAS;
  if (k == RF_T_EXPERT_GATE_UP_BIAS || k == RF_T_EXPERT_DOWN_BIAS)
    return down ? FUSED_W2_BIAS : FUSED_W13_BIAS;
  return down ? FUSED_W2 : FUSED_W13;
}

/* The vLLM name of the tensor a logical tensor lands in (fused_into), after gpt-oss's renames
 * (oai_rename). */
static void rollout_name(const rf_model *m, const rf_tensor *t, char *out, size_t len) {
  static const char *const from[FUSED_N] = {
      NULL,       "self_attn.", "mlp.",     "shared_experts.", "self_attn.",
      "experts.", "experts.",   "experts.", "experts."};
  static const char *const to[FUSED_N] = {
      NULL,  "qkv_proj", "gate_up_proj", "gate_up_proj", "fused_qkv_a_proj", "w13", "w2",
      "w13", "w2"};
  int f = fused_into(m, t);
  const char *suffix = f == FUSED_W13 || f == FUSED_W2             ? "_weight"
                       : f == FUSED_W13_BIAS || f == FUSED_W2_BIAS ? "_bias"
                                                                   : strrchr(t->name, '.');
  const char *at = f ? strstr(t->name, from[f]) : NULL;
  if (!at)
    snprintf(out, len, "%s", t->name);
  else
    snprintf(out, len, "%.*s%s%s%s", (int)(at - t->name), t->name, from[f], to[f], suffix);
  oai_rename(m, out, len);
}

rf_status rf_layout_global_groups(const rf_model *m, int *leader) {
  /* The first member seen of each fused tensor of the current layer, per expert (slot 0 for
   * tensors that are no expert's): fused members all belong to one layer, and a layer's
   * tensors follow each other in the model. */
  size_t per = (size_t)m->experts + 1;
  int *first = rf_malloc((size_t)FUSED_N * per * sizeof *first, "global scale groups");
  if (!first)
    return RF_ERR_NOMEM;
  int layer = -2;
  for (int i = 0; i < m->tensor_count; i++) {
    const rf_tensor *t = &m->tensors[i];
    leader[i] = -1;
    if (!rf_model_quantizes(m, t))
      continue;
    if (t->layer != layer) {
      layer = t->layer;
      for (size_t j = 0; j < (size_t)FUSED_N * per; j++)
        first[j] = -1;
    }
    int f = fused_into(m, t);
    int *at = &first[(size_t)f * per + (size_t)(t->expert + 1)];
    if (f == FUSED_NONE || *at < 0)
      *at = i;
    leader[i] = f == FUSED_NONE ? i : *at;
  }
  free(first);
  return RF_OK;
}

/* The shape of a new rollout tensor, in refit's 2-D view and vLLM's own. */
static void rollout_shape(const rf_layout *lay, const rf_tensor *t, int fused,
                          rf_rollout_tensor *rt) {
  const rf_model *m = lay->model;
  int R = lay->rollout.tp;
  int64_t experts = lay->expert_group ? lay->expert_group : m->experts;
  int64_t fe = m->expert_intermediate / (lay->expert_group ? 1 : R);
  rf_box b = rf_box_whole(t);
  int dim = rf_layout_rollout_split_dim(lay, t->id);
  if (dim >= 0 && !layout_is_kv(t->kind))
    b.hi[dim] = t->shape[dim] / R;
  if (layout_is_kv(t->kind))
    b = rf_layout_rollout_box(lay, t->id, 0);
  rt->ndim = t->ndim;
  rt->shape[0] = b.hi[0] - b.lo[0];
  rt->shape[1] = b.hi[1] - b.lo[1];
  if (t->kind == RF_T_EMBED || t->kind == RF_T_LM_HEAD)
    rt->shape[0] = lay->vocab_padded / R; /* vLLM allocates the padding rows too */
  if (fused && (t->kind == RF_T_Q || t->kind == RF_T_Q_BIAS))
    rt->shape[0] =
        m->heads / R * m->head_dim + 2 * (R <= m->kv_heads ? m->kv_heads / R : 1) * m->head_dim;
  if (fused && (t->kind == RF_T_GATE || t->kind == RF_T_SHARED_GATE))
    rt->shape[0] = 2 * (mlp_width(m, t->kind) / R);
  if (fused && t->kind == RF_T_Q_A)
    rt->shape[0] = m->q_lora_rank + m->kv_lora_rank + m->qk_rope_head_dim;
  rt->vllm_ndim = rt->ndim;
  rt->vllm_shape[0] = rt->shape[0];
  rt->vllm_shape[1] = rt->shape[1];
  if (t->expert >= 0) {
    /* [experts, rows, cols], or [experts, rows] for gpt-oss's biases, whose refit view is one
     * column. */
    int down = t->kind == RF_T_EXPERT_DOWN || t->kind == RF_T_EXPERT_DOWN_BIAS;
    int bias = t->ndim == 1;
    rt->ndim = bias ? 1 : 2;
    rt->shape[0] = experts * (down ? m->hidden : 2 * fe);
    rt->shape[1] = bias ? 1 : down ? fe : m->hidden;
    rt->vllm_ndim = bias ? 2 : 3;
    rt->vllm_shape[0] = experts;
    rt->vllm_shape[1] = down ? m->hidden : 2 * fe;
    rt->vllm_shape[2] = rt->shape[1];
  }
}

/* Where a member's held box starts inside its fused tensor, in rows. */
static int64_t slot_row(const rf_layout *lay, const rf_tensor *t) {
  const rf_model *m = lay->model;
  int R = lay->rollout.tp;
  int64_t q_rows = m->heads / R * m->head_dim;
  int64_t kv_rows = (R <= m->kv_heads ? m->kv_heads / R : 1) * m->head_dim;
  int64_t fe = m->expert_intermediate / (lay->expert_group ? 1 : R);
  int64_t local = lay->expert_group ? t->expert % lay->expert_group : t->expert;
  switch (t->kind) {
  case RF_T_K:
  case RF_T_K_BIAS:
    return q_rows;
  case RF_T_V:
  case RF_T_V_BIAS:
    return q_rows + kv_rows;
  case RF_T_UP:
  case RF_T_SHARED_UP:
    return mlp_width(m, t->kind) / R;
  case RF_T_KV_A:
    return m->q_lora_rank; /* 0 when kv_a_proj_with_mqa stays a tensor of its own */
  case RF_T_EXPERT_GATE:
  case RF_T_EXPERT_GATE_UP:
  case RF_T_EXPERT_GATE_UP_BIAS:
    return local * 2 * fe;
  case RF_T_EXPERT_UP:
    return local * 2 * fe + fe;
  case RF_T_EXPERT_DOWN:
  case RF_T_EXPERT_DOWN_BIAS:
    return local * m->hidden;
  default:
    return 0;
  }
}

rf_status layout_check_rollout(const rf_layout *lay) {
  const rf_model *m = lay->model;
  for (int heads = 1; heads >= 0; heads--)
    for (int i = 0; i < m->tensor_count; i++)
      RF_TRY(check_rollout(lay, &m->tensors[i], heads));
  return RF_OK;
}

rf_status layout_init_rollout(rf_layout *lay) {
  const rf_model *m = lay->model;
  RF_TRY(init_expert_group(lay));
  RF_TRY(layout_check_rollout(lay));
  /* Room for a scale and a global scale beside every tensor, which quantized rollouts add
   * (layout_fp8.c). */
  lay->rollout_tensors =
      rf_calloc(3 * (size_t)m->tensor_count, sizeof *lay->rollout_tensors, "rollout tensors");
  lay->slots = rf_calloc((size_t)m->tensor_count, sizeof *lay->slots, "rollout slots");
  if (!lay->rollout_tensors || !lay->slots)
    return RF_ERR_NOMEM;
  int layer = -2, layer_first = 0;
  for (int i = 0; i < m->tensor_count; i++) {
    const rf_tensor *t = &m->tensors[i];
    char name[RF_NAME_MAX];
    rollout_name(m, t, name, sizeof name);
    if (t->layer != layer) /* fused members all belong to one layer */
      layer = t->layer, layer_first = lay->rollout_tensor_count;
    int local = -1;
    for (int j = layer_first; j < lay->rollout_tensor_count && local < 0; j++)
      if (strcmp(lay->rollout_tensors[j].name, name) == 0)
        local = j;
    if (local < 0) {
      rf_rollout_tensor *rt = &lay->rollout_tensors[local = lay->rollout_tensor_count++];
      snprintf(rt->name, sizeof rt->name, "%s", name);
      rt->scale_of = -1;
      rollout_shape(lay, t, strcmp(name, t->name) != 0, rt);
      rt->dtype = t->dtype;
      rt->numel = rt->shape[0] * rt->shape[1];
      rt->bytes = rt->numel * rf_dtype_size(rt->dtype);
    }
    lay->slots[i].local = local;
    lay->slots[i].row = slot_row(lay, t);
  }
  return rf_layout_format(lay) ? layout_init_fp8(lay) : RF_OK;
}
