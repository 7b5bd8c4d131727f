/* fp8_batch: the queue in front of the quantizer's kernels (fp8_cuda.cu). Jobs are turned into
 * the kernels' form, queued per class and launched together the next time anything uses
 * refit's stream (rf_gpu_defer), one launch per class whatever the number of tensors: a MoE's
 * thousands of small expert tensors cost one launch, not one each. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "verify/fp8_cuda.h"

extern "C" {
#include "format/format.h"
#include "memory/memory_gpu.h"
#include "verify/fp8.h"
}

using namespace rf_fp8;

namespace {

/* The queue of jobs not yet launched, per class, and a ring of pinned host and device tables
 * to launch them from (as region_cuda.cu's piece tables): an event per slot says when the
 * kernels that read it are done, and the host waits for it only when it comes round to the
 * slot again. A flush that fails keeps its first error for the next call to report. */
constexpr int kRing = 4, kQueueMax = 1 << 14;
struct slot {
  job_dev *host = nullptr, *dev = nullptr;
  int cap = 0;
  cudaEvent_t done = nullptr;
  bool pending = false;
};
slot ring[kRing];
int ring_next;
job_dev *queue;
int queued, queue_cap;
int64_t queued_units[CLS_COUNT];
rf_status flush_error = RF_OK;

rf_status slot_reserve(slot *sl, int count) {
  if (sl->pending) {
    RF_CUDA(cudaEventSynchronize(sl->done));
    sl->pending = false;
  }
  if (!sl->done)
    RF_CUDA(cudaEventCreateWithFlags(&sl->done, cudaEventDisableTiming));
  if (sl->cap >= count)
    return RF_OK;
  int cap = count > 2 * sl->cap ? count : 2 * sl->cap;
  cap = cap < 64 ? 64 : cap;
  if (sl->host)
    RF_CUDA(cudaFreeHost(sl->host));
  if (sl->dev)
    RF_CUDA(cudaFree(sl->dev));
  sl->host = nullptr, sl->dev = nullptr, sl->cap = 0;
  RF_CUDA(cudaHostAlloc((void **)&sl->host, (size_t)cap * sizeof(job_dev), cudaHostAllocDefault));
  RF_CUDA(cudaMalloc((void **)&sl->dev, (size_t)cap * sizeof(job_dev)));
  sl->cap = cap;
  return RF_OK;
}

/* Launches every queued job: one table upload, then one launch per class present. */
rf_status flush_queue() {
  if (queued == 0)
    return RF_OK;
  const int n = queued;
  queued = 0;
  int64_t units[CLS_COUNT];
  memcpy(units, queued_units, sizeof units);
  memset(queued_units, 0, sizeof queued_units);
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  slot *sl = &ring[ring_next];
  ring_next = (ring_next + 1) % kRing;
  RF_TRY(slot_reserve(sl, n));
  /* Jobs by class, each class's in the order they came, which is the order of their units. */
  int at[CLS_COUNT], first[CLS_COUNT], count[CLS_COUNT] = {0};
  for (int i = 0; i < n; i++)
    count[class_of(queue[i])]++;
  for (int c = 0, k = 0; c < CLS_COUNT; k += count[c], c++)
    at[c] = first[c] = k;
  for (int i = 0; i < n; i++)
    sl->host[at[class_of(queue[i])]++] = queue[i];
  RF_CUDA(
      cudaMemcpyAsync(sl->dev, sl->host, (size_t)n * sizeof(job_dev), cudaMemcpyHostToDevice, s));
  for (int c = 0; c < CLS_COUNT; c++)
    if (count[c])
      RF_TRY(launch(c, sl->dev + first[c], count[c], units[c], s));
  RF_CUDA(cudaEventRecord(sl->done, s));
  sl->pending = true;
  return RF_OK;
}

/* rf_gpu_defer's callback: runs before the next piece of work is queued on refit's stream. */
void flush_deferred() {
  rf_status st = flush_queue();
  if (st != RF_OK && flush_error == RF_OK)
    flush_error = st;
}

/* The error a deferred flush kept, reported once. */
rf_status take_flush_error() {
  rf_status st = flush_error;
  flush_error = RF_OK;
  return st;
}

} // namespace

/* Jobs are queued and launched together (flush_queue) the next time anything uses refit's
 * stream: a MoE's thousands of small expert tensors, or a round's destination-quantized
 * rectangles, take one launch instead of one each, which both saves the launches and fills
 * the GPU with the blocks of many tensors at once. */
extern "C" rf_status rf_fp8_quantize_device(const rf_fp8_job *job) {
  RF_TRY(take_flush_error());
  if (job->rows <= 0 || job->cols <= 0)
    return RF_OK;
  if (job->dtype != RF_DTYPE_BF16 && job->dtype != RF_DTYPE_FP16 && job->dtype != RF_DTYPE_FP32)
    return rf_fail(RF_ERR_INTERNAL, "fp8: the device quantizer reads bf16, fp16 or fp32, not %s",
                   rf_dtype_name(job->dtype));
  if (job->block_cols < 0 || job->block_cols > 32)
    return rf_fail(RF_ERR_INTERNAL,
                   "fp8: the device quantizer takes 1-D blocks of at most 32, "
                   "not %d",
                   job->block_cols);
  /* Jobs written before 4-bit elements leave the element fields 0: e4m3. */
  const int bits = job->elem_bits ? job->elem_bits : 8;
  const float elem_max = job->elem_max > 0 ? job->elem_max : RF_FP8_E4M3_MAX;
  const int emax = job->elem_bits ? job->elem_emax : 8;
  if (bits == 4 && (job->block_cols == 0 || job->block_cols % 2 || job->col0 % 2))
    return rf_fail(RF_ERR_INTERNAL,
                   "fp8: the device quantizer packs 4-bit elements in 1-D blocks of an even "
                   "width from an even column, not %d columns from column %lld",
                   job->block_cols, (long long)job->col0);
  const int edge = job->block_cols ? job->block_cols : kEdge;
  job_dev d;
  memset(&d, 0, sizeof d);
  d.x = (const char *)job->x;
  d.x_stride = job->x_stride;
  d.x_col_stride = job->x_col_stride ? job->x_col_stride : 1;
  d.rows = job->rows, d.cols = job->cols;
  d.q = job->q, d.q_stride = job->q_stride;
  d.scale = job->scale, d.scale_stride = job->scale_stride;
  d.tile_grid_cols = job->block_cols ? job->tile_grid_cols : 0;
  d.tile_row0 = job->tile_row0, d.tile_col0 = job->tile_col0;
  d.grid_cols = (job->cols + edge - 1) / edge;
  d.inv_max = 1.0f / elem_max; /* one correctly rounded division, as format_ref.c's */
  d.global = job->global;
  d.dtype = (int)job->dtype;
  d.rule = job->rule;
  d.block_cols = job->block_cols;
  d.elem_bits = bits;
  d.elem_emax = emax;
  d.tag = job->tag;
  d.row0 = job->row0, d.col0 = job->col0;
  const int cls = class_of(d);
  const int64_t units = units_of(d);
  if (queued_units[cls] + units > INT32_MAX || queued == kQueueMax) {
    RF_TRY(flush_queue());
    if (units > INT32_MAX)
      return rf_fail(RF_ERR_UNSUPPORTED,
                     "fp8: a box of %lld x %lld elements is more blocks than one launch takes; "
                     "use a larger --rollout tp",
                     (long long)job->rows, (long long)job->cols);
  }
  if (queued == queue_cap) {
    int cap = queue_cap ? 2 * queue_cap : 256;
    job_dev *q = (job_dev *)realloc(queue, (size_t)cap * sizeof *q);
    if (!q)
      return RF_ERR_NOMEM;
    queue = q, queue_cap = cap;
  }
  d.unit_begin = queued_units[cls];
  queued_units[cls] += units;
  queue[queued++] = d;
  rf_gpu_defer(flush_deferred);
  return RF_OK;
}

extern "C" rf_status rf_fp8_device_flush(void) {
  RF_TRY(take_flush_error());
  return flush_queue();
}
