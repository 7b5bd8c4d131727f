/* The engine's buffers: allocation, the generator's fill, regions, and the checks that run
 * after the last iteration. The modes themselves live in engine_modes.c. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "verify/verify.h"

RF_ENUM_DEFINE(rf_mode, "mode", RF_MODE_LIST, RF_MODE_COUNT)
RF_ENUM_DEFINE(rf_delta_choice, "delta", RF_DELTA_CHOICE_LIST, RF_DELTA_CHOICE_COUNT)
RF_ENUM_DEFINE(rf_inject, "inject", RF_INJECT_LIST, RF_INJECT_COUNT)
RF_ENUM_DEFINE(rf_mapped_rounds, "mapped-rounds", RF_MAPPED_ROUNDS_LIST, RF_MAPPED_ROUNDS_COUNT)

const char *rf_mode_list_format(const rf_mode_list *modes, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < modes->count && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? "," : "",
                             rf_mode_name(modes->items[i]));
  return buf;
}

int engine_esize(const rf_engine *e, int tensor) {
  return rf_tensor_esize(&e->plan->layout->model->tensors[tensor]);
}

rf_region engine_shard_region(const rf_engine *e, int tensor) {
  return rf_shard_region(e->plan, e->trainer_rank, tensor, e->data->shards[tensor]);
}

rf_region engine_rollout_over(const rf_plan *plan, int tensor, int rank, void *base, rf_box *held) {
  const rf_layout *lay = plan->layout;
  const rf_rollout_slot *slot = &lay->slots[tensor];
  rf_box col = {{0, slot->col}, {1, slot->col}};
  *held = rf_layout_rollout_box(lay, tensor, rank);
  rf_box bytes = rf_layout_rollout_bytes(lay, tensor, held);
  col = rf_layout_rollout_bytes(lay, tensor, &col);
  return rf_region_in_fused(base, lay->rollout_tensors[slot->local].shape[1], slot->row, col.lo[1],
                            &bytes, rf_layout_rollout_esize(lay, tensor));
}

rf_region engine_rollout_region(const rf_engine *e, int tensor, rf_box *held) {
  const rf_layout *lay = e->plan->layout;
  return engine_rollout_over(e->plan, tensor, e->rollout_rank,
                             e->data->rollout[lay->slots[tensor].local], held);
}

rf_channel engine_channel(rf_stage stage) {
  return stage == RF_STAGE_RESHAPE ? RF_CHANNEL_TRAINER : RF_CHANNEL_WORLD;
}

int engine_src_rank(const rf_engine *e, rf_stage stage) {
  return stage == RF_STAGE_FORWARD ? e->rollout_rank : e->trainer_rank;
}

int engine_dst_rank(const rf_engine *e, rf_stage stage) {
  return stage == RF_STAGE_RESHAPE ? e->trainer_rank : e->rollout_rank;
}

int engine_peer(const rf_engine *e, const rf_piece *p, int sending) {
  if (engine_channel(p->stage) == RF_CHANNEL_TRAINER)
    return sending ? p->dst : p->src;
  return sending ? rf_piece_dst_world(e->plan, p) : rf_piece_src_world(e->plan, p);
}

/* A piece's source region over `base`: its source rank's trainer shard, star's coupling
 * buffer, or (fanout's forward steps) the forwarding rollout rank's part of a fused tensor.
 * The engine passes its own buffer (it is always the source's rank when it reads one);
 * the cost functions below pass NULL, since where a region starts plays no part in whether a
 * box of it is contiguous. */
static rf_region source_over(const rf_plan *plan, const rf_piece *p, void *base) {
  rf_box held;
  if (p->stage == RF_STAGE_FORWARD)
    return engine_rollout_over(plan, p->tensor, p->src, base, &held);
  if (p->stage == RF_STAGE_TRANSFER && plan->kind == RF_PLAN_STAR) {
    const rf_box *c = &plan->coupling[(size_t)p->tensor * plan->layout->trainer_ranks + p->src];
    return rf_region_row_major(base, c, rf_tensor_esize(&plan->layout->model->tensors[p->tensor]));
  }
  return rf_shard_region(plan, p->src, p->tensor, base);
}

/* The region a piece lands in on its destination rank, over `base`, and the part of `box` the
 * destination keeps. */
static rf_region destination_over(const rf_plan *plan, const rf_piece *p, const rf_box *box,
                                  void *base, rf_box *kept) {
  const rf_layout *lay = plan->layout;
  int esize = rf_tensor_esize(&lay->model->tensors[p->tensor]);
  if (p->stage == RF_STAGE_RESHAPE) {
    *kept = *box;
    return rf_region_row_major(
        base, &plan->coupling[(size_t)p->tensor * lay->trainer_ranks + p->dst], esize);
  }
  rf_box held;
  rf_region r = engine_rollout_over(plan, p->tensor, p->dst, base, &held);
  rf_box_intersect(box, &held, kept);
  /* A destination-quantized fp8 piece lands in the trainer's dtype, row-major over the held
   * box (the rank's landing buffer), and is quantized after the transfer. */
  if (rf_piece_quant(plan, p) == RF_QUANT_DESTINATION)
    return rf_region_row_major(base, &held, esize);
  return r;
}

rf_region engine_source(const rf_engine *e, const rf_piece *p) {
  int star = p->stage == RF_STAGE_TRANSFER && e->plan->kind == RF_PLAN_STAR;
  void *base = p->stage == RF_STAGE_FORWARD
                   ? e->data->rollout[e->plan->layout->slots[p->tensor].local]
               : star ? e->data->coupling[p->tensor]
                      : e->data->shards[p->tensor];
  return source_over(e->plan, p, base);
}

rf_buffer_family engine_source_family(const rf_plan *plan) {
  return plan->kind == RF_PLAN_STAR ? RF_FAMILY_COUPLING : RF_FAMILY_SHARDS;
}

rf_region engine_source_in(const rf_engine *e, const rf_piece *p, void *copy) {
  rf_buffer_family f = engine_source_family(e->plan);
  char *buf = f == RF_FAMILY_COUPLING ? e->data->coupling[p->tensor] : e->data->shards[p->tensor];
  return source_over(e->plan, p, (char *)copy + (buf - (char *)e->data->arena[f]));
}

rf_status engine_reshape(rf_engine *e, double start, double *times) {
  if (!e->reshape.chunk_count)
    return RF_OK;
  double scratch[RF_PHASE_COUNT] = {0};
  RF_TRY(e->mapped ? engine_run_stage_mapped(e, &e->reshape, scratch)
                   : engine_run_rounds(e, &e->reshape_rounds, 0, scratch));
  times[RF_PHASE_RESHAPE] = rf_now() - start;
  return RF_OK;
}

rf_region engine_destination(const rf_engine *e, const rf_piece *p, const rf_box *box,
                             rf_box *kept) {
  void *base = p->stage == RF_STAGE_RESHAPE ? e->data->coupling[p->tensor]
               : rf_piece_quant(e->plan, p) == RF_QUANT_DESTINATION
                   ? e->data->landing[p->tensor]
                   : e->data->rollout[e->plan->layout->slots[p->tensor].local];
  return destination_over(e->plan, p, box, base, kept);
}

/* A chunk that carries fp8 is fp8 bytes and scales on the wire, which no buffer holds as one
 * run: it always goes through staging. */
static int carries_fp8(const rf_plan *plan, const rf_chunk *k) {
  return rf_piece_carries_fp8(plan, &plan->pieces[k->piece]);
}

rf_wire rf_engine_wire_rule(const rf_transport_ops *ops, rf_mem_kind memory) {
  if (memory == RF_MEM_DEVICE && ops->memory != RF_MEM_DEVICE)
    return RF_WIRE_STAGED;
  const char *off = getenv("REFIT_GATHER");
  return ops->post_strided && !(off && !strcmp(off, "0")) ? RF_WIRE_GATHERS : RF_WIRE_CONTIGUOUS;
}

/* How `box` of region r travels on this wire. A wire that gathers takes any box whose rows
 * are contiguous in fused, where it spares packing and unpacking whole peers' messages.
 * unfused and grouped keep strided boxes in staging even then: a contiguous message takes
 * MPI's single-copy path and the unpack is one more copy on the receiver, while a strided one
 * moves through MPI's fragment pipeline, which needs both ends on a core at once; with ranks
 * sharing cores that measured slower (results/host.md, 2026-12-04 late). */
static rf_chunk_path path_of(const rf_region *r, const rf_box *box, rf_mode mode, rf_wire wire) {
  int contiguous = rf_region_contiguous(r, box);
  if (wire == RF_WIRE_GATHERS && mode == RF_MODE_FUSED) {
    int rows_contiguous = box->hi[1] - box->lo[1] == 1 || r->stride[1] == 1;
    return contiguous ? RF_CHUNK_DIRECT : rows_contiguous ? RF_CHUNK_GATHERED : RF_CHUNK_STAGED;
  }
  return mode != RF_MODE_FUSED && contiguous ? RF_CHUNK_DIRECT : RF_CHUNK_STAGED;
}

int rf_engine_pack_batched(const rf_plan *plan, rf_mode mode, const rf_piece *p) {
  rf_quant quant = rf_piece_quant(plan, p);
  return mode == RF_MODE_FUSED && (quant == RF_QUANT_NONE || quant == RF_QUANT_DESTINATION);
}

int rf_engine_unpack_batched(const rf_plan *plan, const rf_piece *p) {
  return !rf_piece_carries_fp8(plan, p);
}

rf_chunk_path rf_engine_send_path(const rf_plan *plan, rf_mode mode, rf_wire wire,
                                  const rf_chunk *k) {
  if (wire == RF_WIRE_STAGED || carries_fp8(plan, k))
    return RF_CHUNK_STAGED;
  rf_region src = source_over(plan, &plan->pieces[k->piece], NULL);
  return path_of(&src, &k->box, mode, wire);
}

rf_chunk_path rf_engine_recv_path(const rf_plan *plan, rf_mode mode, rf_wire wire,
                                  const rf_chunk *k) {
  if (wire == RF_WIRE_STAGED || carries_fp8(plan, k))
    return RF_CHUNK_STAGED;
  rf_box kept;
  rf_region dst = destination_over(plan, &plan->pieces[k->piece], &k->box, NULL, &kept);
  return rf_box_equal(&kept, &k->box) ? path_of(&dst, &k->box, mode, wire) : RF_CHUNK_STAGED;
}

int rf_engine_joined_chunks(const rf_plan *plan, rf_mode mode, rf_wire wire, const rf_chunk *chunks,
                            int i, int end) {
  if (mode == RF_MODE_FUSED || wire == RF_WIRE_STAGED || carries_fp8(plan, &chunks[i]))
    return 1;
  int n = 1;
  while (i + n < end) {
    const rf_piece *prev = &plan->pieces[chunks[i + n - 1].piece];
    const rf_piece *cur = &plan->pieces[chunks[i + n].piece];
    if (rf_piece_is_local(plan, cur) || carries_fp8(plan, &chunks[i + n]) ||
        !rf_box_equal(&chunks[i + n - 1].box, &prev->box) ||
        !rf_box_equal(&chunks[i + n].box, &cur->box) || !rf_piece_continues(plan, prev, cur))
      break;
    n++;
  }
  return n;
}

rf_pace rf_engine_pace(rf_mode mode) {
  return mode == RF_MODE_FUSED ? RF_PACE_ROWS : RF_PACE_PIECES;
}

const rf_schedule *engine_stage(const rf_engine *e, int i) {
  return i == 0 ? &e->reshape : i == 1 ? &e->transfer : &e->forward[i - 2];
}

/* Where --rollout-dtype fp8 moves: host memory (over messages or a host mapping) and GPU
 * memory that stays on the GPU (ipc's mappings, nccl's device buffers), where the kernels
 * quantize. GPU weights staged through host memory for mpi would quantize into pinned
 * buffers across the bus: refused before anything is built. */
static rf_status check_fp8(const rf_engine *e, const rf_transport *tp) {
  const rf_plan *plan = e->plan;
  const rf_format *f = rf_layout_format(plan->layout);
  if (!f)
    return RF_OK;
  if (e->memory != RF_MEM_DEVICE || e->wire == RF_MEM_DEVICE)
    return RF_OK;
  return rf_fail(RF_ERR_USAGE,
                 "--rollout-dtype fp8 with the weights in GPU memory needs a GPU transport, not "
                 "%s staged through host memory; use --transport ipc or nccl, or --memory host",
                 tp->ops->name);
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
  e->memory = data->memory;
  e->wire_rule = rf_engine_wire_rule(tp->ops, e->memory);
  e->wire = e->wire_rule == RF_WIRE_STAGED ? RF_MEM_PINNED : e->memory;
  if (tp->ops->memory == RF_MEM_DEVICE && e->memory != RF_MEM_DEVICE)
    return rf_fail(RF_ERR_USAGE,
                   "the %s transport moves GPU memory, but the weights are in %s "
                   "memory; drop --memory host",
                   tp->ops->name, rf_mem_kind_name(e->memory));
  if (tp->ops->check_memory)
    RF_TRY(tp->ops->check_memory(tp, e->memory));
  RF_TRY(check_fp8(e, tp));
  e->pack_timer.kind = e->unpack_timer.kind = e->memory;
  rf_layout_roles(plan->layout, world_rank, &e->trainer_rank, &e->rollout_rank);
  RF_TRY(rf_schedule_build(plan, RF_STAGE_RESHAPE, bucket_size, rf_engine_pace(mode), &e->reshape));
  RF_TRY(
      rf_schedule_build(plan, RF_STAGE_TRANSFER, bucket_size, rf_engine_pace(mode), &e->transfer));
  e->forward = rf_calloc((size_t)plan->forward_depth + 1, sizeof *e->forward, "forward steps");
  if (!e->forward)
    return RF_ERR_NOMEM;
  for (int s = 0; s < plan->forward_depth; s++)
    RF_TRY(rf_schedule_build_forward(plan, s, bucket_size, rf_engine_pace(mode), &e->forward[s]));
  RF_TRY(rf_rounds_build(plan, &e->transfer, e->forward, plan->forward_depth, &e->rounds));
  e->corrupt_round = engine_corrupt_round(e);
  RF_TRY(engine_fp8_blocks_init(e));
  RF_TRY(engine_fp8_globals_init(e));
  if (tp->ops->peer_buffer)
    return engine_mapped_init(e); /* one end copies straight across: no staging */
  RF_TRY(rf_rounds_build(plan, &e->reshape, NULL, 0, &e->reshape_rounds));
  RF_TRY(engine_alloc_staging(e));
  return RF_OK;
}

void rf_engine_set_mapped_rounds(rf_engine *e, rf_mapped_rounds choice, int forward_crosses_gpus) {
  e->mapped_rounds =
      choice == RF_MAPPED_ROUNDS_ON ||
      (choice == RF_MAPPED_ROUNDS_AUTO && e->memory == RF_MEM_DEVICE && forward_crosses_gpus);
}

void rf_engine_free(rf_engine *e) {
  if (!e->plan)
    return;
  engine_delta_free(e);
  for (int dir = 0; dir < 2; dir++)
    for (int k = 0; k < 4; k++)
      if (e->staging[dir][k])
        rf_mem_free(e->wire, e->staging[dir][k], e->staging_bytes[dir][k / 2]);
  rf_mem_timer_free(&e->pack_timer);
  rf_mem_timer_free(&e->unpack_timer);
  rf_mem_timer_free(&e->timeline_timer);
  for (int f = 0; f < RF_FAMILY_COUNT; f++)
    free(e->peer_offsets[f]);
  free(e->notes);
  free(e->group_break);
  free(e->fp8_blocks);
  free(e->fp8_global);
  rf_rounds_free(&e->reshape_rounds);
  rf_rounds_free(&e->rounds);
  rf_schedule_free(&e->reshape);
  rf_schedule_free(&e->transfer);
  for (int s = 0; e->forward && s < e->plan->forward_depth; s++)
    rf_schedule_free(&e->forward[s]);
  free(e->forward);
  memset(e, 0, sizeof *e);
}

rf_status rf_engine_poison(rf_engine *e) {
  /* Zero is +0.0, which the generator (normal numbers only) never produces. */
  const rf_buffer_family families[] = {RF_FAMILY_ROLLOUT, RF_FAMILY_COUPLING};
  for (size_t i = 0; i < RF_ARRAY_LEN(families); i++)
    if (e->data->arena[families[i]])
      RF_TRY(
          rf_mem_zero(e->memory, e->data->arena[families[i]], e->data->arena_bytes[families[i]]));
  if (e->data->landing_arena)
    RF_TRY(rf_mem_zero(e->memory, e->data->landing_arena, e->data->landing_bytes));
  e->data->holds = 0; /* no version, until the iteration writes one */
  return rf_mem_sync(e->memory);
}

rf_status rf_engine_iterate(rf_engine *e, double *times, int stall) {
  for (int p = 0; p < RF_PHASE_COUNT; p++)
    times[p] = 0.0;
  e->messages = 0;
  e->moved = e->data->version; /* what the rollout holds once this iteration is done */
  /* --inject stall: this rank never posts its side. Under delta it holds the iteration back
   * as every rank does, so that the failure the others see turns its version back too. */
  e->delta_pending = stall && rf_engine_delta_next(e);
  if (stall)
    return RF_OK;
  e->delta_posted = 0;
  e->delta_dense = e->delta != RF_DELTA_CHOICE_OFF && !e->data->delta_base;
  if (rf_engine_delta_next(e)) {
    double begin = rf_now();
    e->delta_pending = 1; /* so that a failure anywhere, on any rank, turns the version back */
    RF_TRY(engine_delta_iterate(e, times));
    times[RF_PHASE_TOTAL] = rf_now() - begin;
    return RF_OK;
  }
  double start = rf_now();
  RF_TRY(engine_fp8_agree_globals(e, times, 1)); /* nvfp4: before any source quantizes */
  RF_TRY(engine_reshape(e, start, times));
  e->fp8_next = 0; /* fp8: the blocks quantized round by round as their pieces land */
  if (!e->mapped) {
    /* The transfer and the forward steps in rounds; the forward buckets' pack, transfer and
     * unpack add to the transfer stage's phases. --inject corrupt strikes inside. */
    RF_TRY(engine_run_rounds(e, &e->rounds, 1, times));
    RF_TRY(engine_fp8_device_done(e));
    times[RF_PHASE_TOTAL] = rf_now() - start;
    return RF_OK;
  }
  /* The mapped path (ipc, shm): fanout in rounds where --mapped-rounds says so, else the
   * transfer as one exchange, then each forward step (a round per bucket without forward
   * steps would only add notes and launches: there is no staging to bound). */
  if (e->plan->forward_depth > 0 && e->mapped_rounds) {
    RF_TRY(engine_run_rounds_mapped(e, times));
  } else {
    RF_TRY(engine_run_stage_mapped(e, &e->transfer, times));
    RF_TRY(engine_fp8_round_done(e, INT_MAX)); /* fp8: every round's blocks, before forwarding */
    if (e->corrupt_armed) {
      e->corrupt_armed = 0;
      RF_TRY(engine_apply_corrupt(e));
    }
    for (int s = 0; s < e->plan->forward_depth; s++)
      RF_TRY(engine_run_stage_mapped(e, &e->forward[s], times));
  }
  RF_TRY(engine_fp8_device_done(e));
  times[RF_PHASE_TOTAL] = rf_now() - start;
  return RF_OK;
}

rf_status rf_engine_abandon(rf_engine *e) {
  rf_transport *tp = e->transport;
  return tp && tp->ops->abandon ? tp->ops->abandon(tp) : RF_OK;
}
