/* region_cuda: rf_copy_boxes on device memory, a whole batch of box copies per launch.
 *
 * The host turns each copy into a piece (the walk of region_walk.h, the same one the CPU copy
 * takes), sorts the pieces into classes (below) and numbers each class's work units
 * consecutively; one upload of the piece table follows, then one launch per class present
 * (one for an ordinary pack or unpack). A block takes one unit and finds its piece by binary
 * search over the pieces' first units. The kinds of piece:
 *
 *   run    a fully dense box on both sides, 16-byte aligned (q, k, v into a fused qkv slot at
 *          tp=1, or back): one run of 16-byte accesses, no line arithmetic at all.
 *   lines  both sides dense along the walk's lines (row-major to row-major or fused slot):
 *          rows of bytes with a pitch on each side, moved in the widest access (16, 8, 4, 2 or
 *          1 bytes) that every address and pitch allows.
 *          For both, a unit is 8192 accesses (128 KiB at 16 bytes): each thread keeps 8 loads
 *          in flight, four times over.
 *   pairs  the bf16 transpose (a --trainer-order jax source, dense along the walk's outer
 *          dimension, into a destination dense along its inner one), when every word is
 *          aligned: 64 x 128 tiles through shared memory, element pairs moved as 4-byte words
 *          on both sides. A box cut at an odd row first has that row peeled off
 *          (peel_transpose), so that the rest qualifies.
 *   tiles  anything else with 1-, 2- or 4-byte elements: 64 x 64 element tiles through shared
 *          memory, read along whichever tile dimension the source is denser in and written
 *          along the destination's, so both sides are coalesced. Tile rows are padded to an
 *          odd number of words, so reading a tile column hits 32 different banks.
 *   elems  strided copies of other element sizes: element by element, byte by byte. Correct,
 *          not fast; refit's dtypes never take it.
 * Measured on an H200 (bench/gpu_kernels.c, 4 GiB of Llama-3.1-8B q/k/v/gate/up in bf16):
 * pack into fused slots, unpack, the JAX transpose and half-width rows all run at 0.93-0.95
 * of a device-to-device cudaMemcpyAsync of the same bytes.
 *
 * Dense runs can instead go to the copy engines (--copy, rf_copy_path): cudaMemcpyAsync calls
 * spread over a few streams forked from refit's stream and joined back into it, so that to
 * the rest of refit the batch is still queued on one stream. Whole-tensor copies on one
 * stream reach 0.89 of one contiguous copy on an H200, on four 0.98 (the engines overlap each
 * other's ramps), where the best simple kernel stays at 0.93; a one-process refit measured
 * the same gain (0.94 of a device copy with kernels, 1.00 under --copy auto). Copies through
 * another process's mapping measured the other way (0.84 with kernels, 0.78 on the engines),
 * and auto left those (`mapped`) to kernels. The cost was then traced to the exported
 * allocation's size, not to the mapping: an arena that is not a multiple of 2 MiB is read at
 * 0.78-0.84 through another process's cudaIpc mapping, one rounded up to 2 MiB at full speed,
 * and then the engines win there too (results/h200/README.md). refit rounds every device
 * allocation up to 2 MiB (memory_cuda.c), so auto takes the engines through mappings as well,
 * and kernels there only when REFIT_DEVICE_ALLOC_ROUND turns the rounding off.
 * Strided boxes take cudaMemcpy2DAsync only under --copy engine, and transposes always take
 * kernels.
 *
 * The piece table lives in a ring of pinned host buffers and matching device buffers, grown
 * only when a batch is larger than any before. An event per slot says when the kernels that
 * read it are done; the host waits for it only when it comes round to the slot again, so
 * queuing a copy never waits for earlier work on the stream. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "memory/memory_gpu.h"
#include "memory/region_walk.h"
}

namespace {

constexpr int kBlock = 256;
constexpr int kLinesUnroll = 8, kLinesRounds = 4;
constexpr int64_t kLinesUnit = (int64_t)kBlock * kLinesUnroll * kLinesRounds; /* accesses */
constexpr int kTile = 64, kTilesPerUnit = 4;
constexpr int kPairsO = 128;                       /* copy_pairs' tile extent along o: 64 or 128 */
constexpr int kTileElems = kTile * kTile / kBlock; /* elements per thread per tile */
constexpr int64_t kElemsUnit = (int64_t)kBlock * 16;
constexpr int kRing = 4;

/* The kernel instances: one per kind of piece and access width. Each launch runs the pieces
 * of one class, so each instance holds only the registers its own loop needs (ptxas
 * predicates the branches of a single kernel together and pays for all of them at once). A
 * batch costs one launch per class present: one for an ordinary pack or unpack. */
enum {
  CLS_RUN16,
  CLS_LINES16,
  CLS_LINES8,
  CLS_LINES4,
  CLS_LINES2,
  CLS_LINES1,
  CLS_PAIRS2,
  CLS_TILES4,
  CLS_TILES2,
  CLS_TILES1,
  CLS_ELEMS,
  CLS_COUNT
};

struct piece {
  char *dst;
  const char *src;
  int64_t n_out, n_in;              /* lines: lines and accesses per line; others: elements */
  int64_t d_out, s_out;             /* lines: byte pitches; others: element strides between lines */
  int64_t d_in, s_in;               /* tiles and elems: element strides along a line */
  int64_t unit_begin;               /* this piece's first unit among the pieces of its class */
  int64_t tiles_in;                 /* tiles: tiles across a line */
  int32_t cls, width;               /* width: bytes per access (lines) or per element */
  int32_t src_along_o, dst_along_o; /* tiles: warps run along the outer dimension */
};

/* ---- device side ------------------------------------------------------------------------ */

/* Splits a unit-relative access number into line and offset. The unit's own start is divided
 * once per unit; per access only a 32-bit division remains, or none for a single line. */
__device__ __forceinline__ void locate(int64_t n_out, int64_t n_in, int64_t line0, int64_t rem0,
                                       uint32_t local, int64_t *line, int64_t *off) {
  uint64_t pos = (uint64_t)rem0 + local;
  if (n_out == 1) {
    *line = 0, *off = (int64_t)pos;
  } else if (n_in <= INT32_MAX) {
    uint32_t q = (uint32_t)pos / (uint32_t)n_in;
    *line = line0 + q, *off = (int64_t)(pos - (uint64_t)q * (uint64_t)n_in);
  } else {
    *line = line0 + (int64_t)(pos / (uint64_t)n_in), *off = (int64_t)(pos % (uint64_t)n_in);
  }
}

/* A piece that is one dense run of 16-byte accesses (n_out == 1), the common pack and unpack:
 * no line arithmetic at all, so fewer registers per thread and more blocks, hence more loads,
 * in flight per multiprocessor. Its own class: in one kernel with copy_lines, ptxas would give
 * it copy_lines' registers. */
template <typename V> __device__ __forceinline__ void copy_run(const piece &pc, int64_t unit) {
  const int64_t v0 = unit * kLinesUnit + threadIdx.x;
  const V *src = (const V *)pc.src + v0;
  V *dst = (V *)pc.dst + v0;
  const int64_t left = pc.n_in - v0;
#pragma unroll
  for (int r = 0; r < kLinesRounds; r++) {
    V buf[kLinesUnroll];
#pragma unroll
    for (int j = 0; j < kLinesUnroll; j++) {
      const int k = (r * kLinesUnroll + j) * kBlock;
      if (k < left)
        buf[j] = __ldg(src + k);
    }
#pragma unroll
    for (int j = 0; j < kLinesUnroll; j++) {
      const int k = (r * kLinesUnroll + j) * kBlock;
      if (k < left)
        dst[k] = buf[j];
    }
  }
}

template <typename V> __device__ __forceinline__ void copy_lines(const piece &pc, int64_t unit) {
  const int64_t total = pc.n_out * pc.n_in;
  const int64_t v0 = unit * kLinesUnit;
  int64_t line0 = 0, rem0 = v0;
  if (pc.n_out > 1)
    line0 = v0 / pc.n_in, rem0 = v0 - line0 * pc.n_in;
#pragma unroll
  for (int r = 0; r < kLinesRounds; r++) {
    V buf[kLinesUnroll];
    int64_t doff[kLinesUnroll];
    unsigned live = 0;
#pragma unroll
    for (int j = 0; j < kLinesUnroll; j++) {
      uint32_t local = (uint32_t)((r * kLinesUnroll + j) * kBlock) + threadIdx.x;
      if (v0 + (int64_t)local < total) {
        int64_t line, off;
        locate(pc.n_out, pc.n_in, line0, rem0, local, &line, &off);
        buf[j] = __ldg((const V *)(pc.src + line * pc.s_out) + off);
        doff[j] = line * pc.d_out + off * (int64_t)sizeof(V);
        live |= 1u << j;
      }
    }
#pragma unroll
    for (int j = 0; j < kLinesUnroll; j++)
      if (live & (1u << j))
        *(V *)(pc.dst + doff[j]) = buf[j];
  }
}

/* Tile rows padded to an odd number of 4-byte words (see the file comment). */
template <typename T> struct tile_pitch;
template <> struct tile_pitch<uint8_t> { static constexpr int value = 68; };
template <> struct tile_pitch<uint16_t> { static constexpr int value = 66; };
template <> struct tile_pitch<uint32_t> { static constexpr int value = 65; };

/* Which elements of a 64 x 64 tile a thread moves: its k-th (k < kTileElems) is at
 * (o + k * do_, i + k * di). Consecutive threads take consecutive positions along o (along_o)
 * or along i, and k steps the other way by kBlock / 64 = 4, so that every address is the
 * previous one plus a constant. */
struct tile_walk {
  int o, i, do_, di;
};

__device__ __forceinline__ tile_walk tile_walk_of(int along_o) {
  constexpr int rows = kBlock / kTile;
  int a = (int)threadIdx.x % kTile, b = (int)threadIdx.x / kTile;
  return along_o ? tile_walk{a, b, 0, rows} : tile_walk{b, a, rows, 0};
}

template <typename T>
__device__ __forceinline__ void copy_tiles(const piece &pc, int64_t unit, T *tile) {
  constexpr int P = tile_pitch<T>::value;
  const int64_t i0 = (unit % pc.tiles_in) * kTile;
  const int64_t group = unit / pc.tiles_in;
  const int ni = (int)min((int64_t)kTile, pc.n_in - i0);
  const tile_walk rd = tile_walk_of(pc.src_along_o), wr = tile_walk_of(pc.dst_along_o);
  const int64_t rd_step = rd.do_ * pc.s_out + rd.di * pc.s_in;
  const int64_t wr_step = wr.do_ * pc.d_out + wr.di * pc.d_in;
  for (int t = 0; t < kTilesPerUnit; t++) {
    const int64_t o0 = (group * kTilesPerUnit + t) * kTile;
    if (o0 >= pc.n_out)
      break; /* the same for the whole block */
    const int no = (int)min((int64_t)kTile, pc.n_out - o0);
    const T *s = (const T *)pc.src + (o0 + rd.o) * pc.s_out + (i0 + rd.i) * pc.s_in;
    T v[kTileElems];
#pragma unroll
    for (int k = 0; k < kTileElems; k++)
      v[k] = rd.o + k * rd.do_ < no && rd.i + k * rd.di < ni ? __ldg(s + k * rd_step) : T(0);
    __syncthreads(); /* the previous tile's readers are done with shared memory */
#pragma unroll
    for (int k = 0; k < kTileElems; k++)
      tile[(rd.i + k * rd.di) * P + rd.o + k * rd.do_] = v[k];
    __syncthreads();
    T *d = (T *)pc.dst + (o0 + wr.o) * pc.d_out + (i0 + wr.i) * pc.d_in;
#pragma unroll
    for (int k = 0; k < kTileElems; k++)
      if (wr.o + k * wr.do_ < no && wr.i + k * wr.di < ni)
        d[k * wr_step] = tile[(wr.i + k * wr.di) * P + wr.o + k * wr.do_];
  }
}

/* The transpose of 2-byte elements (a bf16 JAX shard: source dense along o, destination along
 * i) with 4-byte accesses on both sides: a lane reads elements (o, o + 1) of a source column
 * as one word and writes (i, i + 1) of a destination row as one word, so a warp moves 128
 * bytes per instruction instead of 64. The planner picks it only where every such word is
 * aligned and the box has even extents. Rows of an odd number of halves keep both the stores and
 * the column-wise loads of a warp on 32 different banks. */
__device__ __forceinline__ void copy_pairs(const piece &pc, int64_t unit, uint16_t *tile) {
  constexpr int TO = kPairsO, P = TO + 1, rows = kBlock / 32, steps = kTile / rows;
  constexpr int halves = TO / 64; /* a warp reads 64 elements of a source column at a time */
  const int lane = (int)threadIdx.x % 32, row = (int)threadIdx.x / 32;
  const int64_t i0 = (unit % pc.tiles_in) * kTile;
  const int64_t group = unit / pc.tiles_in;
  const int ni = (int)min((int64_t)kTile, pc.n_in - i0);
  for (int t = 0; t < kTilesPerUnit * 64 / TO; t++) {
    const int64_t o0 = (group * kTilesPerUnit * 64 / TO + t) * TO;
    if (o0 >= pc.n_out)
      break; /* the same for the whole block */
    const int no = (int)min((int64_t)TO, pc.n_out - o0);
    const uint16_t *s = (const uint16_t *)pc.src + o0 + 2 * lane + (i0 + row) * pc.s_in;
    uint32_t v[steps][halves];
#pragma unroll
    for (int k = 0; k < steps; k++)
#pragma unroll
      for (int h = 0; h < halves; h++)
        v[k][h] = 64 * h + 2 * lane < no && row + k * rows < ni
                      ? __ldg((const unsigned int *)(s + 64 * h + k * rows * pc.s_in))
                      : 0u;
    __syncthreads(); /* the previous tile's readers are done with shared memory */
#pragma unroll
    for (int k = 0; k < steps; k++)
#pragma unroll
      for (int h = 0; h < halves; h++) {
        uint16_t *at = tile + (row + k * rows) * P + 64 * h + 2 * lane;
        at[0] = (uint16_t)v[k][h], at[1] = (uint16_t)(v[k][h] >> 16);
      }
    __syncthreads();
    uint16_t *d = (uint16_t *)pc.dst + (o0 + row) * pc.d_out + i0 + 2 * lane;
#pragma unroll
    for (int k = 0; k < TO / rows; k++) {
      const int o = row + k * rows;
      if (o < no && 2 * lane < ni)
        *(uint32_t *)(d + k * rows * pc.d_out) =
            tile[2 * lane * P + o] | (uint32_t)tile[(2 * lane + 1) * P + o] << 16;
    }
  }
}

__device__ void copy_elems(const piece &pc, int64_t unit) {
  const int64_t total = pc.n_out * pc.n_in, es = pc.width;
  for (int k = 0; k < 16; k++) {
    int64_t e = unit * kElemsUnit + k * kBlock + threadIdx.x;
    if (e >= total)
      break;
    int64_t o = e / pc.n_in, i = e % pc.n_in;
    const char *s = pc.src + (o * pc.s_out + i * pc.s_in) * es;
    char *d = pc.dst + (o * pc.d_out + i * pc.d_in) * es;
    for (int64_t b = 0; b < es; b++)
      d[b] = s[b];
  }
}

__host__ __device__ constexpr int smem_bytes(int cls) {
  return cls == CLS_TILES4   ? kTile * tile_pitch<uint32_t>::value * 4
         : cls == CLS_TILES2 ? kTile * tile_pitch<uint16_t>::value * 2
         : cls == CLS_PAIRS2 ? kTile * (kPairsO + 1) * 2
         : cls == CLS_TILES1 ? kTile * tile_pitch<uint8_t>::value
                             : 16;
}

template <int CLS>
__global__ void __launch_bounds__(kBlock)
    copy_kernel(const piece *__restrict__ pieces, int count, int64_t units) {
  __shared__ __align__(16) unsigned char smem[smem_bytes(CLS)];
  int p = 0;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    /* The last piece whose first unit is <= u; units only grow, so search from the last one. */
    int lo = p, hi = count - 1;
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (pieces[mid].unit_begin <= u)
        lo = mid;
      else
        hi = mid - 1;
    }
    p = lo;
    const piece pc = pieces[p];
    const int64_t unit = u - pc.unit_begin;
    if constexpr (CLS == CLS_RUN16)
      copy_run<uint4>(pc, unit);
    if constexpr (CLS == CLS_LINES16)
      copy_lines<uint4>(pc, unit);
    if constexpr (CLS == CLS_LINES8)
      copy_lines<uint2>(pc, unit);
    if constexpr (CLS == CLS_LINES4)
      copy_lines<unsigned int>(pc, unit);
    if constexpr (CLS == CLS_LINES2)
      copy_lines<unsigned short>(pc, unit);
    if constexpr (CLS == CLS_LINES1)
      copy_lines<unsigned char>(pc, unit);
    if constexpr (CLS == CLS_PAIRS2)
      copy_pairs(pc, unit, (uint16_t *)smem);
    if constexpr (CLS == CLS_TILES4)
      copy_tiles<uint32_t>(pc, unit, (uint32_t *)smem);
    if constexpr (CLS == CLS_TILES2)
      copy_tiles<uint16_t>(pc, unit, (uint16_t *)smem);
    if constexpr (CLS == CLS_TILES1)
      copy_tiles<uint8_t>(pc, unit, (uint8_t *)smem);
    if constexpr (CLS == CLS_ELEMS)
      copy_elems(pc, unit);
  }
}

/* ---- host side: planning ---------------------------------------------------------------- */

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t abs64(int64_t a) { return a < 0 ? -a : a; }

/* Fills *pc for one copy and returns its number of units (0 for an empty box). */
int64_t plan_piece(const rf_box_copy *c, piece *pc) {
  rf_copy_walk cw = rf_copy_walk_of(&c->dst, &c->src, &c->box);
  if (cw.n_out == 0)
    return 0;
  const int64_t es = c->src.esize;
  memset(pc, 0, sizeof *pc);
  pc->dst = cw.dst, pc->src = cw.src;
  if (cw.d_in == 1 && cw.s_in == 1) {
    int64_t lines = cw.n_out, bytes = cw.n_in * es, dp = cw.d_out * es, sp = cw.s_out * es;
    if (lines == 1 || (cw.d_out == cw.n_in && cw.s_out == cw.n_in))
      bytes *= lines, lines = 1, dp = sp = bytes;
    uint64_t bits = (uint64_t)(uintptr_t)cw.dst | (uint64_t)(uintptr_t)cw.src | (uint64_t)bytes;
    if (lines > 1)
      bits |= (uint64_t)dp | (uint64_t)sp;
    int width = 16;
    while (width > 1 && bits % (uint64_t)width != 0)
      width /= 2;
    pc->cls = width == 16  ? (lines == 1 ? CLS_RUN16 : CLS_LINES16)
              : width == 8 ? CLS_LINES8
              : width == 4 ? CLS_LINES4
              : width == 2 ? CLS_LINES2
                           : CLS_LINES1;
    pc->width = width;
    pc->n_out = lines, pc->n_in = bytes / width, pc->d_out = dp, pc->s_out = sp;
    return ceil_div(lines * pc->n_in, kLinesUnit);
  }
  pc->n_out = cw.n_out, pc->n_in = cw.n_in;
  pc->d_out = cw.d_out, pc->d_in = cw.d_in, pc->s_out = cw.s_out, pc->s_in = cw.s_in;
  pc->width = (int32_t)es;
  if (es == 1 || es == 2 || es == 4) {
    pc->cls = es == 4 ? CLS_TILES4 : es == 2 ? CLS_TILES2 : CLS_TILES1;
    pc->tiles_in = ceil_div(cw.n_in, kTile);
    pc->src_along_o = abs64(cw.s_out) < abs64(cw.s_in);
    pc->dst_along_o = abs64(cw.d_out) < abs64(cw.d_in);
    uint64_t words = (uint64_t)(uintptr_t)cw.src | (uint64_t)(uintptr_t)cw.dst |
                     (uint64_t)(cw.s_in * es) | (uint64_t)(cw.d_out * es);
    if (es == 2 && cw.s_out == 1 && cw.d_in == 1 && words % 4 == 0 && cw.n_out % 2 == 0 &&
        cw.n_in % 2 == 0)
      pc->cls = CLS_PAIRS2;
    return pc->tiles_in * ceil_div(cw.n_out, (int64_t)kTile * kTilesPerUnit);
  }
  pc->cls = CLS_ELEMS;
  return ceil_div(cw.n_out * cw.n_in, kElemsUnit);
}

struct slot {
  piece *host, *dev;
  int cap;
  cudaEvent_t done;
  int pending;
};
slot ring[kRing];
int ring_next;

rf_status slot_reserve(slot *sl, int count) {
  if (sl->pending) {
    RF_CUDA(cudaEventSynchronize(sl->done));
    sl->pending = 0;
  }
  if (!sl->done)
    RF_CUDA(cudaEventCreateWithFlags(&sl->done, cudaEventDisableTiming));
  if (sl->cap >= count)
    return RF_OK;
  int cap = count > 2 * sl->cap ? count : 2 * sl->cap;
  if (cap < 64)
    cap = 64;
  if (sl->host)
    RF_CUDA(cudaFreeHost(sl->host));
  if (sl->dev)
    RF_CUDA(cudaFree(sl->dev));
  sl->host = NULL, sl->dev = NULL, sl->cap = 0;
  RF_CUDA(cudaHostAlloc((void **)&sl->host, (size_t)cap * sizeof(piece), cudaHostAllocDefault));
  RF_CUDA(cudaMalloc((void **)&sl->dev, (size_t)cap * sizeof(piece)));
  sl->cap = cap;
  return RF_OK;
}

/* One block per unit: measured on an H200, this beats a persistent grid of resident blocks
 * (0.93-0.95 of a device copy against 0.90), whose every unit starts with a search and a
 * round trip to memory that nothing else on the block hides. */
template <int CLS>
rf_status launch(const piece *pieces, int count, int64_t units, cudaStream_t stream) {
  int blocks = units < INT32_MAX ? (int)units : INT32_MAX;
  copy_kernel<CLS><<<blocks, kBlock, 0, stream>>>(pieces, count, units);
  RF_CUDA(cudaGetLastError());
  return RF_OK;
}

rf_status launch_class(int cls, const piece *pieces, int count, int64_t units,
                       cudaStream_t stream) {
  switch (cls) {
  case CLS_RUN16:
    return launch<CLS_RUN16>(pieces, count, units, stream);
  case CLS_LINES16:
    return launch<CLS_LINES16>(pieces, count, units, stream);
  case CLS_LINES8:
    return launch<CLS_LINES8>(pieces, count, units, stream);
  case CLS_LINES4:
    return launch<CLS_LINES4>(pieces, count, units, stream);
  case CLS_LINES2:
    return launch<CLS_LINES2>(pieces, count, units, stream);
  case CLS_LINES1:
    return launch<CLS_LINES1>(pieces, count, units, stream);
  case CLS_PAIRS2:
    return launch<CLS_PAIRS2>(pieces, count, units, stream);
  case CLS_TILES4:
    return launch<CLS_TILES4>(pieces, count, units, stream);
  case CLS_TILES2:
    return launch<CLS_TILES2>(pieces, count, units, stream);
  case CLS_TILES1:
    return launch<CLS_TILES1>(pieces, count, units, stream);
  default:
    return launch<CLS_ELEMS>(pieces, count, units, stream);
  }
}

/* ---- host side: the copy engines ------------------------------------------------------ */

constexpr int kEngineStreams = 4;
int copy_path = RF_COPY_AUTO;
bool engine_ready;
cudaStream_t engine_stream[kEngineStreams];
cudaEvent_t engine_fork, engine_join[kEngineStreams];
int64_t engine_load[kEngineStreams];
bool engine_used[kEngineStreams];

enum { BY_KERNEL, BY_ENGINE_RUN, BY_ENGINE_2D };

/* Which way a planned piece goes (see the file comment). Only the line classes qualify: their
 * rows are dense on both sides, so a row is one contiguous run of bytes. */
int engine_way(const piece &pc, int mapped) {
  /* Through a mapping of an allocation that is not a multiple of 2 MiB the engines lose (see
   * the file comment); refit's own are rounded, unless REFIT_DEVICE_ALLOC_ROUND says not to. */
  const bool slow_mapping = mapped && rf_gpu_alloc_granule() % ((size_t)2 << 20) != 0;
  if (copy_path == RF_COPY_KERNEL || (copy_path == RF_COPY_AUTO && slow_mapping) ||
      pc.cls > CLS_LINES1)
    return BY_KERNEL;
  const int64_t row = pc.n_in * pc.width;
  if (pc.n_out == 1)
    return copy_path == RF_COPY_ENGINE || row >= RF_COPY_ENGINE_MIN ? BY_ENGINE_RUN : BY_KERNEL;
  const int64_t most = (int64_t)1 << 30; /* well inside every device's maximum pitch */
  if (copy_path == RF_COPY_ENGINE && pc.d_out >= row && pc.s_out >= row && pc.d_out < most &&
      pc.s_out < most)
    return BY_ENGINE_2D;
  return BY_KERNEL;
}

rf_status engine_setup(void) {
  if (engine_ready)
    return RF_OK;
  for (int i = 0; i < kEngineStreams; i++) {
    RF_CUDA(cudaStreamCreateWithFlags(&engine_stream[i], cudaStreamNonBlocking));
    RF_CUDA(cudaEventCreateWithFlags(&engine_join[i], cudaEventDisableTiming));
  }
  RF_CUDA(cudaEventCreateWithFlags(&engine_fork, cudaEventDisableTiming));
  engine_ready = true;
  return RF_OK;
}

/* Forks the engine streams off refit's stream: what they copy starts after everything queued
 * there so far. */
rf_status engine_begin(cudaStream_t stream) {
  RF_TRY(engine_setup());
  RF_CUDA(cudaEventRecord(engine_fork, stream));
  for (int i = 0; i < kEngineStreams; i++) {
    engine_load[i] = 0, engine_used[i] = false;
  }
  return RF_OK;
}

/* Queues one piece on the least loaded engine stream, waiting for the fork on first use. */
rf_status engine_copy(const piece &pc, int way) {
  int best = 0;
  for (int i = 1; i < kEngineStreams; i++)
    if (engine_load[i] < engine_load[best])
      best = i;
  cudaStream_t s = engine_stream[best];
  if (!engine_used[best])
    RF_CUDA(cudaStreamWaitEvent(s, engine_fork, 0));
  const size_t row = (size_t)(pc.n_in * pc.width);
  cudaError_t rc = way == BY_ENGINE_RUN
                       ? cudaMemcpyAsync(pc.dst, pc.src, row, cudaMemcpyDefault, s)
                       : cudaMemcpy2DAsync(pc.dst, (size_t)pc.d_out, pc.src, (size_t)pc.s_out, row,
                                           (size_t)pc.n_out, cudaMemcpyDefault, s);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    return rf_fail(RF_ERR_CUDA,
                   "copy: the copy engine refused %zu rows of %zu bytes from %p (pitch %lld) to "
                   "%p (pitch %lld): %s",
                   way == BY_ENGINE_RUN ? (size_t)1 : (size_t)pc.n_out, row, pc.src,
                   (long long)pc.s_out, pc.dst, (long long)pc.d_out, cudaGetErrorString(rc));
  }
  engine_used[best] = true;
  engine_load[best] += (int64_t)row * pc.n_out;
  return RF_OK;
}

/* Joins the engine streams back: refit's stream goes on once they are done. */
rf_status engine_end(cudaStream_t stream) {
  for (int i = 0; i < kEngineStreams; i++)
    if (engine_used[i]) {
      RF_CUDA(cudaEventRecord(engine_join[i], engine_stream[i]));
      RF_CUDA(cudaStreamWaitEvent(stream, engine_join[i], 0));
    }
  return RF_OK;
}

/* ---- host side: peeling odd edges off transposes ---------------------------------------- */

/* A transpose of 2-byte elements takes the pairs kernel only where its outer lines start on a
 * 4-byte word and come in an even number (plan_piece). A box cut at an odd row, as a bucket
 * edge may cut a JAX-order shard, has neither, and the whole box would fall to the generic
 * tile kernel. Peeling its first outer line (one element further along the source's dense
 * dimension puts the start on a word) and then, for an odd count, its last one leaves an
 * aligned middle for the pairs kernel; the peeled lines are single rows of the tile class.
 * Fills out[] and returns the number of boxes (1: nothing to peel). */
int peel_transpose(const rf_box_copy *c, rf_box_copy out[3]) {
  out[0] = *c;
  rf_copy_walk cw = rf_copy_walk_of(&c->dst, &c->src, &c->box);
  if (c->src.esize != 2 || cw.n_out < 3 || cw.s_out != 1 || cw.d_in != 1 || cw.n_in % 2 != 0)
    return 1;
  const uint64_t fixed =
      (uint64_t)(uintptr_t)cw.dst | (uint64_t)(cw.s_in * 2) | (uint64_t)(cw.d_out * 2);
  const bool src_odd = (uintptr_t)cw.src % 4 != 0;
  if (fixed % 4 != 0 || (uintptr_t)cw.src % 2 != 0 || (!src_odd && cw.n_out % 2 == 0))
    return 1;
  const int od = cw.outer;
  rf_box mid = c->box;
  int n = 0;
  if (src_odd) {
    out[n] = *c;
    out[n].box.hi[od] = mid.lo[od] + 1;
    mid.lo[od]++, n++;
  }
  if ((mid.hi[od] - mid.lo[od]) % 2 != 0) {
    out[n] = *c;
    out[n].box.lo[od] = mid.hi[od] - 1;
    mid.hi[od]--, n++;
  }
  out[n] = *c;
  out[n].box = mid;
  return n + 1;
}

/* The pieces are planned twice: once to count each class, once more straight into their
 * places in the table, grouped by class, so that each launch reads a contiguous range. */
rf_status copy_planned(const rf_box_copy *copies, int count, int mapped) {
  if (count <= 0)
    return RF_OK;
  int n_cls[CLS_COUNT] = {0}, at[CLS_COUNT], n_engine = 0;
  int64_t units[CLS_COUNT] = {0};
  for (int i = 0; i < count; i++) {
    if (copies[i].dst.esize != copies[i].src.esize)
      return rf_fail(RF_ERR_INTERNAL, "box copy %d of %d: element sizes differ (%d and %d bytes)",
                     i, count, copies[i].dst.esize, copies[i].src.esize);
    piece pc;
    if (plan_piece(&copies[i], &pc) > 0) {
      if (engine_way(pc, mapped) != BY_KERNEL)
        n_engine++;
      else
        n_cls[pc.cls]++;
    }
  }
  int n = 0;
  for (int c = 0; c < CLS_COUNT; c++)
    at[c] = n, n += n_cls[c];
  cudaStream_t stream = (cudaStream_t)rf_gpu_stream();
  if (n_engine > 0) {
    RF_TRY(engine_begin(stream));
    for (int i = 0; i < count; i++) {
      piece pc;
      int way = plan_piece(&copies[i], &pc) > 0 ? engine_way(pc, mapped) : BY_KERNEL;
      if (way != BY_KERNEL)
        RF_TRY(engine_copy(pc, way));
    }
  }
  if (n == 0)
    return n_engine > 0 ? engine_end(stream) : RF_OK;

  slot *sl = &ring[ring_next];
  ring_next = (ring_next + 1) % kRing;
  RF_TRY(slot_reserve(sl, n));
  for (int i = 0; i < count; i++) {
    piece pc;
    int64_t k = plan_piece(&copies[i], &pc);
    if (k == 0 || engine_way(pc, mapped) != BY_KERNEL)
      continue;
    pc.unit_begin = units[pc.cls];
    units[pc.cls] += k;
    sl->host[at[pc.cls]++] = pc;
  }
  RF_CUDA(cudaMemcpyAsync(sl->dev, sl->host, (size_t)n * sizeof(piece), cudaMemcpyHostToDevice,
                          stream));
  for (int c = 0, first = 0; c < CLS_COUNT; first += n_cls[c], c++)
    if (n_cls[c])
      RF_TRY(launch_class(c, sl->dev + first, n_cls[c], units[c], stream));
  RF_CUDA(cudaEventRecord(sl->done, stream));
  sl->pending = 1;
  return n_engine > 0 ? engine_end(stream) : RF_OK;
}

/* Whether batches are joined (rf_box_copies_join): REFIT_COPY_JOIN=0 turns it off, to measure
 * the difference in one build (bench/moe_join_gpu.sh), read once; rf_mem_set_copy_join turns
 * it off for a job over a library caller's allocations. */
bool join_allowed = true;
bool join_copies() {
  static int on = -1;
  if (on < 0) {
    const char *env = getenv("REFIT_COPY_JOIN");
    on = !(env && strcmp(env, "0") == 0);
  }
  return on != 0 && join_allowed;
}

} // namespace

extern "C" void rf_gpu_set_copy_path(int path) { copy_path = path; }
extern "C" void rf_gpu_set_copy_join(int on) { join_allowed = on != 0; }

/* Odd edges are peeled off transposes first (peel_transpose), then copies that continue each
 * other are joined (rf_box_copies_join); a batch of one copy is planned as it came, with no
 * copy of the list. */
extern "C" rf_status rf_gpu_copy_boxes(const rf_box_copy *copies, int count, int mapped) {
  int extra = 0;
  rf_box_copy parts[3];
  for (int i = 0; i < count; i++)
    extra += peel_transpose(&copies[i], parts) - 1;
  const bool join = count > 1 && join_copies();
  if (extra == 0 && !join)
    return copy_planned(copies, count, mapped);
  rf_box_copy *all =
      (rf_box_copy *)rf_malloc((size_t)(count + extra) * sizeof *all, "peeled box copies");
  if (!all)
    return RF_ERR_NOMEM;
  int n = 0;
  for (int i = 0; i < count; i++) {
    int k = extra ? peel_transpose(&copies[i], parts) : 1;
    memcpy(all + n, k > 1 ? parts : &copies[i], (size_t)k * sizeof *all);
    n += k;
  }
  if (join)
    n = rf_box_copies_join(all, n);
  rf_status st = copy_planned(all, n, mapped);
  free(all);
  return st;
}
