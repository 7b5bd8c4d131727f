/* The rounds that run fanout's forward steps alongside the transfer (plan.h, rf_rounds): a
 * hand-built plan with hand-built schedules whose every round is worked out below; then, over
 * real fanout plans, every forward bucket's round against a brute-force reading of its
 * definition (one more than the latest round of any chunk that delivers a row it sends, so
 * after every bucket that delivers any of its elements), the round layout, and that two builds
 * agree byte for byte. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "test.h"

/* ---- by hand --------------------------------------------------------------------------------
 *
 * Four replicas of tp=1 (rollout ranks 0-3). Tensor 0 (8 rows) has root 0, tensor 1 (4 rows)
 * root 1. Step 0 sends 0->2 (tensor 0) and 1->3 (tensor 1); step 1 sends 0->1 and 2->3
 * (tensor 0), 1->2 and 3->0 (tensor 1).
 *
 *   transfer  bucket 0: t0 rows 0-4 to 0       arrive in round 0
 *             bucket 1: t0 rows 4-8 to 0,      round 1
 *                       t1 rows 0-2 to 1
 *             bucket 2: t1 rows 2-4 to 1       round 2
 *   step 0    bucket 0: t0 rows 0-4, 0->2      needs round 0            -> round 1
 *             bucket 1: t0 rows 4-8, 0->2      needs round 1            -> round 2
 *             bucket 2: t1 rows 0-2, 2-4, 1->3 needs rounds 1, 2        -> round 3
 *   step 1    bucket 0: t0 rows 0-8, 0->1      needs rounds 0, 1        -> round 2
 *                       t0 rows 0-2, 2->3      needs round 1 (step 0)
 *             bucket 1: t0 rows 2-8, 2->3      needs rounds 1, 2        -> round 3
 *                       t1 rows 0-4, 1->2      needs rounds 1, 2
 *             bucket 2: t1 rows 0-4, 3->0      needs round 3 (step 0)   -> round 4
 *
 * Rows 0-2 of tensor 0 on rank 2 arrived in round 1, so that chunk alone would go in round 2
 * although the rest of its piece arrives in round 2. */

enum { T0_TRANSFER, T1_TRANSFER, T0_S0, T1_S0, T0_S1A, T0_S1B, T1_S1A, T1_S1B, PIECES };

static const rf_piece hand_pieces[PIECES] = {
    [T0_TRANSFER] = {0, RF_STAGE_TRANSFER, 0, 0, {{0, 0}, {8, 1}}, 16},
    [T1_TRANSFER] = {1, RF_STAGE_TRANSFER, 0, 1, {{0, 0}, {4, 1}}, 8},
    [T0_S0] = {0, RF_STAGE_FORWARD, 0, 2, {{0, 0}, {8, 1}}, 16},
    [T1_S0] = {1, RF_STAGE_FORWARD, 1, 3, {{0, 0}, {4, 1}}, 8},
    [T0_S1A] = {0, RF_STAGE_FORWARD, 0, 1, {{0, 0}, {8, 1}}, 16},
    [T0_S1B] = {0, RF_STAGE_FORWARD, 2, 3, {{0, 0}, {8, 1}}, 16},
    [T1_S1A] = {1, RF_STAGE_FORWARD, 1, 2, {{0, 0}, {4, 1}}, 8},
    [T1_S1B] = {1, RF_STAGE_FORWARD, 3, 0, {{0, 0}, {4, 1}}, 8},
};

static rf_chunk chunk(int piece, int bucket, int64_t lo, int64_t hi) {
  return (rf_chunk){piece, bucket, {{lo, 0}, {hi, 1}}, 2 * (hi - lo)};
}

/* A schedule over `chunks`, bucket numbers as the chunks give them (consecutive from 0). */
static rf_schedule hand_schedule(rf_stage stage, rf_chunk *chunks, int count, rf_bucket *buckets,
                                 int bucket_count) {
  for (int b = 0; b < bucket_count; b++)
    buckets[b] = (rf_bucket){0, 0};
  for (int i = count - 1; i >= 0; i--) {
    buckets[chunks[i].bucket].first = i;
    buckets[chunks[i].bucket].count++;
  }
  return (rf_schedule){stage, 4, count, chunks, bucket_count, buckets, 0, RF_PACE_PIECES};
}

static void test_by_hand(void) {
  rf_model m;
  ASSERT_OK(rf_model_load("tiny", &m)); /* for the tensors' names */
  rf_layout lay = {.model = &m};
  rf_plan plan = {.kind = RF_PLAN_FANOUT, .layout = &lay, .piece_count = PIECES};
  plan.pieces = (rf_piece *)hand_pieces;
  rf_chunk tc[] = {chunk(T0_TRANSFER, 0, 0, 4), chunk(T0_TRANSFER, 1, 4, 8),
                   chunk(T1_TRANSFER, 1, 0, 2), chunk(T1_TRANSFER, 2, 2, 4)};
  rf_chunk f0[] = {chunk(T0_S0, 0, 0, 4), chunk(T0_S0, 1, 4, 8), chunk(T1_S0, 2, 0, 2),
                   chunk(T1_S0, 2, 2, 4)};
  rf_chunk f1[] = {chunk(T0_S1A, 0, 0, 8), chunk(T0_S1B, 0, 0, 2), chunk(T0_S1B, 1, 2, 8),
                   chunk(T1_S1A, 1, 0, 4), chunk(T1_S1B, 2, 0, 4)};
  rf_bucket tb[3], b0[3], b1[3];
  rf_schedule transfer = hand_schedule(RF_STAGE_TRANSFER, tc, 4, tb, 3);
  rf_schedule forward[2] = {hand_schedule(RF_STAGE_FORWARD, f0, 4, b0, 3),
                            hand_schedule(RF_STAGE_FORWARD, f1, 5, b1, 3)};
  rf_rounds r;
  ASSERT_OK(rf_rounds_build(&plan, &transfer, forward, 2, &r));
  ASSERT_EQ(r.round_count, 5);
  ASSERT_EQ(r.steps, 2);
  const int want_round[6] = {1, 2, 3, 2, 3, 4};
  ASSERT_EQ(r.step_first[0], 0);
  ASSERT_EQ(r.step_first[1], 3);
  ASSERT_EQ(r.step_first[2], 6);
  for (int i = 0; i < 6; i++)
    ASSERT_EQ(r.forward_round[i], want_round[i]);
  /* Round by round: the transfer's bucket first, then the forward buckets by step. */
  const int want_first[6] = {0, 1, 3, 6, 8, 9};
  const rf_round_item want_items[9] = {{-1, 0}, {-1, 1}, {0, 0}, {-1, 2}, {0, 1},
                                       {1, 0},  {0, 2},  {1, 1}, {1, 2}};
  for (int k = 0; k <= 5; k++)
    ASSERT_EQ(r.first[k], want_first[k]);
  for (int i = 0; i < 9; i++) {
    ASSERT_EQ(r.items[i].step, want_items[i].step);
    ASSERT_EQ(r.items[i].bucket, want_items[i].bucket);
  }
  rf_rounds_free(&r);

  /* Without forward steps every bucket is a round of its own. */
  ASSERT_OK(rf_rounds_build(&plan, &transfer, NULL, 0, &r));
  ASSERT_EQ(r.round_count, 3);
  for (int k = 0; k < 3; k++) {
    ASSERT_EQ(r.first[k], k);
    ASSERT_EQ(r.items[k].step, -1);
    ASSERT_EQ(r.items[k].bucket, k);
  }
  ASSERT_EQ(r.first[3], 3);
  rf_rounds_free(&r);

  /* A step that forwards rows nothing delivered: the plan is broken, and the error says where. */
  tc[3] = chunk(T1_TRANSFER, 2, 2, 3); /* row 3 of tensor 1 never reaches rank 1 */
  char err[256] = "";
  rf_log_capture(err, sizeof err);
  rf_status st = rf_rounds_build(&plan, &transfer, forward, 2, &r);
  rf_log_capture(NULL, 0);
  ASSERT_STATUS(st, RF_ERR_INTERNAL);
  char want[256];
  snprintf(want, sizeof want,
           "rounds: forward step 0 sends row 3 of %s from rollout rank 1, which nothing "
           "delivers there; the plan is inconsistent",
           m.tensors[1].name);
  ASSERT_STR_EQ(err, want);
  ASSERT_EQ(r.round_count, 0); /* freed on failure */
  rf_model_free(&m);
}

/* ---- real plans ------------------------------------------------------------------------------ */

static int rows_meet(const rf_chunk *a, const rf_chunk *b) {
  return a->box.lo[0] < b->box.hi[0] && b->box.lo[0] < a->box.hi[0];
}

static int boxes_meet(const rf_chunk *a, const rf_chunk *b) {
  return rows_meet(a, b) && a->box.lo[1] < b->box.hi[1] && b->box.lo[1] < a->box.hi[1];
}

/* The round chunk i of schedule `sched` (-1: the transfer) is posted in. */
static int round_of(const rf_rounds *r, const rf_schedule *transfer, const rf_schedule *forward,
                    int sched, int i) {
  if (sched < 0)
    return transfer->chunks[i].bucket;
  return r->forward_round[r->step_first[sched] + forward[sched].chunks[i].bucket];
}

/* Every forward bucket's round, worked out by brute force; returns the buckets checked. */
static int check_rounds(const rf_plan *plan, const rf_schedule *transfer,
                        const rf_schedule *forward, const rf_rounds *r) {
  int depth = plan->forward_depth, checked = 0;
  for (int s = 0; s < depth; s++) {
    int *latest = malloc((size_t)forward[s].bucket_count * sizeof *latest + 1);
    ASSERT_TRUE(latest != NULL);
    for (int b = 0; b < forward[s].bucket_count; b++)
      latest[b] = -1;
    for (int i = 0; i < forward[s].chunk_count; i++) {
      const rf_chunk *k = &forward[s].chunks[i];
      const rf_piece *p = &plan->pieces[k->piece];
      int mine = round_of(r, transfer, forward, s, i), delivered = 0;
      /* Everything that lands on this chunk's sender: the transfer and the earlier steps. */
      for (int from = -1; from < s; from++) {
        const rf_schedule *d = from < 0 ? transfer : &forward[from];
        for (int j = 0; j < d->chunk_count; j++) {
          const rf_piece *q = &plan->pieces[d->chunks[j].piece];
          if (q->tensor != p->tensor || q->dst != p->src || !rows_meet(&d->chunks[j], k))
            continue;
          int theirs = round_of(r, transfer, forward, from, j);
          if (boxes_meet(&d->chunks[j], k)) {
            ASSERT_LT(theirs, mine); /* it forwards nothing before it has arrived */
            delivered = 1;
          }
          latest[k->bucket] = RF_MAX(latest[k->bucket], theirs);
        }
      }
      ASSERT_TRUE(delivered);
    }
    for (int b = 0; b < forward[s].bucket_count; b++, checked++)
      ASSERT_EQ(r->forward_round[r->step_first[s] + b], latest[b] + 1);
    free(latest);
  }
  return checked;
}

/* The layout: the transfer's bucket k leads round k, every forward bucket appears once, in
 * its round, after the transfer's and in (step, bucket) order. */
static void check_layout(const rf_schedule *transfer, const rf_rounds *r) {
  int total = transfer->bucket_count + r->step_first[r->steps], seen = 0;
  ASSERT_EQ(r->first[0], 0);
  ASSERT_EQ(r->first[r->round_count], total);
  for (int k = 0; k < r->round_count; k++) {
    ASSERT_GT(r->first[k + 1], r->first[k]); /* no empty round */
    for (int i = r->first[k]; i < r->first[k + 1]; i++, seen++) {
      const rf_round_item *it = &r->items[i];
      if (it->step < 0) {
        ASSERT_EQ(i, r->first[k]);
        ASSERT_EQ(it->bucket, k);
      } else {
        ASSERT_EQ(r->forward_round[r->step_first[it->step] + it->bucket], k);
      }
      if (i > r->first[k])
        ASSERT_TRUE(it[-1].step < it->step ||
                    (it[-1].step == it->step && it[-1].bucket < it->bucket));
    }
  }
  ASSERT_EQ(seen, total);
}

typedef struct {
  const char *model, *trainer, *rollout;
  rf_placement placement;
  int64_t bucket_size;
  int rounds[2]; /* the round count, pinned: paced by pieces (grouped, unfused), by rows (fused) */
} real_case;

/* The counts come out as the transfer's buckets plus one round per forward step: each step
 * trails the one before by a single round. Paced by rows the transfer takes one bucket more
 * in two cases, where without pacing it took no more buckets than its busiest rank needs
 * (tiny's 83,424 remote bytes into one rank over 4 KiB: 21; Llama-3.2-1B's 1,235,881,984 bytes
 * from a sender over 1 MiB: 1,179): pairs that stop at their targets in whole rows leave a
 * little of each bucket empty, and one more bucket carries what that adds up to. */
static const real_case cases[] = {
    {"tiny", "fsdp=2", "tp=2,dp=2", RF_PLACEMENT_DISAGGREGATED, 16384, {9 + 1, 9 + 1}},
    {"tiny", "fsdp=2", "tp=2,dp=4", RF_PLACEMENT_DISAGGREGATED, 16384, {9 + 2, 9 + 2}},
    {"tiny", "fsdp=2", "tp=2,dp=4", RF_PLACEMENT_DISAGGREGATED, 0, {1 + 2, 1 + 2}},
    {"tiny", "fsdp=2,tp=2", "tp=1,dp=3", RF_PLACEMENT_DISAGGREGATED, 4096, {33 + 1, 33 + 1}},
    {"tiny", "fsdp=4", "tp=1,dp=4", RF_PLACEMENT_COLOCATED, 4096, {21 + 2, 22 + 2}},
    {"llama-3.2-1b", "fsdp=2", "tp=2,dp=2", RF_PLACEMENT_DISAGGREGATED, 64 << 20, {19 + 1, 19 + 1}},
    {"llama-3.2-1b", "fsdp=2", "tp=2,dp=4", RF_PLACEMENT_DISAGGREGATED, 64 << 20, {19 + 2, 19 + 2}},
    {"llama-3.2-1b",
     "fsdp=2",
     "tp=2,dp=4",
     RF_PLACEMENT_DISAGGREGATED,
     1 << 20,
     {1179 + 2, 1180 + 2}},
};

static void test_real(const real_case *c, rf_pace pace, int *buckets) {
  rf_model m;
  ASSERT_OK(rf_model_load(c->model, &m));
  rf_trainer_layout t;
  rf_rollout_layout ro;
  ASSERT_OK(rf_trainer_layout_parse(c->trainer, &t));
  ASSERT_OK(rf_rollout_layout_parse(c->rollout, &ro));
  t.style = RF_STYLE_FSDP2;
  t.order = RF_ORDER_HF;
  rf_layout lay;
  ASSERT_OK(rf_layout_init(&lay, &m, &t, &ro, c->placement));
  rf_plan plan;
  ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_FANOUT, NULL));
  ASSERT_GT(plan.forward_depth, 0);
  rf_schedule transfer, forward[8];
  ASSERT_OK(rf_schedule_build(&plan, RF_STAGE_TRANSFER, c->bucket_size, pace, &transfer));
  for (int s = 0; s < plan.forward_depth; s++)
    ASSERT_OK(rf_schedule_build_forward(&plan, s, c->bucket_size, pace, &forward[s]));
  rf_rounds r[2];
  for (int k = 0; k < 2; k++)
    ASSERT_OK(rf_rounds_build(&plan, &transfer, forward, plan.forward_depth, &r[k]));
  *buckets += check_rounds(&plan, &transfer, forward, &r[0]);
  check_layout(&transfer, &r[0]);
  printf("%s %s -> %s, buckets of %lld paced by %s: %d transfer buckets, %d rounds\n", c->model,
         c->trainer, c->rollout, (long long)c->bucket_size,
         pace == RF_PACE_ROWS ? "rows" : "pieces", transfer.bucket_count, r[0].round_count);
  ASSERT_EQ(r[0].round_count, c->rounds[pace]);
  /* A pure function: two builds agree in every array. */
  ASSERT_EQ(r[1].round_count, r[0].round_count);
  int items = r[0].first[r[0].round_count];
  ASSERT_EQ(memcmp(r[0].first, r[1].first, (size_t)(r[0].round_count + 1) * sizeof(int)), 0);
  ASSERT_EQ(memcmp(r[0].items, r[1].items, (size_t)items * sizeof *r[0].items), 0);
  ASSERT_EQ(memcmp(r[0].forward_round, r[1].forward_round,
                   (size_t)r[0].step_first[r[0].steps] * sizeof(int)),
            0);
  for (int k = 0; k < 2; k++)
    rf_rounds_free(&r[k]);
  for (int s = 0; s < plan.forward_depth; s++)
    rf_schedule_free(&forward[s]);
  rf_schedule_free(&transfer);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

int main(void) {
  test_by_hand();
  int buckets = 0;
  for (size_t i = 0; i < RF_ARRAY_LEN(cases); i++)
    for (int pace = RF_PACE_PIECES; pace <= RF_PACE_ROWS; pace++)
      test_real(&cases[i], (rf_pace)pace, &buckets);
  printf("forward buckets checked: %d\n", buckets);
  ASSERT_EQ(buckets, 2150);
  /* every forward bucket of every case above, once a pace */ /* every forward bucket of every
                                                                 case above, once */
  return 0;
}
