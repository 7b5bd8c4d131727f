/* The clock: each unit's pack, flight and unpack under the cluster's rates, and how the units
 * of a mode add up.
 *
 * Within a unit every rank packs its staged chunks (copies sharing the rank's copy engine,
 * max-min as any other link, plus the per-copy latency of each), then every pair's messages fly
 * at once (max-min over the links, plus the busiest rank's per-message latencies, posted one
 * after the other), then the receivers unpack. Copies straight from source to destination (a
 * local piece, or any over a mapping transport) fly with the messages, on the copy engines
 * their routes name, and add one per-copy latency a unit: each copying rank launches its
 * unit's copies as one batch and waits for them. unfused and grouped run their units one after
 * the other. fused runs the engine's pipeline (engine_rounds.c) in two lanes, the stage's
 * buckets and fanout's forward buckets: it packs and posts a lane's bucket b+1, then waits for
 * its b and unpacks it; a forward bucket first waits for the rounds before its own. Over a
 * transport that moves messages in the order posted (nccl) a bucket's flight starts once what
 * was posted before has landed; over the others (mpi) the buckets in flight share the links,
 * which is what lets a forward bucket's NVLink traffic run beside a transfer bucket's network
 * traffic. Over a mapping transport
 * nothing is packed, and a stage is one unit. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

rf_status sim_clock_init(sim_clock *k, const sim_net *net, const rf_cluster *c, rf_mode mode,
                         const double *cap, int count_links) {
  memset(k, 0, sizeof *k);
  k->net = net;
  k->c = c;
  k->mode = mode;
  k->cap = cap;
  k->latency = rf_calloc((size_t)net->world + 1, sizeof *k->latency, "per-rank latencies");
  if (!k->latency)
    return RF_ERR_NOMEM;
  size_t n = (size_t)net->resources + 1;
  if (count_links) {
    k->res_bytes = rf_calloc(n, sizeof *k->res_bytes, "link bytes");
    k->unit_bytes = rf_calloc(n, sizeof *k->unit_bytes, "link bytes");
    k->limiting = rf_calloc(n, sizeof *k->limiting, "link bytes");
    k->touched = rf_calloc(n, sizeof *k->touched, "link bytes");
    if (!k->res_bytes || !k->unit_bytes || !k->limiting || !k->touched)
      return RF_ERR_NOMEM;
  }
  return sim_solver_new(net->resources, &k->solver);
}

void sim_clock_free(sim_clock *k) {
  sim_solver_free(k->solver);
  sim_fluid_free(&k->fluid);
  free(k->flows);
  free(k->latency);
  free(k->res_bytes);
  free(k->unit_bytes);
  free(k->limiting);
  free(k->touched);
  memset(k, 0, sizeof *k);
}

static rf_status room(sim_clock *k, int n) {
  if (n <= k->flow_cap)
    return RF_OK;
  int cap = RF_MAX(n, 2 * k->flow_cap);
  sim_flow *more = rf_realloc(k->flows, (size_t)cap * sizeof *more, "flows");
  if (!more)
    return RF_ERR_NOMEM;
  k->flows = more;
  k->flow_cap = cap;
  return RF_OK;
}

double sim_quantize_rate(const rf_cluster *c, int device) {
  return device ? c->gpu_quantize : c->host_quantize;
}

double sim_encode_rate(const rf_cluster *c, int device) {
  return device ? c->gpu_delta_encode : c->host_delta_encode;
}

double sim_apply_rate(const rf_cluster *c, int device) {
  return device ? c->gpu_delta_apply : c->host_delta_apply;
}

/* The copies' time with the passes `with` names (the quantizer's; a delta's encoding and
 * applying), each pass's bytes scaled by its engine's rate over the pass's own rate. */
enum { PASS_QUANTIZE = 1, PASS_DELTA = 2 };

static rf_status solve_copies(sim_clock *k, const sim_copy *cp, int n, int with, double *out) {
  double quantize = sim_quantize_rate(k->c, k->net->device);
  double encode = sim_encode_rate(k->c, k->net->device);
  double apply = sim_apply_rate(k->c, k->net->device);
  for (int i = 0; i < n; i++) {
    int engine = sim_net_copy(k->net, cp[i].rank);
    double cap = k->cap[engine], bytes = (double)cp[i].bytes;
    /* Only passes with bytes: a rate a hand-made cluster left at 0 then never divides. */
    if ((with & PASS_QUANTIZE) && cp[i].quantized)
      bytes += (double)cp[i].quantized * (cap / quantize);
    if ((with & PASS_DELTA) && cp[i].encoded)
      bytes += (double)cp[i].encoded * (cap / encode);
    if ((with & PASS_DELTA) && cp[i].applied)
      bytes += (double)cp[i].applied * (cap / apply);
    k->flows[i] = (sim_flow){bytes, 1, {engine}};
  }
  return sim_solve(k->solver, k->flows, n, k->cap, out);
}

/* Copies on each rank's copy engine: max-min time, plus the latency of the most copies any
 * rank makes one after the other. A rank's quantizing is memory-bound like its copies and runs
 * on the same memory, so it is a flow on the same engine: its bytes read, scaled by the
 * engine's rate over the quantize rate, take their time at the quantize rate when the rank has
 * the engine to itself, and share it as copies do when ranks share a GPU. A delta's encoding
 * (in packs) and applying (in unpacks) are flows the same way at their own rates. `quantize`
 * and `delta` get the part of the time that each adds: the time without the delta's passes
 * less the time without either, and the whole less the time without the delta's (0 where there
 * is none). */
static rf_status copies_time(sim_clock *k, const sim_copy *cp, int n, double *out, double *quantize,
                             double *delta) {
  RF_TRY(room(k, n));
  int most = 0;
  int64_t quantized = 0, deltas = 0;
  for (int i = 0; i < n; i++) {
    most = RF_MAX(most, cp[i].copies);
    quantized += cp[i].quantized;
    deltas += cp[i].encoded + cp[i].applied;
  }
  RF_TRY(solve_copies(k, cp, n, PASS_QUANTIZE | PASS_DELTA, out));
  *quantize = *delta = 0.0;
  double without_delta = *out, plain;
  if (deltas > 0) {
    RF_TRY(solve_copies(k, cp, n, PASS_QUANTIZE, &without_delta));
    *delta = *out - without_delta;
  }
  if (quantized > 0) {
    RF_TRY(solve_copies(k, cp, n, 0, &plain));
    *quantize = without_delta - plain;
  }
  *out += most * k->c->latency_copy;
  return RF_OK;
}

/* The unit's tightest link (most bytes for its capacity) is charged the unit's flight (its
 * bytes over capacity where the flight overlaps others): summed over units, the link that held
 * the transfer up longest. */
static void tightest(sim_clock *k, double flight) {
  if (!k->res_bytes)
    return;
  int best = -1;
  for (int t = 0; t < k->ntouched; t++) {
    int r = k->touched[t];
    if (best < 0 || k->unit_bytes[r] / k->cap[r] > k->unit_bytes[best] / k->cap[best])
      best = r;
  }
  if (best >= 0) {
    k->limiting[best] += flight >= 0 ? flight : k->unit_bytes[best] / k->cap[best];
    k->bound += k->unit_bytes[best] / k->cap[best];
  }
  for (int t = 0; t < k->ntouched; t++)
    k->unit_bytes[k->touched[t]] = 0.0;
  k->ntouched = 0;
}

/* The unit's flows (k->flows) and what its messages and launches cost beyond them. Each rank
 * posts (or receives) its messages one after the other at the per-message latency; `posting`
 * is the busiest rank's sum. With the weights in host memory the processes copy the bytes
 * themselves, so that time adds to the flows' (`tail` holds it, with the rest). With the
 * weights on GPUs the bytes move by DMA (copy engines, adapters) while the rank posts its next
 * message, so the flight lasts the longer of the flows with one message's latency (the
 * largest of the unit's) and the posting, each message one gap after the one before (LogGP,
 * the gap the per-message latency); one message pays what it paid before. Either way the
 * launch of the unit's copies and the stage's notes come on top. */
typedef struct {
  double posting, single, tail;
} unit_cost;

static rf_status unit_flows(sim_clock *k, const sim_unit *u, unit_cost *cost) {
  RF_TRY(room(k, u->npairs));
  int copies = 0;
  double single = 0.0;
  for (int i = 0; i < u->npairs; i++) {
    const sim_pair *p = &u->pairs[i];
    sim_flow *f = &k->flows[i];
    rf_sim_class cls;
    f->bytes = (double)p->bytes;
    f->nres = sim_net_route(k->net, p->src, p->dst, f->res, &cls);
    double l = p->messages * sim_latency(k->c, cls);
    if (p->messages > 0)
      single = RF_MAX(single, sim_latency(k->c, cls));
    k->latency[p->src] += l;
    if (p->dst != p->src)
      k->latency[p->dst] += l;
    k->class_bytes[cls] += p->bytes;
    k->messages += p->messages;
    copies |= p->messages == 0 && p->bytes > 0;
    for (int r = 0; k->res_bytes && r < f->nres; r++) {
      k->res_bytes[f->res[r]] += (double)p->bytes;
      if (k->unit_bytes[f->res[r]] == 0)
        k->touched[k->ntouched++] = f->res[r];
      k->unit_bytes[f->res[r]] += (double)p->bytes;
    }
  }
  double posting = 0.0;
  for (int i = 0; i < u->npairs; i++) {
    const sim_pair *p = &u->pairs[i];
    posting = RF_MAX(posting, RF_MAX(k->latency[p->src], k->latency[p->dst]));
  }
  for (int i = 0; i < u->npairs; i++)
    k->latency[u->pairs[i].src] = k->latency[u->pairs[i].dst] = 0.0;
  double launches = copies * k->c->latency_copy + u->notes * k->c->latency_node;
  *cost = k->net->device ? (unit_cost){posting, single, launches}
                         : (unit_cost){0.0, 0.0, posting + launches};
  return RF_OK;
}

/* The pairs' flight on its own: max-min over their routes, with its cost; the part beyond the
 * flows counts as latency. */
static rf_status flight_time(sim_clock *k, const sim_unit *u, double *out) {
  unit_cost cost;
  RF_TRY(unit_flows(k, u, &cost));
  double flows;
  RF_TRY(sim_solve(k->solver, k->flows, u->npairs, k->cap, &flows));
  tightest(k, flows);
  *out = RF_MAX(flows + cost.single, cost.posting) + cost.tail;
  k->sum_latency += *out - flows;
  return RF_OK;
}

/* fused: lane l's bucket in flight has landed (its flows have ended, then its latency) and
 * the engine's thread has waited for it and unpacked it. */
static rf_status complete_lane(sim_clock *k, int l) {
  if (!k->lane[l].open)
    return RF_OK;
  RF_TRY(sim_fluid_run(&k->fluid, k->solver, k->cap, INFINITY, k->lane[l].group));
  double end = RF_MAX(k->fluid.now + k->lane[l].single, k->lane[l].posted) + k->lane[l].tail;
  k->sum_latency += end - k->fluid.now;
  k->cpu = RF_MAX(k->cpu, end) + k->lane[l].unpack;
  k->lane[l].open = 0;
  return RF_OK;
}

/* Completes the buckets in flight of rounds before `round`, oldest first. */
static rf_status complete_before(sim_clock *k, int round) {
  for (;;) {
    int oldest = -1;
    for (int l = 0; l < 2; l++)
      if (k->lane[l].open && k->lane[l].round < round &&
          (oldest < 0 || k->lane[l].group < k->lane[oldest].group))
        oldest = l;
    if (oldest < 0)
      return RF_OK;
    RF_TRY(complete_lane(k, oldest));
  }
}

/* fused: bucket u packed (p seconds) and posted, then the one before it in its lane (the
 * stage's buckets, or the forward ones) waited for and unpacked, as run_fused does; v is u's
 * own unpack, after its wait. A forward bucket waits first for the buckets of the rounds before
 * its own. In order (nccl) and over a mapping transport a bucket's flows start once everything
 * posted before it has landed. */
static rf_status fused_unit(sim_clock *k, const sim_unit *u, double p, double v) {
  int l = u->forward ? 1 : 0;
  if (u->forward)
    RF_TRY(complete_before(k, u->round));
  unit_cost cost;
  RF_TRY(unit_flows(k, u, &cost));
  tightest(k, -1.0);
  k->cpu += p;
  double start = k->cpu;
  /* The bucket before must land first in order, and over a mapping transport, whose stage is
   * one launch of copies and then its notes. */
  if (k->groups > 0 && (k->net->ordered || k->net->mapping)) {
    RF_TRY(sim_fluid_run(&k->fluid, k->solver, k->cap, INFINITY, k->groups));
    start = RF_MAX(start, RF_MAX(k->fluid.now + k->last_single, k->last_posted) + k->last_tail);
  }
  RF_TRY(sim_fluid_run(&k->fluid, k->solver, k->cap, start, -1));
  int group = ++k->groups;
  RF_TRY(sim_fluid_add(&k->fluid, k->flows, u->npairs, group));
  RF_TRY(complete_lane(k, l));
  k->lane[l].open = 1;
  k->lane[l].group = group;
  k->lane[l].round = u->round;
  k->lane[l].posted = k->last_posted = start + cost.posting;
  k->lane[l].single = k->last_single = cost.single;
  k->lane[l].tail = k->last_tail = cost.tail;
  k->lane[l].unpack = v;
  return RF_OK;
}

/* Ends a stage: fused's last flight and unpack; the stage's wall clock. */
static rf_status end_stage(sim_clock *k) {
  if (!k->started)
    return RF_OK;
  double total = k->pack + k->transfer + k->unpack;
  if (k->mode == RF_MODE_FUSED) {
    RF_TRY(complete_before(k, INT_MAX));
    total = k->cpu;
    k->transfer = RF_MAX(0.0, total - k->pack - k->unpack);
  }
  k->stage_total[k->stage] += total;
  /* The engine times the forward steps' copies as it times the transfer's. */
  k->sum_pack += k->stage != RF_STAGE_RESHAPE ? k->pack : 0.0;
  k->sum_unpack += k->stage != RF_STAGE_RESHAPE ? k->unpack : 0.0;
  k->started = 0;
  return RF_OK;
}

rf_status sim_clock_unit(sim_clock *k, const sim_unit *u) {
  if (k->started && (u->stage != k->stage || u->step != k->step))
    RF_TRY(end_stage(k));
  if (!k->started) {
    k->started = 1;
    k->stage = u->stage;
    k->step = u->step;
    k->pack = k->transfer = k->unpack = 0.0;
    k->cpu = 0.0;
    k->lane[0].open = k->lane[1].open = 0;
    k->groups = 0;
    k->last_posted = k->last_single = k->last_tail = 0.0;
    k->fluid.count = 0;
    k->fluid.now = 0.0;
  }
  double p, x = 0.0, v, qp, qv, encode, apply;
  RF_TRY(copies_time(k, u->pack, u->npack, &p, &qp, &encode));
  RF_TRY(copies_time(k, u->unpack, u->nunpack, &v, &qv, &apply));
  k->sum_quantize += qp + qv;
  k->sum_encode += encode;
  k->sum_apply += apply;
  for (int i = 0; i < u->npack; i++) {
    k->quantize_pack_bytes += u->pack[i].quantized;
    k->encode_bytes += u->pack[i].encoded;
  }
  for (int i = 0; i < u->nunpack; i++) {
    k->quantize_unpack_bytes += u->unpack[i].quantized;
    k->apply_bytes += u->unpack[i].applied;
  }
  if (k->mode == RF_MODE_FUSED) {
    RF_TRY(fused_unit(k, u, p, v));
  } else {
    RF_TRY(flight_time(k, u, &x));
  }
  k->pack += p;
  k->transfer += x;
  k->unpack += v;
  k->units++;
  k->buckets += u->buckets;
  return RF_OK;
}

rf_status sim_clock_finish(sim_clock *k, double *phase) {
  RF_TRY(end_stage(k));
  for (int i = 0; i < RF_PHASE_COUNT; i++)
    phase[i] = 0.0;
  phase[RF_PHASE_RESHAPE] = k->stage_total[RF_STAGE_RESHAPE];
  /* A delta's encode and apply are parts of the packs and unpacks here, phases of their own
   * in the engine's timings: the same split, so that predictions and runs read alike. */
  phase[RF_PHASE_ENCODE] = k->sum_encode;
  phase[RF_PHASE_PACK] = RF_MAX(0.0, k->sum_pack - k->sum_encode);
  phase[RF_PHASE_APPLY] = k->sum_apply;
  phase[RF_PHASE_UNPACK] = RF_MAX(0.0, k->sum_unpack - k->sum_apply);
  double moved = k->stage_total[RF_STAGE_TRANSFER] + k->stage_total[RF_STAGE_FORWARD];
  phase[RF_PHASE_TRANSFER] = RF_MAX(0.0, moved - k->sum_pack - k->sum_unpack);
  phase[RF_PHASE_TOTAL] = k->stage_total[RF_STAGE_RESHAPE] + moved;
  return RF_OK;
}
