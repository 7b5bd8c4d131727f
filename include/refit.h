/* refit.h: refit as a library (librefit). A trainer and a rollout engine, each an MPI process,
 * build one job together, register the tensors they hold, and refit: the library plans how
 * the trainer's shards map onto the rollout's fused tensors, moves them over its transports
 * (mpi, shm, ipc, nccl), checks them and times the phases, exactly as `refit run` does.
 *
 * Versioning. REFIT_API_VERSION is the version of this header (major * 10000 + minor * 100 +
 * patch); refit_api_version() is the loaded library's. A program built against major M runs on
 * any library of major M whose minor is at least its own. The library's soname carries the
 * major (librefit.so.M).
 *
 * Handles. refit_context (one per process, or per library user) and refit_job (one transfer:
 * model, layouts, plan, transport and this rank's buffers) are opaque. The library keeps no
 * state outside them but for its log settings (REFIT_LOG) and MPI's own.
 *
 * Errors. Every fallible call returns a refit_status; refit_status_string names it. The one
 * line that says what went wrong and what to do is the job's last error (refit_job_error), or
 * for the calls that create a job, the context's (refit_context_error). The library prints no
 * error of its own to stderr while a call runs. Where the ranks building a job detect the same
 * error together (a world of the wrong size, a layout that does not divide the model), rank 0
 * holds the line and the others "<status text> (another rank has the message)"; so does a rank
 * whose collective call failed because another rank's part did.
 *
 * Collective calls. refit_job_create, refit_transfer, refit_verify, refit_record and
 * refit_job_destroy are collective over the job's communicator: every rank calls them, in the
 * same order, and every rank returns the same status. The others are local.
 *
 * Threads. Not thread-safe: call the library from one thread, the one that initialised MPI
 * (refit asks for MPI_THREAD_FUNNELED). refit_status_string, refit_api_version and
 * refit_phase_name are safe from any thread.
 *
 * Memory. A job's weights live in host memory, in host memory other processes can map (the
 * shm transport), or on the GPU (ipc, nccl; mpi with option memory=device): refit_job_memory
 * says which. Registration (refit_register) makes the engine read a trainer shard from, or
 * write a rollout tensor into, the caller's own memory, without a copy:
 *   - message transports (mpi, nccl): any tensor this rank holds may be registered; the
 *     memory must be of the job's kind (host or device) and contiguous (row-major). Non-
 *     contiguous strides are refused in one line rather than copied.
 *   - ipc: the same, in GPU memory from cudaMalloc (PyTorch's caching allocator gives such
 *     memory unless PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True). The peers map the
 *     allocation that holds each registered tensor (CUDA IPC) at the next refit_transfer,
 *     outside its timed phases, and copy straight from and into it. GPU work the caller
 *     queued on that memory must be complete (torch.cuda.synchronize()) before
 *     refit_transfer, and the rollout's tensors are written when it returns.
 *   - shm and rma, whose peers reach the library's whole buffers (mapped from a shared
 *     file, or as MPI windows): registration is refused in one line; the caller writes its
 *     trainer shards into, and reads its rollout tensors from, the library's own memory,
 *     which refit_tensor_buffer hands out.
 * Until a tensor is registered the library's own buffer stands in, holding refit's generated
 * weights (option seed), so a job with nothing registered refits what `refit run` would. */
#ifndef REFIT_H
#define REFIT_H

#include <mpi.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define REFIT_API_VERSION_MAJOR 1
#define REFIT_API_VERSION_MINOR 0
#define REFIT_API_VERSION_PATCH 0
#define REFIT_API_VERSION                                                                          \
  (REFIT_API_VERSION_MAJOR * 10000 + REFIT_API_VERSION_MINOR * 100 + REFIT_API_VERSION_PATCH)

/* The status of every call. The values and their order are refit's own exit statuses
 * (`refit run` exits 2 for the usage to results errors, 1 for verification, 3 for the rest). */
typedef enum {
  REFIT_OK = 0,
  REFIT_ERR_USAGE,       /* a bad argument, option or call order */
  REFIT_ERR_CONFIG,      /* an invalid configuration */
  REFIT_ERR_MODEL,       /* the model's config cannot be read */
  REFIT_ERR_LAYOUT,      /* a layout does not divide the model */
  REFIT_ERR_WORLD,       /* the communicator's size is not what the layouts need */
  REFIT_ERR_MISMATCH,    /* the ranks disagree on the job */
  REFIT_ERR_UNSUPPORTED, /* not supported by this build or machine */
  REFIT_ERR_CHECKPOINT,  /* a checkpoint does not match the model */
  REFIT_ERR_RESULTS,     /* a results file cannot be used */
  REFIT_ERR_VERIFY,      /* verification failed */
  REFIT_ERR_IO,
  REFIT_ERR_NOMEM,
  REFIT_ERR_TIMEOUT, /* a peer did not answer within option timeout */
  REFIT_ERR_PEER,    /* another rank failed */
  REFIT_ERR_MPI,
  REFIT_ERR_HDF5,
  REFIT_ERR_HWLOC,
  REFIT_ERR_CUDA,
  REFIT_ERR_NCCL,
  REFIT_ERR_CORRUPT, /* received data is corrupted */
  REFIT_ERR_INTERNAL
} refit_status;

/* "usage error", "verification failed", ...; "unknown status" outside the list. */
const char *refit_status_string(refit_status st);
/* The loaded library's REFIT_API_VERSION, and its release and commit ("0.1.0 (git 0123abcd)"). */
int refit_api_version(void);
const char *refit_version_string(void);

typedef struct refit_context refit_context;
typedef struct refit_job refit_job;

/* A context: initialises MPI (MPI_Init_thread, MPI_THREAD_FUNNELED) unless the caller did, and
 * then finalises it in refit_context_destroy. Jobs must be destroyed before their context: while
 * one lives, refit_context_destroy does nothing but say so in the context's error. */
refit_status refit_context_create(refit_context **out);
void refit_context_destroy(refit_context *ctx);
/* The line of the context's last call that failed (refit_job_create, refit_context_destroy),
 * "" when none has. */
const char *refit_context_error(const refit_context *ctx);

/* Builds a job, collectively over `comm` (MPI_COMM_WORLD, or any communicator whose size is
 * what the layouts need): loads `model` (a name of configs/models, such as "llama-3.1-8b", or
 * the path of a Hugging Face config.json, as `refit run --model` takes), parses `trainer`
 * ("fsdp=2,tp=1") and `rollout` ("tp=2,dp=1"), applies `options`, plans, opens the transport
 * and allocates this rank's buffers. `options` is NULL or a NULL-terminated list of key and
 * value strings, {"plan", "p2p", "mode", "fused", NULL}: any option of `refit run --help` by
 * its long name, validated as the command line is ("transport", "bucket-size", "rollout-dtype",
 * "memory", "timeout", "seed", "verify", ...). A job runs one mode. Refused in one line: options
 * the library has no use for ("config", "system", "warmup", "iters", "inject", "update",
 * "delta", "checkpoint", "output", "dry-run", "calibrate", "json") and a list of modes.
 * The transport defaults to auto, chosen over comm's ranks as `refit run` chooses (shm for host
 * weights on one node, ipc for GPU weights on one node, nccl or mpi across nodes): name mpi or
 * nccl to register the caller's own memory (see Memory above). The library leaves the process's CPU
 * binding alone unless option bind is given. */
refit_status refit_job_create(refit_context *ctx, const char *model, const char *trainer,
                              const char *rollout, const char *const *options, MPI_Comm comm,
                              refit_job **out);
/* The same with the communicator's Fortran handle (MPI_Comm_c2f; mpi4py's comm.py2f()), for
 * bindings that cannot name an MPI_Comm. */
refit_status refit_job_create_f(refit_context *ctx, const char *model, const char *trainer,
                                const char *rollout, const char *const *options, int64_t fcomm,
                                refit_job **out);
/* MPI_Comm_c2f(MPI_COMM_WORLD), for refit_job_create_f. */
int64_t refit_comm_world_f(void);
/* Collective. Frees the job's buffers, engine, transport and communicators. */
void refit_job_destroy(refit_job *job);
/* The line of the job's last call that failed, "" when none has. */
const char *refit_job_error(const refit_job *job);

/* ---- what the job is ------------------------------------------------------------------- */

typedef enum { REFIT_ROLE_TRAINER = 1, REFIT_ROLE_ROLLOUT = 2 } refit_role;
typedef enum { REFIT_MEMORY_HOST = 0, REFIT_MEMORY_DEVICE = 1 } refit_memory;

/* This rank's roles, a mask of refit_role (a colocated rank may have both, or neither where
 * one side has fewer ranks). */
int refit_job_roles(const refit_job *job);
/* This rank's trainer or rollout rank, -1 without that role. */
int refit_job_rank(const refit_job *job, refit_role role);
/* Where the weights live: REFIT_MEMORY_DEVICE for GPU memory, else REFIT_MEMORY_HOST. */
refit_memory refit_job_memory(const refit_job *job);
/* The transport and the plan kind the job uses ("mpi", "p2p"). */
const char *refit_job_transport(const refit_job *job);
const char *refit_job_plan(const refit_job *job);
/* The plan as `refit plan --json` prints it (totals, bytes per rank, the rollout manifest of
 * this rank's rollout rank, or of rollout rank 0), owned by the job. */
const char *refit_job_plan_json(const refit_job *job);

/* One tensor this rank holds. Trainer shards go by the model's (Hugging Face) names, in their
 * storage order: [rows, cols] of the shard (transposed under option trainer-order jax), [n]
 * for 1-D tensors; a rank's shards are those with elements on it. Rollout tensors go by vLLM's
 * names and shapes, as refit plan --json's rollout_manifest lists them. Strings are owned by
 * the job. */
#define REFIT_MAX_DIMS 4
typedef struct {
  const char *name;
  const char *dtype; /* "bf16", "fp16", "fp32", "fp8_e4m3fn", "u8" */
  int ndim;
  int64_t shape[REFIT_MAX_DIMS];
  int64_t bytes;
} refit_tensor_info;

/* How many tensors this rank holds in `role` (0 without the role). */
int refit_tensor_count(const refit_job *job, refit_role role);
/* Tensor `index` (0 to count - 1) of this rank's `role`. */
refit_status refit_tensor_get(const refit_job *job, refit_role role, int index,
                              refit_tensor_info *out);
/* The memory the engine reads (trainer) or writes (rollout) for a tensor named `name`: the
 * caller's, once registered, else the library's own, which the callers of shm and rma jobs
 * (which refuse registration) write into and read from. */
refit_status refit_tensor_buffer(refit_job *job, refit_role role, const char *name, void **data,
                                 int64_t *bytes);

/* ---- registration ------------------------------------------------------------------------ */

/* One of the caller's tensors. `strides` are in elements (NULL: contiguous); `bytes` is the
 * size of the memory at `data` (0: the shape's). dtype is a name of refit_tensor_info's, or
 * a Hugging Face torch_dtype name ("bfloat16", "float16", "float32"). */
typedef struct {
  const char *name;
  refit_role role;
  void *data;
  refit_memory memory;
  const char *dtype;
  int ndim;
  const int64_t *shape;
  const int64_t *strides;
  int64_t bytes;
} refit_tensor;

/* Registers `count` tensors of this rank, all or none: each must name a tensor this rank holds
 * in that role, once, with its dtype, shape and bytes, in the job's memory kind, contiguous.
 * The memory must stay valid until the job is destroyed or the name registered again (under
 * ipc, until the job is destroyed: the peers keep each allocation they mapped open). Local;
 * may be called between transfers. Refused under shm and rma (see Memory above). */
refit_status refit_register(refit_job *job, const refit_tensor *tensors, int count);

/* ---- refitting --------------------------------------------------------------------------- */

/* Moves one version of the weights from every trainer rank's shards into every rollout rank's
 * tensors. Collective. The first call builds the engine (its schedules and staging, the
 * setup phase). */
refit_status refit_transfer(refit_job *job);

/* Checks the last transfer, collectively: the per-tensor checksums of every rollout replica
 * against the trainer's (option verify checksum or full), and with verify full, where no rank
 * registered a trainer shard, every element against the weights refit generated. Returns
 * REFIT_ERR_VERIFY when anything differs. *wrong (may be NULL) gets the count of wrong
 * elements (-1: not checked), *bad (may be NULL) the tensors whose checksums differ. */
refit_status refit_verify(refit_job *job, int64_t *wrong, int64_t *bad);

/* The phases of this rank's last transfer, in seconds, as `refit run` times them:
 * phases[i] for i < count (at most REFIT_PHASE_COUNT), named by refit_phase_name. */
#define REFIT_PHASE_COUNT 9
refit_status refit_timings(const refit_job *job, double *phases, int count);
/* "setup", "reshape", "encode", "pack", "transfer", "unpack", "apply", "total", "verify";
 * NULL outside 0 to REFIT_PHASE_COUNT - 1. */
const char *refit_phase_name(int phase);

/* Appends one run to the HDF5 results file at `path` (created when missing), as
 * `refit run --output` does: the transfers since the job's creation or its last record as the
 * run's iterations, the last refit_verify's checksums, the plan and the rank table. Collective;
 * rank 0 writes. */
refit_status refit_record(refit_job *job, const char *path);

#ifdef __cplusplus
}
#endif

#endif
