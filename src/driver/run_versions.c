/* Weight versions in refit run: the rule's refusals, a sequence of checkpoints (opened, their
 * reference checksums, the file of each version), the changed count of the last version moved
 * and its line under the table; the rollout ranks' version receipts, and a delta run's figures
 * (its encodings by tensor kind too) and their lines under the table. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delta/delta.h"
#include "run_versions.h"

rf_status rf_run_versions_setup(const rf_config *cfg, rf_update *update) {
  char why[256];
  RF_TRY(rf_update_parse(cfg->update, update, why, sizeof why)); /* the CLI checked it */
  if (update->kind != RF_UPDATE_NONE && cfg->checkpoint[0])
    return rf_fail(RF_ERR_USAGE,
                   "--update %s: the trainer's weights come from --checkpoint, whose files are "
                   "its versions; leave --update at none or leave --checkpoint out",
                   cfg->update);
  /* Every run walks the list from its first file, so that each run (mode, --delta choice)
   * measures the same steps from one version to the next; a run longer than the list would
   * have to move some step twice or another. */
  int n = rf_checkpoint_list_count(cfg->checkpoint);
  int64_t moves = cfg->warmup + cfg->iters;
  if (n > 1 && moves > n)
    return rf_fail(RF_ERR_USAGE,
                   "--checkpoint lists %d versions but each run moves %lld (--warmup %lld + "
                   "--iters %lld); list %lld checkpoints, or lower --warmup and --iters to %d "
                   "in all",
                   n, (long long)moves, (long long)cfg->warmup, (long long)cfg->iters,
                   (long long)moves, n);
  if (cfg->inject == RF_INJECT_SKIP_VERSION) {
    int deltas = cfg->delta.count > 0;
    for (int i = 0; i < cfg->delta.count; i++)
      deltas &= cfg->delta.items[i] != RF_DELTA_CHOICE_OFF;
    if (!deltas)
      return rf_fail(RF_ERR_USAGE,
                     "--inject skip-version: a rollout rank drops a delta refit, so every --delta "
                     "choice must send deltas (auto, sparse or bitmask), not off");
    if (cfg->warmup + cfg->iters < 3)
      return rf_fail(
          RF_ERR_USAGE,
          "--inject skip-version needs 3 iterations or more (--warmup plus --iters): the "
          "first is dense, a rollout rank drops the one before the last, and the last "
          "refits it dense");
  }
  return RF_OK;
}

/* ---- a sequence of checkpoints ---------------------------------------------------------- */

rf_checkpoint *rf_run_checkpoint_of(const rf_run_checkpoints *cks, int64_t k) {
  if (cks->count == 0)
    return NULL;
  return cks->files[cks->count > 1 && k >= 0 && k < cks->count ? k : 0];
}

rf_status rf_run_checkpoints_reference(rf_control *ctl, const rf_job *job, rf_run_checkpoints *cks,
                                       int64_t k, uint64_t **reference) {
  rf_checkpoint *ck = rf_run_checkpoint_of(cks, k);
  int64_t file = cks->count > 1 ? k : 0;
  if (!ck || cks->reference_of == file) /* the same on every rank: all or none go on */
    return RF_OK;
  int nt = job->model.tensor_count;
  uint64_t *mine = rf_calloc((size_t)nt, sizeof *mine, "checkpoint checksums");
  uint64_t *all = ctl->world_rank == 0 ? rf_calloc((size_t)nt, sizeof *all, "checksums") : NULL;
  rf_status st = mine && (all || ctl->world_rank != 0) ? RF_OK : RF_ERR_NOMEM;
  for (int t = ctl->world_rank; t < nt && st == RF_OK; t += ctl->world_size)
    st = rf_checkpoint_checksum(ck, t, &mine[t]);
  st = rf_control_agree(ctl, st);
  if (st == RF_OK)
    st = rf_control_reduce(ctl, ctl->world, mine, all, nt, MPI_UINT64_T, MPI_SUM,
                           "the checkpoint's checksums");
  free(mine);
  free(*reference);
  *reference = st == RF_OK ? all : NULL;
  if (st != RF_OK)
    free(all);
  cks->reference_of = st == RF_OK ? file : -1;
  return st;
}

rf_status rf_run_checkpoints_open(rf_control *ctl, const rf_config *cfg, const rf_job *job,
                                  rf_run_checkpoints *cks, uint64_t **reference) {
  memset(cks, 0, sizeof *cks);
  cks->reference_of = cks->counted_of = -1;
  int n = rf_checkpoint_list_count(cfg->checkpoint);
  cks->files = rf_calloc((size_t)n + 1, sizeof *cks->files, "the checkpoints");
  rf_status st = cks->files ? RF_OK : RF_ERR_NOMEM;
  /* Rank 0 says what is wrong with a file: the others would print the same line. */
  rf_log_push_quiet(ctl->world_rank != 0);
  for (int i = 0; i < n && st == RF_OK; i++, cks->count += st == RF_OK) {
    char path[RF_PATH_MAX];
    st = rf_checkpoint_list_item(cfg->checkpoint, i, path, sizeof path);
    if (st == RF_OK)
      st = job->quantized_checkpoint
               ? rf_checkpoint_open_quantized(path, &job->model, job->quantized_checkpoint,
                                              &cks->files[i])
               : rf_checkpoint_open(path, &job->model, &cks->files[i]);
  }
  rf_log_pop_quiet();
  RF_TRY(rf_control_agree(ctl, st));
  return rf_run_checkpoints_reference(ctl, job, cks, 0, reference);
}

void rf_run_checkpoints_close(rf_run_checkpoints *cks) {
  for (int i = 0; i < cks->count; i++)
    rf_checkpoint_close(cks->files[i]);
  free(cks->files);
  memset(cks, 0, sizeof *cks);
}

/* The elements of es bytes that differ between a and b (bytes a multiple of es, which divides
 * 8): eight bytes at a time, most of which agree between two steps of training. */
static int64_t differing(const char *a, const char *b, int64_t bytes, int es) {
  int64_t n = 0, i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t x, y;
    memcpy(&x, a + i, 8);
    memcpy(&y, b + i, 8);
    for (int k = 0; x != y && k < 8; k += es)
      n += memcmp(a + i + k, b + i + k, (size_t)es) != 0;
  }
  for (; i < bytes; i += es)
    n += memcmp(a + i, b + i, (size_t)es) != 0;
  return n;
}

/* The elements of tensor t that differ, bit for bit, between two checkpoints: read a batch of
 * rows of each at a time (at most 8 MiB), as stored in the model's dtype. */
static rf_status count_changed(rf_checkpoint *before, rf_checkpoint *after, const rf_tensor *t,
                               int64_t *changed) {
  int es = rf_tensor_esize(t);
  int64_t row_bytes = t->shape[1] * es;
  int64_t rows = RF_MAX(1, RF_MIN(t->shape[0], (8 << 20) / RF_MAX(row_bytes, 1)));
  size_t cap = (size_t)(rows * row_bytes) + 1;
  char *a = rf_malloc(cap, "a batch of checkpoint rows"), *b = rf_malloc(cap, "checkpoint rows");
  rf_status st = a && b ? RF_OK : RF_ERR_NOMEM;
  for (int64_t r0 = 0; r0 < t->shape[0] && st == RF_OK; r0 += rows) {
    rf_box box = {{r0, 0}, {RF_MIN(r0 + rows, t->shape[0]), t->shape[1]}};
    rf_region ra = rf_region_row_major(a, &box, es), rb = rf_region_row_major(b, &box, es);
    st = rf_checkpoint_read(before, t->id, &box, &ra);
    if (st == RF_OK)
      st = rf_checkpoint_read(after, t->id, &box, &rb);
    if (st == RF_OK)
      *changed += differing(a, b, rf_box_numel(&box) * es, es);
  }
  free(a);
  free(b);
  return st;
}

/* A sequence's version k against version k - 1, counted once per job (every run that ends at
 * the same version gets the same count), the tensors shared out over the ranks. */
static rf_status file_changes(rf_control *ctl, const rf_model *m, rf_run_checkpoints *cks,
                              int64_t k) {
  if (cks->counted_of == k)
    return RF_OK;
  int64_t mine = 0, all = 0, elements = 0;
  rf_status st = RF_OK;
  for (int t = 0; t < m->tensor_count; t++) {
    elements += m->tensors[t].numel;
    if (t % ctl->world_size == ctl->world_rank && st == RF_OK)
      st = count_changed(cks->files[k - 1], cks->files[k], &m->tensors[t], &mine);
  }
  RF_TRY(rf_control_agree(ctl, st));
  RF_TRY(rf_control_reduce(ctl, ctl->world, &mine, &all, 1, MPI_INT64_T, MPI_SUM,
                           "the changed elements of the last version"));
  cks->changed = all;
  cks->elements = elements;
  cks->counted_of = k;
  return RF_OK;
}

rf_status rf_run_receipts(rf_control *ctl, rf_engine *e) {
  int world = ctl->world_size, rollouts = e->plan->layout->rollout_ranks;
  rf_receipt held = rf_engine_receipt(e);
  int64_t mine[3] = {e->rollout_rank, held.k, (int64_t)held.id};
  int64_t *all = rf_calloc((size_t)world * 3, sizeof *all, "version receipts");
  rf_receipt *by_rank = rf_calloc((size_t)rollouts + 1, sizeof *by_rank, "version receipts");
  if (!all || !by_rank) {
    free(all);
    free(by_rank);
    return RF_ERR_NOMEM;
  }
  rf_status st = rf_control_allgather(ctl, ctl->world, mine, all, 3, MPI_INT64_T,
                                      "every rollout rank's version receipt");
  if (st == RF_ERR_TIMEOUT) {
    free(by_rank);
    return st; /* `all` stays allocated: MPI may still write into it */
  }
  for (int w = 0; w < world && st == RF_OK; w++)
    if (all[3 * w] >= 0 && all[3 * w] < rollouts)
      by_rank[all[3 * w]] = (rf_receipt){all[3 * w + 1], (uint64_t)all[3 * w + 2]};
  if (st == RF_OK)
    rf_engine_set_receipts(e, by_rank);
  free(all);
  free(by_rank);
  return st;
}

void rf_run_print_stale(const rf_engine *e) {
  if (e->delta_stale_ranks == 0)
    return;
  int ranks = e->plan->layout->rollout_ranks;
  rf_receipt kept = rf_engine_kept_receipt(e), held, other;
  printf("# delta %s: version %lld: ", rf_delta_choice_name(e->delta), (long long)e->moved.k);
  /* The stale ranks by the receipt they hold, each receipt once, in the order of its first
   * rank: "rollout ranks 1, 3 hold version 5 and rollout rank 2 holds no version". */
  int groups = 0;
  for (int r = 0; r < ranks; r++) {
    if (!rf_engine_stale(e, r, &held))
      continue;
    int first = 1, count = 0;
    for (int q = 0; q < ranks; q++)
      if (rf_engine_stale(e, q, &other) && other.k == held.k && other.id == held.id) {
        first &= q >= r;
        count++;
      }
    if (!first)
      continue;
    printf("%srollout rank%s", groups++ ? " and " : "", count > 1 ? "s" : "");
    for (int q = r, n = 0; q < ranks; q++)
      if (rf_engine_stale(e, q, &other) && other.k == held.k && other.id == held.id)
        printf("%s %d", n++ ? "," : "", q);
    const char *verb = count > 1 ? "hold" : "holds";
    if (held.k < 0)
      printf(" %s no version", verb);
    else
      printf(" %s %sversion %lld", verb, held.k == kept.k ? "another " : "", (long long)held.k);
  }
  printf(", not %lld: sent dense\n", (long long)kept.k);
  fflush(stdout);
}

rf_status rf_run_version_changes(rf_control *ctl, const rf_job *job, const rf_engine *e,
                                 rf_run_checkpoints *cks, double update_s, rf_run_result *res) {
  const rf_model *m = &job->model;
  res->version = e->moved.k;
  if (cks->count > 1 && e->moved.k > 0) {
    RF_TRY(file_changes(ctl, m, cks, e->moved.k));
    res->version_changed = cks->changed;
    res->version_elements = cks->elements;
    return rf_control_reduce(ctl, ctl->world, &update_s, &res->update_s, 1, MPI_DOUBLE, MPI_MAX,
                             "the time to read a version");
  }
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

/* Rank 0: the kinds with pieces into res, from tally[kind][field] (rf_engine's delta_kinds
 * summed over the ranks). */
static rf_status keep_kinds(const int64_t (*tally)[RF_DELTA_KIND_FIELDS], rf_run_result *res) {
  int kinds = 0;
  for (int k = 0; k < RF_T_KIND_COUNT; k++)
    kinds += tally[k][RF_DELTA_DENSE] + tally[k][RF_DELTA_SPARSE] + tally[k][RF_DELTA_BITMASK] > 0;
  res->delta_kinds = rf_calloc((size_t)kinds + 1, sizeof *res->delta_kinds, "delta kinds");
  if (!res->delta_kinds)
    return RF_ERR_NOMEM;
  for (int k = 0; k < RF_T_KIND_COUNT; k++) {
    const int64_t *row = tally[k];
    if (row[RF_DELTA_DENSE] + row[RF_DELTA_SPARSE] + row[RF_DELTA_BITMASK] == 0)
      continue;
    rf_delta_kind *out = &res->delta_kinds[res->delta_kind_count++];
    snprintf(out->kind, sizeof out->kind, "%s", rf_tensor_kind_name((rf_tensor_kind)k));
    for (int enc = 0; enc < RF_DELTA_ENCODING_COUNT; enc++)
      out->pieces[enc] = row[enc];
    out->elements = row[RF_DELTA_KIND_ELEMENTS];
    out->changed = row[RF_DELTA_KIND_CHANGED];
    out->wire_bytes = row[RF_DELTA_KIND_WIRE];
  }
  return RF_OK;
}

rf_status rf_run_delta_figures(rf_control *ctl, const rf_job *job, const rf_engine *e,
                               rf_run_result *res) {
  int64_t mine[9] = {e->delta_wire_bytes,
                     e->delta_pieces[0],
                     e->delta_pieces[1],
                     e->delta_pieces[2],
                     rf_engine_delta_kept_bytes(e),
                     e->delta_forward_bytes,
                     e->delta_stale_pieces,
                     e->delta_marked_pieces,
                     e->data->marks ? (int64_t)e->data->marks_bytes : 0};
  int64_t all[9] = {0};
  snprintf(res->delta, sizeof res->delta, "%s", rf_delta_choice_name(e->delta));
  if (e->delta == RF_DELTA_CHOICE_OFF)
    return RF_OK;
  RF_TRY(
      rf_control_reduce(ctl, ctl->world, mine, all, 9, MPI_INT64_T, MPI_SUM, "the delta figures"));
  res->delta_dense = e->delta_dense;
  /* Every byte on the wire: the trainer's, and where the plan forwards, the replicas'. */
  res->wire_dense_bytes = job->plan.wire_transfer_bytes + job->plan.wire_forward_bytes;
  res->wire_delta_forward_bytes = e->delta_dense ? job->plan.wire_forward_bytes : all[5];
  res->wire_delta_bytes =
      (e->delta_dense ? job->plan.wire_transfer_bytes : all[0]) + res->wire_delta_forward_bytes;
  for (int i = 0; i < 3; i++)
    res->delta_pieces[i] = all[1 + i];
  res->delta_kept_bytes = all[4];
  res->delta_stale_pieces = all[6];
  res->delta_marked_pieces = all[7];
  res->delta_marks_bytes = all[8];
  if (e->delta_dense)
    return RF_OK;
  int64_t sum[RF_T_KIND_COUNT][RF_DELTA_KIND_FIELDS] = {{0}};
  RF_TRY(rf_control_reduce(ctl, ctl->world, e->delta_kinds, sum,
                           RF_T_KIND_COUNT * RF_DELTA_KIND_FIELDS, MPI_INT64_T, MPI_SUM,
                           "the delta encodings by tensor kind"));
  return ctl->world_rank == 0 ? keep_kinds(sum, res) : RF_OK;
}

void rf_run_print_delta(const rf_run_result *res) {
  if (!res->delta[0] || !strcmp(res->delta, "off"))
    return;
  char stale[96] = "", forwarded[96] = ""; /* forwarded: fanout, hierarchical's replicas */
  char marked[128] = "";
  if (res->delta_marked_pieces > 0)
    snprintf(marked, sizeof marked,
             "; %lld pieces encoded from the trainer's marks of what changed (%lld bytes)",
             (long long)res->delta_marked_pieces, (long long)res->delta_marks_bytes);
  if (res->delta_stale_pieces > 0)
    snprintf(stale, sizeof stale, " (%lld pieces of the run dense for a stale receipt)",
             (long long)res->delta_stale_pieces);
  if (res->wire_delta_forward_bytes > 0)
    snprintf(forwarded, sizeof forwarded, ", %lld of them forwarded between replicas",
             (long long)res->wire_delta_forward_bytes);
  if (res->delta_dense)
    printf("# delta %s: version %lld: dense (the rollout holds no version), %lld wire bytes%s\n",
           res->delta, (long long)res->version, (long long)res->wire_delta_bytes, forwarded);
  else
    printf("# delta %s: version %lld: %lld wire bytes (%.4g %% of the dense %lld%s); pieces: %lld "
           "dense, %lld sparse, %lld bitmask%s; the trainer keeps %lld bytes of its previous "
           "version%s\n",
           res->delta, (long long)res->version, (long long)res->wire_delta_bytes,
           100.0 * (double)res->wire_delta_bytes / (double)res->wire_dense_bytes,
           (long long)res->wire_dense_bytes, forwarded, (long long)res->delta_pieces[0],
           (long long)res->delta_pieces[1], (long long)res->delta_pieces[2], stale,
           (long long)res->delta_kept_bytes, marked);
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
  char file[RF_PATH_MAX];
  if (rf_checkpoint_list_count(cfg->checkpoint) > 1 &&
      rf_checkpoint_list_item(cfg->checkpoint, (int)res->version, file, sizeof file) == RF_OK) {
    printf("# checkpoint versions: version %lld (%s), %.4g %% of elements changed (%lld of %lld); "
           "the trainer read each version in %.3g ms, outside the timed phases\n",
           (long long)res->version, file,
           100.0 * (double)res->version_changed / (double)res->version_elements,
           (long long)res->version_changed, (long long)res->version_elements, res->update_s * 1e3);
    fflush(stdout);
    return;
  }
  printf("# update %s: version %lld, %.4g %% of elements changed (%lld of %lld); the trainer "
         "made each version in %.3g ms, outside the timed phases\n",
         cfg->update, (long long)res->version,
         100.0 * (double)res->version_changed / (double)res->version_elements,
         (long long)res->version_changed, (long long)res->version_elements, res->update_s * 1e3);
  fflush(stdout);
}
