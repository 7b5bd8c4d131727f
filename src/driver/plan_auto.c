/* --plan auto: each plan kind built and timed by the link model of `refit simulate`, the
 * fastest kept (plan_auto.h). */
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "control/control.h"
#include "plan_auto.h"
#include "transport/transport.h"

const char *rf_plan_request_name(rf_plan_kind kind) {
  return kind == RF_PLAN_AUTO ? "auto" : rf_plan_kind_name(kind);
}

void rf_cluster_local(rf_cluster *c, int nodes, int ranks_per_node, int gpus) {
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "local");
  snprintf(c->description, sizeof c->description,
           "the machine refit runs on, with the rates of configs/clusters vm-2core (host) and "
           "h200-lent (GPU): give --cluster for rates of its own");
  c->nodes = nodes > 0 ? nodes : 1;
  c->ranks_per_node = ranks_per_node > 0 ? ranks_per_node : 1;
  c->gpus = gpus;
  snprintf(c->gpu_name, sizeof c->gpu_name, "GPU");
  /* Memory without limit: the run itself says what does not fit, and the choice should not
   * turn on a guess of it. */
  c->gpu_memory = RF_SIM_MEMORY_MAX;
  c->host_memory = RF_SIM_MEMORY_MAX;
  c->gpu_copy = 2140e9; /* the lent H200's device-to-device copy */
  c->gpu_quantize = RF_SIM_GPU_QUANTIZE_OF_COPY * c->gpu_copy;
  c->host_quantize = RF_SIM_HOST_QUANTIZE;
  c->pcie = 64e9; /* PCIe Gen5 x16 each way: every GPU has it, NVLink is not known */
  c->nics = 1;
  c->nic = 50e9;            /* one 400 Gb/s adapter */
  c->host_memcpy = 11.88e9; /* the development VM's memcpy and MPI rates */
  c->host_mpi = 7.19e9;
  c->latency_node = 10e-6;
  c->latency_network = 18e-6;
  c->latency_copy = gpus ? 5e-6 : 0; /* a kernel launch */
}

/* Seconds in the unit that keeps three digits readable: a tiny model's plans differ in
 * microseconds, a trillion-parameter model's in seconds. */
static void format_seconds(double s, char *buf, size_t len) {
  if (s >= 1000)
    snprintf(buf, len, "%.0f s", s);
  else if (s >= 1)
    snprintf(buf, len, "%.3g s", s);
  else if (s >= 1e-3)
    snprintf(buf, len, "%.3g ms", s * 1e3);
  else
    snprintf(buf, len, "%.3g us", s * 1e6);
}

/* The kind's predicted time: its modes' totals summed (only the first beyond the cap). */
static rf_status predict(const rf_plan *plan, const rf_plan_auto_inputs *in, int modes,
                         double *seconds, int *fits) {
  rf_sim_options o = {RF_MODE_GROUPED, in->bucket_size,           in->device, in->mapping, in->wire,
                      in->ordered,     {RF_DELTA_CHOICE_OFF, 0.0}};
  *seconds = 0;
  *fits = 1;
  for (int i = 0; i < modes; i++) {
    if (in->modes && in->modes->count)
      o.mode = in->modes->items[i];
    rf_sim_result r;
    rf_status st = rf_simulate(plan, in->cluster, &o, &r);
    if (st == RF_OK) {
      *seconds += r.phase[RF_PHASE_TOTAL];
      *fits &= r.fits;
    }
    rf_sim_result_free(&r);
    RF_TRY(st);
  }
  return RF_OK;
}

/* Builds one candidate, its error line (if any) captured into `reason` without its "plan
 * KIND: " prefix and its advice, which name another --plan rather than why. */
static rf_status build_candidate(const rf_layout *lay, rf_plan_kind kind,
                                 const rf_plan_options *options, rf_plan *plan, char *reason,
                                 size_t len) {
  char *outer;
  size_t outer_len;
  rf_log_capture_current(&outer, &outer_len);
  reason[0] = '\0';
  rf_log_capture(reason, len);
  rf_status st = rf_plan_build(plan, lay, kind, options);
  rf_log_capture(outer, outer_len);
  char prefix[48];
  snprintf(prefix, sizeof prefix, "plan %s: ", rf_plan_kind_name(kind));
  if (strncmp(reason, prefix, strlen(prefix)) == 0)
    memmove(reason, reason + strlen(prefix), strlen(reason + strlen(prefix)) + 1);
  char *advice = strstr(reason, "; use --plan");
  if (advice)
    *advice = '\0';
  if (st != RF_OK && !reason[0])
    snprintf(reason, len, "it cannot plan this layout");
  return st;
}

static void append(char *buf, size_t len, const char *text) {
  size_t n = strlen(buf);
  if (n < len)
    snprintf(buf + n, len - n, "%s", text);
}

/* The choice so far: the candidates' lines and times, and the best plan, held in *out. */
typedef struct {
  const rf_plan_auto_inputs *in;
  int modes, capped;
  char entry[RF_PLAN_KIND_COUNT][320];
  double time[RF_PLAN_KIND_COUNT];
  int predicted[RF_PLAN_KIND_COUNT], fits[RF_PLAN_KIND_COUNT];
  uint64_t pieces_hash[RF_PLAN_KIND_COUNT]; /* 0: not built */
  int best, distinct;
} choice;

/* Times candidate k (its plan `plan`) and writes its line. */
static rf_status predict_kind(choice *ch, int k, const rf_plan *plan) {
  int n = ch->modes;
  if (plan->piece_count > RF_PLAN_AUTO_FULL_PIECES)
    n = 1, ch->capped = 1;
  RF_TRY(predict(plan, ch->in, n, &ch->time[k], &ch->fits[k]));
  char t[32];
  format_seconds(ch->time[k], t, sizeof t);
  snprintf(ch->entry[k], sizeof ch->entry[k], "%s %s%s", rf_plan_kind_name((rf_plan_kind)k), t,
           ch->fits[k] ? "" : " (does not fit memory)");
  ch->predicted[k] = 1;
  return RF_OK;
}

static int better(const choice *ch, int k) {
  int b = ch->best;
  return (ch->fits[k] && !ch->fits[b]) || (ch->fits[k] == ch->fits[b] && ch->time[k] < ch->time[b]);
}

/* Offers candidate k: the same pieces as an earlier one need no prediction of their own; the
 * first distinct plan is timed only once a second one shows there is a choice to make. */
static rf_status offer(choice *ch, int k, rf_plan *cand, rf_plan *out) {
  uint64_t h = XXH3_64bits(cand->pieces, (size_t)cand->piece_count * sizeof *cand->pieces);
  ch->pieces_hash[k] = h ? h : 1;
  for (int j = 0; j < k; j++)
    if (ch->pieces_hash[j] == ch->pieces_hash[k]) {
      snprintf(ch->entry[k], sizeof ch->entry[k], "%s has the pieces of %s",
               rf_plan_kind_name((rf_plan_kind)k), rf_plan_kind_name((rf_plan_kind)j));
      rf_plan_free(cand);
      return RF_OK;
    }
  if (ch->best < 0) {
    *out = *cand;
    ch->best = k;
    ch->distinct = 1;
    return RF_OK;
  }
  ch->distinct++;
  rf_status st = ch->predicted[ch->best] ? RF_OK : predict_kind(ch, ch->best, out);
  if (st == RF_OK)
    st = predict_kind(ch, k, cand);
  if (st == RF_OK && better(ch, k)) {
    rf_plan_free(out);
    *out = *cand;
    ch->best = k;
  } else {
    rf_plan_free(cand);
  }
  return st;
}

rf_status rf_plan_auto_choose(const rf_layout *lay, const rf_plan_auto_inputs *in, rf_plan *out,
                              char *why, size_t len) {
  choice ch;
  memset(&ch, 0, sizeof ch);
  ch.in = in;
  ch.best = -1;
  ch.modes = in->modes && in->modes->count ? in->modes->count : 1;
  rf_status st = RF_OK, first_failure = RF_OK;
  memset(out, 0, sizeof *out);
  for (int k = 0; k < RF_PLAN_KIND_COUNT && st == RF_OK; k++) {
    rf_plan cand;
    char reason[256];
    if (k == RF_PLAN_STAR && in->quantized_checkpoint) {
      snprintf(ch.entry[k], sizeof ch.entry[k],
               "star skipped (its reshape would move the quantized checkpoint's bytes without "
               "their scales)");
      continue;
    }
    st = build_candidate(lay, (rf_plan_kind)k, in->options, &cand, reason, sizeof reason);
    if (st != RF_OK && st != RF_ERR_NOMEM) {
      snprintf(ch.entry[k], sizeof ch.entry[k], "%s skipped (%s)",
               rf_plan_kind_name((rf_plan_kind)k), reason);
      if (first_failure == RF_OK)
        first_failure = st;
      st = RF_OK;
      continue;
    }
    int64_t pieces = st == RF_OK ? cand.piece_count : 0;
    if (st == RF_OK)
      st = offer(&ch, k, &cand, out);
    if (st == RF_OK && ch.distinct == 1 && pieces > RF_PLAN_AUTO_MAX_PIECES) {
      snprintf(why, len,
               "plan auto -> %s: no other kind built or predicted, its plan has %lld pieces "
               "(over %d); name --plan to plan another",
               rf_plan_kind_name((rf_plan_kind)k), (long long)pieces, RF_PLAN_AUTO_MAX_PIECES);
      return RF_OK;
    }
  }
  if (st != RF_OK) {
    if (ch.best >= 0)
      rf_plan_free(out);
    return st;
  }
  if (ch.best < 0) /* no kind plans the layout */
    return rf_fail(first_failure, "--plan auto: no plan kind can plan this layout: %s",
                   ch.entry[RF_PLAN_P2P]);
  char others[1024] = "", list[128], what[192], head[128];
  for (int k = 0; k < RF_PLAN_KIND_COUNT; k++) {
    if (k == ch.best)
      continue;
    append(others, sizeof others, others[0] ? ", " : "");
    append(others, sizeof others, ch.entry[k]);
  }
  int nodes = (lay->world_size + in->cluster->ranks_per_node - 1) / in->cluster->ranks_per_node;
  if (ch.distinct == 1) { /* nothing to compare: no prediction was made */
    snprintf(why, len, "plan auto -> %s: the only distinct plan of this layout%s%s",
             rf_plan_kind_name((rf_plan_kind)ch.best), others[0] ? "; " : "", others);
    return RF_OK;
  }
  rf_mode first = in->modes && in->modes->count ? in->modes->items[0] : RF_MODE_GROUPED;
  if (ch.capped && ch.modes > 1)
    snprintf(what, sizeof what, "mode %s only, for plans of over %d pieces", rf_mode_name(first),
             RF_PLAN_AUTO_FULL_PIECES);
  else if (ch.modes == 1)
    snprintf(what, sizeof what, "mode %s", rf_mode_name(first));
  else
    snprintf(what, sizeof what, "modes %s summed",
             rf_mode_list_format(in->modes, list, sizeof list));
  format_seconds(ch.time[ch.best], head, sizeof head);
  snprintf(why, len, "plan auto -> %s: predicted %s%s against %s (%s) on cluster %s (%d node%s)",
           rf_plan_kind_name((rf_plan_kind)ch.best), head,
           ch.fits[ch.best] ? "" : " (no plan fits memory)", others, what, in->cluster->name, nodes,
           nodes == 1 ? "" : "s");
  return RF_OK;
}

rf_status rf_job_plan(rf_job *job, rf_plan_kind kind, const rf_plan_auto_inputs *in) {
  job->plan_why[0] = '\0';
  rf_plan_auto_inputs mine = *in;
  mine.quantized_checkpoint = job->quantized_checkpoint != NULL;
  if (kind == RF_PLAN_AUTO)
    RF_TRY(
        rf_plan_auto_choose(&job->layout, &mine, &job->plan, job->plan_why, sizeof job->plan_why));
  else
    RF_TRY(rf_plan_build(&job->plan, &job->layout, kind, in->options));
  job->have_plan = 1;
  return RF_OK;
}

rf_status rf_job_plan_auto_default(const rf_config *cfg, rf_job *job) {
  rf_cluster c;
  int world = job->layout.world_size;
  if (cfg->cluster[0])
    RF_TRY(rf_cluster_load(cfg->cluster, &c));
  else
    rf_cluster_local(&c, 1, world, 0);
  const rf_transport_ops *mpi;
  RF_TRY(rf_transport_describe("mpi", &mpi));
  int device = c.gpus > 0;
  rf_plan_options domains = {.domain_of = job->domain_of};
  rf_plan_auto_inputs in = {.cluster = &c,
                            .options = job->domain_of ? &domains : NULL,
                            .modes = &cfg->mode,
                            .bucket_size = cfg->bucket_size,
                            .device = device,
                            .mapping = 0,
                            .wire = rf_sim_wire(mpi, device)};
  return rf_job_plan(job, RF_PLAN_AUTO, &in);
}

rf_status rf_cluster_of_run(const rf_config *cfg, int world, const int *node_of, int node_gpus,
                            int device, rf_cluster *out) {
  int nodes = 1, per_node = world;
  if (node_of) {
    int counts[world > 0 ? world : 1];
    memset(counts, 0, sizeof counts);
    per_node = 0;
    for (int w = 0; w < world; w++) {
      int n = node_of[w] >= 0 && node_of[w] < world ? node_of[w] : 0;
      nodes = RF_MAX(nodes, n + 1);
      per_node = RF_MAX(per_node, ++counts[n]);
    }
  }
  int gpus = device ? RF_MAX(node_gpus, 1) : 0;
  if (!cfg->cluster[0]) {
    rf_cluster_local(out, nodes, per_node, gpus);
    return RF_OK;
  }
  RF_TRY(rf_cluster_load(cfg->cluster, out));
  /* The file's rates, on the nodes this run has: the simulation places consecutive ranks on a
   * node, as mpirun does by default. */
  out->nodes = nodes;
  out->ranks_per_node = per_node;
  out->gpus = gpus;
  if (nodes > 1 && out->nics == 0) {
    out->nics = 1;
    out->nic = 50e9;
  }
  return RF_OK;
}

rf_status rf_job_plan_run(rf_control *ctl, const rf_config *cfg, rf_job *job,
                          const rf_transport_ops *transport, int device, int node_gpus,
                          const rf_plan_options *options) {
  int kind = 0;
  rf_status st = RF_OK;
  if (ctl->world_rank == 0) {
    rf_cluster c;
    st = rf_cluster_of_run(cfg, ctl->world_size, options->node_of, node_gpus, device, &c);
    /* The domains of --domain-ranks, as rf_job_replan gives the other ranks. */
    rf_plan_options mine = *options;
    if (job->domain_of)
      mine.domain_of = job->domain_of;
    rf_plan_auto_inputs in = {.cluster = &c,
                              .options = &mine,
                              .modes = &cfg->mode,
                              .bucket_size = cfg->bucket_size,
                              .device = device,
                              .mapping = transport->mapping,
                              .wire = rf_sim_wire(transport, device),
                              .ordered = transport->ordered};
    if (st == RF_OK)
      st = rf_job_plan(job, RF_PLAN_AUTO, &in);
    kind = st == RF_OK ? (int)job->plan.kind : 0;
  }
  RF_TRY(rf_control_agree(ctl, st));
  RF_TRY(rf_control_bcast(ctl, ctl->world, &kind, 1, MPI_INT, "the plan --plan auto chose"));
  if (ctl->world_rank == 0)
    return RF_OK;
  job->plan.kind = (rf_plan_kind)kind;
  return rf_job_replan(job, options);
}
