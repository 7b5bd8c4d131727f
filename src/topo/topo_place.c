/* topo placement: which GPU, cores, NUMA node and NIC each rank of a node gets. Decided for
 * the whole node at once, so that ranks sharing a NUMA node get disjoint cores. */
#include <stdlib.h>
#include <string.h>

#include "topo_internal.h"

RF_ENUM_DEFINE(rf_bind, "bind", RF_BIND_LIST, RF_BIND_COUNT)
RF_ENUM_DEFINE(rf_nic, "nic", RF_NIC_LIST, RF_NIC_COUNT)

/* For each GPU, the nearest NIC; ties go to the NIC that fewest GPUs use so far. */
static void assign_nics(const rf_topo *topo, int *gpu_nic, int *nic_load) {
  for (int g = 0; g < topo->gpu_count; g++) {
    int best = -1, best_d = 0;
    for (int n = 0; n < topo->nic_count; n++) {
      int d = rf_topo_gpu_nic_distance(topo, g, n);
      if (best < 0 || d < best_d || (d == best_d && nic_load[n] < nic_load[best])) {
        best = n;
        best_d = d;
      }
    }
    gpu_nic[g] = best;
    if (best >= 0)
      nic_load[best]++;
  }
}

/* A rank without a GPU takes the least used NIC, preferring those of its NUMA node. */
static int nic_for_numa(const rf_topo *topo, int numa, int *nic_load) {
  int best = -1;
  for (int n = 0; n < topo->nic_count; n++) {
    int far = topo->nics[n].numa != numa;
    if (best < 0 || far < (topo->nics[best].numa != numa) ||
        (far == (topo->nics[best].numa != numa) && nic_load[n] < nic_load[best]))
      best = n;
  }
  if (best >= 0)
    nic_load[best]++;
  return best;
}

/* The objects of `type` inside the NUMA node's cpuset, in logical order. */
static int objs_in(hwloc_topology_t t, hwloc_obj_type_t type, hwloc_const_cpuset_t set,
                   hwloc_obj_t *out) {
  int n = 0, count = hwloc_get_nbobjs_by_type(t, type);
  for (int i = 0; i < count; i++) {
    hwloc_obj_t o = hwloc_get_obj_by_type(t, type, (unsigned)i);
    if (hwloc_bitmap_isincluded(o->cpuset, set))
      out[n++] = o;
  }
  return n;
}

/* Splits the NUMA node's cores (else its hardware threads) evenly among the ranks placed
 * there, in rank order. Returns 1 when done, 0 when there are more ranks than hardware
 * threads, -1 when memory ran out (logged). */
static int split_numa(hwloc_topology_t t, hwloc_obj_t numa, const int *ranks, int k,
                      rf_topo_place *out) {
  int max = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
  hwloc_obj_t *units = rf_calloc((size_t)max + 1, sizeof *units, "core list");
  if (!units)
    return -1;
  int n = objs_in(t, HWLOC_OBJ_CORE, numa->cpuset, units);
  if (n < k)
    n = objs_in(t, HWLOC_OBJ_PU, numa->cpuset, units);
  if (n < k) {
    free(units);
    return 0;
  }
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (!set) {
    free(units);
    return -1;
  }
  for (int j = 0; j < k; j++) {
    hwloc_bitmap_zero(set);
    for (int u = j * n / k; u < (j + 1) * n / k; u++)
      hwloc_bitmap_or(set, set, units[u]->cpuset);
    hwloc_bitmap_list_snprintf(out[ranks[j]].cpus, RF_TOPO_CPUS_MAX, set);
  }
  hwloc_bitmap_free(set);
  free(units);
  return 1;
}

static rf_status bind_cpus(const rf_topo *topo, const rf_topo_place_options *o,
                           rf_topo_place *out) {
  hwloc_topology_t t = topo->hw;
  int rpn = o->ranks_per_node, nnuma = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  int *ranks = rf_calloc((size_t)rpn, sizeof *ranks, "rank list");
  if (!ranks)
    return RF_ERR_NOMEM;
  rf_status st = RF_OK;
  for (int m = 0; m < nnuma && st == RF_OK; m++) {
    hwloc_obj_t numa = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)m);
    int k = 0;
    for (int r = 0; r < rpn; r++)
      if (out[r].numa == m)
        ranks[k++] = r;
    if (k == 0)
      continue;
    int split = o->bind != RF_BIND_NUMA ? split_numa(t, numa, ranks, k, out) : 0;
    if (split < 0)
      st = RF_ERR_NOMEM;
    if (split != 0)
      continue;
    if (o->bind == RF_BIND_CORES) {
      st = rf_fail(RF_ERR_USAGE,
                   "NUMA node %d has %d hardware threads for %d ranks; use "
                   "--bind numa or fewer ranks per node",
                   m, hwloc_bitmap_weight(numa->cpuset), k);
      break;
    }
    for (int j = 0; j < k; j++) /* numa, or auto with too few threads: share the node */
      hwloc_bitmap_list_snprintf(out[ranks[j]].cpus, RF_TOPO_CPUS_MAX, numa->cpuset);
  }
  free(ranks);
  return st;
}

rf_status rf_topo_place_node(const rf_topo *topo, const rf_topo_place_options *o,
                             rf_topo_place *out) {
  int rpn = o->ranks_per_node, gpus = topo->gpu_count;
  int nnuma = hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_NUMANODE);
  if (rpn < 1)
    return rf_fail(RF_ERR_USAGE, "ranks per node must be at least 1, not %d", rpn);
  if (o->device >= 0 && o->device >= gpus)
    return rf_fail(RF_ERR_USAGE, "--device %d is out of range: the node has %d GPUs", o->device,
                   gpus);
  if (o->gpu_per_rank && o->device < 0 && rpn > gpus)
    return rf_fail(RF_ERR_USAGE,
                   "%s needs a GPU per rank, but the node has %d GPU%s for %d ranks; use at "
                   "most %d ranks per node, or --transport ipc (ranks may share a GPU)",
                   o->gpu_per_rank, gpus, gpus == 1 ? "" : "s", rpn, gpus);
  int *gpu_nic = rf_calloc((size_t)gpus + 1, sizeof(int), "NIC assignment");
  int *nic_load = rf_calloc((size_t)topo->nic_count + 1, sizeof(int), "NIC assignment");
  if (!gpu_nic || !nic_load) {
    free(gpu_nic);
    free(nic_load);
    return RF_ERR_NOMEM;
  }
  assign_nics(topo, gpu_nic, nic_load);
  for (int r = 0; r < rpn; r++) {
    rf_topo_place *p = &out[r];
    memset(p, 0, sizeof *p);
    p->local_rank = r;
    p->gpu = o->device >= 0 ? o->device : gpus ? r % gpus : -1;
    snprintf(p->bus_id, sizeof p->bus_id, "%s", p->gpu >= 0 ? topo->gpus[p->gpu].bus_id : "-");
    /* Without GPUs, consecutive ranks fill the NUMA nodes in blocks. */
    p->numa = p->gpu >= 0 ? topo->gpus[p->gpu].numa : (int)((long)r * nnuma / rpn);
    int nic = p->gpu >= 0 ? gpu_nic[p->gpu] : nic_for_numa(topo, p->numa, nic_load);
    snprintf(p->nic, sizeof p->nic, "%s", nic >= 0 ? topo->nics[nic].name : "-");
    snprintf(p->cpus, sizeof p->cpus, "-");
  }
  free(gpu_nic);
  free(nic_load);
  if (o->bind == RF_BIND_NONE)
    return RF_OK;
  return bind_cpus(topo, o, out);
}
