/* delta: lossless encodings of what changed in a piece between two weight versions, and their
 * application (docs/architecture.md, "Delta encodings").
 *
 * A piece is a box of a 2-D region (memory.h) with 1-, 2- or 4-byte elements (fp8 and packed
 * 4-bit formats are 1-byte elements here), its elements numbered row-major over the box
 * whatever the region's strides. Encoding compares the previous and the current version bit
 * for bit (-0.0 against 0.0, or two NaN payloads, are changes) and sends the current value of
 * every changed element: replacement values, never arithmetic differences, so the result is
 * exact for every dtype and format. Applying an encoded piece onto a destination that holds
 * the previous version leaves it holding the current one.
 *
 * The encodings are one table. An encoded piece starts with a 32-byte header that names its
 * encoding, element size, element count and changed count and carries a hash of the payload,
 * so that the receiver refuses a damaged piece before writing anything. Sizes are exact
 * functions of (elements, changed, element bytes), so the engine can reserve buffers and
 * account wire bytes without encoding first.
 *
 * Host and pinned memory run C loops (delta_host.c); device memory runs CUDA kernels on refit's
 * stream (delta_cuda.cu) that write the same bytes. */
#ifndef RF_DELTA_H
#define RF_DELTA_H

#include <stddef.h>
#include <stdint.h>

#include "core/box.h"
#include "core/core.h"
#include "memory/memory.h"

/* The encodings, in the table's order; the byte that names one in a header is its index + 1.
 *   dense    the piece's current elements, all of them;
 *   sparse   the changed elements' int32 offsets into the piece, ascending, then their values;
 *   bitmask  one bit per element of the piece (bit i of byte i / 8, least significant first),
 *            padded with zero bits to whole 32-bit words, then the changed elements' values in
 *            the order of their bits. */
#define RF_DELTA_ENCODING_LIST(X)                                                                  \
  X(RF_DELTA_DENSE, "dense")                                                                       \
  X(RF_DELTA_SPARSE, "sparse")                                                                     \
  X(RF_DELTA_BITMASK, "bitmask")
/* RF_DELTA_AUTO is not an encoding but what encode may be asked for instead of one: the
 * smallest for the piece's changed count (rf_delta_choose). */
typedef enum {
  RF_DELTA_ENCODING_LIST(RF_ENUM_ID) RF_DELTA_ENCODING_COUNT,
  RF_DELTA_AUTO = RF_DELTA_ENCODING_COUNT
} rf_delta_encoding;
RF_ENUM_DECLARE(rf_delta_encoding);

/* The header: little-endian, 32 bytes.
 *   0..3    "RFD1" (format 1)
 *   4       encoding: 1 dense, 2 sparse, 3 bitmask
 *   5       element bytes: 1, 2 or 4
 *   6..7    zero
 *   8..15   elements of the piece
 *   16..23  changed elements
 *   24..31  the payload's hash (rf_delta_hash), seeded with XXH64 of bytes 0..23, so that the
 *           hash covers the header's fields too */
#define RF_DELTA_HEADER_BYTES 32
/* Offsets are int32: the most elements a piece may have. */
#define RF_DELTA_MAX_ELEMENTS INT32_MAX
/* The hash is a tree of XXH64 over chunks of this many bytes (rf_delta_hash). */
#define RF_DELTA_HASH_CHUNK 4096

struct rf_delta_job;

typedef struct {
  const char *name;
  /* The exact size of a piece of `elements` elements of `esize` bytes, `changed` of them
   * changed, in this encoding, the header included. */
  int64_t (*size)(int64_t elements, int64_t changed, int esize);
  /* Writes the payload (what follows the header) of job's piece from its mark, in job's kind
   * of memory; and writes a payload's values into job's destination (delta.c's job). */
  rf_status (*encode)(const struct rf_delta_job *job, char *payload);
  rf_status (*apply)(const struct rf_delta_job *job, const char *payload);
} rf_delta_ops;

/* The table entry of an encoding (not of RF_DELTA_AUTO). */
const rf_delta_ops *rf_delta_at(rf_delta_encoding enc);

/* The exact encoded size in bytes, header included; for RF_DELTA_AUTO that of the encoding
 * rf_delta_choose takes. */
int64_t rf_delta_size(rf_delta_encoding enc, int64_t elements, int64_t changed, int esize);

/* The smallest encoding for `changed` of `elements` elements; on a tie dense, then bitmask,
 * then sparse (the simpler application wins). For elements a multiple of 32 that is sparse
 * below elements / 32 changed, dense from elements - elements / (8 * esize) on, bitmask
 * between. */
rf_delta_encoding rf_delta_choose(int64_t elements, int64_t changed, int esize);

/* The most bytes an encoding of a piece may take whatever changed: what to reserve for encode
 * (for RF_DELTA_AUTO the dense size, which no choice exceeds). */
int64_t rf_delta_capacity(rf_delta_encoding want, int64_t elements, int esize);

/* What an encoded piece says about itself. */
typedef struct {
  rf_delta_encoding encoding;
  int esize;
  int64_t elements, changed;
  int64_t bytes; /* header and payload */
  uint64_t hash;
} rf_delta_info;

/* Encodes `box` (inside both regions, which share an element size of 1, 2 or 4 bytes and live
 * in `kind` memory, as `out` does) as the change from prev to cur: in encoding `want`, or the
 * smallest under RF_DELTA_AUTO. Writes header and payload to out and fills *info (bytes used,
 * changed count, encoding). `what` names the piece in errors. Fails with one line on a piece
 * of more than RF_DELTA_MAX_ELEMENTS elements (RF_ERR_UNSUPPORTED), and when the encoding does
 * not fit `capacity` bytes (RF_ERR_INTERNAL: reserve rf_delta_capacity). It may use all of
 * the capacity as scratch, not only the bytes it reports. On the device, out must be 8-byte
 * aligned; encode waits for its kernels, since the count decides the size. */
rf_status rf_delta_encode(rf_mem_kind kind, const rf_region *prev, const rf_region *cur,
                          const rf_box *box, rf_delta_encoding want, void *out, size_t capacity,
                          const char *what, rf_delta_info *info);

/* What a trainer that knows where it wrote may hand encode: one bit per element of cur's
 * region, numbered by the element's offset from cur->base in cur's strides (bit i of
 * words[i / 64]), set for every element that differs from the version the receiver holds.
 * Encode then takes the marked elements as the changed ones without comparing, and reads
 * neither prev nor the unmarked elements, so its cost follows the changes instead of the piece.
 * A marked element that did not change is sent all the same (its current value: harmless, a
 * few bytes more); a changed element left unmarked is not sent, so the marks must cover every
 * change. The array holds one word more than its bits need, which encode may read. Host memory
 * only. */
typedef struct {
  const uint64_t *words;
} rf_delta_marks;

/* rf_delta_encode of the marked elements (marks NULL: of every element that differs, as
 * rf_delta_encode; prev is not read otherwise). The same bytes as rf_delta_encode when the
 * marks name exactly the elements that differ. Refuses marks on device memory
 * (RF_ERR_INTERNAL). */
rf_status rf_delta_encode_marked(rf_mem_kind kind, const rf_region *prev, const rf_region *cur,
                                 const rf_box *box, const rf_delta_marks *marks,
                                 rf_delta_encoding want, void *out, size_t capacity,
                                 const char *what, rf_delta_info *info);

/* Applies the encoded piece of `bytes` bytes at `encoded` to `box` of dst (both in `kind`
 * memory; on the device, encoded 8-byte aligned). Checks first that the header describes this
 * piece and this many bytes and that the payload's hash matches; when either does not, logs
 * one line naming `what`, returns RF_ERR_CORRUPT and writes nothing. Fills *info when it is
 * not NULL. On the device the writes are queued on refit's stream (rf_mem_sync waits). */
rf_status rf_delta_apply(rf_mem_kind kind, const void *encoded, size_t bytes, const rf_region *dst,
                         const rf_box *box, const char *what, rf_delta_info *info);

/* The checks of rf_delta_apply alone (header against this piece and `bytes`, payload hash),
 * writing nothing: a receiver that applies a version only once every piece of it has arrived
 * intact checks them all first (the engine's transactional apply), then applies each with
 * rf_delta_apply_checked, which trusts the *info this call filled and checks nothing again. */
rf_status rf_delta_check(rf_mem_kind kind, const void *encoded, size_t bytes, const rf_region *dst,
                         const rf_box *box, const char *what, rf_delta_info *info);
rf_status rf_delta_apply_checked(rf_mem_kind kind, const void *encoded, const rf_delta_info *info,
                                 const rf_region *dst, const rf_box *box, const char *what);

/* The number of elements of `box` that differ bit for bit between prev and cur. */
rf_status rf_delta_count(rf_mem_kind kind, const rf_region *prev, const rf_region *cur,
                         const rf_box *box, const char *what, int64_t *changed);

/* The hash in a header: for a payload of at most RF_DELTA_HASH_CHUNK bytes, XXH64(payload,
 * seed); for a longer one, the same function of the array of XXH64(chunk, seed) over its
 * chunks of RF_DELTA_HASH_CHUNK bytes (the last one shorter), each a little-endian uint64.
 * The chunks are hashed independently, which lets a GPU hash a payload in parallel. Host
 * memory. */
uint64_t rf_delta_hash(const void *payload, size_t bytes, uint64_t seed);

#endif
