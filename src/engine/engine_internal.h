/* Shared between the engine's files: the regions a chunk reads and writes. */
#ifndef RF_ENGINE_INTERNAL_H
#define RF_ENGINE_INTERNAL_H

#include "engine.h"

/* Bytes per element of a tensor: its own dtype's, which fused staging mixes freely (an fp32
 * chunk may follow a bf16 one at an offset that is 2 mod 4, so host code reaches staging only
 * through memcpy-based copies). */
int engine_esize(const rf_engine *e, int tensor);

/* This rank's trainer shard of a tensor, and its part of a tensor in the fused rollout
 * tensor (held is set to the box it holds). */
rf_region engine_shard_region(const rf_engine *e, int tensor);
rf_region engine_rollout_region(const rf_engine *e, int tensor, rf_box *held);

/* How a stage's pieces name this rank and its peers: the channel the stage travels on
 * (the trainer group for star's reshape, else the world), this rank's number as a piece's
 * source (trainer rank, or rollout rank for the forward stage) and destination (trainer rank
 * for the reshape, else rollout rank), and the channel rank of a piece's other end. */
rf_channel engine_channel(rf_stage stage);
int engine_src_rank(const rf_engine *e, rf_stage stage);
int engine_dst_rank(const rf_engine *e, rf_stage stage);
int engine_peer(const rf_engine *e, const rf_piece *p, int sending);

/* The region a piece is read from: a trainer shard, star's coupling buffer, or (forward) this
 * rank's part of the fused rollout tensor. */
rf_region engine_source(const rf_engine *e, const rf_piece *p);
/* The region a piece lands in, and the part of `box` the destination keeps. */
rf_region engine_destination(const rf_engine *e, const rf_piece *p, const rf_box *box,
                             rf_box *kept);

/* The engine's schedules in the order they run: 0 reshape, 1 transfer, 2 + s forward step s. */
const rf_schedule *engine_stage(const rf_engine *e, int i);

/* Runs one stage of the plan; adds pack/transfer/unpack seconds into times. */
rf_status engine_run_stage(rf_engine *e, const rf_schedule *s, double *times);

/* The same over a mapping transport: one end of each piece copies it straight between the
 * two processes' memory (engine_mapped.c). */
rf_status engine_run_stage_mapped(rf_engine *e, const rf_schedule *s, double *times);
/* Maps the arenas this rank copies from or into (ipc setup, once per mode). */
rf_status engine_mapped_init(rf_engine *e);

/* --inject corrupt, once armed: flips one byte on the corrupting rank (engine_check.c). */
rf_status engine_apply_corrupt(rf_engine *e);

/* Bytes of staging one bucket needs on this rank, for sending and for receiving. */
void engine_bucket_staging(const rf_engine *e, const rf_schedule *s, int bucket, int64_t *send,
                           int64_t *recv);

#endif
