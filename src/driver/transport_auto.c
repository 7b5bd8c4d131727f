/* --transport auto (transport_auto.h): the preference of each kind of job and the reasons a
 * candidate is passed over, in two tables, and the one function that walks them. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "transport/transport.h"
#include "transport_auto.h"

/* The candidates, best first, by where the weights live and whether the ranks share a node.
 * mpi ends every list: it takes host and GPU weights on any number of nodes. */
static const char *const prefer[2][2][4] = {
    /* host weights */ {/* across nodes */ {"mpi"}, /* one node */ {"shm", "mpi"}},
    /* GPU weights */ {{"nccl", "mpi"}, {"ipc", "nccl", "mpi"}},
};

/* What the rules look at: the job's options as the engine will see them. */
typedef struct {
  const rf_config *cfg;
  const rf_transport_site *site;
  int device; /* the weights on the GPU */
  int delta;  /* some run of the job sends deltas */
} auto_job;

static int in_build(const rf_transport_ops *t) {
  for (int i = 0; i < rf_transport_count(); i++)
    if (rf_transport_at(i) == t)
      return 1;
  return 0;
}

/* Each rule returns whether transport t would refuse the job, with the detail its text names. */
static int not_built(const auto_job *j, const rf_transport_ops *t, char *detail, size_t len) {
  snprintf(detail, len, "%s", t->description);
  return !j->site->any_build && !in_build(t);
}

static int shared_gpu(const auto_job *j, const rf_transport_ops *t, char *detail, size_t len) {
  const rf_transport_site *s = j->site;
  snprintf(detail, len, "%d ranks on a node of %d GPU%s", s->ranks_per_node, s->gpus,
           s->gpus == 1 ? "" : "s");
  return t->gpu_per_rank && s->ranks_per_node > s->gpus;
}

/* mpi stages GPU weights through pinned host memory, which neither delta refits nor the
 * quantize kernels take (engine_delta.c, engine.c); under --memory auto a quantized rollout
 * over mpi keeps its weights in host memory instead (run_setup.c, choose_memory). */
static int staged(const auto_job *j, const rf_transport_ops *t, char *detail, size_t len) {
  const rf_format *f = rf_format_of(j->cfg->rollout_dtype);
  int host = f && j->cfg->memory == RF_MEM_REQUEST_AUTO;
  if (t->memory != RF_MEM_HOST || !j->device || host)
    return 0;
  if (f)
    snprintf(detail, len, "--rollout-dtype %s", f->name);
  else
    snprintf(detail, len, "delta refits");
  return f || j->delta;
}

/* The reasons table: checked in order, the first that holds passes the candidate over. */
static const struct {
  int (*refuses)(const auto_job *j, const rf_transport_ops *t, char *detail, size_t len);
  const char *text; /* the transport's name, then the detail */
} rules[] = {
    {not_built, "%s is not in this build (%s)"},
    {shared_gpu, "%s needs a GPU per rank (%s)"},
    {staged, "%s would stage the GPU weights through host memory, which %s refuse"},
};

static void append(char *buf, size_t len, const char *text) {
  size_t n = strlen(buf);
  if (n + 1 < len)
    snprintf(buf + n, len - n, "%s", text);
}

int rf_transport_wants_auto(const rf_config *cfg) {
  if (strcmp(cfg->transport, "auto") == 0)
    return 1;
  for (int a = 0; a < cfg->sweep.axis_count; a++)
    for (int v = 0;
         strcmp(cfg->sweep.axes[a].name, "transport") == 0 && v < cfg->sweep.axes[a].count; v++)
      if (strcmp(cfg->sweep.axes[a].values[v], "auto") == 0)
        return 1;
  return 0;
}

const char *rf_transport_choose(const rf_config *cfg, const rf_transport_site *site, char *why,
                                size_t len) {
  why[0] = '\0';
  if (strcmp(cfg->transport, "auto") != 0)
    return cfg->transport;
  auto_job j = {.cfg = cfg, .site = site};
  j.device = cfg->memory == RF_MEM_REQUEST_DEVICE ||
             (cfg->memory == RF_MEM_REQUEST_AUTO && site->gpus > 0);
  for (int i = 0; i < cfg->delta.count; i++)
    j.delta |= cfg->delta.items[i] != RF_DELTA_CHOICE_OFF;

  int one_node = site->nodes <= 1;
  char reason[RF_TRANSPORT_CHOICE_MAX];
  snprintf(reason, sizeof reason, "%s weights, ", j.device ? "GPU" : "host");
  char where[96];
  if (one_node && site->ranks == 1)
    snprintf(where, sizeof where, "one rank");
  else if (one_node && site->ranks == 2)
    snprintf(where, sizeof where, "both ranks on one node");
  else if (one_node && site->ranks > 0)
    snprintf(where, sizeof where, "all %d ranks on one node", site->ranks);
  else if (one_node)
    snprintf(where, sizeof where, "one node");
  else
    snprintf(where, sizeof where, "%d ranks on %d nodes", site->ranks, site->nodes);
  append(reason, sizeof reason, where);

  const char *const *list = prefer[j.device][one_node];
  const char *chosen = "mpi";
  for (int c = 0; list[c]; c++) {
    const rf_transport_ops *t = NULL;
    rf_log_push_quiet(1);
    rf_status st = rf_transport_describe(list[c], &t);
    rf_log_pop_quiet();
    if (st != RF_OK)
      continue; /* the table names only transports refit has */
    int refused = 0;
    for (size_t k = 0; k < RF_ARRAY_LEN(rules) && !refused; k++) {
      char detail[128], line[256];
      if (!rules[k].refuses(&j, t, detail, sizeof detail))
        continue;
      refused = 1;
      snprintf(line, sizeof line, rules[k].text, t->name, detail);
      append(reason, sizeof reason, "; ");
      append(reason, sizeof reason, line);
    }
    chosen = list[c];
    if (!refused)
      break;
  }
  snprintf(why, len, "%s (auto: %s)", chosen, reason);
  return chosen;
}

rf_status rf_transport_site_of_world(rf_control *everyone, const rf_config *cfg,
                                     rf_transport_site *out) {
  memset(out, 0, sizeof *out);
  MPI_Comm node = MPI_COMM_NULL;
  RF_MPI(MPI_Comm_split_type(everyone->world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int node_rank = 0, node_size = 1;
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  /* GPUs only where the weights may go to one: asking CUDA costs its start-up. */
  int gpus = cfg->memory != RF_MEM_REQUEST_HOST ? rf_gpu_count() : 0;
  int leaders = node_rank == 0, nodes = 0;
  int mine[2] = {node_size, -gpus}, most[2];
  RF_TRY(rf_control_allreduce(everyone, everyone->world, &leaders, &nodes, 1, MPI_INT, MPI_SUM,
                              "the nodes of the job (--transport auto)"));
  RF_TRY(rf_control_allreduce(everyone, everyone->world, mine, most, 2, MPI_INT, MPI_MAX,
                              "the GPUs of every node (--transport auto)"));
  MPI_Comm_size(everyone->world, &out->ranks);
  out->nodes = nodes;
  out->ranks_per_node = most[0];
  out->gpus = -most[1];
  return RF_OK;
}
