/* test_sim: refit simulate's model against hand-computed cases. The flow solver's max-min
 * sharing on a three-flow example worked out on paper; a two-node toy cluster whose one
 * adapter per node carries the whole model, so the prediction is the max-over-links bound to
 * the byte; the messages and staging the walk counts, equal to what refit run reported for the
 * same job; link classes of colocated and GPU-sharing placements; fanout's forward stage after
 * its transfer; every cluster-file error as its exact line; a mapping transport's one copy a
 * piece, pulled or pushed, and one process's local copies; the calibration finding rates it
 * was not told from times they produced; and quantized rollouts, their quantizing charged on
 * the rank that does it at the cluster's quantize rate, and fitted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* rf_sim_options.delta for whole versions, as refit moves them without --delta. */
#define WHOLE                                                                                      \
  { RF_DELTA_CHOICE_OFF, 0.0 }

static char tmpdir[256];

static const char *source_file(const char *rel) {
  static char path[1024];
  const char *src = getenv("REFIT_SOURCE_DIR");
  snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
  return path;
}

/* Two links of 1 and 2 bytes/s; f1 (1 byte) on the first, f2 (1 byte) on both, f3 (4 bytes) on
 * the second. The first link is the tighter (1/2 against 2/2), so f1 and f2 get 0.5 each and
 * f3 what the second has left, 1.5. At t = 2 f1 and f2 are done and f3 has 1 byte left, which
 * it moves alone at 2 bytes/s: the last flow ends at 2.5. */
static void test_solver(void) {
  sim_solver *s;
  ASSERT_OK(sim_solver_new(2, &s));
  const double cap[2] = {1.0, 2.0};
  sim_flow f[3] = {{1, 1, {0}}, {1, 2, {0, 1}}, {4, 1, {1}}};
  double end;
  ASSERT_OK(sim_solve(s, f, 3, cap, &end));
  ASSERT_TRUE(end == 2.5);
  /* Three equal flows on one link of 3 bytes/s end together, at 3 s; no bytes, no time. */
  sim_flow g[4] = {{3, 1, {1}}, {3, 1, {1}}, {3, 1, {1}}, {0, 1, {0}}};
  const double three[2] = {1.0, 3.0};
  ASSERT_OK(sim_solve(s, g, 4, three, &end));
  ASSERT_TRUE(end == 3.0);
  ASSERT_OK(sim_solve(s, g + 3, 1, three, &end));
  ASSERT_TRUE(end == 0.0);
  /* A link the filling cannot share out, infinite or of no rate, is an error, not a spin. */
  char got[256];
  const double infinite[2] = {1.0, INFINITY}, none[2] = {1.0, 0.0};
  rf_log_capture(got, sizeof got);
  ASSERT_STATUS(sim_solve(s, g, 3, infinite, &end), RF_ERR_INTERNAL);
  ASSERT_STR_EQ(got, "the flow model met a link share of inf bytes/s; every link rate must be "
                     "finite and positive (at most 1e+15 bytes/s)");
  ASSERT_STATUS(sim_solve(s, g, 3, none, &end), RF_ERR_INTERNAL);
  ASSERT_STR_EQ(got, "the flow model met a link share of 0 bytes/s; every link rate must be "
                     "finite and positive (at most 1e+15 bytes/s)");
  rf_log_capture(NULL, 0);
  ASSERT_OK(sim_solve(s, f, 3, cap, &end));
  ASSERT_TRUE(end == 2.5);
  sim_solver_free(s);
}

/* The trainer style build_plan lays out (its order is always hf). */
static rf_trainer_style build_style = RF_STYLE_TUNIX;

static void build_plan(const char *model, const char *trainer, const char *rollout,
                       rf_placement placement, rf_model *m, rf_layout *lay, rf_plan *plan) {
  rf_trainer_layout t;
  rf_rollout_layout r;
  ASSERT_OK(rf_model_load(model, m));
  ASSERT_OK(rf_trainer_layout_parse(trainer, &t));
  ASSERT_OK(rf_rollout_layout_parse(rollout, &r));
  t.style = build_style;
  ASSERT_OK(rf_layout_init(lay, m, &t, &r, placement));
  ASSERT_OK(rf_plan_build(plan, lay, RF_PLAN_P2P, NULL));
}

/* tiny from trainer fsdp=2 (node 0, GPUs 0 and 1) to rollout tp=2 (node 1): every byte leaves
 * node 0 by its one 8 Gb/s adapter and enters node 1 by its one, so both carry all 279808
 * transfer bytes at 1 GB/s and the flight is 279808 / 1e9 s, the max-over-links bound itself.
 * Each rank packs and unpacks on its own GPU's copy engine (1000 GB/s), all at once, so they
 * add the largest rank's bytes / 1e12: in grouped a trainer rank packs 24576 bytes (its boxes
 * that are not one contiguous run) and a rollout rank unpacks 98304 (what it cannot receive in
 * place); in fused each packs or unpacks its whole half, 139904. refit run of the same job
 * printed 62 messages (grouped) and 4 (fused) and staging of 98304 and 279808 bytes: the walk
 * counts the same. */
static void test_toy(void) {
  rf_cluster c;
  ASSERT_OK(rf_cluster_load(source_file("tests/data/cluster-toy.json"), &c));
  ASSERT_EQ(c.nodes, 2);
  ASSERT_EQ(c.ranks_per_node, 2);
  ASSERT_TRUE(c.nic == 1e9);
  rf_model m;
  rf_layout lay;
  rf_plan plan;
  build_plan("tiny", "fsdp=2", "tp=2", RF_PLACEMENT_DISAGGREGATED, &m, &lay, &plan);
  ASSERT_EQ(plan.transfer_bytes, 279808);
  /* fused on a wire that gathers (mpi's datatypes, the rule alone here) copies the strided
   * chunks that grouped packs and unpacks, and stages nothing. */
  const struct {
    rf_mode mode;
    rf_wire wire;
    int64_t messages, staging, pack, unpack;
  } cases[] = {{RF_MODE_GROUPED, RF_WIRE_CONTIGUOUS, 62, 98304, 24576, 98304},
               {RF_MODE_FUSED, RF_WIRE_CONTIGUOUS, 4, 279808, 139904, 139904},
               {RF_MODE_FUSED, RF_WIRE_GATHERS, 4, 0, 24576, 98304}};
  for (size_t i = 0; i < RF_ARRAY_LEN(cases); i++) {
    rf_sim_options o = {cases[i].mode, 0, 1, 0, cases[i].wire, 0, WHOLE};
    rf_sim_result r;
    ASSERT_OK(rf_simulate(&plan, &c, &o, &r));
    ASSERT_NEAR(r.bound_s, 279808e-9, 1e-12);
    ASSERT_NEAR(r.phase[RF_PHASE_PACK], cases[i].pack * 1e-12, 1e-12);
    ASSERT_NEAR(r.phase[RF_PHASE_UNPACK], cases[i].unpack * 1e-12, 1e-12);
    if (cases[i].mode == RF_MODE_GROUPED)
      ASSERT_NEAR(r.phase[RF_PHASE_TRANSFER], 279808e-9, 1e-12);
    ASSERT_NEAR(r.phase[RF_PHASE_TOTAL],
                279808e-9 + (double)(cases[i].pack + cases[i].unpack) * 1e-12, 1e-12);
    ASSERT_TRUE(r.phase[RF_PHASE_RESHAPE] == 0.0 && r.phase[RF_PHASE_SETUP] == 0.0);
    ASSERT_STR_EQ(r.bottleneck, "nic_out node 0 adapter 0");
    ASSERT_NEAR(r.bottleneck_bytes, 279808, 0);
    ASSERT_NEAR(r.bottleneck_utilisation, 279808e-9 / r.phase[RF_PHASE_TOTAL], 1e-12);
    ASSERT_EQ(r.class_bytes[RF_SIM_NETWORK], 279808);
    ASSERT_EQ(r.class_bytes[RF_SIM_NVLINK] + r.class_bytes[RF_SIM_PROCESS], 0);
    ASSERT_EQ(r.messages, cases[i].messages);
    ASSERT_EQ(r.nodes_used, 2);
    int64_t most = 0;
    for (int w = 0; w < 4; w++)
      most = RF_MAX(most, r.staging[w]);
    ASSERT_EQ(most, cases[i].staging);
    /* Trainer ranks hold half the model each (embeddings and norms split too), rollout ranks
     * their half of the fused tensors: 279808 bytes over two, each tensor 256-byte aligned. */
    ASSERT_EQ(r.shards[0] + r.shards[1], r.rollout[2] + r.rollout[3]);
    ASSERT_EQ(r.rollout[2], 140544);
    ASSERT_TRUE(r.fits);
    rf_sim_result_free(&r);
  }
  /* The --calibrate limits as traces: every pair's bytes at once, the same 279808 bytes through
   * the same adapters; and each rollout rank copying the 139904 bytes it receives. */
  rf_sim_trace *t;
  double s;
  ASSERT_OK(rf_sim_trace_limit(&plan, &c, 1, RF_LIMIT_NCCL, &t));
  ASSERT_OK(rf_sim_trace_time(t, &c, &s));
  ASSERT_NEAR(s, 279808e-9, 1e-12);
  rf_sim_trace_free(t);
  ASSERT_OK(rf_sim_trace_limit(&plan, &c, 1, RF_LIMIT_DEVICE_COPY, &t));
  ASSERT_OK(rf_sim_trace_time(t, &c, &s));
  ASSERT_NEAR(s, 139904e-12, 1e-12);
  rf_sim_trace_free(t);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* Colocated on the toy: world 2 on node 0, one GPU each; what a rank keeps of its own shard is
 * a local copy, the rest crosses NVLink. On the lent H200 the two ranks of a disaggregated
 * fsdp=1 -> tp=1 job share its one GPU: everything is a copy inside it. */
static void test_classes(void) {
  rf_cluster toy, lent;
  ASSERT_OK(rf_cluster_load(source_file("tests/data/cluster-toy.json"), &toy));
  ASSERT_OK(rf_cluster_load(source_file("configs/clusters/h200-lent.json"), &lent));
  rf_model m;
  rf_layout lay;
  rf_plan plan;
  build_plan("tiny", "fsdp=2", "tp=2", RF_PLACEMENT_COLOCATED, &m, &lay, &plan);
  rf_sim_options o = {RF_MODE_GROUPED, 0, 1, 0, RF_WIRE_CONTIGUOUS, 0, WHOLE};
  rf_sim_result r;
  ASSERT_OK(rf_simulate(&plan, &toy, &o, &r));
  ASSERT_EQ(r.nodes_used, 1);
  ASSERT_GT(r.class_bytes[RF_SIM_PROCESS], 0);
  ASSERT_GT(r.class_bytes[RF_SIM_NVLINK], 0);
  ASSERT_EQ(r.class_bytes[RF_SIM_PROCESS] + r.class_bytes[RF_SIM_NVLINK], plan.transfer_bytes);
  ASSERT_EQ(r.class_bytes[RF_SIM_NETWORK], 0);
  rf_sim_result_free(&r);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);

  build_plan("tiny", "fsdp=1", "tp=1", RF_PLACEMENT_DISAGGREGATED, &m, &lay, &plan);
  ASSERT_OK(rf_simulate(&plan, &lent, &o, &r));
  ASSERT_EQ(r.class_bytes[RF_SIM_GPU], plan.transfer_bytes);
  ASSERT_STR_EQ(r.bottleneck, "gpu_copy node 0 gpu 0");
  /* The whole model, 279168 bytes (fsdp=2 -> tp=2 moved 640 more: both rollout ranks receive
   * the five replicated 64-element norms), at the measured 2140 GB/s, while each rank posts the
   * 15 blocks, one message each, 25 us apart: on a GPU the copy engine moves the bytes while the
   * rank posts, so the flight is the longer of the posting (375 us) and the bytes' 0.13 us with
   * one message's 25 us; what is beyond the bytes' own time is latency. */
  ASSERT_EQ(plan.transfer_bytes, 279168);
  ASSERT_EQ(r.messages, 15);
  const double bytes_s = (double)plan.transfer_bytes / 2140e9;
  ASSERT_NEAR(r.phase[RF_PHASE_TRANSFER], 15 * 25e-6, 1e-12);
  ASSERT_NEAR(r.latency_s, 15 * 25e-6 - bytes_s, 1e-12);
  rf_sim_result_free(&r);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* fanout's forward stage on the toy: tiny from trainer fsdp=2 (node 0) to two replicas of tp=1
 * (node 1). The transfer stage sends one copy, 279168 bytes, through node 0's 1 GB/s adapter;
 * then the one forward step copies each tensor from its root replica to the other over NVLink
 * (100 GB/s each way), 279168 bytes in all, the busier direction bounding the step. The two
 * stages run one after the other, so the bound is their sum, and every piece of both stages is
 * one message in grouped. */
static void test_fanout(void) {
  rf_cluster c;
  ASSERT_OK(rf_cluster_load(source_file("tests/data/cluster-toy.json"), &c));
  rf_model m;
  rf_layout lay;
  rf_plan plan;
  rf_trainer_layout t;
  rf_rollout_layout ro;
  ASSERT_OK(rf_model_load("tiny", &m));
  ASSERT_OK(rf_trainer_layout_parse("fsdp=2", &t));
  ASSERT_OK(rf_rollout_layout_parse("tp=1,dp=2", &ro));
  ASSERT_OK(rf_layout_init(&lay, &m, &t, &ro, RF_PLACEMENT_DISAGGREGATED));
  ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_FANOUT, NULL));
  ASSERT_EQ(plan.transfer_bytes, 279168);
  ASSERT_EQ(plan.forward_bytes, 279168);
  ASSERT_EQ(plan.forward_depth, 1);
  ASSERT_EQ(plan.piece_count, 58);
  int64_t busier = RF_MAX(plan.forward_send_bytes[0], plan.forward_send_bytes[1]);
  ASSERT_GT(busier, 0);
  rf_sim_options o = {RF_MODE_GROUPED, 0, 1, 0, RF_WIRE_CONTIGUOUS, 0, WHOLE};
  rf_sim_result r;
  ASSERT_OK(rf_simulate(&plan, &c, &o, &r));
  ASSERT_EQ(r.class_bytes[RF_SIM_NETWORK], 279168);
  ASSERT_EQ(r.class_bytes[RF_SIM_NVLINK], 279168);
  ASSERT_EQ(r.messages, 58);
  ASSERT_EQ(r.buckets, 2);
  ASSERT_NEAR(r.bound_s, 279168e-9 + (double)busier / 100e9, 1e-12);
  ASSERT_TRUE(r.phase[RF_PHASE_TOTAL] >= r.bound_s);
  rf_sim_result_free(&r);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

static const char *write_cluster(const char *name, const char *text) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  FILE *f = fopen(path, "w");
  ASSERT_TRUE(f != NULL);
  fputs(text, f);
  fclose(f);
  return path;
}

static void expect_cluster_error(const char *name, const char *text, const char *want) {
  const char *path = write_cluster(name, text);
  char got[512] = "", expected[768];
  rf_cluster c;
  rf_log_capture(got, sizeof got);
  ASSERT_STATUS(rf_cluster_load(path, &c), RF_ERR_CONFIG);
  rf_log_capture(NULL, 0);
  snprintf(expected, sizeof expected, want, path);
  ASSERT_STR_EQ(got, expected);
}

#define GOOD_NODE                                                                                  \
  "\"gpus\": 2, \"gpu\": {\"name\": \"g\", \"memory_GiB\": 1, \"copy_GBps\": 100}, "               \
  "\"pcie_GBps\": 10, \"host\": {\"memcpy_GBps\": 1, \"mpi_GBps\": 1, \"memory_GiB\": 1}"
#define LATENCY "\"latency_us\": {\"node\": 1, \"copy\": 1}"

static void test_cluster_errors(void) {
  const char *see = "; see configs/clusters/README.md";
  char want[512];
  /* The good file loads; each error below is it with one thing wrong. */
  rf_cluster c;
  ASSERT_OK(rf_cluster_load(write_cluster("good.json",
                                          "{\"name\": \"x\", \"nodes\": 1, \"node\": {" GOOD_NODE
                                          "}, " LATENCY "}"),
                            &c));
  ASSERT_TRUE(c.pcie == 10e9 && c.gpu_memory == 1073741824.0 && c.latency_copy == 1e-6);
  ASSERT_EQ(c.nics, 0);
  snprintf(want, sizeof want,
           "cluster %%s: key 'node.pcie_GBps' is missing or not a positive number%s", see);
  expect_cluster_error(
      "missing.json",
      "{\"name\": \"x\", \"nodes\": 1, \"node\": {\"gpus\": 2, \"gpu\": {\"name\": "
      "\"g\", \"memory_GiB\": 1, \"copy_GBps\": 100}, \"host\": {\"memcpy_GBps\": "
      "1, \"mpi_GBps\": 1, \"memory_GiB\": 1}}, " LATENCY "}",
      want);
  snprintf(want, sizeof want,
           "cluster %%s: key 'node.gpu.copy_GBps' is missing or not a positive number%s", see);
  expect_cluster_error(
      "negative.json",
      "{\"name\": \"x\", \"nodes\": 1, \"node\": {\"gpus\": 2, \"gpu\": {\"name\": "
      "\"g\", \"memory_GiB\": 1, \"copy_GBps\": -5}, \"pcie_GBps\": 10, \"host\": "
      "{\"memcpy_GBps\": 1, \"mpi_GBps\": 1, \"memory_GiB\": 1}}, " LATENCY "}",
      want);
  snprintf(want, sizeof want,
           "cluster %%s: key 'nodes' is missing or not an integer from 1 to 1048576%s", see);
  expect_cluster_error(
      "string.json", "{\"name\": \"x\", \"nodes\": \"2\", \"node\": {" GOOD_NODE "}, " LATENCY "}",
      want);
  snprintf(want, sizeof want, "cluster %%s: unknown key 'node.nvlnk_GBps'%s", see);
  expect_cluster_error("typo.json",
                       "{\"name\": \"x\", \"nodes\": 1, \"node\": {" GOOD_NODE
                       ", \"nvlnk_GBps\": 450}, " LATENCY "}",
                       want);
  snprintf(want, sizeof want, "cluster %%s: key 'node.nics' is missing or not an object%s", see);
  expect_cluster_error("nonics.json",
                       "{\"name\": \"x\", \"nodes\": 2, \"node\": {" GOOD_NODE "}, " LATENCY "}",
                       want);
  expect_cluster_error(
      "syntax.json", "{\"name\": \"x\",, }",
      "cluster %s:1:14: string or '}' expected near ','; fix the JSON in this file");

  /* A cluster too small for the job, and GPU weights where there are no GPUs. */
  rf_model m;
  rf_layout lay;
  rf_plan plan;
  build_plan("tiny", "fsdp=2", "tp=4", RF_PLACEMENT_DISAGGREGATED, &m, &lay, &plan);
  rf_cluster toy, vm;
  ASSERT_OK(rf_cluster_load(source_file("tests/data/cluster-toy.json"), &toy));
  ASSERT_OK(rf_cluster_load(source_file("configs/clusters/vm-2core.json"), &vm));
  rf_sim_options o = {RF_MODE_GROUPED, 0, 1, 0, RF_WIRE_CONTIGUOUS, 0, WHOLE};
  rf_sim_result r;
  char got[512];
  rf_log_capture(got, sizeof got);
  ASSERT_STATUS(rf_simulate(&plan, &toy, &o, &r), RF_ERR_CONFIG);
  ASSERT_STR_EQ(got, "the job needs 6 ranks but cluster toy has 2 nodes of 2 ranks (4); choose "
                     "smaller layouts or a cluster file with more nodes");
  rf_sim_result_free(&r);
  ASSERT_STATUS(rf_simulate(&plan, &vm, &o, &r), RF_ERR_CONFIG);
  ASSERT_STR_EQ(got, "cluster vm-2core has no GPUs, so the weights cannot be in GPU memory; use "
                     "--memory host");
  rf_log_capture(NULL, 0);
  rf_sim_result_free(&r);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* A mapping transport (ipc) on the lent H200: tiny from fsdp=1 to tp=1, two processes on its
 * one GPU. Every byte is one copy inside the GPU at its 2140 GB/s: no pack, no unpack, no
 * message, no staging. Each unit launches its copies once (5 us), and the stage adds two
 * notes (ready, done) between the rank pair at 25 us each: grouped in one bucket and fused in
 * any buckets (one launch a stage) pay one launch, unfused one a tensor. */
static void test_mapping(void) {
  rf_cluster lent;
  ASSERT_OK(rf_cluster_load(source_file("configs/clusters/h200-lent.json"), &lent));
  rf_model m;
  rf_layout lay;
  rf_plan plan;
  build_plan("tiny", "fsdp=1", "tp=1", RF_PLACEMENT_DISAGGREGATED, &m, &lay, &plan);
  ASSERT_EQ(plan.transfer_bytes, 279168);
  ASSERT_EQ(m.tensor_count, 21);
  const double copy = 279168 / 2140e9, notes = 2 * 25e-6, launch = 5e-6;
  const struct {
    rf_mode mode;
    int64_t bucket_size;
    int launches, buckets;
  } cases[] = {
      {RF_MODE_GROUPED, 0, 1, 1}, {RF_MODE_FUSED, 4096, 1, 69}, {RF_MODE_UNFUSED, 0, 21, 1}};
  for (size_t i = 0; i < RF_ARRAY_LEN(cases); i++) {
    rf_sim_options o = {cases[i].mode, cases[i].bucket_size, 1, 1, RF_WIRE_CONTIGUOUS, 0, WHOLE};
    rf_sim_result r;
    ASSERT_OK(rf_simulate(&plan, &lent, &o, &r));
    double latency = cases[i].launches * launch + notes;
    ASSERT_NEAR(r.latency_s, latency, 1e-12);
    ASSERT_NEAR(r.phase[RF_PHASE_TOTAL], copy + latency, 1e-12);
    ASSERT_NEAR(r.phase[RF_PHASE_TRANSFER], copy + latency, 1e-12);
    ASSERT_TRUE(r.phase[RF_PHASE_PACK] == 0.0 && r.phase[RF_PHASE_UNPACK] == 0.0);
    ASSERT_NEAR(r.bound_s, copy, 1e-12);
    ASSERT_EQ(r.class_bytes[RF_SIM_GPU], 279168);
    ASSERT_EQ(r.messages, 0);
    ASSERT_EQ(r.units, cases[i].launches + 1); /* the copies' units, and the notes */
    ASSERT_EQ(r.buckets, cases[i].buckets);
    ASSERT_TRUE(r.staging[0] == 0 && r.staging[1] == 0);
    /* Over messages the same schedule has as many buckets, and fused stages everything. */
    rf_sim_result msg;
    o.mapping = 0;
    ASSERT_OK(rf_simulate(&plan, &lent, &o, &msg));
    ASSERT_EQ(msg.buckets, cases[i].buckets);
    if (cases[i].mode == RF_MODE_FUSED)
      ASSERT_GT(msg.staging[0] + msg.staging[1], 0);
    rf_sim_result_free(&msg);
    ASSERT_STR_EQ(r.bottleneck, "gpu_copy node 0 gpu 0");
    rf_sim_result_free(&r);
  }
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);

  /* Between GPUs, the copy crosses the source's NVLink out and the destination's in, on the
   * copying rank's copy engine. On a node of four GPUs whose copy rate (100 GB/s) is below
   * NVLink's (1000), tiny from fsdp=2 (GPUs 0, 1) to tp=1 (GPU 2): pulled, the rollout rank
   * copies all of it on its own engine; pushed (a JAX-order trainer), each trainer rank copies
   * its half on its own, both at once. A mapping job of two nodes cannot run. */
  const char *path = write_cluster(
      "quad.json", "{\"name\": \"quad\", \"nodes\": 2, \"node\": {\"gpus\": 4, \"gpu\": {"
                   "\"name\": \"g\", \"memory_GiB\": 1, \"copy_GBps\": 100}, \"nvlink_GBps\": "
                   "1000, \"pcie_GBps\": 10, \"nics\": {\"count\": 1, \"Gbps\": 8}, \"host\": "
                   "{\"memcpy_GBps\": 1, \"mpi_GBps\": 1, \"memory_GiB\": 1}}, \"latency_us\": "
                   "{\"node\": 0, \"network\": 0, \"copy\": 0}}");
  rf_cluster quad;
  ASSERT_OK(rf_cluster_load(path, &quad));
  for (int order = RF_ORDER_HF; order <= RF_ORDER_JAX; order++) {
    rf_trainer_layout t;
    rf_rollout_layout ro;
    ASSERT_OK(rf_model_load("tiny", &m));
    ASSERT_OK(rf_trainer_layout_parse("fsdp=2", &t));
    ASSERT_OK(rf_rollout_layout_parse("tp=1", &ro));
    t.order = (rf_trainer_order)order;
    ASSERT_OK(rf_layout_init(&lay, &m, &t, &ro, RF_PLACEMENT_DISAGGREGATED));
    ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_P2P, NULL));
    int64_t half = RF_MAX(plan.send_bytes[0], plan.send_bytes[1]);
    ASSERT_TRUE(half < plan.transfer_bytes);
    rf_sim_options o = {RF_MODE_FUSED, 0, 1, 1, RF_WIRE_CONTIGUOUS, 0, WHOLE};
    rf_sim_result r;
    ASSERT_OK(rf_simulate(&plan, &quad, &o, &r));
    double expected = (double)(order == RF_ORDER_JAX ? half : plan.transfer_bytes) / 100e9;
    ASSERT_NEAR(r.phase[RF_PHASE_TOTAL], expected, 1e-12);
    ASSERT_EQ(r.class_bytes[RF_SIM_NVLINK], plan.transfer_bytes);
    ASSERT_STR_EQ(r.bottleneck,
                  order == RF_ORDER_JAX ? "gpu_copy node 0 gpu 0" : "gpu_copy node 0 gpu 2");
    rf_sim_result_free(&r);
    rf_plan_free(&plan);
    rf_layout_free(&lay);
    rf_model_free(&m);
  }
  char got[512];
  rf_log_capture(got, sizeof got);
  ASSERT_STATUS(rf_cluster_fits(&quad, 5, 1, 1), RF_ERR_CONFIG);
  rf_log_capture(NULL, 0);
  ASSERT_STR_EQ(got, "a mapping transport (ipc, shm) reaches the processes of one node, but the "
                     "job's 5 ranks take 2 nodes of cluster quad (4 ranks a node); use --transport "
                     "nccl or mpi, or smaller layouts");
  ASSERT_OK(rf_cluster_fits(&quad, 5, 1, 0));
}

/* Colocated in one process (tiny, fsdp=1 -> tp=1 on the lent H200, as `refit run -np 1
 * --placement colocated`): every piece is local, copied once by the engine's local path at
 * 2140 GB/s, whatever the transport, with one 5 us launch a unit: once in grouped and fused
 * (one bucket), once a tensor in unfused. No messages, no notes, no staging. */
static void test_local(void) {
  rf_cluster lent;
  ASSERT_OK(rf_cluster_load(source_file("configs/clusters/h200-lent.json"), &lent));
  rf_model m;
  rf_layout lay;
  rf_plan plan;
  build_plan("tiny", "fsdp=1", "tp=1", RF_PLACEMENT_COLOCATED, &m, &lay, &plan);
  ASSERT_EQ(lay.world_size, 1);
  const double copy = 279168 / 2140e9;
  for (int mapping = 0; mapping <= 1; mapping++)
    for (int mode = 0; mode < RF_MODE_COUNT; mode++) {
      rf_sim_options o = {(rf_mode)mode, 0, 1, mapping, RF_WIRE_CONTIGUOUS, 0, WHOLE};
      rf_sim_result r;
      ASSERT_OK(rf_simulate(&plan, &lent, &o, &r));
      int launches = mode == RF_MODE_UNFUSED ? 21 : 1;
      ASSERT_NEAR(r.phase[RF_PHASE_TOTAL], copy + launches * 5e-6, 1e-12);
      ASSERT_NEAR(r.latency_s, launches * 5e-6, 1e-12);
      ASSERT_EQ(r.class_bytes[RF_SIM_PROCESS], 279168);
      ASSERT_EQ(r.messages, 0);
      ASSERT_EQ(r.units, launches);
      ASSERT_EQ(r.staging[0], 0);
      rf_sim_result_free(&r);
    }
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* The fit finds rates it was not told: times produced by a hidden host cluster (3 GB/s per
 * rank, 5 GB/s memcpy, 40 us a message) for tiny and llama-3.2-1b in every mode and two bucket
 * sizes, fitted from vm-2core's rates, come back within 1%, every sample within 0.1%. */
static void test_fit(void) {
  rf_cluster hidden, start;
  ASSERT_OK(rf_cluster_load(source_file("configs/clusters/vm-2core.json"), &hidden));
  start = hidden;
  hidden.host_mpi = 3e9;
  hidden.host_memcpy = 5e9;
  hidden.latency_node = 40e-6;
  static const char *const models[] = {"tiny", "llama-3.2-1b"};
  static const int64_t buckets[] = {0, 64 << 20};
  rf_sim_sample samples[12];
  rf_sim_trace *traces[12];
  int n = 0;
  for (size_t mi = 0; mi < RF_ARRAY_LEN(models); mi++) {
    rf_model m;
    rf_layout lay;
    rf_plan plan;
    /* FSDP2 shards: their plans pack and unpack, so memcpy shows apart from the exchange.
     * (build_plan left the style to whatever the stack held; under tunix, whose fsdp=2 to
     * tp=2 pieces mostly land in place, the pattern search stops with 3.8% worst error at
     * 2.65 GB/s: a weakness of the fit that the calibration work has to take up.) */
    build_style = RF_STYLE_FSDP2;
    build_plan(models[mi], "fsdp=2", "tp=2", RF_PLACEMENT_DISAGGREGATED, &m, &lay, &plan);
    build_style = RF_STYLE_TUNIX;
    for (int mode = 0; mode < RF_MODE_COUNT; mode++)
      for (size_t b = 0; b < RF_ARRAY_LEN(buckets); b++) {
        rf_sim_options o = {(rf_mode)mode, buckets[b], 0, 0, RF_WIRE_CONTIGUOUS, 0, WHOLE};
        ASSERT_OK(rf_sim_trace_record(&plan, &start, &o, &traces[n]));
        samples[n].trace = traces[n];
        ASSERT_OK(rf_sim_trace_time(traces[n], &hidden, &samples[n].measured_s));
        n++;
      }
    rf_plan_free(&plan);
    rf_layout_free(&lay);
    rf_model_free(&m);
  }
  rf_sim_fit fit;
  ASSERT_OK(rf_sim_calibrate(&start, 0, samples, n, &fit));
  ASSERT_EQ(fit.samples, 12);
  ASSERT_STR_EQ(fit.names[0], "host.mpi_GBps");
  ASSERT_NEAR(start.host_mpi, 3e9, 0.01);
  ASSERT_NEAR(start.host_memcpy, 5e9, 0.01);
  ASSERT_NEAR(start.latency_node, 40e-6, 0.01);
  ASSERT_TRUE(fit.worst_error < 1e-3);
  ASSERT_TRUE(fit.before[0] == 7.19e9 && fit.after[0] == start.host_mpi);
  for (int i = 0; i < n; i++)
    rf_sim_trace_free(traces[i]);
}

/* ---- quantized rollouts ---------------------------------------------------------------------
 *
 * tiny's linear weights per layer: q and o 64x64, k and v 32x64, gate and up 128x64, down
 * 64x128: 36864 elements, 73728 bf16 bytes, 147456 over its two layers; mxfp8 (1x32 blocks)
 * quantizes them. */

static void build_mxfp8(const char *trainer, rf_model *m, rf_layout *lay, rf_plan *plan) {
  rf_trainer_layout t;
  rf_rollout_layout r;
  ASSERT_OK(rf_model_load("tiny", m));
  ASSERT_OK(rf_trainer_layout_parse(trainer, &t));
  ASSERT_OK(rf_rollout_layout_parse("tp=1", &r));
  t.style = RF_STYLE_TUNIX;
  r.dtype = (rf_rollout_dtype)RF_FORMAT_MXFP8;
  ASSERT_OK(rf_layout_init(lay, m, &t, &r, RF_PLACEMENT_COLOCATED));
  ASSERT_OK(rf_plan_build(plan, lay, RF_PLAN_P2P, NULL));
}

/* fsdp=1 -> tp=1 colocated on the toy: one rank, every piece local. Its 147456 bytes of linear
 * weights are quantized at the source straight into the rollout (the rank's pack, no copy),
 * the other 131712 bytes (embeddings, lm_head, norms) are local copies at 1000 GB/s: pack
 * 147456 / quantize rate, transfer 131712 / 1e12, the toy's latencies 0. The default rate is
 * 0.895 of the copy's; a file's quantize_GBps changes the pack and nothing else.
 *
 * fsdp=4 -> tp=1 colocated (two nodes of two): tunix splits gate's and up's 64 columns four
 * ways, 16 each, inside mxfp8's 32-column blocks, so their 4 x 8192 elements (65536 bytes)
 * land in bf16 and rollout rank 0 quantizes them on its unpack; the other 81920 bytes are
 * whole rows quantized into staging by their trainer ranks, unevenly (tunix cannot split the
 * two kv heads four ways: `refit plan` says 6 to 10 tensors a rank), so the busiest rank's
 * share is summed from the plan's pieces. Each rank has its GPU's copy engine to itself, so at
 * a quantize rate of 1 GB/s against 2 GB/s the pack grows by that share x (1/1e9 - 1/2e9) s and
 * the unpack by 65536 x the same, exactly, and the quantize seconds are their sum over 1e9. */
static void test_quantize(void) {
  rf_cluster toy;
  ASSERT_OK(rf_cluster_load(source_file("tests/data/cluster-toy.json"), &toy));
  ASSERT_NEAR(toy.gpu_quantize, 895e9, 1e-15);
  ASSERT_NEAR(toy.host_quantize, RF_SIM_HOST_QUANTIZE, 0);
  rf_model m;
  rf_layout lay;
  rf_plan plan;
  build_mxfp8("fsdp=1", &m, &lay, &plan);
  rf_sim_options o = {RF_MODE_GROUPED, 0, 1, 0, RF_WIRE_CONTIGUOUS, 0, WHOLE};
  const double rates[] = {895e9, 100e9};
  for (size_t i = 0; i < RF_ARRAY_LEN(rates); i++) {
    toy.gpu_quantize = rates[i];
    rf_sim_result r;
    ASSERT_OK(rf_simulate(&plan, &toy, &o, &r));
    ASSERT_EQ(r.quantize_pack_bytes, 147456);
    ASSERT_EQ(r.quantize_unpack_bytes, 0);
    ASSERT_NEAR(r.quantize_rate, rates[i], 0);
    ASSERT_NEAR(r.phase[RF_PHASE_PACK], 147456 / rates[i], 1e-12);
    ASSERT_NEAR(r.quantize_s, 147456 / rates[i], 1e-12);
    ASSERT_NEAR(r.phase[RF_PHASE_TRANSFER], 131712e-12, 1e-12);
    ASSERT_NEAR(r.phase[RF_PHASE_UNPACK], 0, 0);
    ASSERT_NEAR(r.phase[RF_PHASE_TOTAL], 147456 / rates[i] + 131712e-12, 1e-12);
    ASSERT_EQ(r.class_bytes[RF_SIM_PROCESS], 131712);
    rf_sim_result_free(&r);
  }
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);

  build_mxfp8("fsdp=4", &m, &lay, &plan);
  ASSERT_EQ(plan.source_tensors, 10);
  ASSERT_EQ(plan.destination_tensors, 4);
  int64_t per_rank[4] = {0}, busiest = 0;
  for (int i = 0; i < plan.piece_count; i++)
    if (rf_piece_quant(&plan, &plan.pieces[i]) == RF_QUANT_SOURCE)
      per_rank[plan.pieces[i].src] += plan.pieces[i].bytes;
  for (int q = 0; q < 4; q++)
    busiest = RF_MAX(busiest, per_rank[q]);
  ASSERT_EQ(per_rank[0] + per_rank[1] + per_rank[2] + per_rank[3], 81920);
  rf_sim_result slow, fast;
  toy.gpu_quantize = 1e9;
  ASSERT_OK(rf_simulate(&plan, &toy, &o, &slow));
  toy.gpu_quantize = 2e9;
  ASSERT_OK(rf_simulate(&plan, &toy, &o, &fast));
  ASSERT_EQ(slow.quantize_pack_bytes, 81920);
  ASSERT_EQ(slow.quantize_unpack_bytes, 65536);
  ASSERT_NEAR(slow.phase[RF_PHASE_PACK] - fast.phase[RF_PHASE_PACK], busiest * 0.5e-9, 1e-9);
  ASSERT_NEAR(slow.phase[RF_PHASE_UNPACK] - fast.phase[RF_PHASE_UNPACK], 65536 * 0.5e-9, 1e-9);
  ASSERT_NEAR(slow.phase[RF_PHASE_TRANSFER], fast.phase[RF_PHASE_TRANSFER], 1e-12);
  ASSERT_NEAR(slow.quantize_s, (busiest + 65536) * 1e-9, 1e-9);
  ASSERT_NEAR(fast.quantize_s, (busiest + 65536) * 0.5e-9, 1e-9);
  rf_sim_result_free(&slow);
  rf_sim_result_free(&fast);
  /* The fit finds a hidden quantize rate (10 MB/s, slow enough that the quantizing is most of
   * the quantized runs' time) from fused and grouped times of the fsdp=4 job with the
   * unquantized tiny fsdp=2 -> tp=2 runs beside it, every other rate the hidden one already;
   * without a quantized sample it fits three rates and leaves it be. */
  rf_cluster hidden = toy, start = toy;
  hidden.gpu_quantize = 1e7;
  start.gpu_quantize = 4e7;
  rf_model m2;
  rf_layout lay2;
  rf_plan plain;
  build_plan("tiny", "fsdp=2", "tp=2", RF_PLACEMENT_DISAGGREGATED, &m2, &lay2, &plain);
  rf_sim_sample samples[4];
  rf_sim_trace *traces[4];
  for (int i = 0; i < 4; i++) {
    rf_sim_options t = {
        i % 2 ? RF_MODE_FUSED : RF_MODE_GROUPED, 0, 1, 0, RF_WIRE_CONTIGUOUS, 0, WHOLE};
    ASSERT_OK(rf_sim_trace_record(i < 2 ? &plain : &plan, &start, &t, &traces[i]));
    samples[i] = (rf_sim_sample){traces[i], 0.0, NULL};
    ASSERT_OK(rf_sim_trace_time(traces[i], &hidden, &samples[i].measured_s));
  }
  rf_sim_fit fit;
  rf_cluster three = start;
  ASSERT_OK(rf_sim_calibrate(&three, 1, samples, 2, &fit));
  ASSERT_EQ(fit.count, 3);
  ASSERT_NEAR(three.gpu_quantize, 4e7, 0);
  ASSERT_OK(rf_sim_calibrate(&start, 1, samples, 4, &fit));
  ASSERT_EQ(fit.count, 4);
  ASSERT_STR_EQ(fit.names[3], "gpu.quantize_GBps");
  ASSERT_NEAR(fit.before[3], 4e7, 0);
  ASSERT_NEAR(start.gpu_quantize, 1e7, 0.01);
  ASSERT_TRUE(fit.after[3] == start.gpu_quantize && fit.worst_error < 1e-3);
  for (int i = 0; i < 4; i++)
    rf_sim_trace_free(traces[i]);
  rf_plan_free(&plain);
  rf_layout_free(&lay2);
  rf_model_free(&m2);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* ---- the lower bound ------------------------------------------------------------------------
 *
 * tiny (bf16, hidden 64, 4 heads and 2 kv heads of 16, MLP 128, vocab 512, 2 layers) is 279168
 * bytes. Over tunix fsdp=2 a rank holds half the columns of embed, lm_head, gate and up, the
 * rows of its heads of q, k and v, half the rows of o and down, and every norm (tunix splits
 * norms over tp only). A rollout tp=2 rank keeps half the rows of embed, lm_head, q, k, v,
 * gate and up, half the columns of o and down, and every norm: 139904 bytes. */

static void expect_bound(const char *model, const char *trainer, const char *rollout,
                         rf_placement placement, const rf_cluster *c, int device, int mapping,
                         double seconds, const char *binding) {
  rf_model m;
  rf_layout lay;
  rf_trainer_layout t;
  rf_rollout_layout r;
  ASSERT_OK(rf_model_load(model, &m));
  ASSERT_OK(rf_trainer_layout_parse(trainer, &t));
  ASSERT_OK(rf_rollout_layout_parse(rollout, &r));
  t.style = RF_STYLE_TUNIX;
  t.order = RF_ORDER_HF;
  ASSERT_OK(rf_layout_init(&lay, &m, &t, &r, placement));
  rf_sim_bound b;
  ASSERT_OK(rf_sim_lower_bound(&lay, c, device, mapping, &b));
  if (strcmp(b.binding, binding) != 0)
    fprintf(stderr, "%s %s -> %s: %s\n", model, trainer, rollout, b.binding);
  ASSERT_NEAR(b.seconds, seconds, 1e-12);
  ASSERT_STR_EQ(b.binding, binding);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

static void test_bound(void) {
  rf_cluster toy, vm;
  ASSERT_OK(rf_cluster_load(source_file("tests/data/cluster-toy.json"), &toy));
  ASSERT_OK(rf_cluster_load(source_file("configs/clusters/vm-2core.json"), &vm));
  /* fsdp=2 on node 0, tp=2 on node 1: node 1 holds nothing and its two ranks need the whole
   * model between them (the norms both keep cross once, relayed over NVLink), so all 279168
   * bytes enter node 1 through its one 1 GB/s adapter. Each rollout GPU's ingress (139904
   * bytes at NVLink 100 + NIC 1 GB/s) and node 0's egress (the same 279168 bytes, tried after
   * every ingress) are no tighter. */
  expect_bound("tiny", "fsdp=2", "tp=2", RF_PLACEMENT_DISAGGREGATED, &toy, 1, 0, 279168e-9,
               "NIC ingress of node 1 (1 adapter, 1 GB/s)");
  /* Colocated on node 0: rank 0 holds of what it keeps all of q, k, v and the norms, a
   * quarter of embed, lm_head, gate and up (its column half of its row half), and a quarter of
   * o and down. The rest it needs from GPU 1 over NVLink: a quarter of embed and lm_head (8192
   * elements each), of gate and up (2048 each, two layers), of o (1024, two layers) and of
   * down (2048, two layers): 30720 elements, 61440 bytes at 100 GB/s. Its writes (139904 bytes
   * at copy 1000 + NVLink 100 GB/s) take less. */
  expect_bound("tiny", "fsdp=2", "tp=2", RF_PLACEMENT_COLOCATED, &toy, 1, 0, 61440 / 100e9,
               "ingress of the GPU of rollout rank 0 (node 0 gpu 0: NVLink 100 GB/s)");
  /* Each node holds a full trainer replica beside its rollout replica: nothing must cross a
   * NIC, and each GPU needs the same 61440 bytes as above, now over NVLink and its adapter. */
  expect_bound("tiny", "fsdp=2,dp=2", "tp=2,dp=2", RF_PLACEMENT_COLOCATED, &toy, 1, 0,
               61440 / 101e9,
               "ingress of the GPU of rollout rank 0 (node 0 gpu 0: NVLink 100 + NIC 1 GB/s)");
  /* Host memory, one node: rollout rank 0 holds nothing and keeps 139904 bytes, all through
   * its receive path at 7.19 GB/s. */
  expect_bound("tiny", "fsdp=2", "tp=2", RF_PLACEMENT_DISAGGREGATED, &vm, 0, 0, 139904 / 7.19e9,
               "ingress of rollout rank 0 (host MPI 7.19 GB/s)");
  /* One node of four GPUs, copy 100 GB/s below NVLink's 1000: fsdp=2 on GPUs 0 and 1, tp=1 on
   * GPU 2. Over messages all 279168 bytes enter GPU 2 by NVLink (its writes may also use its
   * copy engine: 279168 at 1100 GB/s); over ipc each piece is a copy by the rank that pulls,
   * GPU 2, at 100 GB/s; a JAX-order trainer pushes, and each trainer GPU copies what only it
   * holds, half of all but the norms (5 x 64 elements, 640 bytes, which both hold), (279168 -
   * 640) / 2 bytes, at 100 GB/s. */
  const char *path = write_cluster(
      "quad.json", "{\"name\": \"quad\", \"nodes\": 2, \"node\": {\"gpus\": 4, \"gpu\": {"
                   "\"name\": \"g\", \"memory_GiB\": 1, \"copy_GBps\": 100}, \"nvlink_GBps\": "
                   "1000, \"pcie_GBps\": 10, \"nics\": {\"count\": 1, \"Gbps\": 8}, \"host\": "
                   "{\"memcpy_GBps\": 1, \"mpi_GBps\": 1, \"memory_GiB\": 1}}, \"latency_us\": "
                   "{\"node\": 0, \"network\": 0, \"copy\": 0}}");
  rf_cluster quad;
  ASSERT_OK(rf_cluster_load(path, &quad));
  expect_bound("tiny", "fsdp=2", "tp=1", RF_PLACEMENT_DISAGGREGATED, &quad, 1, 0, 279168 / 1000e9,
               "ingress of the GPU of rollout rank 0 (node 0 gpu 2: NVLink 1000 GB/s)");
  expect_bound("tiny", "fsdp=2", "tp=1", RF_PLACEMENT_DISAGGREGATED, &quad, 1, 1, 279168 / 100e9,
               "writes of the GPU of rollout rank 0 (node 0 gpu 2: copy 100 GB/s)");
  ASSERT_EQ(setenv("REFIT_MAPPED_PUSH", "1", 1), 0);
  expect_bound("tiny", "fsdp=2", "tp=1", RF_PLACEMENT_DISAGGREGATED, &quad, 1, 1,
               (279168 - 640) / 2 / 100e9,
               "copies pushed by the GPU of trainer rank 0 (node 0 gpu 0: copy 100 GB/s)");
  ASSERT_EQ(unsetenv("REFIT_MAPPED_PUSH"), 0);
  /* Two nodes of four GPUs, each with its own 1 GB/s adapter: fsdp=4 fills node 0 and tp=2
   * takes two GPUs of node 1. The whole model, 279168 bytes, enters node 1 by the two
   * adapters its rollout GPUs send and receive by; the two idle GPUs' adapters carry none of
   * the job's bytes, so the bound is 279168 bytes at 2 GB/s, not at 4. */
  rf_cluster quad4;
  ASSERT_OK(rf_cluster_load(
      write_cluster("quad4.json",
                    "{\"name\": \"quad4\", \"nodes\": 2, \"node\": {\"gpus\": 4, \"gpu\": {"
                    "\"name\": \"g\", \"memory_GiB\": 1, \"copy_GBps\": 100}, \"nvlink_GBps\": "
                    "1000, \"pcie_GBps\": 10, \"nics\": {\"count\": 4, \"Gbps\": 8}, \"host\": "
                    "{\"memcpy_GBps\": 1, \"mpi_GBps\": 1, \"memory_GiB\": 1}}, \"latency_us\": "
                    "{\"node\": 0, \"network\": 0, \"copy\": 0}}"),
      &quad4));
  expect_bound("tiny", "fsdp=4", "tp=2", RF_PLACEMENT_DISAGGREGATED, &quad4, 1, 0, 279168 / 2e9,
               "NIC ingress of node 1 (2 adapters, 2 GB/s)");
  /* A job the cluster cannot hold is the simulation's own line. */
  rf_model m;
  rf_layout lay;
  rf_trainer_layout t;
  rf_rollout_layout r;
  ASSERT_OK(rf_model_load("tiny", &m));
  ASSERT_OK(rf_trainer_layout_parse("fsdp=4", &t));
  ASSERT_OK(rf_rollout_layout_parse("tp=2", &r));
  t.style = RF_STYLE_TUNIX;
  t.order = RF_ORDER_HF;
  ASSERT_OK(rf_layout_init(&lay, &m, &t, &r, RF_PLACEMENT_DISAGGREGATED));
  rf_sim_bound b;
  char got[256];
  rf_log_capture(got, sizeof got);
  ASSERT_STATUS(rf_sim_lower_bound(&lay, &toy, 1, 0, &b), RF_ERR_CONFIG);
  rf_log_capture(NULL, 0);
  ASSERT_STR_EQ(got, "the job needs 6 ranks but cluster toy has 2 nodes of 2 ranks (4); choose "
                     "smaller layouts or a cluster file with more nodes");
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* No prediction is faster than the bound: every plan kind, mode and transport of several
 * layouts (replicas, colocated, experts, host memory, a mapping transport) on the toy, the quad
 * and the VM. A prediction below its bound would be a bug in one or the other. */
static void test_bound_below_predictions(void) {
  rf_cluster toy, vm, quad;
  ASSERT_OK(rf_cluster_load(source_file("tests/data/cluster-toy.json"), &toy));
  ASSERT_OK(rf_cluster_load(source_file("configs/clusters/vm-2core.json"), &vm));
  ASSERT_OK(rf_cluster_load(write_cluster("quad.json", "{\"name\": \"quad\", \"nodes\": 2, "
                                                       "\"node\": {\"gpus\": 4, \"gpu\": {"
                                                       "\"name\": \"g\", \"memory_GiB\": 1, "
                                                       "\"copy_GBps\": 100}, \"nvlink_GBps\": "
                                                       "1000, \"pcie_GBps\": 10, \"nics\": "
                                                       "{\"count\": 1, \"Gbps\": 8}, \"host\": "
                                                       "{\"memcpy_GBps\": 1, \"mpi_GBps\": 1, "
                                                       "\"memory_GiB\": 1}}, \"latency_us\": "
                                                       "{\"node\": 0, \"network\": 0, "
                                                       "\"copy\": 0}}"),
                            &quad));
  const struct {
    const char *model, *trainer, *rollout;
    rf_placement placement;
    const rf_cluster *c;
    int device, mapping;
  } jobs[] = {
      {"tiny", "fsdp=2", "tp=2", RF_PLACEMENT_DISAGGREGATED, &toy, 1, 0},
      {"tiny", "fsdp=2", "tp=1,dp=2", RF_PLACEMENT_DISAGGREGATED, &toy, 1, 0},
      {"tiny", "fsdp=2", "tp=2", RF_PLACEMENT_COLOCATED, &toy, 1, 0},
      {"tiny", "fsdp=2,dp=2", "tp=2,dp=2", RF_PLACEMENT_COLOCATED, &toy, 1, 0},
      {"tiny-mixtral", "ep=2", "tp=2", RF_PLACEMENT_DISAGGREGATED, &toy, 1, 0},
      {"tiny-mixtral", "fsdp=2", "tp=2,ep", RF_PLACEMENT_DISAGGREGATED, &toy, 1, 0},
      {"tiny", "fsdp=2,tp=2", "tp=2,dp=2", RF_PLACEMENT_DISAGGREGATED, &quad, 1, 0},
      {"tiny", "fsdp=2,dp=2", "tp=1,dp=4", RF_PLACEMENT_DISAGGREGATED, &quad, 1, 0},
      {"tiny", "fsdp=2", "tp=1,dp=2", RF_PLACEMENT_DISAGGREGATED, &quad, 1, 1},
      {"tiny", "fsdp=2", "tp=2", RF_PLACEMENT_COLOCATED, &quad, 1, 1},
      {"tiny", "fsdp=2", "tp=1,dp=2", RF_PLACEMENT_DISAGGREGATED, &vm, 0, 0},
      {"tiny", "fsdp=2", "tp=2", RF_PLACEMENT_COLOCATED, &vm, 0, 1},
  };
  int checked = 0;
  for (size_t j = 0; j < RF_ARRAY_LEN(jobs); j++) {
    rf_model m;
    rf_layout lay;
    rf_trainer_layout t;
    rf_rollout_layout r;
    ASSERT_OK(rf_model_load(jobs[j].model, &m));
    ASSERT_OK(rf_trainer_layout_parse(jobs[j].trainer, &t));
    ASSERT_OK(rf_rollout_layout_parse(jobs[j].rollout, &r));
    t.style = RF_STYLE_TUNIX;
    t.order = RF_ORDER_HF;
    ASSERT_OK(rf_layout_init(&lay, &m, &t, &r, jobs[j].placement));
    rf_sim_bound b;
    ASSERT_OK(rf_sim_lower_bound(&lay, jobs[j].c, jobs[j].device, jobs[j].mapping, &b));
    ASSERT_TRUE(b.seconds > 0);
    for (int kind = 0; kind < RF_PLAN_KIND_COUNT; kind++) {
      rf_plan plan;
      if ((kind == RF_PLAN_FANOUT && r.dp == 1) || (kind == RF_PLAN_STAR && r.ep))
        continue; /* no replicas to forward to; star refuses rollout ep */
      ASSERT_OK(rf_plan_build(&plan, &lay, (rf_plan_kind)kind, NULL));
      for (int mode = 0; mode < RF_MODE_COUNT; mode++)
        for (int64_t bucket = 0; bucket <= 16384; bucket += 16384) {
          rf_sim_options o = {(rf_mode)mode,
                              bucket,
                              jobs[j].device,
                              jobs[j].mapping,
                              jobs[j].device ? RF_WIRE_CONTIGUOUS : RF_WIRE_GATHERS,
                              0,
                              WHOLE};
          rf_sim_result res;
          ASSERT_OK(rf_simulate(&plan, jobs[j].c, &o, &res));
          if (!(b.seconds <= res.phase[RF_PHASE_TOTAL] * (1 + 1e-9)))
            fprintf(stderr, "%s %s -> %s %s %s bucket %lld: bound %.9g (%s) above %.9g\n",
                    jobs[j].model, jobs[j].trainer, jobs[j].rollout,
                    rf_plan_kind_name((rf_plan_kind)kind), rf_mode_name((rf_mode)mode),
                    (long long)bucket, b.seconds, b.binding, res.phase[RF_PHASE_TOTAL]);
          ASSERT_TRUE(b.seconds <= res.phase[RF_PHASE_TOTAL] * (1 + 1e-9));
          checked++;
          rf_sim_result_free(&res);
        }
      rf_plan_free(&plan);
    }
    rf_layout_free(&lay);
    rf_model_free(&m);
  }
  ASSERT_GT(checked, 100);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/test_sim.XXXXXX");
  ASSERT_TRUE(mkdtemp(tmpdir) != NULL);
  test_solver();
  test_toy();
  test_classes();
  test_fanout();
  test_cluster_errors();
  test_mapping();
  test_local();
  test_fit();
  test_quantize();
  test_bound();
  test_bound_below_predictions();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  ASSERT_EQ(system(cmd), 0);
  printf("test_sim: all passed\n");
  return 0;
}
