/* format_cuda: the small kernels around the quantizer (fp8_cuda.cu) that the engine and its
 * checks use on quantized tensors in GPU memory: the row comparison of the device checks, the
 * copy of scales that lie in 128x4 tiles (nvfp4), and the maximum |x| of trainer shards that
 * nvfp4's global scales start from. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "format/format.h"
#include "memory/memory_gpu.h"
#include "verify/fp8.h"
}

namespace {

constexpr int kThreads = 256;

/* Row r of the comparison is CUDA block row blockIdx.y; each thread compares elements
 * blockDim.x apart and the block adds its count to the row's once per warp. */
__global__ void __launch_bounds__(kThreads)
    compare_rows(const uint8_t *got, int64_t got_pitch, const uint8_t *want, int64_t want_pitch,
                 int64_t cols, int esize, unsigned int *row_wrong) {
  const int64_t r = blockIdx.y;
  const uint8_t *g = got + r * got_pitch, *w = want + r * want_pitch;
  unsigned int n = 0;
  for (int64_t c = (int64_t)blockIdx.x * kThreads + threadIdx.x; c < cols;
       c += (int64_t)gridDim.x * kThreads) {
    bool differ = false;
    for (int b = 0; b < esize; b++)
      differ |= g[c * esize + b] != w[c * esize + b];
    n += differ;
  }
  for (int o = 16; o > 0; o >>= 1)
    n += __shfl_xor_sync(0xffffffffu, n, o);
  if ((threadIdx.x & 31) == 0 && n)
    atomicAdd(&row_wrong[r], n);
}

/* Block (i, j) of a box of scales on one side (rf_scale_side): row-major, or at
 * rf_format_scale_offset's index in 128x4 tiles. */
__device__ __forceinline__ char *side_at(const rf_scale_side &s, int64_t i, int64_t j, int esize) {
  if (s.tile_grid_cols <= 0)
    return s.base + (i * s.stride + j) * esize;
  const int64_t r = s.row0 + i, c = s.col0 + j;
  const int64_t tile = (r / 128) * ((s.tile_grid_cols + 3) / 4) + c / 4, tr = r % 128;
  return s.base + (tile * 512 + (tr % 32) * 16 + (tr / 32) * 4 + c % 4) * esize;
}

/* One thread per scale; neighbouring threads take neighbouring blocks of a row. */
__global__ void __launch_bounds__(kThreads)
    copy_scales(rf_scale_side dst, rf_scale_side src, int64_t rows, int64_t cols, int esize) {
  const int64_t k = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  if (k >= rows * cols)
    return;
  const int64_t i = k / cols, j = k % cols;
  char *d = side_at(dst, i, j, esize);
  const char *s = side_at(src, i, j, esize);
  for (int b = 0; b < esize; b++)
    d[b] = s[b];
}

/* The maximum |x| of regions (rf_gpu_amax): each CUDA block takes kAmaxChunk elements of one
 * region, found by binary search over the regions' first chunks; the threads take the
 * maximum of the magnitudes' bit patterns, which order like the magnitudes (inf and NaN above
 * every finite value), and one atomicMax per warp puts it into the region's slot. 2-byte
 * regions that start 16-byte aligned are read 16 bytes a load, their magnitudes compared two
 * at a time as 16-bit patterns (bf16 and fp16 order like theirs too) and turned into fp32 bit
 * patterns once at the end: nvfp4 reads every weight once for this before each refit, so it
 * must keep pace with a copy. */
constexpr int64_t kAmaxChunk = 64 * kThreads;
struct amax_dev {
  const char *x;
  int64_t n, chunk_begin;
  int dtype, slot;
};

/* A 2-byte magnitude h (sign cleared) as the fp32 bit pattern of its value. */
__device__ __forceinline__ uint32_t magnitude16(uint32_t h, int dtype) {
  if (dtype == RF_DTYPE_BF16)
    return h << 16;
  /* fp16: exactly (subnormals normalised). */
  const uint32_t e = h >> 10, m = h & 0x3ff;
  if (e == 31)
    return 0x7f800000u | m << 13;
  if (e)
    return (e + 112) << 23 | m << 13;
  return m ? __float_as_uint((float)m * 5.9604644775390625e-8f) : 0; /* m * 2^-24, exact */
}

__device__ __forceinline__ uint32_t magnitude(const char *x, int dtype, int64_t i) {
  if (dtype == RF_DTYPE_FP32)
    return ((const uint32_t *)x)[i] & 0x7fffffffu;
  return magnitude16(((const uint16_t *)x)[i] & 0x7fffu, dtype);
}

__global__ void __launch_bounds__(kThreads)
    amax_regions(const amax_dev *regions, int count, unsigned int *out) {
  const int64_t chunk = blockIdx.x;
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (regions[mid].chunk_begin <= chunk)
      lo = mid;
    else
      hi = mid - 1;
  }
  const amax_dev r = regions[lo];
  const int64_t first = (chunk - r.chunk_begin) * kAmaxChunk;
  const int64_t last = min(r.n, first + kAmaxChunk);
  uint32_t m = 0;
  if (r.dtype != RF_DTYPE_FP32 && ((uintptr_t)r.x & 15) == 0) {
    const uint4 *v = (const uint4 *)(r.x + first * 2);
    const int64_t vectors = (last - first) / 8;
    uint32_t m2 = 0;
    for (int64_t k = threadIdx.x; k < vectors; k += kThreads) {
      const uint4 u = __ldg(v + k);
      m2 = __vmaxu2(m2, __vmaxu2(__vmaxu2(u.x & 0x7fff7fffu, u.y & 0x7fff7fffu),
                                 __vmaxu2(u.z & 0x7fff7fffu, u.w & 0x7fff7fffu)));
    }
    for (int64_t i = first + vectors * 8 + threadIdx.x; i < last; i += kThreads)
      m2 = max(m2, (uint32_t)(((const uint16_t *)r.x)[i] & 0x7fffu));
    m = magnitude16(max(m2 & 0xffffu, m2 >> 16), r.dtype);
  } else {
    for (int64_t i = first + threadIdx.x; i < last; i += kThreads)
      m = max(m, magnitude(r.x, r.dtype, i));
  }
  for (int o = 16; o > 0; o >>= 1)
    m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0 && m)
    atomicMax(&out[r.slot], m);
}

} // namespace

extern "C" rf_status rf_gpu_compare_rows(const void *got, int64_t got_stride, const void *want,
                                         int64_t want_stride, int64_t rows, int64_t cols, int esize,
                                         int64_t *row_wrong) {
  memset(row_wrong, 0, (size_t)rows * sizeof *row_wrong);
  if (rows <= 0 || cols <= 0)
    return RF_OK;
  if (rows > 65535)
    return rf_fail(RF_ERR_INTERNAL, "verify: %lld rows is more than one comparison takes",
                   (long long)rows);
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  unsigned int *dev = NULL;
  RF_CUDA(cudaMallocAsync((void **)&dev, (size_t)rows * sizeof *dev, s));
  rf_status st = RF_OK;
  if (cudaMemsetAsync(dev, 0, (size_t)rows * sizeof *dev, s) != cudaSuccess)
    st = rf_fail(RF_ERR_CUDA, "verify: cannot clear the comparison's row counts");
  const unsigned int gx = (unsigned int)((cols + kThreads * 8 - 1) / (kThreads * 8));
  if (st == RF_OK) {
    compare_rows<<<dim3(gx, (unsigned int)rows), kThreads, 0, s>>>(
        (const uint8_t *)got, got_stride * esize, (const uint8_t *)want, want_stride * esize, cols,
        esize, dev);
    if (cudaGetLastError() != cudaSuccess)
      st = rf_fail(RF_ERR_CUDA, "verify: the comparison kernel did not launch");
  }
  unsigned int *host = (unsigned int *)malloc((size_t)rows * sizeof *host);
  if (st == RF_OK && !host)
    st = RF_ERR_NOMEM;
  if (st == RF_OK && (cudaMemcpyAsync(host, dev, (size_t)rows * sizeof *host,
                                      cudaMemcpyDeviceToHost, s) != cudaSuccess ||
                      cudaStreamSynchronize(s) != cudaSuccess))
    st = rf_fail(RF_ERR_CUDA, "verify: cannot read the comparison's row counts back");
  for (int64_t r = 0; st == RF_OK && r < rows; r++)
    row_wrong[r] = host[r];
  free(host);
  cudaFreeAsync(dev, s);
  return st;
}

extern "C" rf_status rf_gpu_copy_scales(const rf_scale_side *dst, const rf_scale_side *src,
                                        int64_t rows, int64_t cols, int esize) {
  if (rows <= 0 || cols <= 0)
    return RF_OK;
  const int64_t blocks = (rows * cols + kThreads - 1) / kThreads;
  if (blocks > INT32_MAX)
    return rf_fail(RF_ERR_INTERNAL, "fp8: %lld x %lld scales is more than one copy takes",
                   (long long)rows, (long long)cols);
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  copy_scales<<<(unsigned)blocks, kThreads, 0, s>>>(*dst, *src, rows, cols, esize);
  RF_CUDA(cudaGetLastError());
  return RF_OK;
}

extern "C" rf_status rf_gpu_amax(const rf_amax_region *regions, int count, float *amax, int slots) {
  int64_t chunks = 0;
  amax_dev *table = (amax_dev *)calloc((size_t)count + 1, sizeof *table);
  unsigned int *host = (unsigned int *)calloc((size_t)slots + 1, sizeof *host);
  if (!table || !host) {
    free(table), free(host);
    return RF_ERR_NOMEM;
  }
  int n = 0;
  for (int i = 0; i < count; i++) {
    if (regions[i].n <= 0)
      continue;
    if (regions[i].slot < 0 || regions[i].slot >= slots ||
        (regions[i].dtype != RF_DTYPE_BF16 && regions[i].dtype != RF_DTYPE_FP16 &&
         regions[i].dtype != RF_DTYPE_FP32)) {
      free(table), free(host);
      return rf_fail(RF_ERR_INTERNAL, "fp8: a maximum of %s elements into slot %d of %d",
                     rf_dtype_name(regions[i].dtype), regions[i].slot, slots);
    }
    table[n] = {(const char *)regions[i].x, regions[i].n, chunks, (int)regions[i].dtype,
                regions[i].slot};
    chunks += (regions[i].n + kAmaxChunk - 1) / kAmaxChunk;
    n++;
  }
  rf_status st = RF_OK;
  if (n > 0 && chunks > INT32_MAX)
    st = rf_fail(RF_ERR_INTERNAL, "fp8: %lld elements is more than one maximum takes",
                 (long long)(chunks * kAmaxChunk));
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  amax_dev *dt = NULL;
  unsigned int *dout = NULL;
  if (st == RF_OK && n > 0) {
    const size_t tb = (size_t)n * sizeof *table, ob = (size_t)slots * sizeof *host;
    if (cudaMallocAsync((void **)&dt, tb, s) != cudaSuccess ||
        cudaMallocAsync((void **)&dout, ob, s) != cudaSuccess ||
        cudaMemcpyAsync(dt, table, tb, cudaMemcpyHostToDevice, s) != cudaSuccess ||
        cudaMemsetAsync(dout, 0, ob, s) != cudaSuccess)
      st = rf_fail(RF_ERR_CUDA, "fp8: cannot set up the maximum of the trainer's shards");
    if (st == RF_OK) {
      amax_regions<<<(unsigned)chunks, kThreads, 0, s>>>(dt, n, dout);
      if (cudaGetLastError() != cudaSuccess ||
          cudaMemcpyAsync(host, dout, ob, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
          cudaStreamSynchronize(s) != cudaSuccess)
        st = rf_fail(RF_ERR_CUDA, "fp8: the maximum of the trainer's shards did not run");
    }
    if (dt)
      cudaFreeAsync(dt, s);
    if (dout)
      cudaFreeAsync(dout, s);
  }
  for (int k = 0; st == RF_OK && k < slots; k++) {
    float a;
    memcpy(&a, &host[k], sizeof a);
    if (!(a <= amax[k])) /* NaN stays NaN: the quantizer refuses its block in one line */
      amax[k] = a;
  }
  free(table), free(host);
  return st;
}
