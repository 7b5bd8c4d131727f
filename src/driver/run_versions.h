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
 * engine's to refuse (rf_engine_set_delta). */
rf_status rf_run_versions_setup(const rf_config *cfg, rf_update *update);

/* After the run's last iteration: how many elements of the version it moved differ from the
 * version before, counted from the rule alone (rf_version_changed_count), the tensors shared
 * out over every rank and summed to rank 0's res (version, version_changed, version_elements),
 * and the slowest rank's `update_s`, its mean seconds to make a version. Nothing to count
 * under none. Every rank calls it. */
rf_status rf_run_version_changes(rf_control *ctl, const rf_job *job, const rf_engine *e,
                                 double update_s, rf_run_result *res);

/* After the run's last iteration, every rank: the delta choice into res, and under delta the
 * encoded bytes and pieces per encoding every rank sent, summed to rank 0, and when the last
 * iteration sent a delta the same pieces by tensor kind (res->delta_kinds, which the caller
 * frees). */
rf_status rf_run_delta_figures(rf_control *ctl, const rf_job *job, const rf_engine *e,
                               rf_run_result *res);
/* Rank 0, after the row: "# delta auto: version 3: 1234 wire bytes (...); pieces: ..." and
 * "# delta auto: pieces by tensor kind (dense/sparse/bitmask): embed 0/2/0, ...", or, for a
 * last iteration that went dense, "... dense (the rollout holds no version)". */
void rf_run_print_delta(const rf_run_result *res);

/* Rank 0, after the run's table row: "# update sparse:0.01: version 6, 1.002 % of elements
 * changed (...)" under a rule other than none; nothing otherwise. */
void rf_run_print_update(const rf_config *cfg, const rf_run_result *res);

#endif
