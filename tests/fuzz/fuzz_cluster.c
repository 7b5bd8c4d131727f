/* A cluster file of `refit simulate --cluster` (src/sim/sim_cluster.c), through the public
 * loader; a cluster that loads then times one small job on it in two modes, so that every rate
 * and latency it accepted goes through the flow model. A rate the loader let through that the
 * model cannot share out (an infinite one, once scaled) hung here before the loader's limits
 * and the solver's bounded rounds; libFuzzer's -timeout catches the next one. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"
#include "sim/sim.h"

/* tiny from fsdp=2 to tp=2: four ranks, a few dozen pieces, planned once. */
static const rf_plan *job(void) {
  static rf_model model;
  static rf_layout layout;
  static rf_plan plan;
  static int built;
  if (built)
    return &plan;
  rf_trainer_layout t;
  rf_rollout_layout r;
  if (rf_model_load("tiny", &model) != RF_OK || rf_trainer_layout_parse("fsdp=2", &t) != RF_OK ||
      rf_rollout_layout_parse("tp=2", &r) != RF_OK ||
      rf_layout_init(&layout, &model, &t, &r, RF_PLACEMENT_DISAGGREGATED) != RF_OK ||
      rf_plan_build(&plan, &layout, RF_PLAN_P2P, NULL) != RF_OK) {
    fprintf(stderr, "fuzz: the tiny job does not plan\n");
    abort();
  }
  built = 1;
  return &plan;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const rf_plan *plan = job();
  fuzz_quiet();
  const char *path = fuzz_write("cluster.json", data, size);
  rf_cluster c;
  if (rf_cluster_load(path, &c) != RF_OK)
    return 0;
  int world = plan->layout->world_size, device = c.gpus > 0;
  if (rf_cluster_fits(&c, world, device, 0) != RF_OK)
    return 0;
  rf_cluster_placement where = {0};
  rf_plan_options po;
  if (rf_cluster_plan_options(&c, world, &where, &po) == RF_OK) {
    const rf_mode modes[] = {RF_MODE_UNFUSED, RF_MODE_FUSED};
    for (size_t i = 0; i < RF_ARRAY_LEN(modes); i++) {
      rf_sim_options o = {
          modes[i], 0, device, 0, RF_WIRE_CONTIGUOUS, 0, {RF_DELTA_CHOICE_OFF, 0.0}};
      rf_sim_result r;
      rf_simulate(plan, &c, &o, &r);
      rf_sim_result_free(&r);
    }
  }
  rf_cluster_placement_free(&where);
  return 0;
}
