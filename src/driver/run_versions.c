/* Weight versions in refit run: the rule's refusals, the changed count of the last version
 * moved and its line under the table. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "run_versions.h"

rf_status rf_run_versions_setup(const rf_config *cfg, rf_update *update) {
  char why[256];
  RF_TRY(rf_update_parse(cfg->update, update, why, sizeof why)); /* the CLI checked it */
  if (update->kind != RF_UPDATE_NONE && cfg->checkpoint[0])
    return rf_fail(RF_ERR_USAGE,
                   "--update %s: the trainer's weights come from --checkpoint, which holds one "
                   "version; leave --update at none or leave --checkpoint out",
                   cfg->update);
  return RF_OK;
}

rf_status rf_run_version_changes(rf_control *ctl, const rf_job *job, const rf_engine *e,
                                 double update_s, rf_run_result *res) {
  const rf_model *m = &job->model;
  res->version = e->moved.k;
  if (e->moved.update.kind == RF_UPDATE_NONE)
    return RF_OK;
  /* Tensor t is counted by world rank t mod world, whatever its role: the counts need no
   * memory, only the rule. */
  int64_t mine = 0, all = 0, elements = 0;
  for (int t = 0; t < m->tensor_count; t++) {
    elements += m->tensors[t].numel;
    if (t % ctl->world_size == ctl->world_rank) {
      rf_box whole = rf_box_whole(&m->tensors[t]);
      mine += rf_version_changed_count(&whole, &m->tensors[t], e->seed, &e->moved);
    }
  }
  RF_TRY(rf_control_reduce(ctl, ctl->world, &mine, &all, 1, MPI_INT64_T, MPI_SUM,
                           "the changed elements of the last version"));
  RF_TRY(rf_control_reduce(ctl, ctl->world, &update_s, &res->update_s, 1, MPI_DOUBLE, MPI_MAX,
                           "the time to make a version"));
  res->version_changed = all;
  res->version_elements = elements;
  return RF_OK;
}

rf_status rf_run_delta_figures(rf_control *ctl, const rf_job *job, const rf_engine *e,
                               rf_run_result *res) {
  int64_t mine[6] = {
      e->delta_wire_bytes,           e->delta_pieces[0],    e->delta_pieces[1], e->delta_pieces[2],
      rf_engine_delta_kept_bytes(e), e->delta_forward_bytes};
  int64_t all[6] = {0};
  snprintf(res->delta, sizeof res->delta, "%s", rf_delta_choice_name(e->delta));
  if (e->delta == RF_DELTA_CHOICE_OFF)
    return RF_OK;
  RF_TRY(
      rf_control_reduce(ctl, ctl->world, mine, all, 6, MPI_INT64_T, MPI_SUM, "the delta figures"));
  res->delta_dense = e->delta_dense;
  /* Every byte on the wire: the trainer's, and where the plan forwards, the replicas'. */
  res->wire_delta_forward_bytes = e->delta_dense ? job->plan.forward_bytes : all[5];
  res->wire_delta_bytes =
      (e->delta_dense ? job->plan.transfer_bytes : all[0]) + res->wire_delta_forward_bytes;
  for (int i = 0; i < 3; i++)
    res->delta_pieces[i] = all[1 + i];
  res->delta_kept_bytes = all[4];
  return RF_OK;
}

void rf_run_print_delta(const rf_run_result *res) {
  if (!res->delta[0] || !strcmp(res->delta, "off"))
    return;
  char forwarded[96] = ""; /* fanout, hierarchical: the replicas' part of the wire bytes */
  if (res->wire_delta_forward_bytes > 0)
    snprintf(forwarded, sizeof forwarded, ", %lld of them forwarded between replicas",
             (long long)res->wire_delta_forward_bytes);
  if (res->delta_dense)
    printf("# delta %s: version %lld: dense (the rollout holds no version), %lld wire bytes%s\n",
           res->delta, (long long)res->version, (long long)res->wire_delta_bytes, forwarded);
  else
    printf("# delta %s: version %lld: %lld wire bytes (%.4g %% of the dense %lld%s); pieces: %lld "
           "dense, %lld sparse, %lld bitmask; the trainer keeps %lld bytes of its previous "
           "version\n",
           res->delta, (long long)res->version, (long long)res->wire_delta_bytes,
           100.0 * (double)res->wire_delta_bytes / (double)res->transfer_bytes,
           (long long)res->transfer_bytes, forwarded, (long long)res->delta_pieces[0],
           (long long)res->delta_pieces[1], (long long)res->delta_pieces[2],
           (long long)res->delta_kept_bytes);
  fflush(stdout);
}

void rf_run_print_update(const rf_config *cfg, const rf_run_result *res) {
  if (res->version_elements <= 0)
    return;
  printf("# update %s: version %lld, %.4g %% of elements changed (%lld of %lld); the trainer "
         "made each version in %.3g ms, outside the timed phases\n",
         cfg->update, (long long)res->version,
         100.0 * (double)res->version_changed / (double)res->version_elements,
         (long long)res->version_changed, (long long)res->version_elements, res->update_s * 1e3);
  fflush(stdout);
}
