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

/* A job as the kernels read it: rf_fp8_job plus where its units start in its class's launch. */
struct job_dev {
  const char *x;
  int64_t x_stride, x_col_stride, rows,
      cols; /* element (r, c) at x + r * x_stride + c * x_col_stride */
  uint8_t *q;
  int64_t q_stride;
  char *scale;
  int64_t scale_stride;
  int64_t unit_begin; /* its first unit (CUDA block) in its class's launch */
  int64_t grid_cols;  /* 2-D: blocks along a row; 1-D: blocks along a row of 1 x block_cols */
  float inv_max;      /* fp32(1 / 448), rounded on the host as fp8.c rounds it */
  int dtype;          /* rf_dtype of x: bf16, fp16 or fp32 */
  int rule;           /* rf_scale_rule: fp32-inverse, ue8m0-ceil or ue8m0-floor */
  int block_cols;     /* 0: 128x128; else 1 x block_cols (<= 32) */
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

/* The maximum |x| bit pattern of eight 16-bit elements, two at a time (__vmaxu2): bf16 and
 * fp16 magnitudes order like their patterns, with inf and NaN above every finite value. */
__device__ __forceinline__ uint32_t max8(uint32_t m2, uint4 v) {
  return __vmaxu2(m2, __vmaxu2(__vmaxu2(v.x & 0x7fff7fffu, v.y & 0x7fff7fffu),
                               __vmaxu2(v.z & 0x7fff7fffu, v.w & 0x7fff7fffu)));
}
template <rf_dtype D> __device__ __forceinline__ uint32_t max_of_pairs(uint32_t m2) {
  return abs_bits(from_bits<D>(max(m2 & 0xffffu, m2 >> 16)));
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

/* Transposed sources (a --trainer-order jax shard: element (r, c) at x + r * x_stride + c *
 * x_col_stride, its columns dense) of 2-byte elements go through shared memory: a tile of R
 * rows and 128 columns is read along the source's dense dimension (16-byte loads where
 * aligned) and stored as it lies, column after column, each column padded to a multiple of 16
 * bytes; then each thread reads its block's elements across the columns, where neighbouring
 * threads take neighbouring rows, and writes its row's bytes. Both global sides are coalesced
 * and the shared accesses meet no bank conflict. Returns the largest 16-bit magnitude staged
 * (two at a time, for max_of_pairs). fp32 sources, rarer, take the direct paths. */
template <int R> __host__ __device__ constexpr int stage_pitch() { return R + 8; }
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

/* Four staged elements of row r from column c on (P apart) as four fp8 bytes in a word. */
template <rf_dtype D, int P>
__device__ __forceinline__ uint32_t staged_word(const uint16_t *t, int c, float factor) {
  return to_e4m3x2(from_bits<D>(t[c * P]), from_bits<D>(t[(c + 1) * P]), factor) |
         to_e4m3x2(from_bits<D>(t[(c + 2) * P]), from_bits<D>(t[(c + 3) * P]), factor) << 16;
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

/* Quantizes n <= 32 elements of one 1-D block, element i at x + i * step bytes, into q (E8M0
 * scale byte at *scale): the generic path of both 1-D kernels. */
template <rf_dtype D>
__device__ void quantize_1d_elems(const job_dev &j, const char *x, int64_t step, int n, uint8_t *q,
                                  char *scale, int64_t row, int64_t col) {
  uint32_t m = 0;
  for (int i = 0; i < n; i++)
    m = max(m, abs_bits(load<D>(x + i * step)));
  if (m >= kInfBits) {
    refuse(j, m, row, col);
    return;
  }
  const int e = e8m0_exponent(m, j.inv_max, j.rule);
  const float factor = pow2(-e);
  for (int i = 0; i < n; i++)
    q[i] = (uint8_t)to_e4m3(load<D>(x + i * step), factor);
  *scale = (char)(e + 127);
}

/* One thread per 1 x block_cols block (block_cols <= 32), 256 blocks a unit. A whole block of
 * 2-byte elements whose source and destination are 16-byte aligned is read as four 16-byte
 * loads, its maximum taken two bit patterns at a time and its elements converted two per
 * instruction, then stored as two 16-byte writes. Neighbouring threads take neighbouring
 * blocks of a row, so the scale bytes are written together. */
template <rf_dtype D> __device__ void quantize_1d(const job_dev &j, int64_t unit) {
  constexpr int es = D == RF_DTYPE_FP32 ? 4 : 2;
  const int64_t block = unit * kThreads + threadIdx.x;
  if (block >= j.rows * j.grid_cols)
    return;
  const int64_t r = block / j.grid_cols, bj = block % j.grid_cols, c0 = bj * j.block_cols;
  const int n = (int)min((int64_t)j.block_cols, j.cols - c0);
  const char *x = j.x + (r * j.x_stride + c0) * es;
  uint8_t *q = j.q + r * j.q_stride + c0;
  char *scale = j.scale + r * j.scale_stride + bj;
  const bool wide = es == 2 && n == 32 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)q & 15) == 0;
  if (!wide) {
    quantize_1d_elems<D>(j, x, es, n, q, scale, r, c0);
    return;
  }
  uint4 v[4];
  uint32_t m2 = 0;
#pragma unroll
  for (int k = 0; k < 4; k++) {
    v[k] = __ldg((const uint4 *)x + k);
    m2 = max8(m2, v[k]);
  }
  const uint32_t m = max_of_pairs<D>(m2);
  if (m >= kInfBits) {
    refuse(j, m, r, c0);
    return;
  }
  const int e = e8m0_exponent(m, j.inv_max, j.rule);
  const float factor = pow2(-e);
  uint2 out[4];
#pragma unroll
  for (int k = 0; k < 4; k++)
    out[k] = convert8<D>(v[k], factor);
  ((uint4 *)q)[0] = make_uint4(out[0].x, out[0].y, out[1].x, out[1].y);
  ((uint4 *)q)[1] = make_uint4(out[2].x, out[2].y, out[3].x, out[3].y);
  *scale = (char)(e + 127);
}

/* The same from a transposed source, element by element: fp32 sources. Consecutive threads
 * take consecutive rows of one block column, so each of a thread's loads is one of 32
 * neighbouring elements along the source's dense dimension. */
template <rf_dtype D> __device__ void quantize_1d_direct_t(const job_dev &j, int64_t unit) {
  constexpr int es = D == RF_DTYPE_FP32 ? 4 : 2;
  const int64_t block = unit * kThreads + threadIdx.x;
  if (block >= j.rows * j.grid_cols)
    return;
  const int64_t r = block % j.rows, bj = block / j.rows, c0 = bj * j.block_cols;
  const int n = (int)min((int64_t)j.block_cols, j.cols - c0);
  quantize_1d_elems<D>(j, j.x + (r * j.x_stride + c0 * j.x_col_stride) * es, j.x_col_stride * es, n,
                       j.q + r * j.q_stride + c0, j.scale + r * j.scale_stride + bj, r, c0);
}

/* A tile of 64 rows and 128 columns of a 1-D job from a transposed 2-byte source: staged, then
 * each thread takes one 1 x block_cols block (two for 16-wide blocks) of the tile. */
constexpr int kRows1dT = 64;
template <rf_dtype D>
__device__ void quantize_1d_t(const job_dev &j, int64_t unit, uint16_t *tile) {
  constexpr int P = stage_pitch<kRows1dT>();
  const int64_t tiles_per_row = (j.cols + kEdge - 1) / kEdge;
  const int64_t r0 = unit / tiles_per_row * kRows1dT, c0 = unit % tiles_per_row * kEdge;
  const int nr = (int)min((int64_t)kRows1dT, j.rows - r0),
            nc = (int)min((int64_t)kEdge, j.cols - c0);
  stage_transposed<kRows1dT>(j, j.x + (r0 * j.x_stride + c0 * j.x_col_stride) * 2, nr, nc, tile);
  __syncthreads();
  const int bc = j.block_cols, nb = (nc + bc - 1) / bc;
  for (int k = threadIdx.x; k < kRows1dT * nb; k += kThreads) {
    const int r = k % kRows1dT, b = k / kRows1dT, n = min(bc, nc - b * bc);
    if (r >= nr)
      continue;
    const uint16_t *t = tile + b * bc * P + r;
    uint32_t m = 0;
    for (int i = 0; i < n; i++)
      m = max(m, abs_bits(from_bits<D>(t[i * P])));
    const int64_t row = r0 + r, col = c0 + b * bc;
    if (m >= kInfBits) {
      refuse(j, m, row, col);
      continue;
    }
    const int e = e8m0_exponent(m, j.inv_max, j.rule);
    const float factor = pow2(-e);
    uint8_t *q = j.q + row * j.q_stride + col;
    if (n == 32 && ((uintptr_t)q & 15) == 0) {
      ((uint4 *)q)[0] =
          make_uint4(staged_word<D, P>(t, 0, factor), staged_word<D, P>(t, 4, factor),
                     staged_word<D, P>(t, 8, factor), staged_word<D, P>(t, 12, factor));
      ((uint4 *)q)[1] =
          make_uint4(staged_word<D, P>(t, 16, factor), staged_word<D, P>(t, 20, factor),
                     staged_word<D, P>(t, 24, factor), staged_word<D, P>(t, 28, factor));
    } else {
      for (int i = 0; i < n; i++)
        q[i] = (uint8_t)to_e4m3(from_bits<D>(t[i * P]), factor);
    }
    j.scale[row * j.scale_stride + col / bc] = (char)(e + 127);
  }
}

/* The kinds of job, each one launch a batch: 128x128 blocks or 1-D ones, from row-major or
 * transposed sources. A unit is a 128x128 block, or 256 1-D blocks. */
enum { CLS_2D, CLS_2D_T, CLS_1D, CLS_1D_T, CLS_COUNT };

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

/* One CUDA block per unit, which finds its job by binary search over the jobs' first units, as
 * the copy kernels do (region_cuda.cu); the element type is the job's, so one launch takes
 * tensors of every dtype. */
template <int CLS>
__global__ void __launch_bounds__(kThreads) quantize_batch(const job_dev *jobs, int count) {
  __shared__ uint32_t red[kWarps];
  __shared__ __align__(16) uint16_t tile[CLS == CLS_2D_T   ? kEdge * stage_pitch<kEdge>()
                                         : CLS == CLS_1D_T ? kEdge * stage_pitch<kRows1dT>()
                                                           : 1];
  const int64_t unit = blockIdx.x;
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (jobs[mid].unit_begin <= unit)
      lo = mid;
    else
      hi = mid - 1;
  }
  const job_dev j = jobs[lo];
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

namespace {

/* The queue of jobs not yet launched, per class, and a ring of pinned host and device tables
 * to launch them from (as region_cuda.cu's piece tables): an event per slot says when the
 * kernels that read it are done, and the host waits for it only when it comes round to the
 * slot again. A flush that fails keeps its first error for the next call to report. */
constexpr int kRing = 4, kQueueMax = 1 << 14;
struct slot {
  job_dev *host = nullptr, *dev = nullptr;
  int cap = 0;
  cudaEvent_t done = nullptr;
  bool pending = false;
};
slot ring[kRing];
int ring_next;
job_dev *queue;
int queued, queue_cap;
int64_t queued_units[CLS_COUNT];
rf_status flush_error = RF_OK;

int class_of(const job_dev &d) {
  const bool t = d.x_col_stride != 1;
  return d.block_cols > 0 ? (t ? CLS_1D_T : CLS_1D) : (t ? CLS_2D_T : CLS_2D);
}

int64_t units_of(const job_dev &d) {
  if (class_of(d) == CLS_1D_T && d.dtype != RF_DTYPE_FP32)
    return (d.rows + kRows1dT - 1) / kRows1dT * ((d.cols + kEdge - 1) / kEdge);
  if (d.block_cols > 0)
    return (d.rows * d.grid_cols + kThreads - 1) / kThreads;
  return (d.rows + kEdge - 1) / kEdge * d.grid_cols;
}

rf_status slot_reserve(slot *sl, int count) {
  if (sl->pending) {
    RF_CUDA(cudaEventSynchronize(sl->done));
    sl->pending = false;
  }
  if (!sl->done)
    RF_CUDA(cudaEventCreateWithFlags(&sl->done, cudaEventDisableTiming));
  if (sl->cap >= count)
    return RF_OK;
  int cap = count > 2 * sl->cap ? count : 2 * sl->cap;
  cap = cap < 64 ? 64 : cap;
  if (sl->host)
    RF_CUDA(cudaFreeHost(sl->host));
  if (sl->dev)
    RF_CUDA(cudaFree(sl->dev));
  sl->host = nullptr, sl->dev = nullptr, sl->cap = 0;
  RF_CUDA(cudaHostAlloc((void **)&sl->host, (size_t)cap * sizeof(job_dev), cudaHostAllocDefault));
  RF_CUDA(cudaMalloc((void **)&sl->dev, (size_t)cap * sizeof(job_dev)));
  sl->cap = cap;
  return RF_OK;
}

template <int CLS> rf_status launch(const job_dev *jobs, int count, int64_t units, cudaStream_t s) {
  quantize_batch<CLS><<<(unsigned)units, kThreads, 0, s>>>(jobs, count);
  RF_CUDA(cudaGetLastError());
  return RF_OK;
}

/* Launches every queued job: one table upload, then one launch per class present. */
rf_status flush_queue() {
  if (queued == 0)
    return RF_OK;
  const int n = queued;
  queued = 0;
  int64_t units[CLS_COUNT];
  memcpy(units, queued_units, sizeof units);
  memset(queued_units, 0, sizeof queued_units);
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  slot *sl = &ring[ring_next];
  ring_next = (ring_next + 1) % kRing;
  RF_TRY(slot_reserve(sl, n));
  /* Jobs by class, each class's in the order they came, which is the order of their units. */
  int at[CLS_COUNT], first[CLS_COUNT], count[CLS_COUNT] = {0};
  for (int i = 0; i < n; i++)
    count[class_of(queue[i])]++;
  for (int c = 0, k = 0; c < CLS_COUNT; k += count[c], c++)
    at[c] = first[c] = k;
  for (int i = 0; i < n; i++)
    sl->host[at[class_of(queue[i])]++] = queue[i];
  RF_CUDA(
      cudaMemcpyAsync(sl->dev, sl->host, (size_t)n * sizeof(job_dev), cudaMemcpyHostToDevice, s));
  if (count[CLS_2D])
    RF_TRY(launch<CLS_2D>(sl->dev + first[CLS_2D], count[CLS_2D], units[CLS_2D], s));
  if (count[CLS_2D_T])
    RF_TRY(launch<CLS_2D_T>(sl->dev + first[CLS_2D_T], count[CLS_2D_T], units[CLS_2D_T], s));
  if (count[CLS_1D])
    RF_TRY(launch<CLS_1D>(sl->dev + first[CLS_1D], count[CLS_1D], units[CLS_1D], s));
  if (count[CLS_1D_T])
    RF_TRY(launch<CLS_1D_T>(sl->dev + first[CLS_1D_T], count[CLS_1D_T], units[CLS_1D_T], s));
  RF_CUDA(cudaEventRecord(sl->done, s));
  sl->pending = true;
  return RF_OK;
}

/* rf_gpu_defer's callback: runs before the next piece of work is queued on refit's stream. */
void flush_deferred() {
  rf_status st = flush_queue();
  if (st != RF_OK && flush_error == RF_OK)
    flush_error = st;
}

/* The error a deferred flush kept, reported once. */
rf_status take_flush_error() {
  rf_status st = flush_error;
  flush_error = RF_OK;
  return st;
}

} // namespace

/* Jobs are queued and launched together (flush_queue) the next time anything uses refit's
 * stream: a MoE's thousands of small expert tensors, or a round's destination-quantized
 * rectangles, take one launch instead of one each, which both saves the launches and fills
 * the GPU with the blocks of many tensors at once. */
extern "C" rf_status rf_fp8_quantize_device(const rf_fp8_job *job) {
  RF_TRY(take_flush_error());
  if (job->rows <= 0 || job->cols <= 0)
    return RF_OK;
  if (job->dtype != RF_DTYPE_BF16 && job->dtype != RF_DTYPE_FP16 && job->dtype != RF_DTYPE_FP32)
    return rf_fail(RF_ERR_INTERNAL, "fp8: the device quantizer reads bf16, fp16 or fp32, not %s",
                   rf_dtype_name(job->dtype));
  if (job->block_cols < 0 || job->block_cols > 32)
    return rf_fail(RF_ERR_INTERNAL,
                   "fp8: the device quantizer takes 1-D blocks of at most 32, "
                   "not %d",
                   job->block_cols);
  const int64_t grid_cols = (job->cols + (job->block_cols ? job->block_cols : kEdge) - 1) /
                            (job->block_cols ? job->block_cols : kEdge);
  job_dev d = {(const char *)job->x,
               job->x_stride,
               job->x_col_stride ? job->x_col_stride : 1,
               job->rows,
               job->cols,
               job->q,
               job->q_stride,
               job->scale,
               job->scale_stride,
               0,
               grid_cols,
               1.0f / RF_FP8_E4M3_MAX,
               (int)job->dtype,
               job->rule,
               job->block_cols,
               job->tag,
               job->row0,
               job->col0};
  const int cls = class_of(d);
  const int64_t units = units_of(d);
  if (queued_units[cls] + units > INT32_MAX || queued == kQueueMax) {
    RF_TRY(flush_queue());
    if (units > INT32_MAX)
      return rf_fail(RF_ERR_UNSUPPORTED,
                     "fp8: a box of %lld x %lld elements is more blocks than one launch takes; "
                     "use a larger --rollout tp",
                     (long long)job->rows, (long long)job->cols);
  }
  if (queued == queue_cap) {
    int cap = queue_cap ? 2 * queue_cap : 256;
    job_dev *q = (job_dev *)realloc(queue, (size_t)cap * sizeof *q);
    if (!q)
      return RF_ERR_NOMEM;
    queue = q, queue_cap = cap;
  }
  d.unit_begin = queued_units[cls];
  queued_units[cls] += units;
  queue[queued++] = d;
  rf_gpu_defer(flush_deferred);
  return RF_OK;
}

extern "C" rf_status rf_fp8_device_flush(void) {
  RF_TRY(take_flush_error());
  return flush_queue();
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
