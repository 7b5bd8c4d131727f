/* run_record: what `refit run` keeps for the results file and how it gets there. Every rank
 * contributes (shard digests); rank 0 gathers and writes, so serial HDF5 is enough. */
#ifndef RF_RUN_RECORD_H
#define RF_RUN_RECORD_H

#include "control/control.h"
#include "driver.h"
#include "io/io.h"
#include "transport/engine.h"

typedef struct {
  rf_results *results;     /* rank 0, when --output is given */
  rf_rank_info *placement; /* rank 0: one entry per rank */
  uint64_t *reference;     /* rank 0: [tensor] checksums from the checkpoint, or NULL */
  uint64_t *checksums;     /* rank 0: trainer [tensor] then rollout [replica][tensor] */
} run_record;

/* Rank 0 opens (or creates) --output, refusing files that are not refit's results. */
rf_status rf_record_open(run_record *rec, rf_control *ctl, const rf_config *cfg);

/* Gathers the shard digests and, on rank 0, appends the run to the results file. A no-op
 * without --output. */
rf_status rf_record_run(run_record *rec, rf_control *ctl, const rf_config *cfg,
                        const rf_job *job, rf_engine *e, rf_mode mode,
                        const rf_run_result *res);

void rf_record_free(run_record *rec);

#endif
