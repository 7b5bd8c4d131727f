/* Delta refits of a quantized rollout (docs/architecture.md, "Delta refits"): a piece its
 * source quantizes travels as its wire bytes (the format's quantized bytes, then its scales,
 * engine_fp8_pack), so its delta is one of those bytes, element size 1. A changed element
 * changes its quantized byte only where its rounding moves, and a block's scale only where its
 * maximum does, so a block that did not change costs nothing, and one that did resends what
 * moved, scales included.
 *
 * The trainer keeps no quantized copy: it quantizes the chunk of its kept version and of the
 * current one into two scratch buffers and encodes the difference. Quantizing is a pure
 * function of the block (format.h), so the kept version's bytes are what the rollout holds.
 * The rollout rank packs the bytes and scales it holds into scratch as a forward piece would
 * be (engine_fp8_pack_forward), applies the delta there, and unpacks the result into its
 * tensor and scales (engine_fp8_unpack): a piece is written only once all of it is right.
 *
 * A format with a per-tensor global scale (nvfp4) agrees each version's globals before it
 * encodes, as a dense refit does, and the job keeps those of the kept version
 * (rf_buffers.prev_global, set whenever the kept version is), which it is quantized with; a rollout
 * rank writes the new ones into its weight_scale_2 only when it applies the version, and a refused
 * refit puts the old ones back everywhere.
 *
 * What this cannot take is refused in one line at rf_engine_set_delta: a piece quantized at
 * the destination (the rollout would need the trainer's dtype of the version before, which it
 * does not keep) and a quantized checkpoint as the trainer's weights (its bytes carry as they
 * are). */
#include <stdio.h>
#include <string.h>

#include "engine_internal.h"

int engine_delta_quantized(const rf_engine *e, const rf_chunk *k) {
  return rf_piece_quant(e->plan, &e->plan->pieces[k->piece]) == RF_QUANT_SOURCE;
}

rf_box engine_delta_box(const rf_engine *e, const rf_chunk *k, int *esize) {
  const rf_piece *p = &e->plan->pieces[k->piece];
  if (!engine_delta_quantized(e, k)) {
    /* What the destination keeps of it: all of it, but for star's whole embeddings and norms,
     * of which a rollout rank keeps its share. */
    rf_box held = rf_layout_rollout_box(e->plan->layout, p->tensor, p->dst), kept;
    *esize = engine_esize(e, p->tensor);
    if (!rf_box_intersect(&k->box, &held, &kept))
      memset(&kept, 0, sizeof kept);
    return kept;
  }
  *esize = 1;
  rf_box wire = {{0, 0}, {1, rf_piece_wire_bytes(e->plan, p, &k->box)}};
  return wire;
}

int engine_delta_quant_refusal(const rf_engine *e, char *what, size_t what_len, char *instead,
                               size_t instead_len) {
  const rf_plan *plan = e->plan;
  const rf_format *f = rf_layout_format(plan->layout);
  if (!f)
    return 0;
  for (int i = 0; i < plan->piece_count; i++) {
    const rf_piece *p = &plan->pieces[i];
    rf_quant q = rf_piece_quant(plan, p);
    const char *name = plan->layout->model->tensors[p->tensor].name;
    if (q == RF_QUANT_DESTINATION) {
      snprintf(what, what_len,
               "%s quantized at the destination ('%s': a trainer shard cuts its "
               "blocks)",
               f->name, name);
      snprintf(instead, instead_len,
               "a trainer layout whose shards hold whole blocks, or --delta "
               "off");
      return 1;
    }
    if (q == RF_QUANT_CARRIED) {
      snprintf(what, what_len, "a quantized checkpoint as the trainer's weights ('%s')", name);
      snprintf(instead, instead_len, "a checkpoint in the model's dtype, or --delta off");
      return 1;
    }
  }
  return 0;
}

rf_status engine_delta_quant_encode(const rf_engine *e, const rf_chunk *k, const rf_region *prev,
                                    const rf_region *cur, char *const scratch[2],
                                    const engine_delta_encode_args *a, rf_delta_info *info) {
  const rf_piece *p = &e->plan->pieces[k->piece];
  int esize;
  rf_box wire = engine_delta_box(e, k, &esize);
  RF_TRY(engine_fp8_pack_with(e, e->data->prev_global, p, prev, &k->box, scratch[0]));
  RF_TRY(engine_fp8_pack(e, p, cur, &k->box, scratch[1]));
  rf_region was = rf_region_row_major(scratch[0], &wire, 1);
  rf_region now = rf_region_row_major(scratch[1], &wire, 1);
  return rf_delta_encode(e->memory, &was, &now, &wire, a->want, a->to, a->capacity, a->what, info);
}

rf_status engine_delta_quant_held(const rf_engine *e, const rf_piece *here, const rf_chunk *k,
                                  const void *encoded, rf_delta_info *info, int64_t bytes,
                                  char *scratch, const char *what) {
  int esize;
  rf_box wire = engine_delta_box(e, k, &esize);
  rf_region w = rf_region_row_major(scratch, &wire, 1);
  if (bytes >= 0) /* the check alone: nothing is read or written but the encoded piece */
    return rf_delta_check(e->memory, encoded, (size_t)bytes, &w, &wire, what, info);
  RF_TRY(engine_fp8_pack_forward(e, here, &k->box, scratch));
  RF_TRY(rf_delta_apply_checked(e->memory, encoded, info, &w, &wire, what));
  return engine_fp8_unpack(e, here, &k->box, scratch);
}

rf_status engine_delta_quant_globals(rf_engine *e) {
  if (!e->fp8_global)
    return RF_OK;
  double scratch[RF_PHASE_COUNT] = {0}; /* timed as encode, by the caller */
  return engine_fp8_agree_globals(e, scratch, 0);
}

void engine_delta_quant_globals_back(rf_engine *e) {
  if (e->fp8_global && e->data->prev_global)
    memcpy(e->fp8_global, e->data->prev_global,
           (size_t)e->plan->layout->model->tensor_count * sizeof *e->fp8_global);
}

rf_status engine_delta_quant_keep(const rf_engine *e, const rf_region *prev, const rf_region *cur,
                                  const rf_box *box) {
  if (e->memory != RF_MEM_DEVICE) {
    rf_region_copy(prev, cur, box);
    return RF_OK;
  }
  rf_box_copy c = {*prev, *cur, *box};
  return rf_copy_boxes(e->memory, &c, 1);
}
