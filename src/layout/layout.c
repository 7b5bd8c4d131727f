/* The whole layout: both halves (layout_trainer.c, layout_rollout.c) checked and precomputed
 * together, and the mapping between world ranks and trainer and rollout roles. */
#include <stdlib.h>
#include <string.h>

#include "layout_internal.h"

/* The storage order (layout.h): at a layer's first routed-expert tensor come all its gate and
 * up tensors, expert by expert, then all its down tensors; the other tensors keep their place. */
static rf_status init_order(rf_layout *lay) {
  const rf_model *m = lay->model;
  int n = m->tensor_count, at = 0;
  lay->order = rf_malloc((size_t)n * sizeof *lay->order, "the storage order");
  lay->position = rf_malloc((size_t)n * sizeof *lay->position, "the storage order");
  if (!lay->order || !lay->position)
    return RF_ERR_NOMEM;
  for (int i = 0; i < n; i++) {
    const rf_tensor *t = &m->tensors[i];
    if (t->expert < 0) {
      lay->order[at++] = i;
      continue;
    }
    if (i > 0 && m->tensors[i - 1].expert >= 0 && m->tensors[i - 1].layer == t->layer)
      continue; /* placed with the layer's first expert tensor */
    int end = i;
    while (end < n && m->tensors[end].expert >= 0 && m->tensors[end].layer == t->layer)
      end++;
    /* Every expert has one gate, one up and one down: 3E tensors. */
    if (end - i != 3 * m->experts)
      return rf_fail(RF_ERR_INTERNAL, "layer %d lists %d expert tensors, not 3 x %lld", t->layer,
                     end - i, (long long)m->experts);
    for (int j = i; j < end; j++) {
      const rf_tensor *x = &m->tensors[j];
      int slot = x->kind == RF_T_EXPERT_DOWN ? (int)(2 * m->experts) + x->expert
                                             : 2 * x->expert + (x->kind == RF_T_EXPERT_UP);
      lay->order[at + slot] = j;
    }
    at += end - i;
  }
  for (int i = 0; i < n; i++)
    lay->position[lay->order[i]] = i;
  return at == n ? RF_OK : rf_fail(RF_ERR_INTERNAL, "storage order lists %d of %d tensors", at, n);
}

rf_status rf_layout_init(rf_layout *lay, const rf_model *model, const rf_trainer_layout *trainer,
                         const rf_rollout_layout *rollout, rf_placement placement) {
  memset(lay, 0, sizeof *lay);
  lay->model = model;
  lay->trainer = *trainer;
  if (lay->trainer.cp < 1) /* a layout built by hand before cp existed */
    lay->trainer.cp = 1;
  lay->rollout = *rollout;
  lay->placement = placement;
  lay->trainer_ranks = rf_trainer_layout_ranks(trainer);
  lay->rollout_ranks = rollout->tp * rollout->dp;
  lay->world_size = rf_layout_ranks_needed(trainer, rollout, placement);
  lay->vocab_padded = (model->vocab + 63) / 64 * 64;
  rf_status st = init_order(lay);
  if (st == RF_OK)
    st = layout_init_trainer(lay);
  if (st == RF_OK)
    st = layout_init_rollout(lay);
  if (st != RF_OK)
    rf_layout_free(lay);
  return st;
}

void rf_layout_free(rf_layout *lay) {
  free(lay->trainer_split);
  free(lay->stage_first);
  free(lay->order);
  free(lay->position);
  free(lay->slots);
  free(lay->rollout_tensors);
  free(lay->global_leader);
  lay->trainer_split = NULL;
  lay->stage_first = NULL;
  lay->order = lay->position = NULL;
  lay->slots = NULL;
  lay->rollout_tensors = NULL;
  lay->global_leader = NULL;
  lay->rollout_tensor_count = 0;
}

int rf_layout_trainer_world_rank(const rf_layout *lay, int trainer_rank) { return trainer_rank; }

int rf_layout_rollout_world_rank(const rf_layout *lay, int rollout_rank) {
  return lay->placement == RF_PLACEMENT_COLOCATED ? rollout_rank
                                                  : lay->trainer_ranks + rollout_rank;
}

void rf_layout_roles(const rf_layout *lay, int world_rank, int *trainer_rank, int *rollout_rank) {
  int tr = -1, rr = -1;
  if (lay->placement == RF_PLACEMENT_COLOCATED) {
    tr = world_rank < lay->trainer_ranks ? world_rank : -1;
    rr = world_rank < lay->rollout_ranks ? world_rank : -1;
  } else if (world_rank < lay->trainer_ranks) {
    tr = world_rank;
  } else if (world_rank < lay->world_size) {
    rr = world_rank - lay->trainer_ranks;
  }
  if (trainer_rank)
    *trainer_rank = tr;
  if (rollout_rank)
    *rollout_rank = rr;
}
