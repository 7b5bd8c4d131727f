/* The whole layout: both halves (layout_trainer.c, layout_rollout.c) checked and precomputed
 * together, and the mapping between world ranks and trainer and rollout roles. */
#include <stdlib.h>
#include <string.h>

#include "layout_internal.h"

/* Where an expert tensor goes in its layer's run of the storage order: the rollout tensor it
 * joins (w13_weight, then gpt-oss's w13_bias, w2_weight, w2_bias), then its expert, then gate
 * before up inside w13_weight. */
static int64_t expert_key(const rf_model *m, const rf_tensor *t) {
  int group = 0, sub = 0;
  switch (t->kind) {
  case RF_T_EXPERT_UP:
    sub = 1;
    break;
  case RF_T_EXPERT_GATE_UP_BIAS:
    group = 1;
    break;
  case RF_T_EXPERT_DOWN:
    group = 2;
    break;
  case RF_T_EXPERT_DOWN_BIAS:
    group = 3;
    break;
  default: /* gate, gpt-oss's gate_up */
    break;
  }
  return ((int64_t)group * m->experts + t->expert) * 2 + sub;
}

/* The storage order (layout.h): at a layer's first routed-expert tensor come all its expert
 * tensors in the order of the rollout's stacked tensors (gate and up expert by expert, then the
 * downs; gpt-oss's fused gate_up and biases likewise); the other tensors keep their place. */
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
    /* Every expert has the same parts (gate, up, down; or gate_up, down and their biases), and
     * each part's keys are dense, so a key is a slot of the run. */
    int per = (int)((end - i) / m->experts);
    if (per < 3 || (end - i) % m->experts)
      return rf_fail(RF_ERR_INTERNAL, "layer %d lists %d expert tensors, not a multiple of %lld",
                     t->layer, end - i, (long long)m->experts);
    for (int j = i; j < end; j++)
      lay->order[at + j - i] = -1;
    for (int j = i; j < end; j++) {
      int64_t key = expert_key(m, &m->tensors[j]);
      /* Separate gate and up fill both keys of an expert in w13_weight (2E slots); every
       * other group uses every other key (E slots), and group g starts at key 2gE. */
      int slot = (int)(per == 3 && key < 2 * m->experts ? key : key / 2);
      if (slot < 0 || slot >= end - i || lay->order[at + slot] >= 0)
        return rf_fail(RF_ERR_INTERNAL, "layer %d: expert tensor %s has no slot of its own",
                       t->layer, m->tensors[j].name);
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
