/* transport_auto: --transport auto, the default. One decision, the same on every rank: shm for
 * host weights on one node, ipc for GPU weights on one node, nccl for GPU weights across
 * nodes, mpi for host weights across nodes. A candidate that would refuse the job (not in this
 * build, a GPU shared by two nccl ranks, GPU weights staged for mpi) is passed over for the next,
 * and the reason line says so. rma is never chosen: only asked for. docs/architecture.md, "Choosing
 * a transport". */
#ifndef RF_DRIVER_TRANSPORT_AUTO_H
#define RF_DRIVER_TRANSPORT_AUTO_H

#include "control/control.h"
#include "driver.h"

/* Where the job runs: the ranks of refit run (agreed over MPI), or the cluster that refit
 * simulate or refit topo describe. */
typedef struct {
  int nodes;          /* nodes the job's ranks span */
  int ranks;          /* the job's ranks; 0 = not known (a dry run without mpirun) */
  int ranks_per_node; /* the most ranks on one node */
  int gpus;           /* GPUs of a node (the fewest of any node); 0 = host memory only */
  int any_build;      /* another machine: a transport this build leaves out counts as well */
} rf_transport_site;

/* The header's line: "shm (auto: host weights, all 4 ranks on one node)". */
#define RF_TRANSPORT_CHOICE_MAX 512

/* The transport for cfg on `site`: cfg->transport itself, with an empty `why`, unless it is
 * "auto"; then the chosen name and, in `why`, "<name> (auto: <reason>)". Never fails: where
 * every candidate would refuse the job, mpi, whose own checks then say what to change. */
const char *rf_transport_choose(const rf_config *cfg, const rf_transport_site *site, char *why,
                                size_t len);

/* Whether cfg (or any value of a sweep's transport list) asks for auto. */
int rf_transport_wants_auto(const rf_config *cfg);

/* refit run's site: the ranks of MPI_COMM_WORLD counted by node (MPI_COMM_TYPE_SHARED, as shm
 * and ipc count a node) and the fewest GPUs any rank sees (asked unless --memory host), agreed
 * over `everyone`. Collective; its waits are bounded but the node split's, which MPI offers in
 * no nonblocking form (rf_control_init splits the same way). */
rf_status rf_transport_site_of_world(rf_control *everyone, const rf_config *cfg,
                                     rf_transport_site *out);

#endif
