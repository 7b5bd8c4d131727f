/* Appending a run so that it is never lost. The run is first built as a complete results file
 * in memory; then, under the writers' lock (results_lock.c), it is written as the next
 * /runs/NNNN into a copy of PATH that replaces PATH by rename(2). When PATH stays busy past
 * --output-wait, or the append fails (a full disk, a file replaced meanwhile), the in-memory file
 * is written to the side file PATH.run-<UTC time>-<pid>.h5 instead: same schema, one run, readable
 * by `refit report` and `refit verify`; the one error line names it.
 *
 * Building in memory also keeps HDF5 out of trouble on a full disk: the append to PATH is
 * attempted only when the disk has room for it, and the side file is written with write(2),
 * so the errno is reported as it is ("No space left on device") and no file is left open in
 * HDF5 with metadata it can no longer flush (which made HDF5's exit handler crash). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* Writes all n bytes of buf at offset `at` of fd. Returns 0 or the errno. */
static int put_all(int fd, const char *buf, size_t n, off_t at) {
  for (size_t done = 0; done < n;) {
    ssize_t put = pwrite(fd, buf + done, n - done, at + (off_t)done);
    if (put > 0)
      done += (size_t)put;
    else if (put == 0)
      return EIO; /* no progress: never wait on it */
    else if (errno != EINTR)
      return errno;
  }
  return 0;
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
  int err = put_all(fd, image, (size_t)size, 0);
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

/* Copies the first `size` bytes of `from` into `to`. Returns 0 or the errno. */
static int copy_bytes(int from, int to, off_t size) {
  enum { CHUNK = 1 << 20 };
  char *buf = malloc(CHUNK);
  if (!buf)
    return ENOMEM;
  int err = 0;
  for (off_t done = 0; done < size && !err;) {
    size_t want = size - done < CHUNK ? (size_t)(size - done) : CHUNK;
    ssize_t got = pread(from, buf, want, done);
    if (got == 0)
      err = EIO; /* the file shrank under the writers' lock: not refit's doing */
    else if (got < 0 && errno != EINTR)
      err = errno;
    if (got > 0 && !err)
      err = put_all(to, buf, (size_t)got, done);
    if (got > 0 && !err)
      done += got;
  }
  free(buf);
  return err;
}

/* A copy of `target` (the file itself, a symbolic link resolved) under a temporary name beside
 * it, created exclusively, with the original's mode. Returns 0 or the errno; fills `copy`. */
static int copy_beside(const char *path, const char *target, char *copy, size_t copy_len,
                       off_t *size) {
  int from = open(target, O_RDONLY | O_CLOEXEC);
  if (from < 0)
    return errno;
  struct stat sb;
  if (fstat(from, &sb) != 0) {
    int err = errno;
    close(from);
    return err;
  }
  *size = sb.st_size;
  int to = -1, err = EEXIST;
  for (int attempt = 0; attempt < 100 && to < 0 && err == EEXIST; attempt++) {
    rf_results_temp_name(target, attempt, copy, copy_len);
    to = open(copy, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    err = to < 0 ? (errno == ELOOP ? EEXIST : errno) : 0;
  }
  if (to >= 0) {
    err = copy_bytes(from, to, sb.st_size);
    /* The owner may differ where a group shares the file; keeping the group matters more. */
    if (!err && fchown(to, sb.st_uid, sb.st_gid) != 0 && fchown(to, (uid_t)-1, sb.st_gid) != 0)
      RF_DEBUG("results file '%s': the new copy keeps this user's group", path);
    if (!err && fchmod(to, sb.st_mode & 07777) != 0)
      err = errno;
    if (close(to) != 0 && !err)
      err = errno;
    if (err)
      unlink(copy);
  }
  close(from);
  return err;
}

/* Flushes `path` (a file or a directory) to disk. Returns 0 or the errno. */
static int sync_path(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno;
  int err = fsync(fd) == 0 || errno == EINVAL ? 0 : errno;
  close(fd);
  return err;
}

int64_t rf_results_append_need(int64_t file_bytes, int64_t run_bytes) {
  return file_bytes + 2 * run_bytes + (1 << 20);
}

void rf_results_no_space_message(char *buf, size_t len, const char *path, const char *dir,
                                 int64_t need, int64_t room) {
  char need_text[32], room_text[32];
  snprintf(buf, len,
           "results file '%s': appending needs %lld bytes (%s: a copy of the file, twice this "
           "run and 1 MiB) and the file system of '%s' has %lld (%s) free; free space there or "
           "choose another --output",
           path, (long long)need, rf_format_bytes(need, need_text, sizeof need_text), dir,
           (long long)room, rf_format_bytes(room, room_text, sizeof room_text));
}

/* Writes the run as the next run into a copy of PATH, and renames the copy over PATH. A
 * reader opening PATH at any moment therefore finds the file before the run or after it, never
 * one half written: HDF5 1.10 writes its superblock, B-trees and heaps in no promised order,
 * and a polling h5py reader caught "truncated file" in the middle of an in-place append. A
 * reader holding PATH open keeps the file it opened. The cost is a copy of the file per run,
 * so the copies of writers killed meanwhile are removed first, and room for the copy is asked
 * for (rf_results_append_need): when the disk lacks it, *need and *room say how much, and
 * nothing is logged. Any other failure is logged (the caller captures it). */
static rf_status append_run(const rf_results *r, const rf_results_run *run, int64_t run_bytes,
                            int locked, int *number, int64_t *need, int64_t *room) {
  hid_t f, runs = H5I_INVALID_HID, g = H5I_INVALID_HID;
  *need = *room = -1;
  RF_TRY(rf_results_open_checked(r->path, 1, &f));
  H5Fclose(f);
  f = H5I_INVALID_HID;
  char target[PATH_MAX], real[PATH_MAX], copy[PATH_MAX + 160];
  snprintf(target, sizeof target, "%s", realpath(r->path, real) ? real : r->path);
  rf_results_remove_stale_temps(target, locked);
  off_t size = 0;
  struct stat sb;
  int64_t left = free_bytes(r->path);
  if (stat(r->path, &sb) == 0 && left >= 0 &&
      left < rf_results_append_need(sb.st_size, run_bytes)) {
    *need = rf_results_append_need(sb.st_size, run_bytes);
    *room = left;
    return RF_ERR_IO;
  }
  int err = copy_beside(r->path, target, copy, sizeof copy, &size);
  if (err)
    return rf_fail(RF_ERR_IO, "results file '%s' cannot be copied to append to it: %s", r->path,
                   strerror(err));
  rf_status st = RF_OK;
  int last = -1;
  char name[16];
  hid_t fapl = rf_results_file_access(0);
  RF_H5_GOTO(fapl, done);
  f = H5Fopen(copy, H5F_ACC_RDWR, fapl);
  H5Pclose(fapl);
  RF_H5_GOTO(f, done);
  RF_H5_GOTO(runs = H5Gopen2(f, "runs", H5P_DEFAULT), done);
  RF_TRY_GOTO(rf_results_last_run(runs, &last), done);
  snprintf(name, sizeof name, "%04d", last + 1);
  RF_H5_GOTO(g = H5Gcreate2(runs, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), done);
  RF_TRY_GOTO(rf_results_write_run(g, r, run), done);
done:
  if (g >= 0)
    H5Gclose(g);
  if (runs >= 0)
    H5Gclose(runs);
  if (f >= 0 && H5Fclose(f) < 0 && st == RF_OK)
    st = rf_hdf5_failed("H5Fclose", __FILE__, __LINE__);
  if (st == RF_OK && (err = sync_path(copy)) != 0)
    st = rf_fail(RF_ERR_IO, "results file '%s': the new copy cannot be synced: %s", r->path,
                 strerror(err));
  if (st == RF_OK && rename(copy, target) != 0)
    st = rf_fail(RF_ERR_IO, "results file '%s': the new copy cannot be renamed into place: %s",
                 r->path, strerror(errno));
  if (st == RF_OK) {
    char dir[PATH_MAX];
    rf_results_directory(target, dir, sizeof dir);
    if (sync_path(dir) != 0) /* the rename is done; a directory that cannot sync is the FS's */
      RF_DEBUG("results file '%s': its directory cannot be synced", r->path);
  } else {
    unlink(copy);
    /* The disk filled meanwhile (another writer): said as room, like the check above. */
    left = free_bytes(r->path);
    if (left >= 0 && left < rf_results_append_need(size, run_bytes)) {
      *need = rf_results_append_need(size, run_bytes);
      *room = left;
    }
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
  char holder[160], why[2 * PATH_MAX] = "";
  rf_status st = rf_results_lock_take(r->path, r->wait_s, &lock, holder, sizeof holder);
  int number = -1;
  int64_t need = -1, room = -1;
  if (st == RF_ERR_TIMEOUT) {
    snprintf(why, sizeof why,
             "results file '%s' is busy: %s has been writing to it for more than %g s "
             "(--output-wait)",
             r->path, holder, r->wait_s);
  } else {
    /* Whatever goes wrong below is said once, in the line that names the side file. */
    char failure[1024] = "";
    rf_log_capture(failure, sizeof failure);
    st = append_run(r, run, run_bytes > 0 ? run_bytes : 0, lock.fd >= 0, &number, &need, &room);
    rf_log_capture(NULL, 0);
    rf_results_lock_drop(&lock);
    if (need >= 0) {
      char dir[PATH_MAX];
      rf_results_directory(r->path, dir, sizeof dir);
      rf_results_no_space_message(why, sizeof why, r->path, dir, need, room);
    } else if (st != RF_OK)
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
