/* The rounds (plan.h, rf_rounds): the buckets of the transfer stage and of fanout's forward
 * steps, posted round by round so that a replica forwards the first buckets it received while
 * the later ones are still on their way. Round k posts its buckets in the rounds' order (every
 * rank the same), then completes them; a forward bucket in round k sends only what rounds
 * before k delivered, so no wait of round k waits for a later round. Star's reshape runs the
 * same way, a bucket per round. The mapped path runs fanout's rounds in engine_mapped.c.
 *
 * Staging stays what it was when the stages ran one after another (engine_staging.c), however
 * many buckets a round holds. unfused and grouped post a round's buckets and wait once
 * (unfused also after every tensor, as it always does; grouped also where the next bucket's
 * staging would not fit). fused runs the round's buckets as one sequence through its two
 * staging slots, as it ran a stage's buckets before: bucket i is packed and posted while
 * bucket i - 1 is in flight, then i - 1 completes and is unpacked. Only a forward bucket that
 * opens a round waits for the bucket before it first, since it reads what that round
 * delivered. */
#include <stdlib.h>

#include "engine_internal.h"

static const rf_schedule *item_schedule(const rf_engine *e, int stage, const rf_round_item *it) {
  return it->step < 0 ? engine_stage(e, stage) : &e->forward[it->step];
}

/* The wait's name in a timeout error: a round of one bucket is just a bucket. */
static const char *wait_name(const rf_rounds *rounds, int round, const char *one,
                             const char *more) {
  return rounds->first[round + 1] - rounds->first[round] > 1 ? more : one;
}

/* Once a transfer round has completed: fp8 blocks whose last destination-quantized piece it
 * brought are quantized (before a later round forwards them), and --inject corrupt flips its
 * byte if this round delivered it. */
static rf_status round_done(rf_engine *e, int stage, int round) {
  if (stage == 1)
    RF_TRY(engine_fp8_round_done(e, round));
  if (!e->corrupt_armed || stage != 1 || round != engine_corrupt_round(e))
    return RF_OK;
  e->corrupt_armed = 0;
  return engine_apply_corrupt(e);
}

static rf_status run_per_chunk(engine_round *r, const rf_rounds *rounds, int stage) {
  rf_engine *e = r->e;
  rf_transport *tp = e->transport;
  int grouped = e->mode == RF_MODE_GROUPED;
  for (int k = 0; k < rounds->round_count; k++) {
    if (grouped)
      RF_TRY(tp->ops->group_start(tp));
    for (int i = rounds->first[k]; i < rounds->first[k + 1]; i++) {
      if (grouped && stage == 1 && e->group_break[i]) { /* the staging is full */
        RF_TRY(tp->ops->group_end(tp));
        RF_TRY(engine_complete(r, "a round's groups of messages"));
        RF_TRY(tp->ops->group_start(tp));
      }
      RF_TRY(engine_post_chunks(r, item_schedule(e, stage, &rounds->items[i]),
                                rounds->items[i].bucket));
    }
    if (grouped) {
      RF_TRY(tp->ops->group_end(tp));
      RF_TRY(engine_complete(
          r, wait_name(rounds, k, "a bucket's group of messages", "a round's groups of messages")));
    }
    RF_TRY(round_done(e, stage, k));
  }
  return RF_OK;
}

/* fused: item i of the rounds in staging slot i % 2. */
static rf_status post_fused(engine_round *r, const rf_rounds *rounds, int stage, int i) {
  rf_engine *e = r->e;
  const rf_round_item *it = &rounds->items[i];
  return engine_post_fused(r, item_schedule(e, stage, it), it->bucket, e->staging[0][i % 2],
                           e->staging[1][i % 2]);
}

/* Waits for item i (everything posted up to done_at) and unpacks it; the rounds it finishes
 * are done (*done counts them). */
static rf_status complete_fused(engine_round *r, const rf_rounds *rounds, int stage, int i,
                                long done_at, int *done) {
  rf_engine *e = r->e;
  const rf_round_item *it = &rounds->items[i];
  int last = i + 1 == rounds->first[rounds->round_count];
  RF_TRY(e->transport->ops->wait(e->transport, done_at,
                                 last ? "the last fused bucket" : "a fused bucket"));
  RF_TRY(engine_unpack_fused(r, item_schedule(e, stage, it), it->bucket, e->staging[1][i % 2]));
  RF_TRY(engine_wire_ready(e));
  while (*done < rounds->round_count && (last || rounds->first[*done + 1] <= i + 1))
    RF_TRY(round_done(e, stage, (*done)++));
  return RF_OK;
}

static rf_status run_fused(engine_round *r, const rf_rounds *rounds, int stage) {
  int open = -1, open_round = -1; /* the item in flight (-1: none) and its round */
  long done_at = 0;               /* its ticket bound */
  int done = 0;
  for (int k = 0; k < rounds->round_count; k++)
    for (int i = rounds->first[k]; i < rounds->first[k + 1]; i++) {
      /* A forward bucket reads what the rounds before its own delivered: if the item in
       * flight belongs to one of them, it must land first. */
      if (open >= 0 && open_round < k && rounds->items[i].step >= 0) {
        RF_TRY(complete_fused(r, rounds, stage, open, done_at, &done));
        open = -1;
      }
      RF_TRY(post_fused(r, rounds, stage, i));
      /* Item i - 1 completes while i is in flight; then slot (i + 1) % 2 is free again. */
      if (open >= 0)
        RF_TRY(complete_fused(r, rounds, stage, open, done_at, &done));
      open = i, open_round = k, done_at = r->ticket + 1;
    }
  if (open >= 0)
    RF_TRY(complete_fused(r, rounds, stage, open, done_at, &done));
  return RF_OK;
}

rf_status engine_run_rounds(rf_engine *e, const rf_rounds *rounds, int stage, double *times) {
  engine_round r = {.e = e, .ticket = -1};
  double start = rf_now();
  rf_status st =
      e->mode == RF_MODE_FUSED ? run_fused(&r, rounds, stage) : run_per_chunk(&r, rounds, stage);
  if (st == RF_OK)
    st = engine_flush_local(&r);
  if (st == RF_OK)
    st = rf_mem_sync(e->memory); /* the stage ends when its last copy has landed */
  engine_round_free(&r);
  /* On a GPU the copies' own time, read from events once the stage has synchronised; fused
   * packs overlap the flight of the bucket before, so the transfer phase is what the wall
   * clock leaves over. */
  double wall = rf_now() - start;
  double packing = rf_mem_timer_take(&e->pack_timer);
  double unpacking = rf_mem_timer_take(&e->unpack_timer);
  times[RF_PHASE_PACK] += packing;
  times[RF_PHASE_UNPACK] += unpacking;
  times[RF_PHASE_TRANSFER] += RF_MAX(0.0, wall - packing - unpacking);
  return st;
}
