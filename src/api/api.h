/* api: what stands behind include/refit.h. A refit_job is `refit run`'s job (run_setup.h)
 * with one engine of one mode, built by the same driver steps in the same order (setup,
 * control plane, placement, handshake, transport, buffers), so that a library job and a
 * `refit run` of the same options plan, move and check the same bytes. The library adds the
 * registration of the caller's memory (api_tensors.c) and the per-call error line. */
#ifndef RF_API_H
#define RF_API_H

#include "../../include/refit.h"
#include "control/control.h"
#include "driver/placement.h"
#include "driver/run_setup.h"
#include "engine/engine.h"

#define RF_API_ERROR_MAX 1024

struct refit_context {
  int finalize_mpi; /* the context initialised MPI, so destroying it finalises it */
  int jobs;         /* live jobs: destroying a context under them is refused in one line */
  char error[RF_API_ERROR_MAX];
};

/* This rank's tensors in one role: their names and shapes as refit.h reports them, and
 * whether the caller registered memory for them. */
typedef struct {
  int count;
  refit_tensor_info *info;
  int *index;       /* the engine's index: model tensor (trainer), rollout tensor (rollout) */
  char *registered; /* [count] */
} rf_api_tensors;

struct refit_job {
  refit_context *ctx;
  rf_config cfg;
  run_setup rs;
  rf_control ctl;
  int ctl_open;
  rf_job_placement placement;
  rf_transport tp;
  rf_buffers data;
  rf_engine engine;
  int engine_ready;
  double setup_s;              /* the engine's build, the first transfer's setup phase */
  double last[RF_PHASE_COUNT]; /* this rank's last transfer */
  double *times;               /* [transfers][RF_PHASE_COUNT] since the last record */
  int transfers, times_cap;
  int verified;              /* refit_verify ran since the last transfer */
  int64_t wrong, bad;        /* its verdict (every rank) */
  rf_api_tensors tensors[2]; /* [0] trainer, [1] rollout */
  int unshared; /* registered since the transport last mapped this rank's tensors (ipc) */
  int separate; /* the copies may meet the caller's allocations: no joined runs (memory.h) */
  char *plan_json;
  char error[RF_API_ERROR_MAX];
};

/* A call's errors are captured (the last line wins) and, when the call fails, kept in `error`
 * (a job's or context's last error); a failure that left no line on this rank (another rank
 * spoke) keeps "<status text> (another rank has the message)". */
typedef struct {
  char *saved;
  size_t saved_len;
  char *error;
  char line[RF_API_ERROR_MAX];
} rf_api_capture;
void rf_api_capture_begin(rf_api_capture *c, char *error);
refit_status rf_api_capture_end(rf_api_capture *c, rf_status st);

/* api_tensors.c: this rank's tensors of both roles from the plan (at job creation). */
rf_status rf_api_tensors_build(refit_job *job);
void rf_api_tensors_free(refit_job *job);
/* Under a transport that maps the caller's memory (ipc), offers what was registered since
 * the last offer to the peers, collectively, before a transfer: nothing when no rank
 * registered anything since. */
rf_status rf_api_tensors_share(refit_job *job);

#endif
