/* The control plane's bounded collectives. Each posts the nonblocking form of one MPI
 * collective and finishes it with rf_control_wait, so every collective in refit ends within
 * the job's timeout, and a timeout names the collective that was waiting. */
#include <stdio.h>

#include "control.h"

/* The wait's description: what the caller waits for, then the MPI call, e.g. "the timings
 * (MPI_Igather)", so a timeout line says both what was missing and where. */
static rf_status finish(rf_control *ctl, MPI_Request *req, const char *what, const char *call) {
  char text[256];
  snprintf(text, sizeof text, "%s (%s)", what, call);
  return rf_control_wait(ctl, req, text);
}

/* After a timeout no new collective is posted: it could only wait on the same dead peer. */
#define RF_POSTABLE(ctl)                                                                           \
  do {                                                                                             \
    if ((ctl)->timed_out)                                                                          \
      return RF_ERR_TIMEOUT;                                                                       \
  } while (0)

rf_status rf_control_barrier(rf_control *ctl, MPI_Comm comm, const char *what) {
  RF_POSTABLE(ctl);
  MPI_Request req = MPI_REQUEST_NULL;
  RF_MPI(MPI_Ibarrier(comm, &req));
  return finish(ctl, &req, what, "MPI_Ibarrier");
}

rf_status rf_control_reduce(rf_control *ctl, MPI_Comm comm, const void *in, void *out, int count,
                            MPI_Datatype type, MPI_Op op, const char *what) {
  RF_POSTABLE(ctl);
  MPI_Request req = MPI_REQUEST_NULL;
  RF_MPI(MPI_Ireduce(in, out, count, type, op, 0, comm, &req));
  return finish(ctl, &req, what, "MPI_Ireduce");
}

rf_status rf_control_allreduce(rf_control *ctl, MPI_Comm comm, const void *in, void *out, int count,
                               MPI_Datatype type, MPI_Op op, const char *what) {
  RF_POSTABLE(ctl);
  MPI_Request req = MPI_REQUEST_NULL;
  RF_MPI(MPI_Iallreduce(in, out, count, type, op, comm, &req));
  return finish(ctl, &req, what, "MPI_Iallreduce");
}

rf_status rf_control_bcast(rf_control *ctl, MPI_Comm comm, void *buf, int count, MPI_Datatype type,
                           const char *what) {
  RF_POSTABLE(ctl);
  MPI_Request req = MPI_REQUEST_NULL;
  RF_MPI(MPI_Ibcast(buf, count, type, 0, comm, &req));
  return finish(ctl, &req, what, "MPI_Ibcast");
}

rf_status rf_control_gather(rf_control *ctl, MPI_Comm comm, const void *in, void *out, int count,
                            MPI_Datatype type, const char *what) {
  RF_POSTABLE(ctl);
  MPI_Request req = MPI_REQUEST_NULL;
  RF_MPI(MPI_Igather(in, count, type, out, count, type, 0, comm, &req));
  return finish(ctl, &req, what, "MPI_Igather");
}

rf_status rf_control_gatherv(rf_control *ctl, MPI_Comm comm, const void *in, int count, void *out,
                             const int *counts, const int *displs, MPI_Datatype type,
                             const char *what) {
  RF_POSTABLE(ctl);
  MPI_Request req = MPI_REQUEST_NULL;
  RF_MPI(MPI_Igatherv(in, count, type, out, counts, displs, type, 0, comm, &req));
  return finish(ctl, &req, what, "MPI_Igatherv");
}

rf_status rf_control_allgather(rf_control *ctl, MPI_Comm comm, const void *in, void *out, int count,
                               MPI_Datatype type, const char *what) {
  RF_POSTABLE(ctl);
  MPI_Request req = MPI_REQUEST_NULL;
  RF_MPI(MPI_Iallgather(in, count, type, out, count, type, comm, &req));
  return finish(ctl, &req, what, "MPI_Iallgather");
}

rf_status rf_control_scatter(rf_control *ctl, MPI_Comm comm, const void *in, void *out, int count,
                             MPI_Datatype type, const char *what) {
  RF_POSTABLE(ctl);
  MPI_Request req = MPI_REQUEST_NULL;
  RF_MPI(MPI_Iscatter(in, count, type, out, count, type, 0, comm, &req));
  return finish(ctl, &req, what, "MPI_Iscatter");
}
