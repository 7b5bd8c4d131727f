/* Version receipts (issue 33; docs/architecture.md, "Delta refits"). Each rollout rank records
 * the version its weights hold. Before each delta iteration the driver gathers every rollout
 * rank's receipt on the control plane and hands them to the engine, which marks the ranks whose
 * receipt does not name the trainer's kept version: the trainers encode those ranks' pieces
 * dense (engine_delta.c, want_of), so that a replica that missed a version is refit whole in
 * the same iteration while the others get deltas. --inject skip-version makes one rank miss
 * one. */
#include <stdlib.h>

#include "engine_internal.h"

static int rollout_ranks(const rf_engine *e) { return e->plan->layout->rollout_ranks; }

rf_status engine_receipts_init(rf_engine *e) {
  int n = rollout_ranks(e);
  e->receipts = rf_calloc((size_t)n + 1, sizeof *e->receipts, "version receipts");
  e->stale = rf_calloc((size_t)n + 1, sizeof *e->stale, "version receipts");
  return e->receipts && e->stale ? RF_OK : RF_ERR_NOMEM;
}

void engine_receipts_free(rf_engine *e) {
  free(e->receipts);
  free(e->stale);
  e->receipts = NULL;
  e->stale = NULL;
  e->delta_stale_ranks = 0;
}

static rf_receipt receipt_of(const rf_buffers *b, const rf_weight_version *v) {
  return (rf_receipt){v->k, rf_version_id(b->seed, v)};
}

rf_receipt rf_engine_receipt(const rf_engine *e) {
  const rf_buffers *b = e->data;
  if (e->rollout_rank < 0 || !b->holds)
    return (rf_receipt){-1, 0};
  return receipt_of(b, &b->held);
}

rf_receipt rf_engine_kept_receipt(const rf_engine *e) {
  const rf_buffers *b = e->data;
  if (!b->delta_base)
    return (rf_receipt){-1, 0};
  return receipt_of(b, &b->kept);
}

void rf_engine_set_receipts(rf_engine *e, const rf_receipt *receipts) {
  e->delta_stale_ranks = 0;
  if (!e->receipts)
    return; /* deltas off: every piece goes dense anyway */
  rf_receipt kept = rf_engine_kept_receipt(e);
  for (int r = 0; r < rollout_ranks(e); r++) {
    e->receipts[r] = receipts[r];
    e->stale[r] = receipts[r].k != kept.k || receipts[r].id != kept.id;
    e->delta_stale_ranks += e->stale[r];
  }
}

int engine_stale(const rf_engine *e, int r) { return e->stale && e->stale[r]; }

int rf_engine_stale(const rf_engine *e, int r, rf_receipt *held) {
  *held = e->receipts ? e->receipts[r] : (rf_receipt){-1, 0};
  return engine_stale(e, r);
}

void rf_engine_skip_version(rf_engine *e) { e->skip_armed = 1; }

int engine_skip_now(rf_engine *e) {
  int armed = e->skip_armed;
  e->skip_armed = 0;
  /* Only a delta can be dropped: a dense iteration has written the rollout as it arrived. */
  if (!armed || !e->delta_pending || e->rollout_rank < 0 ||
      e->rollout_rank != engine_corrupt_rank(e))
    return 0;
  RF_WARN("inject skip-version: rollout rank %d drops version %lld (received and checked, not "
          "applied); it still holds version %lld",
          e->rollout_rank, (long long)e->moved.k, (long long)rf_engine_receipt(e).k);
  return 1;
}

void engine_hold(rf_engine *e, int dropped) {
  if (e->rollout_rank < 0 || dropped)
    return;
  e->data->held = e->moved;
  e->data->holds = 1;
}
