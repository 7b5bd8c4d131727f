/* include/refit.h through librefit.so under mpirun -np 2, the tiny model from trainer fsdp=2 to
 * rollout tp=2, colocated (every rank has both roles): every call, each error path with its
 * exact line, three jobs built in one process (the caller's memory registered over mpi, the
 * library's own, and shm's refusal), registration mismatches refused whole, a verification
 * failure, and the results appended to argv[1], which tests/api/api_test.sh compares with
 * `refit run`'s checksums of the same job. */
#include <refit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"

static int rank;

#define REQUIRE(expr, want)                                                                        \
  do {                                                                                             \
    refit_status got_ = (expr);                                                                    \
    if (got_ != (want)) {                                                                          \
      fprintf(stderr, "%s:%d: rank %d: %s returned %d (%s), expected %d\n", __FILE__, __LINE__,    \
              rank, #expr, (int)got_, refit_status_string(got_), (int)(want));                     \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

/* Host memory named, so that a machine with a GPU (where mpi would take device weights) runs
 * the same job. */
static const char *const base[] = {"placement", "colocated", "transport", "mpi", "mode",
                                   "fused",     "memory",    "host",      NULL};

/* A job of the tiny model with `options`, which must fail with `want` and `line` (rank 0's;
 * the other rank's says that rank 0 has it, unless `every_rank`). */
static void create_fails(refit_context *ctx, const char *trainer, const char *const *options,
                         refit_status want, const char *line, int every_rank) {
  refit_job *job = (refit_job *)1;
  REQUIRE(refit_job_create(ctx, "tiny", trainer, "tp=2", options, MPI_COMM_WORLD, &job), want);
  ASSERT_TRUE(job == NULL);
  if (rank == 0 || every_rank) {
    ASSERT_STR_EQ(refit_context_error(ctx), line);
  } else {
    char other[256];
    snprintf(other, sizeof other, "%s (another rank has the message)", refit_status_string(want));
    ASSERT_STR_EQ(refit_context_error(ctx), other);
  }
}

static void statuses(void) {
  ASSERT_STR_EQ(refit_status_string(REFIT_OK), "ok");
  ASSERT_STR_EQ(refit_status_string(REFIT_ERR_VERIFY), "verification failed");
  ASSERT_STR_EQ(refit_status_string(REFIT_ERR_INTERNAL), "internal error");
  ASSERT_STR_EQ(refit_status_string((refit_status)99), "unknown status");
  ASSERT_EQ(refit_api_version(), REFIT_API_VERSION);
  ASSERT_EQ(REFIT_API_VERSION, 10000);
  ASSERT_TRUE(strncmp(refit_version_string(), "0.1.0 (git ", 11) == 0);
  ASSERT_STR_EQ(refit_phase_name(0), "setup");
  ASSERT_STR_EQ(refit_phase_name(4), "transfer");
  ASSERT_STR_EQ(refit_phase_name(REFIT_PHASE_COUNT - 1), "verify");
  ASSERT_TRUE(refit_phase_name(REFIT_PHASE_COUNT) == NULL);
  ASSERT_TRUE(refit_phase_name(-1) == NULL);
}

static void create_errors(refit_context *ctx) {
  const char *const unknown[] = {"frobnicate", "1", NULL};
  create_fails(ctx, "fsdp=2", unknown, REFIT_ERR_USAGE,
               "refit_job_create: option frobnicate is not an option of refit run; see refit run "
               "--help",
               1);
  const char *const not_run[] = {"reference", "x.h5", NULL};
  create_fails(ctx, "fsdp=2", not_run, REFIT_ERR_USAGE,
               "refit_job_create: option reference is not an option of refit run; see refit run "
               "--help",
               1);
  const char *const iters[] = {"iters", "3", NULL};
  create_fails(ctx, "fsdp=2", iters, REFIT_ERR_USAGE,
               "refit_job_create: option iters is refit run's, not the library's; leave it out "
               "(include/refit.h says why)",
               1);
  const char *const no_value[] = {"plan", NULL};
  create_fails(ctx, "fsdp=2", no_value, REFIT_ERR_USAGE,
               "refit_job_create: option plan has no value; options are a NULL-terminated list "
               "of key and value strings",
               1);
  const char *const bad_plan[] = {"plan", "ring", NULL};
  create_fails(ctx, "fsdp=2", bad_plan, REFIT_ERR_USAGE,
               "option --plan: 'ring' is not one of p2p|star|fanout|hierarchical|auto", 1);
  const char *const modes[] = {"mode", "fused,grouped", NULL};
  create_fails(ctx, "fsdp=2", modes, REFIT_ERR_USAGE,
               "refit_job_create: option mode: a job runs one mode, not 2; create a job per mode",
               1);
  refit_job *job = NULL;
  REQUIRE(refit_job_create(ctx, NULL, "fsdp=2", "tp=2", base, MPI_COMM_WORLD, &job),
          REFIT_ERR_USAGE);
  ASSERT_STR_EQ(refit_context_error(ctx), "refit_job_create: give a model, a trainer layout and a "
                                          "rollout layout (none may be NULL)");
  REQUIRE(refit_job_create(NULL, "tiny", "fsdp=2", "tp=2", base, MPI_COMM_WORLD, &job),
          REFIT_ERR_USAGE);
  REQUIRE(refit_job_create(ctx, "tiny", "fsdp=2", "tp=2", base, MPI_COMM_NULL, &job),
          REFIT_ERR_USAGE);
  ASSERT_STR_EQ(refit_context_error(ctx), "refit_job_create: the communicator is MPI_COMM_NULL; "
                                          "give MPI_COMM_WORLD or one that holds every rank of "
                                          "the job");
  /* The Fortran handle of MPI_COMM_WORLD names the same communicator: a 4-rank job refused. */
  REQUIRE(refit_job_create_f(ctx, "tiny", "fsdp=4", "tp=2", base, refit_comm_world_f(), &job),
          REFIT_ERR_WORLD);
  create_fails(ctx, "fsdp=4", base, REFIT_ERR_WORLD,
               "world size is 2 but trainer fsdp=4,tp=1 and rollout tp=2 (colocated) need 4 "
               "ranks; run mpirun -np 4",
               0);
  create_fails(ctx, "fsdp=3", base, REFIT_ERR_LAYOUT,
               "layout: model.layers.0.self_attn.q_proj.weight dim 0 has 4 heads, which do not "
               "divide over trainer fsdp=3; choose a trainer fsdp that divides 4",
               0);
}

/* The caller's copy of every tensor of `role`: the library's own bytes for the trainer (its
 * generated weights), zeros for the rollout; registered as one set. */
static void **register_copies(refit_job *job, refit_role role) {
  int n = refit_tensor_count(job, role);
  void **mem = calloc((size_t)n + 1, sizeof *mem);
  refit_tensor *set = calloc((size_t)n + 1, sizeof *set);
  refit_tensor_info *info = calloc((size_t)n + 1, sizeof *info);
  for (int i = 0; i < n; i++) {
    REQUIRE(refit_tensor_get(job, role, i, &info[i]), REFIT_OK);
    void *own = NULL;
    int64_t bytes = 0;
    REQUIRE(refit_tensor_buffer(job, role, info[i].name, &own, &bytes), REFIT_OK);
    ASSERT_EQ(bytes, info[i].bytes);
    mem[i] = calloc(1, (size_t)bytes + 1);
    if (role == REFIT_ROLE_TRAINER)
      memcpy(mem[i], own, (size_t)bytes);
    set[i] = (refit_tensor){.name = info[i].name,
                            .role = role,
                            .data = mem[i],
                            .memory = REFIT_MEMORY_HOST,
                            .dtype = info[i].dtype,
                            .ndim = info[i].ndim,
                            .shape = info[i].shape,
                            .bytes = bytes};
  }
  REQUIRE(refit_register(job, set, n), REFIT_OK);
  for (int i = 0; i < n; i++) {
    void *now = NULL;
    REQUIRE(refit_tensor_buffer(job, role, info[i].name, &now, NULL), REFIT_OK);
    ASSERT_TRUE(now == mem[i]);
  }
  free(set);
  free(info);
  return mem;
}

static void free_copies(void **mem, int n) {
  for (int i = 0; i < n; i++)
    free(mem[i]);
  free(mem);
}

/* One mismatch of tensor `t` (a rollout tensor of this rank), refused with `line`. */
static void refused(refit_job *job, const refit_tensor *t, int count, const char *line) {
  REQUIRE(refit_register(job, t, count), REFIT_ERR_USAGE);
  ASSERT_STR_EQ(refit_job_error(job), line);
}

static void mismatches(refit_job *job) {
  refit_tensor_info info;
  REQUIRE(refit_tensor_get(job, REFIT_ROLE_ROLLOUT, 0, &info), REFIT_OK);
  ASSERT_STR_EQ(info.name, "model.embed_tokens.weight");
  ASSERT_STR_EQ(info.dtype, "bf16");
  ASSERT_EQ(info.ndim, 2);
  ASSERT_EQ(info.shape[0], 256);
  ASSERT_EQ(info.shape[1], 64);
  ASSERT_EQ(info.bytes, 256 * 64 * 2);
  static char mem[256 * 64 * 2];
  int64_t shape[2] = {256, 64}, wrong_shape[2] = {64, 256}, strides[2] = {1, 256};
  refit_tensor good = {.name = info.name,
                       .role = REFIT_ROLE_ROLLOUT,
                       .data = mem,
                       .memory = REFIT_MEMORY_HOST,
                       .dtype = "bfloat16", /* a torch_dtype name is taken too */
                       .ndim = 2,
                       .shape = shape};
  refit_tensor t = good;
  t.name = "model.embed_tokens.weights";
  refused(job, &t, 1,
          "refit_register: this rank holds no rollout tensor named model.embed_tokens.weights "
          "(15 rollout tensors; refit_tensor_get lists them)");
  t = good, t.dtype = "fp32";
  refused(job, &t, 1, "refit_register: rollout tensor model.embed_tokens.weight is bf16, not fp32");
  t = good, t.shape = wrong_shape;
  refused(job, &t, 1,
          "refit_register: rollout tensor model.embed_tokens.weight has shape [256, 64], not "
          "[64, 256]");
  t = good, t.ndim = 1;
  refused(job, &t, 1,
          "refit_register: rollout tensor model.embed_tokens.weight has shape [256, 64], not "
          "[256]");
  t = good, t.bytes = 1000;
  refused(job, &t, 1,
          "refit_register: rollout tensor model.embed_tokens.weight needs 32768 bytes, not 1000");
  t = good, t.strides = strides;
  refused(job, &t, 1,
          "refit_register: rollout tensor model.embed_tokens.weight has strides [1, 256] "
          "(elements), which are not contiguous; pass a contiguous copy "
          "(numpy.ascontiguousarray, torch's .contiguous())");
  t = good, t.memory = REFIT_MEMORY_DEVICE;
  refused(job, &t, 1,
          "refit_register: rollout tensor model.embed_tokens.weight is in device memory, but the "
          "job's weights are in host memory (option memory)");
  t = good, t.data = NULL;
  refused(job, &t, 1,
          "refit_register: rollout tensor model.embed_tokens.weight has no memory (data is NULL)");
  t = good, t.role = (refit_role)3;
  refused(job, &t, 1,
          "refit_register: role 3 is neither REFIT_ROLE_TRAINER (1) nor REFIT_ROLE_ROLLOUT (2)");
  /* A set registers whole or not at all: the good tensor before the bad one stays the
   * library's. */
  refit_tensor pair[2] = {good, good};
  refused(job, pair, 2, "refit_register: rollout tensor model.embed_tokens.weight is given twice");
  pair[1].name = "lm_head.weight", pair[1].dtype = "fp16";
  refused(job, pair, 2, "refit_register: rollout tensor lm_head.weight is bf16, not fp16");
  void *now = NULL;
  REQUIRE(refit_tensor_buffer(job, REFIT_ROLE_ROLLOUT, info.name, &now, NULL), REFIT_OK);
  ASSERT_TRUE(now != mem);
  refused(job, NULL, 2, "refit_register: 2 tensors, but tensors is NULL");
  refused(job, &good, -1, "refit_register: count is -1; give 0 or more tensors");
  REQUIRE(refit_register(job, NULL, 0), REFIT_OK);
  REQUIRE(refit_tensor_buffer(job, REFIT_ROLE_TRAINER, "nope", &now, NULL), REFIT_ERR_USAGE);
  ASSERT_STR_EQ(refit_job_error(job),
                "refit_tensor_buffer: this rank holds no trainer tensor named nope (21 "
                "trainer tensors; refit_tensor_get lists them)");
  REQUIRE(refit_tensor_get(job, (refit_role)0, 0, &info), REFIT_ERR_USAGE);
  ASSERT_STR_EQ(refit_job_error(job), "refit_tensor_get: role 0 is neither REFIT_ROLE_TRAINER (1) "
                                      "nor REFIT_ROLE_ROLLOUT (2)");
  REQUIRE(refit_tensor_buffer(job, (refit_role)4, info.name, &now, NULL), REFIT_ERR_USAGE);
  ASSERT_STR_EQ(refit_job_error(job), "refit_tensor_buffer: role 4 is neither REFIT_ROLE_TRAINER "
                                      "(1) nor REFIT_ROLE_ROLLOUT (2)");
  REQUIRE(refit_tensor_get(job, REFIT_ROLE_ROLLOUT, 99, &info), REFIT_ERR_USAGE);
  ASSERT_STR_EQ(refit_job_error(job),
                "refit_tensor_get: index 99: this rank holds 15 rollout tensors (0 to "
                "14)");
}

static void queries(refit_job *job) {
  ASSERT_EQ(refit_job_roles(job), REFIT_ROLE_TRAINER | REFIT_ROLE_ROLLOUT);
  ASSERT_EQ(refit_job_rank(job, REFIT_ROLE_TRAINER), rank);
  ASSERT_EQ(refit_job_rank(job, REFIT_ROLE_ROLLOUT), rank);
  ASSERT_EQ(refit_job_rank(job, (refit_role)0), -1);
  ASSERT_EQ(refit_job_memory(job), REFIT_MEMORY_HOST);
  ASSERT_STR_EQ(refit_job_transport(job), "mpi");
  ASSERT_STR_EQ(refit_job_plan(job), "p2p");
  ASSERT_TRUE(strstr(refit_job_plan_json(job), "\"rollout_manifest\": [") != NULL);
  ASSERT_TRUE(strstr(refit_job_plan_json(job), "\"plan\": \"p2p\"") != NULL);
  ASSERT_EQ(refit_tensor_count(job, REFIT_ROLE_TRAINER), 21);
  ASSERT_EQ(refit_tensor_count(job, REFIT_ROLE_ROLLOUT), 15);
  ASSERT_EQ(refit_tensor_count(job, (refit_role)0), 0);
  refit_tensor_info info;
  REQUIRE(refit_tensor_get(job, REFIT_ROLE_TRAINER, 0, &info), REFIT_OK);
  ASSERT_STR_EQ(info.name, "model.embed_tokens.weight");
  ASSERT_EQ(info.shape[0], 512); /* fsdp=2 halves the embeddings' hidden dimension */
  ASSERT_EQ(info.shape[1], 32);
  /* Nothing to check or record before a transfer. */
  REQUIRE(refit_verify(job, NULL, NULL), REFIT_ERR_USAGE);
  ASSERT_STR_EQ(refit_job_error(job),
                "refit_verify: nothing was transferred yet; call refit_transfer first");
  REQUIRE(refit_record(job, "unused.h5"), REFIT_ERR_USAGE);
  ASSERT_STR_EQ(refit_job_error(job), "refit_record: no transfer since the job began or its last "
                                      "record; call refit_transfer first");
  REQUIRE(refit_record(job, ""), REFIT_ERR_USAGE);
  ASSERT_STR_EQ(refit_job_error(job), "refit_record: give the path of a results file (.h5)");
}

static void timings(refit_job *job) {
  double phases[REFIT_PHASE_COUNT];
  REQUIRE(refit_timings(job, phases, REFIT_PHASE_COUNT), REFIT_OK);
  ASSERT_TRUE(phases[7] > 0);  /* total */
  ASSERT_TRUE(phases[4] > 0);  /* transfer */
  ASSERT_TRUE(phases[0] > 0);  /* setup: the engine's build */
  ASSERT_TRUE(phases[2] == 0); /* encode: no delta */
  REQUIRE(refit_timings(job, phases, REFIT_PHASE_COUNT + 1), REFIT_ERR_USAGE);
}

/* Job A: the caller's memory on both sides over mpi. The element check needs the library's own
 * trainer weights, so only checksums run; a flipped rollout byte fails them. */
static void caller_memory(refit_context *ctx, const char *results) {
  refit_job *job = NULL;
  REQUIRE(refit_job_create(ctx, "tiny", "fsdp=2", "tp=2", base, MPI_COMM_WORLD, &job), REFIT_OK);
  queries(job);
  mismatches(job);
  void **trainer = register_copies(job, REFIT_ROLE_TRAINER);
  void **rollout = register_copies(job, REFIT_ROLE_ROLLOUT);
  REQUIRE(refit_transfer(job), REFIT_OK);
  timings(job);
  int64_t wrong = 0, bad = 0;
  REQUIRE(refit_verify(job, &wrong, &bad), REFIT_OK);
  ASSERT_EQ(wrong, -1);
  ASSERT_EQ(bad, 0);
  if (rank == 1)
    ((unsigned char *)rollout[0])[0] ^= 1;
  REQUIRE(refit_verify(job, &wrong, &bad), REFIT_ERR_VERIFY);
  ASSERT_EQ(bad, 1);
  ASSERT_STR_EQ(refit_job_error(job), "refit_verify: the checksums of 1 tensors differ between "
                                      "the trainer and the rollout");
  /* The next version puts it right; two transfers are the recorded run's iterations. */
  REQUIRE(refit_transfer(job), REFIT_OK);
  REQUIRE(refit_transfer(job), REFIT_OK);
  REQUIRE(refit_verify(job, &wrong, &bad), REFIT_OK);
  REQUIRE(refit_record(job, results), REFIT_OK);
  int nt = refit_tensor_count(job, REFIT_ROLE_TRAINER);
  int nr = refit_tensor_count(job, REFIT_ROLE_ROLLOUT);
  refit_job_destroy(job);
  free_copies(trainer, nt);
  free_copies(rollout, nr);
}

/* Job B: the library's generated trainer weights into the caller's rollout memory, checked
 * element by element, recorded; the context refuses to go while the job lives. */
static void library_weights(refit_context *ctx, const char *results) {
  refit_job *job = NULL;
  REQUIRE(refit_job_create(ctx, "tiny", "fsdp=2", "tp=2", base, MPI_COMM_WORLD, &job), REFIT_OK);
  void **rollout = register_copies(job, REFIT_ROLE_ROLLOUT);
  REQUIRE(refit_transfer(job), REFIT_OK);
  int64_t wrong = -1, bad = -1;
  REQUIRE(refit_verify(job, &wrong, &bad), REFIT_OK);
  ASSERT_EQ(wrong, 0);
  ASSERT_EQ(bad, 0);
  REQUIRE(refit_record(job, results), REFIT_OK);
  refit_context_destroy(ctx);
  ASSERT_STR_EQ(refit_context_error(ctx), "refit_context_destroy: 1 jobs of this context are "
                                          "still alive; destroy them first");
  int nr = refit_tensor_count(job, REFIT_ROLE_ROLLOUT);
  refit_job_destroy(job);
  free_copies(rollout, nr);
}

/* Job C: the default transport, auto, takes shm for host weights on one node, as refit run
 * does; shm maps the library's buffers, so registration is refused; its own buffers move. */
static void mapping(refit_context *ctx) {
  const char *const shm[] = {"placement", "colocated", "memory", "host", NULL};
  refit_job *job = NULL;
  REQUIRE(refit_job_create(ctx, "tiny", "fsdp=2", "tp=2", shm, MPI_COMM_WORLD, &job), REFIT_OK);
  ASSERT_STR_EQ(refit_job_transport(job), "shm");
  ASSERT_STR_EQ(refit_job_plan(job), "p2p");
  static char mem[256 * 64 * 2];
  int64_t shape[2] = {256, 64};
  refit_tensor t = {.name = "model.embed_tokens.weight",
                    .role = REFIT_ROLE_ROLLOUT,
                    .data = mem,
                    .memory = REFIT_MEMORY_HOST,
                    .dtype = "bf16",
                    .ndim = 2,
                    .shape = shape};
  refused(job, &t, 1,
          "refit_register: the shm transport maps the library's own buffers between processes; "
          "write into the memory refit_tensor_buffer gives instead");
  REQUIRE(refit_transfer(job), REFIT_OK);
  int64_t wrong = -1, bad = -1;
  REQUIRE(refit_verify(job, &wrong, &bad), REFIT_OK);
  ASSERT_EQ(wrong, 0);
  refit_job_destroy(job);
  /* rma's windows cover the library's buffers as well. */
  const char *const rma[] = {"placement", "colocated", "transport", "rma", NULL};
  REQUIRE(refit_job_create(ctx, "tiny", "fsdp=2", "tp=2", rma, MPI_COMM_WORLD, &job), REFIT_OK);
  refused(job, &t, 1,
          "refit_register: the rma transport exposes the library's own buffers as MPI windows; "
          "write into the memory refit_tensor_buffer gives instead");
  REQUIRE(refit_transfer(job), REFIT_OK);
  REQUIRE(refit_verify(job, &wrong, &bad), REFIT_OK);
  ASSERT_EQ(wrong, 0);
  refit_job_destroy(job);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_api RESULTS.h5\n");
    return 2;
  }
  refit_context *ctx = NULL;
  REQUIRE(refit_context_create(&ctx), REFIT_OK); /* MPI_Init: refit starts it */
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ASSERT_STR_EQ(refit_context_error(ctx), "");
  statuses();
  create_errors(ctx);
  caller_memory(ctx, argv[1]);
  library_weights(ctx, argv[1]);
  mapping(ctx);
  refit_context_destroy(ctx); /* and MPI_Finalize */
  REQUIRE(refit_context_create(NULL), REFIT_ERR_USAGE);
  return 0;
}
