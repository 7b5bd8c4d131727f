/* run_engine: a job's buffers, a mode's engine and one iteration of it: the calls `refit run`
 * (cmd_run.c) and the library (src/api, include/refit.h) share, so that both move the weights
 * by one path. */
#ifndef RF_RUN_ENGINE_H
#define RF_RUN_ENGINE_H

#include "control/control.h"
#include "engine/engine.h"
#include "run_setup.h"

/* Every rank's buffers of the job: the trainer shards read from `ck`, or generated from
 * cfg->seed, under the job's update rule, in arenas the open transport `tp` allocates where it
 * does (rma's windows). Returns the agreed status (one line where every rank runs out of
 * memory alike). */
rf_status rf_run_buffers_open(rf_control *ctl, const rf_config *cfg, const run_setup *rs,
                              rf_checkpoint *ck, rf_transport *tp, rf_buffers *data);

/* One mode's engine over the buffers: its schedules and staging, --mapped-rounds and the
 * --delta choice (which every rank refuses alike: rank 0 says why). Local: the caller agrees on
 * the outcome. */
rf_status rf_run_engine_open(rf_control *ctl, const rf_config *cfg, const run_setup *rs,
                             rf_buffers *data, rf_transport *tp, rf_mode mode,
                             rf_delta_choice delta, rf_inject inject, rf_engine *e);

/* One iteration, on every rank, `entering` with its status so far (a rank whose preparation
 * failed still takes part): the barrier that starts the ranks' clocks together, before a delta
 * the version receipts, the engine's iteration (`stall`: this rank posts nothing), the failure
 * notice that ends the peers' waits at once, `setup` as the iteration's setup phase, and the
 * agreement. Returns the agreed status; times[RF_PHASE_COUNT] gets the phases. */
rf_status rf_run_iteration(rf_control *ctl, rf_engine *e, rf_status entering, double setup,
                           int stall, double *times);

#endif
