/* refit-limits: the limits a refit transfer is compared with, measured between the same ranks
 * for the same bytes. It takes `refit run`'s options, builds the same plan and then times
 *   - a plain MPI exchange: for every (trainer, rollout) pair of the plan, one contiguous
 *     MPI_Isend/MPI_Irecv of all the bytes that pair moves, then MPI_Waitall;
 *   - memcpy: every rollout rank copying the bytes it receives, buffer to buffer.
 * Rank 0 prints one line per limit: `limit <name> bytes <B> median_ms <t> GB/s <r>`. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  rf_log_set_quiet(rank != 0);
  rf_config cfg;
  rf_job job;
  if (rf_cli_parse(argc, argv, &cfg) != RF_OK || cfg.help || rf_job_build(&cfg, &job) != RF_OK ||
      job.layout.world_size != size) {
    if (rank == 0)
      fprintf(stderr, "usage: mpirun -np N refit-limits run <refit run options>\n");
    MPI_Finalize();
    return 2;
  }
  /* Bytes per (source, destination) world-rank pair over the transfer stage. */
  int64_t *pair = calloc((size_t)size * size, sizeof *pair);
  for (int i = 0; i < job.plan.piece_count; i++) {
    const rf_piece *p = &job.plan.pieces[i];
    if (p->stage == RF_STAGE_TRANSFER)
      pair[(size_t)rf_piece_src_world(&job.plan, p) * size + rf_piece_dst_world(&job.plan, p)] +=
          p->bytes;
  }
  int64_t out = 0, in = 0;
  for (int q = 0; q < size; q++)
    out += pair[(size_t)rank * size + q], in += pair[(size_t)q * size + rank];
  char *sendbuf = malloc((size_t)out + 1), *recvbuf = malloc((size_t)in + 1),
       *copy = malloc((size_t)in + 1);
  memset(sendbuf, 1, (size_t)out);
  memset(recvbuf, 0, (size_t)in);
  memset(copy, 0, (size_t)in);
  MPI_Request *req = malloc(2 * (size_t)size * sizeof *req);
  int iters = (int)cfg.iters, warmup = (int)cfg.warmup;
  double *t_mpi = calloc((size_t)iters, sizeof(double)), *t_copy = calloc((size_t)iters, sizeof(double));
  for (int it = 0; it < warmup + iters; it++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int n = 0;
    int64_t so = 0, ro = 0;
    for (int q = 0; q < size; q++) {
      int64_t r = pair[(size_t)q * size + rank], s = pair[(size_t)rank * size + q];
      /* Messages over 1 GiB go in slices, as refit's mpi transport sends them. */
      for (int64_t off = 0; off < r; off += 1 << 30)
        MPI_Irecv(recvbuf + ro + off, (int)(r - off < (1 << 30) ? r - off : 1 << 30), MPI_BYTE, q,
                  0, MPI_COMM_WORLD, &req[n++]);
      for (int64_t off = 0; off < s; off += 1 << 30)
        MPI_Isend(sendbuf + so + off, (int)(s - off < (1 << 30) ? s - off : 1 << 30), MPI_BYTE, q,
                  0, MPI_COMM_WORLD, &req[n++]);
      ro += r, so += s;
      if (n > 2 * size - 8) {
        MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
        n = 0;
      }
    }
    MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    double t1 = MPI_Wtime();
    memcpy(copy, recvbuf, (size_t)in);
    double t2 = MPI_Wtime(), mpi_max, copy_max, mine[2] = {t1 - t0, t2 - t1}, all[2];
    MPI_Reduce(mine, all, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    mpi_max = all[0], copy_max = all[1];
    if (it >= warmup)
      t_mpi[it - warmup] = mpi_max, t_copy[it - warmup] = copy_max;
  }
  int64_t total = 0, max_in = 0;
  MPI_Reduce(&in, &max_in, 1, MPI_INT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&in, &total, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    double m = median(t_mpi, iters), c = median(t_copy, iters);
    printf("limit mpi bytes %lld median_ms %.3f GB/s %.2f\n", (long long)total, 1e3 * m,
           total / m / 1e9);
    printf("limit memcpy bytes %lld median_ms %.3f GB/s %.2f\n", (long long)max_in, 1e3 * c,
           max_in / c / 1e9);
  }
  rf_job_free(&job);
  free(pair), free(sendbuf), free(recvbuf), free(copy), free(req), free(t_mpi), free(t_copy);
  MPI_Finalize();
  return 0;
}
