/* region_walk: how a box copy between two regions is walked, as lines of elements. The CPU
 * copy (memory.c) and the GPU planner (region_cuda.cu) both start from this one function, so
 * they agree on which dimension is inner and on every address they touch. */
#ifndef RF_REGION_WALK_H
#define RF_REGION_WALK_H

#include "memory/memory.h"

/* n_out lines of n_in elements; strides are in elements, per side; dst and src point at
 * element (0, 0) of the walk, the box's lo corner. */
typedef struct {
  char *dst;
  const char *src;
  int64_t n_out, n_in;
  int64_t d_out, d_in, s_out, s_in;
  int outer; /* the box dimension a step from line to line moves along */
} rf_copy_walk;

/* Walks innermost the dimension in which the destination is dense, so that writes stream; a
 * box one element thick in a dimension is walked along the other. An empty box gives
 * n_out == n_in == 0. */
static inline rf_copy_walk rf_copy_walk_of(const rf_region *dst, const rf_region *src,
                                           const rf_box *box) {
  rf_copy_walk cw;
  int64_t h = box->hi[0] - box->lo[0], w = box->hi[1] - box->lo[1];
  int inner = 1;
  if (w == 1 || (h > 1 && dst->stride[0] < dst->stride[1]))
    inner = 0;
  int outer = 1 - inner;
  cw.outer = outer;
  cw.n_out = inner ? h : w, cw.n_in = inner ? w : h;
  cw.d_out = dst->stride[outer], cw.d_in = dst->stride[inner];
  cw.s_out = src->stride[outer], cw.s_in = src->stride[inner];
  cw.dst = cw.n_out > 0 && cw.n_in > 0 ? rf_region_at(dst, box->lo[0], box->lo[1]) : dst->base;
  cw.src = cw.n_out > 0 && cw.n_in > 0 ? rf_region_at(src, box->lo[0], box->lo[1]) : src->base;
  if (h <= 0 || w <= 0)
    cw.n_out = cw.n_in = 0;
  return cw;
}

#endif
