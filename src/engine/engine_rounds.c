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
 * staging would not fit). fused runs two lanes, each the pipeline of two staging slots it ran
 * a stage's buckets with before (bucket i packed and posted while the lane's bucket before is
 * in flight, then that one completes and is unpacked): the stage's buckets in one, the forward
 * buckets in the other, each waited for on its own tickets (rf_transport_ops.wait_range), so
 * that the transfer's next bucket crosses the network while forward buckets cross NVLink. A
 * forward bucket waits for the buckets of the rounds before its own first, since it sends what
 * they delivered. */
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

/* fused: the buckets posted and not yet waited for, one per lane at most (the stage's
 * buckets in lane 0, fanout's forward buckets in lane 1), each with its tickets and slot, and
 * which items have landed, so that the rounds are done in order. */
typedef struct {
  struct {
    int item; /* -1: none in flight */
    long from, upto;
    int slot;
  } lane[2];
  int posted[2]; /* buckets each lane has posted: slot 2 * lane + posted % 2 is the next */
  char *landed;  /* [item] */
  int done;      /* rounds done */
} fused_state;

/* Waits for lane l's bucket in flight (its own tickets: the other lane's may still move) and
 * unpacks it; the rounds all of whose items have then landed are done, in order. */
static rf_status complete_lane(engine_round *r, const rf_rounds *rounds, int stage, fused_state *f,
                               int l) {
  rf_engine *e = r->e;
  rf_transport *tp = e->transport;
  int i = f->lane[l].item;
  if (i < 0)
    return RF_OK;
  const rf_round_item *it = &rounds->items[i];
  int last = i + 1 == rounds->first[rounds->round_count];
  const char *what = last ? "the last fused bucket" : "a fused bucket";
  RF_TRY(tp->ops->wait_range ? tp->ops->wait_range(tp, f->lane[l].from, f->lane[l].upto, what)
                             : tp->ops->wait(tp, f->lane[l].upto, what));
  RF_TRY(engine_unpack_fused(r, item_schedule(e, stage, it), it->bucket,
                             e->staging[1][f->lane[l].slot]));
  RF_TRY(engine_wire_ready(e));
  f->lane[l].item = -1;
  f->landed[i] = 1;
  while (f->done < rounds->round_count) {
    int k = f->done, all = 1;
    for (int j = rounds->first[k]; j < rounds->first[k + 1] && all; j++)
      all = f->landed[j];
    if (!all)
      break;
    RF_TRY(round_done(e, stage, f->done++));
  }
  return RF_OK;
}

/* Completes the buckets in flight of rounds before `round`, the one posted first first. */
static rf_status complete_before(engine_round *r, const rf_rounds *rounds, int stage,
                                 fused_state *f, int round) {
  for (;;) {
    int oldest = -1;
    for (int l = 0; l < 2; l++) {
      int i = f->lane[l].item;
      if (i >= 0 && i < rounds->first[round] && (oldest < 0 || i < f->lane[oldest].item))
        oldest = l;
    }
    if (oldest < 0)
      return RF_OK;
    RF_TRY(complete_lane(r, rounds, stage, f, oldest));
  }
}

/* Items in the rounds' order. Within a lane it is the pipeline of two slots: bucket i is packed
 * and posted while the lane's bucket before is in flight, then that one completes and is
 * unpacked. A forward bucket first waits for the buckets of the rounds before its own, whose
 * rows it sends; the stage's next bucket does not, so it crosses the network while the forward
 * buckets cross NVLink. */
static rf_status run_fused(engine_round *r, const rf_rounds *rounds, int stage) {
  rf_engine *e = r->e;
  int items = rounds->first[rounds->round_count];
  fused_state f = {.lane = {{-1, 0, 0, 0}, {-1, 0, 0, 0}},
                   .landed = rf_calloc((size_t)items + 1, 1, "fused buckets landed")};
  if (!f.landed)
    return RF_ERR_NOMEM;
  rf_status st = RF_OK;
  for (int k = 0; k < rounds->round_count && st == RF_OK; k++)
    for (int i = rounds->first[k]; i < rounds->first[k + 1] && st == RF_OK; i++) {
      const rf_round_item *it = &rounds->items[i];
      /* the forward slots exist where the plan has forward steps (engine_alloc_staging) */
      int l = it->step >= 0 ? 1 : 0;
      if (l == 1)
        st = complete_before(r, rounds, stage, &f, k);
      int slot = 2 * l + f.posted[l] % 2;
      long from = r->ticket + 1;
      if (st == RF_OK)
        st = engine_post_fused(r, item_schedule(e, stage, it), it->bucket, e->staging[0][slot],
                               e->staging[1][slot]);
      f.posted[l]++;
      if (st == RF_OK)
        st = complete_lane(r, rounds, stage, &f, l);
      f.lane[l].item = i, f.lane[l].from = from, f.lane[l].upto = r->ticket + 1;
      f.lane[l].slot = slot;
    }
  if (st == RF_OK)
    st = complete_before(r, rounds, stage, &f, rounds->round_count);
  free(f.landed);
  return st;
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
