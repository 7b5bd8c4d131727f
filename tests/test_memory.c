/* Memory: the allocator's counters, the region constructors, which boxes are contiguous, and
 * box copies between row-major, transposed and fused-slot regions checked element by element
 * against addresses computed independently of rf_region_at. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "memory/memory.h"
#include "test.h"

/* A deterministic generator, so a failure reproduces. */
static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static uint64_t rng_state = 0x243f6a8885a308d3ULL;
static uint64_t rng(void) { return mix(rng_state += 0x9e3779b97f4a7c15ULL); }
/* A number in [lo, hi). */
static int64_t rng_range(int64_t lo, int64_t hi) {
  return lo + (int64_t)(rng() % (uint64_t)(hi - lo));
}

static rf_box box_of(int64_t lo0, int64_t hi0, int64_t lo1, int64_t hi1) {
  rf_box b = {{lo0, lo1}, {hi0, hi1}};
  return b;
}

static void test_alloc(void) {
  ASSERT_STR_EQ(rf_mem_kind_name(RF_MEM_HOST), "host");
  ASSERT_STR_EQ(rf_mem_kind_name(RF_MEM_PINNED), "pinned");
  ASSERT_STR_EQ(rf_mem_kind_name(RF_MEM_DEVICE), "device");

  rf_mem_stats s0 = rf_mem_get_stats();
  void *a, *b;
  ASSERT_OK(rf_mem_alloc(RF_MEM_HOST, 1000, "test buffer a", &a));
  ASSERT_OK(rf_mem_alloc(RF_MEM_HOST, 3000, "test buffer b", &b));
  ASSERT_EQ((uintptr_t)a % 64, 0);
  ASSERT_EQ((uintptr_t)b % 64, 0);
  memset(a, 1, 1000), memset(b, 2, 3000);
  rf_mem_stats s1 = rf_mem_get_stats();
  ASSERT_EQ(s1.current_bytes, s0.current_bytes + 4000);
  ASSERT_GE(s1.peak_bytes, s0.current_bytes + 4000);
  rf_mem_free(RF_MEM_HOST, b, 3000);
  rf_mem_stats s2 = rf_mem_get_stats();
  ASSERT_EQ(s2.current_bytes, s0.current_bytes + 1000);
  ASSERT_EQ(s2.peak_bytes, s1.peak_bytes);
  rf_mem_reset_peak();
  ASSERT_EQ(rf_mem_get_stats().peak_bytes, s0.current_bytes + 1000);
  rf_mem_free(RF_MEM_HOST, a, 1000);
  rf_mem_free(RF_MEM_HOST, NULL, 1234); /* freeing nothing counts nothing */
  ASSERT_EQ(rf_mem_get_stats().current_bytes, s0.current_bytes);

  /* A zero-byte buffer is still a valid, freeable pointer. */
  void *z;
  ASSERT_OK(rf_mem_alloc(RF_MEM_HOST, 0, "empty buffer", &z));
  ASSERT_TRUE(z != NULL);
  rf_mem_free(RF_MEM_HOST, z, 0);

  /* The GPU kinds: unsupported in a host build, a working buffer (or a CUDA error on a
   * machine without a GPU) in a GPU build; either way the counters stay consistent. */
  rf_mem_kind gpu[] = {RF_MEM_PINNED, RF_MEM_DEVICE};
  for (int k = 0; k < 2; k++) {
    void *p = (void *)1;
    rf_status st = rf_mem_alloc(gpu[k], 4096, "gpu test buffer", &p);
    if (st == RF_OK) {
      ASSERT_EQ(rf_mem_get_stats().current_bytes, s0.current_bytes + 4096);
      rf_mem_free(gpu[k], p, 4096);
    } else {
      ASSERT_TRUE(st == RF_ERR_UNSUPPORTED || st == RF_ERR_CUDA);
      ASSERT_TRUE(p == NULL);
    }
    ASSERT_EQ(rf_mem_get_stats().current_bytes, s0.current_bytes);
  }
  ASSERT_GT(rf_mem_peak_rss(), 1 << 20);
}

/* Shared host memory (the shm transport's): another mapping of the same memory file, opened
 * the way a peer process opens it (/proc/PID/fd/FD), sees every byte written through the
 * first, and writes through it land in the first. */
static void test_shared(void) {
  ASSERT_STR_EQ(rf_mem_kind_name(RF_MEM_SHARED), "shared");
  rf_mem_stats s0 = rf_mem_get_stats();
  void *a, *b;
  ASSERT_OK(rf_mem_alloc(RF_MEM_SHARED, 5000, "shared a", &a));
  ASSERT_OK(rf_mem_alloc(RF_MEM_SHARED, 0, "shared empty", &b));
  ASSERT_EQ(rf_mem_get_stats().current_bytes, s0.current_bytes + 5000);
  ASSERT_EQ((uintptr_t)a % 4096, 0);
  for (int i = 0; i < 5000; i++)
    ((unsigned char *)a)[i] = (unsigned char)(i * 7);
  int fd = -1;
  size_t bytes = 0;
  ASSERT_OK(rf_mem_shared_fd(a, &fd, &bytes));
  ASSERT_EQ(bytes, 5000);
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/fd/%d", (long)getpid(), fd);
  int other = open(path, O_RDWR);
  ASSERT_GE(other, 0);
  unsigned char *view = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, other, 0);
  close(other);
  ASSERT_TRUE(view != MAP_FAILED);
  ASSERT_TRUE(view != a);
  for (int i = 0; i < 5000; i++)
    ASSERT_EQ(view[i], (unsigned char)(i * 7));
  view[4999] = 0xab;
  ASSERT_EQ(((unsigned char *)a)[4999], 0xab);
  munmap(view, bytes);
  /* Only buffers it gave out are shared ones. */
  int x;
  ASSERT_EQ(rf_mem_shared_fd(&x, &fd, &bytes), RF_ERR_INTERNAL);
  rf_mem_free(RF_MEM_SHARED, b, 0);
  rf_mem_free(RF_MEM_SHARED, a, 5000);
  ASSERT_EQ(rf_mem_shared_fd(a, &fd, &bytes), RF_ERR_INTERNAL);
  ASSERT_EQ(rf_mem_get_stats().current_bytes, s0.current_bytes);
}

static void test_constructors(void) {
  static char buf[4096];
  rf_box b = box_of(10, 14, 20, 26); /* 4 x 6 */
  rf_region r = rf_region_row_major(buf, &b, 2);
  ASSERT_EQ(r.stride[0], 6);
  ASSERT_EQ(r.stride[1], 1);
  ASSERT_TRUE(rf_region_at(&r, 11, 22) == buf + (6 + 2) * 2);
  rf_region t = rf_region_transposed(buf, &b, 4);
  ASSERT_EQ(t.stride[0], 1);
  ASSERT_EQ(t.stride[1], 4);
  ASSERT_TRUE(rf_region_at(&t, 11, 22) == buf + (2 * 4 + 1) * 4);
  rf_region f = rf_region_in_fused(buf, 30, 3, 7, &b, 2);
  ASSERT_EQ(f.stride[0], 30);
  ASSERT_EQ(f.stride[1], 1);
  ASSERT_TRUE(f.base == buf + (3 * 30 + 7) * 2);
  ASSERT_TRUE(rf_region_at(&f, 11, 22) == buf + ((3 + 1) * 30 + 7 + 2) * 2);
  ASSERT_TRUE(rf_box_equal(&f.box, &b));
}

static void test_contiguous(void) {
  static char buf[1];
  rf_box whole = box_of(0, 8, 0, 5);
  rf_region rm = rf_region_row_major(buf, &whole, 2);
  rf_region tr = rf_region_transposed(buf, &whole, 2);
  rf_region fu = rf_region_in_fused(buf, 12, 0, 3, &whole, 2);
  struct {
    rf_box box;
    int rm, tr, fu;
  } cases[] = {
      {box_of(0, 8, 0, 5), 1, 0, 0}, /* the whole box */
      {box_of(2, 5, 0, 5), 1, 0, 0}, /* full-width rows */
      {box_of(3, 4, 1, 4), 1, 0, 1}, /* part of one row */
      {box_of(2, 5, 1, 5), 0, 0, 0}, /* part of several rows */
      {box_of(1, 7, 2, 3), 0, 1, 0}, /* part of one column */
      {box_of(0, 8, 4, 5), 0, 1, 0}, /* one whole column */
      {box_of(6, 7, 4, 5), 1, 1, 1}, /* one element */
      {box_of(6, 6, 0, 5), 1, 1, 1}, /* empty */
  };
  for (int c = 0; c < (int)RF_ARRAY_LEN(cases); c++) {
    ASSERT_EQ(rf_region_contiguous(&rm, &cases[c].box), cases[c].rm);
    ASSERT_EQ(rf_region_contiguous(&tr, &cases[c].box), cases[c].tr);
    ASSERT_EQ(rf_region_contiguous(&fu, &cases[c].box), cases[c].fu);
  }
  /* A 1-D tensor's box is a column of width 1: contiguous in every region kind. */
  rf_box vec = box_of(0, 100, 0, 1), part = box_of(10, 60, 0, 1);
  rf_region v1 = rf_region_row_major(buf, &vec, 4), v2 = rf_region_transposed(buf, &vec, 4);
  ASSERT_TRUE(rf_region_contiguous(&v1, &part));
  ASSERT_TRUE(rf_region_contiguous(&v2, &part));
}

/* ---- random box copies -------------------------------------------------------------------- */

enum { ROW_MAJOR, TRANSPOSED, FUSED, KIND_COUNT };

/* A region of one kind over box `held`, with its own buffer (larger than the box for a fused
 * slot) and an independent formula for each element's offset. */
typedef struct {
  int kind, esize;
  rf_box held;
  int64_t ld, row, col, elems;
  unsigned char *buf;
  rf_region r;
} test_region;

static void region_make(test_region *t, int kind, const rf_box *held, int esize) {
  int64_t h = held->hi[0] - held->lo[0], w = held->hi[1] - held->lo[1];
  t->kind = kind, t->esize = esize, t->held = *held;
  t->ld = w + (kind == FUSED ? rng_range(1, 9) : 0);
  t->row = kind == FUSED ? rng_range(0, 4) : 0;
  t->col = kind == FUSED ? rng_range(0, t->ld - w + 1) : 0;
  t->elems = kind == FUSED ? (t->row + h + rng_range(0, 3)) * t->ld : h * w;
  t->buf = malloc((size_t)(t->elems * esize) + 1);
  ASSERT_TRUE(t->buf != NULL);
  memset(t->buf, 0xa5, (size_t)(t->elems * esize));
  if (kind == ROW_MAJOR)
    t->r = rf_region_row_major(t->buf, held, esize);
  else if (kind == TRANSPOSED)
    t->r = rf_region_transposed(t->buf, held, esize);
  else
    t->r = rf_region_in_fused(t->buf, t->ld, t->row, t->col, held, esize);
}

static int64_t region_offset(const test_region *t, int64_t i, int64_t j) {
  int64_t a = i - t->held.lo[0], b = j - t->held.lo[1];
  int64_t h = t->held.hi[0] - t->held.lo[0], w = t->held.hi[1] - t->held.lo[1];
  switch (t->kind) {
  case ROW_MAJOR:
    return a * w + b;
  case TRANSPOSED:
    return b * h + a;
  default:
    return (t->row + a) * t->ld + t->col + b;
  }
}

/* Element (i, j) of the reference tensor: distinct bytes for every element and byte. */
static void ref_value(int64_t i, int64_t j, int esize, unsigned char *out) {
  uint64_t v = mix((uint64_t)i << 32 ^ (uint64_t)j);
  for (int k = 0; k < esize; k++)
    out[k] = (unsigned char)(v >> (8 * (k % 8)));
}

static void random_box_in(const rf_box *outer, rf_box *out) {
  for (int d = 0; d < 2; d++) {
    int64_t a = rng_range(outer->lo[d], outer->hi[d]), b = rng_range(outer->lo[d], outer->hi[d]);
    out->lo[d] = RF_MIN(a, b);
    out->hi[d] = RF_MAX(a, b) + 1;
  }
}

static void copy_case(int src_kind, int dst_kind, int esize, int64_t rows, int64_t cols) {
  rf_box whole = box_of(0, rows, 0, cols), a, b, box;
  random_box_in(&whole, &a);
  random_box_in(&whole, &b);
  if (!rf_box_intersect(&a, &b, &box)) /* disjoint: copy into a box that covers a instead */
    b = a, box = a;
  random_box_in(&box, &box);
  test_region src, dst;
  region_make(&src, src_kind, &a, esize);
  region_make(&dst, dst_kind, &b, esize);
  for (int64_t i = a.lo[0]; i < a.hi[0]; i++)
    for (int64_t j = a.lo[1]; j < a.hi[1]; j++)
      ref_value(i, j, esize, src.buf + region_offset(&src, i, j) * esize);

  rf_region_copy(&dst.r, &src.r, &box);

  /* Every element of dst's buffer: the reference inside the copied box, untouched outside. */
  unsigned char *seen = calloc((size_t)dst.elems, 1), want[16];
  for (int64_t i = b.lo[0]; i < b.hi[0]; i++)
    for (int64_t j = b.lo[1]; j < b.hi[1]; j++) {
      int64_t off = region_offset(&dst, i, j);
      seen[off] = 1;
      int inside = i >= box.lo[0] && i < box.hi[0] && j >= box.lo[1] && j < box.hi[1];
      if (inside)
        ref_value(i, j, esize, want);
      else
        memset(want, 0xa5, (size_t)esize);
      if (memcmp(dst.buf + off * esize, want, (size_t)esize) != 0) {
        fprintf(stderr, "copy %d->%d esize %d: element (%" PRId64 ", %" PRId64 ") wrong\n",
                src_kind, dst_kind, esize, i, j);
        abort();
      }
    }
  for (int64_t e = 0; e < dst.elems * esize; e++)
    if (!seen[e / esize])
      ASSERT_EQ(dst.buf[e], 0xa5);
  free(seen), free(src.buf), free(dst.buf);
}

static void test_copy(void) {
  static const int esizes[] = {1, 2, 3, 4, 8};
  for (int s = 0; s < KIND_COUNT; s++)
    for (int d = 0; d < KIND_COUNT; d++)
      for (int e = 0; e < (int)RF_ARRAY_LEN(esizes); e++)
        for (int n = 0; n < 40; n++) {
          /* Small shapes hit the edge cases (one row, one column); larger ones cross several
           * 32 x 32 tiles with ragged edges. */
          int64_t rows = n < 20 ? rng_range(1, 6) : rng_range(1, 150);
          int64_t cols = n < 20 ? rng_range(1, 6) : rng_range(1, 150);
          if (n % 7 == 0)
            cols = 1; /* a 1-D tensor */
          copy_case(s, d, esizes[e], rows, cols);
        }
}

/* rf_box_copies_join. A MoE layer in miniature: E experts' gate and up (R x C bf16 each) stored
 * one after another on the trainer, copied into the rows of a stacked w13 [E * 2R, C]; the
 * joined batch must move the same bytes as the batch as listed, in fewer copies. */
enum { JOIN_E = 4, JOIN_R = 3, JOIN_C = 8 };

static rf_box_copy join_copy(char *dst, int64_t dst_row, char *src, int64_t rows, int64_t cols) {
  rf_box held = box_of(0, rows, 0, cols);
  rf_box_copy c;
  c.src = rf_region_row_major(src, &held, 2);
  c.dst = rf_region_in_fused(dst, cols, dst_row, 0, &held, 2);
  c.box = held;
  return c;
}

/* Runs both batches on the host into two zeroed buffers and checks they agree. */
static void join_same_bytes(const rf_box_copy *listed, int n_listed, const rf_box_copy *joined,
                            int n_joined, char *dst, size_t bytes) {
  char *want = malloc(bytes);
  memset(dst, 0, bytes);
  ASSERT_EQ(rf_copy_boxes(RF_MEM_HOST, listed, n_listed), RF_OK);
  memcpy(want, dst, bytes);
  memset(dst, 0, bytes);
  ASSERT_EQ(rf_copy_boxes(RF_MEM_HOST, joined, n_joined), RF_OK);
  ASSERT_EQ(memcmp(want, dst, bytes), 0);
  free(want);
}

static void test_join(void) {
  const int64_t tensor = JOIN_R * JOIN_C * 2; /* 48 bytes: every run stays 16-byte wide */
  _Alignas(64) static char src[2][JOIN_E * 2 * JOIN_R * JOIN_C * 2];
  _Alignas(64) static char dst[JOIN_E * 2 * JOIN_R * JOIN_C * 2];
  for (size_t i = 0; i < sizeof src; i++)
    ((char *)src)[i] = (char)(i * 7 + 1);
  rf_box_copy listed[2 * JOIN_E], joined[2 * JOIN_E];

  /* One source in storage order: the 8 copies are one run of 384 bytes. */
  for (int k = 0; k < 2 * JOIN_E; k++)
    listed[k] = join_copy(dst, k * JOIN_R, src[0] + k * tensor, JOIN_R, JOIN_C);
  memcpy(joined, listed, sizeof listed);
  ASSERT_EQ(rf_box_copies_join(joined, 2 * JOIN_E), 1);
  ASSERT_EQ(rf_box_numel(&joined[0].box), 2 * JOIN_E * JOIN_R * JOIN_C);
  ASSERT_TRUE(joined[0].src.base == src[0] && joined[0].dst.base == dst);
  join_same_bytes(listed, 2 * JOIN_E, joined, 1, dst, sizeof dst);
  ASSERT_EQ(memcmp(dst, src[0], sizeof dst), 0);

  /* Two sources (ep=2: experts 0-1 on one, 2-3 on the other), listed alternately as a
   * schedule that interleaves its sources does: one run per source. */
  const int half = JOIN_E; /* gate and up of two experts */
  for (int k = 0; k < 2 * JOIN_E; k++) {
    int from = k % 2, at = k / 2 + from * half;
    listed[k] = join_copy(dst, at * JOIN_R, src[from] + (k / 2) * tensor, JOIN_R, JOIN_C);
  }
  memcpy(joined, listed, sizeof listed);
  ASSERT_EQ(rf_box_copies_join(joined, 2 * JOIN_E), 2);
  ASSERT_TRUE(joined[0].src.base == src[0] && joined[1].src.base == src[1]);
  ASSERT_EQ(rf_box_numel(&joined[1].box), half * JOIN_R * JOIN_C);
  join_same_bytes(listed, 2 * JOIN_E, joined, 2, dst, sizeof dst);

  /* What does not join, left as listed: a source that skips a tensor, a column slice (no run),
   * a run listed before the one it continues, and a 6-byte run after a 16-byte-wide one (its
   * bytes would move 2 bytes at a time). */
  rf_box_copy odd[6];
  odd[0] = join_copy(dst, 0, src[0], JOIN_R, JOIN_C);
  odd[1] = join_copy(dst, JOIN_R, src[0] + 2 * tensor, JOIN_R, JOIN_C);
  rf_box full = box_of(0, JOIN_R, 0, JOIN_C), cols = box_of(0, JOIN_R, 0, JOIN_C / 2);
  odd[2].src = rf_region_row_major(src[1], &full, 2);
  odd[2].dst = rf_region_in_fused(dst + 4 * tensor, JOIN_C, 0, 0, &full, 2);
  odd[2].box = cols;
  odd[3] = join_copy(dst + 6 * tensor, 0, src[1] + 5 * tensor, JOIN_R, JOIN_C);
  odd[4] = join_copy(dst + 5 * tensor, 0, src[1] + 4 * tensor, JOIN_R, JOIN_C);
  odd[5] = join_copy(dst + 7 * tensor, 0, src[1] + 6 * tensor, 1, 3);
  rf_box_copy kept[6];
  memcpy(kept, odd, sizeof odd);
  ASSERT_EQ(rf_box_copies_join(kept, 6), 6);
  ASSERT_EQ(memcmp(kept, odd, sizeof odd), 0);

  /* Two 6-byte runs (2-byte accesses) join: 12 bytes from aligned addresses allow 4. */
  rf_box_copy narrow[2] = {join_copy(dst, 0, src[0], 1, 3),
                           join_copy(dst + 6, 0, src[0] + 6, 1, 3)};
  memcpy(kept, narrow, sizeof narrow);
  ASSERT_EQ(rf_box_copies_join(kept, 2), 1);
  ASSERT_EQ(rf_box_numel(&kept[0].box), 6);
  join_same_bytes(narrow, 2, kept, 1, dst, sizeof dst);
}

int main(void) {
  test_alloc();
  test_shared();
  test_constructors();
  test_contiguous();
  test_copy();
  test_join();
  printf("test_memory: ok\n");
  return 0;
}
