/* results: the HDF5 results file of results/README.md. This file decides which files are
 * refit's, creates a new one with its file attributes, and holds the small writers the rest
 * shares; results_append.c appends runs (results_write.c writes their contents) under the
 * writers' lock of results_lock.c, and results_read.c reads checksums back.
 *
 * The file is open only inside one call: rf_results_open checks or creates it and closes it
 * again, and each run is appended to a copy that then replaces the file. A job killed in the
 * middle of a transfer therefore never holds the file open, and every earlier run stays
 * readable. */
#include <errno.h>
#include <hwloc.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/h5_read.h"
#include "results_internal.h"

#define NOT_HDF5 "results file '%s' is not an HDF5 file or is damaged; %s"
#define FOREIGN "results file '%s' is an HDF5 file but not refit's results; %s"
/* What to do about a file that cannot be used: a run's --output is replaced by another; a file
 * read (refit verify's input or --reference) by one that a run wrote. */
#define WRITE_ADVICE(also_move)                                                                    \
  ((also_move) ? "choose another --output or move it away" : "choose another --output")
#define READ_ADVICE "give a results file written by 'refit run --output'"
#define ADVICE(appending, also_move) ((appending) ? WRITE_ADVICE(also_move) : READ_ADVICE)

/* ---- small writers ------------------------------------------------------------------------ */

hid_t rf_results_vlen_string(void) {
  hid_t t = H5Tcopy(H5T_C_S1);
  if (t >= 0 && (H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)) {
    H5Tclose(t);
    return H5I_INVALID_HID;
  }
  return t;
}

hid_t rf_results_fixed_string(size_t size) {
  hid_t t = H5Tcopy(H5T_C_S1);
  if (t >= 0 && (H5Tset_size(t, size) < 0 || H5Tset_strpad(t, H5T_STR_NULLTERM) < 0)) {
    H5Tclose(t);
    return H5I_INVALID_HID;
  }
  return t;
}

rf_status rf_results_compound(size_t size, const rf_results_field *fields, int count, hid_t *out) {
  rf_status st = RF_OK;
  hid_t type = H5I_INVALID_HID, member = H5I_INVALID_HID;
  RF_H5_GOTO(type = H5Tcreate(H5T_COMPOUND, size), done);
  for (int i = 0; i < count; i++) {
    const rf_results_field *f = &fields[i];
    if (f->chars > 0)
      RF_H5_GOTO(member = rf_results_fixed_string(f->chars), done);
    else if (f->count > 0)
      RF_H5_GOTO(member = H5Tarray_create2(f->type, 1, &f->count), done);
    RF_H5_GOTO(H5Tinsert(type, f->name, f->offset, member >= 0 ? member : f->type), done);
    if (member >= 0)
      H5Tclose(member);
    member = H5I_INVALID_HID;
  }
done:
  if (member >= 0)
    H5Tclose(member);
  if (st != RF_OK && type >= 0) {
    H5Tclose(type);
    type = H5I_INVALID_HID;
  }
  *out = type;
  return st;
}

static rf_status write_attr(hid_t loc, const char *obj, const char *name, hid_t type,
                            const void *value) {
  rf_status st = RF_OK;
  hid_t space = H5I_INVALID_HID, attr = H5I_INVALID_HID;
  RF_H5_GOTO(space = H5Screate(H5S_SCALAR), done);
  RF_H5_GOTO(
      attr = H5Acreate_by_name(loc, obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      done);
  RF_H5_GOTO(H5Awrite(attr, type, value), done);
done:
  if (attr >= 0)
    H5Aclose(attr);
  if (space >= 0)
    H5Sclose(space);
  return st;
}

rf_status rf_results_attr_str(hid_t loc, const char *obj, const char *name, const char *value) {
  const char *v = value ? value : "";
  hid_t type = rf_results_vlen_string();
  RF_H5(type);
  rf_status st = write_attr(loc, obj, name, type, &v);
  H5Tclose(type);
  return st;
}

rf_status rf_results_attr_i64(hid_t loc, const char *obj, const char *name, int64_t value) {
  return write_attr(loc, obj, name, H5T_NATIVE_INT64, &value);
}

rf_status rf_results_attr_f64(hid_t loc, const char *obj, const char *name, double value) {
  return write_attr(loc, obj, name, H5T_NATIVE_DOUBLE, &value);
}

rf_status rf_results_dataset(hid_t loc, const char *name, hid_t type, int rank, const hsize_t *dims,
                             const void *data) {
  rf_status st = RF_OK;
  hid_t space = H5I_INVALID_HID, dset = H5I_INVALID_HID;
  hsize_t elements = 1;
  for (int d = 0; d < rank; d++)
    elements *= dims[d];
  RF_H5_GOTO(space = H5Screate_simple(rank, dims, NULL), done);
  RF_H5_GOTO(dset = H5Dcreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
             done);
  if (elements > 0)
    RF_H5_GOTO(H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), done);
done:
  if (dset >= 0)
    H5Dclose(dset);
  if (space >= 0)
    H5Sclose(space);
  return st;
}

void rf_results_utc_now(char *buf, size_t len) {
  time_t now = time(NULL);
  struct tm tm;
  if (!gmtime_r(&now, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
    snprintf(buf, len, "unknown");
}

/* ---- which files are refit's --------------------------------------------------------------- */

/* HDF5 prints its whole error stack on every failure by default; refit says one line instead
 * and shows the stack only at REFIT_LOG=debug (rf_hdf5_failed). */
void rf_results_library_init(void) { H5dont_atexit(); }

void rf_results_quiet_hdf5(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

/* Strong close, so that H5Fclose really closes the file even if an object id leaked. Readers
 * take HDF5's lock where the file system has one (and step aside where it does not); writers
 * hold refit's own lock (results_lock.c) and open without HDF5's, so that a reader holding
 * the file open, h5py or a dashboard, does not make an append fail. */
hid_t rf_results_file_access(int hdf5_lock) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl >= 0 && H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0) {
    H5Pclose(fapl);
    return H5I_INVALID_HID;
  }
#if H5_VERSION_GE(1, 10, 7)
  if (fapl >= 0)
    H5Pset_file_locking(fapl, hdf5_lock ? 1 : 0, 1);
#else
  (void)hdf5_lock;
#endif
  return fapl;
}

int rf_results_read_attr_str(hid_t obj, const char *name, char *buf, size_t len) {
  const rf_h5_source quiet = {
      .kind = "results file", .path = "", .bad = RF_ERR_RESULTS, .quiet = 1};
  return rf_h5_attr_read_str(&quiet, obj, name, buf, len) == RF_OK ? 0 : -1;
}

int rf_results_format_number(const char *format) {
  return strcmp(format, RF_RESULTS_FORMAT) == 0      ? RF_RESULTS_FORMAT_NUMBER
         : strcmp(format, RF_RESULTS_FORMAT_V1) == 0 ? 1
                                                     : 0;
}

/* /runs must be a group: every reader and the append open it as one. Logs one line. */
static rf_status check_runs_group(const char *path, hid_t f, int appending) {
  const rf_h5_source src = {
      .kind = "results file", .path = path, .bad = RF_ERR_RESULTS, .todo = ADVICE(appending, 1)};
  hid_t runs;
  RF_TRY(rf_h5_open_object(&src, f, "runs", H5I_GROUP, &runs));
  H5Gclose(runs);
  return RF_OK;
}

rf_status rf_results_open_checked(const char *path, int appending, hid_t *file) {
  rf_results_quiet_hdf5();
  *file = H5I_INVALID_HID;
  struct stat sb;
  if (stat(path, &sb) != 0)
    return rf_fail(RF_ERR_RESULTS, "results file '%s' cannot be read: %s", path, strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return rf_fail(RF_ERR_RESULTS, "results file '%s' is not a regular file; %s", path,
                   ADVICE(appending, 0));
  if (H5Fis_hdf5(path) <= 0)
    return rf_fail(RF_ERR_RESULTS, NOT_HDF5, path, ADVICE(appending, 1));

  /* Only ever opened read-only here: a file that turns out not to be refit's must not be
   * touched, and appends go to a copy (results_append.c). */
  hid_t fapl = rf_results_file_access(!appending);
  RF_H5(fapl);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  rf_status st = RF_OK;
  char format[64], dir[4096];
  rf_results_directory(path, dir, sizeof dir);
  if (f < 0) {
    st = rf_fail(RF_ERR_RESULTS, NOT_HDF5, path, ADVICE(appending, 1));
  } else if (H5Aexists(f, "refit_format") <= 0 ||
             rf_results_read_attr_str(f, "refit_format", format, sizeof format) != 0) {
    st = rf_fail(RF_ERR_RESULTS, FOREIGN, path, ADVICE(appending, 0));
  } else if (rf_results_format_number(format) == 0 && !appending) {
    st = rf_fail(RF_ERR_RESULTS,
                 "results file '%s' has format '%s' but refit %s reads '%s' and '%s'; use the "
                 "refit that wrote it",
                 path, format, rf_version, RF_RESULTS_FORMAT, RF_RESULTS_FORMAT_V1);
  } else if (rf_results_format_number(format) == 0) {
    st = rf_fail(RF_ERR_RESULTS,
                 "results file '%s' has format '%s' but refit %s writes '%s'; "
                 "choose another --output",
                 path, format, rf_version, RF_RESULTS_FORMAT);
  } else if (appending && strcmp(format, RF_RESULTS_FORMAT) != 0) {
    st = rf_fail(RF_ERR_RESULTS,
                 "results file '%s' has format '%s', whose checksums use other terms, and refit "
                 "%s appends only to '%s' files; choose another --output",
                 path, format, rf_version, RF_RESULTS_FORMAT);
  } else if (H5Lexists(f, "runs", H5P_DEFAULT) <= 0) {
    st = rf_fail(RF_ERR_RESULTS, "results file '%s' is damaged: it has no /runs group; %s", path,
                 ADVICE(appending, 1));
  } else if (check_runs_group(path, f, appending) != RF_OK) {
    st = RF_ERR_RESULTS;
  } else if (appending && access(path, W_OK) != 0) {
    /* A file made read-only stays as it is, although replacing it would be allowed. */
    st = rf_fail(RF_ERR_RESULTS, "results file '%s' cannot be written: %s; choose another --output",
                 path, strerror(errno));
  } else if (appending && access(dir, W_OK | X_OK) != 0) {
    st = rf_fail(RF_ERR_RESULTS,
                 "results file '%s' cannot be appended to: its directory '%s' is not writable "
                 "(%s), and refit appends by writing a new copy beside the file; choose another "
                 "--output",
                 path, dir, strerror(errno));
  }
  if (st != RF_OK) {
    if (f >= 0)
      H5Fclose(f);
    return st;
  }
  *file = f;
  return RF_OK;
}

/* The search of note_run: the largest run number below `below`. */
typedef struct {
  long below;
  int found;
} run_search;

/* Run groups are named by their number, four digits and more once past 9999. */
static herr_t note_run(hid_t group, const char *name, const H5L_info_t *info, void *data) {
  (void)group;
  (void)info;
  run_search *s = data;
  long value = 0;
  for (const char *c = name; *c; c++) {
    if (*c < '0' || *c > '9' || value > 100000000)
      return 0; /* not a run: ignore it */
    value = value * 10 + (*c - '0');
  }
  if (name[0] && value < s->below && value > s->found)
    s->found = (int)value;
  return 0;
}

rf_status rf_results_run_below(hid_t runs, long below, int *out) {
  run_search s = {below, -1};
  RF_H5(H5Literate(runs, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, note_run, &s));
  *out = s.found;
  return RF_OK;
}

rf_status rf_results_last_run(hid_t runs, int *last) {
  return rf_results_run_below(runs, LONG_MAX, last);
}

/* ---- creating a file ------------------------------------------------------------------------ */

rf_status rf_results_write_file_attributes(hid_t f, const rf_results_file_info *info) {
  char created[32], hdf5[32], hwloc[32], mpi[MPI_MAX_LIBRARY_VERSION_STRING];
  rf_results_utc_now(created, sizeof created);
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  snprintf(hdf5, sizeof hdf5, "%u.%u.%u", maj, min, rel);
  unsigned hv = hwloc_get_api_version();
  snprintf(hwloc, sizeof hwloc, "%u.%u.%u", hv >> 16, (hv >> 8) & 0xff, hv & 0xff);
  /* Allowed before MPI_Init, so `refit` commands without MPI can create files too. */
  int len = 0;
  if (MPI_Get_library_version(mpi, &len) != MPI_SUCCESS)
    snprintf(mpi, sizeof mpi, "unknown");
  mpi[strcspn(mpi, "\n")] = '\0';

  RF_TRY(rf_results_attr_str(f, ".", "refit_format", RF_RESULTS_FORMAT));
  RF_TRY(rf_results_attr_str(f, ".", "refit_version", rf_version));
  RF_TRY(rf_results_attr_str(f, ".", "git_commit", rf_git_commit));
  RF_TRY(rf_results_attr_str(f, ".", "created", created));
  RF_TRY(rf_results_attr_str(f, ".", "command_line", info ? info->command_line : ""));
  RF_TRY(rf_results_attr_str(f, ".", "hosts", info ? info->hosts : ""));
  RF_TRY(rf_results_attr_str(f, ".", "mpi_version", mpi));
  RF_TRY(rf_results_attr_str(f, ".", "hdf5_version", hdf5));
  RF_TRY(rf_results_attr_str(f, ".", "hwloc_version", hwloc));
  if (info && info->gpu_versions && info->gpu_versions[0])
    RF_TRY(rf_results_attr_str(f, ".", "gpu_versions", info->gpu_versions));
  return RF_OK;
}

static rf_status create_file(const char *path, const rf_results_file_info *info) {
  /* Say why a file cannot be made in words, before HDF5 would say it in an error stack. */
  char dir[4096];
  rf_results_directory(path, dir, sizeof dir);
  if (access(dir, W_OK | X_OK) != 0)
    return rf_fail(RF_ERR_RESULTS,
                   "results file '%s' cannot be created in '%s': %s; choose "
                   "another --output",
                   path, dir, strerror(errno));

  /* The file is made whole in memory, written under a temporary name of this process's own
   * and then linked into place, so a job killed while creating it leaves a stray temporary
   * file, never a half-made results file that every later run would refuse. The temporary
   * file is created exclusively (O_EXCL | O_NOFOLLOW): something already at that name, a
   * symbolic link planted there included, is left alone and another name is taken. */
  hid_t f;
  RF_TRY(rf_results_memory_file(info, &f));
  char tmp[4200];
  int err = EEXIST;
  for (int attempt = 0; attempt < 100 && err == EEXIST; attempt++) {
    rf_results_temp_name(path, attempt, tmp, sizeof tmp);
    err = rf_results_save_image(f, tmp);
  }
  H5Fclose(f);
  if (err != 0)
    return rf_fail(err == ENOSPC || err == EDQUOT ? RF_ERR_IO : RF_ERR_RESULTS,
                   "results file '%s' cannot be created: %s; choose another --output", path,
                   strerror(err));
  /* link() refuses to replace a file another job created meanwhile; file systems without
   * hard links get rename(). */
  rf_status st = RF_OK;
  if (link(tmp, path) == 0) {
    unlink(tmp);
    return RF_OK;
  }
  if (errno == EEXIST) {
    unlink(tmp);
    RF_TRY(rf_results_open_checked(path, 1, &f));
    H5Fclose(f);
    return RF_OK;
  }
  if (rename(tmp, path) != 0) {
    st = rf_fail(RF_ERR_RESULTS,
                 "results file '%s' cannot be created: %s; choose another "
                 "--output",
                 path, strerror(errno));
    unlink(tmp);
  }
  return st;
}

void rf_results_directory(const char *path, char *dir, size_t len) {
  snprintf(dir, len, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash)
    snprintf(dir, len, ".");
  else
    slash[slash == dir ? 1 : 0] = '\0';
}

/* ---- the handle ------------------------------------------------------------------------------ */

rf_status rf_results_open(const char *path, const rf_results_file_info *info, rf_results **out) {
  *out = NULL;
  rf_results_quiet_hdf5();
  /* Checked under the writers' lock, so that a file another job is appending to at this
   * moment is not taken for a damaged one. Nothing has moved yet, so a file still busy after
   * the wait ends the job here. */
  rf_results_lock lock;
  char holder[160];
  double wait_s = info ? info->wait_s : 0;
  if (rf_results_lock_take(path, wait_s, &lock, holder, sizeof holder) != RF_OK)
    return rf_fail(RF_ERR_IO,
                   "results file '%s' is busy: %s has been writing to it for more than %g s "
                   "(--output-wait); run again later or choose another --output",
                   path, holder, wait_s);
  /* Copies left by writers killed while creating or appending to this file go first. */
  char real[PATH_MAX];
  rf_results_remove_stale_temps(realpath(path, real) ? real : path, lock.fd >= 0);
  struct stat sb;
  hid_t f;
  rf_status st = RF_OK;
  if (stat(path, &sb) == 0) {
    st = rf_results_open_checked(path, 1, &f);
    if (st == RF_OK)
      H5Fclose(f);
  } else if (errno == ENOENT) {
    st = create_file(path, info);
  } else {
    st = rf_fail(RF_ERR_RESULTS, "results file '%s' cannot be used: %s; choose another --output",
                 path, strerror(errno));
  }
  rf_results_lock_drop(&lock);
  RF_TRY(st);
  rf_results *r = rf_calloc(1, sizeof *r, "the results handle");
  if (!r)
    return RF_ERR_NOMEM;
  r->path = rf_strdup(path);
  r->command_line = rf_strdup(info && info->command_line ? info->command_line : "");
  r->hosts = rf_strdup(info && info->hosts ? info->hosts : "");
  r->gpu_versions = rf_strdup(info && info->gpu_versions ? info->gpu_versions : "");
  r->wait_s = wait_s;
  if (!r->path || !r->command_line || !r->hosts || !r->gpu_versions) {
    rf_results_close(r);
    return RF_ERR_NOMEM;
  }
  *out = r;
  return RF_OK;
}

void rf_results_close(rf_results *r) {
  if (!r)
    return;
  free(r->path);
  free(r->command_line);
  free(r->hosts);
  free(r->gpu_versions);
  free(r);
}
