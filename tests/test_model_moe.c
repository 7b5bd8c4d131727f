/* test_model_moe: the model types beyond llama's skeleton. Qwen3 (per-head q/k norms), Mixtral,
 * Qwen3-MoE and DeepSeek V2/V3 (multi-head latent attention, dense first layers, shared
 * experts, the fp32 router bias) give the published parameter counts; the small MoE configs in
 * tests/data list their tensors in HF order, name by name; architectures[0] decides the type;
 * multi-token-prediction layers are left out; a missing MoE key is one error line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "test.h"
#include "test_model_helpers.h"

static char data_dir[512];

static const char *data(const char *file) {
  static char path[640];
  snprintf(path, sizeof path, "%s/%s", data_dir, file);
  return path;
}

/* Counts derived from the shapes in the comments; the five MoE totals are the published ones
 * (Mixtral-8x7B 46.7B, Qwen3-30B-A3B 30.5B, Qwen3-235B-A22B 235B, DeepSeek-V3 671B without its MTP
 * module, Kimi-K2's 1.03T, which Moonshot's model card rounds to "1T total"), Qwen3-8B is the model
 * card's 8.2B (6.95B without embeddings) and DeepSeek-V2-Lite its 15.7B. */
static void test_shipped_counts(void) {
  static const struct {
    const char *name, *type;
    int64_t params;
    int tensors;
    int64_t moe_layers;
  } cases[] = {
      /* 2 * 151936*4096 + 36 * (41943040 attention + 256 head norms + 150994944 mlp + 8192)
       * + 4096; tensors 1 + 36*11 + 2. */
      {"qwen3-8b", "qwen3", 8190735360, 399, 0},
      /* 2 * 32000*4096 + 32 * (41943040 + 8*4096 router + 8*3*14336*4096 + 8192) + 4096;
       * tensors 1 + 32*(4 + 1 + 24 + 2) + 2. */
      {"mixtral-8x7b", "mixtral", 46702792704, 995, 32},
      /* 2 * 151936*2048 + 48 * (18874368 + 256 + 128*2048 + 128*3*768*2048 + 4096) + 2048;
       * tensors 1 + 48*(6 + 1 + 384 + 2) + 2. */
      {"qwen3-30b-a3b", "qwen3_moe", 30532122624, 18867, 48},
      /* Qwen3-235B-A22B: 64 query heads and 4 KV heads of 128 over 4096, so attention is
       * 2 * 8192*4096 + 2 * 512*4096 = 71303168 per layer; then 256 of head norms, the router
       * 128*4096, 128 experts of 3*1536*4096 and 8192 of norms: 2487755008 per layer. Plus
       * 2 * 151936*4096 and the final 4096: 235093634560, the model card's 235B. Tensors
       * 1 + 94*(6 + 1 + 384 + 2) + 2. */
      {"qwen3-235b-a22b", "qwen3_moe", 235093634560, 36945, 94},
      /* MLA without q_lora_rank: 13763072 per layer; layer 0 dense (67239936), 26 MoE layers of
       * 64 experts of 1408, 2 shared (2816 wide) and the router: 571080704. Plus 4096 of norms
       * per layer, 2 * 102400*2048 and the final 2048. Tensors 1 + 10 + 26*203 + 2. */
      {"deepseek-v2-lite", "deepseek_v2", 15706484224, 5291, 26},
      /* MLA with q_lora_rank 1536: 187107328 per layer; 3 dense layers (396361728), 58 MoE
       * layers of 256 experts of 2048, one shared, router and bias: 11320164608. Plus 14336 of
       * norms per layer, 2 * 129280*7168 and 7168. Layer 61 (MTP) is not counted. Tensors
       * 1 + 3*12 + 58*782 + 2. */
      {"deepseek-v3", "deepseek_v3", 671026419200, 45395, 58},
      /* Kimi-K2, DeepSeek-V3's architecture with 64 heads and 384 experts: MLA of 101124096 per
       * layer; layer 0 dense (396361728), 60 MoE layers of 384 experts of 2048, one shared,
       * router and bias: 16958226816. Plus 14336 of norms per layer, 2 * 163840*7168 and 7168;
       * no MTP layers. Tensors 1 + 12 + 60*1166 + 2. */
      {"kimi-k2", "deepseek_v3", 1026408232448, 69975, 60},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rf_model m;
    load_check(cases[i].name, cases[i].name, cases[i].params, cases[i].tensors, &m);
    ASSERT_STR_EQ(m.model_type, cases[i].type);
    ASSERT_EQ(m.moe_layers, cases[i].moe_layers);
    ASSERT_FALSE(m.tied_embeddings);
    ASSERT_EQ(m.dtype, RF_DTYPE_BF16);
    rf_model_free(&m);
  }
}

static void test_qwen3(void) {
  rf_model m;
  ASSERT_OK(rf_model_load("qwen3-8b", &m));
  ASSERT_TRUE(m.head_norms);
  ASSERT_EQ(m.head_dim, 128);
  ASSERT_EQ(m.experts, 0);
  ASSERT_EQ(m.total_bytes, 2 * m.total_params);
  /* Layer 0 spans tensors 1..11: q, k, v, o, q_norm, k_norm, gate, up, down, two norms. */
  ASSERT_STR_EQ(m.tensors[5].name, "model.layers.0.self_attn.q_norm.weight");
  ASSERT_STR_EQ(m.tensors[6].name, "model.layers.0.self_attn.k_norm.weight");
  expect_tensor(&m, "model.layers.35.self_attn.q_norm.weight", RF_T_HEAD_NORM, 35, 128, 0);
  expect_tensor(&m, "model.layers.35.self_attn.k_proj.weight", RF_T_K, 35, 1024, 4096);
  expect_tensor(&m, "model.layers.35.mlp.down_proj.weight", RF_T_DOWN, 35, 4096, 12288);
  rf_model_free(&m);

  /* The small one that tests/cli runs end to end: head_dim 32 is not 64/4, tied, bf16. */
  load_check(data("tiny-qwen3.json"), "tiny-qwen3", 123328, 24, &m);
  expect_tensor(&m, "model.layers.1.self_attn.q_proj.weight", RF_T_Q, 1, 128, 64);
  expect_tensor(&m, "model.layers.1.self_attn.k_norm.weight", RF_T_HEAD_NORM, 1, 32, 0);
  rf_model_free(&m);
}

/* Checks that tensors first, first+1, ... are model.layers.<layer>.<names[j]>. */
static void expect_layer(const rf_model *m, int first, int layer, const char *const *names,
                         int count) {
  for (int j = 0; j < count; j++) {
    char want[RF_NAME_MAX];
    snprintf(want, sizeof want, "model.layers.%d.%s", layer, names[j]);
    ASSERT_LT(first + j, m->tensor_count);
    ASSERT_STR_EQ(m->tensors[first + j].name, want);
    ASSERT_EQ(m->tensors[first + j].layer, layer);
  }
}

static void test_tiny_mixtral(void) {
  rf_model m;
  /* Per layer: q 4096, k and v 2048 each, o 4096, router 4*64, 4 experts of 3*96*64, two norms
   * of 64: 86400. Two layers, embed and lm_head 512*64 each, final norm: 238400. */
  load_check(data("tiny-mixtral.json"), "tiny-mixtral", 238400, 41, &m);
  ASSERT_EQ(m.experts, 4);
  ASSERT_EQ(m.expert_intermediate, 96);
  ASSERT_EQ(m.moe_layers, 2);
  static const char *const layer[] = {
      "self_attn.q_proj.weight",
      "self_attn.k_proj.weight",
      "self_attn.v_proj.weight",
      "self_attn.o_proj.weight",
      "block_sparse_moe.gate.weight",
      "block_sparse_moe.experts.0.w1.weight",
      "block_sparse_moe.experts.0.w2.weight",
      "block_sparse_moe.experts.0.w3.weight",
      "block_sparse_moe.experts.1.w1.weight",
      "block_sparse_moe.experts.1.w2.weight",
      "block_sparse_moe.experts.1.w3.weight",
      "block_sparse_moe.experts.2.w1.weight",
      "block_sparse_moe.experts.2.w2.weight",
      "block_sparse_moe.experts.2.w3.weight",
      "block_sparse_moe.experts.3.w1.weight",
      "block_sparse_moe.experts.3.w2.weight",
      "block_sparse_moe.experts.3.w3.weight",
      "input_layernorm.weight",
      "post_attention_layernorm.weight",
  };
  expect_layer(&m, 1 + 19, 1, layer, 19);
  expect_tensor(&m, "model.layers.1.block_sparse_moe.gate.weight", RF_T_ROUTER, 1, 4, 64);
  expect_tensor(&m, "model.layers.1.block_sparse_moe.experts.3.w1.weight", RF_T_EXPERT_GATE, 1, 96,
                64);
  expect_tensor(&m, "model.layers.1.block_sparse_moe.experts.3.w2.weight", RF_T_EXPERT_DOWN, 1, 64,
                96);
  expect_tensor(&m, "model.layers.1.block_sparse_moe.experts.3.w3.weight", RF_T_EXPERT_UP, 1, 96,
                64);
  ASSERT_EQ(rf_model_find(&m, "model.layers.0.mlp.gate_proj.weight"), -1);
  ASSERT_STR_EQ(rf_tensor_kind_name(RF_T_EXPERT_GATE), "expert_gate");
  ASSERT_TRUE(rf_tensor_kind_is_moe(RF_T_ROUTER));
  ASSERT_FALSE(rf_tensor_kind_is_moe(RF_T_GATE));
  rf_model_free(&m);
}

static void test_tiny_deepseek(void) {
  rf_model m;
  /* MLA per layer: q_a 48*64, its norm 48, q_b 4*24*48, kv_a 40*64, its norm 32, kv_b 128*32,
   * o 64*64: 18512. Layer 0 dense (3*128*64), layers 1 and 2 MoE: 4 experts of 3*32*64, router
   * 4*64, bias 4, shared 3*64*64 (2 shared experts of 32). Norms 128 per layer, embed and
   * lm_head 512*64, final norm 64: 43216 + 2*55764 + 65600 = 220344. */
  load_check(data("tiny-deepseek.json"), "tiny-deepseek", 220344, 67, &m);
  ASSERT_STR_EQ(m.model_type, "deepseek_v3");
  ASSERT_TRUE(m.mla);
  ASSERT_EQ(m.q_lora_rank, 48);
  ASSERT_EQ(m.head_dim, 16); /* v_head_dim: o_proj's heads */
  ASSERT_EQ(m.kv_heads, 4);
  ASSERT_EQ(m.shared_intermediate, 64);
  ASSERT_TRUE(m.router_bias);
  ASSERT_EQ(m.moe_layers, 2);
  /* The bias is fp32 in a bf16 model: 4 elements in each of 2 layers take 2 bytes more. */
  ASSERT_EQ(m.total_bytes, 2 * 220344 + 2 * 4 * 2);
  static const char *const dense[] = {
      "self_attn.q_a_proj.weight",
      "self_attn.q_a_layernorm.weight",
      "self_attn.q_b_proj.weight",
      "self_attn.kv_a_proj_with_mqa.weight",
      "self_attn.kv_a_layernorm.weight",
      "self_attn.kv_b_proj.weight",
      "self_attn.o_proj.weight",
      "mlp.gate_proj.weight",
      "mlp.up_proj.weight",
      "mlp.down_proj.weight",
      "input_layernorm.weight",
      "post_attention_layernorm.weight",
  };
  expect_layer(&m, 1, 0, dense, 12);
  static const char *const moe[] = {
      "self_attn.q_a_proj.weight",
      "self_attn.q_a_layernorm.weight",
      "self_attn.q_b_proj.weight",
      "self_attn.kv_a_proj_with_mqa.weight",
      "self_attn.kv_a_layernorm.weight",
      "self_attn.kv_b_proj.weight",
      "self_attn.o_proj.weight",
      "mlp.experts.0.gate_proj.weight",
      "mlp.experts.0.up_proj.weight",
      "mlp.experts.0.down_proj.weight",
      "mlp.experts.1.gate_proj.weight",
      "mlp.experts.1.up_proj.weight",
      "mlp.experts.1.down_proj.weight",
      "mlp.experts.2.gate_proj.weight",
      "mlp.experts.2.up_proj.weight",
      "mlp.experts.2.down_proj.weight",
      "mlp.experts.3.gate_proj.weight",
      "mlp.experts.3.up_proj.weight",
      "mlp.experts.3.down_proj.weight",
      "mlp.gate.weight",
      "mlp.gate.e_score_correction_bias",
      "mlp.shared_experts.gate_proj.weight",
      "mlp.shared_experts.up_proj.weight",
      "mlp.shared_experts.down_proj.weight",
      "input_layernorm.weight",
      "post_attention_layernorm.weight",
  };
  expect_layer(&m, 13, 1, moe, 26);
  expect_tensor(&m, "model.layers.1.self_attn.q_a_proj.weight", RF_T_Q_A, 1, 48, 64);
  expect_tensor(&m, "model.layers.1.self_attn.q_a_layernorm.weight", RF_T_Q_A_NORM, 1, 48, 0);
  expect_tensor(&m, "model.layers.1.self_attn.q_b_proj.weight", RF_T_Q_B, 1, 96, 48);
  expect_tensor(&m, "model.layers.1.self_attn.kv_a_proj_with_mqa.weight", RF_T_KV_A, 1, 40, 64);
  expect_tensor(&m, "model.layers.1.self_attn.kv_a_layernorm.weight", RF_T_KV_A_NORM, 1, 32, 0);
  expect_tensor(&m, "model.layers.1.self_attn.kv_b_proj.weight", RF_T_KV_B, 1, 128, 32);
  expect_tensor(&m, "model.layers.1.self_attn.o_proj.weight", RF_T_O, 1, 64, 64);
  expect_tensor(&m, "model.layers.2.mlp.experts.3.down_proj.weight", RF_T_EXPERT_DOWN, 2, 64, 32);
  expect_tensor(&m, "model.layers.2.mlp.gate.weight", RF_T_ROUTER, 2, 4, 64);
  expect_tensor(&m, "model.layers.2.mlp.gate.e_score_correction_bias", RF_T_ROUTER_BIAS, 2, 4, 0);
  expect_tensor(&m, "model.layers.2.mlp.shared_experts.up_proj.weight", RF_T_SHARED_UP, 2, 64, 64);
  expect_tensor(&m, "model.layers.2.mlp.shared_experts.down_proj.weight", RF_T_SHARED_DOWN, 2, 64,
                64);
  const rf_tensor *bias =
      &m.tensors[rf_model_find(&m, "model.layers.2.mlp.gate.e_score_correction_bias")];
  ASSERT_EQ(bias->dtype, RF_DTYPE_FP32);
  ASSERT_EQ(bias->bytes, 16);
  /* The config's one MTP layer would be model.layers.3: not part of the rollout model. */
  ASSERT_EQ(m.mtp_layers, 1);
  ASSERT_EQ(rf_model_find(&m, "model.layers.3.self_attn.q_a_proj.weight"), -1);
  ASSERT_EQ(rf_model_find(&m, "model.layers.3.mlp.gate.weight"), -1);
  ASSERT_TRUE(rf_tensor_kind_is_mla(RF_T_KV_B));
  ASSERT_FALSE(rf_tensor_kind_is_mla(RF_T_O));

  /* --dtype changes the model's dtype, not the bias's. */
  uint64_t before = rf_model_digest(&m);
  rf_model_set_dtype(&m, RF_DTYPE_FP32);
  ASSERT_EQ(m.total_bytes, 4 * 220344);
  rf_model_set_dtype(&m, RF_DTYPE_FP16);
  ASSERT_EQ(bias->dtype, RF_DTYPE_FP32);
  ASSERT_EQ(m.tensors[0].dtype, RF_DTYPE_FP16);
  ASSERT_EQ(m.total_bytes, 2 * 220344 + 2 * 4 * 2);
  ASSERT_TRUE(rf_model_digest(&m) != before);
  rf_model_free(&m);

  /* The shipped ones: V3's layer 60 is the last, 61 (MTP) is left out; V2-Lite routes greedily,
   * without the bias, and has no q_lora_rank. */
  ASSERT_OK(rf_model_load("deepseek-v3", &m));
  ASSERT_EQ(m.mtp_layers, 1);
  expect_tensor(&m, "model.layers.60.mlp.gate.e_score_correction_bias", RF_T_ROUTER_BIAS, 60, 256,
                0);
  expect_tensor(&m, "model.layers.2.mlp.down_proj.weight", RF_T_DOWN, 2, 7168, 18432);
  expect_tensor(&m, "model.layers.3.mlp.experts.255.down_proj.weight", RF_T_EXPERT_DOWN, 3, 7168,
                2048);
  expect_tensor(&m, "model.layers.60.self_attn.q_b_proj.weight", RF_T_Q_B, 60, 24576, 1536);
  expect_tensor(&m, "model.layers.60.self_attn.kv_b_proj.weight", RF_T_KV_B, 60, 32768, 512);
  expect_tensor(&m, "model.layers.60.self_attn.o_proj.weight", RF_T_O, 60, 7168, 16384);
  ASSERT_EQ(rf_model_find(&m, "model.layers.61.self_attn.q_a_proj.weight"), -1);
  ASSERT_EQ(rf_model_find(&m, "model.layers.2.mlp.gate.weight"), -1);
  ASSERT_EQ(m.total_bytes, 2 * m.total_params + 58 * 256 * 2);
  rf_model_free(&m);

  /* Kimi-K2: half DeepSeek-V3's heads, so q_b_proj is 64 heads of 192 rows; 384 experts in
   * layers 1 to 60; num_nextn_predict_layers 0. */
  ASSERT_OK(rf_model_load("kimi-k2", &m));
  ASSERT_EQ(m.mtp_layers, 0);
  ASSERT_EQ(m.experts, 384);
  expect_tensor(&m, "model.layers.0.mlp.down_proj.weight", RF_T_DOWN, 0, 7168, 18432);
  expect_tensor(&m, "model.layers.1.mlp.experts.383.gate_proj.weight", RF_T_EXPERT_GATE, 1, 2048,
                7168);
  expect_tensor(&m, "model.layers.60.self_attn.q_b_proj.weight", RF_T_Q_B, 60, 12288, 1536);
  expect_tensor(&m, "model.layers.60.self_attn.kv_b_proj.weight", RF_T_KV_B, 60, 16384, 512);
  expect_tensor(&m, "model.layers.60.self_attn.o_proj.weight", RF_T_O, 60, 7168, 8192);
  expect_tensor(&m, "lm_head.weight", RF_T_LM_HEAD, -1, 163840, 7168);
  ASSERT_EQ(m.total_bytes, 2052816510976); /* 2 * params + 60 * 384 * 2 (the fp32 bias) */
  rf_model_free(&m);

  ASSERT_OK(rf_model_load("deepseek-v2-lite", &m));
  ASSERT_FALSE(m.router_bias);
  ASSERT_EQ(m.q_lora_rank, 0);
  ASSERT_EQ(m.shared_intermediate, 2816);
  ASSERT_EQ(m.mtp_layers, 0);
  expect_tensor(&m, "model.layers.1.self_attn.q_proj.weight", RF_T_MLA_Q, 1, 3072, 2048);
  expect_tensor(&m, "model.layers.26.mlp.shared_experts.gate_proj.weight", RF_T_SHARED_GATE, 26,
                2816, 2048);
  ASSERT_EQ(rf_model_find(&m, "model.layers.1.self_attn.q_a_proj.weight"), -1);
  ASSERT_EQ(rf_model_find(&m, "model.layers.1.mlp.gate.e_score_correction_bias"), -1);
  ASSERT_EQ(m.total_bytes, 2 * m.total_params);
  rf_model_free(&m);
}

/* A small Qwen3-MoE whose MoE layers follow decoder_sparse_step and mlp_only_layers. */
static const char qwen3_moe_json[] =
    "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\","
    " \"vocab_size\": 256, \"hidden_size\": 32, \"head_dim\": 16, \"intermediate_size\": 64,"
    " \"moe_intermediate_size\": 16, \"num_experts\": 2, \"num_experts_per_tok\": 1,"
    " \"decoder_sparse_step\": 2, \"mlp_only_layers\": [3], \"num_hidden_layers\": 4,"
    " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"tie_word_embeddings\": true}";

static void test_qwen3_moe_layers(void) {
  rf_model m;
  /* Attention: q 32*32, k and v 16*32, o 32*32, norms 16+16: 3104. Dense layers 0, 2, 3:
   * 3*64*32 = 6144; MoE layer 1: router 2*32 + 2*3*16*32 = 3136. Norms 64 per layer; embed
   * 256*32 = 8192 (tied), final norm 32. 4*3104 + 3*6144 + 3136 + 4*64 + 8192 + 32. */
  const char *p = write_tmp("q3moe.json", qwen3_moe_json);
  load_check(p, "q3moe", 42464, 1 + 3 * 11 + (6 + 1 + 6 + 2) + 1, &m);
  ASSERT_EQ(m.moe_layers, 1);
  expect_tensor(&m, "model.layers.0.mlp.gate_proj.weight", RF_T_GATE, 0, 64, 32);
  static const char *const moe[] = {"mlp.gate.weight", "mlp.experts.0.gate_proj.weight",
                                    "mlp.experts.0.up_proj.weight",
                                    "mlp.experts.0.down_proj.weight"};
  expect_layer(&m, 1 + 11 + 6, 1, moe, 4);
  expect_tensor(&m, "model.layers.1.mlp.experts.1.down_proj.weight", RF_T_EXPERT_DOWN, 1, 32, 16);
  expect_tensor(&m, "model.layers.3.mlp.down_proj.weight", RF_T_DOWN, 3, 32, 64);
  rf_model_free(&m);
}

/* architectures[0] decides, as in vLLM; model_type is the fallback. */
static void test_dispatch(void) {
  rf_model m;
  /* Kimi-K2 style: a DeepseekV3ForCausalLM under another model_type. */
  const char *p = write_tmp(
      "kimi.json",
      "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"kimi_k2\","
      " \"vocab_size\": 512, \"hidden_size\": 64, \"intermediate_size\": 128,"
      " \"moe_intermediate_size\": 32, \"num_hidden_layers\": 3, \"num_attention_heads\": 4,"
      " \"q_lora_rank\": 48, \"kv_lora_rank\": 32, \"qk_nope_head_dim\": 16,"
      " \"qk_rope_head_dim\": 8, \"v_head_dim\": 16, \"n_routed_experts\": 4,"
      " \"n_shared_experts\": 2, \"first_k_dense_replace\": 1}");
  /* The same shapes as tiny-deepseek; topk_method absent means DeepSeek-V3's noaux_tc. */
  load_check(p, "kimi", 220344, 67, &m);
  ASSERT_STR_EQ(m.model_type, "deepseek_v3");
  ASSERT_TRUE(m.router_bias);
  ASSERT_EQ(m.mtp_layers, 0);
  rf_model_free(&m);

  /* An unknown class falls back to a known model_type. */
  p = write_tmp("fallback.json",
                "{\"architectures\": [\"MyMixtral\"], \"model_type\": \"mixtral\","
                " \"vocab_size\": 512, \"hidden_size\": 64, \"intermediate_size\": 96,"
                " \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                " \"num_key_value_heads\": 2, \"num_local_experts\": 4}");
  load_check(p, "fallback", 238400, 41, &m);
  ASSERT_STR_EQ(m.model_type, "mixtral");
  rf_model_free(&m);

  /* A known class wins over a known but different model_type. */
  p = write_tmp("class-wins.json",
                "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"llama\","
                " \"vocab_size\": 384, \"hidden_size\": 64, \"head_dim\": 32,"
                " \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
                " \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                " \"tie_word_embeddings\": true}");
  load_check(p, "class-wins", 123328, 24, &m);
  ASSERT_STR_EQ(m.model_type, "qwen3");
  rf_model_free(&m);
}

static void test_errors(void) {
  const char *p = write_tmp("neither.json", "{\"architectures\": [\"FooForCausalLM\"],"
                                            " \"model_type\": \"foo\"}");
  expect_error(p, "neither.json: architecture 'FooForCausalLM' (model_type 'foo') is not "
                  "supported; supported: the HF classes of llama, mistral, qwen2, qwen3, gemma, "
                  "gemma2, gemma3_text, mixtral, qwen3_moe, deepseek_v2, deepseek_v3, "
                  "gpt_oss");
  p = write_tmp("archs.json", "{\"architectures\": \"LlamaForCausalLM\"}");
  expect_error(p, "archs.json: key 'architectures' must be a list of HF class names, such as "
                  "[\"LlamaForCausalLM\"]");
  p = write_tmp("no-experts.json",
                "{\"model_type\": \"mixtral\", \"vocab_size\": 512, \"hidden_size\": 64,"
                " \"intermediate_size\": 96, \"num_hidden_layers\": 2,"
                " \"num_attention_heads\": 4}");
  expect_error(p, "no-experts.json: key 'num_local_experts' is missing or not a positive integer");
  p = write_tmp("no-qlora.json",
                "{\"model_type\": \"deepseek_v2\", \"vocab_size\": 512, \"hidden_size\": 64,"
                " \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
                " \"num_attention_heads\": 4}");
  expect_error(p, "no-qlora.json: key 'q_lora_rank' is missing or not null or an integer from 0 "
                  "to 2147483647");
  p = write_tmp("no-dense.json",
                "{\"model_type\": \"deepseek_v3\", \"vocab_size\": 512, \"hidden_size\": 64,"
                " \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
                " \"num_attention_heads\": 4, \"q_lora_rank\": null, \"kv_lora_rank\": 32,"
                " \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 8, \"v_head_dim\": 16,"
                " \"n_routed_experts\": 4, \"moe_intermediate_size\": 32,"
                " \"n_shared_experts\": null}");
  expect_error(p, "no-dense.json: key 'first_k_dense_replace' is missing or not an integer from "
                  "0 to 10000");
  p = write_tmp("only.json",
                "{\"model_type\": \"qwen3_moe\", \"vocab_size\": 256, \"hidden_size\": 32,"
                " \"intermediate_size\": 64, \"num_hidden_layers\": 2,"
                " \"num_attention_heads\": 2, \"num_experts\": 2, \"moe_intermediate_size\": 16,"
                " \"mlp_only_layers\": [2]}");
  expect_error(p, "only.json: key 'mlp_only_layers' holds a layer out of range, not a layer "
                  "from 0 to 1");
  /* 6 layers of 65536 experts would be 1.2 million tensors: a typo, refused before it grows. */
  p = write_tmp("many.json", "{\"model_type\": \"mixtral\", \"vocab_size\": 8, \"hidden_size\": 8,"
                             " \"intermediate_size\": 8, \"num_hidden_layers\": 6,"
                             " \"num_attention_heads\": 1, \"num_local_experts\": 65536}");
  expect_error(p, "many.json: more than 1000000 tensors, more than refit supports; check the "
                  "layer and expert counts in the file");
  p = write_tmp("experts.json",
                "{\"model_type\": \"mixtral\", \"vocab_size\": 8, \"hidden_size\": 8,"
                " \"intermediate_size\": 8, \"num_hidden_layers\": 6,"
                " \"num_attention_heads\": 1, \"num_local_experts\": 65537}");
  expect_error(p, "experts.json: key 'num_local_experts' is 65537, more than refit supports "
                  "(65536)");
  p = write_tmp("bias.json", "{\"model_type\": \"qwen3\", \"vocab_size\": 256, \"hidden_size\": 32,"
                             " \"intermediate_size\": 64, \"num_hidden_layers\": 2,"
                             " \"num_attention_heads\": 2, \"attention_bias\": true}");
  expect_error(p, "bias.json: key 'attention_bias' is true, which refit does not support for "
                  "qwen3");
}

int main(void) {
  const char *src = getenv("REFIT_SOURCE_DIR"); /* set by CTest */
  ASSERT_TRUE(src != NULL && *src);
  snprintf(data_dir, sizeof data_dir, "%s/tests/data", src);
  const char *t = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/refit_test_model_moe_XXXXXX", t && *t ? t : "/tmp");
  ASSERT_TRUE(mkdtemp(tmpdir) != NULL);

  test_shipped_counts();
  test_qwen3();
  test_tiny_mixtral();
  test_tiny_deepseek();
  test_qwen3_moe_layers();
  test_dispatch();
  test_errors();

  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  ASSERT_EQ(system(cmd), 0);
  printf("test_model_moe: ok\n");
  fflush(stdout);
  return 0;
}
