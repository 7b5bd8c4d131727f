/* driver: the commands. It turns a parsed configuration into a job (model, layouts, plan),
 * runs the command, and maps the outcome to the process exit code. The driver and main() are
 * the only places allowed to end the process or abort the MPI job. */
#ifndef RF_DRIVER_H
#define RF_DRIVER_H

#include "cli/cli.h"
#include "plan/plan.h"

/* Everything a command needs to know about the transfer it describes. */
typedef struct {
  rf_model model;
  rf_trainer_layout trainer;
  rf_rollout_layout rollout;
  rf_placement placement;
  rf_layout layout;
  rf_plan plan;
  int have_model, have_layout, have_plan;
  /* --checkpoint is quantized in the rollout's format (block-FP8, MXFP8, MXFP4, NVFP4): the
   * trainer's linear weights are its bytes and scales; NULL otherwise. */
  const rf_format *quantized_checkpoint;
  int *domain_of;     /* --domain-ranks N: [world rank] -> rank / N, the hierarchical plan's
                       * domains in place of the nodes; NULL without it */
  char plan_why[512]; /* --plan auto: the one line that says which kind and why; else "" */
} rf_job;

/* Loads the model (with any --dtype override), parses and checks the layouts and builds the
 * plan. With `world_size` > 0 the layouts must need exactly that many ranks, checked before
 * anything is planned. Errors are one line each; the caller frees the job whatever
 * happens. */
rf_status rf_job_build(const rf_config *cfg, int world_size, rf_job *job);
/* The same up to the plan: model and layouts, for a command that plans with options of its
 * own (refit simulate, with the described cluster's distances). */
rf_status rf_job_build_layout(const rf_config *cfg, int world_size, rf_job *job);
/* The model a recorded run moved, for rebuilding or checking it: its name, unless the run was
 * given a model file by path (its options, config_json, keep what --model said; NULL: none),
 * that file is a .json file of that name (rf_model_stem) and it is still there. A results file
 * is outside input: only a file its own run could have named is opened. */
void rf_job_model_of_run(const char *name, const char *config_json, char *out, size_t len);
/* Whether a recorded `model` attribute is a model's name, as refit run records it, rather than
 * a path, which refit would then open: callers refuse it in one line naming file and run. */
int rf_job_model_name_ok(const char *name);
/* The model of --model with the --dtype override; on error nothing is left to free. */
rf_status rf_job_load_model(const rf_config *cfg, rf_model *model);
/* Builds the job's plan again with `options` (the topology's distances), keeping its kind and
 * the domains of --domain-ranks.
 * `refit run` and `refit topo` plan with the machine; `refit plan` does not. */
rf_status rf_job_replan(rf_job *job, const rf_plan_options *options);
void rf_job_free(rf_job *job);

/* `refit plan`: prints the plan's totals, as text or one JSON object. No MPI. */
rf_status rf_cmd_plan(const rf_config *cfg);
/* The JSON object `refit plan --json` prints for a built job, with the rollout manifest of
 * `manifest_rank` (without --cluster's bound); the caller frees it (NULL: out of memory). */
char *rf_job_plan_json(const rf_job *job, int manifest_rank);

/* Whether `refit run` can move the rollout dtype the configuration asks for: RF_OK, or
 * RF_ERR_USAGE with one line. fp8 rollouts move in host memory over mpi and shm, in GPU memory
 * over ipc and nccl (engine_fp8.c); GPU memory over mpi is refused before MPI is up or any
 * file is made, and a sweep skips such combinations with this line as the reason. */
rf_status rf_run_check_rollout_dtype(const rf_config *cfg);

/* `refit run`: the MPI-launched transfer. Initialises and finalises MPI itself. */
rf_status rf_cmd_run(const rf_config *cfg, int *argc, char ***argv);

/* `refit checkpoint`: writes a synthetic checkpoint of --model to --checkpoint. */
rf_status rf_cmd_checkpoint(const rf_config *cfg);

/* `refit verify RESULTS.h5`: compares checksums with --reference or --checkpoint. */
rf_status rf_cmd_verify(const rf_config *cfg);

/* `refit topo`: where every rank would run (GPU, cores, NUMA node, NIC) and the distance of
 * every planned trainer→rollout link, from --topology-xml or this machine. No MPI. */
rf_status rf_cmd_topo(const rf_config *cfg);

/* `refit report FILE.h5... -o DIR`: HTML, Markdown and CSV report of results files. */
rf_status rf_cmd_report(const rf_config *cfg);

/* `refit simulate`: the predicted time, bottleneck and memory of a transfer on the cluster of
 * --cluster, optionally calibrated from a results file; text, JSON, and simulated runs appended
 * to --output. No MPI, no GPU. */
rf_status rf_cmd_simulate(const rf_config *cfg);

/* The whole program: parses argv, runs the command and returns the exit code. */
int rf_driver_main(int argc, char **argv);

#endif
