/* The logging half of the foreign-library wrapper macros for the libraries every build has
 * (MPI, HDF5, hwloc). The CUDA and NCCL halves live with the GPU code. */
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "core.h"

const char *rf_mpi_error_string(int rc, char *buf, size_t size) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
    snprintf(msg, sizeof msg, "error code %d", rc);
  snprintf(buf, size, "%s", msg);
  return buf;
}

rf_status rf_mpi_failed(int rc, const char *call, const char *file, int line) {
  char msg[RF_MPI_ERROR_MAX];
  rf_mpi_error_string(rc, msg, sizeof msg);
  rf_log_at(RF_LOG_ERROR, file, line, "MPI call %s failed: %s (%s:%d)", call, msg, file, line);
  return RF_ERR_MPI;
}

rf_status rf_hdf5_failed(const char *call, const char *file, int line) {
  rf_log_at(RF_LOG_ERROR, file, line,
            "HDF5 call %s failed (%s:%d); run with REFIT_LOG=debug "
            "for the HDF5 error stack",
            call, file, line);
  if (rf_log_level_get() >= RF_LOG_DEBUG)
    H5Eprint2(H5E_DEFAULT, stderr);
  return RF_ERR_HDF5;
}

rf_status rf_hwloc_failed(const char *call, int err, const char *file, int line) {
  rf_log_at(RF_LOG_ERROR, file, line, "hwloc call %s failed: %s (%s:%d)", call, strerror(err), file,
            line);
  return RF_ERR_HWLOC;
}

/* CUDA and NCCL report through the same shape; the callers pass the library's own message, so
 * these need neither header. */
rf_status rf_cuda_failed(int rc, const char *msg, const char *call, const char *file, int line) {
  rf_log_at(RF_LOG_ERROR, file, line, "CUDA call %s failed: %s (error %d) (%s:%d)", call, msg, rc,
            file, line);
  return RF_ERR_CUDA;
}

rf_status rf_nccl_failed(int rc, const char *msg, const char *call, const char *file, int line) {
  rf_log_at(RF_LOG_ERROR, file, line, "NCCL call %s failed: %s (error %d) (%s:%d)", call, msg, rc,
            file, line);
  return RF_ERR_NCCL;
}
