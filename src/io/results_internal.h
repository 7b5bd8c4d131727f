/* What the two halves of the results code share: the handle, the checks that decide whether a
 * file is refit's, and small attribute and dataset writers. Private to src/io/results*.c. */
#ifndef RF_RESULTS_INTERNAL_H
#define RF_RESULTS_INTERNAL_H

#include <hdf5.h>
#include <stddef.h>

#include "io/io.h"

/* The mark every results file carries as the root attribute refit_format; a file with another
 * value was written by a refit whose schema this one does not know. Format 2 changed the
 * synthetic weights and the checksum terms (verify/values.h), nothing in the schema: files of
 * format 1 are still read, and refit verify compares their checksums under format 1's terms,
 * but runs are appended only to files of this refit's format. */
#define RF_RESULTS_FORMAT "refit-results/2"
#define RF_RESULTS_FORMAT_NUMBER 2
#define RF_RESULTS_FORMAT_V1 "refit-results/1"

/* The number of a refit_format value this refit reads (1 or 2), 0 for any other. */
int rf_results_format_number(const char *format);

/* The handle holds only names: the file itself stays closed between runs, so a process that
 * dies during a transfer never has it open and cannot leave it damaged. */
struct rf_results {
  char *path;
  char *command_line, *hosts, *gpu_versions; /* of this invocation, repeated in each run */
  double wait_s;                             /* --output-wait */
};

/* HDF5 stays silent: refit says one line itself (rf_hdf5_failed shows the stack at debug). */
void rf_results_quiet_hdf5(void);

/* File access properties: strong close, and HDF5's own file lock only when hdf5_lock is set
 * (readers); writers hold the lock of results_lock.c instead. */
hid_t rf_results_file_access(int hdf5_lock);

/* The writers' lock on PATH.lock (results_lock.c). Waits at most wait_s seconds, printing one
 * line when it starts to wait; RF_ERR_TIMEOUT, without logging, when the file is still busy,
 * with the holder ("pid 12 on host n7") in holder. Where locks are not supported it returns
 * RF_OK without a lock. */
typedef struct {
  int fd;
} rf_results_lock;
rf_status rf_results_lock_take(const char *path, double wait_s, rf_results_lock *lock, char *holder,
                               size_t holder_len);
void rf_results_lock_drop(rf_results_lock *lock);

/* The name of the temporary copy of `path` that this process writes, attempt 0, 1, ... (each
 * created exclusively): PATH.<pid>@<host>.tmp, PATH.<pid>.<attempt>@<host>.tmp. */
void rf_results_temp_name(const char *path, int attempt, char *out, size_t len);

/* Removes the temporary copies of `path` whose writer is gone: named with this host and a pid
 * that no longer runs here; older names without a host only when `locked` (the caller holds
 * the writers' lock, which such writers held while they wrote). Call it under the lock. Returns
 * how many were removed; logs only at debug. */
int rf_results_remove_stale_temps(const char *path, int locked);

/* What an append needs free beside the file: a copy of the file, room for the run twice (HDF5
 * writes the data and then its metadata, and a file it cannot flush stays open inside it) and a
 * mebibyte. */
int64_t rf_results_append_need(int64_t file_bytes, int64_t run_bytes);

/* The one line for an append refused for room: how much it needs, how much the file system of
 * `dir` has free, and what to do. */
void rf_results_no_space_message(char *buf, size_t len, const char *path, const char *dir,
                                 int64_t need, int64_t room);

/* The root attributes of a new results file (refit_format, versions, command line, hosts). */
rf_status rf_results_write_file_attributes(hid_t f, const rf_results_file_info *info);

/* A new results file in memory (HDF5's core driver, no backing file): the root attributes and
 * an empty /runs. The caller closes *file. */
rf_status rf_results_memory_file(const rf_results_file_info *info, hid_t *file);

/* Writes the image of in-memory file f to a new file at path, created exclusively
 * (O_EXCL | O_NOFOLLOW) and synced. Returns 0 or the errno of what failed (EEXIST when
 * something is at path already); a partly written file is removed. Logs nothing. */
int rf_results_save_image(hid_t f, const char *path);

/* The directory part of path ("." when it has none). */
void rf_results_directory(const char *path, char *dir, size_t len);

/* Writes one run's attributes and datasets into group g (results_write.c). */
rf_status rf_results_write_run(hid_t g, const rf_results *r, const rf_results_run *run);

/* Opens `path` read-only after checking that it is an intact refit results file with a /runs
 * group and, when `appending`, one refit may append to: the current format, the file writable
 * and its directory too (appends write a copy beside it). Anything else is refused with one
 * line and RF_ERR_RESULTS. The caller closes *file. */
rf_status rf_results_open_checked(const char *path, int appending, hid_t *file);

/* Reads a scalar string attribute, fixed or variable length, into buf. Returns 0 on success
 * and -1 without logging, since a missing or odd mark only means the file is not refit's. */
int rf_results_read_attr_str(hid_t obj, const char *name, char *buf, size_t len);

/* The highest run number under `runs`, or -1 when there is none. */
rf_status rf_results_last_run(hid_t runs, int *last);
/* The largest run number of `runs` below `below` (-1 where none): stepping down through the
 * runs that exist, so that a file naming a run 99999999 costs its runs, not 10^8 lookups. */
rf_status rf_results_run_below(hid_t runs, long below, int *out);

/* A variable-length UTF-8 string type (h5py reads it as str); the caller closes it. */
hid_t rf_results_vlen_string(void);
/* A fixed-size, NUL-terminated string type of `size` bytes; the caller closes it. */
hid_t rf_results_fixed_string(size_t size);

/* One member of a compound row: its name in the file, its byte offset in the row, and its
 * type: a native number type (`type`), a fixed string of `chars` bytes, or an array of `count`
 * elements of `type`. The tables are built at run time: H5T_NATIVE_* are not constants. */
typedef struct {
  const char *name;
  size_t offset;
  hid_t type;
  size_t chars;
  hsize_t count;
} rf_results_field;
#define RF_FIELD(name, row, member, type)                                                          \
  { name, offsetof(row, member), type, 0, 0 }
#define RF_FIELD_STR(name, row, member)                                                            \
  { name, offsetof(row, member), -1, sizeof(((row *)0)->member), 0 }
/* A compound type of `size` bytes holding `fields`; the caller closes *out. Every writer and
 * reader of refit's tables describes its rows this way. */
rf_status rf_results_compound(size_t size, const rf_results_field *fields, int count, hid_t *out);

/* Scalar attributes of object `obj` below `loc` ("." for loc itself). A NULL string is
 * written as "". */
rf_status rf_results_attr_str(hid_t loc, const char *obj, const char *name, const char *value);
rf_status rf_results_attr_i64(hid_t loc, const char *obj, const char *name, int64_t value);
rf_status rf_results_attr_f64(hid_t loc, const char *obj, const char *name, double value);

/* Creates dataset `name` of `type` and shape dims[rank] under loc and writes `data` (skipped
 * when the shape holds no element). */
rf_status rf_results_dataset(hid_t loc, const char *name, hid_t type, int rank, const hsize_t *dims,
                             const void *data);

/* The current time as UTC ISO-8601, "2025-12-02T09:04:00Z". */
void rf_results_utc_now(char *buf, size_t len);

/* The run's `placement` (one row per world rank) and `links` (one row per planned link)
 * datasets under the run group g (results_placement.c). */
rf_status rf_results_write_placement(hid_t g, const rf_results_run *run);
rf_status rf_results_write_links(hid_t g, const rf_results_run *run);

/* The run's update and delta attributes and its delta_kinds table under the run group g
 * (results_delta.c). */
rf_status rf_results_write_versions(hid_t g, const rf_results_run *run);

/* The run's `plan` group under the run group g (results_plan.c). */
rf_status rf_results_write_plan(hid_t g, const rf_results_run *run);

/* Under Slurm (SLURM_JOB_ID set), adds the str attributes slurm_job_id, slurm_array_task_id
 * (in an array job) and slurm_job (`scontrol show job`, "" when that fails) to the run group g.
 * Outside Slurm it writes nothing. Fails only when HDF5 does. */
rf_status rf_results_slurm_attrs(hid_t g);

#endif
