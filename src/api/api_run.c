/* Refitting a library job: one iteration of `refit run` per refit_transfer (rf_run_iteration,
 * which cmd_run.c's loop calls too), its checks (rf_run_verify) and its record (rf_run_collect,
 * rf_record_run), over the driver's calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "driver/run_collect.h"
#include "driver/run_engine.h"

/* The engine of the job's mode, built at the first transfer: its time is the setup phase of
 * every transfer, as in refit run. */
static rf_status ensure_engine(refit_job *job) {
  if (job->engine_ready)
    return RF_OK;
  rf_control *ctl = &job->ctl;
  const rf_config *cfg = &job->cfg;
  double t0 = rf_now();
  rf_control_hold(ctl); /* staging that does not fit fails every rank alike: one line says so */
  rf_status st = rf_run_engine_open(ctl, cfg, &job->rs, &job->data, &job->tp, cfg->mode.items[0],
                                    RF_DELTA_CHOICE_OFF, RF_INJECT_NONE, &job->engine);
  job->setup_s = rf_now() - t0;
  st = rf_control_agree(ctl, st);
  if (st != RF_OK)
    rf_engine_free(&job->engine);
  job->engine_ready = st == RF_OK;
  return st;
}

/* Keeps this rank's phases of a transfer for refit_timings and refit_record. */
static rf_status keep_times(refit_job *job, const double *times) {
  memcpy(job->last, times, sizeof job->last);
  if (job->transfers == job->times_cap) {
    int cap = job->times_cap ? 2 * job->times_cap : 16;
    double *grown = realloc(job->times, (size_t)cap * RF_PHASE_COUNT * sizeof *grown);
    if (!grown)
      return rf_fail(RF_ERR_NOMEM, "out of memory keeping the timings of %d transfers", cap);
    job->times = grown;
    job->times_cap = cap;
  }
  memcpy(job->times + (size_t)job->transfers++ * RF_PHASE_COUNT, times,
         RF_PHASE_COUNT * sizeof *times);
  return RF_OK;
}

static rf_status transfer(refit_job *job) {
  rf_control *ctl = &job->ctl;
  RF_TRY(ensure_engine(job));
  /* The caller's memory registered over ipc is mapped by its peers here, outside the timed
   * phases, as the engine's own arenas are when it is built: counted in the setup phase. */
  double t0 = rf_now();
  RF_TRY(rf_api_tensors_share(job));
  job->setup_s += rf_now() - t0;
  rf_mem_set_copy_join(!job->separate);
  double times[RF_PHASE_COUNT] = {0};
  rf_status st = rf_run_iteration(ctl, &job->engine, RF_OK, job->setup_s, 0, times);
  /* Every rank has the same status; one whose wait expired has left the job unusable. */
  if (st != RF_OK && st != RF_ERR_TIMEOUT)
    rf_engine_abandon(&job->engine);
  job->verified = 0;
  if (st == RF_OK)
    st = rf_control_agree(ctl, keep_times(job, times));
  return st;
}

refit_status refit_transfer(refit_job *job) {
  if (!job)
    return REFIT_ERR_USAGE;
  rf_api_capture cap;
  rf_api_capture_begin(&cap, job->error);
  return rf_api_capture_end(&cap, transfer(job));
}

static rf_status verify(refit_job *job) {
  rf_control *ctl = &job->ctl;
  if (!job->transfers && !job->engine_ready)
    return rf_fail(RF_ERR_USAGE, "refit_verify: nothing was transferred yet; call "
                                 "refit_transfer first");
  /* The element check compares with the weights refit generated: only where every trainer
   * shard is still the library's own. */
  int mine = 0, any = 0;
  for (int i = 0; i < job->tensors[0].count; i++)
    mine |= job->tensors[0].registered[i];
  RF_TRY(rf_control_allreduce(ctl, ctl->world, &mine, &any, 1, MPI_INT, MPI_MAX,
                              "whether any trainer shard is the caller's"));
  int full = job->cfg.verify == RF_VERIFY_FULL && !any;
  int checksum = job->cfg.verify != RF_VERIFY_NONE;
  rf_run_result res;
  memset(&res, 0, sizeof res);
  double t0 = rf_now();
  RF_TRY(rf_control_agree(ctl, rf_run_verify(ctl, &job->rs.job, &job->engine, NULL, full, checksum,
                                             &job->rs.record, &res)));
  if (job->transfers > 0)
    job->times[(size_t)(job->transfers - 1) * RF_PHASE_COUNT + RF_PHASE_VERIFY] = rf_now() - t0;
  int64_t verdict[2] = {res.wrong, res.checksum_bad};
  RF_TRY(rf_control_bcast(ctl, ctl->world, verdict, 2, MPI_INT64_T, "the verdict"));
  job->wrong = verdict[0];
  job->bad = verdict[1];
  job->verified = 1;
  if (verdict[0] > 0)
    return rf_fail(RF_ERR_VERIFY,
                   "refit_verify: %lld elements differ from the weights moved, and the checksums "
                   "of %lld tensors",
                   (long long)verdict[0], (long long)RF_MAX(verdict[1], 0));
  if (verdict[1] > 0)
    return rf_fail(RF_ERR_VERIFY,
                   "refit_verify: the checksums of %lld tensors differ between the trainer and "
                   "the rollout",
                   (long long)verdict[1]);
  return RF_OK;
}

refit_status refit_verify(refit_job *job, int64_t *wrong, int64_t *bad) {
  if (!job)
    return REFIT_ERR_USAGE;
  rf_api_capture cap;
  rf_api_capture_begin(&cap, job->error);
  rf_status st = verify(job);
  if (wrong)
    *wrong = job->verified ? job->wrong : -1;
  if (bad)
    *bad = job->verified ? job->bad : -1;
  return rf_api_capture_end(&cap, st);
}

refit_status refit_timings(const refit_job *job, double *phases, int count) {
  if (!job || (!phases && count > 0) || count < 0 || count > RF_PHASE_COUNT)
    return REFIT_ERR_USAGE;
  memcpy(phases, job->last, (size_t)count * sizeof *phases);
  return REFIT_OK;
}

/* rank 0: the run's result from the gathered timings and the last verdict. */
static rf_status summarise(refit_job *job, double *all, rf_status st, rf_run_result *res) {
  rf_run_describe_result(&job->cfg, &job->rs.job, job->rs.transport->name, job->cfg.mode.items[0],
                         res);
  snprintf(res->delta, sizeof res->delta, "off");
  res->ranks = job->ctl.world_size;
  res->timings = all;
  res->status = st;
  if (st == RF_OK && (res->wrong > 0 || res->checksum_bad > 0))
    res->status = RF_ERR_VERIFY;
  return st == RF_OK ? rf_run_result_summarise(res) : st;
}

static rf_status record(refit_job *job, const char *path) {
  rf_control *ctl = &job->ctl;
  rf_config *cfg = &job->cfg;
  if (!path || !path[0])
    return rf_fail(RF_ERR_USAGE, "refit_record: give the path of a results file (.h5)");
  if (job->transfers == 0)
    return rf_fail(RF_ERR_USAGE, "refit_record: no transfer since the job began or its last "
                                 "record; call refit_transfer first");
  snprintf(cfg->output, sizeof cfg->output, "%s", path);
  cfg->iters = job->transfers;
  cfg->warmup = 0;
  int rank0 = ctl->world_rank == 0, iters = job->transfers;
  rf_status st = rf_control_agree(ctl, rf_record_open(&job->rs.record, ctl, cfg));
  rf_run_result res;
  memset(&res, 0, sizeof res);
  res.wrong = job->verified ? job->wrong : -1;
  res.checksum_bad = job->verified ? job->bad : -1;
  double *all = rank0 ? rf_calloc((size_t)iters * (size_t)ctl->world_size * RF_PHASE_COUNT,
                                  sizeof *all, "timings")
                      : NULL;
  if (st == RF_OK)
    st = rf_control_agree(ctl, rank0 && !all ? RF_ERR_NOMEM : RF_OK);
  if (st == RF_OK)
    st = rf_run_collect(ctl, &job->engine, cfg->mode.items[0], job->times, all, iters, &res);
  if (st == RF_OK)
    st = rf_control_agree(ctl, rank0 ? summarise(job, all, st, &res) : RF_OK);
  if (st == RF_OK)
    st = rf_control_agree(ctl, rf_record_run(&job->rs.record, ctl, cfg, &job->rs.job, &job->engine,
                                             cfg->mode.items[0], &res));
  if (job->rs.record.results)
    rf_results_close(job->rs.record.results); /* another process may append between records */
  job->rs.record.results = NULL;
  cfg->output[0] = '\0';
  free(all);
  free(res.delta_kinds);
  if (st == RF_OK)
    job->transfers = 0;
  return st;
}

refit_status refit_record(refit_job *job, const char *path) {
  if (!job)
    return REFIT_ERR_USAGE;
  rf_api_capture cap;
  rf_api_capture_begin(&cap, job->error);
  return rf_api_capture_end(&cap, record(job, path));
}
