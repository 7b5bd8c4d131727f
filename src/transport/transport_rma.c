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
#include <sys/mman.h>
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
  RF_MPI(MPI_Win_allocate(bytes, (int)sizeof(int64_t), MPI_INFO_NULL, tp->ctl->world, &s->counters,
                          &s->notes_win));
  RF_MPI(MPI_Win_set_errhandler(s->notes_win, MPI_ERRORS_RETURN));
  memset(s->counters, 0, (size_t)bytes);
  RF_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, s->notes_win));
  return st;
}

static void rma_finalize(rf_transport *tp) {
  rma_state *s = tp->state;
  if (!s)
    return;
  /* Windows are freed collectively; every rank closes its transport at the same point. */
  for (int i = 0; i < s->count; i++) {
    if (s->win[i] != MPI_WIN_NULL) {
      MPI_Win_unlock_all(s->win[i]);
      if (i >= s->arena_count) /* the arenas' windows are freed below, exposed or not */
        MPI_Win_free(&s->win[i]);
    }
    for (int r = 0; r < s->ranks; r++) {
      rma_view *v = &s->view[(size_t)i * (size_t)s->ranks + (size_t)r];
      if (v->stand_in)
        munmap(v->stand_in, (size_t)v->bytes);
    }
  }
  for (int i = 0; i < s->arena_count; i++)
    if (s->arena_win[i] != MPI_WIN_NULL)
      MPI_Win_free(&s->arena_win[i]);
  if (s->notes_win != MPI_WIN_NULL) {
    MPI_Win_unlock_all(s->notes_win);
    MPI_Win_free(&s->notes_win);
  }
  free(s->win), free(s->view), free(s->own), free(s->dirty);
  free(s->seen), free(s->expect), free(s->trainer_world), free(s->notes);
  for (int i = 0; i < s->scratch_count; i++)
    free(s->scratch[i].base);
  free(s->scratch);
  free(s);
  tp->state = NULL;
}

static rf_status rma_expose(rf_transport *tp, void *const *buffers, int count) {
  return rf_fail(RF_ERR_USAGE, "the rma transport cannot offer a delta refit's encoded pieces; "
                               "use --delta off or --transport mpi");
}

/* The arenas as windows of MPI_Win_allocate (transport.h, alloc_arenas), each 64 bytes larger
 * than asked so that the arena can start 64-byte aligned (MPI promises less). A bounded
 * barrier first, as for expose's sizes, so that every rank reaches the allocations, which MPI
 * cannot bound, only once all have arrived. */
static rf_status rma_alloc_arenas(rf_transport *tp, const size_t *bytes, int count, void **out) {
  rma_state *s = tp->state;
  for (int i = 0; i < count; i++)
    out[i] = NULL;
  /* The same on every rank: they all return before any collective. */
  if (count > RMA_ARENAS_MAX || s->count || s->arena_count)
    return rf_fail(RF_ERR_INTERNAL,
                   "rma: %d arenas asked for, after %d windows; at most %d, "
                   "allocated once before any window is exposed",
                   count, s->count, RMA_ARENAS_MAX);
  MPI_Request req;
  int rc = MPI_Ibarrier(tp->ctl->world, &req);
  RF_TRY(rc == MPI_SUCCESS ? rf_control_wait(tp->ctl, &req, "the ranks to allocate rma windows")
                           : rf_mpi_failed(rc, "MPI_Ibarrier", __FILE__, __LINE__));
  rf_status st = RF_OK;
  for (int i = 0; i < count; i++) {
    char *base = NULL;
    MPI_Aint size = bytes[i] ? (MPI_Aint)bytes[i] + 64 : 0;
    s->arena_win[i] = MPI_WIN_NULL;
    rc = MPI_Win_allocate(size, 1, MPI_INFO_NULL, tp->ctl->world, &base, &s->arena_win[i]);
    if (rc != MPI_SUCCESS) {
      if (st == RF_OK)
        st = rf_fail(RF_ERR_NOMEM,
                     "rma: cannot allocate a window of %lld bytes for an arena "
                     "(MPI_Win_allocate failed); free memory on this node, or use --transport mpi",
                     (long long)size);
      continue;
    }
    MPI_Win_set_errhandler(s->arena_win[i], MPI_ERRORS_RETURN);
    s->arena_origin[i] = size ? (int64_t)((64 - ((uintptr_t)base & 63)) & 63) : 0;
    s->arena_at[i] = size ? base + s->arena_origin[i] : NULL;
    out[i] = s->arena_at[i];
  }
  s->arena_count = count;
  return st;
}

/* Each call appends `count` windows after those of earlier calls (index-major tables, as
 * shm's). The sizes go round first, in a bounded collective, so that every rank reaches the
 * window creations, which MPI cannot bound, only once all have arrived. */
static rf_status rma_expose_sized(rf_transport *tp, void *const *buffers, const size_t *bytes,
                                  int count) {
  rma_state *s = tp->state;
  int base = s->count, total = base + count;
  size_t n = (size_t)s->ranks * (size_t)total;
  MPI_Win *win = realloc(s->win, (size_t)total * sizeof *win + 1);
  if (win)
    s->win = win;
  rma_view *view = realloc(s->view, n * sizeof *view + 1);
  if (view)
    s->view = view;
  void **own = realloc(s->own, (size_t)total * sizeof *own + 1);
  if (own)
    s->own = own;
  char *dirty = realloc(s->dirty, (size_t)total + 1);
  if (dirty)
    s->dirty = dirty;
  /* Each rank's sizes, then the buffers' offsets in their windows. */
  int64_t *mine = rf_calloc(2 * (size_t)count + 1, sizeof *mine, "rma window sizes");
  int64_t *got =
      rf_calloc(2 * (size_t)s->ranks * (size_t)count + 1, sizeof *got, "rma window sizes");
  rf_status st = win && view && own && dirty && mine && got ? RF_OK : RF_ERR_NOMEM;
  for (int i = 0; i < count && st == RF_OK; i++) {
    int allocated = base + i < s->arena_count;
    mine[i] = buffers[i] ? (int64_t)bytes[i] : 0;
    mine[count + i] = allocated ? s->arena_origin[base + i] : 0;
    if (allocated && buffers[i] != s->arena_at[base + i])
      st = rf_fail(RF_ERR_INTERNAL, "rma: exposed buffer %d is not the arena allocated for it",
                   base + i);
  }
  MPI_Request req;
  int rc = MPI_Iallgather(mine, 2 * count, MPI_INT64_T, got, 2 * count, MPI_INT64_T, tp->ctl->world,
                          &req);
  rf_status waited = rc == MPI_SUCCESS ? rf_control_wait(tp->ctl, &req, "the rma window sizes")
                                       : rf_mpi_failed(rc, "MPI_Iallgather", __FILE__, __LINE__);
  if (waited != RF_OK) {
    free(mine), free(got);
    return waited;
  }
  /* Every rank creates every window, whatever failed locally, and the stand-ins after; the
   * arenas the transport allocated have theirs already (alike on every rank). */
  for (int i = 0; i < count; i++) {
    MPI_Win w = MPI_WIN_NULL;
    void *at = st == RF_OK && mine[i] ? buffers[i] : NULL;
    MPI_Aint size = at ? (MPI_Aint)mine[i] : 0;
    if (base + i < s->arena_count) {
      w = s->arena_win[base + i];
      rc = w != MPI_WIN_NULL ? MPI_SUCCESS : MPI_ERR_WIN;
    } else {
      rc = MPI_Win_create(at, size, 1, MPI_INFO_NULL, tp->ctl->world, &w);
    }
    if (rc != MPI_SUCCESS && st == RF_OK) {
      char why[MPI_MAX_ERROR_STRING] = "";
      int len = 0;
      MPI_Error_string(rc, why, &len);
      st = rf_fail(RF_ERR_MPI,
                   "rma: MPI_Win_create failed (%s): this MPI's one-sided component cannot "
                   "make a window over memory it did not allocate (Open MPI's osc sm cannot); "
                   "let it take another (--mca osc ^sm, or rdma or ucx)",
                   why);
    }
    if (rc == MPI_SUCCESS) {
      MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN);
      rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, w);
      if (rc != MPI_SUCCESS && st == RF_OK)
        st = rf_mpi_failed(rc, "MPI_Win_lock_all", __FILE__, __LINE__);
    }
    if (win && view && own && dirty) {
      s->win[base + i] = w;
      s->own[base + i] = buffers[i];
      s->dirty[base + i] = 0;
      for (int r = 0; r < s->ranks; r++) {
        const int64_t *theirs = got + 2 * (size_t)r * (size_t)count;
        s->view[(size_t)(base + i) * (size_t)s->ranks + (size_t)r] =
            (rma_view){NULL, theirs[i], theirs[count + i]};
      }
    }
  }
  if (win && view && own && dirty)
    s->count = total;
  for (int i = base; i < total && st == RF_OK; i++)
    for (int r = 0; r < s->ranks && st == RF_OK; r++) {
      rma_view *v = &s->view[(size_t)i * (size_t)s->ranks + (size_t)r];
      if (r == s->me || v->bytes == 0)
        continue;
      void *p = mmap(NULL, (size_t)v->bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
      if (p == MAP_FAILED)
        st = rf_fail(RF_ERR_NOMEM,
                     "rma: cannot reserve %lld bytes of address space for rank %d's "
                     "window %d",
                     (long long)v->bytes, r, i);
      else
        v->stand_in = p;
    }
  free(mine);
  free(got);
  return st;
}

static rf_status rma_peer_buffer(rf_transport *tp, int peer, int index, void **out) {
  rma_state *s = tp->state;
  *out = NULL;
  if (index < 0 || index >= s->count || peer < 0 || peer >= s->ranks)
    return rf_fail(RF_ERR_INTERNAL, "rma: rank %d has no window %d", peer, index);
  if (peer == s->me) {
    *out = s->own[index];
    return RF_OK;
  }
  rma_view *v = &s->view[(size_t)index * (size_t)s->ranks + (size_t)peer];
  if (!v->stand_in)
    return rf_fail(RF_ERR_INTERNAL, "rma: rank %d has no window %d", peer, index);
  *out = v->stand_in;
  return RF_OK;
}

/* Orders this rank's loads and stores in its arenas with the windows' (a note's either side). */
static rf_status sync_windows(rma_state *s) {
  for (int i = 0; i < s->count; i++)
    if (s->win[i] != MPI_WIN_NULL)
      RF_MPI(MPI_Win_sync(s->win[i]));
  return RF_OK;
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
      RF_TRY(sync_windows(s));
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
    RF_TRY(sync_windows(s)); /* what the peers wrote before their notes is visible here */
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
  for (int i = 0; i < s->count; i++)
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
