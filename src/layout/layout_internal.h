/* What the files of the layout module share: the two halves of rf_layout_init. */
#ifndef RF_LAYOUT_INTERNAL_H
#define RF_LAYOUT_INTERNAL_H

#include "layout.h"

static inline int layout_is_kv(rf_tensor_kind k) {
  return k == RF_T_K || k == RF_T_V || k == RF_T_K_BIAS || k == RF_T_V_BIAS;
}

/* Checks the trainer mesh, ep and pp against the model and precomputes the splits. */
rf_status layout_init_trainer(rf_layout *lay);
/* Checks the rollout layout against the model and builds its tensors and slots. */
rf_status layout_init_rollout(rf_layout *lay);
/* vLLM's divisibility rules for the rollout tp (heads, kv heads, MLP widths, the vocabulary),
 * without building anything: layout_fp8.c asks it which other tp would fit. */
rf_status layout_check_rollout(const rf_layout *lay);
/* With --rollout-dtype fp8, after the rollout tensors are built: refuses a rollout shard that
 * cuts a 128x128 block, makes the linear weights fp8 and adds their weight_scale_inv tensors. */
rf_status layout_init_fp8(rf_layout *lay);

#endif
