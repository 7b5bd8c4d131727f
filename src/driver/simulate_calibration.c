/* Calibrating a cluster from a results file: every measured run whose weights were in the kind
 * of memory being simulated is built again from its attributes (model, dtype, layouts, plan,
 * placement, transport, mode, bucket size), planned on the cluster as refit simulate plans, and
 * walked into a trace, over a mapping transport (ipc, shm) as one copy a piece; its median is
 * what the trace must come to; a quantized run (rollout_dtype) quantizes in its trace as it did
 * in the run, which is what fits the quantize rate. Its --calibrate limits add the plain transfers
 * of the same bytes: every pair at once in one message (mpi, or nccl on GPUs) and each rank copying
 * what it receives (memcpy, or the device copy). The fit is sim's. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* The model a run moved (rf_job_model_of_run): a results file is outside input, so its `model`
 * attribute must be a model's name, looked up among the shipped models, and no path in it names
 * a file refit then opens. */
static rf_status run_model(const char *path, const rf_loaded_run *r, char *model, size_t len) {
  if (!rf_job_model_name_ok(r->model))
    return rf_fail(RF_ERR_RESULTS,
                   "calibration %s: run /runs/%04d: attribute 'model' is '%s', not a model's "
                   "name; give a results file written by refit run",
                   path, r->number, r->model);
  rf_job_model_of_run(r->model, r->config_json, model, len);
  return RF_OK;
}

/* A failure while a run is built again, named after the file, the run and, where one was to
 * blame, the attribute, rather than as the command-line option the attribute was given as. */
static rf_status run_failed(rf_status st, const char *path, const rf_loaded_run *r,
                            const char *attribute, const char *value, const char *why) {
  if (st == RF_ERR_NOMEM || st == RF_ERR_IO || st == RF_ERR_INTERNAL)
    return rf_fail(st, "calibration %s: run /runs/%04d: %s", path, r->number, why);
  /* The option parser's reasons start with the option: the attribute stands in for it here. */
  const char *colon = strncmp(why, "option --", 9) == 0 ? strstr(why, ": ") : NULL;
  if (colon)
    why = colon + 2;
  if (attribute)
    return rf_fail(RF_ERR_RESULTS,
                   "calibration %s: run /runs/%04d: attribute '%s' is '%s': %s; give a results "
                   "file written by refit run",
                   path, r->number, attribute, value, why);
  return rf_fail(st, "calibration %s: run /runs/%04d: %s", path, r->number, why);
}

/* The run's job, as refit simulate would build it from the same options. Errors are captured
 * into why, for run_failed to name the run. */
static rf_status rebuild(const char *path, const rf_loaded_run *r, const rf_cluster *c,
                         rf_config *cfg, rf_job *job, rf_cluster_placement *where) {
  char model[RF_PATH_MAX], why[512] = "";
  RF_TRY(run_model(path, r, model, sizeof model));
  rf_cli_defaults(cfg);
  cfg->command = RF_CMD_SIMULATE;
  const struct {
    const char *option, *attribute, *value;
  } set[] = {
      {"model", "model", model},
      {"dtype", "dtype", r->dtype[0] ? r->dtype : "model"},
      {"trainer", "trainer", r->trainer},
      {"trainer-style", "trainer_style", r->trainer_style[0] ? r->trainer_style : "tunix"},
      {"rollout", "rollout", r->rollout},
      {"trainer-order", "trainer_order", r->trainer_order[0] ? r->trainer_order : "hf"},
      {"placement", "placement", r->placement},
      {"transport", "transport", r->transport},
      {"plan", "plan", r->plan},
      {"mode", "mode", r->mode},
      /* A quantized run's quantizer is part of its time (the fit's quantize rate). */
      {"rollout-dtype", "rollout_dtype", r->rollout_dtype[0] ? r->rollout_dtype : "model"},
  };
  rf_status st = RF_OK;
  rf_log_capture(why, sizeof why);
  for (size_t i = 0; i < RF_ARRAY_LEN(set); i++)
    if ((st = rf_cli_set_option(cfg, set[i].option, set[i].value)) != RF_OK) {
      rf_log_capture(NULL, 0);
      return run_failed(st, path, r, set[i].attribute, set[i].value, why);
    }
  /* A run has one mode, and refit run records the one it ran. */
  if (cfg->mode.count != 1) {
    rf_log_capture(NULL, 0);
    return run_failed(RF_ERR_RESULTS, path, r, "mode", r->mode, "not one mode");
  }
  cfg->bucket_size = r->bucket_size;
  st = rf_job_build_layout(cfg, 0, job);
  /* The attribute to blame: the model's, or one whose option the reason names (--dtype). */
  const char *attribute = NULL, *value = NULL;
  if (st == RF_ERR_MODEL)
    attribute = "model", value = r->model;
  for (size_t i = 0; st != RF_OK && !attribute && i < RF_ARRAY_LEN(set); i++) {
    size_t n = strlen(set[i].option);
    if (strncmp(why, "option --", 9) == 0 && strncmp(why + 9, set[i].option, n) == 0 &&
        why[9 + n] == ':')
      attribute = set[i].attribute, value = set[i].value;
  }
  /* The layout parser names the side: "trainer layout 'fsdp=x': ...". */
  char side[RF_PATH_MAX + 32];
  for (int i = 0; st != RF_OK && !attribute && i < 2; i++) {
    const char *name = i ? "rollout" : "trainer", *text = i ? r->rollout : r->trainer;
    snprintf(side, sizeof side, "%s layout '%s': ", name, text);
    if (strncmp(why, side, strlen(side)) == 0) {
      attribute = name, value = text;
      memmove(why, why + strlen(side), strlen(why + strlen(side)) + 1);
    }
  }
  rf_plan_options po;
  if (st == RF_OK)
    st = rf_cluster_plan_options(c, job->layout.world_size, where, &po);
  if (st == RF_OK)
    st = rf_plan_build(&job->plan, &job->layout, cfg->plan, &po);
  rf_log_capture(NULL, 0);
  if (st != RF_OK)
    return run_failed(st, path, r, attribute, value, why);
  job->have_plan = 1;
  return RF_OK;
}

/* One job's traces: runs of the same job (a benchmark's repeats, a sweep run twice) are built
 * and walked once, and their samples share the traces, which the fit then times once a trial. */
typedef struct {
  char *key; /* every attribute the job is built from */
  rf_sim_trace *run, *limit[2];
  int mode;
} job_traces;

typedef struct {
  rf_sim_sample *samples;
  int n, cap;
  job_traces *jobs; /* owns the traces */
  int njobs, jobs_cap;
} sample_list;

static rf_status add_sample(sample_list *l, rf_calibration *cal, const rf_sim_trace *t, int mode,
                            double s, const char *fmt, int number, const char *what) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 16;
    rf_sim_sample *a = rf_realloc(l->samples, (size_t)cap * sizeof *a, "calibration samples");
    if (a)
      l->samples = a;
    rf_calibration_sample *c =
        rf_realloc(cal->samples, (size_t)cap * sizeof *c, "calibration samples");
    if (c)
      cal->samples = c;
    if (!a || !c)
      return RF_ERR_NOMEM;
    l->cap = cap;
  }
  l->samples[l->n] = (rf_sim_sample){t, s, NULL};
  snprintf(cal->samples[l->n].label, sizeof cal->samples[l->n].label, fmt, number, what);
  cal->samples[l->n].measured_s = s;
  cal->samples[l->n].mode = mode;
  l->n++;
  return RF_OK;
}

static void sample_list_free(sample_list *l) {
  for (int i = 0; i < l->njobs; i++) {
    rf_sim_trace_free(l->jobs[i].run);
    rf_sim_trace_free(l->jobs[i].limit[0]);
    rf_sim_trace_free(l->jobs[i].limit[1]);
    free(l->jobs[i].key);
  }
  free(l->jobs);
  free(l->samples);
  memset(l, 0, sizeof *l);
}

/* The limits a run of weights in GPU (device) or host memory measured. */
static void limit_kinds(int device, rf_limit *limits) {
  limits[0] = device ? RF_LIMIT_NCCL : RF_LIMIT_MPI;
  limits[1] = device ? RF_LIMIT_DEVICE_COPY : RF_LIMIT_MEMCPY;
}

/* Builds and walks the run's job into j: its trace and, for a job large enough, those of its
 * limits. */
static rf_status trace_job(const char *path, const rf_loaded_run *r, const rf_cluster *c,
                           int device, job_traces *j) {
  rf_config *cfg = rf_calloc(1, sizeof *cfg, "a configuration");
  if (!cfg)
    return RF_ERR_NOMEM;
  rf_job job;
  memset(&job, 0, sizeof job);
  rf_cluster_placement where = {0};
  rf_status st = rebuild(path, r, c, cfg, &job, &where);
  /* The run's own transport decides how its pieces moved: one copy each over a mapping one. */
  const rf_transport_ops *transport = NULL;
  char why[512] = "";
  if (st == RF_OK) {
    rf_log_capture(why, sizeof why);
    st = rf_transport_describe(r->transport, &transport);
    rf_log_capture(NULL, 0);
    if (st != RF_OK)
      st = run_failed(st, path, r, "transport", r->transport, why);
  }
  rf_sim_options o = {cfg->mode.items[0],
                      r->bucket_size,
                      device,
                      transport && transport->mapping,
                      transport ? rf_sim_wire(transport, device) : RF_WIRE_CONTIGUOUS,
                      transport && transport->ordered,
                      {RF_DELTA_CHOICE_OFF, 0.0}};
  j->mode = (int)o.mode;
  if (st == RF_OK) {
    rf_log_capture(why, sizeof why);
    st = rf_sim_trace_record(&job.plan, c, &o, &j->run);
    rf_log_capture(NULL, 0);
    if (st != RF_OK)
      st = run_failed(st, path, r, NULL, NULL, why);
  }
  rf_limit limits[2];
  limit_kinds(device, limits);
  /* A limit of a small job measures caches and call overheads rather than links (tiny's memcpy
   * runs at 140 GB/s here, llama-3.2-1b's at 12): only jobs whose rollout ranks receive at least
   * LIMIT_MIN_BYTES each calibrate from their limits. */
  int64_t most = 0;
  for (int i = 0; st == RF_OK && i < job.layout.rollout_ranks; i++)
    most = RF_MAX(most, job.plan.recv_bytes[i]);
  for (int i = 0; i < 2 && st == RF_OK && most >= LIMIT_MIN_BYTES; i++)
    st = rf_sim_trace_limit(&job.plan, c, device, limits[i], &j->limit[i]);
  rf_job_free(&job);
  rf_cluster_placement_free(&where);
  free(cfg);
  return st;
}

/* The run's samples: its median, and its limits where its job calibrates from them. */
static rf_status add_run(sample_list *l, rf_calibration *cal, const rf_loaded_run *r,
                         const rf_cluster *c, int device) {
  char model[RF_PATH_MAX], key[RF_PATH_MAX + 512];
  RF_TRY(run_model(cal->path, r, model, sizeof model));
  snprintf(key, sizeof key, "%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%lld", model, r->dtype, r->trainer,
           r->trainer_style, r->rollout, r->trainer_order, r->placement, r->transport, r->plan,
           r->mode, r->rollout_dtype, (long long)r->bucket_size);
  job_traces *j = NULL;
  for (int i = 0; i < l->njobs && !j; i++)
    if (strcmp(l->jobs[i].key, key) == 0)
      j = &l->jobs[i];
  if (!j) {
    RF_TRY(rf_grow((void **)&l->jobs, l->njobs, &l->jobs_cap, sizeof *l->jobs, "calibration jobs"));
    j = &l->jobs[l->njobs++];
    memset(j, 0, sizeof *j);
    if (!(j->key = rf_strdup(key)))
      return RF_ERR_NOMEM;
    RF_TRY(trace_job(cal->path, r, c, device, j));
  }
  RF_TRY(add_sample(l, cal, j->run, j->mode, r->time_median_s, "run %04d %s", r->number, r->mode));
  cal->runs++;
  rf_limit limits[2];
  limit_kinds(device, limits);
  for (int i = 0; i < 2 && j->limit[i]; i++) {
    double s = r->limit_s[limits[i]];
    if (!(s > 0))
      continue;
    if (!isfinite(s))
      return rf_fail(RF_ERR_RESULTS,
                     "calibration %s: run /runs/%04d: attribute 'limit_%s_s' is %g, not a time; "
                     "give a results file written by refit run",
                     cal->path, r->number, rf_limit_name(limits[i]), s);
    RF_TRY(add_sample(l, cal, j->limit[i], -1, s, "run %04d limit %s", r->number,
                      rf_limit_name(limits[i])));
    cal->limits++;
  }
  return RF_OK;
}

/* A calibration from thousands of runs takes seconds or more. On a terminal a line on stderr
 * says how far it is, rewritten in place at most five times a second and cleared at the end;
 * the cursor stays at its start, so an error line printed meanwhile writes over it. Elsewhere
 * (a pipe, a file, the tests) nothing is printed, so that an error stays one line, and
 * REFIT_LOG=info logs every thousandth run instead. */
typedef struct {
  const char *path;
  int tty, shown;
  double last;
} progress;

static void progress_run(progress *p, int done, int total) {
  if (done > 0 && done % 1000 == 0)
    RF_INFO("calibration %s: %d of %d runs done", p->path, done, total);
  double now = rf_now();
  if (!p->tty || (now - p->last < 0.2 && done < total))
    return;
  p->last = now;
  p->shown = 1;
  fprintf(stderr, "\033[Krefit: calibration %s: %d of %d runs done\r", p->path, done, total);
  fflush(stderr);
}

static void progress_fit(progress *p, int samples) {
  RF_INFO("calibration %s: fitting the rates to %d samples", p->path, samples);
  if (!p->tty)
    return;
  p->shown = 1;
  fprintf(stderr, "\033[Krefit: calibration %s: fitting the rates to %d samples\r", p->path,
          samples);
  fflush(stderr);
}

static void progress_end(progress *p) {
  if (p->shown)
    fprintf(stderr, "\033[K");
  fflush(stderr);
}

rf_status rf_calibration_fit(const char *path, rf_cluster *c, int device, rf_calibration *cal) {
  memset(cal, 0, sizeof *cal);
  snprintf(cal->path, sizeof cal->path, "%s", path);
  rf_loaded_results file;
  progress bar = {path, isatty(STDERR_FILENO), 0, 0.0};
  if (bar.tty) {
    bar.shown = 1;
    fprintf(stderr, "refit: calibration %s: loading\r", path);
    fflush(stderr);
  }
  rf_status st = rf_results_load(path, &file);
  sample_list l = {0};
  for (int i = 0; st == RF_OK && i < file.run_count; i++) {
    const rf_loaded_run *r = &file.runs[i];
    progress_run(&bar, i + 1, file.run_count);
    /* A delta run's time is not a dense refit's, which the model below is fitted to. */
    int delta = r->delta[0] && strcmp(r->delta, "off") != 0;
    if (r->skipped || r->simulated || strcmp(r->status, "RF_OK") != 0 || !(r->time_median_s > 0) ||
        run_memory(r) != device || delta) {
      cal->skipped++;
      continue;
    }
    /* An infinite median would pull every rate of the fit to its floor. */
    if (!isfinite(r->time_median_s)) {
      st = rf_fail(RF_ERR_RESULTS,
                   "calibration %s: run /runs/%04d: attribute 'time_median_s' is %g, not a time; "
                   "give a results file written by refit run",
                   path, r->number, r->time_median_s);
      break;
    }
    st = add_run(&l, cal, r, c, device);
  }
  rf_loaded_results_free(&file);
  if (st == RF_OK && l.n > 0)
    progress_fit(&bar, l.n);
  /* Before the fit's own message, which does not know the file. */
  if (st == RF_OK && l.n == 0) {
    progress_end(&bar);
    st = rf_fail(RF_ERR_RESULTS,
                 "calibration %s: no measured runs of weights in %s memory (%d passed over); give "
                 "a results file of refit run --output with such runs",
                 path, device ? "GPU" : "host", cal->skipped);
  }
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
    st = rf_sim_trace_time(l.samples[i].trace, m >= 0 ? &cal->mode_cluster[m] : c,
                           &cal->samples[i].predicted_s);
  }
  sample_list_free(&l);
  progress_end(&bar);
  return st;
}

void rf_calibration_free(rf_calibration *cal) {
  free(cal->samples);
  memset(cal, 0, sizeof *cal);
}
