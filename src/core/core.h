/* core: the one status type, logging with rank and host, and the wrapper macros that turn a
 * foreign library's error code into a logged, returned rf_status.
 *
 * Every fallible function in refit returns rf_status. A failure is logged once, where it is
 * detected, as one line that names the thing and says what to do; callers only propagate.
 * Nothing below main()/the driver calls exit() or MPI_Abort(). */
#ifndef RF_CORE_H
#define RF_CORE_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* The status list: enum name, process exit code, short description. The exit codes are the
 * user-visible contract: 0 pass, 1 verification failure, 2 usage error, 3 runtime error. */
#define RF_STATUS_LIST(X)                                                                          \
  X(RF_OK, 0, "ok")                                                                                \
  X(RF_ERR_USAGE, 2, "usage error")                                                                \
  X(RF_ERR_CONFIG, 2, "invalid configuration")                                                     \
  X(RF_ERR_MODEL, 2, "invalid model specification")                                                \
  X(RF_ERR_LAYOUT, 2, "layout does not fit the model")                                             \
  X(RF_ERR_WORLD, 2, "wrong number of ranks")                                                      \
  X(RF_ERR_MISMATCH, 2, "ranks disagree on the job")                                               \
  X(RF_ERR_UNSUPPORTED, 2, "not supported by this build or machine")                               \
  X(RF_ERR_CHECKPOINT, 2, "checkpoint does not match the model")                                   \
  X(RF_ERR_RESULTS, 2, "results file cannot be used")                                              \
  X(RF_ERR_VERIFY, 1, "verification failed")                                                       \
  X(RF_ERR_IO, 3, "input/output error")                                                            \
  X(RF_ERR_NOMEM, 3, "out of memory")                                                              \
  X(RF_ERR_TIMEOUT, 3, "timed out waiting for a peer")                                             \
  X(RF_ERR_PEER, 3, "another rank failed")                                                         \
  X(RF_ERR_MPI, 3, "MPI error")                                                                    \
  X(RF_ERR_HDF5, 3, "HDF5 error")                                                                  \
  X(RF_ERR_HWLOC, 3, "hwloc error")                                                                \
  X(RF_ERR_CUDA, 3, "CUDA error")                                                                  \
  X(RF_ERR_NCCL, 3, "NCCL error")                                                                  \
  X(RF_ERR_CORRUPT, 3, "received data is corrupted")                                               \
  X(RF_ERR_INTERNAL, 3, "internal error")

typedef enum {
#define RF_X_ENUM(name, exit_code, text) name,
  RF_STATUS_LIST(RF_X_ENUM)
#undef RF_X_ENUM
      RF_STATUS_COUNT
} rf_status;

const char *rf_status_name(rf_status st); /* "RF_ERR_USAGE" */
const char *rf_status_text(rf_status st); /* "usage error" */
int rf_status_exit_code(rf_status st);    /* 0, 1, 2 or 3 */

/* When several ranks fail differently, the most specific verdict wins: a usage error beats a
 * runtime error that it probably caused, and both beat "another rank failed". */
rf_status rf_status_worse(rf_status a, rf_status b);

/* ---- enumerations ------------------------------------------------------------------------
 * Every enum of the configuration is one X-macro list next to its type, each entry
 * X(IDENTIFIER, "name"), so that its values, their names and its parser cannot drift apart:
 *
 *   #define RF_MODE_LIST(X) X(RF_MODE_UNFUSED, "unfused") X(RF_MODE_GROUPED, "grouped") ...
 *   typedef enum { RF_MODE_LIST(RF_ENUM_ID) RF_MODE_COUNT } rf_mode;
 *   RF_ENUM_DECLARE(rf_mode);                                  (in the header)
 *   RF_ENUM_DEFINE(rf_mode, "mode", RF_MODE_LIST, RF_MODE_COUNT) (in one .c file)
 *
 * which gives rf_mode_names[], rf_mode_name(value) and rf_mode_parse(text, &value); the
 * parser's error is the one line "option --mode: 'x' is not one of unfused|grouped|fused". */
#define RF_ENUM_ID(id, name) id,
#define RF_ENUM_NAME(id, name) name,

/* The index of text among names[0 .. count), or -1. */
int rf_enum_find(const char *const *names, int count, const char *text);
/* names[value], or "unknown" for a value outside the list. */
const char *rf_enum_name(const char *const *names, int count, int value);
/* "a|b|c" into buf: how --help and the errors show the valid names. */
const char *rf_enum_choices(const char *const *names, int count, char *buf, size_t len);
/* Sets *out to text's index, or logs "option --WHAT: 'text' is not one of a|b|c" and returns
 * RF_ERR_USAGE. */
rf_status rf_enum_parse(const char *what, const char *const *names, int count, const char *text,
                        int *out);

#define RF_ENUM_DECLARE(type)                                                                      \
  extern const char *const type##_names[];                                                         \
  const char *type##_name(type value);                                                             \
  rf_status type##_parse(const char *text, type *out)

#define RF_ENUM_DEFINE(type, what, LIST, COUNT)                                                    \
  const char *const type##_names[] = {LIST(RF_ENUM_NAME)};                                         \
  _Static_assert(RF_ARRAY_LEN(type##_names) == (COUNT), #LIST " and " #COUNT " disagree");         \
  const char *type##_name(type value) { return rf_enum_name(type##_names, (COUNT), (int)value); }  \
  rf_status type##_parse(const char *text, type *out) {                                            \
    int v = 0;                                                                                     \
    RF_TRY(rf_enum_parse(what, type##_names, (COUNT), text, &v));                                  \
    *out = (type)v;                                                                                \
    return RF_OK;                                                                                  \
  }

/* ---- logging ---------------------------------------------------------------------------- */

typedef enum { RF_LOG_ERROR = 0, RF_LOG_WARN, RF_LOG_INFO, RF_LOG_DEBUG } rf_log_level;

/* Set once MPI is up; before that (and in commands that run without MPI) messages carry no
 * rank. The level comes from REFIT_LOG=error|warn|info|debug (default warn). */
void rf_log_set_rank(int rank, int world_size);
void rf_log_init_from_env(void);
rf_log_level rf_log_level_get(void);
const char *rf_hostname(void);

/* Errors that every rank detects identically (a bad option, a layout that does not divide)
 * are printed by one rank only: the others wrap the work in rf_log_push_quiet(1) ...
 * rf_log_pop_quiet(). The regions nest: each pop restores what its push found, and a region
 * inside a quiet one stays quiet whatever it pushes. */
void rf_log_push_quiet(int quiet);
void rf_log_pop_quiet(void);

/* While buf is set, errors are written into it (the last one wins, without prefix or newline)
 * instead of stderr: for callers that report a failure their own way, as a sweep records why
 * it skips a combination. NULL ends the capture. */
void rf_log_capture(char *buf, size_t len);
/* The capture in force (NULL, 0: none), so that a caller may capture inside another's and then
 * restore it with rf_log_capture. */
void rf_log_capture_current(char **buf, size_t *len);

void rf_log(rf_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rf_log_at(rf_log_level level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void rf_vlog_at(rf_log_level level, const char *file, int line, const char *fmt, va_list ap);

/* Logs an error (one line) and returns st, so detection sites read
 * `return rf_fail(RF_ERR_LAYOUT, "...")`. */
rf_status rf_fail(rf_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define RF_ERROR(...) rf_log_at(RF_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define RF_WARN(...) rf_log_at(RF_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define RF_INFO(...) rf_log_at(RF_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define RF_DEBUG(...) rf_log_at(RF_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)

/* ---- propagation and foreign-library wrappers -------------------------------------------
 * Each macro evaluates its argument exactly once, logs file:line, the call and the library's
 * own message, and returns a status from the enclosing function. The *_GOTO forms set the
 * local `rf_status st` and jump to a cleanup label instead. */

#define RF_TRY(expr)                                                                               \
  do {                                                                                             \
    rf_status rf_try_st_ = (expr);                                                                 \
    if (rf_try_st_ != RF_OK)                                                                       \
      return rf_try_st_;                                                                           \
  } while (0)

#define RF_TRY_GOTO(expr, label)                                                                   \
  do {                                                                                             \
    st = (expr);                                                                                   \
    if (st != RF_OK)                                                                               \
      goto label;                                                                                  \
  } while (0)

/* MPI: needs <mpi.h> where it is used. Communicators use MPI_ERRORS_RETURN, so failures reach
 * these macros instead of aborting the job. */
rf_status rf_mpi_failed(int rc, const char *call, const char *file, int line);
/* MPI's text for return code rc ("error code N" where MPI has none) in buf, which it returns:
 * for one-line errors that say more than the wrapper's. RF_MPI_ERROR_MAX holds any of them. */
#define RF_MPI_ERROR_MAX 256
const char *rf_mpi_error_string(int rc, char *buf, size_t size);
#define RF_MPI(call)                                                                               \
  do {                                                                                             \
    int rf_mpi_rc_ = (call);                                                                       \
    if (rf_mpi_rc_ != 0 /* MPI_SUCCESS */)                                                         \
      return rf_mpi_failed(rf_mpi_rc_, #call, __FILE__, __LINE__);                                 \
  } while (0)
#define RF_MPI_GOTO(call, label)                                                                   \
  do {                                                                                             \
    int rf_mpi_rc_ = (call);                                                                       \
    if (rf_mpi_rc_ != 0) {                                                                         \
      st = rf_mpi_failed(rf_mpi_rc_, #call, __FILE__, __LINE__);                                   \
      goto label;                                                                                  \
    }                                                                                              \
  } while (0)

/* HDF5: calls return a negative herr_t/hid_t on failure. The HDF5 error stack is printed
 * below the one-line summary only at REFIT_LOG=debug. */
rf_status rf_hdf5_failed(const char *call, const char *file, int line);
#define RF_H5(call)                                                                                \
  do {                                                                                             \
    if ((int64_t)(call) < 0)                                                                       \
      return rf_hdf5_failed(#call, __FILE__, __LINE__);                                            \
  } while (0)
#define RF_H5_GOTO(call, label)                                                                    \
  do {                                                                                             \
    if ((int64_t)(call) < 0) {                                                                     \
      st = rf_hdf5_failed(#call, __FILE__, __LINE__);                                              \
      goto label;                                                                                  \
    }                                                                                              \
  } while (0)

/* hwloc: calls return -1 (or NULL, checked by the caller) and set errno. */
rf_status rf_hwloc_failed(const char *call, int err, const char *file, int line);
#define RF_HWLOC(call)                                                                             \
  do {                                                                                             \
    if ((call) < 0)                                                                                \
      return rf_hwloc_failed(#call, errno, __FILE__, __LINE__);                                    \
  } while (0)

/* CUDA and NCCL: used only in the files that implement the GPU paths; they need
 * <cuda_runtime.h> / <nccl.h> there and the helpers live in those files' translation units. */
rf_status rf_cuda_failed(int rc, const char *msg, const char *call, const char *file, int line);
#define RF_CUDA(call)                                                                              \
  do {                                                                                             \
    cudaError_t rf_cuda_rc_ = (call);                                                              \
    if (rf_cuda_rc_ != cudaSuccess)                                                                \
      return rf_cuda_failed((int)rf_cuda_rc_, cudaGetErrorString(rf_cuda_rc_), #call, __FILE__,    \
                            __LINE__);                                                             \
  } while (0)
rf_status rf_nccl_failed(int rc, const char *msg, const char *call, const char *file, int line);
#define RF_NCCL(call)                                                                              \
  do {                                                                                             \
    ncclResult_t rf_nccl_rc_ = (call);                                                             \
    if (rf_nccl_rc_ != ncclSuccess && rf_nccl_rc_ != ncclInProgress)                               \
      return rf_nccl_failed((int)rf_nccl_rc_, ncclGetErrorString(rf_nccl_rc_), #call, __FILE__,    \
                            __LINE__);                                                             \
  } while (0)

/* ---- small utilities shared by every module --------------------------------------------- */

#define RF_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define RF_MIN(a, b) ((a) < (b) ? (a) : (b))
#define RF_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Allocation that logs what it could not get; returns NULL on failure. */
void *rf_malloc(size_t bytes, const char *what);
void *rf_calloc(size_t count, size_t size, const char *what);
void *rf_realloc(void *ptr, size_t bytes, const char *what);
char *rf_strdup(const char *s);

/* Makes room for one more element in a growable array (*items holding *count of *cap), by
 * doubling; returns RF_ERR_NOMEM (logged, naming `what`) when it cannot. */
rf_status rf_grow(void **items, int count, int *cap, size_t size, const char *what);

/* Monotonic clock in seconds. */
double rf_now(void);

/* Every bounded wait in refit is one of these. `poll` checks once whether what is awaited has
 * happened (setting *done) and returns an error to end the wait early. rf_poll calls it until
 * done, an error, or `seconds` have passed; it spins briefly, then sleeps between checks so
 * ranks sharing a core still progress. A timeout returns RF_ERR_TIMEOUT without logging: the
 * caller cleans up (cancels, aborts) and then reports with rf_timeout_error. */
typedef rf_status (*rf_poll_fn)(void *ctx, int *done);
rf_status rf_poll(rf_poll_fn poll, void *ctx, double seconds);
/* The same without the naps: between checks it only yields the core (sched_yield). For waits
 * whose progress happens inside the checks themselves, as MPI's does: a rank that naps stalls
 * the fragments of a strided message, which move only while both ends call into MPI. */
rf_status rf_poll_busy(rf_poll_fn poll, void *ctx, double seconds);
/* A second check that both make after each unfinished check of their own, until replaced
 * (NULL: none): the control plane's test for another rank's failure notice (control.h), so
 * that a wait for a rank that has failed ends at once with the watch's status. */
void rf_poll_set_watch(rf_poll_fn watch, void *ctx);
/* Logs "timed out after S s waiting for WHAT; <consequence> (a peer rank is dead or stalled;
 * raise --timeout if the job is just slow)" and returns RF_ERR_TIMEOUT. */
rf_status rf_timeout_error(double seconds, const char *what, const char *consequence);

/* ---- input files ---------------------------------------------------------------------------
 * For every file a user names: opened without blocking, and refused unless it is a regular
 * file, so that a FIFO or a device can neither hang refit nor feed it without end. */

/* The most refit reads of a JSON input (config files, model configs, checkpoint indexes). */
#define RF_INPUT_MAX ((size_t)16 << 20)

/* Opens path read-only. Returns the descriptor, or -1 with errno set and the reason in why
 * ("No such file or directory", "is a FIFO, not a regular file"); *sb is filled whenever the
 * file could be opened, so callers can tell a directory (errno EISDIR) apart. */
struct stat;
int rf_open_input(const char *path, struct stat *sb, char *why, size_t len);

/* Reads a whole regular file of at most max bytes, NUL-terminated, setting *len. Returns NULL
 * with errno set (EFBIG for a larger file) and the reason in why ("is larger than the
 * 16.00 MiB refit reads"); the caller frees. */
char *rf_read_input(const char *path, size_t max, size_t *len, char *why, size_t why_len);

/* The folders searched, in order, for a shipped data file of one kind ("models", "clusters"):
 * the folder in $env_var (tests, and users with their own collection), the source tree's
 * configs/<kind> (a build run in place), the install prefix's share/refit/<kind>. The last two
 * are compile definitions given by CMake; a bare compile may lack them. Fills dirs (pointing
 * into env or storage) and returns how many there are. */
#define RF_SHIPPED_DIR_MAX 512
int rf_shipped_dirs(const char *env_var, const char *kind, char storage[2][RF_SHIPPED_DIR_MAX],
                    const char *dirs[3]);

/* Formats a byte count with binary units ("1.50 GiB") into buf. */
const char *rf_format_bytes(int64_t bytes, char *buf, size_t len);

/* A growable byte string, for building JSON, help text and tables without fixed buffers. When
 * memory runs out the text stops growing and `failed` is set: whoever writes it out checks. */
typedef struct {
  char *data;
  size_t len, cap;
  int failed;
} rf_strbuf;
void rf_strbuf_printf(rf_strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rf_strbuf_free(rf_strbuf *sb);

/* The version string compiled in (git describe at configure time). */
extern const char rf_version[];
extern const char rf_git_commit[];

#endif
