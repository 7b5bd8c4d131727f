/* Listing the logical tensors that a config's fields imply, in the order the HF modeling code
 * declares them (which is the order of its named parameters): the embedding, each layer's
 * attention, MLP or mixture of experts and norms, the final norm, the lm_head. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_spec.h"

/* A bound on the list's memory (about 150 bytes a tensor) that a typo in a layer or expert count
 * reaches before the machine runs out; DeepSeek-V3 has 45,395 tensors. */
#define MAX_TENSORS 1000000

/* Appends one tensor in the model's dtype; cols == 0 makes it 1-D. The element and byte counts
 * are checked for overflow because the dims come from a file. */
static rf_status add(rf_model *m, const char *path, rf_tensor_kind kind, int layer, int64_t rows,
                     int64_t cols, const char *prefix, const char *suffix, int *capacity) {
  if (m->tensor_count >= MAX_TENSORS)
    return rf_fail(RF_ERR_MODEL,
                   "model %s: more than %d tensors, more than refit supports; check the layer "
                   "and expert counts in the file",
                   path, MAX_TENSORS);
  if (m->tensor_count == *capacity) {
    int grown = *capacity ? RF_MIN(2 * *capacity, MAX_TENSORS) : 1024;
    rf_tensor *more =
        rf_realloc(m->tensors, (size_t)grown * sizeof *more, "the model's tensor list");
    if (!more)
      return RF_ERR_NOMEM;
    memset(more + *capacity, 0, (size_t)(grown - *capacity) * sizeof *more);
    m->tensors = more;
    *capacity = grown;
  }
  rf_tensor *t = &m->tensors[m->tensor_count];
  t->id = m->tensor_count;
  snprintf(t->name, sizeof t->name, "%s%s", prefix, suffix);
  t->kind = kind;
  t->layer = layer;
  t->expert = -1;
  t->ndim = cols ? 2 : 1;
  t->shape[0] = rows;
  t->shape[1] = cols ? cols : 1;
  /* DeepSeek and vLLM keep the router's score-correction bias in fp32 whatever the weights. */
  t->own_dtype = kind == RF_T_ROUTER_BIAS;
  t->dtype = t->own_dtype ? RF_DTYPE_FP32 : m->dtype;
  if (__builtin_mul_overflow(t->shape[0], t->shape[1], &t->numel) ||
      __builtin_mul_overflow(t->numel, (int64_t)rf_dtype_size(t->dtype), &t->bytes) ||
      __builtin_add_overflow(m->total_params, t->numel, &m->total_params) ||
      __builtin_add_overflow(m->total_bytes, t->bytes, &m->total_bytes))
    return rf_fail(RF_ERR_MODEL,
                   "model %s: tensor %s makes the model larger than a 64-bit "
                   "byte count; check the sizes in the file",
                   path, t->name);
  m->tensor_count++;
  return RF_OK;
}

/* The state of one listing: the model, its file (for messages) and the array's capacity. */
typedef struct {
  rf_model *m;
  const char *path;
  int capacity;
  int layer;
  char prefix[32]; /* "model.layers.N.", sized for N < 10000 */
} lister;

static rf_status put(lister *l, rf_tensor_kind kind, int64_t rows, int64_t cols,
                     const char *suffix) {
  return add(l->m, l->path, kind, l->layer, rows, cols, l->prefix, suffix, &l->capacity);
}

/* Grouped-query attention: llama's q/k/v/o, qwen2's biases, gemma3's and qwen3's head norms. */
static rf_status add_gqa(lister *l) {
  const rf_model *m = l->m;
  const int64_t d = m->hidden, h = m->head_dim, q = m->heads * h, kv = m->kv_heads * h;
  RF_TRY(put(l, RF_T_Q, q, d, "self_attn.q_proj.weight"));
  if (m->qkv_bias)
    RF_TRY(put(l, RF_T_Q_BIAS, q, 0, "self_attn.q_proj.bias"));
  RF_TRY(put(l, RF_T_K, kv, d, "self_attn.k_proj.weight"));
  if (m->qkv_bias)
    RF_TRY(put(l, RF_T_K_BIAS, kv, 0, "self_attn.k_proj.bias"));
  RF_TRY(put(l, RF_T_V, kv, d, "self_attn.v_proj.weight"));
  if (m->qkv_bias)
    RF_TRY(put(l, RF_T_V_BIAS, kv, 0, "self_attn.v_proj.bias"));
  RF_TRY(put(l, RF_T_O, d, q, "self_attn.o_proj.weight"));
  if (m->o_bias)
    RF_TRY(put(l, RF_T_O_BIAS, d, 0, "self_attn.o_proj.bias"));
  if (m->sinks)
    RF_TRY(put(l, RF_T_SINKS, m->heads, 0, "self_attn.sinks"));
  if (m->head_norms) {
    RF_TRY(put(l, RF_T_HEAD_NORM, h, 0, "self_attn.q_norm.weight"));
    RF_TRY(put(l, RF_T_HEAD_NORM, h, 0, "self_attn.k_norm.weight"));
  }
  return RF_OK;
}

/* Multi-head latent attention: q through a low-rank pair when q_lora_rank is set, k and v
 * through one compressed latent shared by all heads plus a rope part. */
static rf_status add_mla(lister *l) {
  const rf_model *m = l->m;
  const int64_t d = m->hidden, n = m->heads, qk = m->qk_nope_head_dim + m->qk_rope_head_dim;
  if (m->q_lora_rank) {
    RF_TRY(put(l, RF_T_Q_A, m->q_lora_rank, d, "self_attn.q_a_proj.weight"));
    RF_TRY(put(l, RF_T_Q_A_NORM, m->q_lora_rank, 0, "self_attn.q_a_layernorm.weight"));
    RF_TRY(put(l, RF_T_Q_B, n * qk, m->q_lora_rank, "self_attn.q_b_proj.weight"));
  } else {
    RF_TRY(put(l, RF_T_MLA_Q, n * qk, d, "self_attn.q_proj.weight"));
  }
  RF_TRY(put(l, RF_T_KV_A, m->kv_lora_rank + m->qk_rope_head_dim, d,
             "self_attn.kv_a_proj_with_mqa.weight"));
  RF_TRY(put(l, RF_T_KV_A_NORM, m->kv_lora_rank, 0, "self_attn.kv_a_layernorm.weight"));
  RF_TRY(put(l, RF_T_KV_B, n * (m->qk_nope_head_dim + m->v_head_dim), m->kv_lora_rank,
             "self_attn.kv_b_proj.weight"));
  return put(l, RF_T_O, d, n * m->v_head_dim, "self_attn.o_proj.weight");
}

/* One routed expert, named and ordered the family's way: Mixtral declares w1 (gate), w2 (down),
 * w3 (up); the others gate_proj, up_proj, down_proj. */
typedef struct {
  rf_tensor_kind kind;
  const char *name;
} expert_part;

static rf_status add_expert(lister *l, rf_moe_style style, int64_t e) {
  static const expert_part mixtral[3] = {
      {RF_T_EXPERT_GATE, "w1"}, {RF_T_EXPERT_DOWN, "w2"}, {RF_T_EXPERT_UP, "w3"}};
  static const expert_part others[3] = {{RF_T_EXPERT_GATE, "gate_proj"},
                                        {RF_T_EXPERT_UP, "up_proj"},
                                        {RF_T_EXPERT_DOWN, "down_proj"}};
  const expert_part *parts = style == RF_MOE_MIXTRAL ? mixtral : others;
  const int64_t d = l->m->hidden, fe = l->m->expert_intermediate;
  for (int i = 0; i < 3; i++) {
    char suffix[64];
    int n =
        snprintf(suffix, sizeof suffix, "%s.experts.%lld.%s.weight",
                 style == RF_MOE_MIXTRAL ? "block_sparse_moe" : "mlp", (long long)e, parts[i].name);
    if (n < 0 || n >= (int)sizeof suffix)
      return rf_fail(RF_ERR_INTERNAL, "model %s: expert name too long", l->path);
    int down = parts[i].kind == RF_T_EXPERT_DOWN;
    RF_TRY(put(l, parts[i].kind, down ? d : fe, down ? fe : d, suffix));
    l->m->tensors[l->m->tensor_count - 1].expert = (int)e;
  }
  return RF_OK;
}

static rf_status add_experts(lister *l, rf_moe_style style) {
  for (int64_t e = 0; e < l->m->experts; e++)
    RF_TRY(add_expert(l, style, e));
  return RF_OK;
}

/* gpt-oss's checkpoint stacks each part of every expert into one tensor of the layer
 * (experts.gate_up_proj [E, D, 2Fe], ...), so the experts are listed part by part: every
 * expert's gate_up, then every gate_up bias, every down, every down bias. Each is a logical
 * tensor of its own in [out, in] orientation (rf_model_stack says where it lies in the file). */
static rf_status add_gpt_oss_experts(lister *l) {
  static const struct {
    rf_tensor_kind kind;
    const char *name;
  } parts[4] = {{RF_T_EXPERT_GATE_UP, "gate_up_proj"},
                {RF_T_EXPERT_GATE_UP_BIAS, "gate_up_proj_bias"},
                {RF_T_EXPERT_DOWN, "down_proj"},
                {RF_T_EXPERT_DOWN_BIAS, "down_proj_bias"}};
  const int64_t d = l->m->hidden, fe = l->m->expert_intermediate;
  const int64_t rows[4] = {2 * fe, 2 * fe, d, d}, cols[4] = {d, 0, fe, 0};
  for (int i = 0; i < 4; i++)
    for (int64_t e = 0; e < l->m->experts; e++) {
      char suffix[64];
      int n = snprintf(suffix, sizeof suffix, "mlp.experts.%lld.%s", (long long)e, parts[i].name);
      if (n < 0 || n >= (int)sizeof suffix)
        return rf_fail(RF_ERR_INTERNAL, "model %s: expert name too long", l->path);
      RF_TRY(put(l, parts[i].kind, rows[i], cols[i], suffix));
      l->m->tensors[l->m->tensor_count - 1].expert = (int)e;
    }
  return RF_OK;
}

static rf_status add_moe(lister *l, rf_moe_style style) {
  const rf_model *m = l->m;
  const int64_t d = m->hidden, fs = m->shared_intermediate;
  if (style == RF_MOE_GPT_OSS) {
    RF_TRY(put(l, RF_T_ROUTER, m->experts, d, "mlp.router.weight"));
    RF_TRY(put(l, RF_T_ROUTER_LINEAR_BIAS, m->experts, 0, "mlp.router.bias"));
    return add_gpt_oss_experts(l);
  }
  if (style == RF_MOE_MIXTRAL) {
    RF_TRY(put(l, RF_T_ROUTER, m->experts, d, "block_sparse_moe.gate.weight"));
    return add_experts(l, style);
  }
  if (style == RF_MOE_QWEN3) {
    RF_TRY(put(l, RF_T_ROUTER, m->experts, d, "mlp.gate.weight"));
    return add_experts(l, style);
  }
  RF_TRY(add_experts(l, style));
  RF_TRY(put(l, RF_T_ROUTER, m->experts, d, "mlp.gate.weight"));
  if (m->router_bias)
    RF_TRY(put(l, RF_T_ROUTER_BIAS, m->experts, 0, "mlp.gate.e_score_correction_bias"));
  if (fs) {
    RF_TRY(put(l, RF_T_SHARED_GATE, fs, d, "mlp.shared_experts.gate_proj.weight"));
    RF_TRY(put(l, RF_T_SHARED_UP, fs, d, "mlp.shared_experts.up_proj.weight"));
    RF_TRY(put(l, RF_T_SHARED_DOWN, d, fs, "mlp.shared_experts.down_proj.weight"));
  }
  return RF_OK;
}

static rf_status add_layer(lister *l, const rf_model_recipe *r) {
  const rf_model *m = l->m;
  const int64_t d = m->hidden, f = m->intermediate;
  snprintf(l->prefix, sizeof l->prefix, "model.layers.%d.", l->layer);
  RF_TRY(m->mla ? add_mla(l) : add_gqa(l));
  if (r->moe != RF_MOE_NONE && r->moe_layer[l->layer]) {
    RF_TRY(add_moe(l, r->moe));
  } else {
    RF_TRY(put(l, RF_T_GATE, f, d, "mlp.gate_proj.weight"));
    RF_TRY(put(l, RF_T_UP, f, d, "mlp.up_proj.weight"));
    RF_TRY(put(l, RF_T_DOWN, d, f, "mlp.down_proj.weight"));
  }
  RF_TRY(put(l, RF_T_NORM, d, 0, "input_layernorm.weight"));
  RF_TRY(put(l, RF_T_NORM, d, 0, "post_attention_layernorm.weight"));
  if (m->norms_per_layer == 4) {
    RF_TRY(put(l, RF_T_NORM, d, 0, "pre_feedforward_layernorm.weight"));
    RF_TRY(put(l, RF_T_NORM, d, 0, "post_feedforward_layernorm.weight"));
  }
  return RF_OK;
}

rf_status rf_model_build_tensors(rf_model *m, const char *path, const rf_model_recipe *r) {
  lister l = {.m = m, .path = path, .layer = -1};
  m->tensors = NULL;
  m->tensor_count = 0;
  m->total_params = m->total_bytes = 0;
  RF_TRY(add(m, path, RF_T_EMBED, -1, m->vocab, m->hidden, "model.", "embed_tokens.weight",
             &l.capacity));
  for (l.layer = 0; l.layer < (int)m->layers; l.layer++)
    RF_TRY(add_layer(&l, r));
  RF_TRY(add(m, path, RF_T_NORM, -1, m->hidden, 0, "model.", "norm.weight", &l.capacity));
  if (!m->tied_embeddings)
    RF_TRY(add(m, path, RF_T_LM_HEAD, -1, m->vocab, m->hidden, "", "lm_head.weight", &l.capacity));
  return RF_OK;
}

int rf_model_stack(const rf_model *m, const rf_tensor *t, rf_stack *out) {
  if (!m->stacked_experts || t->expert < 0)
    return 0;
  /* "model.layers.L.mlp.experts.E.part" is a member of "model.layers.L.mlp.experts.part". */
  const char *at = strstr(t->name, ".experts.");
  const char *part = at ? strchr(at + strlen(".experts."), '.') : NULL;
  if (!part)
    return 0;
  snprintf(out->name, sizeof out->name, "%.*s.experts%s", (int)(at - t->name), t->name, part);
  out->member = t->expert;
  out->members = m->experts;
  out->transposed = t->ndim == 2 && !t->stack_split;
  out->ndim = t->ndim + 1;
  memset(out->shape, 0, sizeof out->shape);
  out->shape[0] = m->experts;
  if (t->ndim == 1)
    out->shape[1] = t->shape[0];
  else if (t->ndim == 2) {
    out->shape[1] = t->shape[out->transposed ? 1 : 0];
    out->shape[2] = t->shape[out->transposed ? 0 : 1];
  }
  if (t->ndim == 2 && t->stack_split > 1) {
    out->ndim = 4;
    out->shape[2] = t->shape[1] / t->stack_split;
    out->shape[3] = t->stack_split;
  }
  return 1;
}
