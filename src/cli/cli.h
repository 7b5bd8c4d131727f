/* cli: commands, options and configuration.
 *
 * One option table (cli_options.c) drives getopt_long, the JSON config file (keys are the long
 * option names; '_' and '-' are interchangeable), `--help` for every command and the printed
 * effective configuration. Precedence: defaults < --config FILE < command line. */
#ifndef RF_CLI_H
#define RF_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "core/core.h"
#include "engine/engine.h"
#include "layout/layout.h"
#include "memory/memory.h"
#include "plan/plan.h"
#include "topo/topo.h"
#include "verify/verify.h"

/* The commands. Each option names the commands it applies to with a mask of these bits. */
typedef enum {
  RF_CMD_NONE = 0,
  RF_CMD_RUN = 1 << 0,
  RF_CMD_PLAN = 1 << 1,
  RF_CMD_CHECKPOINT = 1 << 2,
  RF_CMD_VERIFY = 1 << 3,
  RF_CMD_TOPO = 1 << 4,
  RF_CMD_REPORT = 1 << 5,
  RF_CMD_SIMULATE = 1 << 6,
} rf_command;

#define RF_PATH_MAX 1024
#define RF_MAX_INPUTS 8

/* A sweep: the keys of a --config file that hold lists, and the options of `refit run` given a
 * list on the command line (`--plan star,p2p`; layouts, whose text holds commas, separate
 * theirs with ';'). Each axis is an option and the texts of its values, as they would be
 * written on the command line; `refit run` runs the cartesian product of the axes. A list of
 * modes is no axis: it stays one job that runs each mode in turn. */
#define RF_SWEEP_MAX_AXES 8
#define RF_SWEEP_MAX_VALUES 16
#define RF_SWEEP_VALUE_MAX 256
typedef struct {
  char name[32]; /* the option's long name ("bucket-size") */
  int count;     /* at least 2: a list of one value is that value */
  char values[RF_SWEEP_MAX_VALUES][RF_SWEEP_VALUE_MAX];
} rf_sweep_axis;

typedef struct {
  int axis_count;
  rf_sweep_axis axes[RF_SWEEP_MAX_AXES];
} rf_sweep;

/* The effective configuration: every field is the target of exactly one table entry. Enums
 * are parsed here, once; the names are in each enum's X-macro list. */
/* --plan auto: no plan kind of its own, but the value after the real kinds, so that
 * RF_PLAN_KIND_COUNT still counts plans. The driver resolves it to the kind the cost model
 * predicts fastest before planning (src/driver/plan_auto.c). */
#define RF_PLAN_AUTO ((rf_plan_kind)RF_PLAN_KIND_COUNT)

typedef struct {
  rf_command command;
  int help;                       /* --help was given: usage printed, nothing else to do */
  char config[RF_PATH_MAX];       /* --config */
  char model[RF_PATH_MAX];        /* --model NAME|PATH */
  char dtype[16];                 /* --dtype model|bf16|fp16|fp32 */
  char trainer[64];               /* --trainer fsdp=F,tp=T[,ep=E][,pp=S][,dp=D][,cp=C] */
  rf_trainer_style trainer_style; /* --trainer-style tunix|fsdp2|megatron */
  char system[RF_PATH_MAX];       /* --system FILE: NCCL M2N system file; sets the three above */
  rf_trainer_order trainer_order; /* --trainer-order hf|jax */
  char rollout[64];               /* --rollout tp=R[,dp=P][,ep] */
  int64_t rollout_rank;           /* --rollout-rank N: whose manifest plan --json lists */
  rf_rollout_dtype rollout_dtype; /* --rollout-dtype model|fp8 */
  rf_placement placement;         /* --placement disaggregated|colocated */
  rf_plan_kind plan;              /* --plan p2p|star|fanout|hierarchical|auto (RF_PLAN_AUTO) */
  int64_t domain_ranks;           /* --domain-ranks N: hierarchical's domains; 0 = the nodes */
  rf_mode_list mode;              /* --mode unfused|grouped|fused, or a comma-separated list */
  rf_delta_choice_list delta;     /* --delta off|auto|sparse|bitmask, or a list (only off runs) */
  int delta_compare;              /* --delta-compare: encode compares every element, no marks */
  int64_t bucket_size;            /* --bucket-size, bytes; 0 = whole model in one bucket */
  char transport[16];             /* --transport NAME */
  int64_t device;                 /* --device N: the CUDA device; -1 = by node-local rank */
  int64_t seed;                   /* --seed */
  char update[64];                /* --update none|full|sparse:F|adam:LR (verify/versions.h) */
  int64_t version;                /* --version N: the version refit checkpoint writes */
  int64_t warmup;                 /* --warmup */
  int64_t iters;                  /* --iters */
  rf_verify_level verify;         /* --verify full|checksum|none */
  rf_inject inject;               /* --inject none|corrupt|stall|skip-version */
  double timeout;                 /* --timeout, seconds */
  char output[RF_PATH_MAX];       /* --output FILE.h5 ("" = none) */
  double output_wait;             /* --output-wait, seconds another writer may hold --output */
  int json;                       /* --json */
  /* --checkpoint PATH: read (verify) or written (checkpoint); for run a comma-separated list
   * of them, the versions of the trainer's weights (io.h, rf_checkpoint_list_item). */
  char checkpoint[4 * RF_PATH_MAX];
  char format[16];             /* --format auto|safetensors|hdf5 (checkpoint) */
  int force;                   /* --force: checkpoint may overwrite an existing file */
  int64_t shard_size;          /* --shard-size, bytes; 0 = one file (checkpoint) */
  char reference[RF_PATH_MAX]; /* --reference RESULTS.h5 (verify) */
  int64_t run;                 /* --run N (verify); -1 = the latest */

  /* File names given as arguments (verify RESULTS.h5). */
  char inputs[RF_MAX_INPUTS][RF_PATH_MAX];
  int input_count;

  char topology_xml[RF_PATH_MAX]; /* --topology-xml FILE ("" = HWLOC_XMLFILE or this machine) */
  int64_t ranks_per_node;         /* --ranks-per-node (topo); 0 = the whole world on one node */
  rf_bind bind;                   /* --bind auto|none|cores|numa */
  rf_nic nic;                     /* --nic none|auto: export NCCL_IB_HCA with auto */
  rf_mem_request memory;          /* --memory auto|host|device: where the weights live */
  rf_copy_path copy;              /* --copy auto|kernel|engine: what moves device copies */
  rf_mapped_rounds mapped_rounds; /* --mapped-rounds auto|on|off: fanout over ipc, shm */
  rf_rma_direction rma;           /* --rma put|get: which end of an rma transfer copies */
  rf_register_unit register_unit; /* --register arena|tensor: rma's windows */
  int dry_run;                    /* --dry-run: list a sweep's runs and skips, move nothing */
  int calibrate;                  /* --calibrate: measure the limits beside every run */
  char output_dir[RF_PATH_MAX];   /* --output-dir, -o DIR (report) */
  char cluster[RF_PATH_MAX];      /* --cluster NAME|FILE (simulate, plan) */
  char calibration[RF_PATH_MAX];  /* --calibration RESULTS.h5 (simulate) */
  double published_s;             /* --published-s: a published time of the same job; 0 = none */
  char published_label[128];      /* --published-label TEXT: whose time, and where it appeared */

  /* The command line as given, for headers and results files. */
  char command_line[4096];

  /* The lists of the --config file (run only; no table entry). The fields above hold each
   * list's first value; a key given on the command line drops its list. */
  rf_sweep sweep;
} rf_config;

/* Parses `refit <command> [options]`. On --help prints the command's usage to stdout and sets
 * cfg->help. Unknown commands/options/keys, malformed values and values out of range give
 * one line (naming the option, or file:line:column for the config file) and RF_ERR_USAGE. */
rf_status rf_cli_parse(int argc, char **argv, rf_config *cfg);

/* Sets option `name` (its long name; '_' and '-' interchangeable) from its command-line text,
 * as a combination of a sweep does. A bad name or value gives one line naming the option and
 * RF_ERR_USAGE. */
rf_status rf_cli_set_option(rf_config *cfg, const char *name, const char *text);

/* Fills cfg with the defaults of every option. */
void rf_cli_defaults(rf_config *cfg);

/* Prints usage: the commands when cmd is RF_CMD_NONE, else one command's options, each with
 * its default and unit. */
void rf_cli_usage(FILE *out, rf_command cmd);

/* Adds a paragraph to a command's --help, for facts the option table cannot know (the
 * transports compiled into this build). `note` must outlive the parse. */
void rf_cli_set_help_note(rf_command cmd, const char *note);

/* The effective configuration of a command: one "prefix key = value" line per option that
 * applies to cfg->command, and as a JSON object (caller frees). */
void rf_cli_print_config(const rf_config *cfg, FILE *out, const char *prefix);
char *rf_cli_config_json(const rf_config *cfg);

/* Strict value parsers, shared with anything else that reads sizes or integers. They log
 * nothing; on failure they return RF_ERR_USAGE and write the reason into why. */
rf_status rf_parse_size(const char *text, int64_t *out, char *why, size_t why_len);
rf_status rf_parse_int(const char *text, int64_t min, int64_t max, int64_t *out, char *why,
                       size_t why_len);
rf_status rf_parse_double(const char *text, double min, double max, double *out, char *why,
                          size_t why_len);

const char *rf_command_name(rf_command cmd);

#endif
