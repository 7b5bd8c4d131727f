// Issue 33, apply's limit: what does memory give a scatter of sparse bf16 changes, apart from
// refit? A 1 GiB bf16 tensor takes a fraction F of its elements changed at random places
// (sorted offsets, as a sparse delta carries them). Rows, median of 10 after 2 (CUDA events):
//   copy      a device-to-device copy of the tensor: reads and writes every byte (the rate);
//   scatter   one thread a change, a 2-byte store (refit's sparse apply);
//   scatter_cs  the same with streaming stores;
//   sector32  one thread a touched 32-byte sector: load it, merge its changes, store it whole;
//   chunk64   the same for 64-byte chunks;
//   merge32   sector32 from the offsets alone: the lane of a sector's first change merges it.
// Each row gives the kernel's rate over the traffic a scatter must move: the changes read and
// each 32-byte sector holding one read and written (with ECC the memory writes sectors whole;
// under Nsight Compute, dram__bytes_read.sum of a scatter is a sector per change beside the
// changes), and that rate as a fraction of the copy's.
//   nvcc -O3 -arch=sm_90 -std=c++17 -o scatterprobe bench/scatterprobe.cu && ./scatterprobe
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>
#include <random>
#include <vector>

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                   \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

__global__ void scatter(uint16_t *dst, const int32_t *off, const uint16_t *val, int64_t n) {
  int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (k < n)
    dst[off[k]] = val[k];
}

// The same with streaming stores (evict first).
__global__ void scatter_cs(uint16_t *dst, const int32_t *off, const uint16_t *val, int64_t n) {
  int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (k < n)
    __stcs(dst + off[k], val[k]);
}

// Unit of U bytes (U/2 elements): one thread loads it, applies changes [first[u], first[u+1]).
template <int U>
__global__ void merge_units(uint16_t *dst, const int32_t *unit, const int32_t *first,
                            const int32_t *off, const uint16_t *val, int64_t units) {
  int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (u >= units)
    return;
  constexpr int V = U / 16;
  uint4 *p = (uint4 *)(dst + (int64_t)unit[u] * (U / 2));
  uint4 w[V];
#pragma unroll
  for (int i = 0; i < V; i++)
    w[i] = p[i];
  uint16_t *e = (uint16_t *)w;
  for (int k = first[u]; k < first[u + 1]; k++)
    e[off[k] % (U / 2)] = val[k];
#pragma unroll
  for (int i = 0; i < V; i++)
    p[i] = w[i];
}

// From the sorted offsets alone, as an apply would run: a warp takes 32 consecutive changes; a
// sector belongs to the warp holding its first change, whose lane with that first change loads
// the sector, applies every change of it (reading past the warp's 32 if the sector goes on)
// and stores it whole.
__global__ void warp_merge(uint16_t *dst, const int32_t *off, const uint16_t *val, int64_t n) {
  int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n)
    return;
  const int32_t s = off[k] >> 4;
  if (k > 0 && (off[k - 1] >> 4) == s)
    return; // not the sector's first change
  uint4 *p = (uint4 *)(dst + (int64_t)s * 16);
  uint4 w[2] = {p[0], p[1]};
  uint16_t *e = (uint16_t *)w;
  for (int64_t j = k; j < n && (off[j] >> 4) == s; j++)
    e[off[j] & 15] = val[j];
  p[0] = w[0], p[1] = w[1];
}

template <class F> static float time_it(cudaEvent_t a, cudaEvent_t b, F &&fn) {
  std::vector<float> ms;
  for (int r = 0; r < 12; r++) {
    cudaEventRecord(a);
    fn();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float t;
    cudaEventElapsedTime(&t, a, b);
    if (r >= 2)
      ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return (ms[4] + ms[5]) / 2;
}

int main() {
  const int64_t n = (int64_t)1 << 29, bytes = n * 2;
  uint16_t *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  float copy = time_it(e0, e1, [&] { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice); });
  printf("# 1 GiB bf16; copy %.3f ms (%.0f GB/s of traffic)\n", copy, 2.0 * bytes / copy / 1e6);
  printf("# traffic: the changes' offsets and values read (6 bytes each) and each 32-byte sector\n"
         "# holding a change read and written; \"of copy\": that traffic's rate over the copy's\n");
  printf("%-9s %-9s %10s %10s %10s %10s %8s\n", "fraction", "kernel", "changes", "sectors", "ms",
         "GB/s", "of copy");
  std::mt19937_64 rng(42);
  for (double f : {1e-3, 1e-2, 5e-2}) {
    std::vector<int32_t> off;
    for (int64_t i = 0; i < n; i++)
      if (rng() < f * 18446744073709551616.0)
        off.push_back((int32_t)i);
    std::vector<uint16_t> val(off.size(), 7);
    const int64_t m = (int64_t)off.size();
    int64_t sectors = 0;
    for (int64_t k = 0; k < m; k++)
      sectors += k == 0 || off[k] / 16 != off[k - 1] / 16;
    const double traffic = 6.0 * m + 64.0 * sectors;
    auto row = [&](const char *kernel, float t) {
      printf("%-9g %-9s %10lld %10lld %10.4f %10.0f %8.3f\n", f, kernel, (long long)m,
             (long long)sectors, t, traffic / t / 1e6, traffic / t / (2.0 * bytes / copy));
    };
    int32_t *doff, *dunit, *dfirst;
    uint16_t *dval;
    CK(cudaMalloc(&doff, m * 4));
    CK(cudaMalloc(&dval, m * 2));
    CK(cudaMalloc(&dunit, m * 4));
    CK(cudaMalloc(&dfirst, (m + 1) * 4));
    CK(cudaMemcpy(doff, off.data(), m * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dval, val.data(), m * 2, cudaMemcpyHostToDevice));
    row("scatter", time_it(e0, e1, [&] { scatter<<<(m + 255) / 256, 256>>>(b, doff, dval, m); }));
    row("scatter_cs",
        time_it(e0, e1, [&] { scatter_cs<<<(m + 255) / 256, 256>>>(b, doff, dval, m); }));
    row("merge32",
        time_it(e0, e1, [&] { warp_merge<<<(m + 255) / 256, 256>>>(b, doff, dval, m); }));
    for (int u : {32, 64}) {
      std::vector<int32_t> unit, first;
      for (int64_t k = 0; k < m; k++)
        if (unit.empty() || off[k] / (u / 2) != unit.back()) {
          unit.push_back(off[k] / (u / 2));
          first.push_back((int32_t)k);
        }
      first.push_back((int32_t)m);
      const int64_t units = (int64_t)unit.size();
      CK(cudaMemcpy(dunit, unit.data(), units * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dfirst, first.data(), (units + 1) * 4, cudaMemcpyHostToDevice));
      row(u == 32 ? "sector32" : "chunk64", time_it(e0, e1, [&] {
            if (u == 32)
              merge_units<32><<<(units + 255) / 256, 256>>>(b, dunit, dfirst, doff, dval, units);
            else
              merge_units<64><<<(units + 255) / 256, 256>>>(b, dunit, dfirst, doff, dval, units);
          }));
    }
    CK(cudaGetLastError());
    cudaFree(doff), cudaFree(dval), cudaFree(dunit), cudaFree(dfirst);
  }
  return 0;
}
