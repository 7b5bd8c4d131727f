/* Cutting a plan stage into buckets that bound every rank's bytes in flight. The whole
 * schedule (rf_schedule_build) is the cursor below run to the end in one step, so a caller that
 * reads the buckets a window at a time gets exactly the same chunks. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

typedef struct {
  rf_schedule *s;
  int chunk_cap, bucket_cap;
  int64_t *sent, *received; /* this bucket's remote bytes per world rank */
  int world;
  int base; /* the schedule's number of s->buckets[0]: buckets already handed out */
} builder;

static rf_status open_bucket(builder *b) {
  rf_schedule *s = b->s;
  if (s->bucket_count && s->buckets[s->bucket_count - 1].count == 0)
    return RF_OK; /* the current bucket is still empty */
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
  }
  return RF_OK;
}

/* A piece that carries fp8 (rf_piece_wire_bytes) is cut only 128 rows or columns from its own
 * edges, so that each chunk carries whole blocks with their scales (a carried piece that
 * starts inside a block carries the scale of each block it touches): as many bands of 128 rows as
 * fit, and a band larger than a whole bucket a run of 128-column blocks at a time. A block (16,388
 * bytes) fits any bucket an fp8 job accepts (RF_FP8_MIN_BUCKET). */
static rf_status place_fp8_piece(builder *b, const rf_plan *plan, int index, int src, int dst) {
  const rf_piece *p = &plan->pieces[index];
  int64_t limit = b->s->bucket_size;
  rf_box rest = p->box;
  while (!rf_box_is_empty(&rest)) {
    int64_t bytes = rf_piece_wire_bytes(plan, p, &rest);
    if (limit == 0 || src == dst)
      return add_chunk(b, index, &rest, bytes, src, dst);
    int64_t room = limit - RF_MAX(b->sent[src], b->received[dst]);
    if (bytes <= room)
      return add_chunk(b, index, &rest, bytes, src, dst);
    rf_box part = rest; /* one band of 128 rows */
    part.hi[0] = RF_MIN(rest.hi[0], rest.lo[0] + RF_FP8_BLOCK_EDGE);
    int64_t band = rf_piece_wire_bytes(plan, p, &part);
    if (room >= band) {
      part.hi[0] = RF_MIN(rest.hi[0], rest.lo[0] + room / band * RF_FP8_BLOCK_EDGE);
      rest.lo[0] = part.hi[0];
      RF_TRY(add_chunk(b, index, &part, rf_piece_wire_bytes(plan, p, &part), src, dst));
    } else if (room < limit) {
      RF_TRY(open_bucket(b)); /* not even one band fits: start afresh */
      continue;
    } else {
      rf_box block = part;
      block.hi[1] = RF_MIN(part.hi[1], part.lo[1] + RF_FP8_BLOCK_EDGE);
      int64_t per = RF_MAX(1, limit / rf_piece_wire_bytes(plan, p, &block));
      while (part.lo[1] < part.hi[1]) {
        rf_box c = part;
        c.hi[1] = RF_MIN(part.hi[1], part.lo[1] + per * RF_FP8_BLOCK_EDGE);
        RF_TRY(add_chunk(b, index, &c, rf_piece_wire_bytes(plan, p, &c), src, dst));
        RF_TRY(open_bucket(b));
        part.lo[1] = c.hi[1];
      }
      rest.lo[0] = part.hi[0];
      continue;
    }
    RF_TRY(open_bucket(b));
  }
  return RF_OK;
}

/* Places one piece, splitting it where the current bucket has no room for all of it. */
static rf_status place_piece(builder *b, const rf_plan *plan, int index) {
  const rf_piece *p = &plan->pieces[index];
  int src = rf_piece_src_world(plan, p), dst = rf_piece_dst_world(plan, p);
  if (rf_piece_carries_fp8(plan, p))
    return place_fp8_piece(b, plan, index, src, dst);
  int64_t esize = rf_tensor_esize(&plan->layout->model->tensors[p->tensor]);
  int64_t limit = b->s->bucket_size;
  rf_box rest = p->box;
  while (!rf_box_is_empty(&rest)) {
    int64_t bytes = rf_box_numel(&rest) * esize;
    if (limit == 0 || src == dst)
      return add_chunk(b, index, &rest, bytes, src, dst);
    int64_t room = limit - RF_MAX(b->sent[src], b->received[dst]);
    if (bytes <= room)
      return add_chunk(b, index, &rest, bytes, src, dst);
    int64_t row_bytes = (rest.hi[1] - rest.lo[1]) * esize;
    rf_box part = rest;
    if (room >= row_bytes) {
      part.hi[0] = rest.lo[0] + room / row_bytes; /* as many whole rows as fit */
      rest.lo[0] = part.hi[0];
    } else if (room < limit) {
      RF_TRY(open_bucket(b)); /* not even one row fits: start afresh */
      continue;
    } else {
      /* One row is larger than a whole bucket: its columns go a bucket at a time. */
      rf_box row = rest;
      row.hi[0] = row.lo[0] + 1;
      while (row.lo[1] < row.hi[1]) {
        rf_box c = row;
        c.hi[1] = RF_MIN(row.hi[1], row.lo[1] + limit / esize);
        RF_TRY(add_chunk(b, index, &c, rf_box_numel(&c) * esize, src, dst));
        RF_TRY(open_bucket(b));
        row.lo[1] = c.hi[1];
      }
      rest.lo[0]++;
      continue;
    }
    RF_TRY(add_chunk(b, index, &part, rf_box_numel(&part) * esize, src, dst));
    RF_TRY(open_bucket(b));
  }
  return RF_OK;
}

struct rf_schedule_cursor {
  const rf_plan *plan;
  rf_stage stage;
  builder b;
  rf_schedule s; /* what has been cut and not handed out: the open bucket, at least */
  int next;      /* the next piece to place */
  int end;       /* one past the last piece to place (fanout's forward steps are ranges) */
};

void rf_schedule_cursor_close(rf_schedule_cursor *c) {
  if (!c)
    return;
  free(c->b.sent);
  free(c->b.received);
  rf_schedule_free(&c->s);
  free(c);
}

/* A cursor over the pieces [first, end) of `stage`. */
static rf_status cursor_open(const rf_plan *plan, rf_stage stage, int first, int end,
                             int64_t bucket_size, rf_schedule_cursor **out) {
  rf_schedule_cursor *c = rf_calloc(1, sizeof *c, "a schedule cursor");
  *out = NULL;
  if (!c)
    return RF_ERR_NOMEM;
  c->plan = plan;
  c->stage = stage;
  c->next = first;
  c->end = end;
  c->s.stage = stage;
  c->s.bucket_size = bucket_size;
  c->b = (builder){&c->s, 0, 0, NULL, NULL, plan->layout->world_size, 0};
  c->b.sent = rf_calloc((size_t)c->b.world, sizeof *c->b.sent, "schedule counters");
  c->b.received = rf_calloc((size_t)c->b.world, sizeof *c->b.received, "schedule counters");
  rf_status st = c->b.sent && c->b.received ? open_bucket(&c->b) : RF_ERR_NOMEM;
  if (st != RF_OK) {
    rf_schedule_cursor_close(c);
    return st;
  }
  *out = c;
  return RF_OK;
}

rf_status rf_schedule_cursor_open(const rf_plan *plan, rf_stage stage, int64_t bucket_size,
                                  rf_schedule_cursor **out) {
  return cursor_open(plan, stage, 0, plan->piece_count, bucket_size, out);
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
  out->first_bucket = c->b.base;
  rf_schedule *s = &c->s;
  /* Whole pieces only, so that a window ends where the whole schedule could end too; and
   * never before a bucket has closed, so that every window holds at least one bucket. */
  while (c->next < c->end && (s->chunk_count < max_chunks || s->bucket_count < 2)) {
    if (plan->pieces[c->next].stage == (int32_t)c->stage)
      RF_TRY(place_piece(&c->b, plan, c->next));
    c->next++;
  }
  if (c->next < c->end)
    return hand_out_closed(c, out);
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
  c->b.base += out->bucket_count;
  return RF_OK;
}

/* The pieces [first, end) of `stage` into buckets, in one window. */
static rf_status build(const rf_plan *plan, rf_stage stage, int first, int end, int64_t bucket_size,
                       rf_schedule *out) {
  memset(out, 0, sizeof *out);
  rf_schedule_cursor *c = NULL;
  RF_TRY(cursor_open(plan, stage, first, end, bucket_size, &c));
  rf_status st = rf_schedule_cursor_next(c, INT_MAX, out);
  rf_schedule_cursor_close(c);
  if (st != RF_OK)
    rf_schedule_free(out);
  return st;
}

rf_status rf_schedule_build(const rf_plan *plan, rf_stage stage, int64_t bucket_size,
                            rf_schedule *out) {
  return build(plan, stage, 0, plan->piece_count, bucket_size, out);
}

rf_status rf_schedule_cursor_open_forward(const rf_plan *plan, int step, int64_t bucket_size,
                                          rf_schedule_cursor **out) {
  *out = NULL;
  if (step < 0 || step >= plan->forward_depth)
    return rf_fail(RF_ERR_INTERNAL, "schedule: forward step %d of a plan with %d steps", step,
                   plan->forward_depth);
  return cursor_open(plan, RF_STAGE_FORWARD, plan->forward_first[step],
                     plan->forward_first[step + 1], bucket_size, out);
}

rf_status rf_schedule_build_forward(const rf_plan *plan, int step, int64_t bucket_size,
                                    rf_schedule *out) {
  if (step < 0 || step >= plan->forward_depth)
    return rf_fail(RF_ERR_INTERNAL, "schedule: forward step %d of a plan with %d steps", step,
                   plan->forward_depth);
  return build(plan, RF_STAGE_FORWARD, plan->forward_first[step], plan->forward_first[step + 1],
               bucket_size, out);
}

void rf_schedule_free(rf_schedule *s) {
  free(s->chunks);
  free(s->buckets);
  memset(s, 0, sizeof *s);
}
