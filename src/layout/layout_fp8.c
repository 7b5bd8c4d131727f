/* FP8 rollouts (docs/architecture.md, "FP8 rollouts"): which rollout tensors vLLM's block-FP8
 * layers hold as float8_e4m3fn, the weight_scale_inv tensor beside each, and the rule that no
 * rollout shard cuts a 128x128 block of the Hugging Face tensor.
 *
 * The block grid is the HF tensor's, because that is the grid of an FP8 checkpoint and of the
 * reference quantizer: a rollout shard that started inside a block would hold part of a block
 * whose scale depends on elements it does not have. vLLM's own rule (its block-FP8 shape check)
 * is the same for the shards: every tensor-parallel share is a whole number of blocks, and in a
 * fused tensor every member but the last is, so that each member's scales start on a row of
 * their own and the fused scale tensor is the members' scales one after another. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout_internal.h"

#define EDGE RF_FP8_BLOCK_EDGE
/* The largest rollout tp the error line suggests. */
#define MAX_SUGGESTED_TP 64

static int64_t ceil_blocks(int64_t n) { return (n + EDGE - 1) / EDGE; }

const rf_format *rf_layout_format(const rf_layout *lay) { return rf_format_of(lay->rollout.dtype); }

int rf_layout_fp8(const rf_layout *lay, int tensor) {
  return rf_layout_format(lay) && rf_tensor_kind_is_linear(lay->model->tensors[tensor].kind);
}

int rf_layout_rollout_esize(const rf_layout *lay, int tensor) {
  return rf_layout_fp8(lay, tensor) ? rf_dtype_size(RF_DTYPE_FP8)
                                    : rf_tensor_esize(&lay->model->tensors[tensor]);
}

int64_t rf_layout_fp8_blocks(const rf_box *b) {
  if (rf_box_is_empty(b))
    return 0;
  int64_t n = 1;
  for (int d = 0; d < 2; d++)
    n *= (b->hi[d] - 1) / EDGE - b->lo[d] / EDGE + 1;
  return n;
}

int rf_layout_fp8_aligned(const rf_layout *lay, int tensor, const rf_box *b) {
  const rf_tensor *t = &lay->model->tensors[tensor];
  for (int d = 0; d < 2; d++)
    if (b->lo[d] % EDGE != 0 || (b->hi[d] % EDGE != 0 && b->hi[d] != t->shape[d]))
      return 0;
  return 1;
}

/* A member that another member follows in its fused tensor (q and k in qkv_proj, gate in
 * gate_up_proj and in each expert of w13_weight, q_a in fused_qkv_a_proj): its share must end on
 * a block edge, since the next member's blocks start there. */
static int followed(const rf_layout *lay, rf_tensor_kind k) {
  return k == RF_T_Q || k == RF_T_K || k == RF_T_GATE || k == RF_T_SHARED_GATE ||
         k == RF_T_EXPERT_GATE || (k == RF_T_Q_A && lay->model->q_lora_rank);
}

/* Whether a rollout rank of `lay` holds part of a block of tensor `t`. */
static int cut(const rf_layout *lay, const rf_tensor *t) {
  for (int r = 0; r < lay->rollout.tp; r++) {
    rf_box b = rf_layout_rollout_shared(lay, t->id) ? rf_box_whole(t)
                                                    : rf_layout_rollout_box(lay, t->id, r);
    if (rf_box_is_empty(&b))
      continue;
    if (!rf_layout_fp8_aligned(lay, t->id, &b) ||
        (followed(lay, t->kind) && (b.hi[0] - b.lo[0]) % EDGE != 0))
      return 1;
  }
  return 0;
}

/* The first fp8 tensor that `lay` cuts, or -1. Every layer has the same shapes for one kind,
 * so one tensor of each kind stands for all of them. */
static int first_cut(const rf_layout *lay) {
  int seen[RF_T_KIND_COUNT] = {0};
  for (int i = 0; i < lay->model->tensor_count; i++) {
    const rf_tensor *t = &lay->model->tensors[i];
    if (!rf_layout_fp8(lay, i) || seen[t->kind])
      continue;
    seen[t->kind] = 1;
    if (cut(lay, t))
      return i;
  }
  return -1;
}

/* Whether rollout tp `tp` (the same dp and ep) would fit the model with fp8: vLLM's rules, and
 * no block cut. Asked quietly, for the error line's suggestion. */
static int tp_fits(const rf_layout *lay, int tp) {
  const rf_model *m = lay->model;
  rf_layout c = *lay;
  c.rollout.tp = tp;
  c.rollout_ranks = tp * lay->rollout.dp;
  if (c.rollout.ep) {
    if (m->experts % c.rollout_ranks)
      return 0;
    c.expert_group = m->experts / c.rollout_ranks;
  }
  rf_log_push_quiet(1);
  rf_status st = layout_check_rollout(&c);
  rf_log_pop_quiet();
  return st == RF_OK && first_cut(&c) < 0;
}

static rf_status refuse_cut(const rf_layout *lay, int tensor) {
  const rf_tensor *t = &lay->model->tensors[tensor];
  char fits[256] = "";
  int n = 0, last = 0;
  size_t len = 0;
  for (int tp = 1; tp <= MAX_SUGGESTED_TP; tp++) {
    if (!tp_fits(lay, tp))
      continue;
    if (n++ && len < sizeof fits) /* 1 to 64 fit in fits; the test only keeps it in bounds */
      len += (size_t)snprintf(fits + len, sizeof fits - len, "%s%d", n > 2 ? ", " : "", last);
    last = tp;
  }
  if (n == 0)
    return rf_fail(RF_ERR_LAYOUT,
                   "--rollout-dtype fp8: tensor '%s' [%lld, %lld] is cut inside a 128x128 block "
                   "by rollout tp=%d, and so is some tensor at every tp up to %d; use "
                   "--rollout-dtype model",
                   t->name, (long long)t->shape[0], (long long)t->shape[1], lay->rollout.tp,
                   MAX_SUGGESTED_TP);
  /* "1, 2 or 4": the list so far, then the last one. */
  if (len < sizeof fits)
    snprintf(fits + len, sizeof fits - len, "%s%d", n > 1 ? " or " : "", last);
  return rf_fail(RF_ERR_LAYOUT,
                 "--rollout-dtype fp8: tensor '%s' [%lld, %lld] is cut inside a 128x128 block by "
                 "rollout tp=%d; use tp=%s",
                 t->name, (long long)t->shape[0], (long long)t->shape[1], lay->rollout.tp, fits);
}

/* The scale tensor of fp8 rollout tensor `w`, in vLLM's shapes: one fp32 per block, a fused
 * tensor's members' blocks one after another (`rows`: the sum of their block rows), and a
 * stacked expert tensor's [experts, block rows, block columns]. */
static rf_status scale_of(const rf_rollout_tensor *w, int index, int64_t rows,
                          rf_rollout_tensor *s) {
  static const char suffix[] = "_scale_inv";
  size_t len = strlen(w->name);
  memset(s, 0, sizeof *s);
  if (len + sizeof suffix > sizeof s->name)
    return rf_fail(RF_ERR_LAYOUT,
                   "--rollout-dtype fp8: the scale of '%s' has a name longer than "
                   "%d characters; shorten the model's tensor names",
                   w->name, RF_NAME_MAX - 1);
  memcpy(s->name, w->name, len);
  memcpy(s->name + len, suffix, sizeof suffix);
  s->scale_of = index;
  s->dtype = RF_DTYPE_FP32;
  s->ndim = 2;
  if (w->vllm_ndim == 3) {
    s->vllm_ndim = 3;
    s->vllm_shape[0] = w->vllm_shape[0];
    s->vllm_shape[1] = ceil_blocks(w->vllm_shape[1]);
    s->vllm_shape[2] = ceil_blocks(w->vllm_shape[2]);
    s->shape[0] = s->vllm_shape[0] * s->vllm_shape[1];
    s->shape[1] = s->vllm_shape[2];
  } else {
    s->vllm_ndim = 2;
    s->shape[0] = s->vllm_shape[0] = rows;
    s->shape[1] = s->vllm_shape[1] = ceil_blocks(w->shape[1]);
  }
  s->numel = s->shape[0] * s->shape[1];
  s->bytes = s->numel * rf_dtype_size(s->dtype);
  return RF_OK;
}

/* The engine, the plan and the kernels move 128x128 blocks of e4m3 with fp32 scales; the other
 * formats have their reference (format_ref.c) and checkpoints, not yet a rollout. */
static rf_status require_moved(const rf_format *f) {
  if (f->block_rows == EDGE && f->block_cols == EDGE && f->elem == RF_ELEM_E4M3 &&
      f->scale_store == RF_SCALE_STORE_FP32)
    return RF_OK;
  return rf_fail(RF_ERR_UNSUPPORTED,
                 "--rollout-dtype %s: refit moves formats of 128x128 e4m3 blocks with fp32 "
                 "scales into a rollout (fp8, fp8-ue8m0); %s has its reference quantizer and "
                 "checkpoints (refit checkpoint --dtype %s), not yet a rollout",
                 f->name, f->name, f->name);
}

rf_status layout_init_fp8(rf_layout *lay) {
  const rf_model *m = lay->model;
  RF_TRY(require_moved(rf_layout_format(lay)));
  int cut_at = first_cut(lay);
  if (cut_at >= 0)
    return refuse_cut(lay, cut_at);
  int n = lay->rollout_tensor_count;
  int64_t *rows = rf_calloc((size_t)n, sizeof *rows, "fp8 scale rows");
  int *fp8 = rf_calloc((size_t)n, sizeof *fp8, "fp8 rollout tensors");
  int *moved = rf_calloc((size_t)n, sizeof *moved, "fp8 rollout tensors");
  rf_rollout_tensor *old = rf_calloc((size_t)n, sizeof *old, "fp8 rollout tensors");
  if (!rows || !fp8 || !moved || !old) {
    free(rows), free(fp8), free(moved), free(old);
    return RF_ERR_NOMEM;
  }
  /* Block rows per fused tensor: each member's share on rank 0 (every rank's is alike), in
   * blocks of its own, as vLLM's loader places each member's scales. */
  for (int i = 0; i < m->tensor_count; i++) {
    if (!rf_layout_fp8(lay, i))
      continue;
    int local = lay->slots[i].local;
    fp8[local] = 1;
    if (m->tensors[i].expert < 0) {
      rf_box b = rf_layout_rollout_box(lay, i, 0);
      rows[local] += ceil_blocks(b.hi[0] - b.lo[0]);
    }
  }
  memcpy(old, lay->rollout_tensors, (size_t)n * sizeof *old);
  int at = 0;
  rf_status st = RF_OK;
  for (int i = 0; i < n && st == RF_OK; i++) {
    rf_rollout_tensor *w = &lay->rollout_tensors[at];
    *w = old[i];
    moved[i] = at++;
    if (!fp8[i])
      continue;
    w->dtype = RF_DTYPE_FP8;
    w->bytes = w->numel * rf_dtype_size(w->dtype);
    st = scale_of(w, moved[i], rows[i], &lay->rollout_tensors[at++]);
  }
  lay->rollout_tensor_count = at;
  for (int i = 0; i < m->tensor_count && st == RF_OK; i++)
    lay->slots[i].local = moved[lay->slots[i].local];
  free(rows), free(fp8), free(moved), free(old);
  return st;
}
