/* topo internals shared by topo.c (discovery) and topo_place.c (placement). */
#ifndef RF_TOPO_INTERNAL_H
#define RF_TOPO_INTERNAL_H

#include <hwloc.h>

#include "topo.h"

struct rf_topo {
  hwloc_topology_t hw;
  int have_hw;
  int gpu_count, nic_count;
  rf_topo_gpu *gpus;
  rf_topo_nic *nics;
  hwloc_obj_t *gpu_obj; /* [gpu]: its PCI device */
  hwloc_obj_t *nic_obj; /* [nic]: its PCI device */
};

#endif
