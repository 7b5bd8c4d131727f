/* Weight versions in refit run: the rule's refusals, the changed count of the last version
 * moved, a delta run's figures (its encodings by tensor kind too) and their lines under the
 * table. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "delta/delta.h"
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

/* A tensor kind's tally: its pieces per encoding (delta.h's table), then these. */
enum { KIND_ELEMENTS = RF_DELTA_ENCODING_COUNT, KIND_CHANGED, KIND_WIRE, KIND_FIELDS };

/* The pieces this rank sent in the last iteration, by tensor kind, into tally[kind][field].
 * The engine counts pieces per encoding in total only; a piece's encoding is a function of its
 * elements and changed count (the one asked for, or rf_delta_choose under auto), and its
 * changed count one of the version rule (rf_version_changed_count), so the split is taken
 * again here from the same inputs, and kept only where its totals match the engine's. */
static void tally_kinds(const rf_engine *e, int64_t *tally) {
  const rf_schedule *s = &e->transfer;
  const rf_model *m = e->plan->layout->model;
  for (int i = 0; i < s->chunk_count; i++) {
    const rf_chunk *k = &s->chunks[i];
    const rf_piece *p = &e->plan->pieces[k->piece];
    if (p->src != e->trainer_rank)
      continue;
    const rf_tensor *t = &m->tensors[p->tensor];
    int64_t n = rf_box_numel(&k->box);
    int64_t c = rf_version_changed_count(&k->box, t, e->seed, &e->moved);
    int esize = rf_tensor_esize(t);
    rf_delta_encoding enc = e->delta == RF_DELTA_CHOICE_SPARSE    ? RF_DELTA_SPARSE
                            : e->delta == RF_DELTA_CHOICE_BITMASK ? RF_DELTA_BITMASK
                                                                  : rf_delta_choose(n, c, esize);
    int64_t *row = tally + (size_t)t->kind * KIND_FIELDS;
    row[enc]++;
    row[KIND_ELEMENTS] += n;
    row[KIND_CHANGED] += c;
    if (p->dst != e->rollout_rank) /* a local piece never crosses a wire */
      row[KIND_WIRE] += rf_delta_size(enc, n, c, esize);
  }
}

/* Rank 0: the kinds with pieces into res, when their totals are the engine's. */
static rf_status keep_kinds(const int64_t *tally, rf_run_result *res) {
  int64_t pieces[RF_DELTA_ENCODING_COUNT] = {0}, wire = 0;
  int kinds = 0;
  for (int k = 0; k < RF_T_KIND_COUNT; k++) {
    const int64_t *row = tally + (size_t)k * KIND_FIELDS;
    for (int enc = 0; enc < RF_DELTA_ENCODING_COUNT; enc++)
      pieces[enc] += row[enc];
    wire += row[KIND_WIRE];
    kinds += row[RF_DELTA_DENSE] + row[RF_DELTA_SPARSE] + row[RF_DELTA_BITMASK] > 0;
  }
  if (wire != res->wire_delta_bytes || memcmp(pieces, res->delta_pieces, sizeof pieces) != 0) {
    RF_WARN("delta %s: the encodings by tensor kind, taken again from the version rule, come to "
            "%lld wire bytes where the engine sent %lld; they are left out of the results",
            res->delta, (long long)wire, (long long)res->wire_delta_bytes);
    return RF_OK;
  }
  res->delta_kinds = rf_calloc((size_t)kinds + 1, sizeof *res->delta_kinds, "delta kinds");
  if (!res->delta_kinds)
    return RF_ERR_NOMEM;
  for (int k = 0; k < RF_T_KIND_COUNT; k++) {
    const int64_t *row = tally + (size_t)k * KIND_FIELDS;
    if (row[RF_DELTA_DENSE] + row[RF_DELTA_SPARSE] + row[RF_DELTA_BITMASK] == 0)
      continue;
    rf_delta_kind *out = &res->delta_kinds[res->delta_kind_count++];
    snprintf(out->kind, sizeof out->kind, "%s", rf_tensor_kind_name((rf_tensor_kind)k));
    for (int enc = 0; enc < RF_DELTA_ENCODING_COUNT; enc++)
      out->pieces[enc] = row[enc];
    out->elements = row[KIND_ELEMENTS];
    out->changed = row[KIND_CHANGED];
    out->wire_bytes = row[KIND_WIRE];
  }
  return RF_OK;
}

rf_status rf_run_delta_figures(rf_control *ctl, const rf_job *job, const rf_engine *e,
                               rf_run_result *res) {
  int64_t mine[5] = {e->delta_wire_bytes, e->delta_pieces[0], e->delta_pieces[1],
                     e->delta_pieces[2], rf_engine_delta_kept_bytes(e)};
  int64_t all[5] = {0};
  snprintf(res->delta, sizeof res->delta, "%s", rf_delta_choice_name(e->delta));
  if (e->delta == RF_DELTA_CHOICE_OFF)
    return RF_OK;
  RF_TRY(
      rf_control_reduce(ctl, ctl->world, mine, all, 5, MPI_INT64_T, MPI_SUM, "the delta figures"));
  res->delta_dense = e->delta_dense;
  res->wire_delta_bytes = e->delta_dense ? job->plan.transfer_bytes : all[0];
  for (int i = 0; i < 3; i++)
    res->delta_pieces[i] = all[1 + i];
  res->delta_kept_bytes = all[4];
  if (e->delta_dense)
    return RF_OK;
  int64_t kinds[RF_T_KIND_COUNT * KIND_FIELDS] = {0}, sum[RF_T_KIND_COUNT * KIND_FIELDS] = {0};
  tally_kinds(e, kinds);
  RF_TRY(rf_control_reduce(ctl, ctl->world, kinds, sum, RF_T_KIND_COUNT * KIND_FIELDS, MPI_INT64_T,
                           MPI_SUM, "the delta encodings by tensor kind"));
  return ctl->world_rank == 0 ? keep_kinds(sum, res) : RF_OK;
}

void rf_run_print_delta(const rf_run_result *res) {
  if (!res->delta[0] || !strcmp(res->delta, "off"))
    return;
  if (res->delta_dense)
    printf("# delta %s: version %lld: dense (the rollout holds no version), %lld wire bytes\n",
           res->delta, (long long)res->version, (long long)res->wire_delta_bytes);
  else
    printf("# delta %s: version %lld: %lld wire bytes (%.4g %% of the dense %lld); pieces: %lld "
           "dense, %lld sparse, %lld bitmask; the trainer keeps %lld bytes of its previous "
           "version\n",
           res->delta, (long long)res->version, (long long)res->wire_delta_bytes,
           100.0 * (double)res->wire_delta_bytes / (double)res->transfer_bytes,
           (long long)res->transfer_bytes, (long long)res->delta_pieces[0],
           (long long)res->delta_pieces[1], (long long)res->delta_pieces[2],
           (long long)res->delta_kept_bytes);
  if (res->delta_kind_count > 0) {
    printf("# delta %s: pieces by tensor kind (dense/sparse/bitmask):", res->delta);
    for (int k = 0; k < res->delta_kind_count; k++) {
      const rf_delta_kind *d = &res->delta_kinds[k];
      printf("%s %s %lld/%lld/%lld", k ? "," : "", d->kind, (long long)d->pieces[0],
             (long long)d->pieces[1], (long long)d->pieces[2]);
    }
    printf("\n");
  }
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
