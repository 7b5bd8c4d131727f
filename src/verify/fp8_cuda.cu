/* fp8_cuda: the quantizer's kernels, the bytes of the CPU references (fp8.c, format_ref.c):
 * block FP8's 128x128 blocks here, the 1-D blocks of the MX formats and NVFP4 in fp8_1d.cuh, and
 * the batched launch of both (quantize_batch, below).
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
#include <string.h>

#include "verify/fp8_cuda.h"

extern "C" {
#include "format/format.h"
#include "format/format_fast.h"
#include "memory/memory_gpu.h"
#include "verify/fp8.h"
}

#include "verify/fp8_device.cuh"
/* after fp8_device.cuh, whose helpers it uses */
#include "verify/fp8_1d.cuh"

using namespace rf_fp8;

namespace {

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

/* Stores a 128x128 block's fp32 scale; a staging buffer may hold it at any byte offset. */
__device__ __forceinline__ void store_scale(const job_dev &j, int64_t bi, int64_t bj,
                                            float scale_inv) {
  char *s = j.scale + (bi * j.scale_stride + bj) * 4;
  const uint32_t b = __float_as_uint(scale_inv);
  if (((uintptr_t)s & 3) == 0)
    *(uint32_t *)s = b;
  else
    for (int i = 0; i < 4; i++)
      s[i] = (char)(b >> (8 * i));
}

/* Eight 16-bit elements (one 16-byte load) converted with one factor: their 8 fp8 bytes, the
 * first element in the lowest byte. */
template <rf_dtype D> __device__ __forceinline__ uint2 convert8(uint4 v, float factor) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t out[2];
#pragma unroll
  for (int h = 0; h < 4; h += 2)
    out[h / 2] = to_e4m3x2(from_bits<D>(w[h] & 0xffffu), from_bits<D>(w[h] >> 16), factor) |
                 to_e4m3x2(from_bits<D>(w[h + 1] & 0xffffu), from_bits<D>(w[h + 1] >> 16), factor)
                     << 16;
  return make_uint2(out[0], out[1]);
}

/* Block (bi, bj) of a 128x128 job. Full-width blocks of 2-byte elements whose rows are dense
 * and 16-byte aligned read 16 bytes per access and keep them in registers between the two
 * passes (16 threads a row, 8 elements each, 16 rows a pass); any other block goes element by
 * element, at any strides (an fp32 source stored transposed too), and reads its elements
 * twice, the second time from cache. */
template <rf_dtype D>
__device__ void quantize_2d(const job_dev &j, int64_t bi, int64_t bj, uint32_t *red) {
  constexpr int es = D == RF_DTYPE_FP32 ? 4 : 2;
  const int64_t r0 = bi * kEdge, c0 = bj * kEdge;
  const int nr = (int)min((int64_t)kEdge, j.rows - r0), nc = (int)min((int64_t)kEdge, j.cols - c0);
  const char *x = j.x + (r0 * j.x_stride + c0 * j.x_col_stride) * es;
  uint8_t *q = j.q + r0 * j.q_stride + c0;
  const bool wide = es == 2 && nc == kEdge && j.x_col_stride == 1 && ((uintptr_t)x & 15) == 0 &&
                    (j.x_stride * es) % 16 == 0 && ((uintptr_t)q & 7) == 0 && j.q_stride % 8 == 0;
  uint32_t m = 0;
  float factor, scale_inv;
  if (wide) {
    const int col = (threadIdx.x % (kEdge / 8)) * 8, row = threadIdx.x / (kEdge / 8);
    uint4 v[kPasses];
    uint32_t m2 = 0;
#pragma unroll
    for (int k = 0; k < kPasses; k++) {
      const int r = row + k * kRowsPerPass;
      if (r < nr) {
        v[k] = __ldg((const uint4 *)(x + ((int64_t)r * j.x_stride + col) * es));
        m2 = max8(m2, v[k]);
      }
    }
    m = block_max(max_of_pairs<D>(m2), red);
    if (m >= kInfBits) {
      if (threadIdx.x == 0)
        refuse(j, m, r0, c0);
      return;
    }
    scale_of(m, j.inv_max, j.rule, &factor, &scale_inv);
#pragma unroll
    for (int k = 0; k < kPasses; k++) {
      const int r = row + k * kRowsPerPass;
      if (r < nr)
        *(uint2 *)(q + (int64_t)r * j.q_stride + col) = convert8<D>(v[k], factor);
    }
  } else {
    for (int e = threadIdx.x; e < nr * kEdge; e += kThreads) {
      const int r = e / kEdge, c = e % kEdge;
      if (c < nc)
        m = max(m, abs_bits(load<D>(x + ((int64_t)r * j.x_stride + c * j.x_col_stride) * es)));
    }
    m = block_max(m, red);
    if (m >= kInfBits) {
      if (threadIdx.x == 0)
        refuse(j, m, r0, c0);
      return;
    }
    scale_of(m, j.inv_max, j.rule, &factor, &scale_inv);
    for (int e = threadIdx.x; e < nr * kEdge; e += kThreads) {
      const int r = e / kEdge, c = e % kEdge;
      if (c < nc)
        q[(int64_t)r * j.q_stride + c] = (uint8_t)to_e4m3(
            load<D>(x + ((int64_t)r * j.x_stride + c * j.x_col_stride) * es), factor);
    }
  }
  if (threadIdx.x == 0)
    store_scale(j, bi, bj, scale_inv);
}

/* Four staged elements of row r from column c on (P apart) as four fp8 bytes in a word. */
template <rf_dtype D, int P>
__device__ __forceinline__ uint32_t staged_word(const uint16_t *t, int c, float factor) {
  return to_e4m3x2(from_bits<D>(t[c * P]), from_bits<D>(t[(c + 1) * P]), factor) |
         to_e4m3x2(from_bits<D>(t[(c + 2) * P]), from_bits<D>(t[(c + 3) * P]), factor) << 16;
}

/* ---- reading a staged tile across its columns ------------------------------------------------
 * A staged tile holds the source as it lies: column c of the job (a row of the source) is a run
 * of rows. ldmatrix.trans reads 8x8 pieces of it transposed, in one instruction and without
 * bank conflicts (the pitch puts the 8 runs of a piece in 8 different bank groups): with the
 * four pieces of columns c0 + 8m .. c0 + 8m + 7 (m = 0..3) and rows r0 .. r0 + 7, lane l gets,
 * in v[m], row r0 + l / 4 at columns c0 + 8m + 2(l % 4) and the one after (low half first).
 * The four lanes of a quad so hold one row's 32 columns, each a pair from every 8; a transpose
 * within the quad (two shuffles) then gives each lane 8 neighbouring columns to store, and a
 * warp writes 8 rows of whole 32-byte sectors. */
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&v)[4], const uint16_t *row) {
  const uint32_t a = (uint32_t)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "r"(a));
}

/* The address lane l gives ldmatrix_x4_trans for rows r0.. and columns c0.. of a tile. */
template <int P>
__device__ __forceinline__ const uint16_t *ldm_row(const uint16_t *tile, int r0, int c0) {
  const int lane = threadIdx.x & 31;
  return tile + (c0 + 8 * (lane >> 3) + (lane & 7)) * P + r0;
}

/* Lane i of a quad holds units U[i][m], m = 0..3 (16 bits each in w0 = m 0, 1 and w1 = m 2, 3);
 * afterwards it holds U[0..3][i] (t0 = U[0][i], U[1][i]; t1 = U[2][i], U[3][i]). The first
 * shuffle swaps half of the units with the lane two away, the second with the neighbour. */
__device__ __forceinline__ void quad_transpose16(uint32_t w0, uint32_t w1, uint32_t *t0,
                                                 uint32_t *t1) {
  const int i = threadIdx.x & 3, b0 = i & 1, b1 = i >> 1;
  const uint32_t keep = b1 ? w1 : w0, send = b1 ? w0 : w1;
  const uint32_t recv = __shfl_xor_sync(0xffffffffu, send, 2);
  /* keep: U[i][2 b1 ..], recv: U[i ^ 2][2 b1 ..]; unit i sits in half b0 of each. */
  const uint32_t mine = __byte_perm(keep, recv, b0 ? 0x7632 : 0x5410);
  const uint32_t got =
      __shfl_xor_sync(0xffffffffu, __byte_perm(keep, recv, b0 ? 0x5410 : 0x7632), 1);
  /* mine: U[i][i], U[i ^ 2][i]; got: U[i ^ 1][i], U[i ^ 3][i]. */
  const uint32_t a = b0 ? got : mine, b = b0 ? mine : got;
  *t0 = __byte_perm(a, b, b1 ? 0x7632 : 0x5410);
  *t1 = __byte_perm(a, b, b1 ? 0x5410 : 0x7632);
}

/* A pair of staged 2-byte elements (low first) as two e4m3 bytes under one factor. */
template <rf_dtype D> __device__ __forceinline__ uint32_t pair_e4m3(uint32_t v, float factor) {
  return to_e4m3x2(from_bits<D>(v & 0xffffu), from_bits<D>(v >> 16), factor);
}

/* Block (bi, bj) of a 128x128 job from a transposed 2-byte source: staged, its amax taken on the
 * way in, then each of 256 threads writes half a row (64 bytes). */
template <rf_dtype D>
__device__ void quantize_2d_t(const job_dev &j, int64_t bi, int64_t bj, uint32_t *red,
                              uint16_t *tile) {
  constexpr int P = stage_pitch<kEdge>(), kHalf = kEdge / 2;
  const int64_t r0 = bi * kEdge, c0 = bj * kEdge;
  const int nr = (int)min((int64_t)kEdge, j.rows - r0), nc = (int)min((int64_t)kEdge, j.cols - c0);
  const char *x = j.x + (r0 * j.x_stride + c0 * j.x_col_stride) * 2;
  /* block_max's barrier also makes the staged tile visible to every thread. */
  const uint32_t m = block_max(max_of_pairs<D>(stage_transposed<kEdge>(j, x, nr, nc, tile)), red);
  if (m >= kInfBits) {
    if (threadIdx.x == 0)
      refuse(j, m, r0, c0);
    return;
  }
  float factor, scale_inv;
  scale_of(m, j.inv_max, j.rule, &factor, &scale_inv);
  uint8_t *qb = j.q + r0 * j.q_stride + c0;
  if (nr == kEdge && nc == kEdge && ((uintptr_t)qb & 7) == 0 && j.q_stride % 8 == 0) {
    /* Whole blocks: each warp task is 8 rows by 32 columns, read by ldmatrix_x4_trans. */
    const int quad = (threadIdx.x & 31) >> 2, i = threadIdx.x & 3;
    for (int t = threadIdx.x >> 5; t < (kEdge / 8) * (kEdge / 32); t += kWarps) {
      const int g = t / (kEdge / 32), h = t % (kEdge / 32);
      uint32_t v[4], t0, t1;
      ldmatrix_x4_trans(v, ldm_row<P>(tile, 8 * g, 32 * h));
      quad_transpose16(pair_e4m3<D>(v[0], factor) | pair_e4m3<D>(v[1], factor) << 16,
                       pair_e4m3<D>(v[2], factor) | pair_e4m3<D>(v[3], factor) << 16, &t0, &t1);
      *(uint2 *)(qb + (int64_t)(8 * g + quad) * j.q_stride + 32 * h + 8 * i) = make_uint2(t0, t1);
    }
    if (threadIdx.x == 0)
      store_scale(j, bi, bj, scale_inv);
    return;
  }
  const int r = threadIdx.x % kEdge, c = (threadIdx.x / kEdge) * kHalf, n = min(kHalf, nc - c);
  if (r < nr && n > 0) {
    uint8_t *q = j.q + (r0 + r) * j.q_stride + c0 + c;
    const uint16_t *t = tile + c * P + r;
    if (n == kHalf && ((uintptr_t)q & 15) == 0) {
#pragma unroll
      for (int w = 0; w < kHalf / 4; w += 4)
        *(uint4 *)(q + 4 * w) = make_uint4(
            staged_word<D, P>(t, 4 * w, factor), staged_word<D, P>(t, 4 * w + 4, factor),
            staged_word<D, P>(t, 4 * w + 8, factor), staged_word<D, P>(t, 4 * w + 12, factor));
    } else {
      for (int i = 0; i < n; i++)
        q[i] = (uint8_t)to_e4m3(from_bits<D>(t[i * P]), factor);
    }
  }
  if (threadIdx.x == 0)
    store_scale(j, bi, bj, scale_inv);
}

/* Unit u of job j in class CLS, its elements of type D. Transposed fp32 sources take the
 * direct paths; their units are 128x128 blocks or 256 1-D blocks as for row-major jobs, where
 * a transposed 2-byte 1-D job's unit is a staged tile of 64 x 128 (units_of). */
template <int CLS, rf_dtype D>
__device__ __forceinline__ void run_job(const job_dev &j, int64_t u, uint32_t *red,
                                        uint16_t *tile) {
  constexpr bool staged = D != RF_DTYPE_FP32;
  if constexpr (CLS == CLS_2D || (CLS == CLS_2D_T && !staged))
    quantize_2d<D>(j, u / j.grid_cols, u % j.grid_cols, red);
  else if constexpr (CLS == CLS_2D_T)
    quantize_2d_t<D>(j, u / j.grid_cols, u % j.grid_cols, red, tile);
  else if constexpr (CLS == CLS_1D)
    quantize_1d<D>(j, u);
  else if constexpr (!staged)
    quantize_1d_direct_t<D>(j, u);
  else
    quantize_1d_t<D>(j, u, tile);
}

/* The CUDA blocks of a class each SM must hold at once, which bounds the registers ptxas may
 * use: as many as the kernels need without spilling (80 for three blocks an SM, 48 for five). */
__host__ __device__ constexpr int min_blocks(int cls) {
  return cls == CLS_2D || cls == CLS_1D || cls == CLS_1D_T ? 3 : 5;
}

/* One CUDA block per unit, which finds its job by binary search over the jobs' first units, as
 * the copy kernels do (region_cuda.cu), in one thread for all; the element type is the job's, so
 * one launch takes tensors of every dtype. */
template <int CLS>
__global__ void __launch_bounds__(kThreads, min_blocks(CLS))
    quantize_batch(const job_dev *jobs, int count) {
  __shared__ uint32_t red[kWarps];
  __shared__ __align__(16) uint16_t tile[CLS == CLS_2D_T   ? kEdge * stage_pitch<kEdge>()
                                         : CLS == CLS_1D_T ? kEdge * stage_pitch<kRows1dT>()
                                                           : 1];
  __shared__ int found;
  const int64_t unit = blockIdx.x;
  if (threadIdx.x == 0) {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (jobs[mid].unit_begin <= unit)
        lo = mid;
      else
        hi = mid - 1;
    }
    found = lo;
  }
  __syncthreads();
  const job_dev j = jobs[found];
  const int64_t u = unit - j.unit_begin;
  switch (j.dtype) {
  case RF_DTYPE_BF16:
    run_job<CLS, RF_DTYPE_BF16>(j, u, red, tile);
    break;
  case RF_DTYPE_FP16:
    run_job<CLS, RF_DTYPE_FP16>(j, u, red, tile);
    break;
  default:
    run_job<CLS, RF_DTYPE_FP32>(j, u, red, tile);
    break;
  }
}

} // namespace

rf_status rf_fp8::launch(int cls, const job_dev *jobs, int count, int64_t units, cudaStream_t s) {
  switch (cls) {
  case CLS_2D:
    quantize_batch<CLS_2D><<<(unsigned)units, kThreads, 0, s>>>(jobs, count);
    break;
  case CLS_2D_T:
    quantize_batch<CLS_2D_T><<<(unsigned)units, kThreads, 0, s>>>(jobs, count);
    break;
  case CLS_1D:
    quantize_batch<CLS_1D><<<(unsigned)units, kThreads, 0, s>>>(jobs, count);
    break;
  default:
    quantize_batch<CLS_1D_T><<<(unsigned)units, kThreads, 0, s>>>(jobs, count);
    break;
  }
  RF_CUDA(cudaGetLastError());
  return RF_OK;
}

extern "C" rf_status rf_fp8_device_bad(rf_fp8_bad *bad) {
  memset(bad, 0, sizeof *bad);
  RF_TRY(rf_fp8_device_flush());
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
