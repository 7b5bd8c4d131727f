/* model: the logical tensors of a model, read from a Hugging Face config.json.
 *
 * A logical tensor is one parameter under its HF name and HF orientation ([out, in] for linear
 * weights). Every plan, checksum and report speaks in logical tensors and global indices. */
#ifndef RF_MODEL_H
#define RF_MODEL_H

#include <stdint.h>

#include "core/core.h"

/* RF_DTYPE_FP8 (float8_e4m3fn): the block-FP8 weights the rollout receives with
 * --rollout-dtype fp8 (layout_fp8.c), and the trainer's linear weights when they come from an
 * 8-bit quantized checkpoint (rf_model_weights_quantized). It is never a --dtype, so rf_dtype_parse
 * does not accept it. */
/* RF_DTYPE_U8: bytes of a quantized format that are not e4m3 (packed e2m1 pairs, E8M0
 * scales; format.h), only in the checkpoints refit writes. */
typedef enum {
  RF_DTYPE_BF16 = 0,
  RF_DTYPE_FP16,
  RF_DTYPE_FP32,
  RF_DTYPE_FP8,
  RF_DTYPE_U8
} rf_dtype;
const char *rf_dtype_name(rf_dtype dt); /* "bf16", "fp16", "fp32", "fp8_e4m3fn", "u8" */
int rf_dtype_size(rf_dtype dt);         /* bytes per element */
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
  X(RF_T_HEAD_NORM, "head_norm") /* [H]: gemma3 and qwen3 q_norm / k_norm */                       \
  /* Mixture of experts. E routed experts of width Fe; DeepSeek's shared experts are one MLP of    \
   * width Fs = n_shared_experts * Fe. Mixtral's w1, w3, w2 are gate, up, down. */                 \
  X(RF_T_ROUTER, "router")           /* [E, D]: mlp.gate, Mixtral's block_sparse_moe.gate */       \
  X(RF_T_ROUTER_BIAS, "router_bias") /* [E]: DeepSeek's e_score_correction_bias, fp32 */           \
  X(RF_T_EXPERT_GATE, "expert_gate") /* [Fe, D] */                                                 \
  X(RF_T_EXPERT_UP, "expert_up")     /* [Fe, D] */                                                 \
  X(RF_T_EXPERT_DOWN, "expert_down") /* [D, Fe] */                                                 \
  X(RF_T_SHARED_GATE, "shared_gate") /* [Fs, D] */                                                 \
  X(RF_T_SHARED_UP, "shared_up")     /* [Fs, D] */                                                 \
  X(RF_T_SHARED_DOWN, "shared_down") /* [D, Fs] */                                                 \
  /* gpt-oss: its router is a Linear with a bias in the model's dtype, and each routed expert is   \
   * one fused gate_up [2Fe, D] whose rows interleave gate (even) and up (odd), with a bias for    \
   * gate_up and for down. */                                                                      \
  X(RF_T_ROUTER_LINEAR_BIAS, "router_linear_bias")   /* [E]: mlp.router.bias */                    \
  X(RF_T_EXPERT_GATE_UP, "expert_gate_up")           /* [2Fe, D], gate/up interleaved */           \
  X(RF_T_EXPERT_GATE_UP_BIAS, "expert_gate_up_bias") /* [2Fe] */                                   \
  X(RF_T_EXPERT_DOWN_BIAS, "expert_down_bias")       /* [D] */                                     \
  /* Multi-head latent attention (DeepSeek V2/V3): ranks Rq (q_lora_rank) and Rkv                  \
   * (kv_lora_rank), per-head widths Hn (qk_nope), Hr (qk_rope) and Hv (v_head_dim). Its o_proj    \
   * is an RF_T_O of N heads of Hv columns. */                                                     \
  X(RF_T_Q_A, "q_a_proj")             /* [Rq, D] */                                                \
  X(RF_T_Q_A_NORM, "q_a_layernorm")   /* [Rq] */                                                   \
  X(RF_T_Q_B, "q_b_proj")             /* [N*(Hn+Hr), Rq] */                                        \
  X(RF_T_MLA_Q, "mla_q_proj")         /* [N*(Hn+Hr), D]: q_proj when q_lora_rank is null */        \
  X(RF_T_KV_A, "kv_a_proj_with_mqa")  /* [Rkv+Hr, D] */                                            \
  X(RF_T_KV_A_NORM, "kv_a_layernorm") /* [Rkv] */                                                  \
  X(RF_T_KV_B, "kv_b_proj")           /* [N*(Hn+Hv), Rkv] */                                       \
  /* gpt-oss's attention: o_proj's bias and one learned attention sink per query head. */          \
  X(RF_T_O_BIAS, "o_bias") /* [D] */                                                               \
  X(RF_T_SINKS, "sinks")   /* [N] */

typedef enum {
#define RF_X_KIND(id, text) id,
  RF_TENSOR_KIND_LIST(RF_X_KIND)
#undef RF_X_KIND
      RF_T_KIND_COUNT
} rf_tensor_kind;
const char *rf_tensor_kind_name(rf_tensor_kind kind);
/* The kinds of a mixture-of-experts block (router, routed and shared experts). */
int rf_tensor_kind_is_moe(rf_tensor_kind kind);
/* The kinds of multi-head latent attention, except its o_proj (an ordinary RF_T_O). */
int rf_tensor_kind_is_mla(rf_tensor_kind kind);
/* The linear weights (attention, MLA projections, dense MLP, routed and shared experts): the
 * tensors that block-FP8 rollouts and checkpoints hold as float8_e4m3fn with scales.
 * Embeddings, lm_head, norms, biases and routers are not. */
int rf_tensor_kind_is_linear(rf_tensor_kind kind);
/* A set of kinds, one bit each (rf_model.unquantized_kinds). */
#define RF_KIND_BIT(kind) ((uint64_t)1 << (kind))
#ifndef __cplusplus /* the CUDA sources include this header as C++ */
_Static_assert(RF_T_KIND_COUNT <= 64, "a set of tensor kinds is one uint64_t");
#endif

#define RF_NAME_MAX 96

typedef struct {
  int id;                 /* index in rf_model.tensors, also the checksum's tensor_id */
  char name[RF_NAME_MAX]; /* HF name, e.g. "model.layers.3.self_attn.q_proj.weight" */
  rf_tensor_kind kind;
  int layer;        /* -1 for embeddings, lm_head and the final norm */
  int expert;       /* a routed expert's index in its layer, else -1 */
  int ndim;         /* 1 or 2 */
  int64_t shape[2]; /* shape[1] == 1 for 1-D tensors */
  int64_t numel;
  rf_dtype dtype; /* the model's, unless the model gives this tensor its own */
  int own_dtype;  /* keeps dtype when the model's changes (DeepSeek's fp32 router bias) */
  /* 8 or 4 when the trainer holds this linear weight as a quantized checkpoint does (fp8
   * bytes, or e2m1 packed two a byte in a u8 dtype: rf_model_weights_quantized), its scales
   * beside it; 0 for a tensor in its dtype. */
  int elem_bits;
  int64_t bytes; /* numel * the size of dtype, or numel * elem_bits / 8 when quantized */
  /* 0 for every model tensor. A member of a quantized checkpoint's stacked entry
   * (checkpoint_format.c) sets it: 1, stored in its own orientation, not transposed as the
   * model's stacked weights are; above 1, also each row's bytes shaped [cols / stack_split,
   * stack_split] in the entry (gpt-oss's _blocks: the 16 bytes of one 32-element block). */
  int stack_split;
} rf_tensor;

/* Whether the trainer holds t as a quantized checkpoint's bytes and scales, which a rollout in
 * that checkpoint's format takes as they are (plan_fp8.c, RF_QUANT_CARRIED). */
static inline int rf_tensor_quantized(const rf_tensor *t) { return t->elem_bits != 0; }

/* Bytes per element of a tensor. Every module sizes, copies, checks and stores a tensor by its
 * own dtype, never the model's: the two differ for a tensor that keeps a dtype of its own. */
static inline int rf_tensor_esize(const rf_tensor *t) { return rf_dtype_size(t->dtype); }

typedef struct {
  char name[128];       /* the --model argument's stem, e.g. "llama-3.1-8b" */
  char model_type[32];  /* the supported type it was read as (see rf_model_load) */
  rf_dtype dtype;       /* from torch_dtype (bf16 when absent); see rf_tensor.dtype */
  int64_t vocab;        /* V */
  int64_t hidden;       /* D */
  int64_t layers;       /* L */
  int64_t heads;        /* N */
  int64_t kv_heads;     /* K */
  int64_t head_dim;     /* H: head_dim when present, else D / N; with MLA, v_head_dim */
  int64_t intermediate; /* F: the dense MLP's width (Mixtral: each expert's) */
  int tied_embeddings;  /* no lm_head */
  int qkv_bias;         /* qwen2 */
  int norms_per_layer;  /* 2 (llama, gemma), 4 (gemma2, gemma3) */
  int head_norms;       /* gemma3, qwen3: q_norm and k_norm */
  int o_bias;           /* gpt_oss with attention_bias: o_proj has a bias too */
  int sinks;            /* gpt_oss: self_attn.sinks, one per query head */

  /* Mixture of experts; all 0 for a dense model. */
  int64_t experts;             /* E: routed experts in each MoE layer */
  int64_t expert_intermediate; /* Fe: each routed expert's width */
  int64_t shared_intermediate; /* Fs: DeepSeek's shared experts' width, 0 without them */
  int64_t moe_layers;          /* layers whose MLP is a mixture of experts */
  int router_bias;             /* DeepSeek with topk_method noaux_tc: e_score_correction_bias */
  int stacked_experts;         /* gpt_oss: the checkpoint stacks the experts (rf_model_stack) */

  /* Which linear weights a quantized format covers (rf_model_quantizes): the kinds that the
   * model's own quantization leaves in its dtype, from quantization_config's
   * modules_to_not_convert where the config has one, else its type's rule (gpt_oss: every kind
   * but the routed experts' weights, as gpt-oss's MXFP4 checkpoints and vLLM's Mxfp4 method
   * have it); 0 for the rest, whose every linear weight is covered. */
  uint64_t unquantized_kinds;
  /* The format of the model's own quantized checkpoints (quantization_config.quant_method when
   * refit has a format of that name, else its type's: "mxfp4" for gpt_oss), "" for none. Its
   * stacked experts are written quantized only in it (checkpoint_format.c). */
  char native_format[16];

  /* Multi-head latent attention (deepseek_v2, deepseek_v3); all 0 otherwise. */
  int mla;
  int64_t q_lora_rank; /* Rq; 0 when the config's is null (a plain q_proj) */
  int64_t kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;

  /* num_nextn_predict_layers: multi-token-prediction layers that a checkpoint may hold after the
   * last layer. They draft tokens for speculative decoding and are not part of the rollout model,
   * so they are not in the tensor list. */
  int64_t mtp_layers;

  int tensor_count;
  rf_tensor *tensors; /* in HF checkpoint order: embed, layers..., norm, lm_head */
  int64_t total_params;
  int64_t total_bytes;
} rf_model;

/* Loads a model spec. `name_or_path` is either the stem of a file shipped in configs/models/
 * (looked up in $REFIT_MODEL_DIR, then the source tree's configs/models, then
 * <prefix>/share/refit/models) or a path to any HF config.json. The type is that of the HF
 * class in architectures[0] when refit knows it (as vLLM picks the model class), else model_type,
 * so that a DeepseekV3ForCausalLM under another model_type still loads. An unknown name, a file
 * that does not parse, an unsupported type or a missing/invalid field gives one error line
 * naming the file and key, and RF_ERR_MODEL. */
rf_status rf_model_load(const char *name_or_path, rf_model *model);
/* The name a model file goes by (rf_model.name, what refit run records): the file's stem, or
 * for a file named config.json (the Hugging Face layout) its directory's name. */
void rf_model_stem(const char *path, char *out, size_t len);
void rf_model_free(rf_model *model);

/* Changes the model's element type (the --dtype override) and the byte counts with it; tensors
 * with a dtype of their own keep it. */
void rf_model_set_dtype(rf_model *model, rf_dtype dtype);
/* The trainer's weights read from a quantized checkpoint (block-FP8, MXFP8, MXFP4, NVFP4: the
 * file's format is the rollout's): every linear weight (rf_tensor_kind_is_linear) takes the
 * file's weight dtype as its own (fp8, or u8 for e2m1 packed two a byte) and elem_bits 8 or 4,
 * its scales beside it in the trainer's buffers; the other tensors keep theirs. */
void rf_model_weights_quantized(rf_model *model, rf_dtype dtype, int elem_bits);

/* Gives tensor `index` a dtype of its own (as the model does for DeepSeek's router bias), so
 * that --dtype leaves it alone, and recomputes its bytes and the model's total. The tests use it
 * to build models of mixed dtypes from any config. A bad index or dtype is RF_ERR_INTERNAL. */
rf_status rf_model_set_tensor_dtype(rf_model *model, int index, rf_dtype dtype);

/* Where a logical tensor lies in a Hugging Face checkpoint that stacks several of them into one
 * entry, as gpt-oss's does: experts.gate_up_proj [E, D, 2Fe] holds every expert's gate_up, each
 * stored transposed ([in, out]), and experts.gate_up_proj_bias [E, 2Fe] every expert's bias.
 * The members of an entry are consecutive tensors of the model, member 0 first, all of one shape,
 * and member i's bytes follow member i-1's in the entry. */
typedef struct {
  char name[RF_NAME_MAX]; /* the entry's name */
  int ndim;               /* the entry's shape: members, then a member's as stored */
  int64_t shape[4];
  int64_t member, members;
  int transposed; /* a member is stored [in, out], its logical tensor's transpose (a 2-D tensor
                   * of the model; not a quantized checkpoint's, rf_tensor.stack_split) */
} rf_stack;
/* Fills *out and returns 1 for a member of a stacked entry; returns 0 for a tensor stored under
 * its own name. */
int rf_model_stack(const rf_model *model, const rf_tensor *t, rf_stack *out);

/* Whether a quantized rollout or checkpoint holds tensor t in its format: a linear weight of a
 * kind the model's quantization covers (unquantized_kinds). Every module that decides which
 * tensors are quantized asks this, so the rule is the model's data, the same everywhere. */
int rf_model_quantizes(const rf_model *model, const rf_tensor *t);

/* "expert_gate_up, expert_down": the kinds of the model's tensors that rf_model_quantizes
 * covers, in the order the model lists them, for report lines. */
void rf_model_quantized_kinds(const rf_model *model, char *buf, size_t len);

/* Finds a tensor by HF name; -1 if absent. */
int rf_model_find(const rf_model *model, const char *name);

/* A 64-bit digest (xxh3) of the model's name, dtype, tensor names and shapes, and the dtype of
 * each tensor that has one of its own. */
uint64_t rf_model_digest(const rf_model *model);

/* Lists the shipped model names (for --help and error messages), comma-separated. */
void rf_model_list_shipped(char *buf, int len);

#endif
