/* The sweep loop of `refit run`: the cartesian product of a config file's lists, one job per
 * combination (each with its own control plane, since the layouts differ) inside one MPI job.
 * Every rank walks the same combinations and reaches the same verdicts without talking, so
 * only rank 0 prints; the jobs themselves agree on their outcome. */
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control/control.h"
#include "io/io.h"
#include "plan_auto.h"
#include "sweep.h"
#include "transport/transport.h"

/* More would be a typo in a config file rather than a plan: refuse before running any. */
#define RF_SWEEP_MAX_COMBINATIONS 4096

/* Whether a combination can run, and if not the one line its job would have printed. */
typedef struct {
  int skipped;
  char reason[512];
} verdict;

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

/* Rank 0 opens every checkpoint of --checkpoint for the combination's model, as its job would
 * (quantized or not), and closes each again; the verdict is sent to every rank, since a file one
 * rank cannot read must not send the ranks down different paths. */
static rf_status check_checkpoint(const rf_config *cfg, const rf_job *job, rf_control *everyone,
                                  verdict *v) {
  if (everyone->world_rank == 0) {
    rf_log_capture(v->reason, sizeof v->reason);
    rf_status st = RF_OK;
    for (int i = 0; i < rf_checkpoint_list_count(cfg->checkpoint) && st == RF_OK; i++) {
      char path[RF_PATH_MAX];
      rf_checkpoint *ck = NULL;
      st = rf_checkpoint_list_item(cfg->checkpoint, i, path, sizeof path);
      if (st == RF_OK)
        st = job->quantized_checkpoint
                 ? rf_checkpoint_open_quantized(path, &job->model, job->quantized_checkpoint, &ck)
                 : rf_checkpoint_open(path, &job->model, &ck);
      rf_checkpoint_close(ck);
    }
    rf_log_capture(NULL, 0);
    if (st != RF_OK && !v->reason[0])
      snprintf(v->reason, sizeof v->reason, "%s", rf_status_text(st));
    v->skipped = st != RF_OK;
  }
  return rf_control_bcast(everyone, everyone->world, v, (int)sizeof *v, MPI_BYTE,
                          "the checkpoint's verdict");
}

/* Rank 0: a checkpoint is something it can read, a file or a directory of shards. */
static rf_status file_readable(const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0)
    return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': %s", path,
                   errno == ENOENT ? "no such file or directory" : strerror(errno));
  if (S_ISDIR(sb.st_mode))
    return RF_OK;
  char why[128];
  int fd = rf_open_input(path, &sb, why, sizeof why);
  if (fd >= 0) {
    close(fd);
    return RF_OK;
  }
  if (errno == EINVAL) /* a FIFO, a device: rf_open_input says what it is */
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s' %s; give a checkpoint file or a directory of shards", path,
                   why);
  return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': %s", path, why);
}

/* Rank 0: each checkpoint of --checkpoint names something it can read. What is wrong with a
 * file itself is wrong for every combination: an error, not a skip each. */
static rf_status checkpoint_readable(const char *list) {
  for (int i = 0; i < rf_checkpoint_list_count(list); i++) {
    char path[RF_PATH_MAX];
    RF_TRY(rf_checkpoint_list_item(list, i, path, sizeof path));
    RF_TRY(file_readable(path));
  }
  return RF_OK;
}

/* Whether a combination can run on `world` ranks (0: on as many as it needs): the job builds
 * (model, layouts, plan), the world has its ranks and --checkpoint holds the model. The plan
 * is built here, just before the combination runs or is listed, and freed at once, so that a
 * sweep of large models holds one plan at a time and speaks as it goes. Only the checkpoint
 * needs the ranks to talk; a failed wait ends the sweep. */
static rf_status check_combination(const rf_config *cfg, int world, rf_control *everyone,
                                   verdict *v) {
  rf_job job;
  memset(&job, 0, sizeof job);
  memset(v, 0, sizeof *v);
  rf_log_capture(v->reason, sizeof v->reason);
  const rf_transport_ops *ops = NULL;
  rf_status st = rf_transport_find(cfg->transport, &ops);
  if (st == RF_OK)
    st = rf_run_check_rollout_dtype(cfg);
  /* --plan auto plans whatever layout p2p plans: the run chooses once its ranks are placed. */
  if (st == RF_OK)
    st = cfg->plan == RF_PLAN_AUTO ? rf_job_build_layout(cfg, world, &job)
                                   : rf_job_build(cfg, world, &job);
  rf_log_capture(NULL, 0);
  if (st != RF_OK && !v->reason[0])
    snprintf(v->reason, sizeof v->reason, "%s", rf_status_text(st));
  v->skipped = st != RF_OK;
  /* Every rank reached the same verdict so far, so all or none of them talk here. */
  rf_status talk = RF_OK;
  if (!v->skipped && cfg->checkpoint[0])
    talk = check_checkpoint(cfg, &job, everyone, v);
  rf_job_free(&job);
  return talk;
}

/* Rank 0 appends a skipped combination to --output: its configuration and the reason. */
static rf_status record_skip(const rf_config *cfg, const rf_sweep_slot *slot, const char *reason) {
  rf_results_file_info info = {cfg->command_line, rf_hostname(), "", cfg->output_wait};
  rf_results *r = NULL;
  RF_TRY(rf_results_open(cfg->output, &info, &r));
  char *config = rf_cli_config_json(cfg), modes[256];
  rf_results_run run = {.config_json = config ? config : "{}",
                        .model = cfg->model,
                        .trainer = cfg->trainer,
                        .rollout = cfg->rollout,
                        .placement = rf_placement_name(cfg->placement),
                        .plan = rf_plan_request_name(cfg->plan),
                        .mode = rf_mode_list_format(&cfg->mode, modes, sizeof modes),
                        .transport = cfg->transport,
                        .transport_requested = slot->transport_choice[0] ? "auto" : cfg->transport,
                        .transport_choice =
                            slot->transport_choice[0] ? slot->transport_choice : NULL,
                        .bucket_size = cfg->bucket_size,
                        .sweep_index = slot->first_index,
                        .sweep_size = slot->size,
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

/* --dry-run: the lines a real sweep would print before each run, without times, out as soon
 * as the combination is checked. */
static void list_runs(const rf_config *cfg, const rf_sweep_slot *slot) {
  for (int m = 0; m < slot->runs; m++) {
    const char *mode = rf_mode_name(cfg->mode.items[m]);
    int named = slot->show_mode || !slot->params[0]; /* never an empty line */
    printf("run %d/%d: %s%s%s%s\n", slot->first_index + m, slot->size, slot->params,
           named && slot->params[0] ? " " : "", named ? "mode=" : "", named ? mode : "");
  }
  fflush(stdout);
}

/* "skip i/N: <keys>: <reason>"; a combination of several modes held the numbers of all its
 * runs, "skip i-j/N". */
static void print_skip(const rf_sweep_slot *slot, const verdict *v) {
  printf("skip %d", slot->first_index);
  if (slot->runs > 1)
    printf("-%d", slot->first_index + slot->runs - 1);
  printf("/%d: %s%s%s\n", slot->size, slot->params, slot->params[0] ? ": " : "", v->reason);
  fflush(stdout);
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
  int n = (int)total, modes = cfg->mode.count;
  rf_config *one = rf_calloc(1, sizeof *one, "a combination's configuration");
  rf_status st = one ? RF_OK : RF_ERR_NOMEM;
  /* A dry run without mpirun (a world of one) checks each combination on the ranks it needs;
   * a plain job is checked by its own control plane, with its usual errors. */
  int check_world = cfg->dry_run && world == 1 ? 0 : world;
  int check = sw->axis_count > 0 || cfg->dry_run;
  /* Between jobs there is no job's control plane: the sweep talks over the whole world. */
  rf_control everyone;
  rf_control_attach(&everyone, MPI_COMM_WORLD, cfg->timeout);
  /* Every combination holds a number for each of its modes, known before any is checked:
   * combinations are checked one at a time, each just before it runs. */
  rf_sweep_slot slot = {.first_index = 1,
                        .size = n * modes,
                        .announce = sw->axis_count > 0,
                        .show_mode = modes > 1,
                        .world_rank = rank,
                        .start = rf_now(),
                        .runs = modes};
  if (st == RF_OK && check && cfg->checkpoint[0]) {
    rf_log_push_quiet(rank != 0);
    st = rf_control_agree(&everyone, rank == 0 ? checkpoint_readable(cfg->checkpoint) : RF_OK);
    rf_log_pop_quiet();
    *timed_out |= everyone.timed_out;
  }
  /* --transport auto: the nodes and GPUs of the world, once, for every combination that asks
   * (a dry run without mpirun checks each on the ranks it needs, on one node). */
  rf_transport_site site = {.nodes = 1, .ranks_per_node = 1};
  if (st == RF_OK && rf_transport_wants_auto(cfg)) {
    st = rf_transport_site_of_world(&everyone, cfg, &site);
    *timed_out |= everyone.timed_out;
    if (check_world == 0)
      site.ranks = 0;
  }
  int verify_failed = 0, ran = 0;
  for (int c = 0; c < n && st == RF_OK; c++) {
    verdict v = {0};
    st = combination_config(cfg, c, one, slot.params, sizeof slot.params);
    /* Resolved before the checks, so that they check the transport that will run. */
    if (st == RF_OK) {
      char name[sizeof one->transport];
      snprintf(
          name, sizeof name, "%s",
          rf_transport_choose(one, &site, slot.transport_choice, sizeof slot.transport_choice));
      snprintf(one->transport, sizeof one->transport, "%s", name);
    }
    if (st == RF_OK && check) {
      rf_log_push_quiet(rank != 0);
      st = check_combination(one, check_world, &everyone, &v);
      rf_log_pop_quiet();
      *timed_out |= everyone.timed_out;
    }
    if (st == RF_OK && v.skipped) {
      if (rank == 0)
        print_skip(&slot, &v);
      if (!cfg->dry_run && cfg->output[0]) {
        st = rf_control_agree(&everyone, rank == 0 ? record_skip(one, &slot, v.reason) : RF_OK);
        *timed_out |= everyone.timed_out;
      }
    } else if (st == RF_OK && cfg->dry_run) {
      if (rank == 0)
        list_runs(one, &slot);
    } else if (st == RF_OK) {
      /* Later combinations are not checked yet: the estimate counts them all as runs. */
      slot.left_after = slot.size - (slot.first_index - 1) - slot.runs;
      st = job(one, &slot, timed_out);
      slot.done_before += slot.runs;
      ran++;
      if (st == RF_ERR_VERIFY && !*timed_out) {
        verify_failed = 1; /* recorded in the results file; the next combination goes on */
        st = RF_OK;
      }
    }
    slot.first_index += slot.runs;
  }
  /* A sweep that measured nothing is not a pass: every combination was skipped, each with its
   * reason printed above. */
  if (st == RF_OK && !cfg->dry_run && sw->axis_count > 0 && ran == 0) {
    if (rank == 0)
      RF_ERROR("%s: every combination of the sweep was skipped (reasons above); fix the lists "
               "or the checkpoint",
               cfg->config[0] ? cfg->config : "refit run");
    st = RF_ERR_USAGE;
  }
  if (rank == 0)
    fflush(stdout);
  free(one);
  return st == RF_OK && verify_failed ? RF_ERR_VERIFY : st;
}
