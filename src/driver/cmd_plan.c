/* `refit plan`: what a transfer will move, without moving it and without MPI. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "driver.h"
#include "plan_auto.h"
#include "sim/sim.h"

static void min_max(const int64_t *v, int n, int64_t *lo, int64_t *hi) {
  *lo = n ? v[0] : 0;
  *hi = n ? v[0] : 0;
  for (int i = 1; i < n; i++) {
    *lo = RF_MIN(*lo, v[i]);
    *hi = RF_MAX(*hi, v[i]);
  }
}

static int forward_pieces(const rf_plan *plan) {
  return plan->forward_first[plan->forward_depth] - plan->forward_first[0];
}

static json_t *int_array(const int64_t *v, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++)
    json_array_append_new(a, json_integer(v[i]));
  return a;
}

static json_t *count_array(const int *v, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++)
    json_array_append_new(a, json_integer(v[i]));
  return a;
}

/* With fp8 only, so that the plans of every other job print as they always have: the bytes on
 * the wire (fp8 and scales where the source quantizes) and where each tensor is quantized. */
static void json_fp8(json_t *o, const rf_plan *plan) {
  const rf_layout *lay = plan->layout;
  if (!rf_layout_format(lay))
    return;
  json_object_set_new(o, "rollout_dtype", json_string(rf_rollout_dtype_name(lay->rollout.dtype)));
  json_object_set_new(o, "wire_transfer_bytes", json_integer(plan->wire_transfer_bytes));
  json_object_set_new(o, "wire_send_bytes", int_array(plan->wire_send_bytes, lay->trainer_ranks));
  json_object_set_new(o, "wire_recv_bytes", int_array(plan->wire_recv_bytes, lay->rollout_ranks));
  if (rf_plan_forwards(plan))
    json_object_set_new(o, "wire_forward_bytes", json_integer(plan->wire_forward_bytes));
  json_object_set_new(o, "source_quantized_tensors", json_integer(plan->source_tensors));
  json_object_set_new(o, "destination_quantized_tensors", json_integer(plan->destination_tensors));
  json_object_set_new(o, "source_quantized",
                      count_array(plan->source_quantized, lay->trainer_ranks));
  json_object_set_new(o, "destination_quantized",
                      count_array(plan->destination_quantized, lay->rollout_ranks));
}

/* What one rollout rank receives, in vLLM's names and shapes, for comparison with the engine's
 * named_parameters(): every rank has every tensor (an expert-parallel rank's w13_weight holds
 * its own experts only). */
static json_t *rollout_manifest(const rf_layout *lay) {
  json_t *a = json_array();
  for (int i = 0; i < lay->rollout_tensor_count; i++) {
    const rf_rollout_tensor *rt = &lay->rollout_tensors[i];
    json_t *e = json_object(), *shape = json_array();
    for (int d = 0; d < rt->vllm_ndim; d++)
      json_array_append_new(shape, json_integer(rt->vllm_shape[d]));
    json_object_set_new(e, "name", json_string(rt->name));
    json_object_set_new(e, "shape", shape);
    json_object_set_new(e, "dtype", json_string(rf_dtype_name(rt->dtype)));
    json_object_set_new(e, "bytes", json_integer(rt->bytes));
    json_array_append_new(a, e);
  }
  return a;
}

/* The experts a rollout rank holds, as [first, last], or an empty array without experts. */
static json_t *manifest_experts(const rf_layout *lay, int rank) {
  json_t *a = json_array();
  int64_t E = lay->model->experts, group = lay->expert_group ? lay->expert_group : E;
  if (E) {
    int64_t first = lay->expert_group ? rank * group : 0;
    json_array_append_new(a, json_integer(first));
    json_array_append_new(a, json_integer(first + group - 1));
  }
  return a;
}

static json_t *plan_json(const rf_job *job, int manifest_rank, const rf_cluster *c,
                         const rf_sim_bound *bound) {
  const rf_plan *plan = &job->plan;
  const rf_layout *lay = &job->layout;
  const rf_model *m = &job->model;
  char trainer[64], rollout[64], digest[32];
  rf_trainer_layout_format(&job->trainer, trainer, sizeof trainer);
  rf_rollout_layout_format(&job->rollout, rollout, sizeof rollout);
  snprintf(digest, sizeof digest, "%016" PRIx64, plan->digest);
  json_t *o = json_object();
  json_object_set_new(o, "model", json_string(m->name));
  json_object_set_new(o, "model_type", json_string(m->model_type));
  json_object_set_new(o, "dtype", json_string(rf_dtype_name(m->dtype)));
  json_object_set_new(o, "total_params", json_integer(m->total_params));
  json_object_set_new(o, "total_bytes", json_integer(m->total_bytes));
  json_object_set_new(o, "tensors", json_integer(m->tensor_count));
  json_object_set_new(o, "rollout_tensors", json_integer(lay->rollout_tensor_count));
  json_object_set_new(o, "trainer", json_string(trainer));
  json_object_set_new(o, "trainer_style", json_string(rf_trainer_style_name(job->trainer.style)));
  json_object_set_new(o, "trainer_ranks", json_integer(lay->trainer_ranks));
  json_object_set_new(o, "rollout", json_string(rollout));
  json_object_set_new(o, "rollout_ranks", json_integer(lay->rollout_ranks));
  json_object_set_new(
      o, "placement",
      json_string(job->placement == RF_PLACEMENT_COLOCATED ? "colocated" : "disaggregated"));
  json_object_set_new(o, "world_size", json_integer(lay->world_size));
  json_object_set_new(o, "plan", json_string(rf_plan_kind_name(plan->kind)));
  if (job->plan_why[0]) /* --plan auto only */
    json_object_set_new(o, "plan_choice", json_string(job->plan_why));
  if (plan->kind == RF_PLAN_STAR) {
    json_object_set_new(o, "star_mode", json_string(plan->fan_in ? "fan-in" : "fan-out"));
    json_object_set_new(o, "star_count", json_integer(plan->star_count));
    json_object_set_new(o, "star_arms", json_integer(plan->star_arms));
  }
  json_object_set_new(o, "pieces", json_integer(plan->piece_count));
  json_object_set_new(o, "reshape_pieces", json_integer(plan->reshape_count));
  json_object_set_new(o, "local_pieces", json_integer(plan->local_count));
  json_object_set_new(o, "blocks", json_integer(plan->block_count));
  json_object_set_new(o, "transfer_bytes", json_integer(plan->transfer_bytes));
  json_object_set_new(o, "reshape_bytes", json_integer(plan->reshape_bytes));
  json_object_set_new(o, "local_bytes", json_integer(plan->local_bytes));
  json_object_set_new(o, "extra_bytes", json_integer(plan->extra_bytes));
  json_object_set_new(o, "send_bytes", int_array(plan->send_bytes, lay->trainer_ranks));
  json_object_set_new(o, "recv_bytes", int_array(plan->recv_bytes, lay->rollout_ranks));
  json_object_set_new(o, "reshape_send_bytes",
                      int_array(plan->reshape_send_bytes, lay->trainer_ranks));
  if (rf_plan_forwards(plan)) {
    json_object_set_new(o, "forward_depth", json_integer(plan->forward_depth));
    if (plan->kind == RF_PLAN_HIERARCHICAL)
      json_object_set_new(o, "domains", json_integer(plan->domains));
    json_object_set_new(o, "forward_pieces", json_integer(forward_pieces(plan)));
    json_object_set_new(o, "forward_bytes", json_integer(plan->forward_bytes));
    json_object_set_new(o, "forward_send_bytes",
                        int_array(plan->forward_send_bytes, lay->rollout_ranks));
    json_object_set_new(o, "forward_recv_bytes",
                        int_array(plan->forward_recv_bytes, lay->rollout_ranks));
  }
  json_fp8(o, plan);
  if (bound) { /* only with --cluster: other plans print as they always have */
    json_object_set_new(o, "cluster", json_string(c->name));
    json_object_set_new(o, "lower_bound_s", json_real(bound->seconds));
    json_object_set_new(o, "lower_bound_binding", json_string(bound->binding));
  }
  json_object_set_new(o, "digest", json_string(digest));
  json_object_set_new(o, "rollout_manifest_rank", json_integer(manifest_rank));
  json_object_set_new(o, "rollout_manifest_experts", manifest_experts(lay, manifest_rank));
  json_object_set_new(o, "rollout_manifest", rollout_manifest(lay));
  return o;
}

char *rf_job_plan_json(const rf_job *job, int manifest_rank) {
  json_t *o = plan_json(job, manifest_rank, NULL, NULL);
  char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(o);
  return text;
}

static rf_status print_json(const rf_job *job, int manifest_rank, const rf_cluster *c,
                            const rf_sim_bound *bound) {
  json_t *o = plan_json(job, manifest_rank, c, bound);
  char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(o);
  if (!text)
    return rf_fail(RF_ERR_NOMEM, "out of memory formatting the plan as JSON");
  printf("%s\n", text);
  free(text);
  return RF_OK;
}

/* How the transfer bytes lie (rf_piece_runs): those in one run at both ends, and the strided
 * ones, which a message transport packs or unpacks (or gathers) in a copy of its own while a
 * mapping transport copies them once, straight into place. */
static void print_runs(const rf_plan *plan) {
  double total = plan->transfer_bytes > 0 ? (double)plan->transfer_bytes : 1.0;
  const int64_t *b = plan->runs_bytes;
  printf("%-16s %" PRId64 " (%.1f%%) of the transfer bytes lie in one run at both ends\n",
         "contiguous", b[RF_RUNS_CONTIGUOUS], 100.0 * (double)b[RF_RUNS_CONTIGUOUS] / total);
  printf("%-16s source %" PRId64 " (%.1f%%)  destination %" PRId64 " (%.1f%%)  both %" PRId64
         " (%.1f%%): rows at a pitch, copied once more by a message transport\n",
         "strided", b[RF_RUNS_STRIDED_SOURCE], 100.0 * (double)b[RF_RUNS_STRIDED_SOURCE] / total,
         b[RF_RUNS_STRIDED_DESTINATION], 100.0 * (double)b[RF_RUNS_STRIDED_DESTINATION] / total,
         b[RF_RUNS_STRIDED_BOTH], 100.0 * (double)b[RF_RUNS_STRIDED_BOTH] / total);
}

static void print_range(const char *label, const int64_t *v, int n, const char *per) {
  int64_t lo, hi;
  char a[32], b[32];
  min_max(v, n, &lo, &hi);
  printf("%-16s min %" PRId64 " (%s)  max %" PRId64 " (%s)  %s\n", label, lo,
         rf_format_bytes(lo, a, sizeof a), hi, rf_format_bytes(hi, b, sizeof b), per);
}

static void print_count_range(const char *label, const int *v, int n, const char *per) {
  int lo = n ? v[0] : 0, hi = lo;
  for (int i = 1; i < n; i++) {
    lo = RF_MIN(lo, v[i]);
    hi = RF_MAX(hi, v[i]);
  }
  printf("%-16s min %d  max %d  %s\n", label, lo, hi, per);
}

static void print_fp8(const rf_plan *plan) {
  const rf_layout *lay = plan->layout;
  char size[32];
  const rf_format *f = rf_layout_format(lay);
  if (!f)
    return;
  printf("%-16s %" PRId64 " (%s) of the transfer bytes, %s and scales where the source "
         "quantizes\n",
         "wire bytes", plan->wire_transfer_bytes,
         rf_format_bytes(plan->wire_transfer_bytes, size, sizeof size), f->name);
  if (rf_plan_forwards(plan))
    printf("%-16s %" PRId64 " (%s) between replicas, %s and scales\n", "forward wire",
           plan->wire_forward_bytes, rf_format_bytes(plan->wire_forward_bytes, size, sizeof size),
           f->name);
  printf("%-16s %d %s tensors at their source, %d at their destination (a piece cuts a "
         "block)\n",
         "quantized", plan->source_tensors, f->name, plan->destination_tensors);
  print_range("wire send", plan->wire_send_bytes, lay->trainer_ranks, "per trainer rank");
  print_range("wire recv", plan->wire_recv_bytes, lay->rollout_ranks, "per rollout rank");
  char per_trainer[64], per_rollout[64];
  snprintf(per_trainer, sizeof per_trainer, "%s tensors per trainer rank", f->name);
  snprintf(per_rollout, sizeof per_rollout, "%s tensors per rollout rank", f->name);
  print_count_range("quantize send", plan->source_quantized, lay->trainer_ranks, per_trainer);
  print_count_range("quantize recv", plan->destination_quantized, lay->rollout_ranks, per_rollout);
}

static void print_text(const rf_job *job, const rf_cluster *c, const rf_sim_bound *bound) {
  const rf_plan *plan = &job->plan;
  const rf_layout *lay = &job->layout;
  const rf_model *m = &job->model;
  char trainer[64], rollout[64], size[32];
  rf_trainer_layout_format(&job->trainer, trainer, sizeof trainer);
  rf_rollout_layout_format(&job->rollout, rollout, sizeof rollout);
  printf("%-16s %s (%s, %s)\n", "model", m->name, m->model_type, rf_dtype_name(m->dtype));
  printf("%-16s %" PRId64 "\n", "parameters", m->total_params);
  printf("%-16s %" PRId64 " (%s)\n", "bytes", m->total_bytes,
         rf_format_bytes(m->total_bytes, size, sizeof size));
  printf("%-16s %d logical, %d per rollout rank (fused)\n", "tensors", m->tensor_count,
         lay->rollout_tensor_count);
  printf("%-16s %s (%s), %d ranks, numbered tp fastest, then %s\n", "trainer", trainer,
         rf_trainer_style_name(job->trainer.style), lay->trainer_ranks,
         job->trainer.style == RF_STYLE_MEGATRON ? "cp, dp, pp; ep rank = rank mod ep"
                                                 : "fsdp, ep, pp, dp");
  printf("%-16s %s, %d ranks\n", "rollout", rollout, lay->rollout_ranks);
  if (rf_layout_format(lay))
    printf("%-16s %s: %s\n", "rollout dtype", rf_layout_format(lay)->name,
           rf_layout_format(lay)->summary);
  printf("%-16s %s, world size %d\n", "placement",
         job->placement == RF_PLACEMENT_COLOCATED ? "colocated" : "disaggregated", lay->world_size);
  if (plan->kind == RF_PLAN_STAR)
    printf("%-16s star, %s: %d stars of %d arms\n", "plan", plan->fan_in ? "fan-in" : "fan-out",
           plan->star_count, plan->star_arms);
  else if (plan->kind == RF_PLAN_FANOUT)
    printf("%-16s fanout: each element leaves the trainer once, for one of %d replicas\n", "plan",
           lay->rollout.dp);
  else if (plan->kind == RF_PLAN_HIERARCHICAL)
    printf("%-16s hierarchical: each element enters each of %d domains once, for one of its "
           "replicas\n",
           "plan", plan->domains);
  else
    printf("%-16s p2p\n", "plan");
  if (job->plan_why[0])
    printf("%-16s %s\n", "plan choice", job->plan_why);
  if (rf_plan_forwards(plan))
    printf("%-16s %d (%d forward, %d local copies)\n", "pieces", plan->piece_count,
           forward_pieces(plan), plan->local_count);
  else
    printf("%-16s %d (%d reshape, %d local copies)\n", "pieces", plan->piece_count,
           plan->reshape_count, plan->local_count);
  printf("%-16s %d transfer pieces once those contiguous on both ends are joined\n", "blocks",
         plan->block_count);
  printf("%-16s %" PRId64 " (%s)\n", "transfer bytes", plan->transfer_bytes,
         rf_format_bytes(plan->transfer_bytes, size, sizeof size));
  if (plan->kind != RF_PLAN_STAR)
    print_runs(plan);
  if (plan->kind == RF_PLAN_STAR) {
    printf("%-16s %" PRId64 " (%s) between trainer ranks\n", "reshape bytes", plan->reshape_bytes,
           rf_format_bytes(plan->reshape_bytes, size, sizeof size));
    printf("%-16s %" PRId64 " (%s) sent whole but not kept\n", "extra bytes", plan->extra_bytes,
           rf_format_bytes(plan->extra_bytes, size, sizeof size));
  }
  if (rf_plan_forwards(plan)) {
    printf("%-16s %" PRId64 " (%s) between replicas\n", "forward bytes", plan->forward_bytes,
           rf_format_bytes(plan->forward_bytes, size, sizeof size));
    if (plan->kind == RF_PLAN_HIERARCHICAL)
      printf("%-16s %d (binomial trees over each domain's replicas, a step per level)\n",
             "forward depth", plan->forward_depth);
    else
      printf("%-16s %d (binomial trees over the %d replicas, a step per level)\n", "forward depth",
             plan->forward_depth, lay->rollout.dp);
  }
  print_range("send bytes", plan->send_bytes, lay->trainer_ranks, "per trainer rank");
  print_range("recv bytes", plan->recv_bytes, lay->rollout_ranks,
              rf_plan_forwards(plan) ? "per rollout rank, from the trainer" : "per rollout rank");
  if (rf_plan_forwards(plan)) {
    print_range("forward send", plan->forward_send_bytes, lay->rollout_ranks, "per rollout rank");
    print_range("forward recv", plan->forward_recv_bytes, lay->rollout_ranks, "per rollout rank");
  }
  print_fp8(plan);
  if (bound)
    printf("%-16s %.4g s on cluster %s, for any plan over mpi with the weights in %s memory "
           "(binding: %s)\n",
           "lower bound", bound->seconds, c->name, c->gpus ? "GPU" : "host", bound->binding);
  printf("%-16s %016" PRIx64 "\n", "digest", plan->digest);
}

rf_status rf_cmd_plan(const rf_config *cfg) {
  /* --cluster: the least time any plan could take there, for the job refit simulate would
   * time by default (mpi, the weights on the GPUs where the cluster has them). */
  rf_cluster cluster;
  rf_sim_bound bound, *b = NULL;
  if (cfg->cluster[0])
    RF_TRY(rf_cluster_load(cfg->cluster, &cluster));
  /* Totals and digest only: the pieces are counted as they are made, not kept (plan.h), which
   * a hundred million pieces of a star at 256 ranks would need gigabytes for. */
  rf_job job;
  rf_status st = rf_job_build_layout(cfg, 0, &job);
  if (st == RF_OK && cfg->plan == RF_PLAN_AUTO) {
    st = rf_job_plan_auto_default(cfg, &job); /* the candidates keep their pieces to time them */
  } else if (st == RF_OK) {
    rf_plan_options summary = {.summary = 1, .domain_of = job.domain_of};
    st = rf_plan_build(&job.plan, &job.layout, cfg->plan, &summary);
    job.have_plan = st == RF_OK;
  }
  if (st == RF_OK && cfg->rollout_rank >= job.layout.rollout_ranks)
    st = rf_fail(RF_ERR_USAGE, "--rollout-rank %lld: rollout %s has ranks 0 to %d; choose one",
                 (long long)cfg->rollout_rank, cfg->rollout, job.layout.rollout_ranks - 1);
  if (st == RF_OK && cfg->cluster[0]) {
    st = rf_sim_lower_bound(&job.layout, &cluster, cluster.gpus > 0, 0, &bound);
    b = &bound;
  }
  if (st == RF_OK) {
    if (cfg->json)
      st = print_json(&job, (int)cfg->rollout_rank, &cluster, b);
    else
      print_text(&job, &cluster, b);
  }
  rf_job_free(&job);
  return st;
}
