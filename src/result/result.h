/* result: what a run measured. Phases, order statistics, one run's result row, and the
 * identity of every rank and link, shared by the engine that measures, io that stores and
 * report that prints. It sits below all three and includes only core.
 *
 * A run's timings are [iteration][rank][phase] seconds, gathered to rank 0. The headline time
 * of an iteration is the slowest rank's total; the table reports the median and p99 of that
 * over the timed iterations. GB/s = 10^9 bytes/s; sizes are bytes. */
#ifndef RF_RESULT_H
#define RF_RESULT_H

#include <stdint.h>

#include "core/core.h"

/* Phases per iteration per rank (docs/architecture.md, "Phases"), in the order an iteration
 * runs them: the ones before `total` are its parts, `verify` is outside it. A delta iteration
 * (--delta) times `encode`, `transfer` and `apply` where a dense one times `pack`, `transfer`
 * and `unpack`; each leaves the other's phases zero. Readers take the phases by their names
 * (the timings' `phases` attribute), never by position: files from before encode and apply
 * hold seven. */
#define RF_PHASE_LIST(X)                                                                           \
  X(RF_PHASE_SETUP, "setup")       /* communicators, handles, buffers: once, cold */               \
  X(RF_PHASE_RESHAPE, "reshape")   /* star: trainer -> coupling layout */                          \
  X(RF_PHASE_ENCODE, "encode")     /* delta: what changed since the kept version, compacted */     \
  X(RF_PHASE_PACK, "pack")         /* boxes into staging buffers */                                \
  X(RF_PHASE_TRANSFER, "transfer") /* messages and local copies (delta: sizes, then pieces) */     \
  X(RF_PHASE_UNPACK, "unpack")     /* staging buffers into rollout tensors */                      \
  X(RF_PHASE_APPLY, "apply")       /* delta: every piece checked, then scattered */                \
  X(RF_PHASE_TOTAL, "total")       /* the iteration, wall clock */                                 \
  X(RF_PHASE_VERIFY, "verify")     /* after the last iteration, untimed in total */

typedef enum { RF_PHASE_LIST(RF_ENUM_ID) RF_PHASE_COUNT } rf_phase;
RF_ENUM_DECLARE(rf_phase);

/* The limits `refit run --calibrate` measures beside a run, in report order; each is stored as
 * the attributes limit_<name>_s and limit_<name>_ratio. */
#define RF_LIMIT_LIST(X)                                                                           \
  X(RF_LIMIT_MEMCPY, "memcpy")           /* host memcpy of the bytes each rank receives */         \
  X(RF_LIMIT_DEVICE_COPY, "device_copy") /* the same bytes device to device */                     \
  X(RF_LIMIT_MPI, "mpi")                 /* every pair's bytes in one MPI message */               \
  X(RF_LIMIT_NCCL, "nccl")               /* the same over plain NCCL send/recv */
typedef enum { RF_LIMIT_LIST(RF_ENUM_ID) RF_LIMIT_COUNT } rf_limit;
RF_ENUM_DECLARE(rf_limit);

/* The job's own setup, once before its first mode, timed apart from the steady state (each
 * mode's `setup` phase above is only its engine's): stored as setup_<name>_s attributes of
 * every run of the job, the slowest rank's seconds. */
#define RF_SETUP_STEP_LIST(X)                                                                      \
  X(RF_SETUP_PLAN, "plan")           /* model, layouts, plan and schedule, on every rank */        \
  X(RF_SETUP_CONTROL, "control")     /* communicators, placement and the handshake */              \
  X(RF_SETUP_GPU, "gpu")             /* choosing the GPU and creating its CUDA context */          \
  X(RF_SETUP_TRANSPORT, "transport") /* NCCL communicators, rma's notes window */                  \
  X(RF_SETUP_ARENAS, "arenas")       /* allocating the weights, and filling them */                \
  X(RF_SETUP_REGISTER, "register")   /* offering them to a mapping transport's peers: rma's        \
                                        windows, shm's and ipc's handles (rf_engine_expose) */
typedef enum { RF_SETUP_STEP_LIST(RF_ENUM_ID) RF_SETUP_STEP_COUNT } rf_setup_step;
RF_ENUM_DECLARE(rf_setup_step);

/* Order statistics of a sample (sorted copy; p99 by nearest rank). */
typedef struct {
  double min, median, p99, max, mean;
} rf_stats;
rf_status rf_stats_of(const double *values, int count, rf_stats *out);
/* The statistics over iterations of one phase's slowest rank: an iteration's phase is over
 * only when its slowest rank is done with it. `timings` is [iteration][rank][RF_PHASE_COUNT]. */
rf_status rf_stats_of_slowest(const double *timings, int iterations, int ranks, int phase,
                              rf_stats *out);

/* A delta run's last iteration, one tensor kind (model.h's kinds, by name): the pieces the
 * trainer ranks sent of that kind per encoding (delta.h's table: dense, sparse, bitmask), their
 * elements and changed elements, and the encoded bytes of those that crossed to another rank. */
typedef struct {
  char kind[32];
  int64_t pieces[3];
  int64_t elements, changed, wire_bytes;
} rf_delta_kind;

/* One row of the table: one run (one mode/plan/transport/bucket combination). */
typedef struct {
  char mode[16], plan[16], transport[16];
  int64_t model_bytes;    /* the model's logical bytes */
  int64_t replica_bytes;  /* bytes received by one rollout replica (algbw's numerator) */
  int64_t transfer_bytes; /* bytes over all links, local copies included (aggregate) */
  int64_t pieces;
  int64_t messages;    /* messages per iteration, all ranks */
  int64_t bucket_size; /* 0 = whole model */
  int iterations;      /* timed */
  int ranks;
  double *timings;      /* [iteration][rank][phase], seconds, owned by the caller */
  rf_stats total;       /* of the per-iteration slowest-rank total */
  double algbw, aggbw;  /* GB/s at the median */
  char verify[16];      /* full | checksum | none */
  int64_t wrong;        /* elements that failed the full check (-1: not checked) */
  int checksum_bad;     /* tensors whose checksums differ (-1: not compared) */
  int64_t peak_staging; /* max over ranks, bytes */
  int64_t peak_rss;     /* max over ranks, bytes */
  /* --update (verify/versions.h): the last version the run moved; how many of its elements
   * (of version_elements; 0 under none) differ from the version before; and the mean seconds
   * the trainer took to make each of the run's versions, outside the phases. */
  int64_t version, version_changed, version_elements;
  double update_s;
  /* --delta (engine.h): the choice ("off" when none), and of the run's last iteration the
   * encoded bytes on the wire (wire_delta_bytes: what every trainer rank sent and every replica
   * forwarded; the dense refit's bytes when it went dense) and of them those the replicas
   * forwarded (fanout, hierarchical), whether it went dense for want of a base, and its pieces
   * per encoding (dense, sparse, bitmask), summed over the ranks; the bytes of the previous
   * version the trainer ranks keep, summed; and over all of the run's iterations the pieces
   * sent dense because their rollout rank's receipt named another version than the trainer
   * kept. wire_dense_bytes: what the dense refit puts on the wire (a quantized rollout's
   * quantized bytes and scales), which the delta is compared with. */
  char delta[16];
  int64_t wire_delta_bytes, wire_delta_forward_bytes, delta_pieces[3], delta_kept_bytes;
  int64_t wire_dense_bytes;
  int64_t delta_stale_pieces;
  /* Of the last iteration's pieces, those encoded from the trainer's marks of what changed
   * (rf_delta_marks), and the bytes of those marks, both summed over the ranks. */
  int64_t delta_marked_pieces, delta_marks_bytes;
  int delta_dense;
  /* The same pieces split by tensor kind, kinds without pieces left out; NULL (count 0) when
   * the last iteration sent no delta. Owned by the caller, as timings are. */
  rf_delta_kind *delta_kinds;
  int delta_kind_count;
  rf_status status; /* RF_OK, RF_ERR_VERIFY or the run's error */
} rf_run_result;

/* Fills total, algbw and aggbw from timings. */
rf_status rf_run_result_summarise(rf_run_result *r);

/* Per-rank identity and placement for the header lines. The string sizes are topo.h's
 * (RF_TOPO_BUSID_MAX, RF_TOPO_CPUS_MAX, RF_TOPO_NAME_MAX); "-" means none. */
typedef struct {
  int rank;
  char host[64];
  long pid;
  int trainer_rank, rollout_rank; /* -1 where absent */
  int gpu;                        /* the GPU's index on its node, in PCI order; -1 = none */
  char bus_id[16];                /* the GPU's PCI bus id, "0000:19:00.0" */
  char cpus[256];                 /* the cores it is placed on, "0-3,16-19" */
  int numa;                       /* the NUMA node its memory is bound to; -1 = none */
  char nic[32];                   /* the network adapter nearest its GPU */
} rf_rank_info;

/* A planned trainer->rollout link between two processes, with its distance class. */
typedef struct {
  int32_t src, dst; /* world ranks */
  int64_t bytes;    /* per iteration, summed over the link's pieces */
  int32_t distance; /* RF_DIST_* of topo.h: smaller is nearer */
  char name[16];    /* the class's name: "process", "gpu", ..., "network" */
} rf_link_info;

/* One shard's bytes, for bit-exact regression against a reference run with the same layout:
 * a trainer shard as stored, or a rollout rank's part of a tensor in row-major order. */
typedef struct {
  int32_t rank;   /* world rank */
  int32_t tensor; /* logical tensor id */
  int32_t role;   /* 0 trainer shard, 1 rollout shard */
  uint64_t xxh3;
} rf_shard_digest;

#endif
