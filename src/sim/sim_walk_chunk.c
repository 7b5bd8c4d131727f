/* What each chunk of a schedule adds to the walk's open unit (sim_walk.c): its flow between
 * two ranks, as a message or a copy, the packs and unpacks the engine's rules give it, where a
 * quantized rollout is quantized, and what a delta makes of it.
 *
 * With a delta (rf_sim_options.delta) every chunk of the transfer and forward stages that
 * crosses between two ranks travels encoded (sim_delta.c): its source encodes it into staging
 * (its pack: reading both versions, at the encode rate; a forwarding replica sends on the
 * encoded bytes it received, encoding nothing), the encoded bytes fly, and its destination
 * applies them from staging (its unpack, at the apply rate). A unit's encodes are one launch a
 * rank, as are its applies, and each pair's encoded chunks of a unit one message: they lie
 * back to back in the pair's staging. Local chunks, and star's reshape, move whole. */
#include "sim_walker.h"

/* The trainer-dtype bytes of chunk k that the plan has quantized (rf_piece_quant): what the
 * quantizer reads. Forwarded and carried pieces move fp8 already and quantize nothing. */
static int64_t quantized_bytes(const rf_plan *plan, const rf_chunk *k, rf_quant want) {
  const rf_piece *p = &plan->pieces[k->piece];
  if (rf_piece_quant(plan, p) != want)
    return 0;
  return rf_box_numel(&k->box) * rf_tensor_esize(&plan->layout->model->tensors[p->tensor]);
}

/* Where the quantizer runs, as the engine runs it (engine_fp8.c, engine_modes.c):
 *
 * - A destination-quantized piece lands in the trainer's dtype and its destination quantizes
 *   it from there once the round has brought its blocks (engine_fp8_round_done, timed as
 *   unpack): its bytes on the destination's unpack, in a launch of their own, whatever path the
 *   landing took. The engine quantizes a block when its last piece lands; the walk charges
 *   each piece in the unit that brings it, the same bytes in all.
 * - A source-quantized piece sent as a message is quantized into staging: the quantizer is its
 *   pack, reading the trainer's bytes and writing the fp8 bytes and scales, so its pack is the
 *   quantize, in place of a copy of its wire bytes.
 * - A local source-quantized piece is quantized straight into the rollout tensor
 *   (engine_fp8_local): the same, on the rank's pack, and nothing else is copied. The engine
 *   does it as it posts, outside its pack timer, so its measured pack has it in transfer.
 * - Over a mapping transport the destination pulls a source-quantized piece through the
 *   quantizer from its source's memory: the walk keeps the copy across (the link carries it)
 *   and adds the quantize on the destination's unpack, a little more than the one pass it is. */
static void quantize_on_landing(walker *w, const rf_chunk *k, int run, int dst) {
  int64_t q = 0;
  for (int j = 0; j < run; j++)
    q += quantized_bytes(w->plan, &k[j], RF_QUANT_DESTINATION) +
         (w->mapping ? quantized_bytes(w->plan, &k[j], RF_QUANT_SOURCE) : 0);
  if (q == 0)
    return;
  sim_walker_touch(w, dst);
  w->unpack_quant[dst] += q;
  w->quant_batch[dst] = 1;
}

/* The bytes a stage's chunks put on the wire, for the tally. */
static void tally_wire(walker *w, rf_stage stage, int64_t bytes) {
  if (w->tally && stage == RF_STAGE_TRANSFER)
    w->tally->wire_transfer_bytes += bytes;
  else if (w->tally && stage == RF_STAGE_FORWARD)
    w->tally->wire_forward_bytes += bytes;
}

/* `run` chunks from k sent as deltas from src to dst (the file's head says how). A piece the
 * rollout quantizes lands in the trainer's dtype, applied into its landing buffer, and is
 * quantized there as without a delta; one its source quantizes is quantized on the source
 * (over a mapping transport too, which otherwise pulls it through the quantizer), since the
 * source encodes its fp8 bytes against the fp8 bytes it sent last. */
static rf_status walk_delta(walker *w, rf_stage stage, const rf_chunk *k, int run, int src,
                            int dst) {
  const rf_plan *plan = w->plan;
  int64_t wire = 0, read = 0, applied = 0, source_q = 0, destination_q = 0;
  for (int j = 0; j < run; j++) {
    const rf_tensor *t = &plan->layout->model->tensors[plan->pieces[k[j].piece].tensor];
    sim_delta_chunk d =
        sim_delta_encode(&w->delta, rf_box_numel(&k[j].box), rf_tensor_esize(t), k[j].bytes);
    wire += d.wire;
    read += d.read;
    applied += d.applied;
    source_q += quantized_bytes(plan, &k[j], RF_QUANT_SOURCE);
    destination_q += quantized_bytes(plan, &k[j], RF_QUANT_DESTINATION);
    if (w->tally) {
      w->tally->delta_chunks[d.encoding]++;
      w->tally->delta_whole_bytes += k[j].bytes;
    }
  }
  tally_wire(w, stage, wire);
  if (stage != RF_STAGE_FORWARD) {
    sim_walker_touch(w, src);
    w->pack_quant[src] += source_q;
    w->pack_encode[src] += read;
    w->pack_batch[src] = 1;
  }
  sim_walker_touch(w, dst);
  w->unpack_apply[dst] += applied;
  w->unpack_batch[dst] = 1;
  if (destination_q > 0) {
    w->unpack_quant[dst] += destination_q;
    w->quant_batch[dst] = 1;
  }
  w->unit_delta = 1;
  sim_walker_stage(w, src, w->send_staged, wire);
  sim_walker_stage(w, dst, w->recv_staged, wire);
  if (w->mapping) { /* the destination pulls the encoded bytes from its source's staging */
    w->peer[(size_t)src * w->world + dst] = 1;
    return sim_walker_pair(w, src, dst, wire, 0);
  }
  return sim_walker_pair(w, src, dst, wire, 1);
}

rf_status sim_walker_run(walker *w, const rf_schedule *s, int i, int run) {
  const rf_plan *plan = w->plan;
  const rf_chunk *k = &s->chunks[i];
  const rf_piece *p = &plan->pieces[k->piece];
  int src = rf_piece_src_world(plan, p), dst = rf_piece_dst_world(plan, p);
  if (w->delta_on && src != dst && s->stage != RF_STAGE_RESHAPE)
    return walk_delta(w, s->stage, k, run, src, dst);
  int64_t bytes = 0;
  for (int j = 0; j < run; j++)
    bytes += k[j].bytes;
  tally_wire(w, s->stage, bytes);
  quantize_on_landing(w, k, run, dst);
  /* A source-quantized chunk is one chunk a run (rf_engine_joined_chunks). */
  int64_t source_q = w->mapping ? 0 : quantized_bytes(plan, k, RF_QUANT_SOURCE);
  if (src == dst && source_q > 0) {
    sim_walker_touch(w, src);
    w->pack_quant[src] += source_q;
    w->pack_copies[src]++;
    return RF_OK;
  }
  if (src == dst)
    return sim_walker_pair(w, src, dst, bytes, 0);
  if (w->mapping) {
    w->peer[(size_t)src * w->world + dst] = 1;
    return sim_walker_pair(w, src, dst, bytes, 0);
  }
  if (run > 1) /* a joined block travels in place on both ends */
    return sim_walker_pair(w, src, dst, bytes, 1);
  /* A gathered chunk is copied like a packed one (by MPI, through its fragments), with no
   * staging. Staged copies the engine batches (rf_engine_pack_batched, _unpack_batched) are
   * one launch a unit; the rest, and the transport's gathers, are copies one by one. */
  rf_chunk_path out = rf_engine_send_path(plan, w->mode, w->wire, k);
  rf_chunk_path in = rf_engine_recv_path(plan, w->mode, w->wire, k);
  if (out != RF_CHUNK_DIRECT) {
    sim_walker_touch(w, src);
    w->pack_bytes[src] += source_q > 0 ? 0 : bytes;
    w->pack_quant[src] += source_q;
    if (out == RF_CHUNK_STAGED && rf_engine_pack_batched(plan, w->mode, p))
      w->pack_batch[src] = 1;
    else
      w->pack_copies[src]++;
    if (out == RF_CHUNK_STAGED)
      sim_walker_stage(w, src, w->send_staged, bytes);
  }
  if (in != RF_CHUNK_DIRECT) {
    sim_walker_touch(w, dst);
    w->unpack_bytes[dst] += bytes;
    if (in == RF_CHUNK_STAGED && rf_engine_unpack_batched(plan, p))
      w->unpack_batch[dst] = 1;
    else
      w->unpack_copies[dst]++;
    if (in == RF_CHUNK_STAGED)
      sim_walker_stage(w, dst, w->recv_staged, bytes);
  }
  return sim_walker_pair(w, src, dst, bytes, 1);
}
