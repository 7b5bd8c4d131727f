/* placement: placement inside `refit run`. Node-local rank 0 places the whole node and
 * scatters the result, so two ranks never claim the same cores; world rank 0's distance table
 * goes to every rank, so every rank builds the same plan (the handshake compares digests). */
#ifndef RF_DRIVER_PLACEMENT_H
#define RF_DRIVER_PLACEMENT_H

#include "control/control.h"
#include "plan/plan.h"
#include "result/result.h"
#include "topo/topo.h"

typedef struct {
  const char *topology_xml; /* --topology-xml; "" = HWLOC_XMLFILE or this machine */
  rf_bind bind;
  int device;               /* --device, -1 = by node-local rank */
  const char *gpu_per_rank; /* the transport that needs a GPU per rank, or NULL (topo.h) */
  int nic_auto;             /* --nic auto: export NCCL_IB_HCA with the rank's NIC */
} rf_job_placement_options;

typedef struct {
  rf_topo_place mine; /* this rank's placement */
  int this_machine;   /* the topology was this machine's: bound, and GPUs are its own */
  int node_gpus;      /* GPUs of the placing topology */
  int *local, *node_of, *local_of; /* the distance table's arrays */
  rf_topo_distance_table table;
} rf_job_placement;

/* Places every rank, binds it (unless --bind none, or the topology is not this machine's:
 * then the placement is recorded and one line says so) and exports NCCL_IB_HCA with --nic
 * auto. Collective over ctl->world; every wait is bounded. Returns the agreed status. */
rf_status rf_job_place(rf_control *ctl, const rf_job_placement_options *options,
                       rf_job_placement *job);

/* Options for rf_plan_build that prefer near sources; valid while `job` lives. */
rf_plan_options rf_job_placement_plan_options(rf_job_placement *job);

void rf_job_placement_free(rf_job_placement *job);
/* Whether some piece of fanout's forward steps joins two ranks on different GPUs (or nodes):
 * --mapped-rounds auto runs rounds only then. 0 without a distance. */
int rf_job_forward_crosses_gpus(const rf_plan *plan, const rf_plan_options *distance);

/* The plan's trainer->rollout links between world ranks (bytes summed over pieces, the star
 * plan's reshape stage left out), each with its distance class; `distance` NULL knows only
 * "process" and "node". The caller frees *out. */
rf_status rf_job_plan_links(const rf_plan *plan, int world_size, const rf_plan_options *distance,
                            rf_link_info **out, int *count);

#endif
