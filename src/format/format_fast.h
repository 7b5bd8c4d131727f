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

#include <stdint.h>

#ifdef __CUDACC__
#define RF_FAST_HD __host__ __device__ __forceinline__
#else
#include <math.h>
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

#endif
