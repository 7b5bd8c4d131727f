/* This rank's tensors as the library reports them, and the registration of the caller's memory:
 * rf_buffers holds one pointer per tensor (shards[t], rollout[t]) into its arenas, which the
 * engine reads at every transfer; registering points one of them at the caller's memory. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

static int role_slot(refit_role role) { return role == REFIT_ROLE_TRAINER ? 0 : 1; }
static const char *role_name(refit_role role) {
  return role == REFIT_ROLE_TRAINER ? "trainer" : "rollout";
}

/* A trainer shard as stored: its box's rows and columns (of bytes, for a quantized weight),
 * transposed where the layout stores it so. */
static void trainer_info(const rf_layout *lay, int trainer_rank, int t, refit_tensor_info *out) {
  const rf_tensor *tensor = &lay->model->tensors[t];
  rf_box box = rf_layout_trainer_box(lay, t, trainer_rank);
  rf_box bytes = rf_layout_trainer_bytes(lay, t, &box);
  int64_t rows = bytes.hi[0] - bytes.lo[0], cols = bytes.hi[1] - bytes.lo[1];
  int transposed = rf_layout_trainer_transposed(lay, t);
  out->name = tensor->name;
  out->dtype = rf_dtype_name(tensor->dtype);
  out->ndim = tensor->ndim;
  out->shape[0] = transposed ? cols : rows;
  out->shape[1] = transposed ? rows : cols;
  out->bytes = rows * cols * rf_tensor_esize(tensor);
}

static void rollout_info(const rf_rollout_tensor *rt, refit_tensor_info *out) {
  out->name = rt->name;
  out->dtype = rf_dtype_name(rt->dtype);
  out->ndim = rt->vllm_ndim;
  for (int d = 0; d < rt->vllm_ndim && d < (int)RF_ARRAY_LEN(rt->vllm_shape); d++)
    out->shape[d] = rt->vllm_shape[d];
  out->bytes = rt->bytes;
}

static rf_status alloc_tensors(rf_api_tensors *ts, int n) {
  ts->info = rf_calloc((size_t)n + 1, sizeof *ts->info, "tensor descriptions");
  ts->index = rf_calloc((size_t)n + 1, sizeof *ts->index, "tensor descriptions");
  ts->registered = rf_calloc((size_t)n + 1, 1, "tensor descriptions");
  return ts->info && ts->index && ts->registered ? RF_OK : RF_ERR_NOMEM;
}

rf_status rf_api_tensors_build(refit_job *job) {
  const rf_layout *lay = &job->rs.job.layout;
  int tr = job->ctl.trainer_rank, rr = job->ctl.rollout_rank;
  rf_api_tensors *trainer = &job->tensors[0], *rollout = &job->tensors[1];
  int n = 0;
  for (int t = 0; tr >= 0 && t < lay->model->tensor_count; t++) {
    rf_box box = rf_layout_trainer_box(lay, t, tr);
    n += !rf_box_is_empty(&box);
  }
  RF_TRY(alloc_tensors(trainer, n));
  for (int t = 0; tr >= 0 && t < lay->model->tensor_count; t++) {
    rf_box box = rf_layout_trainer_box(lay, t, tr);
    if (rf_box_is_empty(&box))
      continue;
    trainer_info(lay, tr, t, &trainer->info[trainer->count]);
    trainer->index[trainer->count++] = t;
  }
  RF_TRY(alloc_tensors(rollout, rr >= 0 ? lay->rollout_tensor_count : 0));
  for (int i = 0; rr >= 0 && i < lay->rollout_tensor_count; i++) {
    rollout_info(&lay->rollout_tensors[i], &rollout->info[rollout->count]);
    rollout->index[rollout->count++] = i;
  }
  return RF_OK;
}

void rf_api_tensors_free(refit_job *job) {
  for (int s = 0; s < 2; s++) {
    free(job->tensors[s].info);
    free(job->tensors[s].index);
    free(job->tensors[s].registered);
  }
}

int refit_tensor_count(const refit_job *job, refit_role role) {
  if (!job || (role != REFIT_ROLE_TRAINER && role != REFIT_ROLE_ROLLOUT))
    return 0;
  return job->tensors[role_slot(role)].count;
}

/* The tensor of `role` named `name` on this rank, or -1. */
static int find(const refit_job *job, refit_role role, const char *name) {
  const rf_api_tensors *ts = &job->tensors[role_slot(role)];
  for (int i = 0; name && i < ts->count; i++)
    if (strcmp(ts->info[i].name, name) == 0)
      return i;
  return -1;
}

static rf_status check_role(refit_role role, const char *call) {
  if (role != REFIT_ROLE_TRAINER && role != REFIT_ROLE_ROLLOUT)
    return rf_fail(RF_ERR_USAGE,
                   "%s: role %d is neither REFIT_ROLE_TRAINER (1) nor "
                   "REFIT_ROLE_ROLLOUT (2)",
                   call, (int)role);
  return RF_OK;
}

refit_status refit_tensor_get(const refit_job *job, refit_role role, int index,
                              refit_tensor_info *out) {
  if (!job || !out)
    return REFIT_ERR_USAGE;
  rf_api_capture cap;
  rf_api_capture_begin(&cap, ((refit_job *)job)->error);
  rf_status st = check_role(role, "refit_tensor_get");
  int count = refit_tensor_count(job, role);
  if (st == RF_OK && (index < 0 || index >= count))
    st =
        rf_fail(RF_ERR_USAGE, "refit_tensor_get: index %d: this rank holds %d %s tensors (0 to %d)",
                index, count, role_name(role), count - 1);
  if (st == RF_OK)
    *out = job->tensors[role_slot(role)].info[index];
  return rf_api_capture_end(&cap, st);
}

/* The engine's pointer for tensor i of `role`. */
static void **engine_slot(refit_job *job, refit_role role, int i) {
  const rf_api_tensors *ts = &job->tensors[role_slot(role)];
  return role == REFIT_ROLE_TRAINER ? &job->data.shards[ts->index[i]]
                                    : &job->data.rollout[ts->index[i]];
}

static rf_status unknown(const refit_job *job, refit_role role, const char *call,
                         const char *name) {
  return rf_fail(RF_ERR_USAGE,
                 "%s: this rank holds no %s tensor named %s (%d %s tensors; "
                 "refit_tensor_get lists them)",
                 call, role_name(role), name ? name : "(null)", refit_tensor_count(job, role),
                 role_name(role));
}

refit_status refit_tensor_buffer(refit_job *job, refit_role role, const char *name, void **data,
                                 int64_t *bytes) {
  if (!job || !data)
    return REFIT_ERR_USAGE;
  rf_api_capture cap;
  rf_api_capture_begin(&cap, job->error);
  rf_status st = check_role(role, "refit_tensor_buffer");
  int i = st == RF_OK ? find(job, role, name) : -1;
  if (st == RF_OK && i < 0)
    st = unknown(job, role, "refit_tensor_buffer", name);
  if (st == RF_OK) {
    *data = *engine_slot(job, role, i);
    if (bytes)
      *bytes = job->tensors[role_slot(role)].info[i].bytes;
  }
  return rf_api_capture_end(&cap, st);
}

static void format_shape(int ndim, const int64_t *shape, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < ndim && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, d ? ", " : "", shape[d]);
  if (used < len)
    snprintf(buf + used, len - used, "]");
}

/* One tensor against what this rank holds under its name; *at gets its index. */
static rf_status check_one(refit_job *job, const refit_tensor *t, int *at) {
  RF_TRY(check_role(t->role, "refit_register"));
  int i = find(job, t->role, t->name);
  if (i < 0)
    return unknown(job, t->role, "refit_register", t->name);
  const refit_tensor_info *want = &job->tensors[role_slot(t->role)].info[i];
  const char *what = role_name(t->role);
  rf_dtype dt;
  if (!t->dtype ||
      (strcmp(t->dtype, want->dtype) != 0 &&
       (rf_dtype_parse(t->dtype, &dt) != RF_OK || strcmp(rf_dtype_name(dt), want->dtype) != 0)))
    return rf_fail(RF_ERR_USAGE, "refit_register: %s tensor %s is %s, not %s", what, t->name,
                   want->dtype, t->dtype ? t->dtype : "(null)");
  char given[128], held[128];
  int ndim_ok = t->ndim == want->ndim && t->shape;
  for (int d = 0; ndim_ok && d < t->ndim; d++)
    ndim_ok = t->shape[d] == want->shape[d];
  format_shape(want->ndim, want->shape, held, sizeof held);
  if (!ndim_ok) {
    format_shape(t->shape && t->ndim > 0 && t->ndim <= REFIT_MAX_DIMS ? t->ndim : 0, t->shape,
                 given, sizeof given);
    return rf_fail(RF_ERR_USAGE, "refit_register: %s tensor %s has shape %s, not %s", what, t->name,
                   held, given);
  }
  /* Row-major strides only: the engine's regions are row-major runs of the held box. */
  int64_t expect = 1;
  for (int d = t->ndim - 1; t->strides && d >= 0; d--) {
    if (t->shape[d] > 1 && t->strides[d] != expect) {
      format_shape(t->ndim, t->strides, given, sizeof given);
      return rf_fail(RF_ERR_USAGE,
                     "refit_register: %s tensor %s has strides %s (elements), "
                     "which are not contiguous; pass a contiguous copy "
                     "(numpy.ascontiguousarray, torch's .contiguous())",
                     what, t->name, given);
    }
    expect *= t->shape[d];
  }
  if (t->bytes != 0 && t->bytes != want->bytes)
    return rf_fail(RF_ERR_USAGE,
                   "refit_register: %s tensor %s needs %" PRId64 " bytes, not %" PRId64, what,
                   t->name, want->bytes, t->bytes);
  if (!t->data && want->bytes > 0)
    return rf_fail(RF_ERR_USAGE, "refit_register: %s tensor %s has no memory (data is NULL)", what,
                   t->name);
  refit_memory kind = refit_job_memory(job);
  if (t->memory != kind)
    return rf_fail(RF_ERR_USAGE,
                   "refit_register: %s tensor %s is in %s memory, but the job's "
                   "weights are in %s memory (option memory)",
                   what, t->name, t->memory == REFIT_MEMORY_DEVICE ? "device" : "host",
                   kind == REFIT_MEMORY_DEVICE ? "device" : "host");
  *at = i;
  return RF_OK;
}

static rf_status register_all(refit_job *job, const refit_tensor *tensors, int count) {
  if (count < 0)
    return rf_fail(RF_ERR_USAGE, "refit_register: count is %d; give 0 or more tensors", count);
  if (count > 0 && !tensors)
    return rf_fail(RF_ERR_USAGE, "refit_register: %d tensors, but tensors is NULL", count);
  /* Its peers reach the library's buffers themselves (mapped, or through MPI windows), so a
   * pointer moved to the caller's memory would not be what they read or write, unless the
   * transport maps the caller's memory too (ipc), offered at the next transfer. */
  if (job->tp.ops->peer_buffer && !job->tp.ops->maps_caller_memory)
    return rf_fail(RF_ERR_USAGE,
                   "refit_register: the %s transport %s; write into the memory "
                   "refit_tensor_buffer gives instead",
                   job->tp.ops->name,
                   job->tp.ops->mapping ? "maps the library's own buffers between processes"
                                        : "exposes the library's own buffers as MPI windows");
  int *at = rf_calloc((size_t)count + 1, sizeof *at, "registration");
  if (!at)
    return RF_ERR_NOMEM;
  rf_status st = RF_OK;
  /* Every tensor is checked before any pointer moves: the set registers whole or not at all. */
  for (int k = 0; k < count && st == RF_OK; k++) {
    st = check_one(job, &tensors[k], &at[k]);
    for (int j = 0; j < k && st == RF_OK; j++)
      if (tensors[j].role == tensors[k].role && at[j] == at[k])
        st = rf_fail(RF_ERR_USAGE, "refit_register: %s tensor %s is given twice",
                     role_name(tensors[k].role), tensors[k].name);
  }
  for (int k = 0; k < count && st == RF_OK; k++) {
    *engine_slot(job, tensors[k].role, at[k]) = tensors[k].data;
    job->tensors[role_slot(tensors[k].role)].registered[at[k]] = 1;
    job->unshared = 1;
    job->separate = 1; /* this rank's own copies meet them (over ipc, its peers' too) */
  }
  free(at);
  return st;
}

rf_status rf_api_tensors_share(refit_job *job) {
  rf_control *ctl = &job->ctl;
  if (!job->tp.ops->maps_caller_memory)
    return RF_OK;
  int mine[2] = {job->unshared, job->separate}, any[2] = {0, 0};
  RF_TRY(rf_control_allreduce(ctl, ctl->world, mine, any, 2, MPI_INT, MPI_MAX,
                              "whether any rank registered memory"));
  job->separate = any[1]; /* a peer's registered tensors are copied here too */
  if (!any[0])
    return RF_OK;
  /* The flags in the engine's numbering: model tensors (trainer), rollout tensors. */
  const rf_layout *lay = &job->rs.job.layout;
  char *shards = rf_calloc((size_t)lay->model->tensor_count + 1, 1, "registration");
  char *rollout = rf_calloc((size_t)lay->rollout_tensor_count + 1, 1, "registration");
  rf_status st = shards && rollout ? RF_OK : RF_ERR_NOMEM;
  for (int s = 0; s < 2 && st == RF_OK; s++)
    for (int i = 0; i < job->tensors[s].count; i++)
      if (job->tensors[s].registered[i])
        (s == 0 ? shards : rollout)[job->tensors[s].index[i]] = 1;
  /* Every rank offers, even one that ran out of memory (offering nothing), and all agree. */
  rf_status offered = rf_engine_expose_caller(&job->engine, st == RF_OK ? shards : NULL,
                                              st == RF_OK ? rollout : NULL);
  free(shards);
  free(rollout);
  if (offered == RF_OK)
    job->unshared = 0;
  return rf_control_agree(ctl, rf_status_worse(st, offered));
}

refit_status refit_register(refit_job *job, const refit_tensor *tensors, int count) {
  if (!job)
    return REFIT_ERR_USAGE;
  rf_api_capture cap;
  rf_api_capture_begin(&cap, job->error);
  return rf_api_capture_end(&cap, register_all(job, tensors, count));
}
