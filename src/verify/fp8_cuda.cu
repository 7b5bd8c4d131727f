/* fp8_cuda: block-FP8 quantization on the GPU, the bytes of the CPU reference (fp8.c).
 *
 * One CUDA block of 256 threads quantizes one 128x128 block: the threads take the block's
 * maximum |x| as an integer maximum of the values' bit patterns (exact and order-free, as on
 * the CPU; inf and NaN sort above every finite value), then each multiplies its elements by
 * the block's factor and converts them. Every step is the CPU's single correctly rounded fp32
 * operation, written as the round-to-nearest intrinsics so that no compiler option can fuse
 * or approximate one: the reciprocal (__frcp_rn), the two multiplies (__fmul_rn), and the
 * hardware's cvt.rn.satfinite e4m3 conversion (__nv_cvt_float_to_fp8), which rounds to
 * nearest even and saturates at ±448 like rf_fp8_e4m3_from_float. test_fp8_gpu compares the
 * two on every kind of block.
 *
 * Full-width blocks of 2-byte elements whose rows are 16-byte aligned (every weight of the
 * models refit knows) read 16 bytes per access and keep them in registers between the two
 * passes, take the maximum two 16-bit patterns at a time, convert two elements per
 * instruction and write 8 fp8 bytes per access; any other block (edges, fp32, odd offsets)
 * goes element by element and reads its elements twice, the second time from cache.
 * On an H200 the first version (one element per max and per conversion) ran at 0.81 of a
 * device copy of the bf16 bytes (results/h200/README.md, "FP8 rollouts on the GPU"). */
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "format/format.h"
#include "memory/memory_gpu.h"
#include "verify/fp8.h"
}

namespace {

constexpr int kEdge = RF_FP8_BLOCK, kThreads = 256, kWarps = kThreads / 32;
constexpr int kRowsPerPass = kThreads / (kEdge / 8), kPasses = kEdge / kRowsPerPass;
constexpr uint32_t kInfBits = 0x7f800000u;

struct job_dev {
  const char *x;
  int64_t x_stride, rows, cols; /* x_stride in elements */
  uint8_t *q;
  int64_t q_stride;
  char *scale;
  int64_t scale_stride;
  float inv_max;  /* fp32(1 / 448), rounded on the host as fp8.c rounds it */
  int rule;       /* rf_scale_rule: fp32-inverse, ue8m0-ceil or ue8m0-floor */
  int block_cols; /* 0: 128x128; else 1 x block_cols (one warp per block) */
  int tag;
  int64_t row0, col0;
};

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

/* The block's maximum of m; every thread gets it. */
__device__ __forceinline__ uint32_t block_max(uint32_t m, uint32_t *smem) {
  for (int o = 16; o > 0; o >>= 1)
    m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0)
    smem[threadIdx.x >> 5] = m;
  __syncthreads();
  uint32_t r = smem[0];
#pragma unroll
  for (int w = 1; w < kWarps; w++)
    r = max(r, smem[w]);
  return r;
}

/* rf_format_scale_of (format_ref.c), with the same roundings. fp32-inverse (fp8): factor =
 * fp32(fp32(1 / amax) * 448) and weight_scale_inv = fp32(amax * fp32(1 / 448)). ue8m0-ceil
 * (fp8-ue8m0): that same fp32 amax / 448, rounded up to a power of two 2^e on its bits
 * (normal: the clamp keeps it above 2^-23), stored as the fp32 2^e, and factor 2^-e. */
__device__ __forceinline__ void scale_of(uint32_t amax_bits, float inv_max, int rule, float *factor,
                                         float *scale_inv) {
  float a = __uint_as_float(amax_bits);
  a = a < RF_FP8_AMAX_MIN ? RF_FP8_AMAX_MIN : a;
  if (rule == RF_SCALE_UE8M0_CEIL) {
    const uint32_t b = __float_as_uint(__fmul_rn(a, inv_max));
    const uint32_t e = (b >> 23) + ((b & 0x7fffffu) != 0); /* biased exponent of 2^ceil */
    *scale_inv = __uint_as_float(e << 23);
    *factor = __uint_as_float((254u - e) << 23);
    return;
  }
  *factor = __fmul_rn(__frcp_rn(a), RF_FP8_E4M3_MAX);
  *scale_inv = __fmul_rn(a, inv_max);
}

template <rf_dtype D> __global__ void __launch_bounds__(kThreads) quantize(job_dev j) {
  constexpr int es = D == RF_DTYPE_FP32 ? 4 : 2;
  __shared__ uint32_t smem[kWarps];
  const int64_t r0 = (int64_t)blockIdx.y * kEdge, c0 = (int64_t)blockIdx.x * kEdge;
  const int nr = (int)min((int64_t)kEdge, j.rows - r0), nc = (int)min((int64_t)kEdge, j.cols - c0);
  const char *x = j.x + (r0 * j.x_stride + c0) * es;
  uint8_t *q = j.q + r0 * j.q_stride + c0;
  const bool wide = es == 2 && nc == kEdge && ((uintptr_t)x & 15) == 0 &&
                    (j.x_stride * es) % 16 == 0 && ((uintptr_t)q & 7) == 0 && j.q_stride % 8 == 0;
  uint32_t m = 0;
  float factor, scale_inv;
  if (wide) {
    /* 16 threads per row of 128 elements, 8 each; 16 rows per pass, 8 passes. */
    const int col = (threadIdx.x % (kEdge / 8)) * 8, row = threadIdx.x / (kEdge / 8);
    uint4 v[kPasses];
    /* The maximum |x| of 16-bit elements on their bit patterns, two at a time (__vmaxu2):
     * bf16 and fp16 magnitudes order like their patterns too, with inf and NaN above. */
    uint32_t m2 = 0;
#pragma unroll
    for (int k = 0; k < kPasses; k++) {
      const int r = row + k * kRowsPerPass;
      if (r < nr) {
        v[k] = __ldg((const uint4 *)(x + ((int64_t)r * j.x_stride + col) * es));
        m2 = __vmaxu2(m2, __vmaxu2(__vmaxu2(v[k].x & 0x7fff7fffu, v[k].y & 0x7fff7fffu),
                                   __vmaxu2(v[k].z & 0x7fff7fffu, v[k].w & 0x7fff7fffu)));
      }
    }
    m = abs_bits(from_bits<D>(max(m2 & 0xffffu, m2 >> 16)));
    m = block_max(m, smem);
    if (m >= kInfBits)
      goto refuse;
    scale_of(m, j.inv_max, j.rule, &factor, &scale_inv);
#pragma unroll
    for (int k = 0; k < kPasses; k++) {
      const int r = row + k * kRowsPerPass;
      if (r < nr) {
        const uint32_t w[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
        uint32_t out[2];
#pragma unroll
        for (int h = 0; h < 4; h += 2)
          out[h / 2] =
              to_e4m3x2(from_bits<D>(w[h] & 0xffffu), from_bits<D>(w[h] >> 16), factor) |
              to_e4m3x2(from_bits<D>(w[h + 1] & 0xffffu), from_bits<D>(w[h + 1] >> 16), factor)
                  << 16;
        *(uint2 *)(q + (int64_t)r * j.q_stride + col) = make_uint2(out[0], out[1]);
      }
    }
  } else {
    for (int e = threadIdx.x; e < nr * kEdge; e += kThreads) {
      const int r = e / kEdge, c = e % kEdge;
      if (c < nc)
        m = max(m, abs_bits(load<D>(x + ((int64_t)r * j.x_stride + c) * es)));
    }
    m = block_max(m, smem);
    if (m >= kInfBits)
      goto refuse;
    scale_of(m, j.inv_max, j.rule, &factor, &scale_inv);
    for (int e = threadIdx.x; e < nr * kEdge; e += kThreads) {
      const int r = e / kEdge, c = e % kEdge;
      if (c < nc)
        q[(int64_t)r * j.q_stride + c] =
            (uint8_t)to_e4m3(load<D>(x + ((int64_t)r * j.x_stride + c) * es), factor);
    }
  }
  if (threadIdx.x == 0) {
    /* A staging buffer may hold the scale at any byte offset. */
    char *s = j.scale + ((int64_t)blockIdx.y * j.scale_stride + blockIdx.x) * 4;
    const uint32_t b = __float_as_uint(scale_inv);
    if (((uintptr_t)s & 3) == 0)
      *(uint32_t *)s = b;
    else
      for (int i = 0; i < 4; i++)
        s[i] = (char)(b >> (8 * i));
  }
  return;
refuse:
  if (threadIdx.x == 0 && atomicCAS(&g_bad.found, 0, 1) == 0) {
    g_bad.tag = j.tag;
    g_bad.nan = m > kInfBits;
    g_bad.row = j.row0 + r0;
    g_bad.col = j.col0 + c0;
  }
}

/* Row r of the comparison is CUDA block row blockIdx.y; each thread compares elements
 * blockDim.x apart and the block adds its count to the row's once per warp. */
__global__ void __launch_bounds__(kThreads)
    compare_rows(const uint8_t *got, int64_t got_pitch, const uint8_t *want, int64_t want_pitch,
                 int64_t cols, int esize, unsigned int *row_wrong) {
  const int64_t r = blockIdx.y;
  const uint8_t *g = got + r * got_pitch, *w = want + r * want_pitch;
  unsigned int n = 0;
  for (int64_t c = (int64_t)blockIdx.x * kThreads + threadIdx.x; c < cols;
       c += (int64_t)gridDim.x * kThreads) {
    bool differ = false;
    for (int b = 0; b < esize; b++)
      differ |= g[c * esize + b] != w[c * esize + b];
    n += differ;
  }
  for (int o = 16; o > 0; o >>= 1)
    n += __shfl_xor_sync(0xffffffffu, n, o);
  if ((threadIdx.x & 31) == 0 && n)
    atomicAdd(&row_wrong[r], n);
}

/* The E8M0 exponent e of a 1-D block under rf_format_scale_of's ue8m0 rules, for e4m3
 * elements: ceil, the smallest 2^e at or above fp32(amax * fp32(1/448)); floor, OCP's
 * floor(log2(amax)) - 8; both clamped to [-127, 127], -127 for a zero block. From the bits, as
 * format_ref.c does. */
__device__ __forceinline__ int e8m0_exponent(uint32_t amax_bits, float inv_max, int rule) {
  if (rule == RF_SCALE_UE8M0_FLOOR) {
    if (amax_bits == 0)
      return -127;
    const int be = (int)(amax_bits >> 23);
    const int fl = be ? be - 127 : -149 + (31 - __clz(amax_bits & 0x7fffffu));
    return max(-127, min(127, fl - 8));
  }
  const uint32_t b = __float_as_uint(__fmul_rn(__uint_as_float(amax_bits), inv_max));
  if (b == 0)
    return -127;
  const int be = (int)(b >> 23);
  if (be == 0) /* subnormal: at most 2^-126, and 2^-127 exactly when it is that */
    return b <= 0x00400000u ? -127 : -126;
  return min(127, be - 127 + ((b & 0x7fffffu) != 0));
}

/* 2^k for -127 <= k <= 127, exactly (2^-127 is subnormal). */
__device__ __forceinline__ float pow2(int k) {
  return k >= -126 ? __uint_as_float((uint32_t)(k + 127) << 23) : __uint_as_float(0x00400000u);
}

/* One thread per 1 x block_cols block (block_cols <= 32). A whole block of 2-byte elements
 * whose source and destination are 16-byte aligned is read as four 16-byte loads, its maximum
 * taken two bit patterns at a time and its elements converted two per instruction, then stored
 * as two 16-byte writes; any other block (an edge, fp32, an odd offset) goes element by
 * element. Neighbouring threads take neighbouring blocks of a row, so the scale bytes are
 * written together. */
template <rf_dtype D> __global__ void __launch_bounds__(kThreads) quantize_1d(job_dev j) {
  constexpr int es = D == RF_DTYPE_FP32 ? 4 : 2;
  const int64_t per_row = (j.cols + j.block_cols - 1) / j.block_cols;
  const int64_t block = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  if (block >= j.rows * per_row)
    return;
  const int64_t r = block / per_row, bj = block % per_row, c0 = bj * j.block_cols;
  const int n = (int)min((int64_t)j.block_cols, j.cols - c0);
  const char *x = j.x + (r * j.x_stride + c0) * es;
  uint8_t *q = j.q + r * j.q_stride + c0;
  const bool wide = es == 2 && n == 32 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)q & 15) == 0;
  uint32_t m = 0;
  if (wide) {
    uint4 v[4];
    uint32_t m2 = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
      v[k] = __ldg((const uint4 *)x + k);
      m2 = __vmaxu2(m2, __vmaxu2(__vmaxu2(v[k].x & 0x7fff7fffu, v[k].y & 0x7fff7fffu),
                                 __vmaxu2(v[k].z & 0x7fff7fffu, v[k].w & 0x7fff7fffu)));
    }
    m = abs_bits(from_bits<D>(max(m2 & 0xffffu, m2 >> 16)));
    if (m >= kInfBits)
      goto refuse;
    const int e = e8m0_exponent(m, j.inv_max, j.rule);
    const float factor = pow2(-e);
    uint32_t out[8];
#pragma unroll
    for (int k = 0; k < 4; k++) {
      const uint32_t w[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
      for (int h = 0; h < 4; h += 2)
        out[2 * k + h / 2] =
            to_e4m3x2(from_bits<D>(w[h] & 0xffffu), from_bits<D>(w[h] >> 16), factor) |
            to_e4m3x2(from_bits<D>(w[h + 1] & 0xffffu), from_bits<D>(w[h + 1] >> 16), factor) << 16;
    }
    ((uint4 *)q)[0] = make_uint4(out[0], out[1], out[2], out[3]);
    ((uint4 *)q)[1] = make_uint4(out[4], out[5], out[6], out[7]);
    j.scale[r * j.scale_stride + bj] = (char)(e + 127);
    return;
  }
  for (int i = 0; i < n; i++)
    m = max(m, abs_bits(load<D>(x + i * es)));
  if (m >= kInfBits)
    goto refuse;
  {
    const int e = e8m0_exponent(m, j.inv_max, j.rule);
    const float factor = pow2(-e);
    for (int i = 0; i < n; i++)
      q[i] = (uint8_t)to_e4m3(load<D>(x + i * es), factor);
    j.scale[r * j.scale_stride + bj] = (char)(e + 127);
  }
  return;
refuse:
  if (atomicCAS(&g_bad.found, 0, 1) == 0) {
    g_bad.tag = j.tag;
    g_bad.nan = m > kInfBits;
    g_bad.row = j.row0 + r;
    g_bad.col = j.col0 + c0;
  }
}

} // namespace

extern "C" rf_status rf_fp8_quantize_device(const rf_fp8_job *job) {
  if (job->rows <= 0 || job->cols <= 0)
    return RF_OK;
  const int64_t block_rows = (job->rows + kEdge - 1) / kEdge;
  const int64_t block_cols = (job->cols + kEdge - 1) / kEdge;
  if (block_rows > 65535 || block_cols > INT32_MAX)
    return rf_fail(RF_ERR_UNSUPPORTED,
                   "fp8: a box of %lld x %lld elements is more blocks than one launch takes; "
                   "use a larger --rollout tp",
                   (long long)job->rows, (long long)job->cols);
  job_dev d = {(const char *)job->x,
               job->x_stride,
               job->rows,
               job->cols,
               job->q,
               job->q_stride,
               job->scale,
               job->scale_stride,
               1.0f / RF_FP8_E4M3_MAX,
               job->rule,
               job->block_cols,
               job->tag,
               job->row0,
               job->col0};
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  if (job->block_cols > 0) {
    const int64_t blocks = job->rows * ((job->cols + job->block_cols - 1) / job->block_cols);
    const int64_t ctas = (blocks + kThreads - 1) / kThreads;
    if (job->block_cols > 32 || ctas > INT32_MAX)
      return rf_fail(RF_ERR_UNSUPPORTED,
                     "fp8: a box of %lld x %lld elements in 1x%d blocks is more than one launch "
                     "takes; use a larger --rollout tp",
                     (long long)job->rows, (long long)job->cols, job->block_cols);
    switch (job->dtype) {
    case RF_DTYPE_BF16:
      quantize_1d<RF_DTYPE_BF16><<<(unsigned)ctas, kThreads, 0, s>>>(d);
      break;
    case RF_DTYPE_FP16:
      quantize_1d<RF_DTYPE_FP16><<<(unsigned)ctas, kThreads, 0, s>>>(d);
      break;
    case RF_DTYPE_FP32:
      quantize_1d<RF_DTYPE_FP32><<<(unsigned)ctas, kThreads, 0, s>>>(d);
      break;
    default:
      return rf_fail(RF_ERR_INTERNAL, "fp8: the device quantizer reads bf16, fp16 or fp32, not %s",
                     rf_dtype_name(job->dtype));
    }
    RF_CUDA(cudaGetLastError());
    return RF_OK;
  }
  const dim3 grid((unsigned)block_cols, (unsigned)block_rows);
  switch (job->dtype) {
  case RF_DTYPE_BF16:
    quantize<RF_DTYPE_BF16><<<grid, kThreads, 0, s>>>(d);
    break;
  case RF_DTYPE_FP16:
    quantize<RF_DTYPE_FP16><<<grid, kThreads, 0, s>>>(d);
    break;
  case RF_DTYPE_FP32:
    quantize<RF_DTYPE_FP32><<<grid, kThreads, 0, s>>>(d);
    break;
  default:
    return rf_fail(RF_ERR_INTERNAL, "fp8: the device quantizer reads bf16, fp16 or fp32, not %s",
                   rf_dtype_name(job->dtype));
  }
  RF_CUDA(cudaGetLastError());
  return RF_OK;
}

extern "C" rf_status rf_fp8_device_bad(rf_fp8_bad *bad) {
  memset(bad, 0, sizeof *bad);
  RF_CUDA(cudaStreamSynchronize((cudaStream_t)rf_gpu_stream()));
  bad_record h;
  RF_CUDA(cudaMemcpyFromSymbol(&h, g_bad, sizeof h));
  if (!h.found)
    return RF_OK;
  bad->found = 1;
  bad->tag = h.tag;
  bad->nan = h.nan;
  bad->row = h.row;
  bad->col = h.col;
  const bad_record none = {0, 0, 0, 0, 0};
  RF_CUDA(cudaMemcpyToSymbol(g_bad, &none, sizeof none));
  return RF_OK;
}

extern "C" rf_status rf_gpu_compare_rows(const void *got, int64_t got_stride, const void *want,
                                         int64_t want_stride, int64_t rows, int64_t cols, int esize,
                                         int64_t *row_wrong) {
  memset(row_wrong, 0, (size_t)rows * sizeof *row_wrong);
  if (rows <= 0 || cols <= 0)
    return RF_OK;
  if (rows > 65535)
    return rf_fail(RF_ERR_INTERNAL, "verify: %lld rows is more than one comparison takes",
                   (long long)rows);
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  unsigned int *dev = NULL;
  RF_CUDA(cudaMallocAsync((void **)&dev, (size_t)rows * sizeof *dev, s));
  rf_status st = RF_OK;
  if (cudaMemsetAsync(dev, 0, (size_t)rows * sizeof *dev, s) != cudaSuccess)
    st = rf_fail(RF_ERR_CUDA, "verify: cannot clear the comparison's row counts");
  const unsigned int gx = (unsigned int)((cols + kThreads * 8 - 1) / (kThreads * 8));
  if (st == RF_OK) {
    compare_rows<<<dim3(gx, (unsigned int)rows), kThreads, 0, s>>>(
        (const uint8_t *)got, got_stride * esize, (const uint8_t *)want, want_stride * esize, cols,
        esize, dev);
    if (cudaGetLastError() != cudaSuccess)
      st = rf_fail(RF_ERR_CUDA, "verify: the comparison kernel did not launch");
  }
  unsigned int *host = (unsigned int *)malloc((size_t)rows * sizeof *host);
  if (st == RF_OK && !host)
    st = RF_ERR_NOMEM;
  if (st == RF_OK && (cudaMemcpyAsync(host, dev, (size_t)rows * sizeof *host,
                                      cudaMemcpyDeviceToHost, s) != cudaSuccess ||
                      cudaStreamSynchronize(s) != cudaSuccess))
    st = rf_fail(RF_ERR_CUDA, "verify: cannot read the comparison's row counts back");
  for (int64_t r = 0; st == RF_OK && r < rows; r++)
    row_wrong[r] = host[r];
  free(host);
  cudaFreeAsync(dev, s);
  return st;
}
