/* Planner properties over the mixture-of-experts models and random trainer meshes with expert
 * parallelism and pipeline stages, into rollouts with and without ep: every rollout element
 * written exactly once (logical boxes and fused-tensor slots alike), totals exact, sources
 * chosen by the rule. */
#include "plan_checks.h"

/* A test data file (the small MoE configs) or a shipped model name. */
static const char *model_path(const char *name, char *buf, size_t len) {
  const char *src = getenv("REFIT_SOURCE_DIR"); /* set by CTest */
  if (strncmp(name, "tiny-", 5) != 0)
    return name;
  snprintf(buf, len, "%s/tests/data/%s.json", src ? src : ".", name);
  return buf;
}

/* One layout pair, every plan kind: the checks of plan_checks.h and the slot tiling on every
 * rollout rank, whose bytes must add up to the p2p plan's transfer bytes. */
static int check_layout(rf_layout *lay) {
  int built = 0;
  for (int kind = RF_PLAN_P2P; kind <= RF_PLAN_FANOUT; kind++) {
    rf_plan plan;
    rf_status st = rf_plan_build(&plan, lay, (rf_plan_kind)kind, NULL);
    if (st == RF_ERR_LAYOUT && kind == RF_PLAN_STAR)
      continue;
    ASSERT_OK(st);
    check_coverage(&plan);
    check_bytes(&plan, 1);
    check_choices(&plan, NULL);
    if (kind == RF_PLAN_FANOUT)
      check_fanout(&plan, NULL);
    if (kind == RF_PLAN_P2P) {
      int64_t written = 0;
      for (int r = 0; r < lay->rollout_ranks; r++)
        written += check_slots(lay, r);
      ASSERT_EQ(written, plan.transfer_bytes);
    }
    rf_plan_free(&plan);
    built++;
  }
  return built;
}

/* Fanout with 1 to 4 engine replicas, with and without rollout ep (whose experts the trainer
 * sends once each, straight to their rank); returns the plans checked and counts those whose
 * plan forwards nothing of some tensor because rollout ep shares it. */
static int fanout_random(const rf_model *m, int trials, int *shared_seen) {
  static const int sizes[] = {1, 2, 4};
  int built = 0;
  for (int trial = 0; trial < trials; trial++) {
    rf_trainer_layout tl = {.fsdp = pick(sizes, 3),
                            .tp = pick(sizes, 2),
                            .dp = 1,
                            .ep = pick(sizes, 3),
                            .pp = 1 + rand() % 2,
                            .style = (rf_trainer_style)(rand() % 2)};
    rf_rollout_layout rl = {.tp = pick(sizes, 3), .dp = 1 + rand() % 4, .ep = rand() % 2};
    rf_layout lay;
    if (rf_layout_init(&lay, m, &tl, &rl, (rf_placement)(rand() % 2)) != RF_OK)
      continue;
    rf_plan plan;
    ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_FANOUT, NULL));
    check_coverage(&plan);
    check_bytes(&plan, 1);
    check_choices(&plan, NULL);
    check_fanout(&plan, NULL);
    for (int t = 0; t < m->tensor_count && rl.dp > 1; t++)
      if (plan.root[t] < 0) {
        (*shared_seen)++;
        break;
      }
    rf_plan_free(&plan);
    rf_layout_free(&lay);
    built++;
  }
  return built;
}

int main(void) {
  static const char *models[] = {"tiny-mixtral",  "tiny-deepseek",    "mixtral-8x7b",
                                 "qwen3-30b-a3b", "deepseek-v2-lite", "deepseek-v3"};
  static const int sizes[] = {1, 2, 4, 8}, stages[] = {1, 2, 3, 4};
  srand(20261203);
  rf_log_push_quiet(1); /* random layouts that do not divide are expected here */
  int built = 0, rejected = 0, with_ep = 0, with_pp = 0, with_rollout_ep = 0;
  for (size_t mi = 0; mi < RF_ARRAY_LEN(models); mi++) {
    char path[1024];
    rf_model m;
    ASSERT_OK(rf_model_load(model_path(models[mi], path, sizeof path), &m));
    int big = m.tensor_count > 10000; /* qwen3-30b-a3b, deepseek-v3 */
    /* The big models plan with tens of thousands of tensors, and the naive checks cost pieces x
     * trainer ranks: fewer trials on smaller meshes keep the test in seconds (and in minutes
     * under the sanitizers). */
    for (int trial = 0; trial < (big ? 2 : 16); trial++) {
      rf_trainer_layout tl = {.fsdp = pick(sizes, big ? 2 : 3),
                              .tp = pick(sizes, big ? 2 : 3),
                              .dp = big ? 1 : 1 + rand() % 2,
                              .ep = pick(sizes, 4),
                              .pp = pick(stages, 4),
                              .style = (rf_trainer_style)(rand() % 2)};
      rf_rollout_layout rl = {.tp = pick(sizes, 4), .dp = 1 + rand() % 2, .ep = rand() % 2};
      rf_layout lay;
      if (rf_layout_init(&lay, &m, &tl, &rl, (rf_placement)(rand() % 2)) != RF_OK) {
        rejected++;
        continue;
      }
      built += check_layout(&lay);
      with_ep += tl.ep > 1;
      with_pp += tl.pp > 1;
      with_rollout_ep += rl.ep;
      rf_layout_free(&lay);
    }
    rf_model_free(&m);
  }
  int fanout = 0, fanout_shared = 0;
  static const char *fanout_models[] = {"tiny-mixtral", "tiny-deepseek", "mixtral-8x7b"};
  for (size_t mi = 0; mi < RF_ARRAY_LEN(fanout_models); mi++) {
    char path[1024];
    rf_model m;
    ASSERT_OK(rf_model_load(model_path(fanout_models[mi], path, sizeof path), &m));
    fanout += fanout_random(&m, 12, &fanout_shared);
    rf_model_free(&m);
  }
  printf("MoE plans checked: %d (layouts with trainer ep %d, pp %d, rollout ep %d), "
         "rejected %d; fanout with 1 to 4 replicas: %d (%d forwarding no experts)\n",
         built, with_ep, with_pp, with_rollout_ep, rejected, fanout, fanout_shared);
  ASSERT_GE(fanout, 15);
  ASSERT_GE(fanout_shared, 3);
  ASSERT_GE(built, 40);
  ASSERT_GE(with_ep, 10);
  ASSERT_GE(with_pp, 10);
  ASSERT_GE(with_rollout_ep, 10);
  return 0;
}
