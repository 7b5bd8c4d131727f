/* The rma transport's copies (transport_rma.c says the whole): each box copy of the engine's
 * batch that has an end in a stand-in becomes one MPI_Put or MPI_Get at the window and offset
 * behind it, with datatypes where an end is strided; copy_wait flushes them. */
#include <stdlib.h>

#include "transport_rma_internal.h"

/* The datatype that walks `box` of region r in row-major logical order, from its lo corner:
 * rows of dense bytes where dimension 1 is dense, element by element otherwise (a transpose).
 * Both ends of a copy walk the same order, so their type signatures (bytes) agree. */
static rf_status box_type(const rf_region *r, const rf_box *box, MPI_Datatype *out) {
  int64_t h = box->hi[0] - box->lo[0], w = box->hi[1] - box->lo[1], es = r->esize;
  if (h > INT32_MAX || w * es > INT32_MAX)
    return rf_fail(RF_ERR_UNSUPPORTED,
                   "rma: a box of %lld x %lld elements is too large for one "
                   "MPI datatype; use --transport mpi",
                   (long long)h, (long long)w);
  MPI_Datatype row;
  if (r->stride[1] == 1 || w == 1) {
    RF_MPI(MPI_Type_create_hvector((int)h, (int)(w * es), (MPI_Aint)(r->stride[0] * es), MPI_BYTE,
                                   out));
  } else {
    RF_MPI(MPI_Type_create_hvector((int)w, (int)es, (MPI_Aint)(r->stride[1] * es), MPI_BYTE, &row));
    int rc = MPI_Type_create_hvector((int)h, 1, (MPI_Aint)(r->stride[0] * es), row, out);
    MPI_Type_free(&row);
    RF_MPI(rc);
  }
  RF_MPI(MPI_Type_commit(out));
  return RF_OK;
}

/* One operation: from (put) or into (get) this rank's `local` at `disp` of `rank`'s window. */
static rf_status one_op(rma_state *s, int put, int index, int rank, MPI_Aint disp,
                        const rf_region *local, const rf_region *remote, const rf_box *box) {
  MPI_Win w = s->win[index];
  char *at = rf_region_at(local, box->lo[0], box->lo[1]);
  s->dirty[index] = 1;
  if (rf_region_contiguous(local, box) && rf_region_contiguous(remote, box)) {
    int64_t bytes = rf_box_numel(box) * local->esize;
    for (int64_t off = 0; off < bytes; off += RMA_SLICE) {
      int n = (int)RF_MIN(RMA_SLICE, bytes - off);
      if (put)
        RF_MPI(MPI_Put(at + off, n, MPI_BYTE, rank, disp + (MPI_Aint)off, n, MPI_BYTE, w));
      else
        RF_MPI(MPI_Get(at + off, n, MPI_BYTE, rank, disp + (MPI_Aint)off, n, MPI_BYTE, w));
    }
    return RF_OK;
  }
  MPI_Datatype mine, theirs;
  RF_TRY(box_type(local, box, &mine));
  rf_status st = box_type(remote, box, &theirs);
  if (st != RF_OK) {
    MPI_Type_free(&mine);
    return st;
  }
  int rc = put ? MPI_Put(at, 1, mine, rank, disp, 1, theirs, w)
               : MPI_Get(at, 1, mine, rank, disp, 1, theirs, w);
  /* MPI keeps what a started operation needs of its types. */
  MPI_Type_free(&mine);
  MPI_Type_free(&theirs);
  RF_MPI(rc);
  return RF_OK;
}

/* `bytes` of scratch that stay put until copy_wait. */
static rf_status scratch_take(rma_state *s, int64_t bytes, char **out) {
  bytes = (bytes + 63) & ~(int64_t)63;
  for (; s->scratch_at < s->scratch_count; s->scratch_at++) {
    rma_chunk *c = &s->scratch[s->scratch_at];
    if (c->size - c->used >= bytes) {
      *out = c->base + c->used;
      c->used += bytes;
      return RF_OK;
    }
  }
  RF_TRY(rf_grow((void **)&s->scratch, s->scratch_count, &s->scratch_cap, sizeof *s->scratch,
                 "rma scratch"));
  int64_t size = RF_MAX(bytes, RMA_SCRATCH_CHUNK);
  char *base = rf_malloc((size_t)size, "rma scratch for transposed boxes");
  if (!base)
    return RF_ERR_NOMEM;
  s->scratch[s->scratch_count++] = (rma_chunk){base, size, bytes};
  s->scratch_at = s->scratch_count - 1;
  *out = base;
  return RF_OK;
}

/* One box between this rank's `local` end and a window. A one-sided component that moves a
 * datatype's dense runs one by one (osc rdma, ucx) would move a transposed end (a JAX-order
 * shard) element by element: 550 ms for the tiny model's 279 KB, 19 ms this way. So a put
 * whose local rows are not dense transposes them first, into scratch in row-major order. A
 * transposed remote end (--rma get from a JAX-order trainer) has no such way round: put suits
 * that order (the engine's local ends of a get, rollout tensors and star's coupling, are
 * row-major). */
static rf_status box_op(rma_state *s, int put, int index, int rank, MPI_Aint disp,
                        const rf_region *local, const rf_region *remote, const rf_box *box) {
  int64_t w = box->hi[1] - box->lo[1];
  if (!put || local->stride[1] == 1 || w == 1)
    return one_op(s, put, index, rank, disp, local, remote, box);
  char *tmp;
  RF_TRY(scratch_take(s, rf_box_numel(box) * local->esize, &tmp));
  rf_region rows = rf_region_row_major(tmp, box, local->esize);
  rf_region_copy(&rows, local, box);
  return one_op(s, put, index, rank, disp, &rows, remote, box);
}

rf_status rma_copy_boxes(rf_transport *tp, const rf_box_copy *copies, int count) {
  rma_state *s = tp->state;
  for (int i = 0; i < count; i++) {
    const rf_box_copy *c = &copies[i];
    if (rf_box_is_empty(&c->box))
      continue;
    int rank = -1;
    MPI_Aint disp = 0;
    int index = rma_find_window(s, rf_region_at(&c->dst, c->box.lo[0], c->box.lo[1]), &rank, &disp);
    if (index >= 0) {
      RF_TRY(box_op(s, 1, index, rank, disp, &c->src, &c->dst, &c->box));
      continue;
    }
    index = rma_find_window(s, rf_region_at(&c->src, c->box.lo[0], c->box.lo[1]), &rank, &disp);
    if (index >= 0)
      RF_TRY(box_op(s, 0, index, rank, disp, &c->dst, &c->src, &c->box));
    else
      rf_region_copy(&c->dst, &c->src, &c->box); /* both ends are this rank's */
  }
  return RF_OK;
}

rf_status rma_copy_wait(rf_transport *tp, const char *what) {
  rma_state *s = tp->state;
  for (int i = 0; i < s->win_count; i++)
    if (s->dirty[i]) {
      RF_MPI(MPI_Win_flush_all(s->win[i]));
      s->dirty[i] = 0;
    }
  for (int i = 0; i < s->scratch_count; i++)
    s->scratch[i].used = 0;
  s->scratch_at = 0;
  return RF_OK;
}
