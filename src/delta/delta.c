/* delta: the table of encodings, their sizes and the choice among them, the header and its
 * hash, and encode, apply and count over every kind of memory.
 *
 * Encoding is two steps on either side of the choice: a mark (compare the versions, set one
 * bit per changed element, count them), then, once the count has chosen the encoding and its
 * size is known, the payload from the mark and the current version. The mark is what the
 * bitmask encoding sends, and what the sparse one turns into offsets, so no encoding compares
 * twice. The hash of the payload goes last into the header. Applying checks the header against
 * the piece and the received size, then the hash, and only then writes. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "delta/delta_gpu.h"
#include "delta/delta_internal.h"

RF_ENUM_DEFINE(rf_delta_encoding, "delta", RF_DELTA_ENCODING_LIST, RF_DELTA_ENCODING_COUNT)

/* ---- the table -------------------------------------------------------------------------- */

static int64_t dense_size(int64_t n, int64_t changed, int esize) {
  (void)changed;
  return RF_DELTA_HEADER_BYTES + n * esize;
}

static int64_t sparse_size(int64_t n, int64_t changed, int esize) {
  (void)n;
  return RF_DELTA_HEADER_BYTES + changed * (4 + esize);
}

static int64_t bitmask_size(int64_t n, int64_t changed, int esize) {
  return RF_DELTA_HEADER_BYTES + 4 * rf_delta_mask_words(n) + changed * esize;
}

/* The payload's values as a row-major region of the box, for the dense encoding's copies. */
static rf_region payload_region(const rf_delta_job *job, const char *payload) {
  return rf_region_row_major((void *)payload, &job->box, job->esize);
}

static rf_status dense_encode(const rf_delta_job *job, char *payload) {
  rf_box_copy c = {payload_region(job, payload), job->cur_region, job->box};
  return rf_copy_boxes(job->kind, &c, 1);
}

static rf_status dense_apply(const rf_delta_job *job, const char *payload) {
  rf_box_copy c = {job->cur_region, payload_region(job, payload), job->box};
  return rf_copy_boxes(job->kind, &c, 1);
}

static rf_status sparse_encode(const rf_delta_job *job, char *payload) {
  char *values = payload + 4 * job->changed;
  if (job->kind == RF_MEM_DEVICE)
    return rf_gpu_delta_gather(job, NULL, payload, values);
  rf_delta_host_gather(job, NULL, payload, values);
  return RF_OK;
}

static rf_status sparse_apply(const rf_delta_job *job, const char *payload) {
  if (job->kind == RF_MEM_DEVICE)
    return rf_gpu_delta_scatter_sparse(job, payload);
  rf_delta_host_scatter_sparse(job, payload);
  return RF_OK;
}

static rf_status bitmask_encode(const rf_delta_job *job, char *payload) {
  char *values = payload + 4 * rf_delta_mask_words(job->n);
  if (job->kind == RF_MEM_DEVICE)
    return rf_gpu_delta_gather(job, payload, NULL, values);
  rf_delta_host_gather(job, payload, NULL, values);
  return RF_OK;
}

static rf_status bitmask_apply(const rf_delta_job *job, const char *payload) {
  if (job->kind == RF_MEM_DEVICE)
    return rf_gpu_delta_scatter_bitmask(job, payload);
  rf_delta_host_scatter_bitmask(job, payload);
  return RF_OK;
}

static const rf_delta_ops encodings[] = {
    [RF_DELTA_DENSE] = {"dense", dense_size, dense_encode, dense_apply},
    [RF_DELTA_SPARSE] = {"sparse", sparse_size, sparse_encode, sparse_apply},
    [RF_DELTA_BITMASK] = {"bitmask", bitmask_size, bitmask_encode, bitmask_apply},
};
_Static_assert(RF_ARRAY_LEN(encodings) == RF_DELTA_ENCODING_COUNT, "one entry per encoding");

const rf_delta_ops *rf_delta_at(rf_delta_encoding enc) {
  return (int)enc >= 0 && enc < RF_DELTA_ENCODING_COUNT ? &encodings[enc] : NULL;
}

rf_delta_encoding rf_delta_choose(int64_t elements, int64_t changed, int esize) {
  /* In the order that wins ties: each later one must be strictly smaller. */
  static const rf_delta_encoding order[] = {RF_DELTA_DENSE, RF_DELTA_BITMASK, RF_DELTA_SPARSE};
  rf_delta_encoding best = order[0];
  for (size_t i = 1; i < RF_ARRAY_LEN(order); i++)
    if (encodings[order[i]].size(elements, changed, esize) <
        encodings[best].size(elements, changed, esize))
      best = order[i];
  return best;
}

int64_t rf_delta_size(rf_delta_encoding enc, int64_t elements, int64_t changed, int esize) {
  if (enc == RF_DELTA_AUTO)
    enc = rf_delta_choose(elements, changed, esize);
  return encodings[enc].size(elements, changed, esize);
}

int64_t rf_delta_capacity(rf_delta_encoding want, int64_t elements, int esize) {
  /* Every size grows with the changed count, and auto's choice never exceeds dense. */
  return rf_delta_size(want == RF_DELTA_AUTO ? RF_DELTA_DENSE : want, elements, elements, esize);
}

/* ---- the header and the hash ------------------------------------------------------------ */

static const char magic[4] = {'R', 'F', 'D', '1'};

static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* Bytes 0..23 of a header; the hash's seed is their XXH64. */
static void header_fields(unsigned char *h, const rf_delta_info *info) {
  memset(h, 0, RF_DELTA_HEADER_BYTES);
  memcpy(h, magic, sizeof magic);
  h[4] = (unsigned char)(info->encoding + 1);
  h[5] = (unsigned char)info->esize;
  put_u64(h + 8, (uint64_t)info->elements);
  put_u64(h + 16, (uint64_t)info->changed);
}

static uint64_t header_seed(const unsigned char *h) { return XXH64(h, 24, 0); }

/* The hash's tree, level by level, without storing a level: each level keeps the last chunk's
 * worth of its hashes, and a full chunk goes up as one hash of the level above only when the
 * next hash arrives, so that at the end a level of at most one chunk is still whole. A payload
 * of 2^63 bytes has 6 levels above its chunks. */
#define RF_DELTA_HASH_LEVELS 8
typedef struct {
  unsigned char buf[RF_DELTA_HASH_LEVELS][RF_DELTA_HASH_CHUNK];
  size_t fill[RF_DELTA_HASH_LEVELS];
  uint64_t count[RF_DELTA_HASH_LEVELS];
  uint64_t seed;
} hash_tree;

static void tree_push(hash_tree *t, int k, uint64_t h) {
  if (t->fill[k] == RF_DELTA_HASH_CHUNK) {
    tree_push(t, k + 1, XXH64(t->buf[k], RF_DELTA_HASH_CHUNK, t->seed));
    t->fill[k] = 0;
  }
  put_u64(t->buf[k] + t->fill[k], h);
  t->fill[k] += 8;
  t->count[k]++;
}

uint64_t rf_delta_hash(const void *payload, size_t bytes, uint64_t seed) {
  const unsigned char *p = payload;
  if (bytes <= RF_DELTA_HASH_CHUNK)
    return XXH64(p, bytes, seed);
  hash_tree t;
  memset(t.fill, 0, sizeof t.fill);
  memset(t.count, 0, sizeof t.count);
  t.seed = seed;
  for (size_t at = 0; at < bytes; at += RF_DELTA_HASH_CHUNK)
    tree_push(&t, 0, XXH64(p + at, RF_MIN((size_t)RF_DELTA_HASH_CHUNK, bytes - at), seed));
  int k = 0;
  while (t.count[k] * 8 > RF_DELTA_HASH_CHUNK) { /* the level's last chunk goes up */
    tree_push(&t, k + 1, XXH64(t.buf[k], t.fill[k], seed));
    k++;
  }
  return XXH64(t.buf[k], t.fill[k], seed);
}

static rf_status payload_hash(rf_mem_kind kind, const char *payload, int64_t bytes, uint64_t seed,
                              uint64_t *hash) {
  if (kind == RF_MEM_DEVICE)
    return rf_gpu_delta_hash(payload, bytes, seed, hash);
  *hash = rf_delta_hash(payload, (size_t)bytes, seed);
  return RF_OK;
}

/* ---- pieces ----------------------------------------------------------------------------- */

static rf_delta_side side_of(const rf_region *r, const rf_box *box) {
  rf_delta_side s = {r->base, r->stride[0], r->stride[1]};
  if (!rf_box_is_empty(box))
    s.base = rf_region_at(r, box->lo[0], box->lo[1]);
  return s;
}

/* The job for box of cur (and of prev when encoding): refuses element sizes the loops do not
 * take and pieces too large for int32 offsets. */
static rf_status job_of(rf_mem_kind kind, const rf_region *prev, const rf_region *cur,
                        const rf_box *box, const char *what, rf_delta_job *job) {
  memset(job, 0, sizeof *job);
  job->kind = kind;
  job->what = what;
  job->box = *box;
  job->cur_region = *cur;
  job->cur = side_of(cur, box);
  job->prev = prev ? side_of(prev, box) : job->cur;
  job->esize = cur->esize;
  if (!rf_box_is_empty(box))
    job->rows = box->hi[0] - box->lo[0], job->cols = box->hi[1] - box->lo[1];
  job->n = job->rows * job->cols;
  int es = cur->esize;
  if (prev && prev->esize != es)
    return rf_fail(RF_ERR_INTERNAL,
                   "delta for %s: elements of %d bytes in the previous version and %d bytes in "
                   "the current one",
                   what, prev->esize, es);
  if (es != 1 && es != 2 && es != 4)
    return rf_fail(RF_ERR_INTERNAL, "delta for %s: elements of %d bytes; they must be 1, 2 or 4",
                   what, es);
  if (job->n > RF_DELTA_MAX_ELEMENTS)
    return rf_fail(RF_ERR_UNSUPPORTED,
                   "delta for %s: a piece of %lld elements is more than the %d that int32 "
                   "offsets address; cut it into smaller pieces",
                   what, (long long)job->n, RF_DELTA_MAX_ELEMENTS);
  return RF_OK;
}

static rf_status device_aligned(rf_mem_kind kind, const void *p, const char *what) {
  if (kind == RF_MEM_DEVICE && (uintptr_t)p % 8 != 0)
    return rf_fail(RF_ERR_INTERNAL,
                   "delta for %s: the encoded buffer at %p is not 8-byte aligned, as the GPU "
                   "kernels need",
                   what, p);
  return RF_OK;
}

/* The mark: host words allocated here (the caller frees job->mask), device ones in the GPU
 * half's scratch. keep 0 counts only. */
static rf_status mark(rf_delta_job *job, int keep, int64_t *changed) {
  if (job->kind == RF_MEM_DEVICE)
    return rf_gpu_delta_mark(job, keep, changed);
  if (keep && !job->mask) {
    job->mask = rf_calloc((size_t)(job->n / 64 + 2), 8, "the changed elements' bits");
    if (!job->mask)
      return RF_ERR_NOMEM;
    job->mask_owned = 1;
  }
  *changed = rf_delta_host_mark(job, job->mask);
  return RF_OK;
}

static void job_free(rf_delta_job *job) {
  if (job->kind != RF_MEM_DEVICE && job->mask_owned)
    free(job->mask);
  job->mask = NULL;
}

rf_status rf_delta_count(rf_mem_kind kind, const rf_region *prev, const rf_region *cur,
                         const rf_box *box, const char *what, int64_t *changed) {
  rf_delta_job job;
  *changed = 0;
  RF_TRY(job_of(kind, prev, cur, box, what, &job));
  return mark(&job, 0, changed);
}

rf_status rf_delta_encode(rf_mem_kind kind, const rf_region *prev, const rf_region *cur,
                          const rf_box *box, rf_delta_encoding want, void *out, size_t capacity,
                          const char *what, rf_delta_info *info) {
  return rf_delta_encode_marked(kind, prev, cur, box, NULL, want, out, capacity, what, info);
}

rf_status rf_delta_encode_marked(rf_mem_kind kind, const rf_region *prev, const rf_region *cur,
                                 const rf_box *box, const rf_delta_marks *marks,
                                 rf_delta_encoding want, void *out, size_t capacity,
                                 const char *what, rf_delta_info *info) {
  rf_delta_job job;
  memset(info, 0, sizeof *info);
  RF_TRY(job_of(kind, prev, cur, box, what, &job));
  RF_TRY(device_aligned(kind, out, what));
  if ((int)want < 0 || want > RF_DELTA_AUTO)
    return rf_fail(RF_ERR_INTERNAL, "delta for %s: unknown encoding %d", what, (int)want);
  if (marks && kind == RF_MEM_DEVICE)
    return rf_fail(RF_ERR_INTERNAL,
                   "delta for %s: marks of changed elements are host memory; "
                   "device pieces are compared whole",
                   what);
  if (marks && !rf_box_is_empty(box)) {
    job.marks = marks->words;
    job.marks_at = (box->lo[0] - cur->box.lo[0]) * cur->stride[0] +
                   (box->lo[1] - cur->box.lo[1]) * cur->stride[1];
  }
  /* Dense needs the count only for its header; the others need the mark itself. On the host
   * the mark also copies the changed values to where a bitmask payload keeps them, if they
   * fit in out, and their offsets to where a sparse one does, while they are in cache
   * (delta_host.c). */
  int64_t values_at = RF_DELTA_HEADER_BYTES + 4 * rf_delta_mask_words(job.n);
  size_t mask_bytes = (size_t)(job.n / 64 + 2) * 8, room = capacity;
  if (kind != RF_MEM_DEVICE && want != RF_DELTA_DENSE && (int64_t)capacity > values_at) {
    /* The mark's bits go at the end of the capacity when it has room beyond the values' place:
     * the engine's encode buffer lives across iterations with its pages mapped, while a fresh
     * allocation of n / 8 bytes took a page fault every 4 KiB, which cost more than the mark. */
    uintptr_t end = (uintptr_t)out + capacity, at = (end - mask_bytes) & ~(uintptr_t)7;
    if (capacity > mask_bytes + 8 && at >= (uintptr_t)out + (uintptr_t)values_at) {
      job.mask = (void *)at;
      room = (size_t)(at - (uintptr_t)out); /* the values stop short of the mask */
    }
    job.values = (char *)out + values_at;
    job.offsets = (char *)out + RF_DELTA_HEADER_BYTES;
    job.values_cap = ((int64_t)room - values_at) / job.esize;
  }
  rf_status st = mark(&job, want != RF_DELTA_DENSE, &job.changed);
  if (st != RF_OK)
    goto done;
  info->encoding = want == RF_DELTA_AUTO ? rf_delta_choose(job.n, job.changed, job.esize) : want;
  info->esize = job.esize;
  info->elements = job.n;
  info->changed = job.changed;
  info->bytes = encodings[info->encoding].size(job.n, job.changed, job.esize);
  if ((uint64_t)info->bytes > (uint64_t)capacity) {
    st = rf_fail(RF_ERR_INTERNAL,
                 "delta for %s: the %s encoding of %lld changed of %lld elements takes %lld "
                 "bytes, but the buffer holds %zu (reserve rf_delta_capacity)",
                 what, encodings[info->encoding].name, (long long)job.changed, (long long)job.n,
                 (long long)info->bytes, capacity);
    goto done;
  }
  if (job.mask && !job.mask_owned && (size_t)info->bytes > room) {
    /* A payload that reaches into the mark's bits (a bitmask near the dense size, in a buffer
     * of exactly its capacity) would overwrite them as it is written: they move first. */
    void *mask = malloc(mask_bytes);
    if (!mask) {
      st =
          rf_fail(RF_ERR_NOMEM, "delta for %s: out of memory for the changed elements' bits", what);
      goto done;
    }
    memcpy(mask, job.mask, mask_bytes);
    job.mask = mask;
    job.mask_owned = 1;
  }
  char *payload = (char *)out + RF_DELTA_HEADER_BYTES;
  unsigned char h[RF_DELTA_HEADER_BYTES];
  header_fields(h, info);
  RF_TRY_GOTO(encodings[info->encoding].encode(&job, payload), done);
  RF_TRY_GOTO(
      payload_hash(kind, payload, info->bytes - RF_DELTA_HEADER_BYTES, header_seed(h), &info->hash),
      done);
  put_u64(h + 24, info->hash);
  st = rf_mem_transfer(out, kind, h, RF_MEM_HOST, sizeof h);
done:
  job_free(&job);
  return st;
}

/* Reads and checks the header of `bytes` received bytes against job's piece. */
static rf_status read_header(const rf_delta_job *job, const unsigned char *h, size_t bytes,
                             rf_delta_info *info) {
  memset(info, 0, sizeof *info);
  info->encoding = (rf_delta_encoding)(h[4] - 1);
  info->esize = h[5];
  info->elements = (int64_t)get_u64(h + 8);
  info->changed = (int64_t)get_u64(h + 16);
  info->bytes = (int64_t)bytes;
  info->hash = get_u64(h + 24);
  int fits =
      memcmp(h, magic, sizeof magic) == 0 && h[4] >= 1 && h[4] <= RF_DELTA_ENCODING_COUNT &&
      h[6] == 0 && h[7] == 0 && info->esize == job->esize && info->elements == job->n &&
      info->changed >= 0 && info->changed <= info->elements &&
      encodings[info->encoding].size(info->elements, info->changed, info->esize) == (int64_t)bytes;
  if (!fits)
    return rf_fail(RF_ERR_CORRUPT,
                   "delta for %s: corrupt header (encoding %d, %d-byte elements, %lld elements, "
                   "%lld changed, %zu bytes received) for a piece of %lld %d-byte elements; "
                   "refusing it, the piece keeps its previous version",
                   job->what, h[4], h[5], (long long)info->elements, (long long)info->changed,
                   bytes, (long long)job->n, job->esize);
  return RF_OK;
}

/* The checks of rf_delta_check, leaving the job ready for the apply. */
static rf_status check_piece(rf_mem_kind kind, const void *encoded, size_t bytes,
                             const rf_region *dst, const rf_box *box, const char *what,
                             rf_delta_job *job, rf_delta_info *info) {
  memset(info, 0, sizeof *info);
  RF_TRY(job_of(kind, NULL, dst, box, what, job));
  RF_TRY(device_aligned(kind, encoded, what));
  if (bytes < RF_DELTA_HEADER_BYTES)
    return rf_fail(RF_ERR_CORRUPT,
                   "delta for %s: %zu bytes cannot hold the %d-byte header; refusing it, the "
                   "piece keeps its previous version",
                   what, bytes, RF_DELTA_HEADER_BYTES);
  unsigned char h[RF_DELTA_HEADER_BYTES];
  RF_TRY(rf_mem_transfer(h, RF_MEM_HOST, encoded, kind, sizeof h));
  RF_TRY(read_header(job, h, bytes, info));
  const char *payload = (const char *)encoded + RF_DELTA_HEADER_BYTES;
  uint64_t hash = 0;
  RF_TRY(
      payload_hash(kind, payload, (int64_t)bytes - RF_DELTA_HEADER_BYTES, header_seed(h), &hash));
  if (hash != info->hash)
    return rf_fail(RF_ERR_CORRUPT,
                   "delta for %s: the payload's hash %016llx does not match the header's "
                   "%016llx; refusing it, the piece keeps its previous version",
                   what, (unsigned long long)hash, (unsigned long long)info->hash);
  job->changed = info->changed;
  return RF_OK;
}

rf_status rf_delta_check(rf_mem_kind kind, const void *encoded, size_t bytes, const rf_region *dst,
                         const rf_box *box, const char *what, rf_delta_info *info) {
  rf_delta_job job;
  rf_delta_info local;
  return check_piece(kind, encoded, bytes, dst, box, what, &job, info ? info : &local);
}

rf_status rf_delta_apply_checked(rf_mem_kind kind, const void *encoded, const rf_delta_info *info,
                                 const rf_region *dst, const rf_box *box, const char *what) {
  rf_delta_job job;
  RF_TRY(job_of(kind, NULL, dst, box, what, &job));
  job.changed = info->changed;
  return encodings[info->encoding].apply(&job, (const char *)encoded + RF_DELTA_HEADER_BYTES);
}

rf_status rf_delta_apply(rf_mem_kind kind, const void *encoded, size_t bytes, const rf_region *dst,
                         const rf_box *box, const char *what, rf_delta_info *info) {
  rf_delta_job job;
  rf_delta_info local;
  if (!info)
    info = &local;
  RF_TRY(check_piece(kind, encoded, bytes, dst, box, what, &job, info));
  return encodings[info->encoding].apply(&job, (const char *)encoded + RF_DELTA_HEADER_BYTES);
}
