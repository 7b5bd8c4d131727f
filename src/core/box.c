/* box arithmetic. */
#include "core/box.h"
#include "core/core.h"

int64_t rf_box_numel(const rf_box *b) {
  if (b->hi[0] <= b->lo[0] || b->hi[1] <= b->lo[1])
    return 0;
  return (b->hi[0] - b->lo[0]) * (b->hi[1] - b->lo[1]);
}

int rf_box_is_empty(const rf_box *b) { return rf_box_numel(b) == 0; }

int rf_box_intersect(const rf_box *a, const rf_box *b, rf_box *out) {
  rf_box r;
  for (int d = 0; d < 2; d++) {
    r.lo[d] = RF_MAX(a->lo[d], b->lo[d]);
    r.hi[d] = RF_MIN(a->hi[d], b->hi[d]);
    if (r.hi[d] < r.lo[d])
      r.hi[d] = r.lo[d];
  }
  *out = r;
  return !rf_box_is_empty(&r);
}

int rf_box_equal(const rf_box *a, const rf_box *b) {
  return a->lo[0] == b->lo[0] && a->hi[0] == b->hi[0] && a->lo[1] == b->lo[1] &&
         a->hi[1] == b->hi[1];
}
