/* Logging: one line per message, prefixed with the rank and host once MPI is up, so that the
 * interleaved stderr of many ranks stays readable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

static int log_rank = -1;
static int log_world = 0;
/* The quiet regions nest: depth counts the open ones, quiet_from is the depth of the outermost
 * quiet one (0: none), so an inner region may silence more but never less than its caller. */
static int quiet_depth = 0;
static int quiet_from = 0;
static rf_log_level log_level = RF_LOG_WARN;
static char log_host[256];

const char *rf_hostname(void) {
  if (!log_host[0]) {
    if (gethostname(log_host, sizeof log_host - 1) != 0)
      strcpy(log_host, "unknown");
    log_host[sizeof log_host - 1] = '\0';
  }
  return log_host;
}

void rf_log_set_rank(int rank, int world_size) {
  log_rank = rank;
  log_world = world_size;
}

void rf_log_push_quiet(int quiet) {
  quiet_depth++;
  if (quiet && quiet_from == 0)
    quiet_from = quiet_depth;
}

void rf_log_pop_quiet(void) {
  if (quiet_depth == 0)
    return; /* an unmatched pop: nothing to restore */
  if (quiet_from == quiet_depth)
    quiet_from = 0;
  quiet_depth--;
}

rf_log_level rf_log_level_get(void) { return log_level; }

void rf_log_init_from_env(void) {
  const char *env = getenv("REFIT_LOG");
  if (!env)
    return;
  static const char *names[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < (int)RF_ARRAY_LEN(names); i++)
    if (strcmp(env, names[i]) == 0)
      log_level = (rf_log_level)i;
}

static char *capture_buf;
static size_t capture_len;

void rf_log_capture(char *buf, size_t len) {
  capture_buf = len ? buf : NULL;
  capture_len = len;
}

void rf_log_capture_current(char **buf, size_t *len) {
  *buf = capture_buf;
  *len = capture_len;
}

void rf_vlog_at(rf_log_level level, const char *file, int line, const char *fmt, va_list ap) {
  static const char *labels[] = {"error", "warning", "info", "debug"};
  /* A quiet region's errors are another rank's to say: not captured either. */
  if (capture_buf && level == RF_LOG_ERROR && quiet_from == 0) {
    vsnprintf(capture_buf, capture_len, fmt, ap);
    return;
  }
  if (level > log_level || (quiet_from != 0 && level <= RF_LOG_WARN))
    return;
  /* Build the whole line first and write it with one call, so lines of different ranks
   * sharing a terminal do not interleave mid-line. */
  char msg[2048];
  int n;
  if (log_rank >= 0 && log_world > 1)
    n = snprintf(msg, sizeof msg, "refit[%d@%s]: %s: ", log_rank, rf_hostname(), labels[level]);
  else
    n = snprintf(msg, sizeof msg, "refit: %s: ", labels[level]);
  if (n < 0 || n >= (int)sizeof msg)
    n = 0;
  int m = vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  if (m > 0)
    n = RF_MIN(n + m, (int)sizeof msg - 1);
  if (file && log_level >= RF_LOG_DEBUG)
    n += snprintf(msg + n, sizeof msg - (size_t)n, " (%s:%d)", file, line);
  n = RF_MIN(n, (int)sizeof msg - 2);
  msg[n++] = '\n';
  fwrite(msg, 1, (size_t)n, stderr);
  fflush(stderr);
}

void rf_log_at(rf_log_level level, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rf_vlog_at(level, file, line, fmt, ap);
  va_end(ap);
}

void rf_log(rf_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rf_vlog_at(level, NULL, 0, fmt, ap);
  va_end(ap);
}

rf_status rf_fail(rf_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rf_vlog_at(RF_LOG_ERROR, NULL, 0, fmt, ap);
  va_end(ap);
  return st;
}
