/* fp8_1d: the quantizer's kernels for 1-D blocks (mxfp8, mxfp4, nvfp4 and the floor variants),
 * the bytes of format_ref.c's reference: a block's scale from its maximum as
 * rf_format_scale_of takes it, e4m3 elements by the hardware's conversion and e2m1 ones by
 * thresholds (below), from row-major sources a thread per block and from transposed (JAX-order)
 * ones through staged tiles, two rows a thread. Included by fp8_cuda.cu alone, after
 * fp8_device.cuh. */
#ifndef RF_FP8_1D_CUH
#define RF_FP8_1D_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <string.h>

#include "verify/fp8_device.cuh"

extern "C" {
#include "format/format.h"
#include "format/format_fast.h"
}

namespace {

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
    s.rcp = 0, s.fast = rf_div_fast_ok(s.div);
    return s;
  }
  const int e = e8m0_exponent(amax_bits, j);
  s.mul = pow2(-e), s.div = 0, s.rcp = 0, s.stored = (uint32_t)(e + 127), s.fast = true;
  return s;
}

/* The block's reciprocal, for the element-by-element division (SCALE_DIV_FAST): only the paths
 * that divide element by element pay for it; the thresholds below need none. */
__device__ __forceinline__ scale1d with_rcp(scale1d s) {
  if (s.div != 0 && s.fast)
    s.rcp = __frcp_rn(s.div);
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

/* ---- e2m1 by thresholds (2-byte sources) ----------------------------------------------------
 * The e2m1 code of an element is a step function of its magnitude: it is at least k exactly when
 * the scaled value p passes the k-th midpoint of e2m1's values (0.25, 0.75, 1.25, 1.75, 2.5, 3.5,
 * 5; strictly at the midpoints whose tie goes down to the even code, 0.25, 1.25, 2.5 and 5). So
 * a block's codes need no per-element scaling: each midpoint is turned once per block into the
 * element's own type, and an element's code is the number of those thresholds it passes, taken
 * two elements at a time with the paired comparisons (bf16x2, f16x2) that return 1.0 or 0.0.
 *
 * The threshold of midpoint tau is the real X with |x| passing tau exactly when |x| passes X:
 *  - a power-of-two scale (mxfp4): p = fp32(x * 2^-e) is exact wherever p can reach tau, so
 *    X = tau * 2^e;
 *  - a division (nvfp4): p = fp32(x / d) passes tau exactly when x / d passes the point halfway
 *    to tau's fp32 neighbour (below tau for a tie that goes up, above it for one that goes down:
 *    tau's last bit is even, so that halfway point itself rounds to tau), so X = d * tau + c with
 *    c = +-d * 2^-k, half a unit in the last place of tau's binade; exact in fp32, as
 *    rf_div_fast_ok's range of d keeps it normal.
 * One fused multiply-add rounded down (strict thresholds, compared with >) or up (the others,
 * compared with >=) gives X in fp32 rounded the right way, and the same directed rounding into
 * bf16 or fp16 keeps it so: an element passes the rounded threshold exactly when it passes X.
 * test_format checks the thresholds (rf_e2m1_threshold) against the reference on the CPU for
 * every bf16 pattern, and test_fp8_gpu these kernels' codes on every bf16 and fp16 pattern. */
template <rf_dtype D> struct pair_of;
template <> struct pair_of<RF_DTYPE_BF16> {
  using type = __nv_bfloat162;
  static constexpr uint32_t bias = 0x43004300u; /* 128.0 in each half: 128 + k has k in its bits */
};
template <> struct pair_of<RF_DTYPE_FP16> {
  using type = __half2;
  static constexpr uint32_t bias = 0x64006400u; /* 1024.0 */
};

template <rf_dtype D> __device__ __forceinline__ typename pair_of<D>::type as_pair(uint32_t u) {
  typename pair_of<D>::type p;
  memcpy(&p, &u, sizeof p);
  return p;
}

template <rf_dtype D> __device__ __forceinline__ uint32_t pair_bits(typename pair_of<D>::type p) {
  uint32_t u;
  memcpy(&u, &p, sizeof u);
  return u;
}

/* fp32 x >= 0 rounded down (up) to the element type, as its 16-bit pattern in both halves. */
template <rf_dtype D> __device__ __forceinline__ uint32_t threshold_pair(float x, bool up) {
  uint32_t h;
  if constexpr (D == RF_DTYPE_BF16)
    h = rf_bf16_bits_dir(x, up);
  else
    h = __half_as_ushort(up ? __float2half_ru(x) : __float2half_rd(x));
  return h * 0x10001u;
}

/* Whether a block's codes can come from thresholds: a power-of-two scale, or a division whose
 * divisor keeps the halfway terms normal. */
__device__ __forceinline__ bool by_thresholds(const scale1d &s) { return s.div == 0 || s.fast; }

/* The seven thresholds of a block (by_thresholds(s)), in both halves: rf_e2m1_threshold, which
 * test_format checks against the reference on the CPU. */
template <rf_dtype D>
__device__ __forceinline__ void e2m1_thresholds(const scale1d &s, uint32_t (&t)[7]) {
  const bool div = s.div != 0;
  const float d = div ? s.div : pow2((int)s.stored - 127); /* 2^e: the E8M0 byte is e + 127 */
#pragma unroll
  for (int k = 0; k < 7; k++)
    t[k] = threshold_pair<D>(rf_e2m1_threshold(k, d, div), k % 2);
}

/* The magnitude codes of a pair of 2-byte elements (as loaded: the low half first) under a
 * block's thresholds: the low element's code in byte 0, the high one's in byte 2 (the sum of the
 * comparisons, offset by pair_of::bias, whose low bytes are zero). */
template <rf_dtype D>
__device__ __forceinline__ uint32_t e2m1_pair(uint32_t w, const uint32_t (&t)[7]) {
  const auto a = as_pair<D>(w & 0x7fff7fffu);
  const auto s0 = __hgt2(a, as_pair<D>(t[0])), s1 = __hge2(a, as_pair<D>(t[1]));
  const auto s2 = __hgt2(a, as_pair<D>(t[2])), s3 = __hge2(a, as_pair<D>(t[3]));
  const auto s4 = __hgt2(a, as_pair<D>(t[4])), s5 = __hge2(a, as_pair<D>(t[5]));
  const auto s6 = __hgt2(a, as_pair<D>(t[6]));
  return pair_bits<D>(__hadd2(__hadd2(__hadd2(s0, s1), __hadd2(s2, s3)),
                              __hadd2(__hadd2(s4, s5), __hadd2(s6, as_pair<D>(pair_of<D>::bias)))));
}

/* Four elements' codes, a byte each, with their signs: bit 7 of each byte of `signs` (the
 * elements' sign bits, gathered the same way) moved to bit 3. */
__device__ __forceinline__ uint32_t with_signs(uint32_t codes, uint32_t signs) {
  return codes | (signs >> 4 & 0x08080808u);
}

/* Eight signed codes, a byte each in two words (element order), closed up two bytes into one:
 * element i in nibble i. */
__device__ __forceinline__ uint32_t nibbles8(uint32_t lo, uint32_t hi) {
  return __byte_perm((lo | lo >> 4) & 0x00ff00ffu, (hi | hi >> 4) & 0x00ff00ffu, 0x6420);
}

/* Eight e2m1 elements as a word (element i in nibble i) from four pairs w[m] and their codes
 * c[m] (e2m1_pair): byte permutes gather the codes and the sign bytes in element order. */
__device__ __forceinline__ uint32_t pack8_e2m1(const uint32_t (&c)[4], const uint32_t (&w)[4]) {
  return nibbles8(with_signs(__byte_perm(c[0], c[1], 0x6420), __byte_perm(w[0], w[1], 0x7531)),
                  with_signs(__byte_perm(c[2], c[3], 0x6420), __byte_perm(w[2], w[3], 0x7531)));
}

/* A whole block of N = 16 or 32 2-byte elements in registers (v) to its e2m1 bytes at q (8- or
 * 16-byte aligned) by thresholds. */
template <rf_dtype D, int N>
__device__ __forceinline__ void put_pairs_e2m1(const uint4 *v, const uint32_t (&t)[7], uint8_t *q) {
  uint32_t out[N / 8];
#pragma unroll
  for (int k = 0; k < N / 8; k++) {
    const uint32_t w[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
    const uint32_t c[4] = {e2m1_pair<D>(w[0], t), e2m1_pair<D>(w[1], t), e2m1_pair<D>(w[2], t),
                           e2m1_pair<D>(w[3], t)};
    out[k] = pack8_e2m1(c, w);
  }
  if constexpr (N == 32)
    *(uint4 *)q = make_uint4(out[0], out[1], out[2], out[3]);
  else
    *(uint2 *)q = make_uint2(out[0], out[1]);
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
__device__ __forceinline__ void put_wide(const job_dev &j, const scale1d &s0, uint8_t *q, E elem) {
  const scale1d s = with_rcp(s0);
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
__device__ __forceinline__ void put_codes(const job_dev &j, const scale1d &s0, int n, uint8_t *q,
                                          E elem) {
  const scale1d s = with_rcp(s0);
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

/* One 1 x block_cols block (block_cols <= 32) of a row-major job. A whole block of
 * 16 or 32 2-byte elements whose source is 16-byte aligned is read as 16-byte loads and kept
 * in registers, its maximum taken two bit patterns at a time, then written as 8- or 16-byte
 * stores (put_wide) where its bytes are aligned for them. Neighbouring threads take neighbouring
 * blocks of a row, so the scale bytes are written together. */
template <rf_dtype D> __device__ void quantize_1d_block(const job_dev &j, int64_t block) {
  constexpr int es = D == RF_DTYPE_FP32 ? 4 : 2;
  int64_t r, bj;
  if (((block | j.grid_cols) >> 32) == 0) { /* a 32-bit division costs a fraction of 64 bits' */
    const uint32_t b32 = (uint32_t)block, g32 = (uint32_t)j.grid_cols;
    r = b32 / g32, bj = b32 % g32;
  } else {
    r = block / j.grid_cols, bj = block % j.grid_cols;
  }
  const int64_t c0 = bj * j.block_cols;
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
  if constexpr (D != RF_DTYPE_FP32) {
    if (j.elem_bits == 4 && by_thresholds(s)) {
      uint32_t t[7];
      e2m1_thresholds<D>(s, t);
      if (n == 32)
        put_pairs_e2m1<D, 32>(v, t, q);
      else
        put_pairs_e2m1<D, 16>(v, t, q);
      *scale = (char)s.stored;
      return;
    }
  }
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

/* Unit u of a row-major 1-D job: blocks_per_thread(j) passes over kThreads neighbouring blocks
 * each, so that a thread's share of the unit's set-up (its job, found once per CUDA block) is
 * spread over 32 elements at least. */
template <rf_dtype D> __device__ void quantize_1d(const job_dev &j, int64_t unit) {
  const int per = blocks_per_thread(j);
  const int64_t first = unit * kThreads * per + threadIdx.x, blocks = j.rows * j.grid_cols;
#pragma unroll 1
  for (int k = 0; k < per; k++)
    if (first + k * kThreads < blocks)
      quantize_1d_block<D>(j, first + k * kThreads);
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

/* Whether a whole staged tile of a 1-D job can be written two rows a thread: blocks of 16 or
 * 32, and every row's bytes at q aligned for 8-byte stores. */
__device__ __forceinline__ bool rows_fit(const job_dev &j, const uint8_t *q) {
  return (j.block_cols == 32 || j.block_cols == 16) && ((uintptr_t)q % 8) == 0 &&
         j.q_stride % 8 == 0;
}

/* Eight columns of two rows as e4m3 under each row's factor: words p[k] hold both rows of
 * column k (row a in the low half); the eight bytes of row a go to *qa, those of row b to *qb. */
template <rf_dtype D>
__device__ __forceinline__ void put_rows_e4m3(const uint32_t (&p)[8], float fa, float fb, uint2 *qa,
                                              uint2 *qb, bool write_a, bool write_b) {
  uint32_t e[8]; /* column k: row a's byte, then row b's */
#pragma unroll
  for (int k = 0; k < 8; k++)
    e[k] =
        (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(from_bits<D>(p[k] & 0xffffu), fa),
                                                       __fmul_rn(from_bits<D>(p[k] >> 16), fb)),
                                           __NV_SATFINITE, __NV_E4M3);
  const uint32_t c01 = __byte_perm(e[0], e[1], 0x5410), c23 = __byte_perm(e[2], e[3], 0x5410);
  const uint32_t c45 = __byte_perm(e[4], e[5], 0x5410), c67 = __byte_perm(e[6], e[7], 0x5410);
  if (write_a)
    *qa = make_uint2(__byte_perm(c01, c23, 0x6420), __byte_perm(c45, c67, 0x6420));
  if (write_b)
    *qb = make_uint2(__byte_perm(c01, c23, 0x7531), __byte_perm(c45, c67, 0x7531));
}

/* Eight columns of two rows as e2m1 by thresholds (t: row a's in the low halves, row b's in the
 * high): each row's eight nibbles, the first column lowest, into *qa and *qb. Byte permutes
 * split the codes (e2m1_pair: row a in byte 0, row b in byte 2) and the sign bytes by row, as
 * pack8_e2m1 does for one row. */
template <rf_dtype D>
__device__ __forceinline__ void put_rows_e2m1(const uint32_t (&p)[8], const uint32_t (&t)[7],
                                              uint32_t *qa, uint32_t *qb, bool write_a,
                                              bool write_b) {
  uint32_t a[2], b[2]; /* columns 0-3 and 4-7, a byte each: code, sign in bit 3 */
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const uint32_t *w = p + 4 * h;
    const uint32_t x01 = __byte_perm(e2m1_pair<D>(w[0], t), e2m1_pair<D>(w[1], t), 0x6240);
    const uint32_t x23 = __byte_perm(e2m1_pair<D>(w[2], t), e2m1_pair<D>(w[3], t), 0x6240);
    const uint32_t y01 = __byte_perm(w[0], w[1], 0x7351), y23 = __byte_perm(w[2], w[3], 0x7351);
    a[h] = with_signs(__byte_perm(x01, x23, 0x5410), __byte_perm(y01, y23, 0x5410));
    b[h] = with_signs(__byte_perm(x01, x23, 0x7632), __byte_perm(y01, y23, 0x7632));
  }
  if (write_a)
    *qa = nibbles8(a[0], a[1]);
  if (write_b)
    *qb = nibbles8(b[0], b[1]);
}

/* A whole staged tile of a 1-D job (rows_fit), two rows a thread: the 32-bit words of the tile
 * hold neighbouring rows of one column, so thread (row pair rp, column group g) reads its 32
 * columns a word each (neighbouring threads take neighbouring words: no bank conflict), takes
 * each block's maximum of both rows at once (__vmaxu2), then reads the block again and writes
 * each row's bytes, scaled by its own block's scale. A row's block that holds inf or NaN is
 * refused and not written; the other row's is. */
template <rf_dtype D>
__device__ void quantize_1d_t_rows(const job_dev &j, int64_t r0, int64_t c0, const uint16_t *tile) {
  constexpr int W = stage_pitch<kRows1dT>() / 2; /* words a staged column */
  const int rp = threadIdx.x % (kRows1dT / 2), g = threadIdx.x / (kRows1dT / 2);
  const int bc = j.block_cols;
  const int64_t ra = r0 + 2 * rp;
  const uint32_t *words = (const uint32_t *)tile + rp;
  for (int cb = g * 32; cb < g * 32 + 32; cb += bc) {
    uint32_t m2 = 0;
    for (int k = 0; k < bc; k++)
      m2 = __vmaxu2(m2, words[(cb + k) * W] & 0x7fff7fffu);
    const uint32_t am = abs_bits(from_bits<D>(m2 & 0xffffu)), bm = abs_bits(from_bits<D>(m2 >> 16));
    const bool ok_a = am < kInfBits, ok_b = bm < kInfBits;
    const scale1d sa = scale_1d(j, ok_a ? am : 0), sb = scale_1d(j, ok_b ? bm : 0);
    const int64_t col = c0 + cb;
    uint8_t *qa = j.q + ra * j.q_stride + col * j.elem_bits / 8, *qb = qa + j.q_stride;
    if (j.elem_bits == 8) {
      for (int k = 0; k < bc; k += 8) {
        uint32_t p[8];
#pragma unroll
        for (int i = 0; i < 8; i++)
          p[i] = words[(cb + k + i) * W];
        put_rows_e4m3<D>(p, sa.mul, sb.mul, (uint2 *)(qa + k), (uint2 *)(qb + k), ok_a, ok_b);
      }
    } else if (by_thresholds(sa) && by_thresholds(sb)) {
      uint32_t t[7], ta[7], tb[7];
      e2m1_thresholds<D>(sa, ta);
      e2m1_thresholds<D>(sb, tb);
#pragma unroll
      for (int i = 0; i < 7; i++)
        t[i] = __byte_perm(ta[i], tb[i], 0x7610);
      for (int k = 0; k < bc; k += 8) {
        uint32_t p[8];
#pragma unroll
        for (int i = 0; i < 8; i++)
          p[i] = words[(cb + k + i) * W];
        put_rows_e2m1<D>(p, t, (uint32_t *)(qa + k / 2), (uint32_t *)(qb + k / 2), ok_a, ok_b);
      }
    } else {
      const uint32_t *w = words + cb * W;
      if (ok_a)
        put_codes(j, sa, bc, qa, [&](int i) { return from_bits<D>(w[i * W] & 0xffffu); });
      if (ok_b)
        put_codes(j, sb, bc, qb, [&](int i) { return from_bits<D>(w[i * W] >> 16); });
    }
    if (ok_a)
      *scale_at(j, ra, col / bc) = (char)sa.stored;
    else
      refuse(j, am, ra, col);
    if (ok_b)
      *scale_at(j, ra + 1, col / bc) = (char)sb.stored;
    else
      refuse(j, bm, ra + 1, col);
  }
}

/* A tile of 128 rows and 128 columns of a 1-D job from a transposed 2-byte source: staged, then
 * written two rows a thread (quantize_1d_t_rows) where whole and aligned, else a block a thread. */
template <rf_dtype D>
__device__ void quantize_1d_t(const job_dev &j, int64_t unit, uint16_t *tile) {
  constexpr int P = stage_pitch<kRows1dT>();
  const int64_t tiles_per_row = (j.cols + kEdge - 1) / kEdge;
  const int64_t r0 = unit / tiles_per_row * kRows1dT, c0 = unit % tiles_per_row * kEdge;
  const int nr = (int)min((int64_t)kRows1dT, j.rows - r0),
            nc = (int)min((int64_t)kEdge, j.cols - c0);
  stage_transposed<kRows1dT>(j, j.x + (r0 * j.x_stride + c0 * j.x_col_stride) * 2, nr, nc, tile);
  __syncthreads();
  if (nr == kRows1dT && nc == kEdge && rows_fit(j, j.q + r0 * j.q_stride + c0 * j.elem_bits / 8)) {
    quantize_1d_t_rows<D>(j, r0, c0, tile);
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

} // namespace

#endif
