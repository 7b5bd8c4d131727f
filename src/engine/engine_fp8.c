/* FP8 rollouts in the engine (docs/architecture.md, "FP8 rollouts"): the quantization of the
 * pieces the plan marks (plan_fp8.c), where the bytes land, and the checks of fp8 tensors.
 *
 * A source-quantized chunk travels as its box's fp8 bytes in row-major order followed by one
 * scale per block of the format in the box (fp8: an fp32 weight_scale_inv per 128x128 block;
 * mxfp8: an E8M0 byte per 1x32 block), row-major over the blocks; the schedule
 * cuts such pieces at block edges only, so each chunk holds whole blocks. A destination-
 * quantized piece travels in the trainer's dtype into this rank's landing buffer for the
 * tensor (buffers.c), and at the end of the transfer round that brings a block's last such
 * piece the block is quantized from there (engine_fp8_round_done), before any later round
 * forwards it (fanout's forward pieces carry fp8 and scales from the rank that holds them). A
 * block is never split between the two ways: a source-quantized piece holds its blocks whole,
 * and every piece that touches a block cut at the source is destination-quantized. Each block
 * is quantized by the same reference (verify/fp8.h), so the bytes do not depend on where it
 * ran.
 *
 * Over a mapping (shm, ipc) the destination does all of it, reading its sources' memory. In
 * GPU memory the quantization runs as kernels (fp8_cuda.cu) on refit's stream, the copies of
 * quantized bytes as box copies, tiled scales (nvfp4) by a small kernel, and the checks run on
 * the GPU (engine_fp8_check.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "io/io.h"
#include "verify/fp8.h"
#include "verify/verify.h"

rf_box engine_fp8_blocks_of(const rf_layout *lay, const rf_box *b) {
  return rf_format_blocks_of(rf_layout_format(lay), b);
}

/* The first row of a rollout tensor's scales that belongs to the member at `slot`: a stacked
 * expert tensor's scales are [experts, block rows, block columns], so an expert's member starts
 * at its expert's block rows plus its own offset; in a 2-D fused tensor every member before the
 * last holds whole blocks (layout_fp8.c), so its row offset is a whole number of blocks. */
static int64_t scale_row(const rf_rollout_tensor *w, const rf_rollout_tensor *s, int64_t row,
                         int64_t edge) {
  if (w->vllm_ndim == 3) {
    int64_t per = w->vllm_shape[1];
    return row / per * s->vllm_shape[1] + row % per / edge;
  }
  return row / edge;
}

/* In 128x4 tiles (nvfp4) the scales are those of the rank's whole local scale matrix, per
 * expert for a stacked tensor (layout_fp8.c pads each expert's grid to whole tiles, as vLLM's
 * swizzle_blockscale does): a member's block (bi, bj) is block (row0 + bi - lo, col0 + bj - lo)
 * of its expert's grid, placed by rf_format_scale_offset. No box of them is a strided region,
 * so they are addressed block by block: in host memory by engine_scale_at, on the GPU by the
 * quantizer and rf_gpu_copy_scales from an rf_scale_side (engine_scale_side). */
engine_scales engine_fp8_scales(const rf_plan *plan, void *scales, int tensor, int rollout_rank,
                                rf_box *blocks) {
  const rf_layout *lay = plan->layout;
  const rf_rollout_slot *slot = &lay->slots[tensor];
  const rf_rollout_tensor *w = &lay->rollout_tensors[slot->local];
  const rf_rollout_tensor *s = &lay->rollout_tensors[slot->local + 1]; /* layout_fp8.c */
  const rf_format *f = rf_layout_format(lay);
  rf_box held = rf_layout_rollout_box(lay, tensor, rollout_rank);
  engine_scales out;
  memset(&out, 0, sizeof out);
  *blocks = engine_fp8_blocks_of(lay, &held);
  int64_t col0 = slot->col / f->block_cols;
  if (f->scale_layout == RF_SCALE_ROW_MAJOR) {
    out.r = rf_region_in_fused(scales, s->shape[1], scale_row(w, s, slot->row, f->block_rows), col0,
                               blocks, f->scale_bytes);
    return out;
  }
  int stacked = w->vllm_ndim == 3;
  int64_t per = stacked ? w->vllm_shape[1] : w->shape[0], experts = stacked ? w->vllm_shape[0] : 1;
  out.r = rf_region_row_major(NULL, blocks, f->scale_bytes); /* its box and element size */
  out.tiles = f;
  out.base = scales ? (char *)scales + slot->row / per * (s->bytes / experts) : NULL;
  out.row0 = slot->row % per / f->block_rows;
  out.col0 = col0;
  out.grid_cols = s->shape[1];
  return out;
}

char *engine_scale_at(const engine_scales *s, int64_t bi, int64_t bj) {
  if (!s->tiles)
    return rf_region_at(&s->r, bi, bj);
  int64_t i = s->row0 + bi - s->r.box.lo[0], j = s->col0 + bj - s->r.box.lo[1];
  return s->base + rf_format_scale_offset(s->tiles, s->grid_cols, i, j) * s->tiles->scale_bytes;
}

rf_scale_side engine_scale_side(const engine_scales *s, const rf_box *blocks) {
  rf_scale_side side;
  memset(&side, 0, sizeof side);
  if (!s->tiles) {
    side.base = rf_region_at(&s->r, blocks->lo[0], blocks->lo[1]);
    side.stride = s->r.stride[0];
    return side;
  }
  side.base = s->base;
  side.tile_grid_cols = s->grid_cols;
  side.row0 = s->row0 + blocks->lo[0] - s->r.box.lo[0];
  side.col0 = s->col0 + blocks->lo[1] - s->r.box.lo[1];
  return side;
}

/* The byte that holds element (r, c) of a region of quantized elements (byte coordinates,
 * rf_layout_rollout_bytes): 4-bit elements start on even columns. */
static char *byte_at(const rf_format *f, const rf_region *q, int64_t r, int64_t c) {
  return rf_region_at(q, r, rf_format_row_bytes(f, c));
}

rf_status engine_fp8_non_finite(const rf_tensor *t, int nan, int64_t r0, int64_t r1, int64_t c0,
                                int64_t c1) {
  return rf_fail(RF_ERR_CHECKPOINT,
                 "fp8: tensor %s holds %s in the block of rows %lld..%lld, columns %lld..%lld; "
                 "block-FP8 weights need finite values, check where the weights came from",
                 t->name, nan ? "NaN" : "inf", (long long)r0, (long long)(r1 - 1), (long long)c0,
                 (long long)(c1 - 1));
}

/* Quantizes the whole blocks of `box` (its origin on the block grid, its edges on the grid or
 * at the tensor's end) of tensor `tensor` from src into q (fp8, dense rows) and scale (one per
 * block, in the format's scale dtype and block coordinates, at any byte offset: in staging it
 * may sit anywhere). src may be stored either way: rows dense, or transposed (a JAX-order
 * shard), which the device quantizes in one pass (fp8_cuda.cu) and the host gathers block by
 * block into rows first. Device memory queues one job for the box, whose refusal of a block
 * that is not finite engine_fp8_device_done reports once the launches are done. */
static rf_status quantize_with(const rf_engine *e, const float *globals, int tensor,
                               const rf_region *src, const rf_box *box, const rf_region *q,
                               const engine_scales *scale) {
  const rf_tensor *t = &e->plan->layout->model->tensors[tensor];
  const rf_format *f = rf_layout_format(e->plan->layout);
  rf_box blocks = engine_fp8_blocks_of(e->plan->layout, box);
  int64_t er = f->block_rows, ec = f->block_cols;
  float global = globals ? globals[tensor] : 1.0f;
  if (rf_box_is_empty(box))
    return RF_OK;
  int dense_rows = src->stride[1] == 1 || box->hi[1] - box->lo[1] <= 1;
  if (e->memory == RF_MEM_DEVICE) { /* every moved format has a kernel (rf_format_moved) */
    rf_fp8_job job = {.x = rf_region_at(src, box->lo[0], box->lo[1]),
                      .dtype = t->dtype,
                      .x_stride = src->stride[0],
                      .x_col_stride = dense_rows ? 1 : src->stride[1],
                      .rows = box->hi[0] - box->lo[0],
                      .cols = box->hi[1] - box->lo[1],
                      .q = (uint8_t *)byte_at(f, q, box->lo[0], box->lo[1]),
                      .q_stride = q->stride[0],
                      .tag = tensor,
                      .row0 = box->lo[0],
                      .col0 = box->lo[1]};
    rf_fp8_job_format(&job, f, global);
    /* 128x128 blocks: fp32 scales row-major at any byte offset; 1-D blocks: a byte each,
     * row-major or (nvfp4 in the rollout) at its index in the 128x4 tiles. */
    rf_scale_side side = engine_scale_side(scale, &blocks);
    rf_fp8_job_scales(&job, &side);
    return rf_fp8_quantize_device(&job);
  }
  char *gathered = NULL;
  if (!dense_rows && !(gathered = rf_malloc((size_t)(er * ec * rf_tensor_esize(t)), "fp8 block")))
    return RF_ERR_NOMEM;
  rf_status st = RF_OK;
  for (int64_t bi = blocks.lo[0]; bi < blocks.hi[0] && st == RF_OK; bi++)
    for (int64_t bj = blocks.lo[1]; bj < blocks.hi[1] && st == RF_OK; bj++) {
      rf_box b = {{RF_MAX(bi * er, box->lo[0]), RF_MAX(bj * ec, box->lo[1])},
                  {RF_MIN((bi + 1) * er, box->hi[0]), RF_MIN((bj + 1) * ec, box->hi[1])}};
      int64_t rows = b.hi[0] - b.lo[0], cols = b.hi[1] - b.lo[1];
      const char *x = rf_region_at(src, b.lo[0], b.lo[1]);
      int64_t pitch = src->stride[0];
      if (gathered) { /* the block's rows, dense, from the transposed source */
        rf_region rows_of = rf_region_row_major(gathered, &b, rf_tensor_esize(t));
        rf_region_copy(&rows_of, src, &b);
        x = gathered, pitch = cols;
      }
      float amax = rf_fp8_block_amax(x, t->dtype, pitch, rows, cols);
      if (!isfinite(amax)) {
        st = engine_fp8_non_finite(t, isnan(amax), b.lo[0], b.hi[0], b.lo[1], b.hi[1]);
        break;
      }
      rf_format_scale s = rf_format_scale_of(f, amax, global);
      rf_format_quantize_block(f, x, t->dtype, pitch, rows, cols, &s,
                               (uint8_t *)byte_at(f, q, b.lo[0], b.lo[1]), q->stride[0]);
      memcpy(engine_scale_at(scale, bi, bj), s.stored, (size_t)f->scale_bytes);
    }
  free(gathered);
  return st;
}

static rf_status quantize_blocks(const rf_engine *e, int tensor, const rf_region *src,
                                 const rf_box *box, const rf_region *q,
                                 const engine_scales *scale) {
  return quantize_with(e, e->fp8_global, tensor, src, box, q, scale);
}

rf_status engine_fp8_device_done(const rf_engine *e) {
  if (e->memory != RF_MEM_DEVICE || !rf_layout_format(e->plan->layout))
    return RF_OK;
  rf_fp8_bad bad;
  RF_TRY(rf_fp8_device_bad(&bad));
  if (!bad.found)
    return RF_OK;
  const rf_tensor *t = &e->plan->layout->model->tensors[bad.tag];
  const rf_format *f = rf_layout_format(e->plan->layout);
  return engine_fp8_non_finite(t, bad.nan, bad.row, RF_MIN(bad.row + f->block_rows, t->shape[0]),
                               bad.col, RF_MIN(bad.col + f->block_cols, t->shape[1]));
}

/* Copies `box` between regions in this rank's memory kind; src may be a mapped peer's. */
static rf_status move_box(const rf_engine *e, const rf_region *dst, const rf_region *src,
                          const rf_box *box) {
  if (rf_box_is_empty(box))
    return RF_OK;
  if (e->memory != RF_MEM_DEVICE) {
    rf_region_copy(dst, src, box);
    return RF_OK;
  }
  rf_box_copy c = {*dst, *src, *box};
  return e->mapped ? rf_copy_boxes_mapped(e->memory, &c, 1) : rf_copy_boxes(e->memory, &c, 1);
}

/* Copies the quantized bytes of element box `box` between byte regions. */
static rf_status move_bytes(const rf_engine *e, const rf_region *dst, const rf_region *src,
                            const rf_box *box) {
  rf_box bytes = rf_format_byte_box(rf_layout_format(e->plan->layout), box);
  return move_box(e, dst, src, &bytes);
}

/* Copies the scales of `blocks`: a box copy between row-major ones; else (128x4 tiles on
 * either side) block by block, in host memory here and on the GPU by a kernel
 * (rf_gpu_copy_scales), since no box of tiled scales is a strided region. The kernel, one
 * thread a scale, keeps the tiles where vLLM reads them; staging the tiled matrix row-major and
 * swizzling once at the end would cost a second copy of every scale and a step after the
 * transfer. */
static rf_status move_scales(const rf_engine *e, const engine_scales *dst, const engine_scales *src,
                             const rf_box *blocks) {
  if (!dst->tiles && !src->tiles)
    return move_box(e, &dst->r, &src->r, blocks);
  if (rf_box_is_empty(blocks))
    return RF_OK;
  if (e->memory == RF_MEM_DEVICE) {
    rf_scale_side d = engine_scale_side(dst, blocks), s = engine_scale_side(src, blocks);
    return rf_gpu_copy_scales(&d, &s, blocks->hi[0] - blocks->lo[0], blocks->hi[1] - blocks->lo[1],
                              (int)dst->r.esize);
  }
  for (int64_t bi = blocks->lo[0]; bi < blocks->hi[0]; bi++)
    for (int64_t bj = blocks->lo[1]; bj < blocks->hi[1]; bj++)
      memcpy(engine_scale_at(dst, bi, bj), engine_scale_at(src, bi, bj), (size_t)dst->r.esize);
  return RF_OK;
}

/* The quantized bytes (packed two a byte for 4-bit elements) and scale parts of a
 * source-quantized chunk's wire bytes at `at`. */
static void wire_regions(const rf_engine *e, char *at, const rf_box *box, rf_region *q,
                         engine_scales *scale) {
  const rf_format *f = rf_layout_format(e->plan->layout);
  rf_box blocks = engine_fp8_blocks_of(e->plan->layout, box);
  rf_box bytes = rf_format_byte_box(f, box);
  *q = rf_region_row_major(at, &bytes, 1);
  memset(scale, 0, sizeof *scale);
  scale->r = rf_region_row_major(at + rf_box_numel(&bytes), &blocks, f->scale_bytes);
}

rf_status engine_fp8_pack_with(const rf_engine *e, const float *globals, const rf_piece *p,
                               const rf_region *src, const rf_box *box, char *to) {
  rf_region q;
  engine_scales scale;
  wire_regions(e, to, box, &q, &scale);
  return quantize_with(e, globals, p->tensor, src, box, &q, &scale);
}

rf_status engine_fp8_pack(const rf_engine *e, const rf_piece *p, const rf_region *src,
                          const rf_box *box, char *to) {
  return engine_fp8_pack_with(e, e->fp8_global, p, src, box, to);
}

rf_status engine_fp8_carried(const rf_engine *e, const rf_piece *p, const rf_region *src,
                             const rf_box *box, char *to) {
  rf_box blocks;
  engine_scales scale;
  memset(&scale, 0, sizeof scale);
  scale.r = rf_shard_scale_region(e->plan, p->src, p->tensor, src->base, &blocks);
  if (!to)
    return engine_fp8_copy(e, p, src, &scale, box);
  rf_region wq;
  engine_scales wscale;
  wire_regions(e, to, box, &wq, &wscale);
  rf_box box_blocks = engine_fp8_blocks_of(e->plan->layout, box);
  RF_TRY(move_bytes(e, &wq, src, box));
  return move_scales(e, &wscale, &scale, &box_blocks);
}

void engine_fp8_rollout(const rf_engine *e, int tensor, rf_region *q, rf_box *held,
                        engine_scales *scale, rf_box *blocks) {
  *q = engine_rollout_region(e, tensor, held);
  void *scales = e->data->rollout[e->plan->layout->slots[tensor].local + 1]; /* layout_fp8.c */
  *scale = engine_fp8_scales(e->plan, scales, tensor, e->rollout_rank, blocks);
}

rf_status engine_fp8_pack_forward(const rf_engine *e, const rf_piece *p, const rf_box *box,
                                  char *to) {
  rf_region q, wq;
  engine_scales scale, wscale;
  rf_box held, blocks;
  engine_fp8_rollout(e, p->tensor, &q, &held, &scale, &blocks);
  wire_regions(e, to, box, &wq, &wscale);
  rf_box box_blocks = engine_fp8_blocks_of(e->plan->layout, box);
  RF_TRY(move_bytes(e, &wq, &q, box));
  return move_scales(e, &wscale, &scale, &box_blocks);
}

rf_status engine_fp8_unpack(const rf_engine *e, const rf_piece *p, const rf_box *box, char *from) {
  rf_region wq;
  engine_scales wscale;
  wire_regions(e, from, box, &wq, &wscale);
  return engine_fp8_copy(e, p, &wq, &wscale, box);
}

rf_status engine_fp8_local(const rf_engine *e, const rf_piece *p, const rf_region *src,
                           const rf_box *box) {
  rf_region q;
  engine_scales scale;
  rf_box held, blocks, kept;
  engine_fp8_rollout(e, p->tensor, &q, &held, &scale, &blocks);
  if (!rf_box_intersect(box, &held, &kept))
    return RF_OK;
  return quantize_blocks(e, p->tensor, src, &kept, &q, &scale);
}

rf_status engine_fp8_copy(const rf_engine *e, const rf_piece *p, const rf_region *src_q,
                          const engine_scales *src_scale, const rf_box *box) {
  rf_region q;
  engine_scales scale;
  rf_box held, blocks, kept;
  engine_fp8_rollout(e, p->tensor, &q, &held, &scale, &blocks);
  if (!rf_box_intersect(box, &held, &kept))
    return RF_OK;
  rf_box kept_blocks = engine_fp8_blocks_of(e->plan->layout, &kept);
  RF_TRY(move_bytes(e, &q, src_q, &kept));
  return move_scales(e, &scale, src_scale, &kept_blocks);
}

static int by_block(const void *pa, const void *pb) {
  const struct rf_fp8_block *a = pa, *b = pb;
  if (a->tensor != b->tensor)
    return a->tensor < b->tensor ? -1 : 1;
  if (a->bi != b->bi)
    return a->bi < b->bi ? -1 : 1;
  return (a->bj > b->bj) - (a->bj < b->bj);
}

static int by_round(const void *pa, const void *pb) {
  const struct rf_fp8_block *a = pa, *b = pb;
  if (a->round != b->round)
    return a->round < b->round ? -1 : 1;
  return by_block(pa, pb);
}

rf_status engine_fp8_blocks_init(rf_engine *e) {
  const rf_plan *plan = e->plan;
  const rf_schedule *s = &e->transfer;
  struct rf_fp8_block *list = NULL;
  int n = 0, cap = 0;
  for (int i = 0; i < s->chunk_count && e->rollout_rank >= 0; i++) {
    const rf_chunk *k = &s->chunks[i];
    const rf_piece *p = &plan->pieces[k->piece];
    if (p->dst != e->rollout_rank || rf_piece_quant(plan, p) != RF_QUANT_DESTINATION)
      continue;
    rf_box held = rf_layout_rollout_box(plan->layout, p->tensor, e->rollout_rank), kept;
    if (!rf_box_intersect(&k->box, &held, &kept))
      continue;
    rf_box blocks = engine_fp8_blocks_of(plan->layout, &kept);
    for (int64_t bi = blocks.lo[0]; bi < blocks.hi[0]; bi++)
      for (int64_t bj = blocks.lo[1]; bj < blocks.hi[1]; bj++) {
        if (rf_grow((void **)&list, n, &cap, sizeof *list, "fp8 blocks") != RF_OK) {
          free(list);
          return RF_ERR_NOMEM;
        }
        /* Transfer bucket k completes in round k (plan.h, rf_rounds). */
        list[n++] = (struct rf_fp8_block){p->tensor, k->bucket - s->first_bucket, bi, bj};
      }
  }
  /* One entry per block, at the latest round that brings a piece of it. */
  if (n)
    qsort(list, (size_t)n, sizeof *list, by_block);
  int kept = 0;
  for (int i = 0; i < n; i++) {
    if (kept && by_block(&list[kept - 1], &list[i]) == 0)
      list[kept - 1].round = RF_MAX(list[kept - 1].round, list[i].round);
    else
      list[kept++] = list[i];
  }
  if (kept)
    qsort(list, (size_t)kept, sizeof *list, by_round);
  e->fp8_blocks = list;
  e->fp8_block_count = kept;
  return RF_OK;
}

/* Whether block k extends the run of blocks of tensor `tensor` in `round` at (bi, bj). */
static int block_at(const rf_engine *e, int k, const struct rf_fp8_block *first, int64_t bi,
                    int64_t bj) {
  const struct rf_fp8_block *b = &e->fp8_blocks[k];
  return k < e->fp8_block_count && b->round == first->round && b->tensor == first->tensor &&
         b->bi == bi && b->bj == bj;
}

rf_status engine_fp8_round_done(rf_engine *e, int round) {
  const rf_layout *lay = e->plan->layout;
  if (e->fp8_next >= e->fp8_block_count || e->fp8_blocks[e->fp8_next].round > round)
    return RF_OK; /* nothing this round: not even a timer span */
  rf_mem_timer_begin(&e->unpack_timer);
  rf_status st = RF_OK;
  /* The blocks are sorted by round, tensor, block row and column, so the blocks of a tensor
   * that make a rectangle follow each other row by row: each rectangle is one box (one launch
   * on the device, rather than one per block). */
  int i = e->fp8_next;
  while (st == RF_OK && i < e->fp8_block_count && e->fp8_blocks[i].round <= round) {
    const struct rf_fp8_block *b = &e->fp8_blocks[i];
    int64_t bi1 = b->bi + 1, bj1 = b->bj + 1;
    int n = i + 1;
    while (block_at(e, n, b, b->bi, bj1))
      n++, bj1++;
    for (;;) { /* the next block row, if it holds exactly the same columns */
      int k = n;
      int64_t bj = b->bj;
      while (bj < bj1 && block_at(e, k, b, bi1, bj))
        k++, bj++;
      if (bj < bj1)
        break;
      n = k, bi1++;
    }
    const rf_tensor *tensor = &lay->model->tensors[b->tensor];
    rf_region q;
    engine_scales scale;
    rf_box held, blocks;
    engine_fp8_rollout(e, b->tensor, &q, &held, &scale, &blocks);
    rf_region land =
        rf_region_row_major(e->data->landing[b->tensor], &held, rf_tensor_esize(tensor));
    const rf_format *f = rf_layout_format(lay);
    int64_t er = f->block_rows, ec = f->block_cols;
    rf_box rect = {{b->bi * er, b->bj * ec},
                   {RF_MIN(bi1 * er, held.hi[0]), RF_MIN(bj1 * ec, held.hi[1])}};
    st = quantize_blocks(e, b->tensor, &land, &rect, &q, &scale);
    i = n;
  }
  e->fp8_next = i;
  rf_mem_timer_end(&e->unpack_timer);
  return st;
}
