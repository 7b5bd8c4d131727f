/* The hierarchical plan: its promises checked piece by piece over random layouts of dense and
 * mixture-of-experts models, with domains of one replica, two, several, all of them, of
 * uneven sizes and of replicas that span domains (plan_hier.c); its fp8 forwards; and small
 * worlds moved end to end by the engine over the loopback transport in all three modes, where
 * every element arrives once and a flipped byte reaches exactly the replicas of its domain. */
#include "engine_worlds.h"
#include "plan_checks.h"

/* A test data file (the small MoE configs) or a shipped model name. */
static const char *model_path(const char *name, char *buf, size_t len) {
  const char *src = getenv("REFIT_SOURCE_DIR"); /* set by CTest */
  if (strncmp(name, "tiny-", 5) != 0)
    return name;
  snprintf(buf, len, "%s/tests/data/%s.json", src ? src : ".", name);
  return buf;
}

static int depth_of(int n) {
  int d = 0;
  while ((1 << d) < n)
    d++;
  return d;
}

/* The plan's promises, given the domain map it was built with (NULL: one domain):
 *  - replicas are numbered into domains by their first rank's id, in order of first replica;
 *  - each replicated tensor goes from the trainer to exactly one replica of every domain (its
 *    domain root), each expert under rollout ep straight to its one rank, never forwarded;
 *  - forwards join the same tp rank of two replicas of one domain, carry exactly the box both
 *    hold, send only what the sender got earlier, and reach every rank once;
 *  - the trainer sends one replica's bytes per domain, the forwards the rest; the depth is the
 *    largest domain's; the roots' bytes in a domain differ by at most one tensor's. */
static void check_hier(const rf_plan *plan, const int *domain_of) {
  const rf_layout *lay = plan->layout;
  const rf_model *m = lay->model;
  int R = lay->rollout.tp, P = lay->rollout.dp, N = lay->rollout_ranks, nt = m->tensor_count;
  ASSERT_EQ(plan->kind, RF_PLAN_HIERARCHICAL);
  /* The domains, the naive way. */
  int *id = malloc((size_t)P * sizeof *id), *size = calloc((size_t)P, sizeof *size), D = 0;
  ASSERT_TRUE(id && size);
  for (int p = 0; p < P; p++) {
    int mine = domain_of ? domain_of[rf_layout_rollout_world_rank(lay, p * R)] : 0, k = 0;
    while (k < D && id[k] != mine)
      k++;
    if (k == D)
      id[D++] = mine;
    ASSERT_EQ(plan->replica_domain[p], k);
    size[k]++;
  }
  ASSERT_EQ(plan->domains, D);
  int depth = 0;
  for (int k = 0; k < D; k++)
    depth = RF_MAX(depth, depth_of(size[k]));
  ASSERT_EQ(plan->forward_depth, depth);
  ASSERT_EQ(plan->forward_first[depth], plan->piece_count);
  int *step = malloc((size_t)nt * (size_t)N * sizeof *step); /* -2 none, -1 trainer, else s */
  int64_t *rooted = calloc((size_t)P, sizeof *rooted);
  ASSERT_TRUE(step && rooted);
  for (size_t i = 0; i < (size_t)nt * (size_t)N; i++)
    step[i] = -2;
  int s = -1, deepest = -1;
  for (int i = 0; i < plan->piece_count; i++) {
    const rf_piece *p = &plan->pieces[i];
    int *mine = &step[(size_t)p->tensor * N + p->dst];
    while (s + 1 <= depth && i >= plan->forward_first[s + 1])
      s++;
    int shared = rf_layout_rollout_shared(lay, p->tensor);
    if (p->stage == RF_STAGE_TRANSFER) {
      ASSERT_LT(i, plan->forward_first[0]);
      int k = plan->replica_domain[p->dst / R];
      ASSERT_EQ(plan->domain_root[(size_t)p->tensor * D + k], shared ? -1 : p->dst / R);
      ASSERT_TRUE(*mine == -2 || *mine == -1); /* a rank's pieces of a tensor: one stage */
      *mine = -1;
      continue;
    }
    ASSERT_EQ(p->stage, RF_STAGE_FORWARD);
    ASSERT_FALSE(shared);
    ASSERT_GE(s, 0);
    ASSERT_EQ(p->src % R, p->dst % R);
    ASSERT_NE(p->src / R, p->dst / R);
    ASSERT_EQ(plan->replica_domain[p->src / R], plan->replica_domain[p->dst / R]);
    rf_box want = rf_layout_rollout_box(lay, p->tensor, p->dst);
    rf_box have = rf_layout_rollout_box(lay, p->tensor, p->src);
    ASSERT_TRUE(rf_box_equal(&p->box, &want) && rf_box_equal(&p->box, &have));
    int got = step[(size_t)p->tensor * N + p->src];
    ASSERT_TRUE(got == -1 || (got >= 0 && got < s));
    ASSERT_EQ(*mine, -2);
    *mine = s;
    deepest = RF_MAX(deepest, s);
    ASSERT_EQ(rf_plan_forwarded_from(plan, p->tensor, p->dst), p->src);
    ASSERT_EQ(rf_piece_quant(plan, p),
              rf_layout_fp8(lay, p->tensor) ? RF_QUANT_FORWARDED : RF_QUANT_NONE);
  }
  ASSERT_EQ(deepest, depth - 1);
  int64_t replica = 0, shared_bytes = 0, max_tensor = 0;
  for (int t = 0; t < nt; t++) {
    int shared = rf_layout_rollout_shared(lay, t);
    ASSERT_EQ(plan->root[t], plan->domain_root[(size_t)t * D]);
    int64_t tensor_bytes = 0;
    for (int r = 0; r < N; r++) {
      rf_box b = rf_layout_rollout_box(lay, t, r);
      int64_t bytes = rf_box_numel(&b) * rf_dtype_size(m->tensors[t].dtype);
      int got = step[(size_t)t * N + r];
      ASSERT_EQ(got == -2, bytes == 0); /* every rank that holds any of it gets it */
      if (shared) {
        shared_bytes += bytes;
        ASSERT_TRUE(bytes == 0 || got == -1);
        continue;
      }
      int root = plan->domain_root[(size_t)t * D + plan->replica_domain[r / R]];
      ASSERT_TRUE(bytes == 0 || (got == -1) == (r / R == root));
      if (got == -1)
        ASSERT_EQ(rf_plan_forwarded_from(plan, t, r), -1);
      if (r < R)
        replica += bytes, tensor_bytes += bytes;
      if (r / R == root)
        rooted[r / R] += bytes;
    }
    max_tensor = RF_MAX(max_tensor, tensor_bytes);
  }
  for (int k = 0; k < D; k++) {
    int64_t lo = INT64_MAX, hi = 0;
    for (int p = 0; p < P; p++)
      if (plan->replica_domain[p] == k)
        lo = RF_MIN(lo, rooted[p]), hi = RF_MAX(hi, rooted[p]);
    ASSERT_LE(hi - lo, max_tensor);
  }
  ASSERT_EQ(plan->transfer_bytes, (int64_t)D * replica + shared_bytes);
  ASSERT_EQ(plan->forward_bytes, (int64_t)(P - D) * replica);
  free(id);
  free(size);
  free(step);
  free(rooted);
}

/* Random layouts of each model, each planned with domains of every kind the test knows: the
 * plan's own checks, the shared coverage, byte and source-choice checks. Returns the plans. */
static int test_random(const char *name) {
  static const int sizes[] = {1, 2, 4};
  char path[1024];
  rf_model m;
  ASSERT_OK(rf_model_load(model_path(name, path, sizeof path), &m));
  int moe = m.experts > 0, built = 0;
  for (int trial = 0; trial < 8; trial++) {
    rf_trainer_layout tl = {.fsdp = pick(sizes, 3),
                            .tp = pick(sizes, 2),
                            .dp = 1 + rand() % 2,
                            .ep = moe ? pick(sizes, 3) : 1,
                            .pp = 1 + (moe && rand() % 2),
                            .style = (rf_trainer_style)(rand() % 2)};
    rf_rollout_layout rl = {.tp = pick(sizes, 3), .dp = 1 + rand() % 6, .ep = moe && rand() % 2};
    for (int fp8 = 0; fp8 <= 1; fp8++) {
      rl.dtype = fp8 ? RF_FORMAT_FP8 : RF_ROLLOUT_DTYPE_MODEL;
      rf_layout lay;
      if (rf_layout_init(&lay, &m, &tl, &rl, (rf_placement)(rand() % 2)) != RF_OK)
        continue;
      int W = lay.world_size, R = lay.rollout.tp;
      /* Domains of 1, 2 and 3 replicas (aligned to the rollout's first rank or not), all
       * ranks in one, and one replica-and-a-bit (replicas that span domains). */
      int first = rf_layout_rollout_world_rank(&lay, 0);
      const int spans[] = {R, 2 * R, 3 * R, W, R + 1};
      int *dom = malloc((size_t)W * sizeof *dom);
      ASSERT_TRUE(dom);
      for (size_t c = 0; c <= RF_ARRAY_LEN(spans); c++) {
        rf_plan_options o = {.domain_of = dom};
        test_machine machine = {0, dom};
        if (c < RF_ARRAY_LEN(spans)) {
          int shift = c % 2 ? first : 0; /* domains that start at the rollout, or at rank 0 */
          for (int w = 0; w < W; w++)
            dom[w] = (w - shift + W) / spans[c];
          if (c == 2) /* the same domains as the machine's nodes, with its distances */
            o = (rf_plan_options){
                .distance = test_distance, .distance_ctx = &machine, .node_of = dom};
        }
        const rf_plan_options *opt = c < RF_ARRAY_LEN(spans) ? &o : NULL;
        rf_plan plan;
        ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_HIERARCHICAL, opt));
        check_coverage(&plan);
        check_bytes(&plan, opt == NULL);
        check_choices(&plan, opt);
        check_hier(&plan, opt ? dom : NULL);
        if (c == 0) /* a domain per replica: no forwards, one replica's bytes per replica */
          ASSERT_EQ(plan.forward_bytes, 0);
        built++;
        rf_plan_free(&plan);
      }
      free(dom);
      rf_layout_free(&lay);
    }
  }
  rf_model_free(&m);
  return built;
}

/* tiny, fsdp=2 -> tp=1,dp=6 (world ranks 0-1 the trainer, 2-7 the replicas): domains of two
 * world ranks give three domains of two replicas; the first replica of each domain is the
 * root of its first tensor, the trainer sends it three times and forwards go 2->3, 4->5, 6->7. */
static void test_tiny_domains(void) {
  rf_model m;
  ASSERT_OK(rf_model_load("tiny", &m));
  rf_trainer_layout tl = {.fsdp = 2, .tp = 1, .dp = 1, .ep = 1, .pp = 1};
  rf_rollout_layout rl = {.tp = 1, .dp = 6};
  rf_layout lay;
  ASSERT_OK(rf_layout_init(&lay, &m, &tl, &rl, RF_PLACEMENT_DISAGGREGATED));
  int dom[8] = {0, 0, 1, 1, 2, 2, 3, 3};
  rf_plan_options o = {.domain_of = dom};
  rf_plan plan;
  ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_HIERARCHICAL, &o));
  ASSERT_EQ(plan.domains, 3);
  ASSERT_EQ(plan.forward_depth, 1);
  int t0 = lay.order[0];
  for (int k = 0; k < 3; k++)
    ASSERT_EQ(plan.domain_root[(size_t)t0 * 3 + k], 2 * k);
  for (int k = 0; k < 3; k++)
    ASSERT_EQ(rf_plan_forwarded_from(&plan, t0, 2 * k + 1), 2 * k);
  ASSERT_EQ(plan.transfer_bytes, 3 * m.total_bytes);
  ASSERT_EQ(plan.forward_bytes, 3 * m.total_bytes);
  check_hier(&plan, dom);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* The engine end to end: domains of one replica, two, and uneven (three and one), in all
 * three modes, over messages and mapped, one bucket and small ones. check_world finds every
 * element once and the corrupted byte on each rank of its domain that it is forwarded to. */
static int test_worlds(void) {
  static const struct {
    layout_case c;
    int span; /* world ranks a domain */
  } cases[] = {
      {{"fsdp=2", "tp=1,dp=4", RF_STYLE_TUNIX, RF_ORDER_HF, RF_PLACEMENT_DISAGGREGATED}, 2},
      {{"fsdp=2", "tp=2,dp=4", RF_STYLE_FSDP2, RF_ORDER_HF, RF_PLACEMENT_DISAGGREGATED}, 4},
      {{"fsdp=2,tp=2", "tp=1,dp=4", RF_STYLE_TUNIX, RF_ORDER_JAX, RF_PLACEMENT_COLOCATED}, 3},
  };
  static const int64_t buckets[] = {0, 4096};
  rf_model m;
  ASSERT_OK(rf_model_load("tiny", &m));
  uint64_t *want = calloc((size_t)m.tensor_count, sizeof *want);
  ASSERT_TRUE(want);
  for (int t = 0; t < m.tensor_count; t++) {
    const rf_tensor *x = &m.tensors[t];
    rf_box whole = rf_box_whole(x);
    void *buf = malloc((size_t)x->bytes);
    ASSERT_TRUE(buf);
    rf_region r = rf_region_row_major(buf, &whole, rf_dtype_size(x->dtype));
    rf_fill_region(&r, &whole, x, SEED, NULL, x->dtype);
    want[t] = rf_checksum_region(&r, &whole, x, x->dtype);
    free(buf);
  }
  int worlds = 0;
  for (size_t ci = 0; ci < RF_ARRAY_LEN(cases); ci++) {
    rf_layout lay;
    make_layout(&lay, &m, &cases[ci].c, RF_ROLLOUT_DTYPE_MODEL);
    int *dom = malloc((size_t)lay.world_size * sizeof *dom);
    ASSERT_TRUE(dom);
    for (int w = 0; w < lay.world_size; w++)
      dom[w] = w / cases[ci].span;
    rf_plan_options o = {.domain_of = dom};
    rf_plan plan;
    ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_HIERARCHICAL, &o));
    ASSERT_GT(plan.domains, 1);
    check_hier(&plan, dom);
    rank_job *jobs = calloc((size_t)lay.world_size, sizeof *jobs);
    ASSERT_TRUE(jobs);
    for (int mapped = 0; mapped <= 1; mapped++)
      for (size_t bi = 0; bi < RF_ARRAY_LEN(buckets); bi++) {
        mapped_rounds = bi % 2 ? RF_MAPPED_ROUNDS_ON : RF_MAPPED_ROUNDS_OFF;
        run_world(&plan, mapped, buckets[bi], 60.0, -1, jobs);
        for (int r = 0; r < lay.world_size; r++)
          ASSERT_OK(jobs[r].status);
        check_world(&plan, jobs, want, want);
        free_jobs(jobs, lay.world_size);
        worlds++;
      }
    free(jobs);
    rf_plan_free(&plan);
    free(dom);
    rf_layout_free(&lay);
  }
  free(want);
  rf_model_free(&m);
  return worlds;
}

int main(void) {
  test_tiny_domains();
  srand(20261203);
  rf_log_push_quiet(1); /* random layouts that do not divide are expected here */
  static const char *models[] = {"tiny", "llama-3.2-1b", "gemma-2b", "tiny-mixtral",
                                 "tiny-deepseek"};
  int built = 0;
  for (size_t i = 0; i < RF_ARRAY_LEN(models); i++)
    built += test_random(models[i]);
  rf_log_pop_quiet();
  int worlds = test_worlds();
  printf("hierarchical plans checked: %d; engine worlds: %d\n", built, worlds);
  ASSERT_GE(built, 150);
  ASSERT_EQ(worlds, 12);
  return 0;
}
