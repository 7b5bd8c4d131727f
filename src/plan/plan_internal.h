/* Shared between the plan kinds: growing the piece list and choosing among equal sources. */
#ifndef RF_PLAN_INTERNAL_H
#define RF_PLAN_INTERNAL_H

#include "plan.h"

/* The running totals, fp8 counts and digest of the pieces made so far (plan.c). */
typedef struct plan_tally plan_tally;

typedef struct {
  rf_plan *plan;
  int cap;
  const rf_plan_options *options;
  /* Summary plans (rf_plan_options.summary): pieces holds the latest few only; each time it
   * fills, the tally takes them and they are dropped. streamed counts those dropped. */
  plan_tally *tally;
  int streamed;
  int esize_tensor; /* the tensor of the piece before (-1 at first), and its element size */
  int64_t esize;
} plan_builder;

rf_status plan_add_piece(plan_builder *b, int tensor, rf_stage stage, int src, int dst,
                         const rf_box *box);

/* The trainer ranks that hold each box of one tensor, indexed for choosing among them
 * (plan_sources.c): opened once per plan, then pointed at each tensor in turn. `load` (bytes
 * each trainer rank sends, by trainer rank) is the builder's and grows as pieces are added. */
typedef struct plan_sources plan_sources;
rf_status plan_sources_open(plan_builder *b, int64_t *load, plan_sources **out);
/* Indexes the holders of `tensor`, in place of the tensor before. */
void plan_sources_select(plan_sources *s, int tensor);
void plan_sources_free(plan_sources *s);

/* Covers `target` (a box of `tensor` wanted by destination `dst`, world rank `dst_world`) from
 * the trainer layout. Each distinct region of the trainer layout inside target becomes one
 * piece, from the nearest trainer rank that holds it, ties broken by the least load so far,
 * then by the lowest rank. */
rf_status plan_cover_from_trainers(plan_builder *b, plan_sources *s, int tensor, rf_stage stage,
                                   int dst, int dst_world, const rf_box *target);

/* Covers, from the trainer, what replica `root`'s ranks hold of tensor t (root < 0: a shared
 * tensor's one owning rank), adding the bytes to rooted[root]: fanout's and hierarchical's
 * transfer to a root replica. */
rf_status plan_cover_root(plan_builder *b, plan_sources *sources, int t, int root, int64_t *rooted);

/* The wire totals and fp8 counts (plan_fp8.c), piece by piece in plan order: open allocates
 * the plan's arrays, add counts one piece, close counts the last fp8 tensor. */
typedef struct {
  int *last; /* [trainer ranks + rollout ranks]: the last fp8 tensor each rank was counted for */
  int tensor, any_destination;
} plan_wire;
rf_status plan_wire_open(rf_plan *plan, plan_wire *w);
void plan_wire_add(rf_plan *plan, plan_wire *w, const rf_piece *p);
void plan_wire_close(rf_plan *plan, plan_wire *w);

/* The schedule's pairs (schedule_pairs.c): a stage's pieces grouped by (source, destination)
 * world rank, and a queue of the pairs that takes the one furthest behind first. */
typedef struct {
  int index, src, dst;
  int next, end;         /* order[next .. end): the pieces not yet wholly placed */
  rf_box rest;           /* what is left of order[next]; empty before it starts */
  int64_t placed, total; /* bytes of its pieces placed so far, and in all */
  /* Pacing (rf_pace, schedule.c): its quota, the wire bytes it may place a bucket (INT64_MAX:
   * unpaced), and its remote wire bytes placed so far. Both count wire bytes, which the buckets
   * bound, where `placed` counts the pieces' own bytes for the turns' order. */
  int64_t quota, paced;
} sched_pair;

typedef struct {
  double share; /* placed / total of the pair, when it last took its turn */
  int pair;
} sched_turn;

typedef struct {
  int *order; /* piece indices, pair by pair */
  sched_pair *pairs;
  int pair_count;
  sched_turn *heap; /* the pairs that may still place into the open bucket, furthest behind
                     * first */
  int heap_count;
  int *blocked; /* the pairs with no room left in the open bucket */
  int blocked_count;
} sched_pairs;

rf_status sched_pairs_open(sched_pairs *q, const rf_plan *plan, rf_stage stage, int first, int end);
void sched_pairs_close(sched_pairs *q);
/* The pair furthest behind, or NULL when every pair is blocked or done. */
sched_pair *sched_pairs_top(sched_pairs *q);
/* After the top pair placed what it could: `blocked` when the open bucket has no room left
 * for its next bytes. */
void sched_pairs_update(sched_pairs *q, int blocked);
/* A new bucket is open: every blocked pair may place again. */
void sched_pairs_unblock(sched_pairs *q);

rf_status plan_build_star(plan_builder *b);
rf_status plan_build_fanout(plan_builder *b);
rf_status plan_build_hierarchical(plan_builder *b);

#endif
