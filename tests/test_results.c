/* The HDF5 results file: runs append as /runs/0000, /runs/0001, ... and read back; files that
 * are not refit's are refused and left byte for byte as they were; a writer killed between
 * runs (the file is closed then) or even while it writes leaves every earlier run readable.
 * Runs without mpirun: MPI_Get_library_version is allowed before MPI_Init. */
#include <hdf5.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io/io.h"
#include "io/results_internal.h"
#include "model/model.h"
#include "test.h"

enum { ITERS = 3, RANKS = 4, REPLICAS = 2 };

/* A synthetic run of the tiny model: 2 trainer ranks, 2 rollout ranks, fake timings. */
typedef struct {
  rf_model model;
  rf_run_result result;
  double timings[ITERS * RANKS * RF_PHASE_COUNT];
  uint64_t *trainer, *rollout;
  rf_shard_digest shards[RANKS];
  int64_t send[2], recv[2];
  rf_rank_info placement[RANKS];
  rf_results_run run;
} fixture;

static void fixture_init(fixture *fx, uint64_t salt) {
  memset(fx, 0, sizeof *fx);
  ASSERT_OK(rf_model_load("tiny", &fx->model));
  int n = fx->model.tensor_count;
  fx->trainer = calloc((size_t)n, sizeof *fx->trainer);
  fx->rollout = calloc((size_t)n * REPLICAS, sizeof *fx->rollout);
  ASSERT_TRUE(fx->trainer && fx->rollout);
  for (int t = 0; t < n; t++) {
    fx->trainer[t] = salt * 0x9e3779b97f4a7c15ULL + (uint64_t)t;
    for (int rep = 0; rep < REPLICAS; rep++)
      fx->rollout[rep * n + t] = fx->trainer[t];
  }
  for (int i = 0; i < ITERS * RANKS * RF_PHASE_COUNT; i++)
    fx->timings[i] = 1e-3 * (double)(i % RF_PHASE_COUNT + 1) + 1e-6 * (double)i;
  for (int r = 0; r < RANKS; r++) {
    fx->shards[r] = (rf_shard_digest){r, r % n, r >= 2, salt + (uint64_t)r};
    fx->placement[r] = (rf_rank_info){.rank = r,
                                      .pid = 1000 + r,
                                      .trainer_rank = r < 2 ? r : -1,
                                      .rollout_rank = r >= 2 ? r - 2 : -1};
    snprintf(fx->placement[r].host, sizeof fx->placement[r].host, "node%d", r / 2);
  }
  fx->send[0] = fx->send[1] = fx->recv[0] = fx->recv[1] = fx->model.total_bytes / 2;

  rf_run_result *res = &fx->result;
  snprintf(res->mode, sizeof res->mode, "fused");
  snprintf(res->plan, sizeof res->plan, "p2p");
  snprintf(res->transport, sizeof res->transport, "mpi");
  snprintf(res->verify, sizeof res->verify, "full");
  res->model_bytes = res->replica_bytes = res->transfer_bytes = fx->model.total_bytes;
  res->pieces = 40;
  res->messages = 12;
  res->iterations = ITERS;
  res->ranks = RANKS;
  res->timings = fx->timings;
  res->wrong = 0;
  res->checksum_bad = 0;
  ASSERT_OK(rf_run_result_summarise(res));

  fx->run = (rf_results_run){.config_json = "{\"model\": \"tiny\"}",
                             .model = "tiny",
                             .model_type = "llama",
                             .dtype = "bf16",
                             .trainer = "fsdp=2",
                             .trainer_style = "fsdp2",
                             .trainer_order = "hf",
                             .rollout = "tp=2",
                             .placement = "disaggregated",
                             .plan = "p2p",
                             .mode = "fused",
                             .transport = "mpi",
                             .verify = NULL /* written as "" */,
                             .bucket_size = 0,
                             .seed = (int64_t)salt,
                             .result = res,
                             .model_spec = &fx->model,
                             .replicas = REPLICAS,
                             .trainer_checksum = fx->trainer,
                             .rollout_checksum = fx->rollout,
                             .shards = fx->shards,
                             .shard_count = RANKS,
                             .pieces = 40,
                             .messages = 12,
                             .transfer_bytes = res->transfer_bytes,
                             .send_bytes = fx->send,
                             .trainer_ranks = 2,
                             .recv_bytes = fx->recv,
                             .rollout_ranks = 2,
                             .rank_table = fx->placement,
                             .ranks = RANKS,
                             .env = "OMPI_MCA_btl=self,vader\nNCCL_DEBUG=WARN\n"};
}

static void fixture_free(fixture *fx) {
  rf_model_free(&fx->model);
  free(fx->trainer);
  free(fx->rollout);
}

static const rf_results_file_info info = {"refit run --model tiny", "node0,node1", "", 10};

/* Appends one run of `salt` and returns its number. */
static int add_run(const char *path, uint64_t salt) {
  fixture fx;
  fixture_init(&fx, salt);
  rf_results *r = NULL;
  ASSERT_OK(rf_results_open(path, &info, &r));
  int number = -1;
  ASSERT_OK(rf_results_add_run(r, &fx.run, &number));
  rf_results_close(r);
  fixture_free(&fx);
  return number;
}

/* Reads run `run` back and checks it holds the checksums of `salt`; returns its number. */
static int check_run(const char *path, int run, uint64_t salt) {
  fixture fx;
  fixture_init(&fx, salt);
  int read = -1, count = 0;
  char(*names)[RF_NAME_MAX] = NULL;
  uint64_t *trainer = NULL, *rollout = NULL;
  ASSERT_OK(rf_results_read_checksums(path, run, &read, &count, &names, &trainer, &rollout));
  ASSERT_EQ(count, fx.model.tensor_count);
  for (int t = 0; t < count; t++) {
    ASSERT_STR_EQ(names[t], fx.model.tensors[t].name);
    ASSERT_U64_EQ(trainer[t], fx.trainer[t]);
    ASSERT_U64_EQ(rollout[t], fx.rollout[t]);
  }
  free(names);
  free(trainer);
  free(rollout);
  fixture_free(&fx);
  return read;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ASSERT_TRUE(f);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  rewind(f);
  char *buf = malloc(*len + 1);
  ASSERT_TRUE(buf);
  ASSERT_EQ(fread(buf, 1, *len, f), *len);
  fclose(f);
  return buf;
}

/* rf_results_open refuses `path` with RF_ERR_RESULTS and leaves its bytes as they were. */
static void expect_refused(const char *path) {
  size_t before_len, after_len;
  char *before = slurp(path, &before_len);
  rf_results *r = NULL;
  ASSERT_STATUS(rf_results_open(path, &info, &r), RF_ERR_RESULTS);
  ASSERT_TRUE(r == NULL);
  int count = 0;
  char(*names)[RF_NAME_MAX] = NULL;
  uint64_t *trainer = NULL, *rollout = NULL;
  ASSERT_STATUS(rf_results_read_checksums(path, -1, NULL, &count, &names, &trainer, &rollout),
                RF_ERR_RESULTS);
  char *after = slurp(path, &after_len);
  ASSERT_EQ(after_len, before_len);
  ASSERT_TRUE(memcmp(before, after, before_len) == 0);
  free(before);
  free(after);
}

static void test_append(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/append.h5", dir);
  ASSERT_EQ(add_run(path, 1), 0);
  ASSERT_EQ(add_run(path, 2), 1);
  ASSERT_EQ(check_run(path, 0, 1), 0);
  ASSERT_EQ(check_run(path, 1, 2), 1);
  ASSERT_EQ(check_run(path, -1, 2), 1);
  int count = 0;
  char(*names)[RF_NAME_MAX] = NULL;
  uint64_t *trainer = NULL, *rollout = NULL;
  ASSERT_STATUS(rf_results_read_checksums(path, 7, NULL, &count, &names, &trainer, &rollout),
                RF_ERR_RESULTS);
  ASSERT_TRUE(names == NULL && trainer == NULL && rollout == NULL);
  /* Where REFIT_RESULTS_KEEP names a file, the two-run file is copied there for the h5py
   * checker (tests/cli/results_h5py.py). */
  const char *keep = getenv("REFIT_RESULTS_KEEP");
  if (keep && keep[0]) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, keep);
    ASSERT_EQ(system(cmd), 0);
  }
}

static void test_refusals(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/garbage.h5", dir);
  FILE *f = fopen(path, "wb");
  ASSERT_TRUE(f);
  for (int i = 0; i < 4096; i++)
    fputc((i * 131) & 0xff, f);
  fclose(f);
  expect_refused(path);

  /* An empty file is not HDF5 either; it is refused rather than filled. */
  snprintf(path, sizeof path, "%s/empty.h5", dir);
  f = fopen(path, "wb");
  ASSERT_TRUE(f);
  fclose(f);
  expect_refused(path);

  /* A valid HDF5 file without refit's mark, and one with a mark of another format. */
  snprintf(path, sizeof path, "%s/foreign.h5", dir);
  hid_t h = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(h, 0);
  ASSERT_GE(H5Gclose(H5Gcreate2(h, "runs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), 0);
  ASSERT_GE(H5Fclose(h), 0);
  expect_refused(path);

  snprintf(path, sizeof path, "%s/future.h5", dir);
  h = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(h, 0);
  hid_t type = H5Tcopy(H5T_C_S1), space = H5Screate(H5S_SCALAR);
  ASSERT_GE(H5Tset_size(type, 16), 0);
  hid_t attr = H5Acreate2(h, "refit_format", type, space, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(H5Awrite(attr, type, "refit-results/9"), 0);
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  ASSERT_GE(H5Fclose(h), 0);
  expect_refused(path);

  /* A file that cannot be created says so instead of failing deep inside HDF5. */
  snprintf(path, sizeof path, "%s/no/such/dir/r.h5", dir);
  rf_results *r = NULL;
  ASSERT_STATUS(rf_results_open(path, &info, &r), RF_ERR_RESULTS);
}

/* The child appends one run and is then killed with SIGKILL while "transferring" the next:
 * the file is closed between runs, so the first run must be intact and the file appendable. */
static void test_killed_between_runs(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/killed.h5", dir);
  ASSERT_EQ(add_run(path, 10), 0);
  fflush(NULL);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rf_results *r = NULL;
    if (rf_results_open(path, &info, &r) != RF_OK)
      _exit(10);
    fixture fx;
    fixture_init(&fx, 11);
    int number = -1;
    if (rf_results_add_run(r, &fx.run, &number) != RF_OK || number != 1)
      _exit(11);
    for (volatile long spin = 0;; spin++)
      if (spin == 100000)
        raise(SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_EQ(WTERMSIG(status), SIGKILL);
  ASSERT_EQ(check_run(path, 0, 10), 0);
  ASSERT_EQ(check_run(path, -1, 11), 1);
  ASSERT_EQ(add_run(path, 12), 2);
  ASSERT_EQ(check_run(path, 2, 12), 2);
}

/* Harsher than the issue asks: a child appends runs in a tight loop and is killed at a random
 * moment, most often inside HDF5. A run is linked into /runs only once it is on disk, so the
 * file must still open and every run it lists must read back whole. */
static void test_killed_while_writing(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/killed_writing.h5", dir);
  srand((unsigned)time(NULL));
  for (int trial = 0; trial < 20; trial++) {
    unlink(path);
    fflush(NULL);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      fixture fx;
      fixture_init(&fx, 100);
      rf_results *r = NULL;
      if (rf_results_open(path, &info, &r) != RF_OK)
        _exit(10);
      for (int number = -1;;)
        if (rf_results_add_run(r, &fx.run, &number) != RF_OK)
          _exit(11);
    }
    usleep(30000 + (useconds_t)(rand() % 100000));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status));
    if (access(path, F_OK) != 0)
      continue; /* killed before the file was linked into place */
    rf_results *r = NULL;
    ASSERT_OK(rf_results_open(path, &info, &r));
    rf_results_close(r);
    int count = 0, last = -1;
    char(*names)[RF_NAME_MAX] = NULL;
    uint64_t *trainer = NULL, *rollout = NULL;
    rf_status st = rf_results_read_checksums(path, -1, &last, &count, &names, &trainer, &rollout);
    free(names);
    free(trainer);
    free(rollout);
    if (st == RF_ERR_RESULTS)
      continue; /* killed before the first run was linked */
    ASSERT_OK(st);
    for (int run = 0; run <= last; run++)
      ASSERT_EQ(check_run(path, run, 100), run);
  }
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -f '%s'.*.tmp", path); /* strays of kills during creation */
  ASSERT_EQ(system(cmd), 0);
}

/* The tensors table records each tensor's own dtype and bytes: the norms, given fp32 of their
 * own, say fp32 and 4 bytes an element; every other tensor the model's bf16 and 2. */
static void test_tensor_dtypes(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/dtypes.h5", dir);
  fixture fx;
  fixture_init(&fx, 7);
  rf_model *m = &fx.model;
  for (int t = 0; t < m->tensor_count; t++)
    if (m->tensors[t].kind == RF_T_NORM)
      ASSERT_OK(rf_model_set_tensor_dtype(m, t, RF_DTYPE_FP32));
  rf_results *r = NULL;
  ASSERT_OK(rf_results_open(path, &info, &r));
  int number = -1;
  ASSERT_OK(rf_results_add_run(r, &fx.run, &number));
  rf_results_close(r);
  ASSERT_EQ(number, 0);

  typedef struct {
    char dtype[8];
    int64_t bytes;
  } row;
  row rows[21];
  ASSERT_EQ(m->tensor_count, 21);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "/runs/0000/tensors", H5P_DEFAULT);
  hid_t s8 = H5Tcopy(H5T_C_S1), mt = H5Tcreate(H5T_COMPOUND, sizeof(row));
  ASSERT_GE(H5Tset_size(s8, 8), 0);
  ASSERT_GE(H5Tinsert(mt, "dtype", offsetof(row, dtype), s8), 0);
  ASSERT_GE(H5Tinsert(mt, "bytes", offsetof(row, bytes), H5T_NATIVE_INT64), 0);
  ASSERT_GE(H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows), 0);
  H5Tclose(mt), H5Tclose(s8), H5Dclose(d), H5Fclose(f);
  int fp32 = 0;
  for (int t = 0; t < m->tensor_count; t++) {
    int norm = m->tensors[t].kind == RF_T_NORM;
    fp32 += norm;
    ASSERT_STR_EQ(rows[t].dtype, norm ? "fp32" : "bf16");
    ASSERT_EQ(rows[t].bytes, m->tensors[t].numel * (norm ? 4 : 2));
  }
  ASSERT_EQ(fp32, 5);
  fixture_free(&fx);
}

/* An append refused for room says how much it needs (a copy of the file, twice the run and a
 * mebibyte) and how much the file system has free, and where. */
static void test_no_space_message(void) {
  ASSERT_EQ(rf_results_append_need(80 << 20, 30000), (80 << 20) + 60000 + (1 << 20));
  char line[1024];
  rf_results_no_space_message(line, sizeof line, "/data/r.h5", "/data",
                              rf_results_append_need(80 << 20, 30000), 573440);
  ASSERT_STR_EQ(line, "results file '/data/r.h5': appending needs 84994656 bytes (81.06 MiB: a "
                      "copy of the file, twice this run and 1 MiB) and the file system of '/data' "
                      "has 573440 (560.00 KiB) free; free space there or choose another --output");
}

/* Creates the temporary name `attempt` of path, as the process calling it names it. */
static void touch_temp(const char *path, int attempt) {
  char name[700];
  rf_results_temp_name(path, attempt, name, sizeof name);
  FILE *f = fopen(name, "w");
  ASSERT_TRUE(f != NULL);
  fclose(f);
}

static int exists(const char *fmt, const char *path, long pid) {
  char name[700];
  snprintf(name, sizeof name, fmt, path, pid);
  return access(name, F_OK) == 0;
}

/* The copies of writers that were killed are removed by the next writer: named with this host
 * and a pid that is gone. A live writer's copy, another host's and (without the lock) an older
 * refit's without a host stay. */
static void test_stale_temps(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/stale.h5", dir);
  pid_t dead = fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) {
    touch_temp(path, 0);
    touch_temp(path, 2);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(dead, &status, 0), dead);
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t live = fork();
  ASSERT_GE(live, 0);
  if (live == 0) {
    touch_temp(path, 0);
    ASSERT_EQ(write(pipefd[1], "x", 1), 1);
    pause();
    _exit(0);
  }
  char ready;
  ASSERT_EQ(read(pipefd[0], &ready, 1), 1);
  close(pipefd[0]);
  close(pipefd[1]);
  char legacy[700], other[700];
  snprintf(legacy, sizeof legacy, "%s.%ld.tmp", path, (long)dead);
  snprintf(other, sizeof other, "%s.%ld@elsewhere.tmp", path, (long)dead);
  fclose(fopen(legacy, "w"));
  fclose(fopen(other, "w"));
  ASSERT_EQ(rf_results_remove_stale_temps(path, 0), 2);
  ASSERT_TRUE(exists("%s.%ld.tmp", path, dead));
  ASSERT_TRUE(exists("%s.%ld@elsewhere.tmp", path, dead));
  ASSERT_EQ(rf_results_remove_stale_temps(path, 1), 1);
  ASSERT_FALSE(exists("%s.%ld.tmp", path, dead));
  ASSERT_TRUE(exists("%s.%ld@elsewhere.tmp", path, dead));
  /* The live writer's copy was kept so far: it goes once its writer is gone. */
  kill(live, SIGKILL);
  ASSERT_EQ(waitpid(live, &status, 0), live);
  ASSERT_EQ(rf_results_remove_stale_temps(path, 1), 1);
  ASSERT_EQ(rf_results_remove_stale_temps(path, 1), 0);
  unlink(other);
}

int main(void) {
  char dir[] = "/tmp/refit_results_XXXXXX";
  ASSERT_TRUE(mkdtemp(dir) != NULL);
  test_append(dir);
  test_tensor_dtypes(dir);
  test_refusals(dir);
  test_killed_between_runs(dir);
  test_killed_while_writing(dir);
  test_no_space_message();
  test_stale_temps(dir);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ASSERT_EQ(system(cmd), 0);
  printf("test_results: all checks passed\n");
  return 0;
}
