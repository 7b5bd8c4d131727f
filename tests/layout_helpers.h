/* What the layout tests share: exact box comparison and a layout from layout strings. */
#ifndef RF_TEST_LAYOUT_HELPERS_H
#define RF_TEST_LAYOUT_HELPERS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout.h"
#include "test.h"

static inline void expect_box(rf_box b, int64_t lo0, int64_t hi0, int64_t lo1, int64_t hi1) {
  ASSERT_EQ(b.lo[0], lo0);
  ASSERT_EQ(b.hi[0], hi0);
  ASSERT_EQ(b.lo[1], lo1);
  ASSERT_EQ(b.hi[1], hi1);
}

static inline rf_status make(rf_layout *lay, const rf_model *m, const char *trainer,
                             const char *rollout, rf_trainer_style style, rf_placement placement) {
  rf_trainer_layout t;
  rf_rollout_layout r;
  RF_TRY(rf_trainer_layout_parse(trainer, &t));
  RF_TRY(rf_rollout_layout_parse(rollout, &r));
  t.style = style;
  t.order = RF_ORDER_HF;
  return rf_layout_init(lay, m, &t, &r, placement);
}

/* The rollout tensor of that name; aborts the test when the layout has none. */
static inline const rf_rollout_tensor *rollout_tensor(const rf_layout *lay, const char *name) {
  for (int i = 0; i < lay->rollout_tensor_count; i++)
    if (strcmp(lay->rollout_tensors[i].name, name) == 0)
      return &lay->rollout_tensors[i];
  fprintf(stderr, "no rollout tensor %s\n", name);
  abort();
}

#endif
