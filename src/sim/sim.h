/* sim: what `refit run` would take on a cluster that is not here (docs/architecture.md, "The
 * simulation model").
 *
 * A cluster file describes the machine: nodes of GPUs (or of bare hosts), each GPU's NVLink or
 * PCIe bandwidth per direction and its copy rate, each node's network adapters and which GPUs
 * share them, a per-message and a per-copy latency. Ranks are placed as `refit run` places
 * them: consecutive world ranks fill a node, node-local rank r on GPU r modulo the node's GPUs.
 * The simulation walks the real plan's real schedule (the chunks, blocks, staging and messages
 * the engine makes, from the engine's own rules) and times it with a flow model: within a
 * synchronisation unit (a bucket; in unfused, a tensor of a bucket) every flow runs at once,
 * links shared max-min fairly (progressive filling); units run one after the other; fused
 * overlaps packing a bucket with the flight of the one before, as the engine does. Nothing is
 * allocated for the model's weights, and the schedule is read a window at a time, so a
 * trillion-parameter plan fits in the plan's own memory. */
#ifndef RF_SIM_H
#define RF_SIM_H

#include <stdint.h>

#include "engine/engine.h"
#include "plan/plan.h"
#include "result/result.h"

/* ---- clusters ------------------------------------------------------------------------------ */

#define RF_SIM_NAME_MAX 64
#define RF_SIM_TEXT_MAX 256

/* One cluster file (configs/clusters/README.md is the schema). Rates are bytes per second per
 * direction, times seconds, sizes bytes. Every node is alike. */
typedef struct {
  char name[RF_SIM_NAME_MAX];
  char description[RF_SIM_TEXT_MAX];
  char path[1024];
  int nodes;
  int gpus;           /* per node; 0: hosts without GPUs */
  int ranks_per_node; /* how many consecutive world ranks one node takes */
  char gpu_name[RF_SIM_NAME_MAX];
  double gpu_memory;    /* bytes per GPU */
  double gpu_copy;      /* one GPU copying inside its own memory: packs, unpacks, two processes on
                           one GPU */
  double gpu_quantize;  /* one GPU quantizing for a rollout format, in bytes of the trainer-dtype
                           elements it reads a second (it writes the quantized bytes and scales
                           too); absent from the file: 0.895 of gpu_copy, as measured */
  double nvlink;        /* per GPU per direction; 0: GPUs of a node talk over PCIe */
  double pcie;          /* per GPU per direction */
  int nics;             /* network adapters per node; GPU g uses adapter g * nics / gpus */
  double nic;           /* per adapter per direction */
  double host_memcpy;   /* one rank's memcpy in host memory */
  double host_quantize; /* one rank quantizing in host memory, as gpu_quantize; absent from the
                           file: RF_SIM_HOST_QUANTIZE */
  /* Delta refits (sim_delta.c): encoding, in bytes read a second (both versions of what is
   * sent), and applying, in bytes touched a second (the encoded bytes read and the changed
   * values written), on a GPU and in host memory; absent from the file: the memory's copy
   * rate (gpu_copy, host_memcpy), as RF_SIM_DELTA_RATES says why. */
  double gpu_delta_encode, gpu_delta_apply, host_delta_encode, host_delta_apply;
  double host_mpi;        /* one rank sending, or receiving, to a process of its node */
  double host_memory;     /* bytes per node */
  double latency_node;    /* one message inside a node */
  double latency_network; /* one message between nodes */
  double latency_copy;    /* one pack or unpack copy (a kernel launch on a GPU) */
  /* Registration (sim_register.c), both optional, 0 when absent: one registration's fixed
   * cost (an MPI window's creation, a region's registration with the network), and the rate
   * at which a rank registers its bytes (window memory allocated and zeroed, pages pinned). */
  double latency_register;
  double host_register;
} rf_cluster;

/* The most a cluster file may say, in refit's units: a rate of a petabyte a second, a latency
 * of a second, a node or GPU of a million GiB. Beyond them a number is a typo, and near the
 * largest double the flow model's arithmetic turns to infinities; the calibration's fit keeps
 * the rates it moves inside them too. */
#define RF_SIM_RATE_MAX 1e15
#define RF_SIM_LATENCY_MAX 1.0
/* The fit's floor: a kilobyte a second, a picosecond. */
#define RF_SIM_RATE_MIN 1e3
#define RF_SIM_LATENCY_MIN 1e-12
#define RF_SIM_MEMORY_MAX (1e6 * 1073741824.0)

/* The quantize rates a cluster file that does not give them gets. On a GPU the quantizer is
 * memory-bound like a copy: refit's fp8 kernel quantized 3.98 GiB of bf16 in 2.223 ms where a
 * device copy of the same bytes took 1.989 ms on the lent H200 (results/h200/README.md, fp8
 * quantize 0.895), so a GPU quantizes at 0.895 of its copy rate. On the CPU the quantizer works
 * element by element (a block's amax, a scale, each element rounded), far below memcpy: the
 * host figure is this VM's (configs/clusters/vm-2core.json), an approximation to calibrate on
 * the real host. */
#define RF_SIM_GPU_QUANTIZE_OF_COPY 0.895
#define RF_SIM_HOST_QUANTIZE 0.06e9

/* RF_SIM_DELTA_RATES: the delta rates a cluster file that does not give them gets, the
 * memory's copy rate for both. Encoding reads the previous and the current version of each
 * piece and writes a few bytes: memory-bound like a copy, whose own reads go at the copy rate,
 * so 2 n e bytes read at the copy rate is what a good kernel reaches (the encode bar is
 * 0.8 of exactly that). Applying reads the encoded bytes and scatters the changed values; at
 * the copy rate per byte touched it is charged as a copy of both, which leaves room for the
 * scatter's partly used memory lines. Both are estimates until a calibration fits them. */

/* Loads a cluster: a path to a JSON file, or the name of one shipped in configs/clusters
 * ($REFIT_CLUSTER_DIR first). A missing key, a number that is not positive or is above the
 * limits above, an unknown key or a file that does not parse is one line naming the file and
 * the key, and RF_ERR_CONFIG. */
rf_status rf_cluster_load(const char *name_or_path, rf_cluster *out);

/* RF_OK when a world of `world` ranks fits on the cluster, with `device` the cluster has GPUs,
 * and with `mapping` (a transport that maps its peers' memory) the world fits on one node;
 * else one line and RF_ERR_CONFIG. Cheap: checked before the plan is built. */
rf_status rf_cluster_fits(const rf_cluster *c, int world, int device, int mapping);

/* Where a job's ranks run on the cluster, for the planner: refit run's distance classes
 * (topo.h: the same process, the same GPU, the same node, another node), so that p2p prefers
 * the nearest of equal sources as it would there. */
typedef struct {
  const rf_cluster *cluster;
  int world;
  int *node_of; /* [world rank] */
} rf_cluster_placement;
/* Fills *out (valid while p lives) for a world of `world` ranks; RF_ERR_CONFIG (one line) when
 * the cluster has too few ranks. */
rf_status rf_cluster_plan_options(const rf_cluster *c, int world, rf_cluster_placement *p,
                                  rf_plan_options *out);
void rf_cluster_placement_free(rf_cluster_placement *p);

/* ---- the link model ---------------------------------------------------------------------- */

/* What a flow travels over, nearest first; the names are what reports print. */
#define RF_SIM_CLASS_LIST(X)                                                                       \
  X(RF_SIM_PROCESS, "process") /* a copy inside one process */                                     \
  X(RF_SIM_GPU, "gpu")         /* two processes on one GPU */                                      \
  X(RF_SIM_NVLINK, "nvlink")   /* GPUs of one node over NVLink */                                  \
  X(RF_SIM_PCIE, "pcie")       /* GPUs of one node without NVLink */                               \
  X(RF_SIM_HOST, "host")       /* processes of one node, weights in host memory */                 \
  X(RF_SIM_NETWORK, "network") /* another node */
typedef enum { RF_SIM_CLASS_LIST(RF_ENUM_ID) RF_SIM_CLASS_COUNT } rf_sim_class;
RF_ENUM_DECLARE(rf_sim_class);

/* ---- delta refits (sim_delta.c) ---------------------------------------------------------
 *
 * A delta refit sends each piece as what changed since the version the rollout holds
 * (docs/architecture.md, "Delta refits"). --delta chooses how, as refit run's engine does
 * (rf_delta_choice, engine.h): off (whole versions), auto (each piece in its smallest
 * encoding), sparse (int32 offsets and values) or bitmask (a bit per element and the changed
 * values). */

/* The encodings a piece travels in, in the order auto prefers them on a tie. */
#define RF_SIM_ENCODING_LIST(X)                                                                    \
  X(RF_SIM_ENCODING_DENSE, "dense")                                                                \
  X(RF_SIM_ENCODING_BITMASK, "bitmask")                                                            \
  X(RF_SIM_ENCODING_SPARSE, "sparse")
typedef enum { RF_SIM_ENCODING_LIST(RF_ENUM_ID) RF_SIM_ENCODING_COUNT } rf_sim_encoding;
RF_ENUM_DECLARE(rf_sim_encoding);

/* The one place the simulation says what an encoding costs: the bytes of a piece of n
 * elements of e bytes with c of them changed (c may be fractional: an expected count), the
 * engine's own sizes (rf_delta_size: a 32-byte header, then dense n e; sparse c (4 + e);
 * bitmask 4 ceil(n / 32) + c e). */
double rf_sim_encoded_bytes(rf_sim_encoding enc, int64_t n, double c, int64_t e);
/* The encoding `delta` sends such a piece in: auto's smallest (ties: dense, bitmask, sparse),
 * or the one it names. */
rf_sim_encoding rf_sim_delta_encoding(rf_delta_choice delta, int64_t n, double c, int64_t e);

/* What a simulation assumes of the versions: the fraction of elements changed since the
 * version the rollout holds, each independently (a piece of n expects F n changed), and the
 * encoding choice. Zero is off: whole versions. */
typedef struct {
  rf_delta_choice choice;
  double changed; /* F, 0 to 1 */
} rf_sim_delta_model;

/* *out = {delta, changed}, or one line naming the fraction and RF_ERR_USAGE when it is not a
 * number from 0 to 1: the entry point for --update (its changed fraction) and --delta. */
rf_status rf_sim_delta_model_init(rf_delta_choice delta, double changed, rf_sim_delta_model *out);

typedef struct {
  rf_mode mode;
  int64_t bucket_size; /* as --bucket-size: 0 = one bucket per stage */
  int device;          /* weights in GPU memory (1) or in host memory (0) */
  int mapping;         /* the transport maps its peers' memory (ipc, shm): every piece is one
                          copy straight across, no messages, no staging; else messages (mpi,
                          nccl) */
  rf_wire wire;        /* on messages, which chunks travel in place (rf_engine_wire_rule) */
  int ordered;         /* the transport moves messages in the order posted (rf_transport_ops) */
  rf_sim_delta_model delta; /* zero: whole versions */
} rf_sim_options;

/* The wire rule a simulation of `ops` walks with (rf_sim_options.wire): the engine's for host
 * weights. GPU weights over a host transport are walked as if the wire were their own memory,
 * as every simulation before the rule was; the engine stages all of their chunks instead,
 * which predictions calibrated against published figures do not count yet. */
rf_wire rf_sim_wire(const rf_transport_ops *ops, int device);

/* The prediction. Phases follow result.h: setup is not modelled (0), reshape is star's first
 * stage, pack/transfer/unpack as the engine times them, total their sum (fused: the pipeline's
 * wall clock, with transfer what pack and unpack leave over). */
typedef struct {
  double phase[RF_PHASE_COUNT];
  double latency_s; /* the part of transfer that is per-message latency */
  /* Quantizing for a rollout format (--rollout-dtype): the trainer-dtype bytes its quantizing
   * ranks read, in their packs (the source quantizes into staging, or a local piece on its way)
   * and in their unpacks (the destination quantizes landed pieces; over a mapping transport the
   * rank that pulls), at the cluster's quantize rate; and the part of pack and unpack it takes
   * (what the copies take with it less what they take without). All 0 without a format. */
  int64_t quantize_pack_bytes, quantize_unpack_bytes;
  double quantize_rate; /* bytes a second: the GPU's or the host's, as the weights live */
  double quantize_s;
  /* Every chunk of the transfer stage, and of the forward stages, as it crosses: encoded with a
   * delta, else the plan's wire bytes (a local copy always whole). */
  int64_t wire_transfer_bytes, wire_forward_bytes;
  /* Delta refits (rf_sim_options.delta), all 0 when off: the chunks sent as deltas, per
   * encoding, and their bytes whole (as a dense refit sends them); the bytes the encoders read
   * (both versions) and the appliers touch (encoded bytes read, changed values written), at the
   * cluster's delta rates, and the part of pack and unpack they take, as quantize_s. */
  int64_t delta_chunks[RF_SIM_ENCODING_COUNT];
  int64_t delta_whole_bytes;
  int64_t encode_bytes, apply_bytes;
  double encode_rate, apply_rate; /* bytes a second: the GPU's or the host's, as the weights live */
  double encode_s, apply_s;
  double bound_s; /* the sum over units of their tightest link's bytes / capacity: with units
                     one after the other, no schedule of these buckets moves faster */
  int64_t class_bytes[RF_SIM_CLASS_COUNT];
  int64_t messages;                 /* per iteration, all ranks, as refit run counts them */
  int64_t units, buckets;           /* synchronisation units and buckets, every stage */
  char bottleneck[RF_SIM_NAME_MAX]; /* the link that was the tightest for the longest */
  double bottleneck_bytes, bottleneck_capacity; /* its bytes over the run, its rate */
  double bottleneck_utilisation;                /* its bytes / capacity / the refit's total time */
  int nodes_used, ranks;
  /* Memory per world rank, bytes: trainer shards, star coupling buffers, rollout tensors and
   * staging (the engine's arenas and buffers, counted, not allocated), and with a delta the
   * last version each trainer rank sent, which it keeps to encode the next against. */
  int64_t *shards, *coupling, *rollout, *staging, *previous;
  int peak_rank;
  int64_t peak_bytes;  /* the largest rank's sum */
  int64_t device_peak; /* the fullest GPU (or host), all its ranks together */
  double device_capacity;
  int fits; /* device_peak <= device_capacity */
} rf_sim_result;

/* Simulates one mode of a plan on a cluster. A job that needs more ranks than the cluster has,
 * or device weights on a cluster without GPUs, is one line and RF_ERR_CONFIG. The caller frees
 * the result with rf_sim_result_free whatever happens. */
rf_status rf_simulate(const rf_plan *plan, const rf_cluster *cluster, const rf_sim_options *o,
                      rf_sim_result *out);
void rf_sim_result_free(rf_sim_result *r);

/* ---- registration (sim_register.c) ---------------------------------------------------------
 *
 * The setup step `register` of a one-sided transport, once per job: MPI windows are collective,
 * so every rank makes every window any rank makes: one per arena (--register arena), or one per
 * tensor of an arena that some rank holds part of, as many as the rank that holds the most
 * (--register tensor). Per arena the MPI library also allocates the arenas as it makes their
 * windows, each rank its own bytes at host_register; per tensor the windows lie over memory
 * refit allocated before. */
typedef struct {
  int64_t windows;    /* each rank's */
  int64_t peak_bytes; /* the most one rank registers */
  int modelled;       /* the cluster gives latency_us.register or node.host.register_GBps */
  double seconds;     /* windows * latency_register (+ peak_bytes / host_register per arena) */
} rf_sim_register;
rf_status rf_sim_registration(const rf_plan *plan, const rf_cluster *c, rf_register_unit unit,
                              rf_sim_register *out);

/* ---- the lower bound (sim_bound.c) ---------------------------------------------------------
 *
 * The least time any plan could take for the job on the cluster, whatever its pieces, schedule
 * or relays (docs/architecture.md, "The lower bound"): the largest over the link model's
 * constraints of the bytes that must cross it over its rate. Every byte a rollout rank keeps
 * counts at the rollout's size of it (fp8 where the rollout quantizes, without scales, which
 * the destination can compute); latencies count nothing. */
typedef struct {
  double seconds;                /* 0 when nothing must move */
  char binding[RF_SIM_TEXT_MAX]; /* the constraint that gives it: "NIC ingress of node 1 (8
                                    adapters, 400 GB/s)", "ingress of the GPU of rollout rank 3
                                    (node 1 gpu 3: NVLink 450 + NIC 50 GB/s)" */
} rf_sim_bound;

/* The bound for weights in GPU (device) or host memory over a transport that maps memory
 * (mapping) or sends messages, with ranks placed as rf_simulate places them; a job the
 * cluster cannot hold is one line and RF_ERR_CONFIG, as there. It reads each tensor's boxes
 * once: far less time than the plan takes to build. */
rf_status rf_sim_lower_bound(const rf_layout *lay, const rf_cluster *cluster, int device,
                             int mapping, rf_sim_bound *out);
/* The same for a delta refit (NULL or off: the bound above). Every byte that crosses a link
 * counts at the least any piece's encoding could make of it, the per-element minimum of the
 * encodings `delta` allows (headers and ceil(n / 8) dropped); every byte a rollout rank keeps
 * counts at the changed fraction of it, written at the faster of the copy and the apply rate. */
rf_status rf_sim_lower_bound_delta(const rf_layout *lay, const rf_cluster *cluster, int device,
                                   int mapping, const rf_sim_delta_model *delta, rf_sim_bound *out);

/* ---- calibration ------------------------------------------------------------------------- */

/* A job's synchronisation units, recorded once so that it can be timed again and again under
 * other rates (the fit below). Small jobs only: it holds every unit's flows. */
typedef struct rf_sim_trace rf_sim_trace;
rf_status rf_sim_trace_record(const rf_plan *plan, const rf_cluster *cluster,
                              const rf_sim_options *o, rf_sim_trace **out);
/* The plain limits `refit run --calibrate` measures, as traces: every pair's bytes in one
 * message, all pairs at once (limit_mpi_s), and each rank copying what it receives
 * (limit_memcpy_s). */
rf_status rf_sim_trace_limit(const rf_plan *plan, const rf_cluster *cluster, int device,
                             rf_limit limit, rf_sim_trace **out);
void rf_sim_trace_free(rf_sim_trace *t);
/* The trace's total under the cluster's rates. */
rf_status rf_sim_trace_time(const rf_sim_trace *t, const rf_cluster *cluster, double *seconds);

typedef struct {
  const rf_sim_trace *trace;
  double measured_s; /* the run's median, or the limit */
  const char *label; /* for the report: "run 0003 grouped", "run 0003 limit mpi" */
} rf_sim_sample;

/* The rates a calibration sets, and how well the fit came out: three, and of the memory kind
 * the quantize rate where a sample quantizes, the delta encode rate where one encodes and the
 * apply rate where one applies (a run without them says nothing about them). */
#define RF_SIM_KNOBS 6
typedef struct {
  int count;                       /* knobs fitted: 3 to 6 */
  const char *names[RF_SIM_KNOBS]; /* "host.mpi_GBps", ... */
  double before[RF_SIM_KNOBS], after[RF_SIM_KNOBS];
  int samples;
  double worst_error; /* max |predicted / measured - 1| over the samples */
} rf_sim_fit;

/* Fits the cluster's rates for weights in host (device = 0) or GPU memory to the samples:
 * per-rank bandwidth, copy rate and per-message latency for host memory; GPU copy rate,
 * per-message and per-copy latency for device memory; and the memory's quantize rate when a
 * sample quantizes for a rollout format, its delta encode and apply rates when a sample sends
 * deltas. Least squares of log(predicted /
 * measured) over all samples, by coordinate descent in log space; the cluster is updated. */
rf_status rf_sim_calibrate(rf_cluster *cluster, int device, const rf_sim_sample *samples, int n,
                           rf_sim_fit *out);

#endif
