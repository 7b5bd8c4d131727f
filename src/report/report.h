/* report: what a run measured, summarised and printed the nccl-tests way on rank 0.
 *
 * A run's timings are [iteration][rank][phase] seconds, gathered to rank 0. The headline time
 * of an iteration is the slowest rank's total; the table reports the median and p99 of that
 * over the timed iterations. GB/s = 10^9 bytes/s; sizes are bytes. */
#ifndef RF_REPORT_H
#define RF_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "core/core.h"

/* Phases per iteration per rank (design.md §6). Verification is outside `total`. */
#define RF_PHASE_LIST(X)                                                            \
  X(RF_PHASE_SETUP, "setup")     /* communicators, handles, buffers: once, cold */  \
  X(RF_PHASE_RESHAPE, "reshape") /* star: trainer -> coupling layout */             \
  X(RF_PHASE_PACK, "pack")       /* boxes into staging buffers */                  \
  X(RF_PHASE_TRANSFER, "transfer") /* messages and local copies */                 \
  X(RF_PHASE_UNPACK, "unpack")   /* staging buffers into rollout tensors */        \
  X(RF_PHASE_TOTAL, "total")     /* the iteration, wall clock */                   \
  X(RF_PHASE_VERIFY, "verify")   /* after the last iteration, untimed in total */

typedef enum {
#define RF_X_PHASE(id, name) id,
  RF_PHASE_LIST(RF_X_PHASE)
#undef RF_X_PHASE
  RF_PHASE_COUNT
} rf_phase;
const char *rf_phase_name(rf_phase phase);

/* Order statistics of a sample (sorted copy; p99 by nearest rank). */
typedef struct {
  double min, median, p99, max, mean;
} rf_stats;
rf_stats rf_stats_of(const double *values, int count);

/* One row of the table: one run (one mode/plan/transport/bucket combination). */
typedef struct {
  char mode[16], plan[16], transport[16];
  int64_t model_bytes;      /* the model's logical bytes */
  int64_t replica_bytes;    /* bytes received by one rollout replica (algbw's numerator) */
  int64_t transfer_bytes;   /* bytes over all links, local copies included (aggregate) */
  int64_t pieces;
  int64_t messages;         /* messages per iteration, all ranks */
  int64_t bucket_size;      /* 0 = whole model */
  int iterations;           /* timed */
  int ranks;
  double *timings;          /* [iteration][rank][phase], seconds, owned by the caller */
  rf_stats total;           /* of the per-iteration slowest-rank total */
  double algbw, aggbw;      /* GB/s at the median */
  char verify[16];          /* full | checksum | none */
  int64_t wrong;            /* elements that failed the full check (-1: not checked) */
  int checksum_bad;         /* tensors whose checksums differ (-1: not compared) */
  int64_t peak_staging;     /* max over ranks, bytes */
  int64_t peak_rss;         /* max over ranks, bytes */
  rf_status status;         /* RF_OK, RF_ERR_VERIFY or the run's error */
} rf_run_result;

/* Fills total, algbw and aggbw from timings. */
void rf_run_result_summarise(rf_run_result *r);

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

/* The links as header text: one line per link for jobs of at most 16 links, then one line per
 * distance class, nearest first: "# links: 4 process (1.00 GiB), 12 switch (3.00 GiB)". */
void rf_report_links(FILE *out, const rf_link_info *links, int link_count);

/* The table, in three parts so rows can be printed as runs finish. The header carries refit
 * version and commit, the MPI library, the command line, the job, one line per rank and the
 * links (when `links` is not NULL). */
void rf_report_header(FILE *out, const char *command_line, const char *job_line,
                      const rf_rank_info *ranks, int rank_count, const rf_link_info *links,
                      int link_count);
void rf_report_row(FILE *out, const rf_run_result *r);
/* "# PASS" or "# FAIL: <reason>"; the reason names the first failing run. */
void rf_report_footer(FILE *out, rf_status status, const char *reason);

/* ---- refit report: a page, Markdown and CSV from results files ---------------------------- */

struct rf_loaded_results; /* io.h: one results file read back */

/* Writes report.html (one self-contained page with inline SVG charts), report.md and one CSV
 * per table into `dir`, creating it when missing. The first file is the reference that the
 * others are compared with. */
rf_status rf_report_write(const struct rf_loaded_results *files, int count, const char *dir);

#endif
