/* The mpi transport: host buffers, MPI_Isend/MPI_Irecv, completion within the timeout. It runs
 * anywhere MPI does and is the baseline the other transports are compared with. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "transport.h"

/* MPI counts are ints, so a message over 1 GiB travels as several; both sides cut it the
 * same way because they post the same sizes. REFIT_MPI_SLICE (bytes) sets a smaller cut, so
 * that the tests cut small messages, mid-row, as a large one is cut. */
#define SLICE ((size_t)1 << 30)

/* The blocks of a strided message being built (post_strided below). */
typedef struct {
  int *lengths;
  MPI_Aint *displacements;
  MPI_Datatype *types;
  int count, cap;
} block_list;

typedef struct {
  MPI_Request *requests; /* outstanding, in ticket order */
  long first_ticket;     /* ticket of requests[0] */
  int count, cap;
  block_list blocks; /* post_strided's scratch, kept between messages */
  size_t slice;      /* the most bytes one MPI message carries */
  long last_large;   /* the ticket of the latest large or strided message (-1: none yet) */
} mpi_state;

/* A message of at most this many bytes is small: MPI moves it whole as soon as it is matched,
 * so a wait for small messages alone may nap between checks (rf_poll) and leave the core to
 * ranks that compute meanwhile (a delta's trainers encoding while the rollout waits for the
 * sizes). A wait that includes a larger or strided message checks without napping
 * (rf_poll_busy), since MPI moves those only inside its calls, a fragment at a time. */
#define RF_MPI_SMALL ((size_t)65536)

static rf_status mpi_init(rf_transport *tp) {
  mpi_state *s = rf_calloc(1, sizeof *s, "mpi transport");
  if (!s)
    return RF_ERR_NOMEM;
  const char *env = getenv("REFIT_MPI_SLICE");
  long long slice = env ? atoll(env) : 0;
  s->slice = slice > 0 && slice < (long long)SLICE ? (size_t)slice : SLICE;
  s->last_large = -1;
  tp->state = s;
  return RF_OK;
}

static void mpi_finalize(rf_transport *tp) {
  mpi_state *s = tp->state;
  if (s) {
    free(s->requests);
    free(s->blocks.lengths), free(s->blocks.displacements), free(s->blocks.types);
  }
  free(s);
  tp->state = NULL;
}

static rf_status noop(rf_transport *tp) { return RF_OK; }

static MPI_Comm channel_comm(rf_transport *tp, rf_channel ch) {
  return ch == RF_CHANNEL_TRAINER ? tp->ctl->trainer : tp->ctl->world;
}

static rf_status push(mpi_state *s, MPI_Request **slot, long *ticket, int large) {
  RF_TRY(rf_grow((void **)&s->requests, s->count, &s->cap, sizeof *s->requests, "MPI requests"));
  *ticket = s->first_ticket + s->count;
  *slot = &s->requests[s->count++];
  if (large)
    s->last_large = *ticket;
  return RF_OK;
}

static rf_status mpi_post(rf_transport *tp, int send, rf_channel ch, int peer, void *data,
                          size_t bytes, long *ticket) {
  char *buf = data;
  size_t off = 0, slice = ((mpi_state *)tp->state)->slice;
  do {
    int n = (int)RF_MIN(slice, bytes - off);
    MPI_Request *req;
    RF_TRY(push(tp->state, &req, ticket, (size_t)n > RF_MPI_SMALL));
    if (send)
      RF_MPI(MPI_Isend(buf + off, n, MPI_BYTE, peer, 0, channel_comm(tp, ch), req));
    else
      RF_MPI(MPI_Irecv(buf + off, n, MPI_BYTE, peer, 0, channel_comm(tp, ch), req));
    off += (size_t)n;
  } while (off < bytes);
  return RF_OK;
}

/* ---- strided messages: MPI derived datatypes ---------------------------------------------
 * A strided box travels as one message whose datatype names its rows where they lie, so MPI
 * gathers them on the sender and scatters them on the receiver as it moves them, a fragment
 * at a time, instead of refit packing the whole box into staging first and unpacking it after.
 * The type is built over absolute addresses (MPI_BOTTOM) because one message spans the parts
 * of several tensors. Messages are cut every slice bytes of the byte sequence, which both
 * ends cut alike whatever parts they describe it with; a part may so end mid-row, which costs
 * up to two more blocks. */

static void blocks_release(block_list *b) {
  for (int i = 0; i < b->count; i++)
    if (b->types[i] != MPI_BYTE)
      MPI_Type_free(&b->types[i]);
  b->count = 0;
}

static rf_status blocks_add(block_list *b, const char *at, int64_t rows, int64_t row_bytes,
                            int64_t pitch) {
  if (b->count == b->cap) {
    int cap = b->cap;
    RF_TRY(rf_grow((void **)&b->lengths, b->count, &cap, sizeof *b->lengths, "MPI blocks"));
    cap = b->cap;
    RF_TRY(rf_grow((void **)&b->displacements, b->count, &cap, sizeof *b->displacements,
                   "MPI blocks"));
    RF_TRY(rf_grow((void **)&b->types, b->count, &b->cap, sizeof *b->types, "MPI blocks"));
  }
  int i = b->count;
  RF_MPI(MPI_Get_address(at, &b->displacements[i]));
  if (rows == 1 || pitch == row_bytes) { /* one run, under SLICE bytes: an int */
    b->lengths[i] = (int)(rows * row_bytes);
    b->types[i] = MPI_BYTE;
  } else {
    b->lengths[i] = 1;
    RF_MPI(MPI_Type_create_hvector((int)rows, (int)row_bytes, (MPI_Aint)pitch, MPI_BYTE,
                                   &b->types[i]));
  }
  b->count++;
  return RF_OK;
}

/* Bytes [from, to) of a part's byte sequence: a partial first row, whole rows, a partial last. */
static rf_status blocks_add_range(block_list *b, const rf_strided *p, int64_t from, int64_t to) {
  int64_t rb = p->row_bytes, r0 = from / rb, c0 = from % rb, r1 = to / rb, c1 = to % rb;
  if (r0 == r1)
    return blocks_add(b, p->base + r0 * p->pitch + c0, 1, to - from, to - from);
  if (c0) {
    RF_TRY(blocks_add(b, p->base + r0 * p->pitch + c0, 1, rb - c0, rb - c0));
    r0++;
  }
  if (r1 > r0)
    RF_TRY(blocks_add(b, p->base + r0 * p->pitch, r1 - r0, rb, p->pitch));
  return c1 ? blocks_add(b, p->base + r1 * p->pitch, 1, c1, c1) : RF_OK;
}

/* One message of the blocks gathered so far, as one struct datatype; MPI keeps the type alive
 * until the request completes, so refit's handles are freed at once. */
static rf_status post_blocks(rf_transport *tp, block_list *b, int send, rf_channel ch, int peer,
                             long *ticket) {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Request *req;
  rf_status st = RF_OK;
  RF_MPI_GOTO(MPI_Type_create_struct(b->count, b->lengths, b->displacements, b->types, &type),
              done);
  RF_MPI_GOTO(MPI_Type_commit(&type), done);
  st = push(tp->state, &req, ticket, 1);
  if (st != RF_OK)
    goto done;
  if (send)
    RF_MPI_GOTO(MPI_Isend(MPI_BOTTOM, 1, type, peer, 0, channel_comm(tp, ch), req), done);
  else
    RF_MPI_GOTO(MPI_Irecv(MPI_BOTTOM, 1, type, peer, 0, channel_comm(tp, ch), req), done);
done:
  if (type != MPI_DATATYPE_NULL)
    MPI_Type_free(&type);
  blocks_release(b);
  return st;
}

static rf_status mpi_post_strided(rf_transport *tp, int send, rf_channel ch, int peer,
                                  const rf_strided *parts, int count, long *ticket) {
  mpi_state *s = tp->state;
  block_list *b = &s->blocks;
  int64_t in_slice = 0; /* bytes of the message being built */
  rf_status st = RF_OK;
  for (int i = 0; i < count && st == RF_OK; i++) {
    int64_t bytes = parts[i].rows * parts[i].row_bytes;
    for (int64_t at = 0; at < bytes && st == RF_OK;) {
      int64_t take = RF_MIN(bytes - at, (int64_t)s->slice - in_slice);
      st = blocks_add_range(b, &parts[i], at, at + take);
      at += take, in_slice += take;
      if (st == RF_OK && in_slice == (int64_t)s->slice) {
        st = post_blocks(tp, b, send, ch, peer, ticket);
        in_slice = 0;
      }
    }
  }
  if (st == RF_OK && b->count)
    st = post_blocks(tp, b, send, ch, peer, ticket);
  blocks_release(b);
  return st;
}

/* On a timeout the pending requests are cancelled so that MPI can still finalise; a request
 * that cannot be cancelled (a send already matched) leaves the control plane marked as timed
 * out, and main() then aborts the job instead. */
static void cancel_pending(rf_transport *tp, MPI_Request *requests, int n) {
  for (int i = 0; i < n; i++)
    if (requests[i] != MPI_REQUEST_NULL)
      MPI_Cancel(&requests[i]);
  double deadline = rf_now() + 1.0;
  int done = 0;
  while (!done && rf_now() < deadline)
    MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE);
  if (!done)
    tp->ctl->timed_out = 1;
}

typedef struct {
  MPI_Request *requests;
  int n;
} pending;

static rf_status all_done(void *ctx, int *done) {
  pending *p = ctx;
  int rc = MPI_Testall(p->n, p->requests, done, MPI_STATUSES_IGNORE);
  return rc == MPI_SUCCESS ? RF_OK : rf_mpi_failed(rc, "MPI_Testall", __FILE__, __LINE__);
}

/* Completes the requests of tickets from .. upto - 1 (MPI_Testall leaves each completed one
 * MPI_REQUEST_NULL), then drops the completed ones at the front: a range completed before the
 * requests ahead of it stays until those complete too. */
static rf_status mpi_wait_range(rf_transport *tp, long from, long upto, const char *what) {
  mpi_state *s = tp->state;
  long lo = RF_MAX(from - s->first_ticket, 0L);
  long hi = RF_MIN((long)s->count, upto - s->first_ticket);
  if (hi > lo) {
    pending p = {s->requests + lo, (int)(hi - lo)};
    int small = s->last_large < s->first_ticket + lo; /* no large message among them */
    rf_status st = small ? rf_poll(all_done, &p, tp->ctl->timeout)
                         : rf_poll_busy(all_done, &p, tp->ctl->timeout);
    if (st == RF_ERR_TIMEOUT) {
      cancel_pending(tp, s->requests, (int)hi);
      return rf_timeout_error(tp->ctl->timeout, what, NULL);
    }
    RF_TRY(st);
  }
  int n = 0;
  while (n < s->count && s->requests[n] == MPI_REQUEST_NULL)
    n++;
  if (n == 0)
    return RF_OK; /* nothing completed at the front (requests may still be NULL: none posted) */
  memmove(s->requests, s->requests + n, (size_t)(s->count - n) * sizeof *s->requests);
  s->count -= n;
  s->first_ticket += n;
  return RF_OK;
}

static rf_status mpi_wait(rf_transport *tp, long upto, const char *what) {
  return mpi_wait_range(tp, 0, upto, what);
}

/* The abandon step (transport.h). This rank's receives are cancelled; its sends end only once
 * their receivers take them, and a receiver whose wait was cut short will never post the
 * receives of its later buckets. So every rank takes in, and drops, whatever reaches it on the
 * job's communicators, until every rank's own requests have ended: each enters a nonblocking
 * barrier once its own have, and leaves when all have. */
typedef struct {
  rf_transport *tp;
  MPI_Request barrier;
  int entered;
} drain;

static rf_status drop_one(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL)
    return RF_OK;
  int found = 0, bytes = 0;
  MPI_Message msg;
  MPI_Status status;
  RF_MPI(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &found, &msg, &status));
  if (!found)
    return RF_OK;
  RF_MPI(MPI_Get_count(&status, MPI_BYTE, &bytes));
  char *buf = rf_malloc(bytes > 0 ? (size_t)bytes : 1, "a message of a failed iteration");
  if (!buf)
    return RF_ERR_NOMEM;
  int rc = MPI_Mrecv(buf, bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
  free(buf);
  return rc == MPI_SUCCESS ? RF_OK : rf_mpi_failed(rc, "MPI_Mrecv", __FILE__, __LINE__);
}

static rf_status drained(void *ctx, int *done) {
  drain *d = ctx;
  mpi_state *s = d->tp->state;
  RF_TRY(drop_one(d->tp->ctl->world));
  RF_TRY(drop_one(d->tp->ctl->trainer));
  if (d->entered) {
    RF_MPI(MPI_Test(&d->barrier, done, MPI_STATUS_IGNORE));
    return RF_OK;
  }
  int mine = 0;
  RF_MPI(MPI_Testall(s->count, s->requests, &mine, MPI_STATUSES_IGNORE));
  if (mine) {
    s->first_ticket += s->count;
    s->count = 0;
    RF_MPI(MPI_Ibarrier(d->tp->ctl->world, &d->barrier));
    d->entered = 1;
  }
  return RF_OK;
}

static rf_status mpi_abandon(rf_transport *tp) {
  mpi_state *s = tp->state;
  if (tp->ctl->timed_out)
    return RF_ERR_TIMEOUT;
  for (int i = 0; i < s->count; i++)
    if (s->requests[i] != MPI_REQUEST_NULL)
      MPI_Cancel(&s->requests[i]); /* a receive not yet matched; MPI may keep a send */
  drain d = {tp, MPI_REQUEST_NULL, 0};
  rf_status st = rf_poll_busy(drained, &d, tp->ctl->timeout);
  if (st != RF_ERR_TIMEOUT)
    return st;
  tp->ctl->timed_out = 1; /* requests stay posted: the job must be aborted */
  return rf_timeout_error(tp->ctl->timeout, "the other ranks to end a failed iteration's messages",
                          NULL);
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
    .wait_range = mpi_wait_range,
    .post_strided = mpi_post_strided,
    .abandon = mpi_abandon,
};
