/* fp8_device: the device helpers the quantizer's kernels share, the 2-D ones (fp8_cuda.cu) and
 * the 1-D ones (fp8_1d.cuh): element loads and conversions, the maximum of eight 2-byte elements,
 * the record of a refused block, and the staging of transposed sources through shared memory.
 * Included by fp8_cuda.cu alone, whose launch and rf_fp8_device_bad they serve: the definitions
 * (g_bad among them) live in that file's anonymous namespace. */
#ifndef RF_FP8_DEVICE_CUH
#define RF_FP8_DEVICE_CUH

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "verify/fp8_cuda.h"

namespace {

using namespace rf_fp8;

constexpr int kRowsPerPass = kThreads / (kEdge / 8), kPasses = kEdge / kRowsPerPass;
constexpr uint32_t kInfBits = 0x7f800000u;

/* The first refused block since rf_fp8_device_bad last read it. */
struct bad_record {
  int found, tag, nan;
  long long row, col;
};
__device__ bad_record g_bad;

template <rf_dtype D> __device__ __forceinline__ float from_bits(uint32_t b) {
  if (D == RF_DTYPE_BF16)
    return __uint_as_float(b << 16);
  if (D == RF_DTYPE_FP16)
    return __half2float(__ushort_as_half((unsigned short)b));
  return __uint_as_float(b);
}

template <rf_dtype D> __device__ __forceinline__ float load(const char *p) {
  if (D == RF_DTYPE_FP32)
    return *(const float *)p;
  return from_bits<D>(*(const uint16_t *)p);
}

__device__ __forceinline__ uint32_t abs_bits(float v) { return __float_as_uint(v) & 0x7fffffffu; }

__device__ __forceinline__ uint32_t to_e4m3(float v, float factor) {
  return (uint32_t)__nv_cvt_float_to_fp8(__fmul_rn(v, factor), __NV_SATFINITE, __NV_E4M3);
}

/* Two elements at once (one cvt.rn.satfinite.e4m3x2): a in the low byte, b in the high. */
__device__ __forceinline__ uint32_t to_e4m3x2(float a, float b, float factor) {
  const float2 p = make_float2(__fmul_rn(a, factor), __fmul_rn(b, factor));
  return (uint32_t)__nv_cvt_float2_to_fp8x2(p, __NV_SATFINITE, __NV_E4M3);
}

/* Records the first refused block (inf or NaN) of a job; the launch goes on without it. */
__device__ __forceinline__ void refuse(const job_dev &j, uint32_t amax_bits, int64_t row,
                                       int64_t col) {
  if (atomicCAS(&g_bad.found, 0, 1) == 0) {
    g_bad.tag = j.tag;
    g_bad.nan = amax_bits > kInfBits;
    g_bad.row = j.row0 + row;
    g_bad.col = j.col0 + col;
  }
}

/* The maximum |x| bit pattern of eight 16-bit elements, two at a time (__vmaxu2): bf16 and
 * fp16 magnitudes order like their patterns, with inf and NaN above every finite value. */
__device__ __forceinline__ uint32_t max8(uint32_t m2, uint4 v) {
  return __vmaxu2(m2, __vmaxu2(__vmaxu2(v.x & 0x7fff7fffu, v.y & 0x7fff7fffu),
                               __vmaxu2(v.z & 0x7fff7fffu, v.w & 0x7fff7fffu)));
}
template <rf_dtype D> __device__ __forceinline__ uint32_t max_of_pairs(uint32_t m2) {
  return abs_bits(from_bits<D>(max(m2 & 0xffffu, m2 >> 16)));
}

/* Transposed sources (a --trainer-order jax shard: element (r, c) at x + r * x_stride + c *
 * x_col_stride, its columns dense) of 2-byte elements go through shared memory: a tile of R
 * rows and 128 columns is read along the source's dense dimension (16-byte loads where
 * aligned) and stored as it lies, column after column, each column padded to a multiple of 16
 * bytes; then each thread reads its block's elements across the columns, where neighbouring
 * threads take neighbouring rows, and writes its row's bytes. Both global sides are coalesced
 * and the shared accesses meet no bank conflict. Returns the largest 16-bit magnitude staged
 * (two at a time, for max_of_pairs). fp32 sources, rarer, take the direct paths. */
template <int R>
__device__ uint32_t stage_transposed(const job_dev &j, const char *x, int nr, int nc,
                                     uint16_t *tile) {
  constexpr int P = stage_pitch<R>(), per_col = R / 8, cols_per_pass = kThreads / per_col;
  const bool wide =
      nr == R && j.x_stride == 1 && ((uintptr_t)x & 15) == 0 && (j.x_col_stride * 2) % 16 == 0;
  uint32_t m2 = 0;
  if (wide) {
    const int rr = (threadIdx.x % per_col) * 8, cc = threadIdx.x / per_col;
#pragma unroll
    for (int k = 0; k < kEdge / cols_per_pass; k++) {
      const int c = cc + k * cols_per_pass;
      if (c < nc) {
        const uint4 v = __ldg((const uint4 *)(x + ((int64_t)c * j.x_col_stride + rr) * 2));
        m2 = max8(m2, v);
        *(uint4 *)(tile + c * P + rr) = v;
      }
    }
    return m2;
  }
  for (int e = threadIdx.x; e < R * nc; e += kThreads) {
    const int r = e % R, c = e / R;
    if (r < nr) {
      const uint16_t b =
          *(const uint16_t *)(x + ((int64_t)r * j.x_stride + (int64_t)c * j.x_col_stride) * 2);
      m2 = max(m2, (uint32_t)(b & 0x7fffu));
      tile[c * P + r] = b;
    }
  }
  return m2;
}

} // namespace

#endif
