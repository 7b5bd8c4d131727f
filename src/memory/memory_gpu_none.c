/* The GPU side of memory in a build without CUDA: every request for pinned or device memory,
 * or for a GPU, fails with one line that says what to rebuild (RF_ERR_UNSUPPORTED, exit 2),
 * so a --transport nccl run on a host-only build explains itself instead of crashing. */
#include "memory/memory_gpu.h"

#define RF_NO_CUDA "this build has no CUDA; rebuild with the CUDA toolkit and NCCL installed"

static rf_status no_cuda(void) { return rf_fail(RF_ERR_UNSUPPORTED, RF_NO_CUDA); }

rf_status rf_mem_pinned_alloc(size_t bytes, const char *what, void **out) {
  *out = NULL;
  return rf_fail(RF_ERR_UNSUPPORTED, "memory kind 'pinned' (for %s): " RF_NO_CUDA, what);
}

void rf_mem_pinned_free(void *ptr) { (void)ptr; }

rf_status rf_mem_device_alloc(size_t bytes, const char *what, void **out) {
  *out = NULL;
  return rf_fail(RF_ERR_UNSUPPORTED, "memory kind 'device' (for %s): " RF_NO_CUDA, what);
}

void rf_mem_device_free(void *ptr) { (void)ptr; }

rf_status rf_gpu_copy_boxes(const rf_box_copy *copies, int count, int mapped) {
  (void)copies, (void)count, (void)mapped;
  return no_cuda();
}
rf_status rf_gpu_zero(void *ptr, size_t bytes) { return no_cuda(); }
rf_status rf_gpu_transfer(void *dst, const void *src, size_t bytes) { return no_cuda(); }
rf_status rf_gpu_sync(void) { return no_cuda(); }
void *rf_gpu_stream(void) { return NULL; }
void rf_gpu_set_copy_path(int path) { (void)path; }
void rf_gpu_set_copy_join(int on) { (void)on; }
int rf_gpu_sm_count(void) { return 1; }

rf_status rf_gpu_select(int node_rank, int device_override, rf_gpu_info *out) {
  (void)node_rank, (void)device_override;
  if (out) {
    out->count = 0;
    out->device = -1;
    out->bus_id[0] = out->name[0] = '\0';
  }
  return no_cuda();
}

int rf_gpu_built(void) { return 0; }

int rf_gpu_count(void) { return 0; }

void rf_gpu_versions(char *buf, size_t len) {
  if (len)
    buf[0] = '\0';
}

void *rf_gpu_event_record(void *reuse) { return reuse; }
double rf_gpu_event_seconds(void *begin, void *end) { return 0; }
void rf_gpu_event_free(void *event) { (void)event; }
