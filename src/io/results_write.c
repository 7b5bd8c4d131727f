/* Appending one run to a results file: the group /runs/NNNN with the run's configuration and
 * headline numbers as attributes, and the datasets timings, summary, tensors, shards, plan,
 * placement and env. results/README.md is the schema; keep the two in step. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "results_internal.h"

#define FORMULA_ALGBW "replica_bytes / median(total) / 1e9"
#define FORMULA_AGGBW "transfer_bytes / median(total) / 1e9"

/* Units of the run group's numeric attributes, as JSON so a script can look them up. */
static const char run_units[] =
    "{\"bucket_size\": \"bytes (0 = the whole model in one bucket)\", "
    "\"model_bytes\": \"bytes\", \"replica_bytes\": \"bytes\", \"transfer_bytes\": \"bytes\", "
    "\"peak_staging_bytes\": \"bytes\", \"peak_rss_bytes\": \"bytes\", \"time_median_s\": \"s\", "
    "\"time_p99_s\": \"s\", \"algbw_GBps\": \"GB/s (1e9 bytes/s)\", "
    "\"aggbw_GBps\": \"GB/s (1e9 bytes/s)\"}";

/* sweep_index and sweep_size, and each measured limit with its ratio to the run's median. */
static rf_status write_sweep_and_limits(hid_t g, const rf_results_run *run, double median) {
  if (run->sweep_index > 0) {
    RF_TRY(rf_results_attr_i64(g, ".", "sweep_index", run->sweep_index));
    RF_TRY(rf_results_attr_i64(g, ".", "sweep_size", run->sweep_size));
  }
  const rf_results_limits *l = run->limits;
  if (!l)
    return RF_OK;
  const struct {
    const char *s, *ratio;
    double value;
  } limits[] = {
      {"limit_memcpy_s", "limit_memcpy_ratio", l->memcpy_s},
      {"limit_device_copy_s", "limit_device_copy_ratio", l->device_copy_s},
      {"limit_mpi_s", "limit_mpi_ratio", l->mpi_s},
      {"limit_nccl_s", "limit_nccl_ratio", l->nccl_s},
  };
  for (size_t i = 0; i < RF_ARRAY_LEN(limits); i++) {
    if (!(limits[i].value > 0))
      continue;
    RF_TRY(rf_results_attr_f64(g, ".", limits[i].s, limits[i].value));
    if (median > 0)
      RF_TRY(rf_results_attr_f64(g, ".", limits[i].ratio, limits[i].value / median));
  }
  return RF_OK;
}

/* --transport: what was asked for and, under auto, the choice and its reason. */
static rf_status write_transport_choice(hid_t g, const rf_results_run *run) {
  if (run->transport_requested)
    RF_TRY(rf_results_attr_str(g, ".", "transport_requested", run->transport_requested));
  if (run->transport_choice)
    RF_TRY(rf_results_attr_str(g, ".", "transport_choice", run->transport_choice));
  return RF_OK;
}

/* A sweep combination that could not run: its configuration and the reason, nothing else. */
static rf_status write_skipped(hid_t g, const rf_results *r, const rf_results_run *run) {
  char written[32];
  rf_results_utc_now(written, sizeof written);
  const struct {
    const char *name, *value;
  } strings[] = {
      {"model", run->model},
      {"trainer", run->trainer},
      {"rollout", run->rollout},
      {"placement", run->placement},
      {"plan", run->plan},
      {"mode", run->mode},
      {"transport", run->transport},
      {"config_json", run->config_json},
      {"command_line", r->command_line},
      {"written", written},
      {"status", "skipped"},
      {"skip_reason", run->skip_reason},
  };
  for (size_t i = 0; i < RF_ARRAY_LEN(strings); i++)
    RF_TRY(rf_results_attr_str(g, ".", strings[i].name, strings[i].value));
  RF_TRY(write_transport_choice(g, run));
  RF_TRY(rf_results_attr_i64(g, ".", "bucket_size", run->bucket_size));
  RF_TRY(rf_results_attr_i64(g, ".", "exit_code", 0));
  return write_sweep_and_limits(g, run, 0.0);
}

static rf_status write_run_attributes(hid_t g, const rf_results *r, const rf_results_run *run) {
  const rf_run_result *res = run->result;
  char written[32];
  rf_results_utc_now(written, sizeof written);
  const struct {
    const char *name, *value;
  } strings[] = {
      {"model", run->model},
      {"model_type", run->model_type},
      {"dtype", run->dtype},
      {"trainer", run->trainer},
      {"trainer_style", run->trainer_style},
      {"trainer_order", run->trainer_order},
      {"rollout", run->rollout},
      {"placement", run->placement},
      {"plan", run->plan},
      {"mode", run->mode},
      {"transport", run->transport},
      {"verify", run->verify},
      {"config_json", run->config_json},
      {"command_line", r->command_line},
      {"hosts", r->hosts},
      {"gpu_versions", r->gpu_versions},
      {"written", written},
      {"status", run->simulation_json ? "simulated" : rf_status_name(res->status)},
      {"formula_algbw", FORMULA_ALGBW},
      {"formula_aggbw", FORMULA_AGGBW},
      {"units", run_units},
  };
  for (size_t i = 0; i < RF_ARRAY_LEN(strings); i++)
    RF_TRY(rf_results_attr_str(g, ".", strings[i].name, strings[i].value));
  if (run->memory)
    RF_TRY(rf_results_attr_str(g, ".", "memory", run->memory));
  if (run->plan_choice)
    RF_TRY(rf_results_attr_str(g, ".", "plan_choice", run->plan_choice));
  RF_TRY(write_transport_choice(g, run));
  for (int i = 0; run->job_setup && i < RF_SETUP_STEP_COUNT; i++) {
    char name[48];
    snprintf(name, sizeof name, "setup_%s_s", rf_setup_step_name((rf_setup_step)i));
    RF_TRY(rf_results_attr_f64(g, ".", name, run->job_setup[i]));
  }
  if (run->rollout_dtype)
    RF_TRY(rf_results_attr_str(g, ".", "rollout_dtype", run->rollout_dtype));
  RF_TRY(rf_results_write_versions(g, run));
  const struct {
    const char *name;
    int64_t value;
  } ints[] = {
      {"bucket_size", run->bucket_size},
      {"seed", run->seed},
      {"exit_code", rf_status_exit_code(res->status)},
      {"iterations", res->iterations},
      {"ranks", res->ranks},
      {"replicas", run->replicas},
      {"model_bytes", res->model_bytes},
      {"replica_bytes", res->replica_bytes},
      {"transfer_bytes", res->transfer_bytes},
      {"pieces", res->pieces},
      {"messages", res->messages},
      {"wrong", res->wrong},
      {"checksum_bad", res->checksum_bad},
      {"peak_staging_bytes", res->peak_staging},
      {"peak_rss_bytes", res->peak_rss},
  };
  for (size_t i = 0; i < RF_ARRAY_LEN(ints); i++)
    RF_TRY(rf_results_attr_i64(g, ".", ints[i].name, ints[i].value));
  RF_TRY(rf_results_attr_f64(g, ".", "time_median_s", res->total.median));
  RF_TRY(rf_results_attr_f64(g, ".", "time_p99_s", res->total.p99));
  RF_TRY(rf_results_attr_f64(g, ".", "algbw_GBps", res->algbw));
  RF_TRY(rf_results_attr_f64(g, ".", "aggbw_GBps", res->aggbw));
  RF_TRY(write_sweep_and_limits(g, run, res->total.median));
  if (run->simulation_json) {
    /* Marked three ways, so that no reader takes a prediction for a measurement: the status,
     * a flag, and the prediction's own record. */
    RF_TRY(rf_results_attr_i64(g, ".", "simulated", 1));
    RF_TRY(rf_results_attr_str(g, ".", "cluster", run->cluster ? run->cluster : ""));
    RF_TRY(rf_results_attr_str(g, ".", "simulation_json", run->simulation_json));
    RF_TRY(rf_results_attr_i64(g, ".", "memory_fits", run->memory_fits != 0));
    if (run->published_s > 0) {
      RF_TRY(rf_results_attr_f64(g, ".", "published_s", run->published_s));
      RF_TRY(rf_results_attr_str(g, ".", "published_label",
                                 run->published_label ? run->published_label : ""));
    }
    return RF_OK;
  }
  RF_TRY(rf_results_slurm_attrs(g));
  return RF_OK;
}

/* The phase names, in the order of the last axis of timings and the rows of summary. */
static rf_status write_phase_names(hid_t g, const char *obj) {
  const char *names[RF_PHASE_COUNT];
  for (int p = 0; p < RF_PHASE_COUNT; p++)
    names[p] = rf_phase_name((rf_phase)p);
  rf_status st = RF_OK;
  hsize_t dims[1] = {RF_PHASE_COUNT};
  hid_t type = H5I_INVALID_HID, space = H5I_INVALID_HID, attr = H5I_INVALID_HID;
  RF_H5_GOTO(type = rf_results_vlen_string(), done);
  RF_H5_GOTO(space = H5Screate_simple(1, dims, NULL), done);
  RF_H5_GOTO(attr = H5Acreate_by_name(g, obj, "phases", type, space, H5P_DEFAULT, H5P_DEFAULT,
                                      H5P_DEFAULT),
             done);
  RF_H5_GOTO(H5Awrite(attr, type, names), done);
done:
  if (attr >= 0)
    H5Aclose(attr);
  if (space >= 0)
    H5Sclose(space);
  if (type >= 0)
    H5Tclose(type);
  return st;
}

static rf_status write_timings(hid_t g, const rf_run_result *res) {
  int iterations = res->timings && res->iterations > 0 ? res->iterations : 0;
  hsize_t dims[3] = {(hsize_t)iterations, (hsize_t)RF_MAX(res->ranks, 0), RF_PHASE_COUNT};
  RF_TRY(rf_results_dataset(g, "timings", H5T_NATIVE_DOUBLE, 3, dims, res->timings));
  RF_TRY(write_phase_names(g, "timings"));
  RF_TRY(rf_results_attr_str(g, "timings", "units", "s"));
  /* Its presence marks timings gathered in this order; files without it hold them rank by
   * rank under the same shape (results_load.c reorders those). */
  RF_TRY(rf_results_attr_str(g, "timings", "order", "iteration, rank, phase"));
  return rf_results_attr_str(g, "timings", "description",
                             "wall-clock seconds of each timed iteration [iteration, rank, "
                             "phase]; total is the whole iteration; setup (once, cold) and "
                             "verify (after the last iteration) are outside total and their "
                             "one value is repeated in every iteration");
}

typedef struct {
  char phase[16];
  double min, median, p99, max, mean;
} summary_row;

static rf_status write_summary(hid_t g, const rf_run_result *res) {
  int iterations = res->timings && res->iterations > 0 ? res->iterations : 0, ranks = res->ranks;
  summary_row rows[RF_PHASE_COUNT];
  for (int p = 0; p < RF_PHASE_COUNT; p++) {
    rf_stats s;
    RF_TRY(rf_stats_of_slowest(res->timings, iterations, ranks, p, &s));
    memset(&rows[p], 0, sizeof rows[p]);
    snprintf(rows[p].phase, sizeof rows[p].phase, "%s", rf_phase_name((rf_phase)p));
    rows[p].min = s.min;
    rows[p].median = s.median;
    rows[p].p99 = s.p99;
    rows[p].max = s.max;
    rows[p].mean = s.mean;
  }

  rf_status st = RF_OK;
  hid_t type = H5I_INVALID_HID;
  hsize_t dims[1] = {RF_PHASE_COUNT};
  const rf_results_field fields[] = {
      RF_FIELD_STR("phase", summary_row, phase),
      RF_FIELD("min", summary_row, min, H5T_NATIVE_DOUBLE),
      RF_FIELD("median", summary_row, median, H5T_NATIVE_DOUBLE),
      RF_FIELD("p99", summary_row, p99, H5T_NATIVE_DOUBLE),
      RF_FIELD("max", summary_row, max, H5T_NATIVE_DOUBLE),
      RF_FIELD("mean", summary_row, mean, H5T_NATIVE_DOUBLE),
  };
  RF_TRY_GOTO(rf_results_compound(sizeof(summary_row), fields, (int)RF_ARRAY_LEN(fields), &type),
              done);
  RF_TRY_GOTO(rf_results_dataset(g, "summary", type, 1, dims, rows), done);
  RF_TRY_GOTO(rf_results_attr_str(g, "summary", "units", "s"), done);
  RF_TRY_GOTO(rf_results_attr_str(g, "summary", "description",
                                  "per phase: in each timed iteration the slowest rank's time, "
                                  "then min, median, p99 (nearest rank), max and mean of that "
                                  "over the iterations"),
              done);
  RF_TRY_GOTO(rf_results_attr_str(g, "summary", "formula_algbw", FORMULA_ALGBW), done);
  RF_TRY_GOTO(rf_results_attr_str(g, "summary", "formula_aggbw", FORMULA_AGGBW), done);
  RF_TRY_GOTO(rf_results_attr_str(g, "summary", "units_bandwidth", "GB/s = 1e9 bytes/s"), done);
done:
  if (type >= 0)
    H5Tclose(type);
  return st;
}

/* One row of tensors; the rollout checksums of every replica follow it as an array member,
 * so a row is sizeof(tensor_row) + 8 * replicas bytes (the struct ends 8-byte aligned). */
typedef struct {
  char name[RF_NAME_MAX];
  char dtype[8];
  int32_t ndim;
  int64_t shape[2];
  int64_t bytes;
  uint64_t trainer_checksum;
  uint64_t reference_checksum;
  int8_t ok;
} tensor_row;

/* 1 when every rollout replica (and the reference, when there is one) matches the trainer,
 * 0 when one differs, -1 when there is nothing to compare. */
static int8_t tensor_ok(const rf_results_run *run, int t, int n) {
  const uint64_t *tr = run->trainer_checksum, *ro = run->rollout_checksum;
  const uint64_t *ref = run->reference_checksum;
  if (!tr || (!ro && !ref))
    return -1;
  int ok = !ref || ref[t] == tr[t];
  for (int rep = 0; ro && rep < run->replicas; rep++)
    ok = ok && ro[(size_t)rep * (size_t)n + (size_t)t] == tr[t];
  return (int8_t)ok;
}

static rf_status write_tensors(hid_t g, const rf_results_run *run) {
  const rf_model *m = run->model_spec;
  int n = m->tensor_count, replicas = RF_MAX(run->replicas, 1);
  size_t row = sizeof(tensor_row) + (size_t)replicas * sizeof(uint64_t);
  char *buf = rf_calloc((size_t)n + 1, row, "the tensors table");
  if (!buf)
    return RF_ERR_NOMEM;
  for (int t = 0; t < n; t++) {
    tensor_row *tr = (tensor_row *)(buf + (size_t)t * row);
    snprintf(tr->name, sizeof tr->name, "%s", m->tensors[t].name);
    snprintf(tr->dtype, sizeof tr->dtype, "%s", rf_dtype_name(m->tensors[t].dtype));
    tr->ndim = m->tensors[t].ndim;
    tr->shape[0] = m->tensors[t].shape[0];
    tr->shape[1] = m->tensors[t].shape[1];
    tr->bytes = m->tensors[t].bytes;
    tr->trainer_checksum = run->trainer_checksum ? run->trainer_checksum[t] : 0;
    tr->reference_checksum = run->reference_checksum ? run->reference_checksum[t] : 0;
    tr->ok = run->tensor_ok ? run->tensor_ok[t] : tensor_ok(run, t, n);
    uint64_t *rollout = (uint64_t *)(buf + (size_t)t * row + sizeof(tensor_row));
    for (int rep = 0; run->rollout_checksum && rep < run->replicas; rep++)
      rollout[rep] = run->rollout_checksum[(size_t)rep * (size_t)n + (size_t)t];
  }

  rf_status st = RF_OK;
  hid_t type = H5I_INVALID_HID;
  hsize_t dims[1] = {(hsize_t)n};
  /* The rollout checksums, one per replica, follow the fixed part of each row. */
  const rf_results_field fields[] = {
      RF_FIELD_STR("name", tensor_row, name),
      RF_FIELD_STR("dtype", tensor_row, dtype),
      RF_FIELD("ndim", tensor_row, ndim, H5T_NATIVE_INT32),
      {"shape", offsetof(tensor_row, shape), H5T_NATIVE_INT64, 0, 2},
      RF_FIELD("bytes", tensor_row, bytes, H5T_NATIVE_INT64),
      RF_FIELD("trainer_checksum", tensor_row, trainer_checksum, H5T_NATIVE_UINT64),
      RF_FIELD("reference_checksum", tensor_row, reference_checksum, H5T_NATIVE_UINT64),
      RF_FIELD("ok", tensor_row, ok, H5T_NATIVE_INT8),
      {"rollout_checksum", sizeof(tensor_row), H5T_NATIVE_UINT64, 0, (hsize_t)replicas},
  };
  RF_TRY_GOTO(rf_results_compound(row, fields, (int)RF_ARRAY_LEN(fields), &type), done);
  RF_TRY_GOTO(rf_results_dataset(g, "tensors", type, 1, dims, buf), done);
  RF_TRY_GOTO(rf_results_attr_i64(g, "tensors", "replicas", replicas), done);
  RF_TRY_GOTO(
      rf_results_attr_i64(g, "tensors", "has_trainer_checksum", run->trainer_checksum != NULL),
      done);
  RF_TRY_GOTO(
      rf_results_attr_i64(g, "tensors", "has_rollout_checksum", run->rollout_checksum != NULL),
      done);
  RF_TRY_GOTO(rf_results_attr_i64(g, "tensors", "has_reference", run->reference_checksum != NULL),
              done);
  RF_TRY_GOTO(rf_results_attr_str(g, "tensors", "units_bytes", "bytes"), done);
  RF_TRY_GOTO(rf_results_attr_str(g, "tensors", "checksum",
                                  "layout-invariant: sum over global row-major indices i of "
                                  "(2h + 1) * (bits of element i << its place in its 32-bit "
                                  "word), h = hash32(word, tensor id), mod 2^64 "
                                  "(refit-results/2); 0 where the matching has_* attribute "
                                  "is 0"),
              done);
  RF_TRY_GOTO(rf_results_attr_str(g, "tensors", "ok_values",
                                  "1: every rollout replica and the reference (if any) match "
                                  "the trainer (an fp8 tensor: the replicas match each other "
                                  "and the block-FP8 checkpoint, if any); 0: one differs; -1: "
                                  "not checked"),
              done);
done:
  if (type >= 0)
    H5Tclose(type);
  free(buf);
  return st;
}

static rf_status write_shards(hid_t g, const rf_results_run *run) {
  rf_status st = RF_OK;
  hid_t type = H5I_INVALID_HID;
  hsize_t dims[1] = {(hsize_t)(run->shards ? RF_MAX(run->shard_count, 0) : 0)};
  const rf_results_field fields[] = {
      RF_FIELD("rank", rf_shard_digest, rank, H5T_NATIVE_INT32),
      RF_FIELD("tensor", rf_shard_digest, tensor, H5T_NATIVE_INT32),
      RF_FIELD("role", rf_shard_digest, role, H5T_NATIVE_INT32),
      RF_FIELD("xxh3", rf_shard_digest, xxh3, H5T_NATIVE_UINT64),
  };
  RF_TRY_GOTO(
      rf_results_compound(sizeof(rf_shard_digest), fields, (int)RF_ARRAY_LEN(fields), &type), done);
  RF_TRY_GOTO(rf_results_dataset(g, "shards", type, 1, dims, run->shards), done);
  RF_TRY_GOTO(rf_results_attr_str(g, "shards", "description",
                                  "xxh3 is XXH3-64 of the shard's bytes; rank is the world "
                                  "rank, tensor the index into tensors"),
              done);
  RF_TRY_GOTO(rf_results_attr_str(g, "shards", "role_values",
                                  "0: a trainer shard as stored; 1: a rollout rank's part of "
                                  "the tensor in row-major order"),
              done);
done:
  if (type >= 0)
    H5Tclose(type);
  return st;
}

/* env arrives as "NAME=value\n" lines; each non-empty line becomes one string. */
static rf_status write_env(hid_t g, const char *env) {
  char *copy = rf_strdup(env ? env : "");
  const char **lines = copy ? rf_calloc(strlen(copy) + 1, sizeof *lines, "env lines") : NULL;
  if (!lines) {
    free(copy);
    return RF_ERR_NOMEM;
  }
  size_t n = 0;
  for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save))
    lines[n++] = line;
  rf_status st = RF_OK;
  hid_t type = H5I_INVALID_HID;
  hsize_t dims[1] = {n};
  RF_H5_GOTO(type = rf_results_vlen_string(), done);
  RF_TRY_GOTO(rf_results_dataset(g, "env", type, 1, dims, lines), done);
  RF_TRY_GOTO(rf_results_attr_str(g, "env", "description",
                                  "NAME=value of every NCCL_*, OMPI_*, UCX_* and HWLOC_* "
                                  "variable of rank 0's environment"),
              done);
done:
  if (type >= 0)
    H5Tclose(type);
  free(lines);
  free(copy);
  return st;
}

rf_status rf_results_write_run(hid_t g, const rf_results *r, const rf_results_run *run) {
  if (run->skip_reason)
    return write_skipped(g, r, run);
  RF_TRY(write_run_attributes(g, r, run));
  RF_TRY(write_timings(g, run->result));
  RF_TRY(write_summary(g, run->result));
  RF_TRY(write_tensors(g, run));
  RF_TRY(write_shards(g, run));
  RF_TRY(rf_results_write_plan(g, run));
  RF_TRY(rf_results_write_placement(g, run));
  RF_TRY(rf_results_write_links(g, run));
  return write_env(g, run->env);
}
