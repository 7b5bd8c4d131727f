/* run_record: what `refit run` keeps for the results file and how it gets there. Every rank
 * contributes (shard digests); rank 0 gathers and writes, so serial HDF5 is enough. */
#ifndef RF_RUN_RECORD_H
#define RF_RUN_RECORD_H

#include "control/control.h"
#include "driver.h"
#include "engine/engine.h"
#include "io/io.h"
#include "sweep.h"
#include "topo/topo.h"

typedef struct {
  rf_results *results;     /* rank 0, when --output is given */
  rf_rank_info *placement; /* rank 0: one entry per rank */
  rf_link_info *links;     /* rank 0: the plan's links with their distance classes */
  int link_count;
  rf_topo_place place;       /* every rank: where it runs, for the rank table */
  uint64_t *reference;       /* rank 0: [tensor] checksums from the checkpoint, or NULL */
  uint64_t *checksums;       /* rank 0: trainer [tensor] then rollout [replica][tensor] */
  int8_t *verdicts;          /* rank 0: [tensor] the checksums' verdict (rf_run_verify) */
  const rf_sweep_slot *slot; /* the job's place in its sweep (set by run_job), or NULL */
  int runs;                  /* rf_record_run calls so far: the mode's place in the job */
  rf_results_limits limits;  /* rank 0: the last run's limits, when --calibrate measured them */
  int calibrated;
  rf_limit compared_with; /* the limit the run's transport stands for (its ops' `limit`) */
  double job_setup[RF_SETUP_STEP_COUNT]; /* rank 0: the job's setup, slowest rank's seconds */
  int job_setup_known;
} run_record;

/* Rank 0 opens (or creates) --output, refusing files that are not refit's results. */
rf_status rf_record_open(run_record *rec, rf_control *ctl, const rf_config *cfg);

/* Gathers the shard digests and, on rank 0, appends the run to the results file. A no-op
 * without --output. */
rf_status rf_record_run(run_record *rec, rf_control *ctl, const rf_config *cfg, const rf_job *job,
                        rf_engine *e, rf_mode mode, const rf_run_result *res);

/* Rank 0, after the run's table row: "limits: memcpy 0.150 s, mpi 0.190 s; grouped at 0.81
 * of mpi" when --calibrate measured the limits of this run (once); nothing otherwise. */
void rf_record_print_limits(run_record *rec, const rf_run_result *res);

void rf_record_free(run_record *rec);

/* The plan's part of a results run, the same for measured and simulated runs: pieces, bytes
 * per rank and link, fp8 wire bytes and where they were quantized, fanout's forward bytes. */
void rf_record_plan_fields(rf_results_run *run, const rf_job *job);

#endif
