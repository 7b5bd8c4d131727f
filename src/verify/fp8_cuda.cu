/* fp8_cuda: the quantizer's kernels, the bytes of the CPU references (fp8.c, format_ref.c):
 * block FP8's 128x128 blocks, and the 1-D blocks of the MX formats and NVFP4 (below).
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

using namespace rf_fp8;

namespace {

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

/* The same with units of 8 bits, all four in w: afterwards U[0..3][i], U[0][i] lowest. */
__device__ __forceinline__ uint32_t quad_transpose8(uint32_t w) {
  const int i = threadIdx.x & 3, b0 = i & 1, b1 = i >> 1;
  const uint32_t keep = b1 ? w >> 16 : w & 0xffffu, send = b1 ? w & 0xffffu : w >> 16;
  const uint32_t recv = __shfl_xor_sync(0xffffffffu, send, 2);
  const uint32_t mine = __byte_perm(keep, recv, b0 ? 0x51 : 0x40);
  const uint32_t got = __shfl_xor_sync(0xffffffffu, __byte_perm(keep, recv, b0 ? 0x40 : 0x51), 1);
  const uint32_t a = b0 ? got : mine, b = b0 ? mine : got;
  return __byte_perm(a, b, b1 ? 0x4051 : 0x5140);
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

/* ---- 1-D blocks (mxfp8, mxfp4, nvfp4) ------------------------------------------------------ */

/* The E8M0 exponent e of a 1-D block under rf_format_scale_of's ue8m0 rules: ceil, the
 * smallest 2^e at or above fp32(amax * fp32(1 / elem_max)); floor, OCP's floor(log2(amax)) -
 * emax (8 for e4m3, 2 for e2m1); both clamped to [-127, 127], -127 for a zero block. From the
 * bits, as format_ref.c does. */
__device__ __forceinline__ int e8m0_exponent(uint32_t amax_bits, const job_dev &j) {
  if (j.rule == RF_SCALE_UE8M0_FLOOR) {
    if (amax_bits == 0)
      return -127;
    const int be = (int)(amax_bits >> 23);
    const int fl = be ? be - 127 : -149 + (31 - __clz(amax_bits & 0x7fffffu));
    return max(-127, min(127, fl - j.elem_emax));
  }
  const uint32_t b = __float_as_uint(__fmul_rn(__uint_as_float(amax_bits), j.inv_max));
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

/* The value of a non-negative e4m3 code below 0x7f, exactly: (8 + m) * 2^(e - 10), or m * 2^-9
 * for e = 0. */
__device__ __forceinline__ float e4m3_value(uint32_t c) {
  const uint32_t e = c >> 3 & 15, m = c & 7;
  return e ? __uint_as_float((e + 120) << 23 | m << 20)
           : __fmul_rn((float)m, __uint_as_float(118u << 23));
}

/* What a 1-D block's amax decides (rf_format_scale_of): its stored scale byte, and how its
 * elements are formed: q = elem(fp32(x * mul)), or q = elem(fp32(x / div)) when div is not 0,
 * the division taken from the block's reciprocal rcp where rf_div_fast_ok(div) (format_fast.h)
 * says that this gives the correctly rounded quotient. */
struct scale1d {
  float mul, div, rcp;
  uint32_t stored;
  bool fast;
};

/* How a block's elements are scaled, one instantiation each so that the per-element code has
 * no branch: by a power of two, by division through the reciprocal, or by division. */
enum { SCALE_MUL, SCALE_DIV_FAST, SCALE_DIV };

template <int K> __device__ __forceinline__ float scale_as(float x, const scale1d &s) {
  if constexpr (K == SCALE_MUL)
    return __fmul_rn(x, s.mul);
  else if constexpr (K == SCALE_DIV_FAST)
    return rf_div_by_reciprocal(x, s.div, s.rcp);
  else
    return __fdiv_rn(x, s.div);
}

__device__ __forceinline__ int scale_kind(const scale1d &s) {
  return s.div == 0 ? SCALE_MUL : s.fast ? SCALE_DIV_FAST : SCALE_DIV;
}

/* ue8m0 rules: the E8M0 byte e + 127 and mul = 2^-e. e4m3-global (nvfp4): s = e4m3(fp32(amax /
 * fp32(6 * g))) by the same cvt.rn.satfinite as the elements of fp8 (ModelOpt's 1.0, code 0x38,
 * for a zero block; the smallest e4m3 value, 0x01, where s rounds to zero), and div = fp32(s *
 * g); each an fp32 operation rounded to nearest, as format_ref.c's. */
__device__ __forceinline__ scale1d scale_1d(const job_dev &j, uint32_t amax_bits) {
  scale1d s;
  if (j.rule == RF_SCALE_E4M3_GLOBAL) {
    const float sf = __fdiv_rn(__uint_as_float(amax_bits), __fmul_rn(6.0f, j.global));
    uint32_t code =
        amax_bits ? (uint32_t)__nv_cvt_float_to_fp8(sf, __NV_SATFINITE, __NV_E4M3) : 0x38u;
    if ((code & 0x7f) == 0)
      code = 0x01;
    s.mul = 0, s.div = __fmul_rn(e4m3_value(code), j.global), s.stored = code;
    s.rcp = __frcp_rn(s.div), s.fast = rf_div_fast_ok(s.div);
    return s;
  }
  const int e = e8m0_exponent(amax_bits, j);
  s.mul = pow2(-e), s.div = 0, s.rcp = 0, s.stored = (uint32_t)(e + 127), s.fast = true;
  return s;
}

__device__ __forceinline__ float scaled(float x, const scale1d &s) {
  switch (scale_kind(s)) {
  case SCALE_MUL:
    return scale_as<SCALE_MUL>(x, s);
  case SCALE_DIV_FAST:
    return scale_as<SCALE_DIV_FAST>(x, s);
  default:
    return scale_as<SCALE_DIV>(x, s);
  }
}

/* float -> e2m1 under a block's scale: rf_e2m1_from_float(fp32(x * mul or x / div)), its sign
 * x's (the scaling keeps it, zero's too) and its magnitude by format_fast.h's magic-number
 * rounding, which test_format checks against the reference's comparisons on every float.
 * Hopper has no cvt.rn.satfinite.e2m1x2 (sm_100 has). */
template <int K> __device__ __forceinline__ uint32_t e2m1_of(float x, const scale1d &s) {
  return (__float_as_uint(x) >> 28 & 8u) | rf_e2m1_magnitude_code(scale_as<K>(fabsf(x), s));
}

__device__ __forceinline__ uint32_t to_e2m1(float x, const scale1d &s) {
  switch (scale_kind(s)) {
  case SCALE_MUL:
    return e2m1_of<SCALE_MUL>(x, s);
  case SCALE_DIV_FAST:
    return e2m1_of<SCALE_DIV_FAST>(x, s);
  default:
    return e2m1_of<SCALE_DIV>(x, s);
  }
}

/* Where block bj of row r of a 1-D job keeps its scale byte: row-major, or in 128x4 tiles at
 * rf_format_scale_offset's index (nvfp4 in the rollout). */
__device__ __forceinline__ char *scale_at(const job_dev &j, int64_t r, int64_t bj) {
  if (j.tile_grid_cols <= 0)
    return j.scale + r * j.scale_stride + bj;
  const int64_t i = j.tile_row0 + r, c = j.tile_col0 + bj;
  const int64_t tile = (i / 128) * ((j.tile_grid_cols + 3) / 4) + c / 4, tr = i % 128;
  return j.scale + tile * 512 + (tr % 32) * 16 + (tr / 32) * 4 + c % 4;
}

/* Writes the codes of n elements of one block (element i is elem(i)) at q: e4m3 bytes, or
 * e2m1 codes two a byte, the even element in the low nibble. A whole block of 16 or 32 at an
 * aligned q is written as 8- or 16-byte stores (e4m3 two elements a conversion); anything else
 * byte by byte, an odd last element alone in its byte's low nibble, as format_ref.c leaves it. */
template <int N, int K, class E>
__device__ __forceinline__ void put_wide_e2m1(const scale1d &s, uint8_t *q, E elem) {
  uint32_t w[N / 8];
#pragma unroll
  for (int k = 0; k < N / 8; k++) {
    uint32_t v = 0;
#pragma unroll
    for (int i = 0; i < 8; i++)
      v |= e2m1_of<K>(elem(8 * k + i), s) << (4 * i);
    w[k] = v;
  }
  if constexpr (N == 32)
    *(uint4 *)q = make_uint4(w[0], w[1], w[2], w[3]);
  else
    *(uint2 *)q = make_uint2(w[0], w[1]);
}

template <int N, class E>
__device__ __forceinline__ void put_wide(const job_dev &j, const scale1d &s, uint8_t *q, E elem) {
  uint32_t w[N / 4];
  if (j.elem_bits == 4) {
    switch (scale_kind(s)) {
    case SCALE_MUL:
      put_wide_e2m1<N, SCALE_MUL>(s, q, elem);
      break;
    case SCALE_DIV_FAST:
      put_wide_e2m1<N, SCALE_DIV_FAST>(s, q, elem);
      break;
    default:
      put_wide_e2m1<N, SCALE_DIV>(s, q, elem);
      break;
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < N / 4; k++)
    w[k] = to_e4m3x2(elem(4 * k), elem(4 * k + 1), s.mul) |
           to_e4m3x2(elem(4 * k + 2), elem(4 * k + 3), s.mul) << 16;
#pragma unroll
  for (int k = 0; k < N / 16; k++)
    ((uint4 *)q)[k] = make_uint4(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]);
}

/* Whether n codes go to q as whole 8- or 16-byte stores: a whole block of 16 or 32 at an
 * aligned q, whose e4m3 elements (if any) take a factor (two a conversion). */
__device__ __forceinline__ bool wide_ok(const job_dev &j, int n, const uint8_t *q) {
  const int bytes = n * j.elem_bits / 8;
  return (n == 32 || n == 16) && ((uintptr_t)q & (bytes >= 16 ? 15 : 7)) == 0 &&
         (j.elem_bits == 4 || j.rule != RF_SCALE_E4M3_GLOBAL);
}

template <class E>
__device__ __forceinline__ void put_codes(const job_dev &j, const scale1d &s, int n, uint8_t *q,
                                          E elem) {
  if (wide_ok(j, n, q)) {
    if (n == 32)
      put_wide<32>(j, s, q, elem);
    else
      put_wide<16>(j, s, q, elem);
    return;
  }
  if (j.elem_bits == 4) {
    for (int i = 0; i < n; i += 2) {
      const uint32_t lo = to_e2m1(elem(i), s);
      const uint32_t hi = i + 1 < n ? to_e2m1(elem(i + 1), s) : 0;
      q[i / 2] = (uint8_t)(lo | hi << 4);
    }
    return;
  }
  for (int i = 0; i < n; i++)
    q[i] = __nv_cvt_float_to_fp8(scaled(elem(i), s), __NV_SATFINITE, __NV_E4M3);
}

/* Quantizes n <= 32 elements of one 1-D block, element i at x + i * step bytes, into q (its
 * scale at *scale): the generic path of the 1-D kernels. */
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
  const scale1d s = scale_1d(j, m);
  put_codes(j, s, n, q, [&](int i) { return load<D>(x + i * step); });
  *scale = (char)s.stored;
}

/* One thread per 1 x block_cols block (block_cols <= 32), 256 blocks a unit. A whole block of
 * 16 or 32 2-byte elements whose source is 16-byte aligned is read as 16-byte loads and kept
 * in registers, its maximum taken two bit patterns at a time, then written as 8- or 16-byte
 * stores (put_wide) where its bytes are aligned for them. Neighbouring threads take neighbouring
 * blocks of a row, so the scale bytes are written together. */
template <rf_dtype D> __device__ void quantize_1d(const job_dev &j, int64_t unit) {
  constexpr int es = D == RF_DTYPE_FP32 ? 4 : 2;
  const int64_t block = unit * kThreads + threadIdx.x;
  if (block >= j.rows * j.grid_cols)
    return;
  const int64_t r = block / j.grid_cols, bj = block % j.grid_cols, c0 = bj * j.block_cols;
  const int n = (int)min((int64_t)j.block_cols, j.cols - c0);
  const char *x = j.x + (r * j.x_stride + c0) * es;
  uint8_t *q = j.q + r * j.q_stride + c0 * j.elem_bits / 8;
  char *scale = scale_at(j, r, bj);
  const bool wide = es == 2 && ((uintptr_t)x & 15) == 0 && wide_ok(j, n, q);
  if (!wide) {
    quantize_1d_elems<D>(j, x, es, n, q, scale, r, c0);
    return;
  }
  uint4 v[4];
  uint32_t m2 = 0;
#pragma unroll
  for (int k = 0; k < 4; k++)
    if (k < n / 8) {
      v[k] = __ldg((const uint4 *)x + k);
      m2 = max8(m2, v[k]);
    }
  const uint32_t m = max_of_pairs<D>(m2);
  if (m >= kInfBits) {
    refuse(j, m, r, c0);
    return;
  }
  const scale1d s = scale_1d(j, m);
  auto elem = [&](int i) {
    const uint4 &u = v[i / 8];
    const uint32_t w = (i & 6) == 0 ? u.x : (i & 6) == 2 ? u.y : (i & 6) == 4 ? u.z : u.w;
    return from_bits<D>(i & 1 ? w >> 16 : w & 0xffffu);
  };
  if (n == 32)
    put_wide<32>(j, s, q, elem);
  else
    put_wide<16>(j, s, q, elem);
  *scale = (char)s.stored;
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
                       j.q + r * j.q_stride + c0 * j.elem_bits / 8, scale_at(j, r, bj), r, c0);
}

/* Whether a whole staged tile of a 1-D job can be written by quads: blocks of 16 or 32, and
 * every row's bytes at q aligned for the stores (8 bytes of e4m3 or 4 of e2m1 a lane). */
__device__ __forceinline__ bool quads_fit(const job_dev &j, const uint8_t *q) {
  const int align = j.elem_bits == 8 ? 8 : 4;
  return (j.block_cols == 32 || j.block_cols == 16) && ((uintptr_t)q % align) == 0 &&
         j.q_stride % align == 0;
}

/* The codes of a staged pair (low element first) under a block's scale: two e4m3 bytes, or
 * two e2m1 nibbles in a byte. */
template <rf_dtype D>
__device__ __forceinline__ uint32_t pair_codes(const job_dev &j, uint32_t v, const scale1d &s) {
  if (j.elem_bits == 8)
    return pair_e4m3<D>(v, s.mul);
  return to_e2m1(from_bits<D>(v & 0xffffu), s) | to_e2m1(from_bits<D>(v >> 16), s) << 4;
}

/* A whole staged tile of a 1-D job written by quads (ldmatrix_x4_trans): each warp task is 8
 * rows by 32 columns, one 32-wide block a row or two 16-wide ones (m = 0, 1 and m = 2, 3),
 * whose maximum the quad takes with two shuffles. Every lane computes its row's scales; lane 0
 * of the quad stores them. A block that holds inf or NaN is refused and not written, its
 * neighbours are. */
template <rf_dtype D>
__device__ void quantize_1d_t_quads(const job_dev &j, int64_t r0, int64_t c0,
                                    const uint16_t *tile) {
  constexpr int P = stage_pitch<kRows1dT>();
  const int quad = (threadIdx.x & 31) >> 2, i = threadIdx.x & 3;
  const bool two = j.block_cols == 16;
  for (int t = threadIdx.x >> 5; t < (kRows1dT / 8) * (kEdge / 32); t += kWarps) {
    const int g = t / (kEdge / 32), h = t % (kEdge / 32);
    uint32_t v[4];
    ldmatrix_x4_trans(v, ldm_row<P>(tile, 8 * g, 32 * h));
    uint32_t ma = __vmaxu2(v[0] & 0x7fff7fffu, v[1] & 0x7fff7fffu);
    uint32_t mb = __vmaxu2(v[2] & 0x7fff7fffu, v[3] & 0x7fff7fffu);
    if (!two)
      ma = mb = __vmaxu2(ma, mb);
    uint32_t am = max_of_pairs<D>(ma), bm = max_of_pairs<D>(mb);
    am = max(am, __shfl_xor_sync(0xffffffffu, am, 1));
    am = max(am, __shfl_xor_sync(0xffffffffu, am, 2));
    bm = max(bm, __shfl_xor_sync(0xffffffffu, bm, 1));
    bm = max(bm, __shfl_xor_sync(0xffffffffu, bm, 2));
    const int64_t row = r0 + 8 * g + quad, col = c0 + 32 * h;
    /* Lanes 0, 1 write a 16-wide row's first block, lanes 2, 3 its second. */
    const bool bad_a = am >= kInfBits, bad_b = bm >= kInfBits;
    const bool bad = two && i >= 2 ? bad_b : bad_a;
    const scale1d sa = scale_1d(j, bad_a ? 0 : am), sb = two ? scale_1d(j, bad_b ? 0 : bm) : sa;
    uint8_t *q = j.q + row * j.q_stride + col * j.elem_bits / 8;
    if (j.elem_bits == 8) {
      uint32_t t0, t1;
      quad_transpose16(pair_codes<D>(j, v[0], sa) | pair_codes<D>(j, v[1], sa) << 16,
                       pair_codes<D>(j, v[2], sb) | pair_codes<D>(j, v[3], sb) << 16, &t0, &t1);
      if (!bad)
        *(uint2 *)(q + 8 * i) = make_uint2(t0, t1);
    } else {
      const uint32_t w =
          quad_transpose8(pair_codes<D>(j, v[0], sa) | pair_codes<D>(j, v[1], sa) << 8 |
                          pair_codes<D>(j, v[2], sb) << 16 | pair_codes<D>(j, v[3], sb) << 24);
      if (!bad)
        *(uint32_t *)(q + 4 * i) = w;
    }
    if (i == 0) {
      if (bad_a)
        refuse(j, am, row, col);
      else
        *scale_at(j, row, col / j.block_cols) = (char)sa.stored;
      if (two && bad_b)
        refuse(j, bm, row, col + 16);
      else if (two)
        *scale_at(j, row, col / 16 + 1) = (char)sb.stored;
    }
  }
}

/* A tile of 64 rows and 128 columns of a 1-D job from a transposed 2-byte source: staged, then
 * each thread takes one 1 x block_cols block (two for 16-wide blocks) of the tile. */
template <rf_dtype D>
__device__ void quantize_1d_t(const job_dev &j, int64_t unit, uint16_t *tile) {
  constexpr int P = stage_pitch<kRows1dT>();
  const int64_t tiles_per_row = (j.cols + kEdge - 1) / kEdge;
  const int64_t r0 = unit / tiles_per_row * kRows1dT, c0 = unit % tiles_per_row * kEdge;
  const int nr = (int)min((int64_t)kRows1dT, j.rows - r0),
            nc = (int)min((int64_t)kEdge, j.cols - c0);
  stage_transposed<kRows1dT>(j, j.x + (r0 * j.x_stride + c0 * j.x_col_stride) * 2, nr, nc, tile);
  __syncthreads();
  if (nr == kRows1dT && nc == kEdge && quads_fit(j, j.q + r0 * j.q_stride + c0 * j.elem_bits / 8)) {
    quantize_1d_t_quads<D>(j, r0, c0, tile);
    return;
  }
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
    const scale1d s = scale_1d(j, m);
    put_codes(j, s, n, j.q + row * j.q_stride + col * j.elem_bits / 8,
              [&](int i) { return from_bits<D>(t[i * P]); });
    *scale_at(j, row, col / bc) = (char)s.stored;
  }
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
