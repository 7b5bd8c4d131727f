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
 * ready and done notes. */
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

/* Chunks per window: enough that a window holds many buckets of a small job (3 MiB), little
 * enough that the C library hands each window the memory the one before freed rather than
 * fresh pages to fault in, which 48 MiB windows had it do: a quarter of the walk's time on a
 * virtual machine. */
#define WINDOW_CHUNKS (1 << 16)

typedef struct {
  const rf_plan *plan;
  rf_mode mode;
  int mapping;  /* rf_sim_options.mapping */
  rf_wire wire; /* rf_sim_options.wire */
  int world;
  int step; /* the forward step being walked */
  sim_unit_fn fn;
  void *ctx;
  /* the open unit */
  sim_pair *pairs;
  int npairs, pairs_cap;
  /* The open unit's pairs by (src, dst), open addressing: slot h holds pair slot_pair[h] where
   * slot_unit[h] is the unit's number. A chunk joins its pair as it comes, so that close_unit
   * sorts the distinct pairs, not every chunk (a star's bucket sends each pair many tensors). */
  int *slot_pair;
  unsigned *slot_unit;
  size_t slots; /* a power of two, at least twice npairs; 0 before the first pair */
  unsigned unit;
  int64_t *pack_bytes, *unpack_bytes; /* [world] */
  int64_t *pack_quant, *unpack_quant; /* [world]: trainer-dtype bytes quantized (sim_copy) */
  int *pack_copies, *unpack_copies;   /* [world]: copies launched one by one */
  char *pack_batch, *unpack_batch;    /* [world]: copies the engine gathers into one batch */
  char *quant_batch; /* [world]: landed pieces quantized, a launch of their own a unit */
  int *touched;      /* ranks with copies in the unit, each once */
  char *is_touched;
  int ntouched;
  sim_copy *pack, *unpack; /* [world] */
  /* the open bucket's staging per rank, and the most any bucket needed */
  int64_t *send_staged, *recv_staged, *send_need, *recv_need;
  int *staged_ranks;
  char *is_staged;
  int nstaged;
  /* Mapping transports: the stage's rank pairs that share pieces, peer[src * world + dst] (a
   * mapping job runs on one node, so these stay small), for the notes; and the buckets fused
   * has walked into its one unit of the stage. */
  char *peer;
  int open_buckets;
  /* In rounds: every unit is timed as the transfer stage's (the engine times the forward
   * buckets with it), with its round and whether it is a forward bucket; unit_buckets counts
   * the buckets a grouped unit holds. */
  int in_rounds, round, forward, unit_buckets;
  int64_t *rule_staging; /* [world]: in rounds, the staging the engine's rule allocates */
} walker;

static void touch(walker *w, int rank) {
  if (!w->is_touched[rank]) {
    w->is_touched[rank] = 1;
    w->touched[w->ntouched++] = rank;
  }
}

static void stage_bytes(walker *w, int rank, int64_t *per_rank, int64_t bytes) {
  if (!w->is_staged[rank]) {
    w->is_staged[rank] = 1;
    w->staged_ranks[w->nstaged++] = rank;
  }
  per_rank[rank] += bytes;
}

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

static rf_status add_pair(walker *w, int src, int dst, int64_t bytes, int messages) {
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
  for (int i = 0; w->mode == RF_MODE_FUSED && !w->mapping && i < n; i++)
    w->pairs[i].messages = w->pairs[i].src != w->pairs[i].dst;
  int npack = 0, nunpack = 0;
  for (int t = 0; t < w->ntouched; t++) {
    int r = w->touched[t];
    if (w->pack_bytes[r] || w->pack_quant[r])
      w->pack[npack++] =
          (sim_copy){r, w->pack_bytes[r], w->pack_copies[r] + w->pack_batch[r], w->pack_quant[r]};
    if (w->unpack_bytes[r] || w->unpack_quant[r])
      w->unpack[nunpack++] = (sim_copy){
          r, w->unpack_bytes[r], w->unpack_copies[r] + w->unpack_batch[r] + w->quant_batch[r],
          w->unpack_quant[r]};
    w->pack_bytes[r] = w->unpack_bytes[r] = 0;
    w->pack_quant[r] = w->unpack_quant[r] = 0;
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

/* The trainer-dtype bytes of chunk k that the plan has quantized (rf_piece_quant): what the
 * quantizer reads. Forwarded and carried pieces move fp8 already and quantize nothing. */
static int64_t quantized_bytes(const rf_plan *plan, const rf_chunk *k, rf_quant want) {
  const rf_piece *p = &plan->pieces[k->piece];
  if (rf_piece_quant(plan, p) != want)
    return 0;
  return rf_box_numel(&k->box) * rf_tensor_esize(&plan->layout->model->tensors[p->tensor]);
}

/* Where the quantizer runs, as the engine runs it (engine_fp8.c, engine_modes.c):
 *
 * - A destination-quantized piece lands in the trainer's dtype and its destination quantizes
 *   it from there once the round has brought its blocks (engine_fp8_round_done, timed as
 *   unpack): its bytes on the destination's unpack, in a launch of their own, whatever path the
 *   landing took. The engine quantizes a block when its last piece lands; the walk charges
 *   each piece in the unit that brings it, the same bytes in all.
 * - A source-quantized piece sent as a message is quantized into staging: the quantizer is its
 *   pack, reading the trainer's bytes and writing the fp8 bytes and scales, so its pack is the
 *   quantize, in place of a copy of its wire bytes.
 * - A local source-quantized piece is quantized straight into the rollout tensor
 *   (engine_fp8_local): the same, on the rank's pack, and nothing else is copied. The engine
 *   does it as it posts, outside its pack timer, so its measured pack has it in transfer.
 * - Over a mapping transport the destination pulls a source-quantized piece through the
 *   quantizer from its source's memory: the walk keeps the copy across (the link carries it)
 *   and adds the quantize on the destination's unpack, a little more than the one pass it is. */
static void quantize_on_landing(walker *w, const rf_chunk *k, int run, int dst) {
  int64_t q = 0;
  for (int j = 0; j < run; j++)
    q += quantized_bytes(w->plan, &k[j], RF_QUANT_DESTINATION) +
         (w->mapping ? quantized_bytes(w->plan, &k[j], RF_QUANT_SOURCE) : 0);
  if (q == 0)
    return;
  touch(w, dst);
  w->unpack_quant[dst] += q;
  w->quant_batch[dst] = 1;
}

/* One message (or local copy) of `run` chunks from chunks[i], as post_chunk and post_block
 * make it. */
static rf_status walk_run(walker *w, const rf_schedule *s, int i, int run) {
  const rf_plan *plan = w->plan;
  const rf_chunk *k = &s->chunks[i];
  const rf_piece *p = &plan->pieces[k->piece];
  int src = rf_piece_src_world(plan, p), dst = rf_piece_dst_world(plan, p);
  int64_t bytes = 0;
  for (int j = 0; j < run; j++)
    bytes += k[j].bytes;
  quantize_on_landing(w, k, run, dst);
  /* A source-quantized chunk is one chunk a run (rf_engine_joined_chunks). */
  int64_t source_q = w->mapping ? 0 : quantized_bytes(plan, k, RF_QUANT_SOURCE);
  if (src == dst && source_q > 0) {
    touch(w, src);
    w->pack_quant[src] += source_q;
    w->pack_copies[src]++;
    return RF_OK;
  }
  if (src == dst)
    return add_pair(w, src, dst, bytes, 0);
  if (w->mapping) {
    w->peer[(size_t)src * w->world + dst] = 1;
    return add_pair(w, src, dst, bytes, 0);
  }
  if (run > 1) /* a joined block travels in place on both ends */
    return add_pair(w, src, dst, bytes, 1);
  /* A gathered chunk is copied like a packed one (by MPI, through its fragments), with no
   * staging. Staged copies the engine batches (rf_engine_pack_batched, _unpack_batched) are
   * one launch a unit; the rest, and the transport's gathers, are copies one by one. */
  rf_chunk_path out = rf_engine_send_path(plan, w->mode, w->wire, k);
  rf_chunk_path in = rf_engine_recv_path(plan, w->mode, w->wire, k);
  if (out != RF_CHUNK_DIRECT) {
    touch(w, src);
    w->pack_bytes[src] += source_q > 0 ? 0 : bytes;
    w->pack_quant[src] += source_q;
    if (out == RF_CHUNK_STAGED && rf_engine_pack_batched(plan, w->mode, p))
      w->pack_batch[src] = 1;
    else
      w->pack_copies[src]++;
    if (out == RF_CHUNK_STAGED)
      stage_bytes(w, src, w->send_staged, bytes);
  }
  if (in != RF_CHUNK_DIRECT) {
    touch(w, dst);
    w->unpack_bytes[dst] += bytes;
    if (in == RF_CHUNK_STAGED && rf_engine_unpack_batched(plan, p))
      w->unpack_batch[dst] = 1;
    else
      w->unpack_copies[dst]++;
    if (in == RF_CHUNK_STAGED)
      stage_bytes(w, dst, w->recv_staged, bytes);
  }
  return add_pair(w, src, dst, bytes, 1);
}

/* Bucket b of s; its unit closes with it unless `keep_open` (grouped's round goes on). */
static rf_status walk_bucket(walker *w, const rf_schedule *s, int b, int keep_open) {
  const rf_bucket *bk = &s->buckets[b];
  int end = bk->first + bk->count, bucket = s->first_bucket + b;
  for (int i = bk->first; i < end; i++) {
    /* A mapping transport copies chunk by chunk (joined runs are messages). */
    int run =
        w->mapping ? 1 : rf_engine_joined_chunks(w->plan, w->mode, w->wire, s->chunks, i, end);
    RF_TRY(walk_run(w, s, i, run));
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

rf_status sim_walk(const rf_plan *plan, const rf_sim_options *o, int64_t *staging, sim_unit_fn fn,
                   void *ctx) {
  int world = plan->layout->world_size;
  size_t n = (size_t)world + 1;
  walker w = {.plan = plan,
              .mode = o->mode,
              .mapping = o->mapping,
              .wire = o->wire,
              .world = world,
              .fn = fn,
              .ctx = ctx,
              .unit = 1};
  int64_t *i64 = rf_calloc(8 * n, sizeof *i64, "the walk's counters");
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
  /* alloc_staging: the largest bucket of either stage once per direction, twice for fused. */
  int slots = o->mode == RF_MODE_FUSED ? 2 : 1;
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
