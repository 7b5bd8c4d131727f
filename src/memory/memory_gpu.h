/* memory_gpu: the GPU side of the memory module (pinned host and device buffers, device box
 * copies, refit's CUDA stream), kept out of memory.c so that the host build needs no CUDA
 * headers.
 *
 * memory.c dispatches RF_MEM_PINNED allocations and everything on RF_MEM_DEVICE here. A CUDA
 * build links memory_cuda.c (allocation, the stream, device selection) and region_cuda.cu (the
 * box copy kernel); every other build links memory_gpu_none.c, whose functions fail with one
 * line and RF_ERR_UNSUPPORTED. The allocators log their own failure and leave the byte
 * counters to memory.c. */
#ifndef RF_MEMORY_GPU_H
#define RF_MEMORY_GPU_H

#include <stddef.h>

#include "memory/memory.h"

rf_status rf_mem_pinned_alloc(size_t bytes, const char *what, void **out);
void rf_mem_pinned_free(void *ptr);
rf_status rf_mem_device_alloc(size_t bytes, const char *what, void **out);
void rf_mem_device_free(void *ptr);

/* The device halves of rf_copy_boxes, rf_mem_zero, rf_mem_transfer and rf_mem_sync. Work is
 * queued on refit's stream; zero and transfer wait for it, the box copies do not. */
rf_status rf_gpu_copy_boxes(const rf_box_copy *copies, int count, int mapped);
rf_status rf_gpu_zero(void *ptr, size_t bytes);
rf_status rf_gpu_transfer(void *dst, const void *src, size_t bytes);
rf_status rf_gpu_sync(void);

/* rf_mem_set_copy_path's device half: an rf_copy_path, for every later rf_gpu_copy_boxes. */
void rf_gpu_set_copy_path(int path);
/* rf_mem_set_copy_join's device half. */
void rf_gpu_set_copy_join(int on);
/* The multiple every device allocation is rounded up to (2 MiB; REFIT_DEVICE_ALLOC_ROUND). */
size_t rf_gpu_alloc_granule(void);

/* refit's one CUDA stream (a cudaStream_t), created on first use, so only after
 * rf_gpu_select has made this rank's GPU current. Every kernel and copy of the memory and
 * verify modules runs on it. The nccl transport sends on a stream of its own that waits for
 * an event on this one before each operation (a pack before its send), and completes a
 * receive before the engine queues its unpack here. If the stream
 * cannot be created, the failure is logged once and the legacy default stream (NULL) is
 * used: slower to overlap, equally correct. */
void *rf_gpu_stream(void);
/* A module that batches its launches (the quantizer, fp8_cuda.cu) hands its flush here while
 * it holds queued work: the next rf_gpu_stream call runs it first, so everything queued on the
 * stream afterwards, and every wait for it, comes after the batch. The module keeps a failure
 * of the flush and reports it from its own next call. */
void rf_gpu_defer(void (*flush)(void));

/* A device buffer that only grows, for a kernel's scratch (counts, records, maxima): reserve
 * it before each use; it keeps its largest size for the process's life, uncounted by
 * rf_mem_stats, as it is small beside the weights. Growing frees the old one first. */
typedef struct {
  void *ptr;
  size_t cap;
} rf_gpu_scratch;
rf_status rf_gpu_scratch_reserve(rf_gpu_scratch *b, size_t bytes);

/* The device half of rf_mem_timer: events recorded on refit's stream. Recording that fails
 * leaves the event NULL, and the span then counts as zero. */
void *rf_gpu_event_record(void *reuse);
double rf_gpu_event_seconds(void *begin, void *end);
void rf_gpu_event_free(void *event);

/* Multiprocessors of the current GPU, for sizing grids (1 if it cannot be read). */
int rf_gpu_sm_count(void);

#endif
