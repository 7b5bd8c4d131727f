/* FP8 rollouts in the layout: which tensors become float8_e4m3fn, the names, shapes and bytes of
 * their weight_scale_inv tensors (Llama-3.1-8B and DeepSeek-V3 at tp=8, with and without ep,
 * derived by hand from vLLM's rules: a fused tensor's scales are its members' block rows one
 * after another), the block grid helpers, and the block-cut error lines. */
#include <stdlib.h>
#include <string.h>

#include "layout_helpers.h"
#include "plan/plan.h"

static rf_status make_format(rf_layout *lay, const rf_model *m, const char *trainer,
                             const char *rollout, rf_rollout_dtype dtype) {
  rf_trainer_layout t;
  rf_rollout_layout r;
  RF_TRY(rf_trainer_layout_parse(trainer, &t));
  RF_TRY(rf_rollout_layout_parse(rollout, &r));
  t.style = RF_STYLE_FSDP2;
  t.order = RF_ORDER_HF;
  r.dtype = dtype;
  return rf_layout_init(lay, m, &t, &r, RF_PLACEMENT_DISAGGREGATED);
}

static rf_status make_fp8(rf_layout *lay, const rf_model *m, const char *trainer,
                          const char *rollout) {
  return make_format(lay, m, trainer, rollout, RF_FORMAT_FP8);
}

/* One rollout tensor: vLLM's shape (c = 0: 2-D, b = 0: 1-D), dtype and bytes; a scale names its
 * weight. */
static void expect_tensor(const rf_layout *lay, const char *name, int64_t a, int64_t b, int64_t c,
                          rf_dtype dtype, int64_t bytes) {
  const rf_rollout_tensor *rt = rollout_tensor(lay, name);
  int ndim = c ? 3 : b ? 2 : 1;
  ASSERT_EQ(rt->vllm_ndim, ndim);
  ASSERT_EQ(rt->vllm_shape[0], a);
  if (b)
    ASSERT_EQ(rt->vllm_shape[1], b);
  if (c)
    ASSERT_EQ(rt->vllm_shape[2], c);
  ASSERT_EQ(rt->dtype, dtype);
  ASSERT_EQ(rt->bytes, bytes);
  ASSERT_EQ(rt->numel * rf_dtype_size(dtype), bytes);
  const char *suffix = strstr(name, "_scale_inv");
  size_t len = strlen(name);
  int global = len > 8 && strcmp(name + len - 8, "_scale_2") == 0; /* nvfp4's weight_scale_2 */
  if (global)
    suffix = name + len - 8;
  if (!suffix && len > 6 && strcmp(name + len - 6, "_scale") == 0) /* mxfp8's weight_scale */
    suffix = name + len - 6;
  if (!suffix) {
    ASSERT_EQ(rt->scale_of, -1);
    return;
  }
  const rf_rollout_tensor *w = &lay->rollout_tensors[rt->scale_of];
  ASSERT_EQ((int64_t)strlen(w->name), (int64_t)(suffix - name));
  ASSERT_TRUE(strncmp(w->name, name, strlen(w->name)) == 0);
  /* Each scale follows its weight, as vLLM registers them, and a global its scale. */
  ASSERT_TRUE(rt == w + 1 + global);
}

static void test_grid(void) {
  rf_box b = {{0, 0}, {256, 384}};
  ASSERT_EQ(rf_layout_fp8_blocks(&b), 6);
  b = (rf_box){{128, 100}, {129, 300}}; /* one row, columns in blocks 0, 1 and 2 */
  ASSERT_EQ(rf_layout_fp8_blocks(&b), 3);
  b = (rf_box){{5, 5}, {5, 9}};
  ASSERT_EQ(rf_layout_fp8_blocks(&b), 0);
  rf_model m;
  rf_layout lay;
  ASSERT_OK(rf_model_load("llama-3.1-8b", &m));
  ASSERT_OK(make_fp8(&lay, &m, "fsdp=1", "tp=8"));
  int down = rf_model_find(&m, "model.layers.0.mlp.down_proj.weight"); /* [4096, 14336] */
  int norm = rf_model_find(&m, "model.layers.0.input_layernorm.weight");
  ASSERT_TRUE(rf_layout_fp8(&lay, down));
  ASSERT_FALSE(rf_layout_fp8(&lay, norm));
  ASSERT_FALSE(rf_layout_fp8(&lay, rf_model_find(&m, "lm_head.weight")));
  ASSERT_FALSE(rf_layout_fp8(&lay, rf_model_find(&m, "model.embed_tokens.weight")));
  b = (rf_box){{3968, 14208}, {4096, 14336}}; /* the last block */
  ASSERT_TRUE(rf_layout_fp8_aligned(&lay, down, &b));
  b.lo[1] = 14272;
  ASSERT_FALSE(rf_layout_fp8_aligned(&lay, down, &b));
  rf_layout_free(&lay);
  /* Without fp8 nothing is quantized. */
  ASSERT_OK(make(&lay, &m, "fsdp=1", "tp=8", RF_STYLE_FSDP2, RF_PLACEMENT_DISAGGREGATED));
  ASSERT_FALSE(rf_layout_fp8(&lay, down));
  ASSERT_EQ(rollout_tensor(&lay, "model.layers.0.mlp.down_proj.weight")->dtype, RF_DTYPE_BF16);
  ASSERT_EQ(lay.rollout_tensor_count, 1 + 32 * 6 + 2);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* Llama-3.1-8B at tp=8: q 4096/8 = 512 rows (4 blocks), k and v 1024/8 = 128 (1 each), 4096
 * columns (32); o 512 columns (4); gate and up 14336/8 = 1792 rows (14 each), down 1792
 * columns. */
static void test_llama(void) {
  rf_model m;
  rf_layout lay;
  ASSERT_OK(rf_model_load("llama-3.1-8b", &m));
  ASSERT_OK(make_fp8(&lay, &m, "fsdp=8", "tp=8"));
  const char *l = "model.layers.31.";
  char n[128];
#define AT(suffix) (snprintf(n, sizeof n, "%s%s", l, suffix), n)
  expect_tensor(&lay, AT("self_attn.qkv_proj.weight"), 768, 4096, 0, RF_DTYPE_FP8, 3145728);
  expect_tensor(&lay, AT("self_attn.qkv_proj.weight_scale_inv"), 6, 32, 0, RF_DTYPE_FP32, 768);
  expect_tensor(&lay, AT("self_attn.o_proj.weight"), 4096, 512, 0, RF_DTYPE_FP8, 2097152);
  expect_tensor(&lay, AT("self_attn.o_proj.weight_scale_inv"), 32, 4, 0, RF_DTYPE_FP32, 512);
  expect_tensor(&lay, AT("mlp.gate_up_proj.weight"), 3584, 4096, 0, RF_DTYPE_FP8, 14680064);
  expect_tensor(&lay, AT("mlp.gate_up_proj.weight_scale_inv"), 28, 32, 0, RF_DTYPE_FP32, 3584);
  expect_tensor(&lay, AT("mlp.down_proj.weight"), 4096, 1792, 0, RF_DTYPE_FP8, 7340032);
  expect_tensor(&lay, AT("mlp.down_proj.weight_scale_inv"), 32, 14, 0, RF_DTYPE_FP32, 1792);
#undef AT
  expect_tensor(&lay, "model.embed_tokens.weight", 16032, 4096, 0, RF_DTYPE_BF16, 131334144);
  expect_tensor(&lay, "lm_head.weight", 16032, 4096, 0, RF_DTYPE_BF16, 131334144);
  ASSERT_EQ(rollout_tensor(&lay, "model.norm.weight")->dtype, RF_DTYPE_BF16);
  /* 195 tensors without fp8, and four scales a layer. */
  ASSERT_EQ(lay.rollout_tensor_count, 195 + 32 * 4);
  /* A rollout rank holds: per layer 27262976 fp8 bytes, 6656 of scales and two norms of 8192;
   * the embeddings, lm_head and the final norm. */
  int64_t sum = 0;
  for (int i = 0; i < lay.rollout_tensor_count; i++)
    sum += lay.rollout_tensors[i].bytes;
  ASSERT_EQ(sum, 32 * (27262976 + 6656 + 2 * 8192) + 2 * 131334144 + 8192);
  /* Each logical tensor's slot still points at its weight, never at a scale. */
  for (int t = 0; t < m.tensor_count; t++)
    ASSERT_EQ(lay.rollout_tensors[lay.slots[t].local].scale_of, -1);
  int k = rf_model_find(&m, "model.layers.31.self_attn.k_proj.weight");
  ASSERT_STR_EQ(lay.rollout_tensors[lay.slots[k].local].name,
                "model.layers.31.self_attn.qkv_proj.weight");
  ASSERT_EQ(lay.slots[k].row, 512);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* DeepSeek-V3 at tp=8: 128 heads, 16 a rank. fused_qkv_a_proj = q_a (1536 rows, 12 blocks) then
 * kv_a (512 + 64 = 576 rows: 4.5 blocks, so 5, the last member's edge block padded), 7168
 * columns (56 blocks); q_b 16 x 192 = 3072 rows (24); kv_b 16 x 256 = 4096 (32) of 512 columns
 * (4); o 16 x 128 = 2048 columns (16); the dense MLP 18432/8 = 2304 (18 blocks); each expert
 * 2048/8 = 256 (2 blocks), 256 experts; the shared experts 2048/8 = 256. */
static void test_deepseek(void) {
  rf_model m;
  rf_layout lay;
  ASSERT_OK(rf_model_load("deepseek-v3", &m));
  ASSERT_OK(make_fp8(&lay, &m, "fsdp=8", "tp=8"));
  const char *a = "model.layers.7.";
  char n[128];
#define AT(suffix) (snprintf(n, sizeof n, "%s%s", a, suffix), n)
  expect_tensor(&lay, AT("self_attn.fused_qkv_a_proj.weight"), 2112, 7168, 0, RF_DTYPE_FP8,
                2112 * 7168);
  expect_tensor(&lay, AT("self_attn.fused_qkv_a_proj.weight_scale_inv"), 12 + 5, 56, 0,
                RF_DTYPE_FP32, 17 * 56 * 4);
  expect_tensor(&lay, AT("self_attn.q_b_proj.weight_scale_inv"), 24, 12, 0, RF_DTYPE_FP32,
                24 * 12 * 4);
  expect_tensor(&lay, AT("self_attn.kv_b_proj.weight_scale_inv"), 32, 4, 0, RF_DTYPE_FP32,
                32 * 4 * 4);
  expect_tensor(&lay, AT("self_attn.o_proj.weight"), 7168, 2048, 0, RF_DTYPE_FP8, 7168 * 2048);
  expect_tensor(&lay, AT("self_attn.o_proj.weight_scale_inv"), 56, 16, 0, RF_DTYPE_FP32,
                56 * 16 * 4);
  expect_tensor(&lay, AT("self_attn.q_a_layernorm.weight"), 1536, 0, 0, RF_DTYPE_BF16, 3072);
  expect_tensor(&lay, AT("mlp.experts.w13_weight"), 256, 512, 7168, RF_DTYPE_FP8,
                256LL * 512 * 7168);
  expect_tensor(&lay, AT("mlp.experts.w13_weight_scale_inv"), 256, 4, 56, RF_DTYPE_FP32,
                256 * 4 * 56 * 4);
  expect_tensor(&lay, AT("mlp.experts.w2_weight"), 256, 7168, 256, RF_DTYPE_FP8,
                256LL * 7168 * 256);
  expect_tensor(&lay, AT("mlp.experts.w2_weight_scale_inv"), 256, 56, 2, RF_DTYPE_FP32,
                256 * 56 * 2 * 4);
  expect_tensor(&lay, AT("mlp.shared_experts.gate_up_proj.weight_scale_inv"), 4, 56, 0,
                RF_DTYPE_FP32, 4 * 56 * 4);
  expect_tensor(&lay, AT("mlp.shared_experts.down_proj.weight_scale_inv"), 56, 2, 0, RF_DTYPE_FP32,
                56 * 2 * 4);
  expect_tensor(&lay, AT("mlp.gate.weight"), 256, 7168, 0, RF_DTYPE_BF16, 256 * 7168 * 2);
  ASSERT_EQ(rollout_tensor(&lay, AT("mlp.gate.e_score_correction_bias"))->dtype, RF_DTYPE_FP32);
#undef AT
  expect_tensor(&lay, "model.layers.2.mlp.gate_up_proj.weight_scale_inv", 36, 56, 0, RF_DTYPE_FP32,
                36 * 56 * 4);
  expect_tensor(&lay, "model.layers.2.mlp.down_proj.weight_scale_inv", 56, 18, 0, RF_DTYPE_FP32,
                56 * 18 * 4);
  /* 845 tensors without fp8; a dense layer adds 6 scales, a MoE layer 8. */
  ASSERT_EQ(lay.rollout_tensor_count, 845 + 3 * 6 + 58 * 8);
  rf_layout_free(&lay);

  /* With ep: 32 whole experts a rank, 2048 rows (16 blocks) each. */
  ASSERT_OK(make_fp8(&lay, &m, "fsdp=8", "tp=8,ep"));
  expect_tensor(&lay, "model.layers.7.mlp.experts.w13_weight", 32, 4096, 7168, RF_DTYPE_FP8,
                32LL * 4096 * 7168);
  expect_tensor(&lay, "model.layers.7.mlp.experts.w13_weight_scale_inv", 32, 32, 56, RF_DTYPE_FP32,
                32 * 32 * 56 * 4);
  expect_tensor(&lay, "model.layers.7.mlp.experts.w2_weight_scale_inv", 32, 56, 16, RF_DTYPE_FP32,
                32 * 56 * 16 * 4);
  expect_tensor(&lay, "model.layers.7.mlp.shared_experts.gate_up_proj.weight_scale_inv", 4, 56, 0,
                RF_DTYPE_FP32, 4 * 56 * 4);
  ASSERT_EQ(lay.rollout_tensor_count, 845 + 3 * 6 + 58 * 8);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* mxfp8: one E8M0 byte (u8) per 1x32 block, named weight_scale. Llama-3.1-8B at tp=8 as in
 * test_llama: every block row is a row, so a fused tensor's scale rows are its rows (qkv 512 +
 * 128 + 128 = 768, gate_up 2 x 1792 = 3584) and the scale columns are the columns / 32 (4096:
 * 128, o's 512: 16, down's 1792: 56); one scale byte per 32 fp8 bytes, 851968 a layer. */
static void test_mxfp8(void) {
  rf_model m;
  rf_layout lay;
  ASSERT_OK(rf_model_load("llama-3.1-8b", &m));
  ASSERT_OK(make_format(&lay, &m, "fsdp=8", "tp=8", RF_FORMAT_MXFP8));
  const char *l = "model.layers.31.";
  char n[128];
#define AT(suffix) (snprintf(n, sizeof n, "%s%s", l, suffix), n)
  expect_tensor(&lay, AT("self_attn.qkv_proj.weight"), 768, 4096, 0, RF_DTYPE_FP8, 3145728);
  expect_tensor(&lay, AT("self_attn.qkv_proj.weight_scale"), 768, 128, 0, RF_DTYPE_U8, 98304);
  expect_tensor(&lay, AT("self_attn.o_proj.weight_scale"), 4096, 16, 0, RF_DTYPE_U8, 65536);
  expect_tensor(&lay, AT("mlp.gate_up_proj.weight_scale"), 3584, 128, 0, RF_DTYPE_U8, 458752);
  expect_tensor(&lay, AT("mlp.down_proj.weight_scale"), 4096, 56, 0, RF_DTYPE_U8, 229376);
#undef AT
  ASSERT_EQ(lay.rollout_tensor_count, 195 + 32 * 4);
  int64_t sum = 0;
  for (int i = 0; i < lay.rollout_tensor_count; i++)
    sum += lay.rollout_tensors[i].bytes;
  ASSERT_EQ(sum, 32 * (27262976 + 851968 + 2 * 8192) + 2 * 131334144 + 8192);
  /* The grid: rows are blocks, columns on multiples of 32. */
  const rf_format *f = rf_layout_format(&lay);
  int down = rf_model_find(&m, "model.layers.0.mlp.down_proj.weight"); /* [4096, 14336] */
  rf_box b = {{3, 32}, {5, 100}}; /* 2 rows, column blocks 1, 2 and 3 */
  ASSERT_EQ(rf_format_box_blocks(f, &b), 6);
  ASSERT_FALSE(rf_layout_fp8_aligned(&lay, down, &b));
  b.hi[1] = 128;
  ASSERT_TRUE(rf_layout_fp8_aligned(&lay, down, &b));
  rf_layout_free(&lay);
  rf_model_free(&m);

  /* mxfp8-floor has the same tensors; stacked experts (DeepSeek-V3, tp=8): w13 [256, 2 x 256
   * rows, 7168 / 32 = 224], w2 [256, 7168, 256 / 32 = 8]; fused_qkv_a 1536 + 576 rows. */
  ASSERT_OK(rf_model_load("deepseek-v3", &m));
  ASSERT_OK(make_format(&lay, &m, "fsdp=8", "tp=8", RF_FORMAT_MXFP8_FLOOR));
  expect_tensor(&lay, "model.layers.7.mlp.experts.w13_weight_scale", 256, 512, 224, RF_DTYPE_U8,
                256 * 512 * 224);
  expect_tensor(&lay, "model.layers.7.mlp.experts.w2_weight_scale", 256, 7168, 8, RF_DTYPE_U8,
                256 * 7168 * 8);
  expect_tensor(&lay, "model.layers.7.self_attn.fused_qkv_a_proj.weight_scale", 2112, 224, 0,
                RF_DTYPE_U8, 2112 * 224);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* One manifest entry of rank 0, in order: name, vLLM shape, dtype, bytes. */
typedef struct {
  const char *name;
  int64_t a, b, c;
  rf_dtype dtype;
  int64_t bytes;
} entry;

static void expect_manifest(const rf_layout *lay, const entry *want, int n, int from) {
  for (int i = 0; i < n; i++) {
    ASSERT_STR_EQ(lay->rollout_tensors[from + i].name, want[i].name);
    expect_tensor(lay, want[i].name, want[i].a, want[i].b, want[i].c, want[i].dtype, want[i].bytes);
  }
}

/* The 4-bit formats: the weights are u8 [rows, cols / 2] (two e2m1 a byte, as vLLM's NVFP4 and
 * MXFP4 layers hold them); mxfp4's E8M0 scales [rows, cols / 32] row-major; nvfp4's e4m3 scales
 * [rows, cols / 16] padded to 128 x 4 tiles (per expert for stacked tensors, as vLLM's
 * swizzle_blockscale leaves them) and an fp32 weight_scale_2 per tensor or expert. tiny at
 * tp=2: qkv_proj 32 + 16 + 16 rows of 64 columns, o_proj 64 rows of 32, gate_up_proj 128 of
 * 64, down_proj 64 of 64. */
static void test_fp4(void) {
  rf_model m;
  rf_layout lay;
  ASSERT_OK(rf_model_load("tiny", &m));
  ASSERT_OK(make_format(&lay, &m, "fsdp=2", "tp=2", RF_FORMAT_MXFP4));
  const entry mx[] = {
      {"model.embed_tokens.weight", 256, 64, 0, RF_DTYPE_BF16, 32768},
      {"model.layers.0.self_attn.qkv_proj.weight", 64, 32, 0, RF_DTYPE_U8, 2048},
      {"model.layers.0.self_attn.qkv_proj.weight_scale", 64, 2, 0, RF_DTYPE_U8, 128},
      {"model.layers.0.self_attn.o_proj.weight", 64, 16, 0, RF_DTYPE_U8, 1024},
      {"model.layers.0.self_attn.o_proj.weight_scale", 64, 1, 0, RF_DTYPE_U8, 64},
      {"model.layers.0.mlp.gate_up_proj.weight", 128, 32, 0, RF_DTYPE_U8, 4096},
      {"model.layers.0.mlp.gate_up_proj.weight_scale", 128, 2, 0, RF_DTYPE_U8, 256},
      {"model.layers.0.mlp.down_proj.weight", 64, 32, 0, RF_DTYPE_U8, 2048},
      {"model.layers.0.mlp.down_proj.weight_scale", 64, 2, 0, RF_DTYPE_U8, 128},
      {"model.layers.0.input_layernorm.weight", 64, 0, 0, RF_DTYPE_BF16, 128},
  };
  expect_manifest(&lay, mx, (int)RF_ARRAY_LEN(mx), 0);
  ASSERT_EQ(lay.rollout_tensor_count, 23);
  int64_t sum = 0;
  for (int i = 0; i < lay.rollout_tensor_count; i++)
    sum += lay.rollout_tensors[i].bytes;
  ASSERT_EQ(sum, 85760);
  /* Element boxes become byte boxes: k_proj's rows at column 0..64 are bytes 0..32. */
  int k = rf_model_find(&m, "model.layers.0.self_attn.k_proj.weight");
  rf_box b = {{16, 32}, {32, 64}}, bytes = rf_layout_rollout_bytes(&lay, k, &b);
  ASSERT_EQ(bytes.lo[1], 16);
  ASSERT_EQ(bytes.hi[1], 32);
  ASSERT_EQ(bytes.hi[0], 32);
  ASSERT_EQ(rf_layout_rollout_esize(&lay, k), 1);
  ASSERT_EQ(rf_format_min_bucket(rf_layout_format(&lay)), 16 + 1);
  ASSERT_TRUE(lay.global_leader == NULL);
  rf_layout_free(&lay);

  ASSERT_OK(make_format(&lay, &m, "fsdp=2", "tp=2", RF_FORMAT_NVFP4));
  const entry nv[] = {
      {"model.embed_tokens.weight", 256, 64, 0, RF_DTYPE_BF16, 32768},
      {"model.layers.0.self_attn.qkv_proj.weight", 64, 32, 0, RF_DTYPE_U8, 2048},
      {"model.layers.0.self_attn.qkv_proj.weight_scale", 128, 4, 0, RF_DTYPE_FP8, 512},
      {"model.layers.0.self_attn.qkv_proj.weight_scale_2", 1, 0, 0, RF_DTYPE_FP32, 4},
      {"model.layers.0.self_attn.o_proj.weight", 64, 16, 0, RF_DTYPE_U8, 1024},
      {"model.layers.0.self_attn.o_proj.weight_scale", 128, 4, 0, RF_DTYPE_FP8, 512},
      {"model.layers.0.self_attn.o_proj.weight_scale_2", 1, 0, 0, RF_DTYPE_FP32, 4},
      {"model.layers.0.mlp.gate_up_proj.weight", 128, 32, 0, RF_DTYPE_U8, 4096},
      {"model.layers.0.mlp.gate_up_proj.weight_scale", 128, 4, 0, RF_DTYPE_FP8, 512},
      {"model.layers.0.mlp.gate_up_proj.weight_scale_2", 1, 0, 0, RF_DTYPE_FP32, 4},
      {"model.layers.0.mlp.down_proj.weight", 64, 32, 0, RF_DTYPE_U8, 2048},
      {"model.layers.0.mlp.down_proj.weight_scale", 128, 4, 0, RF_DTYPE_FP8, 512},
      {"model.layers.0.mlp.down_proj.weight_scale_2", 1, 0, 0, RF_DTYPE_FP32, 4},
      {"model.layers.0.input_layernorm.weight", 64, 0, 0, RF_DTYPE_BF16, 128},
  };
  expect_manifest(&lay, nv, (int)RF_ARRAY_LEN(nv), 0);
  ASSERT_EQ(lay.rollout_tensor_count, 31);
  sum = 0;
  for (int i = 0; i < lay.rollout_tensor_count; i++)
    sum += lay.rollout_tensors[i].bytes;
  ASSERT_EQ(sum, 88736);
  ASSERT_EQ(rf_format_min_bucket(rf_layout_format(&lay)), 8 + 1);
  /* q, k and v share qkv_proj's global; o its own. */
  int q = rf_model_find(&m, "model.layers.0.self_attn.q_proj.weight");
  int o = rf_model_find(&m, "model.layers.0.self_attn.o_proj.weight");
  ASSERT_EQ(lay.global_leader[k], q);
  ASSERT_EQ(lay.global_leader[o], o);
  ASSERT_EQ(lay.global_leader[rf_model_find(&m, "model.norm.weight")], -1);
  rf_layout_free(&lay);
  rf_model_free(&m);

  /* tiny-deepseek at tp=2: 4 experts of 32 / 2 = 16 rows each of gate and up, 64 columns; MLA's
   * q_a (48 rows) and kv_a (32 + 8) in fused_qkv_a_proj. */
  ASSERT_OK(rf_model_load("tiny-deepseek", &m));
  ASSERT_OK(make_format(&lay, &m, "fsdp=2", "tp=2", RF_FORMAT_NVFP4));
  const entry ds[] = {
      {"model.layers.1.mlp.experts.w13_weight", 4, 32, 32, RF_DTYPE_U8, 4096},
      {"model.layers.1.mlp.experts.w13_weight_scale", 4, 128, 4, RF_DTYPE_FP8, 2048},
      {"model.layers.1.mlp.experts.w13_weight_scale_2", 4, 0, 0, RF_DTYPE_FP32, 16},
      {"model.layers.1.mlp.experts.w2_weight", 4, 64, 8, RF_DTYPE_U8, 2048},
      {"model.layers.1.mlp.experts.w2_weight_scale", 4, 128, 4, RF_DTYPE_FP8, 2048},
      {"model.layers.1.mlp.experts.w2_weight_scale_2", 4, 0, 0, RF_DTYPE_FP32, 16},
  };
  const rf_rollout_tensor *w13 = rollout_tensor(&lay, ds[0].name);
  expect_manifest(&lay, ds, (int)RF_ARRAY_LEN(ds), (int)(w13 - lay.rollout_tensors));
  expect_tensor(&lay, "model.layers.1.self_attn.fused_qkv_a_proj.weight", 88, 32, 0, RF_DTYPE_U8,
                2816);
  /* Each expert's gate and up share its global, its down has its own; q_a and kv_a share. */
  int gate = rf_model_find(&m, "model.layers.1.mlp.experts.2.gate_proj.weight");
  int up = rf_model_find(&m, "model.layers.1.mlp.experts.2.up_proj.weight");
  int down = rf_model_find(&m, "model.layers.1.mlp.experts.2.down_proj.weight");
  int up3 = rf_model_find(&m, "model.layers.1.mlp.experts.3.up_proj.weight");
  ASSERT_EQ(lay.global_leader[up], gate);
  ASSERT_EQ(lay.global_leader[down], down);
  ASSERT_TRUE(lay.global_leader[up3] != gate);
  int qa = rf_model_find(&m, "model.layers.1.self_attn.q_a_proj.weight");
  ASSERT_EQ(
      lay.global_leader[rf_model_find(&m, "model.layers.1.self_attn.kv_a_proj_with_mqa.weight")],
      qa);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

static void expect_cut_as(const char *model, const char *rollout, rf_rollout_dtype dtype,
                          const char *message) {
  rf_model m;
  rf_layout lay;
  char got[512] = "";
  ASSERT_OK(rf_model_load(model, &m));
  rf_log_capture(got, sizeof got);
  ASSERT_STATUS(make_format(&lay, &m, "fsdp=1", rollout, dtype), RF_ERR_LAYOUT);
  rf_log_capture(NULL, 0);
  ASSERT_STR_EQ(got, message);
  rf_model_free(&m);
}

static void expect_cut(const char *model, const char *rollout, const char *message) {
  rf_model m;
  rf_layout lay;
  char got[512] = "";
  ASSERT_OK(rf_model_load(model, &m));
  rf_log_capture(got, sizeof got);
  ASSERT_STATUS(make_fp8(&lay, &m, "fsdp=1", rollout), RF_ERR_LAYOUT);
  rf_log_capture(NULL, 0);
  ASSERT_STR_EQ(got, message);
  rf_model_free(&m);
}

static void test_cuts(void) {
  /* 8 kv heads of 64 rows: tp=16 replicates them, a head a rank, half a block. */
  expect_cut("llama-3.2-1b", "tp=16",
             "--rollout-dtype fp8: tensor 'model.layers.0.self_attn.k_proj.weight' [512, 2048] "
             "is cut inside a 128x128 block by rollout tp=16; use tp=1, 2 or 4");
  /* 14336 / 32 = 448 rows of gate_proj, 3.5 blocks, ahead of up_proj in gate_up_proj. */
  expect_cut("llama-3.1-8b", "tp=32",
             "--rollout-dtype fp8: tensor 'model.layers.0.mlp.gate_proj.weight' [14336, 4096] "
             "is cut inside a 128x128 block by rollout tp=32; use tp=1, 2, 4, 8 or 16");
  /* The dense MLP's 18432 rows over tp=32: 576, 4.5 blocks (each expert's 2048 would be 64). */
  expect_cut("deepseek-v3", "tp=32",
             "--rollout-dtype fp8: tensor 'model.layers.0.mlp.gate_proj.weight' [18432, 7168] "
             "is cut inside a 128x128 block by rollout tp=32; use tp=1, 2, 4, 8 or 16");
  /* tiny's 64-row q_proj is followed by k_proj in qkv_proj at every tp: no tp fits. */
  expect_cut("tiny", "tp=1",
             "--rollout-dtype fp8: tensor 'model.layers.0.self_attn.q_proj.weight' [64, 64] is "
             "cut inside a 128x128 block by rollout tp=1, and so is some tensor at every tp up "
             "to 64; use --rollout-dtype model");
  /* mxfp8 cuts only columns at multiples of 32: DeepSeek-V2-Lite's dense down_proj has
   * 10944 / 4 = 2736 columns at tp=4, 85.5 blocks (tp=2: 5472, 171 blocks; tp=1 whole). */
  expect_cut_as("deepseek-v2-lite", "tp=4", RF_FORMAT_MXFP8,
                "--rollout-dtype mxfp8: tensor 'model.layers.0.mlp.down_proj.weight' [2048, "
                "10944] is cut inside a 1x32 block by rollout tp=4; use tp=1 or 2");
}

int main(void) {
  test_grid();
  test_llama();
  test_deepseek();
  test_cuts();
  test_mxfp8();
  test_fp4();
  return 0;
}
