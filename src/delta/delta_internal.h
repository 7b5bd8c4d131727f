/* delta_internal: what delta.c hands the loops that run an encoding, on the host
 * (delta_host.c) or the GPU (delta_gpu.h). */
#ifndef RF_DELTA_INTERNAL_H
#define RF_DELTA_INTERNAL_H

#include "delta/delta.h"

/* One version of a piece as the loops see it: element (r, c) of the box, row-major number
 * e = r * cols + c, lives at base + (r * s0 + c * s1) * esize. */
typedef struct {
  char *base; /* element (0, 0): the box's lo corner */
  int64_t s0, s1;
} rf_delta_side;

/* A piece being encoded (prev and cur) or applied (cur is the destination). */
typedef struct rf_delta_job {
  rf_mem_kind kind;
  const char *what;
  rf_delta_side prev, cur;
  rf_region cur_region; /* cur as a region, for the dense encoding's box copies */
  rf_box box;
  int64_t rows, cols, n; /* n = rows * cols elements */
  int esize;
  int64_t changed; /* from the mark (encode) or the header (apply) */
  /* The mark: bit e of the piece's changed elements, as the words of a bitmask encoding.
   * Host: uint64 words, ceil(n / 64) + 1 of them, at the end of the encode buffer
   * when it has room (mask_owned 0) or else allocated by delta.c (mask_owned 1); device: the
   * GPU half's scratch, uint32 words. */
  void *mask;
  int mask_owned;
  /* Host encode: room for values_cap current values at `values` (where the bitmask payload
   * keeps them), which the mark fills with the changed ones in order as it finds them; NULL
   * when it did not, and the payload then reads them from cur. The mark also writes their
   * offsets at `offsets` (where the sparse payload keeps them) while they end below `values`;
   * NULL when they did not. */
  char *values, *offsets;
  int64_t values_cap;
  /* Host encode of a marked piece (rf_delta_encode_marked): the trainer's marks, and the bit of
   * element (0, 0) of the box, whose element (r, c) is bit marks_at + r * cur.s0 + c * cur.s1. */
  const uint64_t *marks;
  int64_t marks_at;
} rf_delta_job;

/* Words of 32 bits in a bitmask encoding's mask: ceil(n / 32). */
static inline int64_t rf_delta_mask_words(int64_t n) { return (n + 31) / 32; }

/* ---- host loops (delta_host.c) ---------------------------------------------------------- */

/* Sets in mask (ceil(n / 64) + 1 words, cleared here where needed; NULL to count only) the
 * bits of the elements that differ between job's prev and cur, and copies their values to
 * job->values (see there); returns how many differ. */
int64_t rf_delta_host_mark(rf_delta_job *job, uint64_t *mask);
/* From job->mask: the mask words (when mask_out is not NULL), the offsets (when offsets is not
 * NULL) and the values of the changed elements of cur (moved from job->values when the mark
 * copied them; `values` may overlap them, above or below, but not the offsets' place). */
void rf_delta_host_gather(const rf_delta_job *job, char *mask_out, char *offsets, char *values);
/* Writes job->changed values into job's destination (cur) at the elements that a sparse
 * payload's offsets, or a bitmask payload's bits, name. */
void rf_delta_host_scatter_sparse(const rf_delta_job *job, const char *payload);
void rf_delta_host_scatter_bitmask(const rf_delta_job *job, const char *payload);

#endif
