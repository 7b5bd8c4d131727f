/* calibrate: the limits a run is compared with, measured in the same job between the same
 * ranks for the same bytes (`refit run --calibrate`, and bench/limits.c). */
#ifndef RF_CALIBRATE_H
#define RF_CALIBRATE_H

#include "control/control.h"
#include "io/io.h"
#include "plan/plan.h"
#include "transport/transport.h"

typedef struct {
  rf_results_limits limits; /* seconds on rank 0 (median over iterations of the slowest rank) */
  int64_t mpi_bytes;        /* bytes of every (source, destination) pair, summed */
  int64_t memcpy_bytes;     /* the most bytes one rank receives */
} rf_calibration;

/* Times, `iters` times after `warmup` untimed rounds, on every rank of ctl:
 *   - mpi: every (source, destination) pair of the plan's transfer stage moves all its bytes
 *     in one MPI_Isend/MPI_Irecv (sliced at 1 GiB), host memory, all pairs at once;
 *   - memcpy: every rank copies the bytes it receives, host buffer to host buffer;
 *   - device copy, when `device` is set (the weights live on a GPU): the same bytes copied
 *     device to device; left at 0 when a rank cannot allocate them.
 *   - nccl, when `gpu_tp` is the run's GPU message transport (nccl): the same pairs' bytes,
 *     device to device, one message each in one group (stored as nccl_s; 0 otherwise).
 * Every wait is bounded by ctl->timeout; a timeout sets ctl->timed_out. Collective: every rank
 * of ctl calls it with the same arguments. */
rf_status rf_calibrate(rf_control *ctl, const rf_plan *plan, int warmup, int iters, int device,
                       rf_transport *gpu_tp, rf_calibration *out);

#endif
