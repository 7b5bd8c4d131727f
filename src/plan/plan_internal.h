/* Shared between the plan kinds: growing the piece list and choosing among equal sources. */
#ifndef RF_PLAN_INTERNAL_H
#define RF_PLAN_INTERNAL_H

#include "plan.h"

typedef struct {
  rf_plan *plan;
  int cap;
  const rf_plan_options *options;
} plan_builder;

rf_status plan_add_piece(plan_builder *b, int tensor, rf_stage stage, int src, int dst,
                         const rf_box *box);

/* Covers `target` (a box of `tensor` wanted by destination `dst`, a world rank) from the
 * trainer layout. Each distinct region of the trainer layout inside target becomes one piece,
 * from the nearest trainer rank that holds it, ties broken by the least `load` so far. */
rf_status plan_cover_from_trainers(plan_builder *b, int tensor, rf_stage stage, int dst,
                                   int dst_world, const rf_box *target, int64_t *load);

rf_status plan_build_star(plan_builder *b);

#endif
