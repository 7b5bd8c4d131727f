/* Planner properties over every shipped model and many random valid layout pairs, for both
 * plan kinds, and exact totals derived by hand for Llama-3.1-8B and for tiny with fp32 norms
 * among bf16 weights. */
#include <stdlib.h>

#include "plan/plan.h"
#include "test.h"

static const char *models[] = {"tiny",          "llama-3.2-1b",   "llama-3.1-8b",
                               "llama-3.1-70b", "llama-3.1-405b", "gemma-2b",
                               "gemma-7b",      "gemma-2-9b",     "gemma-3-1b"};

static const rf_plan *sort_plan;

/* Orders pieces by stage, tensor and destination so each destination's pieces are adjacent. */
static int by_destination(const void *a, const void *b) {
  const rf_piece *x = &sort_plan->pieces[*(const int *)a];
  const rf_piece *y = &sort_plan->pieces[*(const int *)b];
  if (x->stage != y->stage)
    return x->stage - y->stage;
  if (x->tensor != y->tensor)
    return x->tensor - y->tensor;
  return x->dst - y->dst;
}

static int box_inside(const rf_box *in, const rf_box *out) {
  rf_box x;
  return rf_box_intersect(in, out, &x) && rf_box_equal(&x, in);
}

/* What destination `dst` of a stage must end up holding. */
static rf_box wanted(const rf_plan *plan, const rf_piece *p) {
  if (p->stage == RF_STAGE_RESHAPE)
    return plan->coupling[(size_t)p->tensor * plan->layout->trainer_ranks + p->dst];
  return rf_layout_rollout_box(plan->layout, p->tensor, p->dst);
}

/* Every wanted element is covered exactly once: the kept parts of one destination's pieces
 * are pairwise disjoint and add up to the wanted box; every source holds what it sends. */
static void check_coverage(const rf_plan *plan) {
  const rf_layout *lay = plan->layout;
  int n = plan->piece_count;
  int *idx = malloc((size_t)n * sizeof *idx);
  for (int i = 0; i < n; i++)
    idx[i] = i;
  sort_plan = plan;
  qsort(idx, (size_t)n, sizeof *idx, by_destination);
  int64_t *covered = calloc((size_t)RF_MAX(lay->trainer_ranks, lay->rollout_ranks) *
                                (size_t)lay->model->tensor_count * 2,
                            sizeof *covered);
  for (int a = 0; a < n;) {
    int b = a;
    const rf_piece *first = &plan->pieces[idx[a]];
    while (b < n && by_destination(&idx[a], &idx[b]) == 0)
      b++;
    rf_box want = wanted(plan, first);
    int64_t sum = 0;
    for (int i = a; i < b; i++) {
      const rf_piece *p = &plan->pieces[idx[i]];
      rf_box held = p->stage == RF_STAGE_TRANSFER && plan->kind == RF_PLAN_STAR
                        ? plan->coupling[(size_t)p->tensor * lay->trainer_ranks + p->src]
                        : rf_layout_trainer_box(lay, p->tensor, p->src);
      ASSERT_TRUE(box_inside(&p->box, &held));
      ASSERT_EQ(p->bytes, rf_box_numel(&p->box) * rf_tensor_esize(&lay->model->tensors[p->tensor]));
      rf_box kept_i, kept_j, both;
      /* A star piece of a whole embedding may hold none of what its destination keeps. */
      int kept_any = rf_box_intersect(&p->box, &want, &kept_i);
      ASSERT_TRUE(kept_any || (plan->kind == RF_PLAN_STAR && p->stage == RF_STAGE_TRANSFER));
      sum += rf_box_numel(&kept_i);
      for (int j = a; j < i; j++) {
        rf_box_intersect(&plan->pieces[idx[j]].box, &want, &kept_j);
        ASSERT_FALSE(rf_box_intersect(&kept_i, &kept_j, &both));
      }
    }
    ASSERT_EQ(sum, rf_box_numel(&want));
    a = b;
  }
  /* Every destination that wants anything got a group: count groups against wants. */
  int64_t groups = 0, wants = 0;
  for (int a = 0; a < n; a++)
    groups += a == 0 || by_destination(&idx[a - 1], &idx[a]) != 0;
  for (int t = 0; t < lay->model->tensor_count; t++) {
    for (int r = 0; r < lay->rollout_ranks; r++) {
      rf_box w = rf_layout_rollout_box(lay, t, r);
      wants += !rf_box_is_empty(&w);
    }
    if (plan->kind == RF_PLAN_STAR)
      wants += lay->trainer_ranks;
  }
  ASSERT_EQ(groups, wants);
  free(covered);
  free(idx);
}

/* Bytes sent = bytes received = what every rollout rank holds, plus star's extras. */
static void check_bytes(const rf_plan *plan, int by_load) {
  const rf_layout *lay = plan->layout;
  int64_t held = 0, sent = 0, recv = 0, max_tensor = 0;
  for (int t = 0; t < lay->model->tensor_count; t++) {
    max_tensor = RF_MAX(max_tensor, lay->model->tensors[t].bytes);
    for (int r = 0; r < lay->rollout_ranks; r++) {
      rf_box b = rf_layout_rollout_box(lay, t, r);
      held += rf_box_numel(&b) * rf_tensor_esize(&lay->model->tensors[t]);
    }
  }
  /* Balance is about links: local copies (colocated ranks) are not sends. */
  int64_t *remote = calloc((size_t)lay->trainer_ranks, sizeof *remote);
  for (int i = 0; i < plan->piece_count; i++)
    if (plan->pieces[i].stage == RF_STAGE_TRANSFER && !rf_piece_is_local(plan, &plan->pieces[i]))
      remote[plan->pieces[i].src] += plan->pieces[i].bytes;
  int64_t min_send = INT64_MAX, max_send = 0;
  for (int i = 0; i < lay->trainer_ranks; i++) {
    sent += plan->send_bytes[i];
    min_send = RF_MIN(min_send, remote[i]);
    max_send = RF_MAX(max_send, remote[i]);
  }
  free(remote);
  for (int r = 0; r < lay->rollout_ranks; r++)
    recv += plan->recv_bytes[r];
  ASSERT_EQ(sent, recv);
  ASSERT_EQ(sent, plan->transfer_bytes);
  ASSERT_EQ(plan->transfer_bytes, held + plan->extra_bytes);
  if (plan->kind == RF_PLAN_P2P) {
    ASSERT_EQ(plan->extra_bytes, 0);
    ASSERT_EQ(plan->reshape_count, 0);
    /* Disaggregated: balanced within one tensor's worth (when only load decides: a machine's
     * distances come first). Colocated: a rank's own trainer shard is used first whenever it
     * holds the piece, which may unbalance the links. */
    if (lay->placement == RF_PLACEMENT_DISAGGREGATED && by_load)
      ASSERT_LE(max_send - min_send, max_tensor);
    for (int i = 0; lay->placement == RF_PLACEMENT_COLOCATED && i < plan->piece_count; i++) {
      const rf_piece *p = &plan->pieces[i];
      int own = -1;
      rf_layout_roles(lay, rf_piece_dst_world(plan, p), &own, NULL);
      rf_box mine = own >= 0 ? rf_layout_trainer_box(lay, p->tensor, own) : p->box;
      if (own >= 0 && box_inside(&p->box, &mine))
        ASSERT_EQ(p->src, own);
    }
  }
  if (lay->rollout.tp == 1 && lay->rollout.dp == 1)
    ASSERT_EQ(held, lay->model->total_bytes);
}

/* Llama-3.1-8B, trainer fsdp=4,tp=2 (tunix) -> rollout tp=4, derived by hand:
 * every rollout rank receives a quarter of the sharded weights plus all 65 norms, and every
 * trainer rank sends an eighth of the sharded weights plus an eighth of the norm traffic. */
static void test_llama8b_totals(void) {
  rf_model m;
  ASSERT_OK(rf_model_load("llama-3.1-8b", &m));
  rf_trainer_layout tl = {4, 2, 1, RF_STYLE_TUNIX, RF_ORDER_HF};
  rf_rollout_layout rl = {4, 1};
  rf_layout lay;
  ASSERT_OK(rf_layout_init(&lay, &m, &tl, &rl, RF_PLACEMENT_DISAGGREGATED));
  rf_plan plan;
  ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_P2P, NULL));
  const int64_t norms = 65 * 4096 * 2, sharded = m.total_bytes - norms;
  ASSERT_EQ(m.total_bytes, 16060522496LL);
  for (int r = 0; r < 4; r++)
    ASSERT_EQ(plan.recv_bytes[r], sharded / 4 + norms); /* 4,015,529,984 */
  for (int i = 0; i < 8; i++)
    ASSERT_EQ(plan.send_bytes[i], sharded / 8 + 4 * norms / 8); /* 2,007,764,992 */
  /* Pieces per layer: q, k, v 2 each per rank (tp halves of columns), o/gate/up/down 4 each
   * (fsdp quarters), 2 norms 2 each (tp halves): 104; plus embed 16, lm_head 16, norm 8. */
  ASSERT_EQ(plan.piece_count, 32 * 104 + 16 + 16 + 8);
  rf_plan_free(&plan);

  /* The same job as a star: T=8 >= R=4 gives 4 stars of 2 arms, fan-in. */
  ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_STAR, NULL));
  ASSERT_EQ(plan.fan_in, 1);
  ASSERT_EQ(plan.star_arms, 2);
  ASSERT_EQ(plan.star_count, 4);
  /* Embeddings travel whole to every rollout rank: 3 extra quarters each, times 4 ranks. */
  ASSERT_EQ(plan.extra_bytes, 2 * 4 * (128256LL * 4096 * 2) * 3 / 4);
  check_coverage(&plan);
  check_bytes(&plan, 1);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* tiny (139,584 parameters: 139,264 in sharded tensors, 320 in its 5 norms of 64) with every
 * norm fp32 as a dtype of its own among bf16 weights, trainer fsdp=2 (tunix) -> rollout tp=2,
 * derived by hand: each rollout rank receives half the sharded elements at 2 bytes and every
 * norm whole at 4; each trainer rank sends half the sharded elements and, the norms' holders
 * being equal, alternately one norm piece of 256 bytes. */
static void test_tiny_mixed_totals(void) {
  rf_model m;
  ASSERT_OK(rf_model_load("tiny", &m));
  uint64_t plain = rf_model_digest(&m);
  for (int t = 0; t < m.tensor_count; t++)
    if (m.tensors[t].kind == RF_T_NORM)
      ASSERT_OK(rf_model_set_tensor_dtype(&m, t, RF_DTYPE_FP32));
  ASSERT_EQ(m.total_bytes, 139264 * 2 + 320 * 4);
  ASSERT_TRUE(rf_model_digest(&m) != plain); /* the digest covers a tensor's own dtype */
  /* --dtype changes every other tensor and leaves the norms fp32. */
  rf_model_set_dtype(&m, RF_DTYPE_FP16);
  for (int t = 0; t < m.tensor_count; t++)
    ASSERT_EQ(m.tensors[t].dtype, m.tensors[t].kind == RF_T_NORM ? RF_DTYPE_FP32 : RF_DTYPE_FP16);
  ASSERT_EQ(m.total_bytes, 139264 * 2 + 320 * 4);
  rf_model_set_dtype(&m, RF_DTYPE_BF16);
  char err[256] = "";
  rf_log_capture(err, sizeof err);
  rf_status st = rf_model_set_tensor_dtype(&m, m.tensor_count, RF_DTYPE_FP32);
  rf_log_capture(NULL, 0);
  ASSERT_STATUS(st, RF_ERR_INTERNAL);
  ASSERT_STR_EQ(err, "model tiny has no tensor 21; pass an index below 21");
  rf_log_capture(err, sizeof err);
  st = rf_model_set_tensor_dtype(&m, 0, (rf_dtype)7);
  rf_log_capture(NULL, 0);
  ASSERT_STATUS(st, RF_ERR_INTERNAL);
  ASSERT_STR_EQ(err, "model tiny: 7 is not a dtype to give tensor model.embed_tokens.weight; pass "
                     "an rf_dtype");
  ASSERT_EQ(m.total_bytes, 279808);
  ASSERT_EQ(m.tensors[0].own_dtype, 0);

  rf_trainer_layout tl = {2, 1, 1, RF_STYLE_TUNIX, RF_ORDER_HF};
  rf_rollout_layout rl = {2, 1};
  rf_layout lay;
  ASSERT_OK(rf_layout_init(&lay, &m, &tl, &rl, RF_PLACEMENT_DISAGGREGATED));
  for (int kind = RF_PLAN_P2P; kind <= RF_PLAN_STAR; kind++) {
    rf_plan plan;
    ASSERT_OK(rf_plan_build(&plan, &lay, (rf_plan_kind)kind, NULL));
    int norm_pieces = 0;
    for (int i = 0; i < plan.piece_count; i++) {
      const rf_piece *p = &plan.pieces[i];
      int norm = m.tensors[p->tensor].kind == RF_T_NORM;
      ASSERT_EQ(p->bytes, rf_box_numel(&p->box) * (norm ? 4 : 2));
      norm_pieces += norm && p->stage == RF_STAGE_TRANSFER;
      if (norm && p->stage == RF_STAGE_TRANSFER)
        ASSERT_EQ(p->bytes, 256);
    }
    ASSERT_EQ(norm_pieces, 5 * 2);
    if (kind == RF_PLAN_P2P) {
      for (int r = 0; r < 2; r++)
        ASSERT_EQ(plan.recv_bytes[r], 139264 / 2 * 2 + 320 * 4); /* 140,544 */
      for (int r = 0; r < 2; r++)
        ASSERT_EQ(plan.send_bytes[r], 139264 / 2 * 2 + 5 * 256); /* 140,544 */
      ASSERT_EQ(plan.transfer_bytes, 2 * 140544);
    }
    check_coverage(&plan);
    check_bytes(&plan, 1);
    rf_plan_free(&plan);
  }
  rf_layout_free(&lay);
  rf_model_free(&m);
}

static int pick(const int *v, int n) { return v[rand() % n]; }

/* A made-up machine for the source choice: nodes of `per_node` consecutive world ranks, an
 * arbitrary distance inside a node, one larger distance between nodes. */
typedef struct {
  int per_node;
  int *node_of;
} test_machine;

static int test_distance(void *ctx, int a, int b) {
  const test_machine *m = ctx;
  if (a == b)
    return 0;
  if (m->node_of[a] != m->node_of[b])
    return 5;
  return 1 + (a * 7 + b * 3) % 4;
}

/* Replays the rule the planner promises, the naive way: every piece of the stage that chooses
 * sources comes from the nearest trainer rank holding exactly its elements' box, then the
 * least loaded so far, then the lowest rank; load counts bytes that leave the process. */
static void check_choices(const rf_plan *plan, const rf_plan_options *o) {
  const rf_layout *lay = plan->layout;
  rf_stage choosing = plan->kind == RF_PLAN_STAR ? RF_STAGE_RESHAPE : RF_STAGE_TRANSFER;
  int64_t *load = calloc((size_t)lay->trainer_ranks, sizeof *load);
  ASSERT_TRUE(load);
  for (int i = 0; i < plan->piece_count; i++) {
    const rf_piece *p = &plan->pieces[i];
    if (p->stage != (int32_t)choosing)
      continue;
    int dst_world = rf_piece_dst_world(plan, p), best = -1, best_dist = 0;
    for (int r = 0; r < lay->trainer_ranks; r++) {
      rf_box held = rf_layout_trainer_box(lay, p->tensor, r), x;
      if (!rf_box_intersect(&held, &p->box, &x) || !rf_box_equal(&x, &p->box))
        continue;
      int w = rf_layout_trainer_world_rank(lay, r);
      int d = o && o->distance ? o->distance(o->distance_ctx, w, dst_world) : w != dst_world;
      if (best < 0 || d < best_dist || (d == best_dist && load[r] < load[best])) {
        best = r;
        best_dist = d;
      }
    }
    ASSERT_EQ(p->src, best);
    if (!rf_piece_is_local(plan, p))
      load[p->src] += p->bytes;
  }
  free(load);
}

int main(void) {
  test_llama8b_totals();
  test_tiny_mixed_totals();
  srand(20261202);
  rf_log_push_quiet(1); /* random layouts that do not divide are expected here */
  static const int sizes[] = {1, 2, 4, 8};
  int built = 0, rejected = 0;
  for (size_t mi = 0; mi < RF_ARRAY_LEN(models); mi++) {
    rf_model m;
    ASSERT_OK(rf_model_load(models[mi], &m));
    int big = m.total_params > 20000000000LL;
    for (int trial = 0; trial < (big ? 3 : 12); trial++) {
      rf_trainer_layout tl = {pick(sizes, 4), pick(sizes, big ? 3 : 4), 1 + rand() % 2,
                              (rf_trainer_style)(rand() % 2), RF_ORDER_HF};
      rf_rollout_layout rl = {pick(sizes, 4) * (rand() % 3 == 0 ? 2 : 1), 1 + rand() % 2};
      rf_placement pl = (rf_placement)(rand() % 2);
      rf_layout lay;
      if (rf_layout_init(&lay, &m, &tl, &rl, pl) != RF_OK) {
        rejected++;
        continue;
      }
      test_machine machine = {1 + rand() % 4, calloc((size_t)lay.world_size, sizeof(int))};
      ASSERT_TRUE(machine.node_of);
      for (int w = 0; w < lay.world_size; w++)
        machine.node_of[w] = w / machine.per_node;
      rf_plan_options near = {
          .distance = test_distance, .distance_ctx = &machine, .node_of = machine.node_of};
      for (int choice = 0; choice < 3; choice++)
        for (int kind = RF_PLAN_P2P; kind <= RF_PLAN_STAR; kind++) {
          /* Plans without a machine, with an opaque distance, and with the node promise. */
          rf_plan_options opaque = {.distance = test_distance, .distance_ctx = &machine};
          const rf_plan_options *o = choice == 0 ? NULL : choice == 1 ? &opaque : &near;
          rf_plan plan;
          rf_status st = rf_plan_build(&plan, &lay, (rf_plan_kind)kind, o);
          if (st == RF_ERR_LAYOUT && kind == RF_PLAN_STAR) {
            rejected++;
            continue;
          }
          ASSERT_OK(st);
          check_coverage(&plan);
          check_bytes(&plan, o == NULL);
          check_choices(&plan, o);
          built++;
          rf_plan_free(&plan);
        }
      free(machine.node_of);
      rf_layout_free(&lay);
    }
    rf_model_free(&m);
  }
  printf("plans checked: %d, layouts rejected: %d\n", built, rejected);
  ASSERT_GE(built, 300);
  return 0;
}
