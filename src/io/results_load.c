/* Reading a whole results file back for `refit report`: every run's configuration, verdict,
 * headline numbers, calibrated limits, summary and timings. Attributes that later schema
 * additions bring (limits, sweeps, Slurm) are read when present and never required, so files
 * of every refit-results/1 and /2 writer load. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/h5_read.h"
#include "result/result.h"
#include "results_internal.h"

#define WHAT_TO_DO "give a results file written by 'refit run --output'"

/* The most a run's datasets can hold before the report refuses them: far beyond any real run
 * (a summary row per phase; 2^22 iteration-rank cells of timings, such as 1024 iterations of
 * 4096 ranks), and small enough that what is kept of them fits in memory. Timings are read a
 * slice of TIMINGS_SLICE values at a time, and only total is kept of each cell. */
#define SUMMARY_ROWS_MAX ((hsize_t)1 << 16)
#define TIMINGS_MAX ((hsize_t)1 << 28)
#define TIMING_CELLS_MAX ((hsize_t)1 << 22)
#define TIMINGS_SLICE ((hsize_t)1 << 16)
#define PHASES_MAX ((hsize_t)1 << 10)

/* Most attributes are optional (later schema additions, skipped runs): an absent one leaves
 * *out alone, since every one the report reads has a meaningful default; one that is there but
 * is not a single number or string is refused, naming it. */
static rf_status read_attr_num(const rf_h5_source *src, hid_t obj, const char *name, hid_t mem_type,
                               void *out) {
  htri_t exists = H5Aexists(obj, name);
  RF_H5(exists);
  return exists ? rf_h5_attr_read_num(src, obj, name, mem_type, out) : RF_OK;
}

static rf_status read_attr_text(const rf_h5_source *src, hid_t obj, const char *name, char *buf,
                                size_t len) {
  buf[0] = '\0';
  htri_t exists = H5Aexists(obj, name);
  RF_H5(exists);
  return exists ? rf_h5_attr_read_str(src, obj, name, buf, len) : RF_OK;
}

static int phase_index(const char *name) {
  for (int p = 0; p < RF_PHASE_COUNT; p++)
    if (strcmp(name, rf_phase_name((rf_phase)p)) == 0)
      return p;
  return -1;
}

typedef struct {
  char phase[16];
  double median, p99;
} summary_row;

static rf_status read_summary(const rf_h5_source *src, hid_t g, rf_loaded_run *run) {
  rf_status st = RF_OK;
  hid_t dset = H5I_INVALID_HID, type = H5I_INVALID_HID, file_type = H5I_INVALID_HID;
  hid_t dxpl = H5I_INVALID_HID;
  summary_row *rows = NULL;
  hsize_t n = 0;
  const rf_h5_member members[] = {
      {"phase", H5T_STRING, H5T_NO_CLASS, 0},
      {"median", H5T_FLOAT, H5T_NO_CLASS, 8},
      {"p99", H5T_FLOAT, H5T_NO_CLASS, 8},
  };
  RF_TRY_GOTO(rf_h5_open_object(src, g, "summary", H5I_DATASET, &dset), done);
  RF_TRY_GOTO(rf_h5_dataset_table(src, dset, members, (int)RF_ARRAY_LEN(members)), done);
  RF_TRY_GOTO(rf_h5_dataset_extent(src, dset, 1, SUMMARY_ROWS_MAX, &n), done);
  RF_TRY_GOTO(rf_h5_dataset_stored(src, dset, n), done);
  if (!(rows = rf_calloc((size_t)n + 1, sizeof *rows, "the summary table"))) {
    st = RF_ERR_NOMEM;
    goto done;
  }
  /* Members are matched by name, so the memory type lists only what the report shows. */
  const rf_results_field fields[] = {
      RF_FIELD_STR("phase", summary_row, phase),
      RF_FIELD("median", summary_row, median, H5T_NATIVE_DOUBLE),
      RF_FIELD("p99", summary_row, p99, H5T_NATIVE_DOUBLE),
  };
  RF_TRY_GOTO(rf_results_compound(sizeof *rows, fields, (int)RF_ARRAY_LEN(fields), &type), done);
  /* The conversion buffers sized for this table: HDF5's default is a megabyte, cleared on every
   * read, which made loading thousands of runs (a calibration) spend most of its time zeroing. */
  RF_H5_GOTO(file_type = H5Dget_type(dset), done);
  RF_H5_GOTO(dxpl = H5Pcreate(H5P_DATASET_XFER), done);
  size_t element = RF_MAX(sizeof *rows, H5Tget_size(file_type));
  RF_H5_GOTO(H5Pset_buffer(dxpl, ((size_t)n + 1) * element, NULL, NULL), done);
  if (n > 0)
    RF_TRY_GOTO(rf_h5_dataset_read_with(src, dset, type, H5S_ALL, H5S_ALL, dxpl, rows), done);
  for (hsize_t i = 0; i < n; i++) {
    rows[i].phase[sizeof rows->phase - 1] = '\0';
    int p = phase_index(rows[i].phase);
    if (p >= 0) {
      run->phase_median[p] = rows[i].median;
      run->phase_p99[p] = rows[i].p99;
    }
  }
  run->has_summary = 1;
done:
  if (dxpl >= 0)
    H5Pclose(dxpl);
  if (file_type >= 0)
    H5Tclose(file_type);
  if (type >= 0)
    H5Tclose(type);
  if (dset >= 0)
    H5Dclose(dset);
  free(rows);
  return st;
}

/* The phases attribute of timings: which phase each entry of the last axis is. It must name
 * exactly as many phases as that axis has entries. */
static rf_status read_phase_map(const rf_h5_source *src, hid_t dset, int count, int *map) {
  char(*names)[16] = rf_calloc((size_t)count, sizeof *names, "phase names");
  if (!names)
    return RF_ERR_NOMEM;
  rf_status st = rf_h5_attr_read_strs(src, dset, "phases", count, names[0], sizeof *names);
  for (int i = 0; st == RF_OK && i < count; i++)
    map[i] = phase_index(names[i]);
  free(names);
  return st;
}

/* What is kept of a run's timings while they are read: total of each cell in [iteration][rank]
 * order, and each phase's slowest rank in each iteration. Files written before 2026-12-05 hold
 * each rank's iterations together under the same shape [iteration, rank, phase] (legacy: no
 * order attribute), so their cells are put in order as they arrive. */
typedef struct {
  hsize_t iters, ranks, phases; /* the dataset's shape */
  int legacy;
  const int *map;  /* the phase of each entry of the last axis, -1 for one refit does not know */
  double *total;   /* [iters * ranks] */
  double *slowest; /* [iters * RF_PHASE_COUNT] */
} timing_sink;

/* Takes cell c, in the file's order, whose values of every phase are values[phases]. */
static void take_cell(timing_sink *k, hsize_t c, const double *values) {
  hsize_t it = k->legacy ? c % k->iters : c / k->ranks;
  hsize_t rank = k->legacy ? c / k->iters : c % k->ranks;
  double cell[RF_PHASE_COUNT] = {0};
  for (hsize_t p = 0; p < k->phases; p++)
    if (k->map[p] >= 0)
      cell[k->map[p]] = values[p];
  k->total[it * k->ranks + rank] = cell[RF_PHASE_TOTAL];
  /* Rank 0 of each iteration arrives before the others in both orders. */
  double *slow = k->slowest + it * RF_PHASE_COUNT;
  for (int p = 0; p < RF_PHASE_COUNT; p++)
    slow[p] = rank == 0 ? cell[p] : RF_MAX(slow[p], cell[p]);
}

/* Reads the timings a slice of at most TIMINGS_SLICE values at a time: whole iterations where
 * they fit, else part of one. Memory stays what is kept, whatever the dataset's extent. */
static rf_status read_cells(const rf_h5_source *src, hid_t dset, timing_sink *k) {
  double *buf = rf_malloc(TIMINGS_SLICE * sizeof *buf, "a slice of timings");
  hid_t fspace = H5Dget_space(dset);
  rf_status st = buf ? RF_OK : RF_ERR_NOMEM;
  if (st == RF_OK && fspace < 0)
    st = rf_hdf5_failed("H5Dget_space(timings)", __FILE__, __LINE__);
  hsize_t cells = k->iters * k->ranks, per_iteration = k->ranks * k->phases;
  for (hsize_t c = 0; c < cells && st == RF_OK;) {
    hsize_t it = c / k->ranks, rank = c % k->ranks;
    hsize_t start[3] = {it, rank, 0}, count[3] = {1, 1, k->phases};
    if (rank == 0 && per_iteration <= TIMINGS_SLICE) {
      count[0] = RF_MIN(TIMINGS_SLICE / per_iteration, k->iters - it);
      count[1] = k->ranks;
    } else {
      count[1] = RF_MIN(TIMINGS_SLICE / k->phases, k->ranks - rank);
    }
    hsize_t n = count[0] * count[1], values = n * k->phases;
    hid_t mspace = H5Screate_simple(1, &values, NULL);
    if (mspace < 0 || H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0)
      st = rf_hdf5_failed("H5Sselect_hyperslab(timings)", __FILE__, __LINE__);
    if (st == RF_OK)
      st = rf_h5_dataset_read(src, dset, H5T_NATIVE_DOUBLE, mspace, fspace, buf);
    if (mspace >= 0)
      H5Sclose(mspace);
    for (hsize_t j = 0; j < n && st == RF_OK; j++)
      take_cell(k, c + j, buf + j * k->phases);
    c += n;
  }
  if (fspace >= 0)
    H5Sclose(fspace);
  free(buf);
  return st;
}

/* The medians of older files were taken over rows that mixed iterations, which leans them
 * towards the slow ones. The figures derived from them (the headline, the summary's, algbw) are
 * taken again, as refit computes them now: median and p99 over iterations of the slowest rank
 * (rf_stats_of_slowest). */
static rf_status retake_legacy(const timing_sink *k, rf_loaded_run *run, int64_t replica_bytes) {
  double *slowest = rf_malloc((size_t)k->iters * sizeof *slowest, "per-iteration times");
  if (!slowest)
    return RF_ERR_NOMEM;
  rf_status st = RF_OK;
  for (int p = 0; p < RF_PHASE_COUNT && st == RF_OK; p++) {
    for (hsize_t it = 0; it < k->iters; it++)
      slowest[it] = k->slowest[it * RF_PHASE_COUNT + (hsize_t)p];
    rf_stats s;
    if ((st = rf_stats_of(slowest, (int)k->iters, &s)) != RF_OK)
      break;
    if (run->has_summary) {
      run->phase_median[p] = s.median;
      run->phase_p99[p] = s.p99;
    }
    if (p == RF_PHASE_TOTAL && s.median > 0) {
      if (!isnan(run->algbw_GBps))
        run->algbw_GBps = (double)replica_bytes / s.median / 1e9; /* results_write's formula */
      run->time_median_s = s.median;
      run->time_p99_s = s.p99;
    }
  }
  free(slowest);
  return st;
}

/* The spread of total over every cell, and the fastest and slowest of the ranks' medians. */
static rf_status take_spread(const timing_sink *k, rf_loaded_run *run) {
  RF_TRY(rf_stats_of(k->total, (int)(k->iters * k->ranks), &run->spread));
  double *mine = rf_malloc((size_t)k->iters * sizeof *mine, "a rank's times");
  if (!mine)
    return RF_ERR_NOMEM;
  rf_status st = RF_OK;
  double fastest = INFINITY, slowest = -INFINITY;
  for (hsize_t rank = 0; rank < k->ranks && st == RF_OK; rank++) {
    for (hsize_t it = 0; it < k->iters; it++)
      mine[it] = k->total[it * k->ranks + rank];
    rf_stats m;
    st = rf_stats_of(mine, (int)k->iters, &m);
    fastest = RF_MIN(fastest, m.median);
    slowest = RF_MAX(slowest, m.median);
  }
  free(mine);
  run->rank_median_fastest = fastest;
  run->rank_median_slowest = slowest;
  return st;
}

/* refit writes timings of the run's own iterations and ranks; a file whose timings claim
 * others, or more cells than refit reads, is refused before anything is allocated. */
static rf_status check_timing_shape(const rf_h5_source *src, hid_t dset, const rf_loaded_run *run,
                                    const hsize_t *dims) {
  char where[256] = "?";
  if (H5Iget_name(dset, where, sizeof where) < 0)
    snprintf(where, sizeof where, "?");
  unsigned long long d0 = dims[0], d1 = dims[1], d2 = dims[2];
  if (d2 > PHASES_MAX)
    return rf_fail(RF_ERR_RESULTS,
                   "results file '%s': dataset %s has %llu phases, more than the %llu refit "
                   "reads; " WHAT_TO_DO,
                   src->path, where, d2, (unsigned long long)PHASES_MAX);
  if ((run->iterations >= 0 && d0 != (unsigned long long)run->iterations) ||
      (run->ranks >= 0 && d1 != (unsigned long long)run->ranks))
    return rf_fail(RF_ERR_RESULTS,
                   "results file '%s': dataset %s has shape [%llu, %llu, %llu] but its run "
                   "records iterations %lld and ranks %lld; " WHAT_TO_DO,
                   src->path, where, d0, d1, d2, (long long)run->iterations, (long long)run->ranks);
  if (d0 * d1 > TIMING_CELLS_MAX)
    return rf_fail(RF_ERR_RESULTS,
                   "results file '%s': dataset %s has shape [%llu, %llu, %llu], more than the "
                   "%llu iteration-rank cells refit reads; " WHAT_TO_DO,
                   src->path, where, d0, d1, d2, (unsigned long long)TIMING_CELLS_MAX);
  return RF_OK;
}

static rf_status read_timings(const rf_h5_source *src, hid_t g, rf_loaded_run *run) {
  rf_status st = RF_OK;
  hid_t dset = H5I_INVALID_HID;
  int *map = NULL;
  timing_sink k = {0};
  hsize_t dims[3] = {0, 0, 0};
  RF_TRY_GOTO(rf_h5_open_object(src, g, "timings", H5I_DATASET, &dset), done);
  RF_TRY_GOTO(rf_h5_dataset_number(src, dset, H5T_FLOAT, 8), done);
  /* [iteration, rank, phase]; the extent is checked against the run before any buffer. */
  RF_TRY_GOTO(rf_h5_dataset_extent(src, dset, 3, TIMINGS_MAX, dims), done);
  if (dims[0] * dims[1] == 0 || dims[2] == 0)
    goto done;
  RF_TRY_GOTO(check_timing_shape(src, dset, run, dims), done);
  RF_TRY_GOTO(rf_h5_dataset_stored(src, dset, dims[0] * dims[1] * dims[2]), done);
  htri_t ordered = H5Aexists(dset, "order");
  RF_H5_GOTO(ordered, done);
  k = (timing_sink){.iters = dims[0], .ranks = dims[1], .phases = dims[2], .legacy = !ordered};
  map = rf_calloc(dims[2], sizeof *map, "the phase map");
  k.total = rf_calloc(dims[0] * dims[1], sizeof *k.total, "timings");
  k.slowest = rf_calloc(dims[0] * RF_PHASE_COUNT, sizeof *k.slowest, "per-iteration times");
  if (!map || !k.total || !k.slowest) {
    st = RF_ERR_NOMEM;
    goto done;
  }
  k.map = map;
  RF_TRY_GOTO(read_phase_map(src, dset, (int)dims[2], map), done);
  RF_TRY_GOTO(read_cells(src, dset, &k), done);
  run->timing_iterations = (int)dims[0];
  run->timing_ranks = (int)dims[1];
  RF_TRY_GOTO(take_spread(&k, run), done);
  int64_t replica_bytes = 0;
  /* One iteration or one rank: both orders are the same. */
  if (k.legacy && k.iters >= 2 && k.ranks >= 2 &&
      (st = read_attr_num(src, g, "replica_bytes", H5T_NATIVE_INT64, &replica_bytes)) == RF_OK)
    st = retake_legacy(&k, run, replica_bytes);
done:
  if (dset >= 0)
    H5Dclose(dset);
  free(map);
  free(k.total);
  free(k.slowest);
  return st;
}

static rf_status read_run(const rf_h5_source *src, hid_t runs, const char *name,
                          rf_loaded_run *run) {
  hid_t g;
  RF_TRY(rf_h5_open_object(src, runs, name, H5I_GROUP, &g));
  run->number = atoi(name);
  struct {
    const char *attr;
    char *buf;
    size_t len;
  } text[] = {
      {"model", run->model, sizeof run->model},
      {"trainer", run->trainer, sizeof run->trainer},
      {"rollout", run->rollout, sizeof run->rollout},
      {"placement", run->placement, sizeof run->placement},
      {"plan", run->plan, sizeof run->plan},
      {"mode", run->mode, sizeof run->mode},
      {"transport", run->transport, sizeof run->transport},
      {"status", run->status, sizeof run->status},
      {"skip_reason", run->skip_reason, sizeof run->skip_reason},
      {"slurm_job_id", run->slurm_job_id, sizeof run->slurm_job_id},
      {"slurm_job", run->slurm_job, sizeof run->slurm_job},
      {"written", run->written, sizeof run->written},
      {"dtype", run->dtype, sizeof run->dtype},
      {"trainer_style", run->trainer_style, sizeof run->trainer_style},
      {"trainer_order", run->trainer_order, sizeof run->trainer_order},
      {"gpu_versions", run->gpu_versions, sizeof run->gpu_versions},
      {"cluster", run->cluster, sizeof run->cluster},
      {"memory", run->memory, sizeof run->memory},
      {"rollout_dtype", run->rollout_dtype, sizeof run->rollout_dtype},
      {"published_label", run->published_label, sizeof run->published_label},
      {"update", run->update, sizeof run->update},
      {"delta", run->delta, sizeof run->delta},
  };
  rf_status st = RF_OK;
  for (size_t i = 0; i < RF_ARRAY_LEN(text) && st == RF_OK; i++)
    st = read_attr_text(src, g, text[i].attr, text[i].buf, text[i].len);
  run->bucket_size = run->iterations = run->ranks = run->wrong = run->checksum_bad = -1;
  run->sweep_index = run->sweep_size = run->messages = run->pieces = run->memory_fits = -1;
  run->wire_delta_bytes = -1;
  int64_t simulated = 0, changed = -1, elements = -1;
  struct {
    const char *attr;
    int64_t *out;
  } ints[] = {
      {"bucket_size", &run->bucket_size},
      {"iterations", &run->iterations},
      {"ranks", &run->ranks},
      {"wrong", &run->wrong},
      {"checksum_bad", &run->checksum_bad},
      {"sweep_index", &run->sweep_index},
      {"sweep_size", &run->sweep_size},
      {"messages", &run->messages},
      {"pieces", &run->pieces},
      {"simulated", &simulated},
      {"memory_fits", &run->memory_fits},
      {"wire_delta_bytes", &run->wire_delta_bytes},
      {"update_changed_elements", &changed},
      {"update_elements", &elements},
  };
  for (size_t i = 0; i < RF_ARRAY_LEN(ints) && st == RF_OK; i++)
    st = read_attr_num(src, g, ints[i].attr, H5T_NATIVE_INT64, ints[i].out);
  run->time_median_s = run->time_p99_s = run->algbw_GBps = run->published_s = NAN;
  struct {
    const char *attr;
    double *out;
  } reals[] = {
      {"time_median_s", &run->time_median_s},
      {"time_p99_s", &run->time_p99_s},
      {"algbw_GBps", &run->algbw_GBps},
      {"published_s", &run->published_s},
  };
  for (size_t i = 0; i < RF_ARRAY_LEN(reals) && st == RF_OK; i++)
    st = read_attr_num(src, g, reals[i].attr, H5T_NATIVE_DOUBLE, reals[i].out);
  for (int l = 0; l < RF_LIMIT_COUNT; l++) {
    char attr[48];
    snprintf(attr, sizeof attr, "limit_%s_s", rf_limit_names[l]);
    run->limit_s[l] = NAN;
    if (st == RF_OK)
      st = read_attr_num(src, g, attr, H5T_NATIVE_DOUBLE, &run->limit_s[l]);
  }
  run->changed_fraction = changed >= 0 && elements > 0 ? (double)changed / (double)elements : NAN;
  run->skipped = strcmp(run->status, "skipped") == 0;
  run->simulated = simulated != 0 || strcmp(run->status, "simulated") == 0;
  if (st == RF_OK && H5Aexists(g, "config_json") > 0) {
    /* Read into the longest string refit reads, then kept at its own length. */
    char *json = rf_malloc(RF_H5_STRING_MAX + 1, "a run's configuration");
    st = json ? read_attr_text(src, g, "config_json", json, RF_H5_STRING_MAX + 1) : RF_ERR_NOMEM;
    if (st == RF_OK && !(run->config_json = rf_strdup(json)))
      st = RF_ERR_NOMEM;
    free(json);
  }

  if (st == RF_OK && !run->skipped && H5Lexists(g, "summary", H5P_DEFAULT) > 0)
    st = read_summary(src, g, run);
  if (st == RF_OK && !run->skipped && H5Lexists(g, "timings", H5P_DEFAULT) > 0)
    st = read_timings(src, g, run);
  /* What leaves the trainer: the plan group's transfer_bytes (p2p: a copy per replica; fanout:
   * one copy), for comparing plans. */
  run->trainer_send_bytes = run->dense_wire_bytes = -1;
  if (st == RF_OK && !run->skipped && H5Lexists(g, "plan", H5P_DEFAULT) > 0) {
    hid_t plan = H5Gopen2(g, "plan", H5P_DEFAULT);
    if (plan < 0)
      st =
          rf_fail(RF_ERR_RESULTS, "results file '%s': plan of run %04d is not a group; " WHAT_TO_DO,
                  src->path, run->number);
    else {
      int64_t wire = -1, forward = 0, wire_forward = -1;
      st = read_attr_num(src, plan, "transfer_bytes", H5T_NATIVE_INT64, &run->trainer_send_bytes);
      if (st == RF_OK)
        st = read_attr_num(src, plan, "wire_transfer_bytes", H5T_NATIVE_INT64, &wire);
      if (st == RF_OK)
        st = read_attr_num(src, plan, "forward_bytes", H5T_NATIVE_INT64, &forward);
      if (st == RF_OK)
        st = read_attr_num(src, plan, "wire_forward_bytes", H5T_NATIVE_INT64, &wire_forward);
      if (run->trainer_send_bytes >= 0)
        run->dense_wire_bytes = (wire >= 0 ? wire : run->trainer_send_bytes) +
                                (wire_forward >= 0 ? wire_forward : forward);
      H5Gclose(plan);
    }
  }
  /* Files written before the headline attributes existed still have the summary's total. */
  if (run->has_summary && isnan(run->time_median_s))
    run->time_median_s = run->phase_median[RF_PHASE_TOTAL];
  if (run->has_summary && isnan(run->time_p99_s))
    run->time_p99_s = run->phase_p99[RF_PHASE_TOTAL];
  H5Gclose(g);
  return st;
}

typedef struct {
  char (*names)[16];
  int count, cap;
} name_list;

static herr_t collect_name(hid_t group, const char *name, const H5L_info_t *info, void *data) {
  (void)group;
  (void)info;
  name_list *list = data;
  if (strlen(name) >= sizeof *list->names)
    return 0; /* Not a run number; refit never writes such a link. */
  if (rf_grow((void **)&list->names, list->count, &list->cap, sizeof *list->names, "run names") !=
      RF_OK)
    return -1;
  snprintf(list->names[list->count++], sizeof *list->names, "%s", name);
  return 0;
}

/* The checks of rf_results_open_checked, with messages that fit a file given to `report`
 * rather than to --output. */
static rf_status open_for_report(const char *path, hid_t *file) {
  struct stat sb;
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  if (stat(path, &sb) != 0)
    return rf_fail(RF_ERR_RESULTS, "results file '%s' cannot be read: %s; " WHAT_TO_DO, path,
                   strerror(errno));
  if (!S_ISREG(sb.st_mode) || H5Fis_hdf5(path) <= 0)
    return rf_fail(RF_ERR_RESULTS,
                   "results file '%s' is not an HDF5 file or is damaged; " WHAT_TO_DO, path);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0)
    return rf_fail(RF_ERR_RESULTS,
                   "results file '%s' is not an HDF5 file or is damaged; " WHAT_TO_DO, path);
  char format[64];
  rf_status st = RF_OK;
  if (H5Aexists(f, "refit_format") <= 0 ||
      rf_results_read_attr_str(f, "refit_format", format, sizeof format) != 0)
    st = rf_fail(RF_ERR_RESULTS,
                 "results file '%s' is an HDF5 file but not refit's results; " WHAT_TO_DO, path);
  else if (rf_results_format_number(format) == 0)
    st = rf_fail(RF_ERR_RESULTS,
                 "results file '%s' has format '%s' but this refit reads '%s' and '%s'; "
                 "use the refit that wrote it",
                 path, format, RF_RESULTS_FORMAT, RF_RESULTS_FORMAT_V1);
  else if (H5Lexists(f, "runs", H5P_DEFAULT) <= 0)
    st = rf_fail(RF_ERR_RESULTS, "results file '%s' is damaged: it has no /runs group; " WHAT_TO_DO,
                 path);
  if (st != RF_OK) {
    H5Fclose(f);
    return st;
  }
  *file = f;
  return RF_OK;
}

rf_status rf_results_load(const char *path, rf_loaded_results *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->path, sizeof out->path, "%s", path);
  hid_t f = H5I_INVALID_HID, runs = H5I_INVALID_HID;
  RF_TRY(open_for_report(path, &f));
  const rf_h5_source src = {
      .kind = "results file", .path = path, .bad = RF_ERR_RESULTS, .todo = WHAT_TO_DO};
  rf_status st = RF_OK;
  name_list list = {0};
  RF_TRY_GOTO(read_attr_text(&src, f, "created", out->created, sizeof out->created), done);
  RF_TRY_GOTO(
      read_attr_text(&src, f, "refit_version", out->refit_version, sizeof out->refit_version),
      done);
  RF_TRY_GOTO(read_attr_text(&src, f, "hosts", out->hosts, sizeof out->hosts), done);
  RF_TRY_GOTO(rf_h5_open_object(&src, f, "runs", H5I_GROUP, &runs), done);
  RF_H5_GOTO(H5Literate(runs, H5_INDEX_NAME, H5_ITER_INC, NULL, collect_name, &list), done);
  if (list.count > 0 &&
      !(out->runs = rf_calloc((size_t)list.count, sizeof *out->runs, "the runs"))) {
    st = RF_ERR_NOMEM;
    goto done;
  }
  for (int i = 0; i < list.count && st == RF_OK; i++) {
    st = read_run(&src, runs, list.names[i], &out->runs[i]);
    out->run_count = i + 1;
  }
done:
  free(list.names);
  if (runs >= 0)
    H5Gclose(runs);
  H5Fclose(f);
  return st;
}

void rf_loaded_results_free(rf_loaded_results *r) {
  for (int i = 0; i < r->run_count; i++) {
    free(r->runs[i].config_json);
  }
  free(r->runs);
  r->runs = NULL;
  r->run_count = 0;
}
