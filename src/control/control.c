/* control: the MPI control plane. Communicators for the trainer and rollout groups, the job
 * handshake, and status agreement, every wait bounded by the job's timeout.
 *
 * Collectives that can wait on another rank are nonblocking and finished by rf_control_wait,
 * so a dead or stalled peer turns into RF_ERR_TIMEOUT instead of a hang. Their buffers live
 * on the heap and are deliberately leaked after a timeout: MPI may still write into them
 * until the job is aborted. */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "control.h"

/* The point-to-point tag of the leaders' job exchange, on the private world duplicate. */
#define RF_TAG_HANDSHAKE 0x5246
/* The tag of a failure notice, on the notices' own duplicate. */
#define RF_TAG_NOTICE 0x4e4f

/* How much longer than the timeout the status agreement waits for a rank still in a wait of
 * its own, and how long a rank whose own wait has expired waits for the others: enough to
 * cancel its requests and join, small enough that every rank is out within timeout + 5 s. */
#define RF_AGREE_GRACE 2.0

static void comm_free(MPI_Comm *comm) {
  if (*comm != MPI_COMM_NULL)
    MPI_Comm_free(comm);
  *comm = MPI_COMM_NULL;
}

static rf_status comm_split(rf_control *ctl, int member, int key, MPI_Comm *out) {
  RF_MPI(MPI_Comm_split(ctl->world, member ? 0 : MPI_UNDEFINED, key, out));
  if (*out != MPI_COMM_NULL)
    RF_MPI(MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN));
  return RF_OK;
}

/* Checks that a group communicator numbers its ranks as the layout does (the split is keyed
 * by the layout's rank, so anything else is a bug, not a user error). */
static rf_status check_group(MPI_Comm comm, int want_rank, int want_size, const char *what) {
  if (comm == MPI_COMM_NULL)
    return RF_OK;
  int rank = -1, size = 0;
  RF_MPI(MPI_Comm_rank(comm, &rank));
  RF_MPI(MPI_Comm_size(comm, &size));
  if (rank != want_rank || size != want_size)
    return rf_fail(RF_ERR_INTERNAL, "%s communicator has rank %d of %d, layout says %d of %d", what,
                   rank, size, want_rank, want_size);
  return RF_OK;
}

/* ---- failure notices (control.h, rf_control_notify) ----------------------------------------
 * The notices travel on a duplicate of the world of their own, so that a notice can never
 * match a receive of the handshake or a transport, and each rank keeps one receive posted for
 * the first notice. The watch costs a watched wait one MPI_Test per turn. */

/* Nonzero while the control plane itself waits: its collectives are not cut short. */
static int control_waiting;

static rf_status notice_watch(void *ctx, int *done) {
  rf_control *ctl = ctx;
  *done = 0;
  if (control_waiting)
    return RF_OK;
  if (!ctl->peer_failed) {
    int arrived = 0;
    RF_MPI(MPI_Test(&ctl->notice_recv, &arrived, MPI_STATUS_IGNORE));
    if (!arrived)
      return RF_OK;
    ctl->peer_failed = 1;
    RF_INFO("stopping: rank %d failed (%s)", ctl->notice_in[1],
            rf_status_text((rf_status)ctl->notice_in[0]));
  }
  return RF_ERR_PEER;
}

/* The last step of rf_control_init: ctl->notice is set only once it has succeeded, since
 * rf_control_free drains the notices with a collective that only a whole world may run. */
static rf_status notices_open(rf_control *ctl) {
  MPI_Comm comm = MPI_COMM_NULL;
  RF_MPI(MPI_Comm_dup(ctl->world, &comm));
  int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS)
    rc = MPI_Irecv(ctl->notice_in, 2, MPI_INT, MPI_ANY_SOURCE, RF_TAG_NOTICE, comm,
                   &ctl->notice_recv);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&comm);
    return rf_mpi_failed(rc, "MPI_Irecv(failure notice)", __FILE__, __LINE__);
  }
  ctl->notice = comm;
  rf_poll_set_watch(notice_watch, ctl);
  return RF_OK;
}

void rf_control_notify(rf_control *ctl, rf_status st) {
  if (st == RF_OK || st == RF_ERR_PEER || st == RF_ERR_TIMEOUT || ctl->notice == MPI_COMM_NULL ||
      ctl->notice_sends || ctl->timed_out)
    return;
  ctl->notice_sends = malloc((size_t)ctl->world_size * sizeof *ctl->notice_sends);
  if (!ctl->notice_sends)
    return; /* the peers wait their timeout instead: no worse than without notices */
  ctl->notice_out[0] = (int)st;
  ctl->notice_out[1] = ctl->world_rank;
  for (int r = 0; r < ctl->world_size; r++) {
    ctl->notice_sends[r] = MPI_REQUEST_NULL;
    /* A send that fails leaves that peer to its timeout; the cause is this rank's line. */
    if (r != ctl->world_rank)
      MPI_Isend(ctl->notice_out, 2, MPI_INT, r, RF_TAG_NOTICE, ctl->notice, &ctl->notice_sends[r]);
  }
}

static rf_status wait_bounded(rf_control *ctl, MPI_Request *req, const char *what, double seconds);

/* Receives every notice sent to this rank and completes this rank's sends, so that none is
 * pending at MPI_Finalize: the ranks first add up how many of them sent notices. */
static rf_status notices_drain(rf_control *ctl) {
  int *count = rf_malloc(2 * sizeof *count, "notice count");
  if (!count)
    return RF_ERR_NOMEM;
  count[0] = ctl->notice_sends != NULL;
  MPI_Request req = MPI_REQUEST_NULL;
  RF_MPI(MPI_Iallreduce(count, count + 1, 1, MPI_INT, MPI_SUM, ctl->notice, &req));
  RF_TRY(
      wait_bounded(ctl, &req, "the other ranks' failure notices (MPI_Iallreduce)", ctl->timeout));
  int expected = count[1] - count[0], got = ctl->peer_failed;
  free(count);
  if (!ctl->peer_failed) {
    /* A notice may have arrived without a watched wait to see it. */
    MPI_Status status;
    int cancelled = 0;
    RF_MPI(MPI_Cancel(&ctl->notice_recv));
    RF_MPI(MPI_Wait(&ctl->notice_recv, &status));
    RF_MPI(MPI_Test_cancelled(&status, &cancelled));
    got = !cancelled;
  }
  for (; got < expected; got++) {
    RF_MPI(MPI_Irecv(ctl->notice_in, 2, MPI_INT, MPI_ANY_SOURCE, RF_TAG_NOTICE, ctl->notice, &req));
    RF_TRY(wait_bounded(ctl, &req, "the other ranks' failure notices", ctl->timeout));
  }
  for (int r = 0; ctl->notice_sends && r < ctl->world_size; r++)
    RF_TRY(wait_bounded(ctl, &ctl->notice_sends[r], "a rank to take this rank's failure notice",
                        ctl->timeout));
  return RF_OK;
}

/* Stops watching; after a timeout the notices stay pending (the job is aborted). */
static void notices_close(rf_control *ctl) {
  if (ctl->notice == MPI_COMM_NULL)
    return;
  rf_poll_set_watch(NULL, NULL);
  if (!ctl->timed_out && notices_drain(ctl) != RF_OK)
    ctl->timed_out = 1; /* something is still pending: finalising could hang */
  if (ctl->timed_out)
    return;
  free(ctl->notice_sends);
  ctl->notice_sends = NULL;
  comm_free(&ctl->notice);
}

static rf_status create_comms(rf_control *ctl, const rf_layout *lay, MPI_Comm base) {
  /* Every split below is a blocking collective; a bounded nonblocking duplicate first proves
   * that every rank has arrived, so the splits cannot wait on a rank that never comes. */
  MPI_Request req = MPI_REQUEST_NULL;
  RF_MPI(MPI_Comm_idup(base, &ctl->world, &req));
  RF_TRY(rf_control_wait(ctl, &req, "all ranks to start (MPI_Comm_idup)"));
  RF_MPI(MPI_Comm_set_errhandler(ctl->world, MPI_ERRORS_RETURN));

  rf_layout_roles(lay, ctl->world_rank, &ctl->trainer_rank, &ctl->rollout_rank);
  RF_TRY(comm_split(ctl, ctl->trainer_rank >= 0, ctl->trainer_rank, &ctl->trainer));
  RF_TRY(comm_split(ctl, ctl->rollout_rank >= 0, ctl->rollout_rank, &ctl->rollout));
  RF_TRY(check_group(ctl->trainer, ctl->trainer_rank, lay->trainer_ranks, "trainer"));
  RF_TRY(check_group(ctl->rollout, ctl->rollout_rank, lay->rollout_ranks, "rollout"));

  RF_MPI(MPI_Comm_split_type(ctl->world, MPI_COMM_TYPE_SHARED, ctl->world_rank, MPI_INFO_NULL,
                             &ctl->node));
  RF_MPI(MPI_Comm_set_errhandler(ctl->node, MPI_ERRORS_RETURN));
  RF_MPI(MPI_Comm_rank(ctl->node, &ctl->node_rank));
  RF_MPI(MPI_Comm_size(ctl->node, &ctl->node_size));
  return notices_open(ctl);
}

rf_status rf_control_init(rf_control *ctl, const rf_layout *lay, double timeout) {
  return rf_control_init_on(ctl, lay, timeout, MPI_COMM_WORLD);
}

rf_status rf_control_init_on(rf_control *ctl, const rf_layout *lay, double timeout, MPI_Comm base) {
  memset(ctl, 0, sizeof *ctl);
  ctl->world = ctl->trainer = ctl->rollout = ctl->node = ctl->notice = MPI_COMM_NULL;
  ctl->notice_recv = ctl->tick = MPI_REQUEST_NULL;
  ctl->trainer_rank = ctl->rollout_rank = -1;
  ctl->timeout = timeout;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return rf_fail(RF_ERR_INTERNAL, "the control plane needs MPI; call MPI_Init first");
  if (!(timeout > 0))
    return rf_fail(RF_ERR_CONFIG, "timeout must be positive, not %g s", timeout);
  RF_MPI(MPI_Comm_rank(base, &ctl->world_rank));
  RF_MPI(MPI_Comm_size(base, &ctl->world_size));

  /* Every rank sees the same sizes and so reaches the same verdict without talking; one line
   * from rank 0 is enough. */
  if (ctl->world_size != lay->world_size) {
    rf_log_push_quiet(ctl->world_rank != 0);
    rf_status st =
        rf_layout_check_world(&lay->trainer, &lay->rollout, lay->placement, ctl->world_size);
    rf_log_pop_quiet();
    return st;
  }

  rf_status st = create_comms(ctl, lay, base);
  if (st != RF_OK)
    rf_control_free(ctl);
  return st;
}

void rf_control_free(rf_control *ctl) {
  notices_close(ctl);
  /* After a timeout a collective may still be pending on these communicators; freeing them
   * could block, and the job is about to be aborted anyway. */
  if (!ctl->timed_out && !ctl->borrowed) {
    comm_free(&ctl->node);
    comm_free(&ctl->rollout);
    comm_free(&ctl->trainer);
    comm_free(&ctl->world);
  }
  ctl->world = ctl->trainer = ctl->rollout = ctl->node = MPI_COMM_NULL;
}

void rf_control_attach(rf_control *ctl, MPI_Comm world, double timeout) {
  memset(ctl, 0, sizeof *ctl);
  ctl->world = world;
  ctl->trainer = ctl->rollout = ctl->node = ctl->notice = MPI_COMM_NULL;
  ctl->notice_recv = ctl->tick = MPI_REQUEST_NULL;
  ctl->trainer_rank = ctl->rollout_rank = -1;
  ctl->timeout = timeout;
  ctl->borrowed = 1;
  MPI_Comm_rank(world, &ctl->world_rank);
  MPI_Comm_size(world, &ctl->world_size);
  ctl->node_size = 1;
}

static rf_status request_done(void *req, int *done) {
  RF_MPI(MPI_Test(req, done, MPI_STATUS_IGNORE));
  return RF_OK;
}

static rf_status wait_bounded(rf_control *ctl, MPI_Request *req, const char *what, double seconds) {
  /* Once one wait has expired the peers are gone or MPI is wedged: waiting again would only
   * add another full timeout before the abort. */
  if (ctl->timed_out)
    return RF_ERR_TIMEOUT;
  control_waiting++;
  rf_status st = rf_poll(request_done, req, seconds);
  control_waiting--;
  if (st != RF_ERR_TIMEOUT)
    return st;
  ctl->timed_out = 1;
  return rf_timeout_error(seconds, what, NULL);
}

rf_status rf_control_wait(rf_control *ctl, MPI_Request *req, const char *what) {
  return wait_bounded(ctl, req, what, ctl->timeout);
}

/* ---- status agreement --------------------------------------------------------------------
 * Each rank contributes three ints, combined with MPI_MAX:
 *   [0] key(status) = rank of its severity * 256 + status: the maximum is the worst status
 *       by rf_status_worse (ties between equally severe statuses go to the higher enum value,
 *       which every rank computes the same way);
 *   [1] -key(status) on failing ranks, INT_MIN on others: the maximum is minus the mildest
 *       failure, so [0] == -[1] says every failing rank failed the same way;
 *   [2] -world rank on failing ranks, INT_MIN on others: minus the lowest failing rank.
 * Every rank then returns the worst status, so all of them exit with the same code. */

/* The number of statuses strictly less severe than st: a severity rank that follows
 * rf_status_worse without copying its table. */
static int severity_rank(rf_status st) {
  int below = 0;
  for (int s = 0; s < RF_STATUS_COUNT; s++)
    if ((rf_status)s != st && rf_status_worse((rf_status)s, st) == st)
      below++;
  return below;
}

static int status_key(rf_status st) { return severity_rank(st) * 256 + (int)st; }

void rf_control_hold(rf_control *ctl) {
  ctl->held[0] = '\0';
  ctl->holding = 1;
  rf_log_capture(ctl->held, sizeof ctl->held);
}

/* Ends a hold: prints the held line unless `quiet`. */
static void release_held(rf_control *ctl, int quiet) {
  if (!ctl->holding)
    return;
  rf_log_capture(NULL, 0);
  ctl->holding = 0;
  if (!quiet && ctl->held[0])
    RF_ERROR("%s", ctl->held);
}

rf_status rf_control_agree(rf_control *ctl, rf_status local) {
  if (ctl->timed_out) {
    release_held(ctl, 0);
    return RF_ERR_TIMEOUT;
  }
  /* The capture ends before anything here can fail, so that its own line is printed; the held
   * line waits for the outcome. */
  if (ctl->holding)
    rf_log_capture(NULL, 0);
  int *buf = rf_malloc(6 * sizeof *buf, "status agreement");
  if (!buf) {
    release_held(ctl, 0);
    return RF_ERR_NOMEM;
  }
  int failed = local != RF_OK;
  buf[0] = status_key(local);
  buf[1] = failed ? -buf[0] : INT_MIN;
  buf[2] = failed ? -ctl->world_rank : INT_MIN;
  MPI_Request req = MPI_REQUEST_NULL;
  rf_status st = RF_OK;
  RF_MPI_GOTO(MPI_Iallreduce(buf, buf + 3, 3, MPI_INT, MPI_MAX, ctl->world, &req), failed);
  /* A rank still inside a data wait joins at most one timeout later, so the others wait that
   * long plus a grace. A rank whose own wait has just expired has already waited its timeout:
   * it gives the others only the grace, so that a peer that never comes (stopped, dead) ends
   * the job within timeout + grace instead of twice the timeout. */
  double bound = local == RF_ERR_TIMEOUT ? RF_AGREE_GRACE : ctl->timeout + RF_AGREE_GRACE;
  st = wait_bounded(ctl, &req, "the other ranks' status (MPI_Iallreduce)", bound);
  if (st != RF_OK) {
    release_held(ctl, 0);
    return st; /* buf is leaked on purpose: the reduction may still write into it */
  }
  /* Every failing rank failed alike: one line, from the lowest of them. Where none failed the
   * reductions hold INT_MIN, which must not be negated. */
  int any_failed = buf[4] != INT_MIN;
  int alike = any_failed && buf[3] == -buf[4], lowest = any_failed ? -buf[5] : -1;
  release_held(ctl, alike && lowest != ctl->world_rank);
  rf_status worst = (rf_status)(buf[3] % 256);
  /* The job is ending: the notices have done their work, and the waits that end it (the
   * transport's abandon) must not be cut short by one arriving late. */
  if (worst != RF_OK && ctl->notice != MPI_COMM_NULL)
    rf_poll_set_watch(NULL, NULL);
  /* The failing rank said what went wrong where it happened; this only says why this rank
   * stops too, for REFIT_LOG=info. */
  if (worst != RF_OK && worst != local)
    RF_INFO("stopping: rank %d failed (%s)%s", lowest, rf_status_text(worst),
            alike ? "" : ", and other ranks failed differently");
  st = worst;
  free(buf);
  return st;
failed:
  release_held(ctl, 0);
  free(buf);
  return st;
}

/* ---- handshake --------------------------------------------------------------------------- */

static void hash_str(XXH3_state_t *h, const char *s, size_t cap) {
  size_t n = strnlen(s, cap);
  XXH3_64bits_update(h, s, n);
  XXH3_64bits_update(h, "", 1); /* a separator, so "ab"+"c" and "a"+"bc" differ */
}

static void hash_u64(XXH3_state_t *h, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++)
    b[i] = (unsigned char)(v >> (8 * i));
  XXH3_64bits_update(h, b, sizeof b);
}

/* Hashes the fields, never the struct's bytes: padding and the bytes after a string's
 * terminator are not part of the job. */
static uint64_t job_digest(const rf_job_desc *d) {
  XXH3_state_t *h = XXH3_createState();
  if (!h)
    return 0;
  XXH3_64bits_reset(h);
  hash_str(h, d->model, sizeof d->model);
  hash_u64(h, d->model_digest);
  hash_str(h, d->trainer, sizeof d->trainer);
  hash_str(h, d->rollout, sizeof d->rollout);
  hash_str(h, d->placement, sizeof d->placement);
  hash_str(h, d->plan, sizeof d->plan);
  hash_u64(h, d->plan_digest);
  uint64_t v = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  return v;
}

static void terminate_strings(rf_job_desc *d) {
  d->model[sizeof d->model - 1] = '\0';
  d->trainer[sizeof d->trainer - 1] = '\0';
  d->rollout[sizeof d->rollout - 1] = '\0';
  d->placement[sizeof d->placement - 1] = '\0';
  d->plan[sizeof d->plan - 1] = '\0';
}

/* The fields of a job description in the order the handshake names them, with the words of
 * the line that names one: a string field as "trainer ranks <verb> <noun> 'A' but rollout
 * ranks <verb> 'B'; start every rank with the same <option>", a digest as "trainer and rollout
 * ranks <before><name><after> (digest A vs B); <remedy>", where name is the string the digest
 * belongs to. */
typedef struct {
  size_t offset;      /* of the field in rf_job_desc */
  size_t name_offset; /* digests only: the string field the digest belongs to */
  int digest;         /* a uint64_t digest rather than a string */
  const char *verb, *noun, *option;
  const char *before, *after, *remedy;
} job_field;

#define STRING_FIELD(f, verb, noun, option)                                                        \
  { offsetof(rf_job_desc, f), 0, 0, verb, noun, option, NULL, NULL, NULL }
#define DIGEST_FIELD(f, name, before, after, remedy)                                               \
  {                                                                                                \
    offsetof(rf_job_desc, f), offsetof(rf_job_desc, name), 1, NULL, NULL, NULL, before, after,     \
        remedy                                                                                     \
  }

static const job_field job_fields[] = {
    STRING_FIELD(model, "run", "model", "--model"),
    DIGEST_FIELD(model_digest, model, "both run model '", "' but the model files differ",
                 "give every rank the same model files"),
    STRING_FIELD(trainer, "use", "trainer layout", "--trainer"),
    STRING_FIELD(rollout, "use", "rollout layout", "--rollout"),
    STRING_FIELD(placement, "use", "placement", "--placement"),
    STRING_FIELD(plan, "use", "plan", "--plan"),
    DIGEST_FIELD(plan_digest, plan, "computed different ", " plans",
                 "start every rank with the same options and the same refit build"),
};

/* Compares the trainer leader's description with the rollout leader's; returns 1 and writes
 * one line naming the first field that differs, or 0 when they are equal. */
static int describe_difference(const rf_job_desc *t, const rf_job_desc *r, char *msg, size_t len) {
  const char *tb = (const char *)t, *rb = (const char *)r;
  for (size_t i = 0; i < RF_ARRAY_LEN(job_fields); i++) {
    const job_field *f = &job_fields[i];
    if (f->digest) {
      uint64_t a, b;
      memcpy(&a, tb + f->offset, sizeof a);
      memcpy(&b, rb + f->offset, sizeof b);
      if (a == b)
        continue;
      snprintf(msg, len, "trainer and rollout ranks %s%s%s (digest %016llx vs %016llx); %s",
               f->before, tb + f->name_offset, f->after, (unsigned long long)a,
               (unsigned long long)b, f->remedy);
      return 1;
    }
    if (strcmp(tb + f->offset, rb + f->offset) == 0)
      continue;
    snprintf(msg, len,
             "trainer ranks %s %s '%s' but rollout ranks %s '%s'; start every rank with the "
             "same %s",
             f->verb, f->noun, tb + f->offset, f->verb, rb + f->offset, f->option);
    return 1;
  }
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The lowest rank whose digest differs from the most common one (ties go to the digest of
 * `self`, the logging rank, so that a 1:1 split names the other rank). */
static int odd_rank_out(const uint64_t *digests, int n, int self) {
  uint64_t *sorted = rf_malloc((size_t)n * sizeof *sorted, "digests");
  if (!sorted)
    return -1;
  memcpy(sorted, digests, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_u64);
  uint64_t mode = digests[self];
  int best = 0;
  for (int i = 0; i < n; i++)
    if (sorted[i] == digests[self])
      best++;
  for (int i = 0; i < n;) {
    int j = i;
    while (j < n && sorted[j] == sorted[i])
      j++;
    if (j - i > best) {
      best = j - i;
      mode = sorted[i];
    }
    i = j;
  }
  free(sorted);
  for (int i = 0; i < n; i++)
    if (digests[i] != mode)
      return i;
  return -1;
}

/* What the handshake keeps on the heap (see the note at the top of the file). */
typedef struct {
  uint64_t sum_in[4], sum_out[4];
  rf_job_desc mine, theirs;
  uint64_t digest;
  uint64_t *digests; /* [world_size], on the trainer leader */
} handshake_bufs;

/* The slow path, taken only when the digests differ: the leaders exchange descriptions and
 * the trainer leader gathers every digest, so that it can say what differs in one line.
 * Returns the local status to agree on: RF_ERR_MISMATCH unless a wait failed. */
static rf_status explain_mismatch(rf_control *ctl, handshake_bufs *b, int tl, int rl) {
  int me = ctl->world_rank;
  if (me == tl) {
    b->digests = rf_calloc((size_t)ctl->world_size, sizeof *b->digests, "digests");
    if (!b->digests)
      return RF_ERR_NOMEM; /* the gather below would now hang the others until the timeout */
  }
  MPI_Request gather = MPI_REQUEST_NULL, xfer[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  RF_MPI(MPI_Igather(&b->digest, 1, MPI_UINT64_T, b->digests, 1, MPI_UINT64_T, tl, ctl->world,
                     &gather));
  int exchange = tl != rl && (me == tl || me == rl);
  if (exchange) {
    int peer = me == tl ? rl : tl;
    RF_MPI(MPI_Irecv(&b->theirs, (int)sizeof b->theirs, MPI_BYTE, peer, RF_TAG_HANDSHAKE,
                     ctl->world, &xfer[0]));
    RF_MPI(MPI_Isend(&b->mine, (int)sizeof b->mine, MPI_BYTE, peer, RF_TAG_HANDSHAKE, ctl->world,
                     &xfer[1]));
    RF_TRY(rf_control_wait(ctl, &xfer[0], "the other leader's job description"));
    RF_TRY(rf_control_wait(ctl, &xfer[1], "the other leader to take this job description"));
    terminate_strings(&b->theirs);
  }
  RF_TRY(rf_control_wait(ctl, &gather, "every rank's job digest"));

  char msg[1024];
  if (exchange && me == tl && describe_difference(&b->mine, &b->theirs, msg, sizeof msg))
    RF_ERROR("handshake: %s", msg);
  else if (exchange && me == rl && describe_difference(&b->theirs, &b->mine, msg, sizeof msg))
    RF_INFO("handshake: %s", msg); /* the trainer leader says it as an error */
  else if (me == tl)
    RF_ERROR("handshake: ranks disagree on the job (rank %d differs); start every rank with "
             "the same options",
             odd_rank_out(b->digests, ctl->world_size, me));
  return RF_ERR_MISMATCH;
}

rf_status rf_control_handshake(rf_control *ctl, const rf_job_desc *mine) {
  if (ctl->timed_out)
    return RF_ERR_TIMEOUT;
  handshake_bufs *b = rf_calloc(1, sizeof *b, "handshake buffers");
  if (!b)
    return RF_ERR_NOMEM;
  b->mine = *mine;
  terminate_strings(&b->mine);
  b->digest = job_digest(&b->mine);

  /* One reduction answers two questions: max(d) == ~max(~d) exactly when every digest is
   * equal, and the leaders' world ranks (+1, so that 0 means "not me") come along. */
  b->sum_in[0] = b->digest;
  b->sum_in[1] = ~b->digest;
  b->sum_in[2] = ctl->trainer_rank == 0 ? (uint64_t)ctl->world_rank + 1 : 0;
  b->sum_in[3] = ctl->rollout_rank == 0 ? (uint64_t)ctl->world_rank + 1 : 0;
  rf_status st = rf_control_allreduce(ctl, ctl->world, b->sum_in, b->sum_out, 4, MPI_UINT64_T,
                                      MPI_MAX, "every rank's job digest");
  if (st != RF_OK)
    return st; /* b is leaked on purpose */

  if (b->sum_out[0] == ~b->sum_out[1]) {
    st = RF_OK; /* every rank computed the same, so every rank returns the same */
    goto done;
  }
  int tl = (int)b->sum_out[2] - 1, rl = (int)b->sum_out[3] - 1;
  if (tl < 0 || rl < 0) {
    /* Only possible when no rank has a leader's role; every rank sees the same sums. */
    if (ctl->world_rank == 0)
      RF_ERROR("handshake: ranks disagree on the job and no rank is the %s leader; start "
               "every rank with the same options",
               tl < 0 ? "trainer" : "rollout");
    st = RF_ERR_MISMATCH;
    goto done;
  }
  st = explain_mismatch(ctl, b, tl, rl);
  /* Any other outcome may have left a request posted on b: keep it (see the top note). */
  int posted = st != RF_ERR_MISMATCH;
  st = rf_control_agree(ctl, st);
  if (posted)
    return st;
done:
  free(b->digests);
  free(b);
  return st;
}
