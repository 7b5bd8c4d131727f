/* control: the MPI control plane. It splits the world into trainer and rollout groups, runs
 * the handshake in which both groups agree on model, layouts and plan, and agrees on a status
 * so that an error on any rank ends every rank without a hang.
 *
 * Every communicator it creates uses MPI_ERRORS_RETURN, and every wait it makes is bounded by
 * the timeout given at init: a dead or silent peer gives RF_ERR_TIMEOUT, never a hang. After
 * a timeout, collectives may still be pending; the caller (main) must then abort the job
 * instead of finalising. */
#ifndef RF_CONTROL_H
#define RF_CONTROL_H

#include <mpi.h>
#include <stdint.h>

#include "layout/layout.h"

typedef struct {
  MPI_Comm world;   /* duplicate of MPI_COMM_WORLD (or of the library job's communicator) */
  MPI_Comm trainer; /* trainer ranks, MPI_COMM_NULL on ranks without a trainer role */
  MPI_Comm rollout; /* rollout ranks, MPI_COMM_NULL on ranks without a rollout role */
  MPI_Comm node;    /* ranks sharing this node (MPI_COMM_TYPE_SHARED) */
  int world_rank, world_size;
  int node_rank, node_size;
  int trainer_rank, rollout_rank; /* -1 where the rank has no such role */
  double timeout;                 /* seconds, for every wait */
  int timed_out;                  /* set once a wait expired: MPI state is unusable */
  int borrowed;                   /* world is the caller's (rf_control_attach): never freed */
  /* Failure notices (rf_control_notify): their own duplicate of the world, the receive posted
   * for the first one and what it brings (status, world rank), this rank's sends. */
  MPI_Comm notice;
  MPI_Request notice_recv;
  MPI_Request *notice_sends; /* [world_size], once this rank has sent its notices */
  int notice_in[2], notice_out[2];
  int peer_failed; /* a notice arrived: every watched wait now ends with RF_ERR_PEER */
  int holding;     /* rf_control_hold: this rank's error line is held in `held` */
  char held[1024];
  /* rf_control_busy: the one tick this rank may have posted, its buffers, when it was posted
   * and whether this rank is in local work */
  MPI_Request tick;
  int tick_in, tick_out, busy;
  double tick_last;
} rf_control;

/* What each rank believes the job is; the handshake compares these. */
typedef struct {
  char model[128];
  uint64_t model_digest; /* names and shapes of the logical tensors */
  char trainer[64];      /* formatted trainer layout */
  char rollout[64];      /* formatted rollout layout */
  char placement[32];
  char plan[16];
  uint64_t plan_digest;
} rf_job_desc;

/* Checks the world size against the layouts (every rank decides the same; rank 0 prints the
 * error) and creates the communicators. `timeout` bounds every later wait. */
rf_status rf_control_init(rf_control *ctl, const rf_layout *lay, double timeout);
/* The same over `base` in place of MPI_COMM_WORLD (the library's jobs, include/refit.h): its
 * ranks are the job's world ranks. */
rf_status rf_control_init_on(rf_control *ctl, const rf_layout *lay, double timeout, MPI_Comm base);
void rf_control_free(rf_control *ctl);

/* A control plane over an existing communicator, without roles or a node communicator, for
 * the collectives and status agreement between jobs (a sweep's skipped combination, a usage
 * error). It neither duplicates nor frees `world`; the caller sets its error handler. */
void rf_control_attach(rf_control *ctl, MPI_Comm world, double timeout);

/* The handshake: the trainer and rollout leaders exchange their job descriptions and name the
 * first field that differs; every rank also checks that its description's digest equals
 * everyone else's. Returns RF_OK on every rank, or the same error on every rank. */
rf_status rf_control_handshake(rf_control *ctl, const rf_job_desc *mine);

/* Status agreement: every rank contributes its local status and every rank gets the worst
 * one (rf_status_worse), so all ranks exit with the same code. A rank waits the timeout plus a
 * grace of 2 s, so that a rank whose data wait is about to time out still joins; a rank whose
 * local status is RF_ERR_TIMEOUT has waited its timeout already and waits only the grace. So
 * when a peer stops for good, every rank is out within timeout + 5 s. */
rf_status rf_control_agree(rf_control *ctl, rf_status local);

/* Errors that several ranks may hit alike (an allocation that does not fit): from
 * rf_control_hold to the next rf_control_agree, this rank's error line is held back instead of
 * printed, and the agreement prints it once: where every failing rank failed with the same
 * status, only the lowest failing rank prints its line; where they failed differently, each
 * prints its own. Only for local work: a wait inside would hold its timeout line too. */
void rf_control_hold(rf_control *ctl);

/* Local work of any length between two agreements (control_busy.c): a rank calls
 * rf_control_busy_begin before it, rf_control_busy (a void * callback, rf_engine_set_progress)
 * often during it, and rf_control_agree_busy, on every rank, instead of rf_control_agree
 * after it. Busy ranks tick at least once a second (or every quarter of the timeout), so the
 * ranks that finished first wait without their timeout running out on a peer that is still
 * working; a peer that stops ticking for a timeout still ends the job. */
void rf_control_busy_begin(rf_control *ctl);
void rf_control_busy(void *ctl);
rf_status rf_control_agree_busy(rf_control *ctl, rf_status local);

/* Failure notices. A rank that fails where its peers may be waiting for its messages (inside
 * an iteration) calls rf_control_notify before it joins the status agreement: it sends its
 * status to every other rank. Every wait through rf_poll other than the control plane's own
 * (the transports' data waits) also tests for a notice, and once one has arrived it returns
 * RF_ERR_PEER at once, without a line: the failing rank has said what went wrong, and the
 * agreement that follows gives every rank its status. The control plane's own waits are not
 * cut short: they belong to collectives every rank reaches. rf_control_free receives every
 * notice sent, so none is left pending at MPI_Finalize. RF_OK, RF_ERR_PEER and RF_ERR_TIMEOUT
 * (a rank that timed out has waited already) send nothing, nor does a second call. */
void rf_control_notify(rf_control *ctl, rf_status st);

/* Waits for a request with the control plane's timeout; on expiry sets ctl->timed_out and
 * returns RF_ERR_TIMEOUT after logging which operation (`what`) was waiting. Every wait of the
 * control plane, the collectives below included, is this one. */
rf_status rf_control_wait(rf_control *ctl, MPI_Request *req, const char *what);

/* Bounded collectives: each posts the nonblocking form of the MPI collective over `comm` (one
 * of ctl's communicators; the root is its rank 0) and finishes it with rf_control_wait, whose
 * timeout line reads "waiting for <what> (MPI_Ixxx)". After a timeout they return
 * RF_ERR_TIMEOUT at once, and the buffers must stay allocated: MPI may still write into them
 * until the job is aborted. */
rf_status rf_control_barrier(rf_control *ctl, MPI_Comm comm, const char *what);
rf_status rf_control_reduce(rf_control *ctl, MPI_Comm comm, const void *in, void *out, int count,
                            MPI_Datatype type, MPI_Op op, const char *what);
rf_status rf_control_allreduce(rf_control *ctl, MPI_Comm comm, const void *in, void *out, int count,
                               MPI_Datatype type, MPI_Op op, const char *what);
rf_status rf_control_bcast(rf_control *ctl, MPI_Comm comm, void *buf, int count, MPI_Datatype type,
                           const char *what);
/* `count` elements from every rank; `out` (root only) holds count * size of them. */
rf_status rf_control_gather(rf_control *ctl, MPI_Comm comm, const void *in, void *out, int count,
                            MPI_Datatype type, const char *what);
/* `count` elements from this rank; on the root, counts[r] from rank r at displs[r]. */
rf_status rf_control_gatherv(rf_control *ctl, MPI_Comm comm, const void *in, int count, void *out,
                             const int *counts, const int *displs, MPI_Datatype type,
                             const char *what);
rf_status rf_control_allgather(rf_control *ctl, MPI_Comm comm, const void *in, void *out, int count,
                               MPI_Datatype type, const char *what);
/* The root's `in` holds count * size elements; rank r gets the r-th count of them. */
rf_status rf_control_scatter(rf_control *ctl, MPI_Comm comm, const void *in, void *out, int count,
                             MPI_Datatype type, const char *what);

/* Creates an NCCL unique ID on `root` of `comm` and broadcasts it (128 bytes) to all ranks
 * of comm. Built only with NCCL; elsewhere returns RF_ERR_UNSUPPORTED. */
rf_status rf_control_nccl_unique_id(rf_control *ctl, MPI_Comm comm, int root, void *id_out,
                                    int id_len);

/* "NCCL 2.28.3" in builds with NCCL, "" otherwise (for the results file's versions). */
void rf_control_nccl_version(char *buf, size_t len);

#endif
