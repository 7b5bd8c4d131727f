/* topo: discovery with hwloc (GPUs, NICs, NUMA nodes, cores and the PCI tree) and the
 * distance classes between devices. Placement lives in topo_place.c. */
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo_internal.h"

static int numa_of(hwloc_topology_t t, hwloc_obj_t obj) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, obj);
  int n = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  for (int i = 0; anc && anc->nodeset && i < n; i++) {
    hwloc_obj_t numa = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)i);
    if (hwloc_bitmap_isset(anc->nodeset, numa->os_index))
      return i;
  }
  return -1;
}

static void bus_id(hwloc_obj_t pci, char *buf, size_t len) {
  snprintf(buf, len, "%04x:%02x:%02x.%x", (unsigned)pci->attr->pcidev.domain,
           (unsigned)pci->attr->pcidev.bus, (unsigned)pci->attr->pcidev.dev,
           (unsigned)pci->attr->pcidev.func);
}

static unsigned long pci_key(hwloc_obj_t pci) {
  const struct hwloc_pcidev_attr_s *a = &pci->attr->pcidev;
  return ((unsigned long)a->domain << 24) | ((unsigned long)a->bus << 16) |
         ((unsigned long)a->dev << 8) | a->func;
}

/* The name an OS device below a PCI device gives it, by preference; 0 when none matches. */
static int osdev_name(hwloc_obj_t pci, const hwloc_obj_osdev_type_t *types, int ntypes, char *buf,
                      size_t len) {
  for (int k = 0; k < ntypes; k++)
    for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling)
      if (c->type == HWLOC_OBJ_OS_DEVICE && c->attr->osdev.type == types[k] && c->name) {
        snprintf(buf, len, "%s", c->name);
        return 1;
      }
  return 0;
}

static int by_bus(const void *a, const void *b) {
  unsigned long ka = pci_key(*(hwloc_obj_t const *)a), kb = pci_key(*(hwloc_obj_t const *)b);
  return ka < kb ? -1 : ka > kb;
}

/* Finds the GPUs and NICs. A GPU is a PCI device with a CUDA (COPROC) or NVML (GPU) OS
 * device, or of class 0x0302 (3D controller), which is what data-centre GPUs report where
 * hwloc was built without the CUDA/NVML backends. */
static rf_status discover(rf_topo *topo) {
  hwloc_topology_t t = topo->hw;
  static const hwloc_obj_osdev_type_t gpu_types[] = {HWLOC_OBJ_OSDEV_COPROC, HWLOC_OBJ_OSDEV_GPU};
  static const hwloc_obj_osdev_type_t nic_types[] = {HWLOC_OBJ_OSDEV_OPENFABRICS,
                                                     HWLOC_OBJ_OSDEV_NETWORK};
  int npci = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PCI_DEVICE);
  topo->gpu_obj = rf_calloc((size_t)npci + 1, sizeof(hwloc_obj_t), "GPU list");
  topo->nic_obj = rf_calloc((size_t)npci + 1, sizeof(hwloc_obj_t), "NIC list");
  topo->gpus = rf_calloc((size_t)npci + 1, sizeof(rf_topo_gpu), "GPU list");
  topo->nics = rf_calloc((size_t)npci + 1, sizeof(rf_topo_nic), "NIC list");
  if (!topo->gpu_obj || !topo->nic_obj || !topo->gpus || !topo->nics)
    return RF_ERR_NOMEM;
  char name[RF_TOPO_NAME_MAX];
  for (hwloc_obj_t pci = NULL; (pci = hwloc_get_next_pcidev(t, pci));) {
    if (osdev_name(pci, gpu_types, 2, name, sizeof name) || pci->attr->pcidev.class_id == 0x0302)
      topo->gpu_obj[topo->gpu_count++] = pci;
    else if (osdev_name(pci, nic_types, 2, name, sizeof name))
      topo->nic_obj[topo->nic_count++] = pci;
  }
  qsort(topo->gpu_obj, (size_t)topo->gpu_count, sizeof(hwloc_obj_t), by_bus);
  qsort(topo->nic_obj, (size_t)topo->nic_count, sizeof(hwloc_obj_t), by_bus);
  for (int i = 0; i < topo->gpu_count; i++) {
    rf_topo_gpu *g = &topo->gpus[i];
    bus_id(topo->gpu_obj[i], g->bus_id, sizeof g->bus_id);
    if (!osdev_name(topo->gpu_obj[i], gpu_types, 2, g->name, sizeof g->name))
      snprintf(g->name, sizeof g->name, "%s", g->bus_id);
    g->numa = numa_of(t, topo->gpu_obj[i]);
  }
  for (int i = 0; i < topo->nic_count; i++) {
    rf_topo_nic *n = &topo->nics[i];
    bus_id(topo->nic_obj[i], n->bus_id, sizeof n->bus_id);
    osdev_name(topo->nic_obj[i], nic_types, 2, n->name, sizeof n->name);
    n->numa = numa_of(t, topo->nic_obj[i]);
  }
  return RF_OK;
}

/* The most refit reads of a topology file: a large server's XML is a few MiB. */
#define RF_TOPO_XML_MAX ((size_t)64 << 20)

static rf_status load(rf_topo **out, const char *xml_path, const char *synthetic) {
  *out = NULL;
  rf_topo *topo = rf_calloc(1, sizeof *topo, "topology");
  if (!topo)
    return RF_ERR_NOMEM;
  if (hwloc_topology_init(&topo->hw) < 0) {
    free(topo);
    return rf_hwloc_failed("hwloc_topology_init", errno, __FILE__, __LINE__);
  }
  topo->have_hw = 1;
  rf_status st = RF_OK;
  char *xml = NULL;
  /* hwloc leaves PCI bridges and OS devices out by default; the PCI path is the point. */
  hwloc_topology_set_io_types_filter(topo->hw, HWLOC_TYPE_FILTER_KEEP_ALL);
  /* The placement is decided before any CUDA call, and must not make one: hwloc's CUDA and
   * OpenCL backends would initialise CUDA (before CUDA_DEVICE_ORDER is set) and the OpenCL one
   * may create contexts. PCI and NVML find the GPUs without either. A backend that this
   * hwloc does not have is no error, so the calls' results do not matter. */
  static const char *const gpu_runtimes[] = {"cuda", "opencl", "levelzero", "rsmi", "gl"};
  for (size_t i = 0; i < RF_ARRAY_LEN(gpu_runtimes); i++)
    (void)hwloc_topology_set_components(topo->hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                        gpu_runtimes[i]);
  if (synthetic) {
    if (hwloc_topology_set_synthetic(topo->hw, synthetic) < 0) {
      st = rf_fail(RF_ERR_CONFIG, "synthetic topology '%s' is not valid", synthetic);
      goto done;
    }
  } else if (xml_path && xml_path[0]) {
    /* Read here, not by hwloc: its message for a missing file is vague, and a FIFO or a
     * device must neither hang the job nor feed it without end. */
    char why[128];
    size_t len = 0;
    xml = rf_read_input(xml_path, RF_TOPO_XML_MAX, &len, why, sizeof why);
    if (!xml) {
      st = rf_fail(RF_ERR_CONFIG, "topology file '%s' cannot be read: %s", xml_path, why);
      goto done;
    }
    if (hwloc_topology_set_xmlbuffer(topo->hw, xml, (int)len + 1) < 0) {
      st = rf_fail(RF_ERR_CONFIG, "topology file '%s' does not load as hwloc XML", xml_path);
      goto done;
    }
  }
  if (hwloc_topology_load(topo->hw) < 0) {
    st = xml_path && xml_path[0]
             ? rf_fail(RF_ERR_CONFIG, "topology file '%s' does not load as hwloc XML", xml_path)
             : rf_hwloc_failed("hwloc_topology_load", errno, __FILE__, __LINE__);
    goto done;
  }
  st = discover(topo);
done:
  free(xml); /* hwloc has copied what it needs by now */
  if (st != RF_OK)
    rf_topo_free(topo);
  else
    *out = topo;
  return st;
}

rf_status rf_topo_load(rf_topo **out, const char *xml_path) {
  const char *env = getenv("HWLOC_XMLFILE");
  if ((!xml_path || !xml_path[0]) && env && env[0])
    xml_path = env;
  return load(out, xml_path, NULL);
}

rf_status rf_topo_load_synthetic(rf_topo **out, const char *description) {
  return load(out, NULL, description);
}

void rf_topo_free(rf_topo *topo) {
  if (!topo)
    return;
  if (topo->have_hw)
    hwloc_topology_destroy(topo->hw);
  free(topo->gpu_obj);
  free(topo->nic_obj);
  free(topo->gpus);
  free(topo->nics);
  free(topo);
}

int rf_topo_gpu_count(const rf_topo *topo) { return topo->gpu_count; }
const rf_topo_gpu *rf_topo_gpu_at(const rf_topo *topo, int i) { return &topo->gpus[i]; }
int rf_topo_nic_count(const rf_topo *topo) { return topo->nic_count; }
const rf_topo_nic *rf_topo_nic_at(const rf_topo *topo, int i) { return &topo->nics[i]; }
int rf_topo_numa_count(const rf_topo *topo) {
  return hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_NUMANODE);
}
int rf_topo_core_count(const rf_topo *topo) {
  return hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_CORE);
}

/* Two devices share a switch when some PCI-to-PCI bridge (not the host bridge, which every
 * device of a socket shares) is an ancestor of both. */
static int pci_distance(hwloc_obj_t a, hwloc_obj_t b, int numa_a, int numa_b) {
  if (a == b)
    return RF_TOPO_SAME_DEVICE;
  for (hwloc_obj_t x = a->parent; x && x->type == HWLOC_OBJ_BRIDGE; x = x->parent) {
    if (x->attr->bridge.upstream_type != HWLOC_OBJ_BRIDGE_PCI)
      break;
    for (hwloc_obj_t y = b->parent; y; y = y->parent)
      if (y == x)
        return RF_TOPO_SAME_SWITCH;
  }
  if (numa_a >= 0 && numa_a == numa_b)
    return RF_TOPO_SAME_NUMA;
  return RF_TOPO_SAME_NODE;
}

int rf_topo_gpu_distance(const rf_topo *topo, int a, int b) {
  return pci_distance(topo->gpu_obj[a], topo->gpu_obj[b], topo->gpus[a].numa, topo->gpus[b].numa);
}

int rf_topo_gpu_nic_distance(const rf_topo *topo, int gpu, int nic) {
  return pci_distance(topo->gpu_obj[gpu], topo->nic_obj[nic], topo->gpus[gpu].numa,
                      topo->nics[nic].numa);
}

int rf_topo_distance(void *vctx, int src, int dst) {
  const rf_topo_distance_ctx *ctx = vctx;
  if (src == dst)
    return RF_DIST_PROCESS;
  int rpn = ctx->ranks_per_node;
  if (src / rpn != dst / rpn)
    return RF_DIST_NETWORK;
  const rf_topo_place *a = &ctx->place[src % rpn], *b = &ctx->place[dst % rpn];
  if (a->gpu >= 0 && b->gpu >= 0)
    return RF_DIST_GPU + rf_topo_gpu_distance(ctx->topo, a->gpu, b->gpu);
  if (a->numa >= 0 && a->numa == b->numa)
    return RF_DIST_NUMA;
  return RF_DIST_NODE;
}

const char *rf_topo_distance_name(int distance) {
  static const char *const names[] = {"process", "gpu", "switch", "numa", "node", "network"};
  return distance >= 0 && distance < (int)RF_ARRAY_LEN(names) ? names[distance] : "unknown";
}
