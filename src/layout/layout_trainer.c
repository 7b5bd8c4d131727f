/* The trainer's side of the layout: how each style splits a tensor over the fsdp x tp mesh,
 * which expert-parallel rank holds which experts and which pipeline stage which layers, and
 * the checks that a mesh divides every tensor it splits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout_internal.h"

static rf_dim_split split1(rf_mesh_axis a, int64_t g) {
  rf_dim_split s = {{a, RF_AXIS_NONE}, {g, 1}};
  return s;
}

static rf_dim_split split2(rf_mesh_axis a, int64_t ga, rf_mesh_axis b, int64_t gb) {
  rf_dim_split s = {{a, b}, {ga, gb}};
  return s;
}

/* The width of one head in a tensor split by heads: latent attention's q and kv_b heads are
 * wider than the model's head_dim (its v_head_dim). */
static int64_t head_width(const rf_model *m, rf_tensor_kind k) {
  if (k == RF_T_Q_B || k == RF_T_MLA_Q)
    return m->qk_nope_head_dim + m->qk_rope_head_dim;
  if (k == RF_T_KV_B)
    return m->qk_nope_head_dim + m->v_head_dim;
  return m->head_dim;
}

/* The kinds each style shards the way it shards a dense MLP's gate/up (column-parallel) and
 * down (row-parallel) projections: experts shard inside themselves like one. */
static int like_gate(rf_tensor_kind k) {
  return k == RF_T_GATE || k == RF_T_UP || k == RF_T_EXPERT_GATE || k == RF_T_EXPERT_UP ||
         k == RF_T_SHARED_GATE || k == RF_T_SHARED_UP || k == RF_T_EXPERT_GATE_UP;
}

static int like_down(rf_tensor_kind k) {
  return k == RF_T_DOWN || k == RF_T_EXPERT_DOWN || k == RF_T_SHARED_DOWN;
}

static int like_q(rf_tensor_kind k) {
  return k == RF_T_Q || k == RF_T_K || k == RF_T_V || k == RF_T_Q_B || k == RF_T_MLA_Q ||
         k == RF_T_KV_B;
}

/* Biases follow dim 0 of their weight: gpt-oss's gate_up bias as gate_up, its attention sinks
 * (one per query head) as q's heads; the biases of o_proj and of an expert's down lie along
 * the rows that the row-parallel weight's fsdp splits. */
static int bias_like_gate(rf_tensor_kind k) { return k == RF_T_EXPERT_GATE_UP_BIAS; }

static int bias_like_down(rf_tensor_kind k) {
  return k == RF_T_O_BIAS || k == RF_T_EXPERT_DOWN_BIAS;
}

static int is_norm(rf_tensor_kind k) {
  return k == RF_T_NORM || k == RF_T_HEAD_NORM || k == RF_T_Q_A_NORM || k == RF_T_KV_A_NORM;
}

/* The style tables of docs/architecture.md ("Layout rules"), written in HF orientation. "By
 * heads" axes carry the head width as granule so that a mesh axis never cuts a head in two. */
static void trainer_rules(rf_trainer_style style, const rf_tensor *t, int64_t head,
                          rf_dim_split out[2]) {
  const rf_mesh_axis F = RF_AXIS_FSDP, T = RF_AXIS_TP;
  rf_tensor_kind k = t->kind;
  out[0] = out[1] = split1(RF_AXIS_NONE, 1);
  if (style == RF_STYLE_TUNIX) {
    /* JAX's logical axes: the vocabulary and MLP width over tp, the model width over fsdp;
     * attention by heads over fsdp and its input width over tp. */
    if (k == RF_T_EMBED || k == RF_T_LM_HEAD || like_gate(k) || k == RF_T_Q_A || k == RF_T_KV_A)
      out[0] = split1(T, 1), out[1] = split1(F, 1);
    else if (like_q(k))
      out[0] = split1(F, head), out[1] = split1(T, 1);
    else if (k == RF_T_Q_BIAS || k == RF_T_K_BIAS || k == RF_T_V_BIAS)
      out[0] = split1(F, head);
    else if (k == RF_T_SINKS || bias_like_down(k))
      out[0] = split1(F, 1);
    else if (bias_like_gate(k))
      out[0] = split1(T, 1);
    else if (k == RF_T_O)
      out[0] = split1(F, 1), out[1] = split1(T, head);
    else if (like_down(k))
      out[0] = split1(F, 1), out[1] = split1(T, 1);
    else if (is_norm(k))
      out[0] = split1(T, 1);
    else if (k == RF_T_ROUTER)
      out[1] = split1(F, 1);
    return;
  }
  /* megatron: expert tensor parallelism 1, so a routed expert is never split: its rank holds it
   * whole. Everything else as fsdp2 below, whose fsdp axis megatron leaves at 1. */
  if (style == RF_STYLE_MEGATRON && t->expert >= 0)
    return;
  /* fsdp2: Megatron TP first (column-parallel on dim 0, row-parallel on dim 1; latent
   * attention's a-projections and the router are replicated over tp), then FSDP shards dim 0
   * of whatever TP left. The routers' biases are too small to shard. */
  if (k == RF_T_EMBED || k == RF_T_LM_HEAD || like_gate(k) || bias_like_gate(k) || k == RF_T_SINKS)
    out[0] = split2(T, 1, F, 1);
  else if (like_q(k) || k == RF_T_Q_BIAS || k == RF_T_K_BIAS || k == RF_T_V_BIAS)
    out[0] = split2(T, head, F, 1);
  else if (bias_like_down(k))
    out[0] = split1(F, 1);
  else if (k == RF_T_O || like_down(k))
    out[0] = split1(F, 1), out[1] = split1(T, k == RF_T_O ? head : 1);
  else if (is_norm(k) || k == RF_T_ROUTER || k == RF_T_Q_A || k == RF_T_KV_A)
    out[0] = split1(F, 1);
}

static int axis_size(const rf_trainer_layout *t, rf_mesh_axis a) {
  return a == RF_AXIS_FSDP ? t->fsdp : a == RF_AXIS_TP ? t->tp : 1;
}

static const char *axis_name(rf_mesh_axis a) { return a == RF_AXIS_FSDP ? "fsdp" : "tp"; }

/* Checks one dimension's split; `heads` selects the head-granular splits (checked first over
 * the whole model, so that "32 heads over fsdp=3" is what the user reads) or the others. */
static rf_status check_trainer_split(const rf_layout *lay, const rf_tensor *t, int dim, int heads) {
  const rf_dim_split *s = &lay->trainer_split[t->id][dim];
  int64_t extent = t->shape[dim];
  for (int k = 0; k < 2; k++) {
    if (s->axis[k] == RF_AXIS_NONE)
      continue;
    int parts = axis_size(&lay->trainer, s->axis[k]);
    int64_t units = extent / s->granule[k];
    if (units % parts != 0 && (s->granule[k] > 1) == heads) {
      const char *unit = s->granule[k] > 1 ? (layout_is_kv(t->kind) ? "kv heads" : "heads")
                         : dim == 0        ? "rows"
                                           : "columns";
      return rf_fail(RF_ERR_LAYOUT,
                     "layout: %s dim %d has %lld %s%s, which do not divide over trainer %s=%d; "
                     "choose a trainer %s that divides %lld",
                     t->name, dim, (long long)units, unit, k ? " per tp shard" : "",
                     axis_name(s->axis[k]), parts, axis_name(s->axis[k]), (long long)units);
    }
    extent /= parts;
  }
  return RF_OK;
}

/* Pipeline stages: L layers in S contiguous stages, the first L mod S stages one layer longer
 * (Megatron's and torch's default of equal stages, the remainder in front). */
static rf_status init_stages(rf_layout *lay) {
  const rf_model *m = lay->model;
  int S = lay->trainer.pp;
  if (S > m->layers)
    return rf_fail(RF_ERR_USAGE,
                   "trainer pp=%d is more pipeline stages than model %s has layers (%lld); "
                   "choose a pp of at most %lld",
                   S, m->name, (long long)m->layers, (long long)m->layers);
  lay->stage_first = rf_calloc((size_t)S + 1, sizeof *lay->stage_first, "pipeline stages");
  if (!lay->stage_first)
    return RF_ERR_NOMEM;
  int base = (int)(m->layers / S), extra = (int)(m->layers % S);
  for (int s = 0; s < S; s++)
    lay->stage_first[s + 1] = lay->stage_first[s] + base + (s < extra);
  return RF_OK;
}

/* Megatron's parallel folding: the ep ranks of the experts are the same ranks as the tp x cp x dp
 * grid of the stage, so ep must divide that grid; there is no fsdp axis, and cp exists only
 * there (the other styles have no context parallelism to place). */
static rf_status check_folding(const rf_layout *lay) {
  const rf_trainer_layout *t = &lay->trainer;
  if (t->style != RF_STYLE_MEGATRON) {
    if (t->cp > 1)
      return rf_fail(RF_ERR_USAGE,
                     "trainer cp=%d needs --trainer-style megatron, the style that places "
                     "context parallelism; use cp=1 with %s",
                     t->cp, rf_trainer_style_name(t->style));
    return RF_OK;
  }
  if (t->fsdp != 1)
    return rf_fail(RF_ERR_USAGE,
                   "trainer style megatron has no fsdp axis (each tp rank holds its shard whole); "
                   "use fsdp=1, not fsdp=%d",
                   t->fsdp);
  int grid = t->tp * t->cp * t->dp;
  if (grid % t->ep)
    return rf_fail(RF_ERR_USAGE,
                   "trainer style megatron folds ep=%d onto the tp*cp*dp = %d*%d*%d = %d ranks of "
                   "each pipeline stage, and %d does not divide %d; choose an ep that divides %d",
                   t->ep, t->tp, t->cp, t->dp, grid, t->ep, grid, grid);
  return RF_OK;
}

static rf_status check_experts(const rf_layout *lay) {
  const rf_model *m = lay->model;
  int EP = lay->trainer.ep;
  if (EP > 1 && m->experts == 0)
    return rf_fail(RF_ERR_USAGE, "trainer ep=%d needs experts, and model %s has none; use ep=1", EP,
                   m->name);
  if (EP > 1 && m->experts % EP)
    return rf_fail(RF_ERR_USAGE,
                   "trainer ep=%d does not divide the %lld experts of model %s; choose an ep "
                   "that divides %lld",
                   EP, (long long)m->experts, m->name, (long long)m->experts);
  return RF_OK;
}

rf_status layout_init_trainer(rf_layout *lay) {
  const rf_model *m = lay->model;
  RF_TRY(check_folding(lay));
  RF_TRY(check_experts(lay));
  RF_TRY(init_stages(lay));
  lay->trainer_split =
      rf_calloc((size_t)m->tensor_count, sizeof *lay->trainer_split, "trainer splits");
  if (!lay->trainer_split)
    return RF_ERR_NOMEM;
  for (int i = 0; i < m->tensor_count; i++) {
    const rf_tensor *t = &m->tensors[i];
    trainer_rules(lay->trainer.style, t, head_width(m, t->kind), lay->trainer_split[i]);
    /* Fewer kv heads than a mesh axis has ranks: the trainer replicates them over that axis,
     * as Megatron does when tp exceeds the kv heads (Gemma's single kv head, say). */
    for (int d = 0; layout_is_kv(t->kind) && d < t->ndim; d++)
      for (int k = 0; k < 2; k++) {
        rf_dim_split *sp = &lay->trainer_split[i][d];
        if (sp->granule[k] > 1 && m->kv_heads < axis_size(&lay->trainer, sp->axis[k]))
          sp->axis[k] = RF_AXIS_NONE, sp->granule[k] = 1;
      }
  }
  rf_status st = RF_OK;
  for (int heads = 1; heads >= 0; heads--)
    for (int i = 0; i < m->tensor_count && st == RF_OK; i++)
      for (int d = 0; d < m->tensors[i].ndim && st == RF_OK; d++)
        st = check_trainer_split(lay, &m->tensors[i], d, heads);
  return st;
}

int rf_layout_tensor_stage(const rf_layout *lay, int tensor) {
  const rf_tensor *t = &lay->model->tensors[tensor];
  int S = lay->trainer.pp;
  if (t->layer < 0)
    return t->kind == RF_T_EMBED ? 0 : S - 1;
  int lo = 0, hi = S - 1; /* the last stage whose first layer is at most t->layer */
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (lay->stage_first[mid] <= t->layer)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

rf_box rf_layout_trainer_box(const rf_layout *lay, int tensor, int trainer_rank) {
  const rf_tensor *t = &lay->model->tensors[tensor];
  const rf_trainer_layout *tl = &lay->trainer;
  int mesh = trainer_rank % (tl->fsdp * tl->tp);
  int ep_rank = trainer_rank / (tl->fsdp * tl->tp) % tl->ep;
  int stage = trainer_rank / (tl->fsdp * tl->tp * tl->ep) % tl->pp;
  if (tl->style == RF_STYLE_MEGATRON) {
    /* Folded: the stage's tp x cp x dp ranks, tp fastest; ep counts the same ranks again, ep
     * rank fastest (fsdp is 1, so the mesh coordinate is the tp rank). */
    int grid = tl->tp * tl->cp * tl->dp, i = trainer_rank % grid;
    mesh = i % tl->tp;
    ep_rank = i % tl->ep;
    stage = trainer_rank / grid;
  }
  rf_box none = {{0, 0}, {0, 0}};
  if (stage != rf_layout_tensor_stage(lay, tensor))
    return none;
  if (t->expert >= 0 && t->expert / (lay->model->experts / tl->ep) != ep_rank)
    return none;
  int coord[3] = {0, mesh / tl->tp, mesh % tl->tp}; /* indexed by rf_mesh_axis */
  rf_box b = rf_box_whole(t);
  for (int d = 0; d < t->ndim; d++) {
    const rf_dim_split *s = &lay->trainer_split[tensor][d];
    int64_t extent = t->shape[d], lo = 0;
    for (int k = 0; k < 2; k++) {
      if (s->axis[k] == RF_AXIS_NONE)
        continue;
      extent /= axis_size(tl, s->axis[k]);
      lo += coord[s->axis[k]] * extent;
    }
    b.lo[d] = lo;
    b.hi[d] = lo + extent;
  }
  return b;
}

int rf_layout_trainer_candidates(const rf_layout *lay, int tensor, int *ranks) {
  const rf_tensor *t = &lay->model->tensors[tensor];
  const rf_trainer_layout *tl = &lay->trainer;
  int mesh = tl->fsdp * tl->tp, stage = rf_layout_tensor_stage(lay, tensor);
  if (tl->style == RF_STYLE_MEGATRON) {
    /* The stage's grid holds every non-expert tensor (tp shards replicated over cp and dp), and
     * an expert on the ranks of its ep rank: every ep-th rank of the grid. */
    int grid = tl->tp * tl->cp * tl->dp, first = stage * grid, step = 1, n = 0;
    if (t->expert >= 0) {
      first += (int)(t->expert / (lay->model->experts / tl->ep));
      step = tl->ep;
    }
    for (int i = 0; i < grid / step; i++, n++)
      if (ranks)
        ranks[n] = first + i * step;
    return n;
  }
  /* The numbering of layout.h: a trainer replica d's ranks of stage s and ep rank x are the
   * mesh ranks from ((d*PP + s)*EP + x)*F*T on. */
  int x_lo = 0, x_hi = tl->ep;
  if (t->expert >= 0) {
    x_lo = (int)(t->expert / (lay->model->experts / tl->ep));
    x_hi = x_lo + 1;
  }
  int n = 0;
  for (int d = 0; d < tl->dp; d++)
    for (int x = x_lo; x < x_hi; x++) {
      int first = ((d * tl->pp + stage) * tl->ep + x) * mesh;
      for (int m = 0; ranks && m < mesh; m++)
        ranks[n + m] = first + m;
      n += mesh;
    }
  return n;
}

int rf_layout_trainer_transposed(const rf_layout *lay, int tensor) {
  if (lay->trainer.order != RF_ORDER_JAX)
    return 0;
  rf_tensor_kind k = lay->model->tensors[tensor].kind;
  /* Every linear weight is a JAX kernel [in, out]; embeddings are lookup tables. */
  return like_q(k) || like_gate(k) || like_down(k) || k == RF_T_O || k == RF_T_LM_HEAD ||
         k == RF_T_Q_A || k == RF_T_KV_A || k == RF_T_ROUTER;
}
