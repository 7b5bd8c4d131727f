/* The mpi transport's strided messages under mpirun -np 2: rank 0 sends a byte sequence cut
 * into parts of one shape (strided rows, a contiguous run, narrow rows), rank 1 receives it
 * into parts of another (wider rows at another pitch), and every byte must land where the
 * receiver's parts put it, with the gaps between rows untouched. The same exchange runs again
 * with messages cut every 1000 bytes (REFIT_MPI_SLICE), so that the cuts fall mid-row on both
 * ends and at different places in their parts, as a message over 1 GiB is cut. Then two
 * contiguous messages in the same order through post, which both ends cut alike too. Last, the
 * rma transport's refusal of GPU memory. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "transport/transport.h"

#define GAP 0xEE

static unsigned char byte_at(int64_t i) { return (unsigned char)(i * 31 + 7); }

/* The sender's parts over `buf` (2000 bytes), filled with the sequence; gaps hold GAP. */
static int sender_parts(unsigned char *buf, rf_strided *parts) {
  memset(buf, GAP, 6000);
  parts[0] = (rf_strided){(char *)buf, 7, 300, 512};          /* 2100 bytes */
  parts[1] = (rf_strided){(char *)buf + 3600, 1, 1000, 1000}; /* 1000 */
  parts[2] = (rf_strided){(char *)buf + 4700, 5, 64, 200};    /* 320 */
  int64_t seq = 0;
  for (int p = 0; p < 3; p++)
    for (int64_t r = 0; r < parts[p].rows; r++)
      for (int64_t c = 0; c < parts[p].row_bytes; c++)
        buf[parts[p].base - (char *)buf + r * parts[p].pitch + c] = byte_at(seq++);
  ASSERT_EQ(seq, 3420);
  return 3;
}

/* The receiver's: 9 rows of 380 bytes at a pitch of 400, the same 3420 bytes. */
static void check_received(const unsigned char *buf) {
  int64_t seq = 0;
  for (int64_t i = 0; i < 6000; i++) {
    int64_t row = i / 400, col = i % 400;
    int in_part = row < 9 && col < 380;
    unsigned char want = in_part ? byte_at(row * 380 + col) : GAP;
    if (buf[i] != want) {
      fprintf(stderr, "byte %" PRId64 " (row %" PRId64 ", col %" PRId64 "): %u, want %u\n", i, row,
              col, buf[i], want);
      abort();
    }
    seq += in_part;
  }
  ASSERT_EQ(seq, 3420);
}

static void exchange(rf_control *ctl, int rank) {
  rf_transport tp;
  ASSERT_OK(rf_transport_open(&rf_transport_mpi, ctl, NULL, &tp));
  ASSERT_TRUE(tp.ops->post_strided != NULL);
  unsigned char *buf = malloc(6000);
  ASSERT_TRUE(buf != NULL);
  long ticket = -1;
  if (rank == 0) {
    rf_strided parts[3];
    int n = sender_parts(buf, parts);
    ASSERT_OK(tp.ops->post_strided(&tp, 1, RF_CHANNEL_WORLD, 1, parts, n, &ticket));
  } else {
    memset(buf, GAP, 6000);
    rf_strided part = {(char *)buf, 9, 380, 400};
    ASSERT_OK(tp.ops->post_strided(&tp, 0, RF_CHANNEL_WORLD, 0, &part, 1, &ticket));
  }
  ASSERT_OK(tp.ops->wait(&tp, ticket + 1, "the strided message"));
  if (rank == 1)
    check_received(buf);

  /* Two plain messages after it, cut by the same slice, arrive whole and in order. */
  unsigned char plain[2][2500];
  for (int m = 0; m < 2; m++) {
    for (int i = 0; i < 2500; i++)
      plain[m][i] = rank == 0 ? byte_at(i + 5000 * m) : 0;
    ASSERT_OK(tp.ops->post(&tp, rank == 0, RF_CHANNEL_WORLD, 1 - rank, plain[m], 2500, &ticket));
  }
  ASSERT_OK(tp.ops->wait(&tp, ticket + 1, "the plain messages"));
  for (int m = 0; m < 2; m++)
    for (int i = 0; i < 2500; i++)
      ASSERT_EQ(plain[m][i], byte_at(i + 5000 * m));
  free(buf);
  rf_transport_close(&tp);
}

/* rma refuses weights in GPU memory in one line that says what to install: this Open MPI is
 * not CUDA-aware (where one is, the line says this build moves host memory only). */
static void rma_refuses_gpu_memory(void) {
  char line[512] = "";
  ASSERT_OK(rf_transport_rma.check_memory(NULL, RF_MEM_HOST));
  rf_log_capture(line, sizeof line);
  rf_status st = rf_transport_rma.check_memory(NULL, RF_MEM_DEVICE);
  rf_log_capture(NULL, 0);
  ASSERT_EQ(st, RF_ERR_UNSUPPORTED);
  ASSERT_STR_EQ(line, "the rma transport moves host memory only: this MPI is not CUDA-aware "
                      "(MPIX_Query_cuda_support() is 0); install an Open MPI built --with-cuda "
                      "(and UCX) for GPU windows, or use --memory host");
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    fprintf(stderr, "test_transport_mpi runs under mpirun -np 2, not %d\n", size);
    MPI_Finalize();
    return 1;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  rf_control ctl;
  rf_control_attach(&ctl, MPI_COMM_WORLD, 30.0);
  exchange(&ctl, rank); /* one message each way: far below the 1 GiB slice */
  setenv("REFIT_MPI_SLICE", "1000", 1);
  exchange(&ctl, rank); /* four messages of at most 1000 bytes, and three for each plain one */
  unsetenv("REFIT_MPI_SLICE");
  rma_refuses_gpu_memory();
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0)
    printf("test_transport_mpi: all passed\n");
  MPI_Finalize();
  return 0;
}
