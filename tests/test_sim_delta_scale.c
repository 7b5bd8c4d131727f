/* test_sim_delta_scale: the bar for simulated delta refits, on the shipped cluster
 * files, at 1% of elements changed and auto encodings: each predicts at most a tenth of the
 * same job's whole-version refit, encode and apply included (results/published.md has the
 * rows and their commands):
 *
 * - Llama-3.1-8B 8+8 across two H100 nodes, the JAX-vLLM bridge's row: trainer fsdp=1,tp=8 on
 *   node 0, rollout tp=8 on node 1, p2p, grouped, one bucket, h100-hgx.
 * - Kimi-K2 256 -> 128, Perplexity's row: trainer fsdp=2,ep=32,pp=4, rollout tp=16,dp=8 in fp8,
 *   fanout, fused, 1 GiB buckets, h100-hgx. The whole model takes minutes to walk on two cores
 *   (10 million pieces; most of it building the rounds), so the test walks Kimi-K2 cut to 4
 *   layers, one a pipeline stage, with the same tensors, layouts, plan and cluster: 0.069 of
 *   the whole refit where the 61 layers give 0.057 (REFIT_SIM_FULL=1 walks them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/sim.h"
#include "test.h"

static const char *source_file(const char *rel) {
  static char path[1024];
  const char *src = getenv("REFIT_SOURCE_DIR");
  snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
  return path;
}

typedef struct {
  const char *model, *trainer, *rollout;
  int fp8;
  rf_plan_kind kind;
  rf_mode mode;
  int64_t bucket_size;
  double ratio; /* the delta refit over the whole one, as predicted here */
} row;

/* Plans the row as refit simulate plans it (the cluster's distances), then predicts it whole
 * and as deltas of 1% changed with auto encodings. */
static void check(const row *x, const rf_cluster *c) {
  rf_model m;
  rf_layout lay;
  rf_plan plan;
  rf_trainer_layout t;
  rf_rollout_layout r;
  ASSERT_OK(rf_model_load(x->model, &m));
  ASSERT_OK(rf_trainer_layout_parse(x->trainer, &t));
  ASSERT_OK(rf_rollout_layout_parse(x->rollout, &r));
  if (x->fp8)
    r.dtype = (rf_rollout_dtype)RF_FORMAT_FP8;
  ASSERT_OK(rf_layout_init(&lay, &m, &t, &r, RF_PLACEMENT_DISAGGREGATED));
  rf_cluster_placement where;
  rf_plan_options po;
  ASSERT_OK(rf_cluster_plan_options(c, lay.world_size, &where, &po));
  ASSERT_OK(rf_plan_build(&plan, &lay, x->kind, &po));
  rf_sim_options o = {x->mode, x->bucket_size,          1, 0, RF_WIRE_CONTIGUOUS,
                      0,       {RF_DELTA_CHOICE_OFF, 0}};
  rf_sim_result whole, delta;
  ASSERT_OK(rf_simulate(&plan, c, &o, &whole));
  ASSERT_OK(rf_sim_delta_model_init(RF_DELTA_CHOICE_AUTO, 0.01, &o.delta));
  ASSERT_OK(rf_simulate(&plan, c, &o, &delta));
  double ratio = delta.phase[RF_PHASE_TOTAL] / whole.phase[RF_PHASE_TOTAL];
  printf("%s %s -> %s: whole %.4g s, delta %.4g s (encode %.4g, apply %.4g): %.4f\n", x->model,
         x->trainer, x->rollout, whole.phase[RF_PHASE_TOTAL], delta.phase[RF_PHASE_TOTAL],
         delta.encode_s, delta.apply_s, ratio);
  ASSERT_TRUE(ratio <= 0.1);
  if (!(fabs(ratio - x->ratio) <= 1e-3))
    fprintf(stderr, "%s: ratio %.6f, expected %.4f\n", x->model, ratio, x->ratio);
  ASSERT_TRUE(fabs(ratio - x->ratio) <= 1e-3);
  /* Encode and apply are in the total, as phases of their own. */
  ASSERT_TRUE(delta.encode_s > 0 && delta.apply_s > 0);
  ASSERT_TRUE(delta.encode_s == delta.phase[RF_PHASE_ENCODE] &&
              delta.apply_s == delta.phase[RF_PHASE_APPLY]);
  /* Every chunk crosses between nodes, and each went sparse at 1%. */
  ASSERT_EQ(delta.delta_chunks[RF_SIM_ENCODING_DENSE] + delta.delta_chunks[RF_SIM_ENCODING_BITMASK],
            0);
  ASSERT_TRUE(delta.fits);
  rf_sim_result_free(&whole);
  rf_sim_result_free(&delta);
  rf_plan_free(&plan);
  rf_cluster_placement_free(&where);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

int main(void) {
  rf_cluster c;
  ASSERT_OK(rf_cluster_load(source_file("configs/clusters/h100-hgx.json"), &c));
  const row llama = {"llama-3.1-8b", "fsdp=1,tp=8",   "tp=8", 0,
                     RF_PLAN_P2P,    RF_MODE_GROUPED, 0,      0.0988};
  check(&llama, &c);
  /* Kimi-K2 cut to 4 layers, in a file of the test's own. */
  const char *full = getenv("REFIT_SIM_FULL");
  char dir[] = "/tmp/test_sim_delta_scale.XXXXXX", path[512] = "kimi-k2";
  ASSERT_TRUE(mkdtemp(dir) != NULL);
  if (!full || strcmp(full, "1") != 0) {
    snprintf(path, sizeof path, "%s/kimi-k2-4-layers.json", dir);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "sed 's/\"num_hidden_layers\": 61/\"num_hidden_layers\": 4/' '%s' > '%s' && "
             "grep -q '\"num_hidden_layers\": 4,' '%s'",
             source_file("configs/models/kimi-k2.json"), path, path);
    ASSERT_EQ(system(cmd), 0);
  }
  const row kimi = {
      path,           "fsdp=2,ep=32,pp=4", "tp=16,dp=8", 1,
      RF_PLAN_FANOUT, RF_MODE_FUSED,       1LL << 30,    strcmp(path, "kimi-k2") ? 0.0687 : 0.0568};
  check(&kimi, &c);
  if (strcmp(path, "kimi-k2") != 0)
    ASSERT_EQ(unlink(path), 0);
  ASSERT_EQ(rmdir(dir), 0);
  printf("test_sim_delta_scale: all passed\n");
  return 0;
}
