/* plan_auto: --plan auto, the plan kind that the cost model of `refit simulate` (src/sim/)
 * predicts fastest for the job on a cluster (docs/architecture.md, "Choosing a plan"). Every
 * kind of RF_PLAN_KIND_LIST is a candidate; one that cannot plan the layout is passed over. */
#ifndef RF_DRIVER_PLAN_AUTO_H
#define RF_DRIVER_PLAN_AUTO_H

#include "control/control.h"
#include "driver.h"
#include "sim/sim.h"

/* What the candidates are predicted for: the job's modes (their times summed: a run moves the
 * weights once in each) and bucket size, where the weights live and how the transport moves
 * them, on `cluster` with the planner's distances `options` (NULL: none). */
typedef struct {
  const rf_cluster *cluster;
  const rf_plan_options *options;
  const rf_mode_list *modes;
  int64_t bucket_size;
  int device, mapping;
  rf_wire wire;
  int ordered;              /* the transport's rf_transport_ops.ordered */
  int quantized_checkpoint; /* the trainer holds a quantized checkpoint, which star cannot
                               move (rf_job_plan sets it from the job) */
} rf_plan_auto_inputs;

/* A plan of more pieces than this is predicted in the job's first mode only, so that choosing
 * stays a small part of planning for the largest models; the line says so. */
#define RF_PLAN_AUTO_FULL_PIECES 200000
/* Where the first kind's plan has more pieces than this, no other kind is built or predicted:
 * auto costs what planning that kind costs (Kimi-K2 from 256 ranks, 17.9 M pieces, would hold
 * gigabytes more for the others), and the line says what was not compared. Below it the
 * comparison can take tens of seconds (Qwen3-235B 64+64, 2.4 M pieces: 38 s, 1.5 GB). */
#define RF_PLAN_AUTO_MAX_PIECES 4000000

/* Builds into *out the plan of the kind predicted fastest, preferring one whose memory fits
 * the cluster, the earlier kind of the list on a tie, and writes the one line that says so
 * into why. A job the cluster cannot hold is one line and RF_ERR_CONFIG, as in rf_simulate. */
rf_status rf_plan_auto_choose(const rf_layout *lay, const rf_plan_auto_inputs *in, rf_plan *out,
                              char *why, size_t len);

/* Builds job->plan of `kind` with in->options; with RF_PLAN_AUTO, the kind chosen on
 * in->cluster, and job->plan_why says why. */
rf_status rf_job_plan(rf_job *job, rf_plan_kind kind, const rf_plan_auto_inputs *in);

/* --plan auto for commands that plan without a machine (refit plan, topo, a sweep's checks):
 * on --cluster when given (the weights on its GPUs where it has them, over mpi), else on the
 * local description below with every rank on one node and the weights in host memory. */
rf_status rf_job_plan_auto_default(const rf_config *cfg, rf_job *job);

/* A description of the machine a job runs on, where no --cluster gives one: `nodes` nodes of
 * `ranks_per_node` ranks and `gpus` GPUs each (0: hosts), with the rates measured on the
 * development VM (host memory) and the lent H200 (GPU memory), PCIe between GPUs, one 400 Gb/s
 * adapter per node, and memory without limit (the run finds out what fits). */
void rf_cluster_local(rf_cluster *c, int nodes, int ranks_per_node, int gpus);

/* The cluster `refit run` chooses on: the rates of --cluster (else rf_cluster_local's), its
 * nodes and ranks the run's own (node_of[world rank], NULL: one node), GPUs per node those of
 * the placement where the weights are on GPUs, else none. */
rf_status rf_cluster_of_run(const rf_config *cfg, int world, const int *node_of, int node_gpus,
                            int device, rf_cluster *out);

/* refit run's --plan auto, once the ranks are placed: rank 0 chooses on rf_cluster_of_run's
 * cluster with the placement's distances `options` and broadcasts the kind; every other rank
 * then plans that kind as for a named one, so that the handshake's digests agree. Collective
 * over ctl->world, every wait bounded; returns the agreed status. */
rf_status rf_job_plan_run(rf_control *ctl, const rf_config *cfg, rf_job *job,
                          const rf_transport_ops *transport, int device, int node_gpus,
                          const rf_plan_options *options);

/* "auto" for RF_PLAN_AUTO, else the kind's name: what a configuration asked for. */
const char *rf_plan_request_name(rf_plan_kind kind);

#endif
