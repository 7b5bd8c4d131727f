/* The setup step `register` of a one-sided transport (sim.h, "registration"): the windows each
 * rank makes and the bytes it registers, counted from the engine's own arena layout
 * (rf_buffers_offsets), and their time on the cluster. */
#include <stdlib.h>

#include "sim_internal.h"

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
      int64_t arena;
      int64_t held = rf_buffers_tensor_starts(plan, (rf_buffer_family)f, rank, off, &arena);
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
