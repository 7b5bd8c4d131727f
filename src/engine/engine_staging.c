/* Staging on the message path: how much each rank allocates, and where grouped closes a
 * round's group early so that it stays inside it.
 *
 * Running in rounds does not raise the bound the stages had when they ran one after another:
 * the largest bucket of any stage, once per direction and twice for fused, which is also what
 * refit simulate counts. A round may hold a transfer bucket and several forward buckets, so
 * sizing staging for the largest round held up to (1 + depth) buckets per slot, and fused
 * refits with four replicas of a 1B model at 256 MiB buckets no longer fitted a 23 GB host.
 * Instead fused keeps at most two buckets in flight per lane, one per slot (engine_rounds.c:
 * the stage's buckets in slots 0 and 1, fanout's forward buckets in slots 2 and 3), unfused
 * completes after every bucket, and grouped ends its group before a bucket whose staging would
 * overflow some rank's buffer. That last decision is taken for every rank from the plan alone,
 * so all ranks close their groups at the same bucket: a rank never waits on a group whose
 * messages a peer posts only in a later group (NCCL groups progress only as a whole). */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

/* Per world rank: a bucket's staging (need), the open group's (open) and the largest
 * bucket's (most), each for sending [0] and receiving [1]; the ranks the bucket touched. */
typedef struct {
  const rf_plan *plan;
  rf_mode mode;
  rf_wire wire;
  int64_t *need[2], *open[2], *most[2];
  int *touched;
  int ntouched;
} rank_needs;

static void add_need(rank_needs *n, int rank, int dir, int64_t bytes) {
  if (!n->need[0][rank] && !n->need[1][rank])
    n->touched[n->ntouched++] = rank;
  n->need[dir][rank] += bytes;
}

/* Every rank's staging for bucket b of s: chunks that are neither local copies nor sent or
 * received in place, as engine_modes.c posts them (joined blocks are counted chunk by chunk,
 * which can only overstate them). Every rank of a job has the same memory and wire, so one
 * rank's answer is every rank's. */
static void bucket_needs(rank_needs *n, const rf_schedule *s, int b) {
  const rf_plan *plan = n->plan;
  const rf_bucket *bk = &s->buckets[b];
  for (int i = bk->first; i < bk->first + bk->count; i++) {
    const rf_chunk *k = &s->chunks[i];
    const rf_piece *p = &plan->pieces[k->piece];
    int src = rf_piece_src_world(plan, p), dst = rf_piece_dst_world(plan, p);
    if (src == dst || !k->bytes)
      continue;
    if (rf_engine_send_path(plan, n->mode, n->wire, k) == RF_CHUNK_STAGED)
      add_need(n, src, 0, k->bytes);
    if (rf_engine_recv_path(plan, n->mode, n->wire, k) == RF_CHUNK_STAGED)
      add_need(n, dst, 1, k->bytes);
  }
}

static void clear_needs(rank_needs *n) {
  for (int t = 0; t < n->ntouched; t++)
    n->need[0][n->touched[t]] = n->need[1][n->touched[t]] = 0;
  n->ntouched = 0;
}

/* Whether the bucket in n->need, added to the open group, would overflow some rank's
 * staging. */
static int overflows(const rank_needs *n) {
  for (int t = 0; t < n->ntouched; t++)
    for (int dir = 0; dir < 2; dir++) {
      int r = n->touched[t];
      if (n->open[dir][r] + n->need[dir][r] > n->most[dir][r])
        return 1;
    }
  return 0;
}

/* grouped: breaks[i] for item i of the rounds, greedily, a round at a time. */
static void find_breaks(rank_needs *n, const rf_schedule *transfer, const rf_schedule *forward,
                        const rf_rounds *rounds, char *breaks, size_t world) {
  for (int k = 0; k < rounds->round_count; k++) {
    for (int i = rounds->first[k]; i < rounds->first[k + 1]; i++) {
      const rf_round_item *it = &rounds->items[i];
      bucket_needs(n, it->step < 0 ? transfer : &forward[it->step], it->bucket);
      if (i > rounds->first[k] && overflows(n)) {
        breaks[i] = 1;
        memset(n->open[0], 0, world * sizeof(int64_t));
        memset(n->open[1], 0, world * sizeof(int64_t));
      }
      for (int t = 0; t < n->ntouched; t++)
        for (int dir = 0; dir < 2; dir++)
          n->open[dir][n->touched[t]] += n->need[dir][n->touched[t]];
      clear_needs(n);
    }
    memset(n->open[0], 0, world * sizeof(int64_t));
    memset(n->open[1], 0, world * sizeof(int64_t));
  }
}

rf_status rf_engine_staging_rule(const rf_plan *plan, rf_mode mode, rf_wire wire,
                                 const rf_schedule *reshape, const rf_schedule *transfer,
                                 const rf_schedule *forward, const rf_rounds *rounds, int64_t *most,
                                 char **breaks) {
  size_t world = (size_t)plan->layout->world_size;
  /* fused with forward steps gives the forward buckets slots of their own (engine_rounds.c) */
  int lanes = mode == RF_MODE_FUSED && plan->forward_depth > 0;
  int64_t *mem = rf_calloc(4 * world + 1, sizeof *mem, "staging per rank");
  rank_needs n = {.plan = plan,
                  .mode = mode,
                  .wire = wire,
                  .touched = rf_malloc(world * sizeof(int) + 1, "staging per rank")};
  *breaks = NULL;
  if (mode == RF_MODE_GROUPED && rounds)
    *breaks = rf_calloc((size_t)rounds->first[rounds->round_count] + 1, 1, "group breaks");
  if (!mem || !n.touched || (mode == RF_MODE_GROUPED && rounds && !*breaks)) {
    free(mem), free(n.touched), free(*breaks);
    *breaks = NULL;
    return RF_ERR_NOMEM;
  }
  for (int dir = 0; dir < 2; dir++) {
    n.need[dir] = mem + dir * world;
    n.open[dir] = mem + (2 + dir) * world;
    n.most[dir] = most + dir * world;
  }
  memset(most, 0, 4 * world * sizeof(int64_t));
  for (int s = 0; s < 2 + plan->forward_depth; s++) {
    const rf_schedule *sched = s == 0 ? reshape : s == 1 ? transfer : &forward[s - 2];
    int64_t *lane = most + (lanes && s >= 2 ? 2 * world : 0);
    for (int b = 0; b < sched->bucket_count; b++) {
      bucket_needs(&n, sched, b);
      for (int t = 0; t < n.ntouched; t++)
        for (int dir = 0; dir < 2; dir++) {
          int r = n.touched[t];
          lane[dir * world + r] = RF_MAX(lane[dir * world + r], n.need[dir][r]);
        }
      clear_needs(&n);
    }
  }
  if (*breaks)
    find_breaks(&n, transfer, forward, rounds, *breaks, world);

  free(mem);
  free(n.touched);
  return RF_OK;
}

rf_status engine_alloc_staging(rf_engine *e) {
  size_t world = (size_t)e->plan->layout->world_size;
  int64_t *most = rf_calloc(4 * world + 1, sizeof *most, "staging per rank");
  if (!most)
    return RF_ERR_NOMEM;
  rf_status st = rf_engine_staging_rule(e->plan, e->mode, e->wire_rule, &e->reshape, &e->transfer,
                                        e->forward, &e->rounds, most, &e->group_break);
  int slots = e->mode == RF_MODE_FUSED ? 2 : 1;
  for (int lane = 0; lane < 2; lane++)
    for (int dir = 0; dir < 2 && st == RF_OK; dir++) {
      int64_t need = most[(2 * lane + dir) * world + (size_t)e->world_rank];
      e->staging_bytes[dir][lane] = (size_t)need;
      for (int k = 0; k < slots && need > 0 && st == RF_OK; k++)
        st =
            rf_mem_alloc(e->wire, (size_t)need, "a staging buffer", &e->staging[dir][2 * lane + k]);
    }
  free(most);
  return st;
}
