/* Layout of mixture-of-experts and latent-attention models: exact trainer boxes under ep and
 * pp, vLLM's stacked expert tensors and their slots with and without rollout ep, the manifests
 * of Mixtral-8x7B and DeepSeek-V3 at tp=8 derived by hand, and the one-line errors. */
#include <stdlib.h>
#include <string.h>

#include "layout_helpers.h"

static void load_data(const char *file, rf_model *m) {
  char path[1024];
  const char *src = getenv("REFIT_SOURCE_DIR"); /* set by CTest */
  snprintf(path, sizeof path, "%s/tests/data/%s", src ? src : ".", file);
  ASSERT_OK(rf_model_load(path, m));
}

static int find(const rf_model *m, const char *name) {
  int i = rf_model_find(m, name);
  ASSERT_GE(i, 0);
  return i;
}

/* vLLM's shape of a rollout tensor (3-D for the stacked experts, else 1-D or 2-D). */
static void expect_shape(const rf_layout *lay, const char *name, int64_t a, int64_t b, int64_t c) {
  const rf_rollout_tensor *rt = rollout_tensor(lay, name);
  int ndim = c ? 3 : b ? 2 : 1;
  ASSERT_EQ(rt->vllm_ndim, ndim);
  ASSERT_EQ(rt->vllm_shape[0], a);
  if (ndim > 1)
    ASSERT_EQ(rt->vllm_shape[1], b);
  if (ndim > 2)
    ASSERT_EQ(rt->vllm_shape[2], c);
  ASSERT_EQ(rt->numel, a * (b ? b : 1) * (c ? c : 1));
}

/* tiny-mixtral: V=512, D=64, Fe=96, L=2, N=4, K=2, H=16, E=4 (w1, w2, w3 per expert). */
static void test_mixtral_ep_pp(void) {
  rf_model m;
  rf_layout lay;
  load_data("tiny-mixtral.json", &m);
  /* 16 ranks: tp fastest (2), fsdp (2), ep (2), pp (2). Rank 13 = tp 1, fsdp 0, ep 1, pp 1. */
  ASSERT_OK(
      make(&lay, &m, "fsdp=2,tp=2,ep=2,pp=2", "tp=2", RF_STYLE_FSDP2, RF_PLACEMENT_DISAGGREGATED));
  ASSERT_EQ(lay.trainer_ranks, 16);
  int w1_e3 = find(&m, "model.layers.1.block_sparse_moe.experts.3.w1.weight");
  int w2_e3 = find(&m, "model.layers.1.block_sparse_moe.experts.3.w2.weight");
  int w1_e0 = find(&m, "model.layers.1.block_sparse_moe.experts.0.w1.weight");
  int gate = find(&m, "model.layers.1.block_sparse_moe.gate.weight");
  int emb = find(&m, "model.embed_tokens.weight");
  int head = find(&m, "lm_head.weight");
  int q0 = find(&m, "model.layers.0.self_attn.q_proj.weight");
  /* fsdp2 w1 [96, 64]: tp halves the rows, then fsdp halves what is left. */
  expect_box(rf_layout_trainer_box(&lay, w1_e3, 13), 48, 72, 0, 64);
  expect_box(rf_layout_trainer_box(&lay, w2_e3, 13), 0, 32, 48, 96);
  expect_box(rf_layout_trainer_box(&lay, w1_e0, 13), 0, 0, 0, 0);   /* ep 0's expert */
  expect_box(rf_layout_trainer_box(&lay, w1_e0, 9), 48, 72, 0, 64); /* ep 0, pp 1 */
  expect_box(rf_layout_trainer_box(&lay, w1_e3, 5), 0, 0, 0, 0);    /* stage 0 */
  expect_box(rf_layout_trainer_box(&lay, gate, 13), 0, 2, 0, 64);   /* fsdp rows, over every ep */
  expect_box(rf_layout_trainer_box(&lay, gate, 9), 0, 2, 0, 64);
  expect_box(rf_layout_trainer_box(&lay, emb, 13), 0, 0, 0, 0); /* embeddings: stage 0 */
  expect_box(rf_layout_trainer_box(&lay, emb, 5), 256, 384, 0, 64);
  expect_box(rf_layout_trainer_box(&lay, head, 13), 256, 384, 0, 64); /* lm_head: the last */
  expect_box(rf_layout_trainer_box(&lay, q0, 13), 0, 0, 0, 0);
  ASSERT_EQ(rf_layout_tensor_stage(&lay, q0), 0);
  ASSERT_EQ(rf_layout_tensor_stage(&lay, w1_e3), 1);
  /* Rollout tp=2: w13 [4 experts, 2 x 48, 64] as [384, 64]; expert 3's up at row 3*96+48. */
  const rf_rollout_tensor *w13 =
      rollout_tensor(&lay, "model.layers.1.block_sparse_moe.experts.w13_weight");
  ASSERT_EQ(w13->shape[0], 384);
  ASSERT_EQ(w13->shape[1], 64);
  int w3_e3 = find(&m, "model.layers.1.block_sparse_moe.experts.3.w3.weight");
  ASSERT_EQ(lay.slots[w3_e3].row, 3 * 96 + 48);
  ASSERT_EQ(lay.slots[w2_e3].row, 3 * 64);
  expect_box(rf_layout_rollout_box(&lay, w3_e3, 1), 48, 96, 0, 64);
  expect_box(rf_layout_rollout_box(&lay, w2_e3, 1), 0, 64, 48, 96);
  ASSERT_EQ(rf_layout_rollout_split_dim(&lay, w2_e3), 1);
  rf_layout_free(&lay);

  /* Rollout ep over tp=2,dp=2: one whole expert per rank, on one rank of all replicas. */
  ASSERT_OK(make(&lay, &m, "fsdp=1", "tp=2,dp=2,ep", RF_STYLE_TUNIX, RF_PLACEMENT_DISAGGREGATED));
  ASSERT_EQ(lay.expert_group, 1);
  expect_box(rf_layout_rollout_box(&lay, w3_e3, 3), 0, 96, 0, 64);
  expect_box(rf_layout_rollout_box(&lay, w3_e3, 1), 0, 0, 0, 0);
  ASSERT_EQ(lay.slots[w3_e3].row, 96);
  ASSERT_EQ(lay.slots[w2_e3].row, 0);
  ASSERT_EQ(rf_layout_rollout_shared(&lay, w3_e3), 1);
  ASSERT_EQ(rf_layout_rollout_shared(&lay, gate), 0);
  expect_shape(&lay, "model.layers.1.block_sparse_moe.experts.w13_weight", 1, 192, 64);
  expect_shape(&lay, "model.layers.1.block_sparse_moe.experts.w2_weight", 1, 64, 96);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* tiny-deepseek: D=64, N=4, Rq=48, Rkv=32, Hn=16, Hr=8, Hv=16, E=4, Fe=32, Fs=64, layer 0
 * dense (F=128), layers 1-2 MoE with the fp32 correction bias. */
static void test_deepseek(void) {
  rf_model m;
  rf_layout lay;
  load_data("tiny-deepseek.json", &m);
  ASSERT_OK(make(&lay, &m, "tp=2,pp=3", "tp=2", RF_STYLE_FSDP2, RF_PLACEMENT_DISAGGREGATED));
  int qa = find(&m, "model.layers.1.self_attn.q_a_proj.weight");
  int kva = find(&m, "model.layers.1.self_attn.kv_a_proj_with_mqa.weight");
  int qb = find(&m, "model.layers.1.self_attn.q_b_proj.weight");
  int kvb = find(&m, "model.layers.1.self_attn.kv_b_proj.weight");
  int bias = find(&m, "model.layers.1.mlp.gate.e_score_correction_bias");
  int sup = find(&m, "model.layers.1.mlp.shared_experts.up_proj.weight");
  /* Rank 3 = tp 1 of stage 1 (layer 1). */
  expect_box(rf_layout_trainer_box(&lay, qa, 3), 0, 48, 0, 64);  /* replicated over tp */
  expect_box(rf_layout_trainer_box(&lay, qb, 3), 48, 96, 0, 48); /* 2 heads of 24 */
  expect_box(rf_layout_trainer_box(&lay, kvb, 3), 64, 128, 0, 32);
  expect_box(rf_layout_trainer_box(&lay, bias, 3), 0, 4, 0, 1);
  expect_box(rf_layout_trainer_box(&lay, qa, 1), 0, 0, 0, 0);
  ASSERT_EQ(m.tensors[bias].dtype, RF_DTYPE_FP32);
  const rf_rollout_tensor *a =
      rollout_tensor(&lay, "model.layers.1.self_attn.fused_qkv_a_proj.weight");
  ASSERT_EQ(a->shape[0], 48 + 32 + 8);
  ASSERT_EQ(lay.slots[kva].row, 48);
  ASSERT_EQ(lay.slots[kva].local, lay.slots[qa].local);
  expect_box(rf_layout_rollout_box(&lay, qb, 1), 48, 96, 0, 48);
  expect_box(rf_layout_rollout_box(&lay, kva, 1), 0, 40, 0, 64);
  ASSERT_EQ(lay.slots[sup].row, 32);
  const rf_rollout_tensor *b =
      rollout_tensor(&lay, "model.layers.1.mlp.gate.e_score_correction_bias");
  ASSERT_EQ(b->dtype, RF_DTYPE_FP32);
  ASSERT_EQ(b->bytes, 16);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* The manifests, derived by hand from the configs and vLLM's rules. Mixtral-8x7B: D=4096,
 * N=32, K=8, H=128, E=8, Fe=14336, V=32000. DeepSeek-V3: D=7168, N=128, Rq=1536, Rkv=512,
 * Hn=128, Hr=64, Hv=128, E=256, Fe=2048, Fs=2048, dense F=18432, V=129280. */
static void test_manifests(void) {
  rf_model m;
  rf_layout lay;
  ASSERT_OK(rf_model_load("mixtral-8x7b", &m));
  ASSERT_OK(make(&lay, &m, "fsdp=8", "tp=8", RF_STYLE_FSDP2, RF_PLACEMENT_DISAGGREGATED));
  const char *w13 = "model.layers.5.block_sparse_moe.experts.w13_weight";
  const char *w2 = "model.layers.5.block_sparse_moe.experts.w2_weight";
  expect_shape(&lay, "model.embed_tokens.weight", 4000, 4096, 0);
  expect_shape(&lay, "model.layers.5.self_attn.qkv_proj.weight", 512 + 2 * 128, 4096, 0);
  expect_shape(&lay, "model.layers.5.self_attn.o_proj.weight", 4096, 512, 0);
  expect_shape(&lay, "model.layers.5.block_sparse_moe.gate.weight", 8, 4096, 0);
  expect_shape(&lay, w13, 8, 2 * 1792, 4096);
  expect_shape(&lay, w2, 8, 4096, 1792);
  expect_shape(&lay, "model.layers.5.input_layernorm.weight", 4096, 0, 0);
  ASSERT_EQ(lay.rollout_tensor_count, 1 + 32 * 7 + 2);
  rf_layout_free(&lay);
  ASSERT_OK(make(&lay, &m, "fsdp=8", "tp=8,ep", RF_STYLE_FSDP2, RF_PLACEMENT_DISAGGREGATED));
  expect_shape(&lay, w13, 1, 2 * 14336, 4096);
  expect_shape(&lay, w2, 1, 4096, 14336);
  expect_shape(&lay, "model.layers.5.self_attn.qkv_proj.weight", 512 + 2 * 128, 4096, 0);
  rf_layout_free(&lay);
  rf_model_free(&m);

  ASSERT_OK(rf_model_load("deepseek-v3", &m));
  ASSERT_OK(make(&lay, &m, "fsdp=8", "tp=8", RF_STYLE_FSDP2, RF_PLACEMENT_DISAGGREGATED));
  const char *a = "model.layers.7.self_attn.";
  char name[128];
#define AT(suffix) (snprintf(name, sizeof name, "%s%s", a, suffix), name)
  expect_shape(&lay, AT("fused_qkv_a_proj.weight"), 1536 + 512 + 64, 7168, 0);
  expect_shape(&lay, AT("q_a_layernorm.weight"), 1536, 0, 0);
  expect_shape(&lay, AT("q_b_proj.weight"), 16 * 192, 1536, 0);
  expect_shape(&lay, AT("kv_a_layernorm.weight"), 512, 0, 0);
  expect_shape(&lay, AT("kv_b_proj.weight"), 16 * 256, 512, 0);
  expect_shape(&lay, AT("o_proj.weight"), 7168, 16 * 128, 0);
#undef AT
  expect_shape(&lay, "model.embed_tokens.weight", 16160, 7168, 0);
  expect_shape(&lay, "model.layers.2.mlp.gate_up_proj.weight", 2 * 2304, 7168, 0);
  expect_shape(&lay, "model.layers.2.mlp.down_proj.weight", 7168, 2304, 0);
  expect_shape(&lay, "model.layers.7.mlp.experts.w13_weight", 256, 2 * 256, 7168);
  expect_shape(&lay, "model.layers.7.mlp.experts.w2_weight", 256, 7168, 256);
  expect_shape(&lay, "model.layers.7.mlp.gate.weight", 256, 7168, 0);
  expect_shape(&lay, "model.layers.7.mlp.gate.e_score_correction_bias", 256, 0, 0);
  expect_shape(&lay, "model.layers.7.mlp.shared_experts.gate_up_proj.weight", 512, 7168, 0);
  expect_shape(&lay, "model.layers.7.mlp.shared_experts.down_proj.weight", 7168, 256, 0);
  ASSERT_EQ(rollout_tensor(&lay, "model.layers.7.mlp.gate.e_score_correction_bias")->bytes, 1024);
  /* embed, 3 dense layers of 10, 58 MoE layers of 14, norm, lm_head. */
  ASSERT_EQ(lay.rollout_tensor_count, 1 + 3 * 10 + 58 * 14 + 2);
  rf_layout_free(&lay);
  ASSERT_OK(make(&lay, &m, "fsdp=8", "tp=8,ep", RF_STYLE_FSDP2, RF_PLACEMENT_DISAGGREGATED));
  expect_shape(&lay, "model.layers.7.mlp.experts.w13_weight", 32, 2 * 2048, 7168);
  expect_shape(&lay, "model.layers.7.mlp.experts.w2_weight", 32, 7168, 2048);
  expect_shape(&lay, "model.layers.7.mlp.shared_experts.gate_up_proj.weight", 512, 7168, 0);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

static void expect_error(const rf_model *m, const char *trainer, const char *rollout,
                         rf_status status, const char *message) {
  char got[512] = "";
  rf_layout lay;
  rf_log_capture(got, sizeof got);
  ASSERT_STATUS(make(&lay, m, trainer, rollout, RF_STYLE_TUNIX, RF_PLACEMENT_DISAGGREGATED),
                status);
  rf_log_capture(NULL, 0);
  ASSERT_STR_EQ(got, message);
}

static void test_errors(void) {
  rf_model mix, dense;
  load_data("tiny-mixtral.json", &mix);
  ASSERT_OK(rf_model_load("tiny", &dense));
  expect_error(&mix, "ep=3", "tp=1", RF_ERR_USAGE,
               "trainer ep=3 does not divide the 4 experts of model tiny-mixtral; choose an ep "
               "that divides 4");
  expect_error(&dense, "ep=2", "tp=1", RF_ERR_USAGE,
               "trainer ep=2 needs experts, and model tiny has none; use ep=1");
  expect_error(&mix, "pp=3", "tp=1", RF_ERR_USAGE,
               "trainer pp=3 is more pipeline stages than model tiny-mixtral has layers (2); "
               "choose a pp of at most 2");
  expect_error(&mix, "fsdp=1", "tp=3,ep", RF_ERR_USAGE,
               "rollout ep puts the 4 experts of model tiny-mixtral over tp*dp = 3 ranks, which "
               "do not divide them; choose tp*dp that divides 4");
  expect_error(&dense, "fsdp=1", "tp=1,ep", RF_ERR_USAGE,
               "rollout ep needs experts, and model tiny has none; drop ep");
  expect_error(&mix, "fsdp=1", "tp=1,ep=2", RF_ERR_USAGE,
               "rollout layout 'tp=1,ep=2': ep is a switch (vLLM's --enable-expert-parallel over "
               "all tp*dp ranks), not a size; write ep");
  rf_model_free(&mix);
  rf_model_free(&dense);
}

static void test_parse_format(void) {
  rf_trainer_layout t;
  rf_rollout_layout r;
  char buf[64];
  ASSERT_OK(rf_trainer_layout_parse("pp=4,ep=8,tp=2,fsdp=2", &t));
  ASSERT_EQ(t.ep, 8);
  ASSERT_EQ(t.pp, 4);
  rf_trainer_layout_format(&t, buf, sizeof buf);
  ASSERT_STR_EQ(buf, "fsdp=2,tp=2,ep=8,pp=4");
  ASSERT_OK(rf_rollout_layout_parse("ep,tp=8,dp=2", &r));
  ASSERT_EQ(r.ep, 1);
  rf_rollout_layout_format(&r, buf, sizeof buf);
  ASSERT_STR_EQ(buf, "tp=8,dp=2,ep");
  ASSERT_OK(rf_rollout_layout_parse("tp=8", &r));
  ASSERT_EQ(r.ep, 0);
  ASSERT_STATUS(rf_rollout_layout_parse("tp=8,ep,ep", &r), RF_ERR_USAGE);
  ASSERT_STATUS(rf_trainer_layout_parse("fsdp=2,ep", &t), RF_ERR_USAGE);
}

int main(void) {
  test_parse_format();
  test_mixtral_ep_pp();
  test_deepseek();
  test_manifests();
  test_errors();
  return 0;
}
