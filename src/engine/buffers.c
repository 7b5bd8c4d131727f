/* This rank's data: trainer shards, star coupling buffers and fused rollout tensors, each
 * family in one allocation (an arena). Offsets inside an arena are a pure function of the
 * plan and the rank, so a rank that maps another rank's arena (CUDA IPC) finds every tensor
 * in it without asking. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "engine_internal.h"
#include "io/io.h"
#include "verify/verify.h"

/* Every tensor starts on an RF_BUFFER_ALIGN (256-byte) boundary: wide loads and stores on any
 * kind of memory. */
static int64_t align_up(int64_t v) {
  return (v + RF_BUFFER_ALIGN - 1) / RF_BUFFER_ALIGN * RF_BUFFER_ALIGN;
}

/* The bytes of a trainer shard's elements: a quantized weight's packed bytes for 4-bit
 * elements (rf_layout_trainer_bytes). */
static int64_t shard_bytes(const rf_layout *lay, int tensor, const rf_box *box) {
  rf_box bytes = rf_layout_trainer_bytes(lay, tensor, box);
  return rf_box_numel(&bytes) * rf_tensor_esize(&lay->model->tensors[tensor]);
}

int64_t rf_buffers_offsets(const rf_plan *plan, rf_buffer_family family, int rank,
                           int64_t *offsets) {
  const rf_layout *lay = plan->layout;
  int n = family == RF_FAMILY_ROLLOUT ? lay->rollout_tensor_count : lay->model->tensor_count;
  int64_t at = 0;
  for (int at_index = 0; at_index < n; at_index++) {
    /* Trainer tensors lie in the layout's storage order, so that whole experts that move as
     * one block are adjacent (rf_piece_continues); rollout tensors in their own order. */
    int i = family == RF_FAMILY_ROLLOUT ? at_index : lay->order[at_index];
    int64_t bytes = 0;
    if (family == RF_FAMILY_ROLLOUT) {
      bytes = lay->rollout_tensors[i].bytes;
    } else if (family == RF_FAMILY_SHARDS) {
      rf_box box = rf_layout_trainer_box(lay, i, rank);
      bytes = shard_bytes(lay, i, &box);
      if (rf_tensor_quantized(&lay->model->tensors[i]) && bytes) { /* its scales follow */
        rf_box blocks = engine_fp8_blocks_of(lay, &box);
        bytes = align_up(bytes) + rf_box_numel(&blocks) * rf_layout_format(lay)->scale_bytes;
        if (rf_layout_format(lay)->global_scale) /* and its global after them */
          bytes = align_up(bytes) + (int64_t)sizeof(float);
      }
    } else if (plan->kind == RF_PLAN_STAR) {
      const rf_box *c = &plan->coupling[(size_t)i * lay->trainer_ranks + rank];
      bytes = rf_box_numel(c) * rf_tensor_esize(&lay->model->tensors[i]);
    }
    offsets[i] = at;
    at = align_up(at + bytes);
  }
  return at;
}

rf_region rf_shard_region(const rf_plan *plan, int trainer_rank, int tensor, void *base) {
  const rf_layout *lay = plan->layout;
  rf_box box = rf_layout_trainer_box(lay, tensor, trainer_rank);
  rf_box bytes = rf_layout_trainer_bytes(lay, tensor, &box);
  int esize = rf_tensor_esize(&lay->model->tensors[tensor]);
  return rf_layout_trainer_transposed(lay, tensor) ? rf_region_transposed(base, &bytes, esize)
                                                   : rf_region_row_major(base, &bytes, esize);
}

rf_region rf_shard_scale_region(const rf_plan *plan, int trainer_rank, int tensor, void *base,
                                rf_box *blocks) {
  rf_box box = rf_layout_trainer_box(plan->layout, tensor, trainer_rank);
  *blocks = engine_fp8_blocks_of(plan->layout, &box);
  return rf_region_row_major((char *)base + align_up(shard_bytes(plan->layout, tensor, &box)),
                             blocks, rf_layout_format(plan->layout)->scale_bytes);
}

void *rf_shard_global(const rf_plan *plan, int trainer_rank, int tensor, void *base) {
  rf_box blocks;
  rf_region s = rf_shard_scale_region(plan, trainer_rank, tensor, base, &blocks);
  return s.base + align_up(rf_box_numel(&blocks) * s.esize);
}

/* Reads only this rank's rows and columns of a tensor from the checkpoint. Device shards are
 * read into host memory of the same layout first, then copied over whole. */
static rf_status read_box(rf_buffers *b, rf_checkpoint *ckpt, int t, int scales, const rf_box *box,
                          const rf_region *r, size_t bytes) {
  rf_region hr = *r;
  void *host = NULL;
  if (b->memory == RF_MEM_DEVICE && !(hr.base = host = rf_malloc(bytes, "a shard's rows")))
    return RF_ERR_NOMEM;
  rf_status st =
      scales ? rf_checkpoint_read_scales(ckpt, t, box, &hr) : rf_checkpoint_read(ckpt, t, box, &hr);
  if (st == RF_OK && host)
    st = rf_mem_transfer(r->base, RF_MEM_DEVICE, host, RF_MEM_HOST, bytes);
  free(host);
  return st;
}

/* A quantized weight's shard comes with the scales of the blocks it touches (rows of the
 * file's scale tensor), which a shard that cuts a block shares with its neighbour, and with
 * the file's global for a format that has one (nvfp4's weight_scale_2). Its box is of bytes
 * (r's, rf_layout_trainer_bytes). */
static rf_status read_shard(rf_buffers *b, rf_checkpoint *ckpt, int t, const rf_box *box,
                            const rf_region *r, size_t bytes) {
  RF_TRY(read_box(b, ckpt, t, 0, &r->box, r, bytes));
  if (!rf_tensor_quantized(&b->plan->layout->model->tensors[t]) || rf_box_is_empty(box))
    return RF_OK;
  const rf_format *f = rf_layout_format(b->plan->layout);
  rf_box blocks;
  rf_region s = rf_shard_scale_region(b->plan, b->trainer_rank, t, b->shards[t], &blocks);
  RF_TRY(
      read_box(b, ckpt, t, 1, &blocks, &s, (size_t)rf_box_numel(&blocks) * (size_t)f->scale_bytes));
  if (!f->global_scale)
    return RF_OK;
  float g;
  RF_TRY(rf_checkpoint_read_global(ckpt, t, &g));
  return rf_mem_transfer(rf_shard_global(b->plan, b->trainer_rank, t, b->shards[t]), b->memory, &g,
                         RF_MEM_HOST, sizeof g);
}

/* Every trainer shard of this rank, read from the checkpoint. */
static rf_status read_shards(rf_buffers *b, rf_checkpoint *ckpt) {
  const rf_layout *lay = b->plan->layout;
  for (int t = 0; t < lay->model->tensor_count && b->trainer_rank >= 0; t++) {
    rf_box box = rf_layout_trainer_box(lay, t, b->trainer_rank);
    rf_region r = rf_shard_region(b->plan, b->trainer_rank, t, b->shards[t]);
    RF_TRY(read_shard(b, ckpt, t, &box, &r, (size_t)(rf_box_numel(&r.box) * r.esize)));
  }
  return RF_OK;
}

/* The layout sizes each fused rollout tensor; the engine writes each member tensor into it at
 * the member's own element size. A size that disagrees would let the copies run past the
 * tensor (into the next one, or past the arena), so it is refused before anything is
 * allocated, on every rank: a rank that maps a peer's arena computes its offsets the same way. */
static rf_status check_rollout_sizes(const rf_layout *lay) {
  for (int t = 0; t < lay->model->tensor_count; t++) {
    const rf_tensor *member = &lay->model->tensors[t];
    const rf_rollout_tensor *rt = &lay->rollout_tensors[lay->slots[t].local];
    int64_t need = rt->numel * rf_layout_rollout_esize(lay, t);
    if (rt->bytes != need)
      return rf_fail(RF_ERR_INTERNAL,
                     "rollout tensor %s is laid out as %" PRId64 " bytes, but its member %s (%s) "
                     "needs %" PRId64 "; the layout must size it by its members' dtype",
                     rt->name, rt->bytes, member->name, rf_dtype_name(member->dtype), need);
  }
  return RF_OK;
}

/* --rollout-dtype fp8: a rollout rank holds a landing buffer for every tensor that a
 * destination-quantized piece brings to it, the size of its held box in the trainer's dtype
 * (engine_fp8.c quantizes its blocks from there). One walk of the plan: per_rank[r] gets rank
 * r's bytes and, for rank `mine` (>= 0), off[tensor] each of its buffers' offset (-1: none). A
 * stage lists a tensor's pieces together (plan.h), so a rank's last tensor tells a new one. */
static rf_status landing_walk(const rf_plan *plan, int mine, int64_t *per_rank, int64_t *off) {
  const rf_layout *lay = plan->layout;
  int R = lay->rollout_ranks;
  int *last = rf_malloc((size_t)R * sizeof *last + 1, "fp8 landing buffers");
  if (!last)
    return RF_ERR_NOMEM;
  for (int r = 0; r < R; r++)
    last[r] = -1, per_rank[r] = 0;
  for (int t = 0; off && t < lay->model->tensor_count; t++)
    off[t] = -1;
  for (int i = 0; i < plan->piece_count && rf_layout_format(lay); i++) {
    const rf_piece *p = &plan->pieces[i];
    if (p->stage != RF_STAGE_TRANSFER || last[p->dst] == p->tensor ||
        (mine >= 0 && p->dst != mine) || rf_piece_quant(plan, p) != RF_QUANT_DESTINATION)
      continue;
    last[p->dst] = p->tensor;
    if (p->dst == mine)
      off[p->tensor] = per_rank[p->dst];
    rf_box held = rf_layout_rollout_box(lay, p->tensor, p->dst);
    per_rank[p->dst] = align_up(
        per_rank[p->dst] + rf_box_numel(&held) * rf_tensor_esize(&lay->model->tensors[p->tensor]));
  }
  free(last);
  return RF_OK;
}

rf_status rf_buffers_landing_bytes(const rf_plan *plan, int64_t *per_rank) {
  return landing_walk(plan, -1, per_rank, NULL);
}

static rf_status alloc_landing(rf_buffers *b) {
  const rf_layout *lay = b->plan->layout;
  int nt = lay->model->tensor_count;
  b->landing = rf_calloc((size_t)nt, sizeof *b->landing, "fp8 landing buffers");
  int64_t *off = rf_malloc((size_t)nt * sizeof *off, "fp8 landing buffers");
  int64_t *per_rank = rf_malloc((size_t)lay->rollout_ranks * sizeof *per_rank, "fp8 landing");
  rf_status st = b->landing && off && per_rank ? RF_OK : RF_ERR_NOMEM;
  if (st == RF_OK)
    st = landing_walk(b->plan, b->rollout_rank, per_rank, off);
  if (st == RF_OK && per_rank[b->rollout_rank]) {
    b->landing_bytes = (size_t)per_rank[b->rollout_rank];
    st = rf_mem_alloc(b->memory, b->landing_bytes, "the fp8 landing buffers", &b->landing_arena);
  }
  for (int t = 0; t < nt && st == RF_OK; t++)
    if (off[t] >= 0)
      b->landing[t] = (char *)b->landing_arena + off[t];
  free(off);
  free(per_rank);
  return st;
}

static const char *const family_what[RF_FAMILY_COUNT] = {
    [RF_FAMILY_SHARDS] = "the trainer shards",
    [RF_FAMILY_COUPLING] = "the coupling buffers",
    [RF_FAMILY_ROLLOUT] = "the rollout tensors",
};

/* The families this rank holds: shards and coupling buffers on a trainer rank, rollout tensors
 * on a rollout rank. */
static int holds_family(const rf_buffers *b, rf_buffer_family f) {
  return f == RF_FAMILY_ROLLOUT ? b->rollout_rank >= 0 : b->trainer_rank >= 0;
}

/* Sizes one family's arena and lays its tensors out in it (offsets, in `off`). */
static rf_status layout_family(rf_buffers *b, rf_buffer_family f, int64_t **off) {
  const rf_layout *lay = b->plan->layout;
  int n = f == RF_FAMILY_ROLLOUT ? lay->rollout_tensor_count : lay->model->tensor_count;
  int rank = f == RF_FAMILY_ROLLOUT ? b->rollout_rank : b->trainer_rank;
  *off = rf_calloc((size_t)n + 1, sizeof **off, family_what[f]);
  b->ptr[f] = rf_calloc((size_t)n + 1, sizeof *b->ptr[f], family_what[f]);
  if (!*off || !b->ptr[f])
    return RF_ERR_NOMEM;
  b->arena_bytes[f] = (size_t)rf_buffers_offsets(b->plan, f, rank, *off);
  return RF_OK;
}

/* Allocates this rank's arenas, through the transport where it allocates them (every rank
 * takes part in that collective call, one whose layout failed with nothing to allocate), and
 * points each family's tensors into its arena. */
static rf_status alloc_families(rf_buffers *b, rf_transport *tp) {
  const rf_layout *lay = b->plan->layout;
  int64_t *off[RF_FAMILY_COUNT] = {NULL};
  rf_status st = RF_OK;
  for (int f = 0; f < RF_FAMILY_COUNT && st == RF_OK; f++)
    if (holds_family(b, (rf_buffer_family)f))
      st = layout_family(b, (rf_buffer_family)f, &off[f]);
  int by_transport = tp && tp->ops->alloc_arenas && b->memory == RF_MEM_HOST &&
                     tp->register_unit == RF_REGISTER_ARENA;
  if (by_transport) {
    size_t bytes[RF_FAMILY_COUNT];
    for (int f = 0; f < RF_FAMILY_COUNT; f++)
      bytes[f] = st == RF_OK ? b->arena_bytes[f] : 0;
    double t0 = rf_now();
    rf_status got = tp->ops->alloc_arenas(tp, bytes, RF_FAMILY_COUNT, b->arena);
    b->register_seconds = rf_now() - t0;
    if (st == RF_OK)
      st = got;
    /* What it allocated stays the transport's to free, whatever failed. */
    b->arenas_by_transport = got == RF_OK;
    for (int f = 0; f < RF_FAMILY_COUNT; f++)
      if (got == RF_OK)
        rf_mem_account((int64_t)bytes[f]);
      else
        b->arena[f] = NULL;
  }
  for (int f = 0; f < RF_FAMILY_COUNT && !by_transport && st == RF_OK; f++)
    if (b->arena_bytes[f])
      st = rf_mem_alloc(b->memory, b->arena_bytes[f], family_what[f], &b->arena[f]);
  for (int f = 0; f < RF_FAMILY_COUNT; f++) {
    int n = f == RF_FAMILY_ROLLOUT ? lay->rollout_tensor_count : lay->model->tensor_count;
    for (int i = 0; i < n && st == RF_OK && off[f]; i++)
      b->ptr[f][i] = (char *)b->arena[f] + off[f][i];
    free(off[f]);
  }
  return st;
}

rf_status rf_buffers_init(rf_buffers *b, const rf_plan *plan, rf_mem_kind memory, uint64_t seed,
                          rf_checkpoint *checkpoint, int world_rank) {
  return rf_buffers_init_on(b, plan, memory, seed, checkpoint, world_rank, NULL);
}

rf_status rf_buffers_init_on(rf_buffers *b, const rf_plan *plan, rf_mem_kind memory, uint64_t seed,
                             rf_checkpoint *checkpoint, int world_rank, rf_transport *tp) {
  const rf_layout *lay = plan->layout;
  const rf_model *m = lay->model;
  memset(b, 0, sizeof *b);
  b->plan = plan;
  b->memory = memory;
  RF_TRY(check_rollout_sizes(lay));
  rf_layout_roles(lay, world_rank, &b->trainer_rank, &b->rollout_rank);
  RF_TRY(alloc_families(b, tp));
  if (b->rollout_rank >= 0 && rf_layout_format(lay))
    RF_TRY(alloc_landing(b));
  b->shards = b->ptr[RF_FAMILY_SHARDS];
  b->coupling = b->ptr[RF_FAMILY_COUPLING];
  b->rollout = b->ptr[RF_FAMILY_ROLLOUT];
  double t0 = rf_now();
  if (checkpoint)
    RF_TRY(read_shards(b, checkpoint));
  for (int t = 0; t < m->tensor_count && b->trainer_rank >= 0 && !checkpoint; t++) {
    rf_box box = rf_layout_trainer_box(lay, t, b->trainer_rank);
    rf_region r = rf_shard_region(plan, b->trainer_rank, t, b->shards[t]);
    if (rf_tensor_quantized(&m->tensors[t]))
      return rf_fail(RF_ERR_INTERNAL,
                     "trainer tensor %s is quantized but no checkpoint holds it; quantized "
                     "trainer weights come from --checkpoint",
                     m->tensors[t].name);
    RF_TRY(rf_fill_region_on(memory, &r, &box, &m->tensors[t], seed, NULL, m->tensors[t].dtype));
  }
  b->fill_seconds = rf_now() - t0;
  b->seed = seed;
  b->from_checkpoint = checkpoint != NULL;
  return RF_OK;
}

rf_status rf_buffers_advance(rf_buffers *b) {
  if (b->from_checkpoint && b->version.update.kind != RF_UPDATE_NONE)
    return rf_fail(RF_ERR_INTERNAL, "the trainer's weights come from a checkpoint, which holds one "
                                    "version; versions are of generated weights only");
  b->version.k++;
  if (b->version.update.kind == RF_UPDATE_NONE)
    return RF_OK; /* every version holds version 0's values */
  const rf_layout *lay = b->plan->layout;
  const rf_model *m = lay->model;
  for (int t = 0; t < m->tensor_count && b->trainer_rank >= 0; t++) {
    rf_box box = rf_layout_trainer_box(lay, t, b->trainer_rank);
    rf_region r = rf_shard_region(b->plan, b->trainer_rank, t, b->shards[t]);
    RF_TRY(rf_advance_region_on(b->memory, &r, &box, &m->tensors[t], b->seed, &b->version,
                                m->tensors[t].dtype,
                                b->marks_valid ? b->marks + b->marks_at[t] : NULL));
  }
  return RF_OK;
}

/* Marks are kept for generated host shards that the kept copy mirrors: a checkpoint's weights
 * come whole from a file, device shards are advanced by the GPU, and star keeps its coupling
 * buffers, not the shards. */
static int marks_allowed(const rf_buffers *b) {
  int host = b->memory == RF_MEM_HOST || b->memory == RF_MEM_PINNED || b->memory == RF_MEM_SHARED;
  return b->marks_wanted && host && b->prev_arena && b->prev_family == RF_FAMILY_SHARDS &&
         !b->from_checkpoint && b->trainer_rank >= 0 && b->version.update.kind != RF_UPDATE_NONE;
}

rf_status rf_buffers_marks_reset(rf_buffers *b) {
  b->marks_valid = 0;
  if (!marks_allowed(b)) {
    if (b->prev_stale)
      b->delta_base = 0;
    return RF_OK;
  }
  const rf_layout *lay = b->plan->layout;
  const rf_model *m = lay->model;
  if (!b->marks) {
    /* Each tensor's bits with one word to spare, which the marked encode may read. */
    b->marks_at = rf_calloc((size_t)m->tensor_count + 1, sizeof *b->marks_at, "marks' places");
    if (!b->marks_at)
      return RF_ERR_NOMEM;
    for (int t = 0; t < m->tensor_count; t++) {
      rf_box box = rf_layout_trainer_box(lay, t, b->trainer_rank);
      b->marks_at[t + 1] = b->marks_at[t] + rf_box_numel(&box) / 64 + 2;
    }
    b->marks_bytes = (size_t)b->marks_at[m->tensor_count] * sizeof *b->marks;
    b->marks = rf_calloc(b->marks_bytes, 1, "the trainer's marks of changed elements");
    if (!b->marks)
      return RF_ERR_NOMEM;
  } else {
    memset(b->marks, 0, b->marks_bytes);
  }
  b->marks_valid = 1;
  return RF_OK;
}

rf_status rf_buffers_load(rf_buffers *b, rf_checkpoint *checkpoint, int64_t k) {
  b->marks_valid = 0; /* a file holds no marks of what changed */
  if (b->prev_stale)
    b->delta_base = 0;
  RF_TRY(read_shards(b, checkpoint));
  b->version.k = k;
  return RF_OK;
}

static int by_offset(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

int rf_buffers_tensor_starts(const rf_plan *plan, rf_buffer_family family, int rank, int64_t *off,
                             int64_t *arena) {
  const rf_layout *lay = plan->layout;
  int n = family == RF_FAMILY_ROLLOUT ? lay->rollout_tensor_count : lay->model->tensor_count;
  *arena = rf_buffers_offsets(plan, family, rank, off);
  qsort(off, (size_t)n, sizeof *off, by_offset);
  int count = 0;
  for (int i = 0; i < n; i++)
    if (off[i] < *arena && (count == 0 || off[i] != off[count - 1]))
      off[count++] = off[i];
  return count;
}

void rf_buffers_free(rf_buffers *b) {
  for (int f = 0; f < RF_FAMILY_COUNT; f++) {
    if (b->arena[f] && b->arenas_by_transport)
      rf_mem_account(-(int64_t)b->arena_bytes[f]); /* the transport frees them at its close */
    else if (b->arena[f])
      rf_mem_free(b->memory, b->arena[f], b->arena_bytes[f]);
    free(b->ptr[f]);
  }
  if (b->landing_arena)
    rf_mem_free(b->memory, b->landing_arena, b->landing_bytes);
  if (b->prev_arena)
    rf_mem_free(b->memory, b->prev_arena, b->prev_bytes);
  free(b->marks);
  free(b->marks_at);
  free(b->prev_global);
  rf_offered *offers[] = {&b->delta_out, &b->delta_fw};
  for (int i = 0; i < 2; i++)
    if (offers[i]->ptr)
      rf_mem_free(b->memory, offers[i]->ptr, offers[i]->bytes);
  free(b->landing);
  memset(b, 0, sizeof *b);
}
