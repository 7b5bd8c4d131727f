/* Cutting a plan stage into buckets that bound every rank's bytes in flight. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

typedef struct {
  rf_schedule *s;
  int chunk_cap, bucket_cap;
  int64_t *sent, *received; /* this bucket's remote bytes per world rank */
  int world;
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
  c->bucket = s->bucket_count - 1;
  c->box = *box;
  c->bytes = bytes;
  s->buckets[s->bucket_count - 1].count++;
  if (src != dst) {
    b->sent[src] += bytes;
    b->received[dst] += bytes;
  }
  return RF_OK;
}

/* Places one piece, splitting it where the current bucket has no room for all of it. */
static rf_status place_piece(builder *b, const rf_plan *plan, int index) {
  const rf_piece *p = &plan->pieces[index];
  int src = rf_piece_src_world(plan, p), dst = rf_piece_dst_world(plan, p);
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

/* The pieces [first, end) of `stage` into buckets. */
static rf_status build(const rf_plan *plan, rf_stage stage, int first, int end, int64_t bucket_size,
                       rf_schedule *out) {
  memset(out, 0, sizeof *out);
  out->stage = stage;
  out->bucket_size = bucket_size;
  builder b = {out, 0, 0, NULL, NULL, plan->layout->world_size};
  b.sent = rf_calloc((size_t)b.world, sizeof *b.sent, "schedule counters");
  b.received = rf_calloc((size_t)b.world, sizeof *b.received, "schedule counters");
  rf_status st = b.sent && b.received ? open_bucket(&b) : RF_ERR_NOMEM;
  for (int i = first; i < end && st == RF_OK; i++)
    if (plan->pieces[i].stage == (int32_t)stage)
      st = place_piece(&b, plan, i);
  /* A trailing empty bucket (opened after the last split) carries nothing. */
  if (st == RF_OK && out->bucket_count > 1 && out->buckets[out->bucket_count - 1].count == 0)
    out->bucket_count--;
  free(b.sent);
  free(b.received);
  if (st != RF_OK)
    rf_schedule_free(out);
  return st;
}

rf_status rf_schedule_build(const rf_plan *plan, rf_stage stage, int64_t bucket_size,
                            rf_schedule *out) {
  return build(plan, stage, 0, plan->piece_count, bucket_size, out);
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
