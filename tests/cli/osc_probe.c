/* What the MPI library's one-sided component (Open MPI: --mca osc NAME) can do on this machine,
 * independent of refit: make a window over memory MPI allocates (MPI_Win_allocate, what rma's
 * arenas and notes are) and over memory the program allocated (MPI_Win_create, what
 * --register tensor makes), and put a value through each. Rank 0 prints one line:
 *   allocate ok|failed create ok|failed
 * tests/cli/rma_cli.sh decides from it which of its jobs must run and which must be refused. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

/* Whether a window works: every rank puts its rank into the next rank's window and reads back
 * its own slot after a barrier. */
static int window_works(MPI_Win w, int *slot, int rank, int size) {
  int ok = MPI_Win_lock_all(0, w) == MPI_SUCCESS;
  int value = rank;
  ok = ok && MPI_Put(&value, 1, MPI_INT, (rank + 1) % size, 0, 1, MPI_INT, w) == MPI_SUCCESS;
  ok = ok && MPI_Win_flush_all(w) == MPI_SUCCESS;
  MPI_Barrier(MPI_COMM_WORLD);
  ok = ok && MPI_Win_sync(w) == MPI_SUCCESS && *slot == (rank + size - 1) % size;
  MPI_Win_unlock_all(w);
  return ok;
}

/* Whether every rank's window of this kind works (0 where any rank's creation failed). */
static int probe(int allocate, int rank, int size) {
  MPI_Win w = MPI_WIN_NULL;
  int *slot = NULL, rc;
  if (allocate) {
    rc = MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &slot, &w);
  } else {
    slot = malloc(sizeof *slot);
    rc = MPI_Win_create(slot, sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &w);
  }
  int ok = rc == MPI_SUCCESS, all = 0;
  if (ok) {
    MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN);
    *slot = -1;
    MPI_Barrier(MPI_COMM_WORLD);
    ok = window_works(w, slot, rank, size);
    MPI_Win_free(&w);
  }
  if (!allocate)
    free(slot);
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int allocate = probe(1, rank, size), create = probe(0, rank, size);
  if (rank == 0)
    printf("allocate %s create %s\n", allocate ? "ok" : "failed", create ? "ok" : "failed");
  MPI_Finalize();
  return 0;
}
