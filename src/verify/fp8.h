/* fp8: the CPU reference of block-FP8 quantization, the bytes vLLM's block-quantized weights
 * hold (docs/architecture.md, FP8 quantization).
 *
 * Per 128×128 block of a 2-D tensor, the weights become float8_e4m3fn bytes and the block one
 * fp32 `weight_scale_inv`, exactly as DeepGEMM's per_block_cast_to_fp8 computes them when
 * PyTorch runs it on a GPU. Every step is one IEEE fp32 operation, so this reference and the
 * GPU kernels that come later agree bit for bit; the tests pin its bytes by hand. */
#ifndef RF_FP8_H
#define RF_FP8_H

#include <stdint.h>
#include <string.h>

#include "format/format.h"
#include "memory/memory.h"
#include "model/model.h"
#include "verify/verify.h"

/* The side of a scaling block, and the largest finite e4m3fn value (code 0x7e). */
#define RF_FP8_BLOCK 128
#define RF_FP8_E4M3_MAX 448.0f
/* The amax clamp: DeepGEMM's clamp(1e-4), the double 1e-4 rounded to fp32 (0x38d1b717). */
#define RF_FP8_AMAX_MIN 1e-4f

/* float -> float8_e4m3fn (bias 7, no infinities, 0x7f/0xff NaN): round to nearest, ties to
 * even, saturating at ±448 (0x7e/0xfe) for larger magnitudes and infinities; NaN gives 0x7f
 * with the sign of x; the sign of zero is kept. */
uint8_t rf_fp8_e4m3_from_float(float x);
/* float8_e4m3fn -> float, exact. */
float rf_fp8_e4m3_to_float(uint8_t b);

/* A float's bit pattern, and the float of a bit pattern. */
static inline uint32_t rf_float_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}
static inline float rf_bits_float(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

/* bf16 and fp16 bit patterns -> float, exact (NaN payloads kept). */
float rf_bf16_to_float(uint16_t b);
float rf_fp16_to_float(uint16_t h);
/* Element i of an array of dtype dt (bf16, fp16 or fp32) as a float, exactly. */
float rf_float_at(const void *x, rf_dtype dt, int64_t i);

/* What a block's amax decides: the clamped amax, the factor that multiplies every element and
 * the scale stored with the block. */
typedef struct {
  float amax;      /* max(amax, RF_FP8_AMAX_MIN) */
  float factor;    /* fp32(fp32(1 / amax) * 448) */
  float scale_inv; /* fp32(amax * fp32(1 / 448)) */
} rf_fp8_scale;
rf_fp8_scale rf_fp8_scale_of(float amax);

/* max |x| over rows × cols elements of dtype dt at x, whose rows are row_stride elements
 * apart, before the clamp: +0 for no elements, +inf when one is infinite and NaN when one is
 * NaN (as PyTorch's amax propagates NaN). The maximum is exact and order-free, so a block cut
 * into parts (a sharded weight) has the maximum of its parts' amax as its own. */
float rf_fp8_block_amax(const void *x, rf_dtype dt, int64_t row_stride, int64_t rows, int64_t cols);

/* Quantizes rows × cols elements of one block (or a part of one) with the block's amax (before
 * the clamp; finite): q[r * q_stride + c] = e4m3(fp32(x[r][c] * factor)). */
void rf_fp8_quantize_with_amax(const void *x, rf_dtype dt, int64_t row_stride, int64_t rows,
                               int64_t cols, float amax, uint8_t *q, int64_t q_stride);

/* Quantizes the whole row-major tensor `name` [rows, cols] of dtype dt (rows row_stride
 * elements apart) into q [rows, cols] (contiguous) and scale_inv [ceil(rows/128),
 * ceil(cols/128)] (row-major). Fails with one line on a row stride below cols and on a block
 * that holds inf or NaN, which has no finite scale (RF_ERR_CHECKPOINT). */
rf_status rf_fp8_quantize_ref(const char *name, const void *x, rf_dtype dt, int64_t rows,
                              int64_t cols, int64_t row_stride, uint8_t *q, float *scale_inv);

/* Where the scales of a box of blocks lie: row-major, block (i, j) of the box at base + (i *
 * stride + j) * esize; or, when tile_grid_cols > 0, in the 128x4 tiles of a scale matrix with
 * tile_grid_cols block columns that starts at base (nvfp4 in the rollout), block (i, j) of the
 * box being block (row0 + i, col0 + j) of that matrix, at rf_format_scale_offset's index. */
typedef struct {
  char *base;
  int64_t stride;
  int64_t tile_grid_cols, row0, col0;
} rf_scale_side;

/* One box of a 2-D tensor to quantize, whole blocks of its format: its origin is on the
 * tensor's block grid and its edges are on the grid or at the tensor's end. Rows of x are
 * x_stride elements apart, rows of q q_stride bytes (4-bit elements: q is the byte of the box's
 * first column, which is even). 128x128 blocks store the fp32 scale of block (i, j) of the box
 * at scale + (i * scale_stride + j) * 4, at any byte offset (a staging buffer's); 1-D blocks
 * store one byte each where `scale` (an rf_scale_side) says. `tag` and the box's origin in its
 * tensor (row0, col0) come back with the first block that holds inf or NaN
 * (rf_fp8_device_bad). rf_fp8_job_format fills in what the kernels need of the format. */
typedef struct {
  const void *x;
  rf_dtype dtype;
  int64_t x_stride, rows, cols;
  int64_t x_col_stride; /* elements between columns: 0 or 1 for dense rows; a transposed
                         * (--trainer-order jax) source has x_stride 1 and its pitch here */
  uint8_t *q;
  int64_t q_stride;
  char *scale;
  int64_t scale_stride;
  int64_t tile_grid_cols, tile_row0, tile_col0; /* 1-D blocks: the scale's tiles, as in
                                                 * rf_scale_side; 0: row-major */
  /* The format (rf_fp8_job_format): its rf_scale_rule; 0 for 128x128 blocks with fp32 scales,
   * else the columns of a 1 x block_cols block (at most 32); its element (elem_bits 8: e4m3,
   * 4: e2m1 two a byte, the even column in the low nibble; 0 reads as e4m3), the element's
   * largest value and exponent (ue8m0 rules), and the tensor's global scale (e4m3-global). */
  int rule;
  int block_cols;
  int elem_bits;
  float elem_max;
  int elem_emax;
  float global;
  int tag;
  int64_t row0, col0;
} rf_fp8_job;

/* Sets job's format fields from f, with `global` the tensor's global scale (1 where f has
 * none). */
static inline void rf_fp8_job_format(rf_fp8_job *job, const rf_format *f, float global) {
  job->rule = f->rule;
  job->block_cols = f->block_rows == 1 ? f->block_cols : 0;
  job->elem_bits = f->elem_bits;
  job->elem_max = f->elem_max;
  job->elem_emax = f->elem_emax;
  job->global = global;
}

/* Sets a 1-D job's scale destination from an rf_scale_side. */
static inline void rf_fp8_job_scales(rf_fp8_job *job, const rf_scale_side *s) {
  job->scale = s->base;
  job->scale_stride = s->stride;
  job->tile_grid_cols = s->tile_grid_cols;
  job->tile_row0 = s->row0;
  job->tile_col0 = s->col0;
}

/* Quantizes a job in device memory (or through another process's mapping of it): one CUDA
 * block per 128x128 block, or one thread per 1 x block_cols block, with the operations of
 * rf_fp8_quantize_with_amax and rf_fp8_scale_of, so the bytes are the reference's
 * (test_fp8_gpu). Jobs are queued and launched together, on refit's stream (memory_gpu.h),
 * before anything else next uses it (rf_gpu_defer), or at rf_fp8_device_flush: the caller
 * keeps the job's memory as it is until then, as it would for a launch. A block that holds inf
 * or NaN is left unwritten and recorded instead of failing here, so the launch does not wait;
 * rf_fp8_device_bad says which, once the stream is done. Builds without CUDA fail with one
 * line. */
rf_status rf_fp8_quantize_device(const rf_fp8_job *job);
/* Launches the queued jobs now; a launch that failed in a deferred flush is reported here. */
rf_status rf_fp8_device_flush(void);

/* The first block since the last call that a device job refused (inf or NaN): waits for refit's
 * stream, then `found` is 0, or 1 with the job's tag, the block's first row and column in the
 * tensor and whether it held a NaN. */
typedef struct {
  int found, tag, nan;
  int64_t row, col;
} rf_fp8_bad;
rf_status rf_fp8_device_bad(rf_fp8_bad *bad);

/* Compares rows x cols elements of esize bytes at got (rows got_stride elements apart) with
 * want (rows want_stride apart), both in device memory, on refit's stream: row_wrong[r] (a
 * host array of rows entries) gets the number of elements of row r that differ in any byte.
 * Only counts come back, so a check reads its mismatching rows alone to name elements. Waits
 * for the kernel. Builds without CUDA fail with one line. */
rf_status rf_gpu_compare_rows(const void *got, int64_t got_stride, const void *want,
                              int64_t want_stride, int64_t rows, int64_t cols, int esize,
                              int64_t *row_wrong);

/* Copies the esize-byte scales of rows x cols blocks from src to dst (either side row-major or
 * in 128x4 tiles, in device memory or another process's mapping of it) with a kernel on
 * refit's stream: a box of tiled scales is no strided region, so no box copy takes it. Does
 * not wait. Builds without CUDA fail with one line. */
rf_status rf_gpu_copy_scales(const rf_scale_side *dst, const rf_scale_side *src, int64_t rows,
                             int64_t cols, int esize);

/* One region whose maximum |x| rf_gpu_amax takes: n elements of dtype (bf16, fp16 or fp32) at
 * x, dense, in device memory; `slot` is the entry of the result it goes into. */
typedef struct {
  const void *x;
  int64_t n;
  rf_dtype dtype;
  int slot;
} rf_amax_region;
/* The maximum |x| of every region, per slot, in one launch: amax[slot] becomes the maximum of
 * its old value and its regions' maxima (the integer maximum of the magnitudes' bit patterns,
 * as the quantizer takes a block's, so exact and order-free: a NaN gives a NaN, an inf inf).
 * amax is host memory of `slots` entries, each at least +0. Waits for the kernel. Builds
 * without CUDA fail with one line. */
rf_status rf_gpu_amax(const rf_amax_region *regions, int count, float *amax, int slots);

/* The layout-invariant checksum of an fp8 rollout tensor's part: the checksum terms
 * (verify.h) of its fp8 bytes at their global row-major indices, plus those of its fp32 scales
 * at their global block indices (block row * block columns + block column) under tensor id
 * id | 2^31, so that a scale cannot stand in for a weight byte. `q` holds `held` (fp8), `scale`
 * holds `blocks` (one fp32 per block, in block coordinates); host memory. `scheme` is the
 * results format's (RF_CHECKSUM_CURRENT but for an older file's). */
uint64_t rf_fp8_checksum(rf_checksum_scheme scheme, const rf_tensor *t, const rf_region *q,
                         const rf_box *held, const rf_region *scale, const rf_box *blocks);
/* The same sum (today's scheme) of regions in any kind of memory: device memory runs the
 * checksum kernels (verify.h, rf_checksum_region_on) and brings back two sums, not the bytes. */
rf_status rf_fp8_checksum_on(rf_mem_kind kind, const rf_tensor *t, const rf_region *q,
                             const rf_box *held, const rf_region *scale, const rf_box *blocks,
                             uint64_t *sum);
/* The same two sums for a rollout tensor of any moved format f (format.h): the block grid is
 * f's and each scale is summed at its stored size (fp32 words, or E8M0 and e4m3 bytes summed as
 * the fp8 bytes are); rf_fp8_checksum and rf_fp8_checksum_on are these with fp8's format. For
 * 4-bit elements `q` holds the packed bytes of `held` (its box rf_format_byte_box(f, held)),
 * summed at their indices in the [rows, cols/2] byte tensor; `scale` is row-major. */
uint64_t rf_format_checksum(const rf_format *f, rf_checksum_scheme scheme, const rf_tensor *t,
                            const rf_region *q, const rf_box *held, const rf_region *scale,
                            const rf_box *blocks);
rf_status rf_format_checksum_on(const rf_format *f, rf_mem_kind kind, const rf_tensor *t,
                                const rf_region *q, const rf_box *held, const rf_region *scale,
                                const rf_box *blocks, uint64_t *sum);
/* A format with a global scale (nvfp4): the checksum term of tensor t's global, one fp32 at
 * index 0 under tensor id (id mod 2^30) | 2^30, an id neither a weight nor a scale has. Each
 * member of a fused group carries the group's global (rf_layout_global_groups), and its term is
 * added once per tensor: by the rollout rank whose part starts at element (0, 0), and by the
 * checkpoint's sum of the tensor. */
uint64_t rf_format_global_checksum(rf_checksum_scheme scheme, const rf_tensor *t, float global);

#endif
