/* sim internals: the links of a placed job (sim_net.c), the max-min flow solver (sim_flow.c),
 * the walk that turns a schedule into synchronisation units (sim_walk.c) and their timing
 * (sim_time.c), shared by the simulation (sim.c) and the calibration (sim_fit.c). Nothing
 * outside src/sim includes this header. */
#ifndef RF_SIM_INTERNAL_H
#define RF_SIM_INTERNAL_H

#include "sim.h"

/* ---- links --------------------------------------------------------------------------------
 *
 * A resource is one direction of one link, or one copy engine: each node has, per GPU, its copy
 * rate, its NVLink (or PCIe) out and in, and per adapter its network out and in; each rank has,
 * for host memory, its memcpy, and its send and receive paths to other processes. A flow uses
 * up to four of them. */
typedef enum {
  SIM_RES_GPU_COPY,
  SIM_RES_GPU_OUT,
  SIM_RES_GPU_IN,
  SIM_RES_NIC_OUT,
  SIM_RES_NIC_IN,
  SIM_RES_RANK_COPY,
  SIM_RES_RANK_OUT,
  SIM_RES_RANK_IN,
  SIM_RES_KIND_COUNT
} sim_res_kind;

#define SIM_ROUTE_MAX 4

typedef struct {
  int world, device;
  int mapping, push; /* a mapping transport; its sources copy (push) rather than the
                        destinations (pull), as rf_engine_pushes decides */
  int ordered;       /* the transport moves messages in the order posted (rf_sim_options) */
  int nodes, gpus, nics, ranks_per_node;
  int nvlink;    /* GPUs of a node talk over NVLink (else PCIe) */
  int per_node;  /* resources per node: 3 per GPU, 2 per adapter */
  int resources; /* nodes * per_node + 3 per world rank */
} sim_net;

/* Places `world` ranks; RF_ERR_CONFIG (one line) when the cluster is too small, has no GPU for
 * device weights, or (`mapping`) needs more than one node for a transport that maps memory.
 * push starts at 0: the caller sets it from the plan. */
rf_status sim_net_init(sim_net *n, const rf_cluster *c, int world, int device, int mapping);
/* The resources a flow from world rank src to dst uses, and its class; returns how many. Over a
 * mapping transport the flow is the one copy of the rank that copies. */
/* The adapter that node-local GPU (or, without GPUs, node-local rank) `local` of `per` sends
 * and receives by, of a node's `nics`: the one an HGX tray wires beside it. sim_net.c routes by
 * it and sim_bound.c counts the adapters a job can use by it. */
static inline int sim_adapter_of(int local, int nics, int per) {
  return (int)((int64_t)local * nics / per);
}
int sim_net_route(const sim_net *n, int src, int dst, int *res, rf_sim_class *cls);
/* The copy engine a rank packs and unpacks with. */
int sim_net_copy(const sim_net *n, int rank);
sim_res_kind sim_net_kind(const sim_net *n, int res);
/* Capacity of every resource under the cluster's rates, into cap[n->resources]. */
void sim_net_capacities(const sim_net *n, const rf_cluster *c, double *cap);
/* "nic_in node 3 adapter 1", "nvlink_out node 0 gpu 2", "host_out rank 5". */
void sim_net_name(const sim_net *n, int res, char *buf, size_t len);
double sim_latency(const rf_cluster *c, rf_sim_class cls);

/* ---- max-min flows ----------------------------------------------------------------------- */

typedef struct {
  double bytes;
  int nres;
  int res[SIM_ROUTE_MAX];
} sim_flow;

typedef struct sim_solver sim_solver;
rf_status sim_solver_new(int resources, sim_solver **out);
void sim_solver_free(sim_solver *s);
/* Runs the flows from time 0, every one at once, each link shared max-min fairly among the
 * flows crossing it (progressive filling), rates set again whenever a flow ends; returns when
 * the last ends. Flows of no bytes take no time. */
rf_status sim_solve(sim_solver *s, const sim_flow *flows, int n, const double *cap, double *end);

/* Flows that stay in flight across units: fused posts a bucket while the one before is still
 * moving, so their flows share the links for a while. Each flow has its item's group; fluid
 * time runs on from one call to the next. */
typedef struct {
  sim_flow *flows; /* bytes: what is left of each */
  int *group;
  int count, cap;
  double now;
} sim_fluid;

/* Adds the flows that have bytes and links, from fl->now, as group `group`. */
rf_status sim_fluid_add(sim_fluid *fl, const sim_flow *f, int n, int group);
/* Moves every flow in flight on, max-min as sim_solve, until time `until`, or (target >= 0)
 * until no flow of group `target` is left; fl->now is where it stopped. */
rf_status sim_fluid_run(sim_fluid *fl, sim_solver *s, const double *cap, double until, int target);
void sim_fluid_free(sim_fluid *fl);

/* ---- synchronisation units ----------------------------------------------------------------
 *
 * What happens between two waits: flows between rank pairs (bytes, messages), and on each rank
 * the bytes it packs into staging before and unpacks after, with the number of copies. A pair
 * of no messages is a copy (a local one, or any over a mapping transport): its copying ranks
 * launch their unit's copies as one batch. */
typedef struct {
  int src, dst; /* world ranks; equal for a local copy */
  int64_t bytes;
  int messages;
} sim_pair;

/* A rank's copies of a unit, and what it quantizes among them (trainer-dtype bytes read), the
 * bytes its delta encoder reads and its delta applier touches: each shares the rank's copy
 * engine with its copies, at its own rate of the cluster's. */
typedef struct {
  int rank;
  int64_t bytes;
  int copies;
  int64_t quantized;
  int64_t encoded, applied;
} sim_copy;

typedef struct {
  rf_stage stage;
  int step;    /* fanout's forward stage: its step, each a stage of its own; 0 otherwise */
  int bucket;  /* the stage's bucket number (of the first, for a unit of several) */
  int buckets; /* buckets that end with this unit: 1, 0 inside a bucket (unfused), all the
                  stage's for fused over a mapping transport (one launch a stage) */
  int npairs, npack, nunpack;
  const sim_pair *pairs;
  const sim_copy *pack, *unpack;
  int notes;   /* mapping transports: the ready and done notes of the stage's busiest rank, one
                  per-message latency each */
  int round;   /* the round (rf_rounds) of a unit walked in rounds; else its bucket */
  int forward; /* a forward step's bucket: fused completes the bucket in flight first when it
                  belongs to an earlier round, since this one sends what that delivered */
} sim_unit;

typedef rf_status (*sim_unit_fn)(void *ctx, const sim_unit *u);

/* What the walk saw cross, for the result (rf_sim_result's fields of the same names). */
typedef struct {
  int64_t wire_transfer_bytes, wire_forward_bytes;
  int64_t delta_chunks[RF_SIM_ENCODING_COUNT];
  int64_t delta_whole_bytes;
} sim_tally;

/* Walks every stage of the plan's schedule in `mode` (reshape, transfer, then fanout's forward
 * steps one after another, as the engine runs them) and hands each unit to fn; fills the
 * staging each world rank needs (the engine's alloc_staging, counted), staging[world], and
 * the tally (either may be NULL). */
rf_status sim_walk(const rf_plan *plan, const rf_sim_options *o, int64_t *staging, sim_tally *tally,
                   sim_unit_fn fn, void *ctx);

/* ---- delta refits (sim_delta.c) ---------------------------------------------------------- */

int sim_delta_on(const rf_sim_delta_model *d);
/* One chunk sent as a delta: its encoding, its bytes on the wire, the bytes its encoder reads
 * (both versions of it) and its applier touches (the encoded bytes and the changed values). */
typedef struct {
  rf_sim_encoding encoding;
  int64_t wire, read, applied;
} sim_delta_chunk;
/* A chunk of `elements` elements of `esize` bytes that puts `bytes` on the wire whole. */
sim_delta_chunk sim_delta_encode(const rf_sim_delta_model *d, int64_t elements, int64_t esize,
                                 int64_t bytes);
/* The least bytes any encoding `d` allows, or dense, can send per byte of elements of e bytes:
 * the lower bound's factor for bytes that cross a link. */
double sim_delta_least(const rf_sim_delta_model *d, int64_t e);

/* ---- timing ------------------------------------------------------------------------------ */

/* The quantize rate of the memory the weights live in, bytes of trainer-dtype elements read a
 * second; the delta encode and apply rates of that memory. */
double sim_quantize_rate(const rf_cluster *c, int device);
double sim_encode_rate(const rf_cluster *c, int device);
double sim_apply_rate(const rf_cluster *c, int device);

/* The running clock of one mode over the units of every stage. */
typedef struct {
  const sim_net *net;
  const rf_cluster *c;
  rf_mode mode;
  const double *cap;
  sim_solver *solver;
  sim_flow *flows;
  int flow_cap;
  double *latency; /* [world] scratch */
  /* per stage: */
  double pack, transfer, unpack, latency_s;
  /* fused's pipeline (engine_rounds.c, run_fused): the engine's thread (packs, waits,
   * unpacks), the flows in flight (each bucket's a group of its own, numbered in posting
   * order), and per lane the bucket posted last (open), not yet waited for */
  double cpu;
  sim_fluid fluid;
  struct {
    int open, group, round;
    double posted; /* when its rank that posts the most has posted its last message */
    double single; /* on GPUs, a message's latency after the flows */
    double tail;   /* what lands after both (latency in host memory, launches) */
    double unpack;
  } lane[2];  /* [0] the stage's buckets, [1] the forward buckets */
  int groups; /* buckets posted in the stage: the last one's group */
  double last_posted, last_single, last_tail;
  rf_stage stage;
  int step, started;
  /* wall clock per stage; the forward steps add up in stage_total[RF_STAGE_FORWARD] */
  double stage_total[3];
  /* totals over every stage */
  double sum_pack, sum_unpack, sum_latency;
  double sum_quantize; /* the part of the packs and unpacks that quantizes */
  int64_t quantize_pack_bytes, quantize_unpack_bytes;
  double sum_encode,
      sum_apply; /* the part of the packs that encodes, of the unpacks that applies */
  int64_t encode_bytes, apply_bytes;
  double *res_bytes; /* [resources] bytes per link over the run, or NULL */
  /* With res_bytes: the unit's bytes per link (its links listed in touched), and per link the
   * seconds of the units it was the tightest link of; bound sums each unit's tightest link's
   * bytes over capacity, the max-over-links bound of units that run one after the other. */
  double *unit_bytes, *limiting, bound;
  int *touched, ntouched;
  int64_t class_bytes[RF_SIM_CLASS_COUNT];
  int64_t messages, units, buckets;
} sim_clock;

rf_status sim_clock_init(sim_clock *k, const sim_net *net, const rf_cluster *c, rf_mode mode,
                         const double *cap, int count_links);
void sim_clock_free(sim_clock *k);
rf_status sim_clock_unit(sim_clock *k, const sim_unit *u);
/* Ends the last stage; fills the phases (reshape, encode, pack, transfer, unpack, apply,
 * total). */
rf_status sim_clock_finish(sim_clock *k, double *phase);

#endif
