/* bench_scatter_device (delta_bench_scatter.h): one thread a change, a 2-byte store. */
#include <cuda_runtime.h>

extern "C" {
#include "delta_bench_scatter.h"
#include "memory/memory_gpu.h"
}

namespace {
__global__ void plain_scatter(uint16_t *dst, const int32_t *offsets, const uint16_t *values,
                              int64_t changed) {
  const int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (k < changed)
    dst[offsets[k]] = values[k];
}
} // namespace

extern "C" int bench_scatter_device(uint16_t *dst, const int32_t *offsets, const uint16_t *values,
                                    int64_t changed) {
  if (changed <= 0)
    return 0;
  plain_scatter<<<(unsigned)((changed + 255) / 256), 256, 0, (cudaStream_t)rf_gpu_stream()>>>(
      dst, offsets, values, changed);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
