/* The fanout plan (docs/architecture.md, "Plans"): the trainer sends every element of the
 * rollout model once, to one engine replica, and the replicas forward it to each other.
 *
 * Every replicated tensor gets a root replica: the one that is root for the fewest bytes so
 * far (the lowest on ties), so that each replica takes about 1/P of the trainer's traffic. The
 * trainer covers the root's ranks as p2p covers any rollout rank (the nearest holder, then the
 * least loaded). Rollout rank (p, r) then forwards to (p', r) exactly the box it holds, which
 * is the same box in every replica. Experts under rollout ep are not replicated (each lives on
 * one rank of all replicas): the trainer sends them straight to that rank, and nothing
 * forwards them.
 *
 * The replicas forward along a binomial tree over an order of the replicas that starts at the
 * root. With depth D = ceil(log2 P), step s (0-based) has every position i that is a multiple
 * of 2^(D-s) send to position i + 2^(D-s-1). A tree rather than a chain because step s
 * forwards what step s-1 delivered, so each step ends at least a round (rounds.c) after the one
 * before: log2 P rounds for a tree against P - 1 for a chain. The volume is the same either
 * way: with the roots spread over the replicas, every replica sends and
 * receives (P-1)/P of one replica's bytes in all, the least an all-gather can.
 *
 * The order puts the root first, then the rest of the root's node, nearest first, then the
 * other nodes one whole node after another (the placement's node_of and distance, where
 * given), each in ring order from the root (p0+1, p0+2, ... mod P), so that different roots
 * put different replicas at the busy positions. The tree's first steps jump far and its last
 * ones, with half of all its sends, join neighbours in that order: replicas of one node. */
#include <stdlib.h>

#include "plan_internal.h"

/* One replica's place in a root's forwarding order: sorted by group, distance, ring. */
typedef struct {
  int node, group; /* the node's id, and where the ring from the root first meets that node */
  int distance;    /* to the root's rank */
  int ring;        /* (replica - root) mod P */
  int replica;
} order_key;

static int by_node_then_ring(const void *pa, const void *pb) {
  const order_key *a = pa, *b = pb;
  if (a->node != b->node)
    return a->node < b->node ? -1 : 1;
  return (a->ring > b->ring) - (a->ring < b->ring);
}

static int by_group_distance_ring(const void *pa, const void *pb) {
  const order_key *a = pa, *b = pb;
  if (a->group != b->group)
    return a->group < b->group ? -1 : 1;
  if (a->distance != b->distance)
    return a->distance < b->distance ? -1 : 1;
  return (a->ring > b->ring) - (a->ring < b->ring);
}

static int distance(const rf_plan_options *o, int src_world, int dst_world) {
  if (o && o->distance)
    return o->distance(o->distance_ctx, src_world, dst_world);
  return src_world == dst_world ? 0 : 1;
}

/* The forwarding order of tp rank r's replicas from root p0, into order[0 .. P). */
static void forwarding_order(const rf_layout *lay, const rf_plan_options *o, int r, int p0,
                             order_key *keys, int *order) {
  int P = lay->rollout.dp, R = lay->rollout.tp;
  const int *node = o && o->distance ? o->node_of : NULL; /* node_of comes with a distance */
  int root_world = rf_layout_rollout_world_rank(lay, p0 * R + r);
  for (int k = 0; k < P; k++) {
    int p = (p0 + k) % P, w = rf_layout_rollout_world_rank(lay, p * R + r);
    keys[k] = (order_key){node ? node[w] : 0, 0, distance(o, root_world, w), k, p};
  }
  if (node) {
    /* A node's group is the ring position of its first replica: the root's node is group 0. */
    qsort(keys, (size_t)P, sizeof *keys, by_node_then_ring);
    for (int k = 0; k < P; k++)
      keys[k].group = k > 0 && keys[k].node == keys[k - 1].node ? keys[k - 1].group : keys[k].ring;
  }
  qsort(keys, (size_t)P, sizeof *keys, by_group_distance_ring);
  for (int k = 0; k < P; k++)
    order[k] = keys[k].replica;
}

/* Orders are cached by (tp rank, root): every tensor of one root forwards alike. */
typedef struct {
  int **orders; /* [r * P + root], each P replicas, made on first use */
  order_key *keys;
} order_cache;

static const int *order_of(plan_builder *b, order_cache *c, int r, int root) {
  const rf_layout *lay = b->plan->layout;
  int P = lay->rollout.dp;
  int **slot = &c->orders[(size_t)r * (size_t)P + (size_t)root];
  if (!*slot) {
    *slot = rf_malloc((size_t)P * sizeof **slot, "a forwarding order");
    if (*slot)
      forwarding_order(lay, b->options, r, root, c->keys, *slot);
  }
  return *slot;
}

/* The trainer's part: every replicated tensor to its root's ranks, every expert under
 * rollout ep to the one rank that holds it. */
rf_status plan_cover_root(plan_builder *b, plan_sources *sources, int t, int root,
                          int64_t *rooted) {
  const rf_layout *lay = b->plan->layout;
  int R = lay->rollout.tp;
  int owner = rf_layout_rollout_owner(lay, t); /* a shared tensor's one rank */
  int first = root < 0 ? owner : root * R, end = root < 0 ? owner + 1 : root * R + R;
  rf_status st = RF_OK;
  for (int r = first; r < end && st == RF_OK; r++) {
    rf_box want = rf_layout_rollout_box(lay, t, r);
    if (rf_box_is_empty(&want))
      continue;
    st = plan_cover_from_trainers(b, sources, t, RF_STAGE_TRANSFER, r,
                                  rf_layout_rollout_world_rank(lay, r), &want);
    if (root >= 0)
      rooted[root] += rf_box_numel(&want) * rf_dtype_size(lay->model->tensors[t].dtype);
  }
  return st;
}

static rf_status plan_transfer(plan_builder *b, int64_t *load, int64_t *rooted) {
  rf_plan *plan = b->plan;
  const rf_layout *lay = plan->layout;
  int P = lay->rollout.dp;
  plan_sources *sources = NULL;
  rf_status st = plan_sources_open(b, load, &sources);
  for (int i = 0; i < lay->model->tensor_count && st == RF_OK; i++) {
    int t = lay->order[i], shared = rf_layout_rollout_shared(lay, t), root = 0;
    for (int p = 1; p < P && !shared; p++)
      root = rooted[p] < rooted[root] ? p : root;
    plan->root[t] = shared ? -1 : root;
    plan_sources_select(sources, t);
    st = plan_cover_root(b, sources, t, shared ? -1 : root, rooted);
  }
  plan_sources_free(sources);
  return st;
}

/* The replicas' part, step by step; in a step, tensors in storage order. */
static rf_status plan_forward(plan_builder *b, order_cache *cache) {
  rf_plan *plan = b->plan;
  const rf_layout *lay = plan->layout;
  int R = lay->rollout.tp, P = lay->rollout.dp, depth = plan->forward_depth;
  for (int s = 0; s < depth; s++) {
    plan->forward_first[s] = plan->piece_count;
    int span = 1 << (depth - 1 - s);
    for (int i = 0; i < lay->model->tensor_count; i++) {
      int t = lay->order[i];
      if (plan->root[t] < 0)
        continue;
      for (int r = 0; r < R; r++) {
        rf_box box = rf_layout_rollout_box(lay, t, r); /* the same in every replica */
        if (rf_box_is_empty(&box))
          continue;
        const int *order = order_of(b, cache, r, plan->root[t]);
        if (!order)
          return RF_ERR_NOMEM;
        for (int k = 0; k + span < P; k += 2 * span)
          RF_TRY(plan_add_piece(b, t, RF_STAGE_FORWARD, order[k] * R + r, order[k + span] * R + r,
                                &box));
      }
    }
  }
  plan->forward_first[depth] = plan->piece_count;
  return RF_OK;
}

rf_status plan_build_fanout(plan_builder *b) {
  rf_plan *plan = b->plan;
  const rf_layout *lay = plan->layout;
  int R = lay->rollout.tp, P = lay->rollout.dp;
  while ((1 << plan->forward_depth) < P)
    plan->forward_depth++;
  plan->root = rf_malloc((size_t)lay->model->tensor_count * sizeof *plan->root, "fanout roots");
  plan->forward_first =
      rf_calloc((size_t)plan->forward_depth + 1, sizeof *plan->forward_first, "forward steps");
  int64_t *load = rf_calloc((size_t)lay->trainer_ranks, sizeof *load, "plan load");
  int64_t *rooted = rf_calloc((size_t)P, sizeof *rooted, "fanout root bytes");
  order_cache cache = {rf_calloc((size_t)R * (size_t)P, sizeof *cache.orders, "forward orders"),
                       rf_malloc((size_t)P * sizeof *cache.keys, "forward order keys")};
  rf_status st = plan->root && plan->forward_first && load && rooted && cache.orders && cache.keys
                     ? RF_OK
                     : RF_ERR_NOMEM;
  if (st == RF_OK)
    st = plan_transfer(b, load, rooted);
  if (st == RF_OK)
    st = plan_forward(b, &cache);
  for (int i = 0; cache.orders && i < R * P; i++)
    free(cache.orders[i]);
  free(cache.orders);
  free(cache.keys);
  free(load);
  free(rooted);
  return st;
}
