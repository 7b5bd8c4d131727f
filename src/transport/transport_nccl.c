/* The nccl transport: device buffers, ncclSend/ncclRecv on a stream of its own. p2p plans use one
 * communicator over every rank; star plans one communicator per star (centre first, then the
 * arms), as the reference bridge does, plus one over the trainer ranks for the reshape.
 * Communicators are non-blocking (ncclConfig_t.blocking = 0) and every wait polls
 * ncclCommGetAsyncError under --timeout, aborting the communicators on expiry, so a dead or
 * silent peer ends the run with an error instead of a hang. */
#include <cuda_runtime.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <stdlib.h>
#include <string.h>

#include "memory/memory_gpu.h"
#include "transport.h"

#define MAX_COMMS 64

/* One communicator and the world ranks of its members, in communicator rank order. */
typedef struct {
  ncclComm_t comm;
  int size;
  int *members;
} nccl_group;

typedef struct {
  nccl_group world;   /* p2p: every rank */
  nccl_group trainer; /* star reshape: the trainer ranks */
  nccl_group stars[MAX_COMMS];
  int star_count;
  /* NCCL runs on a stream of its own, so that refit's stream can pack bucket k+1 while NCCL
   * still moves bucket k (fused mode). Each post first waits for `packed`, an event recorded
   * on refit's stream, so a send never starts before its pack (or a receive before the unpack
   * that last read its staging) has run. */
  cudaStream_t stream;
  cudaEvent_t packed, done;
  long posted;
} nccl_state;

static int member_rank(const nccl_group *g, int world_rank) {
  for (int i = 0; i < g->size; i++)
    if (g->members[i] == world_rank)
      return i;
  return -1;
}

/* Every communicator this rank holds, for polling and aborting them together. */
static int all_groups(nccl_state *s, nccl_group **all) {
  int n = 0;
  if (s->world.comm)
    all[n++] = &s->world;
  if (s->trainer.comm)
    all[n++] = &s->trainer;
  for (int i = 0; i < s->star_count; i++)
    if (s->stars[i].comm)
      all[n++] = &s->stars[i];
  return n;
}

/* One look at every communicator: done when none has non-blocking work pending; an
 * asynchronous error (a peer's failure included) ends the wait. */
static rf_status groups_settled(void *ctx, int *done) {
  nccl_group *all[MAX_COMMS + 2];
  int n = all_groups(ctx, all);
  *done = 1;
  for (int i = 0; i < n; i++) {
    ncclResult_t state = ncclSuccess;
    RF_NCCL(ncclCommGetAsyncError(all[i]->comm, &state));
    if (state == ncclInProgress)
      *done = 0;
    else if (state != ncclSuccess)
      return rf_nccl_failed((int)state, ncclGetErrorString(state), "ncclCommGetAsyncError",
                            __FILE__, __LINE__);
  }
  return RF_OK;
}

static void abort_comms(rf_transport *tp) {
  nccl_group *all[MAX_COMMS + 2];
  int n = all_groups(tp->state, all);
  for (int i = 0; i < n; i++) {
    ncclCommAbort(all[i]->comm);
    all[i]->comm = NULL;
  }
}

/* After a timeout: abort every communicator so no rank stays blocked in NCCL. */
static rf_status abort_all(rf_transport *tp, const char *what) {
  abort_comms(tp);
  return rf_timeout_error(tp->ctl->timeout, what, "NCCL communicators aborted");
}

/* The abandon step (transport.h): a failed iteration may have left operations that no peer
 * will complete, and destroying their communicator would wait for them; every rank aborts. */
static rf_status nccl_abandon(rf_transport *tp) {
  abort_comms(tp);
  return RF_OK;
}

/* Waits until every communicator has finished its pending non-blocking work. */
static rf_status settle(rf_transport *tp, const char *what) {
  rf_status st = rf_poll(groups_settled, tp->state, tp->ctl->timeout);
  return st == RF_ERR_TIMEOUT ? abort_all(tp, what) : st;
}

/* Creates the communicator of `members` (world ranks) if this rank is one of them; every rank
 * takes part in the unique ID's broadcast, which the first member creates. */
static rf_status make_group(rf_transport *tp, nccl_group *g, const int *members, int size) {
  ncclUniqueId id;
  RF_TRY(rf_control_nccl_unique_id(tp->ctl, tp->ctl->world, members[0], &id, sizeof id));
  int me = -1;
  for (int i = 0; i < size; i++)
    if (members[i] == tp->ctl->world_rank)
      me = i;
  if (me < 0)
    return RF_OK;
  g->members = rf_malloc((size_t)size * sizeof *g->members, "NCCL group");
  if (!g->members)
    return RF_ERR_NOMEM;
  memcpy(g->members, members, (size_t)size * sizeof *members);
  g->size = size;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  RF_NCCL(ncclCommInitRankConfig(&g->comm, size, id, me, &config));
  return RF_OK;
}

/* The stars of docs/architecture.md ("Plans"), once per rollout engine replica: fan-in puts rollout
 * rank s at the centre of trainer ranks s*k..s*k+k-1; fan-out puts trainer rank s at the centre of
 * rollout ranks s*k..s*k+k-1. */
static rf_status make_stars(rf_transport *tp) {
  nccl_state *s = tp->state;
  const rf_plan *plan = tp->plan;
  const rf_layout *lay = plan->layout;
  int k = plan->star_arms, R = lay->rollout.tp, members[MAX_COMMS];
  if (plan->star_count * lay->rollout.dp > MAX_COMMS || k + 1 > MAX_COMMS)
    return rf_fail(RF_ERR_UNSUPPORTED,
                   "nccl transport: %d stars of %d ranks exceed the %d "
                   "communicators it keeps; use --plan p2p",
                   plan->star_count * lay->rollout.dp, k + 1, MAX_COMMS);
  for (int p = 0; p < lay->rollout.dp; p++)
    for (int c = 0; c < plan->star_count; c++) {
      if (plan->fan_in) {
        members[0] = rf_layout_rollout_world_rank(lay, p * R + c);
        for (int a = 0; a < k; a++)
          members[1 + a] = rf_layout_trainer_world_rank(lay, c * k + a);
      } else {
        members[0] = rf_layout_trainer_world_rank(lay, c);
        for (int a = 0; a < k; a++)
          members[1 + a] = rf_layout_rollout_world_rank(lay, p * R + c * k + a);
      }
      nccl_group g = {0};
      RF_TRY(make_group(tp, &g, members, k + 1));
      if (g.comm)
        s->stars[s->star_count++] = g;
    }
  return RF_OK;
}

static rf_status nccl_init(rf_transport *tp) {
  nccl_state *s = rf_calloc(1, sizeof *s, "nccl transport");
  if (!s)
    return RF_ERR_NOMEM;
  tp->state = s;
  RF_CUDA(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
  RF_CUDA(cudaEventCreateWithFlags(&s->packed, cudaEventDisableTiming));
  RF_CUDA(cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming));
  const rf_layout *lay = tp->plan->layout;
  int n = RF_MAX(lay->world_size, lay->trainer_ranks);
  int *members = rf_malloc((size_t)n * sizeof *members, "NCCL members");
  if (!members)
    return RF_ERR_NOMEM;
  rf_status st = RF_OK;
  RF_NCCL(ncclGroupStart());
  if (tp->plan->kind == RF_PLAN_STAR) {
    for (int i = 0; i < lay->trainer_ranks; i++)
      members[i] = rf_layout_trainer_world_rank(lay, i);
    st = make_group(tp, &s->trainer, members, lay->trainer_ranks);
    if (st == RF_OK)
      st = make_stars(tp);
  } else {
    for (int i = 0; i < lay->world_size; i++)
      members[i] = i;
    st = make_group(tp, &s->world, members, lay->world_size);
  }
  ncclResult_t rc = ncclGroupEnd();
  if (st == RF_OK && rc != ncclSuccess && rc != ncclInProgress)
    st = rf_nccl_failed((int)rc, ncclGetErrorString(rc), "ncclGroupEnd (init)", __FILE__, __LINE__);
  if (st == RF_OK)
    st = settle(tp, "the NCCL communicators to be created");
  free(members);
  return st;
}

static void free_group(nccl_group *g) {
  if (g->comm) {
    ncclCommFinalize(g->comm);
    ncclCommDestroy(g->comm);
  }
  free(g->members);
  memset(g, 0, sizeof *g);
}

static void nccl_finalize(rf_transport *tp) {
  nccl_state *s = tp->state;
  if (!s)
    return;
  free_group(&s->world);
  free_group(&s->trainer);
  for (int i = 0; i < s->star_count; i++)
    free_group(&s->stars[i]);
  if (s->done)
    cudaEventDestroy(s->done);
  if (s->packed)
    cudaEventDestroy(s->packed);
  if (s->stream)
    cudaStreamDestroy(s->stream);
  free(s);
  tp->state = NULL;
}

static rf_status nccl_group_start(rf_transport *tp) {
  RF_NCCL(ncclGroupStart());
  return RF_OK;
}

static rf_status nccl_group_end(rf_transport *tp) {
  RF_NCCL(ncclGroupEnd()); /* ncclInProgress is fine: the next wait settles the group */
  return RF_OK;
}

/* The communicator and communicator rank through which this rank reaches `peer`. */
static rf_status route(rf_transport *tp, rf_channel ch, int peer, ncclComm_t *comm, int *rank) {
  nccl_state *s = tp->state;
  if (ch == RF_CHANNEL_TRAINER) {
    *comm = s->trainer.comm;
    *rank = peer; /* trainer channel peers are trainer ranks: the group's own order */
    return RF_OK;
  }
  if (s->world.comm) {
    *comm = s->world.comm;
    *rank = peer;
    return RF_OK;
  }
  for (int i = 0; i < s->star_count; i++)
    if ((*rank = member_rank(&s->stars[i], peer)) >= 0) {
      *comm = s->stars[i].comm;
      return RF_OK;
    }
  return rf_fail(RF_ERR_INTERNAL, "nccl transport: no star joins world ranks %d and %d",
                 tp->ctl->world_rank, peer);
}

static rf_status nccl_post(rf_transport *tp, int send, rf_channel ch, int peer, void *buf,
                           size_t bytes, long *ticket) {
  nccl_state *s = tp->state;
  ncclComm_t comm = NULL;
  int rank = 0;
  RF_TRY(route(tp, ch, peer, &comm, &rank));
  RF_CUDA(cudaEventRecord(s->packed, (cudaStream_t)rf_gpu_stream()));
  RF_CUDA(cudaStreamWaitEvent(s->stream, s->packed, 0));
  if (send)
    RF_NCCL(ncclSend(buf, bytes, ncclUint8, rank, comm, s->stream));
  else
    RF_NCCL(ncclRecv(buf, bytes, ncclUint8, rank, comm, s->stream));
  *ticket = s->posted++;
  return RF_OK;
}

/* One look at the stream: done when the event after the last operation has passed; while
 * not, the communicators are checked so that a peer's failure ends the wait at once. */
static rf_status stream_done(void *ctx, int *done) {
  nccl_state *s = ctx;
  cudaError_t rc = cudaEventQuery(s->done);
  *done = rc == cudaSuccess;
  if (rc != cudaSuccess && rc != cudaErrorNotReady)
    return rf_cuda_failed((int)rc, cudaGetErrorString(rc), "cudaEventQuery", __FILE__, __LINE__);
  int settled = 0;
  return *done ? RF_OK : groups_settled(s, &settled);
}

/* Operations complete in stream order, so waiting for everything posted so far covers every
 * ticket below `upto`. */
static rf_status nccl_wait(rf_transport *tp, long upto, const char *what) {
  nccl_state *s = tp->state;
  RF_TRY(settle(tp, what)); /* a non-blocking group may still be launching */
  RF_CUDA(cudaEventRecord(s->done, s->stream));
  rf_status st = rf_poll(stream_done, s, tp->ctl->timeout);
  return st == RF_ERR_TIMEOUT ? abort_all(tp, what) : st;
}

const rf_transport_ops rf_transport_nccl = {
    .name = "nccl",
    .description = "device buffers, ncclSend/ncclRecv (one GPU per rank)",
    .memory = RF_MEM_DEVICE,
    .gpu_per_rank = 1,
    .ordered = 1,
    .limit = RF_LIMIT_NCCL,
    .init = nccl_init,
    .finalize = nccl_finalize,
    .register_buffer = NULL,
    .group_start = nccl_group_start,
    .group_end = nccl_group_end,
    .post = nccl_post,
    .wait = nccl_wait,
    .abandon = nccl_abandon,
};
