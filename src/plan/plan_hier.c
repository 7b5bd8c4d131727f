/* The hierarchical plan (docs/architecture.md, "The hierarchical plan"): fanout inside each
 * rollout domain, so that every element crosses a domain's boundary once per domain that needs
 * it and is spread inside the domain over its fast links.
 *
 * A domain is a set of world ranks joined by fast links: a node (NVLink or PCIe inside one
 * host), or one NVLink domain of many hosts (a GB200 NVL72 rack is one node of its cluster
 * file). The planner reads it from rf_plan_options: domain_of, else node_of, else one domain.
 * A replica belongs to the domain of its first rank; a replica whose ranks span several
 * domains (tp=16 on 8-GPU nodes) still forwards only to replicas of its own domain, so a
 * layout whose every replica spans domains gets one replica per domain and no forwarding: the
 * trainer sends to every replica, as p2p does.
 *
 * Every replicated tensor gets one root replica per domain: the domain's replica that is root
 * for the fewest bytes so far (the lowest on ties), so that each of the domain's replicas, and
 * with it each adapter its ranks send and receive through, takes about 1/P_d of what enters
 * the domain. The trainer covers each root's ranks as p2p covers any rollout rank (the
 * nearest holder, then the least loaded), which stripes the sending side over every trainer
 * rank that holds the bytes. Inside the domain, rollout rank (p, r) forwards to (p', r) along
 * a binomial tree over the domain's replicas in ring order from the root, as fanout does over
 * all replicas: step s of a domain of depth D_d = ceil(log2 P_d) has each position that is a
 * multiple of 2^(D_d - s) send to position + 2^(D_d - s - 1). Every domain starts its tree at
 * step 0, so a small domain finishes early; the plan's depth is the largest domain's. The
 * forward steps run in rounds with the transfer (rounds.c), so both levels overlap.
 *
 * Experts under rollout ep are not replicated: the trainer sends them straight to their rank,
 * as fanout does. */
#include <stdlib.h>

#include "plan_internal.h"

/* The domains of the replicas: plan->domains, plan->replica_domain, and for each domain its
 * replicas in ascending order (members[first[d] .. first[d + 1])) and each replica's position
 * among them. */
typedef struct {
  int *first;   /* [domains + 1] */
  int *members; /* [P] */
  int *pos;     /* [P] */
} domain_table;

static rf_status find_domains(plan_builder *b, domain_table *d) {
  rf_plan *plan = b->plan;
  const rf_layout *lay = plan->layout;
  const rf_plan_options *o = b->options;
  const int *id = o ? (o->domain_of ? o->domain_of : o->node_of) : NULL;
  int P = lay->rollout.dp, R = lay->rollout.tp;
  plan->replica_domain = rf_malloc((size_t)P * sizeof *plan->replica_domain, "replica domains");
  int *ids = rf_malloc((size_t)P * sizeof *ids, "domain ids");
  d->first = rf_calloc((size_t)P + 1, sizeof *d->first, "domain starts");
  d->members = rf_malloc((size_t)P * sizeof *d->members, "domain members");
  d->pos = rf_malloc((size_t)P * sizeof *d->pos, "domain positions");
  if (!plan->replica_domain || !ids || !d->first || !d->members || !d->pos) {
    free(ids);
    return RF_ERR_NOMEM;
  }
  /* Domain ids are any integers: number them by first replica. Replicas are few (at most a
   * few hundred), so a linear search is cheap. */
  for (int p = 0; p < P; p++) {
    int mine = id ? id[rf_layout_rollout_world_rank(lay, p * R)] : 0, dom = plan->domains;
    for (int q = 0; q < plan->domains; q++)
      if (ids[q] == mine)
        dom = q;
    if (dom == plan->domains)
      ids[plan->domains++] = mine;
    plan->replica_domain[p] = dom;
    d->first[dom + 1]++;
  }
  free(ids);
  for (int k = 0; k < plan->domains; k++)
    d->first[k + 1] += d->first[k];
  int *at = rf_malloc((size_t)plan->domains * sizeof *at, "domain cursors");
  if (!at)
    return RF_ERR_NOMEM;
  for (int k = 0; k < plan->domains; k++)
    at[k] = d->first[k];
  for (int p = 0; p < P; p++) {
    int k = plan->replica_domain[p];
    d->pos[p] = at[k] - d->first[k];
    d->members[at[k]++] = p;
  }
  free(at);
  return RF_OK;
}

static int depth_of(int n) {
  int depth = 0;
  while ((1 << depth) < n)
    depth++;
  return depth;
}

/* The trainer's part: every replicated tensor to its root's ranks in every domain, every
 * expert under rollout ep to the one rank that holds it. */
static rf_status plan_transfer(plan_builder *b, const domain_table *d, int64_t *load,
                               int64_t *rooted) {
  rf_plan *plan = b->plan;
  const rf_layout *lay = plan->layout;
  int D = plan->domains;
  plan_sources *sources = NULL;
  rf_status st = plan_sources_open(b, load, &sources);
  for (int i = 0; i < lay->model->tensor_count && st == RF_OK; i++) {
    int t = lay->order[i], shared = rf_layout_rollout_shared(lay, t);
    plan_sources_select(sources, t);
    for (int k = 0; k < (shared ? 1 : D) && st == RF_OK; k++) {
      int root = d->members[d->first[k]];
      for (int j = d->first[k] + 1; j < d->first[k + 1] && !shared; j++)
        root = rooted[d->members[j]] < rooted[root] ? d->members[j] : root;
      plan->domain_root[(size_t)t * (size_t)D + (size_t)k] = shared ? -1 : root;
      st = plan_cover_root(b, sources, t, shared ? -1 : root, rooted);
    }
    for (int k = 1; shared && k < D; k++)
      plan->domain_root[(size_t)t * (size_t)D + (size_t)k] = -1;
    plan->root[t] = plan->domain_root[(size_t)t * (size_t)D];
  }
  plan_sources_free(sources);
  return st;
}

/* The domains' part, step by step; in a step, tensors in storage order, then tp ranks, then
 * domains. */
static rf_status plan_forward(plan_builder *b, const domain_table *d) {
  rf_plan *plan = b->plan;
  const rf_layout *lay = plan->layout;
  int R = lay->rollout.tp, D = plan->domains;
  for (int s = 0; s < plan->forward_depth; s++) {
    plan->forward_first[s] = plan->piece_count;
    for (int i = 0; i < lay->model->tensor_count; i++) {
      int t = lay->order[i];
      if (plan->root[t] < 0)
        continue;
      for (int r = 0; r < R; r++) {
        rf_box box = rf_layout_rollout_box(lay, t, r); /* the same in every replica */
        if (rf_box_is_empty(&box))
          continue;
        for (int k = 0; k < D; k++) {
          int n = d->first[k + 1] - d->first[k], depth = depth_of(n);
          if (s >= depth)
            continue;
          const int *in = d->members + d->first[k];
          int at = d->pos[plan->domain_root[(size_t)t * (size_t)D + (size_t)k]];
          int span = 1 << (depth - 1 - s);
          /* Ring order from the root: position j is in[(at + j) % n]. */
          for (int j = 0; j + span < n; j += 2 * span)
            RF_TRY(plan_add_piece(b, t, RF_STAGE_FORWARD, in[(at + j) % n] * R + r,
                                  in[(at + j + span) % n] * R + r, &box));
        }
      }
    }
  }
  plan->forward_first[plan->forward_depth] = plan->piece_count;
  return RF_OK;
}

rf_status plan_build_hierarchical(plan_builder *b) {
  rf_plan *plan = b->plan;
  const rf_layout *lay = plan->layout;
  int P = lay->rollout.dp, nt = lay->model->tensor_count;
  domain_table d = {0};
  rf_status st = find_domains(b, &d);
  for (int k = 0; st == RF_OK && k < plan->domains; k++)
    plan->forward_depth = RF_MAX(plan->forward_depth, depth_of(d.first[k + 1] - d.first[k]));
  int64_t *load = NULL, *rooted = NULL;
  if (st == RF_OK) {
    plan->root = rf_malloc((size_t)nt * sizeof *plan->root + 1, "hierarchical roots");
    plan->domain_root = rf_malloc(
        (size_t)nt * (size_t)plan->domains * sizeof *plan->domain_root + 1, "hierarchical roots");
    plan->forward_first =
        rf_calloc((size_t)plan->forward_depth + 1, sizeof *plan->forward_first, "forward steps");
    load = rf_calloc((size_t)lay->trainer_ranks, sizeof *load, "plan load");
    rooted = rf_calloc((size_t)P, sizeof *rooted, "hierarchical root bytes");
    st = plan->root && plan->domain_root && plan->forward_first && load && rooted ? RF_OK
                                                                                  : RF_ERR_NOMEM;
  }
  if (st == RF_OK)
    st = plan_transfer(b, &d, load, rooted);
  if (st == RF_OK)
    st = plan_forward(b, &d);
  free(d.first);
  free(d.members);
  free(d.pos);
  free(load);
  free(rooted);
  return st;
}
