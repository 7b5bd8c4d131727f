/* Layout of gpt-oss: the rollout manifest of tiny-gpt-oss under tp=2 and under ep, name by name
 * and shape by shape as vLLM's gpt_oss.py allocates it; the rows of the interleaved gate_up a tp
 * rank takes; w2_bias on tp rank 0 only; the sinks by heads; the trainer's boxes of the new
 * kinds; the storage order of a layer's experts; and the one-line errors. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "layout_helpers.h"

static void load_data(const char *file, rf_model *m) {
  char path[1024];
  const char *src = getenv("REFIT_SOURCE_DIR"); /* set by CTest */
  snprintf(path, sizeof path, "%s/tests/data/%s", src ? src : ".", file);
  ASSERT_OK(rf_model_load(path, m));
}

/* An fsdp=2 trainer and `rollout` in format `format`. */
static rf_status make_dtype(rf_layout *lay, const rf_model *m, const char *rollout,
                            rf_rollout_dtype format) {
  rf_trainer_layout tl;
  rf_rollout_layout rl;
  RF_TRY(rf_trainer_layout_parse("fsdp=2", &tl));
  RF_TRY(rf_rollout_layout_parse(rollout, &rl));
  rl.dtype = format;
  return rf_layout_init(lay, m, &tl, &rl, RF_PLACEMENT_DISAGGREGATED);
}

static int find(const rf_model *m, const char *name) {
  int i = rf_model_find(m, name);
  ASSERT_GE(i, 0);
  return i;
}

/* One rollout tensor as `refit plan --json` prints it: vLLM's name and shape. */
typedef struct {
  const char *name;
  int64_t shape[3]; /* trailing zeros end it */
} manifest_entry;

static void expect_manifest(const rf_layout *lay, const manifest_entry *want, int count) {
  ASSERT_EQ(lay->rollout_tensor_count, count);
  for (int i = 0; i < count; i++) {
    const rf_rollout_tensor *rt = &lay->rollout_tensors[i];
    int ndim = want[i].shape[2] ? 3 : want[i].shape[1] ? 2 : 1;
    ASSERT_STR_EQ(rt->name, want[i].name);
    ASSERT_EQ(rt->vllm_ndim, ndim);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
      ASSERT_EQ(rt->vllm_shape[d], want[i].shape[d]);
      numel *= want[i].shape[d];
    }
    ASSERT_EQ(rt->numel, numel);
    ASSERT_EQ(rt->dtype, RF_DTYPE_BF16);
  }
}

/* tiny-gpt-oss: V=512 (padded 512), D=64, N=4, K=2, H=16, E=4, Fe=32, L=2. */
static void test_tp(void) {
  rf_model m;
  rf_layout lay;
  load_data("tiny-gpt-oss.json", &m);
  ASSERT_OK(make(&lay, &m, "fsdp=2,tp=2", "tp=2", RF_STYLE_FSDP2, RF_PLACEMENT_DISAGGREGATED));
  /* Per tp rank: 2 of 4 heads, 1 of 2 kv heads, 16 of Fe=32 (32 interleaved gate/up rows). */
  static const manifest_entry layer0[] = {
      {"model.embedding.weight", {256, 64}},
      {"model.layers.0.attn.qkv_proj.weight", {64, 64}},
      {"model.layers.0.attn.qkv_proj.bias", {64}},
      {"model.layers.0.attn.o_proj.weight", {64, 32}},
      {"model.layers.0.attn.o_proj.bias", {64}},
      {"model.layers.0.attn.sinks", {2}},
      {"model.layers.0.mlp.router.weight", {4, 64}},
      {"model.layers.0.mlp.router.bias", {4}},
      {"model.layers.0.mlp.experts.w13_weight", {4, 32, 64}},
      {"model.layers.0.mlp.experts.w13_bias", {4, 32}},
      {"model.layers.0.mlp.experts.w2_weight", {4, 64, 16}},
      {"model.layers.0.mlp.experts.w2_bias", {4, 64}},
      {"model.layers.0.input_layernorm.weight", {64}},
      {"model.layers.0.post_attention_layernorm.weight", {64}},
  };
  manifest_entry want[29];
  memcpy(want, layer0, sizeof layer0);
  for (int i = 1; i < 14; i++) { /* layer 1: the same with the layer's number */
    char *name = malloc(RF_NAME_MAX);
    ASSERT_TRUE(name != NULL);
    snprintf(name, RF_NAME_MAX, "model.layers.1.%s", layer0[i].name + strlen("model.layers.0."));
    want[13 + i] = layer0[i];
    want[13 + i].name = name;
  }
  want[27] = (manifest_entry){"model.norm.weight", {64}};
  want[28] = (manifest_entry){"lm_head.weight", {256, 64}};
  expect_manifest(&lay, want, 29);
  for (int i = 14; i < 27; i++)
    free((char *)want[i].name);

  /* The interleaved gate_up [64, 64]: tp rank r takes rows [32r, 32r + 32), gate and up of
   * Fe columns [16r, 16r + 16), at expert e's 32 rows of w13_weight. */
  int gu3 = find(&m, "model.layers.1.mlp.experts.3.gate_up_proj");
  int gub3 = find(&m, "model.layers.1.mlp.experts.3.gate_up_proj_bias");
  int dn3 = find(&m, "model.layers.1.mlp.experts.3.down_proj");
  int dnb3 = find(&m, "model.layers.1.mlp.experts.3.down_proj_bias");
  int sinks = find(&m, "model.layers.1.self_attn.sinks");
  int ob = find(&m, "model.layers.1.self_attn.o_proj.bias");
  int rb = find(&m, "model.layers.1.mlp.router.bias");
  expect_box(rf_layout_rollout_box(&lay, gu3, 1), 32, 64, 0, 64);
  expect_box(rf_layout_rollout_box(&lay, gub3, 1), 32, 64, 0, 1);
  expect_box(rf_layout_rollout_box(&lay, dn3, 1), 0, 64, 16, 32);
  ASSERT_EQ(lay.slots[gu3].row, 3 * 32);
  ASSERT_EQ(lay.slots[gub3].row, 3 * 32);
  ASSERT_EQ(lay.slots[dn3].row, 3 * 64);
  ASSERT_EQ(lay.slots[dnb3].row, 3 * 64);
  ASSERT_EQ(lay.slots[gu3].local,
            lay.slots[find(&m, "model.layers.1.mlp.experts.0.gate_up_proj")].local);
  /* w2_bias is whole on tp rank 0 and nothing on rank 1, which vLLM zeroes. */
  expect_box(rf_layout_rollout_box(&lay, dnb3, 0), 0, 64, 0, 1);
  expect_box(rf_layout_rollout_box(&lay, dnb3, 1), 0, 0, 0, 0);
  ASSERT_EQ(rf_layout_rollout_split_dim(&lay, dnb3), -1);
  /* The sinks by heads; o_proj's and the router's biases whole on every rank. */
  expect_box(rf_layout_rollout_box(&lay, sinks, 1), 2, 4, 0, 1);
  expect_box(rf_layout_rollout_box(&lay, ob, 1), 0, 64, 0, 1);
  expect_box(rf_layout_rollout_box(&lay, rb, 1), 0, 4, 0, 1);

  /* Trainer fsdp2 fsdp=2,tp=2, rank 3 = tp 1, fsdp 1: gate_up and its bias column-parallel, down
   * row-parallel, its bias and o_proj's over fsdp only, the sinks by heads, the router's bias
   * replicated. */
  expect_box(rf_layout_trainer_box(&lay, gu3, 3), 48, 64, 0, 64);
  expect_box(rf_layout_trainer_box(&lay, gub3, 3), 48, 64, 0, 1);
  expect_box(rf_layout_trainer_box(&lay, dn3, 3), 32, 64, 16, 32);
  expect_box(rf_layout_trainer_box(&lay, dnb3, 3), 32, 64, 0, 1);
  expect_box(rf_layout_trainer_box(&lay, ob, 3), 32, 64, 0, 1);
  expect_box(rf_layout_trainer_box(&lay, sinks, 3), 3, 4, 0, 1);
  expect_box(rf_layout_trainer_box(&lay, rb, 3), 0, 4, 0, 1);

  /* The storage order: a layer's router, then its experts as the rollout stacks them (every
   * gate_up, every gate_up bias, every down, every down bias), then its norms. */
  int r0 = find(&m, "model.layers.0.mlp.router.bias");
  for (int i = 0; i < 16; i++)
    ASSERT_EQ(lay.order[lay.position[r0] + 1 + i], r0 + 1 + i);
  rf_layout_free(&lay);

  /* tunix: gate_up rows over tp as gate_up, the sinks over fsdp as q's heads. */
  ASSERT_OK(make(&lay, &m, "fsdp=2,tp=2", "tp=2", RF_STYLE_TUNIX, RF_PLACEMENT_DISAGGREGATED));
  expect_box(rf_layout_trainer_box(&lay, gu3, 3), 32, 64, 32, 64);
  expect_box(rf_layout_trainer_box(&lay, gub3, 3), 32, 64, 0, 1);
  expect_box(rf_layout_trainer_box(&lay, sinks, 1), 0, 2, 0, 1);
  expect_box(rf_layout_trainer_box(&lay, sinks, 2), 2, 4, 0, 1);
  expect_box(rf_layout_trainer_box(&lay, dnb3, 3), 32, 64, 0, 1);
  rf_layout_free(&lay);

  /* megatron: experts whole, biases too. */
  ASSERT_OK(make(&lay, &m, "tp=2,ep=2", "tp=2", RF_STYLE_MEGATRON, RF_PLACEMENT_DISAGGREGATED));
  expect_box(rf_layout_trainer_box(&lay, gub3, 1), 0, 64, 0, 1);
  expect_box(rf_layout_trainer_box(&lay, dnb3, 1), 0, 64, 0, 1);
  expect_box(rf_layout_trainer_box(&lay, gub3, 0), 0, 0, 0, 0);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* Rollout ep over tp=2: whole experts, two a rank, w2_bias with its expert on every tp rank. */
static void test_ep(void) {
  rf_model m;
  rf_layout lay;
  load_data("tiny-gpt-oss.json", &m);
  ASSERT_OK(make(&lay, &m, "ep=2", "tp=2,ep", RF_STYLE_FSDP2, RF_PLACEMENT_DISAGGREGATED));
  ASSERT_EQ(lay.expert_group, 2);
  const rf_rollout_tensor *w13 = rollout_tensor(&lay, "model.layers.0.mlp.experts.w13_weight");
  ASSERT_EQ(w13->vllm_shape[0], 2);
  ASSERT_EQ(w13->vllm_shape[1], 64);
  ASSERT_EQ(w13->vllm_shape[2], 64);
  const rf_rollout_tensor *b13 = rollout_tensor(&lay, "model.layers.0.mlp.experts.w13_bias");
  ASSERT_EQ(b13->vllm_ndim, 2);
  ASSERT_EQ(b13->vllm_shape[1], 64);
  const rf_rollout_tensor *w2 = rollout_tensor(&lay, "model.layers.0.mlp.experts.w2_weight");
  ASSERT_EQ(w2->vllm_shape[1], 64);
  ASSERT_EQ(w2->vllm_shape[2], 32);
  const rf_rollout_tensor *b2 = rollout_tensor(&lay, "model.layers.0.mlp.experts.w2_bias");
  ASSERT_EQ(b2->vllm_shape[0], 2);
  ASSERT_EQ(b2->vllm_shape[1], 64);
  int dnb3 = find(&m, "model.layers.1.mlp.experts.3.down_proj_bias");
  int gu2 = find(&m, "model.layers.1.mlp.experts.2.gate_up_proj");
  expect_box(rf_layout_rollout_box(&lay, dnb3, 1), 0, 64, 0, 1);
  expect_box(rf_layout_rollout_box(&lay, dnb3, 0), 0, 0, 0, 0);
  expect_box(rf_layout_rollout_box(&lay, gu2, 1), 0, 64, 0, 64);
  ASSERT_EQ(lay.slots[dnb3].row, 64);
  ASSERT_EQ(lay.slots[gu2].row, 0);
  ASSERT_EQ(rf_layout_rollout_owner(&lay, dnb3), 1);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

static void test_errors(void) {
  rf_model m;
  rf_layout lay;
  /* 8 heads and kv heads, Fe = 36: tp=8 divides the heads but not the 36 gate/up pairs. */
  char path[256];
  const char *t = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/refit_test_layout_gpt_oss_%d.json", t && *t ? t : "/tmp",
           (int)getpid());
  FILE *f = fopen(path, "w");
  ASSERT_TRUE(f != NULL);
  fputs("{\"model_type\": \"gpt_oss\", \"vocab_size\": 512, \"hidden_size\": 64,"
        " \"intermediate_size\": 36, \"num_hidden_layers\": 1, \"num_attention_heads\": 8,"
        " \"num_key_value_heads\": 8, \"head_dim\": 8, \"num_local_experts\": 2}",
        f);
  fclose(f);
  ASSERT_OK(rf_model_load(path, &m));
  unlink(path);
  ASSERT_STATUS(make(&lay, &m, "fsdp=1", "tp=8", RF_STYLE_FSDP2, RF_PLACEMENT_DISAGGREGATED),
                RF_ERR_LAYOUT);
  ASSERT_OK(make(&lay, &m, "fsdp=1", "tp=2,ep", RF_STYLE_FSDP2, RF_PLACEMENT_DISAGGREGATED));
  rf_layout_free(&lay);
  rf_model_free(&m);

  /* tiny-gpt-oss's experts are one 1x32 block wide: mxfp4 at tp=2 would cut down_proj. */
  load_data("tiny-gpt-oss.json", &m);
  ASSERT_STATUS(make_dtype(&lay, &m, "tp=2", RF_FORMAT_MXFP4), RF_ERR_LAYOUT);
  rf_model_free(&m);
}

/* A config written for one test, loaded and removed. */
static void load_text(const char *text, rf_model *m, rf_status want) {
  char path[256];
  const char *t = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/refit_test_layout_gpt_oss_q_%d.json", t && *t ? t : "/tmp",
           (int)getpid());
  FILE *f = fopen(path, "w");
  ASSERT_TRUE(f != NULL);
  fputs(text, f);
  fclose(f);
  ASSERT_STATUS(rf_model_load(path, m), want);
  unlink(path);
}

static void expect_rollout(const rf_layout *lay, const char *name, rf_dtype dt, int64_t a,
                           int64_t b, int64_t c) {
  const rf_rollout_tensor *rt = rollout_tensor(lay, name);
  ASSERT_EQ(rt->dtype, dt);
  ASSERT_EQ(rt->vllm_ndim, c ? 3 : 2);
  ASSERT_EQ(rt->vllm_shape[0], a);
  ASSERT_EQ(rt->vllm_shape[1], b);
  if (c)
    ASSERT_EQ(rt->vllm_shape[2], c);
}

/* MXFP4 covers the experts' weights only, as gpt-oss's checkpoints and vLLM's Mxfp4 method
 * have it: by gpt_oss's own rule for a config without quantization_config, by
 * modules_to_not_convert for one with it. With E=4, H=64, I=64 and tp=2, vLLM's shapes:
 * w13_weight [E, 2I/tp, H/2], w13_weight_scale [E, 2I/tp, H/32], w2_weight [E, H, I/(2 tp)],
 * w2_weight_scale [E, H, I/(32 tp)], and the attention, router and biases bf16. */
static void test_quantized(void) {
  rf_model m;
  rf_layout lay;
  load_text("{\"model_type\": \"gpt_oss\", \"vocab_size\": 512, \"hidden_size\": 64,"
            " \"intermediate_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
            " \"num_key_value_heads\": 2, \"head_dim\": 16, \"num_local_experts\": 4}",
            &m, RF_OK);
  uint64_t linear_but_experts = 0;
  for (int k = 0; k < RF_T_KIND_COUNT; k++)
    if (rf_tensor_kind_is_linear((rf_tensor_kind)k) && k != RF_T_EXPERT_GATE_UP &&
        k != RF_T_EXPERT_DOWN)
      linear_but_experts |= RF_KIND_BIT(k);
  ASSERT_EQ(m.unquantized_kinds, linear_but_experts);
  ASSERT_STR_EQ(m.native_format, "mxfp4");
  char kinds[128];
  rf_model_quantized_kinds(&m, kinds, sizeof kinds);
  ASSERT_STR_EQ(kinds, "expert_gate_up, expert_down");
  ASSERT_OK(make_dtype(&lay, &m, "tp=2", RF_FORMAT_MXFP4));
  const char *p = "model.layers.1.mlp.experts.";
  char name[RF_NAME_MAX];
  static const struct {
    const char *suffix;
    rf_dtype dt;
    int64_t shape[3];
  } experts[] = {
      {"w13_weight", RF_DTYPE_U8, {4, 64, 32}},     {"w13_weight_scale", RF_DTYPE_U8, {4, 64, 2}},
      {"w13_bias", RF_DTYPE_BF16, {4, 64, 0}},      {"w2_weight", RF_DTYPE_U8, {4, 64, 16}},
      {"w2_weight_scale", RF_DTYPE_U8, {4, 64, 1}}, {"w2_bias", RF_DTYPE_BF16, {4, 64, 0}}};
  for (size_t i = 0; i < sizeof experts / sizeof *experts; i++) {
    snprintf(name, sizeof name, "%s%s", p, experts[i].suffix);
    expect_rollout(&lay, name, experts[i].dt, experts[i].shape[0], experts[i].shape[1],
                   experts[i].shape[2]);
  }
  expect_rollout(&lay, "model.layers.1.attn.qkv_proj.weight", RF_DTYPE_BF16, 64, 64, 0);
  expect_rollout(&lay, "model.layers.1.attn.o_proj.weight", RF_DTYPE_BF16, 64, 32, 0);
  expect_rollout(&lay, "model.layers.1.mlp.router.weight", RF_DTYPE_BF16, 4, 64, 0);
  expect_rollout(&lay, "lm_head.weight", RF_DTYPE_BF16, 256, 64, 0);
  ASSERT_TRUE(rf_layout_fp8(&lay, find(&m, "model.layers.1.mlp.experts.3.down_proj")));
  ASSERT_FALSE(rf_layout_fp8(&lay, find(&m, "model.layers.1.self_attn.q_proj.weight")));
  rf_layout_free(&lay);
  rf_model_free(&m);

  /* gpt-oss-20b's quantization_config names the same modules (only the kinds it has). */
  ASSERT_OK(rf_model_load("gpt-oss-20b", &m));
  rf_model_quantized_kinds(&m, kinds, sizeof kinds);
  ASSERT_STR_EQ(kinds, "expert_gate_up, expert_down");
  ASSERT_STR_EQ(m.native_format, "mxfp4");
  rf_model_free(&m);

  /* modules_to_not_convert is data for any model: a llama whose attention stays bf16. */
  load_text("{\"model_type\": \"llama\", \"vocab_size\": 512, \"hidden_size\": 64,"
            " \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
            " \"quantization_config\": {\"quant_method\": \"fp8\","
            " \"modules_to_not_convert\": [\"model.layers.*.self_attn\", \"lm_head\"]}}",
            &m, RF_OK);
  rf_model_quantized_kinds(&m, kinds, sizeof kinds);
  ASSERT_STR_EQ(kinds, "gate_proj, up_proj, down_proj");
  ASSERT_STR_EQ(m.native_format, "fp8");
  rf_model_free(&m);
  /* One layer's attention but not the other's: refit quantizes kinds, so it is refused. */
  load_text(
      "{\"model_type\": \"llama\", \"vocab_size\": 512, \"hidden_size\": 64,"
      " \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
      " \"quantization_config\": {\"modules_to_not_convert\": [\"model.layers.0.self_attn\"]}}",
      &m, RF_ERR_MODEL);
  rf_model_free(&m);
}

int main(void) {
  test_tp();
  test_ep();
  test_errors();
  test_quantized();
  printf("test_layout_gpt_oss: ok\n");
  return 0;
}
