/* The walker: the state sim_walk.c keeps while it turns a schedule into units, shared with
 * sim_walk_chunk.c, which says what each chunk adds to the open unit. Nothing outside the walk
 * includes this header. */
#ifndef RF_SIM_WALKER_H
#define RF_SIM_WALKER_H

#include "sim_internal.h"

typedef struct {
  const rf_plan *plan;
  rf_mode mode;
  int mapping;  /* rf_sim_options.mapping */
  rf_wire wire; /* rf_sim_options.wire */
  rf_sim_delta_model delta;
  int delta_on;
  sim_tally *tally; /* or NULL */
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
  int64_t *pack_bytes, *unpack_bytes;  /* [world] */
  int64_t *pack_quant, *unpack_quant;  /* [world]: trainer-dtype bytes quantized (sim_copy) */
  int64_t *pack_encode, *unpack_apply; /* [world]: bytes encoded and applied (sim_copy) */
  int unit_delta;                      /* the open unit holds chunks sent as deltas */
  int *pack_copies, *unpack_copies;    /* [world]: copies launched one by one */
  char *pack_batch, *unpack_batch;     /* [world]: copies the engine gathers into one batch */
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

/* Marks a rank as having copies in the open unit. */
static inline void sim_walker_touch(walker *w, int rank) {
  if (!w->is_touched[rank]) {
    w->is_touched[rank] = 1;
    w->touched[w->ntouched++] = rank;
  }
}

/* Adds bytes to a rank's staging of the open bucket (per_rank: send_staged or recv_staged). */
static inline void sim_walker_stage(walker *w, int rank, int64_t *per_rank, int64_t bytes) {
  if (!w->is_staged[rank]) {
    w->is_staged[rank] = 1;
    w->staged_ranks[w->nstaged++] = rank;
  }
  per_rank[rank] += bytes;
}

/* Adds `bytes` and `messages` to the open unit's pair (src, dst). */
rf_status sim_walker_pair(walker *w, int src, int dst, int64_t bytes, int messages);
/* One message (or local copy) of `run` chunks from s->chunks[i], as post_chunk and post_block
 * make it (sim_walk_chunk.c). */
rf_status sim_walker_run(walker *w, const rf_schedule *s, int i, int run);

#endif
