/* The option table: the one place an option is declared. getopt_long, the JSON config file,
 * --help, the defaults and the printed configuration are all generated from it, so adding an
 * option means adding a field to rf_config and a row here. */
#include <stddef.h>
#include <string.h>

#include "cli_internal.h"

#define RUN RF_CMD_RUN
#define PLAN RF_CMD_PLAN
#define CKPT RF_CMD_CHECKPOINT
#define VERIFY RF_CMD_VERIFY
#define TOPO RF_CMD_TOPO
#define REPORT RF_CMD_REPORT
#define FIELD(f) .offset = offsetof(rf_config, f), .size = sizeof(((rf_config *)0)->f)

const rf_cli_option rf_cli_options[] = {
    {.name = "config", .type = RF_OPT_STRING, FIELD(config), .def = "", .unit = "",
     .metavar = "FILE", .commands = RF_CLI_ALL_COMMANDS,
     .help = "JSON file whose keys are long option names"},
    {.name = "model", .type = RF_OPT_STRING, FIELD(model), .def = "llama-3.2-1b", .unit = "",
     .metavar = "NAME|PATH", .commands = RUN | PLAN | CKPT | TOPO,
     .help = "shipped model name or path to a HF config.json"},
    {.name = "dtype", .type = RF_OPT_ENUM, .choices = "model|bf16|fp16|fp32", FIELD(dtype),
     .def = "model", .unit = "", .commands = RUN | PLAN | CKPT,
     .help = "element type of the weights; model keeps the model's own"},
    {.name = "trainer", .type = RF_OPT_STRING, FIELD(trainer), .def = "fsdp=2", .unit = "",
     .metavar = "MESH", .commands = RUN | PLAN | TOPO, .help = "trainer mesh: fsdp=F,tp=T[,dp=D]"},
    {.name = "trainer-style", .type = RF_OPT_ENUM, .choices = "tunix|fsdp2",
     FIELD(trainer_style), .def = "tunix", .unit = "", .commands = RUN | PLAN | TOPO,
     .help = "how the trainer shards each tensor: JAX tunix or PyTorch FSDP2 with TP"},
    {.name = "trainer-order", .type = RF_OPT_ENUM, .choices = "hf|jax", FIELD(trainer_order),
     .def = "hf", .unit = "", .commands = RUN,
     .help = "trainer storage order; jax stores some tensors transposed, as JAX does"},
    {.name = "rollout", .type = RF_OPT_STRING, FIELD(rollout), .def = "tp=2", .unit = "",
     .metavar = "MESH", .commands = RUN | PLAN | TOPO, .help = "rollout engine: tp=R[,dp=P]"},
    {.name = "placement", .type = RF_OPT_ENUM, .choices = "disaggregated|colocated",
     FIELD(placement), .def = "disaggregated", .unit = "", .commands = RUN | PLAN | TOPO,
     .help = "trainer and rollout in separate processes, or sharing each GPU"},
    {.name = "plan", .type = RF_OPT_ENUM, .choices = "p2p|star", FIELD(plan), .def = "p2p",
     .unit = "", .commands = RUN | PLAN | TOPO,
     .help = "direct shard-to-shard pieces, or the reference bridge's stars"},
    {.name = "mode", .type = RF_OPT_ENUM, .choices = "unfused|grouped|fused", .list = 1,
     FIELD(mode), .def = "grouped", .unit = "", .commands = RUN,
     .help = "a message per piece, a group per bucket, or one packed message per peer; a "
             "comma-separated list runs each in turn"},
    {.name = "bucket-size", .type = RF_OPT_SIZE, .imin = 0, .imax = INT64_MAX,
     FIELD(bucket_size), .def = "256MiB", .unit = "bytes", .metavar = "SIZE", .commands = RUN,
     .help = "bytes moved per bucket; 0 = the whole model in one bucket"},
    {.name = "transport", .type = RF_OPT_STRING, FIELD(transport), .def = "mpi", .unit = "",
     .metavar = "NAME", .commands = RUN | TOPO, .help = "what moves the bytes: mpi, nccl or ipc"},
    {.name = "device", .type = RF_OPT_INT, .imin = -1, .imax = 1023, FIELD(device), .def = "-1",
     .unit = "", .metavar = "N", .commands = RUN | TOPO,
     .help = "CUDA device of every rank of this node; -1 = the node-local rank's"},
    {.name = "seed", .type = RF_OPT_INT, .imin = 0, .imax = INT64_MAX, FIELD(seed),
     .def = "1", .unit = "", .metavar = "N", .commands = RUN | CKPT,
     .help = "seed of the synthetic weights"},
    {.name = "warmup", .type = RF_OPT_INT, .imin = 0, .imax = 1000000, FIELD(warmup),
     .def = "1", .unit = "iterations", .metavar = "N", .commands = RUN,
     .help = "untimed iterations before the timed ones"},
    {.name = "iters", .type = RF_OPT_INT, .imin = 1, .imax = 1000000, FIELD(iters),
     .def = "5", .unit = "iterations", .metavar = "N", .commands = RUN,
     .help = "timed iterations"},
    {.name = "verify", .type = RF_OPT_ENUM, .choices = "full|checksum|none", FIELD(verify),
     .def = "full", .unit = "", .commands = RUN,
     .help = "check every element, compare checksums only, or do not check"},
    {.name = "inject", .type = RF_OPT_ENUM, .choices = "none|corrupt|stall", FIELD(inject),
     .def = "none", .unit = "", .commands = RUN, .help = "fault injection for tests"},
    {.name = "timeout", .type = RF_OPT_DOUBLE, .dmin = 0, .dmin_open = 1, .dmax = 86400,
     FIELD(timeout), .def = "60", .unit = "s", .metavar = "SECONDS", .commands = RUN,
     .help = "how long to wait for a silent peer before giving up"},
    {.name = "output", .type = RF_OPT_STRING, FIELD(output), .def = "", .unit = "",
     .metavar = "FILE", .commands = RUN, .help = "HDF5 results file (appended)"},
    {.name = "json", .type = RF_OPT_FLAG, FIELD(json), .def = "false", .unit = "",
     .commands = PLAN | TOPO, .help = "print one JSON object"},
    {.name = "checkpoint", .type = RF_OPT_STRING, FIELD(checkpoint), .def = "", .unit = "",
     .metavar = "PATH", .commands = RUN | VERIFY | CKPT,
     .help = "checkpoint (safetensors file or directory, or .h5): the trainer's weights for "
             "run, the reference for verify, the file written by checkpoint"},
    {.name = "format", .type = RF_OPT_ENUM, .choices = "safetensors|hdf5", FIELD(format),
     .def = "safetensors", .unit = "", .commands = CKPT, .help = "checkpoint file format"},
    {.name = "shard-size", .type = RF_OPT_SIZE, .imin = 0, .imax = INT64_MAX, FIELD(shard_size),
     .def = "0", .unit = "bytes", .metavar = "SIZE", .commands = CKPT,
     .help = "largest safetensors shard, with model.safetensors.index.json; 0 = one file"},
    {.name = "reference", .type = RF_OPT_STRING, FIELD(reference), .def = "", .unit = "",
     .metavar = "FILE", .commands = VERIFY,
     .help = "reference results file whose checksums the results must equal"},
    {.name = "run", .type = RF_OPT_INT, .imin = -1, .imax = 9999, FIELD(run), .def = "-1",
     .unit = "", .metavar = "N", .commands = VERIFY,
     .help = "run number in the results file; -1 = the latest"},
    {.name = "topology-xml", .type = RF_OPT_STRING, FIELD(topology_xml), .def = "", .unit = "",
     .metavar = "FILE", .commands = TOPO | RUN,
     .help = "hwloc XML file to use instead of this machine (also honoured: HWLOC_XMLFILE)"},
    {.name = "ranks-per-node", .type = RF_OPT_INT, .imin = 0, .imax = 4096,
     FIELD(ranks_per_node), .def = "0", .unit = "", .metavar = "N", .commands = TOPO,
     .help = "ranks on each node; 0 = the whole world on one node"},
    {.name = "bind", .type = RF_OPT_ENUM, .choices = "auto|none|cores|numa", FIELD(bind),
     .def = "auto", .unit = "", .commands = RUN | TOPO,
     .help = "bind each rank to cores near its GPU, not at all, to cores only, or to its NUMA "
             "node"},
    {.name = "nic", .type = RF_OPT_ENUM, .choices = "none|auto", FIELD(nic), .def = "none",
     .unit = "", .commands = RUN | TOPO,
     .help = "auto exports NCCL_IB_HCA as the network adapter nearest each rank's GPU"},
    {.name = "memory", .type = RF_OPT_ENUM, .choices = "auto|host|device", FIELD(memory),
     .def = "auto", .unit = "", .commands = RUN,
     .help = "where the weights live; auto = on the GPU when the transport or the machine has "
             "one (mpi then stages through pinned host memory), else in host memory"},
    {.name = "dry-run", .type = RF_OPT_FLAG, FIELD(dry_run), .def = "false", .unit = "",
     .commands = RUN, .help = "list the runs of a sweep and the combinations it skips, and "
                              "move nothing; a combination must fit the world's size, except "
                              "in a world of one rank (no mpirun), where each gets the ranks it "
                              "needs"},
    {.name = "calibrate", .type = RF_OPT_FLAG, FIELD(calibrate), .def = "false", .unit = "",
     .commands = RUN, .help = "measure the limits (memcpy, a device copy when the weights are "
                              "on a GPU, a plain MPI exchange and, for nccl, plain NCCL "
                              "send/recv of the same bytes) after every run"},
    {.name = "output-dir", .letter = 'o', .type = RF_OPT_STRING, FIELD(output_dir),
     .def = "report", .unit = "", .metavar = "DIR", .commands = REPORT,
     .help = "directory for report.html, report.md and the CSV tables"},
};

const size_t rf_cli_option_count = RF_ARRAY_LEN(rf_cli_options);

_Static_assert(RF_ARRAY_LEN(rf_cli_options) <= RF_CLI_MAX_OPTIONS,
               "raise RF_CLI_MAX_OPTIONS in cli_internal.h");

const rf_cli_option *rf_cli_find_option(const char *name) {
  for (size_t i = 0; i < rf_cli_option_count; i++) {
    const char *a = rf_cli_options[i].name, *b = name;
    while (*a && (*a == *b || (*a == '-' && *b == '_'))) {
      a++;
      b++;
    }
    if (!*a && !*b)
      return &rf_cli_options[i];
  }
  return NULL;
}
