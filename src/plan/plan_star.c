/* The star plan of the reference bridge (docs/architecture.md, "Plans"): min(T, R) stars of k+1
 * ranks. The trainer first reshapes into the coupling layout, in which each trainer rank holds
 * exactly what it will send to its star's rollout rank(s); then every arm exchanges with its
 * centre. */
#include <stdlib.h>

#include "plan_internal.h"

static int is_power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

/* Embeddings and norms travel whole to every rollout rank, as in the reference: it treats
 * vocab-parallel embeddings as unsharded and lets vLLM's loader crop them. */
static int star_split_dim(const rf_layout *lay, int tensor) {
  rf_tensor_kind k = lay->model->tensors[tensor].kind;
  if (k == RF_T_EMBED || k == RF_T_LM_HEAD)
    return -1;
  return rf_layout_rollout_split_dim(lay, tensor);
}

/* The auxiliary dimension that the arms of a star split: the largest dimension other than the
 * rollout's split dimension (numpy argmax, so the first on ties), or the largest for tensors
 * the rollout does not split. */
static int star_aux_dim(const rf_tensor *t, int split_dim) {
  if (t->ndim == 1)
    return 0;
  if (split_dim >= 0)
    return 1 - split_dim;
  return t->shape[1] > t->shape[0] ? 1 : 0;
}

static rf_status coupling_box(const rf_plan *plan, int tensor, int trainer_rank, rf_box *out) {
  const rf_layout *lay = plan->layout;
  const rf_tensor *t = &lay->model->tensors[tensor];
  int k = plan->star_arms, split = star_split_dim(lay, tensor);
  rf_box base = rf_box_whole(t);
  if (plan->fan_in) {
    int s = trainer_rank / k, arm = trainer_rank % k;
    if (split >= 0)
      base = rf_layout_rollout_box(lay, tensor, s);
    int aux = star_aux_dim(t, split);
    int64_t extent = base.hi[aux] - base.lo[aux];
    if (extent % k)
      return rf_fail(RF_ERR_LAYOUT,
                     "plan star: %s dim %d has %lld elements per rollout rank, which do not "
                     "divide over the %d arms of a star; use --plan p2p",
                     t->name, aux, (long long)extent, k);
    base.lo[aux] += arm * (extent / k);
    base.hi[aux] = base.lo[aux] + extent / k;
  } else if (split >= 0) {
    /* Fan-out: the centre holds the union of its arms' boxes, contiguous along split. */
    rf_box first = rf_layout_rollout_box(lay, tensor, trainer_rank * k);
    rf_box last = rf_layout_rollout_box(lay, tensor, trainer_rank * k + k - 1);
    base = first;
    base.hi[split] = last.hi[split];
  }
  *out = base;
  return RF_OK;
}

rf_status plan_build_star(plan_builder *b) {
  rf_plan *plan = b->plan;
  const rf_layout *lay = plan->layout;
  int T = lay->trainer_ranks, R = lay->rollout.tp, P = lay->rollout.dp;
  if (lay->rollout.ep)
    return rf_fail(RF_ERR_LAYOUT,
                   "plan star: a star sends every engine replica the same boxes, and rollout "
                   "ep puts each expert on one rank of all replicas; use --plan p2p");
  if (!is_power_of_two(T) || !is_power_of_two(R))
    return rf_fail(RF_ERR_LAYOUT,
                   "plan star: %d trainer ranks and rollout tp=%d must both be powers of two "
                   "(the reference bridge's stars); use --plan p2p",
                   T, R);
  plan->fan_in = T >= R;
  plan->star_arms = plan->fan_in ? T / R : R / T;
  plan->star_count = RF_MIN(T, R);
  int nt = lay->model->tensor_count;
  /* A summary plan (plan.h) keeps no [tensor x trainer rank] table, 186 MB for DeepSeek-V3 over
   * 128 ranks: each tensor's coupling boxes are made again where the transfer needs them. */
  int keep = !b->tally;
  size_t boxes = keep ? (size_t)nt * (size_t)T : (size_t)T;
  rf_box *scratch = rf_malloc(boxes * sizeof *scratch, "star coupling");
  int64_t *load = rf_calloc((size_t)T, sizeof *load, "star load");
  if (!scratch || !load) {
    free(scratch);
    free(load);
    return RF_ERR_NOMEM;
  }
  if (keep)
    plan->coupling = scratch;
  /* Stage 1: every trainer rank gathers its coupling box from the trainer layout, from itself
   * first (the default distance makes the same process nearest). */
  plan_sources *sources = NULL;
  rf_status st = plan_sources_open(b, load, &sources);
  for (int t = 0; t < nt && st == RF_OK; t++) {
    plan_sources_select(sources, t);
    for (int j = 0; j < T && st == RF_OK; j++) {
      rf_box *c = &scratch[keep ? (size_t)t * (size_t)T + (size_t)j : (size_t)j];
      st = coupling_box(plan, t, j, c);
      if (st == RF_OK)
        st = plan_cover_from_trainers(b, sources, t, RF_STAGE_RESHAPE, j,
                                      rf_layout_trainer_world_rank(lay, j), c);
    }
  }
  plan_sources_free(sources);
  /* Stage 2: arms to centre (fan-in) or centre to arms (fan-out), once per engine replica. */
  int k = plan->star_arms;
  for (int t = 0; t < nt && st == RF_OK; t++) {
    int split = star_split_dim(lay, t);
    rf_box whole = rf_box_whole(&lay->model->tensors[t]);
    rf_box *coupling = keep ? &scratch[(size_t)t * (size_t)T] : scratch;
    for (int j = 0; !keep && plan->fan_in && j < T && st == RF_OK; j++)
      st = coupling_box(plan, t, j, &coupling[j]);
    for (int p = 0; p < P && st == RF_OK; p++)
      for (int j = 0; j < T && st == RF_OK; j++) {
        if (plan->fan_in) {
          st = plan_add_piece(b, t, RF_STAGE_TRANSFER, j, p * R + j / k, &coupling[j]);
          continue;
        }
        for (int arm = 0; arm < k && st == RF_OK; arm++) {
          int r = j * k + arm;
          rf_box box = split >= 0 ? rf_layout_rollout_box(lay, t, r) : whole;
          st = plan_add_piece(b, t, RF_STAGE_TRANSFER, j, p * R + r, &box);
        }
      }
  }
  if (!keep)
    free(scratch);
  free(load);
  return st;
}
