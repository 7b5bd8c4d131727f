/* refit simulate's prediction of one mode: the walk timed by the clock, the busiest link, the
 * bytes per class and every rank's memory, counted from the engine's own arena layout
 * (rf_buffers_offsets) and staging rule without allocating any of it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

void rf_sim_result_free(rf_sim_result *r) {
  free(r->shards);
  free(r->coupling);
  free(r->rollout);
  free(r->staging);
  free(r->previous);
  memset(r, 0, sizeof *r);
}

static rf_status clock_unit(void *ctx, const sim_unit *u) { return sim_clock_unit(ctx, u); }

/* Each rank's arenas as rf_buffers_init would allocate them: shards and coupling buffers on
 * trainer ranks, the fused rollout tensors (alike on every rollout rank) and, for fp8, the
 * landing buffers of destination-quantized tensors on rollout ranks. */
static rf_status count_memory(const rf_plan *plan, rf_sim_result *r) {
  const rf_layout *lay = plan->layout;
  int n = RF_MAX(lay->model->tensor_count, lay->rollout_tensor_count);
  int64_t *off = rf_calloc((size_t)n + 1, sizeof *off, "arena offsets");
  if (!off)
    return RF_ERR_NOMEM;
  /* fp8: the landing buffers of destination-quantized tensors count with the rollout's. */
  int64_t *landing = rf_calloc((size_t)lay->rollout_ranks + 1, sizeof *landing, "landing bytes");
  if (!landing || rf_buffers_landing_bytes(plan, landing) != RF_OK) {
    free(off);
    free(landing);
    return RF_ERR_NOMEM;
  }
  int64_t rollout = rf_buffers_offsets(plan, RF_FAMILY_ROLLOUT, 0, off);
  for (int w = 0; w < lay->world_size; w++) {
    int t, ro;
    rf_layout_roles(lay, w, &t, &ro);
    if (t >= 0) {
      r->shards[w] = rf_buffers_offsets(plan, RF_FAMILY_SHARDS, t, off);
      r->coupling[w] = rf_buffers_offsets(plan, RF_FAMILY_COUPLING, t, off);
    }
    if (ro >= 0)
      r->rollout[w] = rollout + landing[ro];
  }
  free(off);
  free(landing);
  return RF_OK;
}

/* With a delta, each trainer rank keeps the last version of what it sends to other ranks, as
 * the wire carries it (a source-quantized piece's fp8 bytes and scales), to encode the next
 * version against. */
static void count_previous(const rf_plan *plan, rf_sim_result *r) {
  for (int i = 0; i < plan->piece_count; i++) {
    const rf_piece *p = &plan->pieces[i];
    int src = rf_piece_src_world(plan, p);
    if (p->stage == RF_STAGE_TRANSFER && src != rf_piece_dst_world(plan, p))
      r->previous[src] += rf_piece_wire_bytes(plan, p, &p->box);
  }
}

static int64_t rank_bytes(const rf_sim_result *r, int w) {
  return r->shards[w] + r->coupling[w] + r->rollout[w] + r->staging[w] + r->previous[w];
}

/* The largest rank, and the fullest device: a GPU's ranks together (or, for host memory, a
 * node's). */
static void peaks(const sim_net *net, const rf_cluster *c, rf_sim_result *r) {
  int per_device = net->device ? net->gpus : 1;
  int devices = net->nodes * per_device;
  r->peak_bytes = -1;
  for (int w = 0; w < net->world; w++) {
    int64_t mine = rank_bytes(r, w);
    if (mine > r->peak_bytes) {
      r->peak_bytes = mine;
      r->peak_rank = w;
    }
  }
  for (int d = 0; d < devices; d++) {
    int64_t sum = 0;
    for (int w = 0; w < net->world; w++) {
      int node = w / net->ranks_per_node, local = w % net->ranks_per_node;
      int device = net->device ? node * per_device + local % net->gpus : node;
      if (device == d)
        sum += rank_bytes(r, w);
    }
    r->device_peak = RF_MAX(r->device_peak, sum);
  }
  r->device_capacity = net->device ? c->gpu_memory : c->host_memory;
  r->fits = (double)r->device_peak <= r->device_capacity;
}

/* The bottleneck: the link that was the tightest of the units that took longest in all, with
 * its bytes, and its utilisation, its bytes over capacity against the time the refit took.
 * The bound is the sum over units of their tightest link's bytes over capacity: with units one
 * after the other, no schedule of the same buckets is faster. */
static void bottleneck(const sim_net *net, const sim_clock *k, rf_sim_result *r) {
  int best = -1;
  for (int res = 0; res < net->resources; res++)
    if (k->limiting[res] > 0 && (best < 0 || k->limiting[res] > k->limiting[best]))
      best = res;
  r->bound_s = k->bound;
  if (best < 0) {
    snprintf(r->bottleneck, sizeof r->bottleneck, "none");
    return;
  }
  sim_net_name(net, best, r->bottleneck, sizeof r->bottleneck);
  r->bottleneck_bytes = k->res_bytes[best];
  r->bottleneck_capacity = k->cap[best];
  /* Over the whole refit, not the transfer alone: a GPU's copy rate is the bottleneck of fused
   * modes in pack and unpack, when the transfer phase itself takes next to nothing. */
  double busy = r->phase[RF_PHASE_TOTAL];
  r->bottleneck_utilisation = busy > 0 ? k->res_bytes[best] / k->cap[best] / busy : 0.0;
}

rf_status rf_simulate(const rf_plan *plan, const rf_cluster *c, const rf_sim_options *o,
                      rf_sim_result *r) {
  memset(r, 0, sizeof *r);
  int world = plan->layout->world_size;
  sim_net net;
  RF_TRY(sim_net_init(&net, c, world, o->device, o->mapping));
  net.push = o->mapping && rf_engine_pushes(plan);
  net.ordered = o->ordered;
  r->ranks = world;
  r->nodes_used = net.nodes;
  size_t n = (size_t)world + 1;
  r->shards = rf_calloc(n, sizeof *r->shards, "memory per rank");
  r->coupling = rf_calloc(n, sizeof *r->coupling, "memory per rank");
  r->rollout = rf_calloc(n, sizeof *r->rollout, "memory per rank");
  r->staging = rf_calloc(n, sizeof *r->staging, "memory per rank");
  r->previous = rf_calloc(n, sizeof *r->previous, "memory per rank");
  double *cap = rf_calloc((size_t)net.resources + 1, sizeof *cap, "link capacities");
  if (!r->shards || !r->coupling || !r->rollout || !r->staging || !r->previous || !cap) {
    free(cap);
    return RF_ERR_NOMEM;
  }
  sim_net_capacities(&net, c, cap);
  sim_clock k;
  sim_tally tally = {0};
  rf_status st = sim_clock_init(&k, &net, c, o->mode, cap, 1);
  if (st == RF_OK)
    st = sim_walk(plan, o, r->staging, &tally, clock_unit, &k);
  if (st == RF_OK)
    st = sim_clock_finish(&k, r->phase);
  if (st == RF_OK) {
    r->latency_s = k.sum_latency;
    r->quantize_s = k.sum_quantize;
    r->quantize_pack_bytes = k.quantize_pack_bytes;
    r->quantize_unpack_bytes = k.quantize_unpack_bytes;
    r->quantize_rate = sim_quantize_rate(c, o->device);
    r->wire_transfer_bytes = tally.wire_transfer_bytes;
    r->wire_forward_bytes = tally.wire_forward_bytes;
    memcpy(r->delta_chunks, tally.delta_chunks, sizeof r->delta_chunks);
    r->delta_whole_bytes = tally.delta_whole_bytes;
    r->encode_bytes = k.encode_bytes;
    r->apply_bytes = k.apply_bytes;
    r->encode_s = k.sum_encode;
    r->apply_s = k.sum_apply;
    if (sim_delta_on(&o->delta)) {
      r->encode_rate = sim_encode_rate(c, o->device);
      r->apply_rate = sim_apply_rate(c, o->device);
      count_previous(plan, r);
    }
    memcpy(r->class_bytes, k.class_bytes, sizeof r->class_bytes);
    r->messages = k.messages;
    r->units = k.units;
    r->buckets = k.buckets;
    bottleneck(&net, &k, r);
    st = count_memory(plan, r);
  }
  if (st == RF_OK)
    peaks(&net, c, r);
  sim_clock_free(&k);
  free(cap);
  return st;
}

rf_wire rf_sim_wire(const rf_transport_ops *ops, int device) {
  return device ? RF_WIRE_CONTIGUOUS : rf_engine_wire_rule(ops, RF_MEM_HOST);
}
