/* Calibration: the rates that make the simulation of measured runs come out as measured.
 *
 * Each measured run is walked once into a trace (its units, pairs and copies); its
 * `--calibrate` limits become traces of their own (every pair's bytes in one message, each
 * rank copying what it receives). The fit then times every trace again under trial rates,
 * which costs microseconds a trace, and keeps the rates that minimise the sum over samples of
 * log(predicted / measured)^2: relative errors, so a 0.1 ms run counts as much as a 1 s one.
 * Three rates are fitted, those the samples can tell apart: for host memory a rank's MPI
 * bandwidth (the limit_mpi exchange pins it), its memcpy rate (limit_memcpy and the packs) and
 * the per-message latency (what the many small messages of unfused and of small buckets pay);
 * for GPU memory the GPU's copy rate, the per-message and the per-copy latency. Where a sample
 * quantizes for a rollout format (--rollout-dtype), a fourth: the memory's quantize rate. Its
 * runs' packs and unpacks hold the quantizer's passes (sim_walk.c says where), so their totals
 * exceed what the three rates predict for the same job unquantized by their bytes quantized
 * over the rate; fitted jointly, the unquantized runs and the limits pin the three and the
 * quantized runs' excess the fourth. Runs that send deltas add the delta encode rate (their
 * packs) and apply rate (their unpacks) the same way. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

typedef struct {
  rf_stage stage;
  int step, bucket, buckets, notes, round, forward;
  int first_pair, npairs, first_pack, npack, first_unpack, nunpack;
} trace_unit;

struct rf_sim_trace {
  sim_net net;
  rf_mode mode;
  trace_unit *units;
  int nunits, units_cap;
  sim_pair *pairs;
  int npairs, pairs_cap;
  sim_copy *copies;
  int ncopies, copies_cap;
};

void rf_sim_trace_free(rf_sim_trace *t) {
  if (!t)
    return;
  free(t->units);
  free(t->pairs);
  free(t->copies);
  free(t);
}

static rf_status keep_copies(rf_sim_trace *t, const sim_copy *c, int n, int *first) {
  *first = t->ncopies;
  for (int i = 0; i < n; i++) {
    RF_TRY(rf_grow((void **)&t->copies, t->ncopies, &t->copies_cap, sizeof *t->copies, "a trace"));
    t->copies[t->ncopies++] = c[i];
  }
  return RF_OK;
}

static rf_status keep_unit(void *ctx, const sim_unit *u) {
  rf_sim_trace *t = ctx;
  RF_TRY(rf_grow((void **)&t->units, t->nunits, &t->units_cap, sizeof *t->units, "a trace"));
  trace_unit *k = &t->units[t->nunits];
  *k = (trace_unit){.stage = u->stage,
                    .step = u->step,
                    .bucket = u->bucket,
                    .buckets = u->buckets,
                    .notes = u->notes,
                    .round = u->round,
                    .forward = u->forward,
                    .first_pair = t->npairs,
                    .npairs = u->npairs,
                    .npack = u->npack,
                    .nunpack = u->nunpack};
  for (int i = 0; i < u->npairs; i++) {
    RF_TRY(rf_grow((void **)&t->pairs, t->npairs, &t->pairs_cap, sizeof *t->pairs, "a trace"));
    t->pairs[t->npairs++] = u->pairs[i];
  }
  RF_TRY(keep_copies(t, u->pack, u->npack, &k->first_pack));
  RF_TRY(keep_copies(t, u->unpack, u->nunpack, &k->first_unpack));
  t->nunits++;
  return RF_OK;
}

static rf_status trace_new(const rf_plan *plan, const rf_cluster *c, int device, int mapping,
                           rf_mode mode, rf_sim_trace **out) {
  *out = rf_calloc(1, sizeof **out, "a trace");
  if (!*out)
    return RF_ERR_NOMEM;
  (*out)->mode = mode;
  RF_TRY(sim_net_init(&(*out)->net, c, plan->layout->world_size, device, mapping));
  (*out)->net.push = mapping && rf_engine_pushes(plan);
  return RF_OK;
}

rf_status rf_sim_trace_record(const rf_plan *plan, const rf_cluster *c, const rf_sim_options *o,
                              rf_sim_trace **out) {
  RF_TRY(trace_new(plan, c, o->device, o->mapping, o->mode, out));
  (*out)->net.ordered = o->ordered;
  return sim_walk(plan, o, NULL, NULL, keep_unit, *out);
}

rf_status rf_sim_trace_limit(const rf_plan *plan, const rf_cluster *c, int device, rf_limit limit,
                             rf_sim_trace **out) {
  /* grouped: one unit, no staging, one message per slice as calibrate.c posts them */
  RF_TRY(trace_new(plan, c, device, 0, RF_MODE_GROUPED, out));
  rf_sim_trace *t = *out;
  int world = plan->layout->world_size;
  int64_t *bytes = rf_calloc((size_t)world * (size_t)world + 1, sizeof *bytes, "pair bytes");
  if (!bytes)
    return RF_ERR_NOMEM;
  for (int i = plan->reshape_count; i < plan->piece_count; i++) {
    const rf_piece *p = &plan->pieces[i];
    bytes[(size_t)rf_piece_src_world(plan, p) * (size_t)world +
          (size_t)rf_piece_dst_world(plan, p)] += p->bytes;
  }
  sim_pair *pairs = rf_calloc((size_t)world * (size_t)world + 1, sizeof *pairs, "pairs");
  sim_copy *copies = rf_calloc((size_t)world + 1, sizeof *copies, "copies");
  int npairs = 0, ncopies = 0;
  rf_status st = pairs && copies ? RF_OK : RF_ERR_NOMEM;
  for (int d = 0; st == RF_OK && d < world; d++) {
    int64_t in = 0;
    for (int s = 0; s < world; s++) {
      int64_t b = bytes[(size_t)s * (size_t)world + (size_t)d];
      if (b > 0)
        pairs[npairs++] = (sim_pair){s, d, b, (int)((b + (1LL << 30) - 1) >> 30)};
      in += b;
    }
    if (in > 0)
      copies[ncopies++] = (sim_copy){d, in, 1, 0, 0, 0};
  }
  sim_unit u = {
      .stage = RF_STAGE_TRANSFER, .buckets = 1, .pairs = pairs, .pack = copies, .unpack = copies};
  if (limit == RF_LIMIT_MEMCPY || limit == RF_LIMIT_DEVICE_COPY)
    u.npack = ncopies; /* the copies alone */
  else
    u.npairs = npairs; /* the exchange alone */
  if (st == RF_OK)
    st = keep_unit(t, &u);
  free(bytes);
  free(pairs);
  free(copies);
  return st;
}

rf_status rf_sim_trace_time(const rf_sim_trace *t, const rf_cluster *c, double *seconds) {
  double *cap = rf_calloc((size_t)t->net.resources + 1, sizeof *cap, "link capacities");
  if (!cap)
    return RF_ERR_NOMEM;
  sim_net_capacities(&t->net, c, cap);
  sim_clock k;
  rf_status st = sim_clock_init(&k, &t->net, c, t->mode, cap, 0);
  for (int i = 0; st == RF_OK && i < t->nunits; i++) {
    const trace_unit *x = &t->units[i];
    sim_unit u = {.stage = x->stage,
                  .step = x->step,
                  .bucket = x->bucket,
                  .buckets = x->buckets,
                  .npairs = x->npairs,
                  .npack = x->npack,
                  .nunpack = x->nunpack,
                  .pairs = t->pairs + x->first_pair,
                  .pack = t->copies + x->first_pack,
                  .unpack = t->copies + x->first_unpack,
                  .notes = x->notes,
                  .round = x->round,
                  .forward = x->forward};
    st = sim_clock_unit(&k, &u);
  }
  double phase[RF_PHASE_COUNT];
  if (st == RF_OK) {
    st = sim_clock_finish(&k, phase);
    *seconds = phase[RF_PHASE_TOTAL];
  }
  sim_clock_free(&k);
  free(cap);
  return st;
}

/* The rates the fit may move, as pointers into the cluster: three always, then the quantize,
 * delta encode and delta apply rates of the memory, each only where a sample has bytes at it
 * (an unquantized run says nothing of the quantize rate). */
typedef struct {
  double *value;
  const char *name;
  int rate; /* a rate, else a latency */
} knob;

static void knobs(rf_cluster *c, int device, knob *k) {
  if (device) {
    k[0] = (knob){&c->gpu_copy, "gpu.copy_GBps", 1};
    k[1] = (knob){&c->latency_node, "latency_us.node", 0};
    k[2] = (knob){&c->latency_copy, "latency_us.copy", 0};
    k[3] = (knob){&c->gpu_quantize, "gpu.quantize_GBps", 1};
    k[4] = (knob){&c->gpu_delta_encode, "gpu.delta_encode_GBps", 1};
    k[5] = (knob){&c->gpu_delta_apply, "gpu.delta_apply_GBps", 1};
  } else {
    k[0] = (knob){&c->host_mpi, "host.mpi_GBps", 1};
    k[1] = (knob){&c->host_memcpy, "host.memcpy_GBps", 1};
    k[2] = (knob){&c->latency_node, "latency_us.node", 0};
    k[3] = (knob){&c->host_quantize, "host.quantize_GBps", 1};
    k[4] = (knob){&c->host_delta_encode, "host.delta_encode_GBps", 1};
    k[5] = (knob){&c->host_delta_apply, "host.delta_apply_GBps", 1};
  }
}

/* Whether a sample has bytes at knob k's pass (3 quantize, 4 encode, 5 apply): only then do
 * its times say anything about that rate. */
static int has_pass(const rf_sim_sample *s, int n, int k) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < s[i].trace->ncopies; j++) {
      const sim_copy *cp = &s[i].trace->copies[j];
      if ((k == 3 ? cp->quantized : k == 4 ? cp->encoded : cp->applied) > 0)
        return 1;
    }
  return 0;
}

/* Samples that share a trace (runs of one job repeated, as a sweep or a benchmark records
 * them) are timed once a trial: first[i] is the first sample of sample i's trace, times[] its
 * time under the trial's rates. */
typedef struct {
  int *first;
  double *times;
} sharing;

static rf_status loss(rf_cluster *c, const rf_sim_sample *s, int n, const sharing *sh, double *out,
                      double *worst) {
  *out = 0.0;
  if (worst)
    *worst = 0.0;
  for (int i = 0; i < n; i++) {
    if (sh->first[i] == i)
      RF_TRY(rf_sim_trace_time(s[i].trace, c, &sh->times[i]));
    double t = sh->times[sh->first[i]];
    double e = log(RF_MAX(t, 1e-12) / s[i].measured_s);
    *out += e * e;
    if (worst)
      *worst = RF_MAX(*worst, fabs(t / s[i].measured_s - 1.0));
  }
  return RF_OK;
}

static int by_trace(const void *a, const void *b) {
  const rf_sim_sample *x = *(const rf_sim_sample *const *)a, *y = *(const rf_sim_sample *const *)b;
  uintptr_t p = (uintptr_t)x->trace, q = (uintptr_t)y->trace;
  return p != q ? (p < q ? -1 : 1) : (x < y ? -1 : x > y);
}

/* first[i]: the first sample of sample i's trace, the samples sorted by trace (n log n: a
 * calibration may have many thousands). first is the caller's [n], used as scratch first. */
static void share_traces(const rf_sim_sample *s, int n, int *first) {
  const rf_sim_sample **order = rf_malloc((size_t)n * sizeof *order, "calibration samples");
  if (!order) { /* no sharing then: every sample is timed */
    for (int i = 0; i < n; i++)
      first[i] = i;
    return;
  }
  for (int i = 0; i < n; i++)
    order[i] = &s[i];
  qsort(order, (size_t)n, sizeof *order, by_trace);
  for (int i = 0, head = 0; i < n; i++) {
    if (i > 0 && order[i]->trace != order[i - 1]->trace)
      head = i;
    first[order[i] - s] = (int)(order[head] - s);
  }
  free(order);
}

static rf_status fit(rf_cluster *c, double **v, const double *lo, const double *hi, int count,
                     const rf_sim_sample *s, int n, const sharing *sh, rf_sim_fit *out);

rf_status rf_sim_calibrate(rf_cluster *c, int device, const rf_sim_sample *s, int n,
                           rf_sim_fit *out) {
  memset(out, 0, sizeof *out);
  knob all[RF_SIM_KNOBS];
  knobs(c, device, all);
  out->samples = n;
  /* The pass rates are fitted where a sample has bytes at them: its runs' packs and unpacks
   * are then longer than the other rates explain, by those bytes over the rate. */
  double *v[RF_SIM_KNOBS], lo[RF_SIM_KNOBS], hi[RF_SIM_KNOBS];
  for (int k = 0; k < RF_SIM_KNOBS; k++) {
    if (k >= 3 && !has_pass(s, n, k))
      continue;
    int i = out->count++;
    v[i] = all[k].value;
    out->names[i] = all[k].name;
    lo[i] = all[k].rate ? RF_SIM_RATE_MIN : RF_SIM_LATENCY_MIN;
    hi[i] = all[k].rate ? RF_SIM_RATE_MAX : RF_SIM_LATENCY_MAX;
    /* A latency of zero has no logarithm to move: start it at a microsecond. */
    if (!(*v[i] > 0))
      *v[i] = all[k].rate ? 1e9 : 1e-6;
    out->before[i] = *v[i];
  }
  if (n == 0)
    return rf_fail(RF_ERR_RESULTS,
                   "no measured runs to calibrate from; give a results file of "
                   "refit run --output with runs of weights in %s memory",
                   device ? "GPU" : "host");
  sharing sh = {rf_malloc((size_t)n * sizeof *sh.first, "calibration samples"),
                rf_malloc((size_t)n * sizeof *sh.times, "calibration samples")};
  rf_status st = sh.first && sh.times ? RF_OK : RF_ERR_NOMEM;
  if (st == RF_OK)
    share_traces(s, n, sh.first);
  if (st == RF_OK)
    st = fit(c, v, lo, hi, out->count, s, n, &sh, out);
  free(sh.first);
  free(sh.times);
  return st;
}

static rf_status fit(rf_cluster *c, double **v, const double *lo, const double *hi, int count,
                     const rf_sim_sample *s, int n, const sharing *sh, rf_sim_fit *out) {
  double best;
  RF_TRY(loss(c, s, n, sh, &best, NULL));
  /* Coordinate descent in log space: try each rate times and divided by a factor, keep what
   * lowers the loss, halve the step (in log) when nothing does. */
  for (double step = log(16.0); step > 1e-4;) {
    int moved = 0;
    for (int k = 0; k < count; k++)
      for (int sign = -1; sign <= 1; sign += 2) {
        double keep = *v[k], trial;
        *v[k] = keep * exp(sign * step);
        /* Only rates a cluster file could hold: a rate the samples barely touch could
         * otherwise run off to infinity, where the flow model cannot share it out. */
        if (!(*v[k] >= lo[k] && *v[k] <= hi[k])) {
          *v[k] = keep;
          continue;
        }
        RF_TRY(loss(c, s, n, sh, &trial, NULL));
        if (trial < best * (1 - 1e-12)) {
          best = trial;
          moved = 1;
        } else {
          *v[k] = keep;
        }
      }
    if (!moved)
      step /= 2;
  }
  for (int k = 0; k < count; k++)
    out->after[k] = *v[k];
  return loss(c, s, n, sh, &best, &out->worst_error);
}
