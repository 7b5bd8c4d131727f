/* delta_cuda: the mark, gather, scatter and hash of the delta encodings on device memory, the
 * same bytes as delta_host.c and delta.c write.
 *
 * The piece is cut into warp units of 1024 elements (32 mask words), eight to a block of 256
 * threads. Encoding is a stream compaction in two passes around a scan:
 *   mark    compares the versions and writes each unit's count. Pieces whose rows are dense
 *           and 16-byte aligned on both sides load 16 bytes a lane, the lanes that hold one
 *           word's elements OR their bits together by shuffles; anything else loads an element
 *           a lane and takes the word from a ballot. While the changed elements are in
 *           registers, a unit of at most 32 of them also writes their offsets and current
 *           values, in ascending order, to its slot of scratch (capture); a unit of more writes
 *           its mask words instead, which only such units need.
 *   scan    the unit counts' exclusive sum (CUB), whose last entry is the changed count; it
 *           comes back to the host, which chooses the encoding and so the payload's layout.
 *   gather  a warp takes 4 units: a captured unit copies its slot to its place in the payload,
 *           a lane an entry; any other walks only its words with bits, each word's first change
 *           from a warp scan of their counts, the lanes of its set bits reading their element
 *           and writing it, and its offset, at consecutive places, 8 words' reads in flight.
 * So encoding reads both versions once and writes the mask only where a unit holds more than 32
 * changes (the mask is 1/16 of bf16's bytes); at the fractions where sparse wins nearly every
 * change is captured, and the payload is written from the slots without reading the current
 * version again at random nor walking the mask's words. A bitmask payload gets its words from
 * the gather: copied, zero, or built from a captured unit's offsets. Applying a bitmask payload
 * runs a scan of per-tile counts (8192 elements, a block) over its mask and the same word walk;
 * a sparse one is one thread per changed element.
 *
 * The hash of a payload is its tree (delta.h), level by level until at most 4 KiB are left,
 * which come back to the host's libxxhash. XXH64 keeps four accumulators, each of which takes
 * one 8-byte word of every 32-byte stripe, independent of the others until they merge: a chunk
 * is hashed by 4 lanes, one an accumulator, and its first lane merges them and takes the tail
 * as libxxhash does. A block stages 8 chunks in shared memory with asynchronous copies of 16
 * bytes (8 where the payload is only 8-byte aligned), then one warp hashes them. Everything runs
 * on refit's stream. */
#include <cuda_pipeline.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

#include <initializer_list>
#include <type_traits>

#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>

extern "C" {
#include "delta/delta_gpu.h"
#include "memory/memory_gpu.h"
}

namespace {

constexpr int kBlock = 256;                          /* threads, one word each */
constexpr int64_t kUnitElems = 32 * 32;              /* elements per warp unit: 32 words */
constexpr int64_t kTileElems = (int64_t)kBlock * 32; /* elements per tile and block */
constexpr int kSlotEntries = 32;                     /* changes a unit's slot captures */
constexpr unsigned kFull = 0xffffffffu;

/* One side of a piece: element e (row-major over the box) at base + (r * s0 + c * s1) * es,
 * r = e / cols, c = e % cols. */
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

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The address of element e of side s of p. A piece of one row, which is what piece_of makes of
 * one dense run, needs no division (the branch is uniform); otherwise offsets are below 2^31,
 * so the division is 32-bit. */
template <int ES> __device__ __forceinline__ char *at(const piece &p, const side &s, int64_t e) {
  if (p.cols == p.n)
    return s.base + e * s.s1 * ES;
  const uint32_t r = (uint32_t)e / (uint32_t)p.cols, c = (uint32_t)e - r * (uint32_t)p.cols;
  return s.base + ((int64_t)r * s.s0 + (int64_t)c * s.s1) * ES;
}

/* The exclusive sum of v over the warp's lanes (lane 0 gets 0). U may pack several sums into
 * fields that do not overflow into each other. */
template <typename U> __device__ __forceinline__ U warp_exclusive_sum(U v, int lane) {
  U x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const U y = __shfl_up_sync(kFull, x, o);
    if (lane >= o)
      x += y;
  }
  return x - v;
}

/* ---- mark ------------------------------------------------------------------------------- */

/* A warp unit's slot of scratch: the offsets and current values of its changes, in ascending
 * order, when it has at most 32 (its count says whether it was captured). */
template <int ES> struct slot {
  int32_t *off;
  typename elem_t<ES>::type *val;
};
__host__ __device__ constexpr int64_t slot_bytes(int es) {
  return (int64_t)kSlotEntries * (4 + es);
}

template <int ES> __device__ __forceinline__ slot<ES> slot_at(char *slots, int64_t u) {
  typedef typename elem_t<ES>::type T;
  char *s = slots + u * slot_bytes(ES);
  return slot<ES>{(int32_t *)s, (T *)(s + 4 * kSlotEntries)};
}

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

/* Element i of a 16-byte vector, without indexing the registers that hold it (which would put
 * the vector in local memory). */
template <int ES> __device__ __forceinline__ typename elem_t<ES>::type vec_elem(uint4 v, int i) {
  typedef typename elem_t<ES>::type T;
  constexpr int PER = 4 / ES; /* elements a 32-bit word */
  const int w = i / PER;
  const uint32_t x = w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
  return (T)(x >> (8 * ES * (i % PER)));
}

/* The warp's unit (1024 elements, all inside the piece) 16 bytes a lane: lane L holds vectors
 * k * 32 + L, k < NV, of the unit, vector v holding elements 16 / ES * v.., so 2 * ES
 * consecutive lanes hold one word, and the unit's elements ascend by (k, lane, element of the
 * vector). Returns the unit's count, in every lane. */
template <int ES>
__device__ __forceinline__ uint32_t mark_vec(const piece &p, uint32_t *mask, slot<ES> s, int64_t w0,
                                             int lane) {
  constexpr int EPV = 16 / ES, G = 2 * ES, NV = 2 * ES; /* elements a vector, lanes a word */
  const int64_t e0 = w0 * 32;
  uint4 a[NV], b[NV];
#pragma unroll
  for (int k = 0; k < NV; k++) {
    const int64_t e = e0 + (int64_t)(k * 32 + lane) * EPV;
    a[k] = __ldg((const uint4 *)at<ES>(p, p.prev, e));
    b[k] = __ldg((const uint4 *)at<ES>(p, p.cur, e));
  }
  uint32_t vb[NV], words[NV], own = 0;
#pragma unroll
  for (int k = 0; k < NV; k++) {
    vb[k] = vec_bits<ES>(a[k], b[k]);
    own += __popc(vb[k]);
    words[k] = vb[k] << ((lane % G) * EPV);
#pragma unroll
    for (int o = 1; o < G; o <<= 1)
      words[k] |= __shfl_xor_sync(kFull, words[k], o);
  }
  const uint32_t count = __reduce_add_sync(kFull, own);
  if (mask && count > kSlotEntries && lane % G == 0)
#pragma unroll
    for (int k = 0; k < NV; k++)
      mask[w0 + (k * 32 + lane) / G] = words[k];
  if (!s.off || count == 0) /* uniform */
    return count;
  if (count > kSlotEntries)
    return count;
  /* The place of vector k's first change: the changes of vectors k' < k, then those of vector k
   * in lower lanes. With at most 32 changes every such sum fits a byte, so one scan takes the
   * NV counts at once, a byte each; multiplying the byte totals by 0x0101..00 adds to each byte
   * those below it. */
  typedef typename std::conditional<NV <= 4, uint32_t, uint64_t>::type packed;
  constexpr packed kOnes = packed(~0ull) / 0xff; /* a 1 in every byte */
  packed mine = 0;
#pragma unroll
  for (int k = 0; k < NV; k++)
    mine |= (packed)__popc(vb[k]) << (8 * k);
  packed place = warp_exclusive_sum(mine, lane);
  const packed totals = __shfl_sync(kFull, place + mine, 31);
  place += totals * (kOnes << 8);
#pragma unroll
  for (int k = 0; k < NV; k++) {
    uint32_t j = (uint32_t)(place >> (8 * k)) & 0xff;
    for (uint32_t bits = vb[k]; bits; bits &= bits - 1, j++) {
      const int i = __ffs(bits) - 1;
      s.off[j] = (int32_t)(e0 + (k * 32 + lane) * EPV + i);
      s.val[j] = vec_elem<ES>(b[k], i);
    }
  }
  return count;
}

/* The warp's unit an element a lane, for strided pieces and the piece's last partial unit:
 * word j's elements ascend by lane, so the changes so far and a ballot place each one. */
template <int ES>
__device__ __forceinline__ uint32_t mark_elems(const piece &p, uint32_t *mask, slot<ES> s,
                                               int64_t w0, int lane) {
  typedef typename elem_t<ES>::type T;
  uint32_t count = 0, mine = 0;
  for (int j = 0; j < 32; j++) {
    const int64_t e = (w0 + j) * 32 + lane;
    bool changed = false;
    T c = 0;
    if (e < p.n) {
      c = __ldg((const T *)at<ES>(p, p.cur, e));
      changed = __ldg((const T *)at<ES>(p, p.prev, e)) != c;
    }
    const uint32_t bits = __ballot_sync(kFull, changed);
    if (lane == j)
      mine = bits;
    const uint32_t place = count + __popc(bits & ((1u << lane) - 1));
    if (s.off && changed && place < kSlotEntries)
      s.off[place] = (int32_t)e, s.val[place] = c;
    count += __popc(bits);
  }
  if (mask && count > kSlotEntries)
    mask[w0 + lane] = mine;
  return count;
}

/* Each warp marks a unit and writes its count; slots is NULL when only the count is wanted (and
 * then mask too). Only a unit that its slot cannot capture writes its mask words: the gather
 * walks those, and rebuilds the others' words from their slots where a bitmask payload wants
 * them, so that sparse changes cost no mask traffic (1/16 of a bf16 piece's bytes). */
template <int ES>
__global__ void __launch_bounds__(kBlock)
    mark_kernel(piece p, uint32_t *mask, char *slots, uint32_t *counts) {
  const int lane = (int)threadIdx.x % 32;
  const int64_t u = ((int64_t)blockIdx.x * kBlock + threadIdx.x) / 32, w0 = u * 32;
  if (w0 * 32 >= p.n)
    return;
  const slot<ES> s = slots ? slot_at<ES>(slots, u) : slot<ES>{NULL, NULL};
  const uint32_t count = p.vec && w0 * 32 + kUnitElems <= p.n
                             ? mark_vec<ES>(p, mask, s, w0, lane)
                             : mark_elems<ES>(p, mask, s, w0, lane);
  if (lane == 0)
    counts[u] = count;
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

/* Walks the set bits of the warp's 32 words (lane L holds `word`, number w_warp + L, whose
 * first change is number `first`): only the words with bits, each shuffled to every lane, whose
 * set bits' lanes take v = load(element, its number among the changes) and then store(element,
 * number, v). The loads of up to 8 words go out before their stores, so that a warp waits for
 * memory once per 8 words rather than once per word. */
template <typename T, typename Load, typename Store>
__device__ __forceinline__ void walk_words(uint32_t word, uint32_t first, int64_t w_warp, int lane,
                                           Load load, Store store) {
  constexpr int kBatch = 8;
  for (uint32_t busy = __ballot_sync(kFull, word != 0); busy;) {
    int64_t e[kBatch];
    uint32_t k[kBatch];
    bool mine[kBatch];
    T v[kBatch];
#pragma unroll
    for (int t = 0; t < kBatch; t++) {
      mine[t] = false, e[t] = 0, k[t] = 0, v[t] = 0;
      if (busy) { /* uniform */
        const int j = __ffs(busy) - 1;
        busy &= busy - 1;
        const uint32_t bits = __shfl_sync(kFull, word, j), k0 = __shfl_sync(kFull, first, j);
        mine[t] = bits >> lane & 1;
        e[t] = (w_warp + j) * 32 + lane;
        k[t] = k0 + __popc(bits & ((1u << lane) - 1));
        if (mine[t])
          v[t] = load(e[t], k[t]);
      }
    }
#pragma unroll
    for (int t = 0; t < kBatch; t++)
      if (mine[t])
        store(e[t], k[t], v[t]);
  }
}

/* Each warp gathers kGatherUnits units: their firsts in one load, then their slots' entries all at
 * once (a unit of at most 32 changes was captured; only its entries are read), so that the warp
 * waits for memory twice for them all; a captured unit's lanes write its entries, any other walks
 * its words. A bitmask payload's words (mask_out) are the mark's for a unit not captured, zero for
 * a unit without changes, and for a captured one each lane's word from the slot's offsets. Eight
 * units a warp encoded 1 % of changes faster on an H100 (0.818 of encode's limit against 0.809)
 * and half of the elements changed slower (0.271 against 0.309), as their units walk words. */
constexpr int kGatherUnits = 4;

template <int ES>
__global__ void __launch_bounds__(kBlock)
    gather_kernel(piece p, const uint32_t *mask, char *slots, const uint32_t *unit_first,
                  uint32_t *mask_out, int32_t *offsets, void *values) {
  typedef typename elem_t<ES>::type T;
  const int lane = (int)threadIdx.x % 32;
  const int64_t units = ceil_div(p.n, kUnitElems), words = (p.n + 31) / 32;
  const int64_t u0 = ((int64_t)blockIdx.x * kBlock + threadIdx.x) / 32 * kGatherUnits;
  if (u0 >= units)
    return;
  /* Lane i holds the first of unit u0 + i, up to the one after the warp's last unit. */
  const uint32_t firsts = lane <= kGatherUnits && u0 + lane <= units ? unit_first[u0 + lane] : 0;
  uint32_t first[kGatherUnits], count[kGatherUnits];
  int32_t off[kGatherUnits];
  T val[kGatherUnits];
#pragma unroll
  for (int i = 0; i < kGatherUnits; i++) {
    first[i] = __shfl_sync(kFull, firsts, i);
    count[i] = u0 + i < units ? __shfl_sync(kFull, firsts, i + 1) - first[i] : 0;
    off[i] = -1, val[i] = 0;
    if (count[i] && count[i] <= kSlotEntries && lane < (int)count[i]) {
      const slot<ES> s = slot_at<ES>(slots, u0 + i);
      off[i] = s.off[lane], val[i] = s.val[lane];
    }
  }
  auto put = [&](int64_t e, uint32_t k, T v) {
    ((T *)values)[k] = v;
    if (offsets)
      offsets[k] = (int32_t)e;
  };
#pragma unroll
  for (int i = 0; i < kGatherUnits; i++) {
    const int64_t w = (u0 + i) * 32 + lane;
    if (!count[i]) {
      if (mask_out && w < words)
        mask_out[w] = 0;
      continue;
    }
    if (count[i] <= kSlotEntries) { /* captured */
      if (mask_out) {
        uint32_t bits = 0;
        for (uint32_t j = 0; j < count[i]; j++) { /* uniform */
          const int32_t e = __shfl_sync(kFull, off[i], (int)j);
          if ((int64_t)(e >> 5) == w)
            bits |= 1u << (e & 31);
        }
        if (w < words)
          mask_out[w] = bits;
      }
      if (lane < (int)count[i])
        put(off[i], first[i] + lane, val[i]);
      continue;
    }
    const uint32_t word = w < words ? mask[w] : 0;
    if (mask_out && w < words)
      mask_out[w] = word;
    walk_words<T>(
        word, first[i] + warp_exclusive_sum((uint32_t)__popc(word), lane), (u0 + i) * 32, lane,
        [&](int64_t e, uint32_t) { return __ldg((const T *)at<ES>(p, p.cur, e)); }, put);
  }
}

template <int ES>
__global__ void __launch_bounds__(kBlock)
    scatter_bitmask_kernel(piece p, const uint32_t *mask, const uint32_t *tile_first,
                           const void *values, int64_t changed) {
  typedef typename elem_t<ES>::type T;
  typedef cub::BlockScan<uint32_t, kBlock> scan;
  __shared__ typename scan::TempStorage tmp;
  const int64_t w = (int64_t)blockIdx.x * kBlock + threadIdx.x;
  const uint32_t word = w < (p.n + 31) / 32 ? mask[w] : 0;
  uint32_t first = 0;
  scan(tmp).ExclusiveSum((uint32_t)__popc(word), first);
  const int lane = (int)threadIdx.x % 32;
  /* The hash vouched for the mask; the checks only guard memory. */
  walk_words<T>(
      word, first + tile_first[blockIdx.x], w - lane, lane,
      [&](int64_t, uint32_t k) { return k < changed ? ((const T *)values)[k] : (T)0; },
      [&](int64_t e, uint32_t k, T v) {
        if (e < p.n && k < changed)
          *(T *)at<ES>(p, p.cur, e) = v;
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
    *(T *)at<ES>(p, p.cur, e) = ((const T *)values)[k];
}

/* ---- the hash --------------------------------------------------------------------------- */

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL, kP2 = 0xC2B2AE3D27D4EB4FULL,
                   kP3 = 0x165667B19E3779F9ULL, kP4 = 0x85EBCA77C2B2AE63ULL,
                   kP5 = 0x27D4EB2F165667C5ULL;

constexpr int kChunk = RF_DELTA_HASH_CHUNK;
constexpr int kHashThreads = 128; /* that stage a block's chunks */
constexpr int kHashChunks = 8;    /* a block's chunks: 4 lanes each, one warp */
/* Chunks 32 bytes apart in the banks: the 4 lanes of a chunk read 32 bytes of a stripe, so 4
 * chunks' stripes fill the 128 bytes of the banks without a conflict. */
constexpr int kChunkPitch = kChunk + 32;

__device__ __forceinline__ uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
__device__ __forceinline__ uint64_t xxh_round(uint64_t acc, uint64_t in) {
  return rotl64(acc + in * kP2, 31) * kP1;
}
__device__ __forceinline__ uint64_t xxh_merge(uint64_t acc, uint64_t v) {
  return (acc ^ xxh_round(0, v)) * kP1 + kP4;
}

/* XXH64 of len bytes at p (8-byte aligned), as libxxhash finishes it, from the accumulators
 * v1..v4 that took its len / 32 whole stripes: their merge (or, under 32 bytes, none), the
 * length, the tail and the avalanche. */
__device__ uint64_t xxh64_end(const unsigned char *p, int len, uint64_t v1, uint64_t v2,
                              uint64_t v3, uint64_t v4, uint64_t seed) {
  const unsigned char *end = p + len;
  uint64_t h;
  if (len >= 32) {
    h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
    h = xxh_merge(xxh_merge(xxh_merge(xxh_merge(h, v1), v2), v3), v4);
  } else {
    h = seed + kP5;
  }
  h += (uint64_t)len;
  for (p += len / 32 * 32; p + 8 <= end; p += 8)
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

/* Byte `at` of a block's span in its staged chunks. */
__device__ __forceinline__ unsigned char *staged(unsigned char *stage, int at) {
  return stage + at / kChunk * kChunkPitch + at % kChunk;
}

/* Copies the span bytes at src into the block's staged chunks: W bytes a copy (src is W-byte
 * aligned), asynchronous, so that a thread's copies are all in flight at once; the bytes after
 * the last whole W one at a time. Every thread must wait before the block reads the stage. */
template <int W>
__device__ __forceinline__ void stage_chunks(unsigned char *stage, const unsigned char *src,
                                             int span) {
  const int whole = span / W * W;
  for (int at = (int)threadIdx.x * W; at < whole; at += kHashThreads * W)
    __pipeline_memcpy_async(staged(stage, at), src + at, W);
  __pipeline_commit();
  const int at = whole + (int)threadIdx.x;
  if (at < span)
    *staged(stage, at) = src[at];
  __pipeline_wait_prior(0);
}

/* The XXH64 of each chunk of len bytes at in into out[chunk]: a block's 8 chunks staged by all
 * its threads, then hashed by its first warp, lanes 4c..4c+3 for chunk c, lane 4c + a taking
 * word a of every whole stripe; those of a shorter last chunk are fewer, and one of under 32
 * bytes has none. */
__global__ void __launch_bounds__(kHashThreads)
    hash_kernel(const unsigned char *in, int64_t len, uint64_t seed, uint64_t *out) {
  __shared__ __align__(16) unsigned char stage[kHashChunks * kChunkPitch];
  const int64_t c0 = (int64_t)blockIdx.x * kHashChunks, base = c0 * kChunk;
  const int span = (int)min(len - base, (int64_t)kHashChunks * kChunk);
  if ((uintptr_t)in % 16 == 0)
    stage_chunks<16>(stage, in + base, span);
  else
    stage_chunks<8>(stage, in + base, span);
  __syncthreads();
  if (threadIdx.x >= 32)
    return;
  const int lane = (int)threadIdx.x, c = lane / 4, a = lane % 4;
  const int clen = max(0, min(kChunk, span - c * kChunk)), stripes = clen / 32;
  const unsigned char *q = stage + c * kChunkPitch;
  uint64_t v = seed + (a == 0 ? kP1 + kP2 : a == 1 ? kP2 : a == 2 ? 0 : 0 - kP1);
#pragma unroll 8
  for (int i = 0; i < stripes; i++)
    v = xxh_round(v, *(const uint64_t *)(q + 32 * i + 8 * a));
  const uint64_t v2 = __shfl_down_sync(kFull, v, 1), v3 = __shfl_down_sync(kFull, v, 2),
                 v4 = __shfl_down_sync(kFull, v, 3);
  if (a == 0 && clen > 0)
    out[c0 + c] = xxh64_end(q, clen, v, v2, v3, v4, seed);
}

/* ---- host side -------------------------------------------------------------------------- */

int blocks_of(int64_t units, int64_t per) { return (int)ceil_div(units, per); }

/* Device scratch, grown only, as verify_cuda.cu keeps its own: the mark's words and its units'
 * slots, the unit (or tile) counts and their scan, CUB's work space, two levels of the hash
 * tree. Not counted by rf_mem_stats: it is not a transfer buffer. Small results come back
 * through pinned memory. */
rf_gpu_scratch mask_buf, slots_buf, counts_buf, first_buf, cub_buf, level_buf[2];
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

/* Room for `entries` counts and their scan, which has one entry more. */
rf_status counts_ready(int64_t entries) {
  RF_TRY(rf_gpu_scratch_reserve(&counts_buf, (size_t)(entries + 1) * sizeof(uint32_t)));
  return rf_gpu_scratch_reserve(&first_buf, (size_t)(entries + 1) * sizeof(uint32_t));
}

/* The exclusive scan of `entries` counts into first_buf, whose entry [entries] is their sum;
 * returns the sum, waiting for it. */
rf_status scan_counts(int64_t entries, cudaStream_t s, int64_t *total) {
  uint32_t *counts = (uint32_t *)counts_buf.ptr, *first = (uint32_t *)first_buf.ptr;
  RF_CUDA(cudaMemsetAsync(counts + entries, 0, sizeof *counts, s));
  size_t need = 0;
  RF_CUDA(cub::DeviceScan::ExclusiveSum(NULL, need, counts, first, (int)entries + 1, s));
  RF_TRY(rf_gpu_scratch_reserve(&cub_buf, need));
  need = cub_buf.cap;
  RF_CUDA(cub::DeviceScan::ExclusiveSum(cub_buf.ptr, need, counts, first, (int)entries + 1, s));
  RF_TRY(stage_ready());
  RF_CUDA(cudaMemcpyAsync(host_stage, first + entries, sizeof *first, cudaMemcpyDeviceToHost, s));
  RF_CUDA(cudaStreamSynchronize(s));
  uint32_t sum;
  memcpy(&sum, host_stage, sizeof sum);
  *total = sum;
  return RF_OK;
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
  const int64_t units = ceil_div(job->n, kUnitElems);
  RF_TRY(counts_ready(units));
  uint32_t *mask = NULL;
  char *slots = NULL;
  if (keep) {
    RF_TRY(rf_gpu_scratch_reserve(&mask_buf, (size_t)units * 32 * sizeof(uint32_t)));
    RF_TRY(rf_gpu_scratch_reserve(&slots_buf, (size_t)(units * slot_bytes(job->esize))));
    mask = (uint32_t *)mask_buf.ptr, slots = (char *)slots_buf.ptr;
  }
  const piece p = piece_of(job);
  RF_DELTA_LAUNCH(mark_kernel, blocks_of(job->n, kTileElems), s, p, mask, slots,
                  (uint32_t *)counts_buf.ptr);
  RF_TRY(scan_counts(units, s, changed));
  job->mask = mask;
  return RF_OK;
}

extern "C" rf_status rf_gpu_delta_gather(const rf_delta_job *job, char *mask_out, char *offsets,
                                         char *values) {
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  const int64_t words = rf_delta_mask_words(job->n);
  if (job->changed == 0) {
    if (mask_out && words)
      RF_CUDA(cudaMemsetAsync(mask_out, 0, (size_t)words * 4, s));
    return RF_OK;
  }
  const piece p = piece_of(job);
  const int64_t warps = ceil_div(ceil_div(job->n, kUnitElems), kGatherUnits);
  RF_DELTA_LAUNCH(gather_kernel, blocks_of(warps, kBlock / 32), s, p, (const uint32_t *)job->mask,
                  (char *)slots_buf.ptr, (const uint32_t *)first_buf.ptr, (uint32_t *)mask_out,
                  (int32_t *)offsets, (void *)values);
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
  const int64_t words = rf_delta_mask_words(job->n), tiles = ceil_div(job->n, kTileElems);
  int64_t total = 0;
  RF_TRY(counts_ready(tiles));
  count_kernel<<<(int)tiles, kBlock, 0, s>>>((const uint32_t *)payload, words,
                                             (uint32_t *)counts_buf.ptr);
  RF_CUDA(cudaGetLastError());
  RF_TRY(scan_counts(tiles, s, &total));
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
    hash_kernel<<<blocks_of(chunks, kHashChunks), kHashThreads, 0, s>>>(
        level, len, seed, (uint64_t *)level_buf[k].ptr);
    RF_CUDA(cudaGetLastError());
    level = (const unsigned char *)level_buf[k].ptr, len = chunks * 8;
  }
  if (len)
    RF_CUDA(cudaMemcpyAsync(host_stage, level, (size_t)len, cudaMemcpyDeviceToHost, s));
  RF_CUDA(cudaStreamSynchronize(s));
  *hash = XXH64(host_stage, (size_t)len, seed);
  return RF_OK;
}
