/* memory: where buffers live and how boxes move between them.
 *
 * A region is a buffer that holds one box of one logical tensor, with element strides per
 * logical dimension: a trainer shard in HF order has strides {cols, 1}, one stored the JAX way
 * (transposed) {1, rows}, a slot inside a fused rollout tensor {ld, 1} with ld the fused
 * tensor's width. Packing and unpacking are box copies between regions; a staging buffer is a
 * region whose box is the piece's, in row-major order. */
#ifndef RF_MEMORY_H
#define RF_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "core/box.h"
#include "core/core.h"

typedef enum {
  RF_MEM_HOST = 0, /* pageable host memory */
  RF_MEM_PINNED,   /* page-locked host memory (GPU builds) */
  RF_MEM_DEVICE,   /* GPU memory (GPU builds) */
  RF_MEM_SHARED    /* host memory other processes of the node can map (the shm transport) */
} rf_mem_kind;
const char *rf_mem_kind_name(rf_mem_kind kind);

/* --memory: where the user wants the weights; auto leaves it to the transport and the machine
 * (the driver turns it into an rf_mem_kind). */
#define RF_MEM_REQUEST_LIST(X)                                                                     \
  X(RF_MEM_REQUEST_AUTO, "auto")                                                                   \
  X(RF_MEM_REQUEST_HOST, "host")                                                                   \
  X(RF_MEM_REQUEST_DEVICE, "device")
typedef enum { RF_MEM_REQUEST_LIST(RF_ENUM_ID) RF_MEM_REQUEST_COUNT } rf_mem_request;
RF_ENUM_DECLARE(rf_mem_request);

/* --copy: what moves a device box copy. auto (the default) chooses per piece, as an H200
 * measured (results/h200/README.md, "Copy engines"): the copy engines (cudaMemcpyAsync spread
 * over several streams, so that their per-copy ramps overlap) for a dense run of at least
 * RF_COPY_ENGINE_MIN bytes, in this process's memory or through another process's mapping
 * (device allocations are rounded up to 2 MiB, without which reads through a mapping lose on
 * the engines: rf_copy_boxes_mapped), kernels for strided and transposed boxes. kernel always
 * takes refit's kernels; engine moves every run and 2-D strided box (cudaMemcpy2DAsync) on the
 * engines and leaves only transposes to kernels. Host copies ignore it. */
#define RF_COPY_PATH_LIST(X)                                                                       \
  X(RF_COPY_AUTO, "auto")                                                                          \
  X(RF_COPY_KERNEL, "kernel")                                                                      \
  X(RF_COPY_ENGINE, "engine")
typedef enum { RF_COPY_PATH_LIST(RF_ENUM_ID) RF_COPY_PATH_COUNT } rf_copy_path;
RF_ENUM_DECLARE(rf_copy_path);
#define RF_COPY_ENGINE_MIN ((int64_t)256 << 10)
void rf_mem_set_copy_path(rf_copy_path path);
/* Whether the device copies join runs that continue each other (rf_box_copies_join; on by
 * default). Refit's own buffers are arenas, where adjacent addresses are one allocation; a
 * library caller's tensors are allocations of their own that may lie side by side, and a
 * copy engine refuses one run across two allocations, so a job that registered device
 * memory turns joining off for its transfers. */
void rf_mem_set_copy_join(int on);

/* Allocates `bytes` of the given kind, 64-byte aligned, and counts them towards this rank's
 * staging or data total (see rf_mem_stats). `what` names the buffer in error messages. */
rf_status rf_mem_alloc(rf_mem_kind kind, size_t bytes, const char *what, void **out);
void rf_mem_free(rf_mem_kind kind, void *ptr, size_t bytes);

typedef struct {
  int64_t current_bytes; /* allocated through rf_mem_alloc and not yet freed */
  int64_t peak_bytes;
} rf_mem_stats;
rf_mem_stats rf_mem_get_stats(void);
/* Counts `bytes` allocated (negative: released) outside rf_mem_alloc, by a transport that
 * allocates the arenas (transport.h, alloc_arenas), in the same totals. */
void rf_mem_account(int64_t bytes);

/* The file descriptor behind a buffer rf_mem_alloc gave out as RF_MEM_SHARED (an anonymous
 * memory file), and its size: another process of the node opens it as /proc/PID/fd/FD and
 * maps the same pages. `ptr` must be the start of such a buffer. */
rf_status rf_mem_shared_fd(const void *ptr, int *fd, size_t *bytes);
void rf_mem_reset_peak(void);
/* Peak resident set size of this process in bytes (getrusage). */
int64_t rf_mem_peak_rss(void);

typedef struct {
  char *base;        /* address of element box.lo */
  rf_box box;        /* the logical box this buffer holds */
  int64_t stride[2]; /* element strides of logical dims 0 and 1 */
  int esize;         /* bytes per element */
} rf_region;

/* Regions of the usual shapes. */
rf_region rf_region_row_major(void *base, const rf_box *box, int esize);
rf_region rf_region_transposed(void *base, const rf_box *box, int esize);
/* The slot of a logical tensor inside a fused rollout tensor of width `ld` elements:
 * `held` lands at (row, col) of the fused tensor that starts at `fused`. */
rf_region rf_region_in_fused(void *fused, int64_t ld, int64_t row, int64_t col, const rf_box *held,
                             int esize);

/* The address of logical element (i, j); the caller guarantees it is inside region->box. */
static inline char *rf_region_at(const rf_region *r, int64_t i, int64_t j) {
  return r->base + ((i - r->box.lo[0]) * r->stride[0] + (j - r->box.lo[1]) * r->stride[1]) *
                       (int64_t)r->esize;
}

/* Whether `box` (inside region) is one contiguous run of bytes in row-major order, so that it
 * can be sent or received in place without packing. */
int rf_region_contiguous(const rf_region *r, const rf_box *box);

/* Copies `box` (inside both regions) from src to dst, host memory. Rows that are contiguous
 * on both sides move with memcpy; anything else element by element. */
void rf_region_copy(const rf_region *dst, const rf_region *src, const rf_box *box);

/* ---- one interface over every kind ------------------------------------------------------
 * The engine moves boxes the same way whatever memory holds them. Host and pinned memory run
 * the CPU code above; device memory runs CUDA kernels on refit's stream, asynchronously
 * (rf_mem_sync waits for them). */

typedef struct {
  rf_region dst, src;
  rf_box box; /* inside both regions */
} rf_box_copy;

/* Runs `count` box copies between regions that both live in `kind` memory: on the host one
 * after the other; on the device as one kernel launch for the whole batch (16-byte accesses
 * where alignment allows), so packing a bucket costs one launch, not one per piece, or on
 * the copy engines as --copy says. */
rf_status rf_copy_boxes(rf_mem_kind kind, const rf_box_copy *copies, int count);

/* The same for copies that read or write another process's memory mapped into this one (the
 * ipc transport): under --copy auto they take the engines like the others, unless
 * REFIT_DEVICE_ALLOC_ROUND turned off the 2 MiB rounding of device allocations; then kernels,
 * which an H200 measured faster through a mapping of an allocation of another size
 * (results/h200/README.md, "The cause: the size of the exported allocation"). */
rf_status rf_copy_boxes_mapped(rf_mem_kind kind, const rf_box_copy *copies, int count);

/* Joins, in place, the copies of a batch that are each one dense run of bytes on both sides
 * and continue an earlier one on both sides (region_join.c), so that a batch of thousands of
 * adjacent tensors (a MoE layer's experts) costs a few copies; returns the new count. Every
 * byte moves as before, through an access no narrower. The device copies call it. */
int rf_box_copies_join(rf_box_copy *copies, int count);

/* Sets `bytes` of `kind` memory to zero. */
rf_status rf_mem_zero(rf_mem_kind kind, void *ptr, size_t bytes);

/* Copies bytes between any two kinds (host<->device, device<->device), waiting for the copy. */
rf_status rf_mem_transfer(void *dst, rf_mem_kind dst_kind, const void *src, rf_mem_kind src_kind,
                          size_t bytes);

/* Waits until the work queued on `kind` memory is done (a no-op on the host). */
rf_status rf_mem_sync(rf_mem_kind kind);

/* Time spent in box copies, for the pack and unpack phases. On the host a span is wall-clock
 * time; on the device copies are asynchronous, so a span is a pair of CUDA events around the
 * kernels on refit's stream and its length is read once the work is done. The events are
 * kept and reused by the next round. */
typedef struct {
  rf_mem_kind kind;
  double host_seconds; /* host kinds: the sum of the spans so far */
  struct rf_mem_span {
    void *begin, *end;
  } * events; /* device: CUDA events per span */
  int spans, capacity;
  double span_start;
} rf_mem_timer;

void rf_mem_timer_begin(rf_mem_timer *t);
void rf_mem_timer_end(rf_mem_timer *t);
/* The sum of the spans since the last call, then starts a new round. On the device it waits
 * for the last span's end. */
double rf_mem_timer_take(rf_mem_timer *t);
void rf_mem_timer_free(rf_mem_timer *t);

/* The GPU this rank uses. */
typedef struct {
  int count;       /* GPUs visible to this process */
  int device;      /* the CUDA device index chosen */
  char bus_id[32]; /* PCI bus id, e.g. "0000:1b:00.0" */
  char name[96];
} rf_gpu_info;

/* Chooses this rank's GPU: `device_override` when >= 0, else node_rank % count, and makes it
 * current (before any other CUDA call creates a context). No GPU, or an override out of
 * range, gives one line and RF_ERR_UNSUPPORTED / RF_ERR_USAGE. Host-only builds always fail
 * with "this build has no CUDA". */
rf_status rf_gpu_select(int node_rank, int device_override, rf_gpu_info *out);

/* "CUDA runtime 13.0, driver 13.0" in CUDA builds (asking the driver creates no context),
 * "" otherwise. */
void rf_gpu_versions(char *buf, size_t len);

/* Whether this build was compiled with CUDA (the GPU tests skip when it was not). */
int rf_gpu_built(void);

/* GPUs visible to this process (0 without CUDA, a driver or a device). Counting creates no
 * context, so it may come before rf_gpu_select. */
int rf_gpu_count(void);

#endif
