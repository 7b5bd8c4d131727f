/* format_fast: the 4-bit kernels' forms of two reference operations (format_ref.c), written
 * once for the C compiler and nvcc so that test_format can check them against the reference
 * on the CPU, where every input can be tried.
 *
 * Hopper has no e2m1 conversion instruction, and the reference's chain of seven comparisons
 * and nvfp4's correctly rounded division per element made the 4-bit kernels issue-bound at
 * about half of their memory limit (results/h200/README.md). These forms give the same codes
 * with fewer and cheaper instructions:
 *  - e2m1 by one magic-number addition: a float at or above 2^22 steps by 0.5, at 2^23 by 1
 *    and at 2^24 by 2, so adding the right power of two rounds |p| to e2m1's spacing in its
 *    binade (0.5 up to 2, then 1 up to 4, then 2) to nearest even in one fp32 addition, and
 *    the bits gained count the steps;
 *  - x / d as x times the block's correctly rounded reciprocal r, corrected twice with
 *    fused multiply-adds: the first correction leaves the quotient within one unit in the last
 *    place, and from there the second gives the correctly rounded quotient (Markstein's
 *    theorem), as long as no step leaves the normal range; rf_div_fast_ok says when that holds
 *    for every x that can reach e2m1's rounding points. */
#ifndef RF_FORMAT_FAST_H
#define RF_FORMAT_FAST_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define RF_FAST_HD __host__ __device__ __forceinline__
#else
#include <string.h>
#define RF_FAST_HD static inline
#endif

RF_FAST_HD uint32_t rf_fast_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}

RF_FAST_HD float rf_fast_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}

/* One fp32 addition, multiplication or fused multiply-add, each rounded to nearest even; the
 * intrinsics keep nvcc from fusing or reordering them. */
RF_FAST_HD float rf_fast_add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

RF_FAST_HD float rf_fast_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

RF_FAST_HD float rf_fast_fma(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return fmaf(a, b, c);
#endif
}

/* The e2m1 code 0..7 of |p| (rf_e2m1_from_float's without the sign), NaN and infinities
 * included (7). The binade of |p| is clamped to [1, 8): below 1 the spacing is 0.5 as in
 * [1, 2), and at 8 and above every value saturates anyway. With m = 2^k that binade, adding
 * 2^(k+22) rounds |p| to a multiple of 2^(k-1) (nearest even: the even multiple is the even
 * code), n of them; the code is n in [0, 2), n + 2 in [2, 4), n + 4 in [4, 8), at most 7. */
RF_FAST_HD uint32_t rf_e2m1_magnitude_code(float p) {
  const uint32_t u = rf_fast_bits(p) & 0x7fffffffu;
  uint32_t m = u & 0x7f800000u;
  m = m < 0x3f800000u ? 0x3f800000u : m > 0x41000000u ? 0x41000000u : m;
  const uint32_t magic = m + (22u << 23);
  const uint32_t n = rf_fast_bits(rf_fast_add(rf_fast_float(u), rf_fast_float(magic))) - magic;
  const uint32_t code = n + ((m - 0x3f800000u) >> 22);
  return code < 7u ? code : 7u;
}

/* Whether rf_div_by_reciprocal(x, d, r) is x / d correctly rounded for every x whose quotient
 * can reach an e2m1 rounding point: with d in [2^-100, 2^100], such an x, the quotient and
 * the remainders stay normal (a smaller quotient is code 0 whatever its last bit). */
RF_FAST_HD int rf_div_fast_ok(float d) { return d >= 0x1p-100f && d <= 0x1p100f; }

/* x / d from r, the correctly rounded 1 / d (one division per block): q0 = x r is within one
 * and a half units in the last place, the first correction brings it within one, and the
 * second rounds it correctly. */
RF_FAST_HD float rf_div_by_reciprocal(float x, float d, float r) {
  float q = rf_fast_mul(x, r);
  q = rf_fast_fma(rf_fast_fma(-q, d, x), r, q);
  return rf_fast_fma(rf_fast_fma(-q, d, x), r, q);
}

/* a * b + c in one rounding, down (up == 0) or up, as __fmaf_rd and __fmaf_ru. The host forms
 * the exact sum as two doubles (a * b is exact in a double; Knuth's two-sum keeps what s loses)
 * and steps from its nearest float, so no rounding mode need be set. */
RF_FAST_HD float rf_fast_fma_dir(float a, float b, float c, int up) {
#ifdef __CUDA_ARCH__
  return up ? __fmaf_ru(a, b, c) : __fmaf_rd(a, b, c);
#else
  const double p = (double)a * (double)b, s = p + (double)c, v = s - p;
  const double err = (p - (s - v)) + ((double)c - v);
  const float f = (float)s;
  if (isinf(f)) /* beyond the largest float: up keeps infinity, down takes the largest */
    return up == (f > 0) ? f : nextafterf(f, 0.0f);
  const double beyond = (s - (double)f) + err; /* s - f is exact: f is s's nearest float */
  if (!up && beyond < 0)
    return nextafterf(f, -INFINITY);
  if (up && beyond > 0)
    return nextafterf(f, INFINITY);
  return f;
#endif
}

/* The e2m1 thresholds (fp8_1d.cuh): e2m1's code of p is the number of its midpoints 0.25, 0.75,
 * 1.25, 1.75, 2.5, 3.5 and 5 (k = 0..6) that |p| passes, strictly (>) at the even k, whose tie
 * goes down to the even code, and at or above them (>=) at the odd k. For p = x * 2^-e (d = 2^e,
 * div 0) x passes midpoint k exactly when it passes d * tau_k; for p = fp32(x / d) (div 1) when
 * it passes d times the point halfway from tau_k to its fp32 neighbour (above for strict, below
 * for the others: tau_k's last bit is even, so that halfway point rounds to tau_k), d * tau_k +-
 * d * 2^-(26..22). That half unit is exact while d * 2^-26 stays normal (rf_div_fast_ok). One
 * fused multiply-add rounded down (strict) or up gives the threshold as the float on the safe
 * side; rounded the same way into the element's type (rf_bf16_bits_dir) it stays exact. */
RF_FAST_HD float rf_e2m1_threshold(int k, float d, int div) {
  const float tau = k == 0   ? 0.25f
                    : k == 1 ? 0.75f
                    : k == 2 ? 1.25f
                    : k == 3 ? 1.75f
                    : k == 4 ? 2.5f
                    : k == 5 ? 3.5f
                             : 5.0f;
  const float unit = k == 0   ? 0x1p-26f
                     : k == 1 ? 0x1p-25f
                     : k <= 3 ? 0x1p-24f
                     : k <= 5 ? 0x1p-23f
                              : 0x1p-22f;
  const float c = div ? rf_fast_mul(d, k % 2 ? -unit : unit) : 0.0f;
  return rf_fast_fma_dir(d, tau, c, k % 2);
}

/* x >= 0 rounded down (up != 0: up) to bf16, as its 16-bit pattern. */
RF_FAST_HD uint32_t rf_bf16_bits_dir(float x, int up) {
  return (rf_fast_bits(x) + (up ? 0xffffu : 0u)) >> 16;
}

#endif
