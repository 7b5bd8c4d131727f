/* The mpi transport: host buffers, MPI_Isend/MPI_Irecv, completion within the timeout. It runs
 * anywhere MPI does and is the baseline the other transports are compared with. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "transport.h"

typedef struct {
  MPI_Request *requests; /* outstanding, in ticket order */
  long first_ticket;     /* ticket of requests[0] */
  int count, cap;
} mpi_state;

/* MPI counts are ints, so a message over 1 GiB travels as several; both sides cut it the
 * same way because they post the same sizes. */
#define SLICE ((size_t)1 << 30)

static rf_status mpi_init(rf_transport *tp) {
  mpi_state *s = rf_calloc(1, sizeof *s, "mpi transport");
  if (!s)
    return RF_ERR_NOMEM;
  tp->state = s;
  return RF_OK;
}

static void mpi_finalize(rf_transport *tp) {
  mpi_state *s = tp->state;
  if (s)
    free(s->requests);
  free(s);
  tp->state = NULL;
}

static rf_status noop(rf_transport *tp) { return RF_OK; }

static MPI_Comm channel_comm(rf_transport *tp, rf_channel ch) {
  return ch == RF_CHANNEL_TRAINER ? tp->ctl->trainer : tp->ctl->world;
}

static rf_status push(mpi_state *s, MPI_Request **slot, long *ticket) {
  RF_TRY(rf_grow((void **)&s->requests, s->count, &s->cap, sizeof *s->requests, "MPI requests"));
  *ticket = s->first_ticket + s->count;
  *slot = &s->requests[s->count++];
  return RF_OK;
}

static rf_status mpi_post(rf_transport *tp, int send, rf_channel ch, int peer, void *data,
                          size_t bytes, long *ticket) {
  char *buf = data;
  size_t off = 0;
  do {
    int n = (int)RF_MIN(SLICE, bytes - off);
    MPI_Request *req;
    RF_TRY(push(tp->state, &req, ticket));
    if (send)
      RF_MPI(MPI_Isend(buf + off, n, MPI_BYTE, peer, 0, channel_comm(tp, ch), req));
    else
      RF_MPI(MPI_Irecv(buf + off, n, MPI_BYTE, peer, 0, channel_comm(tp, ch), req));
    off += (size_t)n;
  } while (off < bytes);
  return RF_OK;
}

/* On a timeout the pending requests are cancelled so that MPI can still finalise; a request
 * that cannot be cancelled (a send already matched) leaves the control plane marked as timed
 * out, and main() then aborts the job instead. */
static void cancel_pending(rf_transport *tp, mpi_state *s, int n) {
  for (int i = 0; i < n; i++)
    if (s->requests[i] != MPI_REQUEST_NULL)
      MPI_Cancel(&s->requests[i]);
  double deadline = rf_now() + 1.0;
  int done = 0;
  while (!done && rf_now() < deadline)
    MPI_Testall(n, s->requests, &done, MPI_STATUSES_IGNORE);
  if (!done)
    tp->ctl->timed_out = 1;
}

typedef struct {
  mpi_state *s;
  int n;
} pending;

static rf_status all_done(void *ctx, int *done) {
  pending *p = ctx;
  int rc = MPI_Testall(p->n, p->s->requests, done, MPI_STATUSES_IGNORE);
  return rc == MPI_SUCCESS ? RF_OK : rf_mpi_failed(rc, "MPI_Testall", __FILE__, __LINE__);
}

static rf_status mpi_wait(rf_transport *tp, long upto, const char *what) {
  mpi_state *s = tp->state;
  pending p = {s, (int)RF_MIN((long)s->count, upto - s->first_ticket)};
  if (p.n <= 0)
    return RF_OK;
  rf_status st = rf_poll(all_done, &p, tp->ctl->timeout);
  if (st == RF_ERR_TIMEOUT) {
    cancel_pending(tp, s, p.n);
    return rf_timeout_error(tp->ctl->timeout, what, NULL);
  }
  RF_TRY(st);
  memmove(s->requests, s->requests + p.n, (size_t)(s->count - p.n) * sizeof *s->requests);
  s->count -= p.n;
  s->first_ticket += p.n;
  return RF_OK;
}

const rf_transport_ops rf_transport_mpi = {
    .name = "mpi",
    .description = "host buffers, MPI_Isend/MPI_Irecv (runs anywhere; the CPU baseline)",
    .memory = RF_MEM_HOST,
    .gpu_per_rank = 0,
    .limit = RF_LIMIT_MPI,
    .init = mpi_init,
    .finalize = mpi_finalize,
    .register_buffer = NULL,
    .group_start = noop,
    .group_end = noop,
    .post = mpi_post,
    .wait = mpi_wait,
};
