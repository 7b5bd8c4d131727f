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
 * file that is no longer the one at PATH.lock.
 *
 * The temporary copies writers make beside PATH are named here too, with the writer's pid and
 * host, so that the next writer can remove those whose writer was killed (kill -9 during an
 * append left a copy of the whole file behind for good). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
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

/* ---- temporary copies ---------------------------------------------------------------------- */

/* This host's name as it goes into file names: letters, digits, '.', '-' and '_' kept. */
static void host_tag(char *out, size_t len) {
  snprintf(out, len, "%s", rf_hostname());
  for (char *c = out; *c; c++)
    if (!isalnum((unsigned char)*c) && *c != '.' && *c != '-' && *c != '_')
      *c = '_';
}

void rf_results_temp_name(const char *path, int attempt, char *out, size_t len) {
  char host[96];
  host_tag(host, sizeof host);
  if (attempt == 0)
    snprintf(out, len, "%s.%ld@%s.tmp", path, (long)getpid(), host);
  else
    snprintf(out, len, "%s.%ld.%d@%s.tmp", path, (long)getpid(), attempt, host);
}

/* The writer of a temporary name, from the part between "PATH." and ".tmp":
 * "<pid>[.<attempt>][@<host>]". Returns the pid, or -1 for a name refit does not make; host is
 * "" for a name without one (made by refit before the host was recorded). */
static long temp_writer(const char *mid, size_t n, char *host, size_t host_len) {
  host[0] = '\0';
  size_t i = 0;
  long pid = 0;
  for (; i < n && isdigit((unsigned char)mid[i]) && pid < 1000000000L; i++)
    pid = pid * 10 + (mid[i] - '0');
  if (i == 0 || pid <= 0)
    return -1;
  if (i < n && mid[i] == '.') {
    size_t digits = ++i;
    while (i < n && isdigit((unsigned char)mid[i]))
      i++;
    if (i == digits)
      return -1;
  }
  if (i < n && mid[i] == '@') {
    i++;
    if (i == n || n - i >= host_len)
      return -1;
    snprintf(host, host_len, "%.*s", (int)(n - i), mid + i);
    i = n;
  }
  return i == n ? pid : -1;
}

int rf_results_remove_stale_temps(const char *path, int locked) {
  char dir[PATH_MAX], mine[96];
  rf_results_directory(path, dir, sizeof dir);
  const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
  size_t base_len = strlen(base);
  host_tag(mine, sizeof mine);
  DIR *d = opendir(dir);
  if (!d)
    return 0;
  int removed = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    if (len <= base_len + 5 || strncmp(e->d_name, base, base_len) != 0 ||
        e->d_name[base_len] != '.' || strcmp(e->d_name + len - 4, ".tmp") != 0)
      continue;
    char host[96];
    long pid = temp_writer(e->d_name + base_len + 1, len - base_len - 5, host, sizeof host);
    /* A pid says whether its writer lives only on the host that ran it: another host's copy
     * may be written at this moment, whatever the pid. A name without a host is older
     * refit's; its writer took the writers' lock for the whole copy, so while this process
     * holds the lock no writer anywhere is in the middle of one. */
    if (pid < 0 || pid == (long)getpid() || (host[0] ? strcmp(host, mine) != 0 : !locked))
      continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
      continue; /* alive, or another user's: not known to be gone */
    struct stat sb;
    if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
      continue;
    if (unlinkat(dirfd(d), e->d_name, 0) == 0) {
      removed++;
      RF_DEBUG("results file '%s': removed '%s', left by writer pid %ld, which is gone", path,
               e->d_name, pid);
    }
  }
  closedir(d);
  return removed;
}
