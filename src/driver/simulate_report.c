/* What refit simulate says: a few header lines and a block per mode as text, or one JSON object
 * whose fields are named so that a table of published refits can be built from many of them
 * (model, GPUs, hardware, layouts, plan, mode, predicted seconds). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "simulate.h"

#define GBPS(x) ((x) / 1e9)

static const char *memory_name(int device) { return device ? "GPU" : "host"; }

/* Rates read in the file's units: GB/s, latencies in microseconds. */
static double knob_scale(const char *name) { return strncmp(name, "latency", 7) == 0 ? 1e6 : 1e-9; }

static void print_fit(const char *label, const rf_sim_fit *f) {
  printf("%-16s", label);
  for (int k = 0; k < f->count; k++)
    printf(" %s %.4g -> %.4g%s", f->names[k], f->before[k] * knob_scale(f->names[k]),
           f->after[k] * knob_scale(f->names[k]), k + 1 < f->count ? "," : ";");
  printf(" %d samples, worst error %.1f%%\n", f->samples, 100 * f->worst_error);
}

/* The setup step register, once per job, where the cluster says what a registration costs. */
static void print_register(const rf_sim_context *x) {
  const rf_sim_register *g = &x->reg;
  printf("%-16s --register %s: %" PRId64 " windows a rank, up to %" PRId64 " bytes a rank: ",
         "register", rf_register_unit_name(x->cfg->register_unit), g->windows, g->peak_bytes);
  if (g->modelled)
    printf("%.4g s once per job (latency_us.register %g us a window, node.host.register_GBps "
           "%g)\n",
           g->seconds, x->cluster->latency_register * 1e6, x->cluster->host_register / 1e9);
  else
    printf("not modelled (the cluster gives no latency_us.register or "
           "node.host.register_GBps)\n");
}

void rf_sim_print_header(const rf_sim_context *x) {
  const rf_cluster *c = x->cluster;
  const rf_job *job = x->job;
  const rf_layout *lay = &job->layout;
  const rf_plan *plan = &job->plan;
  char trainer[64], rollout[64], size[32];
  rf_trainer_layout_format(&job->trainer, trainer, sizeof trainer);
  rf_rollout_layout_format(&job->rollout, rollout, sizeof rollout);
  int nodes = (lay->world_size + c->ranks_per_node - 1) / c->ranks_per_node;
  printf("# refit simulate: predicted, not measured; setup is not modelled but for a "
         "one-sided transport's register step (docs/architecture.md, \"The simulation model\")\n");
  printf("%-16s %s (%s): %d of %d node%s", "cluster", c->name, c->path, nodes, c->nodes,
         c->nodes == 1 ? "" : "s");
  if (c->gpus)
    printf(", %d x %s %s, %s %g GB/s", c->gpus, c->gpu_name,
           rf_format_bytes((int64_t)c->gpu_memory, size, sizeof size),
           c->nvlink > 0 ? "NVLink" : "PCIe", GBPS(c->nvlink > 0 ? c->nvlink : c->pcie));
  if (c->nics)
    printf(", %d adapter%s of %g Gb/s", c->nics, c->nics == 1 ? "" : "s", c->nic * 8 / 1e9);
  printf("\n");
  printf("%-16s %s (%s, %s, %" PRId64 " bytes); trainer %s (%s, %d ranks), rollout %s (%d "
         "ranks), %s\n",
         "job", job->model.name, job->model.model_type, rf_dtype_name(job->model.dtype),
         job->model.total_bytes, trainer, rf_trainer_style_name(job->trainer.style),
         lay->trainer_ranks, rollout, lay->rollout_ranks, rf_placement_name(job->placement));
  printf("%-16s %d ranks on %d node%s, %d a node; weights in %s memory; transport %s (%s)\n",
         "placement", lay->world_size, nodes, nodes == 1 ? "" : "s", c->ranks_per_node,
         memory_name(x->device), x->transport->name,
         x->transport->mapping ? "one copy a piece, straight across" : "messages");
  if (x->transport_choice && x->transport_choice[0])
    printf("%-16s %s\n", "transport choice", x->transport_choice);
  printf("%-16s %s, %d pieces, %d blocks, %" PRId64 " transfer bytes", "plan",
         rf_plan_kind_name(plan->kind), plan->piece_count, plan->block_count, plan->transfer_bytes);
  if (plan->kind == RF_PLAN_STAR)
    printf(", %" PRId64 " reshape bytes", plan->reshape_bytes);
  printf("\n");
  if (job->plan_why[0])
    printf("%-16s %s\n", "plan choice", job->plan_why);
  if (rf_layout_format(&job->layout))
    printf("%-16s %s: %" PRId64 " transfer bytes on the wire (what the prediction moves), %d "
           "%s tensors quantized at their source, %d at their destination\n",
           "rollout dtype", rf_layout_format(&job->layout)->name, plan->wire_transfer_bytes,
           plan->source_tensors, rf_layout_format(&job->layout)->name, plan->destination_tensors);
  if (x->reg.windows)
    print_register(x);
  if (x->cfg->published_s > 0)
    printf("%-16s %.4g s (%s)\n", "published", x->cfg->published_s,
           x->cfg->published_label[0] ? x->cfg->published_label : "no label");
  const rf_calibration *cal = x->calibration;
  if (!cal)
    return;
  printf("%-16s %s: %d runs and %d limits (%d runs passed over)\n", "calibration", cal->path,
         cal->runs, cal->limits, cal->skipped);
  print_fit("  all runs", &cal->fit);
  for (int m = 0; m < RF_MODE_COUNT; m++)
    if (cal->mode_runs[m] >= RF_CALIBRATION_MODE_RUNS) {
      char label[32];
      snprintf(label, sizeof label, "  %s", rf_mode_name((rf_mode)m));
      print_fit(label, &cal->mode_fit[m]);
    }
}

/* A delta refit's line: what crossed encoded, in which encodings, and what encoding and
 * applying cost. */
static void print_delta(const rf_sim_context *x, const rf_sim_result *r) {
  const char *memory = x->device ? "gpu" : "host";
  int64_t chunks = 0;
  for (int k = 0; k < RF_SIM_ENCODING_COUNT; k++)
    chunks += r->delta_chunks[k];
  printf("  %-14s %s, %.4g%% of elements changed: %" PRId64 " transfer bytes on the wire, %" PRId64
         " forwarded; %" PRId64 " chunks (%" PRId64 " bytes whole) encoded:",
         "delta", rf_delta_choice_name(x->delta.choice), 100 * x->delta.changed,
         r->wire_transfer_bytes, r->wire_forward_bytes, chunks, r->delta_whole_bytes);
  for (int k = 0; k < RF_SIM_ENCODING_COUNT; k++)
    printf(" %s %" PRId64 "%s", rf_sim_encoding_name((rf_sim_encoding)k), r->delta_chunks[k],
           k + 1 < RF_SIM_ENCODING_COUNT ? "," : ";");
  printf(" encode %" PRId64 " bytes read at %g GB/s (%s.delta_encode_GBps): %.4g s; "
         "apply %" PRId64 " bytes at %g GB/s (%s.delta_apply_GBps): %.4g s\n",
         r->encode_bytes, GBPS(r->encode_rate), memory, r->encode_s, r->apply_bytes,
         GBPS(r->apply_rate), memory, r->apply_s);
}

void rf_sim_print_mode(const rf_sim_context *x, rf_mode mode, const rf_sim_result *r) {
  char bucket[32], a[32], b[32], c[32], d[32], e[32], f[32], g[32];
  const double *ph = r->phase;
  if (x->cfg->bucket_size)
    rf_format_bytes(x->cfg->bucket_size, bucket, sizeof bucket);
  else
    snprintf(bucket, sizeof bucket, "whole stage");
  int delta = x->delta.choice != RF_DELTA_CHOICE_OFF;
  printf("mode %-11s bucket %s", rf_mode_name(mode), bucket);
  if (delta) /* only a delta says it, so that other predictions print as before */
    printf(", delta %s at %.4g%% changed", rf_delta_choice_name(x->delta.choice),
           100 * x->delta.changed);
  printf(": total %.4g s = ", ph[RF_PHASE_TOTAL]);
  if (delta)
    printf("encode %.4g + ", ph[RF_PHASE_ENCODE]);
  printf("pack %.4g + transfer %.4g + unpack %.4g", ph[RF_PHASE_PACK], ph[RF_PHASE_TRANSFER],
         ph[RF_PHASE_UNPACK]);
  if (delta)
    printf(" + apply %.4g", ph[RF_PHASE_APPLY]);
  if (ph[RF_PHASE_RESHAPE] > 0)
    printf(" + reshape %.4g", ph[RF_PHASE_RESHAPE]);
  printf(" s; latency %.4g s of it; %" PRId64 " messages, %" PRId64 " units, %" PRId64 " buckets\n",
         r->latency_s, r->messages, r->units, r->buckets);
  /* Only a quantized rollout says it, so that other predictions print as before. */
  if (r->quantize_pack_bytes + r->quantize_unpack_bytes > 0)
    printf("  %-14s %" PRId64 " trainer-dtype bytes in packs, %" PRId64 " in unpacks at %g GB/s "
           "(%s.quantize_GBps): %.4g s of pack and unpack\n",
           "quantize", r->quantize_pack_bytes, r->quantize_unpack_bytes, GBPS(r->quantize_rate),
           x->device ? "gpu" : "host", r->quantize_s);
  if (delta)
    print_delta(x, r);
  printf("  %-14s %s: %.0f bytes at %g GB/s, bound %.4g s, busy %.1f%% of the refit\n",
         "bottleneck", r->bottleneck, r->bottleneck_bytes, GBPS(r->bottleneck_capacity), r->bound_s,
         100 * r->bottleneck_utilisation);
  printf("  %-14s", "bytes");
  for (int k = 0; k < RF_SIM_CLASS_COUNT; k++)
    printf(" %s %" PRId64 "%s", rf_sim_class_name((rf_sim_class)k), r->class_bytes[k],
           k + 1 < RF_SIM_CLASS_COUNT ? "," : "\n");
  int w = r->peak_rank;
  char previous[64] = "";
  if (delta)
    snprintf(previous, sizeof previous, ", previous version %s",
             rf_format_bytes(r->previous[w], g, sizeof g));
  printf("  %-14s peak rank %d: %s (shards %s, coupling %s, rollout %s, staging %s%s); fullest "
         "%s %s of %s: %s\n",
         "memory", w, rf_format_bytes(r->peak_bytes, a, sizeof a),
         rf_format_bytes(r->shards[w], b, sizeof b), rf_format_bytes(r->coupling[w], c, sizeof c),
         rf_format_bytes(r->rollout[w], d, sizeof d), rf_format_bytes(r->staging[w], e, sizeof e),
         previous, x->device ? "GPU" : "node", rf_format_bytes(r->device_peak, f, sizeof f),
         rf_format_bytes((int64_t)r->device_capacity, bucket, sizeof bucket),
         r->fits ? "fits" : "does not fit");
  if (x->cfg->published_s > 0)
    printf("  %-14s predicted / published %.3g\n", "published",
           ph[RF_PHASE_TOTAL] / x->cfg->published_s);
  const rf_sim_bound *lb = &x->mode_bound[mode];
  printf("  %-14s %.4g s (binding: %s); prediction / bound ", "lower bound", lb->seconds,
         lb->binding);
  if (lb->seconds > 0)
    printf("%.3g\n", ph[RF_PHASE_TOTAL] / lb->seconds);
  else
    printf("-\n");
}

static json_t *cluster_json(const rf_cluster *c) {
  json_t *o = json_object(), *lat = json_object();
  json_object_set_new(o, "name", json_string(c->name));
  json_object_set_new(o, "path", json_string(c->path));
  json_object_set_new(o, "description", json_string(c->description));
  json_object_set_new(o, "nodes", json_integer(c->nodes));
  json_object_set_new(o, "gpus_per_node", json_integer(c->gpus));
  json_object_set_new(o, "ranks_per_node", json_integer(c->ranks_per_node));
  json_object_set_new(o, "gpu", c->gpus ? json_string(c->gpu_name) : json_null());
  json_object_set_new(o, "gpu_memory_bytes", json_real(c->gpu_memory));
  json_object_set_new(o, "gpu_copy_GBps", json_real(GBPS(c->gpu_copy)));
  json_object_set_new(o, "gpu_quantize_GBps", json_real(GBPS(c->gpu_quantize)));
  json_object_set_new(o, "gpu_delta_encode_GBps", json_real(GBPS(c->gpu_delta_encode)));
  json_object_set_new(o, "gpu_delta_apply_GBps", json_real(GBPS(c->gpu_delta_apply)));
  json_object_set_new(o, "nvlink_GBps", json_real(GBPS(c->nvlink)));
  json_object_set_new(o, "pcie_GBps", json_real(GBPS(c->pcie)));
  json_object_set_new(o, "nics", json_integer(c->nics));
  json_object_set_new(o, "nic_Gbps", json_real(c->nic * 8 / 1e9));
  json_object_set_new(o, "host_memcpy_GBps", json_real(GBPS(c->host_memcpy)));
  json_object_set_new(o, "host_mpi_GBps", json_real(GBPS(c->host_mpi)));
  json_object_set_new(o, "host_quantize_GBps", json_real(GBPS(c->host_quantize)));
  json_object_set_new(o, "host_delta_encode_GBps", json_real(GBPS(c->host_delta_encode)));
  json_object_set_new(o, "host_delta_apply_GBps", json_real(GBPS(c->host_delta_apply)));
  json_object_set_new(o, "host_memory_bytes", json_real(c->host_memory));
  json_object_set_new(lat, "node", json_real(c->latency_node * 1e6));
  json_object_set_new(lat, "network", json_real(c->latency_network * 1e6));
  json_object_set_new(lat, "copy", json_real(c->latency_copy * 1e6));
  if (c->host_register > 0) /* optional keys: absent from files that do not give them */
    json_object_set_new(o, "host_register_GBps", json_real(GBPS(c->host_register)));
  if (c->latency_register > 0)
    json_object_set_new(lat, "register", json_real(c->latency_register * 1e6));
  json_object_set_new(o, "latency_us", lat);
  return o;
}

static json_t *fit_json(const rf_sim_fit *f) {
  json_t *o = json_object(), *knobs = json_array();
  for (int k = 0; k < f->count; k++) {
    json_t *e = json_object();
    json_object_set_new(e, "name", json_string(f->names[k]));
    json_object_set_new(e, "before", json_real(f->before[k] * knob_scale(f->names[k])));
    json_object_set_new(e, "after", json_real(f->after[k] * knob_scale(f->names[k])));
    json_array_append_new(knobs, e);
  }
  json_object_set_new(o, "samples", json_integer(f->samples));
  json_object_set_new(o, "rates", knobs);
  json_object_set_new(o, "worst_error", json_real(f->worst_error));
  return o;
}

static json_t *calibration_json(const rf_calibration *cal) {
  json_t *o = json_object(), *modes = json_object(), *samples = json_array();
  json_object_set_new(o, "file", json_string(cal->path));
  json_object_set_new(o, "runs", json_integer(cal->runs));
  json_object_set_new(o, "limits", json_integer(cal->limits));
  json_object_set_new(o, "passed_over", json_integer(cal->skipped));
  json_object_set_new(o, "all", fit_json(&cal->fit));
  for (int m = 0; m < RF_MODE_COUNT; m++)
    json_object_set_new(modes, rf_mode_name((rf_mode)m),
                        cal->mode_runs[m] >= RF_CALIBRATION_MODE_RUNS ? fit_json(&cal->mode_fit[m])
                                                                      : json_null());
  json_object_set_new(o, "modes", modes);
  for (int i = 0; i < cal->runs + cal->limits; i++) {
    json_t *e = json_object();
    json_object_set_new(e, "label", json_string(cal->samples[i].label));
    json_object_set_new(e, "measured_s", json_real(cal->samples[i].measured_s));
    json_object_set_new(e, "predicted_s", json_real(cal->samples[i].predicted_s));
    json_array_append_new(samples, e);
  }
  json_object_set_new(o, "samples", samples);
  return o;
}

json_t *rf_sim_json(const rf_sim_context *x) {
  const rf_job *job = x->job;
  const rf_layout *lay = &job->layout;
  const rf_plan *plan = &job->plan;
  char trainer[64], rollout[64];
  rf_trainer_layout_format(&job->trainer, trainer, sizeof trainer);
  rf_rollout_layout_format(&job->rollout, rollout, sizeof rollout);
  json_t *o = json_object();
  json_object_set_new(o, "simulated", json_true());
  json_object_set_new(o, "refit_version", json_string(rf_version));
  json_object_set_new(o, "model", json_string(job->model.name));
  json_object_set_new(o, "model_type", json_string(job->model.model_type));
  json_object_set_new(o, "dtype", json_string(rf_dtype_name(job->model.dtype)));
  json_object_set_new(o, "total_params", json_integer(job->model.total_params));
  json_object_set_new(o, "model_bytes", json_integer(job->model.total_bytes));
  json_object_set_new(o, "trainer", json_string(trainer));
  json_object_set_new(o, "trainer_style", json_string(rf_trainer_style_name(job->trainer.style)));
  json_object_set_new(o, "trainer_ranks", json_integer(lay->trainer_ranks));
  json_object_set_new(o, "rollout", json_string(rollout));
  json_object_set_new(o, "rollout_ranks", json_integer(lay->rollout_ranks));
  json_object_set_new(o, "placement", json_string(rf_placement_name(job->placement)));
  json_object_set_new(o, "world_size", json_integer(lay->world_size));
  json_object_set_new(o, "nodes_used",
                      json_integer((lay->world_size + x->cluster->ranks_per_node - 1) /
                                   x->cluster->ranks_per_node));
  json_object_set_new(o, "memory", json_string(x->device ? "device" : "host"));
  json_object_set_new(o, "transport", json_string(x->transport->name));
  json_object_set_new(o, "mapping", json_boolean(x->transport->mapping));
  if (x->transport_choice && x->transport_choice[0]) /* --transport auto only */
    json_object_set_new(o, "transport_choice", json_string(x->transport_choice));
  json_object_set_new(o, "plan", json_string(rf_plan_kind_name(plan->kind)));
  if (job->plan_why[0]) /* --plan auto only: other jobs print as before */
    json_object_set_new(o, "plan_choice", json_string(job->plan_why));
  json_object_set_new(o, "pieces", json_integer(plan->piece_count));
  json_object_set_new(o, "blocks", json_integer(plan->block_count));
  json_object_set_new(o, "transfer_bytes", json_integer(plan->transfer_bytes));
  json_object_set_new(o, "reshape_bytes", json_integer(plan->reshape_bytes));
  if (rf_layout_format(&job->layout)) { /* only with a format: other jobs print as before */
    json_object_set_new(o, "rollout_dtype", json_string(rf_layout_format(&job->layout)->name));
    json_object_set_new(o, "wire_transfer_bytes", json_integer(plan->wire_transfer_bytes));
    json_object_set_new(o, "source_quantized_tensors", json_integer(plan->source_tensors));
    json_object_set_new(o, "destination_quantized_tensors",
                        json_integer(plan->destination_tensors));
  }
  json_object_set_new(o, "bucket_size", json_integer(x->cfg->bucket_size));
  if (x->reg.windows) { /* one-sided transports only: other jobs print as before */
    json_t *g = json_object();
    json_object_set_new(g, "unit", json_string(rf_register_unit_name(x->cfg->register_unit)));
    json_object_set_new(g, "windows", json_integer(x->reg.windows));
    json_object_set_new(g, "peak_bytes", json_integer(x->reg.peak_bytes));
    json_object_set_new(g, "seconds", x->reg.modelled ? json_real(x->reg.seconds) : json_null());
    json_object_set_new(o, "register", g);
  }
  json_object_set_new(o, "lower_bound_s", json_real(x->bound.seconds));
  json_object_set_new(o, "lower_bound_binding", json_string(x->bound.binding));
  json_object_set_new(o, "cluster", cluster_json(x->cluster));
  json_object_set_new(o, "calibration",
                      x->calibration ? calibration_json(x->calibration) : json_null());
  json_t *published = NULL;
  if (x->cfg->published_s > 0) {
    published = json_object();
    json_object_set_new(published, "s", json_real(x->cfg->published_s));
    json_object_set_new(published, "label", json_string(x->cfg->published_label));
  }
  json_object_set_new(o, "published", published ? published : json_null());
  json_object_set_new(o, "runs", json_array());
  return o;
}

/* A delta refit's choice, changed fraction, wire bytes and encode and apply passes. */
static json_t *delta_json(const rf_sim_context *x, const rf_sim_result *r) {
  json_t *o = json_object(), *chunks = json_object();
  json_object_set_new(o, "choice", json_string(rf_delta_choice_name(x->delta.choice)));
  json_object_set_new(o, "changed_fraction", json_real(x->delta.changed));
  json_object_set_new(o, "wire_transfer_bytes", json_integer(r->wire_transfer_bytes));
  json_object_set_new(o, "wire_forward_bytes", json_integer(r->wire_forward_bytes));
  json_object_set_new(o, "whole_bytes", json_integer(r->delta_whole_bytes));
  for (int k = 0; k < RF_SIM_ENCODING_COUNT; k++)
    json_object_set_new(chunks, rf_sim_encoding_name((rf_sim_encoding)k),
                        json_integer(r->delta_chunks[k]));
  json_object_set_new(o, "chunks", chunks);
  json_object_set_new(o, "encode_bytes", json_integer(r->encode_bytes));
  json_object_set_new(o, "encode_rate_GBps", json_real(GBPS(r->encode_rate)));
  json_object_set_new(o, "encode_s", json_real(r->encode_s));
  json_object_set_new(o, "apply_bytes", json_integer(r->apply_bytes));
  json_object_set_new(o, "apply_rate_GBps", json_real(GBPS(r->apply_rate)));
  json_object_set_new(o, "apply_s", json_real(r->apply_s));
  return o;
}

json_t *rf_sim_mode_json(const rf_sim_context *x, rf_mode mode, const rf_sim_result *r) {
  json_t *o = json_object(), *ph = json_object(), *cls = json_object(), *bn = json_object(),
         *mem = json_object();
  json_object_set_new(o, "mode", json_string(rf_mode_name(mode)));
  json_object_set_new(o, "bucket_size", json_integer(x->cfg->bucket_size));
  for (int p = 0; p < RF_PHASE_COUNT; p++)
    if (p != RF_PHASE_SETUP && p != RF_PHASE_VERIFY)
      json_object_set_new(ph, rf_phase_name((rf_phase)p), json_real(r->phase[p]));
  json_object_set_new(o, "predicted_s", ph);
  json_object_set_new(o, "latency_s", json_real(r->latency_s));
  if (rf_layout_format(&x->job->layout)) { /* only with a format, as the command's own keys */
    json_t *q = json_object();
    json_object_set_new(q, "pack_bytes", json_integer(r->quantize_pack_bytes));
    json_object_set_new(q, "unpack_bytes", json_integer(r->quantize_unpack_bytes));
    json_object_set_new(q, "rate_GBps", json_real(GBPS(r->quantize_rate)));
    json_object_set_new(q, "s", json_real(r->quantize_s));
    json_object_set_new(o, "quantize", q);
  }
  if (x->delta.choice != RF_DELTA_CHOICE_OFF) /* only with a delta, as the quantize keys */
    json_object_set_new(o, "delta", delta_json(x, r));
  json_object_set_new(o, "bound_s", json_real(r->bound_s));
  json_object_set_new(o, "messages", json_integer(r->messages));
  json_object_set_new(o, "units", json_integer(r->units));
  json_object_set_new(o, "buckets", json_integer(r->buckets));
  json_object_set_new(bn, "link", json_string(r->bottleneck));
  json_object_set_new(bn, "bytes", json_real(r->bottleneck_bytes));
  json_object_set_new(bn, "capacity_GBps", json_real(GBPS(r->bottleneck_capacity)));
  json_object_set_new(bn, "utilisation", json_real(r->bottleneck_utilisation));
  json_object_set_new(o, "bottleneck", bn);
  for (int k = 0; k < RF_SIM_CLASS_COUNT; k++)
    json_object_set_new(cls, rf_sim_class_name((rf_sim_class)k), json_integer(r->class_bytes[k]));
  json_object_set_new(o, "class_bytes", cls);
  int w = r->peak_rank;
  json_object_set_new(mem, "peak_rank", json_integer(w));
  json_object_set_new(mem, "peak_bytes", json_integer(r->peak_bytes));
  json_object_set_new(mem, "shards", json_integer(r->shards[w]));
  json_object_set_new(mem, "coupling", json_integer(r->coupling[w]));
  json_object_set_new(mem, "rollout", json_integer(r->rollout[w]));
  json_object_set_new(mem, "staging", json_integer(r->staging[w]));
  if (x->delta.choice != RF_DELTA_CHOICE_OFF)
    json_object_set_new(mem, "previous_version", json_integer(r->previous[w]));
  json_object_set_new(mem, "fullest_device_bytes", json_integer(r->device_peak));
  json_object_set_new(mem, "device_capacity_bytes", json_real(r->device_capacity));
  json_object_set_new(mem, "fits", json_boolean(r->fits));
  json_object_set_new(o, "memory", mem);
  const rf_sim_bound *lb = &x->mode_bound[mode];
  json_object_set_new(o, "lower_bound_s", json_real(lb->seconds));
  json_object_set_new(o, "lower_bound_binding", json_string(lb->binding));
  json_object_set_new(o, "ratio_to_bound",
                      lb->seconds > 0 ? json_real(r->phase[RF_PHASE_TOTAL] / lb->seconds)
                                      : json_null());
  json_object_set_new(o, "published_ratio",
                      x->cfg->published_s > 0
                          ? json_real(r->phase[RF_PHASE_TOTAL] / x->cfg->published_s)
                          : json_null());
  return o;
}
