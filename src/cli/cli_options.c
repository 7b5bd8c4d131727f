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
#define SIM RF_CMD_SIMULATE
#define FIELD(f) .offset = offsetof(rf_config, f), .size = sizeof(((rf_config *)0)->f)
#define NAMES(type, count) .names = type##_names, .name_count = (count)

/* Choices that stay text: the driver hands them on to the model and the checkpoint code. */
static const char *const dtype_names[] = {"model", "bf16", "fp16", "fp32",
                                          RF_FORMAT_LIST(RF_ENUM_NAME)};
static const char *const format_names[] = {"auto", "safetensors", "hdf5"};
/* --plan: the plan kinds, then auto (RF_PLAN_AUTO), which the driver resolves to one. */
static const char *const plan_names[] = {RF_PLAN_KIND_LIST(RF_ENUM_NAME) "auto"};
_Static_assert(RF_ARRAY_LEN(plan_names) == RF_PLAN_AUTO + 1, "auto follows the plan kinds");

/* Enum fields are stored as int, and a list as rf_mode_list's count and items. */
_Static_assert(sizeof(rf_mode) == sizeof(int) && sizeof(rf_plan_kind) == sizeof(int) &&
                   sizeof(rf_bind) == sizeof(int) && sizeof(rf_rollout_dtype) == sizeof(int) &&
                   sizeof(rf_copy_path) == sizeof(int) && sizeof(rf_mapped_rounds) == sizeof(int) &&
                   sizeof(rf_rma_direction) == sizeof(int) &&
                   sizeof(rf_register_unit) == sizeof(int) &&
                   sizeof(rf_delta_choice) == sizeof(int),
               "enum fields are stored as int");
_Static_assert(offsetof(rf_mode_list, items) == sizeof(int) &&
                   offsetof(rf_delta_choice_list, items) == sizeof(int),
               "lists: count, then items");

/* --update: the rule's own parser, so that a bad value is refused as the command line and the
 * config file are read. */
static rf_status check_update(const char *text, char *why, size_t why_len) {
  rf_update u;
  return rf_update_parse(text, &u, why, why_len);
}

const rf_cli_option rf_cli_options[] = {
    {.name = "config",
     .type = RF_OPT_STRING,
     FIELD(config),
     .def = "",
     .unit = "",
     .metavar = "FILE",
     .commands = RF_CLI_ALL_COMMANDS,
     .help = "JSON file whose keys are long option names"},
    {.name = "model",
     .sweep = 1,
     .type = RF_OPT_STRING,
     FIELD(model),
     .def = "llama-3.2-1b",
     .unit = "",
     .metavar = "NAME|PATH",
     .commands = RUN | PLAN | CKPT | TOPO | SIM,
     .help = "shipped model name or path to a HF config.json of type llama, mistral, qwen2, "
             "qwen3, gemma, gemma2, gemma3_text, mixtral, qwen3_moe, deepseek_v2 or deepseek_v3 "
             "(multi-token-prediction layers are not part of the rollout model and are left "
             "out)"},
    {.name = "dtype",
     .type = RF_OPT_CHOICE,
     NAMES(dtype, (int)RF_ARRAY_LEN(dtype_names)),
     FIELD(dtype),
     .def = "model",
     .unit = "",
     .commands = RUN | PLAN | CKPT | SIM,
     .help = "element type of the weights; model keeps the model's own; tensors with a type "
             "of their own (DeepSeek's fp32 router bias) keep it; the quantized formats (fp8, "
             "fp8-ue8m0, mxfp8, mxfp4, nvfp4 and the -floor variants; see --rollout-dtype) are "
             "for refit checkpoint only: the model's weights quantized, in the names and dtypes "
             "of the format's ecosystem"},
    {.name = "trainer",
     .sweep = 1,
     .separator = ';',
     .type = RF_OPT_STRING,
     FIELD(trainer),
     .def = "fsdp=2",
     .unit = "",
     .metavar = "MESH",
     .commands = RUN | PLAN | TOPO | SIM,
     .help = "trainer mesh: fsdp=F,tp=T[,ep=E][,pp=S][,dp=D][,cp=C]; ep ranks hold whole "
             "experts, pp stages contiguous layers (the first L mod S stages get one layer more); "
             "ranks are numbered tp fastest, then fsdp, ep, pp, dp; with --trainer-style "
             "megatron, tp, cp, dp, pp and ep folded onto the tp*cp*dp ranks of each stage"},
    {.name = "trainer-style",
     .type = RF_OPT_ENUM,
     NAMES(rf_trainer_style, RF_TRAINER_STYLE_COUNT),
     FIELD(trainer_style),
     .def = "tunix",
     .unit = "",
     .commands = RUN | PLAN | TOPO | SIM,
     .help = "how the trainer shards each tensor: JAX tunix, PyTorch FSDP2 with TP, or "
             "Megatron with parallel folding (experts whole over ep ranks folded onto tp*cp*dp; "
             "cp ranks are replicas)"},
    {.name = "system",
     .type = RF_OPT_STRING,
     FIELD(system),
     .def = "",
     .unit = "",
     .metavar = "FILE",
     .commands = RUN | PLAN | TOPO | SIM,
     .help = "NCCL M2N reshard_model_bench system file (train and generation sizes): sets "
             "--trainer, --trainer-style megatron and --rollout, which must then keep their "
             "defaults"},
    {.name = "trainer-order",
     .type = RF_OPT_ENUM,
     NAMES(rf_trainer_order, RF_TRAINER_ORDER_COUNT),
     FIELD(trainer_order),
     .def = "hf",
     .unit = "",
     .commands = RUN | SIM,
     .help = "trainer storage order; jax stores some tensors transposed, as JAX does"},
    {.name = "rollout",
     .sweep = 1,
     .separator = ';',
     .type = RF_OPT_STRING,
     FIELD(rollout),
     .def = "tp=2",
     .unit = "",
     .metavar = "MESH",
     .commands = RUN | PLAN | TOPO | SIM,
     .help = "rollout engine: tp=R[,dp=P][,ep]; ep is vLLM's --enable-expert-parallel: "
             "whole experts over all R*P ranks"},
    {.name = "rollout-rank",
     .type = RF_OPT_INT,
     .imin = 0,
     .imax = RF_LAYOUT_MAX_RANKS - 1,
     FIELD(rollout_rank),
     .def = "0",
     .unit = "",
     .metavar = "N",
     .commands = PLAN,
     .help = "the rollout rank whose tensors --json lists as rollout_manifest"},
    {.name = "rollout-dtype",
     .sweep = 1,
     .type = RF_OPT_ENUM,
     NAMES(rf_rollout_dtype, RF_ROLLOUT_DTYPE_COUNT),
     FIELD(rollout_dtype),
     .def = "model",
     .unit = "",
     .commands = RUN | PLAN | SIM,
     .help = "what the rollout receives: every tensor in the trainer's dtype (model), or every "
             "linear weight in a quantized format: fp8 (float8_e4m3fn, an fp32 "
             "weight_scale_inv per 128x128 block, vLLM's block FP8), fp8-ue8m0 (the same with "
             "power-of-two scales), mxfp8 (an E8M0 weight_scale per 1x32 block), mxfp4, nvfp4 "
             "and OCP's -floor variants (docs/architecture.md, Quantized formats); refit run "
             "moves every format in host memory over mpi or shm and in GPU memory over ipc or "
             "nccl"},
    {.name = "placement",
     .sweep = 1,
     .type = RF_OPT_ENUM,
     NAMES(rf_placement, RF_PLACEMENT_COUNT),
     FIELD(placement),
     .def = "disaggregated",
     .unit = "",
     .commands = RUN | PLAN | TOPO | SIM,
     .help = "trainer and rollout in separate processes, or sharing each GPU"},
    {.name = "plan",
     .sweep = 1,
     .type = RF_OPT_ENUM,
     .names = plan_names,
     .name_count = RF_PLAN_AUTO + 1,
     FIELD(plan),
     .def = "auto",
     .unit = "",
     .commands = RUN | PLAN | TOPO | SIM,
     .help = "direct shard-to-shard pieces, the reference bridge's stars, each element once "
             "to one replica that forwards it to the others, once to each node (NVLink "
             "domain) that forwards it inside, or auto: the plan the cost model predicts "
             "fastest on --cluster (refit run: on the nodes it runs on), said in one line"},
    {.name = "domain-ranks",
     .type = RF_OPT_INT,
     .imin = 0,
     .imax = RF_LAYOUT_MAX_RANKS,
     FIELD(domain_ranks),
     .def = "0",
     .unit = "",
     .metavar = "N",
     .commands = RUN | PLAN | SIM,
     .help = "--plan hierarchical's domains: N consecutive world ranks each, as if each were a "
             "node; 0 = the nodes the ranks run on (run), the cluster's nodes (simulate) or "
             "one domain (plan)"},
    {.name = "mode",
     .sweep = 1,
     .type = RF_OPT_ENUM,
     NAMES(rf_mode, RF_MODE_COUNT),
     .list = 1,
     FIELD(mode),
     .def = "grouped",
     .unit = "",
     .commands = RUN | SIM,
     .help = "a message per piece, a group per bucket, or one packed message per peer; a "
             "comma-separated list runs each in turn"},
    {.name = "delta",
     .type = RF_OPT_ENUM,
     NAMES(rf_delta_choice, RF_DELTA_CHOICE_COUNT),
     .list = 1,
     FIELD(delta),
     .def = "off",
     .unit = "",
     .commands = RUN | SIM,
     .help = "how a refit sends a new version: every byte (off), or only its changed elements, "
             "in the smaller encoding per piece (auto) or in one (sparse: offsets and values; "
             "bitmask: a bit per element and the values); a comma-separated list runs each in "
             "turn; refit run sends deltas with every plan, transport and --rollout-dtype (where "
             "each trainer shard holds whole blocks); refit simulate predicts them"},
    {.name = "delta-compare",
     .type = RF_OPT_FLAG,
     FIELD(delta_compare),
     .def = "false",
     .unit = "",
     .commands = RUN,
     .help = "under --delta, encode compares every element of the version with the one the "
             "trainer kept; by default the generated versions mark the elements they change, "
             "in host memory, and encode compares only those (a trainer that knows what its "
             "step wrote)"},
    {.name = "bucket-size",
     .sweep = 1,
     .type = RF_OPT_SIZE,
     .imin = 0,
     .imax = INT64_MAX,
     FIELD(bucket_size),
     .def = "256MiB",
     .unit = "bytes",
     .metavar = "SIZE",
     .commands = RUN | SIM,
     .help = "bytes moved per bucket; 0 = the whole model in one bucket"},
    {.name = "transport",
     .sweep = 1,
     .type = RF_OPT_STRING,
     FIELD(transport),
     .def = "auto",
     .unit = "",
     .metavar = "NAME",
     .commands = RUN | TOPO | SIM,
     .help = "what moves the bytes: mpi or nccl (messages), ipc or shm (each piece copied once "
             "straight between processes of one node), rma (MPI one-sided puts or gets, see "
             "--rma; only when asked), or auto: shm for host weights on one "
             "node, ipc for GPU weights on one node, nccl for GPU weights across nodes, mpi for "
             "host weights across nodes, the next of these where one is not in this build or "
             "would refuse the job's other options, said in one line (the header's transport "
             "line; simulate and topo: on the cluster or topology described); simulate needs "
             "no build of it"},
    {.name = "device",
     .type = RF_OPT_INT,
     .imin = -1,
     .imax = 1023,
     FIELD(device),
     .def = "-1",
     .unit = "",
     .metavar = "N",
     .commands = RUN | TOPO,
     .help = "CUDA device of every rank of this node; -1 = the node-local rank's"},
    {.name = "seed",
     .type = RF_OPT_INT,
     .imin = 0,
     .imax = INT64_MAX,
     FIELD(seed),
     .def = "1",
     .unit = "",
     .metavar = "N",
     .commands = RUN | CKPT,
     .help = "seed of the synthetic weights"},
    {.name = "update",
     .type = RF_OPT_STRING,
     FIELD(update),
     .check = check_update,
     .def = "none",
     .unit = "",
     .metavar = "RULE",
     .commands = RUN | SIM | CKPT,
     .help = "how each iteration's version of the generated weights follows the last: none "
             "(every iteration moves the same weights), full (every element changes), sparse:F "
             "(each element changes with probability F, 0 <= F <= 1) or adam:LR (an fp32 master "
             "takes an Adam step of rate LR, 0 < LR <= 1, from seeded pseudo-gradients and is "
             "rounded to the dtype); the rollout is checked against the version moved last; "
             "refit checkpoint writes --version's weights under this rule"},
    {.name = "version",
     .type = RF_OPT_INT,
     .imin = 0,
     .imax = 1000000,
     FIELD(version),
     .def = "0",
     .unit = "",
     .metavar = "N",
     .commands = CKPT,
     .help = "the version of the generated weights to write under --update (0: the generator's "
             "values), bit for bit what refit run --update moves as version N; files of "
             "versions 0, 1, 2... make a --checkpoint list for refit run"},
    {.name = "warmup",
     .type = RF_OPT_INT,
     .imin = 0,
     .imax = 1000000,
     FIELD(warmup),
     .def = "1",
     .unit = "iterations",
     .metavar = "N",
     .commands = RUN,
     .help = "untimed iterations before the timed ones"},
    {.name = "iters",
     .type = RF_OPT_INT,
     .imin = 1,
     .imax = 1000000,
     FIELD(iters),
     .def = "5",
     .unit = "iterations",
     .metavar = "N",
     .commands = RUN,
     .help = "timed iterations"},
    {.name = "verify",
     .type = RF_OPT_ENUM,
     NAMES(rf_verify_level, RF_VERIFY_LEVEL_COUNT),
     FIELD(verify),
     .def = "full",
     .unit = "",
     .commands = RUN,
     .help = "check every element, compare checksums only, or do not check"},
    {.name = "inject",
     .type = RF_OPT_ENUM,
     NAMES(rf_inject, RF_INJECT_COUNT),
     FIELD(inject),
     .def = "none",
     .unit = "",
     .commands = RUN,
     .help = "fault injection for tests: corrupt flips a received byte in the last iteration; "
             "stall silences trainer rank 0 (under --delta in the last iteration only); "
             "skip-version makes a rollout rank drop the delta before the last (--delta), "
             "which the last then refits dense"},
    {.name = "timeout",
     .type = RF_OPT_DOUBLE,
     .dmin = 0,
     .dmin_open = 1,
     .dmax = 86400,
     FIELD(timeout),
     .def = "60",
     .unit = "s",
     .metavar = "SECONDS",
     .commands = RUN,
     .help = "how long to wait for a silent peer before giving up"},
    {.name = "output",
     .type = RF_OPT_STRING,
     FIELD(output),
     .def = "",
     .unit = "",
     .metavar = "FILE",
     .commands = RUN | SIM,
     .help = "HDF5 results file (appended; simulate appends its predictions as runs marked "
             "simulated)"},
    {.name = "output-wait",
     .type = RF_OPT_DOUBLE,
     .dmin = 0,
     .dmax = 86400,
     FIELD(output_wait),
     .def = "60",
     .unit = "s",
     .metavar = "SECONDS",
     .commands = RUN | SIM,
     .help = "how long to wait for another job appending to --output"},
    {.name = "json",
     .type = RF_OPT_FLAG,
     FIELD(json),
     .def = "false",
     .unit = "",
     .commands = PLAN | TOPO | SIM,
     .help = "print one JSON object"},
    {.name = "checkpoint",
     .type = RF_OPT_STRING,
     FIELD(checkpoint),
     .def = "",
     .unit = "",
     .metavar = "PATH",
     .commands = RUN | VERIFY | CKPT,
     .help = "checkpoint (safetensors file or directory, or .h5): the trainer's weights for "
             "run (block-FP8 with --rollout-dtype fp8: moved as fp8 with its scales), the "
             "reference for verify, the file written by checkpoint. For run a comma-separated "
             "list V0,V1,... of checkpoints in the model's dtype is a sequence of versions: each "
             "run (mode, --delta choice) moves V0, V1, ... in its iterations, warmup first, so "
             "--warmup + --iters must not exceed the list; the rollout is checked against the "
             "last file moved"},
    {.name = "format",
     .type = RF_OPT_CHOICE,
     NAMES(format, 3),
     FIELD(format),
     .def = "auto",
     .unit = "",
     .commands = CKPT,
     .help = "checkpoint file format; auto = hdf5 for a .h5 or .hdf5 name, else safetensors"},
    {.name = "force",
     .type = RF_OPT_FLAG,
     FIELD(force),
     .def = "false",
     .unit = "",
     .commands = CKPT,
     .help = "overwrite an existing checkpoint (refused without it)"},
    {.name = "shard-size",
     .type = RF_OPT_SIZE,
     .imin = 0,
     .imax = INT64_MAX,
     FIELD(shard_size),
     .def = "0",
     .unit = "bytes",
     .metavar = "SIZE",
     .commands = CKPT,
     .help = "largest safetensors shard, with model.safetensors.index.json; 0 = one file"},
    {.name = "reference",
     .type = RF_OPT_STRING,
     FIELD(reference),
     .def = "",
     .unit = "",
     .metavar = "FILE",
     .commands = VERIFY,
     .help = "reference results file whose checksums the results must equal"},
    {.name = "run",
     .type = RF_OPT_INT,
     .imin = -1,
     .imax = 9999,
     FIELD(run),
     .def = "-1",
     .unit = "",
     .metavar = "N",
     .commands = VERIFY,
     .help = "run number in the results file; -1 = the latest"},
    {.name = "topology-xml",
     .type = RF_OPT_STRING,
     FIELD(topology_xml),
     .def = "",
     .unit = "",
     .metavar = "FILE",
     .commands = TOPO | RUN,
     .help = "hwloc XML file to use instead of this machine (also honoured: HWLOC_XMLFILE)"},
    {.name = "ranks-per-node",
     .type = RF_OPT_INT,
     .imin = 0,
     .imax = 4096,
     FIELD(ranks_per_node),
     .def = "0",
     .unit = "",
     .metavar = "N",
     .commands = TOPO,
     .help = "ranks on each node; 0 = the whole world on one node"},
    {.name = "bind",
     .type = RF_OPT_ENUM,
     NAMES(rf_bind, RF_BIND_COUNT),
     FIELD(bind),
     .def = "auto",
     .unit = "",
     .commands = RUN | TOPO,
     .help = "bind each rank to cores near its GPU, not at all, to cores only, or to its NUMA "
             "node"},
    {.name = "nic",
     .type = RF_OPT_ENUM,
     NAMES(rf_nic, RF_NIC_COUNT),
     FIELD(nic),
     .def = "none",
     .unit = "",
     .commands = RUN | TOPO,
     .help = "auto exports NCCL_IB_HCA as the network adapter nearest each rank's GPU"},
    {.name = "memory",
     .type = RF_OPT_ENUM,
     NAMES(rf_mem_request, RF_MEM_REQUEST_COUNT),
     FIELD(memory),
     .def = "auto",
     .unit = "",
     .commands = RUN | SIM,
     .help = "where the weights live; auto = on the GPU when the transport or the machine has "
             "one (mpi then stages through pinned host memory), else in host memory (--transport "
             "auto: on the GPU when every rank sees one); for simulate, where the transport "
             "moves them (ipc, nccl: GPU; shm: host), and for mpi on the GPU when the cluster "
             "has GPUs"},
    {.name = "copy",
     .type = RF_OPT_ENUM,
     NAMES(rf_copy_path, RF_COPY_PATH_COUNT),
     FIELD(copy),
     .def = "auto",
     .unit = "",
     .commands = RUN,
     .help = "what moves copies in GPU memory: auto = the copy engines (four streams) for "
             "dense runs of 256 KiB or more, also through another process's mapping (ipc), "
             "refit's copy kernels for strided and transposed boxes; kernel = the kernels "
             "alone; engine = the copy engines for every run and 2-D box (transposes stay "
             "kernels)"},
    {.name = "mapped-rounds",
     .type = RF_OPT_ENUM,
     NAMES(rf_mapped_rounds, RF_MAPPED_ROUNDS_COUNT),
     FIELD(mapped_rounds),
     .def = "auto",
     .unit = "",
     .commands = RUN,
     .help = "fanout over a mapping transport (ipc, shm): on = the forward steps in rounds "
             "beside the transfer, so a replica forwards while later buckets arrive; off = the "
             "transfer, then each forward step; auto = on for GPU memory when a forward step "
             "joins two GPUs, off where the processes share one GPU or host memory (there "
             "rounds only add notes and launches); the message transports always run rounds"},
    {.name = "rma",
     .type = RF_OPT_ENUM,
     NAMES(rf_rma_direction, RF_RMA_DIRECTION_COUNT),
     FIELD(rma),
     .def = "put",
     .unit = "",
     .commands = RUN,
     .help = "--transport rma: put = each source writes its pieces into its destinations' "
             "windows (MPI_Put), get = each destination reads them out of its sources' "
             "(MPI_Get); the arenas are windows once per job (setup step register)"},
    {.name = "register",
     .type = RF_OPT_ENUM,
     NAMES(rf_register_unit, RF_REGISTER_UNIT_COUNT),
     FIELD(register_unit),
     .def = "arena",
     .unit = "",
     .commands = RUN | SIM,
     .help = "--transport rma: what becomes an MPI window, once per job: arena = each arena, "
             "allocated as its window; tensor = each tensor apart (windows over refit's "
             "memory), to see what registering tensor by tensor costs (setup step register)"},
    {.name = "dry-run",
     .type = RF_OPT_FLAG,
     FIELD(dry_run),
     .def = "false",
     .unit = "",
     .commands = RUN,
     .help = "list the runs of a sweep and the combinations it skips, and "
             "move nothing; a combination must fit the world's size, except "
             "in a world of one rank (no mpirun), where each gets the ranks it "
             "needs"},
    {.name = "calibrate",
     .type = RF_OPT_FLAG,
     FIELD(calibrate),
     .def = "false",
     .unit = "",
     .commands = RUN,
     .help = "measure the limits (memcpy, a device copy when the weights are "
             "on a GPU, a plain MPI exchange and, for nccl, plain NCCL "
             "send/recv of the same bytes) after every run"},
    {.name = "output-dir",
     .letter = 'o',
     .type = RF_OPT_STRING,
     FIELD(output_dir),
     .def = "report",
     .unit = "",
     .metavar = "DIR",
     .commands = REPORT,
     .help = "directory for report.html, report.md and the CSV tables"},
    {.name = "cluster",
     .type = RF_OPT_STRING,
     FIELD(cluster),
     .def = "",
     .unit = "",
     .metavar = "NAME|FILE",
     .commands = RUN | PLAN | SIM,
     .help = "the cluster to simulate: a JSON file (configs/clusters/README.md) or the name of "
             "one in configs/clusters (h100-hgx, h200-hgx, gb200-nvl72, h20-hgx, h800-hgx, "
             "h200-lent, vm-2core); plan prints the least time any plan could take there "
             "(over mpi, the weights on the GPUs where the cluster has them); refit run takes "
             "only its rates, for --plan auto, on the nodes it runs on"},
    {.name = "calibration",
     .type = RF_OPT_STRING,
     FIELD(calibration),
     .def = "",
     .unit = "",
     .metavar = "RESULTS.h5",
     .commands = SIM,
     .help = "fit the cluster's rates to the measured runs and --calibrate limits of a results "
             "file (weights in the same kind of memory) before predicting"},
    {.name = "published-s",
     .type = RF_OPT_DOUBLE,
     .dmin = 0,
     .dmax = 86400,
     FIELD(published_s),
     .def = "0",
     .unit = "s",
     .metavar = "SECONDS",
     .commands = SIM,
     .help = "another system's published time for the same job, recorded with the simulated "
             "runs of --output so refit report sets the prediction beside it; 0 = none"},
    {.name = "published-label",
     .type = RF_OPT_STRING,
     FIELD(published_label),
     .def = "",
     .unit = "",
     .metavar = "TEXT",
     .commands = SIM,
     .help = "whose time --published-s is and where it was published, for the report"},
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
