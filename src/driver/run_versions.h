/* run_versions: weight versions in `refit run` (docs/architecture.md, "Weight versions").
 * Generated weights (--update, verify/versions.h): the job's first iteration moves version 0,
 * the generator's values; before each later one, of every mode, the trainer's shards move on
 * to the next version outside the timed phases, so each timed iteration refits version k + 1
 * onto rollout ranks that hold version k. A sequence of checkpoints (--checkpoint V0,V1,...):
 * iteration i of every run, warmup ones first, moves file i, which each trainer rank reads
 * before the iteration, outside the timed phases, so every run measures the same steps. Either
 * way the checks compare the rollout with the version moved last. */
#ifndef RF_RUN_VERSIONS_H
#define RF_RUN_VERSIONS_H

#include "control/control.h"
#include "driver.h"
#include "engine/engine.h"
#include "io/io.h"

/* The update rule of cfg->update, refused in one line (RF_ERR_USAGE) where the job cannot
 * take it: generated versions of weights read from --checkpoint, and a list of checkpoints
 * shorter than a run's iterations (--warmup + --iters). What --delta cannot run with is the
 * engine's to refuse (rf_engine_set_delta). --inject skip-version is refused where the job
 * would have no delta to drop or none after it: a --delta choice that is off, or fewer than 3
 * iterations. */
rf_status rf_run_versions_setup(const rf_config *cfg, rf_update *update);

/* --checkpoint's files, open on every rank: none (generated weights), one (every iteration
 * moves it again, as --update none moves version 0) or a sequence, file k holding version k. */
typedef struct {
  int count;
  rf_checkpoint **files; /* [count] */
  int64_t reference_of;  /* the file whose checksums the run record's reference holds */
  int64_t counted_of;    /* the version whose changes `changed` counts (-1: none yet) */
  int64_t changed, elements;
} rf_run_checkpoints;

/* Every rank opens every file of --checkpoint for the job's model (quantized as the job says);
 * a file that is missing, truncated or does not hold the model's tensors, shapes and dtypes
 * stops the job in one line from rank 0 naming the file (and the tensor). Then the ranks share
 * the work of file 0's reference checksums, which rank 0 keeps in *reference. */
rf_status rf_run_checkpoints_open(rf_control *ctl, const rf_config *cfg, const rf_job *job,
                                  rf_run_checkpoints *cks, uint64_t **reference);
void rf_run_checkpoints_close(rf_run_checkpoints *cks);
/* The file that holds version k (NULL for generated weights). */
rf_checkpoint *rf_run_checkpoint_of(const rf_run_checkpoints *cks, int64_t k);
/* Makes rank 0's *reference the checksums of the file of version k, computed again (the ranks
 * sharing the tensors) only when another file's are there. Every rank calls it; nothing to do
 * for generated weights. */
rf_status rf_run_checkpoints_reference(rf_control *ctl, const rf_job *job, rf_run_checkpoints *cks,
                                       int64_t k, uint64_t **reference);

/* After the run's last iteration: how many elements of the version it moved differ from the
 * version before, counted from the rule alone (rf_version_changed_count) or, for a sequence of
 * checkpoints, by comparing the two files (once per version and job), the tensors shared out
 * over every rank and summed to rank 0's res (version, version_changed, version_elements), and
 * the slowest rank's `update_s`, its mean seconds to make or read a version. Nothing to count
 * under none, or for version 0 of a sequence. Every rank calls it. */
rf_status rf_run_version_changes(rf_control *ctl, const rf_job *job, const rf_engine *e,
                                 rf_run_checkpoints *cks, double update_s, rf_run_result *res);

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
 * run's iterations sent dense for a stale receipt, and when the last iteration sent a delta the
 * same pieces by tensor kind (res->delta_kinds, which the caller frees). */
rf_status rf_run_delta_figures(rf_control *ctl, const rf_job *job, const rf_engine *e,
                               rf_run_result *res);
/* Rank 0, after the row: "# delta auto: version 3: 1234 wire bytes (...); pieces: ..." and
 * "# delta auto: pieces by tensor kind (dense/sparse/bitmask): embed 0/2/0, ...", or, for a
 * last iteration that went dense, "... dense (the rollout holds no version)"; the pieces
 * counts say "(N pieces of the run dense for a stale receipt)" where there were any. */
void rf_run_print_delta(const rf_run_result *res);

/* Rank 0, after the run's table row: "# update sparse:0.01: version 6, 1.002 % of elements
 * changed (...)" under a rule other than none, "# checkpoint versions: version 2 (FILE), ..."
 * for a sequence of checkpoints; nothing otherwise. */
void rf_run_print_update(const rf_config *cfg, const rf_run_result *res);

#endif
