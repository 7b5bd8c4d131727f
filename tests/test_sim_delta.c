/* test_sim_delta: refit simulate's delta refits (docs/architecture.md, "Delta refits"). Each
 * encoding's size and auto's choice at its break-even points, worked out on paper; the wire
 * bytes of a small plan at changed fractions 0, 1e-3, 0.5 and 1 for each choice, against the
 * formulas summed over its pieces here and pinned; the encode, flight and apply of that plan on
 * the toy cluster to the byte; fanout's forwarded deltas, a mapping transport's, the memory of
 * the version kept; the lower bound below every delta prediction; the calibration finding
 * hidden encode and apply rates; the cluster keys; and what refit simulate prints. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/simulate.h"
#include "sim/sim_internal.h"
#include "test.h"

#define ASSERT_NEAR(a, b, rel)                                                                     \
  do {                                                                                             \
    double rf_x_ = (a), rf_y_ = (b);                                                               \
    if (!(fabs(rf_x_ - rf_y_) <= (rel)*fabs(rf_y_))) {                                             \
      fprintf(stderr, "%s:%d: %s = %.17g, expected %.17g\n", __FILE__, __LINE__, #a, rf_x_,        \
              rf_y_);                                                                              \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

static const char *source_file(const char *rel) {
  static char path[1024];
  const char *src = getenv("REFIT_SOURCE_DIR");
  snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
  return path;
}

/* A job built as refit simulate builds it: the model, the layouts (tunix, hf order) and a plan
 * of `kind`, in one rf_job so that the report functions can take it. */
static void build_job(const char *trainer, const char *rollout, rf_placement placement,
                      rf_plan_kind kind, rf_job *job) {
  memset(job, 0, sizeof *job);
  ASSERT_OK(rf_model_load("tiny", &job->model));
  ASSERT_OK(rf_trainer_layout_parse(trainer, &job->trainer));
  ASSERT_OK(rf_rollout_layout_parse(rollout, &job->rollout));
  job->trainer.style = RF_STYLE_TUNIX;
  job->trainer.order = RF_ORDER_HF;
  ASSERT_OK(rf_layout_init(&job->layout, &job->model, &job->trainer, &job->rollout, placement));
  ASSERT_OK(rf_plan_build(&job->plan, &job->layout, kind, NULL));
}

static void free_job(rf_job *job) {
  rf_plan_free(&job->plan);
  rf_layout_free(&job->layout);
  rf_model_free(&job->model);
}

/* Sizes and the auto rule. n = 1024 bf16 elements: dense 32 + 2048 = 2080 bytes; bitmask
 * 32 + 128 + 2c; sparse 32 + 6c. Bitmask and sparse tie at c = 32 (224 bytes each), where
 * auto takes bitmask, sparse below; dense and bitmask tie at c = 960 (2080), where auto takes
 * dense, bitmask below. For 1-byte elements (fp8) the ties are at c = 32 (128 + c = 5c) and
 * c = 896 (1024 = 128 + c). An expected count may be fractional: n = 1001 elements of 4
 * bytes has a 128-byte mask (whole 32-bit words), so bitmask and sparse tie at c = 32. */
static void test_sizes(void) {
  ASSERT_NEAR(rf_sim_encoded_bytes(RF_SIM_ENCODING_DENSE, 1024, 32, 2), 2080, 0);
  ASSERT_NEAR(rf_sim_encoded_bytes(RF_SIM_ENCODING_BITMASK, 1024, 32, 2), 224, 0);
  ASSERT_NEAR(rf_sim_encoded_bytes(RF_SIM_ENCODING_SPARSE, 1024, 32, 2), 224, 0);
  ASSERT_NEAR(rf_sim_encoded_bytes(RF_SIM_ENCODING_BITMASK, 1001, 0.5, 4), 32 + 128 + 2, 0);
  ASSERT_NEAR(rf_sim_encoded_bytes(RF_SIM_ENCODING_SPARSE, 1001, 0.5, 4), 32 + 4, 0);
  const struct {
    int64_t n, e;
    double c;
    rf_sim_encoding want;
  } cases[] = {
      {1024, 2, 0, RF_SIM_ENCODING_SPARSE},    {1024, 2, 31, RF_SIM_ENCODING_SPARSE},
      {1024, 2, 32, RF_SIM_ENCODING_BITMASK},  {1024, 2, 33, RF_SIM_ENCODING_BITMASK},
      {1024, 2, 959, RF_SIM_ENCODING_BITMASK}, {1024, 2, 960, RF_SIM_ENCODING_DENSE},
      {1024, 2, 1024, RF_SIM_ENCODING_DENSE},  {1024, 1, 31, RF_SIM_ENCODING_SPARSE},
      {1024, 1, 32, RF_SIM_ENCODING_BITMASK},  {1024, 1, 895, RF_SIM_ENCODING_BITMASK},
      {1024, 1, 896, RF_SIM_ENCODING_DENSE},   {1001, 4, 31.9, RF_SIM_ENCODING_SPARSE},
      {1001, 4, 32, RF_SIM_ENCODING_BITMASK},  {1001, 4, 32.1, RF_SIM_ENCODING_BITMASK},
  };
  for (size_t i = 0; i < RF_ARRAY_LEN(cases); i++)
    ASSERT_EQ(rf_sim_delta_encoding(RF_DELTA_CHOICE_AUTO, cases[i].n, cases[i].c, cases[i].e),
              cases[i].want);
  /* A named encoding is taken even where it is the largest; off is whole versions. */
  ASSERT_EQ(rf_sim_delta_encoding(RF_DELTA_CHOICE_SPARSE, 1024, 1024, 2), RF_SIM_ENCODING_SPARSE);
  ASSERT_EQ(rf_sim_delta_encoding(RF_DELTA_CHOICE_BITMASK, 1024, 0, 2), RF_SIM_ENCODING_BITMASK);
  ASSERT_EQ(rf_sim_delta_encoding(RF_DELTA_CHOICE_OFF, 1024, 0, 2), RF_SIM_ENCODING_DENSE);
  rf_sim_delta_model d;
  ASSERT_OK(rf_sim_delta_model_init(RF_DELTA_CHOICE_AUTO, 0.01, &d));
  ASSERT_TRUE(d.choice == RF_DELTA_CHOICE_AUTO && d.changed == 0.01);
  char got[256];
  rf_log_capture(got, sizeof got);
  ASSERT_STATUS(rf_sim_delta_model_init(RF_DELTA_CHOICE_AUTO, 1.5, &d), RF_ERR_USAGE);
  rf_log_capture(NULL, 0);
  ASSERT_STR_EQ(got, "a changed fraction of 1.5 cannot be simulated; give a fraction from 0 to 1 "
                     "(--update sparse:F)");
  ASSERT_TRUE(d.choice == RF_DELTA_CHOICE_OFF);
}

/* What the formulas above give summed over the plan's transfer pieces (whole stage: a chunk
 * is a piece), each rounded to the byte, and what the appliers touch. */
static void expected_wire(const rf_plan *plan, rf_delta_choice choice, double f, int64_t *wire,
                          int64_t *applied) {
  *wire = *applied = 0;
  for (int i = plan->reshape_count; i < plan->piece_count; i++) {
    const rf_piece *p = &plan->pieces[i];
    int64_t n = rf_box_numel(&p->box);
    double c = f * (double)n, dense = 2.0 * (double)n,
           bitmask = (double)(4 * ((n + 31) / 32)) + 2 * c, sparse = 6 * c;
    double pick = choice == RF_DELTA_CHOICE_SPARSE     ? sparse
                  : choice == RF_DELTA_CHOICE_BITMASK  ? bitmask
                  : sparse < bitmask && sparse < dense ? sparse
                  : bitmask < dense                    ? bitmask
                                                       : dense;
    *wire += llround(32 + pick);
    *applied += llround(32 + pick) + llround(2 * c);
  }
}

/* tiny from fsdp=2 (node 0) to tp=2 (node 1) on the toy, grouped in one bucket: every piece
 * crosses node 0's one 1 GB/s adapter, encoded. Each trainer rank encodes what it sends,
 * reading both versions of it (twice its send bytes) on its own GPU at the default encode rate,
 * the copy rate (1000 GB/s); each rollout rank applies what it receives at the apply rate (the
 * same); latencies are 0. So pack is the larger trainer rank's 2 x send bytes / 1e12, transfer
 * the wire bytes / 1e9 and unpack the larger rollout rank's applied bytes / 1e12, exactly. */
static void test_toy(void) {
  rf_cluster toy;
  ASSERT_OK(rf_cluster_load(source_file("tests/data/cluster-toy.json"), &toy));
  ASSERT_TRUE(toy.gpu_delta_encode == 1000e9 && toy.gpu_delta_apply == 1000e9);
  ASSERT_TRUE(toy.host_delta_encode == 10e9 && toy.host_delta_apply == 10e9);
  rf_job job;
  build_job("fsdp=2", "tp=2", RF_PLACEMENT_DISAGGREGATED, RF_PLAN_P2P, &job);
  const rf_plan *plan = &job.plan;
  ASSERT_EQ(plan->transfer_bytes, 279808);
  const double fractions[] = {0, 1e-3, 0.5, 1};
  /* The wire bytes pinned, [auto, sparse, bitmask][fraction]: 62 pieces, 139904 elements. At
   * 0 changed, their headers (1984 bytes) and for bitmask the masks (17488); at 0.5 sparse
   * 1984 + 0.5 x 139904 x 6 and auto bitmask, 1984 + 17488 + 139904; at 1 auto sends dense,
   * 1984 + 279808, sparse 1984 + 139904 x 6 and bitmask 1984 + 17488 + 279808. */
  const int64_t pinned[3][4] = {
      {1984, 2808, 159376, 281792}, {1984, 2808, 421696, 841408}, {19472, 19744, 159376, 299280}};
  const rf_delta_choice choices[] = {RF_DELTA_CHOICE_AUTO, RF_DELTA_CHOICE_SPARSE,
                                     RF_DELTA_CHOICE_BITMASK};
  int64_t send = RF_MAX(plan->send_bytes[0], plan->send_bytes[1]);
  for (size_t ci = 0; ci < RF_ARRAY_LEN(choices); ci++)
    for (size_t fi = 0; fi < RF_ARRAY_LEN(fractions); fi++) {
      rf_sim_options o = {
          RF_MODE_GROUPED, 0, 1, 0, RF_WIRE_CONTIGUOUS, 0, {choices[ci], fractions[fi]}};
      rf_sim_result r;
      ASSERT_OK(rf_simulate(plan, &toy, &o, &r));
      int64_t wire, applied;
      expected_wire(plan, choices[ci], fractions[fi], &wire, &applied);
      ASSERT_EQ(r.wire_transfer_bytes, wire);
      ASSERT_EQ(r.wire_transfer_bytes, pinned[ci][fi]);
      ASSERT_EQ(r.class_bytes[RF_SIM_NETWORK], wire);
      ASSERT_EQ(r.delta_whole_bytes, 279808);
      ASSERT_EQ(r.encode_bytes, 2 * 279808);
      ASSERT_EQ(r.apply_bytes, applied);
      ASSERT_EQ(r.units, 1);
      ASSERT_EQ(r.messages, 4); /* one a rank pair */
      /* Encode and apply are phases of their own, as in the engine's timings; every chunk
       * crosses, so nothing is left of the packs and unpacks. */
      ASSERT_NEAR(r.phase[RF_PHASE_ENCODE], 2.0 * (double)send / 1e12, 1e-12);
      ASSERT_NEAR(r.encode_s, r.phase[RF_PHASE_ENCODE], 1e-12);
      ASSERT_NEAR(r.phase[RF_PHASE_PACK], 0.0, 1e-12);
      ASSERT_NEAR(r.phase[RF_PHASE_TRANSFER], (double)wire / 1e9, 1e-12);
      ASSERT_TRUE(r.phase[RF_PHASE_APPLY] <= (double)applied / 1e12 * (1 + 1e-12));
      ASSERT_NEAR(r.apply_s, r.phase[RF_PHASE_APPLY], 1e-12);
      ASSERT_NEAR(r.phase[RF_PHASE_UNPACK], 0.0, 1e-12);
      ASSERT_NEAR(r.phase[RF_PHASE_TOTAL],
                  r.phase[RF_PHASE_ENCODE] + r.phase[RF_PHASE_TRANSFER] + r.phase[RF_PHASE_APPLY],
                  1e-12);
      /* The version kept: each trainer rank's send bytes, beside its shards. */
      ASSERT_EQ(r.previous[0], plan->send_bytes[0]);
      ASSERT_EQ(r.previous[1], plan->send_bytes[1]);
      ASSERT_EQ(r.previous[2] + r.previous[3], 0);
      rf_sim_result_free(&r);
    }
  /* A cluster file's delta rates: encoding at 100 GB/s makes the pack ten times as long. */
  toy.gpu_delta_encode = 100e9;
  rf_sim_options o = {
      RF_MODE_GROUPED, 0, 1, 0, RF_WIRE_CONTIGUOUS, 0, {RF_DELTA_CHOICE_AUTO, 1e-3}};
  rf_sim_result r;
  ASSERT_OK(rf_simulate(plan, &toy, &o, &r));
  ASSERT_NEAR(r.phase[RF_PHASE_ENCODE], 2.0 * (double)send / 100e9, 1e-12);
  ASSERT_NEAR(r.encode_rate, 100e9, 0);
  rf_sim_result_free(&r);
  free_job(&job);
}

/* fanout on the toy, tiny from fsdp=2 (node 0) to two replicas of tp=1 (node 1): the trainer
 * ranks encode the transfer, the root replica forwards the encoded bytes it received, encoding
 * nothing, and both replicas apply. Colocated, what a rank keeps of its own shard is a local
 * copy, whole, and not part of the version it keeps. Over a mapping transport (the lent H200,
 * two ranks on its one GPU) the destination pulls the encoded bytes: no messages. */
static void test_stages(void) {
  rf_cluster toy, lent;
  ASSERT_OK(rf_cluster_load(source_file("tests/data/cluster-toy.json"), &toy));
  ASSERT_OK(rf_cluster_load(source_file("configs/clusters/h200-lent.json"), &lent));
  const rf_sim_delta_model auto_1e3 = {RF_DELTA_CHOICE_AUTO, 1e-3};
  rf_job job;
  build_job("fsdp=2", "tp=1,dp=2", RF_PLACEMENT_DISAGGREGATED, RF_PLAN_FANOUT, &job);
  ASSERT_EQ(job.plan.forward_bytes, 279168);
  rf_sim_options o = {RF_MODE_GROUPED, 0, 1, 0, RF_WIRE_CONTIGUOUS, 0, auto_1e3};
  rf_sim_result r;
  ASSERT_OK(rf_simulate(&job.plan, &toy, &o, &r));
  ASSERT_EQ(r.encode_bytes, 2 * 279168);
  ASSERT_EQ(r.delta_whole_bytes, 2 * 279168);
  ASSERT_EQ(r.class_bytes[RF_SIM_NETWORK], r.wire_transfer_bytes);
  ASSERT_EQ(r.class_bytes[RF_SIM_NVLINK], r.wire_forward_bytes);
  /* 37 transfer pieces and 21 forward ones (a tensor each), each 32 bytes of header and
   * 0.006 bytes an element (sparse), 139584 elements a stage: 1184 + 836 and 672 + 836. */
  ASSERT_EQ(r.wire_transfer_bytes, 2020);
  ASSERT_EQ(r.wire_forward_bytes, 1508);
  rf_sim_result_free(&r);
  /* Whole versions: the tally is the plan's own wire bytes. */
  o.delta = (rf_sim_delta_model){RF_DELTA_CHOICE_OFF, 0};
  ASSERT_OK(rf_simulate(&job.plan, &toy, &o, &r));
  ASSERT_EQ(r.wire_transfer_bytes, job.plan.wire_transfer_bytes);
  ASSERT_EQ(r.wire_forward_bytes, 279168);
  ASSERT_EQ(r.encode_bytes + r.apply_bytes + r.previous[0], 0);
  ASSERT_TRUE(r.encode_s == 0 && r.apply_s == 0 && r.encode_rate == 0);
  rf_sim_result_free(&r);
  free_job(&job);

  build_job("fsdp=2", "tp=2", RF_PLACEMENT_COLOCATED, RF_PLAN_P2P, &job);
  o.delta = auto_1e3;
  ASSERT_OK(rf_simulate(&job.plan, &toy, &o, &r));
  int64_t local = r.class_bytes[RF_SIM_PROCESS];
  ASSERT_GT(local, 0);
  ASSERT_EQ(r.delta_whole_bytes + local, job.plan.transfer_bytes);
  ASSERT_EQ(r.encode_bytes, 2 * r.delta_whole_bytes);
  ASSERT_EQ(r.previous[0] + r.previous[1], r.delta_whole_bytes);
  ASSERT_GT(r.previous[0], 0);
  /* The peak rank holds its shard, its rollout tensors, its staging and the version kept. */
  int w = r.peak_rank;
  ASSERT_EQ(r.peak_bytes, r.shards[w] + r.rollout[w] + r.staging[w] + r.previous[w]);
  rf_sim_result_free(&r);
  free_job(&job);

  build_job("fsdp=1", "tp=1", RF_PLACEMENT_DISAGGREGATED, RF_PLAN_P2P, &job);
  rf_sim_options m = {RF_MODE_FUSED, 0, 1, 1, RF_WIRE_CONTIGUOUS, 0, auto_1e3};
  ASSERT_OK(rf_simulate(&job.plan, &lent, &m, &r));
  ASSERT_EQ(r.messages, 0);
  ASSERT_EQ(r.class_bytes[RF_SIM_GPU], r.wire_transfer_bytes);
  ASSERT_EQ(r.encode_bytes, 2 * 279168);
  ASSERT_GT(r.staging[0], 0);
  ASSERT_TRUE(r.encode_s > 0 && r.apply_s > 0);
  rf_sim_result_free(&r);
  free_job(&job);
}

/* The lower bound of a delta refit. tiny fsdp=2 -> tp=2 on the toy: the whole model enters
 * node 1 by its one 1 GB/s adapter, each byte at the least auto makes of a bf16 byte at 1e-3
 * changed, sparse's 3 x 0.001 = 0.003 (cells rounded down): below 279168 x 0.003 bytes. Then
 * no prediction is below its bound, for every plan kind, mode and bucket of the jobs of
 * test_sim's check and each delta choice. */
static void test_bound(void) {
  rf_cluster toy, vm, lent;
  ASSERT_OK(rf_cluster_load(source_file("tests/data/cluster-toy.json"), &toy));
  ASSERT_OK(rf_cluster_load(source_file("configs/clusters/vm-2core.json"), &vm));
  ASSERT_OK(rf_cluster_load(source_file("configs/clusters/h200-lent.json"), &lent));
  rf_job job;
  build_job("fsdp=2", "tp=2", RF_PLACEMENT_DISAGGREGATED, RF_PLAN_P2P, &job);
  rf_sim_delta_model d = {RF_DELTA_CHOICE_AUTO, 1e-3};
  rf_sim_bound b;
  ASSERT_OK(rf_sim_lower_bound_delta(&job.layout, &toy, 1, 0, &d, &b));
  ASSERT_NEAR(b.seconds, 824e-9, 1e-12);
  ASSERT_TRUE(b.seconds <= 279168 * 0.003e-9);
  ASSERT_STR_EQ(b.binding, "NIC ingress of node 1 (1 adapter, 1 GB/s)");
  rf_sim_bound whole;
  ASSERT_OK(rf_sim_lower_bound_delta(&job.layout, &toy, 1, 0, NULL, &whole));
  ASSERT_NEAR(whole.seconds, 279168e-9, 1e-12);
  free_job(&job);

  const struct {
    const char *trainer, *rollout;
    rf_placement placement;
    const rf_cluster *c;
    int device, mapping;
  } jobs[] = {
      {"fsdp=2", "tp=2", RF_PLACEMENT_DISAGGREGATED, &toy, 1, 0},
      {"fsdp=2", "tp=1,dp=2", RF_PLACEMENT_DISAGGREGATED, &toy, 1, 0},
      {"fsdp=2", "tp=2", RF_PLACEMENT_COLOCATED, &toy, 1, 0},
      {"fsdp=2,dp=2", "tp=2,dp=2", RF_PLACEMENT_COLOCATED, &toy, 1, 0},
      {"fsdp=1", "tp=1", RF_PLACEMENT_DISAGGREGATED, &lent, 1, 1},
      {"fsdp=2", "tp=1,dp=2", RF_PLACEMENT_DISAGGREGATED, &vm, 0, 0},
      {"fsdp=2", "tp=2", RF_PLACEMENT_COLOCATED, &vm, 0, 1},
  };
  const rf_sim_delta_model deltas[] = {{RF_DELTA_CHOICE_AUTO, 1e-3},
                                       {RF_DELTA_CHOICE_AUTO, 0.01},
                                       {RF_DELTA_CHOICE_SPARSE, 0.5},
                                       {RF_DELTA_CHOICE_BITMASK, 1},
                                       {RF_DELTA_CHOICE_AUTO, 1}};
  int checked = 0;
  for (size_t j = 0; j < RF_ARRAY_LEN(jobs); j++)
    for (int kind = 0; kind < RF_PLAN_KIND_COUNT; kind++) {
      rf_rollout_layout r;
      ASSERT_OK(rf_rollout_layout_parse(jobs[j].rollout, &r));
      if (kind == RF_PLAN_FANOUT && r.dp == 1)
        continue; /* no replicas to forward to */
      build_job(jobs[j].trainer, jobs[j].rollout, jobs[j].placement, (rf_plan_kind)kind, &job);
      for (size_t k = 0; k < RF_ARRAY_LEN(deltas); k++) {
        ASSERT_OK(rf_sim_lower_bound_delta(&job.layout, jobs[j].c, jobs[j].device, jobs[j].mapping,
                                           &deltas[k], &b));
        ASSERT_TRUE(b.seconds > 0);
        for (int mode = 0; mode < RF_MODE_COUNT; mode++)
          for (int64_t bucket = 0; bucket <= 16384; bucket += 16384) {
            rf_sim_options o = {(rf_mode)mode,
                                bucket,
                                jobs[j].device,
                                jobs[j].mapping,
                                jobs[j].device ? RF_WIRE_CONTIGUOUS : RF_WIRE_GATHERS,
                                0,
                                deltas[k]};
            rf_sim_result res;
            ASSERT_OK(rf_simulate(&job.plan, jobs[j].c, &o, &res));
            if (!(b.seconds <= res.phase[RF_PHASE_TOTAL] * (1 + 1e-9)))
              fprintf(stderr,
                      "%s -> %s %s %s bucket %lld delta %s %g: bound %.9g (%s) above %.9g\n",
                      jobs[j].trainer, jobs[j].rollout, rf_plan_kind_name((rf_plan_kind)kind),
                      rf_mode_name((rf_mode)mode), (long long)bucket,
                      rf_delta_choice_name(deltas[k].choice), deltas[k].changed, b.seconds,
                      b.binding, res.phase[RF_PHASE_TOTAL]);
            ASSERT_TRUE(b.seconds <= res.phase[RF_PHASE_TOTAL] * (1 + 1e-9));
            checked++;
            rf_sim_result_free(&res);
          }
      }
      free_job(&job);
    }
  ASSERT_GT(checked, 300);
}

/* The fit finds hidden delta rates (0.2 GB/s encoding, 0.01 GB/s applying, slow enough to be
 * most of the delta runs' time) from the times of tiny fsdp=2 -> tp=2 sending deltas at 1%
 * changed (grouped) and at 50% (fused), with whole-version runs beside them and every other
 * rate the hidden one: five rates fitted, the two back within 1%; without a delta sample,
 * three. Both fractions are needed: each run encodes the same bytes, both versions of every
 * piece, and applies more the more changed, which is what tells the two rates apart. */
static void test_fit(void) {
  rf_cluster hidden, start;
  ASSERT_OK(rf_cluster_load(source_file("tests/data/cluster-toy.json"), &hidden));
  start = hidden;
  hidden.gpu_delta_encode = 0.2e9;
  hidden.gpu_delta_apply = 0.01e9;
  rf_job job;
  build_job("fsdp=2", "tp=2", RF_PLACEMENT_DISAGGREGATED, RF_PLAN_P2P, &job);
  rf_sim_sample samples[4];
  rf_sim_trace *traces[4];
  const double fraction[4] = {0, 0, 0.01, 0.5};
  for (int i = 0; i < 4; i++) {
    rf_sim_options o = {
        i % 2 ? RF_MODE_FUSED : RF_MODE_GROUPED,
        0,
        1,
        0,
        RF_WIRE_CONTIGUOUS,
        0,
        {i < 2 ? RF_DELTA_CHOICE_OFF : RF_DELTA_CHOICE_AUTO, i < 2 ? 0 : fraction[i]}};
    ASSERT_OK(rf_sim_trace_record(&job.plan, &start, &o, &traces[i]));
    samples[i] = (rf_sim_sample){traces[i], 0.0, NULL};
    ASSERT_OK(rf_sim_trace_time(traces[i], &hidden, &samples[i].measured_s));
  }
  rf_sim_fit fit;
  rf_cluster three = start;
  ASSERT_OK(rf_sim_calibrate(&three, 1, samples, 2, &fit));
  ASSERT_EQ(fit.count, 3);
  ASSERT_OK(rf_sim_calibrate(&start, 1, samples, 4, &fit));
  ASSERT_EQ(fit.count, 5);
  ASSERT_STR_EQ(fit.names[3], "gpu.delta_encode_GBps");
  ASSERT_STR_EQ(fit.names[4], "gpu.delta_apply_GBps");
  ASSERT_NEAR(fit.before[3], 1000e9, 0);
  ASSERT_NEAR(start.gpu_delta_encode, 0.2e9, 0.01);
  ASSERT_NEAR(start.gpu_delta_apply, 0.01e9, 0.01);
  ASSERT_TRUE(fit.worst_error < 1e-3);
  for (int i = 0; i < 4; i++)
    rf_sim_trace_free(traces[i]);
  free_job(&job);
}

/* The cluster keys: the GPU's and the host's delta rates read in GB/s, and refused as any rate
 * is when they are not positive. */
static void test_cluster_keys(const char *dir) {
  char path[512], text[1024], got[512] = "";
  const char *body =
      "{\"name\": \"d\", \"nodes\": 1, \"node\": {\"gpus\": 1, \"gpu\": {\"name\": \"g\", "
      "\"memory_GiB\": 1, \"copy_GBps\": 100, \"delta_encode_GBps\": %s, \"delta_apply_GBps\": "
      "40}, \"pcie_GBps\": 10, \"host\": {\"memcpy_GBps\": 10, \"mpi_GBps\": 5, \"memory_GiB\": "
      "1, \"delta_encode_GBps\": 3, \"delta_apply_GBps\": 2}}, \"latency_us\": {\"node\": 1, "
      "\"copy\": 1}}";
  snprintf(path, sizeof path, "%s/delta.json", dir);
  for (int bad = 0; bad <= 1; bad++) {
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    snprintf(text, sizeof text, body, bad ? "-1" : "80");
    fputs(text, f);
    fclose(f);
    rf_cluster c;
    if (!bad) {
      ASSERT_OK(rf_cluster_load(path, &c));
      ASSERT_TRUE(c.gpu_delta_encode == 80e9 && c.gpu_delta_apply == 40e9);
      ASSERT_TRUE(c.host_delta_encode == 3e9 && c.host_delta_apply == 2e9);
      continue;
    }
    rf_log_capture(got, sizeof got);
    ASSERT_STATUS(rf_cluster_load(path, &c), RF_ERR_CONFIG);
    rf_log_capture(NULL, 0);
    char want[768];
    snprintf(want, sizeof want,
             "cluster %s: key 'node.gpu.delta_encode_GBps' is missing or not a positive number; "
             "see configs/clusters/README.md",
             path);
    ASSERT_STR_EQ(got, want);
  }
}

/* What refit simulate prints for a delta: the mode line names it, a delta line gives the wire
 * bytes, the encodings and the two passes, the memory line the version kept; --json a delta
 * object and the memory's previous_version. Whole versions print neither. */
static void test_report(const char *dir) {
  rf_cluster toy;
  ASSERT_OK(rf_cluster_load(source_file("tests/data/cluster-toy.json"), &toy));
  rf_job job;
  build_job("fsdp=2", "tp=2", RF_PLACEMENT_DISAGGREGATED, RF_PLAN_P2P, &job);
  static rf_config cfg; /* zero: whole-stage buckets, no published time */
  rf_sim_context x = {.cfg = &cfg, .job = &job, .cluster = &toy, .device = 1};
  x.delta = (rf_sim_delta_model){RF_DELTA_CHOICE_AUTO, 1e-3};
  ASSERT_OK(rf_sim_lower_bound_delta(&job.layout, &toy, 1, 0, &x.delta, &x.bound));
  for (int m = 0; m < RF_MODE_COUNT; m++)
    x.mode_bound[m] = x.bound;
  rf_sim_options o = {RF_MODE_GROUPED, 0, 1, 0, RF_WIRE_CONTIGUOUS, 0, x.delta};
  rf_sim_result r;
  ASSERT_OK(rf_simulate(&job.plan, &toy, &o, &r));
  json_t *j = rf_sim_mode_json(&x, RF_MODE_GROUPED, &r);
  json_t *d = json_object_get(j, "delta");
  ASSERT_STR_EQ(json_string_value(json_object_get(d, "choice")), "auto");
  ASSERT_TRUE(json_real_value(json_object_get(d, "changed_fraction")) == 1e-3);
  ASSERT_EQ(json_integer_value(json_object_get(d, "wire_transfer_bytes")), 2808);
  ASSERT_EQ(json_integer_value(json_object_get(d, "whole_bytes")), 279808);
  ASSERT_EQ(json_integer_value(json_object_get(json_object_get(d, "chunks"), "sparse")),
            r.delta_chunks[RF_SIM_ENCODING_SPARSE]);
  ASSERT_EQ(json_integer_value(json_object_get(d, "encode_bytes")), 2 * 279808);
  ASSERT_TRUE(json_real_value(json_object_get(d, "encode_s")) == r.encode_s);
  ASSERT_TRUE(json_real_value(json_object_get(d, "apply_rate_GBps")) == 1000);
  json_t *mem = json_object_get(j, "memory");
  ASSERT_EQ(json_integer_value(json_object_get(mem, "previous_version")), r.previous[r.peak_rank]);
  json_decref(j);
  /* The text, through a file in place of stdout. */
  char path[512], out[8192];
  snprintf(path, sizeof path, "%s/report.txt", dir);
  fflush(stdout);
  int saved = dup(1), fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
  ASSERT_TRUE(saved >= 0 && fd >= 0 && dup2(fd, 1) == 1);
  rf_sim_print_mode(&x, RF_MODE_GROUPED, &r);
  x.delta = (rf_sim_delta_model){RF_DELTA_CHOICE_OFF, 0};
  rf_sim_print_mode(&x, RF_MODE_GROUPED, &r);
  fflush(stdout);
  ASSERT_TRUE(dup2(saved, 1) == 1);
  close(fd);
  close(saved);
  FILE *f = fopen(path, "r");
  size_t n = fread(out, 1, sizeof out - 1, f);
  fclose(f);
  out[n] = '\0';
  ASSERT_TRUE(
      strstr(out, "mode grouped     bucket whole stage, delta auto at 0.1% changed: total ") ==
      out);
  /* Encode and apply are named in the sum, as phases of their own. */
  ASSERT_TRUE(strstr(out, " s = encode 2.798e-07 + pack 0 + transfer ") != NULL);
  ASSERT_TRUE(strstr(out, " + unpack 0 + apply 1.54e-09 s; latency ") != NULL);
  /* Each trainer rank reads both versions of its 139904 bytes at 1000 GB/s, both at once; the
   * appliers touch the 2808 encoded bytes and the 272 changed ones. */
  ASSERT_TRUE(strstr(out, "\n  delta          auto, 0.1% of elements changed: 2808 transfer bytes "
                          "on the wire, 0 forwarded; 62 chunks (279808 bytes whole) encoded: "
                          "dense 0, bitmask 0, sparse 62; encode 559616 bytes read at 1000 GB/s "
                          "(gpu.delta_encode_GBps): 2.798e-07 s; apply 3080 bytes at "
                          "1000 GB/s (gpu.delta_apply_GBps): 1.54e-09 s\n") != NULL);
  ASSERT_TRUE(strstr(out, "staging 1.37 KiB, previous version 136.62 KiB); fullest") != NULL);
  /* Whole versions: the second block has none of it. */
  const char *second = strstr(out + 1, "mode grouped     bucket whole stage: total ");
  ASSERT_TRUE(second != NULL);
  ASSERT_TRUE(strstr(second, "delta") == NULL && strstr(second, "previous") == NULL);
  rf_sim_result_free(&r);
  free_job(&job);
}

int main(void) {
  char dir[] = "/tmp/test_sim_delta.XXXXXX";
  ASSERT_TRUE(mkdtemp(dir) != NULL);
  test_sizes();
  test_toy();
  test_stages();
  test_bound();
  test_fit();
  test_cluster_keys(dir);
  test_report(dir);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ASSERT_EQ(system(cmd), 0);
  printf("test_sim_delta: all passed\n");
  return 0;
}
