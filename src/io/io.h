/* io: files. Results go to HDF5 (results/README.md), written by one rank after the others' data
 * was gathered over MPI, so serial HDF5 is enough; checkpoints come from safetensors (one
 * file, or shards with model.safetensors.index.json) or HDF5 (one dataset per HF name), each
 * trainer rank reading only its own rows and columns. */
#ifndef RF_IO_H
#define RF_IO_H

#include <stdint.h>

#include "format/format.h"
#include "memory/memory.h"
#include "model/model.h"
#include "result/result.h"
#include "verify/versions.h"

/* ---- results ------------------------------------------------------------------------------ */

/* Written once, as attributes of the file's root, when the file is created; and how long an
 * append waits for another writer. */
typedef struct {
  const char *command_line;
  const char *hosts;        /* comma-separated, in rank order, duplicates removed */
  const char *gpu_versions; /* "CUDA 13.0, NCCL 2.28.3" or "" (the GPU build fills it) */
  double wait_s;            /* bound on waiting for PATH.lock (--output-wait); 0: no wait */
} rf_results_file_info;

/* The limits `refit run --calibrate` measures beside a run, in seconds per transfer of the
 * same bytes between the same ranks (median over --iters of the slowest rank); 0 where not
 * measured. */
typedef struct {
  double memcpy_s;      /* host memcpy of the bytes each rank receives */
  double device_copy_s; /* device-to-device copy of those bytes (weights on a GPU) */
  double mpi_s;         /* every pair's bytes in one MPI_Isend/MPI_Irecv, host memory */
  double nccl_s;        /* the same over NCCL send/recv (nccl runs only) */
} rf_results_limits;

/* Everything /runs/NNNN holds. Pointers are borrowed for the call. */
typedef struct {
  const char *config_json; /* the whole effective configuration */
  const char *model, *model_type, *dtype, *trainer, *trainer_style, *trainer_order, *rollout,
      *placement, *plan, *mode, *transport, *verify;
  const char *memory; /* where the weights were: "host", "device" (rf_mem_kind), or NULL */
  /* --plan auto: the line that says which kind (`plan`) it chose and why; NULL writes none,
   * as every run before auto and every run of a named kind. */
  const char *plan_choice;
  /* What --transport asked for ("auto" or the name `transport` holds) and, under auto, the
   * line that says which it chose and why; NULL writes none, as every run before auto. */
  const char *transport_requested, *transport_choice;
  int64_t bucket_size, seed;

  const rf_run_result *result; /* timings [iteration][rank][phase] and the summary */

  /* tensors: names and shapes from the model; checksums per tensor. */
  const rf_model *model_spec;
  int replicas;                       /* rollout replicas */
  const uint64_t *trainer_checksum;   /* [tensor], or NULL when not computed */
  const uint64_t *rollout_checksum;   /* [replica * tensors + tensor], or NULL */
  const uint64_t *reference_checksum; /* [tensor] from a checkpoint, or NULL */
  /* [tensor] the run's own verdict (the `ok` column: 1, 0 or -1), where the rule is not
   * "rollout equals trainer" (fp8 tensors); NULL to compare the checksums above. */
  const int8_t *tensor_ok;

  const rf_shard_digest *shards;
  int shard_count;

  /* plan summary */
  int64_t pieces, messages, transfer_bytes, reshape_bytes;
  const int64_t *send_bytes; /* [trainer rank] */
  int trainer_ranks;
  const int64_t *recv_bytes; /* [rollout rank] */
  int rollout_ranks;
  /* Fanout's forward stage: [rollout rank] bytes each forwards and receives; NULL for plans
   * that forward nothing, which then write none of these. */
  const int64_t *forward_send_bytes, *forward_recv_bytes;
  int64_t forward_bytes, forward_depth;
  /* --rollout-dtype ("model", "fp8"), or NULL to write none. With fp8 the plan group holds
   * what crosses the wire (rf_plan's wire totals; NULL wire_send_bytes writes none of them):
   * files without these attributes moved every byte in the trainer's dtype. */
  const char *rollout_dtype;
  /* --update as given ("none", "sparse:0.01"), or NULL to write none of these: with it the
   * attributes update and update_version (the result's version, the last one moved), and under
   * a rule other than none update_changed_elements, update_elements (the result's counts) and
   * update_s. Files without them moved version 0 every iteration. */
  const char *update;
  const int64_t *wire_send_bytes, *wire_recv_bytes; /* [trainer rank], [rollout rank] */
  int64_t wire_transfer_bytes, wire_forward_bytes;
  int64_t source_quantized_tensors, destination_quantized_tensors;

  const rf_rank_info *rank_table; /* [rank]: host, pid, roles, GPU, cores (placement) */
  int ranks;

  const rf_link_info *links; /* [link_count]: trainer->rollout links and their distance */
  int link_count;

  const char *env; /* "NAME=value\n" lines: NCCL_*, OMPI_*, UCX_*, HWLOC_* */

  /* Sweeps: the run's place in the sweep (1-based; 0 writes neither attribute). */
  int64_t sweep_index, sweep_size;
  /* A skipped combination: when set, only the configuration strings (model, trainer, rollout,
   * placement, plan, mode, transport, config_json), bucket_size, the sweep attributes and this
   * reason are written, with status "skipped"; result and model_spec may be NULL. */
  const char *skip_reason;
  /* Calibrated limits in seconds (limit_<name>_s and limit_<name>_ratio); NULL or a value
   * <= 0 means not measured, and the attributes are left out. */
  const rf_results_limits *limits;
  /* The job's own setup in seconds, [RF_SETUP_STEP_COUNT] (setup_<name>_s); NULL: left out. */
  const double *job_setup;
  /* A simulated run (refit simulate --output): when set, the run is written with status
   * "simulated", simulated = 1, the cluster's name and this JSON (the prediction, the cluster's
   * rates, the calibration); its timings are the prediction, and it has no checksums, shards
   * or links. */
  const char *simulation_json;
  const char *cluster;
  /* A simulated run's published reference (refit simulate --published-s, --published-label):
   * another system's time for the same job; 0 writes neither attribute. */
  double published_s;
  const char *published_label;
  /* A simulated run: 1 when its predicted memory fits the cluster's GPUs (or nodes), else 0. */
  int memory_fits;
} rf_results_run;

typedef struct rf_results rf_results;

/* Called first in main, before any other HDF5 call: HDF5 must not run its exit handler, which
 * crashes (SIGSEGV) on a file whose close failed on a full disk. refit closes every file it
 * opens, so the handler has nothing else to do. */
void rf_results_library_init(void);

/* Opens `path` for appending runs, creating it (with the file attributes) when absent. A file
 * that is not HDF5, is damaged, or is not a refit results file is refused with one line and
 * RF_ERR_RESULTS; it is never overwritten. */
rf_status rf_results_open(const char *path, const rf_results_file_info *info, rf_results **out);
/* Writes the next /runs/NNNN and flushes the file, so a later crash cannot damage it. The
 * run is built in memory first; when the file stays busy past the wait, or the append fails
 * (a full disk), the run goes to the side file PATH.run-<UTC time>-<pid>.h5 (a complete
 * results file), named in the one error line, and RF_ERR_IO is returned. */
rf_status rf_results_add_run(rf_results *r, const rf_results_run *run, int *run_number);
void rf_results_close(rf_results *r);

/* Reads the per-tensor checksums of run `run` (-1 = the latest) of a results file: names
 * (RF_NAME_MAX bytes each), trainer checksums and rollout checksums of replica 0. The caller
 * frees the three arrays. */
rf_status rf_results_read_checksums(const char *path, int run, int *run_read, int *count,
                                    char (**names)[RF_NAME_MAX], uint64_t **trainer,
                                    uint64_t **rollout);

/* The dtype column of run `run`'s tensors table, which `count` rows must fill: what the
 * run's trainer held each tensor in (rf_dtype_name cut to 7 characters: "fp8_e4m" for a
 * block-FP8 checkpoint's linear weights); "" where the table has no such column. */
rf_status rf_results_read_tensor_dtypes(const char *path, int run, int count, char (**dtypes)[8]);

/* The number of a results file's format (refit_format: 1 or 2). Format 1's checksums use its
 * own terms: compare them with a checkpoint under rf_checkpoint_checksum_format(c, 1). */
rf_status rf_results_format(const char *path, int *format);

/* A string attribute of run `run` (-1 = the latest) of a results file ("model", "dtype"...). */
rf_status rf_results_run_attribute(const char *path, int run, const char *name, char *out,
                                   size_t len);

/* ---- checkpoints -------------------------------------------------------------------------- */

typedef struct rf_checkpoint rf_checkpoint;

/* Opens a checkpoint for `model`: a .safetensors file, a directory holding
 * model.safetensors.index.json and its shards (or one model.safetensors), or an HDF5 file
 * (.h5/.hdf5). Checks every tensor of the model is there with its shape and the model's
 * dtype, and that the data lies inside the files without overlapping. Each problem gives one
 * line naming the file and the tensor, and RF_ERR_CHECKPOINT. */
rf_status rf_checkpoint_open(const char *path, const rf_model *model, rf_checkpoint **out);
/* The same for `refit verify`, whose advice on a file that does not fit names what verify
 * can do (another checkpoint, another run) rather than refit run's options. A file whose
 * linear weights mix F8_E4M3 with another dtype is refused by either, naming the first that
 * differs from the model's first linear weight. */
typedef enum { RF_CHECKPOINT_FOR_RUN, RF_CHECKPOINT_FOR_VERIFY } rf_checkpoint_use;
rf_status rf_checkpoint_open_for(const char *path, const rf_model *model, rf_checkpoint_use use,
                                 rf_checkpoint **out);
void rf_checkpoint_close(rf_checkpoint *c);

/* Reads `box` of a tensor into region `dst` (which holds that box; any strides), touching
 * only the rows and columns of the box (pread per row on safetensors, a hyperslab on HDF5). */
rf_status rf_checkpoint_read(rf_checkpoint *c, int tensor, const rf_box *box, const rf_region *dst);

/* The layout-invariant checksum of a whole tensor as stored in the file, under the checksum
 * terms of results format `format` set by rf_checkpoint_checksum_format (by default the
 * format refit writes; refit verify sets an older file's to compare with its checksums). */
rf_status rf_checkpoint_checksum(rf_checkpoint *c, int tensor, uint64_t *out);
void rf_checkpoint_checksum_format(rf_checkpoint *c, int format);

/* Quantized checkpoints (checkpoint_format.c): rf_checkpoint_write_format writes the synthetic
 * weights with every linear weight quantized to format f by its CPU reference, under the names
 * and dtypes of the format's ecosystem, as one safetensors file (*bytes: its data bytes). */
rf_status rf_checkpoint_write_format(const char *path, const rf_model *model, const rf_format *f,
                                     uint64_t seed, int64_t *bytes);

/* Block-FP8 checkpoints (checkpoint_fp8.c): every linear weight X.weight F8_E4M3 followed by
 * X.weight_scale_inv F32 (one per 128x128 block), the other tensors in their own dtype, as
 * DeepSeek-V3's checkpoints hold them (fp8 and fp8-ue8m0 files).
 * rf_checkpoint_fp8_checksums reads one (a file or a directory with its index) for `model` and
 * sets, per model tensor, the checksum an fp8 run records for its rollout: rf_fp8_checksum of
 * the fp8 bytes and scales for a linear weight (fp8[t] = 1), the ordinary one otherwise, under
 * the checksum terms of results format `format`. It is refit verify's (RF_CHECKPOINT_FOR_VERIFY).
 */
rf_status rf_checkpoint_fp8_checksums(const char *path, const rf_model *model, int format,
                                      uint64_t *sums, int *fp8);
/* The same for a file of any moved format f (rf_format_moved): mxfp8's X.weight F8_E4M3 with
 * X.weight_scale U8 [rows, cols/32] (refit checkpoint --dtype mxfp8), each linear weight's
 * checksum rf_format_checksum of its bytes and scales as an mxfp8 run records it. */
rf_status rf_checkpoint_format_checksums(const char *path, const rf_model *model,
                                         const rf_format *f, int format, uint64_t *sums, int *fp8);
/* A quantized checkpoint as the trainer's weights (refit run --checkpoint F --rollout-dtype
 * the file's format). rf_checkpoint_quantized_format says which format of the table `path`
 * holds for `model` (*f NULL: none, a checkpoint in the model's dtype), from the names and
 * dtypes its header gives the first linear weight and its scales (ck_format_view); the
 * formats alike on file (rf_format_same_file) are told by the first of them in the table.
 * rf_checkpoint_open_quantized opens it in format f for a model whose linear weights are
 * quantized (rf_model_weights_quantized), refusing an nvfp4 file whose fused members'
 * globals differ: rf_checkpoint_read reads a model tensor as the file holds it (a quantized
 * weight's bytes, a 4-bit one's boxes in packed-byte coordinates, rf_format_byte_box),
 * rf_checkpoint_read_scales a box of its scales in block coordinates, rf_checkpoint_read_global
 * its global (nvfp4's weight_scale_2), and rf_checkpoint_checksum gives a quantized weight's
 * rf_format_checksum (bytes, scales and global), the checksum its rollout records. */
rf_status rf_checkpoint_quantized_format(const char *path, const rf_model *model,
                                         const rf_format **f);
rf_status rf_checkpoint_open_quantized(const char *path, const rf_model *model, const rf_format *f,
                                       rf_checkpoint **out);
rf_status rf_checkpoint_read_scales(rf_checkpoint *c, int tensor, const rf_box *blocks,
                                    const rf_region *dst);
rf_status rf_checkpoint_read_global(rf_checkpoint *c, int tensor, float *out);

/* --checkpoint A,B,...: a list of checkpoints, the versions of a job's weights (refit run;
 * checkpoint_list.c). The count of its items (0 for ""), and item i (from 0) into out; an empty
 * item or one longer than len - 1 is refused in one line (RF_ERR_USAGE). Paths hold no commas. */
int rf_checkpoint_list_count(const char *list);
rf_status rf_checkpoint_list_item(const char *list, int i, char *out, size_t len);

/* Writes the synthetic weights value(seed, tensor, index) of `model` as a checkpoint:
 * format "safetensors" (one file at path, or with shard_size > 0 a directory of shards of at
 * most shard_size bytes each plus model.safetensors.index.json) or "hdf5" (one file, one
 * dataset per HF name). The safetensors header is standard JSON with dtype, shape,
 * data_offsets and __metadata__. */
rf_status rf_checkpoint_write(const char *path, const rf_model *model, uint64_t seed,
                              const char *format, int64_t shard_size);
/* The same for a version of the weights (verify/versions.h; NULL: version 0, which is
 * rf_checkpoint_write's): what a job of that --update holds at that version, bit for bit
 * (refit checkpoint --update RULE --version K). */
rf_status rf_checkpoint_write_version(const char *path, const rf_model *model, uint64_t seed,
                                      const rf_weight_version *version, const char *format,
                                      int64_t shard_size);

/* The format `refit checkpoint` writes for --format `format`: "auto" takes it from the path,
 * "hdf5" for a name ending in .h5 or .hdf5 (which `refit run` reads as HDF5), "safetensors"
 * otherwise; any other value is returned as given. */
const char *rf_checkpoint_format_for(const char *path, const char *format);

/* Refuses, with one line and RF_ERR_USAGE, to write a checkpoint over an existing one unless
 * `force`: for one file, anything at path (a symlink too); for shards (shard_size > 0), a
 * directory that already holds model.safetensors.index.json. */
rf_status rf_checkpoint_check_target(const char *path, int64_t shard_size, int force);

/* The number of files `refit checkpoint` writes for a model and --shard-size (1 for a single
 * file or HDF5), for its summary line. */
int rf_checkpoint_shard_count(const rf_model *model, const char *format, int64_t shard_size);

/* ---- reading results back for `refit report` ---------------------------------------------- */

/* One /runs/NNNN as the report needs it. A skipped sweep combination has only its
 * configuration, status "skipped" and skip_reason; it has no summary and no timings. */
typedef struct {
  int number;
  char model[128], trainer[64], rollout[64], placement[32], plan[16], mode[16], transport[16];
  char status[32], skip_reason[256], slurm_job_id[64], slurm_job[128], written[32];
  char dtype[16], trainer_style[16], trainer_order[16], gpu_versions[160], cluster[64];
  char memory[16];        /* "host", "device"; "" in files written before refit recorded it */
  char rollout_dtype[16]; /* "model", "fp8", ...; "" in files written before it was recorded */
  char *config_json;      /* the run's whole configuration, or NULL when absent */
  int64_t bucket_size, iterations, ranks, wrong, checksum_bad; /* -1 where absent */
  int64_t sweep_index, sweep_size;                             /* -1 where absent */
  int64_t trainer_send_bytes; /* the plan group's transfer_bytes; -1 where absent */
  /* What a dense refit of the run's job puts on the wire: the transfer's and the forward
   * steps' bytes, a quantized rollout's quantized bytes and scales (the plan group's wire_*
   * where present); -1 where absent. A delta run's wire_delta_bytes is compared with it. */
  int64_t dense_wire_bytes;
  int64_t messages, pieces;                     /* -1 where absent */
  double time_median_s, time_p99_s, algbw_GBps; /* NAN where absent */
  double limit_s[RF_LIMIT_COUNT];               /* NAN where not calibrated */
  int skipped;
  int simulated;             /* written by refit simulate: a prediction, not a measurement */
  double published_s;        /* a simulated run's published reference; NAN where absent */
  char published_label[128]; /* whose time published_s is; "" where absent */
  int64_t memory_fits;       /* a simulated run's memory fits its cluster: 1, 0; -1 where absent */
  /* Weight versions and deltas: --update as given and --delta ("" where absent: none, off);
   * the changed fraction of the last version moved (NAN where not counted), and a delta run's
   * encoded bytes on the wire (-1 where absent). */
  char update[32], delta[16];
  double changed_fraction;
  int64_t wire_delta_bytes;
  int has_summary;
  double phase_median[RF_PHASE_COUNT], phase_p99[RF_PHASE_COUNT]; /* summary, seconds */
  /* The timings' shape, and what the report shows of them (taken while they are read, so
   * that no run keeps its timings in memory): the spread of total over every iteration and
   * rank, and the fastest and slowest of the ranks' own medians of total. Valid where
   * timing_iterations * timing_ranks > 0. */
  int timing_iterations, timing_ranks;
  rf_stats spread;
  double rank_median_fastest, rank_median_slowest;
} rf_loaded_run;

struct rf_loaded_results {
  char path[1024];
  char created[64], refit_version[64], hosts[512];
  rf_loaded_run *runs; /* in run-number order */
  int run_count;
};
typedef struct rf_loaded_results rf_loaded_results;

/* Reads every run of a results file. A missing file, a file that is not HDF5 and an HDF5 file
 * that is not refit's are refused with one line naming the file and RF_ERR_RESULTS. The
 * caller frees *out with rf_loaded_results_free whatever happens. */
rf_status rf_results_load(const char *path, rf_loaded_results *out);
void rf_loaded_results_free(rf_loaded_results *r);

#endif
