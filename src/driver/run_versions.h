/* run_versions: weight versions in `refit run` (--update, verify/versions.h). The job's first
 * iteration moves version 0, the generator's values; before each later one, of every mode,
 * the trainer's shards move on to the next version outside the timed phases, so each timed
 * iteration refits version k + 1 onto rollout ranks that hold version k, and the checks compare
 * the rollout with the version moved last. */
#ifndef RF_RUN_VERSIONS_H
#define RF_RUN_VERSIONS_H

#include "control/control.h"
#include "driver.h"
#include "engine/engine.h"

/* The update rule of cfg->update, refused in one line (RF_ERR_USAGE) where the job cannot
 * take it: versions of weights read from --checkpoint. What --delta cannot run with is the
 * engine's to refuse (rf_engine_set_delta). --inject skip-version is refused where the job
 * would have no delta to drop or none after it: a --delta choice that is off, or fewer than 3
 * iterations. */
rf_status rf_run_versions_setup(const rf_config *cfg, rf_update *update);

/* After the run's last iteration: how many elements of the version it moved differ from the
 * version before, counted from the rule alone (rf_version_changed_count), the tensors shared
 * out over every rank and summed to rank 0's res (version, version_changed, version_elements),
 * and the slowest rank's `update_s`, its mean seconds to make a version. Nothing to count
 * under none. Every rank calls it. */
rf_status rf_run_version_changes(rf_control *ctl, const rf_job *job, const rf_engine *e,
                                 double update_s, rf_run_result *res);

/* Before each delta iteration, every rank (the barrier's turn): every rollout rank's version
 * receipt, gathered on the control plane (one allgather of three integers a rank), passed to
 * the engine, which then sends dense to the ranks that do not hold the version it kept. */
rf_status rf_run_receipts(rf_control *ctl, rf_engine *e);
/* Rank 0, after a delta iteration that sent dense to stale ranks: "# delta auto: version 7:
 * rollout rank 1 holds version 5, not 6: sent dense" (ranks grouped by the version they hold,
 * groups joined by "and"); nothing when every rank held the kept version. */
void rf_run_print_stale(const rf_engine *e);

/* After the run's last iteration, every rank: the delta choice into res, and under delta the
 * encoded bytes and pieces per encoding every rank sent, summed to rank 0, with the pieces the
 * run's iterations sent dense for a stale receipt. */
rf_status rf_run_delta_figures(rf_control *ctl, const rf_job *job, const rf_engine *e,
                               rf_run_result *res);
/* Rank 0, after the row: "# delta auto: version 3: 1234 wire bytes (...); pieces: ..." or, for
 * a last iteration that went dense, "... dense (the rollout holds no version)"; the pieces
 * counts say "(N pieces of the run dense for a stale receipt)" where there were any. */
void rf_run_print_delta(const rf_run_result *res);

/* Rank 0, after the run's table row: "# update sparse:0.01: version 6, 1.002 % of elements
 * changed (...)" under a rule other than none; nothing otherwise. */
void rf_run_print_update(const rf_config *cfg, const rf_run_result *res);

#endif
