/* Cutting a plan stage into buckets that bound every rank's bytes in flight. The buckets fill
 * pair by pair (schedule_pairs.c says why): the rank pair furthest behind places as much of
 * its next piece as its two ranks have room for in the open bucket, and its pace allows (below),
 * and the bucket closes once every pair is out of room or at its pace. A closed bucket's chunks
 * are put back in plan order. The whole schedule (rf_schedule_build) is the cursor below run to
 * the end in one step, so a caller that reads the buckets a window at a time gets exactly the
 * same chunks.
 *
 * Room alone lets the pairs of some ranks fill the first buckets and those of others the
 * later ones, so a bucket may load one set of links and leave the bottleneck idle. Each pair is
 * therefore paced (rf_pace) to 1/B of its remote bytes a bucket, its quota, B the buckets the
 * busiest rank needs: by the end of bucket k it places up to its target, k + 1 quotas. The
 * target is cumulative, not a quota per bucket, because a pair's bytes come in whole rows: held
 * to its quota in each bucket alone, a pair whose quota is 1.7 rows places one row a bucket
 * and needs 1.7 times the buckets of the busiest rank (Llama-3.2-1B to tp=2,dp=4 in 1 MiB
 * buckets: 2,048, not 1,179); against its target, what it falls short of in one bucket it makes
 * up in the next. With RF_PACE_ROWS the target bounds a pair as the room does, cutting a piece
 * by rows; with RF_PACE_PIECES the pair only stops starting pieces there. Either way a pair
 * places at least one row (or piece) in any bucket it has room in, so every pair progresses,
 * and that last row (or piece) may take it past its target. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"

typedef struct {
  rf_schedule *s;
  int chunk_cap, bucket_cap;
  int64_t *sent, *received; /* this bucket's remote bytes per world rank */
  int world;
  int base; /* the schedule's number of s->buckets[0]: buckets already handed out */
  rf_pace pace;
  int64_t paced_buckets; /* B (sched_pair.quota); 0: unpaced */
  int64_t turn_bytes;    /* remote bytes placed by the current turn */
} builder;

static int by_plan_order(const void *a, const void *b) {
  const rf_chunk *x = a, *y = b;
  if (x->piece != y->piece)
    return x->piece < y->piece ? -1 : 1;
  if (x->box.lo[0] != y->box.lo[0])
    return x->box.lo[0] < y->box.lo[0] ? -1 : 1;
  return x->box.lo[1] < y->box.lo[1] ? -1 : x->box.lo[1] > y->box.lo[1];
}

/* Puts the open bucket's chunks in plan order: the order the engine posts them in. */
static void close_bucket(builder *b) {
  rf_schedule *s = b->s;
  /* Fewer than two chunks need no order (and an empty schedule has no array to give qsort). */
  if (s->bucket_count && s->buckets[s->bucket_count - 1].count > 1)
    qsort(s->chunks + s->buckets[s->bucket_count - 1].first,
          (size_t)s->buckets[s->bucket_count - 1].count, sizeof *s->chunks, by_plan_order);
}

static rf_status open_bucket(builder *b) {
  rf_schedule *s = b->s;
  if (s->bucket_count && s->buckets[s->bucket_count - 1].count == 0)
    return RF_OK; /* the current bucket is still empty */
  close_bucket(b);
  RF_TRY(rf_grow((void **)&s->buckets, s->bucket_count, &b->bucket_cap, sizeof *s->buckets,
                 "buckets"));
  s->buckets[s->bucket_count].first = s->chunk_count;
  s->buckets[s->bucket_count++].count = 0;
  memset(b->sent, 0, (size_t)b->world * sizeof *b->sent);
  memset(b->received, 0, (size_t)b->world * sizeof *b->received);
  return RF_OK;
}

static rf_status add_chunk(builder *b, int piece, const rf_box *box, int64_t bytes, int src,
                           int dst) {
  rf_schedule *s = b->s;
  RF_TRY(rf_grow((void **)&s->chunks, s->chunk_count, &b->chunk_cap, sizeof *s->chunks, "chunks"));
  rf_chunk *c = &s->chunks[s->chunk_count++];
  c->piece = piece;
  c->bucket = b->base + s->bucket_count - 1;
  c->box = *box;
  c->bytes = bytes;
  s->buckets[s->bucket_count - 1].count++;
  if (src != dst) {
    b->sent[src] += bytes;
    b->received[dst] += bytes;
    b->turn_bytes += bytes;
  }
  return RF_OK;
}

/* What one pair places of its current piece `index` into the open bucket: all of *rest, or
 * the rows of it that fit its room and `share` (what its pace lets it place still, INT64_MAX
 * when unpaced), then *blocked: the pair is done with this bucket, or nothing (*blocked). The
 * share never holds it below one row, so that a pair ahead of its pace, or whose share is less
 * than a row, still moves. A row larger than a whole bucket goes a bucket at a time along its
 * columns, opening buckets as it goes. *rest keeps what is left. */
static rf_status place_rows(builder *b, const rf_plan *plan, int index, rf_box *rest, int src,
                            int dst, int64_t share, int *blocked) {
  const rf_piece *p = &plan->pieces[index];
  int64_t esize = rf_tensor_esize(&plan->layout->model->tensors[p->tensor]);
  int64_t limit = b->s->bucket_size;
  int64_t bytes = rf_box_numel(rest) * esize;
  int64_t room = limit - RF_MAX(b->sent[src], b->received[dst]);
  int64_t row_bytes = (rest->hi[1] - rest->lo[1]) * esize;
  int64_t fit = RF_MIN(room, RF_MAX(share, row_bytes));
  if (limit == 0 || src == dst || bytes <= fit) {
    RF_TRY(add_chunk(b, index, rest, bytes, src, dst));
    rest->hi[0] = rest->lo[0]; /* all placed */
    return RF_OK;
  }
  *blocked = 1;
  if (fit >= row_bytes) {
    rf_box part = *rest;
    part.hi[0] = rest->lo[0] + fit / row_bytes; /* as many whole rows as fit */
    rest->lo[0] = part.hi[0];
    return add_chunk(b, index, &part, rf_box_numel(&part) * esize, src, dst);
  }
  if (room < limit)
    return RF_OK; /* not even one row fits: the next bucket */
  /* One row is larger than a whole bucket: its columns go a bucket at a time. */
  *blocked = 0;
  rf_box row = *rest;
  row.hi[0] = row.lo[0] + 1;
  while (row.lo[1] < row.hi[1]) {
    rf_box c = row;
    c.hi[1] = RF_MIN(row.hi[1], row.lo[1] + limit / esize);
    RF_TRY(add_chunk(b, index, &c, rf_box_numel(&c) * esize, src, dst));
    RF_TRY(open_bucket(b));
    row.lo[1] = c.hi[1];
  }
  rest->lo[0]++;
  return RF_OK;
}

/* The same for a piece that carries fp8 (rf_piece_wire_bytes): it is cut only a block's rows
 * or columns (128 for fp8; 1 row and 32 columns for mxfp8) from its own edges, so that each
 * chunk carries whole blocks with their scales (a carried piece that starts inside a block
 * carries the scale of each block it touches): as many bands of block rows as fit, and a band
 * larger than a whole bucket a run of blocks at a time. A block (16,388 bytes for fp8, 33 for
 * mxfp8) fits any bucket an fp8 job accepts (rf_format_min_bucket). */
static rf_status place_bands(builder *b, const rf_plan *plan, int index, rf_box *rest, int src,
                             int dst, int64_t share, int *blocked) {
  const rf_piece *p = &plan->pieces[index];
  const rf_format *f = rf_layout_format(plan->layout);
  int64_t limit = b->s->bucket_size;
  int64_t bytes = rf_piece_wire_bytes(plan, p, rest);
  int64_t room = limit - RF_MAX(b->sent[src], b->received[dst]);
  rf_box part = *rest; /* one band of block rows */
  part.hi[0] = RF_MIN(rest->hi[0], rest->lo[0] + f->block_rows);
  int64_t band = rf_piece_wire_bytes(plan, p, &part);
  int64_t fit = RF_MIN(room, RF_MAX(share, band)); /* at least a band, as place_rows a row */
  if (limit == 0 || src == dst || bytes <= fit) {
    RF_TRY(add_chunk(b, index, rest, bytes, src, dst));
    rest->hi[0] = rest->lo[0];
    return RF_OK;
  }
  *blocked = 1;
  if (fit >= band) {
    part.hi[0] = RF_MIN(rest->hi[0], rest->lo[0] + fit / band * f->block_rows);
    rest->lo[0] = part.hi[0];
    return add_chunk(b, index, &part, rf_piece_wire_bytes(plan, p, &part), src, dst);
  }
  if (room < limit)
    return RF_OK;
  *blocked = 0;
  rf_box block = part;
  block.hi[1] = RF_MIN(part.hi[1], part.lo[1] + f->block_cols);
  int64_t per = RF_MAX(1, limit / rf_piece_wire_bytes(plan, p, &block));
  while (part.lo[1] < part.hi[1]) {
    rf_box c = part;
    c.hi[1] = RF_MIN(part.hi[1], part.lo[1] + per * f->block_cols);
    RF_TRY(add_chunk(b, index, &c, rf_piece_wire_bytes(plan, p, &c), src, dst));
    RF_TRY(open_bucket(b));
    part.lo[1] = c.hi[1];
  }
  rest->lo[0] = part.hi[0];
  return RF_OK;
}

/* What a pair may have placed, in remote wire bytes, by the end of the stage's bucket
 * `bucket`: bucket + 1 quotas (sched_pair); everything from bucket B - 1 on, where B quotas are
 * its total at least, and for a pair that is not paced. */
static int64_t pace_target(const builder *b, const sched_pair *pair, int bucket) {
  if (pair->quota == INT64_MAX || bucket + 1 >= b->paced_buckets)
    return INT64_MAX;
  return (int64_t)(bucket + 1) * pair->quota; /* below total + B: no overflow */
}

/* One turn of the pair furthest behind: it places what it can of its next piece. When every
 * pair is blocked the bucket is full: the next one opens and they all try again. *more is 0
 * once the stage is done. A pair that has reached its target (pace_target) is blocked until
 * the next bucket opens, whichever its pace; only RF_PACE_ROWS also cuts a piece at it. */
static rf_status take_turn(builder *b, const rf_plan *plan, sched_pairs *q, int *more) {
  sched_pair *pair = sched_pairs_top(q);
  *more = 1;
  if (!pair) {
    if (q->blocked_count == 0) {
      *more = 0;
      return RF_OK;
    }
    RF_TRY(open_bucket(b));
    sched_pairs_unblock(q);
    return RF_OK;
  }
  int index = q->order[pair->next];
  const rf_piece *p = &plan->pieces[index];
  if (rf_box_is_empty(&pair->rest))
    pair->rest = p->box;
  /* Buckets opened so far (handed out or not): a change tells the blocked pairs to try again. */
  int blocked = 0, opened = b->base + b->s->bucket_count;
  /* Paced by rows, what the pair may still place in this bucket; it may be 0 or less on the
   * pair's first turn in a bucket, if it ran ahead in the last (place_rows still moves it). */
  int64_t target = pace_target(b, pair, opened - 1);
  int64_t share = b->pace == RF_PACE_ROWS && target != INT64_MAX ? target - pair->paced : INT64_MAX;
  int64_t before = rf_box_numel(&pair->rest);
  b->turn_bytes = 0;
  if (!rf_box_is_empty(&pair->rest))
    RF_TRY((rf_piece_carries_fp8(plan, p) ? place_bands : place_rows)(
        b, plan, index, &pair->rest, pair->src, pair->dst, share, &blocked));
  pair->paced += b->turn_bytes;
  /* Against the bucket now open: a row cut along its columns opened buckets as it went. */
  if (pair->paced >= pace_target(b, pair, b->base + b->s->bucket_count - 1))
    blocked = 1;
  /* Shares count the piece's own bytes (not fp8's wire bytes), so they stay exact. */
  int64_t numel = rf_box_numel(&p->box);
  pair->placed += numel ? (before - rf_box_numel(&pair->rest)) * (p->bytes / numel) : 0;
  if (rf_box_is_empty(&pair->rest))
    pair->next++;
  sched_pairs_update(q, blocked);
  if (b->base + b->s->bucket_count != opened)
    sched_pairs_unblock(q);
  return RF_OK;
}

struct rf_schedule_cursor {
  const rf_plan *plan;
  rf_stage stage;
  builder b;
  rf_schedule s; /* what has been cut and not handed out: the open bucket, at least */
  sched_pairs q; /* the stage's pieces, pair by pair, and the pairs' turns */
  int more;      /* whether pieces are left to place */
};

void rf_schedule_cursor_close(rf_schedule_cursor *c) {
  if (!c)
    return;
  free(c->b.sent);
  free(c->b.received);
  sched_pairs_close(&c->q);
  rf_schedule_free(&c->s);
  free(c);
}

/* Each remote pair's quota (sched_pair): 1/B of its bytes, B the buckets that the busiest
 * rank's remote bytes need, sent or received. In wire bytes, what the buckets bound (fp8's
 * included). Local pairs, and every pair of a stage in one bucket, stay unpaced. The bucket's
 * counters, zero before the first chunk, hold the ranks' totals meanwhile. */
static void set_pace(rf_schedule_cursor *c) {
  const rf_plan *plan = c->plan;
  sched_pairs *q = &c->q;
  int64_t size = c->s.bucket_size, busiest = 0;
  if (size == 0)
    return;
  for (int k = 0; k < q->pair_count; k++) {
    sched_pair *pair = &q->pairs[k];
    if (pair->src == pair->dst)
      continue;
    int64_t wire = 0;
    for (int i = pair->next; i < pair->end; i++) {
      const rf_piece *p = &plan->pieces[q->order[i]];
      wire += rf_piece_wire_bytes(plan, p, &p->box);
    }
    pair->quota = wire; /* its total, until B is known */
    c->b.sent[pair->src] += wire;
    c->b.received[pair->dst] += wire;
  }
  for (int r = 0; r < c->b.world; r++) {
    busiest = RF_MAX(busiest, c->b.sent[r]);
    busiest = RF_MAX(busiest, c->b.received[r]);
  }
  int64_t buckets = RF_MAX(1, busiest / size + (busiest % size != 0));
  c->b.paced_buckets = buckets;
  for (int k = 0; k < q->pair_count; k++) {
    sched_pair *pair = &q->pairs[k];
    if (pair->src != pair->dst)
      pair->quota = RF_MAX(1, pair->quota / buckets + (pair->quota % buckets != 0));
  }
  memset(c->b.sent, 0, (size_t)c->b.world * sizeof *c->b.sent);
  memset(c->b.received, 0, (size_t)c->b.world * sizeof *c->b.received);
}

/* A cursor over the pieces [first, end) of `stage`. */
static rf_status cursor_open(const rf_plan *plan, rf_stage stage, int first, int end,
                             int64_t bucket_size, rf_pace pace, rf_schedule_cursor **out) {
  rf_schedule_cursor *c = rf_calloc(1, sizeof *c, "a schedule cursor");
  *out = NULL;
  if (!c)
    return RF_ERR_NOMEM;
  c->plan = plan;
  c->stage = stage;
  c->more = 1;
  c->s.stage = stage;
  c->s.bucket_size = bucket_size;
  c->s.pace = pace;
  c->b = (builder){&c->s, 0, 0, NULL, NULL, plan->layout->world_size, 0, pace, 0, 0};
  c->b.sent = rf_calloc((size_t)c->b.world, sizeof *c->b.sent, "schedule counters");
  c->b.received = rf_calloc((size_t)c->b.world, sizeof *c->b.received, "schedule counters");
  rf_status st = c->b.sent && c->b.received ? open_bucket(&c->b) : RF_ERR_NOMEM;
  if (st == RF_OK)
    st = sched_pairs_open(&c->q, plan, stage, first, end);
  if (st == RF_OK)
    set_pace(c);
  if (st != RF_OK) {
    rf_schedule_cursor_close(c);
    return st;
  }
  *out = c;
  return RF_OK;
}

rf_status rf_schedule_cursor_open(const rf_plan *plan, rf_stage stage, int64_t bucket_size,
                                  rf_pace pace, rf_schedule_cursor **out) {
  return cursor_open(plan, stage, 0, plan->piece_count, bucket_size, pace, out);
}

/* Hands the closed buckets to `out` and keeps the open one, renumbered from 0 here and from
 * `base` in the chunks' bucket numbers. */
static rf_status hand_out_closed(rf_schedule_cursor *c, rf_schedule *out) {
  rf_schedule *s = &c->s;
  int closed = s->bucket_count - 1, split = s->buckets[closed].first;
  out->chunks = rf_malloc((size_t)split * sizeof *out->chunks + 1, "a window of chunks");
  out->buckets = rf_malloc((size_t)closed * sizeof *out->buckets + 1, "a window of buckets");
  if (!out->chunks || !out->buckets)
    return RF_ERR_NOMEM;
  memcpy(out->chunks, s->chunks, (size_t)split * sizeof *out->chunks);
  memcpy(out->buckets, s->buckets, (size_t)closed * sizeof *out->buckets);
  out->chunk_count = split;
  out->bucket_count = closed;
  memmove(s->chunks, s->chunks + split, (size_t)(s->chunk_count - split) * sizeof *s->chunks);
  s->chunk_count -= split;
  s->buckets[0] = (rf_bucket){0, s->buckets[closed].count};
  s->bucket_count = 1;
  c->b.base += closed;
  return RF_OK;
}

rf_status rf_schedule_cursor_next(rf_schedule_cursor *c, int max_chunks, rf_schedule *out) {
  const rf_plan *plan = c->plan;
  memset(out, 0, sizeof *out);
  out->stage = c->stage;
  out->bucket_size = c->s.bucket_size;
  out->pace = c->s.pace;
  out->first_bucket = c->b.base;
  rf_schedule *s = &c->s;
  /* Never before a bucket has closed, so that every window holds at least one bucket; the
   * pairs' state goes on from where it stopped, so the windows make the same schedule. */
  while (c->more && (s->chunk_count < max_chunks || s->bucket_count < 2))
    RF_TRY(take_turn(&c->b, plan, &c->q, &c->more));
  if (c->more)
    return hand_out_closed(c, out);
  close_bucket(&c->b);
  if (s->bucket_count == 0 || (s->bucket_count == 1 && s->chunk_count == 0 && c->b.base > 0))
    return RF_OK; /* everything has been handed out: an empty window says so */
  /* A trailing empty bucket (opened after the last split) carries nothing. */
  if (s->bucket_count > 1 && s->buckets[s->bucket_count - 1].count == 0)
    s->bucket_count--;
  *out = *s;
  out->first_bucket = c->b.base;
  memset(s, 0, sizeof *s);
  s->stage = out->stage;
  s->bucket_size = out->bucket_size;
  s->pace = out->pace;
  c->b.base += out->bucket_count;
  return RF_OK;
}

/* The pieces [first, end) of `stage` into buckets, in one window. */
static rf_status build(const rf_plan *plan, rf_stage stage, int first, int end, int64_t bucket_size,
                       rf_pace pace, rf_schedule *out) {
  memset(out, 0, sizeof *out);
  rf_schedule_cursor *c = NULL;
  RF_TRY(cursor_open(plan, stage, first, end, bucket_size, pace, &c));
  rf_status st = rf_schedule_cursor_next(c, INT_MAX, out);
  rf_schedule_cursor_close(c);
  if (st != RF_OK)
    rf_schedule_free(out);
  return st;
}

rf_status rf_schedule_build(const rf_plan *plan, rf_stage stage, int64_t bucket_size, rf_pace pace,
                            rf_schedule *out) {
  return build(plan, stage, 0, plan->piece_count, bucket_size, pace, out);
}

rf_status rf_schedule_cursor_open_forward(const rf_plan *plan, int step, int64_t bucket_size,
                                          rf_pace pace, rf_schedule_cursor **out) {
  *out = NULL;
  if (step < 0 || step >= plan->forward_depth)
    return rf_fail(RF_ERR_INTERNAL, "schedule: forward step %d of a plan with %d steps", step,
                   plan->forward_depth);
  return cursor_open(plan, RF_STAGE_FORWARD, plan->forward_first[step],
                     plan->forward_first[step + 1], bucket_size, pace, out);
}

rf_status rf_schedule_build_forward(const rf_plan *plan, int step, int64_t bucket_size,
                                    rf_pace pace, rf_schedule *out) {
  if (step < 0 || step >= plan->forward_depth)
    return rf_fail(RF_ERR_INTERNAL, "schedule: forward step %d of a plan with %d steps", step,
                   plan->forward_depth);
  return build(plan, RF_STAGE_FORWARD, plan->forward_first[step], plan->forward_first[step + 1],
               bucket_size, pace, out);
}

void rf_schedule_free(rf_schedule *s) {
  free(s->chunks);
  free(s->buckets);
  memset(s, 0, sizeof *s);
}
