/* Quantized checkpoints in every format of the table (format.h; docs/architecture.md,
 * "Quantized formats"): each linear weight P.weight becomes P + weight_suffix, followed by its
 * scales at P + scale_suffix and, for a format with a global scale, P + global_suffix; the
 * other tensors stay in their own dtype. The names and dtypes are each ecosystem's:
 *   fp8, fp8-ue8m0  P.weight F8_E4M3, P.weight_scale_inv F32 [rows/128, cols/128] (DeepSeek-V3,
 *                   DeepSeek-V3.1's power-of-two scales)
 *   mxfp8           P.weight F8_E4M3, P.weight_scale U8 (E8M0) [rows, cols/32]
 *   mxfp4           P_blocks U8 [rows, cols/2] (two e2m1 a byte, the even column in the low
 *                   nibble), P_scales U8 (E8M0) [rows, cols/32]: gpt-oss's tensors, whose files
 *                   shape the same bytes [rows, cols/32, 16]
 *   nvfp4           P.weight U8 [rows, cols/2], P.weight_scale F8_E4M3 [rows, cols/16]
 *                   (row-major, as ModelOpt writes them; vLLM swizzles them when it loads),
 *                   P.weight_scale_2 F32 [] (ModelOpt's), shared by the members of a
 *                   fused group (q, k, v; gate, up; each expert's gate and up) as ModelOpt's
 *                   export and vLLM's one weight_scale_2 per parameter have it
 * Writing streams the synthetic weights quantized by the CPU reference (format_ref.c) in bands
 * of whole block rows; a format with a global scale reads its group's tensors once more first,
 * for their maximum. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "io/checkpoint_internal.h"
#include "layout/layout.h"
#include "verify/fp8.h"
#include "verify/verify.h"

/* The length of t's name without a trailing ".weight": the prefix P of the names above. */
static size_t prefix_len(const char *name) {
  size_t n = strlen(name), w = strlen(".weight");
  return n > w && strcmp(name + n - w, ".weight") == 0 ? n - w : n;
}

static rf_status name_as(rf_tensor *v, const rf_tensor *t, const char *suffix) {
  int n = snprintf(v->name, sizeof v->name, "%.*s%s", (int)prefix_len(t->name), t->name, suffix);
  if (n < 0 || (size_t)n >= sizeof v->name)
    return rf_fail(RF_ERR_MODEL, "checkpoint: %.*s%s is longer than %d characters",
                   (int)prefix_len(t->name), t->name, suffix, RF_NAME_MAX - 1);
  return RF_OK;
}

static void shape_as(rf_tensor *v, int ndim, int64_t rows, int64_t cols, rf_dtype dt) {
  v->ndim = ndim;
  v->shape[0] = ndim ? rows : 1;
  v->shape[1] = ndim == 2 ? cols : 1;
  v->numel = v->shape[0] * v->shape[1];
  v->dtype = dt;
  v->own_dtype = 1;
  v->elem_bits = 0; /* the file's tensor in its own dtype, whatever the model's holds */
  v->bytes = v->numel * rf_dtype_size(dt);
}

/* View tensor n: part `role` of model tensor x (its weight, scales or global, or x itself). */
static rf_status view_part(const rf_model *m, const rf_format *f, const rf_tensor *x, int role,
                           rf_tensor *v) {
  rf_stack stack;
  int stacked = rf_model_stack(m, x, &stack);
  rf_status st = RF_OK;
  *v = *x;
  if (role == CK_ROLE_WEIGHT) {
    st = name_as(v, x, f->weight_suffix);
    shape_as(v, 2, x->shape[0], rf_format_row_bytes(f, x->shape[1]),
             f->elem_bits == 4 ? RF_DTYPE_U8 : RF_DTYPE_FP8);
  } else if (role == CK_ROLE_SCALE) {
    st = name_as(v, x, f->scale_suffix);
    shape_as(v, 2, rf_format_block_grid(f, 0, x->shape[0]), rf_format_block_grid(f, 1, x->shape[1]),
             rf_format_scale_dtype(f));
  } else if (role == CK_ROLE_GLOBAL) {
    st = name_as(v, x, f->global_suffix);
    shape_as(v, 0, 1, 1, RF_DTYPE_FP32);
  }
  /* A stacked member's parts are members of entries of their own, stored as the format lays
   * them out ([out, in]); a packed weight's rows are shaped one scaling block of bytes at a
   * time for a format whose checkpoints do so (gpt-oss's [rows, cols / 32, 16] _blocks). */
  if (stacked && role != CK_ROLE_PLAIN)
    v->stack_split =
        role == CK_ROLE_WEIGHT && f->stack_blocks ? (int)rf_format_row_bytes(f, f->block_cols) : 1;
  return st;
}

rf_status ck_format_view(const rf_model *m, const rf_format *f, rf_model *view, ck_view_map *map) {
  size_t cap = (size_t)m->tensor_count * 3 + 1;
  *view = *m;
  memset(map, 0, sizeof *map);
  view->tensors = rf_calloc(cap, sizeof *view->tensors, "a quantized checkpoint's tensors");
  map->source = rf_calloc(cap, sizeof *map->source, "a quantized checkpoint's tensors");
  map->role = rf_calloc(cap, sizeof *map->role, "a quantized checkpoint's tensors");
  map->scale = rf_calloc(cap, sizeof *map->scale, "a quantized checkpoint's tensors");
  map->global = rf_calloc(cap, sizeof *map->global, "a quantized checkpoint's tensors");
  if (!view->tensors || !map->source || !map->role || !map->scale || !map->global) {
    free(view->tensors);
    view->tensors = NULL;
    ck_view_map_free(map);
    return RF_ERR_NOMEM;
  }
  int n = 0;
  view->total_bytes = 0;
  rf_status st = RF_OK;
  for (int t = 0; t < m->tensor_count && st == RF_OK;) {
    const rf_tensor *x = &m->tensors[t];
    int quantized = rf_model_quantizes(m, x);
    int parts = !quantized ? 1 : f->global_scale ? 3 : 2;
    /* The members of a stacked entry follow each other in the model; quantized, each part
     * becomes an entry of its own, so the view takes the run of members part by part: every
     * weight, then every scale (and global). Any other tensor is a run of one. */
    rf_stack stack;
    int run = 1;
    if (quantized && rf_model_stack(m, x, &stack) && stack.member == 0)
      run = (int)stack.members;
    for (int p = 0; p < parts && st == RF_OK; p++)
      for (int k = 0; k < run && st == RF_OK; k++, n++) {
        int role = !quantized ? CK_ROLE_PLAIN
                   : p == 0   ? CK_ROLE_WEIGHT
                   : p == 1   ? CK_ROLE_SCALE
                              : CK_ROLE_GLOBAL;
        st = view_part(m, f, &m->tensors[t + k], role, &view->tensors[n]);
        view->tensors[n].id = n;
        map->source[n] = t + k;
        map->role[n] = role;
        map->scale[n] = role == CK_ROLE_WEIGHT ? n + run : -1;
        map->global[n] = role == CK_ROLE_WEIGHT && parts == 3 ? n + 2 * run : -1;
        view->total_bytes += view->tensors[n].bytes;
      }
    t += run;
  }
  view->tensor_count = n;
  if (st != RF_OK) {
    free(view->tensors);
    view->tensors = NULL;
    ck_view_map_free(map);
  }
  return st;
}

void ck_view_map_free(ck_view_map *map) {
  free(map->source), free(map->role), free(map->scale), free(map->global);
  memset(map, 0, sizeof *map);
}

typedef struct {
  const rf_model *model;
  const rf_format *format;
  const int *source, *role;
  uint8_t *scales;   /* the last weight's scales, emitted as the next tensor */
  int scales_source; /* the model tensor they are of (-1: none) */
  float global;      /* and its global scale, after them */
  /* A format with a global scale: each linear weight's group leader (rf_layout_global_groups)
   * and the global of each group once known (NaN before), which its members share. */
  int *leader;
  float *group_global;
} format_writer;

/* Rows of tensor t a band takes: whole block rows, about one batch of the source. */
static int64_t band_rows(const rf_format *f, const rf_tensor *t) {
  int64_t rows = ck_batch_rows(t, t->shape[1], rf_tensor_esize(t));
  rows = RF_MAX(rows / f->block_rows, 1) * f->block_rows;
  return RF_MIN(rows, t->shape[0]);
}

/* The maximum |x| of t's generator values, a band of `rows` rows at a time through x. */
static float tensor_amax(const rf_tensor *t, uint64_t seed, void *x, int64_t rows) {
  float amax = 0;
  for (int64_t r0 = 0; r0 < t->shape[0]; r0 += rows) {
    rf_box b = {{r0, 0}, {RF_MIN(r0 + rows, t->shape[0]), t->shape[1]}};
    rf_region reg = rf_region_row_major(x, &b, rf_tensor_esize(t));
    rf_fill_region(&reg, &b, t, seed, NULL, t->dtype);
    float a = rf_fp8_block_amax(x, t->dtype, t->shape[1], b.hi[0] - r0, t->shape[1]);
    amax = a > amax ? a : amax;
  }
  return amax;
}

/* The global scale of t (1 for formats without one): that of the maximum over every member of
 * its group, the tensors that share a vLLM parameter's weight_scale_2 (q, k, v; gate, up; an
 * expert's gate and up), so that the file holds what a rollout of the same weights does. A
 * group's members follow its leader within one layer. */
static rf_status tensor_global(format_writer *w, const rf_tensor *t, uint64_t seed, float *out) {
  *out = 1.0f;
  if (!w->format->global_scale)
    return RF_OK;
  const rf_model *m = w->model;
  int leader = w->leader[t->id];
  if (!isnan(w->group_global[leader])) {
    *out = w->group_global[leader];
    return RF_OK;
  }
  float amax = 0;
  for (int u = leader; u < m->tensor_count && m->tensors[u].layer == m->tensors[leader].layer;
       u++) {
    if (w->leader[u] != leader)
      continue;
    const rf_tensor *x = &m->tensors[u];
    int64_t rows = band_rows(w->format, x);
    void *buf = rf_malloc((size_t)(rows * x->shape[1] * rf_tensor_esize(x)), "a band of weights");
    if (!buf)
      return RF_ERR_NOMEM;
    float a = tensor_amax(x, seed, buf, rows);
    free(buf);
    amax = a > amax ? a : amax;
  }
  *out = w->group_global[leader] = rf_format_global_of(w->format, amax);
  return RF_OK;
}

/* Quantizes t band by band, keeping its scales and global in w and emitting the bytes as view
 * tensor v; with emit NULL only the scales and global are kept (a stacked member's scales,
 * which the file holds after every member's weight). */
static rf_status write_weight(format_writer *w, const rf_tensor *t, const rf_tensor *v,
                              uint64_t seed, ck_emit_fn emit, void *ctx) {
  const rf_format *f = w->format;
  int64_t rows = band_rows(f, t), cols = t->shape[1], row_bytes = rf_format_row_bytes(f, cols);
  int64_t grid_cols = rf_format_block_grid(f, 1, cols);
  void *x = rf_malloc((size_t)(rows * cols * rf_tensor_esize(t)), "a band of weights");
  uint8_t *q = rf_malloc((size_t)(rows * row_bytes), "a band of quantized weights");
  free(w->scales);
  w->scales =
      rf_malloc((size_t)(rf_format_block_grid(f, 0, t->shape[0]) * grid_cols * f->scale_bytes),
                "a weight's scales");
  rf_status st = x && q && w->scales ? RF_OK : RF_ERR_NOMEM;
  w->scales_source = st == RF_OK ? t->id : -1;
  if (st == RF_OK)
    st = tensor_global(w, t, seed, &w->global);
  for (int64_t r0 = 0; r0 < t->shape[0] && st == RF_OK; r0 += rows) {
    int64_t r1 = RF_MIN(r0 + rows, t->shape[0]);
    rf_box b = {{r0, 0}, {r1, cols}};
    rf_region reg = rf_region_row_major(x, &b, rf_tensor_esize(t));
    rf_fill_region(&reg, &b, t, seed, NULL, t->dtype);
    uint8_t *s = w->scales + r0 / f->block_rows * grid_cols * f->scale_bytes;
    st = rf_format_quantize_ref(f, t->name, x, t->dtype, r1 - r0, cols, cols, w->global, q, s);
    if (st == RF_OK && emit)
      st = emit(ctx, v, r0, r1, q, (size_t)((r1 - r0) * row_bytes));
  }
  free(x);
  free(q);
  return st;
}

static rf_status generate(void *gen, const rf_model *view, int i, uint64_t seed, ck_emit_fn emit,
                          void *ctx) {
  format_writer *w = gen;
  const rf_tensor *t = &w->model->tensors[w->source[i]], *v = &view->tensors[i];
  rf_status st = RF_OK;
  if ((w->role[i] == CK_ROLE_SCALE || w->role[i] == CK_ROLE_GLOBAL) && w->scales_source != t->id)
    RF_TRY(write_weight(w, t, v, seed, NULL, NULL));
  switch (w->role[i]) {
  case CK_ROLE_WEIGHT:
    return write_weight(w, t, v, seed, emit, ctx);
  case CK_ROLE_SCALE:
    st = emit(ctx, v, 0, v->shape[0], w->scales, (size_t)v->bytes);
    if (!w->format->global_scale) {
      free(w->scales);
      w->scales = NULL;
      w->scales_source = -1;
    }
    return st;
  case CK_ROLE_GLOBAL:
    return emit(ctx, v, 0, 1, &w->global, sizeof w->global);
  default:
    return ck_generate(t, seed, NULL, emit, ctx);
  }
}

rf_status rf_checkpoint_write_format(const char *path, const rf_model *model, const rf_format *f,
                                     uint64_t seed, int64_t *bytes) {
  ck_view_map map;
  rf_model view;
  *bytes = 0;
  RF_TRY(ck_format_view(model, f, &view, &map));
  format_writer w = {model, f, map.source, map.role, NULL, -1, 1.0f, NULL, NULL};
  rf_status st = RF_OK;
  if (f->global_scale) {
    w.leader = rf_calloc((size_t)model->tensor_count + 1, sizeof *w.leader, "global groups");
    w.group_global =
        rf_calloc((size_t)model->tensor_count + 1, sizeof *w.group_global, "global groups");
    st = w.leader && w.group_global ? rf_layout_global_groups(model, w.leader) : RF_ERR_NOMEM;
    for (int t = 0; st == RF_OK && t < model->tensor_count; t++)
      w.group_global[t] = NAN;
  }
  if (st == RF_OK)
    st = ck_st_write_file(path, &view, seed, generate, &w);
  free(w.leader);
  free(w.group_global);
  *bytes = view.total_bytes;
  free(w.scales);
  ck_view_map_free(&map);
  free(view.tensors);
  return st;
}
