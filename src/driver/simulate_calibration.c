/* Calibrating a cluster from a results file: every measured run whose weights were in the kind
 * of memory being simulated is built again from its attributes (model, dtype, layouts, plan,
 * placement, transport, mode, bucket size), planned on the cluster as refit simulate plans, and
 * walked into a trace, over a mapping transport (ipc, shm) as one copy a piece; its median is
 * what the trace must come to. Its --calibrate limits add the plain transfers of the same
 * bytes: every pair at once in one message (mpi, or nccl on GPUs) and each rank copying what it
 * receives (memcpy, or the device copy). The fit is sim's. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "simulate.h"

#define LIMIT_MIN_BYTES ((int64_t)64 << 20)

/* Where the run's weights were: 1 GPU, 0 host (shm's shared host memory too), -1 not known.
 * Runs record it (memory); in files of an earlier refit it is inferred from the options, except
 * for an mpi run of a GPU build left to --memory auto, which may have staged GPU weights through
 * pinned memory. */
static int run_memory(const rf_loaded_run *r) {
  int staged = strcmp(r->transport, "mpi") == 0; /* GPU weights over mpi go through pinned memory */
  if (r->memory[0])
    return strcmp(r->memory, "host") == 0 || strcmp(r->memory, "shared") == 0 ? 0
           : strcmp(r->memory, "device") == 0 && !staged                      ? 1
                                                                              : -1;
  char memory[16] = "auto";
  json_t *cfg = r->config_json ? json_loads(r->config_json, 0, NULL) : NULL;
  json_t *m = cfg ? json_object_get(cfg, "memory") : NULL;
  if (m && json_is_string(m))
    snprintf(memory, sizeof memory, "%s", json_string_value(m));
  json_decref(cfg);
  if (strcmp(memory, "host") == 0)
    return 0;
  if (!staged)
    return 1;
  return strcmp(memory, "device") == 0 || r->gpu_versions[0] ? -1 : 0;
}

/* The run's job, as refit simulate would build it from the same options. */
static rf_status rebuild(const rf_loaded_run *r, const rf_cluster *c, rf_config *cfg, rf_job *job,
                         rf_cluster_placement *where) {
  char model[4096];
  rf_job_model_of_run(r->model, r->config_json, model, sizeof model);
  rf_cli_defaults(cfg);
  cfg->command = RF_CMD_SIMULATE;
  const struct {
    const char *option, *value;
  } set[] = {
      {"model", model},
      {"dtype", r->dtype[0] ? r->dtype : "model"},
      {"trainer", r->trainer},
      {"trainer-style", r->trainer_style[0] ? r->trainer_style : "tunix"},
      {"rollout", r->rollout},
      {"trainer-order", r->trainer_order[0] ? r->trainer_order : "hf"},
      {"placement", r->placement},
      {"transport", r->transport},
      {"plan", r->plan},
      {"mode", r->mode},
  };
  for (size_t i = 0; i < RF_ARRAY_LEN(set); i++)
    RF_TRY(rf_cli_set_option(cfg, set[i].option, set[i].value));
  cfg->bucket_size = r->bucket_size;
  RF_TRY(rf_job_build_layout(cfg, 0, job));
  rf_plan_options po;
  RF_TRY(rf_cluster_plan_options(c, job->layout.world_size, where, &po));
  RF_TRY(rf_plan_build(&job->plan, &job->layout, cfg->plan, &po));
  job->have_plan = 1;
  return RF_OK;
}

typedef struct {
  rf_sim_sample *samples;
  rf_sim_trace **traces;
  int n, cap;
} sample_list;

static rf_status add_sample(sample_list *l, rf_calibration *cal, rf_sim_trace *t, int mode,
                            double s, const char *fmt, int number, const char *what) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 16;
    rf_sim_sample *a = rf_realloc(l->samples, (size_t)cap * sizeof *a, "calibration samples");
    if (a)
      l->samples = a;
    rf_sim_trace **b = rf_realloc(l->traces, (size_t)cap * sizeof *b, "calibration traces");
    if (b)
      l->traces = b;
    rf_calibration_sample *c =
        rf_realloc(cal->samples, (size_t)cap * sizeof *c, "calibration samples");
    if (c)
      cal->samples = c;
    if (!a || !b || !c) {
      rf_sim_trace_free(t);
      return RF_ERR_NOMEM;
    }
    l->cap = cap;
  }
  l->traces[l->n] = t;
  l->samples[l->n] = (rf_sim_sample){t, s, NULL};
  snprintf(cal->samples[l->n].label, sizeof cal->samples[l->n].label, fmt, number, what);
  cal->samples[l->n].measured_s = s;
  cal->samples[l->n].mode = mode;
  l->n++;
  return RF_OK;
}

/* The run's trace and those of its limits. */
static rf_status add_run(sample_list *l, rf_calibration *cal, const rf_loaded_run *r,
                         const rf_cluster *c, int device) {
  rf_config *cfg = rf_calloc(1, sizeof *cfg, "a configuration");
  if (!cfg)
    return RF_ERR_NOMEM;
  rf_job job;
  memset(&job, 0, sizeof job);
  rf_cluster_placement where = {0};
  rf_status st = rebuild(r, c, cfg, &job, &where);
  /* The run's own transport decides how its pieces moved: one copy each over a mapping one. */
  const rf_transport_ops *transport = NULL;
  if (st == RF_OK)
    st = rf_transport_describe(r->transport, &transport);
  rf_sim_options o = {cfg->mode.items[0], r->bucket_size, device, transport && transport->mapping,
                      transport ? rf_sim_wire(transport, device) : RF_WIRE_CONTIGUOUS};
  rf_sim_trace *t = NULL;
  if (st == RF_OK)
    st = rf_sim_trace_record(&job.plan, c, &o, &t);
  if (st == RF_OK) {
    st = add_sample(l, cal, t, (int)o.mode, r->time_median_s, "run %04d %s", r->number, r->mode);
    cal->runs++;
  }
  const rf_limit limits[2] = {device ? RF_LIMIT_NCCL : RF_LIMIT_MPI,
                              device ? RF_LIMIT_DEVICE_COPY : RF_LIMIT_MEMCPY};
  /* A limit of a small job measures caches and call overheads rather than links (tiny's memcpy
   * runs at 140 GB/s here, llama-3.2-1b's at 12): only jobs whose rollout ranks receive at least
   * LIMIT_MIN_BYTES each calibrate from their limits. */
  int64_t most = 0;
  for (int i = 0; st == RF_OK && i < job.layout.rollout_ranks; i++)
    most = RF_MAX(most, job.plan.recv_bytes[i]);
  for (int i = 0; i < 2 && st == RF_OK && most >= LIMIT_MIN_BYTES; i++) {
    double s = r->limit_s[limits[i]];
    if (!(s > 0))
      continue;
    st = rf_sim_trace_limit(&job.plan, c, device, limits[i], &t);
    if (st == RF_OK)
      st = add_sample(l, cal, t, -1, s, "run %04d limit %s", r->number, rf_limit_name(limits[i]));
    cal->limits += st == RF_OK;
  }
  rf_job_free(&job);
  rf_cluster_placement_free(&where);
  free(cfg);
  return st;
}

rf_status rf_calibration_fit(const char *path, rf_cluster *c, int device, rf_calibration *cal) {
  memset(cal, 0, sizeof *cal);
  snprintf(cal->path, sizeof cal->path, "%s", path);
  rf_loaded_results file;
  rf_status st = rf_results_load(path, &file);
  sample_list l = {0};
  for (int i = 0; st == RF_OK && i < file.run_count; i++) {
    const rf_loaded_run *r = &file.runs[i];
    if (r->skipped || r->simulated || strcmp(r->status, "RF_OK") != 0 || !(r->time_median_s > 0) ||
        run_memory(r) != device) {
      cal->skipped++;
      continue;
    }
    st = add_run(&l, cal, r, c, device);
  }
  rf_loaded_results_free(&file);
  if (st == RF_OK)
    st = rf_sim_calibrate(c, device, l.samples, l.n, &cal->fit);
  rf_sim_sample *mine = rf_calloc((size_t)l.n + 1, sizeof *mine, "calibration samples");
  if (st == RF_OK && !mine)
    st = RF_ERR_NOMEM;
  for (int m = 0; st == RF_OK && m < RF_MODE_COUNT; m++) {
    int n = 0;
    for (int i = 0; i < l.n; i++)
      if (cal->samples[i].mode == m)
        mine[n++] = l.samples[i];
    cal->mode_runs[m] = n;
    cal->mode_cluster[m] = *c;
    if (n >= RF_CALIBRATION_MODE_RUNS)
      st = rf_sim_calibrate(&cal->mode_cluster[m], device, mine, n, &cal->mode_fit[m]);
  }
  free(mine);
  for (int i = 0; st == RF_OK && i < l.n; i++) {
    int m = cal->samples[i].mode;
    st = rf_sim_trace_time(l.traces[i], m >= 0 ? &cal->mode_cluster[m] : c,
                           &cal->samples[i].predicted_s);
  }
  for (int i = 0; i < l.n; i++)
    rf_sim_trace_free(l.traces[i]);
  free(l.traces);
  free(l.samples);
  return st;
}

void rf_calibration_free(rf_calibration *cal) {
  free(cal->samples);
  memset(cal, 0, sizeof *cal);
}
