/* verify_gpu: the device half of fill, checksum and check, private to the verify module.
 *
 * verify.c describes a box of a device region as the same walk its CPU loops take (lines in
 * the region's memory order) and hands it here; verify_cuda.cu runs it as CUDA kernels on
 * refit's stream and waits for them, verify_gpu_none.c fails in builds without CUDA. Because
 * both sides walk the same lines, "the first mismatches" mean the same elements on both. */
#ifndef RF_VERIFY_GPU_H
#define RF_VERIFY_GPU_H

#include <stdint.h>

#include "verify/verify.h"

/* Element k of line o (0 <= o < n_out, 0 <= k < n_in) lives at
 *   base + (o * pitch + k * step) * esize
 * and has the global index g0 + o * dg_out + k * dg_in. Its walk position, the order in which
 * mismatches are reported, is o * n_in + k. */
typedef struct {
  char *base;
  int64_t n_out, n_in;
  int64_t pitch, step;       /* element strides between lines and along a line */
  int64_t g0, dg_out, dg_in; /* global index of element (0, 0) and its steps */
} rf_gpu_walk;

/* Fill and check take the tensor's values at a version (versions.h): version 0 runs the
 * generator's own kernels, a later one kernels that compute each element by rf_version_value. */
rf_status rf_gpu_fill(const rf_gpu_walk *w, const rf_version_gen *gen, rf_dtype dtype);
rf_status rf_gpu_checksum(const rf_gpu_walk *w, int32_t tensor_id, rf_dtype dtype, uint64_t *sum);
/* Counts the wrong elements and records the first `max_report` in walk order. */
rf_status rf_gpu_check(const rf_gpu_walk *w, const rf_version_gen *gen, int32_t tensor_id,
                       rf_dtype dtype, rf_mismatch *out, int max_report, int *reported,
                       int64_t *wrong);

#endif
