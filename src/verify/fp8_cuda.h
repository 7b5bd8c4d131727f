/* fp8_cuda.h: what the quantizer's kernels (fp8_cuda.cu) and its batching (fp8_batch.cu)
 * share: a job as the kernels read it, the classes of jobs (one launch each) and the units a
 * job's class cuts it into. Internal to those two files (C++). */
#ifndef RF_FP8_CUDA_H
#define RF_FP8_CUDA_H

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "core/core.h"
#include "verify/fp8.h"
}

namespace rf_fp8 {

constexpr int kEdge = RF_FP8_BLOCK, kThreads = 256, kWarps = kThreads / 32;
/* A transposed 2-byte 1-D job is staged in tiles of kRows1dT rows by kEdge columns. */
constexpr int kRows1dT = 128;
/* The pitch of a staged column of R rows: padded so that neither side meets bank conflicts. */
template <int R> __host__ __device__ constexpr int stage_pitch() { return R + 8; }

/* A job as the kernels read it: rf_fp8_job plus where its units start in its class's launch. */
struct job_dev {
  const char *x;
  int64_t x_stride, x_col_stride, rows,
      cols; /* element (r, c) at x + r * x_stride + c * x_col_stride */
  uint8_t *q;
  int64_t q_stride;
  char *scale;
  int64_t scale_stride;
  int64_t tile_grid_cols, tile_row0, tile_col0; /* 1-D: scales in 128x4 tiles, or 0 */
  int64_t unit_begin; /* its first unit (CUDA block) in its class's launch */
  int64_t grid_cols;  /* 2-D: blocks along a row; 1-D: blocks along a row of 1 x block_cols */
  float inv_max;      /* fp32(1 / elem_max), rounded on the host as format_ref.c rounds it */
  float global;       /* e4m3-global: the tensor's global scale */
  int dtype;          /* rf_dtype of x: bf16, fp16 or fp32 */
  int rule;           /* rf_scale_rule */
  int block_cols;     /* 0: 128x128; else 1 x block_cols (<= 32) */
  int elem_bits;      /* 8: e4m3; 4: e2m1, two a byte */
  int elem_emax;      /* the element's largest exponent (ue8m0-floor) */
  int tag;
  int64_t row0, col0;
};

/* The kinds of job, each one launch a batch: 128x128 blocks or 1-D ones, from row-major or
 * transposed sources. A unit is a 128x128 block, or 256 1-D blocks (512 of 16 from rows), or (a
 * transposed 2-byte 1-D job) a staged tile of kRows1dT x kEdge. */
enum { CLS_2D, CLS_2D_T, CLS_1D, CLS_1D_T, CLS_COUNT };

inline int class_of(const job_dev &d) {
  const bool t = d.x_col_stride != 1;
  return d.block_cols > 0 ? (t ? CLS_1D_T : CLS_1D) : (t ? CLS_2D_T : CLS_2D);
}

/* The 1-D blocks a thread of a row-major 1-D job quantizes: two of 16 elements, one of 32, so
 * that each thread's share of its unit's fixed work is spread over 32 elements. */
__host__ __device__ inline int blocks_per_thread(const job_dev &d) {
  return d.block_cols <= 16 ? 2 : 1;
}

inline int64_t units_of(const job_dev &d) {
  if (class_of(d) == CLS_1D_T && d.dtype != RF_DTYPE_FP32)
    return (d.rows + kRows1dT - 1) / kRows1dT * ((d.cols + kEdge - 1) / kEdge);
  if (class_of(d) == CLS_1D) {
    const int64_t per_unit = (int64_t)kThreads * blocks_per_thread(d);
    return (d.rows * d.grid_cols + per_unit - 1) / per_unit;
  }
  if (d.block_cols > 0)
    return (d.rows * d.grid_cols + kThreads - 1) / kThreads;
  return (d.rows + kEdge - 1) / kEdge * d.grid_cols;
}

/* One launch of class cls over `count` jobs (device memory) of `units` units, on stream s. */
rf_status launch(int cls, const job_dev *jobs, int count, int64_t units, cudaStream_t s);

} // namespace rf_fp8

#endif
