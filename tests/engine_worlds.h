/* What the engine tests share (test_engine.c, test_engine_fp8.c): a job's every rank as a
 * thread of this process over the loopback transport (transport_loopback.h), each running all
 * three modes over its host buffers and then proving the result, and the checks of a world. */
#ifndef RF_TEST_ENGINE_WORLDS_H
#define RF_TEST_ENGINE_WORLDS_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "test.h"
#include "transport/transport_loopback.h"
#include "verify/verify.h"

#define SEED 20261202u
#define MODES 3

typedef struct {
  const char *trainer, *rollout;
  rf_trainer_style style;
  rf_trainer_order order;
  rf_placement placement;
} layout_case;

/* --mapped-rounds of the next world (read by its threads, set between worlds). */
static rf_mapped_rounds mapped_rounds = RF_MAPPED_ROUNDS_OFF;

/* One simulated rank: what it runs and what it found. */
typedef struct {
  const rf_plan *plan;
  rf_loopback *lb;
  int rank;
  int64_t bucket_size;
  int stall; /* skip its part of every iteration (the stall injection) */
  rf_status status;
  int64_t wrong[MODES], wrong_after_corrupt[MODES];
  uint64_t *trainer_sum[MODES], *rollout_sum[MODES];
  int digests;
  int mapped; /* the engine took its mapped path */
} rank_job;

static inline rf_status run_modes(void *arg, rf_buffers *data, rf_transport *tp) {
  rank_job *j = arg;
  double times[RF_PHASE_COUNT];
  for (int m = 0; m < MODES; m++) {
    rf_engine e;
    rf_status st =
        rf_engine_init(&e, data, tp, (rf_mode)m, j->bucket_size, SEED, RF_INJECT_NONE, j->rank);
    j->mapped = e.mapped;
    if (st == RF_OK)
      rf_engine_set_mapped_rounds(&e, mapped_rounds, 0);
    /* Two iterations, poisoned before each, as refit run does: the second must rewrite
     * every element the first wrote. */
    for (int it = 0; it < 2 && st == RF_OK; it++) {
      st = rf_engine_poison(&e);
      if (st == RF_OK)
        st = rf_engine_iterate(&e, times, j->stall);
    }
    if (st == RF_OK && !j->stall) {
      j->wrong[m] = rf_engine_check(&e, NULL);
      st = rf_engine_checksums(&e, j->trainer_sum[m], j->rollout_sum[m]);
    }
    rf_shard_digest *digests = NULL;
    if (st == RF_OK && !j->stall)
      st = rf_engine_digests(&e, &digests, &j->digests);
    free(digests);
    /* A third iteration with --inject corrupt armed, as refit run's last one. */
    if (st == RF_OK && !j->stall) {
      rf_engine_corrupt(&e);
      st = rf_engine_poison(&e);
      if (st == RF_OK)
        st = rf_engine_iterate(&e, times, 0);
    }
    if (st == RF_OK && !j->stall)
      j->wrong_after_corrupt[m] = rf_engine_check(&e, NULL);
    rf_engine_free(&e);
    if (st != RF_OK)
      return st;
  }
  return RF_OK;
}

/* Rank `rank` of a loopback world: its host buffers of the generated weights and its end of
 * the transport, handed to `body`, then closed and freed. */
static inline rf_status with_rank(const rf_plan *plan, rf_loopback *lb, int rank,
                                  rf_status (*body)(void *, rf_buffers *, rf_transport *),
                                  void *arg) {
  rf_buffers data;
  rf_transport tp;
  rf_status st = rf_buffers_init(&data, plan, RF_MEM_HOST, SEED, NULL, rank);
  if (st == RF_OK) {
    st = rf_loopback_open(lb, rank, &tp);
    if (st == RF_OK)
      st = body(arg, &data, &tp);
    rf_transport_close(&tp);
  }
  rf_buffers_free(&data);
  return st;
}

static inline void *run_rank(void *arg) {
  rank_job *j = arg;
  j->status = with_rank(j->plan, j->lb, j->rank, run_modes, j);
  return NULL;
}

/* A small Llama whose attention and MLP shares are whole 128x128 blocks at rollout tp=2
 * (test_engine_fp8.c, test_engine_caller.c), loaded from a temporary config.json. */
static inline void load_fp8_llama(rf_model *m) {
  static const char config[] =
      "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\",\n"
      " \"head_dim\": 128, \"hidden_size\": 512, \"intermediate_size\": 1024,\n"
      " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 2,\n"
      " \"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\",\n"
      " \"vocab_size\": 1000}\n";
  char path[] = "/tmp/refit-test-fp8-llama-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, config, strlen(config)), (int64_t)strlen(config));
  close(fd);
  ASSERT_OK(rf_model_load(path, m));
  unlink(path);
}

/* Runs every rank of the plan's world as a thread; jobs[r] holds rank r's results. */
static inline void run_world(const rf_plan *plan, int mapped, int64_t bucket_size, double timeout,
                             int stall_rank, rank_job *jobs) {
  int n = plan->layout->world_size, nt = plan->layout->model->tensor_count;
  int replicas = plan->layout->rollout.dp;
  rf_loopback *lb;
  ASSERT_OK(rf_loopback_create(plan, mapped, timeout, &lb));
  pthread_t *threads = calloc((size_t)n, sizeof *threads);
  ASSERT_TRUE(threads);
  for (int r = 0; r < n; r++) {
    jobs[r] = (rank_job){
        .plan = plan, .lb = lb, .rank = r, .bucket_size = bucket_size, .stall = r == stall_rank};
    for (int m = 0; m < MODES; m++) {
      jobs[r].trainer_sum[m] = calloc((size_t)nt, sizeof(uint64_t));
      jobs[r].rollout_sum[m] = calloc((size_t)nt * (size_t)replicas, sizeof(uint64_t));
      ASSERT_TRUE(jobs[r].trainer_sum[m] && jobs[r].rollout_sum[m]);
    }
  }
  for (int r = 0; r < n; r++)
    ASSERT_EQ(pthread_create(&threads[r], NULL, run_rank, &jobs[r]), 0);
  for (int r = 0; r < n; r++)
    ASSERT_EQ(pthread_join(threads[r], NULL), 0);
  free(threads);
  rf_loopback_free(lb);
}

static inline void free_jobs(rank_job *jobs, int n) {
  for (int r = 0; r < n; r++)
    for (int m = 0; m < MODES; m++) {
      free(jobs[r].trainer_sum[m]);
      free(jobs[r].rollout_sum[m]);
    }
}

/* Digests a rank reports: its trainer shards, and the tensors it holds any of as rollout. */
static inline int expected_digests(const rf_layout *lay, int world_rank) {
  int trainer, rollout, n = 0;
  rf_layout_roles(lay, world_rank, &trainer, &rollout);
  for (int t = 0; t < lay->model->tensor_count; t++) {
    n += trainer >= 0;
    rf_box held = rollout >= 0 ? rf_layout_rollout_box(lay, t, rollout) : (rf_box){{0, 0}, {0, 0}};
    n += rollout >= 0 && !rf_box_is_empty(&held);
  }
  return n;
}

/* Every mode of every rank: the trainer's checksums add up to trainer_want, each replica's
 * rollout checksums to rollout_want, no element is wrong, the corrupted byte is found once on
 * each rank it reaches, and every shard digest is there. */
static inline void check_world(const rf_plan *plan, rank_job *jobs, const uint64_t *trainer_want,
                               const uint64_t *rollout_want) {
  const rf_layout *lay = plan->layout;
  int nt = lay->model->tensor_count;
  for (int m = 0; m < MODES; m++) {
    for (int t = 0; t < nt; t++) {
      uint64_t trainer = 0;
      for (int r = 0; r < lay->world_size; r++)
        trainer += jobs[r].trainer_sum[m][t];
      ASSERT_U64_EQ(trainer, trainer_want[t]);
      for (int p = 0; p < lay->rollout.dp; p++) {
        uint64_t rollout = 0;
        for (int r = 0; r < lay->world_size; r++)
          rollout += jobs[r].rollout_sum[m][(size_t)p * nt + t];
        ASSERT_U64_EQ(rollout, rollout_want[t]);
      }
    }
    for (int r = 0; r < lay->world_size; r++) {
      int trainer, rollout;
      rf_layout_roles(lay, r, &trainer, &rollout);
      ASSERT_EQ(jobs[r].wrong[m], 0);
      /* rf_engine_corrupt flips one byte of the first element of the last rollout rank, or,
       * where the plan forwards, of the last tp rank of the first tensor's root replica,
       * which forwards it to the last tp rank of every other replica (hierarchical: of its
       * domain). */
      int R = lay->rollout.tp;
      int same_domain = rollout >= 0 &&
                        (plan->domains == 0 ||
                         plan->replica_domain[rollout / R] == plan->replica_domain[plan->root[0]]);
      int hit = plan->forward_depth > 0 ? same_domain && rollout % R == R - 1
                                        : rollout == lay->rollout_ranks - 1;
      ASSERT_EQ(jobs[r].wrong_after_corrupt[m], hit ? 1 : 0);
    }
  }
  for (int r = 0; r < lay->world_size; r++)
    ASSERT_EQ(jobs[r].digests, expected_digests(lay, r));
}

/* The layout of a case, the rollout receiving `dtype`. */
static inline void make_layout(rf_layout *lay, const rf_model *m, const layout_case *c,
                               rf_rollout_dtype dtype) {
  rf_trainer_layout t;
  rf_rollout_layout r;
  ASSERT_OK(rf_trainer_layout_parse(c->trainer, &t));
  ASSERT_OK(rf_rollout_layout_parse(c->rollout, &r));
  t.style = c->style;
  t.order = c->order;
  r.dtype = dtype;
  ASSERT_OK(rf_layout_init(lay, m, &t, &r, c->placement));
}

#endif
