/* Opening the files a user names (configs, models, checkpoints) so that no name can make refit
 * wait or read without end: a FIFO would block open() until a writer comes, and a character
 * device such as /dev/urandom never ends. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"

static const char *kind_of(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a plain file";
}

int rf_open_input(const char *path, struct stat *sb, char *why, size_t len) {
  /* O_NONBLOCK makes open() of a FIFO return at once; fstat then looks at what was opened,
   * so the check and the read are about the same file even if the name changes meanwhile. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    snprintf(why, len, "%s", strerror(err));
    errno = err;
    return -1;
  }
  if (fstat(fd, sb) != 0) {
    int err = errno;
    snprintf(why, len, "%s", strerror(err));
    close(fd);
    errno = err;
    return -1;
  }
  if (!S_ISREG(sb->st_mode)) {
    snprintf(why, len, "is %s, not a regular file", kind_of(sb->st_mode));
    close(fd);
    errno = S_ISDIR(sb->st_mode) ? EISDIR : EINVAL;
    return -1;
  }
  /* A regular file never blocks, but later reads should not see EAGAIN semantics. */
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0)
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

char *rf_read_input(const char *path, size_t max, size_t *len, char *why, size_t why_len) {
  struct stat sb;
  int fd = rf_open_input(path, &sb, why, why_len);
  if (fd < 0)
    return NULL;
  char limit[32];
  if ((uint64_t)sb.st_size > (uint64_t)max) {
    snprintf(why, why_len, "is larger than the %s refit reads",
             rf_format_bytes((int64_t)max, limit, sizeof limit));
    close(fd);
    errno = EFBIG;
    return NULL;
  }
  /* The size is only a hint: the file may grow while it is read, so the loop stops at max. */
  size_t cap = (size_t)sb.st_size + 1, n = 0;
  char *text = malloc(cap);
  while (text) {
    if (n + 1 == cap) {
      if (n > max) {
        snprintf(why, why_len, "is larger than the %s refit reads",
                 rf_format_bytes((int64_t)max, limit, sizeof limit));
        free(text);
        close(fd);
        errno = EFBIG;
        return NULL;
      }
      char *grown = realloc(text, cap = RF_MIN(cap * 2, max + 2));
      if (!grown)
        free(text);
      text = grown;
      continue;
    }
    ssize_t got = read(fd, text + n, cap - n - 1);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      snprintf(why, why_len, "%s", strerror(errno));
      free(text);
      close(fd);
      return NULL;
    }
    if (got == 0)
      break;
    n += (size_t)got;
  }
  close(fd);
  if (!text) {
    snprintf(why, why_len, "out of memory");
    return NULL;
  }
  text[n] = '\0';
  *len = n;
  return text;
}

int rf_shipped_dirs(const char *env_var, const char *kind, char storage[2][RF_SHIPPED_DIR_MAX],
                    const char *dirs[3]) {
  int n = 0;
  const char *env = getenv(env_var);
  if (env && *env)
    dirs[n++] = env;
#ifdef REFIT_SOURCE_DIR
  snprintf(storage[0], RF_SHIPPED_DIR_MAX, "%s/configs/%s", REFIT_SOURCE_DIR, kind);
  dirs[n++] = storage[0];
#endif
#ifdef REFIT_INSTALL_DATADIR
  snprintf(storage[1], RF_SHIPPED_DIR_MAX, "%s/%s", REFIT_INSTALL_DATADIR, kind);
  dirs[n++] = storage[1];
#endif
  (void)kind;
  (void)storage;
  return n;
}
