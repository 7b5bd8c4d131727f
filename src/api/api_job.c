/* A library job: the options through the CLI's own table, then the steps of `refit run`'s
 * run_job up to its buffers (cmd_run.c), over the caller's communicator; and what the job is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "cli/cli_internal.h"
#include "driver/run_engine.h"
#include "driver/transport_auto.h"

/* Options of `refit run` that the library has no use for: a job runs one version at a time
 * for as long as its caller wants, of weights the caller holds, and records where it is told
 * (refit_record). */
static const char *const refused_options[] = {"config", "system",  "warmup",    "iters",
                                              "inject", "update",  "delta",     "output",
                                              "json",   "dry-run", "calibrate", "checkpoint"};

static rf_status set_option(rf_config *cfg, const char *key, const char *value) {
  if (!key || !value)
    return rf_fail(RF_ERR_USAGE,
                   "refit_job_create: option %s has no value; options are a "
                   "NULL-terminated list of key and value strings",
                   key ? key : "(null)");
  const rf_cli_option *o = rf_cli_find_option(key);
  if (!o || !(o->commands & (unsigned)RF_CMD_RUN))
    return rf_fail(RF_ERR_USAGE,
                   "refit_job_create: option %s is not an option of refit run; "
                   "see refit run --help",
                   key);
  for (size_t i = 0; i < RF_ARRAY_LEN(refused_options); i++)
    if (strcmp(o->name, refused_options[i]) == 0)
      return rf_fail(RF_ERR_USAGE,
                     "refit_job_create: option %s is refit run's, not the "
                     "library's; leave it out (include/refit.h says why)",
                     o->name);
  return rf_cli_set_option(cfg, key, value);
}

/* The configuration of `refit run --model M --trainer T --rollout R` with the options, the
 * same defaults but for --bind none: a library leaves its caller's threads where they are. */
static rf_status build_config(rf_config *cfg, const char *model, const char *trainer,
                              const char *rollout, const char *const *options) {
  rf_cli_defaults(cfg);
  cfg->command = RF_CMD_RUN;
  if (!model || !trainer || !rollout)
    return rf_fail(RF_ERR_USAGE, "refit_job_create: give a model, a trainer layout and a rollout "
                                 "layout (none may be NULL)");
  RF_TRY(rf_cli_set_option(cfg, "bind", "none"));
  RF_TRY(rf_cli_set_option(cfg, "model", model));
  RF_TRY(rf_cli_set_option(cfg, "trainer", trainer));
  RF_TRY(rf_cli_set_option(cfg, "rollout", rollout));
  int n = 0;
  for (; options && options[n]; n += 2)
    RF_TRY(set_option(cfg, options[n], options[n + 1]));
  if (cfg->mode.count != 1)
    return rf_fail(RF_ERR_USAGE,
                   "refit_job_create: option mode: a job runs one mode, not %d; "
                   "create a job per mode",
                   cfg->mode.count);
  snprintf(cfg->command_line, sizeof cfg->command_line,
           "librefit refit_job_create --model %s --trainer %s --rollout %s", model, trainer,
           rollout);
  for (int i = 0; options && options[i]; i += 2) {
    size_t used = strlen(cfg->command_line);
    snprintf(cfg->command_line + used, sizeof cfg->command_line - used, " --%s %s", options[i],
             options[i + 1]);
  }
  return rf_run_check_rollout_dtype(cfg);
}

/* run_job's steps (cmd_run.c) up to the arenas, over `comm`. Each step past the control
 * plane returns an agreed status, so every rank takes the same path. */
static rf_status build_job(refit_job *job, MPI_Comm comm) {
  rf_config *cfg = &job->cfg;
  run_setup *rs = &job->rs;
  int rank = 0, size = 1;
  if (comm == MPI_COMM_NULL)
    return rf_fail(RF_ERR_USAGE, "refit_job_create: the communicator is MPI_COMM_NULL; give "
                                 "MPI_COMM_WORLD or one that holds every rank of the job");
  RF_MPI(MPI_Comm_rank(comm, &rank));
  RF_MPI(MPI_Comm_size(comm, &size));
  rf_log_set_rank(rank, size);
  if (rf_transport_wants_auto(cfg)) { /* the default: chosen as refit run's, over these ranks */
    rf_control everyone;
    rf_control_attach(&everyone, comm, cfg->timeout);
    rf_transport_site site;
    RF_TRY(rf_transport_site_of_world(&everyone, cfg, &site));
    char why[RF_TRANSPORT_CHOICE_MAX];
    const char *name = rf_transport_choose(cfg, &site, why, sizeof why);
    snprintf(cfg->transport, sizeof cfg->transport, "%s", name);
  }
  rf_log_push_quiet(rank != 0); /* deterministic: every rank would say the same */
  rf_status st = rf_run_build_setup_on(cfg, comm, rs);
  if (st == RF_OK)
    st = rf_control_init_on(&job->ctl, &rs->job.layout, cfg->timeout, comm);
  rf_log_pop_quiet();
  RF_TRY(st);
  job->ctl_open = 1;
  rf_control *ctl = &job->ctl;
  RF_TRY(rf_run_place_job(ctl, cfg, rs, &job->placement));
  rf_job_desc desc;
  rf_run_describe_job(cfg, &rs->job, &desc);
  RF_TRY(rf_control_handshake(ctl, &desc));
  RF_TRY(rf_run_rank_table(ctl, &rs->record));
  if (rs->memory == RF_MEM_DEVICE)
    RF_TRY(rf_run_select_gpu(ctl, cfg, &job->placement));
  RF_TRY(rf_control_agree(ctl, rf_transport_open(rs->transport, ctl, &rs->job.plan, &job->tp)));
  job->tp.register_unit = cfg->register_unit;
  RF_TRY(rf_run_buffers_open(ctl, cfg, rs, NULL, &job->tp, &job->data));
  int manifest = ctl->rollout_rank >= 0 ? ctl->rollout_rank : 0;
  job->plan_json = rf_job_plan_json(&rs->job, manifest);
  rf_status mine = job->plan_json ? RF_OK : rf_fail(RF_ERR_NOMEM, "out of memory for the plan");
  if (mine == RF_OK)
    mine = rf_api_tensors_build(job);
  return rf_control_agree(ctl, mine);
}

static void free_job(refit_job *job) {
  rf_engine_free(&job->engine);
  rf_buffers_free(&job->data);
  if (job->tp.ops)
    rf_transport_close(&job->tp);
  rf_record_free(&job->rs.record);
  rf_job_placement_free(&job->placement);
  rf_job_free(&job->rs.job);
  /* A control plane whose wait expired has requests pending: freeing it could hang (as in
   * cmd_run.c, run_one); it is left to the process's end. */
  if (job->ctl_open && !job->ctl.timed_out)
    rf_control_free(&job->ctl);
  rf_api_tensors_free(job);
  free(job->plan_json);
  free(job->times);
  free(job);
}

refit_status refit_job_create(refit_context *ctx, const char *model, const char *trainer,
                              const char *rollout, const char *const *options, MPI_Comm comm,
                              refit_job **out) {
  if (!ctx || !out)
    return REFIT_ERR_USAGE;
  *out = NULL;
  rf_api_capture cap;
  rf_api_capture_begin(&cap, ctx->error);
  refit_job *job = rf_calloc(1, sizeof *job, "a refit job");
  rf_status st = job ? RF_OK : RF_ERR_NOMEM;
  if (st == RF_OK) {
    job->ctx = ctx;
    st = build_config(&job->cfg, model, trainer, rollout, options);
  }
  if (st == RF_OK)
    st = build_job(job, comm);
  if (st != RF_OK && job) {
    free_job(job);
    job = NULL;
  }
  if (job)
    ctx->jobs++;
  *out = job;
  return rf_api_capture_end(&cap, st);
}

refit_status refit_job_create_f(refit_context *ctx, const char *model, const char *trainer,
                                const char *rollout, const char *const *options, int64_t fcomm,
                                refit_job **out) {
  return refit_job_create(ctx, model, trainer, rollout, options, MPI_Comm_f2c((MPI_Fint)fcomm),
                          out);
}

int64_t refit_comm_world_f(void) { return (int64_t)MPI_Comm_c2f(MPI_COMM_WORLD); }

void refit_job_destroy(refit_job *job) {
  if (!job)
    return;
  job->ctx->jobs--;
  free_job(job);
}

const char *refit_job_error(const refit_job *job) { return job ? job->error : ""; }

int refit_job_roles(const refit_job *job) {
  return (job->ctl.trainer_rank >= 0 ? REFIT_ROLE_TRAINER : 0) |
         (job->ctl.rollout_rank >= 0 ? REFIT_ROLE_ROLLOUT : 0);
}

int refit_job_rank(const refit_job *job, refit_role role) {
  return role == REFIT_ROLE_TRAINER   ? job->ctl.trainer_rank
         : role == REFIT_ROLE_ROLLOUT ? job->ctl.rollout_rank
                                      : -1;
}

refit_memory refit_job_memory(const refit_job *job) {
  return job->rs.memory == RF_MEM_DEVICE ? REFIT_MEMORY_DEVICE : REFIT_MEMORY_HOST;
}

const char *refit_job_transport(const refit_job *job) { return job->rs.transport->name; }

const char *refit_job_plan(const refit_job *job) {
  return rf_plan_kind_name(job->rs.job.plan.kind);
}

const char *refit_job_plan_json(const refit_job *job) { return job->plan_json; }
