/* Reading a results file back: the per-tensor checksums of one run, so a later run can be
 * compared bit for bit with a reference run of the same layout. */
#include <stdlib.h>
#include <string.h>

#include "io/h5_read.h"
#include "results_internal.h"

#define WHAT_TO_DO "give a results file written by 'refit run --output'"

/* The most a tensors table can hold before it is refused: rows (Kimi K2 has 69975 tensors) and
 * rollout replicas. The table is read TENSORS_SLICE bytes at a time and only a row's name, its
 * trainer checksum and its first replica's are kept: at most 29 MiB for 2^18 rows, whatever
 * the table's replicas. */
#define TENSORS_MAX ((hsize_t)1 << 18)
#define REPLICAS_MAX ((hsize_t)1 << 10)
#define TENSORS_SLICE ((size_t)1 << 20)

/* What is read of a tensors row; the rollout checksums of every replica follow it. */
typedef struct {
  char name[RF_NAME_MAX];
  uint64_t trainer_checksum;
} read_row;

/* The status of run group `name`: "skipped" for a sweep combination that could not run,
 * "simulated" for refit simulate's prediction; neither holds checksums. */
static void run_status(hid_t runs, const char *name, char *status, size_t len) {
  status[0] = '\0';
  hid_t g = H5Gopen2(runs, name, H5P_DEFAULT);
  if (g < 0)
    return;
  if (rf_results_read_attr_str(g, "status", status, len) != 0)
    status[0] = '\0';
  H5Gclose(g);
}

static int run_skipped(hid_t runs, const char *name) {
  char status[32];
  run_status(runs, name, status, sizeof status);
  return strcmp(status, "skipped") == 0 || strcmp(status, "simulated") == 0;
}

/* Picks the run group: `run` itself, or for -1 the highest number that is neither a skipped
 * sweep combination nor a simulated run (which hold no checksums to compare). */
static rf_status open_run(const rf_h5_source *src, hid_t f, int run, hid_t *group, int *number) {
  const char *path = src->path;
  hid_t runs = H5Gopen2(f, "runs", H5P_DEFAULT);
  RF_H5(runs);
  int last = -1;
  rf_status st = rf_results_last_run(runs, &last);
  char name[16];
  if (st == RF_OK && last < 0)
    st = rf_fail(RF_ERR_RESULTS, "results file '%s' holds no runs yet", path);
  if (st == RF_OK && run < 0) {
    for (*number = last; st == RF_OK && *number >= 0;) {
      snprintf(name, sizeof name, "%04d", *number);
      if (H5Lexists(runs, name, H5P_DEFAULT) > 0 && !run_skipped(runs, name))
        break;
      st = rf_results_run_below(runs, *number, number);
    }
    if (st == RF_OK && *number < 0)
      st = rf_fail(RF_ERR_RESULTS,
                   "results file '%s' holds only skipped sweep combinations and simulated runs",
                   path);
  } else if (st == RF_OK) {
    *number = run;
    snprintf(name, sizeof name, "%04d", *number);
    if (H5Lexists(runs, name, H5P_DEFAULT) <= 0)
      st = rf_fail(RF_ERR_RESULTS, "results file '%s' has no run %04d; its latest is %04d", path,
                   run, last);
    else if (run_skipped(runs, name)) {
      char status[32];
      run_status(runs, name, status, sizeof status);
      st = rf_fail(RF_ERR_RESULTS,
                   strcmp(status, "simulated") == 0
                       ? "results file '%s': run %04d is a simulated run (refit simulate) and "
                         "holds no measured results; give another --run"
                       : "results file '%s': run %04d is a skipped sweep combination "
                         "and holds no results; give another --run",
                   path, run);
    }
  }
  if (st == RF_OK)
    st = rf_h5_open_object(src, runs, name, H5I_GROUP, group);
  H5Gclose(runs);
  return st;
}

/* An integer attribute of obj into *out, left alone where it is absent (older files). */
static rf_status attr_i64(const rf_h5_source *src, hid_t obj, const char *name, int64_t *out) {
  htri_t exists = H5Aexists(obj, name);
  RF_H5(exists);
  return exists ? rf_h5_attr_read_num(src, obj, name, H5T_NATIVE_INT64, out) : RF_OK;
}

/* How many replicas the rollout_checksum member of the tensors table holds (the table's form
 * is checked already): refit writes one per rollout replica of the run, at least one, and
 * records the count in the table's and the run's replicas attributes. */
static rf_status replicas_of(const rf_h5_source *src, hid_t g, hid_t dset, hsize_t *replicas) {
  rf_status st = RF_OK;
  hid_t ftype = H5I_INVALID_HID, member = H5I_INVALID_HID;
  char where[256] = "?";
  if (H5Iget_name(dset, where, sizeof where) < 0)
    snprintf(where, sizeof where, "?");
  int64_t table = -1, run = -1;
  RF_H5_GOTO(ftype = H5Dget_type(dset), done);
  int index = H5Tget_member_index(ftype, "rollout_checksum");
  RF_H5_GOTO(index, done);
  RF_H5_GOTO(member = H5Tget_member_type(ftype, (unsigned)index), done);
  RF_H5_GOTO(H5Tget_array_dims2(member, replicas), done);
  RF_TRY_GOTO(attr_i64(src, dset, "replicas", &table), done);
  RF_TRY_GOTO(attr_i64(src, g, "replicas", &run), done);
  int64_t recorded = table >= 0 && (hsize_t)table != *replicas ? table : RF_MAX(run, 1);
  if (*replicas == 0 || *replicas > REPLICAS_MAX)
    st = rf_fail(src->bad,
                 "results file '%s': dataset %s holds %llu rollout checksums a row, expected 1 "
                 "to %llu; " WHAT_TO_DO,
                 src->path, where, (unsigned long long)*replicas, (unsigned long long)REPLICAS_MAX);
  else if ((table >= 0 || run >= 0) && (hsize_t)recorded != *replicas)
    st = rf_fail(src->bad,
                 "results file '%s': dataset %s holds %llu rollout checksums a row but its run "
                 "records %lld replicas; " WHAT_TO_DO,
                 src->path, where, (unsigned long long)*replicas, (long long)recorded);
done:
  if (member >= 0)
    H5Tclose(member);
  if (ftype >= 0)
    H5Tclose(ftype);
  return st;
}

static rf_status read_tensors(const rf_h5_source *src, hid_t g, hid_t dset, int *count,
                              char (**names)[RF_NAME_MAX], uint64_t **trainer, uint64_t **rollout) {
  const rf_h5_member members[] = {
      {"name", H5T_STRING, H5T_NO_CLASS, 0},
      {"trainer_checksum", H5T_INTEGER, H5T_NO_CLASS, 8},
      {"rollout_checksum", H5T_ARRAY, H5T_INTEGER, 8},
  };
  hsize_t replicas = 0, n = 0;
  RF_TRY(rf_h5_dataset_table(src, dset, members, (int)RF_ARRAY_LEN(members)));
  RF_TRY(replicas_of(src, g, dset, &replicas));
  RF_TRY(rf_h5_dataset_extent(src, dset, 1, TENSORS_MAX, &n));
  RF_TRY(rf_h5_dataset_stored(src, dset, n));
  rf_status st = RF_OK;
  hid_t type = H5I_INVALID_HID, fspace = H5I_INVALID_HID;
  size_t row = sizeof(read_row) + (size_t)replicas * sizeof(uint64_t);
  hsize_t slice = RF_MAX(TENSORS_SLICE / row, 1);
  char *buf = rf_malloc((size_t)slice * row, "a slice of the tensors table");
  *names = rf_calloc((size_t)n + 1, sizeof **names, "tensor names");
  *trainer = rf_calloc((size_t)n + 1, sizeof **trainer, "trainer checksums");
  *rollout = rf_calloc((size_t)n + 1, sizeof **rollout, "rollout checksums");
  if (!buf || !*names || !*trainer || !*rollout) {
    st = RF_ERR_NOMEM;
    goto done;
  }
  /* Members are matched by name, so the memory type lists only what is read. */
  const rf_results_field fields[] = {
      RF_FIELD_STR("name", read_row, name),
      RF_FIELD("trainer_checksum", read_row, trainer_checksum, H5T_NATIVE_UINT64),
      {"rollout_checksum", sizeof(read_row), H5T_NATIVE_UINT64, 0, replicas},
  };
  RF_TRY_GOTO(rf_results_compound(row, fields, (int)RF_ARRAY_LEN(fields), &type), done);
  RF_H5_GOTO(fspace = H5Dget_space(dset), done);
  for (hsize_t first = 0, k = 0; first < n && st == RF_OK; first += k) {
    k = RF_MIN(slice, n - first);
    hid_t mspace = H5Screate_simple(1, &k, NULL);
    if (mspace < 0 || H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &first, NULL, &k, NULL) < 0)
      st = rf_hdf5_failed("H5Sselect_hyperslab(tensors)", __FILE__, __LINE__);
    if (st == RF_OK)
      st = rf_h5_dataset_read(src, dset, type, mspace, fspace, buf);
    if (mspace >= 0)
      H5Sclose(mspace);
    for (hsize_t i = 0; i < k && st == RF_OK; i++) {
      const read_row *r = (const read_row *)(buf + (size_t)i * row);
      size_t t = (size_t)(first + i);
      memcpy((*names)[t], r->name, RF_NAME_MAX);
      (*names)[t][RF_NAME_MAX - 1] = '\0';
      (*trainer)[t] = r->trainer_checksum;
      memcpy(&(*rollout)[t], buf + (size_t)i * row + sizeof(read_row), sizeof(uint64_t));
    }
  }
  *count = (int)n;
done:
  if (fspace >= 0)
    H5Sclose(fspace);
  if (type >= 0)
    H5Tclose(type);
  free(buf);
  return st;
}

/* Opens the results file, the run (open_run's choice) and its tensors dataset; on failure
 * nothing stays open. */
static rf_status open_tensors(const rf_h5_source *src, int run, hid_t *f, hid_t *group, hid_t *dset,
                              int *number) {
  *group = *dset = H5I_INVALID_HID;
  RF_TRY(rf_results_open_checked(src->path, 0, f));
  rf_status st = open_run(src, *f, run, group, number);
  if (st == RF_OK && H5Lexists(*group, "tensors", H5P_DEFAULT) <= 0)
    st = rf_fail(RF_ERR_RESULTS, "results file '%s' run %04d has no tensors dataset", src->path,
                 *number);
  if (st == RF_OK)
    st = rf_h5_open_object(src, *group, "tensors", H5I_DATASET, dset);
  if (st != RF_OK) {
    if (*group >= 0)
      H5Gclose(*group);
    H5Fclose(*f);
    *group = H5I_INVALID_HID;
  }
  return st;
}

rf_status rf_results_read_checksums(const char *path, int run, int *run_read, int *count,
                                    char (**names)[RF_NAME_MAX], uint64_t **trainer,
                                    uint64_t **rollout) {
  *count = 0;
  *names = NULL;
  *trainer = *rollout = NULL;
  if (run_read)
    *run_read = -1;
  hid_t f, group, dset;
  const rf_h5_source src = {
      .kind = "results file", .path = path, .bad = RF_ERR_RESULTS, .todo = WHAT_TO_DO};
  int number = -1;
  rf_status st = open_tensors(&src, run, &f, &group, &dset, &number);
  if (st == RF_OK) {
    st = read_tensors(&src, group, dset, count, names, trainer, rollout);
    H5Dclose(dset);
    H5Gclose(group);
    H5Fclose(f);
  }
  if (st != RF_OK) {
    free(*names);
    free(*trainer);
    free(*rollout);
    *names = NULL;
    *trainer = *rollout = NULL;
    *count = 0;
    return st;
  }
  if (run_read)
    *run_read = number;
  return RF_OK;
}

rf_status rf_results_format(const char *path, int *format) {
  hid_t f = H5I_INVALID_HID;
  char mark[64] = "";
  RF_TRY(rf_results_open_checked(path, 0, &f));
  /* rf_results_open_checked has read the mark and accepted it. */
  rf_results_read_attr_str(f, "refit_format", mark, sizeof mark);
  H5Fclose(f);
  *format = rf_results_format_number(mark);
  return RF_OK;
}

rf_status rf_results_run_attribute(const char *path, int run, const char *name, char *out,
                                   size_t len) {
  hid_t f = H5I_INVALID_HID, group = H5I_INVALID_HID;
  int number = -1;
  RF_TRY(rf_results_open_checked(path, 0, &f));
  const rf_h5_source src = {
      .kind = "results file", .path = path, .bad = RF_ERR_RESULTS, .todo = WHAT_TO_DO};
  rf_status st = open_run(&src, f, run, &group, &number);
  if (st == RF_OK && rf_results_read_attr_str(group, name, out, len) != 0)
    st = rf_fail(RF_ERR_RESULTS, "results file '%s': run %04d has no string attribute '%s'", path,
                 number, name);
  if (group >= 0)
    H5Gclose(group);
  H5Fclose(f);
  return st;
}

/* The dtype member of a tensors row: what the run's trainer held the tensor in. */
typedef struct {
  char dtype[8];
} dtype_row;

rf_status rf_results_read_tensor_dtypes(const char *path, int run, int count, char (**dtypes)[8]) {
  *dtypes = rf_calloc((size_t)count + 1, sizeof **dtypes, "tensor dtypes");
  if (!*dtypes)
    return RF_ERR_NOMEM;
  hid_t f, group, dset, ftype = H5I_INVALID_HID, type = H5I_INVALID_HID;
  int number = -1;
  hsize_t n = 0;
  const rf_h5_source src = {
      .kind = "results file", .path = path, .bad = RF_ERR_RESULTS, .todo = WHAT_TO_DO};
  rf_status st = open_tensors(&src, run, &f, &group, &dset, &number);
  if (st != RF_OK) {
    free(*dtypes);
    *dtypes = NULL;
    return st;
  }
  st = rf_h5_dataset_extent(&src, dset, 1, TENSORS_MAX, &n);
  if (st == RF_OK && n != (hsize_t)count)
    st = rf_fail(RF_ERR_RESULTS,
                 "results file '%s' run %04d: dataset tensors holds %llu rows, %d a moment ago; "
                 "was the file replaced while refit read it?",
                 path, number, (unsigned long long)n, count);
  if (st == RF_OK && (ftype = H5Dget_type(dset)) < 0)
    st = rf_hdf5_failed("H5Dget_type(tensors)", __FILE__, __LINE__);
  /* A table without the member says nothing of dtypes: every entry stays "". */
  const rf_results_field fields[] = {RF_FIELD_STR("dtype", dtype_row, dtype)};
  if (st == RF_OK && n > 0 && H5Tget_member_index(ftype, "dtype") >= 0) {
    RF_TRY_GOTO(rf_results_compound(sizeof(dtype_row), fields, 1, &type), done);
    RF_TRY_GOTO(rf_h5_dataset_read(&src, dset, type, H5S_ALL, H5S_ALL, *dtypes), done);
    for (hsize_t t = 0; t < n; t++)
      (*dtypes)[t][7] = '\0';
  }
done:
  if (type >= 0)
    H5Tclose(type);
  if (ftype >= 0)
    H5Tclose(ftype);
  H5Dclose(dset);
  H5Gclose(group);
  H5Fclose(f);
  if (st != RF_OK) {
    free(*dtypes);
    *dtypes = NULL;
  }
  return st;
}
