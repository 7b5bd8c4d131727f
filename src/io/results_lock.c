/* The writers' lock of a results file: an fcntl lock on the sidecar PATH.lock, held only while
 * a job checks, creates or appends to PATH.
 *
 * HDF5 1.10 has its own lock (flock, taken exclusive by a writer and shared by every reader,
 * h5py included), but it fails at once instead of waiting, so a dashboard that merely holds the
 * file open made an append fail after the data had moved, and it is switched off altogether
 * with HDF5_USE_FILE_LOCKING=FALSE, as is usual on Lustre and NFS. refit's writers therefore
 * open the file without HDF5's lock and exclude each other with this one: readers never block
 * a writer, a second writer waits a bounded time, and fcntl locks work on NFS and on Lustre
 * mounted with -o flock. The lock file stays after use: removing it would let a waiter lock a
 * file that is no longer the one at PATH.lock. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "results_internal.h"

static int try_lock(int fd) {
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
  return fcntl(fd, F_SETLK, &fl) == 0 ? 0 : errno;
}

/* "pid 123 on host node7", as the holder wrote it into the lock file, or the pid fcntl knows. */
static void read_holder(int fd, char *holder, size_t len) {
  char buf[160];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  buf[n > 0 ? n : 0] = '\0';
  buf[strcspn(buf, "\n")] = '\0';
  if (buf[0]) {
    snprintf(holder, len, "%s", buf);
    return;
  }
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
  if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK)
    snprintf(holder, len, "pid %ld", (long)fl.l_pid);
  else
    snprintf(holder, len, "another process");
}

rf_status rf_results_lock_take(const char *path, double wait_s, rf_results_lock *lock, char *holder,
                               size_t holder_len) {
  lock->fd = -1;
  snprintf(holder, holder_len, "another process");
  /* Named after the file itself, so that jobs reaching it through a symbolic link and by its
   * own name exclude each other too (appends replace the file a link names). */
  char name[PATH_MAX + 8], real[PATH_MAX];
  snprintf(name, sizeof name, "%s.lock", realpath(path, real) ? real : path);
  int fd = open(name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) {
    /* A directory refit may not create files in, or a read-only one: the append itself will
     * say what is wrong; without a lock file there is nobody to exclude. */
    RF_DEBUG("results lock '%s' cannot be opened: %s; appending without it", name, strerror(errno));
    return RF_OK;
  }
  double start = rf_now();
  int warned = 0, err;
  while ((err = try_lock(fd)) == EACCES || err == EAGAIN) {
    read_holder(fd, holder, holder_len);
    double waited = rf_now() - start;
    if (waited >= wait_s) {
      close(fd);
      return RF_ERR_TIMEOUT;
    }
    if (!warned) {
      RF_WARN("results file '%s' is busy: waiting up to %g s (--output-wait) for %s, which is "
              "writing to it",
              path, wait_s, holder);
      warned = 1;
    }
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  if (err != 0) {
    /* ENOLCK, ENOSYS, EOPNOTSUPP: a file system without fcntl locks (Lustre without -o flock).
     * Appending unlocked is what refit did before; two jobs appending at the same instant are
     * then the user's to avoid. */
    RF_DEBUG("results lock '%s' is not supported here: %s; appending without it", name,
             strerror(err));
    close(fd);
    return RF_OK;
  }
  char me[160];
  int n = snprintf(me, sizeof me, "pid %ld on host %s\n", (long)getpid(), rf_hostname());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, me, (size_t)n, 0) != n)
    RF_DEBUG("results lock '%s': cannot note the holder: %s", name, strerror(errno));
  lock->fd = fd;
  return RF_OK;
}

void rf_results_lock_drop(rf_results_lock *lock) {
  if (lock->fd >= 0) {
    /* Emptied first, so a waiter never names a holder that has gone. */
    if (ftruncate(lock->fd, 0) != 0)
      RF_DEBUG("results lock: cannot empty the holder: %s", strerror(errno));
    close(lock->fd); /* releases the fcntl lock */
  }
  lock->fd = -1;
}
