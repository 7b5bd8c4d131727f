/* The device half of the delta encodings in a build without CUDA: a device region cannot exist
 * here, so asking for one is the user's build, not the data, and the answer says what to
 * rebuild. */
#include "delta/delta_gpu.h"

static rf_status no_cuda(void) {
  return rf_fail(RF_ERR_UNSUPPORTED,
                 "this build has no CUDA; rebuild with the CUDA toolkit and NCCL installed");
}

rf_status rf_gpu_delta_mark(rf_delta_job *job, int keep, int64_t *changed) {
  (void)job, (void)keep;
  *changed = 0;
  return no_cuda();
}

rf_status rf_gpu_delta_gather(const rf_delta_job *job, char *mask_out, char *offsets,
                              char *values) {
  (void)job, (void)mask_out, (void)offsets, (void)values;
  return no_cuda();
}

rf_status rf_gpu_delta_scatter_sparse(const rf_delta_job *job, const char *payload) {
  (void)job, (void)payload;
  return no_cuda();
}

rf_status rf_gpu_delta_scatter_bitmask(const rf_delta_job *job, const char *payload) {
  (void)job, (void)payload;
  return no_cuda();
}

rf_status rf_gpu_delta_hash(const char *payload, int64_t bytes, uint64_t seed, uint64_t *hash) {
  (void)payload, (void)bytes, (void)seed;
  *hash = 0;
  return no_cuda();
}
