/* The sweep loop of `refit run`: the cartesian product of a config file's lists, one job per
 * combination (each with its own control plane, since the layouts differ) inside one MPI job.
 * Every rank walks the same combinations and reaches the same verdicts without talking, so
 * only rank 0 prints; the jobs themselves agree on their outcome. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/control.h"
#include "io/io.h"
#include "sweep.h"
#include "transport/transport.h"

/* More would be a typo in a config file rather than a plan: refuse before running any. */
#define RF_SWEEP_MAX_COMBINATIONS 4096

typedef struct {
  int skipped;
  int runs; /* its modes, or 1 for a skipped combination */
  char reason[512];
} combination;

/* Combination c's configuration (the last axis varies fastest) and its varying keys as
 * "key=value ...", in the file's order. */
static rf_status combination_config(const rf_config *cfg, int c, rf_config *out, char *params,
                                    size_t len) {
  const rf_sweep *sw = &cfg->sweep;
  int index[RF_SWEEP_MAX_AXES];
  for (int a = sw->axis_count - 1; a >= 0; a--) {
    index[a] = c % sw->axes[a].count;
    c /= sw->axes[a].count;
  }
  *out = *cfg;
  out->sweep.axis_count = 0; /* one plain configuration per run */
  size_t used = 0;
  params[0] = '\0';
  for (int a = 0; a < sw->axis_count; a++) {
    const char *value = sw->axes[a].values[index[a]];
    RF_TRY(rf_cli_set_option(out, sw->axes[a].name, value));
    char key[32];
    snprintf(key, sizeof key, "%s", sw->axes[a].name);
    for (char *k = key; *k; k++)
      *k = *k == '-' ? '_' : *k;
    used += (size_t)snprintf(params + used, len - RF_MIN(used, len), "%s%s=%s", a ? " " : "", key,
                             value);
  }
  return RF_OK;
}

/* Whether a combination can run on `world` ranks (0: on as many as it needs): the job builds
 * (model, layouts, plan) and the world has its ranks. The reason is the one line its job
 * would have printed. */
static void check_combination(const rf_config *cfg, int world, combination *cb) {
  rf_job job;
  memset(&job, 0, sizeof job);
  cb->reason[0] = '\0';
  rf_log_capture(cb->reason, sizeof cb->reason);
  const rf_transport_ops *ops = NULL;
  rf_status st = rf_transport_find(cfg->transport, &ops);
  if (st == RF_OK)
    st = rf_run_check_rollout_dtype(cfg);
  if (st == RF_OK)
    st = rf_job_build(cfg, world, &job);
  rf_log_capture(NULL, 0);
  if (st != RF_OK && !cb->reason[0])
    snprintf(cb->reason, sizeof cb->reason, "%s", rf_status_text(st));
  cb->skipped = st != RF_OK;
  cb->runs = cb->skipped ? 1 : cfg->mode.count;
  rf_job_free(&job);
}

/* Rank 0 appends a skipped combination to --output: its configuration and the reason. */
static rf_status record_skip(const rf_config *cfg, int index, int size, const char *reason) {
  rf_results_file_info info = {cfg->command_line, rf_hostname(), "", cfg->output_wait};
  rf_results *r = NULL;
  RF_TRY(rf_results_open(cfg->output, &info, &r));
  char *config = rf_cli_config_json(cfg), modes[256];
  rf_results_run run = {.config_json = config ? config : "{}",
                        .model = cfg->model,
                        .trainer = cfg->trainer,
                        .rollout = cfg->rollout,
                        .placement = rf_placement_name(cfg->placement),
                        .plan = rf_plan_kind_name(cfg->plan),
                        .mode = rf_mode_list_format(&cfg->mode, modes, sizeof modes),
                        .transport = cfg->transport,
                        .bucket_size = cfg->bucket_size,
                        .sweep_index = index,
                        .sweep_size = size,
                        .skip_reason = reason};
  int number = -1;
  rf_status st = rf_results_add_run(r, &run, &number);
  if (st == RF_OK)
    RF_INFO("results: skipped combination appended to %s as run %04d", cfg->output, number);
  rf_results_close(r);
  free(config);
  return st;
}

void rf_sweep_announce(const rf_sweep_slot *slot, int mode_index, const char *mode) {
  if (!slot->announce || slot->world_rank != 0)
    return;
  int done = slot->done_before + mode_index;
  int left = slot->runs - mode_index + slot->left_after;
  double elapsed = rf_now() - slot->start;
  printf("run %d/%d: %s%s%s%s", slot->first_index + mode_index, slot->size, slot->params,
         slot->show_mode && slot->params[0] ? " " : "", slot->show_mode ? "mode=" : "",
         slot->show_mode ? mode : "");
  if (done > 0)
    printf(" (elapsed %.1f s, about %.1f s left)\n", elapsed, elapsed / done * left);
  else
    printf(" (elapsed %.1f s)\n", elapsed);
  fflush(stdout);
}

/* --dry-run: the lines a real sweep would print before each run, without times. */
static void list_runs(const rf_config *cfg, const rf_sweep_slot *slot) {
  for (int m = 0; m < slot->runs; m++) {
    const char *mode = rf_mode_name(cfg->mode.items[m]);
    int named = slot->show_mode || !slot->params[0]; /* never an empty line */
    printf("run %d/%d: %s%s%s%s\n", slot->first_index + m, slot->size, slot->params,
           named && slot->params[0] ? " " : "", named ? "mode=" : "", named ? mode : "");
  }
}

rf_status rf_sweep_execute(const rf_config *cfg, rf_sweep_job_fn job, int *timed_out) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const rf_sweep *sw = &cfg->sweep;
  int64_t total = 1;
  for (int a = 0; a < sw->axis_count; a++)
    total = RF_MIN(total * sw->axes[a].count, RF_SWEEP_MAX_COMBINATIONS + 1);
  if (total > RF_SWEEP_MAX_COMBINATIONS) {
    if (rank == 0) /* every rank sees the same lists */
      RF_ERROR("%s: the sweep has more than %d combinations; shorten its lists",
               cfg->config[0] ? cfg->config : "refit run", RF_SWEEP_MAX_COMBINATIONS);
    return RF_ERR_USAGE;
  }
  int n = (int)total;
  combination *cb = rf_calloc((size_t)n, sizeof *cb, "sweep combinations");
  rf_config *one = rf_calloc(1, sizeof *one, "a combination's configuration");
  char params[512];
  rf_status st = cb && one ? RF_OK : RF_ERR_NOMEM;
  /* A dry run without mpirun (a world of one) checks each combination on the ranks it needs;
   * a plain job is checked by its own control plane, with its usual errors. */
  int check_world = cfg->dry_run && world == 1 ? 0 : world;
  int size = 0, runnable = 0;
  rf_log_push_quiet(rank != 0);
  for (int c = 0; c < n && st == RF_OK; c++) {
    st = combination_config(cfg, c, one, params, sizeof params);
    if (st == RF_OK && (sw->axis_count > 0 || cfg->dry_run))
      check_combination(one, check_world, &cb[c]);
    else
      cb[c].runs = one->mode.count;
    size += cb[c].runs;
    runnable += cb[c].skipped ? 0 : cb[c].runs;
  }
  rf_log_pop_quiet();
  rf_sweep_slot slot = {.first_index = 1,
                        .size = size,
                        .announce = sw->axis_count > 0,
                        .show_mode = cfg->mode.count > 1,
                        .world_rank = rank,
                        .start = rf_now()};
  int verify_failed = 0;
  for (int c = 0; c < n && st == RF_OK; c++) {
    st = combination_config(cfg, c, one, slot.params, sizeof slot.params);
    slot.runs = cb[c].runs;
    if (st == RF_OK && cb[c].skipped) {
      if (rank == 0) {
        printf("skip %d/%d: %s%s%s\n", slot.first_index, size, slot.params,
               slot.params[0] ? ": " : "", cb[c].reason);
        fflush(stdout);
      }
      if (!cfg->dry_run && cfg->output[0]) {
        /* Between jobs there is no job's control plane: agree over the whole world. */
        rf_control everyone;
        rf_control_attach(&everyone, MPI_COMM_WORLD, cfg->timeout);
        st = rf_control_agree(
            &everyone, rank == 0 ? record_skip(one, slot.first_index, size, cb[c].reason) : RF_OK);
        *timed_out |= everyone.timed_out;
      }
    } else if (st == RF_OK && cfg->dry_run) {
      if (rank == 0)
        list_runs(one, &slot);
    } else if (st == RF_OK) {
      slot.left_after = runnable - slot.done_before - slot.runs;
      st = job(one, &slot, timed_out);
      slot.done_before += slot.runs;
      if (st == RF_ERR_VERIFY && !*timed_out) {
        verify_failed = 1; /* recorded in the results file; the next combination goes on */
        st = RF_OK;
      }
    }
    slot.first_index += slot.runs;
  }
  if (rank == 0)
    fflush(stdout);
  free(cb);
  free(one);
  return st == RF_OK && verify_failed ? RF_ERR_VERIFY : st;
}
