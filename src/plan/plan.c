/* The p2p plan and what every plan kind shares: the piece list, source choice, totals and the
 * digest that the handshake compares. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "plan_internal.h"

RF_ENUM_DEFINE(rf_plan_kind, "plan", RF_PLAN_KIND_LIST, RF_PLAN_KIND_COUNT)

/* Pieces a summary plan holds at a time (3.5 MiB): the tally takes them in batches. */
#define PLAN_STREAM_PIECES (1 << 16)

static void tally_add(rf_plan *plan, plan_tally *t, const rf_piece *pieces, int n);

rf_status plan_add_piece(plan_builder *b, int tensor, rf_stage stage, int src, int dst,
                         const rf_box *box) {
  rf_plan *plan = b->plan;
  if (b->tally && plan->piece_count == PLAN_STREAM_PIECES) {
    tally_add(plan, b->tally, plan->pieces, plan->piece_count);
    b->streamed += plan->piece_count;
    plan->piece_count = 0;
  }
  RF_TRY(rf_grow((void **)&plan->pieces, plan->piece_count, &b->cap, sizeof *plan->pieces,
                 "plan pieces"));
  rf_piece *pc = &plan->pieces[plan->piece_count++];
  memset(pc, 0, sizeof *pc);
  pc->tensor = tensor;
  pc->stage = stage;
  pc->src = src;
  pc->dst = dst;
  pc->box = *box;
  /* Pieces of one tensor come together: its element size is looked up once. */
  if (tensor != b->esize_tensor) {
    b->esize_tensor = tensor;
    b->esize = rf_tensor_esize(&plan->layout->model->tensors[tensor]);
  }
  rf_box bytes = rf_layout_trainer_bytes(plan->layout, tensor, box); /* packed 4-bit: halved */
  pc->bytes = rf_box_numel(&bytes) * b->esize;
  return RF_OK;
}

/* p2p: every element a rollout rank holds comes straight from one trainer rank that holds it. */
static rf_status build_p2p(plan_builder *b) {
  const rf_layout *lay = b->plan->layout;
  int64_t *load = rf_calloc((size_t)lay->trainer_ranks, sizeof *load, "plan load");
  if (!load)
    return RF_ERR_NOMEM;
  plan_sources *sources = NULL;
  rf_status st = plan_sources_open(b, load, &sources);
  for (int i = 0; i < lay->model->tensor_count && st == RF_OK; i++) {
    int t = lay->order[i];
    plan_sources_select(sources, t);
    /* An expert under rollout ep has one rollout rank: the others' boxes are empty. */
    int owner = rf_layout_rollout_owner(lay, t);
    int first = owner >= 0 ? owner : 0, end = owner >= 0 ? owner + 1 : lay->rollout_ranks;
    for (int r = first; r < end && st == RF_OK; r++) {
      rf_box want = rf_layout_rollout_box(lay, t, r);
      if (!rf_box_is_empty(&want))
        st = plan_cover_from_trainers(b, sources, t, RF_STAGE_TRANSFER, r,
                                      rf_layout_rollout_world_rank(lay, r), &want);
    }
  }
  plan_sources_free(sources);
  free(load);
  return st;
}

int rf_piece_continues(const rf_plan *plan, const rf_piece *prev, const rf_piece *cur) {
  const rf_layout *lay = plan->layout;
  /* Star's transfer reads coupling buffers, not trainer shards. */
  if (plan->kind == RF_PLAN_STAR || prev->stage != RF_STAGE_TRANSFER ||
      cur->stage != RF_STAGE_TRANSFER || prev->src != cur->src || prev->dst != cur->dst ||
      lay->position[cur->tensor] != lay->position[prev->tensor] + 1 ||
      prev->bytes % RF_BUFFER_ALIGN != 0 || rf_layout_trainer_transposed(lay, prev->tensor) ||
      rf_layout_trainer_transposed(lay, cur->tensor))
    return 0;
  const rf_rollout_slot *a = &lay->slots[prev->tensor], *b = &lay->slots[cur->tensor];
  const rf_piece *p[2] = {prev, cur};
  for (int i = 0; i < 2; i++) {
    rf_box shard = rf_layout_trainer_box(lay, p[i]->tensor, p[i]->src);
    rf_box held = rf_layout_rollout_box(lay, p[i]->tensor, p[i]->dst);
    if (!rf_box_equal(&p[i]->box, &shard) || !rf_box_equal(&p[i]->box, &held) ||
        held.hi[1] - held.lo[1] != lay->rollout_tensors[a->local].shape[1])
      return 0;
  }
  return a->local == b->local && a->col == 0 && b->col == 0 &&
         b->row == a->row + (prev->box.hi[0] - prev->box.lo[0]);
}

/* A box of `rows` x `cols` inside row-major storage `width` elements wide is one run when it
 * has one row or spans every column. */
static int one_run(int64_t rows, int64_t cols, int64_t width) { return rows <= 1 || cols == width; }

rf_runs rf_piece_runs(const rf_plan *plan, const rf_piece *p) {
  const rf_layout *lay = plan->layout;
  int64_t rows = p->box.hi[0] - p->box.lo[0], cols = p->box.hi[1] - p->box.lo[1];
  rf_box shard = rf_layout_trainer_box(lay, p->tensor, p->src);
  int src_run = rf_layout_trainer_transposed(lay, p->tensor)
                    ? one_run(cols, rows, shard.hi[0] - shard.lo[0])
                    : one_run(rows, cols, shard.hi[1] - shard.lo[1]);
  int dst_run = one_run(rows, cols, lay->rollout_tensors[lay->slots[p->tensor].local].shape[1]);
  return src_run ? (dst_run ? RF_RUNS_CONTIGUOUS : RF_RUNS_STRIDED_DESTINATION)
                 : (dst_run ? RF_RUNS_STRIDED_SOURCE : RF_RUNS_STRIDED_BOTH);
}

int rf_piece_src_world(const rf_plan *plan, const rf_piece *piece) {
  return piece->stage == RF_STAGE_FORWARD ? rf_layout_rollout_world_rank(plan->layout, piece->src)
                                          : rf_layout_trainer_world_rank(plan->layout, piece->src);
}

int rf_piece_dst_world(const rf_plan *plan, const rf_piece *piece) {
  return piece->stage == RF_STAGE_RESHAPE ? rf_layout_trainer_world_rank(plan->layout, piece->dst)
                                          : rf_layout_rollout_world_rank(plan->layout, piece->dst);
}

int rf_piece_is_local(const rf_plan *plan, const rf_piece *piece) {
  return rf_piece_src_world(plan, piece) == rf_piece_dst_world(plan, piece);
}

int rf_plan_forwards(const rf_plan *plan) { return rf_plan_kind_forwards(plan->kind); }

int rf_plan_kind_forwards(rf_plan_kind kind) {
  return kind == RF_PLAN_FANOUT || kind == RF_PLAN_HIERARCHICAL;
}

int rf_plan_forwarded_from(const rf_plan *plan, int tensor, int rollout_rank) {
  for (int i = plan->forward_first[0]; i < plan->piece_count; i++)
    if (plan->pieces[i].tensor == tensor && plan->pieces[i].dst == rollout_rank)
      return plan->pieces[i].src;
  return -1;
}

struct plan_tally {
  XXH3_state_t *hash;
  plan_wire wire;
  rf_piece prev; /* the piece before, for rf_piece_continues */
  int have_prev;
  /* The box the destination of the piece before holds, and what one element takes: a run of
   * pieces to one rollout rank (k arms of a star, the shards of a p2p target) asks once. */
  int held_tensor, held_dst;
  rf_box held;
  int64_t held_esize;
};

/* Allocates the totals and starts the digest with what precedes the pieces. */
static rf_status tally_open(rf_plan *plan, plan_tally *t) {
  const rf_layout *lay = plan->layout;
  memset(t, 0, sizeof *t);
  t->held_tensor = t->held_dst = -1;
  plan->send_bytes = rf_calloc((size_t)lay->trainer_ranks, sizeof(int64_t), "plan totals");
  plan->reshape_send_bytes = rf_calloc((size_t)lay->trainer_ranks, sizeof(int64_t), "totals");
  plan->recv_bytes = rf_calloc((size_t)lay->rollout_ranks, sizeof(int64_t), "plan totals");
  plan->forward_send_bytes = rf_calloc((size_t)lay->rollout_ranks, sizeof(int64_t), "totals");
  plan->forward_recv_bytes = rf_calloc((size_t)lay->rollout_ranks, sizeof(int64_t), "totals");
  t->hash = XXH3_createState();
  if (!plan->send_bytes || !plan->reshape_send_bytes || !plan->recv_bytes ||
      !plan->forward_send_bytes || !plan->forward_recv_bytes || !t->hash)
    return RF_ERR_NOMEM;
  RF_TRY(plan_wire_open(plan, &t->wire));
  XXH3_64bits_reset(t->hash);
  int32_t head[8] = {plan->kind,         lay->trainer.fsdp, lay->trainer.tp, lay->trainer.dp,
                     lay->trainer.style, lay->rollout.tp,   lay->rollout.dp, lay->placement};
  XXH3_64bits_update(t->hash, head, sizeof head);
  /* The axes that came with expert parallelism, only where used: dense plans keep the digests
   * they have always had. */
  int32_t moe[3] = {lay->trainer.ep, lay->trainer.pp, lay->rollout.ep};
  if (moe[0] != 1 || moe[1] != 1 || moe[2] != 0)
    XXH3_64bits_update(t->hash, moe, sizeof moe);
  /* Context parallelism (megatron only) where used, for the same reason. */
  int32_t cp = lay->trainer.cp;
  if (cp > 1)
    XXH3_64bits_update(t->hash, &cp, sizeof cp);
  /* The rollout dtype only where it is fp8, for the same reason. */
  int32_t dtype = lay->rollout.dtype;
  if (dtype != RF_ROLLOUT_DTYPE_MODEL)
    XXH3_64bits_update(t->hash, &dtype, sizeof dtype);
  return RF_OK;
}

/* Counts the next n pieces of the plan, in plan order. */
static void tally_add(rf_plan *plan, plan_tally *t, const rf_piece *pieces, int n) {
  const rf_layout *lay = plan->layout;
  for (int i = 0; i < n; i++) {
    const rf_piece *p = &pieces[i];
    int local = rf_piece_is_local(plan, p);
    plan->local_count += local;
    if (local)
      plan->local_bytes += p->bytes;
    plan_wire_add(plan, &t->wire, p);
    int first = !t->have_prev;
    const rf_piece *prev = i ? &pieces[i - 1] : &t->prev;
    if (p->stage == RF_STAGE_RESHAPE) {
      plan->reshape_count++;
      if (!local) {
        plan->reshape_bytes += p->bytes;
        plan->reshape_send_bytes[p->src] += p->bytes;
      }
    } else if (p->stage == RF_STAGE_FORWARD) {
      plan->forward_send_bytes[p->src] += p->bytes;
      plan->forward_recv_bytes[p->dst] += p->bytes;
      plan->forward_bytes += p->bytes;
    } else {
      plan->send_bytes[p->src] += p->bytes;
      plan->recv_bytes[p->dst] += p->bytes;
      plan->block_count += first || !rf_piece_continues(plan, prev, p);
      if (plan->kind != RF_PLAN_STAR)
        plan->runs_bytes[rf_piece_runs(plan, p)] += p->bytes;
      plan->transfer_bytes += p->bytes;
      if (p->tensor != t->held_tensor || p->dst != t->held_dst) {
        t->held_tensor = p->tensor;
        t->held_dst = p->dst;
        t->held = rf_layout_rollout_box(lay, p->tensor, p->dst);
        t->held_esize = rf_tensor_esize(&lay->model->tensors[p->tensor]);
      }
      rf_box kept;
      rf_box_intersect(&p->box, &t->held, &kept);
      plan->extra_bytes += p->bytes - rf_box_numel(&kept) * t->held_esize;
    }
    t->have_prev = 1;
  }
  if (n > 0)
    t->prev = pieces[n - 1];
  XXH3_64bits_update(t->hash, pieces, (size_t)n * sizeof *pieces);
}

/* Ends the tally: the digest, the last fp8 tensor, and forward_first for the kinds without a
 * forward stage. */
static rf_status tally_close(rf_plan *plan, plan_tally *t) {
  plan_wire_close(plan, &t->wire);
  plan->digest = XXH3_64bits_digest(t->hash);
  XXH3_freeState(t->hash);
  t->hash = NULL;
  if (!plan->forward_first) {
    plan->forward_first = rf_calloc(1, sizeof *plan->forward_first, "plan forward steps");
    if (!plan->forward_first)
      return RF_ERR_NOMEM;
    plan->forward_first[0] = plan->piece_count;
  }
  return RF_OK;
}

rf_status rf_plan_build(rf_plan *plan, const rf_layout *lay, rf_plan_kind kind,
                        const rf_plan_options *options) {
  memset(plan, 0, sizeof *plan);
  if ((int)kind < 0 || kind >= RF_PLAN_KIND_COUNT)
    return rf_fail(RF_ERR_INTERNAL, "plan: kind %d is no plan kind (auto is resolved before)",
                   (int)kind);
  plan->kind = kind;
  plan->layout = lay;
  plan_tally tally;
  plan_builder b = {plan, 0, options, NULL, 0, -1, 0};
  rf_status st = tally_open(plan, &tally);
  /* The forwarding kinds read their transfer pieces back to forward them: they keep them. */
  if (st == RF_OK && options && options->summary && !rf_plan_kind_forwards(kind))
    b.tally = &tally;
  if (st == RF_OK)
    st = kind == RF_PLAN_STAR           ? plan_build_star(&b)
         : kind == RF_PLAN_FANOUT       ? plan_build_fanout(&b)
         : kind == RF_PLAN_HIERARCHICAL ? plan_build_hierarchical(&b)
                                        : build_p2p(&b);
  if (st == RF_OK) {
    /* Whatever the tally has not taken yet: the last batch, or every piece. */
    tally_add(plan, &tally, plan->pieces, plan->piece_count);
    if (b.tally) {
      free(plan->pieces);
      plan->pieces = NULL;
      plan->piece_count += b.streamed;
    }
    st = tally_close(plan, &tally);
  }
  if (tally.hash)
    XXH3_freeState(tally.hash);
  free(tally.wire.last);
  if (st != RF_OK)
    rf_plan_free(plan);
  return st;
}

void rf_plan_free(rf_plan *plan) {
  free(plan->pieces);
  free(plan->coupling);
  free(plan->send_bytes);
  free(plan->recv_bytes);
  free(plan->reshape_send_bytes);
  free(plan->forward_send_bytes);
  free(plan->forward_recv_bytes);
  free(plan->forward_first);
  free(plan->root);
  free(plan->replica_domain);
  free(plan->domain_root);
  free(plan->wire_send_bytes);
  free(plan->wire_recv_bytes);
  free(plan->source_quantized);
  free(plan->destination_quantized);
  memset(plan, 0, sizeof *plan);
}
