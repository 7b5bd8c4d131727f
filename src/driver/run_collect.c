/* Collecting a run on rank 0: verification verdicts, timings and peaks, each over one bounded
 * collective of the control plane. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_collect.h"

rf_status rf_run_verify(rf_control *ctl, const rf_job *job, rf_engine *e, rf_checkpoint *ck,
                        int full, int checksum, run_record *rec, rf_run_result *res) {
  const rf_model *m = &job->model;
  int nt = m->tensor_count, replicas = job->rollout.dp;
  res->wrong = -1;
  res->checksum_bad = -1;
  /* The checks are local work that grows with the model: the ranks tick while they run, so
   * that a rank done early waits for the others without its timeout running out. */
  rf_engine_set_progress(e, rf_control_busy, ctl);
  if (full) {
    rf_control_busy_begin(ctl);
    int64_t wrong = rf_engine_check(e, ck), total = 0;
    RF_TRY(rf_control_agree_busy(ctl, wrong < 0 ? RF_ERR_IO : RF_OK));
    RF_TRY(rf_control_reduce(ctl, ctl->world, &wrong, &total, 1, MPI_INT64_T, MPI_SUM,
                             "the element check"));
    res->wrong = total;
  }
  if (!checksum)
    return RF_OK;
  size_t n = (size_t)nt * (size_t)(1 + replicas);
  uint64_t *local = rf_calloc(n, sizeof *local, "checksums");
  uint64_t *sum = rf_calloc(n, sizeof *sum, "checksums");
  free(rec->verdicts);
  rec->verdicts = ctl->world_rank == 0 ? rf_calloc((size_t)nt, 1, "checksum verdicts") : NULL;
  rf_status st = local && sum && (rec->verdicts || ctl->world_rank != 0) ? RF_OK : RF_ERR_NOMEM;
  if (st == RF_OK) {
    rf_control_busy_begin(ctl);
    st = rf_control_agree_busy(ctl, rf_engine_checksums(e, local, local + nt));
  }
  if (st == RF_OK)
    st = rf_control_reduce(ctl, ctl->world, local, sum, (int)n, MPI_UINT64_T, MPI_SUM,
                           "the checksums");
  const uint64_t *ref = rec->reference;
  if (st == RF_OK && ctl->world_rank == 0) {
    res->checksum_bad = 0;
    for (int t = 0; t < nt; t++) {
      /* An fp8 tensor's rollout checksum is of its fp8 bytes and scales (rf_fp8_checksum), which
       * a trainer quantizing in flight does not hold: its replicas must agree with each other,
       * and --verify full compares every byte and scale with the reference quantization. A
       * quantized checkpoint gives that checksum for the file's bytes and scales
       * (rf_checkpoint_checksum), and a trainer that read it sums its shards so too. */
      int fp8 = rf_layout_fp8(&job->layout, t);
      int fp8_file = fp8 && rf_tensor_quantized(&m->tensors[t]);
      uint64_t want = fp8_file && ref ? ref[t] : fp8 ? sum[nt + t] : sum[t];
      int bad = (!fp8 || fp8_file) && ref && ref[t] != sum[t];
      for (int p = 0; p < replicas; p++)
        bad |= sum[nt + (size_t)p * nt + t] != want;
      /* What the results file records: a lone replica's fp8 checksum without a checkpoint's
       * to meet was compared with nothing (only --verify full checks its bytes). */
      int compared = !fp8 || (fp8_file && ref) || replicas > 1;
      rec->verdicts[t] = (int8_t)(bad ? 0 : compared ? 1 : -1);
      if (!bad || res->checksum_bad++ >= 4)
        continue;
      if (fp8_file && ref && (sum[nt + t] != want || sum[t] != want)) {
        RF_ERROR("verify: checksum of %s (fp8) differs: trainer %016llx, rollout %016llx, "
                 "checkpoint %016llx",
                 m->tensors[t].name, (unsigned long long)sum[t], (unsigned long long)sum[nt + t],
                 (unsigned long long)want);
        continue;
      }
      if (fp8) {
        for (int p = 1; p < replicas; p++)
          if (sum[nt + (size_t)p * nt + t] != want) {
            RF_ERROR("verify: checksum of %s (fp8) differs between rollout replicas: replica 0 "
                     "%016llx, replica %d %016llx",
                     m->tensors[t].name, (unsigned long long)want, p,
                     (unsigned long long)sum[nt + (size_t)p * nt + t]);
            break;
          }
        continue;
      }
      /* The checkpoint's checksum only where there is one (no zeros standing in for it). */
      char checkpoint[48] = "";
      if (ref)
        snprintf(checkpoint, sizeof checkpoint, ", checkpoint %016llx", (unsigned long long)ref[t]);
      RF_ERROR("verify: checksum of %s differs: trainer %016llx, rollout %016llx%s",
               m->tensors[t].name, (unsigned long long)sum[t], (unsigned long long)sum[nt + t],
               checkpoint);
    }
  }
  free(local);
  free(rec->checksums);
  rec->checksums = ctl->world_rank == 0 ? sum : NULL; /* kept for the results file */
  if (ctl->world_rank != 0)
    free(sum);
  return st;
}

rf_status rf_run_collect(rf_control *ctl, const rf_engine *e, rf_mode mode, const double *mine,
                         double *all, int iters, rf_run_result *res) {
  int count = iters * RF_PHASE_COUNT, ranks = ctl->world_size;
  /* The gather lands rank by rank ([rank, iteration, phase]); the result and the results file
   * hold [iteration, rank, phase], so that an iteration's ranks lie together. (Before
   * 2026-12-05 the gathered order was taken for that one, and each "iteration" mixed several.) */
  double *by_rank =
      ctl->world_rank == 0
          ? rf_malloc((size_t)count * (size_t)ranks * sizeof *by_rank, "gathered timings")
          : NULL;
  if (ctl->world_rank == 0 && !by_rank)
    return RF_ERR_NOMEM;
  rf_status st =
      rf_control_gather(ctl, ctl->world, mine, by_rank, count, MPI_DOUBLE, "the timings");
  for (int rank = 0; by_rank && st == RF_OK && rank < ranks; rank++)
    for (int it = 0; it < iters; it++)
      memcpy(all + ((size_t)it * (size_t)ranks + (size_t)rank) * RF_PHASE_COUNT,
             by_rank + ((size_t)rank * (size_t)iters + (size_t)it) * RF_PHASE_COUNT,
             RF_PHASE_COUNT * sizeof *all);
  free(by_rank);
  RF_TRY(st);
  /* A fused run double-buffers its staging (each lane's), so twice the bytes are live at once. */
  int slots = mode == RF_MODE_FUSED ? 2 : 1;
  int64_t staging = (int64_t)(e->staging_bytes[0][0] + e->staging_bytes[1][0] +
                              e->staging_bytes[0][1] + e->staging_bytes[1][1]) *
                    slots;
  int64_t peaks[2] = {staging, rf_mem_peak_rss()}, maxes[2] = {0, 0};
  int64_t messages = e->messages, total = 0;
  RF_TRY(rf_control_reduce(ctl, ctl->world, peaks, maxes, 2, MPI_INT64_T, MPI_MAX,
                           "the memory peaks"));
  RF_TRY(rf_control_reduce(ctl, ctl->world, &messages, &total, 1, MPI_INT64_T, MPI_SUM,
                           "the message count"));
  res->peak_staging = maxes[0];
  res->peak_rss = maxes[1];
  res->messages = total;
  return RF_OK;
}

void rf_run_describe_result(const rf_config *cfg, const rf_job *job, const char *transport,
                            rf_mode mode, rf_run_result *res) {
  const rf_plan *plan = &job->plan;
  snprintf(res->mode, sizeof res->mode, "%s", rf_mode_name(mode));
  snprintf(res->plan, sizeof res->plan, "%s", rf_plan_kind_name(plan->kind));
  snprintf(res->transport, sizeof res->transport, "%s", transport);
  snprintf(res->verify, sizeof res->verify, "%s", rf_verify_level_name(cfg->verify));
  res->model_bytes = job->model.total_bytes;
  /* Fanout's replicas receive part of their bytes from each other: algbw counts what one
   * replica receives from anyone, aggbw every byte on a link, forwarded ones too. */
  res->replica_bytes = (plan->transfer_bytes + plan->forward_bytes) / job->rollout.dp;
  res->transfer_bytes = plan->transfer_bytes + plan->reshape_bytes + plan->forward_bytes;
  res->pieces = plan->piece_count;
  res->bucket_size = cfg->bucket_size;
  res->iterations = (int)cfg->iters;
}
