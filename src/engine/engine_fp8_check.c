/* The checks of fp8 rollout tensors: every byte and scale against the reference quantization,
 * and the checksums (fp8.h, rf_fp8_checksum). In host memory the CPU reference runs here. In
 * device memory everything runs where the weights are: the reference's source rows are made
 * on the GPU (the generator's fill, or a checkpoint's rows copied up) and quantized by the
 * kernels that test_fp8_gpu pins to the CPU reference, then compared on the GPU; only a count
 * per row comes back, and the rows that hold a mismatch are read back to name their first
 * elements. The CPU check of Llama-3.1-8B took about 120 s, longer than the peers' timeout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "io/io.h"
#include "verify/fp8.h"
#include "verify/verify.h"

/* The reference of this rank's part of fp8 tensor t: its elements from the generator (or the
 * checkpoint) in the trainer's dtype, quantized by the CPU reference of the rollout's format;
 * or, from a quantized checkpoint in the rollout's format, the file's bytes (packed for 4-bit
 * elements) and scales themselves. */
static rf_status reference(const rf_engine *e, rf_checkpoint *ckpt, int t, const rf_box *held,
                           uint8_t *q, uint8_t *scale) {
  const rf_tensor *tensor = &e->plan->layout->model->tensors[t];
  const rf_format *f = rf_layout_format(e->plan->layout);
  int64_t rows = held->hi[0] - held->lo[0], cols = held->hi[1] - held->lo[1];
  if (rf_tensor_quantized(tensor)) { /* a quantized checkpoint: its own bytes and scales */
    rf_box blocks = engine_fp8_blocks_of(e->plan->layout, held);
    rf_box bytes = rf_format_byte_box(f, held);
    rf_region rq = rf_region_row_major(q, &bytes, 1),
              rs = rf_region_row_major(scale, &blocks, f->scale_bytes);
    if (!ckpt)
      return rf_fail(RF_ERR_INTERNAL, "%s: trainer tensor %s is quantized without a checkpoint",
                     f->name, tensor->name);
    RF_TRY(rf_checkpoint_read(ckpt, t, &bytes, &rq));
    return rf_checkpoint_read_scales(ckpt, t, &blocks, &rs);
  }
  void *x = rf_malloc((size_t)(rows * cols * rf_tensor_esize(tensor)), "an fp8 reference");
  if (!x)
    return RF_ERR_NOMEM;
  rf_region r = rf_region_row_major(x, held, rf_tensor_esize(tensor));
  float global = 1.0f;
  rf_status st = engine_fp8_reference_global(e, ckpt, t, &global);
  if (st == RF_OK && ckpt)
    st = rf_checkpoint_read(ckpt, t, held, &r);
  else if (st == RF_OK)
    rf_fill_region(&r, held, tensor, e->seed, &e->moved, tensor->dtype);
  if (st == RF_OK)
    st = rf_format_quantize_ref(f, tensor->name, x, tensor->dtype, rows, cols, cols, global, q,
                                scale);
  free(x);
  return st;
}

static void report(const rf_engine *e, const char *name, const char *suffix, int64_t index,
                   int64_t row, int64_t col, uint32_t got, uint32_t want, int *reported) {
  if ((*reported)++ >= 4)
    return;
  RF_ERROR("verify: %s%s on rollout rank %d: element %lld (row %lld, col %lld) is 0x%x, "
           "expected 0x%x",
           name, suffix, e->rollout_rank, (long long)index, (long long)row, (long long)col, got,
           want);
}

/* The rollout's global of tensor t (nvfp4's X.weight_scale_2, at its expert's index for a
 * stacked tensor) against the reference's: the count of wrong ones, 0 or 1. */
static int64_t check_global(const rf_engine *e, rf_checkpoint *ckpt, int t, int *reported) {
  const rf_layout *lay = e->plan->layout;
  const rf_tensor *tensor = &lay->model->tensors[t];
  float want, got;
  if (engine_fp8_reference_global(e, ckpt, t, &want) != RF_OK)
    return -1;
  int64_t index = engine_fp8_global_index(lay, t);
  if (rf_mem_transfer(&got, RF_MEM_HOST,
                      (const float *)e->data->rollout[lay->slots[t].local + 2] + index, e->memory,
                      sizeof got) != RF_OK)
    return -1;
  uint32_t gb, wb;
  memcpy(&gb, &got, 4), memcpy(&wb, &want, 4);
  if (gb == wb)
    return 0;
  report(e, tensor->name, rf_layout_format(lay)->rollout_global_suffix, index, index, 0, gb, wb,
         reported);
  return 1;
}

static int64_t check_on_host(const rf_engine *e, rf_checkpoint *ckpt, int t, int *reported) {
  const rf_tensor *tensor = &e->plan->layout->model->tensors[t];
  const rf_format *f = rf_layout_format(e->plan->layout);
  size_t sb = (size_t)f->scale_bytes;
  rf_region q;
  engine_scales scale;
  rf_box held, blocks;
  engine_fp8_rollout(e, t, &q, &held, &scale, &blocks);
  /* The quantized bytes: for 4-bit elements two a byte, compared as bytes and reported at the
   * pair's first element. */
  rf_box bytes = q.box;
  int64_t row_bytes = bytes.hi[1] - bytes.lo[1], bcols = blocks.hi[1] - blocks.lo[1];
  int per_byte = 8 / f->elem_bits;
  uint8_t *want_q = rf_malloc((size_t)rf_box_numel(&bytes), "an fp8 reference");
  uint8_t *want_s = rf_malloc((size_t)rf_box_numel(&blocks) * sb, "an fp8 reference");
  int64_t wrong = -1;
  if (want_q && want_s && reference(e, ckpt, t, &held, want_q, want_s) == RF_OK) {
    wrong = 0;
    for (int64_t i = bytes.lo[0]; i < bytes.hi[0]; i++)
      for (int64_t j = bytes.lo[1]; j < bytes.hi[1]; j++) {
        uint8_t got = *(const uint8_t *)rf_region_at(&q, i, j);
        uint8_t want = want_q[(i - bytes.lo[0]) * row_bytes + j - bytes.lo[1]];
        if (got != want && ++wrong)
          report(e, tensor->name, "", i * tensor->shape[1] + j * per_byte, i, j * per_byte, got,
                 want, reported);
      }
    int64_t grid = rf_format_block_grid(f, 1, tensor->shape[1]);
    for (int64_t bi = blocks.lo[0]; bi < blocks.hi[0]; bi++)
      for (int64_t bj = blocks.lo[1]; bj < blocks.hi[1]; bj++) {
        uint32_t got = 0, want = 0;
        memcpy(&got, engine_scale_at(&scale, bi, bj), sb);
        memcpy(&want, &want_s[((bi - blocks.lo[0]) * bcols + bj - blocks.lo[1]) * (int64_t)sb], sb);
        if (got != want && ++wrong)
          report(e, tensor->name, rf_format_rollout_scale_suffix(f), bi * grid + bj, bi, bj, got,
                 want, reported);
      }
    if (f->global_scale) {
      int64_t w = check_global(e, ckpt, t, reported);
      wrong = w < 0 ? -1 : wrong + w;
    }
  }
  free(want_q);
  free(want_s);
  return wrong;
}

/* ---- on the device ---------------------------------------------------------------------- */

/* Bands of whole block rows bound the scratch: about 64 Mi elements of the source a band. */
#define BAND_ELEMENTS ((int64_t)64 << 20)

typedef struct {
  void *src, *q, *scale; /* device: the band's source rows, its reference bytes and scales */
  void *gathered;        /* device: the rollout's tiled scales of the band, row-major */
  void *host;            /* host: a checkpoint's rows on their way up */
  size_t src_bytes, q_bytes, scale_bytes, host_bytes;
  int64_t *row_wrong; /* per row of the band */
  float global;       /* the reference's global scale (e4m3-global; else 1) */
} device_scratch;

static void scratch_free(device_scratch *d) {
  rf_mem_free(RF_MEM_DEVICE, d->src, d->src_bytes);
  rf_mem_free(RF_MEM_DEVICE, d->q, d->q_bytes);
  rf_mem_free(RF_MEM_DEVICE, d->scale, d->scale_bytes);
  rf_mem_free(RF_MEM_DEVICE, d->gathered, d->scale_bytes);
  free(d->host);
  free(d->row_wrong);
}

/* The reference bytes and scales of `box` (whole block rows of the held box) into d->q and
 * d->scale, row-major: a block-FP8 checkpoint's own, else the source quantized on the GPU. */
static rf_status reference_band(const rf_engine *e, rf_checkpoint *ckpt, int t, const rf_box *box,
                                device_scratch *d) {
  const rf_tensor *tensor = &e->plan->layout->model->tensors[t];
  const rf_format *f = rf_layout_format(e->plan->layout);
  rf_box blocks = engine_fp8_blocks_of(e->plan->layout, box);
  int64_t rows = box->hi[0] - box->lo[0], cols = box->hi[1] - box->lo[1];
  int64_t row_bytes = rf_format_row_bytes(f, cols);
  size_t qb = (size_t)(rows * cols), sb = (size_t)(rf_box_numel(&blocks) * f->scale_bytes);
  if (rf_tensor_quantized(tensor)) { /* a quantized checkpoint's bytes (4-bit: packed) */
    rf_box bytes = rf_format_byte_box(f, box);
    size_t packed = (size_t)(rows * row_bytes);
    rf_region rq = rf_region_row_major(d->host, &bytes, 1);
    rf_region rs = rf_region_row_major((char *)d->host + packed, &blocks, f->scale_bytes);
    if (!ckpt)
      return rf_fail(RF_ERR_INTERNAL, "%s: trainer tensor %s is quantized without a checkpoint",
                     f->name, tensor->name);
    RF_TRY(rf_checkpoint_read(ckpt, t, &bytes, &rq));
    RF_TRY(rf_checkpoint_read_scales(ckpt, t, &blocks, &rs));
    RF_TRY(rf_mem_transfer(d->q, RF_MEM_DEVICE, d->host, RF_MEM_HOST, packed));
    return rf_mem_transfer(d->scale, RF_MEM_DEVICE, (char *)d->host + packed, RF_MEM_HOST, sb);
  }
  int esize = rf_tensor_esize(tensor);
  rf_region src = rf_region_row_major(d->src, box, esize);
  if (ckpt) {
    rf_region staged = rf_region_row_major(d->host, box, esize);
    RF_TRY(rf_checkpoint_read(ckpt, t, box, &staged));
    RF_TRY(rf_mem_transfer(d->src, RF_MEM_DEVICE, d->host, RF_MEM_HOST, qb * (size_t)esize));
  } else {
    RF_TRY(rf_fill_region_on(RF_MEM_DEVICE, &src, box, tensor, e->seed, &e->moved, tensor->dtype));
  }
  rf_fp8_job job = {.x = d->src,
                    .dtype = tensor->dtype,
                    .x_stride = cols,
                    .rows = rows,
                    .cols = cols,
                    .q = d->q,
                    .q_stride = row_bytes,
                    .scale = d->scale,
                    .scale_stride = blocks.hi[1] - blocks.lo[1],
                    .tag = t,
                    .row0 = box->lo[0],
                    .col0 = box->lo[1]};
  /* The reference's scales are row-major, as a checkpoint's; the global is the one of the
   * group's whole tensors (not the agreed maxima), as the host check takes it. */
  rf_fp8_job_format(&job, f, d->global);
  RF_TRY(rf_fp8_quantize_device(&job));
  rf_fp8_bad bad;
  RF_TRY(rf_fp8_device_bad(&bad));
  if (bad.found)
    return engine_fp8_non_finite(tensor, bad.nan, bad.row,
                                 RF_MIN(bad.row + f->block_rows, box->hi[0]), bad.col,
                                 RF_MIN(bad.col + f->block_cols, box->hi[1]));
  return RF_OK;
}

/* Compares `rows` x `cols` elements of esize bytes of got (the rollout's, at (r0, c0) of the
 * tensor or block grid) with want (row-major) on the GPU; the rows that differ are read back
 * to report their first elements as the host check does. `per` is the elements a compared
 * unit holds: 2 for packed 4-bit bytes, reported at the pair's first element. Returns the
 * count, or -1. */
static int64_t compare_band(const rf_engine *e, const char *name, const char *suffix, int64_t width,
                            int per, const rf_region *got, int64_t r0, int64_t c0, const void *want,
                            int64_t rows, int64_t cols, int esize, int64_t *row_wrong,
                            int *reported) {
  if (rf_gpu_compare_rows(rf_region_at(got, r0, c0), got->stride[0], want, cols, rows, cols, esize,
                          row_wrong) != RF_OK)
    return -1;
  int64_t wrong = 0;
  for (int64_t r = 0; r < rows; r++) {
    wrong += row_wrong[r];
    if (!row_wrong[r] || *reported >= 4)
      continue;
    size_t bytes = (size_t)(cols * esize);
    char *g = rf_malloc(2 * bytes, "a row of an fp8 check");
    if (!g ||
        rf_mem_transfer(g, RF_MEM_HOST, rf_region_at(got, r0 + r, c0), RF_MEM_DEVICE, bytes) !=
            RF_OK ||
        rf_mem_transfer(g + bytes, RF_MEM_HOST, (const char *)want + (size_t)r * bytes,
                        RF_MEM_DEVICE, bytes) != RF_OK) {
      free(g);
      return -1;
    }
    for (int64_t c = 0; c < cols; c++) {
      uint32_t gv = 0, wv = 0;
      memcpy(&gv, g + c * esize, (size_t)esize);
      memcpy(&wv, g + bytes + c * esize, (size_t)esize);
      if (gv != wv)
        report(e, name, suffix, (r0 + r) * width + (c0 + c) * per, r0 + r, (c0 + c) * per, gv, wv,
               reported);
    }
    free(g);
  }
  return wrong;
}

/* Every format the kernels take (rf_format_moved): the quantized bytes compared as bytes
 * (4-bit: two elements a byte, in the byte coordinates of the rollout region), the scales as
 * stored; scales in 128x4 tiles are first gathered into row-major order on the GPU
 * (rf_gpu_copy_scales), the order of the reference's. */
static int64_t check_on_device(const rf_engine *e, rf_checkpoint *ckpt, int t, int *reported) {
  const rf_tensor *tensor = &e->plan->layout->model->tensors[t];
  rf_region q;
  engine_scales scales;
  rf_box held, blocks;
  engine_fp8_rollout(e, t, &q, &held, &scales, &blocks);
  const rf_format *f = rf_layout_format(e->plan->layout);
  int64_t cols = held.hi[1] - held.lo[1], bcols = blocks.hi[1] - blocks.lo[1];
  int64_t row_bytes = rf_format_row_bytes(f, cols), br = f->block_rows;
  int64_t band = RF_MAX(1, BAND_ELEMENTS / (cols * br)) * br;
  band = RF_MIN(band, 65535 / br * br); /* rows of one comparison launch */
  int esize = rf_tensor_esize(tensor);
  int64_t grid = rf_format_block_grid(f, 1, tensor->shape[1]);
  device_scratch d;
  memset(&d, 0, sizeof d);
  d.global = 1.0f;
  d.q_bytes = (size_t)(band * cols);
  d.scale_bytes = (size_t)(band / br * bcols * f->scale_bytes);
  d.src_bytes = rf_tensor_quantized(tensor) ? 0 : d.q_bytes * (size_t)esize;
  d.host_bytes = ckpt ? d.q_bytes * (size_t)esize + d.scale_bytes : 0;
  int64_t wrong = -1;
  if ((d.src_bytes &&
       rf_mem_alloc(RF_MEM_DEVICE, d.src_bytes, "the source rows of an fp8 check", &d.src)) ||
      rf_mem_alloc(RF_MEM_DEVICE, d.q_bytes, "the reference bytes of an fp8 check", &d.q) ||
      rf_mem_alloc(RF_MEM_DEVICE, d.scale_bytes, "the reference scales of an fp8 check",
                   &d.scale) ||
      (scales.tiles &&
       rf_mem_alloc(RF_MEM_DEVICE, d.scale_bytes, "the gathered scales of a check", &d.gathered)))
    goto done;
  d.row_wrong = rf_calloc((size_t)band, sizeof *d.row_wrong, "an fp8 check's row counts");
  if (!d.row_wrong || (ckpt && !(d.host = rf_malloc(d.host_bytes, "checkpoint rows to check"))) ||
      engine_fp8_reference_global(e, ckpt, t, &d.global) != RF_OK)
    goto done;
  wrong = 0;
  for (int64_t r0 = held.lo[0]; r0 < held.hi[0] && wrong >= 0; r0 += band) {
    rf_box box = {{r0, held.lo[1]}, {RF_MIN(r0 + band, held.hi[0]), held.hi[1]}};
    rf_box bb = engine_fp8_blocks_of(e->plan->layout, &box);
    rf_region scale = scales.r;
    if (scales.tiles) {
      scale = rf_region_row_major(d.gathered, &bb, f->scale_bytes);
      rf_scale_side to = {.base = d.gathered, .stride = bcols};
      rf_scale_side from = engine_scale_side(&scales, &bb);
      if (rf_gpu_copy_scales(&to, &from, bb.hi[0] - bb.lo[0], bcols, f->scale_bytes) != RF_OK) {
        wrong = -1;
        break;
      }
    }
    if (reference_band(e, ckpt, t, &box, &d) != RF_OK) {
      wrong = -1;
      break;
    }
    int64_t w = compare_band(e, tensor->name, "", tensor->shape[1], 8 / f->elem_bits, &q, r0,
                             rf_format_row_bytes(f, held.lo[1]), d.q, box.hi[0] - r0, row_bytes, 1,
                             d.row_wrong, reported);
    int64_t ws = w < 0 ? -1
                       : compare_band(e, tensor->name, rf_format_rollout_scale_suffix(f), grid, 1,
                                      &scale, bb.lo[0], bb.lo[1], d.scale, bb.hi[0] - bb.lo[0],
                                      bcols, f->scale_bytes, d.row_wrong, reported);
    wrong = ws < 0 ? -1 : wrong + w + ws;
  }
  if (wrong >= 0 && f->global_scale) {
    int64_t w = check_global(e, ckpt, t, reported);
    wrong = w < 0 ? -1 : wrong + w;
  }
done:
  scratch_free(&d);
  return wrong;
}

int64_t engine_fp8_check(const rf_engine *e, rf_checkpoint *ckpt, int t, int *reported) {
  if (e->memory == RF_MEM_DEVICE)
    return check_on_device(e, ckpt, t, reported);
  return check_on_host(e, ckpt, t, reported);
}

/* Summed where the bytes are: on the GPU for a device rollout, so a checksum run does not
 * copy every fp8 tensor to the host. Scales in 128x4 tiles are gathered into row-major order
 * first (on the GPU by rf_gpu_copy_scales), so that the sum is that of the checkpoint's row-major
 * scales; a global scale adds its term on the rank whose part starts at (0, 0). */
rf_status engine_fp8_checksum(const rf_engine *e, int t, uint64_t *sum) {
  const rf_layout *lay = e->plan->layout;
  const rf_format *f = rf_layout_format(lay);
  const rf_tensor *tensor = &lay->model->tensors[t];
  rf_region q;
  engine_scales scale;
  rf_box held, blocks;
  engine_fp8_rollout(e, t, &q, &held, &scale, &blocks);
  void *gathered = NULL;
  rf_region rows = scale.r;
  size_t gathered_bytes = (size_t)(rf_box_numel(&blocks) * f->scale_bytes) + 1;
  rf_status st = RF_OK;
  if (scale.tiles && e->memory == RF_MEM_DEVICE) {
    RF_TRY(rf_mem_alloc(RF_MEM_DEVICE, gathered_bytes, "gathered scales", &gathered));
    rows = rf_region_row_major(gathered, &blocks, f->scale_bytes);
    rf_scale_side to = {.base = gathered, .stride = blocks.hi[1] - blocks.lo[1]};
    rf_scale_side from = engine_scale_side(&scale, &blocks);
    st = rf_gpu_copy_scales(&to, &from, blocks.hi[0] - blocks.lo[0], blocks.hi[1] - blocks.lo[1],
                            f->scale_bytes);
  } else if (scale.tiles) {
    gathered = rf_malloc(gathered_bytes, "gathered scales");
    if (!gathered)
      return RF_ERR_NOMEM;
    rows = rf_region_row_major(gathered, &blocks, f->scale_bytes);
    for (int64_t bi = blocks.lo[0]; bi < blocks.hi[0]; bi++)
      for (int64_t bj = blocks.lo[1]; bj < blocks.hi[1]; bj++)
        memcpy(rf_region_at(&rows, bi, bj), engine_scale_at(&scale, bi, bj),
               (size_t)f->scale_bytes);
  }
  if (st == RF_OK)
    st = rf_format_checksum_on(f, e->memory, tensor, &q, &held, &rows, &blocks, sum);
  if (e->memory == RF_MEM_DEVICE)
    rf_mem_free(RF_MEM_DEVICE, gathered, gathered_bytes);
  else
    free(gathered);
  if (st == RF_OK && f->global_scale && held.lo[0] == 0 && held.lo[1] == 0)
    *sum += rf_format_global_checksum(RF_CHECKSUM_CURRENT, tensor, e->fp8_global[t]);
  return st;
}

/* The trainer's part of a quantized checkpoint's tensor t (the trainer holds it as the file
 * does): the terms of rf_format_checksum for its bytes, and for the scales of the blocks that
 * start in its shard. A shard that cuts a block holds that block's scale beside its rows, as
 * its neighbour does; counting a scale only where its block's first element lies counts each
 * once, so the trainer ranks' sums add up to the rollout's and to the file's checksum of the
 * tensor (rf_checkpoint_checksum), whatever the trainer's layout. A global scale adds its term
 * on the shard that holds element (0, 0), as the rollout's does. */
rf_status engine_fp8_trainer_checksum(const rf_engine *e, int t, uint64_t *sum) {
  const rf_layout *lay = e->plan->layout;
  const rf_format *f = rf_layout_format(lay);
  const rf_tensor *tensor = &lay->model->tensors[t];
  rf_box box = rf_layout_trainer_box(lay, t, e->trainer_rank), blocks, starts;
  int64_t edge[2] = {f->block_rows, f->block_cols};
  *sum = 0;
  if (rf_box_is_empty(&box))
    return RF_OK;
  rf_region q = engine_shard_region(e, t);
  rf_region scale = rf_shard_scale_region(e->plan, e->trainer_rank, t, e->data->shards[t], &blocks);
  starts = blocks; /* those whose first row and column lie in the box: perhaps none */
  for (int d = 0; d < 2; d++)
    starts.lo[d] = (box.lo[d] + edge[d] - 1) / edge[d];
  RF_TRY(rf_format_checksum_on(f, e->memory, tensor, &q, &box, &scale, &starts, sum));
  if (f->global_scale && box.lo[0] == 0 && box.lo[1] == 0) {
    float g;
    RF_TRY(rf_mem_transfer(&g, RF_MEM_HOST,
                           rf_shard_global(e->plan, e->trainer_rank, t, e->data->shards[t]),
                           e->memory, sizeof g));
    *sum += rf_format_global_checksum(RF_CHECKSUM_CURRENT, tensor, g);
  }
  return RF_OK;
}
