/* memory_gpu: the two GPU kinds of memory (pinned host and device), kept out of memory.c so
 * that the host build needs no CUDA headers.
 *
 * memory.c dispatches RF_MEM_PINNED and RF_MEM_DEVICE here. A CUDA build links
 * memory_cuda.c (cudaHostAlloc / cudaMalloc); every other build links memory_gpu_none.c,
 * whose allocators fail with RF_ERR_UNSUPPORTED. The allocators log their own failure and
 * leave the byte counters to memory.c. */
#ifndef RF_MEMORY_GPU_H
#define RF_MEMORY_GPU_H

#include <stddef.h>

#include "memory/memory.h"

rf_status rf_mem_pinned_alloc(size_t bytes, const char *what, void **out);
void rf_mem_pinned_free(void *ptr);
rf_status rf_mem_device_alloc(size_t bytes, const char *what, void **out);
void rf_mem_device_free(void *ptr);

#endif
