/* The results file readers (src/io/results*.c), structure-aware: the input chooses the root's
 * marks (refit_format and the strings `report` shows), the /runs group and its run names, each
 * run's attributes in their many type and shape forms, and the tensors, summary and timings
 * datasets with their compound members, array widths, ranks, extents and phase names. Then the
 * file is read by `refit report` (rf_results_load), by `refit verify` (checksums of the latest
 * run and of run 0, a string attribute) and checked for appending by `refit run --output`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_h5.h"
#include "io/io.h"

static const char *const run_strings[] = {"model",       "trainer",      "rollout",   "placement",
                                          "plan",        "mode",         "transport", "status",
                                          "skip_reason", "slurm_job_id", "slurm_job", "written"};
static const char *const run_numbers[] = {
    "bucket_size",         "iterations",  "ranks",          "wrong",
    "checksum_bad",        "sweep_index", "sweep_size",     "time_median_s",
    "time_p99_s",          "algbw_GBps",  "limit_memcpy_s", "limit_mpi_s",
    "limit_device_copy_s", "limit_nccl_s"};

/* A compound dataset of `rows` rows with the members the readers match by name; the input
 * may give a member another type, leave it out or rename it. */
static void compound_dataset(hid_t g, const char *name, const char *const *members,
                             const hid_t *types, int count, fuzz_input *in) {
  size_t offset[8], size = 0;
  hid_t mtype[8];
  for (int i = 0; i < count; i++) {
    unsigned how = fuzz_pick(in, 8);
    mtype[i] = how == 7   ? H5Tcopy(H5T_STD_U8LE)
               : how == 6 ? H5Tcopy(H5T_IEEE_F32BE)
                          : H5Tcopy(types[i]);
    if (how == 5 && H5Tget_class(mtype[i]) == H5T_STRING)
      H5Tset_size(mtype[i], 1 + fuzz_pick(in, 200));
    offset[i] = size;
    size += H5Tget_size(mtype[i]);
  }
  hid_t t = H5Tcreate(H5T_COMPOUND, size ? size : 1);
  for (int i = 0; i < count; i++) {
    if (fuzz_pick(in, 16) != 0)
      H5Tinsert(t, fuzz_pick(in, 16) ? members[i] : "other", offset[i], mtype[i]);
    H5Tclose(mtype[i]);
  }
  hsize_t rows[2] = {fuzz_pick(in, 6), 1 + fuzz_pick(in, 2)};
  hid_t space = fuzz_h5_space(1, rows, in), dcpl = fuzz_h5_dcpl(space, in);
  hid_t d = H5Dcreate2(g, name, t, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (d >= 0) {
    fuzz_h5_fill(d, in);
    H5Dclose(d);
  }
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Tclose(t);
}

static void tensors_dataset(hid_t g, fuzz_input *in) {
  hid_t name = H5Tcopy(H5T_C_S1);
  H5Tset_size(name, RF_NAME_MAX);
  hsize_t replicas = fuzz_pick(in, 4);
  hid_t array = replicas > 0 ? H5Tarray_create2(H5T_STD_U64LE, 1, &replicas)
                             : H5Tcopy(H5T_STD_U64LE); /* not an array: refused */
  const char *const members[] = {"name", "trainer_checksum", "rollout_checksum"};
  hid_t types[] = {name, H5T_STD_U64LE, array};
  compound_dataset(g, "tensors", members, types, 3, in);
  H5Tclose(array);
  H5Tclose(name);
}

static void summary_dataset(hid_t g, fuzz_input *in) {
  hid_t phase = H5Tcopy(H5T_C_S1);
  H5Tset_size(phase, 16);
  const char *const members[] = {"phase", "median", "p99"};
  hid_t types[] = {phase, H5T_IEEE_F64LE, H5T_IEEE_F64LE};
  compound_dataset(g, "summary", members, types, 3, in);
  H5Tclose(phase);
}

/* timings [iteration, rank, phase] with the phases attribute naming the last axis. */
static void timings_dataset(hid_t g, fuzz_input *in) {
  hsize_t dims[3] = {fuzz_pick(in, 4), fuzz_pick(in, 4), fuzz_pick(in, 9)};
  int rank = fuzz_pick(in, 8) == 0 ? 2 : 3;
  hid_t space = H5Screate_simple(rank, dims, NULL);
  hid_t type = fuzz_pick(in, 8) ? H5Tcopy(H5T_IEEE_F64LE) : H5Tcopy(H5T_STD_I32LE);
  hid_t dcpl = fuzz_h5_dcpl(space, in);
  hid_t d = H5Dcreate2(g, "timings", type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (d >= 0) {
    fuzz_h5_fill(d, in);
    /* The phase names: as many as the last axis, or another count, or not strings at all. */
    hsize_t n = fuzz_pick(in, 4) ? dims[2] : fuzz_pick(in, 12);
    const char *names[16];
    for (hsize_t i = 0; i < n && i < 16; i++)
      names[i] = rf_phase_name((rf_phase)fuzz_pick(in, RF_PHASE_COUNT + 1));
    unsigned kind = fuzz_pick(in, 8);
    if (kind == 7) {
      fuzz_h5_attr_str(d, "phases", "total", in);
    } else if (n <= 16) {
      hid_t st = H5Tcopy(H5T_C_S1);
      H5Tset_size(st, H5T_VARIABLE);
      hid_t as = n ? H5Screate_simple(1, &n, NULL) : H5Screate(H5S_NULL);
      hid_t a = H5Acreate2(d, "phases", st, as, H5P_DEFAULT, H5P_DEFAULT);
      if (a >= 0) {
        if (n)
          H5Awrite(a, st, names);
        H5Aclose(a);
      }
      H5Sclose(as);
      H5Tclose(st);
    }
    H5Dclose(d);
  }
  H5Pclose(dcpl);
  H5Tclose(type);
  H5Sclose(space);
}

static void add_run(hid_t runs, fuzz_input *in) {
  char name[32];
  if (fuzz_pick(in, 8) == 0)
    fuzz_string(in, name, sizeof name);
  else
    snprintf(name, sizeof name, "%04u", fuzz_pick(in, 12));
  if (!name[0] || H5Lexists(runs, name, H5P_DEFAULT) != 0)
    return;
  if (fuzz_pick(in, 16) == 0) { /* a dataset where a run group should be */
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t d = H5Dcreate2(runs, name, H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (d >= 0)
      H5Dclose(d);
    H5Sclose(s);
    return;
  }
  hid_t g = H5Gcreate2(runs, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (g < 0)
    return;
  static const char *const statuses[] = {"pass", "skipped", "fail", ""};
  for (unsigned n = fuzz_pick(in, 12); n > 0; n--) {
    unsigned which = fuzz_pick(in, RF_ARRAY_LEN(run_strings) + RF_ARRAY_LEN(run_numbers));
    if (which < RF_ARRAY_LEN(run_strings))
      fuzz_h5_attr_str(g, run_strings[which], which == 7 ? statuses[fuzz_pick(in, 4)] : "tiny", in);
    else
      fuzz_h5_attr_num(g, run_numbers[which - RF_ARRAY_LEN(run_strings)], 1.5, in);
  }
  unsigned parts = fuzz_pick(in, 8);
  if (parts & 1)
    tensors_dataset(g, in);
  if (parts & 2)
    summary_dataset(g, in);
  if (parts & 4)
    timings_dataset(g, in);
  H5Gclose(g);
}

static void build(const char *path, fuzz_input *in) {
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0)
    return;
  /* Both formats refit reads; format 1 differs in its checksum terms only. */
  if (fuzz_pick(in, 16) != 0)
    fuzz_h5_attr_str(f, "refit_format", fuzz_pick(in, 2) ? "refit-results/2" : "refit-results/1",
                     in);
  fuzz_h5_attr_str(f, "created", "2025-12-02T09:04:00Z", in);
  fuzz_h5_attr_str(f, "refit_version", "0.1.0", in);
  fuzz_h5_attr_str(f, "hosts", "node1,node2", in);
  if (fuzz_pick(in, 16) != 0) {
    hid_t runs = H5Gcreate2(f, "runs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    for (unsigned n = fuzz_pick(in, 5); runs >= 0 && n > 0; n--)
      add_run(runs, in);
    if (runs >= 0)
      H5Gclose(runs);
  }
  H5Fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_quiet();
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  fuzz_input in = {data, size, 0};
  char path[1100];
  snprintf(path, sizeof path, "%s/results.h5", fuzz_dir());
  build(path, &in);
  fuzz_h5_truncate(path, &in);

  rf_loaded_results loaded;
  (void)rf_results_load(path, &loaded);
  rf_loaded_results_free(&loaded);
  for (int run = -1; run <= 0; run++) {
    int read = -1, count = 0;
    char(*names)[RF_NAME_MAX] = NULL;
    uint64_t *trainer = NULL, *rollout = NULL;
    (void)rf_results_read_checksums(path, run, &read, &count, &names, &trainer, &rollout);
    free(names);
    free(trainer);
    free(rollout);
  }
  char model[128];
  (void)rf_results_run_attribute(path, -1, "model", model, sizeof model);
  rf_results *r = NULL;
  rf_results_file_info info = {"refit run", "host", "", 1};
  if (rf_results_open(path, &info, &r) == RF_OK)
    rf_results_close(r);
  return 0;
}
