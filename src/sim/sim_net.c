/* The links of a job placed on a cluster: which resources a flow between two ranks uses, and
 * what each can carry. Placement follows refit run's: consecutive world ranks fill a node
 * (ranks_per_node of them), node-local rank r uses GPU r modulo the node's GPUs
 * (rf_topo_place_node), and GPU g sends through adapter g * nics / gpus, the adapter an HGX
 * board wires beside it. */
#include <stdio.h>
#include <stdlib.h>

#include "sim_internal.h"
#include "topo/topo.h"

RF_ENUM_DEFINE(rf_sim_class, "link class", RF_SIM_CLASS_LIST, RF_SIM_CLASS_COUNT)

rf_status sim_net_init(sim_net *n, const rf_cluster *c, int world, int device, int mapping) {
  *n = (sim_net){.world = world,
                 .device = device,
                 .mapping = mapping,
                 .nodes = (world + c->ranks_per_node - 1) / c->ranks_per_node,
                 .gpus = c->gpus,
                 .nics = c->nics,
                 .ranks_per_node = c->ranks_per_node,
                 .nvlink = c->nvlink > 0};
  if (n->nodes > c->nodes)
    return rf_fail(RF_ERR_CONFIG,
                   "the job needs %d ranks but cluster %s has %d node%s of %d ranks (%lld); "
                   "choose smaller layouts or a cluster file with more nodes",
                   world, c->name, c->nodes, c->nodes == 1 ? "" : "s", c->ranks_per_node,
                   (long long)c->nodes * c->ranks_per_node);
  if (device && c->gpus == 0)
    return rf_fail(RF_ERR_CONFIG,
                   "cluster %s has no GPUs, so the weights cannot be in GPU memory; "
                   "use --memory host",
                   c->name);
  /* ipc and shm map memory between the processes of one node; refit run over them needs
   * every rank there. */
  if (mapping && n->nodes > 1)
    return rf_fail(RF_ERR_CONFIG,
                   "a mapping transport (ipc, shm) reaches the processes of one node, but the "
                   "job's %d ranks take %d nodes of cluster %s (%d ranks a node); use --transport "
                   "nccl or mpi, or smaller layouts",
                   world, n->nodes, c->name, c->ranks_per_node);
  n->per_node = 3 * c->gpus + 2 * c->nics;
  n->resources = n->nodes * n->per_node + 3 * world;
  return RF_OK;
}

static int node_of(const sim_net *n, int rank) { return rank / n->ranks_per_node; }
static int gpu_of(const sim_net *n, int rank) { return rank % n->ranks_per_node % n->gpus; }

/* The adapter a rank's traffic leaves by: its GPU's, or without GPUs its share of the node's
 * adapters by node-local rank. */
static int nic_of(const sim_net *n, int rank) {
  int local = rank % n->ranks_per_node;
  return n->gpus ? sim_adapter_of(gpu_of(n, rank), n->nics, n->gpus)
                 : sim_adapter_of(local, n->nics, n->ranks_per_node);
}

static int gpu_res(const sim_net *n, int rank, sim_res_kind kind) {
  return node_of(n, rank) * n->per_node + (int)(kind - SIM_RES_GPU_COPY) * n->gpus +
         gpu_of(n, rank);
}

static int nic_res(const sim_net *n, int rank, sim_res_kind kind) {
  return node_of(n, rank) * n->per_node + 3 * n->gpus + (kind == SIM_RES_NIC_IN ? n->nics : 0) +
         nic_of(n, rank);
}

static int rank_res(const sim_net *n, int rank, sim_res_kind kind) {
  return n->nodes * n->per_node + 3 * rank + (int)(kind - SIM_RES_RANK_COPY);
}

int sim_net_copy(const sim_net *n, int rank) {
  return n->device ? gpu_res(n, rank, SIM_RES_GPU_COPY) : rank_res(n, rank, SIM_RES_RANK_COPY);
}

/* A mapping transport's piece is one copy, made by the rank that copies (the destination
 * pulling, or the source pushing) on its own copy engine (a GPU's copy rate, or the rank's
 * memcpy for host memory): on one GPU, or in host memory, that is all it uses. Between two
 * GPUs of a node the copy also crosses NVLink (or PCIe) out of the source and into the
 * destination, so it goes at the slowest of the three, each shared with the other copies on
 * it: the copying GPU's kernels read or write over the link at no more than their local copy
 * rate, and no faster than the link. */
static int mapped_route(const sim_net *n, int src, int dst, int *res, rf_sim_class *cls) {
  int k = 0;
  res[k++] = sim_net_copy(n, n->push ? src : dst);
  if (!n->device) {
    *cls = RF_SIM_HOST;
    return k;
  }
  if (gpu_of(n, src) == gpu_of(n, dst)) {
    *cls = RF_SIM_GPU;
    return k;
  }
  *cls = n->nvlink ? RF_SIM_NVLINK : RF_SIM_PCIE;
  res[k++] = gpu_res(n, src, SIM_RES_GPU_OUT);
  res[k++] = gpu_res(n, dst, SIM_RES_GPU_IN);
  return k;
}

int sim_net_route(const sim_net *n, int src, int dst, int *res, rf_sim_class *cls) {
  int k = 0;
  if (src == dst) {
    *cls = RF_SIM_PROCESS;
    res[k++] = sim_net_copy(n, src);
    return k;
  }
  if (n->mapping) /* sim_net_init refused a mapping job of more than one node */
    return mapped_route(n, src, dst, res, cls);
  if (!n->device) {
    /* Host memory: each process's own send and receive path, and between nodes the adapters. */
    res[k++] = rank_res(n, src, SIM_RES_RANK_OUT);
    res[k++] = rank_res(n, dst, SIM_RES_RANK_IN);
  }
  if (node_of(n, src) != node_of(n, dst)) {
    *cls = RF_SIM_NETWORK;
    res[k++] = nic_res(n, src, SIM_RES_NIC_OUT);
    res[k++] = nic_res(n, dst, SIM_RES_NIC_IN);
    return k;
  }
  if (!n->device) {
    *cls = RF_SIM_HOST;
    return k;
  }
  if (gpu_of(n, src) == gpu_of(n, dst)) {
    /* Two processes on one GPU: a device-to-device copy inside its memory. */
    *cls = RF_SIM_GPU;
    res[k++] = gpu_res(n, src, SIM_RES_GPU_COPY);
    return k;
  }
  *cls = n->nvlink ? RF_SIM_NVLINK : RF_SIM_PCIE;
  res[k++] = gpu_res(n, src, SIM_RES_GPU_OUT);
  res[k++] = gpu_res(n, dst, SIM_RES_GPU_IN);
  return k;
}

sim_res_kind sim_net_kind(const sim_net *n, int res) {
  if (res >= n->nodes * n->per_node)
    return (sim_res_kind)(SIM_RES_RANK_COPY + (res - n->nodes * n->per_node) % 3);
  int i = res % n->per_node;
  if (i < 3 * n->gpus)
    return (sim_res_kind)(SIM_RES_GPU_COPY + i / n->gpus);
  return i - 3 * n->gpus < n->nics ? SIM_RES_NIC_OUT : SIM_RES_NIC_IN;
}

void sim_net_capacities(const sim_net *n, const rf_cluster *c, double *cap) {
  double link = c->nvlink > 0 ? c->nvlink : c->pcie;
  const double by_kind[SIM_RES_KIND_COUNT] = {
      [SIM_RES_GPU_COPY] = c->gpu_copy, [SIM_RES_GPU_OUT] = link,
      [SIM_RES_GPU_IN] = link,          [SIM_RES_NIC_OUT] = c->nic,
      [SIM_RES_NIC_IN] = c->nic,        [SIM_RES_RANK_COPY] = c->host_memcpy,
      [SIM_RES_RANK_OUT] = c->host_mpi, [SIM_RES_RANK_IN] = c->host_mpi,
  };
  for (int r = 0; r < n->resources; r++)
    cap[r] = by_kind[sim_net_kind(n, r)];
}

void sim_net_name(const sim_net *n, int res, char *buf, size_t len) {
  static const char *const names[SIM_RES_KIND_COUNT] = {"gpu_copy", "nvlink_out", "nvlink_in",
                                                        "nic_out",  "nic_in",     "host_copy",
                                                        "host_out", "host_in"};
  sim_res_kind kind = sim_net_kind(n, res);
  if (!n->nvlink && (kind == SIM_RES_GPU_OUT || kind == SIM_RES_GPU_IN)) {
    snprintf(buf, len, "%s node %d gpu %d", kind == SIM_RES_GPU_OUT ? "pcie_out" : "pcie_in",
             res / n->per_node, res % n->per_node % n->gpus);
    return;
  }
  if (kind >= SIM_RES_RANK_COPY) {
    snprintf(buf, len, "%s rank %d", names[kind], (res - n->nodes * n->per_node) / 3);
    return;
  }
  int node = res / n->per_node, i = res % n->per_node;
  if (kind <= SIM_RES_GPU_IN)
    snprintf(buf, len, "%s node %d gpu %d", names[kind], node, i % n->gpus);
  else
    snprintf(buf, len, "%s node %d adapter %d", names[kind], node, (i - 3 * n->gpus) % n->nics);
}

double sim_latency(const rf_cluster *c, rf_sim_class cls) {
  if (cls == RF_SIM_PROCESS)
    return 0.0; /* no message: a local copy's launch is the clock's, once a unit */
  return cls == RF_SIM_NETWORK ? c->latency_network : c->latency_node;
}

static int cluster_distance(void *ctx, int src, int dst) {
  const rf_cluster_placement *p = ctx;
  const rf_cluster *c = p->cluster;
  if (src == dst)
    return RF_DIST_PROCESS;
  if (p->node_of[src] != p->node_of[dst])
    return RF_DIST_NETWORK;
  int same_gpu =
      c->gpus > 0 && src % c->ranks_per_node % c->gpus == dst % c->ranks_per_node % c->gpus;
  return same_gpu ? RF_DIST_GPU : RF_DIST_NODE;
}

rf_status rf_cluster_plan_options(const rf_cluster *c, int world, rf_cluster_placement *p,
                                  rf_plan_options *out) {
  sim_net n;
  *p = (rf_cluster_placement){c, world, NULL};
  RF_TRY(sim_net_init(&n, c, world, 0, 0));
  p->node_of = rf_calloc((size_t)world + 1, sizeof *p->node_of, "the node table");
  if (!p->node_of)
    return RF_ERR_NOMEM;
  for (int w = 0; w < world; w++)
    p->node_of[w] = w / c->ranks_per_node;
  *out = (rf_plan_options){.distance = cluster_distance, .distance_ctx = p, .node_of = p->node_of};
  return RF_OK;
}

void rf_cluster_placement_free(rf_cluster_placement *p) {
  free(p->node_of);
  p->node_of = NULL;
}

rf_status rf_cluster_fits(const rf_cluster *c, int world, int device, int mapping) {
  sim_net n;
  return sim_net_init(&n, c, world, device, mapping);
}
