/* Reading a Hugging Face config.json and listing the logical tensors it implies, in the order
 * the HF modeling code declares them (which is the order of a checkpoint's index). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_spec.h"

/* What each supported architecture adds to the llama skeleton. Everything else (q/k/v/o,
 * gate/up/down, the embedding, the final norm, an optional lm_head) is common to all. */
typedef struct {
  const char *model_type;
  int qkv_bias;        /* q/k/v projections carry biases (qwen2) */
  int norms_per_layer; /* 2, or 4 with gemma2's pre/post feed-forward norms */
  int head_norms;      /* per-head q_norm and k_norm (gemma3) */
  int tied_default;    /* HF's default for tie_word_embeddings when the key is absent */
} arch;

/* Gemma configs often ship without tie_word_embeddings because the HF config classes for
 * gemma default it to true; the llama, mistral and qwen2 classes default it to false. */
static const arch archs[] = {
    {"llama", 0, 2, 0, 0}, {"mistral", 0, 2, 0, 0}, {"qwen2", 1, 2, 0, 0},
    {"gemma", 0, 2, 0, 1}, {"gemma2", 0, 4, 0, 1},  {"gemma3_text", 0, 4, 1, 1},
};
#define SUPPORTED_TYPES "llama, mistral, qwen2, gemma, gemma2, gemma3_text"

/* Bounds that keep every later product in int64 and every tensor index in an int. No real
 * model comes near them; a value past them is a typo in the file. */
#define MAX_DIM ((int64_t)INT32_MAX)
#define MAX_LAYERS 10000

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

/* Reads every architecture field and checks that the attention shapes are consistent. */
static rf_status read_fields(json_t *root, const char *path, rf_model *m) {
  if (!json_is_object(root))
    return rf_fail(RF_ERR_MODEL,
                   "model %s: the top level is not a JSON object; expected a "
                   "Hugging Face config.json",
                   path);

  json_t *type = json_object_get(root, "model_type");
  if (!type || !json_is_string(type))
    return rf_fail(RF_ERR_MODEL, "model %s: key 'model_type' is missing or not a string", path);
  const arch *a = NULL;
  for (size_t i = 0; i < RF_ARRAY_LEN(archs); i++)
    if (strcmp(json_string_value(type), archs[i].model_type) == 0)
      a = &archs[i];
  if (!a)
    return rf_fail(RF_ERR_MODEL,
                   "model %s: model_type '%s' is not supported; supported: " SUPPORTED_TYPES, path,
                   json_string_value(type));
  snprintf(m->model_type, sizeof m->model_type, "%s", a->model_type);
  m->qkv_bias = a->qkv_bias;
  m->norms_per_layer = a->norms_per_layer;
  m->head_norms = a->head_norms;

  RF_TRY(get_dim(root, path, "vocab_size", 0, MAX_DIM, &m->vocab));
  RF_TRY(get_dim(root, path, "hidden_size", 0, MAX_DIM, &m->hidden));
  RF_TRY(get_dim(root, path, "intermediate_size", 0, MAX_DIM, &m->intermediate));
  RF_TRY(get_dim(root, path, "num_hidden_layers", 0, MAX_LAYERS, &m->layers));
  RF_TRY(get_dim(root, path, "num_attention_heads", 0, MAX_DIM, &m->heads));
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
  RF_TRY(get_tied(root, path, a->tied_default, &m->tied_embeddings));
  return get_dtype(root, path, &m->dtype);
}

/* Appends one tensor; cols == 0 makes it 1-D. The element and byte counts are checked for
 * overflow because the dims come from a file. */
static rf_status add(rf_model *m, const char *path, rf_tensor_kind kind, int layer, int64_t rows,
                     int64_t cols, const char *prefix, const char *suffix) {
  rf_tensor *t = &m->tensors[m->tensor_count];
  t->id = m->tensor_count;
  snprintf(t->name, sizeof t->name, "%s%s", prefix, suffix);
  t->kind = kind;
  t->layer = layer;
  t->ndim = cols ? 2 : 1;
  t->shape[0] = rows;
  t->shape[1] = cols ? cols : 1;
  if (__builtin_mul_overflow(t->shape[0], t->shape[1], &t->numel) ||
      __builtin_mul_overflow(t->numel, (int64_t)rf_dtype_size(m->dtype), &t->bytes) ||
      __builtin_add_overflow(m->total_params, t->numel, &m->total_params) ||
      __builtin_add_overflow(m->total_bytes, t->bytes, &m->total_bytes))
    return rf_fail(RF_ERR_MODEL,
                   "model %s: tensor %s makes the model larger than a 64-bit "
                   "byte count; check the sizes in the file",
                   path, t->name);
  m->tensor_count++;
  return RF_OK;
}

static rf_status add_layer(rf_model *m, const char *path, int i) {
  const int64_t d = m->hidden, f = m->intermediate, h = m->head_dim;
  const int64_t q = m->heads * h, kv = m->kv_heads * h;
  /* Sized for the longest prefix (layers < MAX_LAYERS), so that gcc can see that prefix and
   * suffix always fit in RF_NAME_MAX. */
  char p[32];
  snprintf(p, sizeof p, "model.layers.%d.", i);

  RF_TRY(add(m, path, RF_T_Q, i, q, d, p, "self_attn.q_proj.weight"));
  if (m->qkv_bias)
    RF_TRY(add(m, path, RF_T_Q_BIAS, i, q, 0, p, "self_attn.q_proj.bias"));
  RF_TRY(add(m, path, RF_T_K, i, kv, d, p, "self_attn.k_proj.weight"));
  if (m->qkv_bias)
    RF_TRY(add(m, path, RF_T_K_BIAS, i, kv, 0, p, "self_attn.k_proj.bias"));
  RF_TRY(add(m, path, RF_T_V, i, kv, d, p, "self_attn.v_proj.weight"));
  if (m->qkv_bias)
    RF_TRY(add(m, path, RF_T_V_BIAS, i, kv, 0, p, "self_attn.v_proj.bias"));
  RF_TRY(add(m, path, RF_T_O, i, d, q, p, "self_attn.o_proj.weight"));
  if (m->head_norms) {
    RF_TRY(add(m, path, RF_T_HEAD_NORM, i, h, 0, p, "self_attn.q_norm.weight"));
    RF_TRY(add(m, path, RF_T_HEAD_NORM, i, h, 0, p, "self_attn.k_norm.weight"));
  }
  RF_TRY(add(m, path, RF_T_GATE, i, f, d, p, "mlp.gate_proj.weight"));
  RF_TRY(add(m, path, RF_T_UP, i, f, d, p, "mlp.up_proj.weight"));
  RF_TRY(add(m, path, RF_T_DOWN, i, d, f, p, "mlp.down_proj.weight"));
  RF_TRY(add(m, path, RF_T_NORM, i, d, 0, p, "input_layernorm.weight"));
  RF_TRY(add(m, path, RF_T_NORM, i, d, 0, p, "post_attention_layernorm.weight"));
  if (m->norms_per_layer == 4) {
    RF_TRY(add(m, path, RF_T_NORM, i, d, 0, p, "pre_feedforward_layernorm.weight"));
    RF_TRY(add(m, path, RF_T_NORM, i, d, 0, p, "post_feedforward_layernorm.weight"));
  }
  return RF_OK;
}

static rf_status build_tensors(rf_model *m, const char *path) {
  const int per_layer = 7 + m->norms_per_layer + 3 * m->qkv_bias + 2 * m->head_norms;
  const int count = 1 + (int)m->layers * per_layer + 1 + !m->tied_embeddings;
  m->tensors = rf_calloc((size_t)count, sizeof *m->tensors, "the model's tensor list");
  if (!m->tensors)
    return RF_ERR_NOMEM;
  m->tensor_count = 0;
  m->total_params = m->total_bytes = 0;

  RF_TRY(add(m, path, RF_T_EMBED, -1, m->vocab, m->hidden, "model.", "embed_tokens.weight"));
  for (int i = 0; i < (int)m->layers; i++)
    RF_TRY(add_layer(m, path, i));
  RF_TRY(add(m, path, RF_T_NORM, -1, m->hidden, 0, "model.", "norm.weight"));
  if (!m->tied_embeddings)
    RF_TRY(add(m, path, RF_T_LM_HEAD, -1, m->vocab, m->hidden, "", "lm_head.weight"));
  if (m->tensor_count != count)
    return rf_fail(RF_ERR_INTERNAL, "model %s: listed %d tensors, expected %d", path,
                   m->tensor_count, count);
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
  rf_status st = read_fields(root, path, model);
  json_decref(root);
  if (st != RF_OK)
    return st;
  return build_tensors(model, path);
}
