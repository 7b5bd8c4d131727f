/* test_model: the shipped configs give the published parameter counts, tensors come out in HF
 * checkpoint order with the right kinds and shapes, configs given by path work for every
 * supported model_type, and each kind of bad input gives RF_ERR_MODEL with one error line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model.h"
#include "test.h"
#include "test_model_helpers.h"

/* The published counts (model cards, keras-hub presets) for every shipped config. */
static void test_shipped(void) {
  static const struct {
    const char *name;
    int64_t params;
    int tensors;
    int tied;
  } cases[] = {
      /* tiny by hand: embed 512*64 = 32768; per layer q 64*64 = 4096, k and v 32*64 = 2048
       * each, o 4096, gate/up/down 128*64 = 8192 each, two norms of 64: 36992, so 73984 for
       * two layers; final norm 64; lm_head 32768. 32768 + 73984 + 64 + 32768 = 139584.
       * Tensors: 1 + 2*9 + 1 + 1 = 21. */
      {"tiny", 139584, 21, 0},
      {"llama-3.2-1b", 1235814400, 146, 1},
      {"llama-3.1-8b", 8030261248, 291, 0},
      {"llama-3.1-70b", 70553706496, 723, 0},
      {"llama-3.1-405b", 405853388800, 1137, 0},
      {"gemma-2b", 2506172416, 164, 1},   /* 1 + 18*9 + 1: tied by gemma's default */
      {"gemma-7b", 8537680896, 254, 1},   /* 1 + 28*9 + 1 */
      {"gemma-2-9b", 9241705984, 464, 1}, /* 1 + 42*11 + 1 */
      {"gemma-3-1b", 999885952, 340, 1},  /* 1 + 26*13 + 1 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rf_model m;
    load_check(cases[i].name, cases[i].name, cases[i].params, cases[i].tensors, &m);
    ASSERT_EQ(m.tied_embeddings, cases[i].tied);
    ASSERT_EQ(m.dtype, RF_DTYPE_BF16);
    ASSERT_EQ(m.total_bytes, 2 * cases[i].params);
    rf_model_free(&m);
    ASSERT_TRUE(m.tensors == NULL);
  }
}

static void test_llama_shapes(void) {
  rf_model m;
  ASSERT_OK(rf_model_load("llama-3.1-8b", &m));
  ASSERT_STR_EQ(m.model_type, "llama");
  ASSERT_EQ(m.vocab, 128256);
  ASSERT_EQ(m.hidden, 4096);
  ASSERT_EQ(m.layers, 32);
  ASSERT_EQ(m.heads, 32);
  ASSERT_EQ(m.kv_heads, 8);
  ASSERT_EQ(m.head_dim, 128);
  ASSERT_EQ(m.intermediate, 14336);
  ASSERT_EQ(m.norms_per_layer, 2);
  ASSERT_FALSE(m.qkv_bias);
  ASSERT_FALSE(m.head_norms);
  ASSERT_EQ(m.total_bytes, 16060522496);
  expect_tensor(&m, "model.embed_tokens.weight", RF_T_EMBED, -1, 128256, 4096);
  expect_tensor(&m, "model.layers.0.self_attn.q_proj.weight", RF_T_Q, 0, 4096, 4096);
  expect_tensor(&m, "model.layers.0.self_attn.k_proj.weight", RF_T_K, 0, 1024, 4096);
  expect_tensor(&m, "model.layers.7.self_attn.v_proj.weight", RF_T_V, 7, 1024, 4096);
  expect_tensor(&m, "model.layers.31.self_attn.o_proj.weight", RF_T_O, 31, 4096, 4096);
  expect_tensor(&m, "model.layers.3.mlp.gate_proj.weight", RF_T_GATE, 3, 14336, 4096);
  expect_tensor(&m, "model.layers.3.mlp.up_proj.weight", RF_T_UP, 3, 14336, 4096);
  expect_tensor(&m, "model.layers.3.mlp.down_proj.weight", RF_T_DOWN, 3, 4096, 14336);
  expect_tensor(&m, "model.layers.31.post_attention_layernorm.weight", RF_T_NORM, 31, 4096, 0);
  expect_tensor(&m, "model.norm.weight", RF_T_NORM, -1, 4096, 0);
  expect_tensor(&m, "lm_head.weight", RF_T_LM_HEAD, -1, 128256, 4096);
  ASSERT_EQ(rf_model_find(&m, "lm_head.weight"), 290);
  ASSERT_EQ(rf_model_find(&m, "model.layers.32.mlp.up_proj.weight"), -1);
  /* The per-layer order is q, k, v, o, gate, up, down, input norm, post-attention norm. */
  static const char *order[] = {
      "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
      "self_attn.o_proj.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
      "mlp.down_proj.weight",    "input_layernorm.weight",  "post_attention_layernorm.weight"};
  for (int j = 0; j < 9; j++) {
    char want[RF_NAME_MAX];
    snprintf(want, sizeof want, "model.layers.1.%s", order[j]);
    ASSERT_STR_EQ(m.tensors[1 + 9 + j].name, want);
  }
  ASSERT_STR_EQ(rf_tensor_kind_name(m.tensors[1].kind), "q_proj");
  ASSERT_STR_EQ(rf_tensor_kind_name(RF_T_HEAD_NORM), "head_norm");
  rf_model_free(&m);

  ASSERT_OK(rf_model_load("llama-3.2-1b", &m));
  ASSERT_EQ(rf_model_find(&m, "lm_head.weight"), -1);
  ASSERT_STR_EQ(m.tensors[145].name, "model.norm.weight");
  expect_tensor(&m, "model.layers.15.self_attn.k_proj.weight", RF_T_K, 15, 512, 2048);
  rf_model_free(&m);
}

static void test_gemma(void) {
  rf_model m;
  /* gemma-7b: head_dim 256 is not hidden/heads = 192, and must win. */
  ASSERT_OK(rf_model_load("gemma-7b", &m));
  ASSERT_EQ(m.head_dim, 256);
  expect_tensor(&m, "model.layers.0.self_attn.q_proj.weight", RF_T_Q, 0, 4096, 3072);
  expect_tensor(&m, "model.layers.0.self_attn.o_proj.weight", RF_T_O, 0, 3072, 4096);
  expect_tensor(&m, "model.layers.0.self_attn.k_proj.weight", RF_T_K, 0, 4096, 3072);
  rf_model_free(&m);

  ASSERT_OK(rf_model_load("gemma-2-9b", &m));
  ASSERT_STR_EQ(m.model_type, "gemma2");
  ASSERT_EQ(m.norms_per_layer, 4);
  static const char *norms[] = {"input_layernorm.weight", "post_attention_layernorm.weight",
                                "pre_feedforward_layernorm.weight",
                                "post_feedforward_layernorm.weight"};
  for (int j = 0; j < 4; j++) { /* layer 0 spans tensors 1..11; its norms are the last four */
    char want[RF_NAME_MAX];
    snprintf(want, sizeof want, "model.layers.0.%s", norms[j]);
    ASSERT_STR_EQ(m.tensors[8 + j].name, want);
    expect_tensor(&m, want, RF_T_NORM, 0, 3584, 0);
  }
  rf_model_free(&m);

  ASSERT_OK(rf_model_load("gemma-3-1b", &m));
  ASSERT_STR_EQ(m.model_type, "gemma3_text");
  ASSERT_TRUE(m.head_norms);
  ASSERT_EQ(m.head_dim, 256);
  ASSERT_STR_EQ(m.tensors[5].name, "model.layers.0.self_attn.q_norm.weight");
  ASSERT_STR_EQ(m.tensors[6].name, "model.layers.0.self_attn.k_norm.weight");
  expect_tensor(&m, "model.layers.25.self_attn.q_norm.weight", RF_T_HEAD_NORM, 25, 256, 0);
  expect_tensor(&m, "model.layers.25.self_attn.k_norm.weight", RF_T_HEAD_NORM, 25, 256, 0);
  expect_tensor(&m, "model.layers.25.self_attn.k_proj.weight", RF_T_K, 25, 256, 1152);
  expect_tensor(&m, "model.layers.25.post_feedforward_layernorm.weight", RF_T_NORM, 25, 1152, 0);
  rf_model_free(&m);
}

/* Qwen2-0.5B's config.json: the q/k/v biases. */
static const char qwen2_json[] =
    "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0,\n"
    " \"bos_token_id\": 151643, \"eos_token_id\": 151643, \"hidden_act\": \"silu\",\n"
    " \"hidden_size\": 896, \"initializer_range\": 0.02, \"intermediate_size\": 4864,\n"
    " \"max_position_embeddings\": 131072, \"max_window_layers\": 24,\n"
    " \"model_type\": \"qwen2\", \"num_attention_heads\": 14, \"num_hidden_layers\": 24,\n"
    " \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0,\n"
    " \"sliding_window\": 131072, \"tie_word_embeddings\": true,\n"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.40.1\",\n"
    " \"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}\n";

/* Mistral-7B-v0.1's config.json: no head_dim key. */
static const char mistral_json[] =
    "{\"architectures\": [\"MistralForCausalLM\"], \"bos_token_id\": 1, \"eos_token_id\": 2,\n"
    " \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"initializer_range\": 0.02,\n"
    " \"intermediate_size\": 14336, \"max_position_embeddings\": 32768,\n"
    " \"model_type\": \"mistral\", \"num_attention_heads\": 32, \"num_hidden_layers\": 32,\n"
    " \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0,\n"
    " \"sliding_window\": 4096, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\",\n"
    " \"transformers_version\": \"4.34.0.dev0\", \"use_cache\": true, \"vocab_size\": 32000}\n";

/* Mistral-Nemo-Base-2407: head_dim 128 while hidden/heads is 160; written with the newer
 * `dtype` key instead of torch_dtype. */
static const char nemo_json[] =
    "{\"architectures\": [\"MistralForCausalLM\"], \"head_dim\": 128, \"hidden_size\": 5120,\n"
    " \"intermediate_size\": 14336, \"model_type\": \"mistral\", \"num_attention_heads\": 32,\n"
    " \"num_hidden_layers\": 40, \"num_key_value_heads\": 8, \"rope_theta\": 1000000.0,\n"
    " \"sliding_window\": null, \"tie_word_embeddings\": false, \"dtype\": \"bfloat16\",\n"
    " \"vocab_size\": 131072}\n";

static void test_paths(void) {
  rf_model m;
  /* Qwen2-0.5B: embed 151936*896 = 136134656; per layer q 802816 + 896, k and v
   * 114688 + 128 each, o 802816, mlp 3*4864*896 = 13074432, norms 1792: 14912384; times 24
   * = 357897216; final norm 896; tied. Total 494032768. Tensors 1 + 24*12 + 1 = 290. */
  const char *p = write_tmp("qwen2-0.5b.json", qwen2_json);
  load_check(p, "qwen2-0.5b", 494032768, 290, &m);
  ASSERT_TRUE(m.qkv_bias);
  ASSERT_EQ(m.head_dim, 64);
  ASSERT_STR_EQ(m.tensors[2].name, "model.layers.0.self_attn.q_proj.bias");
  ASSERT_STR_EQ(m.tensors[4].name, "model.layers.0.self_attn.k_proj.bias");
  ASSERT_STR_EQ(m.tensors[6].name, "model.layers.0.self_attn.v_proj.bias");
  expect_tensor(&m, "model.layers.0.self_attn.q_proj.bias", RF_T_Q_BIAS, 0, 896, 0);
  expect_tensor(&m, "model.layers.23.self_attn.k_proj.bias", RF_T_K_BIAS, 23, 128, 0);
  expect_tensor(&m, "model.layers.23.self_attn.v_proj.bias", RF_T_V_BIAS, 23, 128, 0);
  expect_tensor(&m, "model.layers.23.self_attn.v_proj.weight", RF_T_V, 23, 128, 896);
  rf_model_free(&m);

  /* A file named config.json takes its directory's name, as an HF snapshot would. */
  p = write_tmp("Mistral-7B-v0.1/config.json", mistral_json);
  load_check(p, "Mistral-7B-v0.1", 7241732096, 291, &m);
  ASSERT_STR_EQ(m.model_type, "mistral");
  ASSERT_EQ(m.head_dim, 128);
  rf_model_free(&m);

  /* Mistral-Nemo: 131072*5120*2 + 40*272640000 + 5120 = 12247782400. */
  p = write_tmp("mistral-nemo.json", nemo_json);
  load_check(p, "mistral-nemo", 12247782400, 363, &m);
  ASSERT_EQ(m.head_dim, 128);
  expect_tensor(&m, "model.layers.0.self_attn.q_proj.weight", RF_T_Q, 0, 4096, 5120);
  expect_tensor(&m, "model.layers.0.self_attn.o_proj.weight", RF_T_O, 0, 5120, 4096);
  rf_model_free(&m);

  /* The same tiny model in fp32 by path: 4 bytes an element, and a different digest. */
  char *fp32 = NULL;
  {
    rf_model tiny;
    ASSERT_OK(rf_model_load("tiny", &tiny));
    uint64_t d_tiny = rf_model_digest(&tiny);
    ASSERT_U64_EQ(rf_model_digest(&tiny), d_tiny);
    rf_model again;
    ASSERT_OK(rf_model_load("tiny", &again));
    ASSERT_U64_EQ(rf_model_digest(&again), d_tiny);
    rf_model_free(&again);

    p = write_tmp("tiny.json",
                  "{\"model_type\": \"llama\", \"vocab_size\": 512,"
                  " \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
                  " \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                  " \"torch_dtype\": \"float32\"}");
    fp32 = strdup(p);
    load_check(fp32, "tiny", 139584, 21, &m);
    ASSERT_EQ(m.dtype, RF_DTYPE_FP32);
    ASSERT_EQ(m.total_bytes, 4 * 139584);
    ASSERT_TRUE(rf_model_digest(&m) != d_tiny);
    rf_model_free(&m);

    ASSERT_OK(rf_model_load("llama-3.1-8b", &m));
    ASSERT_TRUE(rf_model_digest(&m) != d_tiny);
    rf_model_free(&m);
    rf_model_free(&tiny);
  }

  /* $REFIT_MODEL_DIR comes first in the search for a shipped name. */
  const char *old = getenv("REFIT_MODEL_DIR");
  char *saved = old ? strdup(old) : NULL;
  setenv("REFIT_MODEL_DIR", tmpdir, 1);
  ASSERT_OK(rf_model_load("tiny", &m));
  ASSERT_EQ(m.dtype, RF_DTYPE_FP32);
  rf_model_free(&m);
  char list[256];
  rf_model_list_shipped(list, sizeof list);
  ASSERT_TRUE(strstr(list, "qwen2-0.5b") != NULL);
  if (saved)
    setenv("REFIT_MODEL_DIR", saved, 1);
  else
    unsetenv("REFIT_MODEL_DIR");
  free(saved);
  unlink(fp32);
  free(fp32);
}

static void test_dtype_and_list(void) {
  rf_dtype dt;
  static const struct {
    const char *text;
    rf_dtype dt;
  } ok[] = {{"bf16", RF_DTYPE_BF16},    {"bfloat16", RF_DTYPE_BF16}, {"fp16", RF_DTYPE_FP16},
            {"float16", RF_DTYPE_FP16}, {"half", RF_DTYPE_FP16},     {"fp32", RF_DTYPE_FP32},
            {"float32", RF_DTYPE_FP32}, {"float", RF_DTYPE_FP32}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    ASSERT_OK(rf_dtype_parse(ok[i].text, &dt));
    ASSERT_EQ(dt, ok[i].dt);
  }
  ASSERT_TRUE(rf_dtype_parse("int8", &dt) != RF_OK);
  ASSERT_STR_EQ(rf_dtype_name(RF_DTYPE_BF16), "bf16");
  ASSERT_STR_EQ(rf_dtype_name(RF_DTYPE_FP32), "fp32");
  ASSERT_EQ(rf_dtype_size(RF_DTYPE_FP16), 2);
  ASSERT_EQ(rf_dtype_size(RF_DTYPE_FP32), 4);

  char list[512];
  rf_model_list_shipped(list, sizeof list);
  ASSERT_TRUE(strstr(list, "llama-3.1-8b") != NULL);
  ASSERT_TRUE(strstr(list, "gemma-3-1b") != NULL);
  ASSERT_TRUE(strstr(list, "tiny") != NULL);
  ASSERT_TRUE(strstr(list, "...") == NULL);
  /* A short buffer ends the list at a name boundary with "...". */
  char shortbuf[24];
  rf_model_list_shipped(shortbuf, sizeof shortbuf);
  ASSERT_LT(strlen(shortbuf), sizeof shortbuf);
  ASSERT_TRUE(strstr(shortbuf, "...") != NULL);
  ASSERT_EQ(strncmp(shortbuf, list, strlen(shortbuf) - 3), 0);
}

static void test_errors(void) {
  expect_error("foo", "unknown model 'foo'; use one of: ");
  expect_error("foo", "llama-3.1-8b");
  expect_error("", "unknown model ''");
  expect_error("/nonexistent/config.json", "model '/nonexistent/config.json': cannot read: ");
  expect_error(tmpdir, "is a directory");

  const char *p = write_tmp("bad-type.json", "{\"model_type\": \"mamba\"}");
  expect_error(p, "model_type 'mamba' is not supported; supported: llama, mistral, qwen2, "
                  "qwen3, gemma, gemma2, gemma3_text, mixtral, qwen3_moe, deepseek_v2, "
                  "deepseek_v3, gpt_oss");
  p = write_tmp("no-type.json", "{\"hidden_size\": 8}");
  expect_error(p, "key 'model_type' is missing or not a string");
  p = write_tmp("no-hidden.json", "{\"model_type\": \"llama\", \"vocab_size\": 512,"
                                  " \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
                                  " \"num_attention_heads\": 4}");
  expect_error(p, "no-hidden.json: key 'hidden_size' is missing or not a positive integer");
  p = write_tmp("zero-layers.json",
                "{\"model_type\": \"llama\", \"vocab_size\": 512,"
                " \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 0,"
                " \"num_attention_heads\": 4}");
  expect_error(p, "key 'num_hidden_layers' is missing or not a positive integer");
  p = write_tmp("string-vocab.json",
                "{\"model_type\": \"llama\", \"vocab_size\": \"512\","
                " \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
                " \"num_attention_heads\": 4}");
  expect_error(p, "key 'vocab_size' is missing or not a positive integer");
  p = write_tmp("kv.json",
                "{\"model_type\": \"llama\", \"vocab_size\": 512,"
                " \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
                " \"num_attention_heads\": 4, \"num_key_value_heads\": 3}");
  expect_error(p, "num_attention_heads 4 is not a multiple of num_key_value_heads 3");
  p = write_tmp("indivisible.json",
                "{\"model_type\": \"llama\", \"vocab_size\": 512,"
                " \"hidden_size\": 60, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
                " \"num_attention_heads\": 8}");
  expect_error(p, "add the key 'head_dim'");
  p = write_tmp("dtype.json",
                "{\"model_type\": \"llama\", \"vocab_size\": 512,"
                " \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
                " \"num_attention_heads\": 4, \"torch_dtype\": \"int8\"}");
  expect_error(p, "key 'torch_dtype' must be one of bfloat16, float16, float32");
  p = write_tmp("tie.json",
                "{\"model_type\": \"llama\", \"vocab_size\": 512,"
                " \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
                " \"num_attention_heads\": 4, \"tie_word_embeddings\": 1}");
  expect_error(p, "key 'tie_word_embeddings' must be true or false");
  p = write_tmp("huge.json",
                "{\"model_type\": \"llama\", \"vocab_size\": 512,"
                " \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
                " \"num_attention_heads\": 4, \"head_dim\": 4294967296}");
  expect_error(p, "key 'head_dim' is 4294967296, more than refit supports");
  /* The missing comma is found at the next key, on line 3. */
  p = write_tmp("malformed.json", "{\"model_type\": \"llama\",\n \"vocab_size\": 512\n"
                                  " \"hidden_size\": 64}");
  expect_error(p, "malformed.json:3:");
  expect_error(p, "fix the JSON in this file");
  p = write_tmp("dup.json", "{\"model_type\": \"llama\", \"model_type\": \"gemma\"}");
  expect_error(p, "duplicate object key");
  p = write_tmp("array.json", "[1, 2]");
  expect_error(p, "the top level is not a JSON object");
}

int main(void) {
  const char *t = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/refit_test_model_XXXXXX", t && *t ? t : "/tmp");
  ASSERT_TRUE(mkdtemp(tmpdir) != NULL);

  test_shipped();
  test_llama_shapes();
  test_gemma();
  test_dtype_and_list();
  test_paths();
  test_errors();

  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  ASSERT_EQ(system(cmd), 0);
  printf("test_model: ok\n");
  fflush(stdout);
  return 0;
}
