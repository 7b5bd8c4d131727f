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

/* The layout names the trainer ranks that can hold each tensor (rf_layout_trainer_candidates),
 * and the planner looks at no other: they must be, ascending, exactly the ranks whose box is
 * not empty. */
static void check_candidates(const rf_layout *lay) {
  int *ranks = malloc((size_t)(lay->trainer_ranks / lay->trainer.pp) * sizeof *ranks);
  ASSERT_TRUE(ranks);
  for (int t = 0; t < lay->model->tensor_count; t++) {
    int n = rf_layout_trainer_candidates(lay, t, ranks), k = 0;
    ASSERT_EQ(rf_layout_trainer_candidates(lay, t, NULL), n);
    for (int r = 0; r < lay->trainer_ranks; r++) {
      rf_box b = rf_layout_trainer_box(lay, t, r);
      if (rf_box_is_empty(&b))
        continue;
      ASSERT_LT(k, n);
      ASSERT_EQ(ranks[k++], r);
    }
    ASSERT_EQ(k, n);
  }
  free(ranks);
}

/* A distance of three levels: the same process, the same node (node_of), another node. */
static int node_distance(void *ctx, int a, int b) {
  const int *node_of = ctx;
  return a == b ? 0 : node_of[a] == node_of[b] ? 1 : 2;
}

/* The sources of every expert of tiny-mixtral (4 experts of 12 KiB a tensor, 2 layers) with
 * replicas: trainer ep=2,dp=2 holds expert e on trainer ranks e / 2 (replica 0) and 2 + e / 2
 * (replica 1); the rollout tp=2,ep holds experts 0-1 on rollout rank 0 and 2-3 on rollout rank
 * 1. Each expert tensor is one piece, the whole expert, to its rollout rank. */
static void expert_replicas(const rf_model *m) {
  rf_trainer_layout tl = {.fsdp = 1, .tp = 1, .dp = 2, .ep = 2, .pp = 1};
  rf_rollout_layout rl = {.tp = 2, .dp = 1, .ep = 1};
  rf_layout lay;
  ASSERT_OK(rf_layout_init(&lay, m, &tl, &rl, RF_PLACEMENT_DISAGGREGATED));
  /* Every rank equally far: the least loaded of an expert's two holders, then the lower. The
   * dense tensors before layer 0's experts leave ranks 2 and 3 more than one expert's bytes and
   * at most two lighter than ranks 0 and 1, so each pair's first two tensors come from replica
   * 1 and the pair then alternates as the loads even out. In storage order: gate and up expert
   * by expert, then the downs. */
  static const int by_load[2][12] = {{2, 2, 0, 2, 3, 3, 1, 3, 0, 2, 1, 3},
                                     {2, 0, 2, 0, 3, 1, 3, 1, 2, 0, 3, 1}};
  /* With a distance, replica 1 shares a node with the rollout (world ranks 4 and 5) and
   * replica 0 is on another: everything comes from replica 1, asked of an opaque distance and
   * through the node index alike. */
  int node_of[6] = {0, 0, 1, 1, 1, 1};
  rf_plan_options opaque = {.distance = node_distance, .distance_ctx = node_of};
  rf_plan_options nodes = {.distance = node_distance, .distance_ctx = node_of, .node_of = node_of};
  const rf_plan_options *options[3] = {NULL, &opaque, &nodes};
  for (int o = 0; o < 3; o++) {
    rf_plan plan;
    ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_P2P, options[o]));
    check_choices(&plan, options[o]);
    int seen[2] = {0, 0};
    for (int i = 0; i < plan.piece_count; i++) {
      const rf_piece *p = &plan.pieces[i];
      const rf_tensor *t = &m->tensors[p->tensor];
      if (o)
        ASSERT_GE(p->src, 2);
      if (t->expert < 0)
        continue;
      rf_box whole = rf_box_whole(t);
      ASSERT_TRUE(rf_box_equal(&p->box, &whole));
      ASSERT_EQ(p->dst, t->expert / 2);
      int k = seen[t->layer]++;
      ASSERT_EQ(p->src, o ? 2 + t->expert / 2 : by_load[t->layer][k]);
    }
    ASSERT_EQ(seen[0], 12);
    ASSERT_EQ(seen[1], 12);
    rf_plan_free(&plan);
  }
  rf_layout_free(&lay);
}

/* One layout pair, every plan kind: the checks of plan_checks.h and the slot tiling on every
 * rollout rank, whose bytes must add up to the p2p plan's transfer bytes. */
static int check_layout(rf_layout *lay) {
  int built = 0;
  check_candidates(lay);
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
  {
    char path[1024];
    rf_model m;
    ASSERT_OK(rf_model_load(model_path("tiny-mixtral", path, sizeof path), &m));
    expert_replicas(&m);
    rf_model_free(&m);
  }
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
