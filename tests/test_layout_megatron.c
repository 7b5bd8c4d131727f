/* The megatron trainer style (parallel folding, expert tensor parallelism 1): exact boxes and
 * candidates of a hand-computed case, plans that deliver every byte once from its replicas, the
 * one-line errors of layouts it cannot express, and the NCCL M2N system files read as layouts. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "layout_helpers.h"
#include "plan_checks.h"

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

static void expect_candidates(const rf_layout *lay, int tensor, int n, const int *want) {
  int got[64];
  ASSERT_EQ(rf_layout_trainer_candidates(lay, tensor, NULL), n);
  ASSERT_EQ(rf_layout_trainer_candidates(lay, tensor, got), n);
  for (int i = 0; i < n; i++)
    ASSERT_EQ(got[i], want[i]);
}

/* tiny-mixtral (V=512, D=64, Fe=96, L=2, N=4, K=2, H=16, E=4) on tp=2,cp=2,dp=2,ep=4,pp=2: 16
 * ranks, not 64, since ep folds onto the 8 ranks of a stage. Rank s*8 + i with i =
 * (d*2 + c)*2 + t; the i-th rank of a stage is ep rank i mod 4, holding expert i mod 4 whole. */
static void test_boxes(void) {
  rf_model m;
  rf_layout lay;
  load_data("tiny-mixtral.json", &m);
  ASSERT_OK(make(&lay, &m, "tp=2,cp=2,dp=2,ep=4,pp=2", "tp=2", RF_STYLE_MEGATRON,
                 RF_PLACEMENT_DISAGGREGATED));
  ASSERT_EQ(lay.trainer_ranks, 16);
  ASSERT_EQ(lay.world_size, 18);
  int q0 = find(&m, "model.layers.0.self_attn.q_proj.weight");
  int k0 = find(&m, "model.layers.0.self_attn.k_proj.weight");
  int o1 = find(&m, "model.layers.1.self_attn.o_proj.weight");
  int gate1 = find(&m, "model.layers.1.block_sparse_moe.gate.weight");
  int w1_e3 = find(&m, "model.layers.1.block_sparse_moe.experts.3.w1.weight");
  int w2_e1 = find(&m, "model.layers.1.block_sparse_moe.experts.1.w2.weight");
  int emb = find(&m, "model.embed_tokens.weight");
  int head = find(&m, "lm_head.weight");
  /* Non-expert weights: tp shards, the same on every cp and dp replica of the stage. */
  expect_box(rf_layout_trainer_box(&lay, q0, 0), 0, 32, 0, 64);
  expect_box(rf_layout_trainer_box(&lay, q0, 3), 32, 64, 0, 64); /* t 1, c 1, d 0 */
  expect_box(rf_layout_trainer_box(&lay, q0, 6), 0, 32, 0, 64);  /* t 0, c 1, d 1 */
  expect_box(rf_layout_trainer_box(&lay, q0, 9), 0, 0, 0, 0);    /* stage 1 */
  expect_box(rf_layout_trainer_box(&lay, k0, 1), 16, 32, 0, 64); /* one kv head per tp rank */
  expect_box(rf_layout_trainer_box(&lay, o1, 13), 0, 64, 32, 64);
  expect_box(rf_layout_trainer_box(&lay, gate1, 8), 0, 4, 0, 64);
  expect_box(rf_layout_trainer_box(&lay, emb, 5), 256, 512, 0, 64);
  expect_box(rf_layout_trainer_box(&lay, emb, 13), 0, 0, 0, 0);
  expect_box(rf_layout_trainer_box(&lay, head, 14), 0, 256, 0, 64);
  /* Experts: whole, on ep rank e of the stage, i.e. ranks 8 + e and 8 + e + 4. */
  expect_box(rf_layout_trainer_box(&lay, w1_e3, 11), 0, 96, 0, 64);
  expect_box(rf_layout_trainer_box(&lay, w1_e3, 15), 0, 96, 0, 64);
  expect_box(rf_layout_trainer_box(&lay, w1_e3, 12), 0, 0, 0, 0);
  expect_box(rf_layout_trainer_box(&lay, w1_e3, 3), 0, 0, 0, 0);
  expect_box(rf_layout_trainer_box(&lay, w2_e1, 9), 0, 64, 0, 96);
  expect_box(rf_layout_trainer_box(&lay, w2_e1, 13), 0, 64, 0, 96);
  static const int stage0[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  static const int e3[2] = {11, 15}, e1[2] = {9, 13};
  expect_candidates(&lay, q0, 8, stage0);
  expect_candidates(&lay, w1_e3, 2, e3);
  expect_candidates(&lay, w2_e1, 2, e1);
  /* Every candidate's box and no other rank's: the planner asks only the candidates. */
  for (int t = 0; t < m.tensor_count; t++) {
    int cand[64], n = rf_layout_trainer_candidates(&lay, t, cand), held = 0;
    for (int r = 0; r < lay.trainer_ranks; r++) {
      rf_box b = rf_layout_trainer_box(&lay, t, r);
      int listed = 0;
      for (int i = 0; i < n; i++)
        listed |= cand[i] == r;
      if (!rf_box_is_empty(&b)) {
        ASSERT_TRUE(listed);
        held++;
      }
    }
    ASSERT_EQ(held, n);
  }
  /* Each plan delivers every rollout byte once, from a rank that holds it; the replicas are
   * sources, chosen by the documented rule. */
  static const rf_plan_kind kinds[3] = {RF_PLAN_P2P, RF_PLAN_FANOUT, RF_PLAN_STAR};
  for (int k = 0; k < 3; k++) {
    rf_plan plan;
    ASSERT_OK(rf_plan_build(&plan, &lay, kinds[k], NULL));
    check_coverage(&plan);
    if (kinds[k] == RF_PLAN_P2P) {
      check_choices(&plan, NULL);
      int used[16] = {0}, senders = 0;
      for (int i = 0; i < plan.piece_count; i++)
        used[plan.pieces[i].src] = 1;
      for (int r = 0; r < 16; r++)
        senders += used[r];
      ASSERT_EQ(senders, 16); /* every replica sends something */
    }
    rf_plan_free(&plan);
  }
  rf_layout_free(&lay);
  rf_model_free(&m);
}

static void expect_error(const rf_model *m, const char *trainer, rf_trainer_style style,
                         const char *message) {
  char got[512] = "";
  rf_layout lay;
  rf_log_capture(got, sizeof got);
  ASSERT_STATUS(make(&lay, m, trainer, "tp=1", style, RF_PLACEMENT_DISAGGREGATED), RF_ERR_USAGE);
  rf_log_capture(NULL, 0);
  ASSERT_STR_EQ(got, message);
}

static void test_errors(void) {
  rf_model m;
  load_data("tiny-mixtral.json", &m);
  expect_error(&m, "tp=2,ep=4", RF_STYLE_MEGATRON,
               "trainer style megatron folds ep=4 onto the tp*cp*dp = 2*1*1 = 2 ranks of each "
               "pipeline stage, and 4 does not divide 2; choose an ep that divides 2");
  expect_error(&m, "tp=2,dp=4,ep=8", RF_STYLE_MEGATRON,
               "trainer ep=8 does not divide the 4 experts of model tiny-mixtral; choose an ep "
               "that divides 4");
  expect_error(&m, "fsdp=2,ep=2", RF_STYLE_MEGATRON,
               "trainer style megatron has no fsdp axis (each tp rank holds its shard whole); use "
               "fsdp=1, not fsdp=2");
  expect_error(&m, "tp=2,cp=2", RF_STYLE_FSDP2,
               "trainer cp=2 needs --trainer-style megatron, the style that places context "
               "parallelism; use cp=1 with fsdp2");
  rf_model_free(&m);
}

/* A system file written to a temporary path, read as layouts. */
static rf_status read_system(const char *json, char *trainer, char *rollout, char *log) {
  char path[] = "/tmp/refit_system_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  FILE *f = fdopen(fd, "w");
  fputs(json, f);
  fclose(f);
  rf_log_capture(log, 512);
  rf_status st = rf_layout_read_system(path, trainer, 64, rollout, 64);
  rf_log_capture(NULL, 0);
  unlink(path);
  char *at = strstr(log, path); /* the path is random: the tests compare the rest */
  if (at)
    memmove(at + 4, at + strlen(path), strlen(at + strlen(path)) + 1), memcpy(at, "FILE", 4);
  return st;
}

#define SIDE(n, tp, cp, ep, pp, dp)                                                                \
  "{\"num_gpus\": " #n ", \"tp_size\": " #tp ", \"cp_size\": " #cp ", \"ep_size\": " #ep           \
  ", \"pp_size\": " #pp ", \"fsdp_size\": 1, \"dp_size\": " #dp "}"

static void test_system(void) {
  char t[64], r[64], log[512] = "";
  /* DeepSeek-V3 as published: dp_size is the expert data-parallel size 128/(4*16). */
  ASSERT_OK(read_system(
      "{\"train\": " SIDE(128, 1, 1, 16, 4, 2) ", \"generation\": " SIDE(128, 8, 1, 1, 1, 16) "}",
      t, r, log));
  ASSERT_STR_EQ(t, "tp=1,cp=1,ep=16,pp=4,dp=32");
  ASSERT_STR_EQ(r, "tp=8,dp=16");
  /* Qwen3-235B's file writes dp_size 1, its expert data-parallel size; dp is 64/(4*2*2). */
  ASSERT_OK(read_system("{\"_comment\": \"x\", \"train\": " SIDE(
                            64, 2, 2, 16, 4, 1) ", \"generation\": " SIDE(64, 8, 1, 1, 1, 8) "}",
                        t, r, log));
  ASSERT_STR_EQ(t, "tp=2,cp=2,ep=16,pp=4,dp=4");
  ASSERT_EQ(read_system("{\"train\": " SIDE(64, 2, 2, 16, 4,
                                            3) ", \"generation\": " SIDE(64, 8, 1, 1, 1, 8) "}",
                        t, r, log),
            RF_ERR_USAGE);
  ASSERT_STR_EQ(log, "system FILE: train.dp_size=3 is neither the data-parallel size 4 "
                     "(num_gpus / (pp*tp*cp)) nor the expert data-parallel size 1 (num_gpus / "
                     "(pp*ep))");
  ASSERT_EQ(read_system("{\"train\": " SIDE(64, 2, 2, 32, 4,
                                            1) ", \"generation\": " SIDE(64, 8, 1, 1, 1, 8) "}",
                        t, r, log),
            RF_ERR_USAGE);
  ASSERT_STR_EQ(log, "system FILE: train ep_size=32 does not divide the 16 ranks of a pipeline "
                     "stage (num_gpus 64 / pp_size 4) that its experts fold onto");
  ASSERT_EQ(read_system("{\"train\": " SIDE(64, 2, 2, 16, 4,
                                            1) ", \"generation\": " SIDE(64, 8, 1, 2, 1, 4) "}",
                        t, r, log),
            RF_ERR_USAGE);
  ASSERT_STR_EQ(log, "system FILE: generation.ep_size=2, but refit's rollout is vLLM tensor "
                     "parallelism with dp engine replicas; use ep_size 1");
  ASSERT_EQ(read_system("{\"train\": {\"num_gpus\": 4, \"tp\": 2}, \"generation\": {}}", t, r, log),
            RF_ERR_USAGE);
  ASSERT_STR_EQ(log, "system FILE: train.tp is not a key of an NCCL M2N system file; use "
                     "num_gpus, tp_size, cp_size, ep_size, pp_size, fsdp_size or dp_size");
}

/* The files shipped in configs/m2n, as refit reads them. */
static void test_shipped(void) {
  static const char *const files[][3] = {
      {"deepseek-v3-256gpus-gb200", "tp=1,cp=1,ep=16,pp=4,dp=32", "tp=8,dp=16"},
      {"qwen3-235b-128gpus-gb200", "tp=2,cp=2,ep=16,pp=4,dp=4", "tp=8,dp=8"},
      {"tiny-megatron-tp2ep2-to-tp2", "tp=2,cp=1,ep=2,pp=1,dp=1", "tp=2,dp=1"},
      {"tiny-megatron-tp2cp2ep4-to-tp2", "tp=2,cp=2,ep=4,pp=1,dp=1", "tp=2,dp=1"},
  };
  const char *src = getenv("REFIT_SOURCE_DIR");
  for (size_t i = 0; i < RF_ARRAY_LEN(files); i++) {
    char path[1024], t[64], r[64];
    snprintf(path, sizeof path, "%s/configs/m2n/%s.system.json", src ? src : ".", files[i][0]);
    ASSERT_OK(rf_layout_read_system(path, t, sizeof t, r, sizeof r));
    ASSERT_STR_EQ(t, files[i][1]);
    ASSERT_STR_EQ(r, files[i][2]);
  }
}

int main(void) {
  test_shipped();
  test_boxes();
  test_errors();
  test_system();
  return 0;
}
