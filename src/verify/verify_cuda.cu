/* verify_cuda: fill, checksum and check of a device region, bit-identical to verify.c.
 *
 * verify.c hands over the walk its CPU loops take (verify_gpu.h): n_out lines of n_in
 * elements. Lines that are dense and 16-byte aligned are read and written 16 bytes at a time
 * (8 bf16/fp16 or 4 fp32 elements); anything else one element at a time. Lines that follow
 * each other in memory and in global index are merged into one, which spares the division
 * that maps an access to its line. Work comes in units of 256 threads x 8 accesses, one block
 * per unit (a grid-stride loop takes over only past 2^31 units); every value and checksum term
 * is computed by the functions of values.h that the CPU runs.
 *
 * A vector access whose first element starts a 32-bit word of the tensor (values.h: word w
 * holds elements 2w and 2w + 1 of bf16 and fp16) and whose line runs along the global index
 * takes the words whole: one hash per word gives the generator's word, compared with or
 * stored as the loaded one in a single operation, or the checksum's weight, one 32 x 32 ->
 * 64-bit multiply-add per word. That is about a dozen integer instructions per bf16 pair
 * where results format 1 spent some forty per element (two 64-bit mixers), which kept these
 * kernels at 0.48-0.61 of a device copy on an H200 (bench/gpu_kernels.c). Any other access
 * (an odd first index, a transposed shard) computes element by element through the same
 * functions, so sums and mismatches do not depend on which path an element took.
 *
 * The checksum also takes fp8 bytes (an fp8 rollout's, fp8.h), four to a word; fill and check
 * never see fp8.
 *
 * A later version of the weights (versions.h, --update) is filled and checked by instances with
 * V set, which compute every element by rf_version_value and skip the whole-word shortcut;
 * version 0, and every version of --update none, runs the instances without it, unchanged.
 *
 * Checksum: per-thread 64-bit sums, a warp-shuffle and shared-memory reduction per block and
 * one atomicAdd per block. Addition mod 2^64 is associative and commutative, so the order of
 * the additions cannot change the sum: it is the CPU's to the bit.
 *
 * Check: threads count their wrong elements (one atomicAdd each at the end) and also per unit
 * (one atomicAdd per unit that has any). Mismatches are recorded in a device buffer, first
 * come first served, up to a capacity of max_report + 4096. When all of them fit, the host
 * sorts them by walk position and keeps the first max_report: exactly rf_check_region's list.
 * When more were wrong, the per-unit counts say which leading units hold the first
 * max_report, and a second pass over those units alone records all of theirs; sorted, their
 * first max_report are again exactly the CPU's. Units are in walk order, so this is exact
 * however the blocks were scheduled. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

extern "C" {
#include "memory/memory_gpu.h"
#include "verify/verify_gpu.h"
}

namespace {

constexpr int kBlock = 256, kPerThread = 8;
constexpr int64_t kUnit = (int64_t)kBlock * kPerThread; /* accesses per unit */
constexpr int kSlack = 4096;                            /* extra mismatch records, pass 1 */

enum { OP_FILL, OP_SUM, OP_CHECK };

/* The walk as the kernels use it: n_acc accesses per line, each `vec` elements. */
struct gwalk {
  char *base;
  int64_t n_out, n_in, n_acc;
  int64_t pitch_b, step_b; /* bytes between lines, between scalar accesses */
  int64_t g0, dg_out, dg_in;
};

struct record {
  uint64_t pos;
  uint32_t expected, got;
};

/* Where the check kernel reports; pointers may be null for what a pass does not collect. */
struct check_sink {
  unsigned long long *wrong;
  unsigned int *unit_counts;
  record *rec;
  unsigned int *rec_n;
  unsigned int rec_cap;
};

/* A vector access holds 16 bytes of elements; a scalar one a single element. Loads keep the
 * raw bits (4 registers for 16 bytes) until the arithmetic unpacks them. */
template <rf_dtype D, bool VEC> struct access {
  static constexpr int es = D == RF_DTYPE_FP32 ? 4 : D == RF_DTYPE_FP8 ? 1 : 2;
  static constexpr int n = VEC ? 16 / es : 1;
  using raw = typename std::conditional<VEC, uint4, uint32_t>::type;

  static __device__ __forceinline__ raw load(const char *p) {
    if constexpr (VEC)
      return *(const uint4 *)p;
    else if constexpr (es == 4)
      return *(const uint32_t *)p;
    else if constexpr (es == 2)
      return *(const uint16_t *)p;
    else
      return *(const uint8_t *)p;
  }

  static __device__ __forceinline__ void unpack(raw r, uint32_t *v) {
    if constexpr (VEC) {
      uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
      for (int m = 0; m < 4; m++) {
        if constexpr (es == 4) {
          v[m] = w[m];
        } else if constexpr (es == 2) {
          v[2 * m] = w[m] & 0xffffu; /* little-endian: the lower address is the low half */
          v[2 * m + 1] = w[m] >> 16;
        } else {
#pragma unroll
          for (int b = 0; b < 4; b++)
            v[4 * m + b] = (w[m] >> (8 * b)) & 0xffu;
        }
      }
    } else {
      v[0] = r;
    }
  }

  /* Fill and check write and read the generator's types only, never fp8. */
  static __device__ __forceinline__ void store(char *p, const uint32_t *v) {
    static_assert(es != 1, "no generator values of fp8");
    if constexpr (VEC) {
      uint32_t w[4];
#pragma unroll
      for (int m = 0; m < 4; m++)
        w[m] = es == 4 ? v[m] : (v[2 * m] | v[2 * m + 1] << 16);
      *(uint4 *)p = make_uint4(w[0], w[1], w[2], w[3]);
    } else if constexpr (es == 4) {
      *(uint32_t *)p = v[0];
    } else {
      *(uint16_t *)p = (uint16_t)v[0];
    }
  }
};

/* As in region_cuda.cu: one 64-bit division per unit, a 32-bit one (or none) per access. */
__device__ __forceinline__ void locate(const gwalk &w, int64_t line0, int64_t rem0, uint32_t local,
                                       int64_t *line, int64_t *acc) {
  uint64_t pos = (uint64_t)rem0 + local;
  if (w.n_out == 1) {
    *line = 0, *acc = (int64_t)pos;
  } else if (w.n_acc <= INT32_MAX) {
    uint32_t q = (uint32_t)pos / (uint32_t)w.n_acc;
    *line = line0 + q, *acc = (int64_t)(pos - (uint64_t)q * (uint64_t)w.n_acc);
  } else {
    *line = line0 + (int64_t)(pos / (uint64_t)w.n_acc), *acc = (int64_t)(pos % (uint64_t)w.n_acc);
  }
}

/* Whether the access whose first element has global index g holds whole words of the tensor
 * in order (values.h): a vector access along the global index that starts a word. */
template <bool VEC, int WS> __device__ __forceinline__ bool whole_words(const gwalk &w, int64_t g) {
  return VEC && w.dg_in == 1 && (g & ((1 << WS) - 1)) == 0;
}

template <int OP, rf_dtype D, bool VEC, bool V>
__global__ void __launch_bounds__(kBlock)
    verify_kernel(gwalk w, uint64_t key, rf_version_gen ver, int32_t id, int64_t units,
                  uint64_t *sum_out, check_sink sink) {
  using A = access<D, VEC>;
  constexpr int ws = A::es == 4 ? 0 : A::es == 2 ? 1 : 2; /* log2 of elements per 32-bit word */
  const int64_t total = w.n_out * w.n_acc;
  /* sum: terms taken element by element; s1, s0: whole words (values.h: the terms of a word
   * add up to (2h + 1) * word, summed here as 2 * s1 + s0). */
  uint64_t sum = 0, s1 = 0, s0 = 0, wrong = 0;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t v0 = u * kUnit;
    int64_t line0 = 0, rem0 = v0;
    if (w.n_out > 1)
      line0 = v0 / w.n_acc, rem0 = v0 - line0 * w.n_acc;
    /* All of this thread's loads are issued before any arithmetic, so that they are in flight
     * together. g is the global index of an access's first element. */
    typename A::raw raw[kPerThread];
    int64_t g[kPerThread];
    unsigned live = 0;
#pragma unroll
    for (int j = 0; j < kPerThread; j++) {
      uint32_t local = (uint32_t)(j * kBlock) + threadIdx.x;
      if (v0 + (int64_t)local >= total)
        continue;
      int64_t line, acc;
      locate(w, line0, rem0, local, &line, &acc);
      char *p = w.base + line * w.pitch_b + acc * (VEC ? 16 : w.step_b);
      g[j] = w.g0 + line * w.dg_out + acc * A::n * w.dg_in;
      live |= 1u << j;
      if constexpr (OP == OP_FILL) {
        if (!V && whole_words<VEC, ws>(w, g[j])) {
          /* Whole words in memory order: one hash per word. */
          const uint64_t w0 = (uint64_t)g[j] >> ws;
          uint32_t v[4];
#pragma unroll
          for (int m = 0; m < 4; m++)
            v[m] = rf_value_word(rf_word_hash(key, w0 + m), D);
          *(uint4 *)p = make_uint4(v[0], v[1], v[2], v[3]);
        } else {
          uint32_t v[A::n];
#pragma unroll
          for (int e = 0; e < A::n; e++)
            v[e] = V ? rf_version_value(&ver, g[j] + e * w.dg_in, D)
                     : rf_value_of(key, g[j] + e * w.dg_in, D);
          A::store(p, v);
        }
      } else {
        raw[j] = A::load(p);
      }
    }
    if constexpr (OP == OP_FILL)
      continue;
    uint64_t unit_wrong = 0;
#pragma unroll
    for (int j = 0; j < kPerThread; j++) {
      if (!(live & (1u << j)))
        continue;
      if constexpr (VEC && (OP == OP_SUM || !V)) {
        if (whole_words<VEC, ws>(w, g[j])) {
          const uint64_t w0 = (uint64_t)g[j] >> ws;
          const uint32_t got[4] = {raw[j].x, raw[j].y, raw[j].z, raw[j].w};
          if constexpr (OP == OP_SUM) {
#pragma unroll
            for (int m = 0; m < 4; m++) {
              s1 += (uint64_t)rf_word_hash(key, w0 + m) * got[m];
              s0 += got[m];
            }
            continue;
          } else {
            uint32_t diff = 0;
#pragma unroll
            for (int m = 0; m < 4; m++)
              diff |= rf_value_word(rf_word_hash(key, w0 + m), D) ^ got[m];
            if (diff == 0)
              continue;
          }
        }
      }
      uint32_t v[A::n];
      A::unpack(raw[j], v);
      if constexpr (OP == OP_SUM) {
#pragma unroll
        for (int e = 0; e < A::n; e++)
          sum += rf_checksum_term(key, g[j] + e * w.dg_in, v[e], ws);
      } else {
        uint32_t want[A::n], diff = 0;
#pragma unroll
        for (int e = 0; e < A::n; e++) {
          want[e] = V ? rf_version_value(&ver, g[j] + e * w.dg_in, D)
                      : rf_value_of(key, g[j] + e * w.dg_in, D);
          diff |= want[e] ^ v[e];
        }
        if (diff == 0)
          continue;
        /* Rare: find the walk position again and record each wrong element. */
        int64_t line, acc;
        locate(w, line0, rem0, (uint32_t)(j * kBlock) + threadIdx.x, &line, &acc);
        for (int e = 0; e < A::n; e++) {
          if (want[e] == v[e])
            continue;
          unit_wrong++;
          if (sink.rec_cap && *(volatile unsigned int *)sink.rec_n < sink.rec_cap) {
            unsigned int slot = atomicAdd(sink.rec_n, 1u);
            if (slot < sink.rec_cap) {
              record r = {(uint64_t)(line * w.n_in + acc * A::n + e), want[e], v[e]};
              sink.rec[slot] = r;
            }
          }
        }
      }
    }
    if constexpr (OP == OP_CHECK) {
      if (unit_wrong && sink.unit_counts)
        atomicAdd(&sink.unit_counts[u], (unsigned int)unit_wrong);
      wrong += unit_wrong;
    }
  }
  if constexpr (OP == OP_CHECK) {
    if (wrong && sink.wrong)
      atomicAdd(sink.wrong, (unsigned long long)wrong);
  }
  sum += 2 * s1 + s0;
  if constexpr (OP == OP_SUM) {
    __shared__ uint64_t part[kBlock / 32];
    for (int off = 16; off > 0; off /= 2)
      sum += __shfl_down_sync(0xffffffffu, sum, off);
    if (threadIdx.x % 32 == 0)
      part[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {
      sum = threadIdx.x < kBlock / 32 ? part[threadIdx.x] : 0;
      for (int off = 16; off > 0; off /= 2)
        sum += __shfl_down_sync(0xffffffffu, sum, off);
      if (threadIdx.x == 0)
        atomicAdd((unsigned long long *)sum_out, (unsigned long long)sum);
    }
  }
}

/* ---- host side -------------------------------------------------------------------------- */

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The kernel's walk: merged where lines continue each other, vector accesses where every line
 * start is 16-byte aligned and lines are whole vectors. */
gwalk plan_walk(const rf_gpu_walk *in, int es, bool *vec) {
  gwalk w;
  memset(&w, 0, sizeof w);
  w.base = in->base;
  w.n_out = in->n_out, w.n_in = in->n_in;
  w.pitch_b = in->pitch * es, w.step_b = in->step * es;
  w.g0 = in->g0, w.dg_out = in->dg_out, w.dg_in = in->dg_in;
  if (w.n_out > 1 && in->step == 1 && in->pitch == in->n_in && in->dg_out == in->n_in * in->dg_in) {
    w.n_in *= w.n_out, w.n_out = 1;
    w.pitch_b = w.n_in * es;
  }
  const int per = 16 / es;
  uint64_t bits = (uint64_t)(uintptr_t)w.base | (w.n_out > 1 ? (uint64_t)w.pitch_b : 0);
  *vec = in->step == 1 && bits % 16 == 0 && w.n_in % per == 0;
  w.n_acc = *vec ? w.n_in / per : w.n_in;
  return w;
}

/* One block per unit: on an H200 this beats a persistent grid by 7-10% (the checksum of
 * 4 GiB of bf16 in 4.14 ms against 4.47). */
int grid_of(int64_t units) { return units < INT32_MAX ? (int)units : INT32_MAX; }

template <int OP, rf_dtype D, bool V>
void launch_walk(const gwalk &w, bool vec, uint64_t key, const rf_version_gen &ver, int32_t id,
                 int64_t units, uint64_t *sum, check_sink sink, cudaStream_t s) {
  if (vec)
    verify_kernel<OP, D, true, V>
        <<<grid_of(units), kBlock, 0, s>>>(w, key, ver, id, units, sum, sink);
  else
    verify_kernel<OP, D, false, V>
        <<<grid_of(units), kBlock, 0, s>>>(w, key, ver, id, units, sum, sink);
}

/* Fill and check of a later version take the versioned instances; the checksum, which reads
 * bits only, never does. */
template <int OP, rf_dtype D>
void launch_dtype(const gwalk &w, bool vec, uint64_t key, const rf_version_gen &ver, int32_t id,
                  int64_t units, uint64_t *sum, check_sink sink, cudaStream_t s) {
  if constexpr (OP != OP_SUM) {
    if (rf_version_differs(&ver)) {
      launch_walk<OP, D, true>(w, vec, key, ver, id, units, sum, sink, s);
      return;
    }
  }
  launch_walk<OP, D, false>(w, vec, key, ver, id, units, sum, sink, s);
}

/* The checksum sees only bit patterns, so fp16 shares bf16's instances there; fp8 (an fp8
 * rollout's bytes) is checksummed only. `ver` is the version fill and check compute (its key
 * is `key`); the checksum passes version 0 and the checksum key. */
template <int OP>
rf_status launch(const gwalk &w, bool vec, rf_dtype dtype, uint64_t key, const rf_version_gen &ver,
                 int32_t id, int64_t units, uint64_t *sum, check_sink sink) {
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  switch (dtype) {
  case RF_DTYPE_BF16:
    launch_dtype<OP, RF_DTYPE_BF16>(w, vec, key, ver, id, units, sum, sink, s);
    break;
  case RF_DTYPE_FP16:
    if (OP == OP_SUM)
      launch_dtype<OP, RF_DTYPE_BF16>(w, vec, key, ver, id, units, sum, sink, s);
    else
      launch_dtype<OP, RF_DTYPE_FP16>(w, vec, key, ver, id, units, sum, sink, s);
    break;
  case RF_DTYPE_FP8:
    if constexpr (OP == OP_SUM)
      launch_dtype<OP, RF_DTYPE_FP8>(w, vec, key, ver, id, units, sum, sink, s);
    else
      return rf_fail(RF_ERR_INTERNAL, "verify: fp8 regions have a checksum only");
    break;
  default:
    launch_dtype<OP, RF_DTYPE_FP32>(w, vec, key, ver, id, units, sum, sink, s);
    break;
  }
  RF_CUDA(cudaGetLastError());
  return RF_OK;
}

/* Device scratch, grown only: two scalars (a sum or count, the record count), per-unit
 * counts and mismatch records. Not counted by rf_mem_stats: it is not a transfer buffer. The
 * scalars come back through pinned memory, which a small copy reaches without staging. */
rf_gpu_scratch scalars, counts, records;
uint64_t *host_scalars;

/* The two scalars, device and pinned host, zeroed on the device. */
rf_status scalars_ready(cudaStream_t s) {
  RF_TRY(rf_gpu_scratch_reserve(&scalars, 16));
  if (!host_scalars)
    RF_CUDA(cudaHostAlloc((void **)&host_scalars, 16, cudaHostAllocDefault));
  RF_CUDA(cudaMemsetAsync(scalars.ptr, 0, 16, s));
  return RF_OK;
}

/* Copies the two scalars back and waits for everything before them. */
rf_status scalars_fetch(cudaStream_t s) {
  RF_CUDA(cudaMemcpyAsync(host_scalars, scalars.ptr, 16, cudaMemcpyDeviceToHost, s));
  RF_CUDA(cudaStreamSynchronize(s));
  return RF_OK;
}

int by_pos(const void *a, const void *b) {
  uint64_t x = ((const record *)a)->pos, y = ((const record *)b)->pos;
  return x < y ? -1 : x > y;
}

/* Sorts n records and turns the first max_report into rf_mismatch entries. */
int report(record *rec, int64_t n, const gwalk &w, int32_t id, rf_mismatch *out, int max_report) {
  qsort(rec, (size_t)n, sizeof *rec, by_pos);
  int k = 0;
  for (; k < max_report && k < n; k++) {
    const uint64_t n_in = (uint64_t)w.n_in;
    int64_t line = (int64_t)(rec[k].pos / n_in), e = (int64_t)(rec[k].pos % n_in);
    out[k].tensor = id;
    out[k].index = w.g0 + line * w.dg_out + e * w.dg_in;
    out[k].expected = rec[k].expected;
    out[k].got = rec[k].got;
  }
  return k;
}

/* Copies n records back and reports them. */
rf_status fetch_report(int64_t n, const gwalk &w, int32_t id, rf_mismatch *out, int max_report,
                       int *reported) {
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  record *host = (record *)rf_malloc((size_t)n * sizeof(record), "mismatch records");
  if (!host)
    return RF_ERR_NOMEM;
  cudaError_t rc =
      cudaMemcpyAsync(host, records.ptr, (size_t)n * sizeof(record), cudaMemcpyDeviceToHost, s);
  if (rc == cudaSuccess)
    rc = cudaStreamSynchronize(s);
  if (rc != cudaSuccess) {
    free(host);
    RF_CUDA(rc);
  }
  int k = report(host, n, w, id, out, max_report);
  free(host);
  if (reported)
    *reported = k;
  return RF_OK;
}

} // namespace

extern "C" rf_status rf_gpu_fill(const rf_gpu_walk *in, const rf_version_gen *gen, rf_dtype dtype) {
  bool vec;
  gwalk w = plan_walk(in, rf_dtype_size(dtype), &vec);
  int64_t units = ceil_div(w.n_out * w.n_acc, kUnit);
  if (units == 0)
    return RF_OK;
  check_sink none = {};
  RF_TRY(launch<OP_FILL>(w, vec, dtype, gen->key, *gen, 0, units, NULL, none));
  RF_CUDA(cudaStreamSynchronize((cudaStream_t)rf_gpu_stream()));
  return RF_OK;
}

extern "C" rf_status rf_gpu_checksum(const rf_gpu_walk *in, int32_t tensor_id, rf_dtype dtype,
                                     uint64_t *sum) {
  *sum = 0;
  bool vec;
  gwalk w = plan_walk(in, rf_dtype_size(dtype), &vec);
  int64_t units = ceil_div(w.n_out * w.n_acc, kUnit);
  if (units == 0)
    return RF_OK;
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  RF_TRY(scalars_ready(s));
  check_sink none = {};
  rf_version_gen zero = {};
  RF_TRY(launch<OP_SUM>(w, vec, dtype, rf_checksum_key(tensor_id), zero, tensor_id, units,
                        (uint64_t *)scalars.ptr, none));
  RF_TRY(scalars_fetch(s));
  *sum = host_scalars[0];
  return RF_OK;
}

extern "C" rf_status rf_gpu_check(const rf_gpu_walk *in, const rf_version_gen *gen,
                                  int32_t tensor_id, rf_dtype dtype, rf_mismatch *out,
                                  int max_report, int *reported, int64_t *wrong) {
  *wrong = 0;
  if (reported)
    *reported = 0;
  bool vec;
  gwalk w = plan_walk(in, rf_dtype_size(dtype), &vec);
  int64_t units = ceil_div(w.n_out * w.n_acc, kUnit);
  if (units == 0)
    return RF_OK;
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  const int want = out && max_report > 0 ? max_report : 0;

  /* Pass 1: the count, the per-unit counts and the first mismatches that arrive. */
  RF_TRY(scalars_ready(s));
  unsigned long long *count = (unsigned long long *)scalars.ptr;
  unsigned int *rec_n = (unsigned int *)((char *)scalars.ptr + 8);
  check_sink sink = {count, NULL, NULL, rec_n, 0};
  if (want) {
    RF_TRY(rf_gpu_scratch_reserve(&counts, (size_t)units * sizeof(unsigned int)));
    RF_TRY(rf_gpu_scratch_reserve(&records, (size_t)(want + kSlack) * sizeof(record)));
    RF_CUDA(cudaMemsetAsync(counts.ptr, 0, (size_t)units * sizeof(unsigned int), s));
    sink.unit_counts = (unsigned int *)counts.ptr;
    sink.rec = (record *)records.ptr;
    sink.rec_cap = (unsigned int)(want + kSlack);
  }
  RF_TRY(launch<OP_CHECK>(w, vec, dtype, gen->key, *gen, tensor_id, units, NULL, sink));
  RF_TRY(scalars_fetch(s));
  unsigned long long n_wrong = host_scalars[0];
  *wrong = (int64_t)n_wrong;
  if (!want || n_wrong == 0)
    return RF_OK;
  if (n_wrong <= (unsigned long long)sink.rec_cap)
    return fetch_report((int64_t)n_wrong, w, tensor_id, out, max_report, reported);

  /* Pass 2: more were wrong than recorded. The leading units that hold the first `want`
   * mismatches are checked again, recording all of theirs. */
  unsigned int *host_counts =
      (unsigned int *)rf_malloc((size_t)units * sizeof(unsigned int), "per-unit mismatch counts");
  if (!host_counts)
    return RF_ERR_NOMEM;
  cudaError_t rc = cudaMemcpyAsync(host_counts, counts.ptr, (size_t)units * sizeof(unsigned int),
                                   cudaMemcpyDeviceToHost, s);
  if (rc == cudaSuccess)
    rc = cudaStreamSynchronize(s);
  int64_t lead = 0, held = 0;
  while (rc == cudaSuccess && lead < units && held < want)
    held += host_counts[lead++];
  free(host_counts);
  RF_CUDA(rc);
  RF_TRY(rf_gpu_scratch_reserve(&records, (size_t)held * sizeof(record)));
  RF_CUDA(cudaMemsetAsync(rec_n, 0, 4, s));
  check_sink again = {NULL, NULL, (record *)records.ptr, rec_n, (unsigned int)held};
  RF_TRY(launch<OP_CHECK>(w, vec, dtype, gen->key, *gen, tensor_id, lead, NULL, again));
  return fetch_report(held, w, tensor_id, out, max_report, reported);
}
