/* NVFP4's global scales in the engine (docs/architecture.md, "Quantized formats"): a format
 * whose scales are relative to a per-tensor fp32 global (rf_format.global_scale) needs the
 * maximum |x| of whole tensors, which no trainer rank holds alone.
 *
 * One global per vLLM parameter (rf_layout_global_groups): a 2-D rollout tensor's members
 * (q, k, v of qkv_proj; gate, up of gate_up_proj) share one, a stacked expert tensor has one
 * per expert (w13: the expert's gate and up; w2: its down), as vLLM keeps one weight_scale_2
 * per parameter and ModelOpt's export makes fused members share it. At the start of each
 * iteration every trainer rank takes the maximum of its own shards per group, and one
 * MPI_Allreduce(MAX) over the world (rollout ranks bring 0) gives every rank every group's
 * maximum: each quantizing rank, source or destination, then uses the same global, and each
 * rollout rank writes its tensors' globals into their X.weight_scale_2. The time counts as
 * pack: it is the sources' work before anything is sent. */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "io/io.h"
#include "verify/fp8.h"
#include "verify/verify.h"

rf_status engine_fp8_globals_init(rf_engine *e) {
  const rf_layout *lay = e->plan->layout;
  const rf_format *f = rf_layout_format(lay);
  if (!f || !f->global_scale)
    return RF_OK;
  int n = lay->model->tensor_count;
  e->fp8_global = rf_malloc((size_t)n * sizeof *e->fp8_global + 1, "global scales");
  if (!e->fp8_global)
    return RF_ERR_NOMEM;
  for (int t = 0; t < n; t++)
    e->fp8_global[t] = 1.0f;
  return RF_OK;
}

int64_t engine_fp8_global_index(const rf_layout *lay, int t) {
  const rf_rollout_tensor *w = &lay->rollout_tensors[lay->slots[t].local];
  return w->vllm_ndim == 3 ? lay->slots[t].row / w->vllm_shape[1] : 0;
}

/* The maximum |x| of this trainer rank's shards per group, at each group's leader. A shard is
 * dense in its own order (HF or JAX), and the maximum does not care which. Shards in GPU
 * memory take one launch for all of them (rf_gpu_amax): the same integer maximum of the
 * magnitudes' bit patterns as rf_fp8_block_amax, so the same value. A shard of a quantized
 * checkpoint brings the file's global instead (it lies beside the shard's scales), the same for
 * every member of a group (rf_checkpoint_open_quantized checked), so the maximum over the ranks
 * is that global itself. */
static rf_status shard_maxima(const rf_engine *e, float *amax) {
  const rf_layout *lay = e->plan->layout;
  int n = lay->model->tensor_count, count = 0;
  rf_amax_region *regions = NULL;
  if (e->memory == RF_MEM_DEVICE &&
      !(regions = rf_calloc((size_t)n + 1, sizeof *regions, "the shards' maxima")))
    return RF_ERR_NOMEM;
  for (int t = 0; t < n && e->trainer_rank >= 0; t++) {
    int leader = lay->global_leader[t];
    rf_box box = rf_layout_trainer_box(lay, t, e->trainer_rank);
    if (leader < 0 || rf_box_is_empty(&box))
      continue;
    int64_t numel = rf_box_numel(&box);
    float a;
    if (rf_tensor_quantized(&lay->model->tensors[t])) {
      rf_status st = rf_mem_transfer(
          &a, RF_MEM_HOST, rf_shard_global(e->plan, e->trainer_rank, t, e->data->shards[t]),
          e->memory, sizeof a);
      if (st != RF_OK) {
        free(regions);
        return st;
      }
    } else if (regions) {
      regions[count++] =
          (rf_amax_region){e->data->shards[t], numel, lay->model->tensors[t].dtype, leader};
      continue;
    } else {
      a = rf_fp8_block_amax(e->data->shards[t], lay->model->tensors[t].dtype, numel, 1, numel);
    }
    /* inf and NaN stay: the quantizer refuses the block that holds them, in one line. */
    if (!(a <= amax[leader]))
      amax[leader] = a;
  }
  rf_status st = regions && count ? rf_gpu_amax(regions, count, amax, n) : RF_OK;
  free(regions);
  return st;
}

/* Writes the globals of the tensors this rollout rank holds into their rollout globals
 * tensors, which follow each weight and its scales (layout_fp8.c): gathered per globals tensor
 * on the host first and copied in runs, since a copy per tensor (a MoE has thousands, one per
 * expert and projection) costs a synchronous transfer each, tens of milliseconds in all. */
rf_status engine_fp8_write_globals(const rf_engine *e) {
  const rf_layout *lay = e->plan->layout;
  int n = lay->model->tensor_count, rn = lay->rollout_tensor_count;
  float **host = rf_calloc((size_t)rn + 1, sizeof *host, "the globals to write");
  char **set = rf_calloc((size_t)rn + 1, sizeof *set, "the globals to write");
  rf_status st = host && set ? RF_OK : RF_ERR_NOMEM;
  for (int t = 0; t < n && st == RF_OK; t++) {
    rf_box held = rf_layout_rollout_box(lay, t, e->rollout_rank);
    if (lay->global_leader[t] < 0 || rf_box_is_empty(&held))
      continue;
    int g = lay->slots[t].local + 2;
    int64_t count = lay->rollout_tensors[g].numel, at = engine_fp8_global_index(lay, t);
    if (!host[g]) {
      host[g] = rf_calloc((size_t)count + 1, sizeof **host, "the globals to write");
      set[g] = rf_calloc((size_t)count + 1, 1, "the globals to write");
      if (!host[g] || !set[g]) {
        st = RF_ERR_NOMEM;
        break;
      }
    }
    if (at < 0 || at >= count) {
      st = rf_fail(RF_ERR_INTERNAL, "%s: global %lld of %lld", lay->model->tensors[t].name,
                   (long long)at, (long long)count);
      break;
    }
    host[g][at] = e->fp8_global[t], set[g][at] = 1;
  }
  for (int g = 0; g < rn && st == RF_OK; g++) {
    int64_t count = host[g] ? lay->rollout_tensors[g].numel : 0;
    for (int64_t a = 0; a < count && st == RF_OK;) {
      int64_t b = a;
      while (b < count && set[g][b])
        b++;
      if (b > a)
        st = rf_mem_transfer((float *)e->data->rollout[g] + a, e->memory, host[g] + a, RF_MEM_HOST,
                             (size_t)(b - a) * sizeof(float));
      a = b + 1;
    }
  }
  for (int g = 0; g < rn && host && set; g++)
    free(host[g]), free(set[g]);
  free(host), free(set);
  return st;
}

rf_status engine_fp8_agree_globals(rf_engine *e, double *times, int write) {
  const rf_layout *lay = e->plan->layout;
  const rf_format *f = rf_layout_format(lay);
  if (!e->fp8_global)
    return RF_OK;
  rf_control *ctl = e->transport->ctl;
  if (!ctl)
    return rf_fail(RF_ERR_UNSUPPORTED,
                   "--rollout-dtype %s: its global scales are agreed over MPI, which this "
                   "transport has no control plane for; run it under mpirun",
                   f->name);
  double t0 = rf_now();
  int n = lay->model->tensor_count;
  float *mine = rf_calloc((size_t)n + 1, sizeof *mine, "tensor maxima");
  float *all = rf_calloc((size_t)n + 1, sizeof *all, "tensor maxima");
  rf_status st = mine && all ? RF_OK : RF_ERR_NOMEM;
  if (st == RF_OK)
    st = shard_maxima(e, mine);
  if (st == RF_OK) {
    st = rf_control_allreduce(ctl, ctl->world, mine, all, n, MPI_FLOAT, MPI_MAX,
                              "every trainer rank's maxima for the global scales");
  }
  for (int t = 0; t < n && st == RF_OK; t++) {
    int leader = lay->global_leader[t];
    e->fp8_global[t] = leader < 0 ? 1.0f
                       : rf_tensor_quantized(&lay->model->tensors[t])
                           ? all[leader]
                           : rf_format_global_of(f, all[leader]);
  }
  if (st == RF_OK && e->rollout_rank >= 0 && write)
    st = engine_fp8_write_globals(e);
  /* Only when both are allocated: after a timeout MPI may still write into them. */
  if (st != RF_ERR_TIMEOUT)
    free(mine), free(all);
  times[RF_PHASE_PACK] += rf_now() - t0;
  return st;
}

rf_status engine_fp8_reference_global(const rf_engine *e, rf_checkpoint *ckpt, int t, float *out) {
  const rf_layout *lay = e->plan->layout;
  const rf_model *m = lay->model;
  const rf_format *f = rf_layout_format(lay);
  *out = 1.0f;
  if (!f->global_scale)
    return RF_OK;
  if (rf_tensor_quantized(&m->tensors[t])) { /* the file's own, which the rollout carries */
    if (!ckpt)
      return rf_fail(RF_ERR_INTERNAL, "%s: trainer tensor %s is quantized without a checkpoint",
                     f->name, m->tensors[t].name);
    return rf_checkpoint_read_global(ckpt, t, out);
  }
  int leader = lay->global_leader[t];
  float amax = 0;
  /* A group's members follow its leader within one layer (rf_layout_global_groups). */
  for (int u = leader; u < m->tensor_count && m->tensors[u].layer == m->tensors[leader].layer;
       u++) {
    if (lay->global_leader[u] != leader)
      continue;
    const rf_tensor *x = &m->tensors[u];
    rf_box all = rf_box_whole(x);
    void *buf = rf_malloc((size_t)x->bytes, "a tensor's maximum");
    if (!buf)
      return RF_ERR_NOMEM;
    rf_region r = rf_region_row_major(buf, &all, rf_tensor_esize(x));
    rf_status st = RF_OK;
    if (ckpt)
      st = rf_checkpoint_read(ckpt, u, &all, &r);
    else
      rf_fill_region(&r, &all, x, e->seed, &e->moved, x->dtype);
    float a =
        st == RF_OK ? rf_fp8_block_amax(buf, x->dtype, x->shape[1], x->shape[0], x->shape[1]) : 0;
    free(buf);
    RF_TRY(st);
    if (!(a <= amax))
      amax = a;
  }
  *out = rf_format_global_of(f, amax);
  return RF_OK;
}
