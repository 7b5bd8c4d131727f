/* memory: the allocator with its byte counters, and box copies between regions.
 *
 * Every buffer a transfer uses goes through rf_mem_alloc, so the report can say how much
 * staging memory a plan needed. The kinds of memory are a table of allocate/free pairs; the
 * GPU kinds come from memory_gpu.h, implemented by memory_cuda.c or memory_gpu_none.c. Box
 * copies, zeroing and transfers on device memory go there too (region_cuda.cu has the copy
 * kernel); on host and pinned memory they run here. */
#define _GNU_SOURCE /* memfd_create */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "memory/memory.h"
#include "memory/memory_gpu.h"
#include "memory/region_walk.h"

/* ---- allocation ------------------------------------------------------------------------- */

/* Buffers of a few MiB and more are aligned to 2 MiB and offered transparent huge pages: a
 * transposing copy touches a new 4 KiB page every few elements, and with huge pages those
 * accesses stop missing the TLB. Where the kernel declines, the buffer works as before. */
#define RF_HUGE_PAGE ((size_t)2 << 20)

static rf_status host_alloc(size_t bytes, const char *what, void **out) {
  int huge = bytes >= 2 * RF_HUGE_PAGE;
  /* posix_memalign may return NULL for 0 bytes, which callers would take for a failure. */
  void *p = NULL;
  if (posix_memalign(&p, huge ? RF_HUGE_PAGE : 64, bytes ? bytes : 64) != 0) {
    char buf[32];
    *out = NULL;
    return rf_fail(RF_ERR_NOMEM, "out of memory allocating %s of host memory for %s",
                   rf_format_bytes((int64_t)bytes, buf, sizeof buf), what);
  }
#ifdef MADV_HUGEPAGE
  if (huge)
    (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
  *out = p;
  return RF_OK;
}

static void host_free(void *ptr) { free(ptr); }

/* Shared host memory is an anonymous memory file (memfd), mapped MAP_SHARED: the shm
 * transport hands its descriptor to the other ranks of the node, which map the same pages
 * (transport_shm.c). Unlike a name under /dev/shm it needs no unique name, leaves nothing
 * behind when a job dies, and is not bounded by the small /dev/shm of containers. The
 * descriptors of the buffers given out are kept here, a handful per rank. */
typedef struct {
  void *ptr;
  size_t bytes;
  int fd;
} shared_buffer;

static shared_buffer *shared_buffers;
static int shared_count, shared_cap;

static rf_status shared_alloc(size_t bytes, const char *what, void **out) {
  char buf[32];
  size_t size = bytes ? bytes : 64;
  *out = NULL;
  int fd = memfd_create("refit", MFD_CLOEXEC);
  if (fd < 0)
    return rf_fail(RF_ERR_NOMEM, "cannot create shared memory for %s: memfd_create: %s", what,
                   strerror(errno));
  void *p = MAP_FAILED;
  if (ftruncate(fd, (off_t)size) == 0)
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED || rf_grow((void **)&shared_buffers, shared_count, &shared_cap,
                                 sizeof *shared_buffers, "shared memory list") != RF_OK) {
    int err = errno;
    if (p != MAP_FAILED)
      munmap(p, size);
    close(fd);
    return rf_fail(RF_ERR_NOMEM, "out of memory allocating %s of shared host memory for %s: %s",
                   rf_format_bytes((int64_t)bytes, buf, sizeof buf), what, strerror(err));
  }
  shared_buffers[shared_count++] = (shared_buffer){p, size, fd};
  *out = p;
  return RF_OK;
}

static void shared_free(void *ptr) {
  for (int i = 0; i < shared_count; i++)
    if (shared_buffers[i].ptr == ptr) {
      munmap(ptr, shared_buffers[i].bytes);
      close(shared_buffers[i].fd);
      shared_buffers[i] = shared_buffers[--shared_count];
      break;
    }
  if (shared_count == 0) {
    free(shared_buffers);
    shared_buffers = NULL;
    shared_cap = 0;
  }
}

rf_status rf_mem_shared_fd(const void *ptr, int *fd, size_t *bytes) {
  for (int i = 0; i < shared_count; i++)
    if (shared_buffers[i].ptr == ptr) {
      *fd = shared_buffers[i].fd;
      *bytes = shared_buffers[i].bytes;
      return RF_OK;
    }
  return rf_fail(RF_ERR_INTERNAL, "memory: %p is not a shared buffer", ptr);
}

static const struct {
  const char *name;
  rf_status (*alloc)(size_t bytes, const char *what, void **out);
  void (*release)(void *ptr);
} mem_kinds[] = {
    [RF_MEM_HOST] = {"host", host_alloc, host_free},
    [RF_MEM_PINNED] = {"pinned", rf_mem_pinned_alloc, rf_mem_pinned_free},
    [RF_MEM_DEVICE] = {"device", rf_mem_device_alloc, rf_mem_device_free},
    [RF_MEM_SHARED] = {"shared", shared_alloc, shared_free},
};

static int kind_valid(rf_mem_kind kind) {
  return (int)kind >= 0 && (int)kind < (int)RF_ARRAY_LEN(mem_kinds);
}

/* The counters are per process and not atomic: a rank allocates from one thread. */
static rf_mem_stats mem_stats;

RF_ENUM_DEFINE(rf_mem_request, "memory", RF_MEM_REQUEST_LIST, RF_MEM_REQUEST_COUNT)
RF_ENUM_DEFINE(rf_copy_path, "copy", RF_COPY_PATH_LIST, RF_COPY_PATH_COUNT)

void rf_mem_set_copy_path(rf_copy_path path) { rf_gpu_set_copy_path((int)path); }
void rf_mem_set_copy_join(int on) { rf_gpu_set_copy_join(on); }

const char *rf_mem_kind_name(rf_mem_kind kind) {
  return kind_valid(kind) ? mem_kinds[kind].name : "unknown";
}

rf_status rf_mem_alloc(rf_mem_kind kind, size_t bytes, const char *what, void **out) {
  *out = NULL;
  if (!kind_valid(kind))
    return rf_fail(RF_ERR_INTERNAL, "unknown memory kind %d for %s", (int)kind, what);
  RF_TRY(mem_kinds[kind].alloc(bytes, what, out));
  rf_mem_account((int64_t)bytes);
  return RF_OK;
}

void rf_mem_free(rf_mem_kind kind, void *ptr, size_t bytes) {
  if (!ptr || !kind_valid(kind))
    return;
  mem_kinds[kind].release(ptr);
  rf_mem_account(-(int64_t)bytes);
}

rf_mem_stats rf_mem_get_stats(void) { return mem_stats; }

void rf_mem_account(int64_t bytes) {
  mem_stats.current_bytes += bytes;
  if (mem_stats.current_bytes > mem_stats.peak_bytes)
    mem_stats.peak_bytes = mem_stats.current_bytes;
}

void rf_mem_reset_peak(void) { mem_stats.peak_bytes = mem_stats.current_bytes; }

int64_t rf_mem_peak_rss(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0)
    return 0;
  return (int64_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}

/* ---- regions ---------------------------------------------------------------------------- */

rf_region rf_region_row_major(void *base, const rf_box *box, int esize) {
  rf_region r = {base, *box, {box->hi[1] - box->lo[1], 1}, esize};
  return r;
}

rf_region rf_region_transposed(void *base, const rf_box *box, int esize) {
  rf_region r = {base, *box, {1, box->hi[0] - box->lo[0]}, esize};
  return r;
}

rf_region rf_region_in_fused(void *fused, int64_t ld, int64_t row, int64_t col, const rf_box *held,
                             int esize) {
  /* The cost functions and refit simulate pass no buffer (NULL): an offset from a null pointer
   * is undefined, so the address is computed as an integer (UBSan in `make fuzz` saw it). */
  uintptr_t at = (uintptr_t)fused + (uintptr_t)((row * ld + col) * esize);
  rf_region r = {(void *)at, *held, {ld, 1}, esize};
  return r;
}

/* Walking an h x w box row by row visits consecutive elements exactly when each step within a
 * row moves by one element (or there is no such step, w == 1) and the step from the end of a
 * row to the start of the next moves by one too: stride[0] == (w - 1) * stride[1] + 1, which
 * is w in both cases. So a single column of a transposed region is contiguous, a single row
 * of it is not. */
int rf_region_contiguous(const rf_region *r, const rf_box *box) {
  int64_t h = box->hi[0] - box->lo[0], w = box->hi[1] - box->lo[1];
  if (h <= 0 || w <= 0)
    return 1;
  return (w == 1 || r->stride[1] == 1) && (h == 1 || r->stride[0] == w);
}

/* ---- box copies ------------------------------------------------------------------------- */

/* A box copy as n_out lines of n_in elements (region_walk.h). */
typedef rf_copy_walk copy_walk;

/* Tiles of 32 x 32 elements: when one side is transposed, the strided side touches one cache
 * line per inner step, and a tile reuses those lines for the next 31 outer steps instead of
 * streaming a whole column of lines out of cache and back. */
#define RF_COPY_TILE 32

/* With a constant esize the compiler turns each memcpy into one load and one store; the
 * callers below instantiate it for the sizes that occur. */
static inline __attribute__((always_inline)) void copy_tiled(char *dst, const char *src,
                                                             const copy_walk *w, int es) {
  for (int64_t o0 = 0; o0 < w->n_out; o0 += RF_COPY_TILE) {
    int64_t o1 = RF_MIN(o0 + RF_COPY_TILE, w->n_out);
    for (int64_t i0 = 0; i0 < w->n_in; i0 += RF_COPY_TILE) {
      int64_t i1 = RF_MIN(i0 + RF_COPY_TILE, w->n_in);
      for (int64_t o = o0; o < o1; o++) {
        char *d = dst + o * w->d_out * es;
        const char *s = src + o * w->s_out * es;
        for (int64_t i = i0; i < i1; i++)
          memcpy(d + i * w->d_in * es, s + i * w->s_in * es, (size_t)es);
      }
    }
  }
}

static void copy_tiled_es(char *d, const char *s, const copy_walk *w, int es) {
  switch (es) {
  case 2:
    copy_tiled(d, s, w, 2);
    break;
  case 4:
    copy_tiled(d, s, w, 4);
    break;
  case 8:
    copy_tiled(d, s, w, 8);
    break;
  default: /* any other size, element by element */
    for (int64_t o = 0; o < w->n_out; o++)
      for (int64_t i = 0; i < w->n_in; i++)
        memcpy(d + (o * w->d_out + i * w->d_in) * es, s + (o * w->s_out + i * w->s_in) * es,
               (size_t)es);
    break;
  }
}

#if defined(__SSE2__)
#include <emmintrin.h>

/* A true transpose (dst dense along lines, src dense across them) moves 8 x 8 blocks of
 * 16-bit or 4 x 4 blocks of 32-bit elements through SSE2 registers: whole vectors are loaded
 * from src lines and stored to dst lines, instead of one element at a time. This is what
 * packing a --trainer-order jax shard costs, so it is worth the 40 lines. */
static inline void transpose_8x8_16(char *d, int64_t ds, const char *s, int64_t ss) {
  __m128i r[8], a[8], b[8];
  for (int k = 0; k < 8; k++)
    r[k] = _mm_loadu_si128((const __m128i *)(s + k * ss));
  for (int k = 0; k < 4; k++) {
    a[2 * k] = _mm_unpacklo_epi16(r[2 * k], r[2 * k + 1]);
    a[2 * k + 1] = _mm_unpackhi_epi16(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 2; k++) {
    b[4 * k] = _mm_unpacklo_epi32(a[4 * k], a[4 * k + 2]);
    b[4 * k + 1] = _mm_unpackhi_epi32(a[4 * k], a[4 * k + 2]);
    b[4 * k + 2] = _mm_unpacklo_epi32(a[4 * k + 1], a[4 * k + 3]);
    b[4 * k + 3] = _mm_unpackhi_epi32(a[4 * k + 1], a[4 * k + 3]);
  }
  for (int k = 0; k < 4; k++) {
    _mm_storeu_si128((__m128i *)(d + (2 * k) * ds), _mm_unpacklo_epi64(b[k], b[k + 4]));
    _mm_storeu_si128((__m128i *)(d + (2 * k + 1) * ds), _mm_unpackhi_epi64(b[k], b[k + 4]));
  }
}

static inline void transpose_4x4_32(char *d, int64_t ds, const char *s, int64_t ss) {
  __m128i r0 = _mm_loadu_si128((const __m128i *)s);
  __m128i r1 = _mm_loadu_si128((const __m128i *)(s + ss));
  __m128i r2 = _mm_loadu_si128((const __m128i *)(s + 2 * ss));
  __m128i r3 = _mm_loadu_si128((const __m128i *)(s + 3 * ss));
  __m128i a0 = _mm_unpacklo_epi32(r0, r1), a1 = _mm_unpackhi_epi32(r0, r1);
  __m128i a2 = _mm_unpacklo_epi32(r2, r3), a3 = _mm_unpackhi_epi32(r2, r3);
  _mm_storeu_si128((__m128i *)d, _mm_unpacklo_epi64(a0, a2));
  _mm_storeu_si128((__m128i *)(d + ds), _mm_unpackhi_epi64(a0, a2));
  _mm_storeu_si128((__m128i *)(d + 2 * ds), _mm_unpacklo_epi64(a1, a3));
  _mm_storeu_si128((__m128i *)(d + 3 * ds), _mm_unpackhi_epi64(a1, a3));
}

/* Blocks of b x b within 32 x 32 tiles; the ragged edges go through copy_tiled_es. Requires
 * w->d_in == 1 and w->s_out == 1. */
static void copy_transpose(char *dst, const char *src, const copy_walk *w, int es) {
  int b = es == 2 ? 8 : 4;
  int64_t no = w->n_out / b * b, ni = w->n_in / b * b;
  int64_t ds = w->d_out * es, ss = w->s_in * es; /* byte strides of dst and src lines */
  for (int64_t o0 = 0; o0 < no; o0 += RF_COPY_TILE)
    for (int64_t i0 = 0; i0 < ni; i0 += RF_COPY_TILE)
      for (int64_t i = i0; i < RF_MIN(i0 + RF_COPY_TILE, ni); i += b)
        for (int64_t o = o0; o < RF_MIN(o0 + RF_COPY_TILE, no); o += b) {
          char *d = dst + o * ds + i * es;
          const char *s = src + i * ss + o * es;
          if (es == 2)
            transpose_8x8_16(d, ds, s, ss);
          else
            transpose_4x4_32(d, ds, s, ss);
        }
  copy_walk right = *w, bottom = *w; /* the last n_in - ni columns, then the last rows */
  right.n_out = no, right.n_in = w->n_in - ni;
  copy_tiled_es(dst + ni * es, src + ni * ss, &right, es);
  bottom.n_out = w->n_out - no;
  copy_tiled_es(dst + no * ds, src + no * es, &bottom, es);
}
#endif

void rf_region_copy(const rf_region *dst, const rf_region *src, const rf_box *box) {
  copy_walk cw = rf_copy_walk_of(dst, src, box);
  if (cw.n_out == 0)
    return;
  int es = src->esize;
  char *d = cw.dst;
  const char *s = cw.src;

  if (cw.d_in == 1 && cw.s_in == 1) {
    size_t line = (size_t)(cw.n_in * es);
    /* Both sides dense over the whole box: one memcpy. */
    if (cw.n_out == 1 || (cw.d_out == cw.n_in && cw.s_out == cw.n_in)) {
      memcpy(d, s, line * (size_t)cw.n_out);
      return;
    }
    for (int64_t o = 0; o < cw.n_out; o++)
      memcpy(d + o * cw.d_out * es, s + o * cw.s_out * es, line);
    return;
  }
#if defined(__SSE2__)
  if (cw.d_in == 1 && cw.s_out == 1 && (es == 2 || es == 4)) {
    copy_transpose(d, s, &cw, es);
    return;
  }
#endif
  copy_tiled_es(d, s, &cw, es);
}

/* ---- one interface over every kind -------------------------------------------------------
 * Host and pinned memory are both ordinary CPU memory to this code; device memory goes to
 * memory_gpu.h, which a build without CUDA implements as one-line failures. */

static int kind_is_host(rf_mem_kind kind) {
  return kind == RF_MEM_HOST || kind == RF_MEM_PINNED || kind == RF_MEM_SHARED;
}

static rf_status copy_boxes(rf_mem_kind kind, const rf_box_copy *copies, int count, int mapped) {
  if (!kind_valid(kind))
    return rf_fail(RF_ERR_INTERNAL, "unknown memory kind %d for a box copy", (int)kind);
  if (kind == RF_MEM_DEVICE)
    return rf_gpu_copy_boxes(copies, count, mapped);
  for (int i = 0; i < count; i++)
    rf_region_copy(&copies[i].dst, &copies[i].src, &copies[i].box);
  return RF_OK;
}

rf_status rf_copy_boxes(rf_mem_kind kind, const rf_box_copy *copies, int count) {
  return copy_boxes(kind, copies, count, 0);
}

rf_status rf_copy_boxes_mapped(rf_mem_kind kind, const rf_box_copy *copies, int count) {
  return copy_boxes(kind, copies, count, 1);
}

rf_status rf_mem_zero(rf_mem_kind kind, void *ptr, size_t bytes) {
  if (!kind_valid(kind))
    return rf_fail(RF_ERR_INTERNAL, "unknown memory kind %d to zero", (int)kind);
  if (bytes == 0)
    return RF_OK;
  if (kind == RF_MEM_DEVICE)
    return rf_gpu_zero(ptr, bytes);
  memset(ptr, 0, bytes);
  return RF_OK;
}

rf_status rf_mem_transfer(void *dst, rf_mem_kind dst_kind, const void *src, rf_mem_kind src_kind,
                          size_t bytes) {
  if (!kind_valid(dst_kind) || !kind_valid(src_kind))
    return rf_fail(RF_ERR_INTERNAL, "unknown memory kind %d or %d for a transfer", (int)dst_kind,
                   (int)src_kind);
  if (bytes == 0)
    return RF_OK;
  if (kind_is_host(dst_kind) && kind_is_host(src_kind)) {
    memcpy(dst, src, bytes);
    return RF_OK;
  }
  return rf_gpu_transfer(dst, src, bytes);
}

rf_status rf_mem_sync(rf_mem_kind kind) {
  if (!kind_valid(kind))
    return rf_fail(RF_ERR_INTERNAL, "unknown memory kind %d to wait for", (int)kind);
  return kind == RF_MEM_DEVICE ? rf_gpu_sync() : RF_OK;
}

/* ---- timing box copies ------------------------------------------------------------------ */

void rf_mem_timer_begin(rf_mem_timer *t) {
  t->span_start = rf_now();
  if (t->kind != RF_MEM_DEVICE)
    return;
  int had = t->capacity;
  if (rf_grow((void **)&t->events, t->spans, &t->capacity, sizeof *t->events,
              "copy timing events") != RF_OK)
    return; /* the span is lost from the figure, not the copy from the transfer */
  memset(t->events + had, 0, (size_t)(t->capacity - had) * sizeof *t->events);
  t->events[t->spans].begin = rf_gpu_event_record(t->events[t->spans].begin);
}

void rf_mem_timer_end(rf_mem_timer *t) {
  if (t->kind != RF_MEM_DEVICE) {
    t->host_seconds += rf_now() - t->span_start;
    return;
  }
  if (t->spans >= t->capacity)
    return;
  t->events[t->spans].end = rf_gpu_event_record(t->events[t->spans].end);
  t->spans++;
}

double rf_mem_timer_take(rf_mem_timer *t) {
  double sum = t->host_seconds;
  for (int i = 0; i < t->spans; i++)
    sum += rf_gpu_event_seconds(t->events[i].begin, t->events[i].end);
  t->host_seconds = 0;
  t->spans = 0;
  return sum;
}

void rf_mem_timer_free(rf_mem_timer *t) {
  for (int i = 0; i < t->capacity; i++) {
    rf_gpu_event_free(t->events[i].begin);
    rf_gpu_event_free(t->events[i].end);
  }
  free(t->events);
  t->events = NULL;
  t->spans = t->capacity = 0;
}
