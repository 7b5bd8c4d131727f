/* model_spec: the private seams of the model module. model.c finds the file, names the model
 * and holds the public helpers; model_spec.c reads a config.json; model_tensors.c lists the
 * tensors that the fields read imply. */
#ifndef RF_MODEL_SPEC_H
#define RF_MODEL_SPEC_H

#include "model.h"

/* Reads the Hugging Face config.json at `path` into `model`: the architecture fields, the
 * tensor list and the totals. `model->name` is left alone (the caller derives it from the
 * path). On failure logs one line naming `path` and the key, and returns RF_ERR_MODEL (or
 * RF_ERR_NOMEM); `model` may then hold a partial tensor list that rf_model_free releases. */
rf_status rf_model_read_config(const char *path, rf_model *model);

/* How a model family names and orders its mixture-of-experts block. */
typedef enum {
  RF_MOE_NONE = 0,
  RF_MOE_MIXTRAL,  /* block_sparse_moe: gate, then experts.E.{w1,w2,w3} */
  RF_MOE_QWEN3,    /* mlp: gate, then experts.E.{gate,up,down}_proj */
  RF_MOE_DEEPSEEK, /* mlp: experts.E.{gate,up,down}_proj, gate (and its bias), shared_experts */
  RF_MOE_GPT_OSS,  /* mlp: router.{weight,bias}, then experts.E.{gate_up,down}_proj and biases */
} rf_moe_style;

/* What the tensor list needs beyond rf_model's fields. */
typedef struct {
  rf_moe_style moe;
  const unsigned char *moe_layer; /* [model->layers]: 1 where the layer's MLP is the MoE block */
} rf_model_recipe;

/* Lists model's tensors in HF checkpoint order and sums them into total_params/total_bytes. */
rf_status rf_model_build_tensors(rf_model *model, const char *path, const rf_model_recipe *recipe);

#endif
