/* topo binding and lookups: the distance table that every rank plans with, and binding the
 * calling process to its placement. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo_internal.h"

void rf_topo_distance_matrix(const rf_topo *topo, const rf_topo_place *place, int n, int *out) {
  /* One node of n ranks: world ranks 0 .. n-1 are its node-local ranks. */
  rf_topo_distance_ctx ctx = {topo, n, place};
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++)
      out[a * n + b] = rf_topo_distance(&ctx, a, b);
}

int rf_topo_table_distance(void *vtable, int src, int dst) {
  const rf_topo_distance_table *t = vtable;
  if (src == dst)
    return RF_DIST_PROCESS;
  if (src < 0 || dst < 0 || src >= t->world_size || dst >= t->world_size ||
      t->node_of[src] != t->node_of[dst])
    return RF_DIST_NETWORK;
  int a = t->local_of[src], b = t->local_of[dst], n = t->ranks_per_node;
  if (a >= n || b >= n)
    return RF_DIST_NODE;
  return t->local[a * n + b];
}

int rf_topo_is_this_machine(const rf_topo *topo) {
  return hwloc_topology_is_thissystem(topo->hw) != 0;
}

int rf_topo_same_bus_id(const char *a, const char *b) {
  unsigned d[2], bus[2], dev[2], fn[2];
  if (!a || !b || sscanf(a, "%x:%x:%x.%x", &d[0], &bus[0], &dev[0], &fn[0]) != 4 ||
      sscanf(b, "%x:%x:%x.%x", &d[1], &bus[1], &dev[1], &fn[1]) != 4)
    return 0;
  return d[0] == d[1] && bus[0] == bus[1] && dev[0] == dev[1] && fn[0] == fn[1];
}

/* The process's CPU affinity as a list, or "unknown" when hwloc cannot read it. */
static void read_affinity(hwloc_topology_t t, hwloc_bitmap_t set, char *out, size_t len) {
  if (hwloc_get_cpubind(t, set, HWLOC_CPUBIND_PROCESS) < 0)
    snprintf(out, len, "unknown");
  else
    hwloc_bitmap_list_snprintf(out, len, set);
}

rf_status rf_topo_bind_self(const rf_topo_place *place, char *affinity, size_t len) {
  /* Only cores and NUMA nodes matter here: without I/O discovery this loads in milliseconds,
   * and every rank of the node does it. */
  hwloc_topology_t t;
  RF_HWLOC(hwloc_topology_init(&t));
  rf_status st = RF_OK;
  hwloc_bitmap_t set = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
  if (!set || !nodes) {
    st = rf_fail(RF_ERR_NOMEM, "out of memory binding to cores %s", place->cpus);
    goto done;
  }
  if (hwloc_topology_load(t) < 0) {
    st = rf_hwloc_failed("hwloc_topology_load", errno, __FILE__, __LINE__);
    goto done;
  }
  if (strcmp(place->cpus, "-") != 0) {
    if (hwloc_bitmap_list_sscanf(set, place->cpus) < 0 || hwloc_bitmap_iszero(set)) {
      st = rf_fail(RF_ERR_INTERNAL, "placement cores '%s' are not a CPU list", place->cpus);
      goto done;
    }
    if (hwloc_set_cpubind(t, set, HWLOC_CPUBIND_PROCESS) < 0) {
      st = rf_fail(RF_ERR_CONFIG, "cannot bind to cores %s: %s; use --bind none", place->cpus,
                   strerror(errno));
      goto done;
    }
    /* The memory policy follows the cores: the NUMA nodes local to them. Linux keeps it per
     * thread, and threads created later (the transport's) inherit it. */
    hwloc_cpuset_to_nodeset(t, set, nodes);
    if (hwloc_set_membind(t, nodes, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET) < 0)
      RF_WARN("cannot bind memory to the NUMA node of cores %s: %s; memory stays unbound",
              place->cpus, strerror(errno));
  }
  read_affinity(t, set, affinity, len);
done:
  hwloc_bitmap_free(set);
  hwloc_bitmap_free(nodes);
  hwloc_topology_destroy(t);
  return st;
}
