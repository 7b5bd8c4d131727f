/* Shared between the engine's files: the regions a chunk reads and writes. */
#ifndef RF_ENGINE_INTERNAL_H
#define RF_ENGINE_INTERNAL_H

#include "engine.h"

/* This rank's trainer shard of a tensor, and its part of a tensor in the fused rollout
 * tensor (held is set to the box it holds). */
rf_region engine_shard_region(const rf_engine *e, int tensor);
rf_region engine_rollout_region(const rf_engine *e, int tensor, rf_box *held);

/* The region a piece is read from: a trainer shard, or star's coupling buffer. */
rf_region engine_source(const rf_engine *e, const rf_piece *p);
/* The region a piece lands in, and the part of `box` the destination keeps. */
rf_region engine_destination(const rf_engine *e, const rf_piece *p, const rf_box *box,
                             rf_box *kept);

/* Runs one stage of the plan; adds pack/transfer/unpack seconds into times. */
rf_status engine_run_stage(rf_engine *e, const rf_schedule *s, double *times);

/* The same over a mapping transport: destinations copy out of their sources' memory. */
rf_status engine_run_stage_pull(rf_engine *e, const rf_schedule *s, double *times);
/* Maps the arenas this rank's pieces are read from (ipc setup, once per mode). */
rf_status engine_pull_init(rf_engine *e);

/* Bytes of staging one bucket needs on this rank, for sending and for receiving. */
void engine_bucket_staging(const rf_engine *e, const rf_schedule *s, int bucket,
                           int64_t *send, int64_t *recv);

#endif
