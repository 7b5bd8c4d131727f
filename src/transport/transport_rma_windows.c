/* The rma transport's windows (transport_rma.c says the whole): the arenas allocated as
 * windows, the buffers exposed (one window each, or under --register tensor one per tensor),
 * the stand-ins through which the engine names a peer's memory, and their release. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "transport_rma_internal.h"

/* The arenas as windows of MPI_Win_allocate (transport.h, alloc_arenas), each 64 bytes larger
 * than asked so that the arena can start 64-byte aligned (MPI promises less). A bounded
 * barrier first, as for expose's sizes, so that every rank reaches the allocations, which MPI
 * cannot bound, only once all have arrived. */
rf_status rma_alloc_arenas(rf_transport *tp, const size_t *bytes, int count, void **out) {
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

rf_status rma_expose(rf_transport *tp, void *const *buffers, int count) {
  return rf_fail(RF_ERR_USAGE, "the rma transport cannot offer a delta refit's encoded pieces; "
                               "use --delta off or --transport mpi");
}

/* A bounded wait for a non-blocking collective that MPI started with return code rc. */
static rf_status collective(rf_transport *tp, int rc, MPI_Request *req, const char *call,
                            const char *what) {
  return rc == MPI_SUCCESS ? rf_control_wait(tp->ctl, req, what)
                           : rf_mpi_failed(rc, call, __FILE__, __LINE__);
}

/* Makes (or, for an arena allocated here, takes) window `at` of buffer `buf`'s unit: `size`
 * bytes at `base` here, and opens its passive-target epoch. Every rank calls it alike. */
static rf_status make_window(rf_transport *tp, int buf, void *base, MPI_Aint size, MPI_Win *w) {
  rma_state *s = tp->state;
  int rc;
  if (buf < s->arena_count) {
    *w = s->arena_win[buf];
    rc = *w != MPI_WIN_NULL ? MPI_SUCCESS : MPI_ERR_WIN;
  } else {
    rc = MPI_Win_create(base, size, 1, MPI_INFO_NULL, tp->ctl->world, w);
  }
  if (rc != MPI_SUCCESS) {
    char why[RF_MPI_ERROR_MAX];
    return rf_fail(RF_ERR_MPI,
                   "rma: MPI_Win_create failed (%s): this MPI's one-sided component cannot "
                   "make a window over memory it did not allocate (Open MPI's osc sm cannot); "
                   "let it take another (Open MPI: --mca osc pt2pt, rdma or ucx)",
                   rf_mpi_error_string(rc, why, sizeof why));
  }
  MPI_Win_set_errhandler(*w, MPI_ERRORS_RETURN);
  rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, *w);
  return rc == MPI_SUCCESS ? RF_OK : rf_mpi_failed(rc, "MPI_Win_lock_all", __FILE__, __LINE__);
}

/* Grows the per-buffer and per-window tables for `buffers` more buffers and `windows` more
 * windows. */
static rf_status grow_tables(rma_state *s, int buffers, int windows) {
  int nb = s->count + buffers, nw = s->win_count + windows;
  size_t views = (size_t)s->ranks * (size_t)nb;
  void *p;
#define RMA_GROW(field, n)                                                                         \
  if (!(p = realloc(s->field, (size_t)(n) * sizeof *s->field + 1)))                                \
    return rf_fail(RF_ERR_NOMEM, "out of memory for the rma windows' tables");                     \
  s->field = p;
  RMA_GROW(first_win, nb)
  RMA_GROW(own, nb)
  RMA_GROW(view, views)
  RMA_GROW(win, nw)
  RMA_GROW(dirty, nw)
#undef RMA_GROW
  return RF_OK;
}

/* Each call appends `count` buffers after those of earlier calls (index-major tables, as
 * shm's), each as one window, or, where some rank gives cuts, one window per unit (as many on
 * every rank as the rank with the most units has; empty on the others). What every rank needs
 * to agree on goes round first, in bounded collectives: each buffer's size, its offset in its
 * window and its cut count, then the cuts and whether the tables grew on every rank, so that
 * every rank reaches the window creations, which MPI cannot bound, only once all have arrived
 * and all can record them. */
rf_status rma_expose_sized(rf_transport *tp, void *const *buffers, const size_t *bytes,
                           const rf_cuts *cuts, int count) {
  rma_state *s = tp->state;
  int base = s->count, ranks = s->ranks;
  int64_t *mine = rf_calloc(3 * (size_t)count + 1, sizeof *mine, "rma window sizes");
  int64_t *got = rf_calloc(3 * (size_t)ranks * (size_t)count + 1, sizeof *got, "rma window sizes");
  int *cut_n = rf_calloc((size_t)ranks + 1, sizeof *cut_n, "rma window cuts");
  int *cut_at = rf_calloc((size_t)ranks + 1, sizeof *cut_at, "rma window cuts");
  if (!mine || !got || !cut_n || !cut_at) {
    free(mine), free(got), free(cut_n), free(cut_at);
    return RF_ERR_NOMEM; /* the peers' bounded exchange below ends in a timeout */
  }
  rf_status st = RF_OK;
  int my_cuts = 0;
  for (int i = 0; i < count; i++) {
    mine[i] = buffers[i] ? (int64_t)bytes[i] : 0;
    mine[count + i] = base + i < s->arena_count ? s->arena_origin[base + i] : 0;
    mine[2 * count + i] = cuts && buffers[i] ? cuts[i].count : 0;
    my_cuts += (int)mine[2 * count + i];
    if (base + i < s->arena_count && buffers[i] != s->arena_at[base + i])
      st = rf_fail(RF_ERR_INTERNAL, "rma: exposed buffer %d is not the arena allocated for it",
                   base + i);
  }
  MPI_Request req;
  rf_status waited = collective(tp,
                                MPI_Iallgather(mine, 3 * count, MPI_INT64_T, got, 3 * count,
                                               MPI_INT64_T, tp->ctl->world, &req),
                                &req, "MPI_Iallgather", "the rma window sizes");
  /* Windows per buffer: its most units on any rank (an arena allocated here is one). */
  int windows = 0, all_cuts = 0;
  int *units = rf_calloc((size_t)count + 1, sizeof *units, "rma window cuts");
  for (int r = 0; r < ranks && waited == RF_OK; r++) {
    const int64_t *theirs = got + 3 * (size_t)r * (size_t)count;
    cut_at[r] = all_cuts;
    for (int i = 0; i < count; i++) {
      cut_n[r] += (int)theirs[2 * count + i];
      if (units && theirs[2 * count + i] > units[i])
        units[i] = (int)theirs[2 * count + i];
    }
    all_cuts += cut_n[r];
  }
  for (int i = 0; i < count && units; i++)
    windows += units[i] = RF_MAX(units[i], 1);
  int64_t *every = rf_calloc((size_t)all_cuts + 1, sizeof *every, "rma window cuts");
  int64_t *flat = rf_calloc((size_t)my_cuts + 1, sizeof *flat, "rma window cuts");
  for (int i = 0; i < count && units && st == RF_OK; i++)
    if (base + i < s->arena_count && units[i] > 1) /* alike on every rank: from the exchange */
      st = rf_fail(RF_ERR_INTERNAL, "rma: an arena allocated as one window is cut in %d", units[i]);
  if (waited == RF_OK && st == RF_OK)
    st = units && every && flat ? grow_tables(s, count, windows) : RF_ERR_NOMEM;
  if (waited == RF_OK && st == RF_OK && all_cuts) /* the views point into `every` */
    st = rf_grow((void **)&s->cut_blocks, s->cut_block_count, &s->cut_block_cap,
                 sizeof *s->cut_blocks, "rma window cuts");
  for (int i = 0, n = 0; i < count && flat && cuts; i++)
    for (int c = 0; buffers[i] && c < cuts[i].count; c++)
      flat[n++] = cuts[i].at[c];
  int ok = st == RF_OK, all_ok = 0;
  if (waited == RF_OK)
    waited = collective(tp, MPI_Iallreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, tp->ctl->world, &req),
                        &req, "MPI_Iallreduce", "the rma windows' tables");
  if (waited == RF_OK && all_ok && all_cuts)
    waited = collective(tp,
                        MPI_Iallgatherv(flat, my_cuts, MPI_INT64_T, every, cut_n, cut_at,
                                        MPI_INT64_T, tp->ctl->world, &req),
                        &req, "MPI_Iallgatherv", "the rma window cuts");
  if (waited != RF_OK || !all_ok) {
    free(mine), free(got), free(cut_n), free(cut_at), free(units), free(every), free(flat);
    return waited != RF_OK ? waited : st != RF_OK ? st : RF_ERR_NOMEM;
  }
  /* Every rank's units, as they arrived, start at 0 and follow one another inside its buffer,
   * or windows would overlap or leave bytes out; every rank checks all alike. */
  for (int r = 0; r < ranks && waited == RF_OK; r++) {
    const int64_t *theirs = got + 3 * (size_t)r * (size_t)count, *c = every + cut_at[r];
    for (int i = 0; i < count; c += theirs[2 * count + i], i++)
      for (int u = 0; u < theirs[2 * count + i] && waited == RF_OK; u++)
        if ((u == 0) != (c[u] == 0) || (u && c[u] <= c[u - 1]) || c[u] >= theirs[i])
          waited = rf_fail(RF_ERR_INTERNAL, "rma: rank %d's buffer %d has a unit at %lld", r,
                           base + i, (long long)c[u]);
  }
  if (waited != RF_OK) {
    free(mine), free(got), free(cut_n), free(cut_at), free(units), free(every), free(flat);
    return waited;
  }
  /* Every rank creates every window, whatever failed locally, and the stand-ins after. */
  for (int i = 0; i < count; i++) {
    int b = base + i;
    s->first_win[b] = s->win_count;
    s->own[b] = buffers[i];
    for (int r = 0; r < ranks; r++) {
      const int64_t *theirs = got + 3 * (size_t)r * (size_t)count;
      int at = cut_at[r], n = (int)theirs[2 * count + i]; /* rank r's cuts of buffer b */
      for (int j = 0; j < i; j++)
        at += (int)theirs[2 * count + j];
      s->view[(size_t)b * (size_t)ranks + (size_t)r] =
          (rma_view){NULL, theirs[i], theirs[count + i], n ? every + at : NULL, n};
    }
    const rma_view *me = &s->view[(size_t)b * (size_t)ranks + (size_t)s->me];
    for (int u = 0; u < units[i]; u++) {
      /* Unit u of this rank's buffer: from its cut to the next (or the end); none past its
       * own units. */
      int64_t lo = me->cuts ? (u < me->cut_count ? me->cuts[u] : me->bytes) : (u ? me->bytes : 0);
      int64_t hi = me->cuts && u + 1 < me->cut_count ? me->cuts[u + 1] : me->bytes;
      void *at = st == RF_OK && hi > lo ? (char *)buffers[i] + lo : NULL;
      MPI_Win w = MPI_WIN_NULL;
      rf_status made = make_window(tp, b, at, at ? (MPI_Aint)(hi - lo) : 0, &w);
      if (st == RF_OK)
        st = made;
      s->dirty[s->win_count] = 0;
      s->win[s->win_count++] = w;
    }
  }
  s->count = base + count;
  if (all_cuts) /* the views point into it until finalize */
    s->cut_blocks[s->cut_block_count++] = every;
  else
    free(every);
  for (int b = base; b < s->count && st == RF_OK; b++)
    for (int r = 0; r < ranks && st == RF_OK; r++) {
      rma_view *v = &s->view[(size_t)b * (size_t)ranks + (size_t)r];
      if (r == s->me || v->bytes == 0)
        continue;
      void *p = mmap(NULL, (size_t)v->bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
      if (p == MAP_FAILED)
        st = rf_fail(RF_ERR_NOMEM,
                     "rma: cannot reserve %lld bytes of address space for rank %d's "
                     "window %d",
                     (long long)v->bytes, r, b);
      else
        v->stand_in = p;
    }
  free(mine), free(got), free(cut_n), free(cut_at), free(units), free(flat);
  return st;
}

rf_status rma_peer_buffer(rf_transport *tp, int peer, int index, void **out) {
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

int rma_find_window(const rma_state *s, const char *at, int *rank, MPI_Aint *disp) {
  for (int i = 0; i < s->count; i++)
    for (int r = 0; r < s->ranks; r++) {
      const rma_view *v = &s->view[(size_t)i * (size_t)s->ranks + (size_t)r];
      if (!v->stand_in || at < v->stand_in || at >= v->stand_in + v->bytes)
        continue;
      int64_t off = at - v->stand_in;
      int lo = 0, hi = v->cut_count; /* the last cut at or before off */
      while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v->cuts[mid] <= off)
          lo = mid;
        else
          hi = mid;
      }
      *rank = r;
      *disp = (MPI_Aint)(off - (v->cuts ? v->cuts[lo] : 0) + v->origin);
      return s->first_win[i] + lo;
    }
  return -1;
}

rf_status rma_sync_windows(rma_state *s) {
  for (int i = 0; i < s->win_count; i++)
    if (s->win[i] != MPI_WIN_NULL)
      RF_MPI(MPI_Win_sync(s->win[i]));
  return RF_OK;
}

void rma_windows_free(rma_state *s) {
  /* Windows are freed collectively; every rank closes its transport at the same point. The
   * arenas' windows are the first ones exposed, and freed last, exposed or not. */
  for (int i = 0; i < s->win_count; i++)
    if (s->win[i] != MPI_WIN_NULL) {
      MPI_Win_unlock_all(s->win[i]);
      if (i >= s->arena_count)
        MPI_Win_free(&s->win[i]);
    }
  for (int i = 0; i < s->arena_count; i++)
    if (s->arena_win[i] != MPI_WIN_NULL)
      MPI_Win_free(&s->arena_win[i]);
  for (size_t v = 0; v < (size_t)s->count * (size_t)s->ranks; v++)
    if (s->view[v].stand_in)
      munmap(s->view[v].stand_in, (size_t)s->view[v].bytes);
  for (int i = 0; i < s->cut_block_count; i++)
    free(s->cut_blocks[i]);
  free(s->cut_blocks), free(s->first_win), free(s->win), free(s->view), free(s->own);
  free(s->dirty);
}
