/* The planner's promises, checked the naive way on any plan: every wanted element covered
 * exactly once, byte totals that add up, sources chosen by the documented rule, and fused
 * rollout tensors whose members' slots tile them. Shared by test_plan and test_plan_moe. */
#ifndef RF_TEST_PLAN_CHECKS_H
#define RF_TEST_PLAN_CHECKS_H

#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "test.h"

static const rf_plan *sort_plan;

/* Orders pieces by stage, tensor and destination so each destination's pieces are adjacent. */
static inline int by_destination(const void *a, const void *b) {
  const rf_piece *x = &sort_plan->pieces[*(const int *)a];
  const rf_piece *y = &sort_plan->pieces[*(const int *)b];
  if (x->stage != y->stage)
    return x->stage - y->stage;
  if (x->tensor != y->tensor)
    return x->tensor - y->tensor;
  return x->dst - y->dst;
}

static inline int box_inside(const rf_box *in, const rf_box *out) {
  rf_box x;
  return rf_box_intersect(in, out, &x) && rf_box_equal(&x, in);
}

/* What destination `dst` of a stage must end up holding. */
static inline rf_box wanted(const rf_plan *plan, const rf_piece *p) {
  if (p->stage == RF_STAGE_RESHAPE)
    return plan->coupling[(size_t)p->tensor * plan->layout->trainer_ranks + p->dst];
  return rf_layout_rollout_box(plan->layout, p->tensor, p->dst);
}

/* Every wanted element is covered exactly once: the kept parts of one destination's pieces
 * are pairwise disjoint and add up to the wanted box; every source holds what it sends. A
 * destination's pieces of one tensor come from one stage (groups are counted against wants),
 * so fanout's transfer and forward pieces together also write every element once. */
static inline void check_coverage(const rf_plan *plan) {
  const rf_layout *lay = plan->layout;
  int n = plan->piece_count;
  int *idx = malloc((size_t)n * sizeof *idx);
  for (int i = 0; i < n; i++)
    idx[i] = i;
  sort_plan = plan;
  qsort(idx, (size_t)n, sizeof *idx, by_destination);
  int64_t *covered = calloc((size_t)RF_MAX(lay->trainer_ranks, lay->rollout_ranks) *
                                (size_t)lay->model->tensor_count * 2,
                            sizeof *covered);
  for (int a = 0; a < n;) {
    int b = a;
    const rf_piece *first = &plan->pieces[idx[a]];
    while (b < n && by_destination(&idx[a], &idx[b]) == 0)
      b++;
    rf_box want = wanted(plan, first);
    int64_t sum = 0;
    for (int i = a; i < b; i++) {
      const rf_piece *p = &plan->pieces[idx[i]];
      rf_box held = p->stage == RF_STAGE_FORWARD ? rf_layout_rollout_box(lay, p->tensor, p->src)
                    : p->stage == RF_STAGE_TRANSFER && plan->kind == RF_PLAN_STAR
                        ? plan->coupling[(size_t)p->tensor * lay->trainer_ranks + p->src]
                        : rf_layout_trainer_box(lay, p->tensor, p->src);
      ASSERT_TRUE(box_inside(&p->box, &held));
      ASSERT_EQ(p->bytes,
                rf_box_numel(&p->box) * rf_dtype_size(lay->model->tensors[p->tensor].dtype));
      rf_box kept_i, kept_j, both;
      /* A star piece of a whole embedding may hold none of what its destination keeps. */
      int kept_any = rf_box_intersect(&p->box, &want, &kept_i);
      ASSERT_TRUE(kept_any || (plan->kind == RF_PLAN_STAR && p->stage == RF_STAGE_TRANSFER));
      sum += rf_box_numel(&kept_i);
      for (int j = a; j < i; j++) {
        rf_box_intersect(&plan->pieces[idx[j]].box, &want, &kept_j);
        ASSERT_FALSE(rf_box_intersect(&kept_i, &kept_j, &both));
      }
    }
    ASSERT_EQ(sum, rf_box_numel(&want));
    a = b;
  }
  /* Every destination that wants anything got a group: count groups against wants. */
  int64_t groups = 0, wants = 0;
  for (int a = 0; a < n; a++)
    groups += a == 0 || by_destination(&idx[a - 1], &idx[a]) != 0;
  for (int t = 0; t < lay->model->tensor_count; t++) {
    for (int r = 0; r < lay->rollout_ranks; r++) {
      rf_box w = rf_layout_rollout_box(lay, t, r);
      wants += !rf_box_is_empty(&w);
    }
    if (plan->kind == RF_PLAN_STAR)
      wants += lay->trainer_ranks;
  }
  ASSERT_EQ(groups, wants);
  free(covered);
  free(idx);
}

/* Bytes sent = bytes received = what every rollout rank holds, plus star's extras; fanout's
 * forward stage carries what the trainer does not send. */
static inline void check_bytes(const rf_plan *plan, int by_load) {
  const rf_layout *lay = plan->layout;
  int64_t held = 0, sent = 0, recv = 0, max_tensor = 0;
  for (int t = 0; t < lay->model->tensor_count; t++) {
    max_tensor = RF_MAX(max_tensor, lay->model->tensors[t].bytes);
    for (int r = 0; r < lay->rollout_ranks; r++) {
      rf_box b = rf_layout_rollout_box(lay, t, r);
      held += rf_box_numel(&b) * rf_dtype_size(lay->model->tensors[t].dtype);
    }
  }
  /* Balance is about links: local copies (colocated ranks) are not sends. */
  int64_t *remote = calloc((size_t)lay->trainer_ranks, sizeof *remote);
  for (int i = 0; i < plan->piece_count; i++)
    if (plan->pieces[i].stage == RF_STAGE_TRANSFER && !rf_piece_is_local(plan, &plan->pieces[i]))
      remote[plan->pieces[i].src] += plan->pieces[i].bytes;
  int64_t min_send = INT64_MAX, max_send = 0;
  for (int i = 0; i < lay->trainer_ranks; i++) {
    sent += plan->send_bytes[i];
    min_send = RF_MIN(min_send, remote[i]);
    max_send = RF_MAX(max_send, remote[i]);
  }
  free(remote);
  for (int r = 0; r < lay->rollout_ranks; r++)
    recv += plan->recv_bytes[r];
  ASSERT_EQ(sent, recv);
  ASSERT_EQ(sent, plan->transfer_bytes);
  ASSERT_EQ(plan->transfer_bytes + plan->forward_bytes, held + plan->extra_bytes);
  if (!rf_plan_forwards(plan))
    ASSERT_EQ(plan->forward_bytes, 0);
  if (plan->kind == RF_PLAN_P2P) {
    ASSERT_EQ(plan->extra_bytes, 0);
    ASSERT_EQ(plan->reshape_count, 0);
    /* Disaggregated: balanced within one tensor's worth (when only load decides: a machine's
     * distances come first; ep and pp ranks hold different tensors). Colocated: a rank's own
     * trainer shard is used first whenever it holds the piece, which may unbalance the links. */
    if (lay->placement == RF_PLACEMENT_DISAGGREGATED && by_load && lay->trainer.ep == 1 &&
        lay->trainer.pp == 1)
      ASSERT_LE(max_send - min_send, max_tensor);
    for (int i = 0; lay->placement == RF_PLACEMENT_COLOCATED && i < plan->piece_count; i++) {
      const rf_piece *p = &plan->pieces[i];
      int own = -1;
      rf_layout_roles(lay, rf_piece_dst_world(plan, p), &own, NULL);
      rf_box mine = own >= 0 ? rf_layout_trainer_box(lay, p->tensor, own) : p->box;
      if (own >= 0 && box_inside(&p->box, &mine))
        ASSERT_EQ(p->src, own);
    }
  }
  if (lay->rollout.tp == 1 && lay->rollout.dp == 1)
    ASSERT_EQ(held, lay->model->total_bytes);
}

static inline int pick(const int *v, int n) { return v[rand() % n]; }

/* A made-up machine for the source choice: nodes of `per_node` consecutive world ranks, an
 * arbitrary distance inside a node, one larger distance between nodes. */
typedef struct {
  int per_node;
  int *node_of;
} test_machine;

static inline int test_distance(void *ctx, int a, int b) {
  const test_machine *m = ctx;
  if (a == b)
    return 0;
  if (m->node_of[a] != m->node_of[b])
    return 5;
  return 1 + (a * 7 + b * 3) % 4;
}

/* Replays the rule the planner promises, the naive way: every piece of the stage that chooses
 * sources comes from the nearest trainer rank holding exactly its elements' box, then the
 * least loaded so far, then the lowest rank; load counts bytes that leave the process, and
 * where ranks sit on nodes, bytes that stay on the node and bytes that leave it apart, each
 * destination comparing the load of its own class (plan_sources.c). */
static inline void check_choices(const rf_plan *plan, const rf_plan_options *o) {
  const rf_layout *lay = plan->layout;
  rf_stage choosing = plan->kind == RF_PLAN_STAR ? RF_STAGE_RESHAPE : RF_STAGE_TRANSFER;
  int64_t *load = calloc((size_t)lay->trainer_ranks, sizeof *load);
  int64_t *near = calloc((size_t)lay->trainer_ranks, sizeof *near);
  const int *node = o && o->distance ? o->node_of : NULL;
  /* Every trainer rank's box of the current tensor, computed once per tensor: pieces come
   * tensor by tensor, and the big MoE models have tens of thousands of tensors. */
  rf_box *boxes = calloc((size_t)lay->trainer_ranks, sizeof *boxes);
  int boxes_of = -1;
  ASSERT_TRUE(load && near && boxes);
  for (int i = 0; i < plan->piece_count; i++) {
    const rf_piece *p = &plan->pieces[i];
    if (p->stage != (int32_t)choosing)
      continue;
    if (p->tensor != boxes_of)
      for (int r = 0; r < lay->trainer_ranks; r++)
        boxes[r] = rf_layout_trainer_box(lay, boxes_of = p->tensor, r);
    int dst_world = rf_piece_dst_world(plan, p), best = -1, best_dist = 0;
    for (int r = 0; r < lay->trainer_ranks; r++) {
      rf_box x;
      if (!rf_box_intersect(&boxes[r], &p->box, &x) || !rf_box_equal(&x, &p->box))
        continue;
      int w = rf_layout_trainer_world_rank(lay, r);
      int d = o && o->distance ? o->distance(o->distance_ctx, w, dst_world) : w != dst_world;
      const int64_t *by = node && node[w] == node[dst_world] ? near : load;
      if (best < 0 || d < best_dist || (d == best_dist && by[r] < by[best])) {
        best = r;
        best_dist = d;
      }
    }
    ASSERT_EQ(p->src, best);
    int src_world = rf_layout_trainer_world_rank(lay, p->src);
    if (!rf_piece_is_local(plan, p))
      (node && node[src_world] == node[dst_world] ? near : load)[p->src] += p->bytes;
  }
  free(boxes);
  free(load);
  free(near);
}

/* Orders the members of one rollout rank's fused tensors by tensor, then first local row. */
typedef struct {
  int local;
  int64_t row, rows;
} slot_span;

static inline int by_local_row(const void *a, const void *b) {
  const slot_span *x = a, *y = b;
  if (x->local != y->local)
    return x->local - y->local;
  return (x->row > y->row) - (x->row < y->row);
}

/* Every element of every rollout tensor on rollout rank `rank` is written by exactly one
 * member's held box: members span the tensor's full width, their local row ranges are
 * disjoint and cover every row (except the vocabulary's padding rows, which nothing writes).
 * Returns the bytes written. */
static inline int64_t check_slots(const rf_layout *lay, int rank) {
  const rf_model *m = lay->model;
  slot_span *v = calloc((size_t)m->tensor_count, sizeof *v);
  int n = 0;
  int64_t bytes = 0;
  for (int t = 0; t < m->tensor_count; t++) {
    rf_box b = rf_layout_rollout_box(lay, t, rank);
    if (rf_box_is_empty(&b))
      continue;
    const rf_rollout_slot *s = &lay->slots[t];
    const rf_rollout_tensor *rt = &lay->rollout_tensors[s->local];
    ASSERT_EQ(s->col, 0);
    ASSERT_EQ(b.hi[1] - b.lo[1], rt->shape[1]);
    ASSERT_EQ(rt->dtype, m->tensors[t].dtype);
    v[n++] = (slot_span){s->local, s->row, b.hi[0] - b.lo[0]};
    bytes += rf_box_numel(&b) * rf_dtype_size(m->tensors[t].dtype);
  }
  qsort(v, (size_t)n, sizeof *v, by_local_row);
  for (int i = 0; i < n;) {
    const rf_rollout_tensor *rt = &lay->rollout_tensors[v[i].local];
    int64_t at = 0;
    int j = i;
    for (; j < n && v[j].local == v[i].local; j++) {
      ASSERT_EQ(v[j].row, at); /* no gap, no overlap */
      at += v[j].rows;
    }
    int vocab = strstr(rt->name, "embed_tokens") || strstr(rt->name, "lm_head");
    if (vocab)
      ASSERT_LE(at, rt->shape[0]);
    else
      ASSERT_EQ(at, rt->shape[0]);
    ASSERT_EQ(rt->numel * rf_dtype_size(rt->dtype), rt->bytes);
    i = j;
  }
  free(v);
  return bytes;
}

/* Fanout's own promises, checked piece by piece:
 *  - each replicated tensor goes from the trainer to its root replica's ranks only, and each
 *    expert under rollout ep straight to its one rank, never forwarded;
 *  - rollout rank (p, r) forwards to (p', r) exactly the box both hold, only what it received
 *    at an earlier step (or from the trainer), and every rank receives a tensor once;
 *  - the trainer sends exactly one replica's bytes (plus the ep experts once each), the
 *    forward stage the other P - 1 copies, and the per-rank totals add up;
 *  - the depth is ceil(log2 P), reached by some rank; the roots' bytes differ by at most one
 *    tensor's; with nodes, a replica on its root's node receives from that node. */
static inline void check_fanout(const rf_plan *plan, const rf_plan_options *o) {
  const rf_layout *lay = plan->layout;
  const rf_model *m = lay->model;
  int R = lay->rollout.tp, P = lay->rollout.dp, N = lay->rollout_ranks, nt = m->tensor_count;
  int depth = 0;
  while ((1 << depth) < P)
    depth++;
  ASSERT_EQ(plan->kind, RF_PLAN_FANOUT);
  ASSERT_EQ(plan->forward_depth, depth);
  ASSERT_EQ(plan->forward_first[depth], plan->piece_count);
  int *step = malloc((size_t)nt * (size_t)N * sizeof *step); /* -2 none, -1 trainer, else s */
  int64_t *forward_recv = calloc((size_t)N, sizeof *forward_recv);
  int64_t *rooted = calloc((size_t)P, sizeof *rooted);
  ASSERT_TRUE(step && forward_recv && rooted);
  for (size_t i = 0; i < (size_t)nt * (size_t)N; i++)
    step[i] = -2;
  int s = -1, deepest = -1;
  for (int i = 0; i < plan->piece_count; i++) {
    const rf_piece *p = &plan->pieces[i];
    int *mine = &step[(size_t)p->tensor * N + p->dst];
    while (s + 1 <= depth && i >= plan->forward_first[s + 1])
      s++;
    if (p->stage == RF_STAGE_TRANSFER) {
      ASSERT_LT(i, plan->forward_first[0]);
      int shared = rf_layout_rollout_shared(lay, p->tensor);
      ASSERT_EQ(plan->root[p->tensor], shared ? -1 : p->dst / R);
      *mine = -1;
      continue;
    }
    ASSERT_EQ(p->stage, RF_STAGE_FORWARD);
    ASSERT_GE(s, 0);
    ASSERT_GE(plan->root[p->tensor], 0);
    ASSERT_EQ(p->src % R, p->dst % R);
    ASSERT_NE(p->src / R, p->dst / R);
    rf_box want = rf_layout_rollout_box(lay, p->tensor, p->dst);
    rf_box have = rf_layout_rollout_box(lay, p->tensor, p->src);
    ASSERT_TRUE(rf_box_equal(&p->box, &want) && rf_box_equal(&p->box, &have));
    int got = step[(size_t)p->tensor * N + p->src];
    ASSERT_TRUE(got == -1 || (got >= 0 && got < s));
    ASSERT_EQ(*mine, -2);
    *mine = s;
    deepest = RF_MAX(deepest, s);
    forward_recv[p->dst] += p->bytes;
    if (o && o->distance && o->node_of) {
      const int *node = o->node_of;
      int root_world = rf_layout_rollout_world_rank(lay, plan->root[p->tensor] * R + p->dst % R);
      if (node[rf_layout_rollout_world_rank(lay, p->dst)] == node[root_world])
        ASSERT_EQ(node[rf_piece_src_world(plan, p)], node[root_world]);
    }
  }
  ASSERT_EQ(deepest, depth - 1);
  int64_t replica = 0, shared_bytes = 0, max_tensor = 0;
  for (int t = 0; t < nt; t++) {
    int shared = rf_layout_rollout_shared(lay, t);
    int64_t tensor_bytes = 0;
    for (int r = 0; r < N; r++) {
      rf_box b = rf_layout_rollout_box(lay, t, r);
      int64_t bytes = rf_box_numel(&b) * rf_dtype_size(m->tensors[t].dtype);
      int got = step[(size_t)t * N + r];
      ASSERT_EQ(got == -2, bytes == 0);
      if (shared) {
        shared_bytes += bytes;
        ASSERT_TRUE(bytes == 0 || got == -1);
        continue;
      }
      ASSERT_TRUE(bytes == 0 || (got == -1) == (r / R == plan->root[t]));
      if (r < R)
        replica += bytes, tensor_bytes += bytes;
      if (r / R == plan->root[t])
        rooted[r / R] += bytes;
      else
        forward_recv[r] -= bytes;
    }
    max_tensor = RF_MAX(max_tensor, tensor_bytes);
  }
  int64_t sent = 0, forward_sent = 0, lo = INT64_MAX, hi = 0;
  for (int i = 0; i < lay->trainer_ranks; i++)
    sent += plan->send_bytes[i];
  for (int r = 0; r < N; r++) {
    ASSERT_EQ(forward_recv[r], 0); /* every rank forwarded-to exactly what it holds */
    forward_sent += plan->forward_send_bytes[r];
  }
  for (int p = 0; p < P; p++)
    lo = RF_MIN(lo, rooted[p]), hi = RF_MAX(hi, rooted[p]);
  ASSERT_LE(hi - lo, max_tensor);
  ASSERT_EQ(sent, plan->transfer_bytes);
  ASSERT_EQ(plan->transfer_bytes, replica + shared_bytes);
  ASSERT_EQ(plan->forward_bytes, (int64_t)(P - 1) * replica);
  ASSERT_EQ(forward_sent, plan->forward_bytes);
  free(step);
  free(forward_recv);
  free(rooted);
}

#endif
