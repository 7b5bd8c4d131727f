/* Quantized rollouts (docs/architecture.md, "FP8 rollouts", "Quantized formats"): which
 * rollout tensors vLLM's block-FP8 (and MXFP8, MXFP4, NVFP4) layers hold quantized
 * (float8_e4m3fn, or e2m1 packed two a byte as u8 [rows, cols / 2]), the scale tensor beside
 * each (weight_scale_inv, or weight_scale: row-major, or nvfp4's 128x4 tiles padded as vLLM
 * swizzles them), nvfp4's weight_scale_2 after it, and the rule that no rollout shard cuts a
 * block of the format (128x128, 1x32 or 1x16) of the Hugging Face tensor.
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

/* The largest rollout tp the error line suggests. */
#define MAX_SUGGESTED_TP 64

/* The block edge of the layout's format along dimension d (rows 0, columns 1). */
static int64_t edge(const rf_layout *lay, int d) {
  const rf_format *f = rf_layout_format(lay);
  return d == 0 ? f->block_rows : f->block_cols;
}

static int64_t ceil_blocks(const rf_layout *lay, int d, int64_t n) {
  return (n + edge(lay, d) - 1) / edge(lay, d);
}

const rf_format *rf_layout_format(const rf_layout *lay) { return rf_format_of(lay->rollout.dtype); }

int rf_layout_fp8(const rf_layout *lay, int tensor) {
  return rf_layout_format(lay) && rf_model_quantizes(lay->model, &lay->model->tensors[tensor]);
}

int rf_layout_rollout_esize(const rf_layout *lay, int tensor) {
  return rf_layout_fp8(lay, tensor) ? 1 : rf_tensor_esize(&lay->model->tensors[tensor]);
}

int64_t rf_layout_fp8_blocks(const rf_box *b) {
  return rf_format_box_blocks(rf_format_of(RF_FORMAT_FP8), b);
}

int64_t rf_format_box_blocks(const rf_format *f, const rf_box *b) {
  if (rf_box_is_empty(b))
    return 0;
  rf_box blocks = rf_format_blocks_of(f, b);
  return rf_box_numel(&blocks);
}

int rf_layout_fp8_aligned(const rf_layout *lay, int tensor, const rf_box *b) {
  const rf_tensor *t = &lay->model->tensors[tensor];
  for (int d = 0; d < 2; d++)
    if (b->lo[d] % edge(lay, d) != 0 || (b->hi[d] % edge(lay, d) != 0 && b->hi[d] != t->shape[d]))
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
        (followed(lay, t->kind) && (b.hi[0] - b.lo[0]) % edge(lay, 0) != 0))
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
  const rf_format *f = rf_layout_format(lay);
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
                   "--rollout-dtype %s: tensor '%s' [%lld, %lld] is cut inside a %dx%d block "
                   "by rollout tp=%d, and so is some tensor at every tp up to %d; use "
                   "--rollout-dtype model",
                   f->name, t->name, (long long)t->shape[0], (long long)t->shape[1], f->block_rows,
                   f->block_cols, lay->rollout.tp, MAX_SUGGESTED_TP);
  /* "1, 2 or 4": the list so far, then the last one. */
  if (len < sizeof fits)
    snprintf(fits + len, sizeof fits - len, "%s%d", n > 1 ? " or " : "", last);
  return rf_fail(RF_ERR_LAYOUT,
                 "--rollout-dtype %s: tensor '%s' [%lld, %lld] is cut inside a %dx%d block by "
                 "rollout tp=%d; use tp=%s",
                 f->name, t->name, (long long)t->shape[0], (long long)t->shape[1], f->block_rows,
                 f->block_cols, lay->rollout.tp, fits);
}

/* A tensor named after weight `w` with `suffix`, describing `index`'s weight. */
static rf_status named_after(const rf_layout *lay, const rf_rollout_tensor *w, int index,
                             const char *suffix, rf_rollout_tensor *s) {
  size_t len = strlen(w->name), slen = strlen(suffix);
  memset(s, 0, sizeof *s);
  if (len + slen + 1 > sizeof s->name)
    return rf_fail(RF_ERR_LAYOUT,
                   "--rollout-dtype %s: the scale of '%s' has a name longer than "
                   "%d characters; shorten the model's tensor names",
                   rf_layout_format(lay)->name, w->name, RF_NAME_MAX - 1);
  memcpy(s->name, w->name, len);
  memcpy(s->name + len, suffix, slen + 1);
  s->scale_of = index;
  return RF_OK;
}

/* The scale tensor of quantized rollout tensor `w` (`cols` its columns in elements), in vLLM's
 * shapes: one scale per block of the format, in its stored dtype (fp32, or a byte), a fused
 * tensor's members' blocks one after another (`rows`: the sum of their block rows), and a
 * stacked expert tensor's [experts, block rows, block columns]. Scales in 128x4 tiles (nvfp4)
 * take the grid padded to 128 rows and 4 columns, per expert for a stacked tensor, as vLLM's
 * swizzle_blockscale leaves them. Its name is the weight's with the format's suffix:
 * `X.weight_scale_inv` (fp8) or `X.weight_scale`, as vLLM names them. */
static rf_status scale_of(const rf_layout *lay, const rf_rollout_tensor *w, int index, int64_t rows,
                          int64_t cols, rf_rollout_tensor *s) {
  const rf_format *f = rf_layout_format(lay);
  RF_TRY(named_after(lay, w, index, rf_format_rollout_scale_suffix(f), s));
  int tiles = f->scale_layout == RF_SCALE_SWIZZLED_128X4;
  int64_t pad_rows = tiles ? 128 : 1, pad_cols = tiles ? 4 : 1;
  int64_t grid_cols = (ceil_blocks(lay, 1, cols) + pad_cols - 1) / pad_cols * pad_cols;
  s->dtype = rf_format_scale_dtype(f);
  s->ndim = 2;
  if (w->vllm_ndim == 3) {
    s->vllm_ndim = 3;
    s->vllm_shape[0] = w->vllm_shape[0];
    s->vllm_shape[1] = (ceil_blocks(lay, 0, w->vllm_shape[1]) + pad_rows - 1) / pad_rows * pad_rows;
    s->vllm_shape[2] = grid_cols;
    s->shape[0] = s->vllm_shape[0] * s->vllm_shape[1];
    s->shape[1] = s->vllm_shape[2];
  } else {
    s->vllm_ndim = 2;
    s->shape[0] = s->vllm_shape[0] = (rows + pad_rows - 1) / pad_rows * pad_rows;
    s->shape[1] = s->vllm_shape[1] = grid_cols;
  }
  s->numel = s->shape[0] * s->shape[1];
  s->bytes = s->numel * rf_dtype_size(s->dtype);
  return RF_OK;
}

/* The global scale of quantized rollout tensor `w` (nvfp4's `X.weight_scale_2`): fp32, one
 * for a 2-D tensor, whose members share it, and one per local expert of a stacked one. */
static rf_status global_of(const rf_layout *lay, const rf_rollout_tensor *w, int index,
                           rf_rollout_tensor *g) {
  RF_TRY(named_after(lay, w, index, rf_layout_format(lay)->rollout_global_suffix, g));
  g->dtype = RF_DTYPE_FP32;
  g->ndim = g->vllm_ndim = 1;
  g->shape[0] = g->vllm_shape[0] = w->vllm_ndim == 3 ? w->vllm_shape[0] : 1;
  g->shape[1] = 1;
  g->numel = g->shape[0];
  g->bytes = g->numel * rf_dtype_size(g->dtype);
  return RF_OK;
}

/* A quantized rollout weight holds its elements as fp8 bytes, or packed two a byte as a u8
 * tensor of half the columns, as vLLM's NVFP4 and MXFP4 layers create theirs. */
static void pack_weight(const rf_format *f, rf_rollout_tensor *w) {
  w->dtype = rf_format_weight_dtype(f);
  w->shape[1] = rf_format_row_bytes(f, w->shape[1]);
  w->vllm_shape[w->vllm_ndim - 1] = rf_format_row_bytes(f, w->vllm_shape[w->vllm_ndim - 1]);
  w->numel = w->shape[0] * w->shape[1];
  w->bytes = w->numel * rf_dtype_size(w->dtype);
}

/* The engine and the plan move every format of the table in host memory (rf_format_moved);
 * this stays for a format added to the table before the engine takes it. */
static rf_status require_moved(const rf_format *f) {
  if (rf_format_moved(f))
    return RF_OK;
  char moved[128];
  rf_format_moved_names(moved, sizeof moved);
  return rf_fail(RF_ERR_UNSUPPORTED,
                 "--rollout-dtype %s: refit moves %s into a rollout; %s has its reference "
                 "quantizer and checkpoints (refit checkpoint --dtype %s), not yet a rollout",
                 f->name, moved, f->name, f->name);
}

rf_box rf_layout_rollout_bytes(const rf_layout *lay, int tensor, const rf_box *box) {
  return rf_layout_fp8(lay, tensor) ? rf_format_byte_box(rf_layout_format(lay), box) : *box;
}

rf_box rf_layout_trainer_bytes(const rf_layout *lay, int tensor, const rf_box *box) {
  return rf_tensor_quantized(&lay->model->tensors[tensor])
             ? rf_format_byte_box(rf_layout_format(lay), box)
             : *box;
}

rf_status layout_init_fp8(rf_layout *lay) {
  const rf_model *m = lay->model;
  const rf_format *f = rf_layout_format(lay);
  RF_TRY(require_moved(f));
  int cut_at = first_cut(lay);
  if (cut_at >= 0)
    return refuse_cut(lay, cut_at);
  if (f->global_scale) {
    lay->global_leader =
        rf_calloc((size_t)m->tensor_count + 1, sizeof *lay->global_leader, "global scale groups");
    if (!lay->global_leader)
      return RF_ERR_NOMEM;
    RF_TRY(rf_layout_global_groups(m, lay->global_leader));
  }
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
      rows[local] += ceil_blocks(lay, 0, b.hi[0] - b.lo[0]);
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
    int64_t cols = w->shape[1]; /* in elements, before packing */
    pack_weight(f, w);
    st = scale_of(lay, w, moved[i], rows[i], cols, &lay->rollout_tensors[at++]);
    if (st == RF_OK && f->global_scale)
      st = global_of(lay, w, moved[i], &lay->rollout_tensors[at++]);
  }
  lay->rollout_tensor_count = at;
  for (int i = 0; i < m->tensor_count && st == RF_OK; i++)
    lay->slots[i].local = moved[lay->slots[i].local];
  free(rows), free(fp8), free(moved), free(old);
  return st;
}
