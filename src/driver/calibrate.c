/* The calibrated limits: the same bytes between the same ranks, moved by the plainest means
 * there are, so that a run's time reads as a fraction of what the machine allows. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate.h"
#include "result/result.h"

/* Columns of the timing table: one per limit, plus a flag for ranks that measured nothing. */
enum { COL_MPI, COL_MEMCPY, COL_DEVICE, COL_GPU_MSG, COL_COUNT };

/* MPI counts are int: larger pair messages go in slices, as the mpi transport sends them. */
#define SLICE ((int64_t)1 << 30)

typedef struct {
  int64_t *send, *recv; /* [world rank] bytes this rank sends to / receives from each rank */
  int64_t out, in;      /* their sums */
  char *sendbuf, *recvbuf, *copybuf;
  MPI_Request *req;
  int nreq;
} exchange;

static void pair_bytes(const rf_plan *plan, int me, exchange *x) {
  for (int i = 0; i < plan->piece_count; i++) {
    const rf_piece *p = &plan->pieces[i];
    /* The trainer's transfer and fanout's forwards, all at once: a forward's wait for what
     * it passes on is the plan's cost, not the machine's. Star's reshape stays out, as ever. */
    if (p->stage == RF_STAGE_RESHAPE)
      continue;
    int src = rf_piece_src_world(plan, p), dst = rf_piece_dst_world(plan, p);
    if (src == me)
      x->send[dst] += p->bytes;
    if (dst == me)
      x->recv[src] += p->bytes;
  }
  for (int q = 0; q < plan->layout->world_size; q++) {
    x->out += x->send[q];
    x->in += x->recv[q];
  }
}

static rf_status testall(void *ctx, int *done) {
  exchange *x = ctx;
  RF_MPI(MPI_Testall(x->nreq, x->req, done, MPI_STATUSES_IGNORE));
  return RF_OK;
}

/* One round of the plain exchange: every receive and send posted at once, then one wait. */
static rf_status exchange_once(rf_control *ctl, exchange *x) {
  int64_t so = 0, ro = 0;
  x->nreq = 0;
  for (int q = 0; q < ctl->world_size; q++) {
    for (int64_t off = 0; off < x->recv[q]; off += SLICE)
      RF_MPI(MPI_Irecv(x->recvbuf + ro + off, (int)RF_MIN(x->recv[q] - off, SLICE), MPI_BYTE, q, 0,
                       ctl->world, &x->req[x->nreq++]));
    for (int64_t off = 0; off < x->send[q]; off += SLICE)
      RF_MPI(MPI_Isend(x->sendbuf + so + off, (int)RF_MIN(x->send[q] - off, SLICE), MPI_BYTE, q, 0,
                       ctl->world, &x->req[x->nreq++]));
    ro += x->recv[q];
    so += x->send[q];
  }
  rf_status st = rf_poll(testall, x, ctl->timeout);
  if (st == RF_ERR_TIMEOUT) {
    ctl->timed_out = 1; /* requests stay posted: the job must be aborted, not finalised */
    return rf_timeout_error(ctl->timeout, "the calibration's plain MPI exchange", NULL);
  }
  return st;
}

/* One round of the same exchange over the run's own GPU message transport (nccl): device
 * buffers, every pair's bytes as one message, all posted in one group, one bounded wait. */
static rf_status gpu_exchange_once(rf_transport *tp, const exchange *x, char *dsend, char *drecv) {
  int64_t so = 0, ro = 0;
  long ticket = -1;
  RF_TRY(tp->ops->group_start(tp));
  for (int q = 0; q < tp->ctl->world_size; q++) {
    if (x->recv[q])
      RF_TRY(rf_transport_recv(tp, RF_CHANNEL_WORLD, q, drecv + ro, (size_t)x->recv[q], &ticket));
    if (x->send[q])
      RF_TRY(rf_transport_send(tp, RF_CHANNEL_WORLD, q, dsend + so, (size_t)x->send[q], &ticket));
    ro += x->recv[q];
    so += x->send[q];
  }
  RF_TRY(tp->ops->group_end(tp));
  return ticket >= 0 ? tp->ops->wait(tp, ticket + 1, "the calibration's plain GPU transfer")
                     : RF_OK;
}

/* The median of column k of times[n][COL_COUNT] (the report's statistics, so a limit and a
 * run's time are the same kind of number), or -1 when a round of it was not measured. */
static double column_median(double *times, int n, int k) {
  double *v = times + COL_COUNT * (size_t)n; /* the spare row holds the column */
  for (int i = 0; i < n; i++) {
    v[i] = times[COL_COUNT * (size_t)i + k];
    if (v[i] < 0)
      return -1.0;
  }
  rf_stats s;
  return rf_stats_of(v, n, &s) == RF_OK ? s.median : -1.0; /* -1: not measured, said above */
}

/* The device copy runs through buffers of at most this size, again and again until it has
 * copied the run's bytes: a model that fills most of the GPU twice (trainer and rollout) left
 * no room for two more copies of it, and the limit was not measured. Copies this large run
 * at the engine's full rate, and a few calls more cost well under a percent of the time. */
#define DEVICE_COPY_CHUNK ((int64_t)2 << 30)

/* Device buffers, or none when this rank cannot have them: dev[0] and dev[1] are the device
 * copy's (at most DEVICE_COPY_CHUNK each), dev[2] and dev[3] the GPU transfer's (the bytes
 * sent and received, whole, as the transport moves them; only with one). */
static int device_buffers(const exchange *x, int gpu_transfer, size_t *bytes, void **dev) {
  size_t chunk = (size_t)RF_MIN(x->in, DEVICE_COPY_CHUNK) + 1;
  bytes[0] = bytes[1] = chunk;
  bytes[2] = gpu_transfer ? (size_t)x->out + 1 : 0;
  bytes[3] = gpu_transfer ? (size_t)x->in + 1 : 0;
  rf_log_push_quiet(1); /* a missing GPU only means the limit is not measured */
  int ok = 1;
  for (int i = 0; i < 4 && ok; i++)
    ok = !bytes[i] || (rf_mem_alloc(RF_MEM_DEVICE, bytes[i], "calibration", &dev[i]) == RF_OK &&
                       rf_mem_zero(RF_MEM_DEVICE, dev[i], bytes[i]) == RF_OK);
  rf_log_pop_quiet();
  return ok;
}

/* A device copy of n bytes, through the chunk buffers. */
static rf_status device_copy(void **dev, int64_t n) {
  for (int64_t done = 0; done < n; done += DEVICE_COPY_CHUNK)
    RF_TRY(rf_mem_transfer(dev[1], RF_MEM_DEVICE, dev[0], RF_MEM_DEVICE,
                           (size_t)RF_MIN(n - done, DEVICE_COPY_CHUNK)));
  return RF_OK;
}

/* Times every round; times[COL_COUNT * it + k] holds round it's seconds for limit k, each the
 * slowest rank's, on rank 0. */
static rf_status time_rounds(rf_control *ctl, exchange *x, int warmup, int iters, void **dev,
                             int device_ok, rf_transport *gpu_tp, double *times) {
  for (int it = 0; it < warmup + iters; it++) {
    RF_TRY(rf_control_barrier(ctl, ctl->world, "the calibration barrier"));
    double t0 = rf_now();
    RF_TRY(exchange_once(ctl, x));
    double t1 = rf_now();
    memcpy(x->copybuf, x->recvbuf, (size_t)x->in);
    double t2 = rf_now();
    if (device_ok && x->in > 0)
      RF_TRY(device_copy(dev, x->in));
    double t3 = rf_now();
    if (device_ok && gpu_tp)
      RF_TRY(gpu_exchange_once(gpu_tp, x, dev[2], dev[3]));
    double mine[COL_COUNT + 1] = {t1 - t0, t2 - t1, t3 - t2, rf_now() - t3, device_ok ? 0 : 1};
    double all[COL_COUNT + 1] = {0};
    RF_TRY(rf_control_reduce(ctl, ctl->world, mine, all, COL_COUNT + 1, MPI_DOUBLE, MPI_MAX,
                             "the calibration's timings"));
    if (it >= warmup) {
      double *row = times + COL_COUNT * (size_t)(it - warmup);
      memcpy(row, all, COL_COUNT * sizeof *all);
      if (all[COL_COUNT] > 0) /* a rank had no device buffers */
        row[COL_DEVICE] = row[COL_GPU_MSG] = -1.0;
    }
  }
  return RF_OK;
}

rf_status rf_calibrate(rf_control *ctl, const rf_plan *plan, int warmup, int iters, int device,
                       rf_transport *gpu_tp, rf_calibration *out) {
  memset(out, 0, sizeof *out);
  int n = ctl->world_size;
  exchange x;
  memset(&x, 0, sizeof x);
  x.send = rf_calloc((size_t)n, sizeof *x.send, "calibration pairs");
  x.recv = rf_calloc((size_t)n, sizeof *x.recv, "calibration pairs");
  double *times =
      rf_calloc((COL_COUNT + 1) * (size_t)RF_MAX(iters, 1), sizeof *times, "calibration times");
  rf_status st = x.send && x.recv && times ? RF_OK : RF_ERR_NOMEM;
  if (st == RF_OK) {
    pair_bytes(plan, ctl->world_rank, &x);
    size_t slices = 0;
    for (int q = 0; q < n; q++)
      slices += (size_t)((x.send[q] + SLICE - 1) / SLICE + (x.recv[q] + SLICE - 1) / SLICE);
    x.sendbuf = rf_malloc((size_t)x.out + 1, "calibration send buffer");
    x.recvbuf = rf_malloc((size_t)x.in + 1, "calibration receive buffer");
    x.copybuf = rf_malloc((size_t)x.in + 1, "calibration copy buffer");
    x.req = rf_calloc(slices + 1, sizeof *x.req, "calibration requests");
    st = x.sendbuf && x.recvbuf && x.copybuf && x.req ? RF_OK : RF_ERR_NOMEM;
  }
  void *dev[4] = {NULL, NULL, NULL, NULL};
  size_t dev_bytes[4] = {0, 0, 0, 0};
  int device_ok = 0;
  if (st == RF_OK) {
    /* Touch every page first, so that no round pays for faulting them in. */
    memset(x.sendbuf, 1, (size_t)x.out + 1);
    memset(x.recvbuf, 0, (size_t)x.in + 1);
    memset(x.copybuf, 0, (size_t)x.in + 1);
    device_ok = device && device_buffers(&x, gpu_tp != NULL, dev_bytes, dev);
  }
  st = rf_control_agree(ctl, st);
  if (st == RF_OK)
    st = rf_control_agree(ctl, time_rounds(ctl, &x, warmup, iters, dev, device_ok, gpu_tp, times));
  int64_t bytes[2] = {x.in, x.in}, sums[2] = {0, 0};
  /* The exchange moves the sum of what the ranks receive; memcpy is as slow as its largest. */
  if (st == RF_OK)
    st = rf_control_reduce(ctl, ctl->world, &bytes[0], &sums[0], 1, MPI_INT64_T, MPI_SUM,
                           "the calibration's bytes");
  if (st == RF_OK)
    st = rf_control_reduce(ctl, ctl->world, &bytes[1], &sums[1], 1, MPI_INT64_T, MPI_MAX,
                           "the calibration's bytes");
  if (st == RF_OK && ctl->world_rank == 0) {
    out->limits.mpi_s = column_median(times, iters, COL_MPI);
    out->limits.memcpy_s = column_median(times, iters, COL_MEMCPY);
    out->limits.device_copy_s = device ? RF_MAX(column_median(times, iters, COL_DEVICE), 0.0) : 0.0;
    out->limits.nccl_s = gpu_tp ? RF_MAX(column_median(times, iters, COL_GPU_MSG), 0.0) : 0.0;
    out->mpi_bytes = sums[0];
    out->memcpy_bytes = sums[1];
  }
  for (int i = 0; i < 4; i++)
    if (dev[i])
      rf_mem_free(RF_MEM_DEVICE, dev[i], dev_bytes[i]);
  if (!ctl->timed_out) { /* after a timeout MPI may still write into the buffers */
    free(x.sendbuf);
    free(x.recvbuf);
    free(x.req);
  }
  free(x.copybuf);
  free(x.send);
  free(x.recv);
  free(times);
  return st;
}
