/* refit-limits: the limits a refit transfer is compared with, measured between the same ranks
 * for the same bytes. It takes `refit run`'s options, builds the same plan and times them with
 * the library's calibration (src/driver/calibrate.c, what `refit run --calibrate` stores):
 *   - a plain MPI exchange: for every (trainer, rollout) pair of the plan, one contiguous
 *     MPI_Isend/MPI_Irecv of all the bytes that pair moves, all pairs at once;
 *   - memcpy: every rollout rank copying the bytes it receives, buffer to buffer.
 * Rank 0 prints one line per limit: `limit <name> bytes <B> median_ms <t> GB/s <r>`. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "driver/calibrate.h"
#include "driver/driver.h"

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  rf_log_push_quiet(rank != 0);
  rf_config cfg;
  rf_job job;
  memset(&job, 0, sizeof job);
  if (rf_cli_parse(argc, argv, &cfg) != RF_OK || cfg.help ||
      rf_job_build(&cfg, size, &job) != RF_OK) {
    if (rank == 0)
      fprintf(stderr, "usage: mpirun -np N refit-limits run <refit run options>\n");
    rf_job_free(&job);
    MPI_Finalize();
    return 2;
  }
  rf_log_pop_quiet();
  rf_control ctl;
  rf_calibration cal;
  rf_status st = rf_control_init(&ctl, &job.layout, cfg.timeout);
  if (st == RF_OK)
    st = rf_calibrate(&ctl, &job.plan, (int)cfg.warmup, (int)cfg.iters, 0, NULL, &cal);
  if (st == RF_OK && rank == 0) {
    double m = cal.limits.mpi_s, c = cal.limits.memcpy_s;
    printf("limit mpi bytes %lld median_ms %.3f GB/s %.2f\n", (long long)cal.mpi_bytes, 1e3 * m,
           cal.mpi_bytes / m / 1e9);
    printf("limit memcpy bytes %lld median_ms %.3f GB/s %.2f\n", (long long)cal.memcpy_bytes,
           1e3 * c, cal.memcpy_bytes / c / 1e9);
  }
  if (ctl.timed_out)
    MPI_Abort(MPI_COMM_WORLD, rf_status_exit_code(st)); /* requests are still pending */
  rf_control_free(&ctl);
  rf_job_free(&job);
  MPI_Finalize();
  return rf_status_exit_code(st);
}
