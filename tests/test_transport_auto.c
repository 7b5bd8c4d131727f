/* --transport auto (src/driver/transport_auto.c): the transport and the exact reason line for
 * each kind of site (host or GPU weights, one node or several), and each rule that passes a
 * candidate over: not in this build, a GPU per rank, a delta forwarded over a mapping, GPU
 * weights staged for mpi. */
#include "driver/transport_auto.h"
#include "test.h"

/* The defaults with `options` (name, value pairs, NULL-terminated) set as on the command line. */
static rf_config config(const char *const *options) {
  rf_config c;
  rf_cli_defaults(&c);
  for (int i = 0; options && options[i]; i += 2)
    ASSERT_OK(rf_cli_set_option(&c, options[i], options[i + 1]));
  return c;
}

static void expect(const char *const *options, rf_transport_site site, const char *name,
                   const char *why) {
  rf_config c = config(options);
  char line[RF_TRANSPORT_CHOICE_MAX];
  ASSERT_STR_EQ(rf_transport_choose(&c, &site, line, sizeof line), name);
  ASSERT_STR_EQ(line, why);
}

/* The four kinds of job, on another machine (every transport counts as built). */
static void test_preferences(void) {
  expect(NULL, (rf_transport_site){1, 4, 4, 0, 1}, "shm",
         "shm (auto: host weights, all 4 ranks on one node)");
  expect(NULL, (rf_transport_site){2, 8, 4, 0, 1}, "mpi",
         "mpi (auto: host weights, 8 ranks on 2 nodes)");
  expect(NULL, (rf_transport_site){1, 2, 2, 8, 1}, "ipc",
         "ipc (auto: GPU weights, both ranks on one node)");
  expect(NULL, (rf_transport_site){2, 16, 8, 8, 1}, "nccl",
         "nccl (auto: GPU weights, 16 ranks on 2 nodes)");
  expect(NULL, (rf_transport_site){1, 1, 1, 0, 1}, "shm", "shm (auto: host weights, one rank)");
  /* A dry run without mpirun knows no ranks. */
  expect(NULL, (rf_transport_site){1, 0, 1, 0, 1}, "shm", "shm (auto: host weights, one node)");
  /* --memory decides where the weights live, whatever the GPUs. */
  static const char *const host[] = {"memory", "host", NULL};
  expect(host, (rf_transport_site){1, 4, 4, 8, 1}, "shm",
         "shm (auto: host weights, all 4 ranks on one node)");
  static const char *const device[] = {"memory", "device", NULL};
  expect(device, (rf_transport_site){1, 4, 4, 0, 1}, "ipc",
         "ipc (auto: GPU weights, all 4 ranks on one node)");
  /* A named transport is kept, without a line. */
  static const char *const named[] = {"transport", "nccl", NULL};
  expect(named, (rf_transport_site){1, 4, 4, 0, 1}, "nccl", "");
}

/* Each rule that passes a candidate over, with the next candidate chosen. */
static void test_fallbacks(void) {
  expect(NULL, (rf_transport_site){2, 16, 8, 4, 1}, "mpi",
         "mpi (auto: GPU weights, 16 ranks on 2 nodes; nccl needs a GPU per rank (8 ranks on a "
         "node of 4 GPUs))");
  /* A delta refit forwarded between replicas is a mapping's too. */
  static const char *const delta[] = {"rollout", "tp=1,dp=2", "delta", "auto", NULL};
  expect(delta, (rf_transport_site){1, 4, 4, 0, 1}, "shm",
         "shm (auto: host weights, all 4 ranks on one node)");
  expect(delta, (rf_transport_site){1, 4, 4, 4, 1}, "ipc",
         "ipc (auto: GPU weights, all 4 ranks on one node)");
  /* mpi ends every list: taken with its own reason, which its check then refuses in one line. */
  static const char *const staged[] = {"delta", "auto", NULL};
  expect(staged, (rf_transport_site){2, 16, 8, 4, 1}, "mpi",
         "mpi (auto: GPU weights, 16 ranks on 2 nodes; nccl needs a GPU per rank (8 ranks on a "
         "node of 4 GPUs); mpi would stage the GPU weights through host memory, which delta "
         "refits refuse)");
  static const char *const fp8[] = {"memory", "device", "rollout-dtype", "fp8", NULL};
  expect(fp8, (rf_transport_site){2, 16, 8, 4, 1}, "mpi",
         "mpi (auto: GPU weights, 16 ranks on 2 nodes; nccl needs a GPU per rank (8 ranks on a "
         "node of 4 GPUs); mpi would stage the GPU weights through host memory, which "
         "--rollout-dtype fp8 refuse)");
  /* Under --memory auto a quantized rollout over mpi keeps host weights: nothing is staged. */
  static const char *const fp8_auto[] = {"rollout-dtype", "fp8", NULL};
  expect(fp8_auto, (rf_transport_site){2, 16, 8, 4, 1}, "mpi",
         "mpi (auto: GPU weights, 16 ranks on 2 nodes; nccl needs a GPU per rank (8 ranks on a "
         "node of 4 GPUs))");
}

/* On this machine (any_build 0): a transport this build leaves out is passed over. */
static void test_this_build(void) {
#ifdef REFIT_HAVE_NCCL
  expect(NULL, (rf_transport_site){2, 16, 8, 8, 0}, "nccl",
         "nccl (auto: GPU weights, 16 ranks on 2 nodes)");
#else
  expect(NULL, (rf_transport_site){2, 16, 8, 8, 0}, "mpi",
         "mpi (auto: GPU weights, 16 ranks on 2 nodes; nccl is not in this build (it needs CUDA "
         "and NCCL))");
#endif
#ifdef REFIT_HAVE_CUDA
  expect(NULL, (rf_transport_site){1, 4, 4, 4, 0}, "ipc",
         "ipc (auto: GPU weights, all 4 ranks on one node)");
#else
  expect(NULL, (rf_transport_site){1, 4, 4, 4, 0}, "mpi",
         "mpi (auto: GPU weights, all 4 ranks on one node; ipc is not in this build (it needs "
         "CUDA); nccl is not in this build (it needs CUDA and NCCL))");
#endif
  expect(NULL, (rf_transport_site){1, 4, 4, 0, 0}, "shm",
         "shm (auto: host weights, all 4 ranks on one node)");
}

/* A sweep asks for auto when its transport list holds it. */
static void test_wants_auto(void) {
  rf_config c = config(NULL);
  ASSERT_TRUE(rf_transport_wants_auto(&c));
  static const char *const named[] = {"transport", "mpi", NULL};
  c = config(named);
  ASSERT_FALSE(rf_transport_wants_auto(&c));
  c.sweep.axis_count = 1;
  snprintf(c.sweep.axes[0].name, sizeof c.sweep.axes[0].name, "transport");
  c.sweep.axes[0].count = 2;
  snprintf(c.sweep.axes[0].values[0], RF_SWEEP_VALUE_MAX, "mpi");
  snprintf(c.sweep.axes[0].values[1], RF_SWEEP_VALUE_MAX, "auto");
  ASSERT_TRUE(rf_transport_wants_auto(&c));
}

int main(void) {
  test_preferences();
  test_fallbacks();
  test_this_build();
  test_wants_auto();
  return 0;
}
