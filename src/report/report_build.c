/* The report's tables, built from the loaded results files. Times are shown in milliseconds
 * and bandwidths in GB/s (10^9 bytes/s); sizes stay in bytes. Skipped sweep combinations
 * appear only in the runs and status tables, since they measured nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_internal.h"

#define MS(s) ((s)*1e3)

static const char *const runs_head[] = {
    "file",       "run",         "model",          "trainer",     "rollout",
    "placement",  "plan",        "mode",           "transport",   "bucket_size_bytes",
    "iterations", "ranks",       "time_median_ms", "time_p99_ms", "algbw_GBps",
    "status",     "slurm_job_id"};
static const int runs_digits[] = {0, 0, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 3, 3, 3, -1, -1};

static const char *const status_head[] = {
    "file",  "run",          "mode",    "bucket_size_bytes", "status",
    "wrong", "checksum_bad", "verdict", "skip_reason"};
static const int status_digits[] = {0, 0, -1, 0, -1, 0, 0, -1, -1};

static const char *const modes_head[] = {
    "file", "trainer",        "rollout",     "placement", "plan", "mode", "bucket_size_bytes",
    "run",  "time_median_ms", "time_p99_ms", "algbw_GBps"};
static const int modes_digits[] = {0, -1, -1, -1, -1, -1, 0, 0, 3, 3, 3};

/* trainer_send_bytes: what leaves the trainer per iteration, the number that tells p2p (a copy
 * per replica) from fanout (one copy) at a glance. */
static const char *const layouts_head[] = {"file",
                                           "trainer",
                                           "rollout",
                                           "placement",
                                           "plan",
                                           "runs",
                                           "best_time_ms",
                                           "best_mode",
                                           "best_bucket_size_bytes",
                                           "best_algbw_GBps",
                                           "trainer_send_bytes"};
static const int layouts_digits[] = {0, -1, -1, -1, -1, 0, 3, -1, 0, 3, 0};

/* Every phase up to total, in result.h's order (a delta run's encode and apply, a dense run's
 * pack and unpack; the others zero). */
static const char *const phases_head[] = {
    "file",      "run",     "mode",        "bucket_size_bytes", "setup_ms", "reshape_ms",
    "encode_ms", "pack_ms", "transfer_ms", "unpack_ms",         "apply_ms", "total_ms"};
static const int phases_digits[] = {0, 0, -1, 0, 3, 3, 3, 3, 3, 3, 3, 3};
_Static_assert(RF_ARRAY_LEN(phases_head) == 4 + RF_PHASE_TOTAL + 1,
               "one column per phase up to total");

static const char *const spread_head[] = {"file",
                                          "run",
                                          "mode",
                                          "bucket_size_bytes",
                                          "samples",
                                          "min_ms",
                                          "median_ms",
                                          "p99_ms",
                                          "max_ms",
                                          "fastest_rank_median_ms",
                                          "slowest_rank_median_ms"};
static const int spread_digits[] = {0, 0, -1, 0, 0, 3, 3, 3, 3, 3, 3};

static const char *const limits_head[] = {"file",
                                          "run",
                                          "mode",
                                          "bucket_size_bytes",
                                          "time_median_ms",
                                          "limit_memcpy_ms",
                                          "memcpy_pct",
                                          "limit_device_copy_ms",
                                          "device_copy_pct",
                                          "limit_mpi_ms",
                                          "mpi_pct",
                                          "limit_nccl_ms",
                                          "nccl_pct",
                                          "calibration"};
static const int limits_digits[] = {0, 0, -1, 0, 3, 3, 1, 3, 1, 3, 1, 3, 1, -1};

static const char *const compare_head[] = {
    "file_b", "model",     "trainer",   "rollout",           "placement",
    "plan",   "mode",      "transport", "bucket_size_bytes", "run_a",
    "run_b",  "time_a_ms", "time_b_ms", "ratio_b_over_a"};
static const int compare_digits[] = {0, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 3, 3, 3};

#define INIT(t, id, title, name)                                                                   \
  rf_report_table_init(t, id, title, (int)RF_ARRAY_LEN(name##_head), name##_head, name##_digits)

/* The first columns most tables share: which file, which run, its mode and bucket size. */
static void run_key(rf_report_cell *row, int file, const rf_loaded_run *r) {
  rf_cell_int(&row[0], file);
  rf_cell_int(&row[1], r->number);
  rf_cell_text(&row[2], "%s", r->mode);
  rf_cell_int(&row[3], r->bucket_size);
}

static const char *verdict(const rf_loaded_run *r) {
  if (r->skipped)
    return "skipped";
  if (r->simulated)
    return "simulated";
  return strcmp(r->status, "RF_OK") == 0 && r->wrong <= 0 && r->checksum_bad <= 0 ? "PASS" : "FAIL";
}

static rf_status add_run(rf_report_tables *t, int file, const rf_loaded_run *r) {
  rf_report_cell *row = rf_report_table_row(&t->runs);
  if (!row)
    return RF_ERR_NOMEM;
  rf_cell_int(&row[0], file);
  rf_cell_int(&row[1], r->number);
  const char *text[] = {r->model, r->trainer, r->rollout,  r->placement,
                        r->plan,  r->mode,    r->transport};
  for (int i = 0; i < (int)RF_ARRAY_LEN(text); i++)
    rf_cell_text(&row[2 + i], "%s", text[i]);
  rf_cell_int(&row[9], r->bucket_size);
  /* A skipped combination never ran: its counts are left empty rather than shown as -1. */
  if (r->iterations >= 0)
    rf_cell_int(&row[10], r->iterations);
  if (r->ranks >= 0)
    rf_cell_int(&row[11], r->ranks);
  rf_cell_num(&row[12], MS(r->time_median_s));
  rf_cell_num(&row[13], MS(r->time_p99_s));
  rf_cell_num(&row[14], r->algbw_GBps);
  rf_cell_text(&row[15], "%s", r->status);
  rf_cell_text(&row[16], "%s", r->slurm_job_id);

  if (!(row = rf_report_table_row(&t->status)))
    return RF_ERR_NOMEM;
  run_key(row, file, r);
  rf_cell_text(&row[4], "%s", r->status);
  rf_cell_int(&row[5], r->wrong);
  rf_cell_int(&row[6], r->checksum_bad);
  rf_cell_text(&row[7], "%s", verdict(r));
  rf_cell_text(&row[8], "%s", r->skip_reason);
  if (!report_measured(r))
    return RF_OK; /* a prediction is not set beside the measurements it would be mistaken for */

  if (!(row = rf_report_table_row(&t->modes)))
    return RF_ERR_NOMEM;
  rf_cell_int(&row[0], file);
  const char *layout[] = {r->trainer, r->rollout, r->placement, r->plan, r->mode};
  for (int i = 0; i < (int)RF_ARRAY_LEN(layout); i++)
    rf_cell_text(&row[1 + i], "%s", layout[i]);
  rf_cell_int(&row[6], r->bucket_size);
  rf_cell_int(&row[7], r->number);
  rf_cell_num(&row[8], MS(r->time_median_s));
  rf_cell_num(&row[9], MS(r->time_p99_s));
  rf_cell_num(&row[10], r->algbw_GBps);

  if (!(row = rf_report_table_row(&t->phases)))
    return RF_ERR_NOMEM;
  run_key(row, file, r);
  for (int p = 0; p <= RF_PHASE_TOTAL; p++)
    rf_cell_num(&row[4 + p], r->has_summary ? MS(r->phase_median[p]) : NAN);

  if (!(row = rf_report_table_row(&t->limits)))
    return RF_ERR_NOMEM;
  run_key(row, file, r);
  rf_cell_num(&row[4], MS(r->time_median_s));
  int calibrated = 0;
  for (int l = 0; l < RF_LIMIT_COUNT; l++) {
    double limit = r->limit_s[l];
    calibrated |= !isnan(limit);
    rf_cell_num(&row[5 + 2 * l], MS(limit));
    rf_cell_num(&row[6 + 2 * l], limit / r->time_median_s * 100.0);
  }
  rf_cell_text(&row[13], "%s", calibrated ? "calibrated" : "not calibrated (run with --calibrate)");
  return RF_OK;
}

/* The spread of `total` over every iteration and rank (not only the slowest rank), and how far
 * apart the ranks' own medians lie. */
static rf_status add_spread(rf_report_table *t, int file, const rf_loaded_run *r) {
  int n = r->timing_iterations * r->timing_ranks;
  if (!report_measured(r) || n == 0)
    return RF_OK;
  const rf_stats s = r->spread;
  double fastest = r->rank_median_fastest, slowest = r->rank_median_slowest;
  rf_report_cell *row = rf_report_table_row(t);
  if (!row)
    return RF_ERR_NOMEM;
  run_key(row, file, r);
  rf_cell_int(&row[4], n);
  double v[] = {s.min, s.median, s.p99, s.max, fastest, slowest};
  for (int i = 0; i < (int)RF_ARRAY_LEN(v); i++)
    rf_cell_num(&row[5 + i], MS(v[i]));
  return RF_OK;
}

static int same_layout(const rf_loaded_run *a, const rf_loaded_run *b) {
  return strcmp(a->trainer, b->trainer) == 0 && strcmp(a->rollout, b->rollout) == 0 &&
         strcmp(a->placement, b->placement) == 0 && strcmp(a->plan, b->plan) == 0;
}

/* One row per layout (trainer -> rollout, placement) and plan kind: its fastest run. */
static rf_status add_layouts(rf_report_table *t, int file, const rf_loaded_results *f) {
  for (int i = 0; i < f->run_count; i++) {
    const rf_loaded_run *r = &f->runs[i], *best = NULL;
    int first = 1, runs = 0;
    for (int j = 0; j < f->run_count; j++) {
      const rf_loaded_run *o = &f->runs[j];
      if (!report_measured(o) || !same_layout(r, o))
        continue;
      first &= j >= i;
      runs++;
      if (!isnan(o->time_median_s) && (!best || o->time_median_s < best->time_median_s))
        best = o;
    }
    if (!report_measured(r) || !first || !best)
      continue;
    rf_report_cell *row = rf_report_table_row(t);
    if (!row)
      return RF_ERR_NOMEM;
    rf_cell_int(&row[0], file);
    const char *text[] = {r->trainer, r->rollout, r->placement, r->plan};
    for (int k = 0; k < (int)RF_ARRAY_LEN(text); k++)
      rf_cell_text(&row[1 + k], "%s", text[k]);
    rf_cell_int(&row[5], runs);
    rf_cell_num(&row[6], MS(best->time_median_s));
    rf_cell_text(&row[7], "%s", best->mode);
    rf_cell_int(&row[8], best->bucket_size);
    rf_cell_num(&row[9], best->algbw_GBps);
    if (best->trainer_send_bytes >= 0) /* files from before the plan group leave it empty */
      rf_cell_int(&row[10], best->trainer_send_bytes);
  }
  return RF_OK;
}

int report_same_config(const rf_loaded_run *a, const rf_loaded_run *b) {
  return strcmp(a->model, b->model) == 0 && same_layout(a, b) && strcmp(a->mode, b->mode) == 0 &&
         strcmp(a->transport, b->transport) == 0 && a->bucket_size == b->bucket_size;
}

/* Each run of the reference is matched with the first run of `b` of the same configuration
 * that no earlier reference run took, so repeated configurations pair up in order. */
static rf_status add_compare(rf_report_table *t, const rf_loaded_results *a,
                             const rf_loaded_results *b, int file_b) {
  char *taken = rf_calloc((size_t)b->run_count + 1, 1, "matched runs");
  if (!taken)
    return RF_ERR_NOMEM;
  rf_status st = RF_OK;
  for (int i = 0; i < a->run_count && st == RF_OK; i++) {
    const rf_loaded_run *ra = &a->runs[i];
    if (!report_measured(ra))
      continue;
    for (int j = 0; j < b->run_count; j++) {
      const rf_loaded_run *rb = &b->runs[j];
      if (taken[j] || !report_measured(rb) || !report_same_config(ra, rb))
        continue;
      taken[j] = 1;
      rf_report_cell *row = rf_report_table_row(t);
      if (!row) {
        st = RF_ERR_NOMEM;
        break;
      }
      rf_cell_int(&row[0], file_b);
      const char *text[] = {ra->model, ra->trainer, ra->rollout,  ra->placement,
                            ra->plan,  ra->mode,    ra->transport};
      for (int k = 0; k < (int)RF_ARRAY_LEN(text); k++)
        rf_cell_text(&row[1 + k], "%s", text[k]);
      rf_cell_int(&row[8], ra->bucket_size);
      rf_cell_int(&row[9], ra->number);
      rf_cell_int(&row[10], rb->number);
      rf_cell_num(&row[11], MS(ra->time_median_s));
      rf_cell_num(&row[12], MS(rb->time_median_s));
      rf_cell_num(&row[13], rb->time_median_s / ra->time_median_s);
      break;
    }
  }
  free(taken);
  return st;
}

rf_status rf_report_build_tables(const rf_loaded_results *files, int count, rf_report_tables *t) {
  INIT(&t->runs, "runs", "Runs", runs);
  INIT(&t->status, "status", "Verification", status);
  INIT(&t->modes, "modes_buckets", "Time and bandwidth per mode and bucket size", modes);
  INIT(&t->layouts, "layouts", "Layouts and plans: the fastest run of each", layouts);
  INIT(&t->phases, "phases", "Phases (summary medians)", phases);
  INIT(&t->spread, "spread", "Spread of total over iterations and ranks", spread);
  INIT(&t->limits, "limits", "Percentage of the calibrated limits", limits);
  INIT(&t->compare, "compare", "Comparison with the reference (file 1)", compare);
  for (int f = 0; f < count; f++) {
    for (int i = 0; i < files[f].run_count; i++) {
      RF_TRY(add_run(t, f + 1, &files[f].runs[i]));
      RF_TRY(add_spread(&t->spread, f + 1, &files[f].runs[i]));
    }
    RF_TRY(add_layouts(&t->layouts, f + 1, &files[f]));
    if (f > 0)
      RF_TRY(add_compare(&t->compare, &files[0], &files[f], f + 1));
  }
  RF_TRY(rf_report_build_delta(files, count, t));
  return rf_report_build_simulated(files, count, t);
}

void rf_report_tables_free(rf_report_tables *t) {
  rf_report_table *all[] = {&t->runs,      &t->status,    &t->modes,  &t->layouts,
                            &t->phases,    &t->spread,    &t->limits, &t->compare,
                            &t->simulated, &t->published, &t->delta};
  for (size_t i = 0; i < RF_ARRAY_LEN(all); i++)
    rf_report_table_free(all[i]);
}
