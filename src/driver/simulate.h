/* simulate: the parts of `refit simulate` that belong to the driver: calibrating a cluster
 * from a results file (simulate_calibration.c) and saying what was predicted
 * (simulate_report.c). The prediction itself is src/sim/'s. */
#ifndef RF_DRIVER_SIMULATE_H
#define RF_DRIVER_SIMULATE_H

#include <jansson.h>

#include "driver.h"
#include "sim/sim.h"
#include "transport/transport.h"

/* One measured figure the calibration fitted, and what the calibrated cluster predicts for it. */
typedef struct {
  char label[96]; /* "run 0003 grouped", "run 0003 limit mpi" */
  int mode;       /* the run's rf_mode; -1 for a limit */
  double measured_s, predicted_s;
} rf_calibration_sample;

/* Runs of one mode needed for that mode to get rates of its own. */
#define RF_CALIBRATION_MODE_RUNS 3

typedef struct {
  char path[RF_PATH_MAX];
  int runs, limits, skipped; /* runs and limits used; runs passed over (another memory kind,
                                failed, skipped or simulated) */
  rf_sim_fit fit;            /* over every sample: the rates of modes without runs enough */
  /* The modes drive the transport differently (unfused one tensor in flight, grouped a bucket,
   * fused one packed message per peer), so each mode with RF_CALIBRATION_MODE_RUNS runs gets
   * rates fitted to its own runs, starting from the fit over all. */
  int mode_runs[RF_MODE_COUNT];
  rf_sim_fit mode_fit[RF_MODE_COUNT];     /* valid where mode_runs >= RF_CALIBRATION_MODE_RUNS */
  rf_cluster mode_cluster[RF_MODE_COUNT]; /* the rates each mode is simulated with */
  rf_calibration_sample *samples;         /* [runs + limits] */
} rf_calibration;

/* Fits the cluster's rates for weights in host (device = 0) or GPU memory to the measured runs
 * and --calibrate limits of the results file `path`: each run's job is built again from its
 * attributes, planned on the cluster and walked in its mode and bucket size. */
rf_status rf_calibration_fit(const char *path, rf_cluster *c, int device, rf_calibration *out);
void rf_calibration_free(rf_calibration *cal);

/* What `refit simulate` prints. */
typedef struct {
  const rf_config *cfg;
  const rf_job *job;
  const rf_cluster *cluster;
  const rf_transport_ops *transport; /* --transport, described (it need not be in this build) */
  const char *transport_choice;      /* auto: "shm (auto: <reason>)"; "" for a named one */
  int device;
  const rf_calibration *calibration; /* NULL without --calibration */
  /* The least time any plan could take (rf_sim_lower_bound) on the cluster, and on each mode's
   * (calibrated, each mode has rates of its own): each prediction is set beside its mode's. */
  rf_sim_bound bound, mode_bound[RF_MODE_COUNT];
  /* Delta refits: each mode is predicted once per entry (--delta's list, with --update's
   * changed fraction); NULL and 0: whole versions alone, as without --delta. `delta` is the
   * entry being predicted, and the bounds above are its own (rf_sim_lower_bound_delta). */
  const rf_sim_delta_model *deltas;
  int delta_count;
  rf_sim_delta_model delta;
  /* A one-sided transport's setup step register (rf_sim_registration); windows 0 otherwise. */
  rf_sim_register reg;
} rf_sim_context;

/* The header lines (cluster, job, plan, calibration), then one block per mode. */
void rf_sim_print_header(const rf_sim_context *x);
void rf_sim_print_mode(const rf_sim_context *x, rf_mode mode, const rf_sim_result *r);

/* The JSON of the whole command (one object; its "runs" take one entry per mode) and of one
 * mode's prediction, which is also what a simulated run records in the results file. */
json_t *rf_sim_json(const rf_sim_context *x);
json_t *rf_sim_mode_json(const rf_sim_context *x, rf_mode mode, const rf_sim_result *r);

#endif
