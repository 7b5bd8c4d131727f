/* The rma transport: MPI-3 one-sided communication over host memory, on one node or across
 * nodes. Once per job every rank exposes its arenas as MPI windows, one per arena, each opened
 * once with MPI_Win_lock_all (a passive-target epoch that lasts the job). The windows are
 * made as the arenas are allocated (alloc_arenas: MPI_Win_allocate, so that the MPI library
 * owns the memory and can share it within a node: Open MPI's osc rdma and sm then copy a
 * strided box between two processes as one datatype copy, where over a window of
 * MPI_Win_create osc rdma makes a system call per dense run, 0.13-0.19 of the plain MPI
 * exchange in results/host.md); buffers the engine did not get from here get windows of
 * MPI_Win_create. The engine's mapping path (engine_mapped.c) moves each piece with one operation,
 * the source's MPI_Put into the destination's window (--rma put) or the destination's MPI_Get out
 * of the source's (--rma get). A box that is strided or transposed on either end travels as
 * one operation whose datatypes (MPI_Type_create_hvector) name its elements where they lie on
 * each end; nothing is packed.
 *
 * The engine addresses a peer's arena through a stand-in (transport.h, copy_boxes): an address
 * range reserved here (PROT_NONE, so a stray access faults instead of landing anywhere) as
 * large as the peer's window; an address in it is the window's byte offset.
 *
 * The ready and done notes are one-sided too, so that the side that does not copy posts no
 * receive: every rank has a small window of one counter per world rank; a note to q adds 1 to
 * q's counter of this rank (MPI_Accumulate), and a rank waits for a note from p by reading its
 * own counters (MPI_Get_accumulate with MPI_NO_OP, atomic against the adds) until p's reaches
 * the count it expects, within --timeout. A note leaves only after the copies before it have
 * completed at both ends (copy_wait's MPI_Win_flush_all), and MPI_Win_sync on both sides of a
 * note orders the arenas' memory with it. Every window returns errors (MPI_ERRORS_RETURN).
 *
 * MPI_Win_flush itself cannot be bounded by a timeout: with a component that needs the target
 * to make progress (osc pt2pt) a flush to a stalled peer waits for it; the rdma, ucx and sm
 * components move the bytes without it. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

#include "transport_rma_internal.h"

static rf_status rma_init(rf_transport *tp) {
  if (rf_layout_format(tp->plan->layout))
    return rf_fail(RF_ERR_USAGE, "the rma transport does not carry a quantized --rollout-dtype "
                                 "yet; use --transport mpi or shm, or --rollout-dtype model");
  rma_state *s = rf_calloc(1, sizeof *s, "rma transport");
  if (!s)
    return RF_ERR_NOMEM;
  tp->state = s;
  s->notes_win = MPI_WIN_NULL;
  s->ranks = tp->ctl->world_size;
  s->me = tp->ctl->world_rank;
  s->one = 1;
  s->seen = rf_calloc((size_t)s->ranks, sizeof *s->seen, "rma notes");
  s->expect = rf_calloc((size_t)s->ranks, sizeof *s->expect, "rma notes");
  s->trainer_world = rf_calloc((size_t)s->ranks, sizeof *s->trainer_world, "rma notes");
  rf_status st = s->seen && s->expect && s->trainer_world ? RF_OK : RF_ERR_NOMEM;
  for (int r = 0; st == RF_OK && r < tp->plan->layout->trainer_ranks; r++)
    s->trainer_world[r] = rf_layout_trainer_world_rank(tp->plan->layout, r);
  /* Every rank creates the notes window, even one whose allocation above failed: the caller
   * agrees on the outcome after this collective. */
  MPI_Aint bytes = (MPI_Aint)((size_t)s->ranks * sizeof(int64_t));
  int rc = MPI_Win_allocate(bytes, (int)sizeof(int64_t), MPI_INFO_NULL, tp->ctl->world,
                            &s->counters, &s->notes_win);
  if (rc != MPI_SUCCESS) {
    /* The first window of the job: where it fails, the one-sided component MPI chose has no
     * path between these ranks (Open MPI's osc rdma and ucx on a machine whose processes may
     * not read each other's memory, for one), and no window of refit's would work either. */
    char why[RF_MPI_ERROR_MAX];
    s->notes_win = MPI_WIN_NULL;
    return rf_fail(RF_ERR_UNSUPPORTED,
                   "rma: this MPI's one-sided component cannot make a window between these ranks "
                   "(MPI_Win_allocate: %s); choose another (Open MPI: --mca osc sm, pt2pt, rdma or "
                   "ucx) or use --transport shm or mpi",
                   rf_mpi_error_string(rc, why, sizeof why));
  }
  RF_MPI(MPI_Win_set_errhandler(s->notes_win, MPI_ERRORS_RETURN));
  memset(s->counters, 0, (size_t)bytes);
  RF_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, s->notes_win));
  return st;
}

static void rma_finalize(rf_transport *tp) {
  rma_state *s = tp->state;
  if (!s)
    return;
  rma_windows_free(s);
  if (s->notes_win != MPI_WIN_NULL) {
    MPI_Win_unlock_all(s->notes_win);
    MPI_Win_free(&s->notes_win);
  }
  free(s->seen), free(s->expect), free(s->trainer_world), free(s->notes);
  for (int i = 0; i < s->scratch_count; i++)
    free(s->scratch[i].base);
  free(s->scratch);
  free(s);
  tp->state = NULL;
}

static rf_status rma_group(rf_transport *tp) { return RF_OK; }

static rf_status rma_post(rf_transport *tp, int send, rf_channel ch, int peer, void *buf,
                          size_t bytes, long *ticket) {
  rma_state *s = tp->state;
  if (bytes != 1)
    return rf_fail(RF_ERR_INTERNAL,
                   "rma: a message of %zu bytes; the rma transport carries "
                   "only the one-byte notes of the mapping path",
                   bytes);
  int world = ch == RF_CHANNEL_TRAINER ? s->trainer_world[peer] : peer;
  RF_TRY(rf_grow((void **)&s->notes, s->note_count, &s->note_cap, sizeof *s->notes, "rma notes"));
  rma_note *n = &s->notes[s->note_count];
  *n = (rma_note){world, !send, 0, buf};
  if (send) {
    if (!s->sends_pending) /* what this rank wrote in its arenas is visible before the note */
      RF_TRY(rma_sync_windows(s));
    RF_MPI(MPI_Accumulate(&s->one, 1, MPI_INT64_T, world, (MPI_Aint)s->me, 1, MPI_INT64_T, MPI_SUM,
                          s->notes_win));
    s->sends_pending = 1;
  } else {
    n->target = ++s->expect[world];
  }
  *ticket = s->first_ticket + s->note_count++;
  return RF_OK;
}

typedef struct {
  rma_state *s;
  int upto; /* notes[0 .. upto) */
} rma_pending;

static rf_status notes_in(void *ctx, int *done) {
  rma_pending *p = ctx;
  rma_state *s = p->s;
  RF_MPI(MPI_Get_accumulate(NULL, 0, MPI_INT64_T, s->seen, s->ranks, MPI_INT64_T, s->me, 0,
                            s->ranks, MPI_INT64_T, MPI_NO_OP, s->notes_win));
  RF_MPI(MPI_Win_flush(s->me, s->notes_win));
  *done = 1;
  for (int i = 0; i < p->upto && *done; i++)
    if (s->notes[i].recv && s->seen[s->notes[i].peer] < s->notes[i].target)
      *done = 0;
  return RF_OK;
}

static rf_status rma_wait(rf_transport *tp, long upto, const char *what) {
  rma_state *s = tp->state;
  int n = (int)RF_MIN((long)s->note_count, upto - s->first_ticket);
  if (n <= 0)
    return RF_OK;
  if (s->sends_pending) {
    RF_MPI(MPI_Win_flush_all(s->notes_win));
    s->sends_pending = 0;
  }
  int recvs = 0;
  for (int i = 0; i < n; i++)
    recvs += s->notes[i].recv;
  if (recvs) {
    rma_pending p = {s, n};
    rf_status st = rf_poll_busy(notes_in, &p, tp->ctl->timeout);
    if (st == RF_ERR_TIMEOUT)
      return rf_timeout_error(tp->ctl->timeout, what, NULL);
    RF_TRY(st);
    RF_TRY(rma_sync_windows(s)); /* what the peers wrote before their notes is visible here */
    for (int i = 0; i < n; i++)
      if (s->notes[i].recv && s->notes[i].buf)
        s->notes[i].buf[0] = 1;
  }
  memmove(s->notes, s->notes + n, (size_t)(s->note_count - n) * sizeof *s->notes);
  s->note_count -= n;
  s->first_ticket += n;
  return RF_OK;
}

/* The abandon step (transport.h): every rank completes what it started, then, once all have
 * (a bounded barrier), counts on from the notes that did arrive, so that a note of the failed
 * iteration is not taken for one of the next. */
static rf_status barrier_done(void *ctx, int *done) {
  RF_MPI(MPI_Test((MPI_Request *)ctx, done, MPI_STATUS_IGNORE));
  return RF_OK;
}

static rf_status rma_abandon(rf_transport *tp) {
  rma_state *s = tp->state;
  if (tp->ctl->timed_out)
    return RF_ERR_TIMEOUT;
  for (int i = 0; i < s->win_count; i++)
    s->dirty[i] = 1;
  RF_TRY(rma_copy_wait(tp, "a failed iteration's copies"));
  RF_MPI(MPI_Win_flush_all(s->notes_win));
  s->sends_pending = 0;
  MPI_Request req;
  RF_MPI(MPI_Ibarrier(tp->ctl->world, &req));
  rf_status st = rf_poll_busy(barrier_done, &req, tp->ctl->timeout);
  if (st == RF_ERR_TIMEOUT) {
    tp->ctl->timed_out = 1;
    return rf_timeout_error(tp->ctl->timeout, "the other ranks to end a failed iteration's notes",
                            NULL);
  }
  RF_TRY(st);
  rma_pending p = {s, 0};
  int done = 0;
  RF_TRY(notes_in(&p, &done));
  memcpy(s->expect, s->seen, (size_t)s->ranks * sizeof *s->expect);
  s->first_ticket += s->note_count;
  s->note_count = 0;
  return RF_OK;
}

/* GPU memory needs an MPI that reads and writes it (CUDA-aware); this build moves host memory
 * only, and says what would. */
static rf_status rma_check_memory(rf_transport *tp, rf_mem_kind kind) {
  if (kind != RF_MEM_DEVICE)
    return RF_OK;
  int aware = 0;
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  aware = MPIX_Query_cuda_support();
#endif
  if (!aware)
    return rf_fail(RF_ERR_UNSUPPORTED,
                   "the rma transport moves host memory only: this MPI is not CUDA-aware "
                   "(MPIX_Query_cuda_support() is 0); install an Open MPI built --with-cuda (and "
                   "UCX) for GPU windows, or use --memory host");
  return rf_fail(
      RF_ERR_UNSUPPORTED,
      "the rma transport moves host memory only in this build of refit, though this "
      "MPI is CUDA-aware; use --memory host, or --transport ipc or nccl for GPU weights");
}

const rf_transport_ops rf_transport_rma = {
    .name = "rma",
    .description = "MPI-3 one-sided puts or gets (--rma) straight between the ranks' windows over "
                   "host memory, notes by MPI_Accumulate; within a node or across nodes",
    .memory = RF_MEM_HOST,
    .gpu_per_rank = 0,
    .limit = RF_LIMIT_MPI,
    .mapping = 0, /* refit simulate times it as messages: it reaches across nodes */
    .one_sided = 1,
    .init = rma_init,
    .finalize = rma_finalize,
    .group_start = rma_group,
    .group_end = rma_group,
    .post = rma_post,
    .wait = rma_wait,
    .expose = rma_expose,
    .peer_buffer = rma_peer_buffer,
    .expose_sized = rma_expose_sized,
    .alloc_arenas = rma_alloc_arenas,
    .copy_boxes = rma_copy_boxes,
    .copy_wait = rma_copy_wait,
    .check_memory = rma_check_memory,
    .abandon = rma_abandon,
};
