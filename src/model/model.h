/* model: the logical tensors of a model, read from a Hugging Face config.json.
 *
 * A logical tensor is one parameter under its HF name and HF orientation ([out, in] for linear
 * weights). Every plan, checksum and report speaks in logical tensors and global indices. */
#ifndef RF_MODEL_H
#define RF_MODEL_H

#include <stdint.h>

#include "core/core.h"

typedef enum { RF_DTYPE_BF16 = 0, RF_DTYPE_FP16, RF_DTYPE_FP32 } rf_dtype;
const char *rf_dtype_name(rf_dtype dt);                 /* "bf16", "fp16", "fp32" */
int rf_dtype_size(rf_dtype dt);                         /* bytes per element */
rf_status rf_dtype_parse(const char *s, rf_dtype *out); /* accepts HF torch_dtype names too */

/* What a tensor is decides how every layout splits it. */
#define RF_TENSOR_KIND_LIST(X)                                                                     \
  X(RF_T_EMBED, "embed")         /* embed_tokens [V, D] */                                         \
  X(RF_T_LM_HEAD, "lm_head")     /* lm_head [V, D] */                                              \
  X(RF_T_Q, "q_proj")            /* [N*H, D] */                                                    \
  X(RF_T_K, "k_proj")            /* [K*H, D] */                                                    \
  X(RF_T_V, "v_proj")            /* [K*H, D] */                                                    \
  X(RF_T_O, "o_proj")            /* [D, N*H] */                                                    \
  X(RF_T_GATE, "gate_proj")      /* [F, D] */                                                      \
  X(RF_T_UP, "up_proj")          /* [F, D] */                                                      \
  X(RF_T_DOWN, "down_proj")      /* [D, F] */                                                      \
  X(RF_T_Q_BIAS, "q_bias")       /* [N*H] (qwen2) */                                               \
  X(RF_T_K_BIAS, "k_bias")       /* [K*H] */                                                       \
  X(RF_T_V_BIAS, "v_bias")       /* [K*H] */                                                       \
  X(RF_T_NORM, "norm")           /* [D]: every per-layer and final norm */                         \
  X(RF_T_HEAD_NORM, "head_norm") /* [H]: gemma3 q_norm / k_norm */

typedef enum {
#define RF_X_KIND(id, text) id,
  RF_TENSOR_KIND_LIST(RF_X_KIND)
#undef RF_X_KIND
      RF_T_KIND_COUNT
} rf_tensor_kind;
const char *rf_tensor_kind_name(rf_tensor_kind kind);

#define RF_NAME_MAX 96

typedef struct {
  int id;                 /* index in rf_model.tensors, also the checksum's tensor_id */
  char name[RF_NAME_MAX]; /* HF name, e.g. "model.layers.3.self_attn.q_proj.weight" */
  rf_tensor_kind kind;
  int layer;        /* -1 for embeddings, lm_head and the final norm */
  int ndim;         /* 1 or 2 */
  int64_t shape[2]; /* shape[1] == 1 for 1-D tensors */
  int64_t numel;
  int64_t bytes;
} rf_tensor;

typedef struct {
  char name[128];       /* the --model argument's stem, e.g. "llama-3.1-8b" */
  char model_type[32];  /* HF model_type: llama, mistral, qwen2, gemma, gemma2, gemma3_text */
  rf_dtype dtype;       /* from torch_dtype (bf16 when absent) */
  int64_t vocab;        /* V */
  int64_t hidden;       /* D */
  int64_t layers;       /* L */
  int64_t heads;        /* N */
  int64_t kv_heads;     /* K */
  int64_t head_dim;     /* H: head_dim when present, else D / N */
  int64_t intermediate; /* F */
  int tied_embeddings;  /* no lm_head */
  int qkv_bias;         /* qwen2 */
  int norms_per_layer;  /* 2 (llama, gemma), 4 (gemma2, gemma3) */
  int head_norms;       /* gemma3: q_norm and k_norm */

  int tensor_count;
  rf_tensor *tensors; /* in HF checkpoint order: embed, layers..., norm, lm_head */
  int64_t total_params;
  int64_t total_bytes;
} rf_model;

/* Loads a model spec. `name_or_path` is either the stem of a file shipped in configs/models/
 * (looked up in $REFIT_MODEL_DIR, then the source tree's configs/models, then
 * <prefix>/share/refit/models) or a path to any HF config.json. An unknown name, a file that
 * does not parse, an unsupported model_type or a missing/invalid field gives one error line
 * naming the file and key, and RF_ERR_MODEL. */
rf_status rf_model_load(const char *name_or_path, rf_model *model);
void rf_model_free(rf_model *model);

/* Changes the element type (the --dtype override) and every byte count with it. */
void rf_model_set_dtype(rf_model *model, rf_dtype dtype);

/* Finds a tensor by HF name; -1 if absent. */
int rf_model_find(const rf_model *model, const char *name);

/* A 64-bit digest (xxh3) of the model's name, dtype, tensor names and shapes. */
uint64_t rf_model_digest(const rf_model *model);

/* Lists the shipped model names (for --help and error messages), comma-separated. */
void rf_model_list_shipped(char *buf, int len);

#endif
