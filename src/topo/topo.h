/* topo: the machine as hwloc sees it (GPUs, network adapters, NUMA nodes, cores and the PCI
 * tree between them) and where each rank of a node should run.
 *
 * A topology is the live machine, or an hwloc XML file (--topology-xml or HWLOC_XMLFILE) so
 * that placement can be decided and tested for large GPU servers without the hardware. Every
 * node of a job is assumed to look like the topology given. Placement is a pure function of
 * the topology and the options; binding the process to the result is the caller's business. */
#ifndef RF_TOPO_H
#define RF_TOPO_H

#include "core/core.h"

typedef struct rf_topo rf_topo;

#define RF_TOPO_NAME_MAX 32
#define RF_TOPO_BUSID_MAX 16
#define RF_TOPO_CPUS_MAX 256

/* A GPU: a PCI device with a CUDA/NVML OS device (or of PCI class 3D controller). GPUs are
 * numbered in PCI bus id order, which is CUDA's order under CUDA_DEVICE_ORDER=PCI_BUS_ID. */
typedef struct {
  char name[RF_TOPO_NAME_MAX];    /* "cuda0", else "nvml0", else the bus id */
  char bus_id[RF_TOPO_BUSID_MAX]; /* "0000:19:00.0" */
  int numa;                       /* logical index of its NUMA node; -1 when unknown */
} rf_topo_gpu;

/* A network adapter: the OpenFabrics name (mlx5_0, what NCCL_IB_HCA takes) when the PCI
 * device has one, else its network interface (eth0). */
typedef struct {
  char name[RF_TOPO_NAME_MAX];
  char bus_id[RF_TOPO_BUSID_MAX];
  int numa;
} rf_topo_nic;

/* Loads the topology with every I/O device kept. xml_path "" or NULL means HWLOC_XMLFILE when
 * that is set, else this machine. A file that does not load gives one line, RF_ERR_CONFIG. */
rf_status rf_topo_load(rf_topo **out, const char *xml_path);
/* A synthetic topology ("pack:2 numa:1 core:8 pu:1"): no I/O devices, for tests. */
rf_status rf_topo_load_synthetic(rf_topo **out, const char *description);
void rf_topo_free(rf_topo *topo);

int rf_topo_gpu_count(const rf_topo *topo);
const rf_topo_gpu *rf_topo_gpu_at(const rf_topo *topo, int i);
int rf_topo_nic_count(const rf_topo *topo);
const rf_topo_nic *rf_topo_nic_at(const rf_topo *topo, int i);
int rf_topo_numa_count(const rf_topo *topo);
int rf_topo_core_count(const rf_topo *topo);

/* Distance classes between two PCI devices of one node (GPUs, NICs), and between ranks. */
enum {
  RF_TOPO_SAME_DEVICE = 0, /* the same device */
  RF_TOPO_SAME_SWITCH = 1, /* below a common PCI bridge that is not the host bridge */
  RF_TOPO_SAME_NUMA = 2,   /* attached to the same NUMA node */
  RF_TOPO_SAME_NODE = 3,   /* anywhere else in the machine */
};
int rf_topo_gpu_distance(const rf_topo *topo, int gpu_a, int gpu_b);
int rf_topo_gpu_nic_distance(const rf_topo *topo, int gpu, int nic);

/* --bind: auto binds to cores where every rank gets cores of its own and to the whole NUMA
 * node otherwise; cores insists on cores of its own (an error when there are too few); numa
 * binds to the NUMA node (shared); none leaves the rank unbound. */
#define RF_BIND_LIST(X)                                                                            \
  X(RF_BIND_AUTO, "auto")                                                                          \
  X(RF_BIND_NONE, "none")                                                                          \
  X(RF_BIND_CORES, "cores")                                                                        \
  X(RF_BIND_NUMA, "numa")
typedef enum { RF_BIND_LIST(RF_ENUM_ID) RF_BIND_COUNT } rf_bind;
RF_ENUM_DECLARE(rf_bind);

/* --nic: auto exports NCCL_IB_HCA as the network adapter nearest each rank's GPU. */
#define RF_NIC_LIST(X)                                                                             \
  X(RF_NIC_NONE, "none")                                                                           \
  X(RF_NIC_AUTO, "auto")
typedef enum { RF_NIC_LIST(RF_ENUM_ID) RF_NIC_COUNT } rf_nic;
RF_ENUM_DECLARE(rf_nic);

typedef struct {
  int ranks_per_node;
  int device; /* --device: every rank's GPU; -1 = node-local rank modulo the GPU count */
  /* The transport that needs a GPU of its own for each rank (NCCL refuses two ranks on one
   * GPU), named in the error when there are too few; NULL when ranks may share one. */
  const char *gpu_per_rank;
  rf_bind bind;
} rf_topo_place_options;

/* Where node-local rank `local_rank` runs. */
typedef struct {
  int local_rank;
  int gpu;                        /* -1: none */
  char bus_id[RF_TOPO_BUSID_MAX]; /* "-" without a GPU */
  char cpus[RF_TOPO_CPUS_MAX];    /* PU os indexes as a list, "0-3,16-19"; "-" = unbound */
  int numa;                       /* the NUMA node its memory is bound to; -1 = unbound */
  char nic[RF_TOPO_NAME_MAX];     /* nearest network adapter; "-" when the node has none */
} rf_topo_place;

/* Places ranks_per_node ranks on one node: out[r] for node-local rank r.
 *  - GPU: --device, else r % GPUs. More ranks than GPUs with gpu_per_rank, or a --device out of
 *    range, is one line and RF_ERR_USAGE.
 *  - NUMA node: the GPU's; without GPUs the ranks are spread over the NUMA nodes in blocks.
 *  - cores: the cores of that NUMA node split evenly, in order, among the ranks placed there,
 *    so no two ranks share a core; with more ranks than cores the hardware threads are split
 *    instead, and with more ranks than threads --bind cores fails (auto falls back to numa).
 *  - NIC: for each GPU, the smallest distance class; ties go to the NIC with fewest GPUs so
 *    far, so two GPUs on a switch with two NICs get one each. Ranks without a GPU take the
 *    least used NIC of their NUMA node. */
rf_status rf_topo_place_node(const rf_topo *topo, const rf_topo_place_options *options,
                             rf_topo_place *out);

/* The planner's distance between world ranks (rf_distance_fn in plan/plan.h), with nodes of
 * ranks_per_node consecutive world ranks, each placed as `place` says. */
typedef struct {
  const rf_topo *topo;
  int ranks_per_node;
  const rf_topo_place *place; /* [ranks_per_node] */
} rf_topo_distance_ctx;

enum {
  RF_DIST_PROCESS = 0, /* the same process: a copy */
  RF_DIST_GPU = 1,     /* two processes on one GPU */
  RF_DIST_SWITCH = 2,
  RF_DIST_NUMA = 3,
  RF_DIST_NODE = 4,
  RF_DIST_NETWORK = 5, /* another node */
};
int rf_topo_distance(void *ctx, int src_world_rank, int dst_world_rank);
/* "process", "gpu", "switch", "numa", "node", "network". */
const char *rf_topo_distance_name(int distance);

/* The same distances as a table that needs no topology, so that one rank can decide them and
 * every rank can plan with them (topo_bind.c). Nodes are told apart by node_of, not by rank
 * arithmetic, so any mapping of ranks to nodes works; nodes larger than the one the table was
 * made on get RF_DIST_NODE for the ranks beyond it. */
typedef struct {
  int ranks_per_node; /* the side of `local` */
  const int *local;   /* [a * ranks_per_node + b]: between node-local ranks a and b */
  int world_size;
  const int *node_of;  /* [world rank]: any id that is equal for ranks of one node */
  const int *local_of; /* [world rank]: node-local rank */
} rf_topo_distance_table;

/* out[a * n + b] = rf_topo_distance between node-local ranks a and b of one node placed as
 * place[0 .. n) says. */
void rf_topo_distance_matrix(const rf_topo *topo, const rf_topo_place *place, int n, int *out);
/* rf_distance_fn over an rf_topo_distance_table. */
int rf_topo_table_distance(void *table, int src_world_rank, int dst_world_rank);

/* Whether the topology is this machine's (not a file describing another), so that binding
 * to its cores and numbering CUDA devices by its GPUs make sense. */
int rf_topo_is_this_machine(const rf_topo *topo);

/* Whether two PCI bus ids name the same device, whatever the case of the hex digits and the
 * width of the domain ("0000:b9:00.0", "00000000:B9:00.0"). 0 when either does not parse. */
int rf_topo_same_bus_id(const char *a, const char *b);

/* Binds the calling process to place->cpus (all its threads) and its memory to the NUMA
 * nodes of those cores. An unbound placement ("-") binds nothing. Writes the process's CPU
 * affinity afterwards, as a list, to `affinity`. Failing to bind memory is a warning: some
 * containers forbid it and the cores matter more. */
rf_status rf_topo_bind_self(const rf_topo_place *place, char *affinity, size_t len);

#endif
