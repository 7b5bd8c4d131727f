/* The caller's own memory over a mapping transport (librefit's refit_register over ipc),
 * without a GPU: the loopback's mapped variant offers and maps memory as ipc does, so the
 * engine's lookups of a peer's tensors (its caller's memory where registered, else its arena)
 * run here. Every rank moves every other trainer shard and rollout tensor it holds into
 * memory of its own (the caller's), spoils the arena's copy of each shard it moved and offers
 * them (rf_engine_expose_caller); two iterations in each mode must then leave every rollout
 * element right (read where the caller registered it) and the arena's copy of each registered
 * rollout tensor untouched. Cases: a pulling p2p (hf order), a pushing one (JAX order), fanout
 * (replicas forward out of each other's caller memory) and fp8 (scales read from the
 * forwarding replica's registered scale tensor). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_worlds.h"

typedef struct {
  const rf_plan *plan;
  rf_loopback *lb;
  int rank;
  rf_status status;
  int64_t wrong[MODES];
  int64_t registered;    /* tensors this rank moved into its own memory, both roles */
  int64_t arena_written; /* nonzero bytes found in the arena copies of its registered rollout */
} caller_job;

/* A trainer shard's bytes on this rank (its box, as stored). */
static size_t shard_bytes(const rf_layout *lay, int t, int trainer_rank) {
  rf_box box = rf_layout_trainer_box(lay, t, trainer_rank);
  if (rf_box_is_empty(&box))
    return 0;
  rf_box bytes = rf_layout_trainer_bytes(lay, t, &box);
  return (size_t)((bytes.hi[0] - bytes.lo[0]) * (bytes.hi[1] - bytes.lo[1]) *
                  rf_tensor_esize(&lay->model->tensors[t]));
}

/* Moves every other tensor of this rank into memory of its own; *keep gets what to free. */
static rf_status take_over(caller_job *j, rf_buffers *data, char *shards, char *rollout,
                           void **keep, size_t *rollout_size) {
  const rf_layout *lay = j->plan->layout;
  int nt = lay->model->tensor_count;
  for (int t = 1; data->trainer_rank >= 0 && t < nt; t += 2) {
    size_t n = shard_bytes(lay, t, data->trainer_rank);
    if (!n)
      continue;
    /* 8 bytes in, as a torch tensor lies inside one of PyTorch's cached blocks. */
    char *mine = malloc(n + 8);
    if (!mine)
      return RF_ERR_NOMEM;
    keep[t] = mine;
    memcpy(mine + 8, data->shards[t], n);
    memset(data->shards[t], 0x7f, n); /* a source read from the arena would be wrong */
    data->shards[t] = mine + 8;
    shards[t] = 1;
    j->registered++;
  }
  for (int i = 0; data->rollout_rank >= 0 && i < lay->rollout_tensor_count; i += 2) {
    size_t n = (size_t)lay->rollout_tensors[i].bytes;
    char *mine = calloc(1, n + 8);
    if (!mine)
      return RF_ERR_NOMEM;
    keep[nt + i] = mine;
    rollout_size[i] = n;
    data->rollout[i] = mine + 8;
    rollout[i] = 1;
    j->registered++;
  }
  return RF_OK;
}

static rf_status run_caller_modes(void *arg, rf_buffers *data, rf_transport *tp) {
  caller_job *j = arg;
  const rf_layout *lay = j->plan->layout;
  int nt = lay->model->tensor_count, nr = lay->rollout_tensor_count;
  char *shards = calloc((size_t)nt, 1), *rollout = calloc((size_t)nr, 1);
  void **keep = calloc((size_t)(nt + nr), sizeof *keep);
  size_t *rollout_size = calloc((size_t)nr, sizeof *rollout_size);
  void **arena_rollout = calloc((size_t)nr, sizeof *arena_rollout);
  rf_status st = shards && rollout && keep && rollout_size && arena_rollout ? RF_OK : RF_ERR_NOMEM;
  for (int i = 0; st == RF_OK && i < nr; i++)
    arena_rollout[i] = data->rollout ? data->rollout[i] : NULL;
  if (st == RF_OK)
    st = take_over(j, data, shards, rollout, keep, rollout_size);
  double times[RF_PHASE_COUNT];
  for (int m = 0; m < MODES && st == RF_OK; m++) {
    rf_engine e;
    st = rf_engine_init(&e, data, tp, (rf_mode)m, 1 << 16, SEED, RF_INJECT_NONE, j->rank);
    if (st == RF_OK && !e.mapped)
      st = RF_ERR_INTERNAL;
    /* Offered once: later engines of the same buffers find the offer in place. */
    if (st == RF_OK && m == 0)
      st = rf_engine_expose_caller(&e, shards, rollout);
    for (int it = 0; it < 2 && st == RF_OK; it++) {
      st = rf_engine_poison(&e); /* zeroes the arenas; the caller's rollout memory too: */
      for (int i = 0; i < nr; i++)
        if (rollout[i])
          memset(data->rollout[i], 0, rollout_size[i]);
      if (st == RF_OK)
        st = rf_engine_iterate(&e, times, 0);
    }
    if (st == RF_OK)
      j->wrong[m] = rf_engine_check(&e, NULL);
    rf_engine_free(&e);
  }
  for (int i = 0; st == RF_OK && i < nr; i++)
    for (size_t b = 0; rollout[i] && b < rollout_size[i]; b++)
      j->arena_written += ((const char *)arena_rollout[i])[b] != 0;
  /* The arenas' pointers back, for rf_buffers_free. */
  for (int t = 0; keep && shards && t < nt; t++)
    if (shards[t])
      data->shards[t] = NULL;
  for (int i = 0; keep && rollout && i < nr; i++)
    if (rollout[i])
      data->rollout[i] = arena_rollout[i];
  for (int k = 0; keep && k < nt + nr; k++)
    free(keep[k]);
  free(shards);
  free(rollout);
  free(keep);
  free(rollout_size);
  free(arena_rollout);
  return st;
}

static void *run_caller_rank(void *arg) {
  caller_job *j = arg;
  j->status = with_rank(j->plan, j->lb, j->rank, run_caller_modes, j);
  return NULL;
}

/* One layout in one plan kind; returns the tensors registered over all ranks. */
static int64_t run_case(const rf_model *m, const layout_case *c, rf_rollout_dtype dtype,
                        rf_plan_kind kind) {
  rf_layout lay;
  make_layout(&lay, m, c, dtype);
  rf_plan plan;
  ASSERT_OK(rf_plan_build(&plan, &lay, kind, NULL));
  rf_loopback *lb;
  ASSERT_OK(rf_loopback_create(&plan, 1, 60.0, &lb));
  int n = lay.world_size;
  caller_job *jobs = calloc((size_t)n, sizeof *jobs);
  pthread_t *threads = calloc((size_t)n, sizeof *threads);
  ASSERT_TRUE(jobs && threads);
  for (int r = 0; r < n; r++) {
    jobs[r] = (caller_job){.plan = &plan, .lb = lb, .rank = r};
    ASSERT_EQ(pthread_create(&threads[r], NULL, run_caller_rank, &jobs[r]), 0);
  }
  int64_t registered = 0;
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(pthread_join(threads[r], NULL), 0);
    if (jobs[r].status != RF_OK)
      fprintf(stderr, "%s -> %s %s: rank %d: %s\n", c->trainer, c->rollout, rf_plan_kind_name(kind),
              r, rf_status_name(jobs[r].status));
    ASSERT_OK(jobs[r].status);
    for (int mode = 0; mode < MODES; mode++)
      ASSERT_EQ(jobs[r].wrong[mode], 0);
    ASSERT_EQ(jobs[r].arena_written, 0);
    registered += jobs[r].registered;
  }
  free(jobs);
  free(threads);
  rf_loopback_free(lb);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  return registered;
}

int main(void) {
  rf_model m;
  load_fp8_llama(&m);
  /* Counted by hand: the model has 3 + 9 per layer = 21 tensors (embedding, final norm, untied
   * head), the rollout 3 + 6 per layer = 15 (qkv and gate_up fused), 23 with fp8's scale
   * tensors (qkv, o, gate_up and down of each layer). A trainer rank of fsdp=2 holds a part of
   * all 21 (the odd ones, 10, registered), a rollout rank of all 15 (the even ones, 8) or 23
   * (12). */
  static const layout_case pull = {"fsdp=2", "tp=2", RF_STYLE_TUNIX, RF_ORDER_HF,
                                   RF_PLACEMENT_DISAGGREGATED};
  static const layout_case push = {"fsdp=2", "tp=2", RF_STYLE_TUNIX, RF_ORDER_JAX,
                                   RF_PLACEMENT_DISAGGREGATED};
  static const layout_case fan = {"fsdp=2", "tp=2,dp=2", RF_STYLE_FSDP2, RF_ORDER_HF,
                                  RF_PLACEMENT_DISAGGREGATED};
  ASSERT_EQ(m.tensor_count, 21);
  ASSERT_EQ(run_case(&m, &pull, RF_ROLLOUT_DTYPE_MODEL, RF_PLAN_P2P), 2 * 10 + 2 * 8);
  ASSERT_EQ(run_case(&m, &push, RF_ROLLOUT_DTYPE_MODEL, RF_PLAN_P2P), 2 * 10 + 2 * 8);
  ASSERT_EQ(run_case(&m, &fan, RF_ROLLOUT_DTYPE_MODEL, RF_PLAN_FANOUT), 2 * 10 + 4 * 8);
  ASSERT_EQ(run_case(&m, &fan, RF_FORMAT_FP8, RF_PLAN_FANOUT), 2 * 10 + 4 * 12);
  rf_model_free(&m);
  printf("the caller's memory mapped in 4 worlds, 3 modes each\n");
  return 0;
}
