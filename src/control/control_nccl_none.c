/* control, NCCL half for builds without NCCL: the GPU transports are not compiled, and asking
 * for an NCCL unique ID says how to get them. */
#include "control.h"

rf_status rf_control_nccl_unique_id(rf_control *ctl, MPI_Comm comm, int root, void *id_out,
                                    int id_len) {
  return rf_fail(RF_ERR_UNSUPPORTED, "this build has no NCCL; rebuild with NCCL_HOME set");
}

void rf_control_nccl_version(char *buf, size_t len) {
  if (len)
    buf[0] = '\0';
}
