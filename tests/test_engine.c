/* The engine end to end without mpirun: every rank of a job is a thread of this process and
 * the loopback transport carries the bytes (transport_loopback.h). For each model, layout,
 * plan kind (p2p, star with its reshape stage, fanout with its forward steps), transport
 * variant (messages, or mapped like ipc; fanout's mapped worlds with --mapped-rounds off at one
 * bucket size and on at the other) and bucket size, every rank runs all three modes over
 * its host buffers and then proves the result: the full element check finds no wrong element,
 * the checksums of both sides equal the generator's, the shard digests are all there, and one
 * byte flipped in a last iteration is found as exactly one wrong element, on the corrupting
 * rank and (fanout) on every rank it forwarded the byte to. The models run in one dtype and
 * with tensors of three dtypes (fp32, fp16 and bf16 side by side, as tensors that keep a dtype
 * of their own give), where fused staging packs fp32 chunks at offsets that are 2 mod 4. A
 * stalled rank ends its peers' waits with a timeout, and a rollout tensor sized for the wrong
 * dtype is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_worlds.h"

/* Llama-3.2-1B's architecture (tied embeddings, 4 query heads per kv head, head_dim 64) at a
 * size a unit test can move many times: 2 layers, and a vocabulary that is not a multiple of
 * 64, so vLLM's padding rows are in play. */
static const char small_llama[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\",\n"
    " \"head_dim\": 64, \"hidden_size\": 512, \"intermediate_size\": 1536,\n"
    " \"num_attention_heads\": 8, \"num_key_value_heads\": 2, \"num_hidden_layers\": 2,\n"
    " \"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\",\n"
    " \"vocab_size\": 1000}\n";

/* The same shape with an odd hidden size: a run of whole rows of a [rows, 257] bf16 tensor can
 * have an odd element count, so the fp32 chunk packed after it in a fused bucket lands at a
 * staging offset that is 2 mod 4. Only layouts that never split the hidden dimension divide
 * 257 (one trainer rank, or fsdp2's tensor parallelism alone). */
static const char odd_llama[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\",\n"
    " \"head_dim\": 32, \"hidden_size\": 257, \"intermediate_size\": 384,\n"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 2,\n"
    " \"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\",\n"
    " \"vocab_size\": 1000}\n";

static const layout_case layouts[] = {
    {"fsdp=2", "tp=2", RF_STYLE_TUNIX, RF_ORDER_HF, RF_PLACEMENT_DISAGGREGATED},
    {"fsdp=2,tp=2", "tp=4", RF_STYLE_TUNIX, RF_ORDER_HF, RF_PLACEMENT_DISAGGREGATED},
    /* JAX order: the mapped path pushes (the source writes into the destination). */
    {"fsdp=2,tp=2", "tp=4", RF_STYLE_TUNIX, RF_ORDER_JAX, RF_PLACEMENT_DISAGGREGATED},
    /* Star fans in two arms per rollout rank; colocated ranks copy their own pieces. */
    {"fsdp=4", "tp=2", RF_STYLE_FSDP2, RF_ORDER_HF, RF_PLACEMENT_COLOCATED},
    /* Engine replicas: fanout forwards in one step (two replicas), two steps (three, four);
     * in JAX order the mapped path pushes its forwards too. */
    {"fsdp=2", "tp=2,dp=2", RF_STYLE_TUNIX, RF_ORDER_HF, RF_PLACEMENT_DISAGGREGATED},
    {"fsdp=2", "tp=2,dp=3", RF_STYLE_FSDP2, RF_ORDER_HF, RF_PLACEMENT_DISAGGREGATED},
    {"fsdp=2,tp=2", "tp=1,dp=4", RF_STYLE_TUNIX, RF_ORDER_JAX, RF_PLACEMENT_COLOCATED},
};

static const layout_case odd_layouts[] = {
    {"tp=2", "tp=2", RF_STYLE_FSDP2, RF_ORDER_HF, RF_PLACEMENT_DISAGGREGATED},
    {"fsdp=1", "tp=2", RF_STYLE_TUNIX, RF_ORDER_JAX, RF_PLACEMENT_DISAGGREGATED},
    {"tp=2", "tp=4", RF_STYLE_FSDP2, RF_ORDER_HF, RF_PLACEMENT_COLOCATED},
};

static const int64_t bucket_sizes[] = {0, 4096};
/* The generator's checksum of every whole tensor, in its own dtype. */
static uint64_t *generator_checksums(const rf_model *m) {
  uint64_t *sums = calloc((size_t)m->tensor_count, sizeof *sums);
  ASSERT_TRUE(sums);
  for (int t = 0; t < m->tensor_count; t++) {
    const rf_tensor *x = &m->tensors[t];
    rf_box whole = rf_box_whole(x);
    void *buf = malloc((size_t)x->bytes);
    ASSERT_TRUE(buf);
    rf_region r = rf_region_row_major(buf, &whole, rf_dtype_size(x->dtype));
    rf_fill_region(&r, &whole, x, SEED, NULL, x->dtype);
    sums[t] = rf_checksum_region(&r, &whole, x, x->dtype);
    free(buf);
  }
  return sums;
}

/* Gives a model tensors of three dtypes: every norm fp32 (1-D, replicated on the rollout),
 * layer 0's o_proj and down_proj fp32 (row-parallel, transposed in JAX order), layer 1's q, k
 * and v fp32 (so its fused qkv_proj is fp32 throughout), the embedding fp16, the rest bf16. */
static void mix_dtypes(rf_model *m) {
  for (int t = 0; t < m->tensor_count; t++) {
    const rf_tensor *x = &m->tensors[t];
    int fp32 = x->kind == RF_T_NORM ||
               (x->layer == 0 && (x->kind == RF_T_O || x->kind == RF_T_DOWN)) ||
               (x->layer == 1 && (x->kind == RF_T_Q || x->kind == RF_T_K || x->kind == RF_T_V));
    if (fp32)
      ASSERT_OK(rf_model_set_tensor_dtype(m, t, RF_DTYPE_FP32));
    else if (x->kind == RF_T_EMBED)
      ASSERT_OK(rf_model_set_tensor_dtype(m, t, RF_DTYPE_FP16));
  }
}

/* The layout sizes every fused rollout tensor in its members' dtype. */
static void expect_rollout_sized_by_members(rf_layout *lay) {
  for (int t = 0; t < lay->model->tensor_count; t++) {
    const rf_rollout_tensor *rt = &lay->rollout_tensors[lay->slots[t].local];
    ASSERT_EQ(rt->bytes, rt->numel * rf_tensor_esize(&lay->model->tensors[t]));
  }
}

/* How many fp32 chunks the fused mode packs at a staging offset that is 2 mod 4, counted the
 * way engine_modes.c packs a bucket: each sender's staging holds its peers' parts in rank
 * order, each part the chunks to that peer in schedule order. Host code may reach such a
 * chunk only through memcpy (UBSan, in make sanitize, would flag a misaligned float load). */
static int misaligned_fp32_chunks(const rf_plan *plan, int64_t bucket_size) {
  const rf_layout *lay = plan->layout;
  int n = lay->world_size, count = 0;
  int64_t *bytes = calloc((size_t)n * (size_t)n, sizeof *bytes);
  int64_t *at = calloc((size_t)n * (size_t)n, sizeof *at);
  ASSERT_TRUE(bytes && at);
  for (int stage = RF_STAGE_RESHAPE; stage <= RF_STAGE_TRANSFER; stage++) {
    rf_schedule s;
    ASSERT_OK(
        rf_schedule_build(plan, (rf_stage)stage, bucket_size, rf_engine_pace(RF_MODE_FUSED), &s));
    for (int b = 0; b < s.bucket_count; b++) {
      const rf_bucket *bk = &s.buckets[b];
      memset(bytes, 0, (size_t)n * (size_t)n * sizeof *bytes);
      for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) /* each peer's part starts after the parts of lower ranks */
          for (int src = 0; src < n; src++)
            for (int64_t dst = 0, base = 0; dst < n; dst++) {
              at[src * n + dst] = base;
              base += bytes[src * n + dst];
            }
        for (int i = bk->first; i < bk->first + bk->count; i++) {
          const rf_piece *p = &plan->pieces[s.chunks[i].piece];
          if (rf_piece_is_local(plan, p))
            continue;
          int64_t k = (int64_t)rf_piece_src_world(plan, p) * n + rf_piece_dst_world(plan, p);
          if (pass == 0) {
            bytes[k] += s.chunks[i].bytes;
            continue;
          }
          count += rf_tensor_esize(&lay->model->tensors[p->tensor]) == 4 && at[k] % 4 == 2;
          at[k] += s.chunks[i].bytes;
        }
      }
    }
    rf_schedule_free(&s);
  }
  free(bytes);
  free(at);
  return count;
}

/* Runs every world of a model over the given layouts; `mixed` gives it tensors of three dtypes
 * (mix_dtypes). Adds the fp32 chunks that fused staging packs 2 mod 4 to *misaligned. */
static int test_model(const char *model, const layout_case *cases, int ncases, int mixed,
                      int *misaligned) {
  rf_model m;
  ASSERT_OK(rf_model_load(model, &m));
  if (mixed)
    mix_dtypes(&m);
  uint64_t *want = generator_checksums(&m);
  int worlds = 0;
  for (int li = 0; li < ncases; li++) {
    const layout_case *lc = &cases[li];
    rf_layout lay;
    make_layout(&lay, &m, lc, RF_ROLLOUT_DTYPE_MODEL);
    expect_rollout_sized_by_members(&lay);
    rank_job *jobs = calloc((size_t)lay.world_size, sizeof *jobs);
    ASSERT_TRUE(jobs);
    for (int kind = RF_PLAN_P2P; kind <= RF_PLAN_FANOUT; kind++) {
      if (kind == RF_PLAN_STAR && lay.rollout.dp > 1)
        continue; /* star sends every replica alike: the replicas add nothing to test */
      rf_plan plan;
      ASSERT_OK(rf_plan_build(&plan, &lay, (rf_plan_kind)kind, NULL));
      ASSERT_EQ(plan.reshape_count > 0, kind == RF_PLAN_STAR);
      for (size_t bi = 0; bi < RF_ARRAY_LEN(bucket_sizes); bi++)
        *misaligned += misaligned_fp32_chunks(&plan, bucket_sizes[bi]);
      ASSERT_EQ(plan.forward_depth > 0, kind == RF_PLAN_FANOUT && lay.rollout.dp > 1);
      for (int mapped = 0; mapped <= 1; mapped++)
        for (size_t bi = 0; bi < RF_ARRAY_LEN(bucket_sizes); bi++) {
          mapped_rounds = bi % 2 ? RF_MAPPED_ROUNDS_ON : RF_MAPPED_ROUNDS_OFF;
          run_world(&plan, mapped, bucket_sizes[bi], 60.0, -1, jobs);
          for (int r = 0; r < lay.world_size; r++)
            if (jobs[r].status != RF_OK)
              fprintf(stderr, "%s%s %s -> %s %s, %s, bucket %lld: rank %d: %s\n", model,
                      mixed ? " (mixed dtypes)" : "", lc->trainer, lc->rollout,
                      rf_plan_kind_name(plan.kind), mapped ? "mapped" : "messages",
                      (long long)bucket_sizes[bi], r, rf_status_name(jobs[r].status));
          /* Set REFIT_TEST_VERBOSE=1 to see each rank's own error line. */
          for (int r = 0; r < lay.world_size; r++) {
            ASSERT_OK(jobs[r].status);
            ASSERT_EQ(jobs[r].mapped, mapped);
          }
          check_world(&plan, jobs, want, want);
          free_jobs(jobs, lay.world_size);
          worlds++;
        }
      rf_plan_free(&plan);
    }
    free(jobs);
    rf_layout_free(&lay);
  }
  free(want);
  rf_model_free(&m);
  return worlds;
}

/* Trainer rank 0 never posts its part. Both rollout ranks wait for its pieces of the first
 * tensor and time out; trainer rank 1's pieces of the second tensor are then never received,
 * so it times out too. Every rank returns: nothing hangs. */
static void test_stall(void) {
  rf_model m;
  ASSERT_OK(rf_model_load("tiny", &m));
  rf_layout lay;
  make_layout(&lay, &m, &layouts[0], RF_ROLLOUT_DTYPE_MODEL);
  rf_plan plan;
  ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_P2P, NULL));
  rank_job jobs[4];
  rf_log_push_quiet(1); /* the timeouts are expected */
  run_world(&plan, 0, 0, 0.5, 0, jobs);
  rf_log_pop_quiet();
  ASSERT_OK(jobs[0].status);
  for (int r = 1; r < 4; r++)
    ASSERT_STATUS(jobs[r].status, RF_ERR_TIMEOUT);
  free_jobs(jobs, 4);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* A layout that sizes a rollout tensor in the model's dtype while its member is fp32 would let
 * the copies run past it: rf_buffers_init refuses it, in one line, before allocating. */
static void test_rollout_size_guard(void) {
  rf_model m;
  ASSERT_OK(rf_model_load("tiny", &m));
  int norm = rf_model_find(&m, "model.norm.weight");
  ASSERT_OK(rf_model_set_tensor_dtype(&m, norm, RF_DTYPE_FP32));
  rf_layout lay;
  make_layout(&lay, &m, &layouts[0], RF_ROLLOUT_DTYPE_MODEL);
  expect_rollout_sized_by_members(&lay);
  rf_plan plan;
  ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_P2P, NULL));
  rf_buffers data;
  ASSERT_OK(rf_buffers_init(&data, &plan, RF_MEM_HOST, SEED, NULL, 2));
  rf_buffers_free(&data);
  rf_rollout_tensor *rt = &lay.rollout_tensors[lay.slots[norm].local];
  ASSERT_STR_EQ(rt->name, "model.norm.weight");
  rt->bytes = rt->numel * 2;
  char err[512] = "";
  rf_log_capture(err, sizeof err);
  rf_status st = rf_buffers_init(&data, &plan, RF_MEM_HOST, SEED, NULL, 2);
  rf_log_capture(NULL, 0);
  ASSERT_STATUS(st, RF_ERR_INTERNAL);
  ASSERT_STR_EQ(err, "rollout tensor model.norm.weight is laid out as 128 bytes, but its member "
                     "model.norm.weight (fp32) needs 256; the layout must size it by its "
                     "members' dtype");
  rf_buffers_free(&data);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

static void write_config(char *path, const char *text) {
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, text, strlen(text)), (int64_t)strlen(text));
  close(fd);
}

int main(void) {
  /* The corrupt byte is logged, and found, in every world: quiet unless asked. */
  int verbose = getenv("REFIT_TEST_VERBOSE") != NULL;
  char small[] = "/tmp/refit-test-engine-XXXXXX", odd[] = "/tmp/refit-test-engine-odd-XXXXXX";
  write_config(small, small_llama);
  write_config(odd, odd_llama);
  test_stall();
  test_rollout_size_guard();
  rf_log_push_quiet(!verbose);
  int nl = (int)RF_ARRAY_LEN(layouts), no = (int)RF_ARRAY_LEN(odd_layouts);
  int worlds = 0, misaligned = 0, misaligned_mixed = 0;
  worlds += test_model("tiny", layouts, nl, 0, &misaligned);
  worlds += test_model(small, layouts, nl, 0, &misaligned);
  worlds += test_model(small, layouts, nl, 1, &misaligned_mixed);
  worlds += test_model(odd, odd_layouts, no, 1, &misaligned_mixed);
  rf_log_pop_quiet();
  unlink(small);
  unlink(odd);
  printf("worlds run: %d, each in %d modes; fp32 chunks packed 2 mod 4: %d\n", worlds, MODES,
         misaligned_mixed);
  /* Per model: `layouts` has 4 layouts of one replica with 3 plan kinds and 3 of several with 2
   * (no star), `odd_layouts` 3 of one replica with 3; each world twice (messages, mapped). */
  ASSERT_EQ(nl, 7);
  ASSERT_EQ(no, 3);
  ASSERT_EQ(worlds, (3 * (4 * 3 + 3 * 2) + 3 * 3) * 2 * (int)RF_ARRAY_LEN(bucket_sizes));
  /* Single-dtype models have no fp32 chunk; the mixed ones must exercise the misaligned case. */
  ASSERT_EQ(misaligned, 0);
  ASSERT_GT(misaligned_mixed, 0);
  return 0;
}
