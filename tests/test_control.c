/* Control plane under mpirun -np 2, 3, 4 and 6: the world-size check, the trainer and rollout
 * communicators of every layout that fits N ranks, the handshake (agreeing, and disagreeing
 * on one rank, with the one line it prints), status agreement, the bounded collectives, the
 * nesting quiet-log switch, and bounded waits that expire. Where an error line is part of the
 * contract, every rank checks its own stderr: the expected line on rank 0, nothing elsewhere. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control/control.h"
#include "test.h"

static int rank, size;
static rf_model tiny;

typedef struct {
  int np;
  const char *trainer, *rollout;
  rf_placement placement;
} job;

/* Layouts of the tiny model (4 heads, 2 kv heads) with their world sizes; the first one for
 * each N is also used by the mismatch, agreement and timeout cases. */
static const job jobs[] = {
    {2, "fsdp=1", "tp=1", RF_PLACEMENT_DISAGGREGATED},
    {2, "fsdp=2", "tp=2", RF_PLACEMENT_COLOCATED},
    {2, "fsdp=2", "tp=1", RF_PLACEMENT_COLOCATED},
    {3, "fsdp=2", "tp=1", RF_PLACEMENT_DISAGGREGATED},
    {3, "fsdp=1", "tp=2", RF_PLACEMENT_DISAGGREGATED},
    {3, "fsdp=1,dp=3", "tp=2", RF_PLACEMENT_COLOCATED},
    {4, "fsdp=2", "tp=2", RF_PLACEMENT_DISAGGREGATED},
    {4, "fsdp=1,tp=2", "tp=2", RF_PLACEMENT_DISAGGREGATED},
    {4, "fsdp=2", "tp=4", RF_PLACEMENT_COLOCATED},
    {4, "fsdp=2,tp=2", "tp=2,dp=2", RF_PLACEMENT_COLOCATED},
    {6, "fsdp=2,tp=2", "tp=2", RF_PLACEMENT_DISAGGREGATED},
    {6, "fsdp=2", "tp=2,dp=2", RF_PLACEMENT_DISAGGREGATED},
    {6, "fsdp=2,dp=3", "tp=2", RF_PLACEMENT_COLOCATED},
    {6, "fsdp=2,tp=2", "tp=2,dp=3", RF_PLACEMENT_COLOCATED},
};

static const uint64_t plan_digest = 0x1234abcdull;

static void make_layout(rf_layout *lay, const job *j) {
  rf_trainer_layout t;
  rf_rollout_layout r;
  ASSERT_OK(rf_trainer_layout_parse(j->trainer, &t));
  ASSERT_OK(rf_rollout_layout_parse(j->rollout, &r));
  t.style = RF_STYLE_TUNIX;
  t.order = RF_ORDER_HF;
  ASSERT_OK(rf_layout_init(lay, &tiny, &t, &r, j->placement));
}

static void describe(const rf_layout *lay, rf_job_desc *d) {
  memset(d, 0, sizeof *d);
  snprintf(d->model, sizeof d->model, "%s", tiny.name);
  d->model_digest = rf_model_digest(&tiny);
  rf_trainer_layout_format(&lay->trainer, d->trainer, sizeof d->trainer);
  rf_rollout_layout_format(&lay->rollout, d->rollout, sizeof d->rollout);
  snprintf(d->placement, sizeof d->placement, "%s",
           lay->placement == RF_PLACEMENT_COLOCATED ? "colocated" : "disaggregated");
  snprintf(d->plan, sizeof d->plan, "p2p");
  d->plan_digest = plan_digest;
}

static const job *first_job(void) {
  for (size_t i = 0; i < RF_ARRAY_LEN(jobs); i++)
    if (jobs[i].np == size)
      return &jobs[i];
  return NULL;
}

/* ---- stderr capture: what this rank logs between begin and end ----------------------- */

static int saved_stderr = -1;
static char capture_path[64];

static void capture_begin(void) {
  fflush(stderr);
  snprintf(capture_path, sizeof capture_path, "/tmp/test_control.XXXXXX");
  int fd = mkstemp(capture_path);
  ASSERT_GE(fd, 0);
  saved_stderr = dup(2);
  ASSERT_GE(saved_stderr, 0);
  ASSERT_GE(dup2(fd, 2), 0);
  close(fd);
}

/* Restores stderr and checks the captured text: exactly one line equal to `line` after the
 * "refit[R@host]: error: " prefix when line is given, nothing at all otherwise. */
static void capture_end(const char *line) {
  fflush(stderr);
  ASSERT_GE(dup2(saved_stderr, 2), 0);
  close(saved_stderr);
  char text[4096] = "";
  FILE *f = fopen(capture_path, "r");
  ASSERT_TRUE(f != NULL);
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  unlink(capture_path);
  fputs(text, stderr); /* keep the log visible in ctest's output */
  if (!line) {
    ASSERT_STR_EQ(text, "");
    return;
  }
  const char *body = strstr(text, ": error: ");
  ASSERT_TRUE(body != NULL);
  body += strlen(": error: ");
  char want[1024];
  snprintf(want, sizeof want, "%s\n", line);
  ASSERT_STR_EQ(body, want);
  ASSERT_TRUE(strchr(text, '\n') == text + n - 1); /* one line */
}

/* ---- (i) a world size that does not fit the layouts ---------------------------------- */

static void test_world_mismatch(void) {
  const job j = size == 4 ? (job){3, "fsdp=2", "tp=1", RF_PLACEMENT_DISAGGREGATED}
                          : (job){4, "fsdp=2", "tp=4", RF_PLACEMENT_COLOCATED};
  rf_layout lay;
  make_layout(&lay, &j);
  char want[256];
  snprintf(want, sizeof want,
           size == 4 ? "world size is 4 but trainer fsdp=2,tp=1 and rollout tp=1 "
                       "(disaggregated) need 3 ranks; run mpirun -np 3"
                     : "world size is %d but trainer fsdp=2,tp=1 and rollout tp=4 "
                       "(colocated) need 4 ranks; run mpirun -np 4",
           size);
  rf_control ctl;
  capture_begin();
  ASSERT_STATUS(rf_control_init(&ctl, &lay, 5.0), RF_ERR_WORLD);
  capture_end(rank == 0 ? want : NULL);
  ASSERT_TRUE(ctl.world == MPI_COMM_NULL);
  rf_control_free(&ctl);
  rf_layout_free(&lay);
}

/* ---- (ii) communicators and an agreeing handshake for every layout of N ranks ----------- */

static void expect_errors_return(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL)
    return;
  MPI_Errhandler eh;
  ASSERT_EQ(MPI_Comm_get_errhandler(comm, &eh), MPI_SUCCESS);
  ASSERT_TRUE(eh == MPI_ERRORS_RETURN);
  MPI_Errhandler_free(&eh);
}

/* Checks that `comm` holds exactly the world ranks first + i (i = its rank), in order. */
static void expect_members(MPI_Comm comm, int want_size, int first_world_rank) {
  int n = 0;
  ASSERT_EQ(MPI_Comm_size(comm, &n), MPI_SUCCESS);
  ASSERT_EQ(n, want_size);
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  for (int i = 0; i < n; i++) {
    int w = -1;
    MPI_Group_translate_ranks(group, 1, &i, world, &w);
    ASSERT_EQ(w, first_world_rank + i);
  }
  MPI_Group_free(&group);
  MPI_Group_free(&world);
}

static void test_valid(const job *j) {
  rf_layout lay;
  make_layout(&lay, j);
  ASSERT_EQ(lay.world_size, size);
  int t = lay.trainer.fsdp * lay.trainer.tp * lay.trainer.dp;
  int r = lay.rollout.tp * lay.rollout.dp;
  int coloc = j->placement == RF_PLACEMENT_COLOCATED;
  int want_tr = rank < t ? rank : -1;
  int want_rr = coloc ? (rank < r ? rank : -1) : (rank >= t ? rank - t : -1);

  rf_control ctl;
  capture_begin();
  ASSERT_OK(rf_control_init(&ctl, &lay, 10.0));
  ASSERT_EQ(ctl.world_rank, rank);
  ASSERT_EQ(ctl.world_size, size);
  ASSERT_EQ(ctl.trainer_rank, want_tr);
  ASSERT_EQ(ctl.rollout_rank, want_rr);
  ASSERT_EQ(ctl.trainer == MPI_COMM_NULL, want_tr < 0);
  ASSERT_EQ(ctl.rollout == MPI_COMM_NULL, want_rr < 0);
  if (want_tr >= 0) {
    expect_members(ctl.trainer, t, 0);
    int cr = -1;
    MPI_Comm_rank(ctl.trainer, &cr);
    ASSERT_EQ(cr, want_tr);
  }
  if (want_rr >= 0) {
    expect_members(ctl.rollout, r, coloc ? 0 : t);
    int cr = -1;
    MPI_Comm_rank(ctl.rollout, &cr);
    ASSERT_EQ(cr, want_rr);
  }
  expect_members(ctl.world, size, 0);
  ASSERT_GE(ctl.node_size, 1);
  ASSERT_LE(ctl.node_size, size);
  ASSERT_GE(ctl.node_rank, 0);
  ASSERT_LT(ctl.node_rank, ctl.node_size);
  expect_errors_return(ctl.world);
  expect_errors_return(ctl.trainer);
  expect_errors_return(ctl.rollout);
  expect_errors_return(ctl.node);

  rf_job_desc d;
  describe(&lay, &d);
  ASSERT_OK(rf_control_handshake(&ctl, &d));
  ASSERT_OK(rf_control_agree(&ctl, RF_OK));
  capture_end(NULL);
  rf_control_free(&ctl);
  ASSERT_TRUE(ctl.world == MPI_COMM_NULL && ctl.trainer == MPI_COMM_NULL);
  ASSERT_TRUE(ctl.rollout == MPI_COMM_NULL && ctl.node == MPI_COMM_NULL);
  rf_layout_free(&lay);
}

/* ---- (iii) handshakes where one rank disagrees ------------------------------------------ */

/* Runs a handshake in which rank `odd` uses `change` on its description; every rank must get
 * RF_ERR_MISMATCH and rank 0 (the trainer leader) must print `line`. */
static void expect_mismatch(const job *j, int odd, void (*change)(rf_job_desc *),
                            const char *line) {
  rf_layout lay;
  make_layout(&lay, j);
  rf_control ctl;
  ASSERT_OK(rf_control_init(&ctl, &lay, 10.0));
  rf_job_desc d;
  describe(&lay, &d);
  if (rank == odd)
    change(&d);
  capture_begin();
  ASSERT_STATUS(rf_control_handshake(&ctl, &d), RF_ERR_MISMATCH);
  capture_end(rank == 0 ? line : NULL);
  ASSERT_FALSE(ctl.timed_out);
  /* The control plane stays usable after a mismatch. */
  ASSERT_OK(rf_control_agree(&ctl, RF_OK));
  rf_control_free(&ctl);
  rf_layout_free(&lay);
}

static void change_plan_digest(rf_job_desc *d) { d->plan_digest = 0xdeadbeefull; }
static void change_model(rf_job_desc *d) { snprintf(d->model, sizeof d->model, "llama-3.2-1b"); }

static void test_mismatch(const job *j) {
  rf_layout lay;
  make_layout(&lay, j);
  int rl = rf_layout_rollout_world_rank(&lay, 0);
  ASSERT_EQ(rf_layout_trainer_world_rank(&lay, 0), 0);
  rf_layout_free(&lay);
  char want[512];

  /* The last rank computes another plan: the leaders name the field when the last rank is the
   * rollout leader; otherwise rank 0 names the odd rank out. */
  int last = size - 1;
  if (last == rl)
    snprintf(want, sizeof want,
             "handshake: trainer and rollout ranks computed different p2p "
             "plans (digest 000000001234abcd vs 00000000deadbeef); start every rank with the "
             "same options and the same refit build");
  else
    snprintf(want, sizeof want,
             "handshake: ranks disagree on the job (rank %d differs); start "
             "every rank with the same options",
             last);
  expect_mismatch(j, last, change_plan_digest, want);

  /* The rollout leader runs another model. Colocated, it is rank 0 itself: on 2 ranks the
   * tie goes to rank 0's view, on more the majority names rank 0. */
  if (rl != 0)
    snprintf(want, sizeof want,
             "handshake: trainer ranks run model 'tiny' but rollout ranks "
             "run 'llama-3.2-1b'; start every rank with the same --model");
  else
    snprintf(want, sizeof want,
             "handshake: ranks disagree on the job (rank %d differs); start "
             "every rank with the same options",
             size == 2 ? 1 : 0);
  expect_mismatch(j, rl, change_model, want);
}

/* ---- (iv) status agreement ------------------------------------------------------------- */

static void test_agree(const job *j) {
  rf_layout lay;
  make_layout(&lay, j);
  rf_control ctl;
  ASSERT_OK(rf_control_init(&ctl, &lay, 10.0));
  int last = size - 1;
  ASSERT_OK(rf_control_agree(&ctl, RF_OK));
  ASSERT_STATUS(rf_control_agree(&ctl, rank == last ? RF_ERR_IO : RF_OK), RF_ERR_IO);
  /* A usage error beats the runtime error it probably caused, wherever each happened. */
  ASSERT_STATUS(rf_control_agree(&ctl, rank == 0      ? RF_ERR_TIMEOUT
                                       : rank == last ? RF_ERR_USAGE
                                                      : RF_OK),
                RF_ERR_USAGE);
  ASSERT_STATUS(rf_control_agree(&ctl, rank == 0      ? RF_ERR_PEER
                                       : rank == last ? RF_ERR_IO
                                                      : RF_OK),
                RF_ERR_IO);
  ASSERT_STATUS(rf_control_agree(&ctl, rank == last ? RF_ERR_PEER : RF_OK), RF_ERR_PEER);
  ASSERT_STATUS(rf_control_agree(&ctl, RF_ERR_VERIFY), RF_ERR_VERIFY);
  ASSERT_OK(rf_control_agree(&ctl, RF_OK));
  rf_control_free(&ctl);
  rf_layout_free(&lay);
}

/* ---- failure notices and held errors ----------------------------------------------------- */

static rf_status never_done(void *ctx, int *done) {
  (void)ctx;
  *done = 0;
  return RF_OK;
}

/* Ranks 0 and last fail and notify: every rank's watched wait (the others' and each
 * notifier's, for the other's notice) ends with RF_ERR_PEER long before its 10 s, the
 * agreement gives the cause, after it a wait is no longer cut short, and rf_control_free
 * receives every notice (under mpirun, a notice left pending would hang MPI_Finalize). */
static void test_notice(const job *j) {
  rf_layout lay;
  make_layout(&lay, j);
  rf_control ctl;
  ASSERT_OK(rf_control_init(&ctl, &lay, 10.0));
  int notifier = rank == 0 || rank == size - 1;
  if (notifier) {
    rf_control_notify(&ctl, RF_ERR_IO);
    rf_control_notify(&ctl, RF_ERR_IO); /* a second call sends nothing */
  }
  double t0 = rf_now();
  ASSERT_STATUS(rf_poll(never_done, NULL, 10.0), RF_ERR_PEER);
  ASSERT_TRUE(rf_now() - t0 < 5.0);
  ASSERT_STATUS(rf_control_agree(&ctl, notifier ? RF_ERR_IO : RF_ERR_PEER), RF_ERR_IO);
  ASSERT_STATUS(rf_poll(never_done, NULL, 0.05), RF_ERR_TIMEOUT);
  rf_control_free(&ctl);
  ASSERT_TRUE(!ctl.timed_out);
  rf_layout_free(&lay);
}

/* Every rank but 0 runs out of memory alike: one line, from rank 1; then ranks failing
 * differently each say their own. */
static void test_hold(const job *j) {
  rf_layout lay;
  make_layout(&lay, j);
  rf_control ctl;
  ASSERT_OK(rf_control_init(&ctl, &lay, 10.0));
  capture_begin();
  rf_control_hold(&ctl);
  rf_status mine = rank == 0 ? RF_OK : rf_fail(RF_ERR_NOMEM, "no room on rank %d", rank);
  ASSERT_STATUS(rf_control_agree(&ctl, mine), RF_ERR_NOMEM);
  capture_end(rank == 1 ? "no room on rank 1" : NULL);
  capture_begin();
  rf_control_hold(&ctl);
  mine = rank == 0 ? rf_fail(RF_ERR_IO, "cannot read") : rank == 1 ? RF_OK : RF_ERR_PEER;
  ASSERT_STATUS(rf_control_agree(&ctl, mine), RF_ERR_IO);
  capture_end(rank == 0 ? "cannot read" : NULL);
  rf_control_free(&ctl);
  rf_layout_free(&lay);
}

/* ---- (v) the bounded collectives ------------------------------------------------------ */

static void test_collectives(const job *j) {
  rf_layout lay;
  make_layout(&lay, j);
  rf_control ctl;
  ASSERT_OK(rf_control_init(&ctl, &lay, 10.0));
  capture_begin();
  ASSERT_OK(rf_control_barrier(&ctl, ctl.world, "the test barrier"));
  int64_t mine = rank + 1, sum = -1, max = -1;
  ASSERT_OK(rf_control_reduce(&ctl, ctl.world, &mine, &sum, 1, MPI_INT64_T, MPI_SUM, "a sum"));
  if (rank == 0)
    ASSERT_EQ(sum, (int64_t)size * (size + 1) / 2);
  ASSERT_OK(rf_control_allreduce(&ctl, ctl.world, &mine, &max, 1, MPI_INT64_T, MPI_MAX, "a max"));
  ASSERT_EQ(max, size);
  int value = rank == 0 ? 4242 : -1;
  ASSERT_OK(rf_control_bcast(&ctl, ctl.world, &value, 1, MPI_INT, "a broadcast"));
  ASSERT_EQ(value, 4242);
  int *all = calloc((size_t)size * 2, sizeof *all), pair[2] = {rank, 10 * rank};
  ASSERT_TRUE(all != NULL);
  ASSERT_OK(
      rf_control_gather(&ctl, ctl.world, pair, rank == 0 ? all : NULL, 2, MPI_INT, "a gather"));
  for (int r = 0; rank == 0 && r < size; r++)
    ASSERT_TRUE(all[2 * r] == r && all[2 * r + 1] == 10 * r);
  memset(all, 0, (size_t)size * 2 * sizeof *all);
  ASSERT_OK(rf_control_allgather(&ctl, ctl.world, pair, all, 2, MPI_INT, "an allgather"));
  for (int r = 0; r < size; r++)
    ASSERT_TRUE(all[2 * r] == r && all[2 * r + 1] == 10 * r);
  /* Rank r sends r + 1 values, all equal to r; rank 0 lays them out back to back. */
  int counts[8], displs[8], sent[8], got[64] = {0}, total = 0;
  for (int r = 0; r < size; r++) {
    counts[r] = r + 1;
    displs[r] = total;
    total += r + 1;
  }
  for (int i = 0; i <= rank; i++)
    sent[i] = rank;
  ASSERT_OK(rf_control_gatherv(&ctl, ctl.world, sent, rank + 1, got, counts, displs, MPI_INT,
                               "a gatherv"));
  for (int r = 0; rank == 0 && r < size; r++)
    for (int i = 0; i < counts[r]; i++)
      ASSERT_EQ(got[displs[r] + i], r);
  for (int r = 0; r < size; r++)
    all[r] = 100 + r;
  int one = -1;
  ASSERT_OK(rf_control_scatter(&ctl, ctl.world, all, &one, 1, MPI_INT, "a scatter"));
  ASSERT_EQ(one, 100 + rank);
  capture_end(NULL);
  free(all);
  rf_control_free(&ctl);
  rf_layout_free(&lay);
}

/* A collective that one rank never joins: the others give up after the timeout with one line
 * that names what they waited for and the collective, and refuse the next one at once. */
static void test_collective_timeout(const job *j) {
  rf_layout lay;
  make_layout(&lay, j);
  rf_control ctl;
  ASSERT_OK(rf_control_init(&ctl, &lay, 10.0));
  ctl.timeout = 0.5;
  int last = size - 1;
  if (rank != last) {
    capture_begin();
    double t0 = rf_now();
    ASSERT_STATUS(rf_control_barrier(&ctl, ctl.world, "a barrier the last rank skips"),
                  RF_ERR_TIMEOUT);
    double waited = rf_now() - t0;
    capture_end("timed out after 0.5 s waiting for a barrier the last rank skips (MPI_Ibarrier); "
                "a peer rank is dead or stalled (raise --timeout if the job is just slow)");
    ASSERT_TRUE(waited >= 0.5 && waited < 1.5);
    ASSERT_TRUE(ctl.timed_out);
    int x = 0;
    t0 = rf_now();
    ASSERT_STATUS(rf_control_bcast(&ctl, ctl.world, &x, 1, MPI_INT, "anything"), RF_ERR_TIMEOUT);
    ASSERT_TRUE(rf_now() - t0 < 0.1);
  } else {
    /* Joins long after the others gave up, so that their barrier completes and MPI can
     * finalise: they progress it inside the blocking barrier below, which the last rank
     * enters only once its own side is complete. */
    sleep(3);
    MPI_Request req;
    ASSERT_EQ(MPI_Ibarrier(ctl.world, &req), MPI_SUCCESS);
    ASSERT_EQ(MPI_Wait(&req, MPI_STATUS_IGNORE), MPI_SUCCESS);
  }
  ASSERT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
  rf_layout_free(&lay);
}

/* ---- local work longer than the timeout ------------------------------------------------- */

/* The last rank works for three times the timeout, ticking; the others join the agreement at
 * once and wait it out without timing out, then all get the busy rank's status. */
static void test_busy(const job *j) {
  rf_layout lay;
  make_layout(&lay, j);
  rf_control ctl;
  ASSERT_OK(rf_control_init(&ctl, &lay, 10.0));
  ctl.timeout = 0.5;
  int busy = rank == size - 1;
  for (int round = 0; round < 2; round++) {
    double t0 = rf_now();
    rf_control_busy_begin(&ctl);
    while (busy && rf_now() - t0 < 1.5) {
      rf_control_busy(&ctl);
      usleep(20000);
    }
    rf_status local = busy && round == 1 ? RF_ERR_IO : RF_OK;
    ASSERT_STATUS(rf_control_agree_busy(&ctl, local), round == 1 ? RF_ERR_IO : RF_OK);
    ASSERT_TRUE(rf_now() - t0 >= 1.5);
    ASSERT_TRUE(!ctl.timed_out);
  }
  rf_control_free(&ctl);
  rf_layout_free(&lay);
}

/* ---- (vi) the quiet-log switch nests --------------------------------------------------- */

static void test_quiet_nests(void) {
  capture_begin();
  rf_log_push_quiet(1);
  rf_log_push_quiet(0); /* inside a quiet region: still quiet */
  RF_ERROR("never printed (inner)");
  rf_log_pop_quiet();
  RF_ERROR("never printed (outer)");
  rf_log_pop_quiet();
  rf_log_push_quiet(0);
  rf_log_push_quiet(1);
  RF_ERROR("never printed (quiet inside loud)");
  rf_log_pop_quiet(); /* restores the loud region, not "loud because 0 was pushed last" */
  RF_ERROR("printed once");
  rf_log_pop_quiet();
  rf_log_pop_quiet(); /* unmatched: ignored */
  capture_end("printed once");
}

/* ---- (vii) a wait that expires ----------------------------------------------------------- */

static void test_timeout(const job *j) {
  rf_layout lay;
  make_layout(&lay, j);
  rf_control ctl;
  /* Set up with a generous timeout: under the sanitizers ranks can arrive far apart. */
  ASSERT_OK(rf_control_init(&ctl, &lay, 10.0));
  ctl.timeout = 0.5;
  if (rank == 0) {
    int x = 0;
    MPI_Request req;
    ASSERT_EQ(MPI_Irecv(&x, 1, MPI_INT, 1, 77, ctl.world, &req), MPI_SUCCESS);
    capture_begin();
    double t0 = rf_now();
    ASSERT_STATUS(rf_control_wait(&ctl, &req, "a message rank 1 never sends"), RF_ERR_TIMEOUT);
    double waited = rf_now() - t0;
    capture_end("timed out after 0.5 s waiting for a message rank 1 never sends; a peer rank "
                "is dead or stalled (raise --timeout if the job is just slow)");
    ASSERT_TRUE(ctl.timed_out);
    ASSERT_TRUE(waited >= 0.5 && waited < 1.5);
    /* After a timeout the control plane refuses at once instead of waiting again. */
    t0 = rf_now();
    ASSERT_STATUS(rf_control_agree(&ctl, RF_OK), RF_ERR_TIMEOUT);
    ASSERT_TRUE(rf_now() - t0 < 0.1);
    /* A receive nobody matched can be cancelled, so this test can still finalise. */
    ASSERT_EQ(MPI_Cancel(&req), MPI_SUCCESS);
    ASSERT_EQ(MPI_Request_free(&req), MPI_SUCCESS);
  }
  rf_control_free(&ctl);
  rf_layout_free(&lay);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  rf_log_set_rank(rank, size);
  const job *first = first_job();
  if (size < 2 || !first) {
    if (rank == 0)
      fprintf(stderr, "test_control runs under mpirun -np 2, 3, 4 or 6, not %d\n", size);
    MPI_Finalize();
    return RF_TEST_SKIP;
  }
  ASSERT_OK(rf_model_load("tiny", &tiny));

  test_world_mismatch();
  for (size_t i = 0; i < RF_ARRAY_LEN(jobs); i++)
    if (jobs[i].np == size) {
      test_valid(&jobs[i]);
      test_mismatch(&jobs[i]);
    }
  test_agree(first);
  test_notice(first);
  test_hold(first);
  test_collectives(first);
  if (size <= 4) /* the same on every size; each run takes 3 s */
    test_busy(first);
  test_quiet_nests();
  test_timeout(first);            /* it leaves rank 0's control plane unusable */
  test_collective_timeout(first); /* last: its barrier stays pending on every rank but one */

  rf_model_free(&tiny);
  if (rank == 0)
    printf("test_control: %d ranks ok\n", size);
  MPI_Finalize();
  return 0;
}
