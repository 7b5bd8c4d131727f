/* values: the synthetic weight generator and the checksum term, shared by the CPU code
 * (verify.c) and the CUDA kernels (verify_cuda.cu), which must agree bit for bit.
 *
 * Everything here is a pure function of integers, written once and compiled for both sides:
 * RF_HD marks the functions __host__ __device__ under nvcc and is empty for the C compiler.
 * The generator and the checksum term belong to a results format (RF_RESULTS_FORMAT): stored
 * checksums depend on their exact bit patterns, so neither changes without a new format, and
 * test_verify pins a few of them. */
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

/* The tensor's generator key, once per tensor: unrelated keys for every tensor and seed. */
static inline RF_HD uint64_t rf_value_key(uint64_t seed, int32_t tensor_id) {
  return rf_mix64(seed ^ rf_mix64((uint64_t)(uint32_t)tensor_id + RF_GOLDEN));
}

/* ---- results format 2: one 32-bit hash per 32-bit word ------------------------------------
 * Both the generator and the checksum are built on a hash of a tensor's 32-bit words: word w
 * holds the elements w * p .. w * p + p - 1 of the tensor in global row-major order, p = 2 for
 * bf16 and fp16 (4 for fp8 bytes, 1 for fp32). One hash, two 32-bit multiplies, serves a whole
 * word: the GPU kernels check and checksum a bf16 pair with about a dozen integer instructions
 * where format 1 spent some forty per element, which is what lets them keep pace with a copy
 * (results/h200/README.md). The definitions stay per element, so any partition of a tensor
 * (a shard that starts at an odd column, a transposed shard) gives the same values and sums. */

/* A 32-bit finaliser: xorshift, multiply, xorshift, multiply, xorshift; a bijection with full
 * avalanche, so distinct words of one tensor get distinct hashes. */
static inline RF_HD uint32_t rf_hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

/* The hash of word w of the tensor with this 64-bit key. Below 2^32 words it is a bijection of
 * w; above, the high half of w shifts the input (tensors that large get 16-bit values anyway,
 * so a rare equal hash there costs nothing). */
static inline RF_HD uint32_t rf_word_hash(uint64_t key, uint64_t w) {
  uint32_t x = (uint32_t)w + (uint32_t)(w >> 32) * 0x9e3779b9U + (uint32_t)key;
  return rf_hash32(x ^ (uint32_t)(key >> 32));
}

/* log2 of the elements in a 32-bit word, from the element size in bytes (4, 2 or 1). */
static inline RF_HD int rf_word_shift(int esize) { return esize == 4 ? 0 : esize == 2 ? 1 : 2; }

/* The generator's word: the hash with every element's exponent forced into a range of normal
 * numbers and its sign and mantissa left random. bf16 and fp32: exponent 112..127 of bias 127
 * (magnitudes 2^-15 .. 2^1); fp16: exponent 8..15 of bias 15 (2^-7 .. 2^1). Every value is a
 * normal number far from overflow and subnormals, so no conversion on any device can round or
 * flush it, and a word takes one and-or. Callers that pass a constant dtype get the switch
 * folded away. */
static inline RF_HD uint32_t rf_value_word(uint32_t h, rf_dtype dtype) {
  switch (dtype) {
  case RF_DTYPE_BF16:
    return (h & 0x87ff87ffU) | 0x38003800U;
  case RF_DTYPE_FP16:
    return (h & 0x9fff9fffU) | 0x20002000U;
  default: /* fp32 */
    return (h & 0x87ffffffU) | 0x38000000U;
  }
}

/* The bit pattern of element `index` of the tensor with this key (16 bits used for bf16 and
 * fp16, 32 for fp32): its half of its word's value for 16-bit types, the low half first (the
 * little-endian order of two elements in memory). */
static inline RF_HD uint32_t rf_value_of(uint64_t key, int64_t index, rf_dtype dtype) {
  uint64_t i = (uint64_t)index;
  if (dtype == RF_DTYPE_FP32)
    return rf_value_word(rf_word_hash(key, i), dtype);
  return (rf_value_word(rf_word_hash(key, i >> 1), dtype) >> ((unsigned)(i & 1) * 16)) & 0xffffU;
}

/* The checksum's key of a tensor: independent of the seed, so a checkpoint's checksums are
 * those of the synthetic run that wrote it. */
static inline RF_HD uint64_t rf_checksum_key(int32_t tensor_id) {
  return rf_mix64((uint64_t)(uint32_t)tensor_id ^ 0x636865636b73756dULL);
}

/* One element's contribution to the layout-invariant checksum: with h the hash of its word
 * and `bits` placed at its position in the word, (2h + 1) * (bits << position) mod 2^64. The
 * terms of a word add up to (2h + 1) * word, so a kernel that holds whole words spends one
 * hash and one 32 x 32 -> 64-bit multiply on each. The weights are odd, so a change of any one
 * word always changes the sum; two words swapped change it whenever they differ (distinct
 * words have distinct hashes); other changes go unseen with a chance of about 2^-32, where
 * --verify full checks every element. */
static inline RF_HD uint64_t rf_checksum_term(uint64_t ckey, int64_t index, uint32_t bits,
                                              int word_shift) {
  uint64_t i = (uint64_t)index;
  uint32_t h = rf_word_hash(ckey, i >> word_shift);
  unsigned at = (unsigned)(i & ((1U << word_shift) - 1)) << (5 - word_shift);
  return (2 * (uint64_t)h + 1) * ((uint64_t)bits << at);
}

/* ---- results format 1 ------------------------------------------------------------------
 * Files of refit-results/1 hold checksums with this term, two mix64 per element; refit verify
 * compares such a file with a checkpoint under it. (Format 1's generator, one mix64 per
 * element, is gone: nothing stored needs its values again.) */
static inline uint64_t rf_checksum_term_v1(int32_t tensor_id, int64_t index, uint32_t bits) {
  return rf_mix64(rf_mix64(((uint64_t)(uint32_t)tensor_id << 32) ^ (uint64_t)bits) ^
                  ((uint64_t)index * RF_GOLDEN));
}

/* The checksum terms of a results format: format 1's for files written as refit-results/1,
 * format 2's for everything refit writes now. */
typedef enum { RF_CHECKSUM_V1 = 1, RF_CHECKSUM_V2 = 2 } rf_checksum_scheme;
#define RF_CHECKSUM_CURRENT RF_CHECKSUM_V2

/* Element `index`'s term under `scheme`: ckey = rf_checksum_key(tensor_id), word_shift that of
 * its element size. Callers that pass a constant scheme get the branch folded away. */
static inline uint64_t rf_checksum_term_as(rf_checksum_scheme scheme, int32_t tensor_id,
                                           uint64_t ckey, int64_t index, uint32_t bits,
                                           int word_shift) {
  return scheme == RF_CHECKSUM_V1 ? rf_checksum_term_v1(tensor_id, index, bits)
                                  : rf_checksum_term(ckey, index, bits, word_shift);
}

#endif
