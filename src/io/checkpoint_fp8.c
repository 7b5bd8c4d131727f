/* Block-FP8 checkpoints (docs/architecture.md, "FP8 checkpoints"): the layout of DeepSeek-V3's
 * and Kimi-K2's safetensors files, in which every linear weight X.weight is F8_E4M3 and is
 * followed by X.weight_scale_inv, F32, one element per 128x128 block; embeddings, lm_head,
 * norms and routers stay in their own dtype.
 *
 * Both directions go through the checkpoint's view of the model (ck_format_view): the model's
 * tensors with each linear weight turned fp8 and its scale tensor inserted after it. Writing
 * streams the view (checkpoint_format.c); reading opens the view with the ordinary reader, so every
 * header, dtype, shape and truncation check applies unchanged, and computes the checksums an fp8
 * run records for its rollout.
 *
 * The reading side takes any moved format (format.h, rf_format_moved) for refit verify: an
 * mxfp8 file (refit checkpoint --dtype mxfp8) holds X.weight F8_E4M3 followed by
 * X.weight_scale, U8 (E8M0), one byte per 1x32 block, and its view is built from the format's
 * block and scale dtype; a 4-bit file's weights are read as packed bytes and nvfp4's global
 * adds its term (rf_format_global_checksum). Any of them is read as the trainer's weights too
 * (rf_checkpoint_open_quantized): a 4-bit weight's boxes are then boxes of its packed bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint_internal.h"
#include "layout/layout.h"
#include "verify/fp8.h"
#include "verify/verify.h"

/* The format of a block-FP8 file read as the trainer's weights: fp8 and fp8-ue8m0 files have
 * the same names, grid and dtypes. */
static const rf_format *block_fp8(void) { return rf_format_of(RF_FORMAT_FP8); }

/* The rows of a band of tensor t that is written or summed at once: whole block rows of f, as
 * many as a batch of CK_BATCH_BYTES holds, but no more than the tensor has (a small tensor's
 * band was once a whole batch, 64 MiB allocated and filled for a few hundred bytes). */
static int64_t band_rows(const rf_format *f, const rf_tensor *t, int esize) {
  int64_t edge = f->block_rows;
  int64_t rows = RF_MAX(ck_batch_rows(t, t->shape[1], esize) / edge, 1) * edge;
  return RF_MIN(rows, rf_format_block_grid(f, 0, t->shape[0]) * edge);
}

/* ---- reading ------------------------------------------------------------------------------ */

/* The checksum of format f (rf_format_checksum) of model tensor t from view tensors i (its
 * quantized bytes, packed two a byte for 4-bit elements), i + 1 (its scales) and, for a format
 * with a global scale, i + 2 (its global, rf_format_global_checksum), bands of whole block rows
 * at a time. */
static rf_status fp8_sum(const rf_format *f, rf_checkpoint *c, const rf_tensor *t, int i, int scale,
                         int global, uint64_t *out) {
  const rf_tensor *s = &c->model->tensors[scale];
  rf_box all = {{0, 0}, {s->shape[0], s->shape[1]}};
  int64_t rows = band_rows(f, t, 1);
  uint8_t *scales = rf_malloc((size_t)s->bytes, "fp8 scales");
  uint8_t *q =
      rf_malloc((size_t)(rows * rf_format_row_bytes(f, t->shape[1])) + 1, "a band of fp8 weights");
  rf_status st = scales && q ? RF_OK : RF_ERR_NOMEM;
  rf_region sreg = rf_region_row_major(scales, &all, f->scale_bytes);
  if (st == RF_OK)
    st = ck_read(c, scale, &all, &sreg);
  uint64_t sum = 0;
  for (int64_t r0 = 0; r0 < t->shape[0] && st == RF_OK; r0 += rows) {
    rf_box b = {{r0, 0}, {RF_MIN(r0 + rows, t->shape[0]), t->shape[1]}};
    rf_box bb = {{r0 / f->block_rows, 0}, {rf_format_block_grid(f, 0, b.hi[0]), s->shape[1]}};
    rf_box bytes = rf_format_byte_box(f, &b);
    rf_region qreg = rf_region_row_major(q, &bytes, 1);
    st = ck_read(c, i, &bytes, &qreg);
    if (st == RF_OK)
      sum += rf_format_checksum(f, c->checksum, t, &qreg, &b, &sreg, &bb);
  }
  if (st == RF_OK && f->global_scale) {
    float g = 0;
    rf_box one = {{0, 0}, {1, 1}};
    rf_region greg = rf_region_row_major(&g, &one, 4);
    st = ck_read(c, global, &one, &greg);
    sum += rf_format_global_checksum(c->checksum, t, g);
  }
  free(scales);
  free(q);
  *out = sum;
  return st;
}

rf_status rf_checkpoint_fp8_checksums(const char *path, const rf_model *model, int format,
                                      uint64_t *sums, int *fp8) {
  return rf_checkpoint_format_checksums(path, model, block_fp8(), format, sums, fp8);
}

rf_status rf_checkpoint_format_checksums(const char *path, const rf_model *model,
                                         const rf_format *f, int format, uint64_t *sums, int *fp8) {
  rf_model view;
  ck_view_map map;
  RF_TRY(ck_format_view(model, f, &view, &map));
  const int *source = map.source, *role = map.role;
  rf_checkpoint *c = NULL;
  rf_status st = rf_checkpoint_open_for(path, &view, RF_CHECKPOINT_FOR_VERIFY, &c);
  if (st == RF_OK)
    rf_checkpoint_checksum_format(c, format);
  for (int i = 0; i < view.tensor_count && st == RF_OK; i++) {
    if (role[i] == CK_ROLE_SCALE || role[i] == CK_ROLE_GLOBAL)
      continue;
    const rf_tensor *t = &model->tensors[source[i]];
    fp8[source[i]] = role[i] == CK_ROLE_WEIGHT;
    if (fp8[source[i]]) {
      st = fp8_sum(f, c, t, i, map.scale[i], map.global[i], &sums[source[i]]);
      continue;
    }
    /* The checksum under the model's tensor id, read through the view's tensor. */
    st = ck_checksum_as(c, i, t, &sums[source[i]]);
  }
  if (c)
    rf_checkpoint_close(c);
  ck_view_map_free(&map);
  rf_model_free(&view);
  return st;
}

/* ---- reading as trainer weights ----------------------------------------------------------- */

/* Refuses a file whose fused members (the tensors that share one rollout weight_scale_2,
 * rf_layout_global_groups) hold different globals: the rollout keeps one per group, so it
 * could not hold the file as it is. refit's own nvfp4 checkpoints give a group one global. */
static rf_status check_globals(rf_checkpoint *c, const rf_model *model) {
  int n = model->tensor_count;
  int *leader = rf_calloc((size_t)n + 1, sizeof *leader, "global scale groups");
  float *global = rf_calloc((size_t)n + 1, sizeof *global, "global scales");
  rf_status st = leader && global ? rf_layout_global_groups(model, leader) : RF_ERR_NOMEM;
  for (int t = 0; t < n && st == RF_OK; t++) {
    if (leader[t] < 0)
      continue;
    st = rf_checkpoint_read_global(c, t, &global[t]);
    uint32_t a, b;
    memcpy(&a, &global[t], 4), memcpy(&b, &global[leader[t]], 4);
    if (st == RF_OK && a != b)
      st = rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': %s is %.9g but %s is %.9g; a rollout holds one global "
                   "scale for the tensors it fuses, so they must share one (refit checkpoint "
                   "--dtype %s writes such a file)",
                   c->path, c->view->tensors[c->view_of[t] + 2].name, (double)global[t],
                   c->view->tensors[c->view_of[leader[t]] + 2].name, (double)global[leader[t]],
                   c->format->name);
  }
  free(leader);
  free(global);
  return st;
}

rf_status rf_checkpoint_open_quantized(const char *path, const rf_model *model, const rf_format *f,
                                       rf_checkpoint **out) {
  *out = NULL;
  rf_model *view = rf_calloc(1, sizeof *view, "the quantized checkpoint's view");
  ck_view_map map;
  if (!view)
    return RF_ERR_NOMEM;
  rf_status st = ck_format_view(model, f, view, &map);
  if (st != RF_OK) {
    free(view);
    return st;
  }
  int *view_of = rf_calloc((size_t)model->tensor_count + 1, sizeof *view_of, "the file's view");
  for (int i = 0; i < view->tensor_count && view_of; i++)
    if (map.role[i] == CK_ROLE_PLAIN || map.role[i] == CK_ROLE_WEIGHT)
      view_of[map.source[i]] = i;
  ck_view_map_free(&map);
  rf_checkpoint *c = NULL;
  st = view_of ? rf_checkpoint_open(path, view, &c) : RF_ERR_NOMEM;
  if (st != RF_OK) {
    free(view_of);
    rf_model_free(view);
    free(view);
    return st;
  }
  c->view = view;
  c->view_of = view_of;
  c->run_model = model;
  c->format = f;
  if (f->global_scale && (st = check_globals(c, model)) != RF_OK) {
    rf_checkpoint_close(c);
    return st;
  }
  *out = c;
  return RF_OK;
}

/* Whether the file holds the view tensor `v` under its name with its dtype, from the header. */
static int holds(const char *path, const rf_tensor *v) {
  char tag[32];
  ck_st_dtype_tag(path, v->name, tag, sizeof tag);
  return strcmp(tag, ck_dtype_tag(v->dtype)) == 0;
}

/* The first format of the table whose names and dtypes (ck_format_view) the file gives the
 * model's first linear weight and its scales; failing that, the first whose weight alone it
 * holds, so that a damaged file (its scales missing or mistyped) is still opened in its
 * format and its damage described in those terms. Read from the headers alone. */
rf_status rf_checkpoint_quantized_format(const char *path, const rf_model *model,
                                         const rf_format **out) {
  *out = NULL;
  int first = -1;
  for (int t = 0; t < model->tensor_count && first < 0; t++)
    if (rf_model_quantizes(model, &model->tensors[t]))
      first = t;
  const rf_format *weight_only = NULL;
  for (int i = 0; i < rf_format_count() && first >= 0 && !*out; i++) {
    const rf_format *f = rf_format_at(i);
    rf_model view;
    ck_view_map map;
    RF_TRY(ck_format_view(model, f, &view, &map));
    int w = 0;
    while (w < view.tensor_count && !(map.source[w] == first && map.role[w] == CK_ROLE_WEIGHT))
      w++;
    if (w < view.tensor_count && map.scale[w] >= 0 && holds(path, &view.tensors[w])) {
      if (holds(path, &view.tensors[map.scale[w]]))
        *out = f;
      else if (!weight_only)
        weight_only = f;
    }
    ck_view_map_free(&map);
    rf_model_free(&view);
  }
  if (!*out)
    *out = weight_only;
  return RF_OK;
}

rf_status rf_checkpoint_read_scales(rf_checkpoint *c, int tensor, const rf_box *blocks,
                                    const rf_region *dst) {
  if (!c->view_of || !rf_tensor_quantized(&c->run_model->tensors[tensor]))
    return rf_fail(RF_ERR_INTERNAL, "checkpoint '%s': tensor %d has no scales", c->path, tensor);
  return ck_read(c, c->view_of[tensor] + 1, blocks, dst);
}

rf_status rf_checkpoint_read_global(rf_checkpoint *c, int tensor, float *out) {
  *out = 1.0f;
  if (!c->view_of || !rf_tensor_quantized(&c->run_model->tensors[tensor]) ||
      !c->format->global_scale)
    return rf_fail(RF_ERR_INTERNAL, "checkpoint '%s': tensor %d has no global scale", c->path,
                   tensor);
  rf_box one = {{0, 0}, {1, 1}};
  rf_region r = rf_region_row_major(out, &one, 4);
  return ck_read(c, c->view_of[tensor] + 2, &one, &r);
}

rf_status ck_fp8_checksum(rf_checkpoint *c, int t, uint64_t *out) {
  const rf_tensor *run = &c->run_model->tensors[t];
  int i = c->view_of[t];
  if (rf_tensor_quantized(run)) /* a file read as trainer weights: its entries are unstacked */
    return fp8_sum(c->format, c, run, i, i + 1, c->format->global_scale ? i + 2 : -1, out);
  return ck_checksum_as(c, i, run, out);
}
