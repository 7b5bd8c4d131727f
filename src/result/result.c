/* result: phase names, order statistics and the per-run summary. */
#include <stdlib.h>
#include <string.h>

#include "result/result.h"

RF_ENUM_DEFINE(rf_phase, "phase", RF_PHASE_LIST, RF_PHASE_COUNT)
RF_ENUM_DEFINE(rf_limit, "limit", RF_LIMIT_LIST, RF_LIMIT_COUNT)
RF_ENUM_DEFINE(rf_setup_step, "setup step", RF_SETUP_STEP_LIST, RF_SETUP_STEP_COUNT)

/* ---- statistics ------------------------------------------------------------------------- */

/* Three-way compare without subtraction, so huge or tiny values cannot overflow the sign. */
static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

rf_status rf_stats_of(const double *values, int count, rf_stats *out) {
  rf_stats s = {0};
  *out = s;
  if (count <= 0 || !values)
    return RF_OK;
  double *sorted = rf_malloc((size_t)count * sizeof *sorted, "sorted timings");
  if (!sorted)
    return RF_ERR_NOMEM;
  memcpy(sorted, values, (size_t)count * sizeof *sorted);
  qsort(sorted, (size_t)count, sizeof *sorted, compare_doubles);

  double sum = 0.0;
  for (int i = 0; i < count; i++)
    sum += sorted[i];
  s.min = sorted[0];
  s.max = sorted[count - 1];
  s.mean = sum / count;
  s.median = count % 2 ? sorted[count / 2] : 0.5 * (sorted[count / 2 - 1] + sorted[count / 2]);
  /* Nearest rank, ceil(0.99 n) - 1, in integers: 0.99 * n in floating point can land just
   * above a whole number and push the index one too far. */
  int64_t rank = (99 * (int64_t)count + 99) / 100;
  s.p99 = sorted[rank - 1];
  free(sorted);
  *out = s;
  return RF_OK;
}

rf_status rf_stats_of_slowest(const double *timings, int iterations, int ranks, int phase,
                              rf_stats *out) {
  *out = (rf_stats){0};
  if (!timings || iterations <= 0 || ranks <= 0)
    return RF_OK;
  double *slowest = rf_malloc((size_t)iterations * sizeof *slowest, "per-iteration times");
  if (!slowest)
    return RF_ERR_NOMEM;
  for (int it = 0; it < iterations; it++) {
    const double *row = timings + (size_t)it * (size_t)ranks * RF_PHASE_COUNT;
    slowest[it] = row[phase];
    for (int rank = 1; rank < ranks; rank++)
      slowest[it] = RF_MAX(slowest[it], row[(size_t)rank * RF_PHASE_COUNT + phase]);
  }
  rf_status st = rf_stats_of(slowest, iterations, out);
  free(slowest);
  return st;
}

rf_status rf_run_result_summarise(rf_run_result *r) {
  r->total = (rf_stats){0};
  r->algbw = r->aggbw = 0.0;
  /* An iteration is over only when its slowest rank is done, so that rank's total is the
   * iteration's time. */
  rf_status st =
      rf_stats_of_slowest(r->timings, r->iterations, r->ranks, RF_PHASE_TOTAL, &r->total);
  if (r->total.median > 0.0) {
    r->algbw = (double)r->replica_bytes / r->total.median / 1e9;
    r->aggbw = (double)r->transfer_bytes / r->total.median / 1e9;
  }
  return st;
}
