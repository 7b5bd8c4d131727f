/* The GPU kinds of memory in a build without CUDA: asking for them is a usage error that names
 * the kind, so a --memory device run on a host-only build says what to rebuild. */
#include "memory/memory_gpu.h"

rf_status rf_mem_pinned_alloc(size_t bytes, const char *what, void **out) {
  *out = NULL;
  return rf_fail(RF_ERR_UNSUPPORTED, "memory kind 'pinned' needs a GPU build (for %s)", what);
}

void rf_mem_pinned_free(void *ptr) { (void)ptr; }

rf_status rf_mem_device_alloc(size_t bytes, const char *what, void **out) {
  *out = NULL;
  return rf_fail(RF_ERR_UNSUPPORTED, "memory kind 'device' needs a GPU build (for %s)", what);
}

void rf_mem_device_free(void *ptr) { (void)ptr; }
