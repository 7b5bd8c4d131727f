/* The rounds (plan.h, rf_rounds): the buckets of the transfer stage and of fanout's forward
 * steps, posted round by round so that a replica forwards the first buckets it received while
 * the later ones are still on their way. Round k posts its buckets in the rounds' order (every
 * rank the same), then completes them; a forward bucket in round k sends only what rounds
 * before k delivered, so no wait of round k waits for a later round. Star's reshape runs the
 * same way, a bucket per round. The mapped path (ipc) still runs a stage after another.
 *
 * unfused and grouped post all of a round's buckets and wait once (unfused also after every
 * tensor, as it always does); fused packs and posts round k's stage bucket while round k - 1
 * is in flight, as it overlapped bucket after bucket before, then completes round k - 1 and
 * only then packs the forward buckets of round k, which read what round k - 1 delivered. */
#include <stdlib.h>

#include "engine_internal.h"

static const rf_schedule *item_schedule(const rf_engine *e, int stage, const rf_round_item *it) {
  return it->step < 0 ? engine_stage(e, stage) : &e->forward[it->step];
}

void engine_round_staging(const rf_engine *e, const rf_rounds *rounds, int stage, int round,
                          int64_t *send, int64_t *recv) {
  *send = *recv = 0;
  for (int i = rounds->first[round]; i < rounds->first[round + 1]; i++) {
    int64_t s, r;
    engine_bucket_staging(e, item_schedule(e, stage, &rounds->items[i]), rounds->items[i].bucket,
                          &s, &r);
    *send += s;
    *recv += r;
  }
}

/* The wait's name in a timeout error: a round of one bucket is just a bucket. */
static const char *wait_name(const rf_rounds *rounds, int round, const char *one,
                             const char *more) {
  return rounds->first[round + 1] - rounds->first[round] > 1 ? more : one;
}

/* --inject corrupt flips its byte once the round that delivers it has completed. */
static rf_status round_done(rf_engine *e, int stage, int round) {
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
    r->send_off = r->recv_off = 0; /* the round's staging starts afresh */
    if (grouped)
      RF_TRY(tp->ops->group_start(tp));
    for (int i = rounds->first[k]; i < rounds->first[k + 1]; i++)
      RF_TRY(engine_post_chunks(r, item_schedule(e, stage, &rounds->items[i]),
                                rounds->items[i].bucket));
    if (grouped) {
      RF_TRY(tp->ops->group_end(tp));
      RF_TRY(engine_complete(
          r, wait_name(rounds, k, "a bucket's group of messages", "a round's groups of messages")));
    }
    RF_TRY(round_done(e, stage, k));
  }
  return RF_OK;
}

/* Posts the items [from, to) of round k, each at its place in staging slot k % 2 (`at` is
 * where item `from` starts, and moves past the items posted). */
static rf_status post_fused(engine_round *r, const rf_rounds *rounds, int stage, int k, int from,
                            int to, int64_t at[2]) {
  rf_engine *e = r->e;
  for (int i = from; i < to; i++) {
    const rf_schedule *s = item_schedule(e, stage, &rounds->items[i]);
    int b = rounds->items[i].bucket;
    int64_t send, recv;
    engine_bucket_staging(e, s, b, &send, &recv);
    RF_TRY(engine_post_fused(r, s, b, (char *)e->staging[0][k % 2] + at[0],
                             (char *)e->staging[1][k % 2] + at[1]));
    at[0] += send, at[1] += recv;
  }
  return RF_OK;
}

/* Waits for round k (everything posted up to done_at) and unpacks its buckets. */
static rf_status complete_fused(engine_round *r, const rf_rounds *rounds, int stage, int k,
                                long done_at, const char *one, const char *more) {
  rf_engine *e = r->e;
  RF_TRY(e->transport->ops->wait(e->transport, done_at, wait_name(rounds, k, one, more)));
  int64_t at = 0;
  for (int i = rounds->first[k]; i < rounds->first[k + 1]; i++) {
    const rf_schedule *s = item_schedule(e, stage, &rounds->items[i]);
    int b = rounds->items[i].bucket;
    int64_t send, recv;
    engine_bucket_staging(e, s, b, &send, &recv);
    RF_TRY(engine_unpack_fused(r, s, b, (char *)e->staging[1][k % 2] + at));
    at += recv;
  }
  RF_TRY(engine_wire_ready(e));
  return round_done(e, stage, k);
}

static rf_status run_fused(engine_round *r, const rf_rounds *rounds, int stage) {
  long done_at = 0; /* the ticket bound of the round before */
  for (int k = 0; k < rounds->round_count; k++) {
    int first = rounds->first[k], end = rounds->first[k + 1];
    int own = first < end && rounds->items[first].step < 0; /* the stage's bucket leads */
    int64_t at[2] = {0, 0};
    RF_TRY(post_fused(r, rounds, stage, k, first, first + own, at));
    if (k > 0)
      RF_TRY(complete_fused(r, rounds, stage, k - 1, done_at, "a fused bucket",
                            "a round of fused buckets"));
    RF_TRY(post_fused(r, rounds, stage, k, first + own, end, at));
    done_at = r->ticket + 1;
  }
  int last = rounds->round_count - 1;
  if (last >= 0)
    RF_TRY(complete_fused(r, rounds, stage, last, done_at, "the last fused bucket",
                          "the last round of fused buckets"));
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
   * packs overlap the flight of the previous round, so the transfer phase is what the wall
   * clock leaves over. */
  double wall = rf_now() - start;
  double packing = rf_mem_timer_take(&e->pack_timer);
  double unpacking = rf_mem_timer_take(&e->unpack_timer);
  times[RF_PHASE_PACK] += packing;
  times[RF_PHASE_UNPACK] += unpacking;
  times[RF_PHASE_TRANSFER] += RF_MAX(0.0, wall - packing - unpacking);
  return st;
}
