/* The engine's buffers: allocation, the generator's fill, regions, and the checks that run
 * after the last iteration. The modes themselves live in engine_modes.c. */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "verify/verify.h"

static const char *const mode_names[] = {"unfused", "grouped", "fused"};

const char *rf_mode_name(rf_mode mode) { return mode_names[mode]; }

rf_status rf_mode_parse(const char *text, rf_mode *out) {
  for (int i = 0; i < (int)RF_ARRAY_LEN(mode_names); i++)
    if (strcmp(text, mode_names[i]) == 0) {
      *out = (rf_mode)i;
      return RF_OK;
    }
  return rf_fail(RF_ERR_USAGE, "option --mode: '%s' is not one of unfused|grouped|fused", text);
}

static rf_region buffer_shard_region(const rf_buffers *b, int tensor);

static rf_region shard_region(const rf_engine *e, int tensor) {
  return buffer_shard_region(e->data, tensor);
}

static rf_region rollout_region(const rf_engine *e, int tensor, rf_box *held) {
  const rf_layout *lay = e->plan->layout;
  const rf_rollout_slot *slot = &lay->slots[tensor];
  *held = rf_layout_rollout_box(lay, tensor, e->rollout_rank);
  return rf_region_in_fused(e->data->rollout[slot->local], lay->rollout_tensors[slot->local].shape[1],
                            slot->row, slot->col, held, e->esize);
}

rf_region engine_source(const rf_engine *e, const rf_piece *p) {
  const rf_plan *plan = e->plan;
  if (p->stage == RF_STAGE_TRANSFER && plan->kind == RF_PLAN_STAR) {
    const rf_box *c = &plan->coupling[(size_t)p->tensor * plan->layout->trainer_ranks + p->src];
    return rf_region_row_major(e->data->coupling[p->tensor], c, e->esize);
  }
  return shard_region(e, p->tensor);
}

rf_region engine_destination(const rf_engine *e, const rf_piece *p, const rf_box *box,
                             rf_box *kept) {
  const rf_plan *plan = e->plan;
  if (p->stage == RF_STAGE_RESHAPE) {
    *kept = *box;
    const rf_box *c = &plan->coupling[(size_t)p->tensor * plan->layout->trainer_ranks + p->dst];
    return rf_region_row_major(e->data->coupling[p->tensor], c, e->esize);
  }
  rf_box held;
  rf_region r = rollout_region(e, p->tensor, &held);
  rf_box_intersect(box, &held, kept);
  return r;
}

static rf_status alloc_set(int count, void ***bufs, size_t **sizes, const char *what) {
  *bufs = rf_calloc((size_t)count, sizeof **bufs, what);
  *sizes = rf_calloc((size_t)count, sizeof **sizes, what);
  return *bufs && *sizes ? RF_OK : RF_ERR_NOMEM;
}

static rf_region buffer_shard_region(const rf_buffers *b, int tensor) {
  const rf_layout *lay = b->plan->layout;
  rf_box box = rf_layout_trainer_box(lay, tensor, b->trainer_rank);
  int esize = rf_dtype_size(lay->model->dtype);
  return rf_layout_trainer_transposed(lay, tensor)
             ? rf_region_transposed(b->shards[tensor], &box, esize)
             : rf_region_row_major(b->shards[tensor], &box, esize);
}

rf_status rf_buffers_init(rf_buffers *b, const rf_plan *plan, rf_mem_kind memory, uint64_t seed,
                          int world_rank) {
  const rf_layout *lay = plan->layout;
  const rf_model *m = lay->model;
  int esize = rf_dtype_size(m->dtype);
  memset(b, 0, sizeof *b);
  b->plan = plan;
  b->memory = memory;
  rf_layout_roles(lay, world_rank, &b->trainer_rank, &b->rollout_rank);
  RF_TRY(alloc_set(m->tensor_count, &b->shards, &b->shard_bytes, "trainer shards"));
  RF_TRY(alloc_set(m->tensor_count, &b->coupling, &b->coupling_bytes, "coupling buffers"));
  RF_TRY(alloc_set(lay->rollout_tensor_count, &b->rollout, &b->rollout_bytes, "rollout"));
  for (int t = 0; t < m->tensor_count && b->trainer_rank >= 0; t++) {
    rf_box box = rf_layout_trainer_box(lay, t, b->trainer_rank);
    b->shard_bytes[t] = (size_t)(rf_box_numel(&box) * esize);
    RF_TRY(rf_mem_alloc(memory, b->shard_bytes[t], "a trainer shard", &b->shards[t]));
    rf_region r = buffer_shard_region(b, t);
    double t0 = rf_now();
    rf_fill_region(&r, &box, &m->tensors[t], seed, m->dtype);
    b->fill_seconds += rf_now() - t0;
    if (plan->kind == RF_PLAN_STAR) {
      const rf_box *c = &plan->coupling[(size_t)t * lay->trainer_ranks + b->trainer_rank];
      b->coupling_bytes[t] = (size_t)(rf_box_numel(c) * esize);
      RF_TRY(rf_mem_alloc(memory, b->coupling_bytes[t], "a coupling buffer", &b->coupling[t]));
    }
  }
  for (int l = 0; l < lay->rollout_tensor_count && b->rollout_rank >= 0; l++) {
    b->rollout_bytes[l] = (size_t)lay->rollout_tensors[l].bytes;
    RF_TRY(rf_mem_alloc(memory, b->rollout_bytes[l], "a rollout tensor", &b->rollout[l]));
  }
  return RF_OK;
}

static void free_set(rf_mem_kind memory, int count, void **bufs, size_t *sizes) {
  for (int i = 0; bufs && i < count; i++)
    if (bufs[i])
      rf_mem_free(memory, bufs[i], sizes[i]);
  free(bufs);
  free(sizes);
}

void rf_buffers_free(rf_buffers *b) {
  if (!b->plan)
    return;
  const rf_layout *lay = b->plan->layout;
  free_set(b->memory, lay->model->tensor_count, b->shards, b->shard_bytes);
  free_set(b->memory, lay->model->tensor_count, b->coupling, b->coupling_bytes);
  free_set(b->memory, lay->rollout_tensor_count, b->rollout, b->rollout_bytes);
  memset(b, 0, sizeof *b);
}

/* Staging: the largest bucket of either stage, once per direction, twice for fused. */
static rf_status alloc_staging(rf_engine *e) {
  const rf_schedule *stages[2] = {&e->reshape, &e->transfer};
  int64_t need[2] = {0, 0};
  for (int s = 0; s < 2; s++)
    for (int b = 0; b < stages[s]->bucket_count; b++) {
      int64_t send, recv;
      engine_bucket_staging(e, stages[s], b, &send, &recv);
      need[0] = RF_MAX(need[0], send);
      need[1] = RF_MAX(need[1], recv);
    }
  int slots = e->mode == RF_MODE_FUSED ? 2 : 1;
  for (int dir = 0; dir < 2; dir++) {
    e->staging_bytes[dir] = (size_t)need[dir];
    for (int k = 0; k < slots && need[dir] > 0; k++)
      RF_TRY(rf_mem_alloc(e->memory, (size_t)need[dir], "a staging buffer", &e->staging[dir][k]));
  }
  return RF_OK;
}

rf_status rf_engine_init(rf_engine *e, rf_buffers *data, rf_transport *tp, rf_mode mode,
                         int64_t bucket_size, uint64_t seed, rf_inject inject, int world_rank) {
  const rf_plan *plan = data->plan;
  memset(e, 0, sizeof *e);
  e->plan = plan;
  e->data = data;
  e->transport = tp;
  e->mode = mode;
  e->bucket_size = bucket_size;
  e->seed = seed;
  e->inject = inject;
  e->world_rank = world_rank;
  e->memory = tp->ops->memory;
  e->esize = rf_dtype_size(plan->layout->model->dtype);
  rf_layout_roles(plan->layout, world_rank, &e->trainer_rank, &e->rollout_rank);
  RF_TRY(rf_schedule_build(plan, RF_STAGE_RESHAPE, bucket_size, &e->reshape));
  RF_TRY(rf_schedule_build(plan, RF_STAGE_TRANSFER, bucket_size, &e->transfer));
  RF_TRY(alloc_staging(e));
  return RF_OK;
}

void rf_engine_free(rf_engine *e) {
  if (!e->plan)
    return;
  for (int dir = 0; dir < 2; dir++)
    for (int k = 0; k < 2; k++)
      if (e->staging[dir][k])
        rf_mem_free(e->memory, e->staging[dir][k], e->staging_bytes[dir]);
  rf_schedule_free(&e->reshape);
  rf_schedule_free(&e->transfer);
  memset(e, 0, sizeof *e);
}

void rf_engine_poison(rf_engine *e) {
  const rf_layout *lay = e->plan->layout;
  /* Zero is +0.0, which the generator (normal numbers only) never produces. */
  for (int l = 0; l < lay->rollout_tensor_count; l++)
    if (e->data->rollout[l])
      memset(e->data->rollout[l], 0, e->data->rollout_bytes[l]);
  for (int t = 0; t < lay->model->tensor_count; t++)
    if (e->data->coupling[t])
      memset(e->data->coupling[t], 0, e->data->coupling_bytes[t]);
}

rf_status rf_engine_iterate(rf_engine *e, double *times, int stall) {
  for (int p = 0; p < RF_PHASE_COUNT; p++)
    times[p] = 0.0;
  e->messages = 0;
  if (stall)
    return RF_OK; /* --inject stall: this rank never posts its side */
  double start = rf_now();
  if (e->reshape.chunk_count) {
    double scratch[RF_PHASE_COUNT] = {0};
    RF_TRY(engine_run_stage(e, &e->reshape, scratch));
    times[RF_PHASE_RESHAPE] = rf_now() - start;
  }
  RF_TRY(engine_run_stage(e, &e->transfer, times));
  times[RF_PHASE_TOTAL] = rf_now() - start;
  return RF_OK;
}

/* ---- after the last iteration ------------------------------------------------------------ */

int64_t rf_engine_check(rf_engine *e) {
  if (e->rollout_rank < 0)
    return 0;
  const rf_model *m = e->plan->layout->model;
  int64_t wrong = 0;
  int reported = 0;
  for (int t = 0; t < m->tensor_count; t++) {
    rf_box held;
    rf_region r = rollout_region(e, t, &held);
    if (rf_box_is_empty(&held))
      continue;
    rf_mismatch first[4];
    int n = 0;
    wrong += rf_check_region(&r, &held, &m->tensors[t], e->seed, m->dtype, first,
                             (int)RF_ARRAY_LEN(first), &n);
    for (int i = 0; i < n && reported < 4; i++, reported++)
      RF_ERROR("verify: %s on rollout rank %d: element %lld (row %lld, col %lld) is 0x%x, "
               "expected 0x%x",
               m->tensors[t].name, e->rollout_rank, (long long)first[i].index,
               (long long)(first[i].index / m->tensors[t].shape[1]),
               (long long)(first[i].index % m->tensors[t].shape[1]), first[i].got,
               first[i].expected);
  }
  return wrong;
}

/* A box replicated on several ranks of a group is counted by the lowest of them only. */
static int lowest_trainer_holder(const rf_layout *lay, int t, int rank, const rf_box *box) {
  for (int r = 0; r < rank; r++) {
    rf_box other = rf_layout_trainer_box(lay, t, r);
    if (rf_box_equal(&other, box))
      return 0;
  }
  return 1;
}

static int lowest_rollout_holder(const rf_layout *lay, int t, int rank, const rf_box *box) {
  for (int r = rank - rank % lay->rollout.tp; r < rank; r++) {
    rf_box other = rf_layout_rollout_box(lay, t, r);
    if (rf_box_equal(&other, box))
      return 0;
  }
  return 1;
}

void rf_engine_checksums(rf_engine *e, uint64_t *trainer, uint64_t *rollout) {
  const rf_layout *lay = e->plan->layout;
  const rf_model *m = lay->model;
  for (int t = 0; t < m->tensor_count; t++) {
    if (e->trainer_rank >= 0) {
      rf_box box = rf_layout_trainer_box(lay, t, e->trainer_rank);
      rf_region r = shard_region(e, t);
      if (lowest_trainer_holder(lay, t, e->trainer_rank, &box))
        trainer[t] += rf_checksum_region(&r, &box, &m->tensors[t], m->dtype);
    }
    if (e->rollout_rank >= 0) {
      rf_box held;
      rf_region r = rollout_region(e, t, &held);
      int replica = e->rollout_rank / lay->rollout.tp;
      if (!rf_box_is_empty(&held) && lowest_rollout_holder(lay, t, e->rollout_rank, &held))
        rollout[(size_t)replica * m->tensor_count + t] +=
            rf_checksum_region(&r, &held, &m->tensors[t], m->dtype);
    }
  }
}

void rf_engine_corrupt(rf_engine *e) {
  if (e->rollout_rank != e->plan->layout->rollout_ranks - 1)
    return;
  rf_box held;
  rf_region r = rollout_region(e, 0, &held);
  if (rf_box_is_empty(&held))
    return;
  *rf_region_at(&r, held.lo[0], held.lo[1]) ^= 0x5a;
  RF_WARN("inject corrupt: flipped bits of %s element (%lld, %lld) on rollout rank %d",
          e->plan->layout->model->tensors[0].name, (long long)held.lo[0], (long long)held.lo[1],
          e->rollout_rank);
}
