/* control, NCCL half: the unique-ID broadcast that every NCCL communicator starts from, and the
 * logging helpers behind the RF_CUDA and RF_NCCL macros. Built only when NCCL is found. */
#include <cuda_runtime.h>
/* nccl.h declares a few functions with () instead of (void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"

/* The root broadcasts its status with the ID, so that when ncclGetUniqueId fails the other
 * ranks learn it at once instead of waiting out the timeout. */
typedef struct {
  ncclUniqueId id;
  int status;
} id_message;

rf_status rf_control_nccl_unique_id(rf_control *ctl, MPI_Comm comm, int root, void *id_out,
                                    int id_len) {
  if (id_len != (int)sizeof(ncclUniqueId))
    return rf_fail(RF_ERR_INTERNAL, "an NCCL unique ID is %d bytes, not %d",
                   (int)sizeof(ncclUniqueId), id_len);
  if (comm == MPI_COMM_NULL)
    return rf_fail(RF_ERR_INTERNAL, "NCCL unique ID requested over a null communicator");
  if (ctl->timed_out)
    return RF_ERR_TIMEOUT;
  int rank = -1;
  RF_MPI(MPI_Comm_rank(comm, &rank));
  /* On the heap: after a timeout the broadcast may still write into it (see control.c). */
  id_message *msg = rf_calloc(1, sizeof *msg, "NCCL unique ID");
  if (!msg)
    return RF_ERR_NOMEM;
  rf_status local = RF_OK;
  if (rank == root) {
    ncclResult_t rc = ncclGetUniqueId(&msg->id);
    if (rc != ncclSuccess)
      local = rf_nccl_failed((int)rc, ncclGetErrorString(rc), "ncclGetUniqueId(&msg->id)", __FILE__,
                             __LINE__);
    msg->status = (int)local;
  }
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Ibcast(msg, (int)sizeof *msg, MPI_BYTE, root, comm, &req);
  if (rc != MPI_SUCCESS) {
    free(msg);
    return rf_mpi_failed(rc, "MPI_Ibcast(NCCL unique ID)", __FILE__, __LINE__);
  }
  rf_status st = rf_control_wait(ctl, &req, "the NCCL unique ID");
  if (st != RF_OK)
    return st; /* msg is leaked on purpose */
  if (rank == root) {
    st = local;
  } else if (msg->status != RF_OK) {
    RF_INFO("rank %d of this group could not create the NCCL unique ID", root);
    st = RF_ERR_PEER;
  }
  if (st == RF_OK)
    memcpy(id_out, &msg->id, sizeof msg->id);
  free(msg);
  return st;
}

void rf_control_nccl_version(char *buf, size_t len) {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess || v <= 0) {
    snprintf(buf, len, "NCCL unknown");
    return;
  }
  /* NCCL_VERSION_CODE is major*10000 + minor*100 + patch since 2.9. */
  snprintf(buf, len, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
}
