/* sweep: `refit run` over the cartesian product of a config file's lists (cli.h, rf_sweep),
 * in one MPI job, every run appended to one results file. A job that is no sweep is a sweep
 * of one combination. Private to src/driver. */
#ifndef RF_SWEEP_H
#define RF_SWEEP_H

#include "driver.h"
#include "transport_auto.h"

/* One combination's place in the sweep: what its job needs to number, announce and record its
 * runs (one per mode). */
typedef struct {
  int first_index; /* 1-based sweep index of the job's first run */
  int size;        /* combinations times modes: every run, skipped ones included */
  int announce;    /* rank 0 prints a progress line before each run (sweeps only) */
  int show_mode;   /* the modes vary too, so the line names each run's mode */
  int world_rank;
  char params[512]; /* the varying keys but mode, "plan=star bucket_size=64MiB" */
  double start;     /* rf_now() when the sweep began */
  int done_before;  /* runs finished before this job */
  int left_after;   /* numbers after this job's (later skips are not known yet) */
  int runs;         /* this job's runs: its modes */
  /* --transport auto: "shm (auto: <reason>)" for the header and the results; "" when named */
  char transport_choice[RF_TRANSPORT_CHOICE_MAX];
} rf_sweep_slot;

/* Rank 0: "run i/N: plan=star mode=fused (elapsed 12.3 s, about 40 s left)" before the job's
 * run `mode_index` (0-based); nothing outside a sweep. */
void rf_sweep_announce(const rf_sweep_slot *slot, int mode_index, const char *mode);

/* Runs one combination's job on every rank and returns the status all ranks agreed. It sets
 * *timed_out when a wait expired: MPI then holds pending requests and the job must be aborted. */
typedef rf_status (*rf_sweep_job_fn)(const rf_config *cfg, const rf_sweep_slot *slot,
                                     int *timed_out);

/* The sweep, on every rank between MPI_Init and MPI_Finalize. Each combination is checked just
 * before it runs; one invalid for the world size, the model or --checkpoint is skipped
 * (announced and recorded with its reason); a verification failure is recorded and the sweep
 * goes on, returning RF_ERR_VERIFY at the end; any other error ends it. With --dry-run it only
 * lists the runs and skips, each as soon as it is checked. */
rf_status rf_sweep_execute(const rf_config *cfg, rf_sweep_job_fn job, int *timed_out);

#endif
