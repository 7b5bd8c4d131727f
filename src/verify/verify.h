/* verify: the synthetic weights and the checks that prove a transfer bit-exact.
 *
 * Every element's value is a pure function value(seed, tensor_id, global_index, version) of
 * its logical position and the weights' version (versions.h; version 0 is the generator of
 * values.h), so any rank can check any element it holds with no communication. The
 * layout-invariant checksum of a tensor is S = Σ_i term(tensor_id, i, bits(x_i)) mod 2^64
 * over global indices i (row-major over the HF shape; values.h): any partition of the tensor
 * sums to the same S, so trainer shards and rollout shards can be compared whatever their
 * layouts. */
#ifndef RF_VERIFY_H
#define RF_VERIFY_H

#include <stdint.h>

#include "memory/memory.h"
/* The generator and the checksum term, usable in CUDA kernels too, live in values.h; the
 * later versions of the weights in versions.h. */
#include "verify/values.h"
#include "verify/versions.h"

/* --verify: check every element, compare the checksums only, or do not check. */
#define RF_VERIFY_LEVEL_LIST(X)                                                                    \
  X(RF_VERIFY_FULL, "full")                                                                        \
  X(RF_VERIFY_CHECKSUM, "checksum")                                                                \
  X(RF_VERIFY_NONE, "none")
typedef enum { RF_VERIFY_LEVEL_LIST(RF_ENUM_ID) RF_VERIFY_LEVEL_COUNT } rf_verify_level;
RF_ENUM_DECLARE(rf_verify_level);

/* The bit pattern of element `index` of tensor `tensor_id`: a finite, normal number of the
 * given type (16 bits used for bf16/fp16, 32 for fp32). */
uint32_t rf_value_bits(uint64_t seed, int32_t tensor_id, int64_t index, rf_dtype dtype);

/* Fills `box` of region r (a box of tensor t) with the values of `version` (NULL: version 0,
 * the generator's values, at their own speed). */
void rf_fill_region(const rf_region *r, const rf_box *box, const rf_tensor *t, uint64_t seed,
                    const rf_weight_version *version, rf_dtype dtype);

/* Makes `box` of region r, which holds version->k - 1, hold version->k: for sparse one hash per
 * element, writing back only the chunks that hold a change; a fill for full (O(1) per element
 * too) and adam; nothing for none. With `marks` (not NULL) it also sets the bit of every element
 * whose bits changed, numbered by the element's offset from r->base (rf_delta_marks): what a
 * trainer that marks what it writes hands a delta refit. Marking full and adam compares each
 * element's old and new bits as it writes them. */
void rf_advance_region(const rf_region *r, const rf_box *box, const rf_tensor *t, uint64_t seed,
                       const rf_weight_version *version, rf_dtype dtype, uint64_t *marks);

/* Sums the checksum terms of `box` of region r: rf_checksum_region under today's scheme,
 * rf_checksum_region_as under the one given (an older file's, for refit verify). dtype may
 * also be fp8, for the bytes of an fp8 rollout (fp8.h, rf_fp8_checksum). */
uint64_t rf_checksum_region(const rf_region *r, const rf_box *box, const rf_tensor *t,
                            rf_dtype dtype);
uint64_t rf_checksum_region_as(rf_checksum_scheme scheme, const rf_region *r, const rf_box *box,
                               const rf_tensor *t, rf_dtype dtype);

/* One element that did not hold the generator's value. */
typedef struct {
  int32_t tensor;
  int64_t index; /* global row-major index in the logical tensor */
  uint32_t expected, got;
} rf_mismatch;

/* Checks every element of `box` against `version` (NULL: version 0); returns the number of
 * wrong elements and records the first `max_report` of them in `out` (which may be NULL). */
int64_t rf_check_region(const rf_region *r, const rf_box *box, const rf_tensor *t, uint64_t seed,
                        const rf_weight_version *version, rf_dtype dtype, rf_mismatch *out,
                        int max_report, int *reported);

/* The same operations on a region of any memory kind: host and pinned memory run the
 * functions above; device memory runs CUDA kernels that give bit-identical results (the
 * checksum is reduced on the device; the count and the mismatch list are rf_check_region's:
 * the first ones in the region's memory order; an advance is a fill of the version there).
 * *sum and *wrong are set, not added to. They wait for their kernels before returning; a
 * build without CUDA fails on device memory with one line. */
rf_status rf_fill_region_on(rf_mem_kind kind, const rf_region *r, const rf_box *box,
                            const rf_tensor *t, uint64_t seed, const rf_weight_version *version,
                            rf_dtype dtype);
rf_status rf_advance_region_on(rf_mem_kind kind, const rf_region *r, const rf_box *box,
                               const rf_tensor *t, uint64_t seed, const rf_weight_version *version,
                               rf_dtype dtype, uint64_t *marks);
rf_status rf_checksum_region_on(rf_mem_kind kind, const rf_region *r, const rf_box *box,
                                const rf_tensor *t, rf_dtype dtype, uint64_t *sum);
rf_status rf_check_region_on(rf_mem_kind kind, const rf_region *r, const rf_box *box,
                             const rf_tensor *t, uint64_t seed, const rf_weight_version *version,
                             rf_dtype dtype, rf_mismatch *out, int max_report, int *reported,
                             int64_t *wrong);

#endif
