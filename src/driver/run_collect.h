/* run_collect: what a run's ranks send rank 0 once its iterations are over: the verification
 * verdict, every rank's timings, the memory peaks and the message count. Each is one bounded
 * collective of the control plane; rank 0 fills the run's result from them. */
#ifndef RF_RUN_COLLECT_H
#define RF_RUN_COLLECT_H

#include "control/control.h"
#include "driver.h"
#include "engine/engine.h"
#include "run_record.h"

/* Verification after the last iteration: the full element check (`full`, against `ck` when
 * the weights came from a checkpoint) and the per-tensor checksums (`checksum`), reduced to
 * rank 0, which names the tensors whose checksums differ and keeps them in rec->checksums.
 * Sets res->wrong and res->checksum_bad on rank 0 (-1 where that check did not run). */
rf_status rf_run_verify(rf_control *ctl, const rf_job *job, rf_engine *e, rf_checkpoint *ck,
                        int full, int checksum, run_record *rec, rf_run_result *res);

/* Gathers every rank's timings (`mine`: iters rows of RF_PHASE_COUNT) into rank 0's `all`
 * (ranks * iters rows; NULL elsewhere), and reduces the staging and RSS peaks (maxima) and the
 * message count (a sum) into rank 0's res. */
rf_status rf_run_collect(rf_control *ctl, const rf_engine *e, rf_mode mode, const double *mine,
                         double *all, int iters, rf_run_result *res);

/* Rank 0: the parts of a run's result that describe it rather than measure it (mode, plan,
 * transport, bytes, bucket size, cfg->iters iterations). `refit run` and the library's
 * refit_record fill them alike. */
void rf_run_describe_result(const rf_config *cfg, const rf_job *job, const char *transport,
                            rf_mode mode, rf_run_result *res);

#endif
