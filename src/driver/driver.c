/* Command dispatch and the job every command starts from. */
#include <jansson.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control/control.h"
#include "driver.h"
#include "io/io.h"
#include "plan_auto.h"
#include "transport/transport.h"

static int ends_with_json(const char *s) {
  size_t n = strlen(s);
  return n >= 5 && strcmp(s + n - 5, ".json") == 0;
}

int rf_job_model_name_ok(const char *name) {
  return name[0] && !strchr(name, '/') && !ends_with_json(name);
}

void rf_job_model_of_run(const char *name, const char *config_json, char *out, size_t len) {
  snprintf(out, len, "%s", name);
  json_t *cfg = config_json ? json_loads(config_json, 0, NULL) : NULL;
  const char *given = cfg ? json_string_value(json_object_get(cfg, "model")) : NULL;
  char stem[RF_PATH_MAX] = "";
  if (given && strchr(given, '/') && ends_with_json(given))
    rf_model_stem(given, stem, sizeof stem);
  if (stem[0] && strcmp(stem, name) == 0 && access(given, R_OK) == 0)
    snprintf(out, len, "%s", given);
  json_decref(cfg);
}

rf_status rf_job_load_model(const rf_config *cfg, rf_model *model) {
  if (rf_format_find(cfg->dtype))
    return rf_fail(RF_ERR_USAGE,
                   "option --dtype %s writes a quantized checkpoint (refit checkpoint); the "
                   "trainer's weights are model, bf16, fp16 or fp32: use --rollout-dtype %s to "
                   "move %s rollouts",
                   cfg->dtype, cfg->dtype, cfg->dtype);
  RF_TRY(rf_model_load(cfg->model, model));
  if (strcmp(cfg->dtype, "model") == 0)
    return RF_OK;
  rf_dtype dt;
  if (rf_dtype_parse(cfg->dtype, &dt) != RF_OK) {
    rf_model_free(model);
    return rf_fail(RF_ERR_USAGE, "option --dtype: '%s' is not one of model|bf16|fp16|fp32",
                   cfg->dtype);
  }
  rf_model_set_dtype(model, dt);
  return RF_OK;
}

/* A quantized rollout from a checkpoint in its format (block-FP8, MXFP8, MXFP4, NVFP4, as
 * refit checkpoint --dtype writes them): the trainer holds each linear weight as the file does,
 * its quantized bytes with the scales of its blocks (and nvfp4's global), and moves them as
 * they are (plan_fp8.c, RF_QUANT_CARRIED), so the rollout is the file. The rollout's format
 * must be the file's: refit never requantizes a quantized weight. Formats alike on file
 * (rf_format_same_file: fp8 and fp8-ue8m0, the MX formats and their -floor twins) take each
 * other's files, since the rule that made a scale is not in the file and carrying needs none.
 * Star's reshape would move the bytes without their scales. A file in no format of the table
 * (or not readable at all) is left to the ordinary checkpoint open to describe. */
static rf_status use_quantized_checkpoint(const rf_config *cfg, rf_job *job, char *first,
                                          size_t len) {
  const rf_format *file = NULL, *f = rf_format_of(cfg->rollout_dtype);
  if (!cfg->checkpoint[0])
    return RF_OK;
  /* A list of versions (refit run --checkpoint V0,V1,...) is of one kind: the first says. */
  RF_TRY(rf_checkpoint_list_item(cfg->checkpoint, 0, first, len));
  if (!f)
    return RF_OK;
  RF_TRY(rf_checkpoint_quantized_format(first, &job->model, &file));
  if (!file)
    return RF_OK;
  if (rf_checkpoint_list_count(cfg->checkpoint) > 1)
    return rf_fail(RF_ERR_USAGE,
                   "--checkpoint: '%s' is a %s checkpoint, which refit moves as one version; "
                   "give one file, or versions in the model's dtype",
                   first, file->name);
  if (!rf_format_same_file(file, f)) {
    char alike[64];
    rf_format_same_file_names(file, alike, sizeof alike);
    return rf_fail(RF_ERR_USAGE,
                   "--rollout-dtype %s cannot take the %s checkpoint '%s' as the trainer's "
                   "weights: refit carries a quantized checkpoint's bytes as they are; use "
                   "--rollout-dtype %s, or a checkpoint in the model's dtype",
                   f->name, file->name, first, alike);
  }
  if (cfg->plan == RF_PLAN_STAR)
    return rf_fail(RF_ERR_USAGE,
                   "--plan star cannot move the %s checkpoint '%s': its reshape would move the "
                   "quantized bytes without their scales; use --plan p2p or fanout",
                   file->name, first);
  rf_model_weights_quantized(&job->model, rf_format_weight_dtype(f), f->elem_bits);
  job->quantized_checkpoint = f;
  return RF_OK;
}

/* A trainer shard of a 4-bit weight holds whole bytes, two elements each: one that starts or
 * ends on an odd column would share a byte with its neighbour, which neither could send as
 * its own. */
static rf_status check_packed_shards(const rf_layout *lay, const rf_format *f, const char *file) {
  if (!f || f->elem_bits == 8)
    return RF_OK;
  for (int t = 0; t < lay->model->tensor_count; t++) {
    if (!rf_tensor_quantized(&lay->model->tensors[t]))
      continue;
    for (int r = 0; r < lay->trainer_ranks; r++) {
      rf_box b = rf_layout_trainer_box(lay, t, r);
      if (!rf_box_is_empty(&b) && (b.lo[1] % 2 || b.hi[1] % 2))
        return rf_fail(RF_ERR_LAYOUT,
                       "the %s checkpoint '%s': trainer rank %d's shard of %s covers columns "
                       "%lld..%lld, which cuts a byte of two packed elements; use a trainer "
                       "layout that cuts its columns at even ones",
                       f->name, file, r, lay->model->tensors[t].name, (long long)b.lo[1],
                       (long long)b.hi[1] - 1);
    }
  }
  return RF_OK;
}

rf_status rf_job_build(const rf_config *cfg, int world_size, rf_job *job) {
  RF_TRY(rf_job_build_layout(cfg, world_size, job));
  if (cfg->plan == RF_PLAN_AUTO)
    return rf_job_plan_auto_default(cfg, job);
  rf_plan_options domains = {.domain_of = job->domain_of};
  RF_TRY(rf_plan_build(&job->plan, &job->layout, cfg->plan, job->domain_of ? &domains : NULL));
  job->have_plan = 1;
  return RF_OK;
}

rf_status rf_job_build_layout(const rf_config *cfg, int world_size, rf_job *job) {
  memset(job, 0, sizeof *job);
  /* Checked here rather than by the option table so that a sweep skips a bad value in a
   * list, as it skips any other combination that cannot run. */
  if (cfg->bucket_size != 0 && cfg->bucket_size < 4096)
    return rf_fail(RF_ERR_USAGE,
                   "option --bucket-size: %lld bytes is below the minimum of 4096 "
                   "(or 0 for the whole model in one bucket)",
                   (long long)cfg->bucket_size);
  const rf_format *f = rf_format_of(cfg->rollout_dtype);
  if (f && cfg->bucket_size != 0 && cfg->bucket_size < rf_format_min_bucket(f))
    return rf_fail(RF_ERR_USAGE,
                   "option --bucket-size: %lld bytes is below the %lld of one %dx%d %s block "
                   "and its scale, which --rollout-dtype %s moves whole; use %lld or more (or 0)",
                   (long long)cfg->bucket_size, (long long)rf_format_min_bucket(f), f->block_rows,
                   f->block_cols, f->block_rows == 128 ? "fp8" : f->name, f->name,
                   (long long)rf_format_min_bucket(f));
  RF_TRY(rf_trainer_layout_parse(cfg->trainer, &job->trainer));
  RF_TRY(rf_rollout_layout_parse(cfg->rollout, &job->rollout));
  job->trainer.style = cfg->trainer_style;
  job->trainer.order = cfg->trainer_order;
  job->rollout.dtype = cfg->rollout_dtype;
  job->placement = cfg->placement;

  RF_TRY(rf_job_load_model(cfg, &job->model));
  job->have_model = 1;
  char first[RF_PATH_MAX] = "";
  RF_TRY(use_quantized_checkpoint(cfg, job, first, sizeof first));
  RF_TRY(rf_layout_init(&job->layout, &job->model, &job->trainer, &job->rollout, job->placement));
  job->have_layout = 1;
  RF_TRY(check_packed_shards(&job->layout, job->quantized_checkpoint, first));
  /* Before the plan, the costly step: a typo like dp=65536 fails at once. After the layout, so
   * that a layout that cannot work on any world says so first. */
  if (world_size > 0)
    RF_TRY(rf_layout_check_world(&job->trainer, &job->rollout, job->placement, world_size));
  if (cfg->domain_ranks > 0) {
    int world = job->layout.world_size;
    job->domain_of = rf_malloc((size_t)world * sizeof *job->domain_of + 1, "the domain table");
    if (!job->domain_of)
      return RF_ERR_NOMEM;
    for (int w = 0; w < world; w++)
      job->domain_of[w] = w / (int)cfg->domain_ranks;
  }
  return RF_OK;
}

rf_status rf_job_replan(rf_job *job, const rf_plan_options *options) {
  rf_plan_kind kind = job->plan.kind;
  if (job->have_plan)
    rf_plan_free(&job->plan);
  job->have_plan = 0;
  rf_plan_options o = options ? *options : (rf_plan_options){0};
  if (job->domain_of)
    o.domain_of = job->domain_of;
  RF_TRY(rf_plan_build(&job->plan, &job->layout, kind, &o));
  job->have_plan = 1;
  return RF_OK;
}

void rf_job_free(rf_job *job) {
  if (job->have_plan)
    rf_plan_free(&job->plan);
  if (job->have_layout)
    rf_layout_free(&job->layout);
  if (job->have_model)
    rf_model_free(&job->model);
  free(job->domain_of);
  memset(job, 0, sizeof *job);
}

/* Under mpirun every rank parses the same command line before MPI is up; the launcher's
 * environment says which rank this is (-1: not launched by one), so that a bad option is
 * reported once, by rank 0. */
static int launcher_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                     "SLURM_PROCID"};
  for (size_t i = 0; i < RF_ARRAY_LEN(vars); i++) {
    const char *v = getenv(vars[i]);
    if (v)
      return atoi(v);
  }
  return -1;
}

/* A usage error found before MPI is up, under a launcher: the other ranks would exit at once,
 * and mpirun then kills the rest of the job, rank 0 included, perhaps before it has written
 * its line. So the ranks meet in a bounded barrier, which rank 0 enters only after writing,
 * and leave together. Without MPI, or when a rank never comes, they leave as they are. */
static void leave_together(double timeout) {
  int provided = 0;
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    return;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  rf_control world;
  rf_control_attach(&world, MPI_COMM_WORLD, timeout > 0 ? timeout : 60.0);
  rf_status st = rf_control_barrier(&world, MPI_COMM_WORLD, "every rank to read the usage error");
  if (st == RF_ERR_TIMEOUT)
    MPI_Abort(MPI_COMM_WORLD, rf_status_exit_code(RF_ERR_USAGE)); /* a rank never came */
  MPI_Finalize();
}

rf_status rf_run_check_rollout_dtype(const rf_config *cfg) {
  const rf_format *f = rf_format_of(cfg->rollout_dtype);
  if (!f)
    return RF_OK;
  /* mpi takes GPU weights through pinned host buffers, where the quantize kernels would read
   * and write across the bus (engine.c, check_fp8); shm never holds GPU memory (cmd_run.c). */
  if (cfg->memory == RF_MEM_REQUEST_DEVICE && strcmp(cfg->transport, "mpi") == 0)
    return rf_fail(RF_ERR_USAGE,
                   "--rollout-dtype %s with --memory device needs a transport that keeps the "
                   "bytes on the GPU: use --transport ipc or nccl, or --memory host with mpi",
                   f->name);
  return RF_OK;
}

/* Whether a sweep lists the rollout dtype: then each combination is checked on its own. */
static int sweeps_rollout_dtype(const rf_config *cfg) {
  for (int a = 0; a < cfg->sweep.axis_count; a++)
    if (strcmp(cfg->sweep.axes[a].name, "rollout-dtype") == 0)
      return 1;
  return 0;
}

int rf_driver_main(int argc, char **argv) {
  rf_results_library_init();
  rf_log_init_from_env();
  rf_config cfg;
  static char transports[512];
  char names[256];
  rf_transport_names(names, sizeof names);
  snprintf(transports, sizeof transports, "transports in this build (--transport): %s", names);
  rf_cli_set_help_note(RF_CMD_RUN, transports);
  memset(&cfg, 0, sizeof cfg);
  int launched = launcher_rank();
  rf_log_push_quiet(launched > 0);
  rf_status st = rf_cli_parse(argc, argv, &cfg);
  if (st == RF_OK && !cfg.help && cfg.command == RF_CMD_RUN && !sweeps_rollout_dtype(&cfg))
    st = rf_run_check_rollout_dtype(&cfg);
  rf_log_pop_quiet();
  if (st != RF_OK && launched >= 0)
    leave_together(cfg.timeout);
  if (st != RF_OK || cfg.help)
    return rf_status_exit_code(st);
  switch (cfg.command) {
  case RF_CMD_PLAN:
    st = rf_cmd_plan(&cfg);
    break;
  case RF_CMD_RUN:
    st = rf_cmd_run(&cfg, &argc, &argv);
    break;
  case RF_CMD_CHECKPOINT:
    st = rf_cmd_checkpoint(&cfg);
    break;
  case RF_CMD_VERIFY:
    st = rf_cmd_verify(&cfg);
    break;
  case RF_CMD_TOPO:
    st = rf_cmd_topo(&cfg);
    break;
  case RF_CMD_REPORT:
    st = rf_cmd_report(&cfg);
    break;
  case RF_CMD_SIMULATE:
    st = rf_cmd_simulate(&cfg);
    break;
  default:
    st = rf_fail(RF_ERR_USAGE, "no command given; see refit --help");
    break;
  }
  return rf_status_exit_code(st);
}
