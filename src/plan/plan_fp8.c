/* FP8 rollouts in the plan: where each piece is quantized and the bytes it puts on the wire
 * (docs/architecture.md, "FP8 rollouts").
 *
 * The rule, per transfer piece of a tensor the rollout receives as fp8:
 *
 * - Source: when the piece's box holds whole blocks of the Hugging Face tensor (every edge on
 *   the block grid), the source holds every element of every block it sends, so it quantizes
 *   them and the wire carries the fp8 bytes and one scale per block: a little over half of
 *   bf16's bytes. A JAX-order shard holds its blocks transposed; the quantizer reads them that
 *   way (on a GPU in one pass that transposes as it quantizes), so the order does not matter.
 * - Destination: any other piece (a trainer shard edge inside a block) moves in the trainer's
 *   dtype, and the rollout rank quantizes the blocks once all of their pieces have landed. The
 * rollout shard always holds whole blocks (layout_fp8.c refuses a tp that cuts one), so this needs
 * no communication.
 *
 * We chose destination quantization over an amax exchange for the pieces whose blocks are cut
 * at the source: an exchange adds a stage before the transfer, small messages between every
 * pair of trainer ranks that share a block, waited for before a byte moves, and a plan whose
 * pieces depend on values; destination quantization keeps one transfer stage, a pure plan and
 * bit-exact bytes by the same reference. Its price is bf16 on the wire where trainer shards cut
 * blocks (for instance fsdp shards narrower than 128 rows), which `refit plan` shows as wire
 * bytes and destination-quantized tensors. Forward pieces (fanout) leave a rollout rank that
 * holds the tensor quantized already, so they carry fp8 and scales; star's reshape moves the
 * trainer's dtype between trainer ranks.
 *
 * When the trainer's weights come from a quantized checkpoint in the rollout's format
 * (block-FP8, MXFP8, MXFP4, NVFP4), its linear weights are quantized already
 * (rf_model_weights_quantized), each shard with the scales of every block it touches (and
 * nvfp4's global): every transfer piece carries its quantized bytes (4-bit ones packed, the
 * shard's columns even) and the scales of its blocks as they are (a block cut by two shards has
 * its scale in both, and both send it), and nothing is quantized. */
#include <stdlib.h>

#include "plan_internal.h"

rf_quant rf_piece_quant(const rf_plan *plan, const rf_piece *piece) {
  const rf_layout *lay = plan->layout;
  if (!rf_layout_fp8(lay, piece->tensor) || piece->stage == RF_STAGE_RESHAPE)
    return RF_QUANT_NONE;
  if (piece->stage == RF_STAGE_FORWARD)
    return RF_QUANT_FORWARDED;
  if (rf_tensor_quantized(&lay->model->tensors[piece->tensor]))
    return RF_QUANT_CARRIED;
  return rf_layout_fp8_aligned(lay, piece->tensor, &piece->box) ? RF_QUANT_SOURCE
                                                                : RF_QUANT_DESTINATION;
}

int64_t rf_format_min_bucket(const rf_format *f) {
  return (int64_t)f->block_rows * rf_format_row_bytes(f, f->block_cols) + f->scale_bytes;
}

int rf_piece_carries_fp8(const rf_plan *plan, const rf_piece *piece) {
  rf_quant q = rf_piece_quant(plan, piece);
  return q == RF_QUANT_SOURCE || q == RF_QUANT_FORWARDED || q == RF_QUANT_CARRIED;
}

int64_t rf_piece_wire_bytes(const rf_plan *plan, const rf_piece *piece, const rf_box *box) {
  const rf_format *f = rf_layout_format(plan->layout);
  if (rf_piece_carries_fp8(plan, piece))
    return (box->hi[0] - box->lo[0]) * rf_format_row_bytes(f, box->hi[1] - box->lo[1]) +
           rf_format_box_blocks(f, box) * f->scale_bytes;
  return rf_box_numel(box) * rf_tensor_esize(&plan->layout->model->tensors[piece->tensor]);
}

rf_status plan_wire_open(rf_plan *plan, plan_wire *w) {
  const rf_layout *lay = plan->layout;
  int T = lay->trainer_ranks, R = lay->rollout_ranks;
  plan->wire_send_bytes = rf_calloc((size_t)T, sizeof(int64_t), "plan wire bytes");
  plan->wire_recv_bytes = rf_calloc((size_t)R, sizeof(int64_t), "plan wire bytes");
  plan->source_quantized = rf_calloc((size_t)T, sizeof(int), "plan fp8 counts");
  plan->destination_quantized = rf_calloc((size_t)R, sizeof(int), "plan fp8 counts");
  /* The last fp8 tensor each rank was counted for: a stage lists a tensor's pieces together
   * (plan.h), so a rank's count grows once per tensor. */
  w->last = rf_malloc((size_t)(T + R) * sizeof *w->last, "plan fp8 counts");
  w->tensor = -1;
  w->any_destination = 0;
  if (!plan->wire_send_bytes || !plan->wire_recv_bytes || !plan->source_quantized ||
      !plan->destination_quantized || !w->last) {
    free(w->last);
    w->last = NULL;
    return RF_ERR_NOMEM;
  }
  for (int i = 0; i < T + R; i++)
    w->last[i] = -1;
  return RF_OK;
}

void plan_wire_add(rf_plan *plan, plan_wire *w, const rf_piece *p) {
  int T = plan->layout->trainer_ranks;
  /* A piece that does not carry fp8 puts its own bytes on the wire (rf_piece_wire_bytes). */
  rf_quant q = rf_piece_quant(plan, p);
  int64_t wire = q == RF_QUANT_SOURCE || q == RF_QUANT_FORWARDED || q == RF_QUANT_CARRIED
                     ? rf_piece_wire_bytes(plan, p, &p->box)
                     : p->bytes;
  if (p->stage == RF_STAGE_FORWARD)
    plan->wire_forward_bytes += wire;
  if (p->stage != RF_STAGE_TRANSFER)
    return;
  plan->wire_send_bytes[p->src] += wire;
  plan->wire_recv_bytes[p->dst] += wire;
  plan->wire_transfer_bytes += wire;
  if (q == RF_QUANT_NONE || q == RF_QUANT_CARRIED)
    return;
  if (p->tensor != w->tensor) { /* the previous fp8 tensor is complete */
    plan->source_tensors += w->tensor >= 0 && !w->any_destination;
    plan->destination_tensors += w->tensor >= 0 && w->any_destination;
    w->tensor = p->tensor, w->any_destination = 0;
  }
  w->any_destination |= q == RF_QUANT_DESTINATION;
  int *seen = q == RF_QUANT_SOURCE ? &w->last[p->src] : &w->last[T + p->dst];
  int *count =
      q == RF_QUANT_SOURCE ? &plan->source_quantized[p->src] : &plan->destination_quantized[p->dst];
  *count += *seen != p->tensor;
  *seen = p->tensor;
}

void plan_wire_close(rf_plan *plan, plan_wire *w) {
  plan->source_tensors += w->tensor >= 0 && !w->any_destination;
  plan->destination_tensors += w->tensor >= 0 && w->any_destination;
  w->tensor = -1;
  free(w->last);
  w->last = NULL;
}
