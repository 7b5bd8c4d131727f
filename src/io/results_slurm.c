/* What a job under Slurm records about itself in each run group: its job id, its array task id
 * and the scheduler's own description of the job (`scontrol show job`), so that a results file
 * leads back to the allocation, nodes and limits that produced it. results/README.md, section
 * "Slurm", is the schema. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "results_internal.h"

/* scontrol's description of one job is a few KiB; anything longer is cut here. */
#define RF_SLURM_JOB_MAX (64 * 1024)

/* Slurm job and array task ids are decimal numbers. Anything else is not passed to the shell. */
static int is_number(const char *s) {
  if (!s || !*s || strlen(s) > 20)
    return 0;
  for (; *s; s++)
    if (!isdigit((unsigned char)*s))
      return 0;
  return 1;
}

/* The output of `scontrol show job ID`, bounded by `timeout 10` so that an unreachable
 * slurmctld cannot hold up the run. Returns a malloc'ed string, "" when scontrol is missing,
 * fails or times out: the description is a courtesy, never a reason to fail the run. */
static char *scontrol_show_job(const char *job_id) {
  char *out = rf_calloc(RF_SLURM_JOB_MAX + 1, 1, "the Slurm job description");
  char cmd[96];
  snprintf(cmd, sizeof cmd, "timeout 10 scontrol show job %s 2>/dev/null", job_id);
  FILE *p = popen(cmd, "r");
  if (!p) {
    RF_DEBUG("cannot run scontrol for Slurm job %s; slurm_job is empty", job_id);
    return out;
  }
  size_t len = 0, n;
  while (len < RF_SLURM_JOB_MAX && (n = fread(out + len, 1, RF_SLURM_JOB_MAX - len, p)) > 0)
    len += n;
  /* Drain what does not fit, so that scontrol is not killed by SIGPIPE mid-write. */
  char sink[4096];
  while (fread(sink, 1, sizeof sink, p) > 0)
    ;
  int status = pclose(p);
  if (status != 0) {
    RF_DEBUG("scontrol show job %s exited with status %d; slurm_job is empty", job_id, status);
    len = 0;
  }
  out[len] = '\0';
  return out;
}

rf_status rf_results_slurm_attrs(hid_t g) {
  const char *job_id = getenv("SLURM_JOB_ID");
  if (!job_id || !*job_id)
    return RF_OK;
  const char *task_id = getenv("SLURM_ARRAY_TASK_ID");
  char *job = is_number(job_id) ? scontrol_show_job(job_id) : NULL;
  rf_status st = rf_results_attr_str(g, ".", "slurm_job_id", job_id);
  if (st == RF_OK && task_id && *task_id)
    st = rf_results_attr_str(g, ".", "slurm_array_task_id", task_id);
  if (st == RF_OK)
    st = rf_results_attr_str(g, ".", "slurm_job", job ? job : "");
  free(job);
  return st;
}
