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

#endif
