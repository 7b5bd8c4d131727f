/* The engine moves --rollout-dtype fp8 end to end without mpirun: every rank is a thread and
 * the loopback transport carries the bytes. A small Llama whose attention and MLP shares are
 * whole 128x128 blocks at rollout tp=2 runs from trainer layouts whose shards hold whole blocks
 * (the source quantizes: fp8 and scales on the wire), cut blocks (fsdp=8: 64-row shards) or
 * store them transposed (JAX order), which the destination quantizes, and a colocated layout;
 * p2p and star, all three modes, a whole-stage bucket and one smaller than a band of blocks.
 * Every rollout rank's fp8 bytes and scales must equal the CPU reference quantization of the
 * generator's values, the checksums of each replica the reference's, the trainer's the
 * generator's; one flipped fp8 byte and one flipped scale are each named in one line. Fanout's
 * replicas forward fp8 and scales. Each world runs over messages (like mpi) and over a
 * mapping (like shm: the destination quantizes out of its source's memory), fanout's mapped
 * worlds with --mapped-rounds off at one bucket size and on at the other. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_worlds.h"
#include "verify/fp8.h"

static const layout_case layouts[] = {
    {"fsdp=2", "tp=2", RF_STYLE_TUNIX, RF_ORDER_HF, RF_PLACEMENT_DISAGGREGATED},
    {"fsdp=8", "tp=2", RF_STYLE_FSDP2, RF_ORDER_HF, RF_PLACEMENT_DISAGGREGATED},
    {"fsdp=2,tp=2", "tp=2", RF_STYLE_TUNIX, RF_ORDER_JAX, RF_PLACEMENT_DISAGGREGATED},
    {"fsdp=4", "tp=2", RF_STYLE_FSDP2, RF_ORDER_HF, RF_PLACEMENT_COLOCATED},
    /* Replicas: fanout forwards fp8 and scales; with fsdp=8 the root replica quantizes each
     * block at the end of the round that brings its last piece, before a later round forwards
     * it (two steps for three replicas). */
    {"fsdp=2", "tp=1,dp=2", RF_STYLE_TUNIX, RF_ORDER_HF, RF_PLACEMENT_DISAGGREGATED},
    {"fsdp=8", "tp=1,dp=3", RF_STYLE_FSDP2, RF_ORDER_HF, RF_PLACEMENT_DISAGGREGATED},
};
/* 0: each stage one bucket; 20000: less than one 128-row band of a 512-column tensor, so the
 * schedule cuts source-quantized pieces into runs of blocks. */
static const int64_t bucket_sizes[] = {0, 20000};

/* The checksums of every whole tensor: the generator's in the trainer's dtype, and what the
 * rollout holds: for fp8 tensors the CPU reference quantization of the generator's values. */
static void expected_checksums(const rf_layout *lay, uint64_t *trainer, uint64_t *rollout) {
  const rf_model *m = lay->model;
  for (int t = 0; t < m->tensor_count; t++) {
    const rf_tensor *x = &m->tensors[t];
    rf_box whole = rf_box_whole(x);
    void *buf = malloc((size_t)x->bytes);
    ASSERT_TRUE(buf);
    rf_region r = rf_region_row_major(buf, &whole, rf_dtype_size(x->dtype));
    rf_fill_region(&r, &whole, x, SEED, NULL, x->dtype);
    trainer[t] = rollout[t] = rf_checksum_region(&r, &whole, x, x->dtype);
    if (rf_layout_fp8(lay, t)) {
      rf_box blocks = {{0, 0}, {(x->shape[0] + 127) / 128, (x->shape[1] + 127) / 128}};
      uint8_t *q = malloc((size_t)rf_box_numel(&whole));
      float *s = malloc((size_t)rf_box_numel(&blocks) * sizeof *s);
      ASSERT_TRUE(q && s);
      ASSERT_OK(
          rf_fp8_quantize_ref(x->name, buf, x->dtype, x->shape[0], x->shape[1], x->shape[1], q, s));
      rf_region qr = rf_region_row_major(q, &whole, 1);
      rf_region sr = rf_region_row_major(s, &blocks, 4);
      rollout[t] = rf_fp8_checksum(RF_CHECKSUM_CURRENT, x, &qr, &whole, &sr, &blocks);
      free(q);
      free(s);
    }
    free(buf);
  }
}

/* Returns the worlds run; adds the plans' source- and destination-quantized tensors and their
 * forwarded wire bytes. */
static int run_layouts(const rf_model *m, int *source, int *destination, int64_t *forwarded) {
  int worlds = 0, nt = m->tensor_count;
  uint64_t *trainer_want = calloc((size_t)nt, 8), *rollout_want = calloc((size_t)nt, 8);
  ASSERT_TRUE(trainer_want && rollout_want);
  for (size_t li = 0; li < RF_ARRAY_LEN(layouts); li++) {
    rf_layout lay;
    make_layout(&lay, m, &layouts[li], RF_FORMAT_FP8);
    expected_checksums(&lay, trainer_want, rollout_want);
    rank_job *jobs = calloc((size_t)lay.world_size, sizeof *jobs);
    ASSERT_TRUE(jobs);
    for (int kind = RF_PLAN_P2P; kind <= RF_PLAN_FANOUT; kind++) {
      if (kind == RF_PLAN_STAR && lay.rollout.dp > 1)
        continue;
      rf_plan plan;
      ASSERT_OK(rf_plan_build(&plan, &lay, (rf_plan_kind)kind, NULL));
      *forwarded += plan.wire_forward_bytes;
      *source += plan.source_tensors;
      *destination += plan.destination_tensors;
      for (int mapped = 0; mapped <= 1; mapped++)
        for (size_t bi = 0; bi < RF_ARRAY_LEN(bucket_sizes); bi++) {
          mapped_rounds = bi % 2 ? RF_MAPPED_ROUNDS_ON : RF_MAPPED_ROUNDS_OFF;
          run_world(&plan, mapped, bucket_sizes[bi], 60.0, -1, jobs);
          for (int r = 0; r < lay.world_size; r++)
            if (jobs[r].status != RF_OK)
              fprintf(stderr, "%s -> %s %s, %s, bucket %lld: rank %d: %s\n", layouts[li].trainer,
                      layouts[li].rollout, rf_plan_kind_name(plan.kind),
                      mapped ? "mapped" : "messages", (long long)bucket_sizes[bi], r,
                      rf_status_name(jobs[r].status));
          for (int r = 0; r < lay.world_size; r++)
            ASSERT_OK(jobs[r].status);
          check_world(&plan, jobs, trainer_want, rollout_want);
          free_jobs(jobs, lay.world_size);
          worlds++;
        }
      rf_plan_free(&plan);
    }
    free(jobs);
    rf_layout_free(&lay);
  }
  free(trainer_want);
  free(rollout_want);
  return worlds;
}

/* The element check finds exactly one wrong element, and says so in the one line `want`. */
static void expect_one_wrong(rf_engine *e, const char *want) {
  char err[512] = "";
  rf_log_capture(err, sizeof err);
  ASSERT_EQ(rf_engine_check(e, NULL), 1);
  rf_log_capture(NULL, 0);
  ASSERT_STR_EQ(err, want);
}

/* One rank that is both trainer and rollout (colocated fsdp=1 -> tp=1): a flipped fp8 byte of
 * q_proj and a flipped scale of down_proj are each one wrong element, in one line each. */
static void test_flipped_bytes(const rf_model *m) {
  static const layout_case one = {"fsdp=1", "tp=1", RF_STYLE_TUNIX, RF_ORDER_HF,
                                  RF_PLACEMENT_COLOCATED};
  rf_layout lay;
  make_layout(&lay, m, &one, RF_FORMAT_FP8);
  rf_plan plan;
  ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_P2P, NULL));
  rf_loopback *lb;
  ASSERT_OK(rf_loopback_create(&plan, 0, 5.0, &lb));
  rf_buffers data;
  rf_transport tp;
  ASSERT_OK(rf_buffers_init(&data, &plan, RF_MEM_HOST, SEED, NULL, 0));
  ASSERT_OK(rf_loopback_open(lb, 0, &tp));
  rf_engine e;
  double times[RF_PHASE_COUNT];
  ASSERT_OK(rf_engine_init(&e, &data, &tp, RF_MODE_GROUPED, 0, SEED, RF_INJECT_NONE, 0));
  ASSERT_OK(rf_engine_poison(&e));
  ASSERT_OK(rf_engine_iterate(&e, times, 0));
  ASSERT_EQ(rf_engine_check(&e, NULL), 0);

  int q = rf_model_find(m, "model.layers.0.self_attn.q_proj.weight");
  int down = rf_model_find(m, "model.layers.1.mlp.down_proj.weight");
  ASSERT_TRUE(q >= 0 && down >= 0);
  /* q_proj is rows 0..511 of qkv_proj: its element (1, 2) is byte 1 * 512 + 2. */
  uint8_t *qkv = data.rollout[lay.slots[q].local];
  uint8_t was = qkv[514];
  qkv[514] ^= 0x01;
  /* down_proj [512, 1024] has 4 x 8 scales: block (3, 5) is scale 29. */
  uint32_t *scales = data.rollout[lay.slots[down].local + 1];
  ASSERT_STR_EQ(lay.rollout_tensors[lay.slots[down].local + 1].name,
                "model.layers.1.mlp.down_proj.weight_scale_inv");
  uint32_t scale_was = scales[29];
  char want[512];
  snprintf(want, sizeof want,
           "verify: model.layers.0.self_attn.q_proj.weight on rollout rank 0: element 514 "
           "(row 1, col 2) is 0x%x, expected 0x%x",
           (unsigned)(uint8_t)(was ^ 0x01), (unsigned)was);
  expect_one_wrong(&e, want);
  qkv[514] = was;
  scales[29] ^= 0x80000000u; /* the scale's sign */
  snprintf(want, sizeof want,
           "verify: model.layers.1.mlp.down_proj.weight_scale_inv on rollout rank 0: element 29 "
           "(row 3, col 5) is 0x%x, expected 0x%x",
           scale_was ^ 0x80000000u, scale_was);
  expect_one_wrong(&e, want);
  rf_engine_free(&e);
  rf_transport_close(&tp);
  rf_buffers_free(&data);
  rf_loopback_free(lb);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
}

int main(void) {
  rf_model m;
  load_fp8_llama(&m);
  test_flipped_bytes(&m);
  rf_log_push_quiet(getenv("REFIT_TEST_VERBOSE") == NULL); /* the corrupt byte is logged */
  int source = 0, destination = 0;
  int64_t forwarded = 0;
  int worlds = run_layouts(&m, &source, &destination, &forwarded);
  rf_log_pop_quiet();
  printf("fp8 worlds run: %d, each in %d modes; tensors quantized at the source %d, at the "
         "destination %d; fp8 bytes forwarded %lld\n",
         worlds, MODES, source, destination, (long long)forwarded);
  /* 4 layouts of one replica with p2p, star and fanout (the same as p2p there), 2 of several
   * replicas with p2p and fanout; messages and mapped, two bucket sizes each. */
  ASSERT_EQ(worlds, (4 * 3 + 2 * 2) * 2 * 2);
  ASSERT_GT(forwarded, 0);
  ASSERT_GT(source, 0);
  ASSERT_GT(destination, 0);
  rf_model_free(&m);
  return 0;
}
