/* The whole layout: both halves (layout_trainer.c, layout_rollout.c) checked and precomputed
 * together, and the mapping between world ranks and trainer and rollout roles. */
#include <stdlib.h>
#include <string.h>

#include "layout_internal.h"

rf_status rf_layout_init(rf_layout *lay, const rf_model *model, const rf_trainer_layout *trainer,
                         const rf_rollout_layout *rollout, rf_placement placement) {
  memset(lay, 0, sizeof *lay);
  lay->model = model;
  lay->trainer = *trainer;
  lay->rollout = *rollout;
  lay->placement = placement;
  lay->trainer_ranks = trainer->fsdp * trainer->tp * trainer->ep * trainer->pp * trainer->dp;
  lay->rollout_ranks = rollout->tp * rollout->dp;
  lay->world_size = rf_layout_ranks_needed(trainer, rollout, placement);
  lay->vocab_padded = (model->vocab + 63) / 64 * 64;
  rf_status st = layout_init_trainer(lay);
  if (st == RF_OK)
    st = layout_init_rollout(lay);
  if (st != RF_OK)
    rf_layout_free(lay);
  return st;
}

void rf_layout_free(rf_layout *lay) {
  free(lay->trainer_split);
  free(lay->stage_first);
  free(lay->slots);
  free(lay->rollout_tensors);
  lay->trainer_split = NULL;
  lay->stage_first = NULL;
  lay->slots = NULL;
  lay->rollout_tensors = NULL;
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
