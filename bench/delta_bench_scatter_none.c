/* bench_scatter_device in a build without CUDA: there is no device to scatter on. */
#include "delta_bench_scatter.h"

int bench_scatter_device(uint16_t *dst, const int32_t *offsets, const uint16_t *values,
                         int64_t changed) {
  (void)dst, (void)offsets, (void)values, (void)changed;
  return -1;
}
