/* memory, CUDA half: pinned and device buffers, refit's stream, the device-side zero and
 * transfer, and the choice of this rank's GPU. Built only when the CUDA toolkit
 * is found; the box copy kernel is in region_cuda.cu.
 *
 * Everything is queued on one stream (rf_gpu_stream) and the functions that promise to wait
 * synchronize that stream, not the device, so they never wait for another library's work. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory_gpu.h"

/* Created on first use; `stream_state` is 0 before, 1 once created, -1 when creation failed
 * and the legacy default stream stands in. A blocking stream (cudaStreamCreate) orders itself
 * with the legacy default stream, so a stray cudaMemcpy elsewhere cannot race refit's work. */
static cudaStream_t stream;
static int stream_state;
static int sm_count;
/* The flush of a module's queued launches (rf_gpu_defer), taken before it runs so that the
 * flush's own use of the stream does not run it again. */
static void (*deferred)(void);

void rf_gpu_defer(void (*flush)(void)) { deferred = flush; }

rf_status rf_gpu_scratch_reserve(rf_gpu_scratch *b, size_t bytes) {
  if (b->cap >= bytes)
    return RF_OK;
  if (b->ptr)
    RF_CUDA(cudaFree(b->ptr));
  b->ptr = NULL, b->cap = 0;
  size_t cap = bytes < 4096 ? 4096 : bytes + bytes / 2;
  RF_CUDA(cudaMalloc(&b->ptr, cap));
  b->cap = cap;
  return RF_OK;
}

void *rf_gpu_stream(void) {
  if (stream_state == 0) {
    cudaError_t rc = cudaStreamCreate(&stream);
    if (rc == cudaSuccess) {
      stream_state = 1;
    } else {
      (void)cudaGetLastError();
      RF_WARN("cudaStreamCreate failed (%s); refit's GPU work runs on the default stream",
              cudaGetErrorString(rc));
      stream = NULL;
      stream_state = -1;
    }
  }
  if (deferred) {
    void (*flush)(void) = deferred;
    deferred = NULL;
    flush();
  }
  return stream;
}

int rf_gpu_sm_count(void) {
  if (sm_count <= 0) {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return 1;
    }
    sm_count = n > 0 ? n : 1;
  }
  return sm_count;
}

/* ---- choosing the GPU ------------------------------------------------------------------- */

static rf_status no_gpu(cudaError_t rc) {
  (void)cudaGetLastError();
  return rf_fail(RF_ERR_UNSUPPORTED,
                 "no GPU is visible to this process (CUDA: %s); use --transport mpi",
                 rc == cudaSuccess ? "no CUDA device" : cudaGetErrorString(rc));
}

/* cudaGetDeviceCount creates no context, so a rank can count before it chooses; cudaSetDevice
 * then creates the context on the chosen GPU and nowhere else. */
rf_status rf_gpu_select(int node_rank, int device_override, rf_gpu_info *out) {
  rf_gpu_info info;
  memset(&info, 0, sizeof info);
  info.device = -1;
  if (out)
    *out = info;
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count <= 0)
    return no_gpu(rc);
  info.count = count;
  if (device_override >= count)
    return rf_fail(RF_ERR_USAGE, "--device %d is out of range: this node has %d GPU%s",
                   device_override, count, count == 1 ? "" : "s");
  info.device = device_override >= 0 ? device_override : (node_rank > 0 ? node_rank : 0) % count;
  RF_CUDA(cudaSetDevice(info.device));
  RF_CUDA(cudaDeviceGetPCIBusId(info.bus_id, (int)sizeof info.bus_id, info.device));
  struct cudaDeviceProp prop;
  RF_CUDA(cudaGetDeviceProperties(&prop, info.device));
  snprintf(info.name, sizeof info.name, "%.*s", (int)sizeof info.name - 1, prop.name);
  sm_count = prop.multiProcessorCount;
  if (out)
    *out = info;
  return RF_OK;
}

int rf_gpu_built(void) { return 1; }

int rf_gpu_count(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

/* ---- allocation ------------------------------------------------------------------------- */

/* An allocation that fails for lack of memory is RF_ERR_NOMEM, one for lack of a GPU is the
 * same one line as rf_gpu_select's; anything else is a CUDA error. */
static rf_status alloc_failed(cudaError_t rc, const char *kind, size_t bytes, const char *what) {
  char buf[32];
  rf_format_bytes((int64_t)bytes, buf, sizeof buf);
  if (rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver)
    return no_gpu(rc);
  (void)cudaGetLastError();
  if (rc == cudaErrorMemoryAllocation)
    return rf_fail(RF_ERR_NOMEM, "out of memory allocating %s of %s memory for %s", buf, kind,
                   what);
  return rf_fail(RF_ERR_CUDA, "allocating %s of %s memory for %s failed: %s (CUDA error %d)", buf,
                 kind, what, cudaGetErrorString(rc), (int)rc);
}

/* Zero-byte requests get a small buffer, as on the host, so that NULL always means failure.
 * Both allocators align to at least 256 bytes, beyond the 64 that memory.h promises. */
rf_status rf_mem_pinned_alloc(size_t bytes, const char *what, void **out) {
  *out = NULL;
  cudaError_t rc = cudaHostAlloc(out, bytes ? bytes : 64, cudaHostAllocDefault);
  if (rc != cudaSuccess) {
    *out = NULL;
    return alloc_failed(rc, "pinned", bytes, what);
  }
  return RF_OK;
}

void rf_mem_pinned_free(void *ptr) {
  if (ptr && cudaFreeHost(ptr) != cudaSuccess)
    RF_WARN("cudaFreeHost failed: %s", cudaGetErrorString(cudaGetLastError()));
}

/* Every device allocation is rounded up to a multiple of 2 MiB. On the H200 an arena that is
 * not one is read at 0.78-0.84 of a device copy through another process's cudaIpc mapping,
 * and at full speed once rounded (results/h200/README.md, "Where the two-process ipc time
 * goes"); the waste is under 2 MiB an arena. REFIT_DEVICE_ALLOC_ROUND=N (bytes) sets another
 * granule, 1 for the sizes as asked, to measure the difference (bench/mapping_gpu.sh). */
size_t rf_gpu_alloc_granule(void) {
  const char *env = getenv("REFIT_DEVICE_ALLOC_ROUND");
  unsigned long long n = env && *env ? strtoull(env, NULL, 10) : 0;
  return n >= 1 ? (size_t)n : (size_t)2 << 20;
}

static size_t alloc_round(size_t bytes) {
  size_t n = rf_gpu_alloc_granule();
  return n > 1 && bytes % n ? (bytes / n + 1) * n : bytes;
}

rf_status rf_mem_device_alloc(size_t bytes, const char *what, void **out) {
  *out = NULL;
  cudaError_t rc = cudaMalloc(out, bytes ? alloc_round(bytes) : 64);
  if (rc != cudaSuccess) {
    *out = NULL;
    return alloc_failed(rc, "device", bytes, what);
  }
  return RF_OK;
}

void rf_mem_device_free(void *ptr) {
  if (ptr && cudaFree(ptr) != cudaSuccess)
    RF_WARN("cudaFree failed: %s", cudaGetErrorString(cudaGetLastError()));
}

/* ---- zero, transfer, sync ----------------------------------------------------------------
 * On refit's stream, so that they follow the kernels queued before them; cudaMemcpyDefault
 * lets unified addressing tell host from device, whichever kinds the caller has. */

rf_status rf_gpu_zero(void *ptr, size_t bytes) {
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  RF_CUDA(cudaMemsetAsync(ptr, 0, bytes, s));
  RF_CUDA(cudaStreamSynchronize(s));
  return RF_OK;
}

rf_status rf_gpu_transfer(void *dst, const void *src, size_t bytes) {
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  RF_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  RF_CUDA(cudaStreamSynchronize(s));
  return RF_OK;
}

rf_status rf_gpu_sync(void) {
  RF_CUDA(cudaStreamSynchronize((cudaStream_t)rf_gpu_stream()));
  return RF_OK;
}

void rf_gpu_versions(char *buf, size_t len) {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  snprintf(buf, len, "CUDA runtime %d.%d, driver %d.%d", runtime / 1000, runtime % 1000 / 10,
           driver / 1000, driver % 1000 / 10);
}

/* ---- events for rf_mem_timer ------------------------------------------------------------ */

void *rf_gpu_event_record(void *reuse) {
  cudaEvent_t ev = (cudaEvent_t)reuse;
  if (!ev && cudaEventCreate(&ev) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  if (cudaEventRecord(ev, (cudaStream_t)rf_gpu_stream()) != cudaSuccess) {
    (void)cudaGetLastError();
    cudaEventDestroy(ev);
    return NULL;
  }
  return ev;
}

double rf_gpu_event_seconds(void *begin, void *end) {
  float ms = 0;
  if (!begin || !end || cudaEventSynchronize((cudaEvent_t)end) != cudaSuccess ||
      cudaEventElapsedTime(&ms, (cudaEvent_t)begin, (cudaEvent_t)end) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return 1e-3 * (double)ms;
}

void rf_gpu_event_free(void *event) {
  if (event)
    cudaEventDestroy((cudaEvent_t)event);
}
