/* Topology discovery, placement and distances on tests/data/dgx8.xml (8 GPUs and 8 NICs on 4
 * PCIe switches, 2 sockets of 16 cores) and on a synthetic machine without GPUs. */
#include <hwloc.h>
#include <stdlib.h>

#include "driver/placement.h"
#include "plan/plan.h"
#include "test.h"

static char xml[1024];

static rf_topo *load_dgx8(void) {
  rf_topo *t = NULL;
  ASSERT_OK(rf_topo_load(&t, xml));
  return t;
}

static void place(const rf_topo *t, int rpn, int device, int need_gpu, rf_bind bind,
                  rf_topo_place *out) {
  rf_topo_place_options o = {rpn, device, need_gpu ? "nccl" : NULL, bind};
  ASSERT_OK(rf_topo_place_node(t, &o, out));
}

/* No hardware thread is bound by two ranks. */
static void assert_disjoint(const rf_topo_place *p, int n) {
  hwloc_bitmap_t seen = hwloc_bitmap_alloc(), set = hwloc_bitmap_alloc();
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(hwloc_bitmap_list_sscanf(set, p[r].cpus), 0);
    ASSERT_FALSE(hwloc_bitmap_intersects(seen, set));
    hwloc_bitmap_or(seen, seen, set);
  }
  hwloc_bitmap_free(seen);
  hwloc_bitmap_free(set);
}

static void test_discovery(void) {
  rf_topo *t = load_dgx8();
  ASSERT_EQ(rf_topo_gpu_count(t), 8);
  ASSERT_EQ(rf_topo_nic_count(t), 8);
  ASSERT_EQ(rf_topo_numa_count(t), 2);
  ASSERT_EQ(rf_topo_core_count(t), 32);
  ASSERT_STR_EQ(rf_topo_gpu_at(t, 0)->name, "cuda0");
  ASSERT_STR_EQ(rf_topo_gpu_at(t, 0)->bus_id, "0000:19:00.0");
  ASSERT_STR_EQ(rf_topo_gpu_at(t, 7)->bus_id, "0000:ba:00.0");
  ASSERT_EQ(rf_topo_gpu_at(t, 3)->numa, 0);
  ASSERT_EQ(rf_topo_gpu_at(t, 4)->numa, 1);
  ASSERT_STR_EQ(rf_topo_nic_at(t, 5)->name, "mlx5_5"); /* OpenFabrics wins over ib5 */
  ASSERT_EQ(rf_topo_nic_at(t, 5)->numa, 1);

  ASSERT_EQ(rf_topo_gpu_distance(t, 2, 2), RF_TOPO_SAME_DEVICE);
  ASSERT_EQ(rf_topo_gpu_distance(t, 2, 3), RF_TOPO_SAME_SWITCH);
  ASSERT_EQ(rf_topo_gpu_distance(t, 0, 3), RF_TOPO_SAME_NUMA);
  ASSERT_EQ(rf_topo_gpu_distance(t, 0, 4), RF_TOPO_SAME_NODE);
  ASSERT_EQ(rf_topo_gpu_nic_distance(t, 0, 1), RF_TOPO_SAME_SWITCH);
  ASSERT_EQ(rf_topo_gpu_nic_distance(t, 0, 2), RF_TOPO_SAME_NUMA);
  ASSERT_EQ(rf_topo_gpu_nic_distance(t, 0, 7), RF_TOPO_SAME_NODE);
  rf_topo_free(t);

  /* HWLOC_XMLFILE stands in for --topology-xml. */
  setenv("HWLOC_XMLFILE", xml, 1);
  ASSERT_OK(rf_topo_load(&t, NULL));
  ASSERT_EQ(rf_topo_gpu_count(t), 8);
  rf_topo_free(t);
  unsetenv("HWLOC_XMLFILE");
  ASSERT_STATUS(rf_topo_load(&t, "/nonexistent/topology.xml"), RF_ERR_CONFIG);
  ASSERT_TRUE(t == NULL);
}

static void test_place_dgx8(void) {
  static const char *const cpus[8] = {"0-3",   "4-7",   "8-11",  "12-15",
                                      "16-19", "20-23", "24-27", "28-31"};
  rf_topo *t = load_dgx8();
  rf_topo_place p[16];
  char nic[16];
  place(t, 8, -1, 1, RF_BIND_AUTO, p);
  for (int r = 0; r < 8; r++) {
    ASSERT_EQ(p[r].local_rank, r);
    ASSERT_EQ(p[r].gpu, r);
    ASSERT_STR_EQ(p[r].bus_id, rf_topo_gpu_at(t, r)->bus_id);
    ASSERT_EQ(p[r].numa, r / 4);
    ASSERT_STR_EQ(p[r].cpus, cpus[r]);
    /* Two GPUs and two NICs per switch: each GPU gets its own NIC on its switch. */
    snprintf(nic, sizeof nic, "mlx5_%d", r);
    ASSERT_STR_EQ(p[r].nic, nic);
  }
  assert_disjoint(p, 8);

  /* Two ranks: both GPUs on socket 0 split its 16 cores. */
  place(t, 2, -1, 1, RF_BIND_CORES, p);
  ASSERT_STR_EQ(p[0].cpus, "0-7");
  ASSERT_STR_EQ(p[1].cpus, "8-15");

  /* Sixteen ranks over MPI: two per GPU, two cores each, still disjoint. */
  place(t, 16, -1, 0, RF_BIND_AUTO, p);
  ASSERT_EQ(p[9].gpu, 1);
  ASSERT_STR_EQ(p[0].cpus, "0-1");
  ASSERT_STR_EQ(p[8].cpus, "8-9");
  assert_disjoint(p, 16);

  /* --device puts every rank on one GPU; the NUMA node's cores are still split. */
  place(t, 4, 5, 1, RF_BIND_AUTO, p);
  ASSERT_EQ(p[3].gpu, 5);
  ASSERT_STR_EQ(p[0].cpus, "16-19");
  ASSERT_STR_EQ(p[3].cpus, "28-31");
  ASSERT_STR_EQ(p[3].nic, "mlx5_5");

  place(t, 4, -1, 1, RF_BIND_NUMA, p);
  ASSERT_STR_EQ(p[2].cpus, "0-15");
  place(t, 4, -1, 1, RF_BIND_NONE, p);
  ASSERT_STR_EQ(p[2].cpus, "-");
  ASSERT_EQ(p[2].numa, 0);

  rf_topo_place_options o = {16, -1, "nccl", RF_BIND_AUTO};
  ASSERT_STATUS(rf_topo_place_node(t, &o, p), RF_ERR_USAGE);
  o = (rf_topo_place_options){4, 8, "nccl", RF_BIND_AUTO};
  ASSERT_STATUS(rf_topo_place_node(t, &o, p), RF_ERR_USAGE);
  rf_topo_free(t);
}

static void test_distance(void) {
  rf_topo *t = load_dgx8();
  rf_topo_place p[8];
  place(t, 8, -1, 1, RF_BIND_AUTO, p);
  rf_topo_distance_ctx ctx = {t, 8, p};
  ASSERT_EQ(rf_topo_distance(&ctx, 3, 3), RF_DIST_PROCESS);
  ASSERT_EQ(rf_topo_distance(&ctx, 0, 1), RF_DIST_SWITCH);
  ASSERT_EQ(rf_topo_distance(&ctx, 0, 2), RF_DIST_NUMA);
  ASSERT_EQ(rf_topo_distance(&ctx, 0, 4), RF_DIST_NODE);
  ASSERT_EQ(rf_topo_distance(&ctx, 0, 9), RF_DIST_NETWORK);
  ASSERT_EQ(rf_topo_distance(&ctx, 12, 13), RF_DIST_SWITCH); /* node 1 looks like node 0 */
  /* A source nearer the destination is always the smaller number. */
  ASSERT_LT(rf_topo_distance(&ctx, 1, 0), rf_topo_distance(&ctx, 2, 0));
  ASSERT_STR_EQ(rf_topo_distance_name(RF_DIST_SWITCH), "switch");
  ASSERT_STR_EQ(rf_topo_distance_name(RF_DIST_NETWORK), "network");

  place(t, 2, 0, 1, RF_BIND_AUTO, p); /* both ranks on GPU 0 */
  ctx.ranks_per_node = 2;
  ASSERT_EQ(rf_topo_distance(&ctx, 0, 1), RF_DIST_GPU);
  rf_topo_free(t);
}

/* The p2p planner with the topology's distance: three trainer replicas (fsdp=2, dp=3) on GPUs
 * 0-5 and a tp=2 engine on GPUs 6-7. Only replica 2 (GPUs 4-5) shares socket 1 with the
 * engine, so every piece comes from it; without the distance, load balancing spreads them. */
static void test_pairing(void) {
  rf_topo *t = load_dgx8();
  rf_topo_place p[8];
  place(t, 8, -1, 1, RF_BIND_AUTO, p);
  rf_topo_distance_ctx ctx = {t, 8, p};
  rf_model m;
  rf_layout lay;
  rf_plan plan;
  rf_trainer_layout tl = {.fsdp = 2, .tp = 1, .dp = 3, .ep = 1, .pp = 1};
  rf_rollout_layout rl = {.tp = 2, .dp = 1};
  ASSERT_OK(rf_model_load("llama-3.2-1b", &m));
  ASSERT_OK(rf_layout_init(&lay, &m, &tl, &rl, RF_PLACEMENT_DISAGGREGATED));
  ASSERT_EQ(lay.world_size, 8);
  rf_plan_options opt = {.distance = rf_topo_distance, .distance_ctx = &ctx};
  ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_P2P, &opt));
  for (int i = 0; i < plan.piece_count; i++) {
    ASSERT_GE(plan.pieces[i].src, 4);
    ASSERT_EQ(rf_topo_distance(&ctx, rf_piece_src_world(&plan, &plan.pieces[i]),
                               rf_piece_dst_world(&plan, &plan.pieces[i])),
              RF_DIST_NUMA);
  }
  rf_plan_free(&plan);
  ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_P2P, NULL));
  int far = 0;
  for (int i = 0; i < plan.piece_count; i++)
    far += plan.pieces[i].src < 4;
  ASSERT_GT(far, 0);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);
  rf_topo_free(t);
}

/* The table that `refit run` plans with gives rf_topo_distance's classes, and nodes are told
 * apart by node_of, so ranks mapped round-robin over nodes work too. */
static void test_distance_table(void) {
  rf_topo *t = load_dgx8();
  rf_topo_place p[8];
  place(t, 4, -1, 1, RF_BIND_AUTO, p);
  int local[16];
  rf_topo_distance_matrix(t, p, 4, local);
  rf_topo_distance_ctx ctx = {t, 4, p};
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 4; b++)
      ASSERT_EQ(local[a * 4 + b], rf_topo_distance(&ctx, a, b));
  ASSERT_EQ(local[0 * 4 + 1], RF_DIST_SWITCH);
  ASSERT_EQ(local[0 * 4 + 2], RF_DIST_NUMA);
  /* Eight ranks, round-robin over two nodes of four: even ranks on node 0. */
  int node_of[8] = {0, 1, 0, 1, 0, 1, 0, 1}, local_of[8] = {0, 0, 1, 1, 2, 2, 3, 3};
  rf_topo_distance_table table = {4, local, 8, node_of, local_of};
  ASSERT_EQ(rf_topo_table_distance(&table, 5, 5), RF_DIST_PROCESS);
  ASSERT_EQ(rf_topo_table_distance(&table, 0, 1), RF_DIST_NETWORK);
  ASSERT_EQ(rf_topo_table_distance(&table, 0, 2), RF_DIST_SWITCH);
  ASSERT_EQ(rf_topo_table_distance(&table, 3, 5), RF_DIST_NUMA);
  ASSERT_EQ(rf_topo_table_distance(&table, 0, 9), RF_DIST_NETWORK); /* not a rank */
  /* A node larger than the table's: its extra ranks are only known to share the node. */
  table.ranks_per_node = 1;
  ASSERT_EQ(rf_topo_table_distance(&table, 0, 2), RF_DIST_NODE);

  ASSERT_TRUE(rf_topo_same_bus_id("0000:b9:00.0", "00000000:B9:00.0"));
  ASSERT_FALSE(rf_topo_same_bus_id("0000:b9:00.0", "0000:ba:00.0"));
  ASSERT_FALSE(rf_topo_same_bus_id("-", "0000:ba:00.0"));
  ASSERT_FALSE(rf_topo_is_this_machine(t)); /* a file describes another machine */
  rf_topo_free(t);
}

/* One rollout rank on GPU 2 and two trainer replicas that both hold the whole model: one on
 * GPU 4 (the other socket), one on GPU 3 (GPU 2's PCIe switch). With the table the near
 * replica sends everything; without it load balancing spreads the pieces over both. */
static void test_pairing_table(void) {
  rf_topo *t = load_dgx8();
  rf_topo_place p8[8], p[3];
  place(t, 8, -1, 1, RF_BIND_AUTO, p8);
  p[0] = p8[4];
  p[1] = p8[3];
  p[2] = p8[2];
  int local[9], node_of[3] = {0, 0, 0}, local_of[3] = {0, 1, 2};
  rf_topo_distance_matrix(t, p, 3, local);
  rf_topo_distance_table table = {3, local, 3, node_of, local_of};
  rf_model m;
  rf_layout lay;
  rf_plan plan;
  rf_trainer_layout tl = {.fsdp = 1, .tp = 1, .dp = 2, .ep = 1, .pp = 1};
  rf_rollout_layout rl = {.tp = 1, .dp = 1};
  ASSERT_OK(rf_model_load("tiny", &m));
  ASSERT_OK(rf_layout_init(&lay, &m, &tl, &rl, RF_PLACEMENT_DISAGGREGATED));
  ASSERT_EQ(lay.world_size, 3);
  ASSERT_EQ(rf_layout_rollout_world_rank(&lay, 0), 2);
  rf_plan_options opt = {.distance = rf_topo_table_distance, .distance_ctx = &table};
  ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_P2P, &opt));
  ASSERT_EQ(plan.piece_count, m.tensor_count);
  for (int i = 0; i < plan.piece_count; i++)
    ASSERT_EQ(rf_piece_src_world(&plan, &plan.pieces[i]), 1);
  rf_link_info *links = NULL;
  int count = 0;
  ASSERT_OK(rf_job_plan_links(&plan, 3, &opt, &links, &count));
  ASSERT_EQ(count, 1);
  ASSERT_EQ(links[0].src, 1);
  ASSERT_EQ(links[0].dst, 2);
  ASSERT_EQ(links[0].bytes, m.total_bytes);
  ASSERT_EQ(links[0].distance, RF_DIST_SWITCH);
  ASSERT_STR_EQ(links[0].name, "switch");
  free(links);
  rf_plan_free(&plan);
  ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_P2P, NULL));
  ASSERT_OK(rf_job_plan_links(&plan, 3, NULL, &links, &count));
  ASSERT_EQ(count, 2); /* both replicas send: nothing says which is nearer */
  ASSERT_STR_EQ(links[0].name, "node");
  free(links);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);
  rf_topo_free(t);
}

/* A machine without GPUs or NICs (the MPI transport): cores only, spread over NUMA nodes. */
static void test_synthetic(void) {
  rf_topo *t = NULL;
  ASSERT_OK(rf_topo_load_synthetic(&t, "pack:2 numa:1 core:8 pu:1"));
  ASSERT_EQ(rf_topo_gpu_count(t), 0);
  ASSERT_EQ(rf_topo_numa_count(t), 2);
  rf_topo_place p[20];
  place(t, 4, -1, 0, RF_BIND_AUTO, p);
  static const char *const cpus[4] = {"0-3", "4-7", "8-11", "12-15"};
  for (int r = 0; r < 4; r++) {
    ASSERT_EQ(p[r].gpu, -1);
    ASSERT_STR_EQ(p[r].bus_id, "-");
    ASSERT_STR_EQ(p[r].nic, "-");
    ASSERT_EQ(p[r].numa, r / 2);
    ASSERT_STR_EQ(p[r].cpus, cpus[r]);
  }
  rf_topo_place_options o = {4, -1, "nccl", RF_BIND_AUTO};
  ASSERT_STATUS(rf_topo_place_node(t, &o, p), RF_ERR_USAGE); /* a GPU transport, no GPUs */
  /* 20 ranks on 16 threads: cores refuses, auto shares each NUMA node. */
  o = (rf_topo_place_options){20, -1, NULL, RF_BIND_CORES};
  ASSERT_STATUS(rf_topo_place_node(t, &o, p), RF_ERR_USAGE);
  place(t, 20, -1, 0, RF_BIND_AUTO, p);
  ASSERT_STR_EQ(p[0].cpus, "0-7");
  ASSERT_STR_EQ(p[19].cpus, "8-15");
  rf_topo_free(t);
  ASSERT_STATUS(rf_topo_load_synthetic(&t, "pack:x"), RF_ERR_CONFIG);
}

int main(void) {
  const char *src = getenv("REFIT_SOURCE_DIR"); /* set by CTest */
  if (!src)
    return RF_TEST_SKIP;
  snprintf(xml, sizeof xml, "%s/tests/data/dgx8.xml", src);
  test_discovery();
  test_place_dgx8();
  test_distance();
  test_pairing();
  test_distance_table();
  test_pairing_table();
  test_synthetic();
  printf("test_topo: ok\n");
  return 0;
}
