/* test_model_gpt_oss: OpenAI's gpt-oss. The shipped 20b and 120b configs give their exact
 * parameter counts; tiny-gpt-oss lists its tensors in HF order, name by name and shape by shape
 * (attention biases, o_proj's bias, the sinks, the router's bias, and each expert's gate_up,
 * down and their biases as logical tensors of their own); rf_model_stack names the stacked
 * checkpoint entry each expert tensor lies in; attention_bias false drops the biases. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "test.h"
#include "test_model_helpers.h"

static char data_dir[512];

/* Per layer: q 4096*2880 + 4096, k and v 512*2880 + 512 each, o 2880*4096 + 2880, 64 sinks:
 * 26550144 of attention; router 32*2880 + 32; 32 experts of gate_up 5760*2880 + 5760 and down
 * 2880*2880 + 2880: 796538880; norms 5760. 24 layers, embed and lm_head 201088*2880 each, the
 * final norm 2880: 20914757184. The 120b: 36 layers of 128 experts. Tensors 1 + L*(9 + 2 + 4E +
 * 2) + 2. */
static void test_shipped_counts(void) {
  static const struct {
    const char *name;
    int64_t params;
    int tensors;
    int64_t layers, experts;
  } cases[] = {
      {"gpt-oss-20b", 20914757184, 3387, 24, 32},
      {"gpt-oss-120b", 116829156672, 18903, 36, 128},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rf_model m;
    load_check(cases[i].name, cases[i].name, cases[i].params, cases[i].tensors, &m);
    ASSERT_STR_EQ(m.model_type, "gpt_oss");
    ASSERT_EQ(m.layers, cases[i].layers);
    ASSERT_EQ(m.experts, cases[i].experts);
    ASSERT_EQ(m.moe_layers, cases[i].layers);
    ASSERT_EQ(m.expert_intermediate, 2880);
    ASSERT_EQ(m.head_dim, 64);
    ASSERT_TRUE(m.qkv_bias && m.o_bias && m.sinks && m.stacked_experts);
    ASSERT_FALSE(m.tied_embeddings);
    ASSERT_EQ(m.dtype, RF_DTYPE_BF16);
    ASSERT_EQ(m.total_bytes, 2 * m.total_params);
    expect_tensor(&m, "model.layers.0.mlp.experts.31.gate_up_proj", RF_T_EXPERT_GATE_UP, 0, 5760,
                  2880);
    expect_tensor(&m, "model.layers.0.mlp.experts.31.down_proj", RF_T_EXPERT_DOWN, 0, 2880, 2880);
    expect_tensor(&m, "model.layers.0.self_attn.sinks", RF_T_SINKS, 0, 64, 0);
    rf_model_free(&m);
  }
}

/* Checks that tensors first, first+1, ... are model.layers.<layer>.<names[j]> of the given
 * kinds and shapes (cols 0 for 1-D). */
typedef struct {
  const char *name;
  rf_tensor_kind kind;
  int64_t rows, cols;
} want_tensor;

static void expect_layer(const rf_model *m, int first, int layer, const want_tensor *w, int count) {
  for (int j = 0; j < count; j++) {
    char name[RF_NAME_MAX];
    snprintf(name, sizeof name, "model.layers.%d.%s", layer, w[j].name);
    ASSERT_LT(first + j, m->tensor_count);
    ASSERT_STR_EQ(m->tensors[first + j].name, name);
    expect_tensor(m, name, w[j].kind, layer, w[j].rows, w[j].cols);
  }
}

static void test_tiny(void) {
  char path[640];
  snprintf(path, sizeof path, "%s/tiny-gpt-oss.json", data_dir);
  rf_model m;
  /* Attention: q 64*64 + 64, k and v 32*64 + 32, o 64*64 + 64, 4 sinks: 12484. Router 4*64 + 4;
   * 4 experts of gate_up 64*64 + 64 and down 64*32 + 64: 25088. Norms 128. Two layers, embed and
   * lm_head 512*64 each, the final norm 64: 141520. */
  load_check(path, "tiny-gpt-oss", 141520, 61, &m);
  ASSERT_EQ(m.experts, 4);
  ASSERT_EQ(m.expert_intermediate, 32);
  static const want_tensor layer[] = {
      {"self_attn.q_proj.weight", RF_T_Q, 64, 64},
      {"self_attn.q_proj.bias", RF_T_Q_BIAS, 64, 0},
      {"self_attn.k_proj.weight", RF_T_K, 32, 64},
      {"self_attn.k_proj.bias", RF_T_K_BIAS, 32, 0},
      {"self_attn.v_proj.weight", RF_T_V, 32, 64},
      {"self_attn.v_proj.bias", RF_T_V_BIAS, 32, 0},
      {"self_attn.o_proj.weight", RF_T_O, 64, 64},
      {"self_attn.o_proj.bias", RF_T_O_BIAS, 64, 0},
      {"self_attn.sinks", RF_T_SINKS, 4, 0},
      {"mlp.router.weight", RF_T_ROUTER, 4, 64},
      {"mlp.router.bias", RF_T_ROUTER_LINEAR_BIAS, 4, 0},
      {"mlp.experts.0.gate_up_proj", RF_T_EXPERT_GATE_UP, 64, 64},
      {"mlp.experts.1.gate_up_proj", RF_T_EXPERT_GATE_UP, 64, 64},
      {"mlp.experts.2.gate_up_proj", RF_T_EXPERT_GATE_UP, 64, 64},
      {"mlp.experts.3.gate_up_proj", RF_T_EXPERT_GATE_UP, 64, 64},
      {"mlp.experts.0.gate_up_proj_bias", RF_T_EXPERT_GATE_UP_BIAS, 64, 0},
      {"mlp.experts.1.gate_up_proj_bias", RF_T_EXPERT_GATE_UP_BIAS, 64, 0},
      {"mlp.experts.2.gate_up_proj_bias", RF_T_EXPERT_GATE_UP_BIAS, 64, 0},
      {"mlp.experts.3.gate_up_proj_bias", RF_T_EXPERT_GATE_UP_BIAS, 64, 0},
      {"mlp.experts.0.down_proj", RF_T_EXPERT_DOWN, 64, 32},
      {"mlp.experts.1.down_proj", RF_T_EXPERT_DOWN, 64, 32},
      {"mlp.experts.2.down_proj", RF_T_EXPERT_DOWN, 64, 32},
      {"mlp.experts.3.down_proj", RF_T_EXPERT_DOWN, 64, 32},
      {"mlp.experts.0.down_proj_bias", RF_T_EXPERT_DOWN_BIAS, 64, 0},
      {"mlp.experts.1.down_proj_bias", RF_T_EXPERT_DOWN_BIAS, 64, 0},
      {"mlp.experts.2.down_proj_bias", RF_T_EXPERT_DOWN_BIAS, 64, 0},
      {"mlp.experts.3.down_proj_bias", RF_T_EXPERT_DOWN_BIAS, 64, 0},
      {"input_layernorm.weight", RF_T_NORM, 64, 0},
      {"post_attention_layernorm.weight", RF_T_NORM, 64, 0},
  };
  int per = (int)(sizeof layer / sizeof layer[0]);
  ASSERT_EQ(per, 29);
  expect_layer(&m, 1, 0, layer, per);
  expect_layer(&m, 1 + per, 1, layer, per);
  expect_tensor(&m, "model.embed_tokens.weight", RF_T_EMBED, -1, 512, 64);
  expect_tensor(&m, "model.norm.weight", RF_T_NORM, -1, 64, 0);
  expect_tensor(&m, "lm_head.weight", RF_T_LM_HEAD, -1, 512, 64);
  for (int i = 0; i < m.tensor_count; i++) {
    const rf_tensor *t = &m.tensors[i];
    int expert = strstr(t->name, ".experts.") != NULL;
    ASSERT_EQ(t->expert >= 0, expert);
    ASSERT_EQ(rf_tensor_kind_is_moe(t->kind), expert || strstr(t->name, ".router.") != NULL);
  }
  ASSERT_EQ(m.tensors[rf_model_find(&m, "model.layers.1.mlp.experts.2.down_proj_bias")].expert, 2);
  ASSERT_STR_EQ(rf_tensor_kind_name(RF_T_EXPERT_GATE_UP), "expert_gate_up");
  ASSERT_TRUE(rf_tensor_kind_is_linear(RF_T_EXPERT_GATE_UP));
  ASSERT_FALSE(rf_tensor_kind_is_linear(RF_T_EXPERT_GATE_UP_BIAS));
  ASSERT_FALSE(rf_tensor_kind_is_linear(RF_T_SINKS));

  /* The checkpoint entries: the weights stacked [E, in, out], the biases [E, out]; the other
   * tensors stand alone. */
  rf_stack s;
  const rf_tensor *t = &m.tensors[rf_model_find(&m, "model.layers.1.mlp.experts.2.gate_up_proj")];
  ASSERT_TRUE(rf_model_stack(&m, t, &s));
  ASSERT_STR_EQ(s.name, "model.layers.1.mlp.experts.gate_up_proj");
  ASSERT_EQ(s.ndim, 3);
  ASSERT_EQ(s.shape[0], 4);
  ASSERT_EQ(s.shape[1], 64);
  ASSERT_EQ(s.shape[2], 64);
  ASSERT_EQ(s.member, 2);
  ASSERT_EQ(s.members, 4);
  ASSERT_TRUE(s.transposed);
  t = &m.tensors[rf_model_find(&m, "model.layers.0.mlp.experts.3.down_proj")];
  ASSERT_TRUE(rf_model_stack(&m, t, &s));
  ASSERT_STR_EQ(s.name, "model.layers.0.mlp.experts.down_proj");
  ASSERT_EQ(s.shape[1], 32); /* [E, Fe, D] */
  ASSERT_EQ(s.shape[2], 64);
  t = &m.tensors[rf_model_find(&m, "model.layers.0.mlp.experts.0.gate_up_proj_bias")];
  ASSERT_TRUE(rf_model_stack(&m, t, &s));
  ASSERT_STR_EQ(s.name, "model.layers.0.mlp.experts.gate_up_proj_bias");
  ASSERT_EQ(s.ndim, 2);
  ASSERT_EQ(s.shape[0], 4);
  ASSERT_EQ(s.shape[1], 64);
  ASSERT_FALSE(s.transposed);
  ASSERT_FALSE(
      rf_model_stack(&m, &m.tensors[rf_model_find(&m, "model.layers.0.mlp.router.bias")], &s));
  rf_model_free(&m);

  /* A Mixtral's experts are stored one by one. */
  snprintf(path, sizeof path, "%s/tiny-mixtral.json", data_dir);
  ASSERT_OK(rf_model_load(path, &m));
  t = &m.tensors[rf_model_find(&m, "model.layers.1.block_sparse_moe.experts.3.w1.weight")];
  ASSERT_FALSE(rf_model_stack(&m, t, &s));
  rf_model_free(&m);
}

/* attention_bias false: no q/k/v/o biases (the sinks and the experts' biases stay); a value
 * that is not a boolean is one line. */
static void test_attention_bias(void) {
  const char *p = write_tmp(
      "nobias.json",
      "{\"architectures\": [\"GptOssForCausalLM\"], \"vocab_size\": 512, \"hidden_size\": 64,"
      " \"intermediate_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
      " \"num_key_value_heads\": 2, \"head_dim\": 16, \"num_local_experts\": 4,"
      " \"attention_bias\": false}");
  rf_model m;
  /* tiny-gpt-oss less 64 + 32 + 32 + 64 biases a layer. */
  load_check(p, "nobias", 141520 - 2 * 192, 61 - 2 * 4, &m);
  ASSERT_EQ(rf_model_find(&m, "model.layers.0.self_attn.q_proj.bias"), -1);
  ASSERT_EQ(rf_model_find(&m, "model.layers.0.self_attn.o_proj.bias"), -1);
  ASSERT_GE(rf_model_find(&m, "model.layers.0.self_attn.sinks"), 0);
  rf_model_free(&m);
  p = write_tmp("badbias.json", "{\"model_type\": \"gpt_oss\", \"vocab_size\": 512,"
                                " \"hidden_size\": 64, \"intermediate_size\": 32,"
                                " \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                                " \"attention_bias\": 1}");
  expect_error(p, "badbias.json: key 'attention_bias' must be true or false");
  p = write_tmp("noexperts.json", "{\"model_type\": \"gpt_oss\", \"vocab_size\": 512,"
                                  " \"hidden_size\": 64, \"intermediate_size\": 32,"
                                  " \"num_hidden_layers\": 2, \"num_attention_heads\": 4}");
  expect_error(p, "noexperts.json: key 'num_local_experts' is missing or not a positive integer");
}

int main(void) {
  const char *src = getenv("REFIT_SOURCE_DIR"); /* set by CTest */
  ASSERT_TRUE(src != NULL && *src);
  snprintf(data_dir, sizeof data_dir, "%s/tests/data", src);
  const char *t = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/refit_test_model_gpt_oss_XXXXXX", t && *t ? t : "/tmp");
  ASSERT_TRUE(mkdtemp(tmpdir) != NULL);

  test_shipped_counts();
  test_tiny();
  test_attention_bias();

  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  ASSERT_EQ(system(cmd), 0);
  printf("test_model_gpt_oss: ok\n");
  fflush(stdout);
  return 0;
}
