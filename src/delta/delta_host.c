/* delta_host: the mark, gather and scatter of the delta encodings on host memory.
 *
 * The mark is memory-bound: it reads both versions once and writes one bit per element. Rows
 * dense on both sides (every trainer shard in HF order, any box of one) go 64 elements at a
 * time (block_bits): on x86-64 SSE2 compares 16 bytes an instruction and gathers the elements'
 * bits with movemask, with no branch on the data, whose changes fall at random; elsewhere the
 * 64-bit words are XORed and ORed, and only a block with a difference is taken apart. No call
 * per element: the element size is a constant in each instance of the loop (mark_dense), so
 * the compiler unrolls it. Two transposed versions (--trainer-order jax) go the same way column
 * by column, in memory order; any other strides element by element.
 *
 * While a changed block is in cache, the mark also copies its current values (and offsets)
 * to where the payload keeps them (capture), so that writing the payload does not read the
 * current version again at random: at 1 % changed that read cost more than the mark itself.
 * Otherwise gather and scatter visit only the changed elements, walking the set bits of the
 * mask (or the offsets) in ascending order and following the row they fall in: one step per
 * row and per changed element, a division only to jump over several rows. The host is
 * little-endian (x86-64, AArch64), so the mask's 64-bit words are its 32-bit wire words in
 * memory order. */
#include <string.h>

#include "delta/delta_internal.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the mask words are little-endian");

static inline uint64_t load64(const char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

/* The element at p as an integer of its bits, for comparing. */
static inline uint32_t load_elem(const char *p, int es) {
  uint32_t v = 0;
  memcpy(&v, p, (size_t)es); /* little-endian: the low bytes */
  return v;
}

/* ORs `bits` (a run of up to 64) into mask from bit `pos` on. */
static inline void put_bits(uint64_t *mask, int64_t pos, uint64_t bits) {
  int shift = (int)(pos & 63);
  mask[pos >> 6] |= bits << shift;
  if (shift)
    mask[(pos >> 6) + 1] |= bits >> (64 - shift);
}

/* Bit k set for each element k (of 8 / es) of an XOR word that is not zero, without a branch:
 * each element's bytes are folded into one whose high bit says "not zero", and a multiply
 * gathers those bits into the top byte (each partial product lands on a bit of its own, so
 * nothing carries). */
static inline __attribute__((always_inline)) uint64_t word_bits(uint64_t x, const int es) {
  if (es == 4)
    return (uint64_t)((uint32_t)x != 0) | (uint64_t)((x >> 32) != 0) << 1;
  const uint64_t low7 = 0x7f7f7f7f7f7f7f7fULL;
  if (es == 2)
    x |= (x >> 8) & 0x00ff00ff00ff00ffULL; /* the low byte of each element: both of its bytes */
  uint64_t high = (((x & low7) + low7) | x) & ~low7; /* bit 7 of each byte: the byte != 0 */
  if (es == 2)                                       /* bits 7, 23, 39, 55 -> 60..63 */
    return (((high >> 7) & 0x0001000100010001ULL) * 0x0000200040008001ULL) >> 45 & 0xf;
  return ((high >> 7) * 0x0102040810204080ULL) >> 56; /* bits 7, 15, .., 63 -> 56..63 */
}

/* ORs the bits of a run of up to 64 elements, the k-th of which is element e0 + k * step of
 * the piece, into mask. */
static inline void put_run(uint64_t *mask, int64_t e0, int64_t step, uint64_t bits) {
  if (step == 1) {
    put_bits(mask, e0, bits);
    return;
  }
  for (; bits; bits &= bits - 1) {
    int64_t e = e0 + __builtin_ctzll(bits) * step;
    mask[e >> 6] |= (uint64_t)1 << (e & 63);
  }
}

/* The bits of the changed elements among 64 dense on both sides. */
#if defined(__SSE2__)
#include <emmintrin.h>

/* SSE2 compares 16 bytes at a time and movemask gathers one bit per byte or element, so a
 * block costs a few instructions whether or not anything changed, and no branch on the data. */
static inline __attribute__((always_inline)) uint64_t block_bits(const char *p, const char *c,
                                                                 const int es) {
  uint64_t same = 0;
  for (int v = 0; v < 4 * es; v += es == 2 ? 2 : 1) {
    __m128i a = _mm_loadu_si128((const __m128i *)(p + 16 * v));
    __m128i b = _mm_loadu_si128((const __m128i *)(c + 16 * v));
    if (es == 1) {
      same |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(a, b)) << (16 * v);
    } else if (es == 2) { /* two vectors' 16 lanes packed into the bytes of one */
      __m128i a1 = _mm_loadu_si128((const __m128i *)(p + 16 * v + 16));
      __m128i b1 = _mm_loadu_si128((const __m128i *)(c + 16 * v + 16));
      __m128i eq = _mm_packs_epi16(_mm_cmpeq_epi16(a, b), _mm_cmpeq_epi16(a1, b1));
      same |= (uint64_t)(uint16_t)_mm_movemask_epi8(eq) << (8 * v);
    } else {
      same |= (uint64_t)_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(a, b))) << (4 * v);
    }
  }
  return ~same;
}
#else
/* Elsewhere the 64-bit words are XORed and ORed together first, and only a block with a
 * difference is taken apart into its elements' bits. */
static inline __attribute__((always_inline)) uint64_t block_bits(const char *p, const char *c,
                                                                 const int es) {
  uint64_t any = 0, bits = 0;
  for (int j = 0; j < 8 * es; j++)
    any |= load64(p + 8 * j) ^ load64(c + 8 * j);
  if (any)
    for (int j = 0; j < 8 * es; j++)
      bits |= word_bits(load64(p + 8 * j) ^ load64(c + 8 * j), es) << (j * (8 / es));
  return bits;
}
#endif

/* Set bits of a word, without the libgcc call that __builtin_popcountll becomes on x86-64
 * without POPCNT. */
static inline int popcount64(uint64_t x) {
  x -= (x >> 1) & 0x5555555555555555ULL;
  x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
  return (int)((x * 0x0101010101010101ULL) >> 56);
}

/* Where the mark copies the current values of the changed elements it finds, in ascending
 * order, while they are still in cache, so that the payload need not read them again at
 * random: room for `cap` of them at `values`, which the mark clears when they do not fit. It
 * also writes their offsets, where a sparse payload keeps them, while they stay below the
 * values (`offsets_cap` of them; cleared past that, when sparse is no longer the smallest). */
typedef struct {
  char *values, *offsets;
  int64_t k, cap, offsets_cap;
} capture;

/* Copies the elements of `bits`, element k at c + k * stride bytes and numbered e0 + k. */
static inline __attribute__((always_inline)) void capture_bits(capture *cp, const char *c,
                                                               int64_t stride, int64_t e0,
                                                               uint64_t bits, int count,
                                                               const int es) {
  if (!cp || !cp->values || !bits)
    return;
  if (cp->k + count > cp->cap) {
    cp->values = cp->offsets = NULL;
    return;
  }
  if (cp->k + count > cp->offsets_cap)
    cp->offsets = NULL;
  for (; bits; bits &= bits - 1, cp->k++) {
    int b = __builtin_ctzll(bits);
    memcpy(cp->values + es * cp->k, c + b * stride, (size_t)es);
    if (cp->offsets) {
      int32_t off = (int32_t)(e0 + b);
      memcpy(cp->offsets + 4 * cp->k, &off, 4);
    }
  }
}

/* Marks n elements dense on both sides, which are elements e0, e0 + step, ... of the piece
 * (step 1 along a row, cols down a column); returns the count. mask and cp may be NULL. With
 * `store` (step 1, e0 a multiple of 64, and no other run sharing the last word) each block
 * stores its mask word instead of ORing into it, so the mask needs no clearing first. */
static inline __attribute__((always_inline)) int64_t
mark_dense(const char *p, const char *c, int64_t n, uint64_t *mask, capture *cp, int64_t e0,
           int64_t step, const int es, const int store) {
  enum { BLOCK = 64 };
  int64_t count = 0, i = 0;
  for (; i + BLOCK <= n; i += BLOCK) {
    uint64_t bits = block_bits(p + i * es, c + i * es, es);
    int ones = popcount64(bits);
    count += ones;
    if (mask && store)
      mask[(e0 + i) >> 6] = bits;
    else if (mask)
      put_run(mask, e0 + i * step, step, bits);
    capture_bits(cp, c + i * es, es, e0 + i, bits, ones, es);
  }
  if (i < n) { /* the last elements, fewer than a block */
    uint64_t bits = 0;
    for (int64_t k = i; k < n; k++)
      bits |= (uint64_t)(load_elem(p + k * es, es) != load_elem(c + k * es, es)) << (k - i);
    int ones = popcount64(bits);
    count += ones;
    if (mask && store)
      mask[(e0 + i) >> 6] = bits;
    else if (mask)
      put_run(mask, e0 + i * step, step, bits);
    capture_bits(cp, c + i * es, es, e0 + i, bits, ones, es);
  }
  return count;
}

static int64_t mark_dense_es(const char *p, const char *c, int64_t n, uint64_t *mask, capture *cp,
                             int64_t e0, int64_t step, int es, int store) {
  switch (es * 2 + !!store) {
  case 2:
    return mark_dense(p, c, n, mask, cp, e0, step, 1, 0);
  case 3:
    return mark_dense(p, c, n, mask, cp, e0, step, 1, 1);
  case 4:
    return mark_dense(p, c, n, mask, cp, e0, step, 2, 0);
  case 5:
    return mark_dense(p, c, n, mask, cp, e0, step, 2, 1);
  case 8:
    return mark_dense(p, c, n, mask, cp, e0, step, 4, 0);
  default:
    return mark_dense(p, c, n, mask, cp, e0, step, 4, 1);
  }
}

/* Marks one row of elements strided on either side, 64 at a time. */
static int64_t mark_strided(const rf_delta_job *job, int64_t r, uint64_t *mask, capture *cp) {
  const int es = job->esize;
  const char *p = job->prev.base + r * job->prev.s0 * es;
  const char *c = job->cur.base + r * job->cur.s0 * es;
  const int64_t ps = job->prev.s1 * es, cs = job->cur.s1 * es, e0 = r * job->cols;
  int64_t count = 0;
  for (int64_t i = 0; i < job->cols; i += 64) {
    uint64_t bits = 0;
    for (int64_t k = i; k < RF_MIN(i + 64, job->cols); k++)
      bits |= (uint64_t)(load_elem(p + k * ps, es) != load_elem(c + k * cs, es)) << (k - i);
    int ones = popcount64(bits);
    count += ones;
    if (mask && bits)
      put_bits(mask, e0 + i, bits);
    capture_bits(cp, c + i * cs, cs, e0 + i, bits, ones, es);
  }
  return count;
}

/* Whether both versions hold the piece as one dense row-major run. */
static int one_run(const rf_delta_job *job) {
  const rf_delta_side *s[2] = {&job->prev, &job->cur};
  for (int i = 0; i < 2; i++)
    if ((job->cols > 1 && s[i]->s1 != 1) || (job->rows > 1 && s[i]->s0 != job->cols))
      return 0;
  return 1;
}

/* Whether dimension d of the box is dense on both sides (or one element thick). */
static int dense_along(const rf_delta_job *job, int d) {
  int64_t extent = d ? job->cols : job->rows;
  int64_t sp = d ? job->prev.s1 : job->prev.s0, sc = d ? job->cur.s1 : job->cur.s0;
  return extent == 1 || (sp == 1 && sc == 1);
}

/* Bits pos .. pos + 63 of the trainer's marks (the word after the last one is there). */
static inline uint64_t marks_from(const uint64_t *marks, int64_t pos) {
  const uint64_t *w = marks + (pos >> 6);
  int shift = (int)(pos & 63);
  return shift ? (w[0] >> shift) | (w[1] << (64 - shift)) : w[0];
}

/* The marks of up to 64 elements of a row, element k at bit pos + k * step. */
static inline uint64_t marks_run(const uint64_t *marks, int64_t pos, int64_t step, int64_t len) {
  uint64_t bits = 0;
  if (step == 1) {
    bits = marks_from(marks, pos);
  } else {
    for (int64_t k = 0; k < len; k++, pos += step)
      bits |= ((marks[pos >> 6] >> (pos & 63)) & 1) << k;
  }
  return len == 64 ? bits : bits & (((uint64_t)1 << len) - 1);
}

/* How many 64-element blocks ahead the marked mark asks for the current version's lines: the
 * marked elements fall at random, and a read that waits for each one in turn runs at memory's
 * latency, not its bandwidth. Where they are not rare (at least one in DENSE_MARKS elements)
 * every line is asked for, in order, which the hardware's own prefetcher follows: on the 2-core
 * VM that took 64 Mi bf16 elements with 1 % marked in 10 ms and with 0.1 % in 7 ms, against 17
 * and 13 ms asking for only the lines holding a marked element; below it only those lines are,
 * so that a piece with a handful of changes reads little more than its marks. */
enum { PREFETCH_BLOCKS = 16, DENSE_MARKS = 16384 };

/* Asks for the cache lines of the marked elements of a block of 64 (one line holds 64 / es). */
static inline void prefetch_marked(const char *c, uint64_t marked, int es) {
  const int per_line = 64 / es;
  const uint64_t line = per_line == 64 ? ~(uint64_t)0 : ((uint64_t)1 << per_line) - 1;
  for (int l = 0; l < es; l++)
    if ((marked >> (l * per_line)) & line)
      __builtin_prefetch(c + l * 64);
}

/* Whether at least `need` of a row's len elements (from mark pos on) are marked: it stops
 * counting there, which is at once wherever marks are not rare. */
static int marks_reach(const uint64_t *marks, int64_t pos, int64_t len, int64_t need) {
  int64_t n = 0;
  for (int64_t i = 0; i < len && n < need; i += 64) {
    uint64_t bits = marks_run(marks, pos + i, 1, RF_MIN(64, len - i));
    n += bits ? popcount64(bits) : 0;
  }
  return n >= need;
}

/* The mark of a marked piece (rf_delta_encode_marked) is the trainer's marks themselves, taken
 * row by row, 64 elements at a time, into the piece's numbering: nothing is compared and the
 * previous version is not read, so a piece with few changes costs one read of its marks (an
 * eighth of a bit per element bit) and of the marked elements' lines, which are asked for
 * ahead. A piece that is one dense run goes as one row. */
static inline __attribute__((always_inline)) int64_t
mark_marked_es(const rf_delta_job *job, uint64_t *mask, capture *cp, const int es) {
  const int run = one_run(job);
  const int64_t rows = run ? 1 : job->rows, cols = run ? job->n : job->cols;
  const int64_t cs = (run ? 1 : job->cur.s1) * es, ms = run ? 1 : job->cur.s1;
  /* Rows of whole mask words store each word; any other shape ORs into a cleared mask. */
  const int store = cols % 64 == 0;
  if (mask && !store)
    memset(mask, 0, (size_t)(job->n / 64 + 2) * 8);
  /* The lines asked for ahead: PREFETCH_BLOCKS blocks further along a long row, or the same
   * place in the next row where rows are short (a tensor-parallel piece's rows are often a few
   * thousand elements, less than that distance). */
  const int long_rows = cols >= 2 * PREFETCH_BLOCKS * 64;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; r++) {
    const char *c = job->cur.base + r * job->cur.s0 * es;
    const int64_t e0 = r * cols, m0 = job->marks_at + r * job->cur.s0;
    const int ahead_row = !long_rows && r + 1 < rows;
    const char *c_ahead = ahead_row ? c + job->cur.s0 * es : c + PREFETCH_BLOCKS * 64 * cs;
    const int64_t m_ahead = ahead_row ? m0 + job->cur.s0 : m0 + PREFETCH_BLOCKS * 64;
    /* Blocks i + 64 <= reach have their lines asked for (none in the last short row). */
    const int64_t reach = ms != 1     ? 0
                          : ahead_row ? cols
                          : long_rows ? cols - PREFETCH_BLOCKS * 64
                                      : 0;
    const int stream =
        reach > 0 && marks_reach(job->marks, m0, cols, (cols + DENSE_MARKS - 1) / DENSE_MARKS);
    for (int64_t i = 0; i < cols; i += 64) {
      const int64_t len = RF_MIN(64, cols - i);
      if (i + 64 <= reach)
        prefetch_marked(c_ahead + i * cs,
                        stream ? ~(uint64_t)0 : marks_from(job->marks, m_ahead + i), es);
      uint64_t bits = marks_run(job->marks, m0 + i * ms, ms, len);
      if (!bits) { /* most blocks, where changes are rare: nothing more to do */
        if (mask && store)
          mask[(e0 + i) >> 6] = 0;
        continue;
      }
      int ones = popcount64(bits);
      count += ones;
      if (mask && store)
        mask[(e0 + i) >> 6] = bits;
      else if (mask)
        put_bits(mask, e0 + i, bits);
      capture_bits(cp, c + i * cs, cs, e0 + i, bits, ones, es);
    }
  }
  return count;
}

/* The element size a constant in each copy, as mark_dense_es does, so that copying a value is
 * a move, not a call. */
static int64_t mark_marked(const rf_delta_job *job, uint64_t *mask, capture *cp) {
  switch (job->esize) {
  case 1:
    return mark_marked_es(job, mask, cp, 1);
  case 2:
    return mark_marked_es(job, mask, cp, 2);
  default:
    return mark_marked_es(job, mask, cp, 4);
  }
}

int64_t rf_delta_host_mark(rf_delta_job *job, uint64_t *mask) {
  if (job->n == 0)
    return 0;
  const int es = job->esize;
  const rf_delta_side *p = &job->prev, *c = &job->cur;
  capture cap = {job->values, job->offsets, 0, job->values_cap, rf_delta_mask_words(job->n)};
  capture *cp = mask && job->values ? &cap : NULL;
  int64_t count = 0;
  /* One run, or rows of whole mask words, store every word; the other ways OR into words
   * that several runs share, which must start cleared (mark_marked clears its own). */
  int run = one_run(job), rows = !run && dense_along(job, 1);
  if (mask && !job->marks && !run && !(rows && job->cols % 64 == 0))
    memset(mask, 0, (size_t)(job->n / 64 + 2) * 8);
  if (job->marks) {
    count = mark_marked(job, mask, cp);
  } else if (run) {
    count = mark_dense_es(p->base, c->base, job->n, mask, cp, 0, 1, es, 1);
  } else if (rows) { /* row by row */
    for (int64_t r = 0; r < job->rows; r++)
      count += mark_dense_es(p->base + r * p->s0 * es, c->base + r * c->s0 * es, job->cols, mask,
                             cp, r * job->cols, 1, es, job->cols % 64 == 0);
  } else if (dense_along(job, 0)) {  /* both transposed: column by column, in memory order */
    cap.values = cap.offsets = NULL; /* which is not the values' order */
    for (int64_t j = 0; j < job->cols; j++)
      count += mark_dense_es(p->base + j * p->s1 * es, c->base + j * c->s1 * es, job->rows, mask,
                             NULL, j, job->cols, es, 0);
  } else {
    for (int64_t r = 0; r < job->rows; r++)
      count += mark_strided(job, r, mask, cp);
  }
  job->values = cp ? cap.values : NULL;
  job->offsets = cp ? cap.offsets : NULL;
  return count;
}

/* Follows ascending element numbers through the rows of a side: the address of element e,
 * given that no earlier call asked for a later one (else it starts the walk again). A side that
 * holds the piece as one dense run (`run`) needs no walk. */
typedef struct {
  const rf_delta_side *side;
  int64_t cols, row, row_start;
  int run;
} row_walk;

static row_walk walk_of(const rf_delta_job *job, const rf_delta_side *s) {
  row_walk w = {s, job->cols, 0, 0, 0};
  w.run = (job->cols <= 1 || s->s1 == 1) && (job->rows <= 1 || s->s0 == job->cols);
  return w;
}

static inline __attribute__((always_inline)) char *walk_at(row_walk *w, int64_t e, const int es) {
  if (w->run)
    return w->side->base + e * es;
  if (e < w->row_start)
    w->row = 0, w->row_start = 0;
  if (e - w->row_start >= w->cols) { /* a jump of many rows divides once */
    int64_t skip = (e - w->row_start) / w->cols;
    w->row += skip;
    w->row_start += skip * w->cols;
  }
  return w->side->base + (w->row * w->side->s0 + (e - w->row_start) * w->side->s1) * es;
}

/* The mask's bits 64 at a time from the 32-bit words of a payload (the last one alone). */
static inline uint64_t mask_bits(const char *mask, int64_t words32, int64_t i) {
  uint64_t bits = 0;
  memcpy(&bits, mask + 8 * i, 2 * i + 2 <= words32 ? 8 : 4);
  return bits;
}

static inline __attribute__((always_inline)) void gather(const rf_delta_job *job, char *offsets,
                                                         char *values, const int es) {
  const uint64_t *mask = job->mask;
  row_walk w = walk_of(job, &job->cur);
  int64_t k = 0, words = (job->n + 63) / 64;
  for (int64_t i = 0; i < words; i++)
    for (uint64_t bits = mask[i]; bits; bits &= bits - 1, k++) {
      int64_t e = i * 64 + __builtin_ctzll(bits);
      if (offsets) {
        int32_t off = (int32_t)e;
        memcpy(offsets + 4 * k, &off, 4);
      }
      memcpy(values + k * es, walk_at(&w, e, es), (size_t)es);
    }
}

void rf_delta_host_gather(const rf_delta_job *job, char *mask_out, char *offsets, char *values) {
  if (mask_out)
    memcpy(mask_out, job->mask, (size_t)(4 * rf_delta_mask_words(job->n)));
  if (job->values) { /* the mark copied the values: move them, then write the offsets below */
    if (values != job->values)
      memmove(values, job->values, (size_t)(job->changed * job->esize));
    if (offsets && offsets == job->offsets)
      return;
    const uint64_t *mask = job->mask;
    int64_t k = 0, words = (job->n + 63) / 64;
    for (int64_t i = 0; offsets && i < words; i++)
      for (uint64_t bits = mask[i]; bits; bits &= bits - 1, k++) {
        int32_t off = (int32_t)(i * 64 + __builtin_ctzll(bits));
        memcpy(offsets + 4 * k, &off, 4);
      }
    return;
  }
  switch (job->esize) {
  case 1:
    gather(job, offsets, values, 1);
    break;
  case 2:
    gather(job, offsets, values, 2);
    break;
  default:
    gather(job, offsets, values, 4);
    break;
  }
}

static inline __attribute__((always_inline)) void
scatter_sparse(const rf_delta_job *job, const char *payload, const int es) {
  const char *values = payload + 4 * job->changed;
  row_walk w = walk_of(job, &job->cur);
  for (int64_t k = 0; k < job->changed; k++) {
    int32_t e;
    memcpy(&e, payload + 4 * k, 4);
    if (e >= 0 && e < job->n) /* the hash vouched for the offsets; this only guards memory */
      memcpy(walk_at(&w, e, es), values + k * es, (size_t)es);
  }
}

void rf_delta_host_scatter_sparse(const rf_delta_job *job, const char *payload) {
  switch (job->esize) {
  case 1:
    scatter_sparse(job, payload, 1);
    break;
  case 2:
    scatter_sparse(job, payload, 2);
    break;
  default:
    scatter_sparse(job, payload, 4);
    break;
  }
}

static inline __attribute__((always_inline)) void
scatter_bitmask(const rf_delta_job *job, const char *payload, const int es) {
  const int64_t words32 = rf_delta_mask_words(job->n);
  const char *values = payload + 4 * words32;
  row_walk w = walk_of(job, &job->cur);
  int64_t k = 0;
  for (int64_t i = 0; i < (words32 + 1) / 2; i++)
    for (uint64_t bits = mask_bits(payload, words32, i); bits && k < job->changed;
         bits &= bits - 1, k++) {
      int64_t e = i * 64 + __builtin_ctzll(bits);
      if (e < job->n) /* as above: only a guard */
        memcpy(walk_at(&w, e, es), values + k * es, (size_t)es);
    }
}

void rf_delta_host_scatter_bitmask(const rf_delta_job *job, const char *payload) {
  switch (job->esize) {
  case 1:
    scatter_bitmask(job, payload, 1);
    break;
  case 2:
    scatter_bitmask(job, payload, 2);
    break;
  default:
    scatter_bitmask(job, payload, 4);
    break;
  }
}
