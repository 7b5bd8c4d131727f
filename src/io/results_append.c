/* Appending a run so that it is never lost. The run is first built as a complete results file
 * in memory; then, under the writers' lock (results_lock.c), it is written into PATH as the
 * next /runs/NNNN. When PATH stays busy past --output-wait, or the append fails (a full disk, a
 * file replaced meanwhile), the in-memory file is written to the side file
 * PATH.run-<UTC time>-<pid>.h5 instead: same schema, one run, readable by `refit report` and
 * `refit verify`; the one error line names it.
 *
 * Building in memory also keeps HDF5 out of trouble on a full disk: the append to PATH is
 * attempted only when the disk has room for it, and the side file is written with write(2),
 * so the errno is reported as it is ("No space left on device") and no file is left open in
 * HDF5 with metadata it can no longer flush (which made HDF5's exit handler crash). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "results_internal.h"

rf_status rf_results_memory_file(const rf_results_file_info *info, hid_t *file) {
  *file = H5I_INVALID_HID;
  rf_status st = RF_OK;
  hid_t fapl = H5I_INVALID_HID, f = H5I_INVALID_HID, runs = H5I_INVALID_HID;
  RF_H5_GOTO(fapl = rf_results_file_access(0), done);
  RF_H5_GOTO(H5Pset_fapl_core(fapl, 1 << 20, 0), done);
  /* The name only has to be unique among this process's open files. */
  char name[64];
  static unsigned serial;
  snprintf(name, sizeof name, "refit-memory-%ld-%u.h5", (long)getpid(), serial++);
  RF_H5_GOTO(f = H5Fcreate(name, H5F_ACC_TRUNC, H5P_DEFAULT, fapl), done);
  RF_TRY_GOTO(rf_results_write_file_attributes(f, info), done);
  RF_H5_GOTO(runs = H5Gcreate2(f, "runs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), done);
done:
  if (runs >= 0)
    H5Gclose(runs);
  if (fapl >= 0)
    H5Pclose(fapl);
  if (st != RF_OK && f >= 0)
    H5Fclose(f);
  else
    *file = f;
  return st;
}

int rf_results_save_image(hid_t f, const char *path) {
  if (H5Fflush(f, H5F_SCOPE_GLOBAL) < 0)
    return EIO;
  ssize_t size = H5Fget_file_image(f, NULL, 0);
  char *image = size > 0 ? malloc((size_t)size) : NULL;
  if (!image || H5Fget_file_image(f, image, (size_t)size) != size) {
    free(image);
    return size > 0 ? ENOMEM : EIO;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) {
    int err = errno == ELOOP ? EEXIST : errno;
    free(image);
    return err;
  }
  int err = 0;
  for (ssize_t done = 0; done < size && !err;) {
    ssize_t n = write(fd, image + done, (size_t)(size - done));
    if (n > 0)
      done += n;
    else if (n < 0 && errno != EINTR)
      err = errno;
  }
  if (!err && fsync(fd) != 0 && errno != EINVAL)
    err = errno;
  if (close(fd) != 0 && !err)
    err = errno;
  if (err)
    unlink(path);
  free(image);
  return err;
}

/* The bytes free to this user on the file system of path's directory, or -1 when unknown. */
static int64_t free_bytes(const char *path) {
  char dir[4096];
  rf_results_directory(path, dir, sizeof dir);
  struct statvfs sv;
  if (statvfs(dir, &sv) != 0)
    return -1;
  return (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
}

/* Writes the run into PATH as the next run. A failure is logged (the caller captures it). Room
 * for twice the run and a mebibyte is asked for first: HDF5 writes the data and then its
 * metadata, and a file it cannot flush stays open inside it. */
static rf_status append_run(const rf_results *r, const rf_results_run *run, int64_t run_bytes,
                            int *number, int *no_space) {
  int64_t room = free_bytes(r->path);
  if (room >= 0 && room < 2 * run_bytes + (1 << 20)) {
    *no_space = 1;
    return rf_fail(RF_ERR_IO, "results file '%s': %s", r->path, strerror(ENOSPC));
  }
  hid_t f, runs = H5I_INVALID_HID, g = H5I_INVALID_HID;
  RF_TRY(rf_results_open_checked(r->path, H5F_ACC_RDWR, &f));
  rf_status st = RF_OK;
  int last = -1;
  char name[16];
  RF_H5_GOTO(runs = H5Gopen2(f, "runs", H5P_DEFAULT), done);
  RF_TRY_GOTO(rf_results_last_run(runs, &last), done);
  snprintf(name, sizeof name, "%04d", last + 1);
  /* The run is written as an unnamed group and flushed before a link names it, so a job
   * killed while writing leaves at worst unreachable bytes, never a link to half a run. (An
   * H5Ocopy from the in-memory file links its copy in the same metadata flush as the copied
   * objects, in no promised order: killed jobs left links to unreadable groups.) */
  RF_H5_GOTO(g = H5Gcreate_anon(f, H5P_DEFAULT, H5P_DEFAULT), done);
  RF_TRY_GOTO(rf_results_write_run(g, r, run), done);
  RF_H5_GOTO(H5Fflush(f, H5F_SCOPE_GLOBAL), done);
  RF_H5_GOTO(H5Olink(g, runs, name, H5P_DEFAULT, H5P_DEFAULT), done);
  RF_H5_GOTO(H5Fflush(f, H5F_SCOPE_GLOBAL), done);
done:
  if (g >= 0)
    H5Gclose(g);
  if (runs >= 0)
    H5Gclose(runs);
  if (H5Fclose(f) < 0 && st == RF_OK)
    st = rf_hdf5_failed("H5Fclose", __FILE__, __LINE__);
  if (st != RF_OK) {
    int64_t left = free_bytes(r->path);
    *no_space = left >= 0 && left < 2 * run_bytes + (1 << 20);
  }
  *number = last + 1;
  return st;
}

/* The run as a results file of its own, in memory. */
static rf_status build_run(const rf_results *r, const rf_results_run *run, hid_t *mem) {
  rf_results_file_info info = {r->command_line, r->hosts, r->gpu_versions, r->wait_s};
  RF_TRY(rf_results_memory_file(&info, mem));
  rf_status st = RF_OK;
  hid_t runs = H5I_INVALID_HID, g = H5I_INVALID_HID;
  RF_H5_GOTO(runs = H5Gopen2(*mem, "runs", H5P_DEFAULT), done);
  RF_H5_GOTO(g = H5Gcreate2(runs, "0000", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), done);
  RF_TRY_GOTO(rf_results_write_run(g, r, run), done);
  RF_H5_GOTO(H5Fflush(*mem, H5F_SCOPE_GLOBAL), done);
done:
  if (g >= 0)
    H5Gclose(g);
  if (runs >= 0)
    H5Gclose(runs);
  if (st != RF_OK) {
    H5Fclose(*mem);
    *mem = H5I_INVALID_HID;
  }
  return st;
}

/* Writes the run to PATH.run-<UTC time>-<pid>.h5 and says, in one line, why and where. */
static rf_status save_side_file(const rf_results *r, hid_t mem, const char *why) {
  char stamp[32], side[4200];
  time_t now = time(NULL);
  struct tm tm;
  if (!gmtime_r(&now, &tm) || strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm) == 0)
    snprintf(stamp, sizeof stamp, "%ld", (long)now);
  int err = EEXIST;
  for (int attempt = 0; attempt < 100 && err == EEXIST; attempt++) {
    if (attempt == 0)
      snprintf(side, sizeof side, "%s.run-%s-%ld.h5", r->path, stamp, (long)getpid());
    else
      snprintf(side, sizeof side, "%s.run-%s-%ld-%d.h5", r->path, stamp, (long)getpid(), attempt);
    err = rf_results_save_image(mem, side);
  }
  if (err)
    return rf_fail(RF_ERR_IO,
                   "%s; the run is lost: its side file '%s' cannot be written either: %s", why,
                   side, strerror(err));
  return rf_fail(RF_ERR_IO,
                 "%s; the run was written to '%s' instead (refit report and refit verify read "
                 "it like any results file)",
                 why, side);
}

rf_status rf_results_add_run(rf_results *r, const rf_results_run *run, int *run_number) {
  if (run_number)
    *run_number = -1;
  if (!r || !run || (!run->skip_reason && (!run->result || !run->model_spec)))
    return rf_fail(RF_ERR_INTERNAL, "results: a run needs its result and its model");
  rf_results_quiet_hdf5();
  hid_t mem;
  RF_TRY(build_run(r, run, &mem));
  ssize_t run_bytes = H5Fget_file_image(mem, NULL, 0);

  rf_results_lock lock;
  char holder[160], why[1200] = "";
  rf_status st = rf_results_lock_take(r->path, r->wait_s, &lock, holder, sizeof holder);
  int number = -1, no_space = 0;
  if (st == RF_ERR_TIMEOUT) {
    snprintf(why, sizeof why,
             "results file '%s' is busy: %s has been writing to it for more than %g s "
             "(--output-wait)",
             r->path, holder, r->wait_s);
  } else {
    /* Whatever goes wrong below is said once, in the line that names the side file. */
    char failure[1024] = "";
    rf_log_capture(failure, sizeof failure);
    st = append_run(r, run, run_bytes > 0 ? run_bytes : 0, &number, &no_space);
    rf_log_capture(NULL, 0);
    rf_results_lock_drop(&lock);
    if (no_space)
      snprintf(why, sizeof why, "results file '%s' cannot be appended to: %s", r->path,
               strerror(ENOSPC));
    else if (st != RF_OK)
      snprintf(why, sizeof why, "%s", failure);
  }
  if (st == RF_OK) {
    H5Fclose(mem);
    if (run_number)
      *run_number = number;
    return RF_OK;
  }
  st = save_side_file(r, mem, why);
  H5Fclose(mem);
  return st;
}
