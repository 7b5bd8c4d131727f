/* `refit simulate`: the job of `refit run`, planned as it would be planned on the described
 * cluster, and timed by the link model instead of moved (src/sim/). No MPI, no GPU, nothing
 * of the model's size is allocated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "plan_auto.h"
#include "run_record.h"
#include "simulate.h"
#include "transport_auto.h"
#include "verify/versions.h"

/* --memory, by refit run's rules (cmd_run.c, choose_memory): ipc and nccl move GPU memory,
 * shm host memory, mpi either; auto puts the weights where the transport moves them, and for
 * mpi on the GPUs when the cluster has them, as refit run does on a machine with a GPU (the
 * model does not stage them through pinned memory as mpi would). */
static rf_status wants_device(const rf_config *cfg, const rf_transport_ops *t, const rf_cluster *c,
                              int *device) {
  if (t->memory == RF_MEM_SHARED && cfg->memory == RF_MEM_REQUEST_DEVICE)
    return rf_fail(RF_ERR_USAGE,
                   "option --memory device: the %s transport moves host memory; "
                   "use --memory host or --transport ipc",
                   t->name);
  if (t->memory == RF_MEM_DEVICE && cfg->memory == RF_MEM_REQUEST_HOST)
    return rf_fail(RF_ERR_USAGE,
                   "option --memory host: the %s transport moves GPU memory; "
                   "use --memory device or --transport mpi",
                   t->name);
  if (t->memory == RF_MEM_SHARED || t->memory == RF_MEM_DEVICE)
    *device = t->memory == RF_MEM_DEVICE;
  else if (cfg->memory == RF_MEM_REQUEST_AUTO)
    *device = c->gpus > 0;
  else
    *device = cfg->memory == RF_MEM_REQUEST_DEVICE;
  return RF_OK;
}

/* --transport on the cluster: auto chooses as refit run would there (transport_auto.h), on the
 * nodes the job spans, consecutive ranks to a node. Only what the transport is matters here
 * (whether it maps memory, which memory it moves), so one this build leaves out simulates as
 * well as any. */
static rf_status simulated_transport(const rf_config *cfg, const rf_cluster *c, int world,
                                     char *choice, size_t len, rf_sim_context *x) {
  rf_transport_site site = {.nodes = (world + c->ranks_per_node - 1) / c->ranks_per_node,
                            .ranks = world,
                            .ranks_per_node = RF_MIN(world, c->ranks_per_node),
                            .gpus = c->gpus,
                            .any_build = 1};
  const char *name = rf_transport_choose(cfg, &site, choice, len);
  RF_TRY(rf_transport_describe(name, &x->transport));
  return wants_device(cfg, x->transport, c, &x->device);
}

/* The cluster's placement as a results file's rank table: a node name, the GPU, the adapter. */
static rf_rank_info *rank_table(const rf_job *job, const rf_cluster *c) {
  int world = job->layout.world_size;
  rf_rank_info *t = rf_calloc((size_t)world + 1, sizeof *t, "the rank table");
  for (int w = 0; t && w < world; w++) {
    int local = w % c->ranks_per_node;
    rf_rank_info *r = &t[w];
    r->rank = w;
    /* "node" and its number: the cluster's name is in the run's attributes */
    snprintf(r->host, sizeof r->host, "node%d", w / c->ranks_per_node);
    rf_layout_roles(&job->layout, w, &r->trainer_rank, &r->rollout_rank);
    r->gpu = c->gpus ? local % c->gpus : -1;
    snprintf(r->bus_id, sizeof r->bus_id, "-");
    snprintf(r->cpus, sizeof r->cpus, "-");
    r->numa = -1;
    if (c->nics)
      snprintf(r->nic, sizeof r->nic, "adapter%d",
               c->gpus ? r->gpu * c->nics / c->gpus : local * c->nics / c->ranks_per_node);
    else
      snprintf(r->nic, sizeof r->nic, "-");
  }
  return t;
}

/* Appends one mode's prediction as a simulated run: its timings are one iteration in which
 * every rank shows the job's predicted phases (the model predicts the job, not each rank). */
static rf_status record(const rf_sim_context *x, rf_results *results, rf_mode mode,
                        const rf_sim_result *r, json_t *mode_json) {
  const rf_job *job = x->job;
  const rf_plan *plan = &job->plan;
  int world = job->layout.world_size;
  rf_run_result res;
  memset(&res, 0, sizeof res);
  snprintf(res.mode, sizeof res.mode, "%s", rf_mode_name(mode));
  snprintf(res.plan, sizeof res.plan, "%s", rf_plan_kind_name(plan->kind));
  snprintf(res.transport, sizeof res.transport, "simulated");
  snprintf(res.verify, sizeof res.verify, "none");
  res.model_bytes = job->model.total_bytes;
  /* The bytes on the wire: an fp8 rollout's are what the prediction moved, a delta's encoded. */
  int64_t wire =
      x->delta.choice != RF_DELTA_CHOICE_OFF ? r->wire_transfer_bytes : plan->wire_transfer_bytes;
  res.replica_bytes = wire / job->rollout.dp;
  res.transfer_bytes = wire;
  res.pieces = plan->piece_count;
  res.messages = r->messages;
  res.bucket_size = x->cfg->bucket_size;
  res.iterations = 1;
  res.ranks = world;
  res.wrong = -1;
  res.checksum_bad = -1;
  for (int w = 0; w < world; w++)
    res.peak_staging = RF_MAX(res.peak_staging, r->staging[w]);
  res.status = RF_OK;
  res.timings = rf_calloc((size_t)world * RF_PHASE_COUNT + 1, sizeof *res.timings, "timings");
  rf_rank_info *ranks = rank_table(job, x->cluster);
  json_t *whole = rf_sim_json(x);
  json_array_append(json_object_get(whole, "runs"), mode_json);
  char *text = json_dumps(whole, JSON_COMPACT | JSON_PRESERVE_ORDER);
  char *config = rf_cli_config_json(x->cfg);
  json_decref(whole);
  rf_status st = res.timings && ranks && text && config ? RF_OK : RF_ERR_NOMEM;
  for (int w = 0; st == RF_OK && w < world; w++)
    memcpy(res.timings + (size_t)w * RF_PHASE_COUNT, r->phase, sizeof r->phase);
  if (st == RF_OK)
    st = rf_run_result_summarise(&res);
  char trainer[64], rollout[64];
  rf_trainer_layout_format(&job->trainer, trainer, sizeof trainer);
  rf_rollout_layout_format(&job->rollout, rollout, sizeof rollout);
  rf_results_run run = {
      .config_json = config,
      .model = job->model.name,
      .model_type = job->model.model_type,
      .dtype = rf_dtype_name(job->model.dtype),
      .trainer = trainer,
      .trainer_style = rf_trainer_style_name(job->trainer.style),
      .trainer_order = rf_trainer_order_name(x->cfg->trainer_order),
      .rollout = rollout,
      .placement = rf_placement_name(job->placement),
      .plan = rf_plan_kind_name(plan->kind),
      .mode = rf_mode_name(mode),
      .transport = "simulated",
      .transport_requested = x->cfg->transport,
      .transport_choice = x->transport_choice[0] ? x->transport_choice : NULL,
      .verify = "none",
      .memory = x->device ? "device" : "host",
      .bucket_size = x->cfg->bucket_size,
      .result = &res,
      .model_spec = &job->model,
      .replicas = job->rollout.dp,
      .messages = r->messages,
      .rank_table = ranks,
      .ranks = world,
      .env = "",
      .simulation_json = text,
      .cluster = x->cluster->name,
      .published_s = x->cfg->published_s,
      .published_label = x->cfg->published_label,
      .memory_fits = r->fits,
  };
  rf_record_plan_fields(&run, job);
  int number = 0;
  if (st == RF_OK)
    st = rf_results_add_run(results, &run, &number);
  if (st == RF_OK)
    RF_INFO("results: simulated run %04d appended to %s", number, x->cfg->output);
  free(res.timings);
  free(ranks);
  free(text);
  free(config);
  return st;
}

/* Predicts each mode in turn under x->delta, printing as it goes (text) or collecting (JSON). */
static rf_status simulate_delta(const rf_sim_context *x, rf_results *results, json_t *all) {
  rf_sim_options o = {RF_MODE_GROUPED,
                      x->cfg->bucket_size,
                      x->device,
                      x->transport->mapping,
                      rf_sim_wire(x->transport, x->device),
                      x->transport->ordered,
                      x->delta};
  for (int i = 0; i < x->cfg->mode.count; i++) {
    o.mode = x->cfg->mode.items[i];
    /* Calibrated, each mode with the rates its own runs gave (simulate.h). */
    const rf_cluster *c = x->calibration ? &x->calibration->mode_cluster[o.mode] : x->cluster;
    rf_sim_result r;
    rf_status st = rf_simulate(&x->job->plan, c, &o, &r);
    json_t *mj = st == RF_OK ? rf_sim_mode_json(x, o.mode, &r) : NULL;
    if (st == RF_OK && !mj)
      st = RF_ERR_NOMEM;
    if (st == RF_OK && !x->cfg->json)
      rf_sim_print_mode(x, o.mode, &r);
    if (st == RF_OK && results)
      st = record(x, results, o.mode, &r, mj);
    if (st == RF_OK && all)
      json_array_append(json_object_get(all, "runs"), mj);
    json_decref(mj);
    rf_sim_result_free(&r);
    RF_TRY(st);
  }
  return RF_OK;
}

/* The lower bounds of a delta refit, on the cluster and on each mode's calibrated one. */
static rf_status delta_bounds(rf_sim_context *x) {
  const rf_layout *lay = &x->job->layout;
  int mapping = x->transport->mapping;
  RF_TRY(rf_sim_lower_bound_delta(lay, x->cluster, x->device, mapping, &x->delta, &x->bound));
  for (int m = 0; m < RF_MODE_COUNT; m++)
    if (x->calibration)
      RF_TRY(rf_sim_lower_bound_delta(lay, &x->calibration->mode_cluster[m], x->device, mapping,
                                      &x->delta, &x->mode_bound[m]));
    else
      x->mode_bound[m] = x->bound;
  return RF_OK;
}

/* Predicts each mode in turn, printing as it goes (text) or collecting (JSON); with deltas,
 * each mode once per delta. */
static rf_status simulate_modes(const rf_sim_context *whole, rf_results *results, json_t *all) {
  static const rf_sim_delta_model off = {RF_DELTA_CHOICE_OFF, 0.0};
  int deltas = whole->delta_count > 0 ? whole->delta_count : 1;
  for (int d = 0; d < deltas; d++) {
    rf_sim_context xd = *whole;
    xd.delta = whole->delta_count > 0 ? whole->deltas[d] : off;
    if (xd.delta.choice != RF_DELTA_CHOICE_OFF)
      RF_TRY(delta_bounds(&xd));
    RF_TRY(simulate_delta(&xd, results, all));
  }
  return RF_OK;
}
/* --delta and --update as the simulation's delta models: one per --delta value, each with the
 * fraction --update changes per version (none 0, full 1, sparse:F F). With --delta off alone,
 * none: whole versions, as before. adam's fraction is what rounding leaves, which only a run
 * can count. */
static rf_status delta_models(const rf_config *cfg, rf_sim_delta_model *out, int *count) {
  *count = 0;
  int on = 0;
  for (int i = 0; i < cfg->delta.count; i++)
    on |= cfg->delta.items[i] != RF_DELTA_CHOICE_OFF;
  if (!on)
    return RF_OK;
  rf_update u;
  char why[256];
  RF_TRY(rf_update_parse(cfg->update, &u, why, sizeof why));
  if (u.kind == RF_UPDATE_ADAM)
    return rf_fail(RF_ERR_USAGE,
                   "--update %s: refit simulate cannot know what fraction adam's steps change; "
                   "give --update sparse:F with the fraction a refit run printed",
                   cfg->update);
  double changed = u.kind == RF_UPDATE_NONE ? 0.0 : u.kind == RF_UPDATE_FULL ? 1.0 : u.param;
  for (int i = 0; i < cfg->delta.count; i++) {
    RF_TRY(rf_sim_delta_model_init(cfg->delta.items[i], changed, &out[(*count)++]));
  }
  return RF_OK;
}

rf_status rf_cmd_simulate(const rf_config *cfg) {
  if (!cfg->cluster[0])
    return rf_fail(RF_ERR_USAGE, "refit simulate needs --cluster NAME|FILE (configs/clusters "
                                 "holds h100-hgx, h200-hgx, gb200-nvl72, h20-hgx, h800-hgx, "
                                 "h200-lent and vm-2core)");
  if (cfg->published_label[0] && !(cfg->published_s > 0))
    return rf_fail(RF_ERR_USAGE, "refit simulate --published-label needs --published-s SECONDS, "
                                 "the published time it labels");
  rf_cluster cluster;
  RF_TRY(rf_cluster_load(cfg->cluster, &cluster));
  rf_job job;
  rf_cluster_placement where = {0};
  rf_calibration cal;
  memset(&cal, 0, sizeof cal);
  rf_results *results = NULL;
  json_t *all = NULL;
  rf_sim_delta_model deltas[RF_MAX_MODES];
  char choice[RF_TRANSPORT_CHOICE_MAX] = "";
  rf_sim_context x = {.cfg = cfg, .job = &job, .cluster = &cluster, .transport_choice = choice};
  RF_TRY(delta_models(cfg, deltas, &x.delta_count));
  x.deltas = x.delta_count ? deltas : NULL;
  rf_plan_options po;
  rf_status st = rf_job_build_layout(cfg, 0, &job);
  /* The transport once the job's ranks are known: auto chooses by the nodes they span. */
  if (st == RF_OK)
    st = simulated_transport(cfg, &cluster, job.layout.world_size, choice, sizeof choice, &x);
  if (st == RF_OK)
    st = rf_transport_check_register(x.transport, cfg->register_unit);
  /* Past a failure only for the initializers below, which nothing then uses. */
  const rf_transport_ops *transport = x.transport ? x.transport : &rf_transport_mpi;
  /* Before the plan, the costly step: a job too large for the cluster fails at once. */
  if (st == RF_OK)
    st = rf_cluster_fits(&cluster, job.layout.world_size, x.device, transport->mapping);
  /* Planned with the cluster's distances, as refit run plans with the machine's. */
  if (st == RF_OK)
    st = rf_cluster_plan_options(&cluster, job.layout.world_size, &where, &po);
  if (st == RF_OK && job.domain_of) /* --domain-ranks: domains other than the cluster's nodes */
    po.domain_of = job.domain_of;
  /* Calibrated before planning, so that --plan auto chooses with the fitted rates. */
  if (st == RF_OK && cfg->calibration[0]) {
    st = rf_calibration_fit(cfg->calibration, &cluster, x.device, &cal);
    x.calibration = &cal;
  }
  rf_plan_auto_inputs in = {.cluster = &cluster,
                            .options = &po,
                            .modes = &cfg->mode,
                            .bucket_size = cfg->bucket_size,
                            .device = x.device,
                            .mapping = transport->mapping,
                            .ordered = transport->ordered,
                            .wire = rf_sim_wire(transport, x.device)};
  if (st == RF_OK)
    st = rf_job_plan(&job, cfg->plan, &in);
  if (st == RF_OK && transport->one_sided)
    st = rf_sim_registration(&job.plan, &cluster, cfg->register_unit, &x.reg);
  if (st == RF_OK)
    st = rf_sim_lower_bound(&job.layout, &cluster, x.device, transport->mapping, &x.bound);
  for (int m = 0; st == RF_OK && m < RF_MODE_COUNT; m++)
    if (x.calibration)
      st = rf_sim_lower_bound(&job.layout, &cal.mode_cluster[m], x.device, transport->mapping,
                              &x.mode_bound[m]);
    else
      x.mode_bound[m] = x.bound;
  if (st == RF_OK && cfg->output[0]) {
    rf_results_file_info info = {cfg->command_line, "", "", cfg->output_wait};
    st = rf_results_open(cfg->output, &info, &results);
  }
  if (st == RF_OK && cfg->json)
    st = (all = rf_sim_json(&x)) ? RF_OK : RF_ERR_NOMEM;
  else if (st == RF_OK)
    rf_sim_print_header(&x);
  if (st == RF_OK)
    st = simulate_modes(&x, results, all);
  if (st == RF_OK && all) {
    char *text = json_dumps(all, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    st = text ? RF_OK : rf_fail(RF_ERR_NOMEM, "out of memory formatting the prediction as JSON");
    if (text)
      printf("%s\n", text);
    free(text);
  }
  json_decref(all);
  if (results)
    rf_results_close(results);
  rf_calibration_free(&cal);
  rf_cluster_placement_free(&where);
  rf_job_free(&job);
  return st;
}
