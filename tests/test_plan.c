/* Planner properties over every shipped model and many random valid layout pairs, for every
 * plan kind (fanout also with up to 4 engine replicas), and exact totals derived by hand for
 * Llama-3.1-8B, for the tiny model's fanout and for tiny with fp32 norms among bf16 weights. */
#include <stdlib.h>

#include "plan_checks.h"

static const char *models[] = {"tiny",          "llama-3.2-1b",   "llama-3.1-8b",
                               "llama-3.1-70b", "llama-3.1-405b", "gemma-2b",
                               "gemma-7b",      "gemma-2-9b",     "gemma-3-1b"};

/* Llama-3.1-8B, trainer fsdp=4,tp=2 (tunix) -> rollout tp=4, derived by hand:
 * every rollout rank receives a quarter of the sharded weights plus all 65 norms, and every
 * trainer rank sends an eighth of the sharded weights plus an eighth of the norm traffic. */
static void test_llama8b_totals(void) {
  rf_model m;
  ASSERT_OK(rf_model_load("llama-3.1-8b", &m));
  rf_trainer_layout tl = {.fsdp = 4, .tp = 2, .dp = 1, .ep = 1, .pp = 1, .style = RF_STYLE_TUNIX};
  rf_rollout_layout rl = {.tp = 4, .dp = 1};
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

  /* Two engine replicas, fanout: the trainer sends one replica's bytes (a quarter of the
   * sharded weights and all norms per rank), the forward stage the second copy in one step. */
  rl.dp = 2;
  ASSERT_OK(rf_layout_init(&lay, &m, &tl, &rl, RF_PLACEMENT_DISAGGREGATED));
  ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_FANOUT, NULL));
  const int64_t replica = 4 * (sharded / 4 + norms); /* 16,062,119,936 */
  ASSERT_EQ(plan.transfer_bytes, replica);
  ASSERT_EQ(plan.forward_bytes, replica);
  ASSERT_EQ(plan.forward_depth, 1);
  for (int r = 0; r < 8; r++)
    ASSERT_EQ(plan.recv_bytes[r] + plan.forward_recv_bytes[r], sharded / 4 + norms);
  check_coverage(&plan);
  check_bytes(&plan, 1);
  check_fanout(&plan, NULL);
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

  rf_trainer_layout tl = {.fsdp = 2, .tp = 1, .dp = 1, .ep = 1, .pp = 1, .style = RF_STYLE_TUNIX};
  rf_rollout_layout rl = {.tp = 2, .dp = 1};
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

/* The tiny model, trainer fsdp=2 -> rollout tp=2,dp=4 (what `refit plan` prints in
 * tests/cli/fanout_cli.sh): p2p sends every replica its 279,808 bytes from the trainer,
 * fanout sends them once and forwards three copies in two steps. The vocabulary (512 rows)
 * splits evenly, so every one of the 21 tensors has a box on both tp ranks: 42 forward pieces
 * per step-one edge, 126 in all (one edge in step 0, two in step 1). */
static void test_tiny_fanout(void) {
  rf_model m;
  ASSERT_OK(rf_model_load("tiny", &m));
  rf_trainer_layout tl = {.fsdp = 2, .tp = 1, .dp = 1, .ep = 1, .pp = 1, .style = RF_STYLE_TUNIX};
  rf_rollout_layout rl = {.tp = 2, .dp = 4};
  rf_layout lay;
  ASSERT_OK(rf_layout_init(&lay, &m, &tl, &rl, RF_PLACEMENT_DISAGGREGATED));
  rf_plan p2p, fan;
  ASSERT_OK(rf_plan_build(&p2p, &lay, RF_PLAN_P2P, NULL));
  ASSERT_OK(rf_plan_build(&fan, &lay, RF_PLAN_FANOUT, NULL));
  ASSERT_EQ(p2p.transfer_bytes, 4 * 279808);
  ASSERT_EQ(fan.transfer_bytes, 279808);
  ASSERT_EQ(fan.forward_bytes, 3 * 279808);
  ASSERT_EQ(fan.forward_depth, 2);
  ASSERT_EQ(fan.piece_count - fan.forward_first[0], 126);
  ASSERT_EQ(fan.forward_first[1] - fan.forward_first[0], 42);
  for (int i = 0; i < 2; i++)
    ASSERT_EQ(fan.send_bytes[i], 139904);
  /* Step 0 of root 0 jumps to replica 2, step 1 joins the neighbours: 0 -> 1 and 2 -> 3. */
  int t0 = lay.order[0];
  ASSERT_EQ(fan.root[t0], 0);
  const rf_piece *first = &fan.pieces[fan.forward_first[0]];
  ASSERT_EQ(first->tensor, t0);
  ASSERT_EQ(first->src, 0);
  ASSERT_EQ(first->dst, 4);
  ASSERT_EQ(rf_plan_forwarded_from(&fan, t0, 2), 0);
  ASSERT_EQ(rf_plan_forwarded_from(&fan, t0, 6), 4);
  ASSERT_EQ(rf_plan_forwarded_from(&fan, t0, 1), -1);
  check_coverage(&fan);
  check_bytes(&fan, 1);
  check_fanout(&fan, NULL);
  check_choices(&fan, NULL);
  rf_plan_free(&p2p);
  rf_plan_free(&fan);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* Fanout over random layouts with 1 to 4 engine replicas, without a machine and with nodes of
 * a random size; returns the plans checked. */
static int test_fanout_random(void) {
  static const int sizes[] = {1, 2, 4, 8};
  int built = 0;
  for (size_t mi = 0; mi < RF_ARRAY_LEN(models); mi++) {
    rf_model m;
    ASSERT_OK(rf_model_load(models[mi], &m));
    int big = m.total_params > 20000000000LL;
    for (int trial = 0; trial < (big ? 2 : 6); trial++) {
      rf_trainer_layout tl = {.fsdp = pick(sizes, 3),
                              .tp = pick(sizes, 3),
                              .dp = 1,
                              .ep = 1,
                              .pp = 1,
                              .style = (rf_trainer_style)(rand() % 2)};
      rf_rollout_layout rl = {.tp = pick(sizes, 4), .dp = 1 + rand() % 4};
      rf_layout lay;
      if (rf_layout_init(&lay, &m, &tl, &rl, (rf_placement)(rand() % 2)) != RF_OK)
        continue;
      test_machine machine = {1 + rand() % 4, calloc((size_t)lay.world_size, sizeof(int))};
      ASSERT_TRUE(machine.node_of);
      for (int w = 0; w < lay.world_size; w++)
        machine.node_of[w] = w / machine.per_node;
      rf_plan_options near = {
          .distance = test_distance, .distance_ctx = &machine, .node_of = machine.node_of};
      for (int choice = 0; choice < 2; choice++) {
        const rf_plan_options *o = choice ? &near : NULL;
        rf_plan plan;
        ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_FANOUT, o));
        check_coverage(&plan);
        check_bytes(&plan, o == NULL);
        check_choices(&plan, o);
        check_fanout(&plan, o);
        built++;
        rf_plan_free(&plan);
      }
      free(machine.node_of);
      rf_layout_free(&lay);
    }
    rf_model_free(&m);
  }
  return built;
}

/* How Llama-3.2-1B's transfer bytes lie (rf_piece_runs), trainer fsdp=2 -> rollout tp=2,
 * derived by hand from its 16 layers (D 2048, F 8192, q 2048 and k, v 512 rows, vocabulary
 * 128,256, tied embeddings) and 33 norms of 2048, each sent whole to both rollout ranks:
 *   - tunix: gate, up and the embeddings are sharded along their columns, which the rollout
 *     keeps in full, so the halves land strided in its tensors; o and down are sharded along
 *     their rows and cut along their columns by the rollout, so they are read strided; q, k, v
 *     and the norms lie in one run at both ends.
 *   - fsdp2 shards every tensor along its rows: only o and down are read strided; the vocabulary
 *     (128,256 rows, 64,128 a rank on both sides) lands in one run. */
static void test_llama1b_runs(void) {
  rf_model m;
  ASSERT_OK(rf_model_load("llama-3.2-1b", &m));
  const int64_t layers = 16, D = 2048, F = 8192, row = D * 2, embed = 128256 * row;
  const int64_t norms = 2 * 33 * row, qkv = layers * (2048 + 512 + 512) * row;
  const int64_t gate_up = layers * 2 * F * row, o_down = layers * (D * D + D * F) * 2;
  for (int style = 0; style < 2; style++) {
    rf_trainer_layout tl = {.fsdp = 2,
                            .tp = 1,
                            .dp = 1,
                            .ep = 1,
                            .pp = 1,
                            .style = style ? RF_STYLE_FSDP2 : RF_STYLE_TUNIX};
    rf_rollout_layout rl = {.tp = 2, .dp = 1};
    rf_layout lay;
    ASSERT_OK(rf_layout_init(&lay, &m, &tl, &rl, RF_PLACEMENT_DISAGGREGATED));
    rf_plan plan;
    ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_P2P, NULL));
    ASSERT_EQ(plan.runs_bytes[RF_RUNS_STRIDED_SOURCE], o_down); /* 671,088,640 */
    ASSERT_EQ(plan.runs_bytes[RF_RUNS_STRIDED_BOTH], 0);
    if (style) {
      ASSERT_EQ(plan.runs_bytes[RF_RUNS_STRIDED_DESTINATION], 0);
      ASSERT_EQ(plan.runs_bytes[RF_RUNS_CONTIGUOUS], plan.transfer_bytes - o_down);
    } else {
      ASSERT_EQ(plan.runs_bytes[RF_RUNS_STRIDED_DESTINATION], gate_up + embed); /* 1,599,078,400 */
      ASSERT_EQ(plan.runs_bytes[RF_RUNS_CONTIGUOUS], qkv + norms);              /* 201,596,928 */
      ASSERT_EQ(plan.transfer_bytes, qkv + norms + gate_up + embed + o_down);
    }
    rf_plan_free(&plan);
    rf_layout_free(&lay);
  }
  rf_model_free(&m);
}

int main(void) {
  test_llama8b_totals();
  test_llama1b_runs();
  test_tiny_fanout();
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
      rf_trainer_layout tl = {.fsdp = pick(sizes, 4),
                              .tp = pick(sizes, big ? 3 : 4),
                              .dp = 1 + rand() % 2,
                              .ep = 1,
                              .pp = 1,
                              .style = (rf_trainer_style)(rand() % 2)};
      rf_rollout_layout rl = {.tp = pick(sizes, 4) * (rand() % 3 == 0 ? 2 : 1),
                              .dp = 1 + rand() % 2};
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
        for (int kind = RF_PLAN_P2P; kind <= RF_PLAN_FANOUT; kind++) {
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
          if (kind == RF_PLAN_P2P && choice == 0) {
            int64_t written = 0;
            for (int r = 0; r < lay.rollout_ranks; r++)
              written += check_slots(&lay, r);
            ASSERT_EQ(written, plan.transfer_bytes);
          }
          check_choices(&plan, o);
          if (kind == RF_PLAN_FANOUT)
            check_fanout(&plan, o);
          built++;
          rf_plan_free(&plan);
        }
      free(machine.node_of);
      rf_layout_free(&lay);
    }
    rf_model_free(&m);
  }
  int fanout = test_fanout_random();
  printf("plans checked: %d, layouts rejected: %d; fanout plans with 1 to 4 replicas: %d\n", built,
         rejected, fanout);
  ASSERT_GE(built, 450);
  ASSERT_GE(fanout, 60);
  return 0;
}
