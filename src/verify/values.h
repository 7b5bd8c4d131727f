/* values: the synthetic weight generator and the checksum term, shared by the CPU code
 * (verify.c) and the CUDA kernels (verify_cuda.cu), which must agree bit for bit.
 *
 * Everything here is a pure function of integers, written once and compiled for both sides:
 * RF_HD marks the functions __host__ __device__ under nvcc and is empty for the C compiler.
 * The generator must never change silently: stored results depend on its exact bit patterns,
 * and test_verify pins a few of them. */
#ifndef RF_VALUES_H
#define RF_VALUES_H

#include <stdint.h>

#include "model/model.h"

#ifdef __CUDACC__
#define RF_HD __host__ __device__
#else
#define RF_HD
#endif

#define RF_GOLDEN 0x9e3779b97f4a7c15ULL

/* The splitmix64 finaliser: the one 64-bit mixer used on CPU and GPU. */
static inline RF_HD uint64_t rf_mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

/* The generator, in two steps so that the per-element cost is one mixer:
 *   key = mix64(seed ^ mix64(tensor_id + GOLDEN))      once per tensor
 *   h   = mix64(key + index * GOLDEN)                   per element
 * Element i of a tensor is thus the i-th output of splitmix64 seeded with the tensor's key: a
 * well-studied stream, and tensors and seeds get unrelated keys.
 *
 * The fields of h are used without overlap: bit 63 is the sign, bits 24..55 pick the exponent
 * (a multiply-high maps them onto the range without a division), bits 0..22 are the mantissa
 * (the low 7 or 10 of them for bf16 and fp16). The exponents keep every value a normal number
 * between 2^-7 and 2^8 in magnitude (2^-5 .. 2^6 for fp16), far from overflow and subnormals,
 * so no conversion on any device can round or flush them. */
static inline RF_HD uint64_t rf_value_key(uint64_t seed, int32_t tensor_id) {
  return rf_mix64(seed ^ rf_mix64((uint64_t)(uint32_t)tensor_id + RF_GOLDEN));
}

/* The bit pattern of the element whose mixer input is x = key + index * GOLDEN (mod 2^64):
 * a loop that steps the index by d can step x by d * GOLDEN instead of multiplying again.
 * Callers that pass a constant dtype get the switch folded away. */
static inline RF_HD uint32_t rf_value_from(uint64_t x, rf_dtype dtype) {
  uint64_t h = rf_mix64(x);
  uint32_t sign = (uint32_t)(h >> 63);
  uint64_t pick = (h >> 24) & 0xffffffffULL;
  switch (dtype) {
  case RF_DTYPE_BF16: /* exponent 120..134 of bias 127 */
    return sign << 15 | (uint32_t)(120 + ((pick * 15) >> 32)) << 7 | (uint32_t)(h & 0x7f);
  case RF_DTYPE_FP16: /* exponent 10..20 of bias 15 */
    return sign << 15 | (uint32_t)(10 + ((pick * 11) >> 32)) << 10 | (uint32_t)(h & 0x3ff);
  default: /* fp32: exponent 120..134 of bias 127 */
    return sign << 31 | (uint32_t)(120 + ((pick * 15) >> 32)) << 23 | (uint32_t)(h & 0x7fffff);
  }
}

/* The bit pattern of element `index` of the tensor with this key (16 bits used for bf16 and
 * fp16, 32 for fp32). */
static inline RF_HD uint32_t rf_value_of(uint64_t key, int64_t index, rf_dtype dtype) {
  return rf_value_from(key + (uint64_t)index * RF_GOLDEN, dtype);
}

/* One element's contribution to the layout-invariant checksum, given index * GOLDEN (mod 2^64),
 * which a loop can step like rf_value_from's input. */
static inline RF_HD uint64_t rf_checksum_term_from(int32_t tensor_id, uint64_t index_golden,
                                                   uint32_t bits) {
  return rf_mix64(rf_mix64(((uint64_t)(uint32_t)tensor_id << 32) ^ (uint64_t)bits) ^ index_golden);
}

/* One element's contribution to the layout-invariant checksum. */
static inline RF_HD uint64_t rf_checksum_term(int32_t tensor_id, int64_t index, uint32_t bits) {
  return rf_checksum_term_from(tensor_id, (uint64_t)index * RF_GOLDEN, bits);
}

#endif
