/* The device half of verify in a build without CUDA: a device region cannot exist here, so
 * asking for one is the user's build, not the data, and the answer says what to rebuild. */
#include <string.h>

#include "verify/fp8.h"
#include "verify/verify_gpu.h"

static rf_status no_cuda(void) {
  return rf_fail(RF_ERR_UNSUPPORTED,
                 "this build has no CUDA; rebuild with the CUDA toolkit and NCCL installed");
}

rf_status rf_gpu_fill(const rf_gpu_walk *w, const rf_version_gen *gen, rf_dtype dtype) {
  return no_cuda();
}

rf_status rf_gpu_checksum(const rf_gpu_walk *w, int32_t tensor_id, rf_dtype dtype, uint64_t *sum) {
  *sum = 0;
  return no_cuda();
}

rf_status rf_gpu_check(const rf_gpu_walk *w, const rf_version_gen *gen, int32_t tensor_id,
                       rf_dtype dtype, rf_mismatch *out, int max_report, int *reported,
                       int64_t *wrong) {
  if (reported)
    *reported = 0;
  *wrong = 0;
  return no_cuda();
}

rf_status rf_fp8_quantize_device(const rf_fp8_job *job) { return no_cuda(); }

rf_status rf_fp8_device_flush(void) { return RF_OK; }

rf_status rf_fp8_device_bad(rf_fp8_bad *bad) {
  memset(bad, 0, sizeof *bad);
  return RF_OK; /* nothing ran on a device, so nothing was refused */
}

rf_status rf_gpu_compare_rows(const void *got, int64_t got_stride, const void *want,
                              int64_t want_stride, int64_t rows, int64_t cols, int esize,
                              int64_t *row_wrong) {
  memset(row_wrong, 0, (size_t)rows * sizeof *row_wrong);
  return no_cuda();
}

rf_status rf_gpu_copy_scales(const rf_scale_side *dst, const rf_scale_side *src, int64_t rows,
                             int64_t cols, int esize) {
  return no_cuda();
}

rf_status rf_gpu_amax(const rf_amax_region *regions, int count, float *amax, int slots) {
  return no_cuda();
}
