/* The setup step `register` of a one-sided transport (sim.h, "registration"): the windows each
 * rank makes and the bytes it registers, counted from the engine's own arena layout
 * (rf_buffers_offsets), and their time on the cluster. */
#include <stdlib.h>

#include "sim_internal.h"

/* The tensors of family f that world rank w holds part of: the distinct offsets inside its
 * arena (a tensor it holds nothing of starts where the next does, or at the arena's end). */
static int by_offset(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static int64_t tensors_held(const rf_plan *plan, rf_buffer_family f, int rank, int64_t *off, int n,
                            int64_t *arena) {
  *arena = rf_buffers_offsets(plan, f, rank, off);
  qsort(off, (size_t)n, sizeof *off, by_offset);
  int64_t held = 0;
  for (int i = 0; i < n; i++)
    held += off[i] < *arena && (i == 0 || off[i] != off[i - 1]);
  return held;
}

rf_status rf_sim_registration(const rf_plan *plan, const rf_cluster *c, rf_register_unit unit,
                              rf_sim_register *out) {
  const rf_layout *lay = plan->layout;
  int n = RF_MAX(lay->model->tensor_count, lay->rollout_tensor_count);
  int64_t *off = rf_calloc((size_t)n + 1, sizeof *off, "arena offsets");
  if (!off)
    return RF_ERR_NOMEM;
  *out = (rf_sim_register){0};
  int64_t most[RF_FAMILY_COUNT] = {0};
  for (int w = 0; w < lay->world_size; w++) {
    int t, ro;
    rf_layout_roles(lay, w, &t, &ro);
    int64_t bytes = 0;
    for (int f = 0; f < RF_FAMILY_COUNT; f++) {
      int rank = f == RF_FAMILY_ROLLOUT ? ro : t;
      if (rank < 0)
        continue;
      int count = f == RF_FAMILY_ROLLOUT ? lay->rollout_tensor_count : lay->model->tensor_count;
      int64_t arena;
      int64_t held = tensors_held(plan, (rf_buffer_family)f, rank, off, count, &arena);
      most[f] = RF_MAX(most[f], held);
      bytes += arena;
    }
    out->peak_bytes = RF_MAX(out->peak_bytes, bytes);
  }
  free(off);
  for (int f = 0; f < RF_FAMILY_COUNT; f++)
    out->windows += unit == RF_REGISTER_TENSOR ? RF_MAX(most[f], 1) : 1;
  out->modelled = c->latency_register > 0 || c->host_register > 0;
  /* Arenas allocated as windows are allocated (and zeroed) by the MPI library as it makes
   * them; windows per tensor lie over memory refit allocated and filled already. */
  int allocates = unit == RF_REGISTER_ARENA && c->host_register > 0;
  out->seconds = (double)out->windows * c->latency_register +
                 (allocates ? (double)out->peak_bytes / c->host_register : 0);
  return RF_OK;
}
