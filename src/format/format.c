/* The table of quantized rollout formats (format.h); docs/architecture.md, "Quantized formats",
 * gives each rule with its source. */
#include <stdio.h>
#include <string.h>

#include "format/format.h"

RF_ENUM_DEFINE(rf_rollout_dtype, "rollout-dtype", RF_ROLLOUT_DTYPE_LIST, RF_ROLLOUT_DTYPE_COUNT)
RF_ENUM_DEFINE(rf_elem, "element type", RF_FORMAT_ELEM_LIST, RF_ELEM_COUNT)
RF_ENUM_DEFINE(rf_scale_rule, "scale rule", RF_SCALE_RULE_LIST, RF_SCALE_RULE_COUNT)
RF_ENUM_DEFINE(rf_scale_store, "scale type", RF_SCALE_STORE_LIST, RF_SCALE_STORE_COUNT)
RF_ENUM_DEFINE(rf_scale_layout, "scale layout", RF_SCALE_LAYOUT_LIST, RF_SCALE_LAYOUT_COUNT)

#define E4M3 .elem = RF_ELEM_E4M3, .elem_bits = 8, .elem_max = 448.0f, .elem_emax = 8
#define E2M1 .elem = RF_ELEM_E2M1, .elem_bits = 4, .elem_max = 6.0f, .elem_emax = 2

static const rf_format table[] = {
    [RF_FORMAT_FP8 -
     1] = {.name = "fp8",
           .summary = "linear weights float8_e4m3fn, an fp32 weight_scale_inv per 128x128 block",
           E4M3,
           .block_rows = 128,
           .block_cols = 128,
           .rule = RF_SCALE_FP32_INVERSE,
           .amax_min = 1e-4f,
           .scale_store = RF_SCALE_STORE_FP32,
           .scale_bytes = 4,
           .scale_layout = RF_SCALE_ROW_MAJOR,
           .weight_suffix = ".weight",
           .scale_suffix = ".weight_scale_inv",
           .rollout_scale_suffix = "_scale_inv"},
    [RF_FORMAT_FP8_UE8M0 -
        1] = {.name = "fp8-ue8m0",
              .summary = "linear weights float8_e4m3fn, a power-of-two fp32 weight_scale_inv per "
                         "128x128 block, rounded up as DeepGEMM's UE8M0",
              E4M3,
              .block_rows = 128,
              .block_cols = 128,
              .rule = RF_SCALE_UE8M0_CEIL,
              .amax_min = 1e-4f,
              .scale_store = RF_SCALE_STORE_FP32,
              .scale_bytes = 4,
              .scale_layout = RF_SCALE_ROW_MAJOR,
              .weight_suffix = ".weight",
              .scale_suffix = ".weight_scale_inv",
              .rollout_scale_suffix = "_scale_inv"},
    [RF_FORMAT_MXFP8 -
        1] = {.name = "mxfp8",
              .summary =
                  "linear weights float8_e4m3fn, an E8M0 weight_scale per 1x32 block, rounded up",
              E4M3,
              .block_rows = 1,
              .block_cols = 32,
              .rule = RF_SCALE_UE8M0_CEIL,
              .scale_store = RF_SCALE_STORE_E8M0,
              .scale_bytes = 1,
              .scale_layout = RF_SCALE_ROW_MAJOR,
              .weight_suffix = ".weight",
              .scale_suffix = ".weight_scale",
              .rollout_scale_suffix = "_scale"},
    [RF_FORMAT_MXFP8_FLOOR - 1] = {.name = "mxfp8-floor",
                                   .summary = "linear weights float8_e4m3fn, an E8M0 weight_scale "
                                              "per 1x32 block, OCP's floor(log2(amax)) - 8",
                                   E4M3,
                                   .block_rows = 1,
                                   .block_cols = 32,
                                   .rule = RF_SCALE_UE8M0_FLOOR,
                                   .scale_store = RF_SCALE_STORE_E8M0,
                                   .scale_bytes = 1,
                                   .scale_layout = RF_SCALE_ROW_MAJOR,
                                   .weight_suffix = ".weight",
                                   .scale_suffix = ".weight_scale",
                                   .rollout_scale_suffix = "_scale"},
    [RF_FORMAT_MXFP4 - 1] = {.name = "mxfp4",
                             .summary = "linear weights e2m1 two a byte, an E8M0 scale per 1x32 "
                                        "block, rounded up, as gpt-oss's _blocks and _scales",
                             E2M1,
                             .block_rows = 1,
                             .block_cols = 32,
                             .rule = RF_SCALE_UE8M0_CEIL,
                             .scale_store = RF_SCALE_STORE_E8M0,
                             .scale_bytes = 1,
                             .scale_layout = RF_SCALE_ROW_MAJOR,
                             .weight_suffix = "_blocks",
                             .scale_suffix = "_scales",
                             .stack_blocks = 1,
                             .rollout_scale_suffix = "_scale"},
    [RF_FORMAT_MXFP4_FLOOR - 1] = {.name = "mxfp4-floor",
                                   .summary = "linear weights e2m1 two a byte, an E8M0 scale per "
                                              "1x32 block, OCP's floor(log2(amax)) - 2",
                                   E2M1,
                                   .block_rows = 1,
                                   .block_cols = 32,
                                   .rule = RF_SCALE_UE8M0_FLOOR,
                                   .scale_store = RF_SCALE_STORE_E8M0,
                                   .scale_bytes = 1,
                                   .scale_layout = RF_SCALE_ROW_MAJOR,
                                   .weight_suffix = "_blocks",
                                   .scale_suffix = "_scales",
                                   .stack_blocks = 1,
                                   .rollout_scale_suffix = "_scale"},
    [RF_FORMAT_NVFP4 - 1] = {.name = "nvfp4",
                             .summary = "linear weights e2m1 two a byte, an e4m3 weight_scale per "
                                        "1x16 block and an fp32 weight_scale_2",
                             E2M1,
                             .block_rows = 1,
                             .block_cols = 16,
                             .rule = RF_SCALE_E4M3_GLOBAL,
                             .scale_store = RF_SCALE_STORE_E4M3,
                             .scale_bytes = 1,
                             .global_scale = 1,
                             .scale_layout = RF_SCALE_SWIZZLED_128X4,
                             .weight_suffix = ".weight",
                             .scale_suffix = ".weight_scale",
                             .global_suffix = ".weight_scale_2",
                             .rollout_scale_suffix = "_scale",
                             .rollout_global_suffix = "_scale_2"},
};

_Static_assert(RF_ARRAY_LEN(table) == RF_ROLLOUT_DTYPE_COUNT - 1,
               "every format of RF_FORMAT_LIST has an entry");

int rf_format_count(void) { return (int)RF_ARRAY_LEN(table); }

const rf_format *rf_format_of(rf_rollout_dtype dtype) {
  return dtype > RF_ROLLOUT_DTYPE_MODEL && dtype < RF_ROLLOUT_DTYPE_COUNT ? &table[dtype - 1]
                                                                          : NULL;
}

const rf_format *rf_format_at(int index) {
  return index >= 0 && index < rf_format_count() ? &table[index] : NULL;
}

const rf_format *rf_format_find(const char *name) {
  for (int i = 0; name && i < rf_format_count(); i++)
    if (strcmp(table[i].name, name) == 0)
      return &table[i];
  return NULL;
}

void rf_format_names(char *buf, size_t len) {
  size_t used = 0;
  if (len)
    buf[0] = '\0';
  for (int i = 0; i < rf_format_count() && used < len; i++) {
    int n = snprintf(buf + used, len - used, "%s%s", i ? ", " : "", table[i].name);
    used += n > 0 ? (size_t)n : 0;
  }
}

rf_dtype rf_format_scale_dtype(const rf_format *f) {
  return f->scale_store == RF_SCALE_STORE_FP32   ? RF_DTYPE_FP32
         : f->scale_store == RF_SCALE_STORE_E8M0 ? RF_DTYPE_U8
                                                 : RF_DTYPE_FP8;
}

rf_dtype rf_format_weight_dtype(const rf_format *f) {
  return f->elem_bits == 4 ? RF_DTYPE_U8 : RF_DTYPE_FP8;
}

/* Null-safe, for the global suffix that only some formats have. */
static int same_name(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

int rf_format_same_file(const rf_format *a, const rf_format *b) {
  return a->elem == b->elem && a->block_rows == b->block_rows && a->block_cols == b->block_cols &&
         a->scale_store == b->scale_store && a->global_scale == b->global_scale &&
         same_name(a->weight_suffix, b->weight_suffix) &&
         same_name(a->scale_suffix, b->scale_suffix) &&
         same_name(a->global_suffix, b->global_suffix);
}

void rf_format_same_file_names(const rf_format *f, char *buf, size_t len) {
  const rf_format *alike[RF_ROLLOUT_DTYPE_COUNT];
  int n = 0;
  for (int i = 0; i < rf_format_count(); i++)
    if (rf_format_same_file(f, &table[i]))
      alike[n++] = &table[i];
  size_t used = 0;
  if (len)
    buf[0] = '\0';
  for (int i = 0; i < n && used < len; i++) {
    const char *sep = i == 0 ? "" : i + 1 < n ? ", " : " or ";
    int k = snprintf(buf + used, len - used, "%s%s", sep, alike[i]->name);
    used += k > 0 ? (size_t)k : 0;
  }
}

rf_box rf_format_blocks_of(const rf_format *f, const rf_box *b) {
  rf_box r;
  int64_t edge[2] = {f->block_rows, f->block_cols};
  for (int d = 0; d < 2; d++) {
    r.lo[d] = b->lo[d] / edge[d];
    r.hi[d] = (b->hi[d] + edge[d] - 1) / edge[d];
  }
  return r;
}

const char *rf_format_rollout_scale_suffix(const rf_format *f) { return f->rollout_scale_suffix; }

int rf_format_block_fp8(const rf_format *f) {
  return f->elem == RF_ELEM_E4M3 && f->block_rows == 128 && f->block_cols == 128 &&
         f->scale_store == RF_SCALE_STORE_FP32;
}

int rf_format_moved(const rf_format *f) {
  if (rf_format_block_fp8(f))
    return 1;
  return f->block_rows == 1 && f->block_cols <= 32 && f->scale_bytes == 1 &&
         (f->elem_bits == 8 || (f->elem_bits == 4 && f->block_cols % 2 == 0));
}

void rf_format_moved_names(char *buf, size_t len) {
  size_t used = 0;
  if (len)
    buf[0] = '\0';
  for (int i = 0; i < rf_format_count() && used < len; i++) {
    if (!rf_format_moved(&table[i]))
      continue;
    int n = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", table[i].name);
    used += n > 0 ? (size_t)n : 0;
  }
}

rf_box rf_format_byte_box(const rf_format *f, const rf_box *box) {
  rf_box b = *box;
  if (f->elem_bits == 4)
    b.lo[1] /= 2, b.hi[1] /= 2;
  return b;
}

int64_t rf_format_row_bytes(const rf_format *f, int64_t cols) {
  return f->elem_bits == 4 ? cols / 2 : cols;
}

int64_t rf_format_block_grid(const rf_format *f, int dim, int64_t extent) {
  int64_t b = dim == 0 ? f->block_rows : f->block_cols;
  return (extent + b - 1) / b;
}

int64_t rf_format_scale_bytes(const rf_format *f, int64_t rows, int64_t cols) {
  int64_t gr = rf_format_block_grid(f, 0, rows), gc = rf_format_block_grid(f, 1, cols);
  if (f->scale_layout == RF_SCALE_SWIZZLED_128X4)
    gr = (gr + 127) / 128 * 128, gc = (gc + 3) / 4 * 4;
  return gr * gc * f->scale_bytes;
}

/* The 128x4 tiles: the grid, padded to 128 rows and 4 columns, is cut into tiles of 128 block
 * rows by 4 block columns, row-major over the tiles; inside a tile, block (r, c) sits at
 * (r % 32) * 16 + (r / 32) * 4 + c, so that each 32-row group's four columns interleave. The
 * layout vLLM's swizzle_blockscale gives NVFP4 scales for the CUTLASS and FlashInfer GEMMs. */
int64_t rf_format_scale_offset(const rf_format *f, int64_t grid_cols, int64_t i, int64_t j) {
  if (f->scale_layout != RF_SCALE_SWIZZLED_128X4)
    return i * grid_cols + j;
  int64_t tiles_across = (grid_cols + 3) / 4;
  int64_t tile = (i / 128) * tiles_across + j / 4, r = i % 128, c = j % 4;
  return tile * 512 + (r % 32) * 16 + (r / 32) * 4 + c;
}
