/* engine: executes a plan over a transport in one of the three modes of design.md §3.
 *
 * It owns this rank's buffers (trainer shards, star coupling buffers, fused rollout tensors,
 * staging), the schedules of both stages, and one iteration of the transfer:
 *   unfused  one message per chunk, a completion wait after each tensor;
 *   grouped  every chunk of a bucket posted in one group, then one wait;
 *   fused    per peer and bucket, the chunks packed into one staging buffer and sent as one
 *            message, unpacked at the destination; two staging buffers per peer direction so
 *            that packing bucket k+1 overlaps the flight of bucket k.
 * Chunks that are contiguous at both ends move in place; the others go through staging. */
#ifndef RF_ENGINE_H
#define RF_ENGINE_H

#include "plan/schedule.h"
#include "report/report.h"
#include "transport.h"

typedef enum { RF_MODE_UNFUSED = 0, RF_MODE_GROUPED, RF_MODE_FUSED } rf_mode;
rf_status rf_mode_parse(const char *text, rf_mode *out);
const char *rf_mode_name(rf_mode mode);

/* Faults the tests inject to show that the checks and the timeouts work. */
typedef enum { RF_INJECT_NONE = 0, RF_INJECT_CORRUPT, RF_INJECT_STALL } rf_inject;

/* This rank's data, allocated and generated once per job and shared by the runs of every
 * mode: trainer shards (filled with the generator), star coupling buffers and the fused
 * rollout tensors. Arrays are indexed by logical tensor (shards, coupling) or by rollout
 * tensor (rollout); entries are NULL where this rank holds nothing. */
typedef struct {
  const rf_plan *plan;
  rf_mem_kind memory;
  int trainer_rank, rollout_rank;
  void **shards, **coupling, **rollout;
  size_t *shard_bytes, *coupling_bytes, *rollout_bytes;
  double fill_seconds; /* generating the trainer's weights */
} rf_buffers;

rf_status rf_buffers_init(rf_buffers *b, const rf_plan *plan, rf_mem_kind memory, uint64_t seed,
                          int world_rank);
void rf_buffers_free(rf_buffers *b);

typedef struct {
  const rf_plan *plan;
  rf_buffers *data;
  rf_transport *transport;
  rf_mode mode;
  int64_t bucket_size;
  uint64_t seed;
  rf_inject inject;

  int world_rank, trainer_rank, rollout_rank; /* -1 where this rank has no such role */
  rf_mem_kind memory;
  int esize;

  rf_schedule reshape, transfer;
  void *staging[2][2]; /* [send/recv][double buffer] */
  size_t staging_bytes[2];
  int64_t messages;    /* messages this rank sent in the last iteration */
} rf_engine;

/* Builds the schedules of one mode over the job's buffers and allocates the staging. */
rf_status rf_engine_init(rf_engine *e, rf_buffers *data, rf_transport *tp, rf_mode mode,
                         int64_t bucket_size, uint64_t seed, rf_inject inject, int world_rank);
void rf_engine_free(rf_engine *e);

/* Overwrites every destination buffer with a pattern the generator never produces, so an
 * element the next iteration fails to write cannot pass verification. */
void rf_engine_poison(rf_engine *e);

/* One transfer; phase seconds go to times[RF_PHASE_COUNT]. `stall` makes this rank skip its
 * part (the stall injection). */
rf_status rf_engine_iterate(rf_engine *e, double *times, int stall);

/* After the last iteration: full check of every element this rank holds on the rollout side
 * (returns the count of wrong elements; logs the first few), and the layout-invariant
 * checksums this rank contributes: trainer[tensor] and rollout[replica * tensors + tensor],
 * counting each element once per group (the lowest rank holding a replicated box). */
int64_t rf_engine_check(rf_engine *e);
void rf_engine_checksums(rf_engine *e, uint64_t *trainer, uint64_t *rollout);

/* Applies --inject corrupt: flips one received byte on the last rollout rank. */
void rf_engine_corrupt(rf_engine *e);

#endif
