/* schedule: how one stage of a plan is cut into buckets, a pure function of the plan, the
 * stage and the bucket size, identical on every rank.
 *
 * A bucket bounds the bytes that any one rank sends, and any one rank receives, before the
 * next bucket starts: that is what bounds staging memory. A piece larger than what is left of
 * a bucket is split along its rows (or, for a single row, its columns) into chunks. */
#ifndef RF_SCHEDULE_H
#define RF_SCHEDULE_H

#include "plan.h"

typedef struct {
  int32_t piece;  /* index into plan->pieces */
  int32_t bucket;
  rf_box box;     /* the part of the piece's box this chunk moves */
  int64_t bytes;
} rf_chunk;

typedef struct {
  int first, count; /* chunks[first .. first+count) */
} rf_bucket;

typedef struct {
  rf_stage stage;
  int64_t bucket_size; /* 0 = one bucket for the whole stage */
  int chunk_count;
  rf_chunk *chunks;    /* in plan order */
  int bucket_count;
  rf_bucket *buckets;
} rf_schedule;

rf_status rf_schedule_build(const rf_plan *plan, rf_stage stage, int64_t bucket_size,
                            rf_schedule *out);
void rf_schedule_free(rf_schedule *s);

#endif
