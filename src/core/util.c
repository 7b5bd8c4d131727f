/* Small utilities every module uses: logged allocation, the monotonic clock, byte formatting
 * and a growable string. */
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "core.h"

void *rf_malloc(size_t bytes, const char *what) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p)
    RF_ERROR("out of memory allocating %zu bytes for %s", bytes, what);
  return p;
}

void *rf_calloc(size_t count, size_t size, const char *what) {
  void *p = calloc(count ? count : 1, size ? size : 1);
  if (!p)
    RF_ERROR("out of memory allocating %zu x %zu bytes for %s", count, size, what);
  return p;
}

void *rf_realloc(void *ptr, size_t bytes, const char *what) {
  void *p = realloc(ptr, bytes ? bytes : 1);
  if (!p)
    RF_ERROR("out of memory growing %s to %zu bytes", what, bytes);
  return p;
}

char *rf_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = rf_malloc(n, "a string");
  if (d)
    memcpy(d, s, n);
  return d;
}

rf_status rf_grow(void **items, int count, int *cap, size_t size, const char *what) {
  if (count < *cap)
    return RF_OK;
  int more = *cap ? 2 * *cap : 256;
  void *p = rf_realloc(*items, (size_t)more * size, what);
  if (!p)
    return RF_ERR_NOMEM;
  *items = p;
  *cap = more;
  return RF_OK;
}

double rf_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A wait spins for a thousand polls and then naps 20 us between polls, so that ranks
 * oversubscribing a few cores leave them to each other. Linux stretches every nap by the
 * thread's timer slack, 50 us by default, which made a done note reach a napping rank
 * 0.1 ms after it was posted (results/h200/README.md); a slack of 1 us keeps the naps at
 * what they ask for. */
static void tighten_timer_slack(void) {
#ifdef PR_SET_TIMERSLACK
  static _Thread_local int done; /* the slack is each thread's own */
  if (!done) {
    done = 1;
    prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  }
#endif
}

/* The second check of every poll (core.h, rf_poll_set_watch). */
static rf_poll_fn poll_watch;
static void *poll_watch_ctx;

void rf_poll_set_watch(rf_poll_fn watch, void *ctx) {
  poll_watch = watch;
  poll_watch_ctx = ctx;
}

/* Polls until done, an error or the deadline; between polls it naps (after a thousand
 * spins) or, with `naps` 0, only yields the core. */
static rf_status poll_until(rf_poll_fn poll, void *ctx, double seconds, int naps) {
  tighten_timer_slack();
  double deadline = rf_now() + seconds;
  const struct timespec nap = {0, 20000};
  for (long spins = 0;; spins++) {
    int done = 0;
    RF_TRY(poll(ctx, &done));
    if (done)
      return RF_OK;
    if (poll_watch)
      RF_TRY(poll_watch(poll_watch_ctx, &done));
    if (rf_now() > deadline)
      return RF_ERR_TIMEOUT;
    if (!naps)
      sched_yield();
    else if (spins > 1000)
      nanosleep(&nap, NULL);
  }
}

rf_status rf_poll(rf_poll_fn poll, void *ctx, double seconds) {
  return poll_until(poll, ctx, seconds, 1);
}

rf_status rf_poll_busy(rf_poll_fn poll, void *ctx, double seconds) {
  return poll_until(poll, ctx, seconds, 0);
}

rf_status rf_timeout_error(double seconds, const char *what, const char *consequence) {
  return rf_fail(RF_ERR_TIMEOUT,
                 "timed out after %.1f s waiting for %s; %s%sa peer rank is dead or stalled "
                 "(raise --timeout if the job is just slow)",
                 seconds, what, consequence ? consequence : "", consequence ? "; " : "");
}

const char *rf_format_bytes(int64_t bytes, char *buf, size_t len) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)bytes;
  int u = 0;
  while ((v >= 1024.0 || v <= -1024.0) && u < (int)RF_ARRAY_LEN(units) - 1) {
    v /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, len, "%" PRId64 " B", bytes);
  else
    snprintf(buf, len, "%.2f %s", v, units[u]);
  return buf;
}

void rf_strbuf_printf(rf_strbuf *sb, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int need = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (need < 0)
    return;
  if (sb->len + (size_t)need + 1 > sb->cap) {
    size_t cap = sb->cap ? sb->cap : 256;
    while (cap < sb->len + (size_t)need + 1)
      cap *= 2;
    char *p = realloc(sb->data, cap);
    if (!p) {
      sb->failed = 1;
      return;
    }
    sb->data = p;
    sb->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(sb->data + sb->len, sb->cap - sb->len, fmt, ap);
  va_end(ap);
  sb->len += (size_t)need;
}

void rf_strbuf_free(rf_strbuf *sb) {
  free(sb->data);
  sb->data = NULL;
  sb->len = sb->cap = 0;
}

/* ---- enumerations ----------------------------------------------------------------------- */

int rf_enum_find(const char *const *names, int count, const char *text) {
  for (int i = 0; i < count; i++)
    if (strcmp(text, names[i]) == 0)
      return i;
  return -1;
}

const char *rf_enum_name(const char *const *names, int count, int value) {
  return value >= 0 && value < count ? names[value] : "unknown";
}

const char *rf_enum_choices(const char *const *names, int count, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < count && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? "|" : "", names[i]);
  return buf;
}

rf_status rf_enum_parse(const char *what, const char *const *names, int count, const char *text,
                        int *out) {
  int i = rf_enum_find(names, count, text);
  if (i >= 0) {
    *out = i;
    return RF_OK;
  }
  char choices[256];
  return rf_fail(RF_ERR_USAGE, "option --%s: '%s' is not one of %s", what, text,
                 rf_enum_choices(names, count, choices, sizeof choices));
}
