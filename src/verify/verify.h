/* verify: the synthetic weights and the checks that prove a transfer bit-exact (design.md §5).
 *
 * Every element's value is a pure function value(seed, tensor_id, global_index) of its
 * logical position, so any rank can check any element it holds with no communication. The
 * layout-invariant checksum of a tensor is S = Σ_i mix64(tensor_id, i, bits(x_i)) mod 2^64
 * over global indices i (row-major over the HF shape): any partition of the tensor sums to
 * the same S, so trainer shards and rollout shards can be compared whatever their layouts. */
#ifndef RF_VERIFY_H
#define RF_VERIFY_H

#include <stdint.h>

#include "memory/memory.h"

/* The splitmix64 finaliser: the one 64-bit mixer used on CPU and GPU. */
static inline uint64_t rf_mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

/* The bit pattern of element `index` of tensor `tensor_id`: a finite, normal number of the
 * given type (16 bits used for bf16/fp16, 32 for fp32). */
uint32_t rf_value_bits(uint64_t seed, int32_t tensor_id, int64_t index, rf_dtype dtype);

/* One element's contribution to the checksum. */
static inline uint64_t rf_checksum_term(int32_t tensor_id, int64_t index, uint32_t bits) {
  return rf_mix64(rf_mix64(((uint64_t)(uint32_t)tensor_id << 32) ^ (uint64_t)bits) ^
                  (uint64_t)index * 0x9e3779b97f4a7c15ULL);
}

/* Fills `box` of region r (a box of tensor t) with the generator's values. */
void rf_fill_region(const rf_region *r, const rf_box *box, const rf_tensor *t, uint64_t seed,
                    rf_dtype dtype);

/* Sums the checksum terms of `box` of region r. */
uint64_t rf_checksum_region(const rf_region *r, const rf_box *box, const rf_tensor *t,
                            rf_dtype dtype);

/* One element that did not hold the generator's value. */
typedef struct {
  int32_t tensor;
  int64_t index; /* global row-major index in the logical tensor */
  uint32_t expected, got;
} rf_mismatch;

/* Checks every element of `box` against the generator; returns the number of wrong elements
 * and records the first `max_report` of them in `out` (which may be NULL). */
int64_t rf_check_region(const rf_region *r, const rf_box *box, const rf_tensor *t, uint64_t seed,
                        rf_dtype dtype, rf_mismatch *out, int max_report, int *reported);

#endif
