/* The walk: a plan's schedule, read a window at a time, turned into the units the engine
 * synchronises on, with the messages, staging copies and local copies the engine's own rules
 * make (engine.h's cost functions): grouped and fused wait once per bucket, unfused after every
 * tensor of a bucket (docs/architecture.md, "Transfer modes").
 *
 * A plan with forward steps (fanout, hierarchical) runs its transfer and forward buckets in
 * rounds (rf_rounds, engine_rounds.c), and the walk follows them: the whole schedules are
 * built, grouped's unit is a round's group of messages (closed early where the engine's
 * staging rule closes it), fused's units come in the rounds' order with their round, so that
 * the clock overlaps a forward bucket with the transfer bucket beside it.
 *
 * Over a mapping transport (engine_mapped.c) every piece is one copy straight across: no
 * messages, packs, unpacks (but a quantized rollout's quantizing) or staging. unfused launches and
 * waits once a tensor, grouped once a bucket, fused once a stage; each stage adds the two rounds of
 * ready and done notes.
 *
 * What each chunk adds to a unit (its pair, packs, unpacks, quantizing and, with a delta, its
 * encoding) is sim_walk_chunk.c's. */
#include <stdlib.h>
#include <string.h>

#include "sim_walker.h"

/* Chunks per window: enough that a window holds many buckets of a small job (3 MiB), little
 * enough that the C library hands each window the memory the one before freed rather than
 * fresh pages to fault in, which 48 MiB windows had it do: a quarter of the walk's time on a
 * virtual machine. */
#define WINDOW_CHUNKS (1 << 16)

static size_t pair_slot(const walker *w, int src, int dst) {
  uint64_t key = (uint64_t)src * (uint64_t)w->world + (uint64_t)dst;
  size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (w->slots - 1);
  while (w->slot_unit[h] == w->unit) {
    const sim_pair *p = &w->pairs[w->slot_pair[h]];
    if (p->src == src && p->dst == dst)
      break;
    h = (h + 1) & (w->slots - 1);
  }
  return h;
}

/* Twice the slots, with the open unit's pairs placed again. */
static rf_status more_slots(walker *w) {
  size_t n = w->slots ? 2 * w->slots : 1024;
  int *pair = rf_malloc(n * sizeof *pair, "unit pair slots");
  unsigned *unit = rf_calloc(n, sizeof *unit, "unit pair slots");
  if (!pair || !unit) {
    free(pair);
    free(unit);
    return RF_ERR_NOMEM;
  }
  free(w->slot_pair);
  free(w->slot_unit);
  w->slot_pair = pair, w->slot_unit = unit, w->slots = n;
  for (int i = 0; i < w->npairs; i++) {
    size_t h = pair_slot(w, w->pairs[i].src, w->pairs[i].dst);
    w->slot_unit[h] = w->unit;
    w->slot_pair[h] = i;
  }
  return RF_OK;
}

rf_status sim_walker_pair(walker *w, int src, int dst, int64_t bytes, int messages) {
  if (2 * ((size_t)w->npairs + 1) > w->slots)
    RF_TRY(more_slots(w));
  size_t h = pair_slot(w, src, dst);
  if (w->slot_unit[h] == w->unit) {
    w->pairs[w->slot_pair[h]].bytes += bytes;
    w->pairs[w->slot_pair[h]].messages += messages;
    return RF_OK;
  }
  RF_TRY(rf_grow((void **)&w->pairs, w->npairs, &w->pairs_cap, sizeof *w->pairs, "unit pairs"));
  w->slot_unit[h] = w->unit;
  w->slot_pair[h] = w->npairs;
  w->pairs[w->npairs++] = (sim_pair){src, dst, bytes, messages};
  return RF_OK;
}

static int by_pair(const void *a, const void *b) {
  const sim_pair *x = a, *y = b;
  if (x->src != y->src)
    return x->src < y->src ? -1 : 1;
  return x->dst < y->dst ? -1 : x->dst > y->dst;
}

/* Merges the unit's entries per rank pair and hands it on. In fused every pair's chunks of a
 * bucket are one message (over a message transport). */
static rf_status close_unit(walker *w, rf_stage stage, int bucket, int buckets) {
  qsort(w->pairs, (size_t)w->npairs, sizeof *w->pairs, by_pair);
  int n = 0;
  for (int i = 0; i < w->npairs; i++) {
    if (n > 0 && w->pairs[n - 1].src == w->pairs[i].src && w->pairs[n - 1].dst == w->pairs[i].dst) {
      w->pairs[n - 1].bytes += w->pairs[i].bytes;
      w->pairs[n - 1].messages += w->pairs[i].messages;
    } else {
      w->pairs[n++] = w->pairs[i];
    }
  }
  for (int i = 0; (w->mode == RF_MODE_FUSED || w->unit_delta) && !w->mapping && i < n; i++)
    w->pairs[i].messages = w->pairs[i].src != w->pairs[i].dst;
  w->unit_delta = 0;
  int npack = 0, nunpack = 0;
  for (int t = 0; t < w->ntouched; t++) {
    int r = w->touched[t];
    if (w->pack_bytes[r] || w->pack_quant[r] || w->pack_encode[r])
      w->pack[npack++] = (sim_copy){r,
                                    w->pack_bytes[r],
                                    w->pack_copies[r] + w->pack_batch[r],
                                    w->pack_quant[r],
                                    w->pack_encode[r],
                                    0};
    if (w->unpack_bytes[r] || w->unpack_quant[r] || w->unpack_apply[r])
      w->unpack[nunpack++] =
          (sim_copy){r,
                     w->unpack_bytes[r],
                     w->unpack_copies[r] + w->unpack_batch[r] + w->quant_batch[r],
                     w->unpack_quant[r],
                     0,
                     w->unpack_apply[r]};
    w->pack_bytes[r] = w->unpack_bytes[r] = 0;
    w->pack_quant[r] = w->unpack_quant[r] = 0;
    w->pack_encode[r] = w->unpack_apply[r] = 0;
    w->pack_copies[r] = w->unpack_copies[r] = 0;
    w->pack_batch[r] = w->unpack_batch[r] = w->quant_batch[r] = 0;
    w->is_touched[r] = 0;
  }
  w->ntouched = 0;
  sim_unit u = {.stage = w->in_rounds ? RF_STAGE_TRANSFER : stage,
                .step = w->step,
                .bucket = bucket,
                .buckets = buckets,
                .round = w->in_rounds ? w->round : bucket,
                .forward = w->forward,
                .npairs = n,
                .npack = npack,
                .nunpack = nunpack,
                .pairs = w->pairs,
                .pack = w->pack,
                .unpack = w->unpack};
  w->npairs = 0;
  if (++w->unit == 0) { /* the numbers wrapped: forget every slot */
    memset(w->slot_unit, 0, w->slots * sizeof *w->slot_unit);
    w->unit = 1;
  }
  return w->fn(w->ctx, &u);
}

/* The end of a stage over a mapping transport: fused's one unit, then the notes. Each rank
 * sends a ready note to (pull) or receives one from (push) every rank it shares pieces with,
 * and a done note the other way once the copies have landed: two notes per peer, for the rank
 * with the most peers, as engine_run_stage_mapped exchanges them. */
static rf_status close_mapped_stage(walker *w, rf_stage stage) {
  if (w->open_buckets) {
    RF_TRY(close_unit(w, stage, 0, w->open_buckets));
    w->open_buckets = 0;
  }
  int most = 0, world = w->world;
  for (int r = 0; r < world; r++) {
    int peers = 0;
    for (int q = 0; q < world; q++)
      peers += w->peer[(size_t)r * world + q] + w->peer[(size_t)q * world + r];
    most = RF_MAX(most, peers);
  }
  memset(w->peer, 0, (size_t)world * world);
  if (most == 0)
    return RF_OK;
  sim_unit u = {.stage = stage, .step = w->step, .notes = 2 * most};
  return w->fn(w->ctx, &u);
}

/* The staging the bucket needed, folded into the most any bucket needed. */
static void close_bucket(walker *w) {
  for (int t = 0; t < w->nstaged; t++) {
    int r = w->staged_ranks[t];
    w->send_need[r] = RF_MAX(w->send_need[r], w->send_staged[r]);
    w->recv_need[r] = RF_MAX(w->recv_need[r], w->recv_staged[r]);
    w->send_staged[r] = w->recv_staged[r] = 0;
    w->is_staged[r] = 0;
  }
  w->nstaged = 0;
}

/* Bucket b of s; its unit closes with it unless `keep_open` (grouped's round goes on). */
static rf_status walk_bucket(walker *w, const rf_schedule *s, int b, int keep_open) {
  const rf_bucket *bk = &s->buckets[b];
  int end = bk->first + bk->count, bucket = s->first_bucket + b;
  for (int i = bk->first; i < end; i++) {
    /* A mapping transport copies chunk by chunk (joined runs are messages). */
    int run =
        w->mapping ? 1 : rf_engine_joined_chunks(w->plan, w->mode, w->wire, s->chunks, i, end);
    RF_TRY(sim_walker_run(w, s, i, run));
    i += run - 1;
    int last = i + 1 == end;
    /* unfused waits after the last chunk of each tensor, as run_per_chunk does */
    if (w->mode == RF_MODE_UNFUSED && !last &&
        w->plan->pieces[s->chunks[i + 1].piece].tensor !=
            w->plan->pieces[s->chunks[i].piece].tensor)
      RF_TRY(close_unit(w, s->stage, bucket, 0));
  }
  close_bucket(w);
  if (w->mapping && w->mode == RF_MODE_FUSED) {
    w->open_buckets++; /* one launch for the whole stage */
    return RF_OK;
  }
  return keep_open ? RF_OK : close_unit(w, s->stage, bucket, 1);
}

/* One stage, or one forward step (step >= 0), a window at a time. */
static rf_status walk_stage(walker *w, rf_stage stage, int step, int64_t bucket_size) {
  rf_schedule_cursor *c = NULL;
  w->step = RF_MAX(step, 0);
  RF_TRY(
      step >= 0
          ? rf_schedule_cursor_open_forward(w->plan, step, bucket_size, rf_engine_pace(w->mode), &c)
          : rf_schedule_cursor_open(w->plan, stage, bucket_size, rf_engine_pace(w->mode), &c));
  rf_status st = RF_OK;
  for (;;) {
    rf_schedule win;
    st = rf_schedule_cursor_next(c, WINDOW_CHUNKS, &win);
    /* A stage without chunks (p2p's reshape) is not run at all, as in rf_engine_iterate. */
    int empty = st != RF_OK || win.bucket_count == 0 || (win.first_bucket == 0 && !win.chunk_count);
    for (int b = 0; !empty && st == RF_OK && b < win.bucket_count; b++)
      st = walk_bucket(w, &win, b, 0);
    rf_schedule_free(&win);
    if (st != RF_OK || empty)
      break;
  }
  rf_schedule_cursor_close(c);
  if (st == RF_OK && w->mapping)
    st = close_mapped_stage(w, stage);
  return st;
}

typedef struct {
  rf_schedule reshape, transfer, *forward;
  rf_rounds rounds;
  char *breaks;
} round_walk;

static void round_walk_free(round_walk *r, int depth) {
  rf_schedule_free(&r->reshape);
  rf_schedule_free(&r->transfer);
  for (int s = 0; r->forward && s < depth; s++)
    rf_schedule_free(&r->forward[s]);
  free(r->forward);
  rf_rounds_free(&r->rounds);
  free(r->breaks);
}

/* The rounds' items in order. grouped closes its unit at a round's end and where the staging
 * rule breaks the round's group; unfused and fused close theirs per bucket as always. */
static rf_status walk_items(walker *w, const round_walk *r) {
  const rf_rounds *rounds = &r->rounds;
  int grouped = w->mode == RF_MODE_GROUPED;
  for (int k = 0; k < rounds->round_count; k++) {
    w->round = k;
    for (int i = rounds->first[k]; i < rounds->first[k + 1]; i++) {
      const rf_round_item *it = &rounds->items[i];
      const rf_schedule *s = it->step < 0 ? &r->transfer : &r->forward[it->step];
      if (grouped && r->breaks && r->breaks[i] && w->unit_buckets) {
        RF_TRY(close_unit(w, RF_STAGE_TRANSFER, k, w->unit_buckets));
        w->unit_buckets = 0;
      }
      w->forward = it->step >= 0;
      RF_TRY(walk_bucket(w, s, it->bucket, grouped));
      w->unit_buckets += grouped;
    }
    if (grouped && w->unit_buckets) {
      RF_TRY(close_unit(w, RF_STAGE_TRANSFER, k, w->unit_buckets));
      w->unit_buckets = 0;
    }
  }
  return RF_OK;
}

/* The transfer and the forward steps in rounds, from their whole schedules. */
static rf_status walk_rounds(walker *w, int64_t bucket_size) {
  const rf_plan *plan = w->plan;
  int depth = plan->forward_depth;
  round_walk r = {.forward = rf_calloc((size_t)depth + 1, sizeof *r.forward, "forward steps")};
  rf_status st = r.forward ? RF_OK : RF_ERR_NOMEM;
  if (st == RF_OK)
    st = rf_schedule_build(plan, RF_STAGE_TRANSFER, bucket_size, rf_engine_pace(w->mode),
                           &r.transfer);
  for (int s = 0; st == RF_OK && s < depth; s++)
    st = rf_schedule_build_forward(plan, s, bucket_size, rf_engine_pace(w->mode), &r.forward[s]);
  if (st == RF_OK)
    st = rf_rounds_build(plan, &r.transfer, r.forward, depth, &r.rounds);
  /* The staging the engine allocates for these rounds, and grouped's early ends of a group. */
  size_t world = (size_t)w->world;
  int64_t *most = rf_calloc(4 * world + 1, sizeof *most, "staging per rank");
  w->rule_staging = rf_calloc(world + 1, sizeof *w->rule_staging, "staging per rank");
  if (st == RF_OK)
    st = most && w->rule_staging ? rf_schedule_build(plan, RF_STAGE_RESHAPE, bucket_size,
                                                     rf_engine_pace(w->mode), &r.reshape)
                                 : RF_ERR_NOMEM;
  if (st == RF_OK)
    st = rf_engine_staging_rule(plan, w->mode, w->wire, &r.reshape, &r.transfer, r.forward,
                                &r.rounds, most, &r.breaks);
  int slots = w->mode == RF_MODE_FUSED ? 2 : 1;
  for (size_t q = 0; st == RF_OK && q < world; q++)
    w->rule_staging[q] =
        slots * (most[q] + most[world + q] + most[2 * world + q] + most[3 * world + q]);
  free(most);
  w->in_rounds = 1;
  w->step = 0;
  if (st == RF_OK)
    st = walk_items(w, &r);
  w->in_rounds = 0;
  round_walk_free(&r, depth);
  return st;
}

rf_status sim_walk(const rf_plan *plan, const rf_sim_options *o, int64_t *staging, sim_tally *tally,
                   sim_unit_fn fn, void *ctx) {
  int world = plan->layout->world_size;
  size_t n = (size_t)world + 1;
  walker w = {.plan = plan,
              .mode = o->mode,
              .mapping = o->mapping,
              .wire = o->wire,
              .delta = o->delta,
              .delta_on = sim_delta_on(&o->delta),
              .tally = tally,
              .world = world,
              .fn = fn,
              .ctx = ctx,
              .unit = 1};
  int64_t *i64 = rf_calloc(10 * n, sizeof *i64, "the walk's counters");
  int *ints = rf_calloc(4 * n, sizeof *ints, "the walk's counters");
  char *flags = rf_calloc(5 * n, 1, "the walk's counters");
  w.pack = rf_calloc(n, sizeof *w.pack, "the walk's copies");
  w.unpack = rf_calloc(n, sizeof *w.unpack, "the walk's copies");
  if (o->mapping)
    w.peer = rf_calloc((size_t)world * (size_t)world + 1, 1, "the walk's peers");
  rf_status st =
      i64 && ints && flags && w.pack && w.unpack && (w.peer || !o->mapping) ? RF_OK : RF_ERR_NOMEM;
  if (st == RF_OK) {
    w.pack_bytes = i64, w.unpack_bytes = i64 + n, w.send_staged = i64 + 2 * n;
    w.recv_staged = i64 + 3 * n, w.send_need = i64 + 4 * n, w.recv_need = i64 + 5 * n;
    w.pack_quant = i64 + 6 * n, w.unpack_quant = i64 + 7 * n;
    w.pack_encode = i64 + 8 * n, w.unpack_apply = i64 + 9 * n;
    w.pack_copies = ints, w.unpack_copies = ints + n, w.touched = ints + 2 * n;
    w.staged_ranks = ints + 3 * n;
    w.is_touched = flags, w.is_staged = flags + n;
    w.pack_batch = flags + 2 * n, w.unpack_batch = flags + 3 * n, w.quant_batch = flags + 4 * n;
    st = walk_stage(&w, RF_STAGE_RESHAPE, -1, o->bucket_size);
  }
  /* Over messages the engine runs the forward steps in rounds with the transfer; over a mapping
   * transport each forward step sends on what the ones before delivered, a stage of its own. */
  if (st == RF_OK && plan->forward_depth > 0 && !o->mapping)
    st = walk_rounds(&w, o->bucket_size);
  else if (st == RF_OK)
    st = walk_stage(&w, RF_STAGE_TRANSFER, -1, o->bucket_size);
  for (int s = 0; st == RF_OK && o->mapping && s < plan->forward_depth; s++)
    st = walk_stage(&w, RF_STAGE_FORWARD, s, o->bucket_size);
  /* alloc_staging: the largest bucket of either stage once per direction, twice for fused.
   * The engine's rule for rounds counts whole chunks; a delta's encoded ones are the walk's
   * own, with room for a transfer and a forward bucket at once. */
  int slots = o->mode == RF_MODE_FUSED ? 2 : 1;
  if (w.delta_on && w.rule_staging) {
    free(w.rule_staging);
    w.rule_staging = NULL;
    slots *= 2;
  }
  for (int r = 0; st == RF_OK && staging && r < world; r++)
    staging[r] = w.rule_staging ? w.rule_staging[r] : slots * (w.send_need[r] + w.recv_need[r]);
  free(w.rule_staging);
  free(i64);
  free(ints);
  free(flags);
  free(w.pack);
  free(w.unpack);
  free(w.peer);
  free(w.pairs);
  free(w.slot_pair);
  free(w.slot_unit);
  return st;
}
