/* box: a half-open rectangle of a tensor's elements, the unit that layouts, plans, memory
 * regions and checks all speak. Boxes are in a tensor's logical (Hugging Face) coordinates;
 * 1-D tensors use dim 0 only, with dim 1 fixed to [0, 1). */
#ifndef RF_BOX_H
#define RF_BOX_H

#include <stdint.h>

typedef struct {
  int64_t lo[2], hi[2];
} rf_box;

int64_t rf_box_numel(const rf_box *b);
int rf_box_is_empty(const rf_box *b);
/* Writes a ∩ b to out; returns 1 when it is not empty. */
int rf_box_intersect(const rf_box *a, const rf_box *b, rf_box *out);
int rf_box_equal(const rf_box *a, const rf_box *b);

#endif
