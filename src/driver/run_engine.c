/* A job's buffers, a mode's engine and one iteration, shared by refit run and the library
 * (run_engine.h). */
#include "run_engine.h"

rf_status rf_run_buffers_open(rf_control *ctl, const rf_config *cfg, const run_setup *rs,
                              rf_checkpoint *ck, rf_transport *tp, rf_buffers *data) {
  rf_control_hold(ctl); /* every rank may run out of memory alike: one line says so */
  rf_status st =
      rf_control_agree(ctl, rf_buffers_init_on(data, &rs->job.plan, rs->memory, (uint64_t)cfg->seed,
                                               ck, ctl->world_rank, tp));
  data->version.update = rs->update; /* the rule by which rf_buffers_advance moves them on */
  data->marks_wanted = !cfg->delta_compare;
  return st;
}

rf_status rf_run_engine_open(rf_control *ctl, const rf_config *cfg, const run_setup *rs,
                             rf_buffers *data, rf_transport *tp, rf_mode mode,
                             rf_delta_choice delta, rf_inject inject, rf_engine *e) {
  RF_TRY(rf_engine_init(e, data, tp, mode, cfg->bucket_size, (uint64_t)cfg->seed, inject,
                        ctl->world_rank));
  rf_engine_set_mapped_rounds(e, cfg->mapped_rounds, rs->forward_crosses_gpus);
  if (tp->ops->one_sided)
    rf_engine_set_push(e, cfg->rma == RF_RMA_PUT);
  rf_log_push_quiet(ctl->world_rank != 0); /* every rank refuses alike: one says so */
  rf_status st = rf_engine_set_delta(e, delta);
  rf_log_pop_quiet();
  return st;
}

rf_status rf_run_iteration(rf_control *ctl, rf_engine *e, rf_status entering, double setup,
                           int stall, double *times) {
  rf_status st = entering;
  /* Every rank enters the barrier, a rank whose preparation failed too: one that went straight
   * to the agreement would meet the others' barrier in its collective. */
  rf_status entered = rf_control_barrier(ctl, ctl->world, "the iteration barrier");
  if (st == RF_OK)
    st = entered;
  /* Before a delta, the trainers learn which version every rollout rank holds: one that
   * missed one gets its pieces dense. Outside the timed phases, every rank, as the barrier. */
  if (rf_engine_delta_next(e)) {
    entered = rf_run_receipts(ctl, e);
    if (st == RF_OK)
      st = entered;
  }
  if (st == RF_OK)
    st = rf_engine_iterate(e, times, stall);
  /* The others may be waiting for this rank's messages: they hear of its failure at once
   * rather than after their whole --timeout (control.h, failure notices). A delta refused
   * in the checks needs none: nobody waits for this rank then, and every rank that holds a
   * damaged piece gets to name it. */
  if (!e->delta_posted)
    rf_control_notify(ctl, st);
  times[RF_PHASE_SETUP] = setup;
  return rf_control_agree(ctl, st);
}
