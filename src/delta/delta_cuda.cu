/* delta_cuda: the mark, gather, scatter and hash of the delta encodings on device memory, the
 * same bytes as delta_host.c and delta.c write.
 *
 * The piece is cut into tiles of 8192 elements, one block of 256 threads each, one mask word of
 * 32 elements per thread. Encoding is a stream compaction in two passes around a scan:
 *   mark    compares the versions and writes the mask words and each tile's count. Pieces
 *           whose rows are dense and 16-byte aligned on both sides load 16 bytes a lane, the
 *           lanes that hold one word's elements OR their bits together by shuffles; anything
 *           else loads an element a lane and takes the word from a ballot.
 *   scan    the tile counts' exclusive sum (CUB), whose last entry is the changed count; it
 *           comes back to the host, which chooses the encoding and so the payload's layout.
 *   gather  each block scans its words' counts and each warp walks its 32 words: for a word
 *           with bits, the lanes of the set bits read their element and write it, and its
 *           offset, at consecutive places, so reads and writes are coalesced wherever the
 *           changes are dense. Words without bits cost nothing but their load.
 * So encoding reads both versions once, writes and reads the mask (an eighth of a bit per
 * element bit: 1/16 of bf16's bytes), and reads only the changed elements again.
 * Applying a bitmask payload runs the same scan over its mask; a sparse one is one thread per
 * changed element. The hash of a payload is its tree (delta.h): one thread per 4 KiB chunk
 * computes the XXH64 of its chunk, level after level, and the last level (at most 4 KiB)
 * comes back to the host's libxxhash. Everything runs on refit's stream. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

#include <initializer_list>

#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>

extern "C" {
#include "delta/delta_gpu.h"
#include "memory/memory_gpu.h"
}

namespace {

constexpr int kBlock = 256;                          /* threads, one word each */
constexpr int64_t kTileElems = (int64_t)kBlock * 32; /* elements per tile and block */
constexpr unsigned kFull = 0xffffffffu;

/* One side of a piece: element e (row-major over the box) at base + (r * s0 + c * s1) * es,
 * r = e / cols, c = e % cols. Offsets are below 2^31, so the division is 32-bit. */
struct side {
  char *base;
  int64_t s0, s1;
};

struct piece {
  side prev, cur;
  int64_t n, cols;
  int vec; /* rows dense and 16-byte aligned on both sides, and no 16 bytes across a row */
};

template <int ES> struct elem_t;
template <> struct elem_t<1> { typedef uint8_t type; };
template <> struct elem_t<2> { typedef uint16_t type; };
template <> struct elem_t<4> { typedef uint32_t type; };

template <int ES> __device__ __forceinline__ char *at(const side &s, int64_t cols, int64_t e) {
  const uint32_t r = (uint32_t)e / (uint32_t)cols, c = (uint32_t)e - r * (uint32_t)cols;
  return s.base + ((int64_t)r * s.s0 + (int64_t)c * s.s1) * ES;
}

/* ---- mark ------------------------------------------------------------------------------- */

/* Bit k set for each element k of a 16-byte vector that differs. */
template <int ES> __device__ __forceinline__ uint32_t vec_bits(uint4 a, uint4 b) {
  const uint32_t x[4] = {a.x ^ b.x, a.y ^ b.y, a.z ^ b.z, a.w ^ b.w};
  uint32_t bits = 0;
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int k = 0; k < 4 / ES; k++)
      bits |= (uint32_t)(((x[i] >> (8 * ES * k)) & (ES == 4 ? kFull : (1u << (8 * ES)) - 1)) != 0)
              << (i * (4 / ES) + k);
  return bits;
}

/* The warp's 32 words (1024 elements, all inside the piece) 16 bytes a lane: vector v of the
 * warp holds elements 16 / ES * v.., so 2 * ES consecutive lanes hold one word. Returns the
 * bits this lane counted. */
template <int ES>
__device__ __forceinline__ uint32_t mark_vec(const piece &p, uint32_t *mask, int64_t w0, int lane) {
  constexpr int EPV = 16 / ES, G = 2 * ES, NV = 2 * ES; /* elements a vector, lanes a word */
  const int64_t e0 = w0 * 32;
  uint4 a[NV], b[NV];
#pragma unroll
  for (int k = 0; k < NV; k++) {
    const int64_t e = e0 + (int64_t)(k * 32 + lane) * EPV;
    a[k] = __ldg((const uint4 *)at<ES>(p.prev, p.cols, e));
    b[k] = __ldg((const uint4 *)at<ES>(p.cur, p.cols, e));
  }
  uint32_t count = 0;
#pragma unroll
  for (int k = 0; k < NV; k++) {
    uint32_t bits = vec_bits<ES>(a[k], b[k]) << ((lane % G) * EPV);
#pragma unroll
    for (int o = 1; o < G; o <<= 1)
      bits |= __shfl_xor_sync(kFull, bits, o);
    if (lane % G == 0) {
      if (mask)
        mask[w0 + (k * 32 + lane) / G] = bits;
      count += __popc(bits);
    }
  }
  return count;
}

/* The warp's words an element a lane, for strided pieces and the piece's last partial chunk. */
template <int ES>
__device__ __forceinline__ uint32_t mark_elems(const piece &p, uint32_t *mask, int64_t w0,
                                               int lane) {
  typedef typename elem_t<ES>::type T;
  uint32_t count = 0;
  for (int j = 0; j < 32; j++) {
    const int64_t e = (w0 + j) * 32 + lane;
    bool changed = false;
    if (e < p.n)
      changed =
          __ldg((const T *)at<ES>(p.prev, p.cols, e)) != __ldg((const T *)at<ES>(p.cur, p.cols, e));
    const uint32_t bits = __ballot_sync(kFull, changed);
    if (lane == 0) {
      if (mask)
        mask[w0 + j] = bits;
      count += __popc(bits);
    }
  }
  return count;
}

/* Sums v over the block into its thread 0. */
__device__ __forceinline__ uint32_t block_sum(uint32_t v, uint32_t *warp_sums) {
#pragma unroll
  for (int o = 16; o; o >>= 1)
    v += __shfl_down_sync(kFull, v, o);
  if (threadIdx.x % 32 == 0)
    warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  uint32_t sum = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kBlock / 32; w++)
      sum += warp_sums[w];
  return sum;
}

template <int ES>
__global__ void __launch_bounds__(kBlock) mark_kernel(piece p, uint32_t *mask, uint32_t *counts) {
  __shared__ uint32_t warp_sums[kBlock / 32];
  const int lane = (int)threadIdx.x % 32;
  const int64_t w0 = (int64_t)blockIdx.x * kBlock + threadIdx.x / 32 * 32; /* the warp's first */
  uint32_t count = 0;
  if (p.vec && w0 * 32 + 1024 <= p.n)
    count = mark_vec<ES>(p, mask, w0, lane);
  else if (w0 * 32 < p.n)
    count = mark_elems<ES>(p, mask, w0, lane);
  const uint32_t sum = block_sum(count, warp_sums);
  if (threadIdx.x == 0)
    counts[blockIdx.x] = sum;
}

/* A bitmask payload's tile counts, for its scatter. */
__global__ void __launch_bounds__(kBlock)
    count_kernel(const uint32_t *mask, int64_t words, uint32_t *counts) {
  __shared__ uint32_t warp_sums[kBlock / 32];
  const int64_t w = (int64_t)blockIdx.x * kBlock + threadIdx.x;
  const uint32_t sum = block_sum(w < words ? __popc(mask[w]) : 0, warp_sums);
  if (threadIdx.x == 0)
    counts[blockIdx.x] = sum;
}

/* ---- gather and scatter ----------------------------------------------------------------- */

/* Walks the set bits of the block's words, whose first change is number tile_first[block]:
 * for each, the lane calls f(element, its number among the changes). */
template <typename F>
__device__ __forceinline__ void walk_bits(const uint32_t *mask, int64_t words,
                                          const uint32_t *tile_first, F f) {
  typedef cub::BlockScan<uint32_t, kBlock> scan;
  __shared__ typename scan::TempStorage tmp;
  const int64_t w = (int64_t)blockIdx.x * kBlock + threadIdx.x;
  const uint32_t bits = w < words ? mask[w] : 0;
  uint32_t first = 0;
  scan(tmp).ExclusiveSum((uint32_t)__popc(bits), first);
  first += tile_first[blockIdx.x];
  const int lane = (int)threadIdx.x % 32;
  const int64_t w_warp = w - lane;
  for (int j = 0; j < 32; j++) {
    const uint32_t word = __shfl_sync(kFull, bits, j);
    const uint32_t k0 = __shfl_sync(kFull, first, j);
    if (word >> lane & 1)
      f((w_warp + j) * 32 + lane, k0 + __popc(word & ((1u << lane) - 1)));
  }
}

template <int ES>
__global__ void __launch_bounds__(kBlock)
    gather_kernel(piece p, const uint32_t *mask, const uint32_t *tile_first, int32_t *offsets,
                  void *values) {
  typedef typename elem_t<ES>::type T;
  walk_bits(mask, (p.n + 31) / 32, tile_first, [&](int64_t e, uint32_t k) {
    ((T *)values)[k] = __ldg((const T *)at<ES>(p.cur, p.cols, e));
    if (offsets)
      offsets[k] = (int32_t)e;
  });
}

template <int ES>
__global__ void __launch_bounds__(kBlock)
    scatter_bitmask_kernel(piece p, const uint32_t *mask, const uint32_t *tile_first,
                           const void *values, int64_t changed) {
  typedef typename elem_t<ES>::type T;
  walk_bits(mask, (p.n + 31) / 32, tile_first, [&](int64_t e, uint32_t k) {
    if (e < p.n && k < changed) /* the hash vouched for the mask; this only guards memory */
      *(T *)at<ES>(p.cur, p.cols, e) = ((const T *)values)[k];
  });
}

template <int ES>
__global__ void __launch_bounds__(kBlock)
    scatter_sparse_kernel(piece p, const int32_t *offsets, const void *values, int64_t changed) {
  typedef typename elem_t<ES>::type T;
  const int64_t k = (int64_t)blockIdx.x * kBlock + threadIdx.x;
  if (k >= changed)
    return;
  const int32_t e = offsets[k];
  if (e >= 0 && e < p.n)
    *(T *)at<ES>(p.cur, p.cols, e) = ((const T *)values)[k];
}

/* ---- the hash --------------------------------------------------------------------------- */

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL, kP2 = 0xC2B2AE3D27D4EB4FULL,
                   kP3 = 0x165667B19E3779F9ULL, kP4 = 0x85EBCA77C2B2AE63ULL,
                   kP5 = 0x27D4EB2F165667C5ULL;

__device__ __forceinline__ uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
__device__ __forceinline__ uint64_t xxh_round(uint64_t acc, uint64_t in) {
  return rotl64(acc + in * kP2, 31) * kP1;
}
__device__ __forceinline__ uint64_t xxh_merge(uint64_t acc, uint64_t v) {
  return (acc ^ xxh_round(0, v)) * kP1 + kP4;
}

/* XXH64 of len bytes at p (8-byte aligned), as libxxhash computes it. */
__device__ uint64_t xxh64(const unsigned char *p, int64_t len, uint64_t seed) {
  const unsigned char *end = p + len;
  uint64_t h;
  if (len >= 32) {
    uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    const unsigned char *limit = end - 32;
#pragma unroll 4
    for (; p <= limit; p += 32) {
      const uint64_t *q = (const uint64_t *)p;
      v1 = xxh_round(v1, q[0]), v2 = xxh_round(v2, q[1]);
      v3 = xxh_round(v3, q[2]), v4 = xxh_round(v4, q[3]);
    }
    h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
    h = xxh_merge(xxh_merge(xxh_merge(xxh_merge(h, v1), v2), v3), v4);
  } else {
    h = seed + kP5;
  }
  h += (uint64_t)len;
  for (; p + 8 <= end; p += 8)
    h = rotl64(h ^ xxh_round(0, *(const uint64_t *)p), 27) * kP1 + kP4;
  if (p + 4 <= end) {
    h = rotl64(h ^ (uint64_t)(*(const uint32_t *)p) * kP1, 23) * kP2 + kP3;
    p += 4;
  }
  for (; p < end; p++)
    h = rotl64(h ^ (uint64_t)(*p) * kP5, 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  return h ^ (h >> 32);
}

__global__ void __launch_bounds__(kBlock)
    hash_kernel(const unsigned char *in, int64_t len, uint64_t seed, uint64_t *out) {
  const int64_t i = (int64_t)blockIdx.x * kBlock + threadIdx.x, at = i * RF_DELTA_HASH_CHUNK;
  if (at < len)
    out[i] = xxh64(in + at, min((int64_t)RF_DELTA_HASH_CHUNK, len - at), seed);
}

/* ---- host side -------------------------------------------------------------------------- */

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int blocks_of(int64_t units, int64_t per) { return (int)ceil_div(units, per); }

/* Device scratch, grown only, as verify_cuda.cu keeps its own: the mark's words, the tile
 * counts and their scan, CUB's work space, two levels of the hash tree. Not counted by
 * rf_mem_stats: it is not a transfer buffer. Small results come back through pinned memory. */
rf_gpu_scratch mask_buf, counts_buf, first_buf, cub_buf, level_buf[2];
unsigned char *host_stage; /* RF_DELTA_HASH_CHUNK bytes, pinned */

rf_status stage_ready(void) {
  if (!host_stage)
    RF_CUDA(cudaHostAlloc((void **)&host_stage, RF_DELTA_HASH_CHUNK, cudaHostAllocDefault));
  return RF_OK;
}

/* A side collapsed to one row when both are one dense row-major run, as delta_host.c does. */
piece piece_of(const rf_delta_job *job) {
  piece p;
  p.prev = side{job->prev.base, job->prev.s0, job->prev.s1};
  p.cur = side{job->cur.base, job->cur.s0, job->cur.s1};
  p.n = job->n, p.cols = job->cols > 0 ? job->cols : 1;
  int64_t rows = job->rows;
  bool run = true;
  for (const side *s : {&p.prev, &p.cur})
    run = run && (job->cols <= 1 || s->s1 == 1) && (rows <= 1 || s->s0 == job->cols);
  if (run && job->n > 0) {
    p.prev.s0 = p.cur.s0 = p.n, p.prev.s1 = p.cur.s1 = 1;
    p.cols = p.n, rows = 1;
  }
  const int es = job->esize, epv = 16 / es;
  p.vec = 1;
  for (const side *s : {&p.prev, &p.cur})
    p.vec = p.vec && s->s1 == 1 && (uintptr_t)s->base % 16 == 0 &&
            (rows <= 1 || (p.cols % epv == 0 && s->s0 * es % 16 == 0));
  return p;
}

/* The exclusive scan of `tiles` counts into first_buf, whose entry [tiles] is their sum;
 * returns the sum, waiting for it. */
rf_status scan_tiles(int64_t tiles, cudaStream_t s, int64_t *total) {
  uint32_t *counts = (uint32_t *)counts_buf.ptr, *first = (uint32_t *)first_buf.ptr;
  RF_CUDA(cudaMemsetAsync(counts + tiles, 0, sizeof *counts, s));
  size_t need = 0;
  RF_CUDA(cub::DeviceScan::ExclusiveSum(NULL, need, counts, first, (int)tiles + 1, s));
  RF_TRY(rf_gpu_scratch_reserve(&cub_buf, need));
  need = cub_buf.cap;
  RF_CUDA(cub::DeviceScan::ExclusiveSum(cub_buf.ptr, need, counts, first, (int)tiles + 1, s));
  RF_TRY(stage_ready());
  RF_CUDA(cudaMemcpyAsync(host_stage, first + tiles, sizeof *first, cudaMemcpyDeviceToHost, s));
  RF_CUDA(cudaStreamSynchronize(s));
  uint32_t sum;
  memcpy(&sum, host_stage, sizeof sum);
  *total = sum;
  return RF_OK;
}

rf_status tiles_ready(int64_t n, int64_t *tiles) {
  *tiles = ceil_div(n, kTileElems);
  RF_TRY(rf_gpu_scratch_reserve(&counts_buf, (size_t)(*tiles + 1) * sizeof(uint32_t)));
  return rf_gpu_scratch_reserve(&first_buf, (size_t)(*tiles + 1) * sizeof(uint32_t));
}

/* Launches kernel K<1>, K<2> or K<4> for job's element size. */
#define RF_DELTA_LAUNCH(K, grid, s, ...)                                                           \
  do {                                                                                             \
    switch (job->esize) {                                                                          \
    case 1:                                                                                        \
      K<1><<<(grid), kBlock, 0, (s)>>>(__VA_ARGS__);                                               \
      break;                                                                                       \
    case 2:                                                                                        \
      K<2><<<(grid), kBlock, 0, (s)>>>(__VA_ARGS__);                                               \
      break;                                                                                       \
    default:                                                                                       \
      K<4><<<(grid), kBlock, 0, (s)>>>(__VA_ARGS__);                                               \
      break;                                                                                       \
    }                                                                                              \
    RF_CUDA(cudaGetLastError());                                                                   \
  } while (0)

} // namespace

extern "C" rf_status rf_gpu_delta_mark(rf_delta_job *job, int keep, int64_t *changed) {
  *changed = 0;
  job->mask = NULL;
  if (job->n == 0)
    return RF_OK;
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  int64_t tiles = 0;
  RF_TRY(tiles_ready(job->n, &tiles));
  uint32_t *mask = NULL;
  if (keep) {
    RF_TRY(rf_gpu_scratch_reserve(&mask_buf, (size_t)tiles * kBlock * sizeof(uint32_t)));
    mask = (uint32_t *)mask_buf.ptr;
  }
  const piece p = piece_of(job);
  RF_DELTA_LAUNCH(mark_kernel, (int)tiles, s, p, mask, (uint32_t *)counts_buf.ptr);
  RF_TRY(scan_tiles(tiles, s, changed));
  job->mask = mask;
  return RF_OK;
}

extern "C" rf_status rf_gpu_delta_gather(const rf_delta_job *job, char *mask_out, char *offsets,
                                         char *values) {
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  const int64_t words = rf_delta_mask_words(job->n);
  if (mask_out && words)
    RF_CUDA(cudaMemcpyAsync(mask_out, job->mask, (size_t)words * 4, cudaMemcpyDeviceToDevice, s));
  if (job->changed == 0)
    return RF_OK;
  const piece p = piece_of(job);
  RF_DELTA_LAUNCH(gather_kernel, blocks_of(job->n, kTileElems), s, p, (const uint32_t *)job->mask,
                  (const uint32_t *)first_buf.ptr, (int32_t *)offsets, (void *)values);
  return RF_OK;
}

extern "C" rf_status rf_gpu_delta_scatter_sparse(const rf_delta_job *job, const char *payload) {
  if (job->changed == 0)
    return RF_OK;
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  const piece p = piece_of(job);
  RF_DELTA_LAUNCH(scatter_sparse_kernel, blocks_of(job->changed, kBlock), s, p,
                  (const int32_t *)payload, (const void *)(payload + 4 * job->changed),
                  job->changed);
  return RF_OK;
}

extern "C" rf_status rf_gpu_delta_scatter_bitmask(const rf_delta_job *job, const char *payload) {
  if (job->changed == 0)
    return RF_OK;
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  const int64_t words = rf_delta_mask_words(job->n);
  int64_t tiles = 0, total = 0;
  RF_TRY(tiles_ready(job->n, &tiles));
  count_kernel<<<(int)tiles, kBlock, 0, s>>>((const uint32_t *)payload, words,
                                             (uint32_t *)counts_buf.ptr);
  RF_CUDA(cudaGetLastError());
  RF_TRY(scan_tiles(tiles, s, &total));
  const piece p = piece_of(job);
  RF_DELTA_LAUNCH(scatter_bitmask_kernel, (int)tiles, s, p, (const uint32_t *)payload,
                  (const uint32_t *)first_buf.ptr, (const void *)(payload + 4 * words),
                  job->changed);
  return RF_OK;
}

extern "C" rf_status rf_gpu_delta_hash(const char *payload, int64_t bytes, uint64_t seed,
                                       uint64_t *hash) {
  *hash = 0;
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  RF_TRY(stage_ready());
  const unsigned char *level = (const unsigned char *)payload;
  int64_t len = bytes;
  for (int k = 0; len > RF_DELTA_HASH_CHUNK; k ^= 1) {
    const int64_t chunks = ceil_div(len, RF_DELTA_HASH_CHUNK);
    RF_TRY(rf_gpu_scratch_reserve(&level_buf[k], (size_t)chunks * 8));
    hash_kernel<<<blocks_of(chunks, kBlock), kBlock, 0, s>>>(level, len, seed,
                                                             (uint64_t *)level_buf[k].ptr);
    RF_CUDA(cudaGetLastError());
    level = (const unsigned char *)level_buf[k].ptr, len = chunks * 8;
  }
  if (len)
    RF_CUDA(cudaMemcpyAsync(host_stage, level, (size_t)len, cudaMemcpyDeviceToHost, s));
  RF_CUDA(cudaStreamSynchronize(s));
  *hash = XXH64(host_stage, (size_t)len, seed);
  return RF_OK;
}
