/* Gathering a run's record to rank 0 and appending it to the HDF5 results file. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate.h"
#include "run_record.h"

extern char **environ;

rf_status rf_record_open(run_record *rec, rf_control *ctl, const rf_config *cfg) {
  if (ctl->world_rank != 0 || !cfg->output[0])
    return RF_OK;
  /* The hosts in rank order, each once. */
  rf_strbuf hosts = {0};
  for (int r = 0; rec->placement && r < ctl->world_size; r++) {
    int seen = 0;
    for (int q = 0; q < r && !seen; q++)
      seen = strcmp(rec->placement[q].host, rec->placement[r].host) == 0;
    if (!seen)
      rf_strbuf_printf(&hosts, "%s%s", hosts.len ? "," : "", rec->placement[r].host);
  }
  char cuda[96], nccl[48], gpu[160];
  rf_gpu_versions(cuda, sizeof cuda);
  rf_control_nccl_version(nccl, sizeof nccl);
  snprintf(gpu, sizeof gpu, "%s%s%s", cuda, cuda[0] && nccl[0] ? ", " : "", nccl);
  rf_results_file_info info = {cfg->command_line, hosts.data ? hosts.data : "", gpu,
                               cfg->output_wait};
  rf_status st = rf_results_open(cfg->output, &info, &rec->results);
  rf_strbuf_free(&hosts);
  return st;
}

/* The environment variables that change how MPI, NCCL, UCX and hwloc behave. */
static char *tuning_environment(void) {
  static const char *const prefixes[] = {"NCCL_", "OMPI_", "UCX_", "HWLOC_"};
  rf_strbuf env = {0};
  for (char **e = environ; e && *e; e++)
    for (size_t p = 0; p < RF_ARRAY_LEN(prefixes); p++)
      if (strncmp(*e, prefixes[p], strlen(prefixes[p])) == 0)
        rf_strbuf_printf(&env, "%s\n", *e);
  return env.data ? env.data : rf_strdup("");
}

/* Gathers every rank's shard digests to rank 0 (counts first, then the records). */
static rf_status gather_digests(rf_control *ctl, rf_engine *e, rf_shard_digest **all, int *total) {
  rf_shard_digest *mine = NULL;
  int n = 0, *counts = NULL, *displs = NULL;
  rf_status local = rf_engine_digests(e, &mine, &n); /* a failed rank still takes part, with 0 */
  int rank0 = ctl->world_rank == 0;
  if (rank0) {
    counts = rf_calloc((size_t)ctl->world_size, sizeof *counts, "digest counts");
    displs = rf_calloc((size_t)ctl->world_size, sizeof *displs, "digest counts");
  }
  /* Rank 0 without its arrays would hand the gathers NULL buffers: the ranks agree first. */
  rf_status st = rf_control_agree(ctl, rank0 && (!counts || !displs) ? RF_ERR_NOMEM : RF_OK);
  if (st != RF_OK)
    goto done;
  RF_TRY_GOTO(rf_control_gather(ctl, ctl->world, &n, counts, 1, MPI_INT, "the shard digest counts"),
              done);
  *total = 0;
  for (int r = 0; rank0 && r < ctl->world_size; r++) {
    displs[r] = *total * (int)sizeof **all;
    *total += counts[r];
    counts[r] *= (int)sizeof **all;
  }
  if (rank0)
    *all = rf_calloc((size_t)*total + 1, sizeof **all, "shard digests");
  RF_TRY_GOTO(rf_control_agree(ctl, rank0 && !*all ? RF_ERR_NOMEM : RF_OK), done);
  st = rf_control_gatherv(ctl, ctl->world, mine, n * (int)sizeof *mine, rank0 ? *all : NULL, counts,
                          displs, MPI_BYTE, "the shard digests");
done:
  free(mine);
  free(counts);
  free(displs);
  return st != RF_OK ? st : local;
}

rf_status rf_record_run(run_record *rec, rf_control *ctl, const rf_config *cfg, const rf_job *job,
                        rf_engine *e, rf_mode mode, const rf_run_result *res) {
  int64_t sweep_index = rec->slot ? rec->slot->first_index + rec->runs : 0;
  rec->runs++;
  rec->calibrated = 0;
  if (cfg->calibrate) {
    /* Right after the run's own iterations, between the same ranks, for the same bytes. */
    rf_calibration cal;
    /* The plain GPU transfer runs over the run's own communicators, so only nccl has one. */
    rf_transport *tp = e->transport;
    rf_transport *gpu_tp = tp->ops->memory == RF_MEM_DEVICE && !tp->ops->peer_buffer ? tp : NULL;
    RF_TRY(rf_calibrate(ctl, &job->plan, (int)cfg->warmup, (int)cfg->iters,
                        e->memory == RF_MEM_DEVICE, gpu_tp, &cal));
    rec->limits = cal.limits;
    rec->calibrated = 1;
    rec->compared_with = tp->ops->limit;
  }
  if (!cfg->output[0])
    return RF_OK;
  rf_shard_digest *digests = NULL;
  int count = 0;
  RF_TRY(gather_digests(ctl, e, &digests, &count));
  if (ctl->world_rank != 0)
    return RF_OK;
  char trainer[64], rollout[64];
  rf_trainer_layout_format(&job->trainer, trainer, sizeof trainer);
  rf_rollout_layout_format(&job->rollout, rollout, sizeof rollout);
  char *config = rf_cli_config_json(cfg), *env = tuning_environment();
  int auto_chosen = rec->slot && rec->slot->transport_choice[0];
  const rf_plan *plan = &job->plan;
  int nt = job->model.tensor_count;
  rf_results_run run = {
      .config_json = config ? config : "{}",
      .model = job->model.name,
      .model_type = job->model.model_type,
      .dtype = rf_dtype_name(job->model.dtype),
      .trainer = trainer,
      .trainer_style = rf_trainer_style_name(cfg->trainer_style),
      .trainer_order = rf_trainer_order_name(cfg->trainer_order),
      .rollout = rollout,
      .placement = rf_placement_name(cfg->placement),
      .plan = rf_plan_kind_name(plan->kind),
      .mode = rf_mode_name(mode),
      .transport = cfg->transport,
      .transport_requested = auto_chosen ? "auto" : cfg->transport,
      .transport_choice = auto_chosen ? rec->slot->transport_choice : NULL,
      .verify = rf_verify_level_name(cfg->verify),
      .memory = rf_mem_kind_name(e->memory),
      .job_setup = rec->job_setup_known ? rec->job_setup : NULL,
      .bucket_size = cfg->bucket_size,
      .seed = cfg->seed,
      .update = cfg->update,
      .result = res,
      .model_spec = &job->model,
      .replicas = job->rollout.dp,
      .trainer_checksum = rec->checksums,
      .rollout_checksum = rec->checksums ? rec->checksums + nt : NULL,
      .reference_checksum = rec->reference,
      .tensor_ok = rec->checksums ? rec->verdicts : NULL,
      .shards = digests,
      .shard_count = count,
      .messages = res->messages,
      .rank_table = rec->placement,
      .ranks = ctl->world_size,
      .links = rec->links,
      .link_count = rec->link_count,
      .env = env,
      .sweep_index = sweep_index,
      .sweep_size = rec->slot ? rec->slot->size : 0,
      .limits = rec->calibrated ? &rec->limits : NULL,
  };
  rf_record_plan_fields(&run, job);
  int number = 0;
  rf_status st = rf_results_add_run(rec->results, &run, &number);
  if (st == RF_OK)
    RF_INFO("results: run %04d appended to %s", number, cfg->output);
  free(config);
  free(env);
  free(digests);
  return st;
}

void rf_record_plan_fields(rf_results_run *run, const rf_job *job) {
  const rf_plan *plan = &job->plan;
  int fp8 = rf_layout_format(plan->layout) != NULL;
  int fanout = rf_plan_forwards(plan);
  run->plan_choice = job->plan_why[0] ? job->plan_why : NULL;
  run->pieces = plan->piece_count;
  run->transfer_bytes = plan->transfer_bytes;
  run->reshape_bytes = plan->reshape_bytes;
  run->rollout_dtype = rf_rollout_dtype_name(plan->layout->rollout.dtype);
  run->wire_send_bytes = fp8 ? plan->wire_send_bytes : NULL;
  run->wire_recv_bytes = plan->wire_recv_bytes;
  run->wire_transfer_bytes = plan->wire_transfer_bytes;
  run->wire_forward_bytes = plan->wire_forward_bytes;
  run->source_quantized_tensors = plan->source_tensors;
  run->destination_quantized_tensors = plan->destination_tensors;
  run->send_bytes = plan->send_bytes;
  run->recv_bytes = plan->recv_bytes;
  run->trainer_ranks = job->layout.trainer_ranks;
  run->rollout_ranks = job->layout.rollout_ranks;
  run->forward_send_bytes = fanout ? plan->forward_send_bytes : NULL;
  run->forward_recv_bytes = fanout ? plan->forward_recv_bytes : NULL;
  run->forward_bytes = plan->forward_bytes;
  run->forward_depth = plan->forward_depth;
}

/* Seconds with millisecond digits, or three significant ones for the times a tiny model
 * gives. */
static void print_seconds(const char *name, double s) {
  printf(s >= 0.1 ? "%s %.3f s" : "%s %.3g s", name, s);
}

void rf_record_print_limits(run_record *rec, const rf_run_result *res) {
  if (!rec->calibrated)
    return;
  rec->calibrated = 0;
  const rf_results_limits *l = &rec->limits;
  const struct {
    const char *name;
    double s;
  } limits[RF_LIMIT_COUNT] = {[RF_LIMIT_MEMCPY] = {"memcpy", l->memcpy_s},
                              [RF_LIMIT_DEVICE_COPY] = {"device copy", l->device_copy_s},
                              [RF_LIMIT_MPI] = {"mpi", l->mpi_s},
                              [RF_LIMIT_NCCL] = {"nccl", l->nccl_s}};
  /* The run is compared with the plain transfer its transport stands for, or with mpi when
   * that one was not measured. */
  rf_limit ref = limits[rec->compared_with].s > 0 ? rec->compared_with : RF_LIMIT_MPI;
  printf("limits:");
  const char *sep = " ";
  for (size_t i = 0; i < RF_ARRAY_LEN(limits); i++)
    if (limits[i].s > 0) {
      printf("%s", sep);
      print_seconds(limits[i].name, limits[i].s);
      sep = ", ";
    }
  if (res->total.median > 0)
    printf("; %s at %.2f of %s", res->mode, limits[ref].s / res->total.median, limits[ref].name);
  printf("\n");
  fflush(stdout);
}

void rf_record_free(run_record *rec) {
  if (rec->results)
    rf_results_close(rec->results);
  free(rec->placement);
  free(rec->links);
  free(rec->reference);
  free(rec->checksums);
  free(rec->verdicts);
  memset(rec, 0, sizeof *rec);
}
