/* format: the quantized rollout formats as one table (docs/architecture.md, "Quantized
 * formats"), and the CPU reference of each.
 *
 * A format is data: its element type, its scaling block, the rule that turns a block's
 * maximum into its scale and the type the scale is stored as, how 4-bit elements are packed,
 * the layout the scales take in the rollout and the names its checkpoints give the tensors.
 * Code that needs to know about a format asks its entry; a new format is a new entry (and, where
 * it brings a new rule or element type, a case in format_ref.c and the kernels).
 *
 * Every reference step is one IEEE fp32 operation or integer code, written as the operation
 * it stands for, so that CUDA kernels doing the same operations with round-to-nearest
 * intrinsics give the same bytes (as verify/fp8.c and fp8_cuda.cu do for fp8). */
#ifndef RF_FORMAT_H
#define RF_FORMAT_H

#include <stdint.h>

#include "core/box.h"
#include "core/core.h"
#include "model/model.h"

/* The formats, in the table's order: each is also a value of --rollout-dtype. A new format is
 * an entry here and one in format.c's table. */
#define RF_FORMAT_LIST(X)                                                                          \
  X(RF_FORMAT_FP8, "fp8")                                                                          \
  X(RF_FORMAT_FP8_UE8M0, "fp8-ue8m0")                                                              \
  X(RF_FORMAT_MXFP8, "mxfp8")                                                                      \
  X(RF_FORMAT_MXFP8_FLOOR, "mxfp8-floor")                                                          \
  X(RF_FORMAT_MXFP4, "mxfp4")                                                                      \
  X(RF_FORMAT_MXFP4_FLOOR, "mxfp4-floor")                                                          \
  X(RF_FORMAT_NVFP4, "nvfp4")

/* --rollout-dtype: every tensor in the trainer's dtype (model), or the linear weights in one of
 * the formats (layout_fp8.c says which tensors). */
#define RF_ROLLOUT_DTYPE_LIST(X) X(RF_ROLLOUT_DTYPE_MODEL, "model") RF_FORMAT_LIST(X)
typedef enum { RF_ROLLOUT_DTYPE_LIST(RF_ENUM_ID) RF_ROLLOUT_DTYPE_COUNT } rf_rollout_dtype;
RF_ENUM_DECLARE(rf_rollout_dtype);

/* The element types of the formats: the 8-bit float8_e4m3fn and the 4-bit e2m1. */
#define RF_FORMAT_ELEM_LIST(X)                                                                     \
  X(RF_ELEM_E4M3, "e4m3")                                                                          \
  X(RF_ELEM_E2M1, "e2m1")
typedef enum { RF_FORMAT_ELEM_LIST(RF_ENUM_ID) RF_ELEM_COUNT } rf_elem;
RF_ENUM_DECLARE(rf_elem);

/* How a block's maximum |x| (amax) becomes its scale; docs/architecture.md names the source
 * of each rule.
 *   fp32-inverse  DeepGEMM's block FP8: amax clamped at 1e-4, the elements multiplied by
 *                 fp32(fp32(1 / amax) * 448), the scale stored as fp32 amax * fp32(1 / 448)
 *                 (weight_scale_inv, what a dequantizer multiplies by).
 *   ue8m0-ceil    A power of two: the smallest 2^e at or above fp32(amax * fp32(1 / max)),
 *                 max the element type's largest value (448 or 6), e clamped to [-127, 127];
 *                 no element saturates. The RCEIL of cuBLAS, TransformerEngine and FlashInfer
 *                 (cudaRoundPosInf), and DeepGEMM's ceil_to_ue8m0 on the same fp32 value.
 *   ue8m0-floor   OCP MX v1.0: 2^(floor(log2(amax)) - emax), emax the element type's largest
 *                 exponent (8 for e4m3, 2 for e2m1), e clamped to [-127, 127]; the largest
 *                 elements of a block may saturate.
 *   e4m3-global   NVFP4 (ModelOpt): a per-tensor fp32 global scale g = fp32(tensor amax /
 *                 2688) (448 * 6), and per block s = e4m3(fp32(amax / fp32(6 * g))); elements
 *                 are x / fp32(s * g). */
#define RF_SCALE_RULE_LIST(X)                                                                      \
  X(RF_SCALE_FP32_INVERSE, "fp32-inverse")                                                         \
  X(RF_SCALE_UE8M0_CEIL, "ue8m0-ceil")                                                             \
  X(RF_SCALE_UE8M0_FLOOR, "ue8m0-floor")                                                           \
  X(RF_SCALE_E4M3_GLOBAL, "e4m3-global")
typedef enum { RF_SCALE_RULE_LIST(RF_ENUM_ID) RF_SCALE_RULE_COUNT } rf_scale_rule;
RF_ENUM_DECLARE(rf_scale_rule);

/* What a scale is stored as: fp32 (4 bytes), an E8M0 exponent byte (2^(b - 127); 0xff is
 * NaN and never written) or a float8_e4m3fn byte. */
#define RF_SCALE_STORE_LIST(X)                                                                     \
  X(RF_SCALE_STORE_FP32, "fp32")                                                                   \
  X(RF_SCALE_STORE_E8M0, "e8m0")                                                                   \
  X(RF_SCALE_STORE_E4M3, "e4m3")
typedef enum { RF_SCALE_STORE_LIST(RF_ENUM_ID) RF_SCALE_STORE_COUNT } rf_scale_store;
RF_ENUM_DECLARE(rf_scale_store);

/* Where a block's scale sits among the tensor's scales: row-major over the block grid (every
 * checkpoint), or the 128x4 tiles that NVFP4 GEMMs on Blackwell read (rf_format_scale_offset). */
#define RF_SCALE_LAYOUT_LIST(X)                                                                    \
  X(RF_SCALE_ROW_MAJOR, "row-major")                                                               \
  X(RF_SCALE_SWIZZLED_128X4, "swizzled-128x4")
typedef enum { RF_SCALE_LAYOUT_LIST(RF_ENUM_ID) RF_SCALE_LAYOUT_COUNT } rf_scale_layout;
RF_ENUM_DECLARE(rf_scale_layout);

typedef struct {
  const char *name;    /* --rollout-dtype and refit checkpoint --dtype */
  const char *summary; /* for --help and the job line */
  rf_elem elem;
  int elem_bits;              /* 8, or 4: two elements a byte, the even column in the low nibble */
  float elem_max;             /* the largest finite element: 448 or 6 */
  int elem_emax;              /* its exponent: 8 or 2 */
  int block_rows, block_cols; /* the scaling block: rows along the output dimension, columns
                               * along the reduction (input) dimension of an [out, in] weight */
  rf_scale_rule rule;
  float amax_min; /* a block's amax is clamped to at least this (DeepGEMM's 1e-4), or 0 */
  rf_scale_store scale_store;
  int scale_bytes;              /* bytes of one stored scale: 4 or 1 */
  int global_scale;             /* 1: an fp32 per tensor besides the block scales (NVFP4) */
  rf_scale_layout scale_layout; /* in the rollout's memory */
  /* Checkpoint names: a weight `P.weight` is stored as P + weight_suffix with its scales at
   * P + scale_suffix (and the global at P + global_suffix). */
  const char *weight_suffix, *scale_suffix, *global_suffix;
  /* 1: in a stacked entry (rf_model_stack) each packed weight row is shaped [cols /
   * block_cols, block bytes], as gpt-oss's experts.P_blocks [E, rows, cols / 32, 16] are;
   * 0: [rows, row bytes]. */
  int stack_blocks;
  /* Rollout names, as vLLM's layers name their parameters: the scale tensor of `X.weight` is
   * X.weight + rollout_scale_suffix (`_scale_inv` for block FP8, `_scale` elsewhere: gpt-oss's
   * `_scales` are checkpoint names only) and its global X.weight + rollout_global_suffix. */
  const char *rollout_scale_suffix, *rollout_global_suffix;
} rf_format;

/* The table: every format refit can write into a rollout, in --help order. */
int rf_format_count(void);
const rf_format *rf_format_at(int index);
/* The format a --rollout-dtype names, or NULL for model. */
const rf_format *rf_format_of(rf_rollout_dtype dtype);
/* The entry named `name`, or NULL. */
const rf_format *rf_format_find(const char *name);
/* "fp8, fp8-ue8m0, ..." for usage lines. */
void rf_format_names(char *buf, size_t len);

/* Bytes of `cols` elements of one row (4-bit elements: cols must be even), of the scales of
 * a rows x cols tensor, and the blocks along each side. */
int64_t rf_format_row_bytes(const rf_format *f, int64_t cols);
int64_t rf_format_block_grid(const rf_format *f, int dim, int64_t extent);
int64_t rf_format_scale_bytes(const rf_format *f, int64_t rows, int64_t cols);

/* The rf_dtype a format's scales are stored as: fp32, u8 (E8M0 bytes) or fp8 (e4m3 bytes). */
rf_dtype rf_format_scale_dtype(const rf_format *f);
/* The dtype a checkpoint and a rollout give f's weights: fp8 (e4m3 bytes) or u8 (e2m1 packed
 * two a byte). */
rf_dtype rf_format_weight_dtype(const rf_format *f);
/* Whether a checkpoint of a is a checkpoint of b: the same names, dtypes and block grid
 * (fp8 and fp8-ue8m0, mxfp8 and mxfp8-floor, mxfp4 and mxfp4-floor differ only in the rule
 * that makes a scale, which a file does not record). A file's bytes and scales carried as
 * they are into a rollout of either are the rollout's bytes and scales. */
int rf_format_same_file(const rf_format *a, const rf_format *b);
/* "fp8 or fp8-ue8m0": the formats whose checkpoints look like f's, for usage lines. */
void rf_format_same_file_names(const rf_format *f, char *buf, size_t len);
/* The blocks of f's grid (block coordinates) that a box of elements touches. */
rf_box rf_format_blocks_of(const rf_format *f, const rf_box *box);
/* The suffix that names a scale tensor after its weight's name in the rollout: "_scale_inv"
 * (fp8, fp8-ue8m0: X.weight_scale_inv) or "_scale" (X.weight_scale), as vLLM names them. */
const char *rf_format_rollout_scale_suffix(const rf_format *f);
/* Whether f is block FP8's layout: 128x128 blocks of e4m3 with fp32 scales (fp8, fp8-ue8m0),
 * the layout of the quantized checkpoints refit reads as a trainer's weights. */
int rf_format_block_fp8(const rf_format *f);
/* Whether refit moves f into a rollout (layout_fp8.c, engine_fp8.c), in host memory and, with
 * the CUDA kernels (verify/fp8_cuda.cu), in GPU memory alike: e4m3 in 128x128 blocks with fp32
 * scales (block FP8), and e4m3 or packed e2m1 (two a byte, so an even block width) in 1-D
 * blocks of up to 32 columns with one scale byte each, row-major or 128x4-swizzled, with or
 * without NVFP4's global scale. Every format of the table today. */
int rf_format_moved(const rf_format *f);
/* "fp8, fp8-ue8m0, ..." of the formats refit moves into a rollout, for usage lines. */
void rf_format_moved_names(char *buf, size_t len);
/* The bytes that hold a box of elements, as a box of a byte tensor: the box itself for 8-bit
 * elements; for 4-bit ones (two a byte) its columns halved. Every 4-bit box refit addresses
 * starts and ends on an even column (its blocks are 16 or 32 columns, and shards hold whole
 * blocks or end at the tensor's even end), so copies of packed elements stay byte copies. */
rf_box rf_format_byte_box(const rf_format *f, const rf_box *box);

/* The index (in stored scales) of block (i, j) of a grid with `grid_cols` block columns, in
 * the format's rollout layout. The swizzled layout pads the grid to 128 rows and 4 columns. */
int64_t rf_format_scale_offset(const rf_format *f, int64_t grid_cols, int64_t i, int64_t j);

/* ---- the CPU reference --------------------------------------------------------------------- */

/* Element codecs: float -> e4m3 (fp8.h, rf_fp8_e4m3_from_float) and -> e2m1: round to nearest,
 * ties to even, saturating at ±6; the sign of zero is kept; NaN is never passed (the quantizer
 * refuses blocks that hold one). And back, exactly. */
uint8_t rf_e2m1_from_float(float x);
float rf_e2m1_to_float(uint8_t code);
/* 2^(b - 127) for an E8M0 byte b below 0xff. */
float rf_e8m0_to_float(uint8_t b);

/* What a block's amax decides under f's rule: the stored scale (scale_bytes of it, little
 * endian for fp32) and how the elements are formed: q = elem(fp32(x * mul)) when div is 0,
 * else q = elem(fp32(x / div)). `global` is the tensor's global scale (e4m3-global only). */
typedef struct {
  uint8_t stored[4];
  float mul, div;
} rf_format_scale;
rf_format_scale rf_format_scale_of(const rf_format *f, float amax, float global);

/* Quantizes rows x cols elements of one block (or a part of one) with its scale s: element
 * (r, c) of x (rows row_stride elements apart) becomes a code at q + r * q_stride, byte c
 * (8-bit elements) or the nibble c % 2 of byte c / 2 (4-bit: the part must start on an even
 * column). The engine quantizes blocks as they arrive with this, format_ref.c whole tensors. */
void rf_format_quantize_block(const rf_format *f, const void *x, rf_dtype dt, int64_t row_stride,
                              int64_t rows, int64_t cols, const rf_format_scale *s, uint8_t *q,
                              int64_t q_stride);

/* The global scale of a tensor whose maximum |x| is amax (e4m3-global; 1 elsewhere):
 * fp32(amax / 2688), or 1 for an all-zero tensor, whose every block is zero anyway. */
float rf_format_global_of(const rf_format *f, float amax);

/* The global scale of the rows x cols elements at x (rf_format_global_of their amax). */
float rf_format_tensor_global(const rf_format *f, const void *x, rf_dtype dt, int64_t rows,
                              int64_t cols, int64_t row_stride);

/* Quantizes the row-major tensor `name` [rows, cols] of dtype dt (rows row_stride elements
 * apart; whole block rows of a larger tensor, too) with the tensor's global scale `global`
 * (e4m3-global; 1 elsewhere) into q (rows of rf_format_row_bytes, contiguous) and scales
 * (row-major over the block grid, scale_bytes each, as checkpoints store them; the rollout's
 * swizzle is rf_format_scale_offset's). Fails with one line on a block that holds inf or NaN
 * (RF_ERR_CHECKPOINT), on an odd number of columns for 4-bit elements, and on a row stride
 * below cols (RF_ERR_INTERNAL). */
rf_status rf_format_quantize_ref(const rf_format *f, const char *name, const void *x, rf_dtype dt,
                                 int64_t rows, int64_t cols, int64_t row_stride, float global,
                                 uint8_t *q, uint8_t *scales);

#endif
