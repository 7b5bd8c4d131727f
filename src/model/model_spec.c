/* Reading a Hugging Face config.json: which supported architecture it is, and the fields that
 * decide its tensors' shapes (model_tensors.c lists them). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_spec.h"

/* What each supported architecture adds to the llama skeleton. Everything else (the embedding,
 * per-layer norms, the final norm, an optional lm_head) is common to all. */
typedef struct {
  const char *model_type;
  const char *architecture; /* the HF class that architectures[0] names */
  int qkv_bias;             /* q/k/v projections carry biases (qwen2) */
  int norms_per_layer;      /* 2, or 4 with gemma2's pre/post feed-forward norms */
  int head_norms;           /* per-head q_norm and k_norm (gemma3, qwen3) */
  int tied_default;         /* HF's default for tie_word_embeddings when the key is absent */
  rf_moe_style moe;         /* how its MLPs become mixtures of experts, if they do */
  int mla;                  /* multi-head latent attention */
  int bias_key;             /* has attention_bias: BIAS_REFUSED or BIAS_READ, else 0 */
  int sinks;                /* per-head attention sinks (gpt_oss) */
  /* The type's own quantization, for configs without a quantization_config: its format and
   * the kinds it covers (0: every linear weight). */
  const char *native_format;
  uint64_t native_kinds;
} arch;

/* gpt-oss's MXFP4 covers the routed experts' weights only: its checkpoints hold attention,
 * router, embeddings and lm_head in bf16, and vLLM's Mxfp4 method quantizes FusedMoE layers
 * alone. */
#define GPT_OSS_EXPERTS (RF_KIND_BIT(RF_T_EXPERT_GATE_UP) | RF_KIND_BIT(RF_T_EXPERT_DOWN))

/* qwen3 and DeepSeek have attention_bias, which refit supports only as false; gpt-oss reads it
 * (HF's default true) to give q, k, v and o their biases. */
enum { BIAS_REFUSED = 1, BIAS_READ = 2 };

/* Gemma configs often ship without tie_word_embeddings because the HF config classes for
 * gemma default it to true; the others default it to false. */
static const arch archs[] = {
    {"llama", "LlamaForCausalLM", 0, 2, 0, 0, RF_MOE_NONE, 0, 0, 0, NULL, 0},
    {"mistral", "MistralForCausalLM", 0, 2, 0, 0, RF_MOE_NONE, 0, 0, 0, NULL, 0},
    {"qwen2", "Qwen2ForCausalLM", 1, 2, 0, 0, RF_MOE_NONE, 0, 0, 0, NULL, 0},
    {"qwen3", "Qwen3ForCausalLM", 0, 2, 1, 0, RF_MOE_NONE, 0, BIAS_REFUSED, 0, NULL, 0},
    {"gemma", "GemmaForCausalLM", 0, 2, 0, 1, RF_MOE_NONE, 0, 0, 0, NULL, 0},
    {"gemma2", "Gemma2ForCausalLM", 0, 4, 0, 1, RF_MOE_NONE, 0, 0, 0, NULL, 0},
    {"gemma3_text", "Gemma3ForCausalLM", 0, 4, 1, 1, RF_MOE_NONE, 0, 0, 0, NULL, 0},
    {"mixtral", "MixtralForCausalLM", 0, 2, 0, 0, RF_MOE_MIXTRAL, 0, 0, 0, NULL, 0},
    {"qwen3_moe", "Qwen3MoeForCausalLM", 0, 2, 1, 0, RF_MOE_QWEN3, 0, BIAS_REFUSED, 0, NULL, 0},
    {"deepseek_v2", "DeepseekV2ForCausalLM", 0, 2, 0, 0, RF_MOE_DEEPSEEK, 1, BIAS_REFUSED, 0, NULL,
     0},
    {"deepseek_v3", "DeepseekV3ForCausalLM", 0, 2, 0, 0, RF_MOE_DEEPSEEK, 1, BIAS_REFUSED, 0, NULL,
     0},
    {"gpt_oss", "GptOssForCausalLM", 0, 2, 0, 0, RF_MOE_GPT_OSS, 0, BIAS_READ, 1, "mxfp4",
     GPT_OSS_EXPERTS},
};
#define SUPPORTED_TYPES                                                                            \
  "llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, mixtral, qwen3_moe, deepseek_v2, "    \
  "deepseek_v3, gpt_oss"

/* Bounds that keep every later product in int64 and every tensor index in an int. No real
 * model comes near them; a value past them is a typo in the file. */
#define MAX_DIM ((int64_t)INT32_MAX)
#define MAX_LAYERS 10000
#define MAX_EXPERTS 65536

/* Reads a positive integer key. An optional key that is absent or null leaves *out as it is,
 * so the caller sets the default first. */
static rf_status get_dim(json_t *root, const char *path, const char *key, int optional,
                         int64_t limit, int64_t *out) {
  json_t *v = json_object_get(root, key);
  if (optional && (!v || json_is_null(v)))
    return RF_OK;
  if (!v || !json_is_integer(v) || json_integer_value(v) <= 0)
    return rf_fail(RF_ERR_MODEL, "model %s: key '%s' is missing or not a positive integer", path,
                   key);
  if (json_integer_value(v) > limit)
    return rf_fail(RF_ERR_MODEL,
                   "model %s: key '%s' is %" JSON_INTEGER_FORMAT
                   ", more than refit supports (%lld)",
                   path, key, json_integer_value(v), (long long)limit);
  *out = (int64_t)json_integer_value(v);
  return RF_OK;
}

/* Reads a non-negative integer key (a count that may be zero), with the same conventions. */
static rf_status get_count(json_t *root, const char *path, const char *key, int optional,
                           int64_t limit, int64_t *out) {
  json_t *v = json_object_get(root, key);
  if (optional && (!v || json_is_null(v)))
    return RF_OK;
  if (!v || !json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > limit)
    return rf_fail(RF_ERR_MODEL, "model %s: key '%s' is missing or not an integer from 0 to %lld",
                   path, key, (long long)limit);
  *out = (int64_t)json_integer_value(v);
  return RF_OK;
}

/* Reads a key that must be present and may be null, meaning "none" (0): DeepSeek's q_lora_rank
 * and n_shared_experts. Requiring the key keeps a forgotten one from reading as "none". */
static rf_status get_nullable(json_t *root, const char *path, const char *key, int64_t limit,
                              int64_t *out) {
  json_t *v = json_object_get(root, key);
  *out = 0;
  if (v && json_is_null(v))
    return RF_OK;
  if (!v || !json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > limit)
    return rf_fail(RF_ERR_MODEL,
                   "model %s: key '%s' is missing or not null or an integer from 0 to %lld", path,
                   key, (long long)limit);
  *out = (int64_t)json_integer_value(v);
  return RF_OK;
}

/* torch_dtype is the long-standing key; recent transformers releases write `dtype` instead. */
static rf_status get_dtype(json_t *root, const char *path, rf_dtype *out) {
  const char *key = "torch_dtype";
  json_t *v = json_object_get(root, key);
  if (!v || json_is_null(v)) {
    key = "dtype";
    v = json_object_get(root, key);
  }
  *out = RF_DTYPE_BF16;
  if (!v || json_is_null(v))
    return RF_OK;
  if (!json_is_string(v) || rf_dtype_parse(json_string_value(v), out) != RF_OK)
    return rf_fail(RF_ERR_MODEL, "model %s: key '%s' must be one of bfloat16, float16, float32",
                   path, key);
  return RF_OK;
}

static rf_status get_tied(json_t *root, const char *path, int dflt, int *out) {
  json_t *v = json_object_get(root, "tie_word_embeddings");
  if (!v || json_is_null(v))
    *out = dflt;
  else if (json_is_boolean(v))
    *out = json_is_true(v);
  else
    return rf_fail(RF_ERR_MODEL, "model %s: key 'tie_word_embeddings' must be true or false", path);
  return RF_OK;
}

/* Picks the architecture as vLLM does: by the HF class in architectures[0], falling back to
 * model_type, so that a DeepseekV3ForCausalLM whose model_type names a derivative still loads. */
static rf_status pick_arch(json_t *root, const char *path, const arch **out) {
  json_t *classes = json_object_get(root, "architectures");
  const char *cls = NULL;
  if (classes && !json_is_null(classes)) {
    if (!json_is_array(classes) || !json_is_string(json_array_get(classes, 0)))
      return rf_fail(RF_ERR_MODEL,
                     "model %s: key 'architectures' must be a list of HF class names, such as "
                     "[\"LlamaForCausalLM\"]",
                     path);
    cls = json_string_value(json_array_get(classes, 0));
    for (size_t i = 0; i < RF_ARRAY_LEN(archs); i++)
      if (strcmp(cls, archs[i].architecture) == 0)
        return *out = &archs[i], RF_OK;
  }
  json_t *type = json_object_get(root, "model_type");
  const char *name = type && json_is_string(type) ? json_string_value(type) : NULL;
  for (size_t i = 0; name && i < RF_ARRAY_LEN(archs); i++)
    if (strcmp(name, archs[i].model_type) == 0)
      return *out = &archs[i], RF_OK;
  if (!cls && !name)
    return rf_fail(RF_ERR_MODEL, "model %s: key 'model_type' is missing or not a string", path);
  if (!cls)
    return rf_fail(RF_ERR_MODEL,
                   "model %s: model_type '%s' is not supported; supported: " SUPPORTED_TYPES, path,
                   name);
  return rf_fail(RF_ERR_MODEL,
                 "model %s: architecture '%s' (model_type '%s') is not supported; supported: "
                 "the HF classes of " SUPPORTED_TYPES,
                 path, cls, name ? name : "none");
}

/* Grouped-query attention's shapes: kv heads dividing the heads, and a head size. */
static rf_status read_gqa(json_t *root, const char *path, rf_model *m) {
  m->kv_heads = m->heads;
  RF_TRY(get_dim(root, path, "num_key_value_heads", 1, MAX_DIM, &m->kv_heads));
  if (m->heads % m->kv_heads != 0)
    return rf_fail(RF_ERR_MODEL,
                   "model %s: num_attention_heads %lld is not a multiple of "
                   "num_key_value_heads %lld",
                   path, (long long)m->heads, (long long)m->kv_heads);
  m->head_dim = 0;
  RF_TRY(get_dim(root, path, "head_dim", 1, MAX_DIM, &m->head_dim));
  if (m->head_dim == 0) {
    if (m->hidden % m->heads != 0)
      return rf_fail(RF_ERR_MODEL,
                     "model %s: hidden_size %lld is not a multiple of "
                     "num_attention_heads %lld; add the key 'head_dim'",
                     path, (long long)m->hidden, (long long)m->heads);
    m->head_dim = m->hidden / m->heads;
  }
  return RF_OK;
}

/* Multi-head latent attention's ranks and per-head widths. Every head has its own slice of
 * kv_b_proj, so the kv heads are the heads; o_proj's heads are v_head_dim wide. */
static rf_status read_mla(json_t *root, const char *path, rf_model *m) {
  m->mla = 1;
  RF_TRY(get_nullable(root, path, "q_lora_rank", MAX_DIM, &m->q_lora_rank));
  RF_TRY(get_dim(root, path, "kv_lora_rank", 0, MAX_DIM, &m->kv_lora_rank));
  RF_TRY(get_dim(root, path, "qk_nope_head_dim", 0, MAX_DIM, &m->qk_nope_head_dim));
  RF_TRY(get_dim(root, path, "qk_rope_head_dim", 0, MAX_DIM, &m->qk_rope_head_dim));
  RF_TRY(get_dim(root, path, "v_head_dim", 0, MAX_DIM, &m->v_head_dim));
  m->kv_heads = m->heads;
  m->head_dim = m->v_head_dim;
  return RF_OK;
}

/* Which layers are mixtures of experts, and the experts' sizes. `moe_layer` has m->layers
 * entries. The rules are the HF (and vLLM) ones: Mixtral and gpt-oss every layer; Qwen3-MoE every
 * decoder_sparse_step-th layer not in mlp_only_layers; DeepSeek every moe_layer_freq-th layer
 * from first_k_dense_replace on. */
static rf_status read_moe(json_t *root, const char *path, const arch *a, rf_model *m,
                          unsigned char *moe_layer) {
  const int64_t layers = m->layers;
  if (a->moe == RF_MOE_MIXTRAL || a->moe == RF_MOE_GPT_OSS) {
    RF_TRY(get_dim(root, path, "num_local_experts", 0, MAX_EXPERTS, &m->experts));
    m->expert_intermediate = m->intermediate;
    memset(moe_layer, 1, (size_t)layers);
    m->stacked_experts = a->moe == RF_MOE_GPT_OSS;
  } else if (a->moe == RF_MOE_QWEN3) {
    int64_t step = 1;
    RF_TRY(get_dim(root, path, "num_experts", 0, MAX_EXPERTS, &m->experts));
    RF_TRY(get_dim(root, path, "moe_intermediate_size", 0, MAX_DIM, &m->expert_intermediate));
    RF_TRY(get_dim(root, path, "decoder_sparse_step", 1, MAX_LAYERS, &step));
    for (int64_t i = 0; i < layers; i++)
      moe_layer[i] = (i + 1) % step == 0;
    json_t *dense = json_object_get(root, "mlp_only_layers");
    if (dense && !json_is_null(dense)) {
      if (!json_is_array(dense))
        return rf_fail(RF_ERR_MODEL, "model %s: key 'mlp_only_layers' must be a list of layers",
                       path);
      for (size_t j = 0; j < json_array_size(dense); j++) {
        json_t *v = json_array_get(dense, j);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= layers)
          return rf_fail(RF_ERR_MODEL,
                         "model %s: key 'mlp_only_layers' holds %s, not a layer from 0 to %lld",
                         path, json_is_integer(v) ? "a layer out of range" : "a non-integer",
                         (long long)layers - 1);
        moe_layer[json_integer_value(v)] = 0;
      }
    }
  } else {
    int64_t shared = 0, first_dense = 0, freq = 1;
    RF_TRY(get_dim(root, path, "n_routed_experts", 0, MAX_EXPERTS, &m->experts));
    RF_TRY(get_dim(root, path, "moe_intermediate_size", 0, MAX_DIM, &m->expert_intermediate));
    RF_TRY(get_nullable(root, path, "n_shared_experts", MAX_EXPERTS, &shared));
    RF_TRY(get_count(root, path, "first_k_dense_replace", 0, MAX_LAYERS, &first_dense));
    RF_TRY(get_dim(root, path, "moe_layer_freq", 1, MAX_LAYERS, &freq));
    m->shared_intermediate = shared * m->expert_intermediate; /* both below 2^31 */
    for (int64_t i = 0; i < layers; i++)
      moe_layer[i] = i >= first_dense && i % freq == 0;
    /* The bias exists only for aux-loss-free routing, which is DeepSeek-V3's default method. */
    json_t *method = json_object_get(root, "topk_method");
    if (method && !json_is_null(method) && !json_is_string(method))
      return rf_fail(RF_ERR_MODEL, "model %s: key 'topk_method' must be a string", path);
    m->router_bias = method && json_is_string(method)
                         ? strcmp(json_string_value(method), "noaux_tc") == 0
                         : strcmp(a->model_type, "deepseek_v3") == 0;
  }
  for (int64_t i = 0; i < layers; i++)
    m->moe_layers += moe_layer[i];
  return RF_OK;
}

/* Reads every architecture field and checks that the attention shapes are consistent.
 * `*moe_layer` is allocated for MoE models (one flag per layer) and owned by the caller. */
static rf_status read_fields(json_t *root, const char *path, rf_model *m, rf_model_recipe *recipe,
                             unsigned char **moe_layer) {
  if (!json_is_object(root))
    return rf_fail(RF_ERR_MODEL,
                   "model %s: the top level is not a JSON object; expected a "
                   "Hugging Face config.json",
                   path);
  const arch *a = NULL;
  RF_TRY(pick_arch(root, path, &a));
  snprintf(m->model_type, sizeof m->model_type, "%s", a->model_type);
  m->qkv_bias = a->qkv_bias;
  m->norms_per_layer = a->norms_per_layer;
  m->head_norms = a->head_norms;

  RF_TRY(get_dim(root, path, "vocab_size", 0, MAX_DIM, &m->vocab));
  RF_TRY(get_dim(root, path, "hidden_size", 0, MAX_DIM, &m->hidden));
  RF_TRY(get_dim(root, path, "intermediate_size", 0, MAX_DIM, &m->intermediate));
  RF_TRY(get_dim(root, path, "num_hidden_layers", 0, MAX_LAYERS, &m->layers));
  RF_TRY(get_dim(root, path, "num_attention_heads", 0, MAX_DIM, &m->heads));
  RF_TRY(a->mla ? read_mla(root, path, m) : read_gqa(root, path, m));
  json_t *bias = json_object_get(root, "attention_bias");
  if (a->bias_key == BIAS_REFUSED && json_is_true(bias))
    return rf_fail(RF_ERR_MODEL,
                   "model %s: key 'attention_bias' is true, which refit does not support for %s",
                   path, a->model_type);
  if (a->bias_key == BIAS_READ && bias && !json_is_null(bias) && !json_is_boolean(bias))
    return rf_fail(RF_ERR_MODEL, "model %s: key 'attention_bias' must be true or false", path);
  if (a->bias_key == BIAS_READ)
    m->qkv_bias = m->o_bias = !json_is_false(bias);
  m->sinks = a->sinks;
  RF_TRY(get_count(root, path, "num_nextn_predict_layers", 1, MAX_LAYERS, &m->mtp_layers));
  recipe->moe = a->moe;
  if (a->moe != RF_MOE_NONE) {
    *moe_layer = rf_calloc((size_t)m->layers, 1, "the model's MoE layers");
    if (!*moe_layer)
      return RF_ERR_NOMEM;
    recipe->moe_layer = *moe_layer;
    RF_TRY(read_moe(root, path, a, m, *moe_layer));
  }
  RF_TRY(get_tied(root, path, a->tied_default, &m->tied_embeddings));
  snprintf(m->native_format, sizeof m->native_format, "%s",
           a->native_format ? a->native_format : "");
  for (int k = 0; k < RF_T_KIND_COUNT && a->native_kinds; k++)
    if (rf_tensor_kind_is_linear((rf_tensor_kind)k) && !(a->native_kinds & RF_KIND_BIT(k)))
      m->unquantized_kinds |= RF_KIND_BIT(k);
  return get_dtype(root, path, &m->dtype);
}

/* Whether pattern p of modules_to_not_convert names module `name`, as transformers'
 * should_convert_module reads one: a match at the start of the name with '*' standing for any
 * run of characters ("model.layers.*.self_attn", "lm_head"), or the name's end. */
static int glob_prefix(const char *p, const char *s) {
  if (*p == '\0')
    return 1;
  if (*p == '*') {
    for (;; s++) {
      if (glob_prefix(p + 1, s))
        return 1;
      if (*s == '\0')
        return 0;
    }
  }
  return *s == *p && glob_prefix(p + 1, s + 1);
}

static int not_converted(json_t *modules, const char *name) {
  size_t n = strlen(name);
  for (size_t j = 0; j < json_array_size(modules); j++) {
    const char *p = json_string_value(json_array_get(modules, j));
    size_t len = strlen(p);
    if (glob_prefix(p, name) || (n >= len && strcmp(name + n - len, p) == 0))
      return 1;
  }
  return 0;
}

/* quantization_config, where the config has one: its quant_method names the model's own format
 * and modules_to_not_convert the modules it leaves in the model's dtype, which replace the
 * type's rule. refit quantizes whole kinds (every layer alike), so a list that leaves some
 * tensors of a kind and not others is refused. */
static rf_status read_quantization(json_t *root, const char *path, rf_model *m) {
  json_t *q = json_object_get(root, "quantization_config");
  if (!json_is_object(q))
    return RF_OK;
  json_t *method = json_object_get(q, "quant_method");
  if (json_is_string(method))
    snprintf(m->native_format, sizeof m->native_format, "%s", json_string_value(method));
  json_t *modules = json_object_get(q, "modules_to_not_convert");
  if (!modules || json_is_null(modules))
    return RF_OK;
  for (size_t j = 0; json_is_array(modules) && j < json_array_size(modules); j++)
    if (!json_is_string(json_array_get(modules, j)))
      modules = NULL;
  if (!json_is_array(modules))
    return rf_fail(RF_ERR_MODEL,
                   "model %s: key 'quantization_config.modules_to_not_convert' must be a list of "
                   "module names",
                   path);
  int kept[RF_T_KIND_COUNT] = {0}, converted[RF_T_KIND_COUNT] = {0};
  int example[RF_T_KIND_COUNT] = {0}; /* a kept tensor of each kind */
  for (int i = 0; i < m->tensor_count; i++) {
    const rf_tensor *t = &m->tensors[i];
    if (!rf_tensor_kind_is_linear(t->kind))
      continue;
    if (!not_converted(modules, t->name)) {
      converted[t->kind]++;
    } else if (!kept[t->kind]++) {
      example[t->kind] = i;
    }
  }
  m->unquantized_kinds = 0;
  for (int k = 0; k < RF_T_KIND_COUNT; k++) {
    if (kept[k] && converted[k])
      return rf_fail(RF_ERR_MODEL,
                     "model %s: quantization_config.modules_to_not_convert keeps %s in the "
                     "model's dtype but not every other %s tensor; refit quantizes a kind in "
                     "every layer alike, so list all of them or none",
                     path, m->tensors[example[k]].name, rf_tensor_kind_name((rf_tensor_kind)k));
    if (kept[k])
      m->unquantized_kinds |= RF_KIND_BIT(k);
  }
  return RF_OK;
}

rf_status rf_model_read_config(const char *path, rf_model *model) {
  json_error_t err;
  char why[128];
  size_t len;
  char *text = rf_read_input(path, RF_INPUT_MAX, &len, why, sizeof why);
  if (!text)
    return rf_fail(RF_ERR_MODEL, "model %s: cannot read: %s; pass a config.json file", path, why);
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  free(text);
  if (!root) {
    return rf_fail(RF_ERR_MODEL, "model %s:%d:%d: %s; fix the JSON in this file", path, err.line,
                   err.column, err.text);
  }
  rf_model_recipe recipe = {RF_MOE_NONE, NULL};
  unsigned char *moe_layer = NULL;
  rf_status st = read_fields(root, path, model, &recipe, &moe_layer);
  if (st == RF_OK)
    st = rf_model_build_tensors(model, path, &recipe);
  if (st == RF_OK)
    st = read_quantization(root, path, model);
  json_decref(root);
  free(moe_layer);
  return st;
}
