/* Layout: exact trainer and rollout boxes on the tiny model, vLLM's fused tensors and slots,
 * and the one-line errors for layouts that do not divide. */
#include "layout_helpers.h"

static rf_model tiny;

static void test_parse(void) {
  rf_trainer_layout t;
  rf_rollout_layout r;
  ASSERT_OK(rf_trainer_layout_parse("tp=2,fsdp=4,dp=3", &t));
  ASSERT_EQ(t.fsdp, 4);
  ASSERT_EQ(t.tp, 2);
  ASSERT_EQ(t.dp, 3);
  ASSERT_OK(rf_rollout_layout_parse("tp=8", &r));
  ASSERT_EQ(r.tp, 8);
  ASSERT_EQ(r.dp, 1);
  char buf[64];
  rf_trainer_layout_format(&t, buf, sizeof buf);
  ASSERT_STR_EQ(buf, "fsdp=4,tp=2,dp=3");
  ASSERT_STATUS(rf_trainer_layout_parse("fsdp=0", &t), RF_ERR_USAGE);
  ASSERT_STATUS(rf_trainer_layout_parse("fsdp=2,", &t), RF_ERR_USAGE);
  ASSERT_STATUS(rf_trainer_layout_parse("fsdp=2,fsdp=2", &t), RF_ERR_USAGE);
  ASSERT_STATUS(rf_trainer_layout_parse("sp=2", &t), RF_ERR_USAGE);
  ASSERT_STATUS(rf_trainer_layout_parse("fsdp=2x", &t), RF_ERR_USAGE);
  ASSERT_STATUS(rf_rollout_layout_parse("fsdp=2", &r), RF_ERR_USAGE);
  ASSERT_STATUS(rf_rollout_layout_parse("", &r), RF_ERR_USAGE);
}

/* tiny: V=512, D=64, F=128, L=2, N=4, K=2, H=16. */
static void test_trainer_boxes(void) {
  rf_layout lay;
  int q = rf_model_find(&tiny, "model.layers.0.self_attn.q_proj.weight");
  int o = rf_model_find(&tiny, "model.layers.0.self_attn.o_proj.weight");
  int norm = rf_model_find(&tiny, "model.norm.weight");
  int emb = rf_model_find(&tiny, "model.embed_tokens.weight");
  ASSERT_OK(make(&lay, &tiny, "fsdp=2,tp=2", "tp=2", RF_STYLE_TUNIX, RF_PLACEMENT_DISAGGREGATED));
  ASSERT_EQ(lay.trainer_ranks, 4);
  ASSERT_EQ(lay.world_size, 6);
  /* Rank 3 is fsdp 1, tp 1: q rows by fsdp (2 heads of 16), columns by tp. */
  expect_box(rf_layout_trainer_box(&lay, q, 3), 32, 64, 32, 64);
  expect_box(rf_layout_trainer_box(&lay, q, 1), 0, 32, 32, 64);
  expect_box(rf_layout_trainer_box(&lay, o, 2), 32, 64, 0, 32);
  expect_box(rf_layout_trainer_box(&lay, norm, 1), 32, 64, 0, 1);
  expect_box(rf_layout_trainer_box(&lay, norm, 3), 32, 64, 0, 1);
  expect_box(rf_layout_trainer_box(&lay, emb, 2), 0, 256, 32, 64);
  rf_layout_free(&lay);

  ASSERT_OK(make(&lay, &tiny, "fsdp=2,tp=2,dp=2", "tp=1", RF_STYLE_FSDP2, RF_PLACEMENT_COLOCATED));
  ASSERT_EQ(lay.trainer_ranks, 8);
  ASSERT_EQ(lay.world_size, 8);
  /* fsdp2: tp takes heads on dim 0 first, fsdp halves the tp shard; rank 7 = replica 1, f1 t1. */
  expect_box(rf_layout_trainer_box(&lay, q, 7), 48, 64, 0, 64);
  expect_box(rf_layout_trainer_box(&lay, q, 3), 48, 64, 0, 64);
  expect_box(rf_layout_trainer_box(&lay, q, 1), 32, 48, 0, 64);
  expect_box(rf_layout_trainer_box(&lay, o, 1), 0, 32, 32, 64);
  expect_box(rf_layout_trainer_box(&lay, norm, 2), 32, 64, 0, 1);
  int tr, rr;
  rf_layout_roles(&lay, 5, &tr, &rr);
  ASSERT_EQ(tr, 5);
  ASSERT_EQ(rr, -1);
  rf_layout_roles(&lay, 0, &tr, &rr);
  ASSERT_EQ(tr, 0);
  ASSERT_EQ(rr, 0);
  rf_layout_free(&lay);
}

static void test_rollout(void) {
  rf_layout lay;
  ASSERT_OK(make(&lay, &tiny, "fsdp=2", "tp=4", RF_STYLE_TUNIX, RF_PLACEMENT_DISAGGREGATED));
  int q = rf_model_find(&tiny, "model.layers.1.self_attn.q_proj.weight");
  int k = rf_model_find(&tiny, "model.layers.1.self_attn.k_proj.weight");
  int v = rf_model_find(&tiny, "model.layers.1.self_attn.v_proj.weight");
  int up = rf_model_find(&tiny, "model.layers.1.mlp.up_proj.weight");
  int down = rf_model_find(&tiny, "model.layers.1.mlp.down_proj.weight");
  int emb = rf_model_find(&tiny, "model.embed_tokens.weight");
  expect_box(rf_layout_rollout_box(&lay, q, 2), 32, 48, 0, 64);
  /* 2 kv heads over tp=4: ranks 2 and 3 both hold head 1, as vLLM replicates them. */
  expect_box(rf_layout_rollout_box(&lay, k, 2), 16, 32, 0, 64);
  expect_box(rf_layout_rollout_box(&lay, k, 3), 16, 32, 0, 64);
  expect_box(rf_layout_rollout_box(&lay, k, 1), 0, 16, 0, 64);
  expect_box(rf_layout_rollout_box(&lay, down, 3), 0, 64, 96, 128);
  expect_box(rf_layout_rollout_box(&lay, emb, 1), 128, 256, 0, 64);
  ASSERT_EQ(rf_layout_rollout_world_rank(&lay, 3), 5);
  /* The fused qkv_proj holds 1 q head and one k and one v head: 48 rows. */
  const rf_rollout_tensor *qkv = &lay.rollout_tensors[lay.slots[q].local];
  ASSERT_STR_EQ(qkv->name, "model.layers.1.self_attn.qkv_proj.weight");
  ASSERT_EQ(qkv->shape[0], 48);
  ASSERT_EQ(qkv->shape[1], 64);
  ASSERT_EQ(lay.slots[k].local, lay.slots[q].local);
  ASSERT_EQ(lay.slots[k].row, 16);
  ASSERT_EQ(lay.slots[v].row, 32);
  const rf_rollout_tensor *gu = &lay.rollout_tensors[lay.slots[up].local];
  ASSERT_STR_EQ(gu->name, "model.layers.1.mlp.gate_up_proj.weight");
  ASSERT_EQ(gu->shape[0], 64);
  ASSERT_EQ(lay.slots[up].row, 32);
  /* embed, 2 x (qkv, o, gate_up, down, 2 norms), norm, lm_head. */
  ASSERT_EQ(lay.rollout_tensor_count, 1 + 2 * 6 + 2);
  ASSERT_EQ(rf_layout_rollout_split_dim(&lay, down), 1);
  ASSERT_EQ(rf_layout_rollout_split_dim(&lay, rf_model_find(&tiny, "model.norm.weight")), -1);
  rf_layout_free(&lay);
}

static void test_errors(void) {
  rf_layout lay;
  rf_model m8;
  ASSERT_OK(rf_model_load("llama-3.1-8b", &m8));
  /* The example: 32 heads over fsdp=3. */
  ASSERT_STATUS(make(&lay, &m8, "fsdp=3", "tp=2", RF_STYLE_TUNIX, RF_PLACEMENT_DISAGGREGATED),
                RF_ERR_LAYOUT);
  ASSERT_STATUS(make(&lay, &m8, "fsdp=1", "tp=3", RF_STYLE_TUNIX, RF_PLACEMENT_DISAGGREGATED),
                RF_ERR_LAYOUT);
  ASSERT_STATUS(make(&lay, &m8, "fsdp=1,tp=3", "tp=1", RF_STYLE_FSDP2, RF_PLACEMENT_DISAGGREGATED),
                RF_ERR_LAYOUT);
  /* 8 kv heads replicate over tp=16 and split over tp=4, but tp=12 does neither. */
  ASSERT_OK(make(&lay, &m8, "fsdp=1", "tp=16", RF_STYLE_TUNIX, RF_PLACEMENT_DISAGGREGATED));
  rf_layout_free(&lay);
  ASSERT_STATUS(make(&lay, &tiny, "fsdp=1", "tp=3", RF_STYLE_TUNIX, RF_PLACEMENT_DISAGGREGATED),
                RF_ERR_LAYOUT);
  rf_model_free(&m8);
}

int main(void) {
  ASSERT_OK(rf_model_load("tiny", &tiny));
  test_parse();
  test_trainer_boxes();
  test_rollout();
  test_errors();
  rf_model_free(&tiny);
  return 0;
}
