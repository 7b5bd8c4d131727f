/* `refit run`'s job before its first mode: what it decided from its options (run_setup), where
 * its ranks run, the header rank 0 prints, the GPU each rank takes and the job's setup times.
 * cmd_run.c runs the modes over it. */
#ifndef RF_RUN_SETUP_H
#define RF_RUN_SETUP_H

#include "control/control.h"
#include "driver.h"
#include "engine/engine.h"
#include "placement.h"
#include "run_record.h"
#include "run_versions.h"

/* Everything `refit run` decided from its options, on every rank alike. */
typedef struct {
  rf_job job;
  const rf_transport_ops *transport;
  rf_mem_kind memory; /* where the weights live (--memory) */
  int verify_full, verify_checksum;
  rf_run_checkpoints checkpoints; /* the trainer's weights, when --checkpoint is given */
  run_record record;              /* what rank 0 writes to --output */
  int forward_crosses_gpus;       /* --mapped-rounds auto (rf_job_forward_crosses_gpus) */
  rf_update update;               /* --update: how each iteration's version follows the last */
  int64_t iterations_done; /* the job's, every mode's: the next iteration moves this version */
  int64_t held;            /* the version the rollout holds after the last iteration that passed */
  int64_t refused;         /* the version of a delta refit that was refused */
} run_setup;

/* The update rule, transport, memory kind and job (model, layouts and, unless --plan auto waits
 * for the placement, the plan) from the options, alike on every rank. */
rf_status rf_run_build_setup(const rf_config *cfg, run_setup *rs);
/* The same for a job over `comm` rather than MPI_COMM_WORLD (the library's, src/api). */
rf_status rf_run_build_setup_on(const rf_config *cfg, MPI_Comm comm, run_setup *rs);
/* What the handshake compares between the ranks. */
void rf_run_describe_job(const rf_config *cfg, const rf_job *job, rf_job_desc *d);
/* Where every rank runs, and the plan again with the machine's distances (see run_setup.c). */
rf_status rf_run_place_job(rf_control *ctl, const rf_config *cfg, run_setup *rs,
                           rf_job_placement *placement);
/* Every rank's identity and placement, gathered into rank 0's rec->placement (the rank table
 * of the header and the results file). */
rf_status rf_run_rank_table(rf_control *ctl, run_record *rec);
/* Rank 0 prints the header: versions, command line, the job and one line per rank. */
rf_status rf_run_print_header(rf_control *ctl, const rf_config *cfg, const rf_job *job,
                              rf_mem_kind rs_memory, run_record *rec);
/* GPU transports: each rank picks its GPU before anything creates a CUDA context. */
rf_status rf_run_select_gpu(rf_control *ctl, const rf_config *cfg,
                            const rf_job_placement *placement);
/* The job's own setup times, the slowest rank's, printed and kept for the results. */
rf_status rf_run_report_setup(rf_control *ctl, const double *mine, run_record *rec);

#endif
