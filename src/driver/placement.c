/* placement: where the ranks of `refit run` go, over the control plane's communicators, and the
 * plan's links with their distance classes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement.h"

/* What node-local rank 0 tells the rest of its node besides the placement. */
enum { INFO_THIS_MACHINE, INFO_NODE_ID, INFO_GPUS, INFO_COUNT };

/* Node-local rank 0: loads the topology and places the node's n ranks. */
static rf_status place_node(const rf_job_placement_options *o, int n, rf_topo **topo,
                            rf_topo_place **all, int *info) {
  RF_TRY(rf_topo_load(topo, o->topology_xml));
  info[INFO_THIS_MACHINE] = rf_topo_is_this_machine(*topo);
  info[INFO_GPUS] = rf_topo_gpu_count(*topo);
  rf_topo_place_options po = {n, o->device, o->gpu_per_rank, o->bind};
  /* A live machine where hwloc sees no GPU: CUDA has the last word and says so in its own
   * line when the transport needs a GPU (hwloc may lack the PCI backend). */
  if (info[INFO_THIS_MACHINE] && info[INFO_GPUS] == 0) {
    po.device = -1;
    po.gpu_per_rank = NULL;
  }
  *all = rf_calloc((size_t)n, sizeof **all, "placement");
  if (!*all)
    return RF_ERR_NOMEM;
  return rf_topo_place_node(*topo, &po, *all);
}

/* Every rank learns world rank 0's distance table and which node every rank is on. */
static rf_status share_table(rf_control *ctl, rf_job_placement *job, int node_id) {
  int n = ctl->node_size;
  RF_TRY(rf_control_bcast(ctl, ctl->world, &n, 1, MPI_INT, "the placement table size"));
  if (!job->local)
    job->local = rf_calloc((size_t)n * (size_t)n, sizeof *job->local, "distance table");
  int *pairs = rf_calloc((size_t)ctl->world_size * 2, sizeof *pairs, "node table");
  job->node_of = rf_calloc((size_t)ctl->world_size, sizeof *job->node_of, "node table");
  job->local_of = rf_calloc((size_t)ctl->world_size, sizeof *job->local_of, "node table");
  rf_status st = job->local && pairs && job->node_of && job->local_of ? RF_OK : RF_ERR_NOMEM;
  if (st == RF_OK)
    st = rf_control_bcast(ctl, ctl->world, job->local, n * n, MPI_INT, "the distance table");
  if (st == RF_OK) {
    int mine[2] = {node_id, ctl->node_rank};
    st = rf_control_allgather(ctl, ctl->world, mine, pairs, 2, MPI_INT, "the node table");
  }
  for (int r = 0; st == RF_OK && r < ctl->world_size; r++) {
    job->node_of[r] = pairs[2 * r];
    job->local_of[r] = pairs[2 * r + 1];
  }
  job->table =
      (rf_topo_distance_table){n, job->local, ctl->world_size, job->node_of, job->local_of};
  free(pairs);
  return st;
}

/* Binds this rank as placed, or says once why it does not. */
static rf_status bind_rank(rf_control *ctl, const rf_job_placement_options *o,
                           rf_job_placement *job) {
  const rf_topo_place *p = &job->mine;
  char affinity[RF_TOPO_CPUS_MAX];
  if (o->bind == RF_BIND_NONE) {
    /* Reading the affinity back costs a topology load: only worth it for the debug line. */
    if (rf_log_level_get() < RF_LOG_DEBUG)
      return RF_OK;
    rf_topo_place unbound = *p;
    snprintf(unbound.cpus, sizeof unbound.cpus, "-");
    RF_TRY(rf_topo_bind_self(&unbound, affinity, sizeof affinity));
    RF_DEBUG("not bound (--bind none); CPU affinity %s as launched", affinity);
    return RF_OK;
  }
  if (!job->this_machine) {
    /* Its cores may not exist here: binding to them would fail or mean something else. */
    if (ctl->world_rank == 0)
      RF_WARN("placement is from a topology file, not this machine: recorded, not bound");
    return RF_OK;
  }
  RF_TRY(rf_topo_bind_self(p, affinity, sizeof affinity));
  RF_DEBUG("bound to cores %s and NUMA node %d; CPU affinity %s", p->cpus, p->numa, affinity);
  return RF_OK;
}

rf_status rf_job_place(rf_control *ctl, const rf_job_placement_options *o, rf_job_placement *job) {
  memset(job, 0, sizeof *job);
  int n = ctl->node_size, info[INFO_COUNT] = {0, ctl->world_rank, 0};
  rf_topo *topo = NULL;
  rf_topo_place *all = NULL;
  rf_status st = RF_OK;
  if (ctl->node_rank == 0) {
    /* Every node decides alike; world rank 0 alone says what is wrong. */
    rf_log_push_quiet(ctl->world_rank != 0);
    st = place_node(o, n, &topo, &all, info);
    if (st == RF_OK && ctl->world_rank == 0) {
      job->local = rf_calloc((size_t)n * (size_t)n, sizeof *job->local, "distance table");
      st = job->local ? RF_OK : RF_ERR_NOMEM;
      if (st == RF_OK)
        rf_topo_distance_matrix(topo, all, n, job->local);
    }
    rf_log_pop_quiet();
  }
  st = rf_control_agree(ctl, st);
  rf_topo_free(topo);
  if (st == RF_OK)
    st = rf_control_bcast(ctl, ctl->node, info, INFO_COUNT, MPI_INT, "the node's placement facts");
  if (st == RF_OK) {
    st = rf_control_scatter(ctl, ctl->node, all, &job->mine, (int)sizeof job->mine, MPI_BYTE,
                            "the node's placement");
  }
  job->this_machine = info[INFO_THIS_MACHINE];
  job->node_gpus = info[INFO_GPUS];
  if (st == RF_OK)
    st = share_table(ctl, job, info[INFO_NODE_ID]);
  if (st == RF_OK)
    st = bind_rank(ctl, o, job);
  if (st == RF_OK && o->nic_auto) {
    if (strcmp(job->mine.nic, "-") != 0) {
      /* A leading '=' makes NCCL match the name exactly: mlx5_1 alone also selects mlx5_10. */
      char hca[RF_TOPO_NAME_MAX + 1];
      snprintf(hca, sizeof hca, "=%s", job->mine.nic);
      setenv("NCCL_IB_HCA", hca, 1);
      RF_INFO("--nic auto: exported NCCL_IB_HCA=%s", hca);
    } else if (ctl->world_rank == 0) {
      RF_WARN("--nic auto: the node has no network adapter; NCCL_IB_HCA is left as it is");
    }
  }
  free(all);
  return rf_control_agree(ctl, st);
}

rf_plan_options rf_job_placement_plan_options(rf_job_placement *job) {
  return (rf_plan_options){.distance = rf_topo_table_distance,
                           .distance_ctx = &job->table,
                           .node_of = job->table.node_of};
}

void rf_job_placement_free(rf_job_placement *job) {
  free(job->local);
  free(job->node_of);
  free(job->local_of);
  memset(job, 0, sizeof *job);
}

int rf_job_forward_crosses_gpus(const rf_plan *plan, const rf_plan_options *distance) {
  if (!distance->distance || plan->forward_depth == 0)
    return 0;
  for (int i = plan->forward_first[0]; i < plan->forward_first[plan->forward_depth]; i++) {
    const rf_piece *p = &plan->pieces[i];
    if (distance->distance(distance->distance_ctx, rf_piece_src_world(plan, p),
                           rf_piece_dst_world(plan, p)) > RF_DIST_GPU)
      return 1;
  }
  return 0;
}

rf_status rf_job_plan_links(const rf_plan *plan, int world, const rf_plan_options *distance,
                            rf_link_info **out, int *count) {
  *out = NULL;
  *count = 0;
  int64_t *bytes = rf_calloc((size_t)world * (size_t)world, sizeof *bytes, "link table");
  if (!bytes)
    return RF_ERR_NOMEM;
  int n = 0;
  for (int i = plan->reshape_count; i < plan->piece_count; i++) {
    const rf_piece *p = &plan->pieces[i];
    int64_t *b = &bytes[(size_t)rf_piece_src_world(plan, p) * (size_t)world +
                        (size_t)rf_piece_dst_world(plan, p)];
    n += *b == 0;
    *b += p->bytes;
  }
  rf_link_info *links = rf_calloc((size_t)n + 1, sizeof *links, "link list");
  if (!links) {
    free(bytes);
    return RF_ERR_NOMEM;
  }
  int k = 0;
  for (int s = 0; s < world; s++)
    for (int d = 0; d < world; d++) {
      int64_t b = bytes[(size_t)s * (size_t)world + (size_t)d];
      if (!b)
        continue;
      rf_link_info *l = &links[k++];
      l->src = s;
      l->dst = d;
      l->bytes = b;
      /* Without a topology only "the same process" is known; other pairs are one node. */
      l->distance = distance && distance->distance
                        ? distance->distance(distance->distance_ctx, s, d)
                        : (s == d ? RF_DIST_PROCESS : RF_DIST_NODE);
      snprintf(l->name, sizeof l->name, "%s", rf_topo_distance_name(l->distance));
    }
  free(bytes);
  *out = links;
  *count = k;
  return RF_OK;
}
